//! An upstream's tools listed again and what changed applied: new tools
//! registered, changed ones re-derived from the pins (a drifted pinned tool
//! becomes unverified) and reported with both digests, removed ones
//! unregistered, session sets rebuilt and the sessions whose tools changed
//! told. The first listing of an upstream trusted on first use pins what
//! it shows.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use super::catalog::{CatalogChange, Upsert};
use super::names;
use super::runtime::Gateway;
use super::state::{DriftReport, MAX_KEPT_DEFINITION, lock};
use super::trust::Trust;
use super::upstream::UpstreamHealth;
use crate::application::client::ClientError;
use crate::application::squelch::PerBatch;
use crate::domain::capability::TASKS_EXTENSION;
use crate::domain::catalog::{SchemaDigest, ToolId};
use crate::domain::ir::JsonObject;
use crate::domain::{Era, SessionId};
use crate::wire::Tool;

/// The most tools the gateway takes from one upstream. Far above what a
/// server offers (the largest list hundreds), it bounds what one upstream
/// costs every other: each tool is digested, kept in the catalog and
/// weighed for every session.
pub const MAX_UPSTREAM_TOOLS: usize = 10_000;

/// What a list past [`MAX_UPSTREAM_TOOLS`] is refused as, between its
/// length and the bound.
const PAST_THE_BOUND: &str = "more than the";

/// Whether `error` is a list refused for its length.
pub(super) fn past_the_bound(error: &ClientError) -> bool {
    matches!(error, ClientError::InvalidResult { method, detail }
        if method == "tools/list" && detail.contains(PAST_THE_BOUND))
}

impl Gateway {
    /// Lists the upstream called `name` again and applies what changed.
    ///
    /// # Errors
    ///
    /// When the upstream's tools cannot be listed.
    pub async fn refresh(&self, name: &str) -> Result<(), ClientError> {
        let generation = lock(&self.inner.state)
            .upstreams
            .get(name)
            .map(|u| u.generation);
        match generation {
            Some(generation) => self.refresh_generation(name, generation).await,
            None => Ok(()),
        }
    }

    /// [`Self::refresh`] for the upstream `name` of `generation`: what is
    /// listed is applied only if that upstream is still there when the
    /// listing comes back.
    pub(super) async fn refresh_generation(
        &self,
        name: &str,
        generation: u64,
    ) -> Result<(), ClientError> {
        let (client, bridge, policy, seq) = {
            let mut state = lock(&self.inner.state);
            match state.upstream_mut(name, generation) {
                Some(upstream) => match &upstream.client {
                    Some(client) => {
                        upstream.listings = upstream.listings.wrapping_add(1);
                        (
                            client.clone(),
                            upstream.bridge.clone(),
                            upstream.options.tools.clone(),
                            upstream.listings,
                        )
                    }
                    None => return Ok(()),
                },
                None => return Ok(()),
            }
        };
        // Always from the upstream, never from a cache: a cached list
        // would hide the change the refresh is for.
        let tools = client.refresh_tools().await?;
        // Bounded before any of the work each tool costs (its digest, its
        // place in the catalog and in every session's set), which on a
        // gateway serving stdio runs on the thread every session shares: a
        // list past it is refused whole, and the tools listed before stay.
        if tools.len() > MAX_UPSTREAM_TOOLS {
            return Err(ClientError::InvalidResult {
                method: "tools/list".to_owned(),
                detail: format!(
                    "{} tools, {PAST_THE_BOUND} {MAX_UPSTREAM_TOOLS} the gateway takes from one upstream",
                    tools.len()
                ),
            });
        }
        let offered: Vec<JsonObject> = tools
            .iter()
            .filter_map(|t| match serde_json::to_value(t) {
                Ok(Value::Object(map)) => Some(map),
                _ => None,
            })
            .collect();
        for named in policy.named() {
            if !offered
                .iter()
                .any(|d| d.get("name").and_then(Value::as_str) == Some(named))
            {
                tracing::warn!(upstream = %name, tool = %named, "the tool policy names a tool the upstream does not offer");
            }
        }
        // Repeats first: a name listed twice is no tool, even when one of
        // its forms would not be served anyway.
        let mut definitions = servable(name, without_repeats(name, policy.apply(name, offered)));
        // A 2026-07-28 server running the tasks extension decides per call
        // which calls become tasks, and its definitions cannot say: any
        // call through the gateway may then be one (its bridge waits for
        // the server's task), so each is offered as one that can.
        if client.server().is_some_and(|server| {
            server.era() == Era::Modern && server.capabilities.declares_extension(TASKS_EXTENSION)
        }) {
            for definition in &mut definitions {
                definition
                    .entry("execution")
                    .or_insert_with(|| json!({ "taskSupport": "optional" }));
            }
        }
        // Applied under the lock every list and call waits on, and
        // nothing awaited while it is held.
        let (store, claim, trusted, touched, registrations, added, retired) = {
            let mut state = lock(&self.inner.state);
            let Some(upstream) = state.upstream_mut(name, generation) else {
                // Removed or replaced while the list was on its way.
                return Ok(());
            };
            // Two listings can overlap (a refresh on the connection before, and
            // the first on a new one): what a later one started with is never
            // overwritten by an earlier one's.
            if seq < upstream.applied {
                return Ok(());
            }
            upstream.applied = seq;
            // From this listing on, the catalog is the new connection's:
            // the one it replaces carries no more calls (those on it end
            // there); the new one takes them below, in this same moment.
            let retired = upstream.predecessor.take();
            // First use is granted once per name, never re-armed by an upstream
            // that empties its list, comes back after a failure or is replaced
            // by a reload.
            let first_use = upstream.options.trust == Trust::OnFirstUse
                && state.first_used.insert(name.to_owned());
            let mut trusted = BTreeMap::new();
            if first_use {
                for definition in &definitions {
                    let tool = definition
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    let id = ToolId::namespaced(name, tool);
                    let digest = SchemaDigest::of_definition(definition);
                    state.first_use.pin(id.clone(), digest);
                    trusted.insert(id, digest);
                }
            }
            let pins = state.effective_pins();
            state.pins = pins.clone();
            let (changes, before) =
                Arc::make_mut(&mut state.catalog).sync_upstream_replacing(name, definitions, &pins);
            let store = state.trust_store.clone().filter(|_| first_use);
            let claim = first_use && self.inner.shared.get().is_some();
            if claim {
                // Unclaimed until the store answers: a reading of the store
                // meanwhile claims it as this claim does, never as a first
                // use the store lost.
                state.unclaimed.insert(name.to_owned(), trusted.clone());
            }
            let (touched, registrations) = if changes.is_empty() {
                (Vec::new(), Vec::new())
            } else {
                self.apply_changes(&mut state, name, &before, &changes)
            };
            // A tool new or changed may be one a principal's shared
            // activations name.
            let added = !changes.is_empty();
            // A replacement is up as its predecessor stops, so no call
            // between the two is refused as connecting; unless a scope
            // rule names a tool it no longer lists, which keeps it down
            // (its first attempt says so).
            if retired.is_some() && state.rule_naming_nothing(name).is_none() {
                if let (Some(upstream), Some(version)) =
                    (state.upstream_mut(name, generation), client.version())
                {
                    upstream.health = UpstreamHealth::Up { version };
                    upstream.up_since = Some(Instant::now());
                }
            }
            (
                store,
                claim,
                trusted,
                touched,
                registrations,
                added,
                retired,
            )
        };
        if let Some(retired) = retired {
            retired.retire();
            if let Some(bridge) = &bridge {
                self.share_parked(bridge, name);
            }
        }
        // The bridge lists nothing itself (`lists_tools` is off): it learns
        // which tools run as tasks from this listing, the latest applied.
        if let Some(bridge) = &bridge {
            bridge.learned_tools(&tools);
        }
        // Claimed for every instance first, so that what the file keeps
        // is what holds: another instance's first use, if it came first.
        // The tools are registered only after, so none is offered on this
        // instance's word alone while the claim is on its way.
        let trusted = if claim {
            self.claim_first_use(name, &trusted).await
        } else {
            trusted
        };
        // Kept outside the lock every list and call waits on: the store
        // writes a file.
        if let Some(store) = store {
            match store.record_first_use(name, &trusted) {
                Ok(None) => {}
                // Another gateway keeping the same state recorded first.
                Ok(Some(kept)) => {
                    tracing::warn!(upstream = %name, "another gateway keeping this state used this upstream first; holding it to what it showed then");
                    self.hold_to_first_use(name, kept);
                }
                Err(error) => {
                    self.inner.server.observer().store_failed("trust_file");
                    tracing::error!(upstream = %name, %error, "the pins trusted on first use could not be kept; a restart would trust anew");
                }
            }
        }
        if added {
            self.retake_activations();
        }
        self.register_upstream_tools(registrations);
        for session in touched {
            self.inner.server.tools_changed_for(session);
        }
        Ok(())
    }

    /// Rebuilds the sessions, reports the drift of `changes` (of the upstream
    /// `upstream`), and says what to register (a tool as sessions see it) or
    /// unregister (`None`).
    #[allow(clippy::type_complexity)]
    fn apply_changes(
        &self,
        state: &mut super::state::State,
        upstream: &str,
        before: &BTreeMap<ToolId, JsonObject>,
        changes: &[(ToolId, CatalogChange)],
    ) -> (Vec<SessionId>, Vec<(ToolId, Option<Tool>)>) {
        // Every session's set is rebuilt now, so drift is reported once, here.
        let (touched, dropped_by_tool): (Vec<SessionId>, HashMap<ToolId, usize>) =
            state.rebuild_sessions(self.inner.disclosure);
        let mut drifted = PerBatch::default();
        for (id, change) in changes {
            let (old, new) = match change {
                CatalogChange::Added => (None, state.catalog.get(id).map(|r| r.digest)),
                CatalogChange::Updated(Upsert::Changed { old, new }) => (Some(*old), Some(*new)),
                CatalogChange::Updated(_) => continue,
                CatalogChange::Removed { old } => (Some(*old), None),
            };
            if old.is_some() {
                if let Some((upstream, _)) = names::split_name(id.as_str()) {
                    self.inner.server.observer().drifted(upstream);
                }
                if drifted.admit() {
                    tracing::warn!(
                        tool = %id,
                        old = ?old.map(|d| d.to_string()),
                        new = ?new.map(|d| d.to_string()),
                        "an upstream changed a tool's definition"
                    );
                }
            }
            // Definitions are kept for a change to a tool that existed, which
            // an operator compares; a new tool is no such news.
            let (old_definition, new_definition) = match old {
                Some(_) => (
                    before.get(id).and_then(kept),
                    new.and_then(|_| state.catalog.get(id))
                        .and_then(|record| kept(&record.definition)),
                ),
                None => (None, None),
            };
            state.record_drift(DriftReport {
                id: id.clone(),
                old,
                new,
                dropped_activations: dropped_by_tool.get(id).copied().unwrap_or(0),
                old_definition,
                new_definition,
            });
        }
        if let Some(more) = drifted.passed_over() {
            tracing::warn!(
                upstream,
                more,
                "more of the upstream's tools changed than are logged one by one"
            );
        }
        let registrations = changes
            .iter()
            .map(|(id, _)| {
                let tool = state.catalog.get(id).and_then(|record| {
                    let mut definition = record.definition.clone();
                    definition.insert("name".to_owned(), Value::from(id.as_str()));
                    serde_json::from_value::<Tool>(Value::Object(definition)).ok()
                });
                (id.clone(), tool)
            })
            .collect();
        (touched, registrations)
    }
}

/// `definition`, if it is small enough for a drift report to keep.
fn kept(definition: &JsonObject) -> Option<Arc<JsonObject>> {
    let size = serde_json::to_vec(definition).map_or(usize::MAX, |bytes| bytes.len());
    (size <= MAX_KEPT_DEFINITION).then(|| Arc::new(definition.clone()))
}

/// `definitions` less every tool whose input schema is not an object's
/// (`"type": "object"` at its root, as every revision asks): a client given
/// one could not call it as the revision says; and every tool whose name
/// does not read as it is ([`names::readable_name`]): one that shows as
/// another tool in a client could be approved or called for it. Each is
/// logged.
fn servable(upstream: &str, definitions: Vec<JsonObject>) -> Vec<JsonObject> {
    let mut refused = PerBatch::default();
    let servable = definitions
        .into_iter()
        .filter(|definition| {
            let name = definition.get("name").and_then(Value::as_str);
            if let Some(name) = name.filter(|n| !names::readable_name(n, names::MAX_TOOL_NAME)) {
                let why = if name.is_empty() {
                    "is empty"
                } else if name.chars().count() > names::MAX_TOOL_NAME {
                    "is too long"
                } else {
                    "has white space at an end, or a control or invisible character"
                };
                if refused.admit() {
                    // Shown at a length a log line holds: the name is the
                    // upstream's, and may be any length.
                    let shown: String = name.chars().take(2 * names::MAX_TOOL_NAME).collect();
                    tracing::error!(
                        upstream,
                        tool = %shown.escape_debug(),
                        longest = names::MAX_TOOL_NAME,
                        "the upstream's tool name {why}; it is not offered"
                    );
                }
                return false;
            }
            let object = definition
                .get("inputSchema")
                .and_then(|schema| schema.get("type"))
                .and_then(Value::as_str)
                == Some("object");
            if !object && refused.admit() {
                let tool: Option<String> = definition.get("name").map(|name| {
                    name.to_string()
                        .chars()
                        .take(2 * names::MAX_TOOL_NAME)
                        .collect()
                });
                tracing::error!(
                    upstream,
                    tool = tool.as_deref().unwrap_or("(none)"),
                    "the upstream's tool takes no object as its input; it is not offered"
                );
            }
            object
        })
        .collect();
    if let Some(more) = refused.passed_over() {
        tracing::error!(
            upstream,
            more,
            "more of the upstream's tools are not offered than are logged one by one"
        );
    }
    servable
}

/// `definitions` less every tool whose name comes more than once: a name
/// is one tool (the revisions say so), and which definition of two would be
/// trusted, pinned and served is not the upstream's to leave open. Each such
/// name is logged, and none of its definitions offered.
fn without_repeats(upstream: &str, definitions: Vec<JsonObject>) -> Vec<JsonObject> {
    let name_of = |d: &JsonObject| d.get("name").and_then(Value::as_str).map(str::to_owned);
    let mut seen: HashMap<String, usize> = HashMap::new();
    for definition in &definitions {
        if let Some(name) = name_of(definition) {
            *seen.entry(name).or_default() += 1;
        }
    }
    let mut repeated = PerBatch::default();
    for (tool, times) in seen.iter().filter(|(_, times)| **times > 1) {
        if repeated.admit() {
            tracing::error!(
                upstream,
                tool = %tool.escape_debug(),
                times,
                "the upstream lists a tool more than once; none of them is offered"
            );
        }
    }
    if let Some(more) = repeated.passed_over() {
        tracing::error!(
            upstream,
            more,
            "the upstream lists more tools more than once than are logged one by one"
        );
    }
    definitions
        .into_iter()
        .filter(|d| name_of(d).is_none_or(|name| seen.get(&name).is_none_or(|t| *t == 1)))
        .collect()
}
