//! One client connection: request correlation, the server's questions, and
//! notifications.
//!
//! A reader task owns the inbound queue. Responses complete the waiting
//! request by id; requests from a legacy server are answered by the
//! [`ClientHandler`] on tasks of their own so a slow user never stalls the
//! connection; notifications update progress callbacks and the cache, then
//! reach the handler. Anything that cannot be correlated is logged, never
//! silently dropped.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use futures_util::future::{AbortHandle, Abortable};
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

use super::answer::Answer;
use super::cache::ResultCache;
use super::error::ClientError;
use super::handler::{ClientHandler, Declining, Notice, answer as answer_with};
use super::headers::{self, ParamHeader};
use super::link::{Hints, Inbound, InboundRx, Link, LinkError, Outgoing};
use super::own_tasks::OwnTasks;
use super::patience::{Heard, MAX_PATIENCE, within};
use crate::application::squelch::Squelch;
use crate::domain::Refusal;
use crate::domain::ir::{member, member_mut};
use crate::domain::jsonrpc::{ErrorObject, RequestId};
use crate::domain::{Era, LoggingLevel, ProtocolVersion};
use crate::wire::{
    ClientCapabilities, Implementation, ProgressNotificationParams, ServerCapabilities,
};

/// The `_meta` keys of a 2026-07-28 request.
pub(crate) mod meta {
    /// `io.modelcontextprotocol/protocolVersion`.
    pub(crate) const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    /// `io.modelcontextprotocol/clientCapabilities`.
    pub(crate) const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    /// `io.modelcontextprotocol/clientInfo`.
    pub(crate) const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    /// `io.modelcontextprotocol/logLevel`.
    pub(crate) const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
}

/// Called with each progress notification of one request.
pub type ProgressFn = Arc<dyn Fn(ProgressNotificationParams) + Send + Sync>;

/// How a client behaves; the defaults suit an interactive tool.
#[derive(Clone)]
pub struct ClientOptions {
    /// Who the client is, sent to the server.
    pub client_info: Implementation,
    /// The revisions the client may speak, any order. One entry pins the
    /// client to it.
    pub revisions: Vec<ProtocolVersion>,
    /// How long a request may wait for its answer before it is cancelled.
    pub request_timeout: Duration,
    /// How long the `server/discover` probe may wait before the client
    /// concludes the server is a legacy one.
    pub probe_timeout: Duration,
    /// How many input rounds a multi round-trip request may take.
    pub max_input_rounds: usize,
    /// Answers the server's questions.
    pub handler: Arc<dyn ClientHandler>,
    /// Whether 2026-07-28 results are cached as their `ttlMs` allows.
    pub cache: bool,
    /// Which authorization context private cache entries belong to.
    pub cache_partition: String,
    /// The log level asked of a 2026-07-28 server on every request.
    pub log_level: Option<LoggingLevel>,
}

impl fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientOptions")
            .field("client_info", &self.client_info.name)
            .field("revisions", &self.revisions)
            .field("request_timeout", &self.request_timeout)
            .field("max_input_rounds", &self.max_input_rounds)
            .finish_non_exhaustive()
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            client_info: Implementation {
                name: "protocol-droid".to_owned(),
                title: None,
                version: env!("CARGO_PKG_VERSION").to_owned(),
                description: None,
                website_url: None,
                icons: None,
                extra: Map::new(),
            },
            revisions: ProtocolVersion::ALL.to_vec(),
            request_timeout: Duration::from_secs(60),
            probe_timeout: Duration::from_secs(10),
            max_input_rounds: 8,
            handler: Arc::new(Declining),
            cache: true,
            cache_partition: String::new(),
            log_level: None,
        }
    }
}

/// Per-request settings.
#[derive(Clone, Default)]
pub struct RequestOptions {
    /// Overrides [`ClientOptions::request_timeout`].
    pub timeout: Option<Duration>,
    /// Asks for progress notifications and receives them.
    pub on_progress: Option<ProgressFn>,
    /// Skips the cache for this request.
    pub fresh: bool,
    /// With [`Self::on_progress`], each progress notification starts the
    /// timeout again: the request is given up on only after the server
    /// said nothing for the whole timeout, and never later than
    /// [`MAX_PATIENCE`] (or the timeout, if longer) after it was sent.
    pub reset_timeout_on_progress: bool,
}

impl fmt::Debug for RequestOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestOptions")
            .field("timeout", &self.timeout)
            .field("on_progress", &self.on_progress.is_some())
            .field("fresh", &self.fresh)
            .field("reset_timeout_on_progress", &self.reset_timeout_on_progress)
            .finish()
    }
}

/// What was settled with the server.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerState {
    /// The revision spoken.
    pub version: ProtocolVersion,
    /// Who the server says it is, if it said.
    pub server_info: Option<Implementation>,
    /// What the server supports.
    pub capabilities: ServerCapabilities,
    /// How to use the server, for the model.
    pub instructions: Option<String>,
}

impl ServerState {
    /// The era of the revision spoken.
    #[must_use]
    pub const fn era(&self) -> Era {
        self.version.era()
    }
}

type Waiter = oneshot::Sender<Result<Answer, ClientError>>;

pub(crate) struct Inner {
    pub(crate) link: Arc<dyn Link>,
    pub(crate) options: ClientOptions,
    pub(super) pending: Mutex<HashMap<RequestId, Waiter>>,
    pub(super) progress: Mutex<HashMap<String, ProgressFn>>,
    pub(super) next_id: AtomicI64,
    pub(crate) state: RwLock<Option<ServerState>>,
    pub(super) cache: Mutex<ResultCache>,
    pub(super) tool_headers: RwLock<HashMap<String, Vec<ParamHeader>>>,
    pub(super) closed: RwLock<Option<String>>,
    /// Advanced by every notification that makes cached answers stale.
    pub(super) epoch: AtomicU64,
    /// Advanced by every handshake that replaced an expired session.
    pub(super) session_generation: AtomicU64,
    pub(super) reinit: tokio::sync::Mutex<()>,
    /// Bounds the server's own requests being answered at once.
    pub(super) answering: Arc<tokio::sync::Semaphore>,
    /// As many refusals of the server's requests as may be on their way at
    /// once; past them the reading of the server's messages waits.
    pub(super) refusing: Arc<tokio::sync::Semaphore>,
    /// The tasks the server asked this client to run.
    pub(super) own_tasks: Arc<OwnTasks>,
    /// The server's requests being answered, by id, each with the number
    /// it was started under: a `notifications/cancelled` the server sends
    /// for one stops its answer (and the handler's work on it), as the
    /// revision asks.
    pub(super) answering_now: Mutex<HashMap<RequestId, (u64, AbortHandle)>>,
    /// Numbers the entries of `answering_now`, so that an answer ending
    /// removes its own entry, not a later request's under the same id.
    pub(super) answers_started: AtomicU64,
}

/// How long an answer to a server's request may wait to be taken by the
/// transport.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// How many of a legacy server's requests are answered at once; more are
/// refused until one finishes.
pub const MAX_SERVER_REQUESTS: usize = 64;

/// A connection to one MCP server, at any revision, over any transport.
///
/// Cloning is cheap and shares the connection. Build one with
/// [`Client::connect`] over a [`Link`](super::Link), or, for a command line
/// or a URL, with the `connect` adapter, whose doc has an example;
/// `examples/client.rs` is a client that runs.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("link", &self.inner.link)
            .field("server", &self.server())
            .finish_non_exhaustive()
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Client {
    /// Starts the reader over `link`'s inbound queue, without negotiating.
    /// [`Client::connect`] is the usual entry point.
    #[must_use]
    pub fn start(link: Arc<dyn Link>, inbound: InboundRx, options: ClientOptions) -> Self {
        let inner = Arc::new(Inner {
            link,
            options,
            pending: Mutex::new(HashMap::new()),
            progress: Mutex::new(HashMap::new()),
            next_id: AtomicI64::new(1),
            state: RwLock::new(None),
            cache: Mutex::new(ResultCache::default()),
            tool_headers: RwLock::new(HashMap::new()),
            closed: RwLock::new(None),
            epoch: AtomicU64::new(0),
            session_generation: AtomicU64::new(0),
            reinit: tokio::sync::Mutex::new(()),
            answering: Arc::new(tokio::sync::Semaphore::new(MAX_SERVER_REQUESTS)),
            refusing: Arc::new(tokio::sync::Semaphore::new(MAX_SERVER_REQUESTS)),
            own_tasks: Arc::default(),
            answering_now: Mutex::new(HashMap::new()),
            answers_started: AtomicU64::new(0),
        });
        tokio::spawn(read_loop(Arc::downgrade(&inner), inbound));
        Self { inner }
    }

    /// What was settled with the server, once negotiated.
    #[must_use]
    pub fn server(&self) -> Option<ServerState> {
        self.inner
            .state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The revision spoken, once negotiated.
    #[must_use]
    pub fn version(&self) -> Option<ProtocolVersion> {
        // Read in place: every request asks, and the state holds the
        // server's whole capabilities and instructions.
        read_version(&self.inner)
    }

    /// The options the client was built with.
    #[must_use]
    pub fn options(&self) -> &ClientOptions {
        &self.inner.options
    }

    pub(crate) fn set_state(&self, state: ServerState) {
        self.inner
            .link
            .set_protocol_version(Some(state.version.as_str()));
        *self
            .inner
            .state
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(state);
    }

    /// Why the connection closed, once it has.
    #[must_use]
    pub fn closed(&self) -> Option<String> {
        self.inner
            .closed
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The capabilities the handler backs.
    pub(crate) fn capabilities(&self) -> ClientCapabilities {
        self.inner.options.handler.capabilities()
    }

    fn next_id(&self) -> RequestId {
        RequestId::Number(self.inner.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Sends one request and waits for its answer: no input rounds, no cache.
    ///
    /// # Errors
    ///
    /// As [`Self::request`], without the rounds.
    pub async fn request_once(
        &self,
        method: &str,
        params: Option<Value>,
        options: &RequestOptions,
    ) -> Result<Value, ClientError> {
        self.request_answer(method, params, options)
            .await?
            .into_value()
            .map_err(|e| ClientError::InvalidResult {
                method: method.to_owned(),
                detail: e.to_string(),
            })
    }

    /// [`Self::request_once`], its result as the transport delivered it:
    /// for a caller that reads it typed, once.
    ///
    /// # Errors
    ///
    /// As [`Self::request_once`].
    pub async fn request_answer(
        &self,
        method: &str,
        params: Option<Value>,
        options: &RequestOptions,
    ) -> Result<Answer, ClientError> {
        let version = self.version();
        let id = self.next_id();
        let heard = options
            .reset_timeout_on_progress
            .then(Heard::now)
            .filter(|_| options.on_progress.is_some());
        let progress_token = options.on_progress.as_ref().map(|callback| {
            let token = format!("p-{}", id.to_json());
            let callback: ProgressFn = match &heard {
                Some(heard) => {
                    let (heard, callback) = (heard.clone(), Arc::clone(callback));
                    Arc::new(move |progress| {
                        heard.touch();
                        callback(progress);
                    })
                }
                None => Arc::clone(callback),
            };
            lock(&self.inner.progress).insert(token.clone(), callback);
            token
        });
        let params = self.decorate(method, params, version, progress_token.as_deref());
        let hints = self.hints(method, params.as_ref());
        // Sized for its members at once: growing it rehashed the names.
        let mut message = Map::with_capacity(4);
        message.insert("jsonrpc".to_owned(), Value::from("2.0"));
        message.insert("id".to_owned(), id.to_json());
        message.insert("method".to_owned(), Value::from(method));
        if let Some(params) = params {
            message.insert("params".to_owned(), params);
        }
        let message = Value::Object(message);
        let (tx, rx) = oneshot::channel();
        lock(&self.inner.pending).insert(id.clone(), tx);
        // The handshake and the era probe are never cancelled: the revisions
        // forbid cancelling `initialize`, and a legacy server must see nothing
        // but the handshake before it. A 2026-07-28 HTTP request is cancelled
        // by closing its stream, which `Link::cancel` does; there is no
        // notification for it.
        let modern_http =
            !self.inner.link.is_stream() && version.is_none_or(|v| v.era() == Era::Modern);
        let mut guard = Pending {
            inner: &self.inner,
            id: id.clone(),
            progress_token,
            done: false,
            notify: !matches!(method, "initialize" | "server/discover") && !modern_http,
        };
        if let Some(reason) = self.closed() {
            guard.done = true;
            return Err(LinkError::Io(reason).into());
        }
        let limit = options
            .timeout
            .unwrap_or(self.inner.options.request_timeout);
        // The limit covers handing the request over too: a transport that
        // stops taking messages must not park the caller.
        let answer = within(limit, heard.as_ref(), MAX_PATIENCE, async {
            self.inner.link.send(Outgoing { message, hints }).await?;
            Ok::<_, ClientError>(rx.await)
        })
        .await;
        let answer = match answer {
            Ok(Err(error)) => {
                guard.done = true;
                return Err(error);
            }
            Ok(Ok(answer)) => Ok(answer),
            Err(elapsed) => Err(elapsed),
        };
        match answer {
            // The reader cannot tell what the answer was to; said here.
            Ok(Ok(Err(ClientError::InvalidResult {
                method: unnamed,
                detail,
            }))) if unnamed.is_empty() => {
                guard.done = true;
                Err(ClientError::InvalidResult {
                    method: method.to_owned(),
                    detail,
                })
            }
            Ok(Ok(answer)) => {
                guard.done = true;
                answer
            }
            Ok(Err(_)) => {
                guard.done = true;
                Err(LinkError::Closed.into())
            }
            Err(waited) => {
                // Dropping the guard removes the waiter and tells the server.
                drop(guard);
                Err(ClientError::Timeout {
                    method: method.to_owned(),
                    // The limit, or the whole wait when progress kept the
                    // request waited for until the ceiling.
                    millis: waited.as_millis(),
                })
            }
        }
    }

    /// Adds what the era puts in every request's params: the 2026-07-28
    /// `_meta` keys, and the progress token in either era.
    fn decorate(
        &self,
        method: &str,
        params: Option<Value>,
        version: Option<ProtocolVersion>,
        progress_token: Option<&str>,
    ) -> Option<Value> {
        let modern = match version {
            Some(v) => v.era() == Era::Modern,
            // Before negotiation only the probe is sent, and it is modern.
            None => method == "server/discover",
        };
        if !modern && progress_token.is_none() {
            return params;
        }
        let mut params = match params {
            Some(Value::Object(map)) => map,
            None => Map::new(),
            Some(other) => return Some(other),
        };
        // Changed where it lies: taken out and put back, its name was
        // hashed twice. A new one has room for all it may be given here:
        // a progress token, the revision, capabilities, identity and level.
        if !matches!(member(&params, "_meta"), Some(Value::Object(_))) {
            params.insert("_meta".to_owned(), Value::Object(Map::with_capacity(5)));
        }
        let Some(Value::Object(meta)) = member_mut(&mut params, "_meta") else {
            return Some(Value::Object(params));
        };
        if let Some(token) = progress_token {
            meta.insert("progressToken".to_owned(), Value::from(token));
        }
        if modern {
            let version = version.unwrap_or(ProtocolVersion::LATEST);
            meta.insert(
                meta::PROTOCOL_VERSION.to_owned(),
                Value::from(version.as_str()),
            );
            // What the caller put in `_meta` itself stands: a bridge speaks
            // for its own client's capabilities, identity and log level.
            // (Looked for by name, not by entry: most often they are there,
            // and an entry hashes the name.)
            if member(meta, meta::CLIENT_CAPABILITIES).is_none() {
                meta.insert(
                    meta::CLIENT_CAPABILITIES.to_owned(),
                    serde_json::to_value(self.capabilities()).unwrap_or_else(|_| json!({})),
                );
            }
            if member(meta, meta::CLIENT_INFO).is_none() {
                meta.insert(
                    meta::CLIENT_INFO.to_owned(),
                    serde_json::to_value(&self.inner.options.client_info)
                        .unwrap_or_else(|_| json!({})),
                );
            }
            if let Some(level) = self.inner.options.log_level {
                if member(meta, meta::LOG_LEVEL).is_none() {
                    meta.insert(
                        meta::LOG_LEVEL.to_owned(),
                        serde_json::to_value(level).unwrap_or(Value::Null),
                    );
                }
            }
        }
        Some(Value::Object(params))
    }

    /// The `Mcp-Param-*` values of a `tools/call`, from the tool's
    /// annotations as last listed.
    fn hints(&self, method: &str, params: Option<&Value>) -> Hints {
        if method != "tools/call" {
            return Hints::default();
        }
        let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
            return Hints::default();
        };
        let table = self
            .inner
            .tool_headers
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(headers) = table.get(name) else {
            return Hints::default();
        };
        let arguments = params
            .and_then(|p| p.get("arguments"))
            .and_then(Value::as_object);
        Hints {
            param_headers: headers::values(headers, arguments),
        }
    }

    /// Records the header annotations of listed tools.
    pub(crate) fn remember_tool_headers(&self, name: &str, headers: Vec<ParamHeader>) {
        let mut table = self
            .inner
            .tool_headers
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if headers.is_empty() {
            table.remove(name);
        } else {
            table.insert(name.to_owned(), headers);
        }
    }

    /// Sends a notification.
    ///
    /// # Errors
    ///
    /// [`ClientError::Link`] when the transport cannot deliver it.
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), ClientError> {
        let mut message = json!({ "jsonrpc": "2.0", "method": method });
        if let (Some(params), Value::Object(map)) = (params, &mut message) {
            map.insert("params".to_owned(), params);
        }
        self.inner.link.send(Outgoing::new(message)).await?;
        Ok(())
    }

    /// Closes the connection; waiting requests fail with
    /// [`LinkError::Closed`].
    pub async fn close(&self) {
        self.inner.link.close().await;
        fail_all(&self.inner, "the client closed the connection");
    }

    /// Whether the server's capabilities include `name` (`tools`,
    /// `resources`, `prompts`, `logging`, `completions`).
    #[must_use]
    pub fn server_supports(&self, name: &str) -> bool {
        self.server()
            .and_then(|s| serde_json::to_value(s.capabilities).ok())
            .is_some_and(|caps| caps.get(name).is_some())
    }
}

/// Removes a request's bookkeeping however its wait ends; if it ended
/// without an answer, cancels it at the transport and, where the revision
/// has one, tells the server with `notifications/cancelled`.
struct Pending<'a> {
    inner: &'a Arc<Inner>,
    id: RequestId,
    progress_token: Option<String>,
    done: bool,
    notify: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        lock(&self.inner.pending).remove(&self.id);
        if let Some(token) = &self.progress_token {
            lock(&self.inner.progress).remove(token);
        }
        if self.done {
            return;
        }
        self.inner.link.cancel(&self.id);
        if !self.notify {
            return;
        }
        let link = Arc::clone(&self.inner.link);
        let message = json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": { "requestId": self.id.to_json(), "reason": "the client stopped waiting" },
        });
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                if let Err(error) = link.send(Outgoing::new(message)).await {
                    tracing::debug!(%error, "could not send notifications/cancelled");
                }
            });
        }
    }
}

fn fail_all(inner: &Inner, reason: &str) {
    let first = {
        let mut closed = inner.closed.write().unwrap_or_else(PoisonError::into_inner);
        let first = closed.is_none();
        if first {
            *closed = Some(reason.to_owned());
        }
        first
    };
    inner.own_tasks.stop_all();
    let waiters: Vec<Waiter> = lock(&inner.pending).drain().map(|(_, w)| w).collect();
    for waiter in waiters {
        // A waiter that already gave up has nothing to be told.
        let _ = waiter.send(Err(LinkError::Io(reason.to_owned()).into()));
    }
    if first {
        inner.options.handler.closed(reason);
    }
}

/// Says that a response to `id` found no request waiting: one server's
/// flood of them is said once per interval.
fn unwaited(id: &RequestId) {
    static UNWAITED: Squelch = Squelch::new(Duration::from_secs(10));
    if let Some(also) = UNWAITED.admit() {
        tracing::warn!(
            id = %id.clipped(64),
            passed_over_before = also,
            "a response to no waiting request"
        );
    }
}

async fn read_loop(inner: std::sync::Weak<Inner>, mut inbound: InboundRx) {
    while let Some(item) = inbound.recv().await {
        let Some(inner) = inner.upgrade() else {
            return;
        };
        match item {
            Inbound::Message(message) => dispatch(&inner, message).await,
            Inbound::Answer { id, result } => {
                if !resolve(&inner, &id, Ok(Answer::Raw(result))) {
                    unwaited(&id);
                }
            }
            Inbound::Failed { id, error } => {
                let reason = error.to_string();
                if !resolve(&inner, &id, Err(error.into())) {
                    tracing::warn!(?id, %reason, "a transport failure for no waiting request");
                }
            }
            Inbound::Malformed(text) => {
                static MALFORMED: Squelch = Squelch::new(Duration::from_secs(10));
                if let Some(also) = MALFORMED.admit() {
                    tracing::warn!(
                        what = %text.escape_debug(),
                        passed_over_before = also,
                        "the server sent a line that is not JSON-RPC"
                    );
                }
            }
            Inbound::TooLarge { id, limit } => {
                let error = Refusal::invalid_request(format!(
                    "the request was longer than the {limit}-byte limit and was not read"
                ));
                // As another refusal: sent as room frees, the server's
                // further messages waiting meanwhile.
                let permit = Arc::clone(&inner.refusing).acquire_owned().await;
                tokio::spawn(async move {
                    reply(&inner, id, Err(error.into())).await;
                    drop(permit);
                });
            }
            // The next request starts a new session (the request path does,
            // once, in order); until then the handler hears that what it
            // listed may be stale, so that one who keeps a list (a gateway)
            // asks again, and so starts it.
            Inbound::SessionEnded => lists_may_have_changed(&inner),
            Inbound::Closed(reason) => {
                let reason =
                    reason.unwrap_or_else(|| "the server closed the connection".to_owned());
                tracing::debug!(%reason, "connection closed");
                fail_all(&inner, &reason);
                return;
            }
        }
    }
    if let Some(inner) = inner.upgrade() {
        fail_all(&inner, "the transport stopped");
    }
}

/// Hands `outcome` to the request `id` waits on; whether one was waiting.
/// A waiter that already gave up has nothing to be told.
fn resolve(inner: &Inner, id: &RequestId, outcome: Result<Answer, ClientError>) -> bool {
    let Some(waiter) = lock(&inner.pending).remove(id) else {
        return false;
    };
    let _ = waiter.send(outcome);
    true
}

async fn dispatch(inner: &Arc<Inner>, mut message: Value) {
    let method = message
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let id = message.get("id");
    match (method, id) {
        (Some(method), Some(id)) => {
            let Some(id) = RequestId::from_json(id) else {
                tracing::warn!(%method, "the server sent a request with an invalid id");
                return;
            };
            let params = message.as_object_mut().and_then(|m| m.remove("params"));
            let inner = Arc::clone(inner);
            let modern = read_version(&inner).is_some_and(|v| v.era() == Era::Modern);
            let permit = match Arc::clone(&inner.answering).try_acquire_owned() {
                Ok(permit) if !modern => Ok(permit),
                // A request refused still costs an answer sent (over HTTP, a
                // connection): refusals go out as room frees, and the
                // server's further messages wait meanwhile, so that a flood
                // of them costs it the wait, not this side its memory.
                _ => Err(Arc::clone(&inner.refusing).acquire_owned().await),
            };
            let number = inner.answers_started.fetch_add(1, Ordering::Relaxed);
            let (stop, stopped) = AbortHandle::new_pair();
            lock(&inner.answering_now).insert(id.clone(), (number, stop));
            let entry = id.clone();
            let answerer = Arc::clone(&inner);
            let answering = async move {
                let refusal = if modern {
                    // 2026-07-28 servers never send requests; questions come
                    // as input rounds.
                    Some(
                        Refusal::invalid_request("at 2026-07-28 a server does not send requests")
                            .into(),
                    )
                } else if permit.is_err() {
                    Some(
                        Refusal::internal("too many requests from the server are being answered")
                            .into(),
                    )
                } else {
                    None
                };
                match refusal {
                    Some(error) => reply(&answerer, id, Err(error)).await,
                    None => answer(&answerer, id, &method, params).await,
                }
                drop(permit);
            };
            tokio::spawn(async move {
                // Stopped by the server's cancellation: no answer is sent,
                // as the server asked for none.
                let _stopped = Abortable::new(answering, stopped).await;
                let mut answering = lock(&inner.answering_now);
                if answering.get(&entry).is_some_and(|(n, _)| *n == number) {
                    answering.remove(&entry);
                }
            });
        }
        (Some(method), None) => notice(
            inner,
            method,
            message.as_object_mut().and_then(|m| m.remove("params")),
        ),
        (None, Some(id)) => {
            let Some(id) = RequestId::from_json(id) else {
                tracing::warn!(error = ?message.get("error"), "a response without a usable id");
                return;
            };
            // Taken out, not copied: a result can be large, and nothing
            // else reads this message.
            let (result, error) = match message.as_object_mut() {
                Some(object) => (object.remove("result"), object.remove("error")),
                None => (None, None),
            };
            let outcome = match (result, error) {
                (Some(result), None) => Ok(Answer::Parsed(result)),
                (None, Some(error)) => Err(match serde_json::from_value::<ErrorObject>(error) {
                    Ok(error) => ClientError::Server(error),
                    Err(e) => ClientError::InvalidResult {
                        method: String::new(),
                        detail: format!("unreadable error object: {e}"),
                    },
                }),
                _ => Err(ClientError::InvalidResult {
                    method: String::new(),
                    detail: "a response needs exactly one of result and error".to_owned(),
                }),
            };
            if !resolve(inner, &id, outcome) {
                unwaited(&id);
            }
        }
        (None, None) => {
            static NEITHER: Squelch = Squelch::new(Duration::from_secs(10));
            if let Some(also) = NEITHER.admit() {
                tracing::warn!(
                    passed_over_before = also,
                    "the server sent a message that is neither request nor answer"
                );
            }
        }
    }
}

/// Tells the handler, as the server would, that each list the server offers
/// may have changed: its session ended, and the next may be with a server
/// restarted with other tools, prompts or resources.
pub(super) fn lists_may_have_changed(inner: &Inner) {
    let offered = inner
        .state
        .read()
        .ok()
        .and_then(|state| state.as_ref().map(|s| s.capabilities.clone()))
        .unwrap_or_default();
    let lists = [
        ("tools", offered.tools.is_some()),
        ("prompts", offered.prompts.is_some()),
        ("resources", offered.resources.is_some()),
    ];
    for list in lists
        .into_iter()
        .filter_map(|(list, offered)| offered.then_some(list))
    {
        notice(inner, format!("notifications/{list}/list_changed"), None);
    }
}

/// Hands the server's notification `method` to whatever waits on it: a
/// request's progress callback, the cache, the handler.
pub(super) fn notice(inner: &Inner, method: String, params: Option<Value>) {
    if method == "notifications/progress" {
        let token = params
            .as_ref()
            .and_then(|p| p.get("progressToken"))
            .map(|t| t.as_str().map_or_else(|| t.to_string(), str::to_owned));
        let callback = token.and_then(|t| lock(&inner.progress).get(&t).cloned());
        match (
            callback,
            params
                .clone()
                .map(serde_json::from_value::<ProgressNotificationParams>),
        ) {
            (Some(callback), Some(Ok(progress))) => callback(progress),
            (None, _) => tracing::debug!("progress for no waiting request"),
            (_, _) => tracing::warn!("unreadable progress notification"),
        }
    }
    if method == "notifications/cancelled" {
        let withdrawn = params
            .as_ref()
            .and_then(|p| p.get("requestId"))
            .and_then(RequestId::from_json);
        if let Some((_, stop)) = withdrawn.and_then(|id| lock(&inner.answering_now).remove(&id)) {
            stop.abort();
        }
    }
    if method.ends_with("/list_changed") || method == "notifications/resources/updated" {
        inner.epoch.fetch_add(1, Ordering::SeqCst);
    }
    lock(&inner.cache).invalidate(&method, params.as_ref());
    inner
        .options
        .handler
        .notification(&Notice { method, params });
}

fn read_version(inner: &Inner) -> Option<ProtocolVersion> {
    inner
        .state
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .map(|s| s.version)
}

/// Answers one request from a legacy server with the handler.
async fn answer(inner: &Inner, id: RequestId, method: &str, params: Option<Value>) {
    let handler = &inner.options.handler;
    let outcome = if method == "ping" {
        Ok(json!({}))
    } else {
        let capabilities = handler.capabilities();
        if OwnTasks::serves(&capabilities, method) {
            inner.own_tasks.answer(method, params).await
        } else {
            // A question the client runs as a task is answered at once
            // with the task; any other, by the handler in the request.
            match inner
                .own_tasks
                .start(&capabilities, handler, method, params)
            {
                Ok(created) => Ok(created),
                Err(params) => answer_with(handler.as_ref(), method, params).await,
            }
        }
    };
    reply(inner, id, outcome).await;
}

async fn reply(inner: &Inner, id: RequestId, outcome: Result<Value, ErrorObject>) {
    let mut message = json!({ "jsonrpc": "2.0", "id": id.to_json() });
    if let Value::Object(map) = &mut message {
        match outcome {
            Ok(result) => map.insert("result".to_owned(), result),
            Err(error) => map.insert("error".to_owned(), error.to_json()),
        };
    }
    // Bounded: a server that stops reading must not hold the answers, and
    // with them the reading of its messages, for ever.
    let sent = tokio::time::timeout(REPLY_TIMEOUT, inner.link.send(Outgoing::new(message)))
        .await
        .unwrap_or_else(|_| Err(LinkError::Io(format!("not taken within {REPLY_TIMEOUT:?}"))));
    if let Err(error) = sent {
        static UNSENT: Squelch = Squelch::new(Duration::from_secs(10));
        if let Some(also) = UNSENT.admit() {
            tracing::warn!(%error, passed_over_before = also, "could not answer the server");
        }
    }
}
