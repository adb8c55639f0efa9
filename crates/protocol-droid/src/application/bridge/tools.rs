//! What the bridge remembers of the upstream's tools: the definitions the
//! server checks `Mcp-Param-*` headers against, and which tools run as
//! tasks; relisted when the upstream says its tools changed.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::listing::Asker;
use super::runtime::Bridge;
use super::upstream::lock;
use crate::application::client::RequestOptions;
use crate::domain::capability::TASKS_EXTENSION;
use crate::domain::feature::Feature;
use crate::domain::{Era, Leg, ProtocolVersion};
use crate::wire::tools::{TaskSupport, Tool};

/// How many tool definitions the bridge keeps for header checks.
pub(super) const MAX_KNOWN_TOOLS: usize = 4096;

/// How many pages of `tools/list` the bridge reads when it learns the
/// upstream's tools; what a longer list holds past them is not known.
const MAX_TOOL_PAGES: usize = 64;

impl Bridge {
    /// What an upstream connection calls when the tool list changed: list
    /// again, so the definitions the bridge checks headers against and the
    /// task-only tools are the server's current ones.
    pub(super) fn relist_hook(&self) -> Arc<dyn Fn() + Send + Sync> {
        // Whoever lists the tools instead hands the bridge what it read.
        if !self.inner.options.lists_tools {
            return Arc::new(|| {});
        }
        let weak = Arc::downgrade(&self.inner);
        Arc::new(move || {
            let Some(inner) = weak.upgrade() else {
                return;
            };
            // A flood of announcements starts one relisting, not one each.
            if !inner.listing.announced() {
                return;
            }
            let bridge = Self { inner };
            tokio::spawn(async move {
                let turn = bridge.inner.listing.relist_turn().await;
                let learned = bridge.list_tools().await;
                turn.ended(learned);
            });
        })
    }

    /// Lists the upstream's tools afresh, on any live connection, every
    /// page of them up to [`MAX_TOOL_PAGES`], and keeps what the bridge
    /// needs of them: the definitions it checks headers against and the
    /// tools that only run as tasks. A listing that fails part way changes
    /// nothing. One listing runs at a time, and `asker` is served by one
    /// that began after it asked (see [`Listing::turn`]).
    ///
    /// [`Listing::turn`]: super::listing::Listing::turn
    pub(super) async fn learn_tools(&self, asker: Asker) {
        let Some(turn) = self.inner.listing.turn(asker).await else {
            return;
        };
        let learned = self.list_tools().await;
        turn.ended(learned);
    }

    /// One listing for [`Self::learn_tools`]: whether it was read whole.
    async fn list_tools(&self) -> bool {
        let client = lock(&self.inner.upstreams)
            .values()
            .flatten()
            .find(|u| u.client.closed().is_none())
            .map(|u| u.client.clone());
        let Some(client) = client else {
            return false;
        };
        let fresh = RequestOptions {
            fresh: true,
            ..RequestOptions::default()
        };
        // Built aside and swapped in whole: a call reading them meanwhile
        // finds the old ones, never none (which would list the tools
        // again).
        let mut tools = HashMap::new();
        let mut task_tools = HashMap::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_TOOL_PAGES {
            let params = cursor.as_ref().map(|cursor| json!({ "cursor": cursor }));
            let Ok(listed) = client.request("tools/list", params, &fresh).await else {
                return false;
            };
            note_tools(&mut tools, &listed);
            note_task_tools(&mut task_tools, &listed);
            match listed.get("nextCursor").and_then(Value::as_str) {
                // A server that names the page it was asked for again would
                // be listed for ever.
                Some(next) if cursor.as_deref() != Some(next) => cursor = Some(next.to_owned()),
                _ => break,
            }
        }
        *lock(&self.inner.tools) = tools;
        *lock(&self.inner.task_tools) = Some(task_tools);
        true
    }

    /// What a caller that lists the upstream's tools itself (with
    /// [`BridgeOptions::lists_tools`] off) read: every page of the listing,
    /// kept in place of what was known, as the bridge's own listing would
    /// be.
    ///
    /// [`BridgeOptions::lists_tools`]: super::BridgeOptions::lists_tools
    pub fn learned_tools(&self, tools: &[Tool]) {
        let mut known = HashMap::new();
        let mut task_tools = HashMap::new();
        for tool in tools {
            if known.len() >= MAX_KNOWN_TOOLS {
                break;
            }
            known.insert(tool.name.clone(), tool.clone());
            let support = tool
                .execution
                .as_ref()
                .and_then(|e| e.task_support)
                .filter(|s| *s != TaskSupport::Forbidden);
            if let Some(support) = support {
                task_tools.insert(tool.name.clone(), support);
            }
        }
        *lock(&self.inner.tools) = known;
        *lock(&self.inner.task_tools) = Some(task_tools);
    }

    /// Keeps the definitions of a `tools/list` page as the client got them.
    pub(super) fn note_tools(&self, listed: &Value) {
        note_tools(&mut lock(&self.inner.tools), listed);
    }

    /// How the upstream's tool `name` may run as a task, listing the tools
    /// when none are known yet. Only a 2025-11-25 upstream that declares
    /// tasks says: a 2026-07-28 tool definition has no such field.
    pub(super) async fn task_support(&self, name: &str) -> TaskSupport {
        if let Some(known) = self.known_task_support(name) {
            return known;
        }
        self.learn_tools(Asker::Call).await;
        self.known_task_support(name)
            .unwrap_or(TaskSupport::Forbidden)
    }

    /// How the upstream's tool `name` may run as a task, if that is known
    /// without listing the tools: `None` only while a 2025-11-25 upstream
    /// that runs tasks has not been listed yet, or its listing failed.
    pub(super) fn known_task_support(&self, name: &str) -> Option<TaskSupport> {
        if self.upstream_tasks_extension() {
            // A 2026-07-28 server decides per call; the bridge runs any call
            // as a task of its own, which waits for the server's if it
            // makes one.
            return Some(TaskSupport::Optional);
        }
        if !self.upstream_offers_tasks() {
            return Some(TaskSupport::Forbidden);
        }
        lock(&self.inner.task_tools)
            .as_ref()
            .map(|tools| tools.get(name).copied().unwrap_or(TaskSupport::Forbidden))
    }

    /// Whether the upstream runs tool calls as tasks: 2025-11-25's
    /// `tasks.requests.tools.call`, or 2026-07-28's extension.
    pub(super) fn upstream_offers_tasks(&self) -> bool {
        self.upstream_tasks_extension() || self.upstream_core_tasks()
    }

    /// Whether the upstream is a 2026-07-28 server declaring the tasks
    /// extension.
    pub(super) fn upstream_tasks_extension(&self) -> bool {
        let upstream = &self.inner.upstream;
        upstream.version.era() == Era::Modern
            && upstream.capabilities.declares_extension(TASKS_EXTENSION)
    }

    /// Whether the upstream is a 2025-11-25 server that runs tool calls as
    /// tasks.
    fn upstream_core_tasks(&self) -> bool {
        // What the first connection learned: every connection reaches the
        // same server.
        let upstream = &self.inner.upstream;
        upstream.version == ProtocolVersion::V2025_11_25
            && upstream.capabilities.runs_tool_calls_as_tasks()
    }

    /// Marks each tool of a `tools/list` page `taskSupport: "optional"` for
    /// a 2025-11-25 client in front of a 2026-07-28 server that runs tasks:
    /// its definitions cannot say which tools run as tasks, and through the
    /// bridge any call can (a task of the bridge's own).
    pub(super) fn offer_as_tasks(&self, listed: &mut Value, leg: &Leg) {
        if !Feature::Tasks.exists_at(leg.version) || !self.upstream_tasks_extension() {
            return;
        }
        let Some(tools) = listed.get_mut("tools").and_then(Value::as_array_mut) else {
            return;
        };
        for tool in tools.iter_mut().filter_map(Value::as_object_mut) {
            tool.entry("execution")
                .or_insert_with(|| json!({ "taskSupport": "optional" }));
        }
    }

    /// Records which tools of a `tools/list` page run as tasks, and how.
    pub(super) fn note_task_tools(&self, listed: &Value) {
        note_task_tools(
            lock(&self.inner.task_tools).get_or_insert_with(Default::default),
            listed,
        );
    }
}

/// Adds the definitions of a `tools/list` page to `known`, bounded.
fn note_tools(known: &mut HashMap<String, Tool>, listed: &Value) {
    let Some(tools) = listed.get("tools").and_then(Value::as_array) else {
        return;
    };
    for tool in tools {
        let Ok(tool) = serde_json::from_value::<Tool>(tool.clone()) else {
            continue;
        };
        if known.len() >= MAX_KNOWN_TOOLS && !known.contains_key(&tool.name) {
            continue;
        }
        known.insert(tool.name.clone(), tool);
    }
}

/// Adds how each tool of a `tools/list` page may run as a task to
/// `known`, bounded; a tool that may not is taken out.
fn note_task_tools(known: &mut HashMap<String, TaskSupport>, listed: &Value) {
    let Some(tools) = listed.get("tools").and_then(Value::as_array) else {
        return;
    };
    for tool in tools {
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            continue;
        };
        let support = tool
            .get("execution")
            .and_then(|e| e.get("taskSupport"))
            .and_then(|s| serde_json::from_value::<TaskSupport>(s.clone()).ok())
            .filter(|s| *s != TaskSupport::Forbidden);
        match support {
            // Bounded as the definitions are: a listing longer than
            // that is not a server's tool set but a flood.
            Some(support) if known.len() < MAX_KNOWN_TOOLS || known.contains_key(name) => {
                known.insert(name.to_owned(), support);
            }
            _ => {
                known.remove(name);
            }
        }
    }
}
