//! Serving requests in both eras from one server.
//!
//! A [`Server`] holds what is offered; a [`Connection`] is one client's view
//! of it (a stdio process, an HTTP session). Each request is routed by era:
//!
//! - `initialize` opens the legacy handshake, which settles the revision and
//!   the capability profile once for the connection;
//! - a request whose `_meta` carries `io.modelcontextprotocol/protocolVersion`
//!   (or a method only 2026-07-28 has) is served statelessly against its own
//!   `_meta`, whatever else the connection has done;
//! - anything else is served against the legacy session, or refused when
//!   there is none yet.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::context::no_members;
use super::host::{Change, Server};
use super::idempotency::{Admission, IdempotencyStore, Recorded};
use super::registry::{match_template, visible};
use super::reply::Reply;
use super::request_state::Round;
use super::{
    AuthContext, DynExchange, DynFrameSink, LogGate, NoExchange, PeerSession, RequestContext,
};
use crate::application::observe::{
    InFlight, Method, Outcome, RequestLabels, TraceContext, shown_uri,
};
use crate::domain::canonical::{canonical_json, request_digest};
use crate::domain::ir::JsonObject;
use crate::domain::jsonrpc::{ErrorCode, ErrorObject, Message, Notification, Request, RequestId};
use crate::domain::{
    CapabilitySet, Era, LoggingLevel, Negotiation, ProtocolVersion, Refusal, SessionId,
    TransportKind, Unknown, resolve,
};
use crate::wire::codec::{Sender, for_version};
use sha2::Digest as _;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

mod finish;
mod image;
mod listen;
mod methods;
mod request;
mod tasks;

use crate::domain::ir::member;
use finish::finish;
pub use image::{ImageChange, Lasting, SessionImage};
use methods::{binding, meta_of};
use request::{ClientRequest, Declared, Hello, TaskRequest};

/// The `_meta` key naming a 2026-07-28 request's revision.
pub const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";
/// The `_meta` key holding a 2026-07-28 request's client capabilities.
pub const CLIENT_CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";
/// The `_meta` key holding a 2026-07-28 request's client info.
pub const CLIENT_INFO_META: &str = "io.modelcontextprotocol/clientInfo";
/// The `_meta` key a result names its server under (2026-07-28).
pub const SERVER_INFO_META: &str = crate::wire::meta::SERVER_INFO;
/// The `_meta` key tagging a notification with its listen request's id.
pub const SUBSCRIPTION_ID_META: &str = "io.modelcontextprotocol/subscriptionId";

/// One client's connection to a [`Server`].
pub struct Connection {
    server: Server,
    transport: TransportKind,
    session: SessionId,
    /// The session's name among the instances sharing it (its
    /// `Mcp-Session-Id`), once the transport shares it: what its calls'
    /// shared idempotency records are keyed by.
    shared_as: std::sync::OnceLock<String>,
    exchange: Arc<dyn DynExchange>,
    sink: Arc<dyn DynFrameSink>,
    state: Mutex<ConnectionState>,
    /// How many of the session's 2025-11-25 tasks run in this process
    /// (see [`Connection::runs_tasks`]).
    tasks_running: Arc<AtomicUsize>,
    /// Whether the session made a 2025-11-25 task in this process: what is
    /// left of its tasks is forgotten when it ends, where they are its own.
    made_tasks: AtomicBool,
    /// Cancelled when the transport stops waiting for answers (its drain
    /// is over): the requests still running are then answered with an
    /// error, not left unanswered when it closes.
    stop: Option<CancellationToken>,
}

impl core::fmt::Debug for Connection {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Connection")
            .field("session", &self.session)
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct ConnectionState {
    legacy: Option<LegacySession>,
    subscribed: BTreeSet<String>,
}

/// What the `initialize` handshake settled.
#[derive(Clone)]
struct LegacySession {
    /// Persisted without a principal; each request overlays its own.
    peer: PeerSession,
    client_capabilities: Arc<JsonObject>,
    client_info: Option<Arc<JsonObject>>,
    init_meta: Arc<JsonObject>,
    /// The `initialize` params as the client sent them: what another
    /// instance settles the same session from.
    hello: Arc<JsonObject>,
}

/// A request's params as an object (none is an empty one), or the refusal
/// of anything else.
fn object_params(params: Option<Value>) -> Result<JsonObject, ErrorObject> {
    match params {
        None => Ok(JsonObject::new()),
        Some(Value::Object(map)) => Ok(map),
        Some(_) => Err(Refusal::invalid_params("params must be an object").into()),
    }
}

/// How an answer is counted; an error's code is recorded on its request's
/// span too.
fn outcome_of(span: &tracing::Span, answer: &Result<Reply, ErrorObject>) -> Outcome {
    match answer {
        Ok(_) => Outcome::Ok,
        Err(error) => {
            span.record("code", error.code.0);
            Outcome::error(error.code)
        }
    }
}

/// The longest tool, prompt or resource name a span carries, in bytes:
/// the name is the client's to choose.
const MAX_SPAN_NAME: usize = 128;

/// What a request names (a tool or prompt by `name`, a resource by `uri`),
/// cut to [`MAX_SPAN_NAME`] bytes. A URI is shown as a log line would show
/// it, without what may be a secret in it: a span goes to a collector.
fn named_target(params: &JsonObject) -> Option<String> {
    let mut shown = match member(params, "name") {
        Some(name) => name.as_str()?.to_owned(),
        None => shown_uri(member(params, "uri")?.as_str()?),
    };
    let mut end = shown.len().min(MAX_SPAN_NAME);
    while !shown.is_char_boundary(end) {
        end -= 1;
    }
    shown.truncate(end);
    Some(shown)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The methods whose results may ask for input (2026-07-28).
pub(super) const MULTI_ROUND_METHODS: [&str; 3] = ["tools/call", "prompts/get", "resources/read"];

/// How many resources one legacy session may subscribe to.
pub(crate) const MAX_SUBSCRIPTIONS: usize = 1024;

/// How many bytes of URIs one session may keep subscribed to (or watch in
/// one `subscriptions/listen`): a session keeps them for its lifetime,
/// long after the request that named them was answered.
pub(crate) const MAX_SUBSCRIBED_BYTES: usize = 256 * 1024;

/// How large a legacy session's `initialize` params (its capabilities and
/// client description) may be, as JSON: the session keeps them for its
/// lifetime.
const MAX_HELLO_BYTES: usize = 256 * 1024;

/// The methods only 2026-07-28 has, so a request for one is modern even
/// when its `_meta` is missing (and is then refused for that).
const MODERN_ONLY: [&str; 2] = ["server/discover", "subscriptions/listen"];

/// Whether `server` serves a request (other than `initialize`) the
/// 2026-07-28 way, statelessly, whatever session it arrives in: what a
/// dual-era server does with a request carrying that era's `_meta`, and a
/// transport must know before it checks the request's headers.
///
/// Only the two keys every 2026-07-28 request must carry decide it, or a
/// method only that era has: a legacy request may well carry other reserved
/// `_meta` keys (the 2025-11-25 tasks key, say) and must not be pulled over
/// by them. A legacy-only server answers as a legacy server would, so a
/// dual-era client's probe falls back to `initialize`.
#[must_use]
pub(crate) fn served_as_modern(server: &Server, method: &str, params: &JsonObject) -> bool {
    let offers_modern = server.offered().iter().any(|v| v.era() == Era::Modern);
    let declares_modern = member(params, "_meta")
        .and_then(Value::as_object)
        .is_some_and(|m| {
            member(m, PROTOCOL_VERSION_META).is_some()
                || member(m, CLIENT_CAPABILITIES_META).is_some()
        });
    offers_modern && (declares_modern || MODERN_ONLY.contains(&method))
}

impl Server {
    /// A new connection, as its own session, talking through these ports.
    #[must_use]
    pub fn connect(
        &self,
        transport: TransportKind,
        exchange: Arc<dyn DynExchange>,
        sink: Arc<dyn DynFrameSink>,
    ) -> Connection {
        Connection::open(self.clone(), self.next_session(), transport, exchange, sink)
    }
}

impl Connection {
    /// A connection of `server`'s, as `session`, talking through these ports.
    pub(super) fn open(
        server: Server,
        session: SessionId,
        transport: TransportKind,
        exchange: Arc<dyn DynExchange>,
        sink: Arc<dyn DynFrameSink>,
    ) -> Self {
        Self {
            server,
            transport,
            session,
            shared_as: std::sync::OnceLock::new(),
            exchange,
            sink,
            state: Mutex::default(),
            tasks_running: Arc::default(),
            made_tasks: AtomicBool::new(false),
            stop: None,
        }
    }

    /// This connection, its requests answered with an error once `stop`
    /// is cancelled: how a transport that is shutting down answers what
    /// still runs past its drain, rather than closing on it. A
    /// `subscriptions/listen` is not answered so: the transport ends it.
    #[must_use]
    pub(crate) fn stopping_on(mut self, stop: CancellationToken) -> Self {
        self.stop = Some(stop);
        self
    }

    /// `answering`, unless the transport stops first (see
    /// [`Self::stopping_on`]).
    async fn unless_stopped(
        &self,
        method: &str,
        answering: impl Future<Output = Result<Reply, ErrorObject>>,
    ) -> Result<Reply, ErrorObject> {
        let Some(stop) = self
            .stop
            .as_ref()
            .filter(|_| method != "subscriptions/listen")
        else {
            return answering.await;
        };
        tokio::select! {
            biased;
            answer = answering => answer,
            () = stop.cancelled() => Err(Refusal::internal(
                "the server stopped before this request was answered",
            )
            .into()),
        }
    }

    /// Whether `auth` may read (and so watch) the resource at `uri`.
    pub(super) fn can_read(&self, uri: &str, auth: &AuthContext) -> bool {
        // What is forwarded is the upstream's to refuse, once this server's
        // own scope rules let it through.
        if self.server.forwarder().is_some() {
            return self
                .server
                .forwarded_scopes()
                .admits_resource(uri, |s| auth.has_scope(s));
        }
        let registry = self.server.registry();
        let can_see = |scope: Option<&String>| visible(scope, |s| auth.has_scope(s));
        registry
            .resources
            .get(uri)
            .is_some_and(|r| can_see(r.scope.as_ref()))
            || registry.templates.values().any(|t| {
                can_see(t.scope.as_ref()) && match_template(&t.template.uri_template, uri).is_some()
            })
    }

    /// The `x-mcp-header` annotations of the tool `name`, if the 2026-07-28
    /// request from `caller` whose params are `params` may see it: what
    /// checking `Mcp-Param-*` headers reads. A tool hidden from that
    /// request (by its scope or by the [`ServerBuilder::tool_visibility`]
    /// hook, as a gateway hides deferred tools) gives `None`, as a missing
    /// one does, so a header error cannot reveal it. The hook sees the
    /// request exactly as dispatch will: its revision and capabilities.
    ///
    /// [`ServerBuilder::tool_visibility`]: super::ServerBuilder::tool_visibility
    #[must_use]
    pub fn param_headers(
        &self,
        name: &str,
        caller: &AuthContext,
        params: &JsonObject,
    ) -> Option<Vec<(String, String)>> {
        let annotated = self.server.param_headers(name, caller)?;
        // A tool with no annotated argument has no header to check, so the
        // hook (which may build a whole tool set) is not asked.
        if annotated.is_empty() {
            return Some(annotated);
        }
        // A request whose `_meta` names no revision this server offers is
        // refused by dispatch; its header mismatch is still reported first,
        // as a transport's check comes before the body is served, so the
        // hook is asked as for the newest revision.
        let declared = Declared::decode(params).ok();
        let version = declared
            .as_ref()
            .and_then(|d| self.modern_revision(d.requested).ok())
            .unwrap_or(ProtocolVersion::LATEST);
        let empty = JsonObject::new();
        let capabilities = declared.map_or(&empty, |d| d.client_capabilities);
        let peer = self.stateless_peer(version, capabilities, caller);
        (self.server.tool_access(&peer, caller, name) == super::ToolAccess::Granted)
            .then_some(annotated)
    }

    /// The peer a 2026-07-28 request is served as: its own revision and
    /// capabilities, this connection's session, nothing inherited.
    fn stateless_peer(
        &self,
        version: ProtocolVersion,
        client_capabilities: &JsonObject,
        caller: &AuthContext,
    ) -> PeerSession {
        let profile = self.server.profile(Negotiation {
            version,
            client_caps: CapabilitySet::from_client_json(client_capabilities, version),
            server_caps: self.server.capability_set(version),
            transport: self.transport,
        });
        PeerSession::new(
            version,
            profile,
            self.session,
            self.transport,
            Arc::new(NoExchange),
            Arc::clone(&self.sink),
        )
        .with_auth(caller.clone())
    }

    /// Ends the connection: forgets what its session recorded, and stops
    /// the tasks only it could reach.
    pub fn close(&self) {
        if let Some(forward) = self.server.forwarder() {
            forward.session_closed(self.session);
        }
        if let Ok(mut store) = self.server.inner.idempotency.lock() {
            store.end_session(self.session);
        }
        self.stop_session_tasks();
    }

    /// The client said its roots changed: the forwarder, if any, tells
    /// the upstreams that speak for it.
    pub fn roots_changed(&self) {
        if let Some(forward) = self.server.forwarder() {
            forward.roots_changed(self.session);
        }
    }

    /// The session this connection is.
    #[must_use]
    pub const fn session(&self) -> SessionId {
        self.session
    }

    /// The revision the legacy handshake settled, if there was one.
    #[must_use]
    pub fn negotiated(&self) -> Option<ProtocolVersion> {
        self.state
            .lock()
            .ok()
            .and_then(|s| s.legacy.as_ref().map(|l| l.peer.negotiated()))
    }

    /// Whether the client is subscribed to `uri` (legacy `resources/subscribe`).
    #[must_use]
    pub fn is_subscribed(&self, uri: &str) -> bool {
        self.state.lock().is_ok_and(|s| s.subscribed.contains(uri))
    }

    /// The notification a legacy session should receive for `change`, if any.
    #[must_use]
    pub fn legacy_notification(&self, change: &Change) -> Option<Message> {
        let version = self.negotiated()?;
        let (method, params) = match change {
            Change::Tools => ("notifications/tools/list_changed", None),
            Change::ToolsFor(session) if *session == self.session => {
                ("notifications/tools/list_changed", None)
            }
            Change::ToolsFor(_) => return None,
            Change::Log {
                session,
                level,
                logger,
                data,
            } => {
                let open = self.state.lock().is_ok_and(|s| {
                    s.legacy
                        .as_ref()
                        .is_some_and(|l| l.peer.log_gate().allows_forwarded(*level, true))
                });
                if *session != self.session || !open {
                    return None;
                }
                let params = match logger {
                    Some(logger) => json!({ "level": level, "logger": logger, "data": data }),
                    None => json!({ "level": level, "data": data }),
                };
                ("notifications/message", Some(params))
            }
            Change::TaskStatus { session, params } => {
                if *session != self.session {
                    return None;
                }
                ("notifications/tasks/status", Some(params.clone()))
            }
            Change::Prompts => ("notifications/prompts/list_changed", None),
            Change::Resources => ("notifications/resources/list_changed", None),
            Change::ResourceUpdated(uri) => {
                // A subscription a forwarder keeps on the session's own
                // connection upstream is told there alone: the same update
                // told to every watcher (a listen's) would be a second.
                let own = self
                    .server
                    .forwarder()
                    .is_some_and(|f| f.watches_for_session(self.session, uri));
                if own || !self.is_subscribed(uri) {
                    return None;
                }
                (
                    "notifications/resources/updated",
                    Some(json!({ "uri": uri })),
                )
            }
            Change::SessionResourceUpdated { session, uri } => {
                if *session != self.session || !self.is_subscribed(uri) {
                    return None;
                }
                (
                    "notifications/resources/updated",
                    Some(json!({ "uri": uri })),
                )
            }
        };
        for_version(version)
            .defines_notification(Sender::Server, method)
            .then(|| {
                Message::Notification(Notification {
                    method: method.to_owned(),
                    params,
                })
            })
    }

    /// Answers one request.
    ///
    /// Always produces the request's one answer, success or error. A
    /// `subscriptions/listen` request runs until its caller stops polling it
    /// (the transport cancels it) or the server goes away.
    ///
    /// # Errors
    ///
    /// The JSON-RPC error to answer with.
    pub async fn handle(
        &self,
        request: Request,
        ctx: RequestContext,
    ) -> Result<Value, ErrorObject> {
        self.answer(request, ctx).await.map(Reply::into_value)
    }

    /// Answers one request as [`handle`](Self::handle) does, with the result
    /// as a transport writes it: a tool's result comes typed, for the
    /// transport to write straight into its frame.
    ///
    /// # Errors
    ///
    /// The JSON-RPC error to answer with.
    pub async fn answer(
        &self,
        request: Request,
        ctx: RequestContext,
    ) -> Result<Reply, ErrorObject> {
        let Request { id, method, params } = request;
        let params = object_params(params);
        let era = match &params {
            Ok(params) if method != "initialize" && self.is_modern(&method, params) => Era::Modern,
            _ => Era::Legacy,
        };
        let (span, in_flight) = self.observed(&method, era, params.as_ref().ok(), &ctx);
        let answer = match params {
            Ok(params) => {
                let routed = self
                    .route(id, &method, params, ctx, era)
                    .instrument(span.clone());
                self.unless_stopped(&method, routed).await
            }
            Err(refused) => Err(refused),
        };
        in_flight.finish(outcome_of(&span, &answer));
        answer
    }

    /// Answers a request [`answer`](Self::answer) found to be of `era`.
    async fn route(
        &self,
        id: RequestId,
        method: &str,
        params: JsonObject,
        ctx: RequestContext,
        era: Era,
    ) -> Result<Reply, ErrorObject> {
        self.server.admit(&ctx)?;
        if method == "initialize" {
            return self.initialize(&params).map(Reply::Value);
        }
        // The context goes down the dispatch boxed: moved by value, its few
        // hundred bytes were stored twice in each step's future and copied
        // at every step of every call.
        if era == Era::Modern {
            return self.modern(id, method, params, Box::new(ctx)).await;
        }
        let legacy = self.state.lock().ok().and_then(|s| s.legacy.clone());
        match legacy {
            Some(session) => {
                self.legacy(id, method, params, Box::new(ctx), session)
                    .await
            }
            None if method == "ping" => Ok(Reply::Value(json!({}))),
            None => Err(Refusal::invalid_request(
                "not initialized: send `initialize` first, or a 2026-07-28 request \
                 carrying `_meta` with its protocol version and client capabilities",
            )
            .into()),
        }
    }

    /// Answers one request a transport already knows to be 2026-07-28 (an
    /// HTTP POST naming that revision in its header): served statelessly
    /// even without `_meta`, so a missing `_meta` is `-32602` and a removed
    /// method such as `initialize` is `-32601`, never a handshake.
    ///
    /// # Errors
    ///
    /// The JSON-RPC error to answer with.
    pub async fn handle_stateless(
        &self,
        request: Request,
        ctx: RequestContext,
    ) -> Result<Value, ErrorObject> {
        self.answer_stateless(request, ctx)
            .await
            .map(Reply::into_value)
    }

    /// Answers one 2026-07-28 request as
    /// [`handle_stateless`](Self::handle_stateless) does, with the result as
    /// a transport writes it (see [`answer`](Self::answer)).
    ///
    /// # Errors
    ///
    /// The JSON-RPC error to answer with.
    pub async fn answer_stateless(
        &self,
        request: Request,
        ctx: RequestContext,
    ) -> Result<Reply, ErrorObject> {
        let Request { id, method, params } = request;
        let params = object_params(params);
        let (span, in_flight) = self.observed(&method, Era::Modern, params.as_ref().ok(), &ctx);
        let answer = match params {
            Ok(params) => {
                let routed = async {
                    self.server.admit(&ctx)?;
                    self.modern(id, &method, params, Box::new(ctx)).await
                }
                .instrument(span.clone());
                self.unless_stopped(&method, routed).await
            }
            Err(refused) => Err(refused),
        };
        in_flight.finish(outcome_of(&span, &answer));
        answer
    }

    /// The span a request of `method` in `era` is served in: its method,
    /// era, transport and session, the subject of its caller's token, the
    /// tool, prompt or resource it names, and (once answered) its outcome;
    /// continued from the trace its client sent in `_meta`, if any. Nothing
    /// else of the request (arguments, tokens) is in it.
    fn span(
        &self,
        method: &str,
        era: Era,
        params: Option<&JsonObject>,
        ctx: &RequestContext,
    ) -> tracing::Span {
        // Debug, not info: a log asked for at info (`DROID_LOG=droid=info`)
        // must not make every request build a span nobody exports.
        let span = tracing::debug_span!(
            target: "droid::request",
            "mcp.request",
            method = Method::of(method).as_str(),
            era = era.as_str(),
            transport = self.transport.as_str(),
            session = %self.session,
            subject = ctx.auth.subject(),
            primitive = params.and_then(named_target).as_deref(),
            trace_id = tracing::field::Empty,
            outcome = tracing::field::Empty,
            code = tracing::field::Empty,
        );
        if span.is_disabled() {
            return span;
        }
        let incoming = params
            .and_then(|params| member(params, "_meta"))
            .and_then(Value::as_object)
            .and_then(TraceContext::from_meta);
        if let Some(trace) = &incoming {
            span.record("trace_id", trace.trace_id());
        }
        self.server
            .observer()
            .request_span(&span, incoming.as_ref());
        span
    }

    /// The span a request of `method` in `era` is served in, and its report
    /// to the server's observer: started now and, unless finished, cancelled
    /// when dropped. `params` are `None` when they were not an object.
    fn observed(
        &self,
        method: &str,
        era: Era,
        params: Option<&JsonObject>,
        ctx: &RequestContext,
    ) -> (tracing::Span, InFlight<'_>) {
        let span = self.span(method, era, params, ctx);
        let observer = self.server.observer();
        // Nothing observes (stdio, or a library user who set no observer):
        // the method is not looked up nor the clock read for it.
        let in_flight = if observer.is_active() {
            let labels = RequestLabels {
                method: Method::of(method),
                era,
                transport: self.transport,
            };
            InFlight::start(&**observer, labels, span.clone())
        } else {
            InFlight::unwatched(span.clone())
        };
        (span, in_flight)
    }

    fn is_modern(&self, method: &str, params: &JsonObject) -> bool {
        served_as_modern(&self.server, method, params)
    }

    fn initialize(&self, params: &JsonObject) -> Result<Value, ErrorObject> {
        let legacy: Vec<ProtocolVersion> = self
            .server
            .offered()
            .iter()
            .copied()
            .filter(|v| v.era() == Era::Legacy)
            .collect();
        // The profile is settled once per session; a second handshake would
        // change what the client was already promised.
        if self.negotiated().is_some() {
            return Err(Refusal::invalid_request("this session is already initialized").into());
        }
        if serde_json::to_vec(params).map_or(true, |json| json.len() > MAX_HELLO_BYTES) {
            return Err(Refusal::invalid_params(format!(
                "the initialize params are larger than {} KiB, the most a session keeps",
                MAX_HELLO_BYTES / 1024
            ))
            .into());
        }
        let hello = Hello::decode(params)?;
        // Echo a supported revision; otherwise answer with our newest and let
        // the client decide (the spec's negotiation). A modern-only server
        // has nothing to offer and says what it supports instead.
        let version =
            match ProtocolVersion::from_wire(hello.requested).filter(|v| legacy.contains(v)) {
                Some(v) => v,
                None => match legacy.last() {
                    Some(v) => *v,
                    None => {
                        return Err(Refusal::NoHandshake {
                            requested: hello.requested.to_owned(),
                            supported: self.server.offered().iter().map(|v| v.as_str()).collect(),
                        }
                        .into());
                    }
                },
            };
        let server_caps = self.settle(version, &hello, params);
        let mut result = JsonObject::new();
        result.insert("protocolVersion".to_owned(), json!(version.as_str()));
        result.insert("capabilities".to_owned(), Value::Object(server_caps));
        result.insert("serverInfo".to_owned(), self.server.server_info());
        if let Some(instructions) = &self.server.inner.instructions {
            result.insert("instructions".to_owned(), json!(instructions));
        }
        Ok(Value::Object(result))
    }

    /// Settles the session at `version` for the client `hello` describes:
    /// what `initialize` does here, and what restoring a session another
    /// instance settled does. Answers the capabilities this server declared.
    fn settle(
        &self,
        version: ProtocolVersion,
        hello: &Hello<'_>,
        params: &JsonObject,
    ) -> JsonObject {
        let client_capabilities = hello.capabilities.clone();
        let server_caps = self.server.capabilities(version);
        let profile = resolve(Negotiation {
            version,
            client_caps: CapabilitySet::from_client_json(&client_capabilities, version),
            server_caps: CapabilitySet::from_server_json(&server_caps, version),
            transport: self.transport,
        });
        let peer = PeerSession::new(
            version,
            profile,
            self.session,
            self.transport,
            Arc::clone(&self.exchange),
            Arc::clone(&self.sink),
        );
        let session = LegacySession {
            peer,
            client_capabilities: Arc::new(client_capabilities),
            client_info: hello.client_info.cloned().map(Arc::new),
            init_meta: Arc::new(hello.meta.cloned().unwrap_or_default()),
            hello: Arc::new(params.clone()),
        };
        if let Ok(mut state) = self.state.lock() {
            state.legacy = Some(session);
        }
        server_caps
    }

    /// Names this connection's session `name` among the instances sharing
    /// it (see [`Server::share`]): its `tools/call`s are then recorded
    /// where every instance reads them, so a retry that reaches another
    /// instance replays the answer. Set once; later names are ignored.
    pub fn share_as(&self, name: impl Into<String>) {
        if self.shared_as.set(name.into()).is_err() {
            return;
        }
        if let (Some(forward), Some(name)) = (self.server.forwarder(), self.shared_as.get()) {
            forward.session_shared(self.session, name);
        }
    }

    async fn legacy(
        &self,
        id: RequestId,
        method: &str,
        params: JsonObject,
        mut ctx: Box<RequestContext>,
        session: LegacySession,
    ) -> Result<Reply, ErrorObject> {
        let version = session.peer.negotiated();
        let forwarding = self.server.forwarder().is_some();
        let request = ClientRequest::decode(method, &params, version, forwarding)?;
        ctx.protocol_version = Some(version);
        ctx.client_capabilities = Arc::clone(&session.client_capabilities);
        ctx.client_info = session.client_info.clone();
        ctx.init_meta = Arc::clone(&session.init_meta);
        ctx.request_meta = meta_of(&params);
        ctx.log_level = session.peer.log_gate().threshold();
        let peer = session.peer.clone().with_auth(ctx.auth.clone());
        let result = match request {
            ClientRequest::Ping => Ok(Reply::Value(json!({}))),
            ClientRequest::SetLevel(level) => {
                self.set_level(level);
                Ok(Reply::Value(json!({})))
            }
            ClientRequest::Subscribe { ref uri } => {
                self.subscription(uri, true, &ctx.auth).map(Reply::Value)
            }
            ClientRequest::Unsubscribe { ref uri } => {
                self.subscription(uri, false, &ctx.auth).map(Reply::Value)
            }
            ClientRequest::Task(task) => Box::pin(self.legacy_task_request(task, &ctx)).await,
            // A stdio session ends with its pipe, so no retry can ever reach
            // a recorded answer there: recording one would only cost every
            // call a digest, a store entry and a copy of its result.
            ClientRequest::CallTool { ref name }
                if self.transport == TransportKind::Stdio && !forwarding =>
            {
                self.call_tool(name, params, ctx, peer).await
            }
            // Boxed, as every arm but the one above: inline, the largest arm
            // sets the size of the whole future, which every request's task
            // allocates and copies.
            ClientRequest::CallTool { .. } if self.transport != TransportKind::Stdio => {
                Box::pin(self.call_tool_once(id, method, request, params, ctx, peer)).await
            }
            request => Box::pin(self.common(method, request, params, ctx, peer)).await,
        };
        result.map(|reply| finish(reply, method, version, &self.server))
    }

    /// `logging/setLevel`: the session's log gate opens at `level`.
    fn set_level(&self, level: LoggingLevel) {
        if let Ok(mut state) = self.state.lock() {
            if let Some(legacy) = state.legacy.as_mut() {
                legacy.peer = legacy.peer.clone().with_log_gate(LogGate::at(level));
            }
        }
    }

    /// `resources/subscribe` (or, unless `subscribe`, `unsubscribe`) of `uri`.
    fn subscription(
        &self,
        uri: &str,
        subscribe: bool,
        auth: &AuthContext,
    ) -> Result<Value, ErrorObject> {
        if subscribe && !self.can_read(uri, auth) {
            // Through a forwarder a URI nobody offers is accepted (the
            // upstream is the one to know), so a hidden one is accepted too,
            // and neither kept nor passed on.
            if self.server.forwarder().is_some() {
                return Ok(json!({}));
            }
            return Err(Refusal::from(Unknown::Subscription(uri.to_owned())).into());
        }
        let mut changed = false;
        let mut declared = None;
        if let Ok(mut state) = self.state.lock() {
            declared = state
                .legacy
                .as_ref()
                .map(|l| Arc::clone(&l.client_capabilities));
            if !subscribe {
                changed = state.subscribed.remove(uri);
            } else if !state.subscribed.contains(uri) {
                if state.subscribed.len() >= MAX_SUBSCRIPTIONS {
                    return Err(Refusal::invalid_params(format!(
                        "at most {MAX_SUBSCRIPTIONS} resource subscriptions per session"
                    ))
                    .into());
                }
                let held: usize = state.subscribed.iter().map(String::len).sum();
                if held.saturating_add(uri.len()) > MAX_SUBSCRIBED_BYTES {
                    return Err(Refusal::invalid_params(format!(
                        "at most {} KiB of subscribed resource URIs per session",
                        MAX_SUBSCRIBED_BYTES / 1024
                    ))
                    .into());
                }
                changed = state.subscribed.insert(uri.to_owned());
            }
        }
        // The forwarder counts watchers, so it hears of changes only.
        if let Some(forward) = self.server.forwarder().filter(|_| changed) {
            let declared = declared.unwrap_or_default();
            forward.session_subscription(self.session, &declared, uri, subscribe);
        }
        Ok(json!({}))
    }

    /// A legacy `tools/call`, made idempotent per session: a retry of the
    /// same request replays its recorded answer, a duplicate while the first
    /// runs is refused, and nothing crosses sessions. Used on the transports
    /// whose session outlives a connection (Streamable HTTP, HTTP+SSE): there
    /// a client that lost an answer retries on a new one.
    async fn call_tool_once(
        &self,
        id: RequestId,
        method: &str,
        request: ClientRequest,
        params: JsonObject,
        ctx: Box<RequestContext>,
        peer: PeerSession,
    ) -> Result<Reply, ErrorObject> {
        // A recorded answer is replayed only to a caller who may still see
        // the tool: one whose token has lost its scope since is answered as
        // a new call would be (an unknown tool), not given the answer again.
        if let ClientRequest::CallTool { name } = &request {
            if !self.server.scopes_admit_tool(name, &ctx.auth) {
                return self.common(method, request, params, ctx, peer).await;
            }
        }
        let digest = request_digest(&params);
        if let (Some(name), Some(shared)) = (self.shared_as.get(), self.server.shared_sessions()) {
            let ledger = Arc::clone(&shared.idempotency);
            return Box::pin(
                self.call_tool_shared(ledger, name, id, digest, method, request, params, ctx, peer),
            )
            .await;
        }
        let admission = self
            .server
            .inner
            .idempotency
            .lock()
            .map_or(Admission::Full, |mut store| {
                store.admit(peer.session(), &id, digest, now_ms())
            });
        match admission {
            Admission::Fresh => {}
            Admission::Replay(Recorded::Result(reply)) => return Ok(reply),
            Admission::Replay(Recorded::Error(value)) => {
                return Err(serde_json::from_value(value)
                    .unwrap_or_else(|_| Refusal::internal("recorded error unreadable").into()));
            }
            Admission::InFlight => return Err(in_progress(&id)),
            Admission::Conflict => return Err(reused(&id)),
            Admission::Full => return Err(session_full()),
        }
        // Cancelled calls are dropped mid-await; the guard then frees the
        // entry so the id is not held "in flight" for ever.
        let mut guard = Admitted {
            store: &self.server.inner.idempotency,
            session: peer.session(),
            id: Some(id),
        };
        let outcome = self.common(method, request, params, ctx, peer).await;
        match &outcome {
            Ok(reply) => guard.record_result(reply),
            // A failure of this server's (a timed-out question, a closed
            // connection) is no answer worth replaying, nor is a rate
            // limit's refusal (the retry is what it asked for): the guard
            // abandons the entry and a retry runs again.
            Err(e) if e.code == ErrorCode::INTERNAL_ERROR || e.code == ErrorCode::RATE_LIMITED => {}
            Err(e) => guard.record(Recorded::Error(e.to_json())),
        }
        outcome
    }

    /// [`Self::call_tool_once`] for a session shared between instances:
    /// the record of what the call answered, or that it runs, is the
    /// shared one, so a retry on another instance replays it and a
    /// duplicate there is refused while this instance runs it.
    #[allow(clippy::too_many_arguments)] // One caller; a struct would only rename them.
    async fn call_tool_shared(
        &self,
        ledger: Arc<dyn super::IdempotencyLedger>,
        session: &str,
        id: RequestId,
        digest: crate::domain::canonical::RequestDigest,
        method: &str,
        request: ClientRequest,
        params: JsonObject,
        ctx: Box<RequestContext>,
        peer: PeerSession,
    ) -> Result<Reply, ErrorObject> {
        use super::SharedAdmission;
        let key = id.to_json().to_string();
        let limits = self.server.inner.idempotency.lock().map_or_else(
            |_| super::IdempotencyLimits::default(),
            |store| *store.limits(),
        );
        let unavailable = |error: super::StoreError| {
            tracing::warn!(target: "droid", %error, "a call's shared record could not be read or written");
            ErrorObject::new(
                ErrorCode::STORE_UNAVAILABLE,
                "the shared idempotency record is unavailable; retry",
            )
        };
        let token = crate::application::random::secret_hex()
            .ok_or_else(|| ErrorObject::from(Refusal::internal("no randomness for a token")))?;
        match ledger
            .admit(
                session,
                &key,
                *digest.as_bytes(),
                &token,
                CALL_LEASE.as_millis().try_into().unwrap_or(u64::MAX),
                limits.per_session,
            )
            .await
            .map_err(|error| {
                // The store may have taken the mark and only its answer
                // been lost (a store too slow to answer in time): the
                // retry this error asks for comes under another token, and
                // would be refused as in progress for the whole lease.
                give_back(
                    Arc::clone(&ledger),
                    session.to_owned(),
                    key.clone(),
                    token.clone(),
                    Mark::Unknown,
                );
                unavailable(error)
            })? {
            SharedAdmission::Fresh => {}
            SharedAdmission::Replay(recorded) => return replayed(&recorded),
            SharedAdmission::InFlight => return Err(in_progress(&id)),
            SharedAdmission::Conflict => return Err(reused(&id)),
            SharedAdmission::Full => return Err(session_full()),
        }
        let mut guard = SharedAdmitted {
            ledger: Some(Arc::clone(&ledger)),
            session: session.to_owned(),
            id: key.clone(),
            token: token.clone(),
            renewing: renew_lease(Arc::clone(&ledger), session, &key, digest, &token),
        };
        let outcome = self.common(method, request, params, ctx, peer).await;
        let too_large = match super::idempotency::too_large(limits.max_record_bytes) {
            Recorded::Error(error) => json!({ "error": error }).to_string(),
            Recorded::Result(_) => String::new(),
        };
        let kept = match &outcome {
            Ok(reply) if super::idempotency::measure(reply) <= limits.max_record_bytes => {
                Some(json!({ "result": reply }).to_string())
            }
            Ok(_) => Some(too_large.clone()),
            // As for a call of one instance's: this server's own failures
            // and rate limits are not answers to replay.
            Err(e) if e.code == ErrorCode::INTERNAL_ERROR || e.code == ErrorCode::RATE_LIMITED => {
                None
            }
            Err(e) => Some(json!({ "error": e.to_json() }).to_string()),
        };
        if let Some(kept) = kept {
            guard.ledger = None;
            guard.renewing.abort();
            let call = super::CallRecord {
                session,
                id: &key,
                digest: *digest.as_bytes(),
                token: &token,
                outcome: &kept,
                too_large: &too_large,
                ttl_ms: limits.ttl_ms,
                session_bytes: limits.per_session_bytes,
                bytes_in_all: limits.max_bytes,
                answers_in_all: limits.capacity,
            };
            match ledger.record(call).await {
                Ok(true) => {}
                // Taken over by another admission, or nothing fits: the
                // answer stands, only its replay is lost.
                Ok(false) => {
                    tracing::debug!(target: "droid", "a call's answer was not recorded for replay");
                }
                Err(error) => {
                    tracing::warn!(target: "droid", %error, "a call's answer could not be recorded for replay");
                }
            }
        }
        outcome
    }

    async fn modern(
        &self,
        id: RequestId,
        method: &str,
        mut params: JsonObject,
        mut ctx: Box<RequestContext>,
    ) -> Result<Reply, ErrorObject> {
        // A method the revision removed (or never had) is not found whatever
        // its `_meta` says: that is what tells a client it asked the wrong
        // era. So the method is decoded before the `_meta` is read, at the
        // era's newest revision (its only one so far).
        let forwarding = self.server.forwarder().is_some();
        // The tasks extension's methods are this server's only when it runs
        // tasks (a bridge's too: its tasks are its own); otherwise they are
        // as unknown as the core table says.
        let request =
            if TaskRequest::EXTENSION_METHODS.contains(&method) && self.server.offers_tasks() {
                ClientRequest::Task(TaskRequest::decode_extension(method, &params)?)
            } else {
                ClientRequest::decode(method, &params, ProtocolVersion::LATEST, forwarding)?
            };
        let declared = Declared::decode(&params)?;
        let version = self.modern_revision(declared.requested)?;
        // A fresh peer per request: nothing is inherited from an earlier one.
        let gate = declared.log_level.map_or_else(LogGate::closed, LogGate::at);
        let peer = self
            .stateless_peer(version, declared.client_capabilities, &ctx.auth)
            .with_log_gate(gate);
        ctx.protocol_version = Some(version);
        ctx.client_capabilities = if declared.client_capabilities.is_empty() {
            no_members()
        } else {
            Arc::new(declared.client_capabilities.clone())
        };
        ctx.client_info = declared.client_info.cloned().map(Arc::new);
        ctx.log_level = gate.threshold();
        // A request served here reads its `_meta` from the context only, so
        // it is moved there rather than copied; one forwarded keeps it in
        // the params it is handed on with, and a stream or a task request
        // reads the params whole.
        let meta_moves =
            !forwarding && !matches!(request, ClientRequest::Listen | ClientRequest::Task(_));
        if !meta_moves {
            ctx.request_meta = declared.meta.clone();
        }
        // Anything but an object (or a null, as some clients write an
        // absent member) is refused, not read as no answers: that would
        // spend a round a client meant to answer.
        ctx.input_responses = match member(&params, "inputResponses") {
            None | Some(Value::Null) => JsonObject::new(),
            Some(Value::Object(responses)) => responses.clone(),
            Some(_) => {
                return Err(Refusal::invalid_params("`inputResponses` must be an object").into());
            }
        };
        let result = match request {
            ClientRequest::Discover => Ok(Reply::Value(self.discover(version))),
            // Boxed, as the task requests below: a stream held open is
            // rare beside calls, and inline its future would be most of the
            // one every request of this era moves.
            ClientRequest::Listen => {
                return Box::pin(self.listen(&id, &params, &peer, &ctx))
                    .await
                    .map(Reply::Value);
            }
            ClientRequest::Task(task) => {
                Box::pin(self.extension_task_request(task, &params, &ctx, &peer)).await
            }
            request => {
                if meta_moves {
                    if let Some(Value::Object(meta)) = params.shift_remove("_meta") {
                        ctx.request_meta = meta;
                    }
                }
                self.open_state(method, &params, &mut ctx).await?;
                self.common(method, request, params, ctx, peer).await
            }
        };
        result.map(|reply| finish(reply, method, version, &self.server))
    }

    /// The 2026-07-28-era revision `requested` names, if this server offers it.
    fn modern_revision(&self, requested: &str) -> Result<ProtocolVersion, Refusal> {
        let offered = self.server.offered();
        ProtocolVersion::from_wire(requested)
            .filter(|v| v.era() == Era::Modern && offered.contains(v))
            // Every revision offered, newest first, as `server/discover`
            // lists them: a dual-era client learns it may fall back.
            .ok_or_else(|| Refusal::UnsupportedVersion {
                requested: requested.to_owned(),
                supported: offered.iter().rev().map(|v| v.as_str()).collect(),
            })
    }

    fn discover(&self, version: ProtocolVersion) -> Value {
        let mut supported: Vec<&str> = self.server.offered().iter().map(|v| v.as_str()).collect();
        supported.reverse();
        let mut result = JsonObject::new();
        result.insert("supportedVersions".to_owned(), json!(supported));
        result.insert(
            "capabilities".to_owned(),
            Value::Object(self.server.capabilities(version)),
        );
        if let Some(instructions) = &self.server.inner.instructions {
            result.insert("instructions".to_owned(), json!(instructions));
        }
        Value::Object(result)
    }

    /// Verifies a retry's `requestState` and binds the context to the
    /// request. Only the three methods that can ask for input carry one.
    async fn open_state(
        &self,
        method: &str,
        params: &JsonObject,
        ctx: &mut RequestContext,
    ) -> Result<(), ErrorObject> {
        if !MULTI_ROUND_METHODS.contains(&method) {
            return Ok(());
        }
        let Some(sealed) = params.get("requestState") else {
            return Ok(());
        };
        let Some(sealed) = sealed.as_str() else {
            return Err(Refusal::invalid_params("`requestState` must be a string").into());
        };
        // Only a retry is bound to its digest here: a first round's state is
        // sealed with one worked out when the handler asks (most requests
        // never do, and the canonical form and SHA-256 are a large part of a
        // small call).
        let digest = request_digest(params);
        ctx.request_digest = Some(digest);
        let binding = binding(method, params, &ctx.auth, ctx.remote_addr, digest);
        let payload = self
            .server
            .inner
            .sealer
            .read()
            .map_err(|_| Refusal::internal("the state key is unavailable"))?
            .open_round(sealed, &binding, now_ms())
            .map_err(|e| Refusal::invalid_params(format!("requestState refused: {e}")))?;
        // Only answers to what the round asked are the round's (a state
        // sealed before rounds named their keys takes every answer): the
        // others are passed over, and the handler never sees them either,
        // or a retry could carry the round's answers again beside another
        // answer to a question the handler asks later. A retry that
        // answers nothing (no member, a null, an empty object, or only keys
        // never asked) spends no round: its handler only asks again, and
        // the answers the client then sends are still the round's first.
        if let Some(asked) = &payload.asked {
            ctx.input_responses
                .retain(|key, _| asked.iter().any(|k| k == key));
        }
        if ctx.input_responses.is_empty() {
            ctx.request_state = Some(payload.payload);
            return Ok(());
        }
        // Lent to the canonical form as a value and taken back, not copied.
        let answers = Value::Object(std::mem::take(&mut ctx.input_responses));
        let responses: [u8; 32] = sha2::Sha256::digest(canonical_json(&answers)).into();
        if let Value::Object(answers) = answers {
            ctx.input_responses = answers;
        }
        let ledger = self
            .server
            .inner
            .rounds
            .read()
            .map(|ledger| Arc::clone(&ledger))
            .map_err(|_| Refusal::internal("the round ledger is unavailable"))?;
        let round = ledger
            .answer(payload.id, payload.expires_at_ms, responses, now_ms())
            .await
            .map_err(|error| {
                // The reason names the store's address: the operator's log
                // has it, the client is told only what failed.
                tracing::warn!(target: "droid", %error, "a requestState round could not be checked");
                ErrorObject::new(
                    ErrorCode::STORE_UNAVAILABLE,
                    "requestState could not be checked: the shared store is unavailable; retry",
                )
            })?;
        if round == Round::Conflict {
            return Err(Refusal::invalid_params(
                "requestState refused: this round was already answered with other \
                 inputResponses; start the request again",
            )
            .into());
        }
        ctx.request_state = Some(payload.payload);
        Ok(())
    }
}

/// The refusal of a duplicate of call `id`, which is running now.
fn in_progress(id: &RequestId) -> ErrorObject {
    Refusal::invalid_request(format!("request {id} is already in progress")).into()
}

/// The refusal of call `id`, whose id this session used for another call.
fn reused(id: &RequestId) -> ErrorObject {
    Refusal::invalid_request(format!(
        "request id {id} was already used for a different call"
    ))
    .into()
}

/// A recorded answer, as the shared record keeps it, answered again.
fn replayed(recorded: &str) -> Result<Reply, ErrorObject> {
    let value: Value = serde_json::from_str(recorded)
        .map_err(|_| Refusal::internal("recorded answer unreadable"))?;
    if let Some(result) = value.get("result") {
        return Ok(Reply::Value(result.clone()));
    }
    let error = value
        .get("error")
        .cloned()
        .ok_or_else(|| Refusal::internal("recorded answer unreadable"))?;
    Err(serde_json::from_value(error)
        .unwrap_or_else(|_| Refusal::internal("recorded error unreadable").into()))
}

/// How long a running call's mark in the shared record lasts unless its
/// instance renews it: a call whose instance died runs again on a retry
/// at most this long after.
const CALL_LEASE: std::time::Duration = std::time::Duration::from_secs(15);

/// How often a running call's lease is renewed: three times a lease, so a
/// renewal or two lost to a slow store does not let it lapse.
const CALL_RENEWAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Renews a running call's lease every [`CALL_RENEWAL`] until aborted, or
/// until the lease is found lost.
fn renew_lease(
    ledger: Arc<dyn super::IdempotencyLedger>,
    session: &str,
    id: &str,
    digest: crate::domain::canonical::RequestDigest,
    token: &str,
) -> tokio::task::AbortHandle {
    let (session, id, token) = (session.to_owned(), id.to_owned(), token.to_owned());
    let lease = CALL_LEASE.as_millis().try_into().unwrap_or(u64::MAX);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(CALL_RENEWAL).await;
            let renewed = ledger.renew(&session, &id, *digest.as_bytes(), &token, lease);
            if matches!(renewed.await, Ok(false)) {
                return;
            }
        }
    })
    .abort_handle()
}

/// The refusal of a call when its session holds as many calls as it may.
fn session_full() -> ErrorObject {
    Refusal::invalid_request(
        "this session has as many calls in progress as it may; wait for one to finish",
    )
    .into()
}

/// A call admitted in the shared record and not yet recorded: its lease
/// renewal stops when dropped, and it is abandoned (cancelled, or ended
/// with nothing worth replaying), so a retry runs it again.
struct SharedAdmitted {
    ledger: Option<Arc<dyn super::IdempotencyLedger>>,
    session: String,
    id: String,
    token: String,
    renewing: tokio::task::AbortHandle,
}

impl Drop for SharedAdmitted {
    fn drop(&mut self) {
        self.renewing.abort();
        let Some(ledger) = self.ledger.take() else {
            return;
        };
        let (session, id, token) = (
            core::mem::take(&mut self.session),
            core::mem::take(&mut self.id),
            core::mem::take(&mut self.token),
        );
        give_back(ledger, session, id, token, Mark::Held);
    }
}

/// Whether a mark to forget is known to be in the shared record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mark {
    /// Admitted: forgotten once the store answers.
    Held,
    /// The admission's answer was lost (the store too slow to answer in
    /// time): the mark may be taken later still, even after a first try
    /// found nothing to forget, once the admission reaches the store (on a
    /// connection the client gave up on), so it is tried again until the
    /// lease would have lapsed.
    Unknown,
}

/// Forgets call `id`'s mark in the shared record if `token` still holds it,
/// in the background, trying again while the store does not answer (for
/// as long as the mark's lease would keep it): a mark left behind would
/// have every retry refused as in progress until its lease lapsed. Only
/// `token`'s mark is forgotten, so a retry admitted meanwhile keeps its
/// own. Outside a runtime there is nothing to run it, and the mark lapses
/// with its lease.
fn give_back(
    ledger: Arc<dyn super::IdempotencyLedger>,
    session: String,
    id: String,
    token: String,
    mark: Mark,
) {
    // Dropped inside the runtime (a cancelled call is dropped by its task).
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    // Marks of unknown fate are looked for again only so many at once: a
    // store that stalls under many calls is not sent ten times as many
    // scripts as it comes back; past that, one try, and the rest lapse.
    static UNKNOWN: AtomicUsize = AtomicUsize::new(0);
    let patient = mark == Mark::Held
        || UNKNOWN
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_UNKNOWN_MARKS).then_some(n + 1)
            })
            .is_ok();
    runtime.spawn(async move {
        let deadline = tokio::time::Instant::now() + CALL_LEASE;
        let mut wait = GIVE_BACK_RETRY;
        loop {
            let forgot = ledger.abandon(&session, &id, &token).await;
            // Held: done once the store answered. Unknown: done once it
            // was found and forgotten (or when a try finds nothing yet,
            // the admission may still be on its way).
            let done = match mark {
                Mark::Held => forgot.is_ok(),
                Mark::Unknown => forgot.unwrap_or(false),
            };
            let retry = tokio::time::Instant::now() + wait;
            if done || !patient || retry >= deadline {
                break;
            }
            tokio::time::sleep_until(retry).await;
            wait = wait.saturating_mul(2).min(GIVE_BACK_RETRY_MOST);
        }
        if patient && mark == Mark::Unknown {
            UNKNOWN.fetch_sub(1, Ordering::AcqRel);
        }
    });
}

/// How many marks of unknown fate are looked for again at once.
const MAX_UNKNOWN_MARKS: usize = 1024;

/// How long a mark to forget waits before it is tried again, the first
/// time; twice as long each time after, up to [`GIVE_BACK_RETRY_MOST`].
const GIVE_BACK_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

/// The longest a mark to forget waits between two tries.
const GIVE_BACK_RETRY_MOST: std::time::Duration = std::time::Duration::from_secs(2);

/// An admitted call not yet recorded: abandoned on drop.
struct Admitted<'a> {
    store: &'a Mutex<IdempotencyStore>,
    session: SessionId,
    id: Option<RequestId>,
}

impl Admitted<'_> {
    fn record_result(&mut self, reply: &Reply) {
        let Some(id) = self.id.take() else {
            return;
        };
        let limit = self
            .store
            .lock()
            .map_or(0, |store| store.limits().max_record_bytes);
        // Measured and copied outside the lock every session's calls share.
        let size = super::idempotency::measure(reply);
        let outcome = (size <= limit).then(|| Recorded::Result(reply.clone()));
        if let Ok(mut store) = self.store.lock() {
            let _recorded = store.record_measured(self.session, &id, outcome, size, now_ms());
        }
    }

    fn record(&mut self, outcome: Recorded) {
        if let (Some(id), Ok(mut store)) = (self.id.take(), self.store.lock()) {
            let _recorded = store.record(self.session, &id, outcome, now_ms());
        }
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        if let (Some(id), Ok(mut store)) = (self.id.take(), self.store.lock()) {
            let _abandoned = store.abandon(self.session, &id);
        }
    }
}
