//! `droid acp`: an ACP agent on stdio whose tools are MCP servers.
//!
//! An editor starts `droid acp` and speaks ACP v1 to it. Each session
//! connects to the MCP servers the editor lists in `session/new`, and each
//! prompt is a command (`tools`, `call`, `read`, `prompt`, `help`: see
//! [`command`]) carried out against them, reported as `session/update`s.
//! There is no model: the agent is a way to use MCP servers from an ACP
//! client, and a working ACP agent for testing clients.
//!
//! The loop reads messages in order and never waits on a server: opening,
//! loading and prompting run on tasks of their own, so a `session/cancel`
//! is read while its turn is still running. The sessions are shared with
//! those tasks behind one lock that is never held across an await.
//!
//! Everything is bounded: sessions ([`AcpOptions::max_sessions`]), servers
//! per session, each connection attempt's time, the command's length and
//! the history kept for `session/load`.

mod command;
mod mcp;
mod session;
mod turn;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use protocol_droid::adapters::primary::acp::{
    AcpAgentPeer, AcpPeerError, AcpSender, Inbound, InboundNotification, InboundRequest,
    LoadSessionParams, NewSessionParams, NotificationParams, PromptParams, RequestParams, methods,
};
use protocol_droid::adapters::secondary::tls::Trust;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;

pub(crate) use command::HELP;
use session::{HistoryLimits, Session};
use turn::{OpenCall, StopReason};

/// JSON-RPC's "Internal error".
const INTERNAL_ERROR: i64 = -32603;
/// JSON-RPC's "Invalid params".
const INVALID_PARAMS: i64 = -32602;
/// ACP's "Resource not found", for a session this agent does not have.
const RESOURCE_NOT_FOUND: i64 = -32002;
/// How long closing one MCP server may take when a session ends.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Limits of one `droid acp` process.
#[derive(Clone, Debug)]
pub(crate) struct AcpOptions {
    /// How long connecting to one MCP server may take.
    pub(crate) connect_timeout: Duration,
    /// The most sessions open at once; `session/close` frees one.
    pub(crate) max_sessions: usize,
    /// The most MCP servers one session may list.
    pub(crate) max_servers: usize,
    /// What each session keeps for `session/load`.
    pub(crate) history: HistoryLimits,
    /// The certificate authorities HTTPS servers are checked against.
    pub(crate) trust: Trust,
}

impl Default for AcpOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(20),
            max_sessions: 64,
            max_servers: 32,
            history: HistoryLimits::default(),
            trust: Trust::default(),
        }
    }
}

/// Serves ACP on `stdin`/`stdout` until the client closes `stdin` or
/// `stopped` resolves (a signal), then closes every session's MCP servers.
pub(crate) async fn serve<R, W>(
    stdin: R,
    stdout: W,
    options: AcpOptions,
    stopped: impl Future<Output = ()>,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut stopped = std::pin::pin!(stopped);
    let mut peer = AcpAgentPeer::from_stdio(stdin, stdout);
    let agent = Agent {
        sender: peer.sender(),
        options,
        state: Arc::default(),
        id_prefix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    };
    loop {
        let message = tokio::select! {
            message = peer.recv_request() => message,
            () = &mut stopped => None,
        };
        let Some(message) = message else {
            break;
        };
        let outcome = match message {
            Inbound::Request(request) => agent.request(*request).await,
            Inbound::Notification(notification) => {
                agent.notification(&notification);
                Ok(())
            }
        };
        if let Err(e) = outcome {
            tracing::debug!("ACP reply not sent: {e}");
        }
    }
    agent.shutdown().await;
}

/// What the message loop and the tasks it starts share.
#[derive(Debug, Default)]
struct State {
    sessions: HashMap<String, Slot>,
    /// Sessions whose servers are still being connected: they count
    /// against the limit already.
    opening: usize,
    next_session: u64,
    next_turn: u64,
}

#[derive(Debug)]
struct Slot {
    session: Arc<Session>,
    busy: Busy,
}

/// What a session is doing, which decides what it accepts.
#[derive(Debug)]
enum Busy {
    /// Waiting for a prompt.
    Idle,
    /// Running a prompt turn.
    Turn(Running),
    /// Connecting servers and replaying for `session/load`.
    Loading,
}

/// Why a request naming a session is refused.
#[derive(Clone, Copy, Debug)]
enum Refused {
    /// No such session here.
    UnknownSession,
    /// The session is running a turn or loading.
    Busy,
}

#[derive(Debug)]
struct Running {
    number: u64,
    /// The `session/prompt` request's id, for `$/cancel_request`.
    request_id: Value,
    /// Sending (or dropping) this ends the turn as `cancelled`.
    cancel: Option<oneshot::Sender<()>>,
    /// Ends (its sender dropped) once the turn's reply is sent, so that a
    /// `session/close` is answered after everything the turn said.
    ended: Option<oneshot::Receiver<()>>,
}

#[derive(Debug)]
struct Agent {
    sender: AcpSender,
    options: AcpOptions,
    state: Arc<Mutex<State>>,
    /// Makes this process's session ids unlike another's.
    id_prefix: u128,
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Agent {
    async fn request(&self, request: InboundRequest) -> Result<(), AcpPeerError> {
        use methods::agent as m;
        let served = matches!(
            request.method.as_str(),
            m::INITIALIZE
                | m::AUTHENTICATE
                | m::SESSION_NEW
                | m::SESSION_LOAD
                | m::SESSION_PROMPT
                | m::SESSION_CLOSE
        );
        // An unserved method is -32601 whatever its params: that answer
        // must win over -32602.
        if !served {
            return self.sender.reply_method_not_found(&request).await;
        }
        let id = request.id;
        match request.params {
            Err(invalid) => self.sender.reply_invalid_params(id, &invalid).await,
            Ok(RequestParams::Initialize(_)) => self.sender.send_reply(id, initialize()).await,
            Ok(RequestParams::Authenticate(p)) => {
                self.sender
                    .send_error(
                        id,
                        INVALID_PARAMS,
                        format!(
                            "Invalid params: no authentication method `{}` (none is needed)",
                            p.method_id
                        ),
                    )
                    .await
            }
            Ok(RequestParams::NewSession(p)) => self.new_session(id, p).await,
            Ok(RequestParams::LoadSession(p)) => self.load_session(id, p).await,
            Ok(RequestParams::Prompt(p)) => self.prompt(id, p).await,
            Ok(RequestParams::CloseSession(p)) => self.close_session(id, &p.session_id).await,
            Ok(_) => {
                self.sender
                    .send_error(
                        id,
                        INTERNAL_ERROR,
                        "Internal error: params of another method",
                    )
                    .await
            }
        }
    }

    fn notification(&self, notification: &InboundNotification) {
        let mut state = lock(&self.state);
        match &notification.params {
            Ok(NotificationParams::Cancel(p)) => {
                if let Some(Slot {
                    busy: Busy::Turn(running),
                    ..
                }) = state.sessions.get_mut(&p.session_id)
                {
                    cancel(running);
                }
            }
            Ok(NotificationParams::CancelRequest(p)) => {
                for slot in state.sessions.values_mut() {
                    if let Busy::Turn(running) = &mut slot.busy {
                        if running.request_id == p.request_id {
                            cancel(running);
                        }
                    }
                }
            }
            // Anything else is ignored, as ACP asks of notifications.
            _ => tracing::debug!(
                "ignoring the notification {}",
                notification.method.escape_debug()
            ),
        }
    }

    async fn new_session(&self, id: Value, params: NewSessionParams) -> Result<(), AcpPeerError> {
        if params.mcp_servers.len() > self.options.max_servers {
            return self
                .sender
                .send_error(
                    id,
                    INVALID_PARAMS,
                    format!(
                        "Invalid params: at most {} MCP servers per session",
                        self.options.max_servers
                    ),
                )
                .await;
        }
        let reserved = {
            let mut state = lock(&self.state);
            if state.sessions.len() + state.opening >= self.options.max_sessions {
                None
            } else {
                state.opening += 1;
                state.next_session += 1;
                Some(format!("droid-{:x}-{}", self.id_prefix, state.next_session))
            }
        };
        let Some(session_id) = reserved else {
            return self
                .sender
                .send_error(
                    id,
                    INTERNAL_ERROR,
                    format!(
                        "Internal error: {} sessions are open, the most this agent keeps; \
                         close one with session/close",
                        self.options.max_sessions
                    ),
                )
                .await;
        };
        let sender = self.sender.clone();
        let state = Arc::clone(&self.state);
        let options = self.options.clone();
        tokio::spawn(async move {
            let servers = mcp::connect_all(
                &params.mcp_servers,
                Some(&params.cwd),
                options.connect_timeout,
                &options.trust,
            )
            .await;
            let session = Arc::new(Session::new(
                session_id.clone(),
                sender.clone(),
                servers,
                options.history,
            ));
            {
                let mut state = lock(&state);
                state.opening = state.opening.saturating_sub(1);
                state.sessions.insert(
                    session_id.clone(),
                    Slot {
                        session: Arc::clone(&session),
                        busy: Busy::Idle,
                    },
                );
            }
            let answered = async {
                sender
                    .send_reply(id, json!({ "sessionId": session_id }))
                    .await?;
                sender
                    .session_update(&session_id, available_commands())
                    .await?;
                session.report_failures().await
            };
            if let Err(e) = answered.await {
                tracing::debug!("session/new: {e}");
            }
        });
        Ok(())
    }

    async fn load_session(&self, id: Value, params: LoadSessionParams) -> Result<(), AcpPeerError> {
        if params.mcp_servers.len() > self.options.max_servers {
            return self
                .sender
                .send_error(
                    id,
                    INVALID_PARAMS,
                    format!(
                        "Invalid params: at most {} MCP servers per session",
                        self.options.max_servers
                    ),
                )
                .await;
        }
        let old = {
            let mut state = lock(&self.state);
            match state.sessions.get_mut(&params.session_id) {
                None => Err(Refused::UnknownSession),
                Some(slot) => match slot.busy {
                    Busy::Idle => {
                        slot.busy = Busy::Loading;
                        Ok(Arc::clone(&slot.session))
                    }
                    _ => Err(Refused::Busy),
                },
            }
        };
        let old = match old {
            Err(Refused::UnknownSession) => {
                return self.unknown_session(id, &params.session_id).await;
            }
            Err(Refused::Busy) => {
                return self
                    .sender
                    .send_error(
                        id,
                        INVALID_PARAMS,
                        "Invalid params: the session is busy; cancel its turn first",
                    )
                    .await;
            }
            Ok(old) => old,
        };
        let sender = self.sender.clone();
        let state = Arc::clone(&self.state);
        let timeout = self.options.connect_timeout;
        let trust = self.options.trust.clone();
        tokio::spawn(async move {
            let servers =
                mcp::connect_all(&params.mcp_servers, Some(&params.cwd), timeout, &trust).await;
            let session = Arc::new(old.reconnected(sender.clone(), servers));
            // A session closed while its servers connected replays nothing:
            // nothing about it may follow the close's answer.
            let open = lock(&state).sessions.contains_key(&session.id);
            let replayed = if open { session.replay().await } else { Ok(()) };
            let kept = {
                let mut state = lock(&state);
                match state.sessions.get_mut(&session.id) {
                    Some(slot) => {
                        slot.session = Arc::clone(&session);
                        slot.busy = Busy::Idle;
                        true
                    }
                    None => false,
                }
            };
            // The old connections are replaced, not shared: a session's
            // servers are the ones its latest new or load listed. A session
            // closed while it was loading takes its new ones with it.
            let stale = if kept {
                old.servers.clone()
            } else {
                session.servers.clone()
            };
            tokio::spawn(async move { mcp::close_all(&stale, CLOSE_GRACE).await });
            if !kept {
                let refused = sender
                    .send_error_with_data(
                        id,
                        RESOURCE_NOT_FOUND,
                        format!(
                            "Resource not found: session `{}` was closed while it loaded",
                            session.id
                        ),
                        json!({ "sessionId": session.id }),
                    )
                    .await;
                if let Err(e) = refused {
                    tracing::debug!("session/load: {e}");
                }
                return;
            }
            let answered = async {
                replayed?;
                sender.send_reply(id, json!({})).await?;
                sender
                    .session_update(&session.id, available_commands())
                    .await?;
                session.report_failures().await
            };
            if let Err(e) = answered.await {
                tracing::debug!("session/load: {e}");
            }
        });
        Ok(())
    }

    async fn prompt(&self, id: Value, params: PromptParams) -> Result<(), AcpPeerError> {
        let started = {
            let mut state = lock(&self.state);
            state.next_turn += 1;
            let number = state.next_turn;
            match state.sessions.get_mut(&params.session_id) {
                None => Err(Refused::UnknownSession),
                Some(slot) if !matches!(slot.busy, Busy::Idle) => Err(Refused::Busy),
                Some(slot) => {
                    let (cancel, cancelled) = oneshot::channel();
                    let (ending, ended) = oneshot::channel::<()>();
                    slot.busy = Busy::Turn(Running {
                        number,
                        request_id: id.clone(),
                        cancel: Some(cancel),
                        ended: Some(ended),
                    });
                    Ok((Arc::clone(&slot.session), number, cancelled, ending))
                }
            }
        };
        let (session, number, cancelled, ending) = match started {
            Ok(started) => started,
            Err(Refused::UnknownSession) => {
                return self.unknown_session(id, &params.session_id).await;
            }
            Err(Refused::Busy) => {
                return self
                    .sender
                    .send_error(
                        id,
                        INVALID_PARAMS,
                        "Invalid params: a prompt turn is already running in this session",
                    )
                    .await;
            }
        };
        let sender = self.sender.clone();
        let state = Arc::clone(&self.state);
        tokio::spawn(async move {
            let open_call = OpenCall::default();
            // `biased`: a cancel that has arrived wins over a turn that
            // could still make progress.
            let outcome = tokio::select! {
                biased;
                _ = cancelled => None,
                outcome = turn::run(&session, &params.prompt, &open_call) => Some(outcome),
            };
            // The turn's future is gone here, so nothing it would still
            // have sent can follow the reply.
            let outcome = match outcome {
                Some(outcome) => outcome,
                None => close_cancelled_call(&session, &open_call)
                    .await
                    .map(|()| StopReason::Cancelled),
            };
            {
                let mut state = lock(&state);
                if let Some(slot) = state.sessions.get_mut(&session.id) {
                    if matches!(&slot.busy, Busy::Turn(running) if running.number == number) {
                        slot.busy = Busy::Idle;
                    }
                }
            }
            let replied = match outcome {
                Ok(stop) => {
                    sender
                        .send_reply(id, json!({ "stopReason": stop.as_str() }))
                        .await
                }
                Err(e) if e.is_closed() => Err(e),
                Err(e) => {
                    sender
                        .send_error(id, INTERNAL_ERROR, format!("Internal error: {e}"))
                        .await
                }
            };
            if let Err(e) = replied {
                tracing::debug!("session/prompt: {e}");
            }
            drop(ending);
        });
        Ok(())
    }

    async fn close_session(&self, id: Value, session_id: &str) -> Result<(), AcpPeerError> {
        // Removing the slot drops a running turn's cancel sender, which
        // ends that turn as cancelled.
        let removed = lock(&self.state).sessions.remove(session_id);
        let Some(mut slot) = removed else {
            return self.unknown_session(id, session_id).await;
        };
        let turn_ended = match &mut slot.busy {
            Busy::Turn(running) => running.ended.take(),
            _ => None,
        };
        let servers = slot.session.servers.clone();
        drop(slot);
        tokio::spawn(async move { mcp::close_all(&servers, CLOSE_GRACE).await });
        // The close is answered once the cancelled turn has said its last
        // word and been answered: nothing about the session follows it.
        let sender = self.sender.clone();
        tokio::spawn(async move {
            if let Some(ended) = turn_ended {
                let _turn_over = ended.await;
            }
            if let Err(e) = sender.send_reply(id, json!({})).await {
                tracing::debug!("session/close: {e}");
            }
        });
        Ok(())
    }

    async fn unknown_session(&self, id: Value, session_id: &str) -> Result<(), AcpPeerError> {
        self.sender
            .send_error_with_data(
                id,
                RESOURCE_NOT_FOUND,
                format!("Resource not found: no session `{session_id}`"),
                json!({ "sessionId": session_id }),
            )
            .await
    }

    /// Ends every turn and closes every session's servers.
    async fn shutdown(&self) {
        let slots: Vec<Slot> = lock(&self.state)
            .sessions
            .drain()
            .map(|(_, slot)| slot)
            .collect();
        let servers: Vec<_> = slots
            .iter()
            .flat_map(|slot| slot.session.servers.iter().cloned())
            .collect();
        drop(slots);
        mcp::close_all(&servers, CLOSE_GRACE).await;
    }
}

fn cancel(running: &mut Running) {
    if let Some(cancel) = running.cancel.take() {
        // The turn may have ended a moment ago; then there is nothing to stop.
        let _turn_gone = cancel.send(());
    }
}

/// A cancelled turn's open tool call ends `failed`, ACP having no
/// cancelled status for tool calls.
async fn close_cancelled_call(session: &Session, open_call: &OpenCall) -> Result<(), AcpPeerError> {
    let open = open_call
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    let Some(call) = open else {
        return Ok(());
    };
    session
        .emit(json!({
            "sessionUpdate": "tool_call_update",
            "toolCallId": call,
            "status": "failed",
            "content": [{ "type": "content", "content": { "type": "text", "text": "Cancelled." } }],
        }))
        .await
}

/// The `initialize` result: ACP 1, whatever the client asked for, since
/// it is the only version this agent speaks.
fn initialize() -> Value {
    json!({
        "protocolVersion": 1,
        "agentCapabilities": {
            "loadSession": true,
            "promptCapabilities": { "image": false, "audio": false, "embeddedContext": false },
            "mcpCapabilities": { "http": true, "sse": true },
            "sessionCapabilities": { "close": {} },
        },
        "agentInfo": {
            "name": "droid",
            "title": "protocol-droid",
            "version": env!("CARGO_PKG_VERSION"),
        },
        "authMethods": [],
    })
}

/// The commands, as ACP slash commands.
fn available_commands() -> Value {
    let command = |name: &str, description: &str, hint: Option<&str>| {
        let mut command = json!({ "name": name, "description": description });
        if let (Some(hint), Some(map)) = (hint, command.as_object_mut()) {
            map.insert("input".to_owned(), json!({ "hint": hint }));
        }
        command
    };
    json!({
        "sessionUpdate": "available_commands_update",
        "availableCommands": [
            command("help", "The commands", None),
            command("servers", "The session's MCP servers", None),
            command("tools", "Every tool, named SERVER/TOOL", None),
            command("resources", "Every resource", None),
            command("prompts", "Every prompt", None),
            command("call", "Call a tool", Some("TOOL [JSON arguments]")),
            command("read", "Read a resource", Some("URI")),
            command("prompt", "Get a prompt", Some("NAME [JSON arguments]")),
        ],
    })
}
