//! The discovery tools of progressive mode: `search_tools` ranks the
//! catalog for the caller, `activate_tools` grants exact ids to the caller's
//! session and `deactivate_tools` revokes them, and `call_tool` calls one
//! tool by its exact id for this request alone. Each change is announced to
//! that session alone.
//!
//! A session that keeps activations is a lasting one (stdio, a legacy HTTP
//! session) or, for a 2026-07-28 request over HTTP, which is its own
//! session, the authenticated principal's: its activations last across its
//! requests for up to an hour after the last one. An anonymous 2026-07-28
//! caller keeps nothing; `call_tool` serves it, and any client, without
//! anything to keep: the request's own set gets the one exact activation,
//! and the call passes the same gate.
//!
//! They are ordinary tools of the gateway's server, registered by
//! [`Gateway::build`] in progressive mode, and they pass the same
//! [`ExecutionGate`] as every upstream tool.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use super::catalog::{ToolRecord, ToolRole};
use super::gate::ExecutionGate;
use super::runtime::Gateway;
use super::session::SessionActivationGrant;
use super::state::{State, lock, refused};
use crate::application::server::{Call, CallError, ToolSpec};
use crate::domain::SessionId;
use crate::domain::catalog::ToolId;
use crate::domain::ir::ToolResult;

/// The discovery tools of progressive mode.
pub const SEARCH_TOOLS: &str = "search_tools";
/// See [`SEARCH_TOOLS`].
pub const ACTIVATE_TOOLS: &str = "activate_tools";
/// See [`SEARCH_TOOLS`].
pub const DEACTIVATE_TOOLS: &str = "deactivate_tools";
/// See [`SEARCH_TOOLS`].
pub const CALL_TOOL: &str = "call_tool";

/// The longest `search_tools` query ranked; a longer one is refused. A few
/// words find a tool, and ranking costs time in proportion to the query.
const MAX_QUERY_BYTES: usize = 1024;

/// The most ids one `activate_tools` or `deactivate_tools` call names.
const MAX_IDS: usize = 64;

#[derive(Deserialize)]
struct SearchArgs {
    query: String,
    #[serde(default)]
    limit: Option<usize>,
}

#[derive(Deserialize)]
struct IdsArgs {
    ids: Vec<String>,
}

#[derive(Deserialize)]
struct CallArgs {
    id: String,
    #[serde(default)]
    arguments: crate::domain::ir::JsonObject,
}

fn text(message: impl Into<String>) -> ToolResult {
    ToolResult::text(message)
}

fn failure(message: impl Into<String>) -> ToolResult {
    ToolResult {
        is_error: Some(true),
        ..text(message)
    }
}

impl Gateway {
    /// Registers the discovery tools with the gateway's server and its
    /// catalog.
    pub(super) fn add_discovery_tools(&self) {
        let definitions = [
            (
                ToolSpec::new(
                    SEARCH_TOOLS,
                    "Searches every tool this gateway can offer by name and description; \
                     activate the ones you need with activate_tools.",
                )
                .input_schema(json!({
                    "type": "object",
                    "properties": {
                        "query": { "type": "string", "description": "Words to look for" },
                        "limit": { "type": "integer", "minimum": 1, "maximum": 50 },
                    },
                    "required": ["query"],
                })),
                SEARCH_TOOLS,
            ),
            (
                ToolSpec::new(
                    ACTIVATE_TOOLS,
                    "Makes tools found with search_tools available in this session, by exact id.",
                )
                .input_schema(ids_schema()),
                ACTIVATE_TOOLS,
            ),
            (
                ToolSpec::new(
                    DEACTIVATE_TOOLS,
                    "Removes tools activated with activate_tools from this session.",
                )
                .input_schema(ids_schema()),
                DEACTIVATE_TOOLS,
            ),
            (
                ToolSpec::new(
                    CALL_TOOL,
                    "Calls one tool found with search_tools by its exact id, without \
                     activating it: for a client that keeps no session.",
                )
                .input_schema(json!({
                    "type": "object",
                    "properties": {
                        "id": { "type": "string", "description": "The exact tool id" },
                        "arguments": { "type": "object", "description": "The tool's arguments" },
                    },
                    "required": ["id"],
                })),
                CALL_TOOL,
            ),
        ];
        for (spec, name) in definitions {
            let (tool, _) = spec.clone().into_parts();
            if let Ok(Value::Object(definition)) = serde_json::to_value(&tool) {
                Arc::make_mut(&mut lock(&self.inner.state).catalog).add_builtin(
                    ToolId::new(name),
                    definition,
                    ToolRole::Discovery,
                );
            }
            let gateway = Arc::downgrade(&self.inner);
            self.inner.server.add_tool(spec, move |call: Call| {
                let gateway = gateway.upgrade().map(|inner| Self { inner });
                async move {
                    match gateway {
                        Some(gateway) if name == CALL_TOOL => gateway.call_by_id(&call).await,
                        Some(gateway) => gateway.discovery(name, &call).await,
                        None => Err(CallError::internal("the gateway is shutting down")),
                    }
                }
            });
        }
    }

    /// `search_tools`: the caller's query, bounded, ranked over a snapshot
    /// of the catalog outside the lock, among only the verified deferred
    /// tools the caller may see.
    fn search(&self, call: &Call) -> Result<ToolResult, CallError> {
        // Read and bounded before any shared state is touched.
        let args: SearchArgs = call.args()?;
        if args.query.len() > MAX_QUERY_BYTES {
            return Ok(failure(format!(
                "the query is longer than {MAX_QUERY_BYTES} bytes; search with a few words"
            )));
        }
        let limit = args.limit.unwrap_or(10).clamp(1, 50);
        let (catalog, set, scopes) = {
            let mut state = lock(&self.inner.state);
            let set = state.set_for(call.peer(), call.caller(), self.inner.disclosure);
            ExecutionGate::authorize(&set, &state.catalog, &ToolId::new(SEARCH_TOOLS))
                .map_err(|e| refused(e.to_string()))?;
            (Arc::clone(&state.catalog), set, state.scopes.clone())
        };
        // An unverified tool (unpinned, or drifted from its pin) never
        // reaches a session, and its description is exactly what a rug pull
        // poisons: it is not ranked, shown or counted.
        let admit = |record: &ToolRecord| {
            record.role == ToolRole::Deferred
                && record.provenance.is_verified()
                && scopes
                    .get(&record.id)
                    .is_none_or(|scope| call.caller().has_scope(scope))
        };
        let found: Vec<Value> = catalog
            .search(&args.query, limit, admit)
            .into_iter()
            .map(|(r, score)| {
                json!({
                    "id": r.id.as_str(),
                    "description": r.description(),
                    "provenance": r.provenance.to_string(),
                    "active": set.is_core(&r.id) || set.activation(&r.id).is_some(),
                    "score": (score * 1000.0).round() / 1000.0,
                })
            })
            .collect();
        // Each tool on one line, its description quoted as JSON: an
        // upstream's text can then neither start a line of its own nor end
        // its quote, so it cannot pass for another tool's entry.
        let lines: Vec<String> = found
            .iter()
            .map(|f| {
                format!(
                    "{} ({}{}): {}",
                    f["id"].as_str().unwrap_or_default(),
                    f["provenance"].as_str().unwrap_or_default(),
                    if f["active"] == json!(true) {
                        ", active"
                    } else {
                        ""
                    },
                    one_line(&f["description"])
                )
            })
            .collect();
        let mut result = text(if lines.is_empty() {
            "No tool matches.".to_owned()
        } else {
            lines.join("\n")
        });
        result.structured_content = Some(json!({ "tools": found }));
        Ok(result)
    }

    async fn discovery(&self, tool: &str, call: &Call) -> Result<ToolResult, CallError> {
        if tool == SEARCH_TOOLS {
            return self.search(call);
        }
        // A change made through another instance a moment ago, which this
        // one has not been told of yet, is taken first: the set written
        // below is the whole set, and would otherwise leave that change out
        // for every instance.
        let _newer = Box::pin(self.catch_up(call.peer(), call.caller())).await;
        let (result, changed) = self.change_activations(tool, call)?;
        // Shared before the caller is answered: its next request may land
        // on another instance.
        if let Some(session) = changed {
            self.share_activations(session).await;
        }
        Ok(result)
    }

    /// `activate_tools` and `deactivate_tools`: the result, and the session
    /// whose activations changed.
    fn change_activations(
        &self,
        tool: &str,
        call: &Call,
    ) -> Result<(ToolResult, Option<SessionId>), CallError> {
        // Read and bounded before the lock every session shares is taken.
        let args: IdsArgs = call.args()?;
        if args.ids.len() > MAX_IDS {
            return Ok((
                failure(format!(
                    "Nothing was changed: at most {MAX_IDS} ids at a time"
                )),
                None,
            ));
        }
        let mut state = lock(&self.inner.state);
        let disclosure = self.inner.disclosure;
        let set = state.set_for(call.peer(), call.caller(), disclosure);
        let Some(session) = state.keeping_session(call.peer(), call.caller(), disclosure) else {
            return Ok((
                failure(format!(
                    "Nothing was changed: a 2026-07-28 request over HTTP is its own session, and \
                     an anonymous caller keeps nothing between requests; call a tool by its exact \
                     id with {CALL_TOOL}, authenticate, or connect over stdio or a legacy HTTP \
                     session"
                )),
                None,
            ));
        };
        // A tool whose scope the caller lacks does not exist for it, in
        // searches and activations as in lists.
        let permitted = |state: &State, id: &ToolId| {
            state
                .scopes
                .get(id)
                .is_none_or(|scope| call.caller().has_scope(scope))
        };
        ExecutionGate::authorize(&set, &state.catalog, &ToolId::new(tool))
            .map_err(|e| refused(e.to_string()))?;
        match tool {
            ACTIVATE_TOOLS => {
                let mut grants = Vec::new();
                for id in &args.ids {
                    let id = ToolId::new(id.as_str());
                    // An unverified tool is not in the catalog as far as a
                    // session can tell, in an activation as in a search.
                    let verified = state
                        .catalog
                        .get(&id)
                        .is_some_and(|r| r.provenance.is_verified());
                    let grant = SessionActivationGrant::issue(session, &id, &state.catalog)
                        .filter(|_| verified && permitted(&state, &id));
                    match grant {
                        Some(grant) => grants.push(grant),
                        None => {
                            return Ok((failure(format!("{id} is not in the catalog")), None));
                        }
                    }
                }
                let mut next = set;
                let catalog = state.catalog.clone();
                match next.activate_many(grants, &catalog) {
                    Ok(applied) => {
                        state.sessions.insert(session, next);
                        if let Some(lost) = state.lost.get_mut(&session) {
                            for id in &args.ids {
                                lost.remove(&ToolId::new(id.as_str()));
                            }
                        }
                        drop(state);
                        if applied > 0 {
                            self.inner.server.tools_changed_for(session);
                        }
                        let result = text(format!(
                            "Activated {applied} tool(s): {}",
                            args.ids.join(", ")
                        ));
                        Ok((result, (applied > 0).then_some(session)))
                    }
                    Err(error) => Ok((failure(format!("Nothing was activated: {error}")), None)),
                }
            }
            DEACTIVATE_TOOLS => {
                let mut next = set;
                for id in &args.ids {
                    if let Err(error) = next.revoke_exact(&ToolId::new(id.as_str())) {
                        let result = failure(format!("Nothing was deactivated: {error}"));
                        return Ok((result, None));
                    }
                }
                state.sessions.insert(session, next);
                drop(state);
                self.inner.server.tools_changed_for(session);
                let result = text(format!("Deactivated: {}", args.ids.join(", ")));
                Ok((result, Some(session)))
            }
            _ => Err(refused(format!("unknown discovery tool {tool}"))),
        }
    }
}

impl Gateway {
    /// `call_tool`: the request's own set, plus the one exact activation of
    /// the tool named, through the gate like any call. Nothing is kept: the
    /// next request sees the set it saw before.
    async fn call_by_id(&self, call: &Call) -> Result<ToolResult, CallError> {
        let args: CallArgs = call.args()?;
        let id = ToolId::new(args.id.as_str());
        let route = {
            let mut state = lock(&self.inner.state);
            let mut set = state.set_for(call.peer(), call.caller(), self.inner.disclosure);
            ExecutionGate::authorize(&set, &state.catalog, &ToolId::new(CALL_TOOL))
                .map_err(|e| refused(e.to_string()))?;
            // As for an activation: an unverified tool, or one whose scope
            // the caller lacks, is not in the catalog as far as it can tell.
            let callable = state
                .catalog
                .get(&id)
                .is_some_and(|r| r.role == ToolRole::Deferred && r.provenance.is_verified())
                && state
                    .scopes
                    .get(&id)
                    .is_none_or(|scope| call.caller().has_scope(scope));
            if !callable {
                return Ok(failure(format!("{id} is not in the catalog")));
            }
            if !set.is_core(&id) && set.activation(&id).is_none() {
                let grant = SessionActivationGrant::issue(*set.session(), &id, &state.catalog)
                    .ok_or_else(|| refused(format!("{id} is not in the catalog")))?;
                let catalog = Arc::clone(&state.catalog);
                set.activate(grant, &catalog)
                    .map_err(|e| refused(e.to_string()))?;
            }
            state.route(&set, &id)?
        };
        // Counted as a call of the tool itself, not only of `call_tool`:
        // a limit on a tool holds whichever way it is called.
        self.inner
            .server
            .admit_tool(&call.ctx, id.as_str(), true)
            .map_err(CallError::Protocol)?;
        self.call_upstream(route, args.arguments, call).await
    }
}

fn ids_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "ids": { "type": "array", "items": { "type": "string" }, "description": "Exact tool ids" },
        },
        "required": ["ids"],
    })
}

/// `value` as JSON on one line: besides what JSON escapes, the separators
/// a reader may also take for line breaks (U+0085, U+2028, U+2029).
fn one_line(value: &Value) -> String {
    value
        .to_string()
        .replace('\u{85}', "\\u0085")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}
