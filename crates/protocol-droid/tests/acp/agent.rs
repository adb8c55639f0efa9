//! A small reference agent written only against the peer's public API.
//!
//! Prompt text picks the turn: `slow` streams and then waits to be
//! cancelled; `permission` asks the client before running a tool; `big`
//! sends a 10 MiB `tool_call_update`; anything else echoes one chunk with
//! the prompt's total size.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use protocol_droid::adapters::primary::acp::{
    AcpAgentPeer, AcpSender, ConfigValue, Inbound, InboundRequest, McpServer, NotificationParams,
    PermissionOutcome, PromptParams, RequestParams,
};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// What the agent advertises.
#[derive(Clone, Copy, Default)]
pub(crate) struct Config {
    /// Advertise `authMethods:[{"id":"key"}]` and require it before
    /// `session/new`.
    pub(crate) auth: bool,
    /// Advertise `loadSession`, with one stored session `"stored"`.
    pub(crate) load_session: bool,
    /// Advertise `auth.logout` and serve `logout`.
    pub(crate) logout: bool,
}

#[derive(Default)]
struct State {
    authed: Mutex<bool>,
    sessions: Mutex<HashSet<String>>,
    next: AtomicU64,
    /// Running turns by session, and by the prompt's request id.
    turns: Mutex<HashMap<String, Arc<Notify>>>,
    turn_ids: Mutex<HashMap<String, Arc<Notify>>>,
}

pub(crate) fn spawn(peer: AcpAgentPeer, config: Config) -> JoinHandle<()> {
    tokio::spawn(run(peer, config))
}

async fn run(mut peer: AcpAgentPeer, config: Config) {
    let state = Arc::new(State::default());
    while let Some(message) = peer.recv_request().await {
        match message {
            Inbound::Request(request) => {
                let sender = peer.sender();
                let state = Arc::clone(&state);
                // Each request in a task of its own, so a slow prompt never
                // holds up the next request.
                tokio::spawn(async move {
                    let _ignored = handle(&sender, &state, config, *request).await;
                });
            }
            Inbound::Notification(note) => match note.params {
                Ok(NotificationParams::Cancel(p)) => {
                    if let Some(turn) = lock(&state.turns).get(&p.session_id) {
                        turn.notify_one();
                    }
                }
                Ok(NotificationParams::CancelRequest(p)) => {
                    if let Some(turn) = lock(&state.turn_ids).get(&p.request_id.to_string()) {
                        turn.notify_one();
                    }
                }
                // Unknown or malformed notifications are ignored: they are
                // never answered.
                _ => {}
            },
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

type Sent = Result<(), protocol_droid::adapters::primary::acp::AcpPeerError>;

async fn handle(
    sender: &AcpSender,
    state: &State,
    config: Config,
    request: InboundRequest,
) -> Sent {
    let id = request.id.clone();
    let params = match &request.params {
        Ok(params) => params,
        Err(invalid) => {
            // A gated method is "not found" whatever its params.
            if request.method == "session/load" && !config.load_session {
                return sender.reply_method_not_found(&request).await;
            }
            return sender.reply_invalid_params(id, invalid).await;
        }
    };
    match params {
        RequestParams::Initialize(_) => {
            let auth_methods = if config.auth {
                json!([{"id": "key", "name": "API key"}])
            } else {
                json!([])
            };
            let result = json!({
                "protocolVersion": 1,
                "agentCapabilities": {
                    "loadSession": config.load_session,
                    "promptCapabilities": {"image": false, "audio": false, "embeddedContext": true},
                    "mcpCapabilities": {"http": true, "sse": false},
                    "auth": if config.logout { json!({"logout": {}}) } else { json!({}) },
                },
                "agentInfo": {"name": "reference-agent", "version": "0.0.0"},
                "authMethods": auth_methods,
            });
            sender.send_reply(id, result).await
        }
        RequestParams::Authenticate(p) => {
            if config.auth && p.method_id == "key" {
                *lock(&state.authed) = true;
                sender.send_reply(id, json!({})).await
            } else {
                sender.send_error(id, -32602, "unknown auth method").await
            }
        }
        RequestParams::NewSession(p) => {
            if config.auth && !*lock(&state.authed) {
                return sender
                    .send_error(id, -32000, "Authentication required")
                    .await;
            }
            // The documented rule: a transport not advertised (sse) or not
            // known (acp) is refused, not skipped, and so is an entry that
            // does not read.
            for server in &p.mcp_servers {
                if matches!(server, McpServer::Invalid { .. }) {
                    return sender
                        .send_error(id, -32602, "MCP server entry unreadable")
                        .await;
                }
                if matches!(server, McpServer::Sse(_) | McpServer::Other { .. }) {
                    return sender
                        .send_error(id, -32602, "MCP transport not supported")
                        .await;
                }
            }
            let session = format!("sess-{}", state.next.fetch_add(1, Ordering::Relaxed));
            lock(&state.sessions).insert(session.clone());
            sender.send_reply(id, json!({"sessionId": session})).await
        }
        RequestParams::LoadSession(p) => {
            if !config.load_session {
                return sender.reply_method_not_found(&request).await;
            }
            if p.session_id != "stored" {
                return sender.send_error(id, -32002, "Resource not found").await;
            }
            for (kind, text) in [
                ("user_message_chunk", "hello"),
                ("agent_message_chunk", "hi there"),
                ("user_message_chunk", "again"),
                ("agent_message_chunk", "still here"),
            ] {
                let update =
                    json!({"sessionUpdate": kind, "content": {"type": "text", "text": text}});
                sender.session_update(&p.session_id, update).await?;
            }
            lock(&state.sessions).insert(p.session_id.clone());
            sender.send_reply(id, json!({})).await
        }
        RequestParams::SetConfigOption(p) => {
            let known = p.config_id == "model"
                && matches!(&p.value, ConfigValue::Id(v) if v == "fast" || v == "smart");
            if !known {
                return sender
                    .send_error(id, -32602, "Invalid params: unknown value")
                    .await;
            }
            let ConfigValue::Id(current) = &p.value else {
                return sender.send_error(id, -32602, "Invalid params").await;
            };
            let options = json!([{
                "id": "model", "name": "Model", "category": "model", "type": "select",
                "currentValue": current,
                "options": [{"value": "fast", "name": "Fast"}, {"value": "smart", "name": "Smart"}],
            }]);
            sender
                .send_reply(id, json!({"configOptions": options}))
                .await
        }
        RequestParams::Prompt(p) => prompt(sender, state, id, p).await,
        RequestParams::Logout(_) if config.logout => sender.send_reply(id, json!({})).await,
        _ => sender.reply_method_not_found(&request).await,
    }
}

fn text_of(p: &PromptParams) -> String {
    p.prompt
        .iter()
        .filter_map(|block| block.get("text").and_then(Value::as_str))
        .collect()
}

fn chunk(text: &str) -> Value {
    json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})
}

async fn prompt(sender: &AcpSender, state: &State, id: Value, p: &PromptParams) -> Sent {
    let session = p.session_id.as_str();
    let text = text_of(p);
    if text == "slow" {
        let cancel = Arc::new(Notify::new());
        lock(&state.turns).insert(session.to_owned(), Arc::clone(&cancel));
        lock(&state.turn_ids).insert(id.to_string(), Arc::clone(&cancel));
        sender.session_update(session, chunk("thinking")).await?;
        let call = json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "work", "status": "pending"});
        sender.session_update(session, call).await?;
        cancel.notified().await;
        let done =
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "failed"});
        sender.session_update(session, done).await?;
        lock(&state.turns).remove(session);
        lock(&state.turn_ids).remove(&id.to_string());
        return sender
            .send_reply(id, json!({"stopReason": "cancelled"}))
            .await;
    }
    if text == "permission" {
        let call = json!({"sessionUpdate": "tool_call", "toolCallId": "t2", "title": "rm", "kind": "delete", "status": "pending"});
        sender.session_update(session, call).await?;
        let ask = json!({
            "sessionId": session,
            "toolCall": {"toolCallId": "t2"},
            "options": [
                {"optionId": "allow-once", "name": "Allow", "kind": "allow_once"},
                {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"},
            ],
        });
        let outcome = match sender.request_permission(ask).await {
            Ok(outcome) => outcome,
            Err(e) if e.is_closed() => return Err(e),
            Err(_) => PermissionOutcome::Cancelled,
        };
        if outcome == PermissionOutcome::Cancelled {
            return sender
                .send_reply(id, json!({"stopReason": "cancelled"}))
                .await;
        }
        for status in ["in_progress", "completed"] {
            let update =
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "t2", "status": status});
            sender.session_update(session, update).await?;
        }
        sender.session_update(session, chunk("done")).await?;
        return sender
            .send_reply(id, json!({"stopReason": "end_turn"}))
            .await;
    }
    if text == "big" {
        let body = "line one\nline two\u{2028}".repeat(10 * 1024 * 1024 / 18);
        let update = json!({
            "sessionUpdate": "tool_call_update", "toolCallId": "t3",
            "content": [{"type": "content", "content": {"type": "text", "text": body}}],
        });
        sender.session_update(session, update).await?;
        return sender
            .send_reply(id, json!({"stopReason": "end_turn"}))
            .await;
    }
    let size: usize = p
        .prompt
        .iter()
        .filter_map(|b| {
            b.get("resource")
                .and_then(|r| r.get("text"))
                .and_then(Value::as_str)
        })
        .map(str::len)
        .sum::<usize>()
        + text.len();
    sender
        .session_update(session, chunk(&format!("received {size} bytes")))
        .await?;
    sender
        .send_reply(id, json!({"stopReason": "end_turn"}))
        .await
}
