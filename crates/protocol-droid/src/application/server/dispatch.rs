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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::call::{Call, CallError};
use super::context::{
    AuthContext, DynExchange, DynFrameSink, LogGate, NoExchange, PeerSession, RequestContext,
};
use super::idempotency::{Admission, IdempotencyStore, Recorded};
use super::registry::{Handler, Registry, ToolSpec, handler, match_template, visible};
use super::request_state::{KeyError, StateBinding, StateSealer};
use crate::adapters::secondary::codec::wire::prompts::{GetPromptResult, Prompt};
use crate::adapters::secondary::codec::wire::resources::{Resource, ResourceTemplate};
use crate::adapters::secondary::codec::{Sender, for_version};
use crate::domain::canonical::request_digest;
use crate::domain::ir::{JsonObject, ResourceContents, ToolResult, TranslationReport};
use crate::domain::jsonrpc::{ErrorCode, ErrorObject, Message, Notification, Request, RequestId};
use crate::domain::{
    CapabilitySet, DegradePolicy, Era, Feature, LoggingLevel, Negotiation, ProtocolVersion,
    SessionId, TransportKind, resolve,
};

/// The `_meta` key naming a 2026-07-28 request's revision.
pub const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";
/// The `_meta` key holding a 2026-07-28 request's client capabilities.
pub const CLIENT_CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";
/// The `_meta` key holding a 2026-07-28 request's client info.
pub const CLIENT_INFO_META: &str = "io.modelcontextprotocol/clientInfo";
/// The `_meta` key a result names its server under (2026-07-28).
pub const SERVER_INFO_META: &str = "io.modelcontextprotocol/serverInfo";
/// The `_meta` key tagging a notification with its listen request's id.
pub const SUBSCRIPTION_ID_META: &str = "io.modelcontextprotocol/subscriptionId";

/// How many recorded `tools/call` answers a server keeps for replay.
const IDEMPOTENCY_CAPACITY: usize = 4096;
/// How long a recorded answer is replayed, in milliseconds.
const IDEMPOTENCY_TTL_MS: u64 = 10 * 60 * 1000;
/// How many unread changes a slow listener may fall behind by.
const CHANGE_BACKLOG: usize = 256;

/// Something offered changed; listeners and legacy sessions are told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The tool list changed.
    Tools,
    /// The prompt list changed.
    Prompts,
    /// The resource list changed.
    Resources,
    /// One resource's contents changed.
    ResourceUpdated(String),
}

/// A server: what it is, and what it offers.
///
/// Cheap to clone; every clone serves the same registry.
#[derive(Clone)]
pub struct Server {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    version: String,
    instructions: Option<String>,
    offered: Vec<ProtocolVersion>,
    registry: RwLock<Registry>,
    changes: broadcast::Sender<Change>,
    sealer: StateSealer,
    idempotency: Mutex<IdempotencyStore>,
    next_session: AtomicU64,
}

impl core::fmt::Debug for Server {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Server")
            .field("name", &self.inner.name)
            .field("offered", &self.inner.offered)
            .finish_non_exhaustive()
    }
}

/// Builds a [`Server`].
#[derive(Debug)]
pub struct ServerBuilder {
    name: String,
    version: String,
    instructions: Option<String>,
    offered: Vec<ProtocolVersion>,
    sealer: Option<StateSealer>,
}

impl ServerBuilder {
    /// Offers only `revisions` (all five by default).
    #[must_use]
    pub fn revisions(mut self, revisions: impl IntoIterator<Item = ProtocolVersion>) -> Self {
        let mut offered: Vec<_> = revisions.into_iter().collect();
        offered.sort();
        offered.dedup();
        self.offered = offered;
        self
    }

    /// Instructions for the client's model.
    #[must_use]
    pub fn instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = Some(instructions.into());
        self
    }

    /// Seals `requestState` with `sealer` rather than a fresh random key;
    /// what several processes sharing retries need.
    #[must_use]
    pub fn sealer(mut self, sealer: StateSealer) -> Self {
        self.sealer = Some(sealer);
        self
    }

    /// The server.
    ///
    /// # Errors
    ///
    /// When no sealer was given and the system could not supply the entropy
    /// for a fresh `requestState` key.
    pub fn build(self) -> Result<Server, KeyError> {
        let sealer = match self.sealer {
            Some(sealer) => sealer,
            None => StateSealer::generate()?,
        };
        let (changes, _) = broadcast::channel(CHANGE_BACKLOG);
        Ok(Server {
            inner: Arc::new(Inner {
                name: self.name,
                version: self.version,
                instructions: self.instructions,
                offered: self.offered,
                registry: RwLock::default(),
                changes,
                sealer,
                idempotency: Mutex::new(IdempotencyStore::new(
                    IDEMPOTENCY_CAPACITY,
                    IDEMPOTENCY_TTL_MS,
                )),
                next_session: AtomicU64::new(1),
            }),
        })
    }
}

impl Server {
    /// A server called `name` at `version`, offering every revision.
    #[must_use]
    pub fn builder(name: impl Into<String>, version: impl Into<String>) -> ServerBuilder {
        ServerBuilder {
            name: name.into(),
            version: version.into(),
            instructions: None,
            offered: ProtocolVersion::ALL.to_vec(),
            sealer: None,
        }
    }

    /// The revisions offered, oldest first.
    #[must_use]
    pub fn offered(&self) -> &[ProtocolVersion] {
        &self.inner.offered
    }

    fn edit(&self, change: Change, edit: impl FnOnce(&mut Registry)) {
        if let Ok(mut registry) = self.inner.registry.write() {
            edit(&mut registry);
        }
        // No receiver is not an error: nobody is listening yet.
        let _listeners = self.inner.changes.send(change);
    }

    fn registry(&self) -> Registry {
        self.inner
            .registry
            .read()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// Registers a tool, replacing one of the same name.
    pub fn add_tool<F, Fut>(&self, spec: ToolSpec, f: F)
    where
        F: Fn(Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ToolResult, CallError>> + Send + 'static,
    {
        let (tool, scope) = spec.into_parts();
        let entry = super::registry::ToolEntry {
            tool,
            scope,
            handler: handler(f),
        };
        self.edit(Change::Tools, |r| {
            r.tools.insert(entry.tool.name.clone(), entry);
        });
    }

    /// Removes a tool; whether it was there.
    #[must_use = "removing an absent tool is worth knowing about"]
    pub fn remove_tool(&self, name: &str) -> bool {
        let mut removed = false;
        self.edit(Change::Tools, |r| removed = r.tools.remove(name).is_some());
        removed
    }

    /// Registers a resource.
    pub fn add_resource<F, Fut>(&self, resource: Resource, scope: Option<String>, f: F)
    where
        F: Fn(Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, CallError>> + Send + 'static,
    {
        let handler: Handler<Vec<ResourceContents>> = handler(f);
        self.edit(Change::Resources, |r| {
            r.resources.insert(
                resource.uri.clone(),
                super::registry::ResourceEntry {
                    resource,
                    scope,
                    handler,
                },
            );
        });
    }

    /// Registers a resource template.
    pub fn add_template<F, Fut>(&self, template: ResourceTemplate, scope: Option<String>, f: F)
    where
        F: Fn(Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, CallError>> + Send + 'static,
    {
        let handler: Handler<Vec<ResourceContents>> = handler(f);
        self.edit(Change::Resources, |r| {
            r.templates.insert(
                template.uri_template.clone(),
                super::registry::TemplateEntry {
                    template,
                    scope,
                    handler,
                },
            );
        });
    }

    /// Registers a prompt.
    pub fn add_prompt<F, Fut>(&self, prompt: Prompt, scope: Option<String>, f: F)
    where
        F: Fn(Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<GetPromptResult, CallError>> + Send + 'static,
    {
        let handler: Handler<GetPromptResult> = handler(f);
        self.edit(Change::Prompts, |r| {
            r.prompts.insert(
                prompt.name.clone(),
                super::registry::PromptEntry {
                    prompt,
                    scope,
                    handler,
                },
            );
        });
    }

    /// Removes a prompt; whether it was there.
    #[must_use = "removing an absent prompt is worth knowing about"]
    pub fn remove_prompt(&self, name: &str) -> bool {
        let mut removed = false;
        self.edit(Change::Prompts, |r| {
            removed = r.prompts.remove(name).is_some();
        });
        removed
    }

    /// Answers `completion/complete` with `completer`.
    pub fn set_completer(
        &self,
        completer: impl Fn(&JsonObject) -> Vec<String> + Send + Sync + 'static,
    ) {
        if let Ok(mut registry) = self.inner.registry.write() {
            registry.completer = Some(Arc::new(completer));
        }
    }

    /// Tells subscribers that the resource at `uri` changed.
    pub fn resource_updated(&self, uri: impl Into<String>) {
        let _listeners = self.inner.changes.send(Change::ResourceUpdated(uri.into()));
    }

    /// Announces that the tool list changed without changing it; what a
    /// server whose tools depend on outside state calls.
    pub fn tools_changed(&self) {
        let _listeners = self.inner.changes.send(Change::Tools);
    }

    /// Announces that the prompt list changed.
    pub fn prompts_changed(&self) {
        let _listeners = self.inner.changes.send(Change::Prompts);
    }

    /// Subscribes to changes.
    #[must_use]
    pub fn changes(&self) -> broadcast::Receiver<Change> {
        self.inner.changes.subscribe()
    }

    /// The capabilities object this server declares at `version`.
    #[must_use]
    pub fn capabilities(&self, version: ProtocolVersion) -> JsonObject {
        let registry = self.registry();
        let mut caps = JsonObject::new();
        caps.insert("tools".to_owned(), json!({ "listChanged": true }));
        caps.insert("prompts".to_owned(), json!({ "listChanged": true }));
        caps.insert(
            "resources".to_owned(),
            json!({ "subscribe": true, "listChanged": true }),
        );
        caps.insert("logging".to_owned(), json!({}));
        if registry.completer.is_some() && version >= ProtocolVersion::V2025_03_26 {
            caps.insert("completions".to_owned(), json!({}));
        }
        caps
    }

    fn server_info(&self) -> Value {
        json!({ "name": self.inner.name, "version": self.inner.version })
    }

    /// A new connection, as its own session, talking through these ports.
    #[must_use]
    pub fn connect(
        &self,
        transport: TransportKind,
        exchange: Arc<dyn DynExchange>,
        sink: Arc<dyn DynFrameSink>,
    ) -> Connection {
        let session = SessionId::new(self.inner.next_session.fetch_add(1, Ordering::Relaxed));
        Connection {
            server: self.clone(),
            transport,
            session,
            exchange,
            sink,
            state: Mutex::default(),
        }
    }
}

/// One client's connection to a [`Server`].
pub struct Connection {
    server: Server,
    transport: TransportKind,
    session: SessionId,
    exchange: Arc<dyn DynExchange>,
    sink: Arc<dyn DynFrameSink>,
    state: Mutex<ConnectionState>,
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
    client_capabilities: JsonObject,
    client_info: Option<JsonObject>,
    init_meta: JsonObject,
}

fn error(code: ErrorCode, message: impl Into<String>) -> ErrorObject {
    ErrorObject::new(code, message)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The methods only 2026-07-28 has, so a request for one is modern even
/// when its `_meta` is missing (and is then refused for that).
const MODERN_ONLY: [&str; 2] = ["server/discover", "subscriptions/listen"];

impl Connection {
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
            Change::Prompts => ("notifications/prompts/list_changed", None),
            Change::Resources => ("notifications/resources/list_changed", None),
            Change::ResourceUpdated(uri) => {
                if !self.is_subscribed(uri) {
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
        let Request { id, method, params } = request;
        let params = match params {
            None => JsonObject::new(),
            Some(Value::Object(map)) => map,
            Some(_) => return Err(error(ErrorCode::INVALID_PARAMS, "params must be an object")),
        };
        if method == "initialize" {
            return self.initialize(&params);
        }
        if self.is_modern(&method, &params) {
            return self.modern(id, &method, params, ctx).await;
        }
        let legacy = self.state.lock().ok().and_then(|s| s.legacy.clone());
        match legacy {
            Some(session) => self.legacy(id, &method, params, ctx, session).await,
            None if method == "ping" => Ok(json!({})),
            None => Err(error(
                ErrorCode::INVALID_REQUEST,
                "not initialized: send `initialize` first, or a 2026-07-28 request \
                 carrying `_meta` with its protocol version and client capabilities",
            )),
        }
    }

    /// Whether a request is to be served the 2026-07-28 way.
    fn is_modern(&self, method: &str, params: &JsonObject) -> bool {
        let offers_modern = self.server.offered().iter().any(|v| v.era() == Era::Modern);
        let declares_modern = params
            .get("_meta")
            .and_then(Value::as_object)
            .is_some_and(|m| m.keys().any(|k| k.starts_with("io.modelcontextprotocol/")));
        // A legacy-only server answers as a legacy server would, so a
        // dual-era client's probe falls back to `initialize`.
        offers_modern && (declares_modern || MODERN_ONLY.contains(&method))
    }

    fn initialize(&self, params: &JsonObject) -> Result<Value, ErrorObject> {
        let legacy: Vec<ProtocolVersion> = self
            .server
            .offered()
            .iter()
            .copied()
            .filter(|v| v.era() == Era::Legacy)
            .collect();
        let requested = params.get("protocolVersion").and_then(Value::as_str);
        let Some(requested) = requested else {
            return Err(error(
                ErrorCode::INVALID_PARAMS,
                "initialize needs `protocolVersion`",
            ));
        };
        let supported: Vec<&str> = self.server.offered().iter().map(|v| v.as_str()).collect();
        // Echo a supported revision; otherwise answer with our newest and let
        // the client decide (the spec's negotiation). A modern-only server
        // has nothing to offer and says what it supports instead.
        let version = match ProtocolVersion::from_wire(requested).filter(|v| legacy.contains(v)) {
            Some(v) => v,
            None => match legacy.last() {
                Some(v) => *v,
                None => {
                    return Err(error(
                        ErrorCode::INVALID_PARAMS,
                        "this server speaks only 2026-07-28: send requests with `_meta` instead of `initialize`",
                    )
                    .with_data(json!({ "supported": supported, "requested": requested })));
                }
            },
        };
        let client_capabilities = params
            .get("capabilities")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
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
            client_capabilities,
            client_info: params.get("clientInfo").and_then(Value::as_object).cloned(),
            init_meta: params
                .get("_meta")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
        };
        if let Ok(mut state) = self.state.lock() {
            state.legacy = Some(session);
        }
        let mut result = JsonObject::new();
        result.insert("protocolVersion".to_owned(), json!(version.as_str()));
        result.insert("capabilities".to_owned(), Value::Object(server_caps));
        result.insert("serverInfo".to_owned(), self.server.server_info());
        if let Some(instructions) = &self.server.inner.instructions {
            result.insert("instructions".to_owned(), json!(instructions));
        }
        Ok(Value::Object(result))
    }

    async fn legacy(
        &self,
        id: RequestId,
        method: &str,
        params: JsonObject,
        mut ctx: RequestContext,
        session: LegacySession,
    ) -> Result<Value, ErrorObject> {
        let version = session.peer.negotiated();
        let codec = for_version(version);
        if !codec.defines_request(Sender::Client, method) {
            return Err(error(
                ErrorCode::METHOD_NOT_FOUND,
                format!("{method} is not a method of {version}"),
            ));
        }
        ctx.protocol_version = Some(version);
        ctx.client_capabilities = session.client_capabilities.clone();
        ctx.client_info = session.client_info.clone();
        ctx.init_meta = session.init_meta.clone();
        ctx.request_meta = meta_of(&params);
        ctx.log_level = session.peer.log_gate().threshold();
        let peer = session.peer.clone().with_auth(ctx.auth.clone());
        let result = match method {
            "ping" => Ok(json!({})),
            "logging/setLevel" => self.set_level(&params),
            "resources/subscribe" | "resources/unsubscribe" => {
                let Some(uri) = params.get("uri").and_then(Value::as_str) else {
                    return Err(error(ErrorCode::INVALID_PARAMS, "`uri` is required"));
                };
                if let Ok(mut state) = self.state.lock() {
                    if method == "resources/subscribe" {
                        state.subscribed.insert(uri.to_owned());
                    } else {
                        state.subscribed.remove(uri);
                    }
                }
                Ok(json!({}))
            }
            "tools/call" => self.call_tool_once(id, params, ctx, peer).await,
            _ => self.common(method, params, ctx, peer).await,
        };
        result.map(|value| finish(value, method, version, &self.server))
    }

    fn set_level(&self, params: &JsonObject) -> Result<Value, ErrorObject> {
        let level: LoggingLevel = params
            .get("level")
            .cloned()
            .and_then(|l| serde_json::from_value(l).ok())
            .ok_or_else(|| error(ErrorCode::INVALID_PARAMS, "`level` must be a logging level"))?;
        if let Ok(mut state) = self.state.lock() {
            if let Some(legacy) = state.legacy.as_mut() {
                legacy.peer = legacy.peer.clone().with_log_gate(LogGate::at(level));
            }
        }
        Ok(json!({}))
    }

    /// A legacy `tools/call`, made idempotent per session: a retry of the
    /// same request replays its recorded answer, a duplicate while the first
    /// runs is refused, and nothing crosses sessions.
    async fn call_tool_once(
        &self,
        id: RequestId,
        params: JsonObject,
        ctx: RequestContext,
        peer: PeerSession,
    ) -> Result<Value, ErrorObject> {
        let digest = request_digest(&params);
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
            Admission::Replay(Recorded::Result(value)) => return Ok(value),
            Admission::Replay(Recorded::Error(value)) => {
                return Err(serde_json::from_value(value).unwrap_or_else(|_| {
                    error(ErrorCode::INTERNAL_ERROR, "recorded error unreadable")
                }));
            }
            Admission::InFlight => {
                return Err(error(
                    ErrorCode::INVALID_REQUEST,
                    format!("request {id} is already in progress"),
                ));
            }
            Admission::Conflict => {
                return Err(error(
                    ErrorCode::INVALID_REQUEST,
                    format!("request id {id} was already used for a different call"),
                ));
            }
            Admission::Full => {
                return Err(error(
                    ErrorCode::INTERNAL_ERROR,
                    "too many calls in progress",
                ));
            }
        }
        // Cancelled calls are dropped mid-await; the guard then frees the
        // entry so the id is not held "in flight" for ever.
        let mut guard = Admitted {
            store: &self.server.inner.idempotency,
            session: peer.session(),
            id: Some(id),
        };
        let outcome = self.call_tool(params, ctx, peer).await;
        let recorded = match &outcome {
            Ok(value) => Recorded::Result(value.clone()),
            Err(e) => Recorded::Error(e.to_json()),
        };
        guard.record(recorded);
        outcome
    }

    async fn modern(
        &self,
        id: RequestId,
        method: &str,
        params: JsonObject,
        mut ctx: RequestContext,
    ) -> Result<Value, ErrorObject> {
        let version = self.modern_version(&params)?;
        if !for_version(version).defines_request(Sender::Client, method) {
            return Err(error(
                ErrorCode::METHOD_NOT_FOUND,
                format!("{method} is not a method of {version}"),
            ));
        }
        let meta = meta_of(&params);
        let client_capabilities = meta
            .get(CLIENT_CAPABILITIES_META)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let server_caps = self.server.capabilities(version);
        let profile = resolve(Negotiation {
            version,
            client_caps: CapabilitySet::from_client_json(&client_capabilities, version),
            server_caps: CapabilitySet::from_server_json(&server_caps, version),
            transport: self.transport,
        });
        // A fresh peer per request: nothing is inherited from an earlier one.
        let gate = LogGate::for_request(&meta);
        let peer = PeerSession::new(
            version,
            profile,
            self.session,
            self.transport,
            Arc::new(NoExchange),
            Arc::clone(&self.sink),
        )
        .with_log_gate(gate)
        .with_auth(ctx.auth.clone());
        ctx.protocol_version = Some(version);
        ctx.client_capabilities = client_capabilities;
        ctx.client_info = meta
            .get(CLIENT_INFO_META)
            .and_then(Value::as_object)
            .cloned();
        ctx.log_level = gate.threshold();
        ctx.request_meta = meta;
        ctx.input_responses = params
            .get("inputResponses")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let result = match method {
            "server/discover" => Ok(self.discover(version)),
            "subscriptions/listen" => return self.listen(&id, &params, &peer).await,
            _ => {
                self.open_state(method, &params, &mut ctx)?;
                self.common(method, params, ctx, peer).await
            }
        };
        result.map(|value| finish(value, method, version, &self.server))
    }

    /// The revision a 2026-07-28 request declares, checked.
    fn modern_version(&self, params: &JsonObject) -> Result<ProtocolVersion, ErrorObject> {
        let missing = || {
            error(
                ErrorCode::INVALID_PARAMS,
                format!(
                    "2026-07-28 requests carry `_meta` with `{PROTOCOL_VERSION_META}` \
                     and `{CLIENT_CAPABILITIES_META}`"
                ),
            )
        };
        let meta = params
            .get("_meta")
            .and_then(Value::as_object)
            .ok_or_else(missing)?;
        let requested = meta
            .get(PROTOCOL_VERSION_META)
            .and_then(Value::as_str)
            .ok_or_else(missing)?;
        if !meta
            .get(CLIENT_CAPABILITIES_META)
            .is_some_and(Value::is_object)
        {
            return Err(missing());
        }
        let modern: Vec<ProtocolVersion> = self
            .server
            .offered()
            .iter()
            .copied()
            .filter(|v| v.era() == Era::Modern)
            .collect();
        ProtocolVersion::from_wire(requested)
            .filter(|v| modern.contains(v))
            .ok_or_else(|| {
                let supported: Vec<&str> = modern.iter().map(|v| v.as_str()).collect();
                error(
                    ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
                    format!("protocol version {requested} is not supported"),
                )
                .with_data(json!({ "supported": supported, "requested": requested }))
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

    /// Verifies a retry's `requestState` and binds the context to the request.
    fn open_state(
        &self,
        method: &str,
        params: &JsonObject,
        ctx: &mut RequestContext,
    ) -> Result<(), ErrorObject> {
        let digest = request_digest(params);
        ctx.request_digest = Some(digest);
        let Some(sealed) = params.get("requestState") else {
            return Ok(());
        };
        let Some(sealed) = sealed.as_str() else {
            return Err(error(
                ErrorCode::INVALID_PARAMS,
                "`requestState` must be a string",
            ));
        };
        let binding = binding(method, params, &ctx.auth, digest);
        let payload = self
            .server
            .inner
            .sealer
            .open(sealed, &binding, now_ms())
            .map_err(|e| error(e.code(), format!("requestState refused: {e}")))?;
        ctx.request_state = Some(payload);
        Ok(())
    }

    /// `subscriptions/listen`: acknowledge, then forward the opted-in changes
    /// tagged with this request's id, until the caller stops or the server
    /// goes away.
    async fn listen(
        &self,
        id: &RequestId,
        params: &JsonObject,
        peer: &PeerSession,
    ) -> Result<Value, ErrorObject> {
        let filter = params
            .get("notifications")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let wants = |key: &str| filter.get(key).and_then(Value::as_bool).unwrap_or(false);
        let mut honoured = JsonObject::new();
        for key in [
            "toolsListChanged",
            "promptsListChanged",
            "resourcesListChanged",
        ] {
            if wants(key) {
                honoured.insert(key.to_owned(), json!(true));
            }
        }
        let uris: BTreeSet<String> = filter
            .get("resourceSubscriptions")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        if !uris.is_empty() {
            honoured.insert("resourceSubscriptions".to_owned(), json!(uris));
        }
        let tag = json!({ SUBSCRIPTION_ID_META: id.to_json() });
        let mut changes = self.server.changes();
        let _sent = peer.sink().send(Message::Notification(Notification {
            method: "notifications/subscriptions/acknowledged".to_owned(),
            params: Some(json!({ "notifications": honoured, "_meta": tag })),
        }));
        loop {
            let change = match changes.recv().await {
                Ok(change) => change,
                // A listener that fell behind has lost notifications; list
                // changes are idempotent, so carry on from the newest.
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => break,
            };
            let (method, extra) = match &change {
                Change::Tools if wants("toolsListChanged") => {
                    ("notifications/tools/list_changed", None)
                }
                Change::Prompts if wants("promptsListChanged") => {
                    ("notifications/prompts/list_changed", None)
                }
                Change::Resources if wants("resourcesListChanged") => {
                    ("notifications/resources/list_changed", None)
                }
                Change::ResourceUpdated(uri) if uris.contains(uri) => {
                    ("notifications/resources/updated", Some(uri.clone()))
                }
                _ => continue,
            };
            let mut params = JsonObject::new();
            if let Some(uri) = extra {
                params.insert("uri".to_owned(), json!(uri));
            }
            params.insert("_meta".to_owned(), tag.clone());
            let _sent = peer.sink().send(Message::Notification(Notification {
                method: method.to_owned(),
                params: Some(Value::Object(params)),
            }));
        }
        Ok(json!({ "resultType": "complete", "_meta": tag }))
    }

    /// The methods both eras share.
    async fn common(
        &self,
        method: &str,
        params: JsonObject,
        ctx: RequestContext,
        peer: PeerSession,
    ) -> Result<Value, ErrorObject> {
        let registry = self.server.registry();
        let can_see = |scope: Option<&String>| visible(scope, |s| ctx.auth.has_scope(s));
        reject_cursor(&params)?;
        match method {
            "tools/list" => {
                let tools: Vec<_> = registry
                    .tools
                    .values()
                    .filter(|t| can_see(t.scope.as_ref()))
                    .map(|t| t.tool.clone())
                    .collect();
                Ok(json!({ "tools": tools }))
            }
            "tools/call" => self.call_tool(params, ctx, peer).await,
            "prompts/list" => {
                let prompts: Vec<_> = registry
                    .prompts
                    .values()
                    .filter(|p| can_see(p.scope.as_ref()))
                    .map(|p| p.prompt.clone())
                    .collect();
                Ok(json!({ "prompts": prompts }))
            }
            "prompts/get" => {
                let name = required_str(&params, "name")?;
                let entry = registry
                    .prompts
                    .get(name)
                    .filter(|p| can_see(p.scope.as_ref()))
                    .ok_or_else(|| {
                        error(ErrorCode::INVALID_PARAMS, format!("unknown prompt {name}"))
                    })?;
                let arguments = object_member(&params, "arguments");
                let auth = ctx.auth.clone();
                let call = Call::new(ctx, peer, arguments);
                let result = (entry.handler)(call).await;
                self.outcome(
                    result.and_then(|r| to_value(&r)),
                    "prompts/get",
                    &params,
                    &auth,
                )
            }
            "resources/list" => {
                let resources: Vec<_> = registry
                    .resources
                    .values()
                    .filter(|r| can_see(r.scope.as_ref()))
                    .map(|r| r.resource.clone())
                    .collect();
                Ok(json!({ "resources": resources }))
            }
            "resources/templates/list" => {
                let templates: Vec<_> = registry
                    .templates
                    .values()
                    .filter(|t| can_see(t.scope.as_ref()))
                    .map(|t| t.template.clone())
                    .collect();
                Ok(json!({ "resourceTemplates": templates }))
            }
            "resources/read" => {
                let uri = required_str(&params, "uri")?.to_owned();
                let mut arguments = JsonObject::new();
                arguments.insert("uri".to_owned(), json!(uri));
                let found = match registry
                    .resources
                    .get(&uri)
                    .filter(|r| can_see(r.scope.as_ref()))
                {
                    Some(entry) => Some(Arc::clone(&entry.handler)),
                    None => registry
                        .templates
                        .values()
                        .filter(|t| can_see(t.scope.as_ref()))
                        .find_map(|t| {
                            match_template(&t.template.uri_template, &uri).map(|vars| {
                                arguments.extend(vars);
                                Arc::clone(&t.handler)
                            })
                        }),
                };
                let Some(handler) = found else {
                    // Never an empty `contents`: a missing resource is an
                    // error, with the code the client's revision expects.
                    let code = if peer.allows(Feature::LegacyResourceNotFound) {
                        ErrorCode::RESOURCE_NOT_FOUND
                    } else {
                        ErrorCode::INVALID_PARAMS
                    };
                    return Err(error(code, format!("resource not found: {uri}"))
                        .with_data(json!({ "uri": uri })));
                };
                let auth = ctx.auth.clone();
                let call = Call::new(ctx, peer, arguments);
                let result = handler(call)
                    .await
                    .and_then(|contents| Ok(json!({ "contents": to_value(&contents)? })));
                self.outcome(result, "resources/read", &params, &auth)
            }
            "completion/complete" => {
                let Some(completer) = registry.completer else {
                    return Err(error(
                        ErrorCode::METHOD_NOT_FOUND,
                        "completions are not offered",
                    ));
                };
                let mut values = completer(&params);
                let total = values.len();
                values.truncate(100);
                Ok(json!({ "completion": {
                    "values": values, "total": total, "hasMore": total > 100,
                } }))
            }
            other => Err(error(
                ErrorCode::METHOD_NOT_FOUND,
                format!("{other} is not served here"),
            )),
        }
    }

    async fn call_tool(
        &self,
        params: JsonObject,
        ctx: RequestContext,
        peer: PeerSession,
    ) -> Result<Value, ErrorObject> {
        let name = required_str(&params, "name")?.to_owned();
        let entry = self
            .server
            .registry()
            .tools
            .get(&name)
            .filter(|t| visible(t.scope.as_ref(), |s| ctx.auth.has_scope(s)))
            .cloned()
            .ok_or_else(|| error(ErrorCode::INVALID_PARAMS, format!("unknown tool {name}")))?;
        let arguments = object_member(&params, "arguments");
        let version = peer.negotiated();
        let auth = ctx.auth.clone();
        let call = Call::new(ctx, peer, arguments);
        let result = (entry.handler)(call).await.and_then(|value| {
            let mut report = TranslationReport::new(version);
            // The server wrote the result, so lowering it for an older
            // client is its own decision, not a bridge's: permissive.
            for_version(version)
                .lower_tool_result(value, DegradePolicy::permissive(), &mut report)
                .map_err(|e| CallError::internal(e.to_string()))
        });
        self.outcome(result, "tools/call", &params, &auth)
    }

    /// Turns a handler's outcome into a result or an error; a request for
    /// more input becomes an `InputRequiredResult` with a sealed state.
    fn outcome(
        &self,
        result: Result<Value, CallError>,
        method: &str,
        params: &JsonObject,
        auth: &AuthContext,
    ) -> Result<Value, ErrorObject> {
        match result {
            Ok(value) => Ok(value),
            Err(CallError::Protocol(object)) => Err(object),
            Err(CallError::MissingCapability { required }) => Err(error(
                ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
                "the request needs a client capability it did not declare",
            )
            .with_data(json!({ "requiredCapabilities": required }))),
            Err(CallError::InputRequired(asked)) => {
                let super::call::InputRequired { requests, state } = *asked;
                let mut result = JsonObject::new();
                result.insert("resultType".to_owned(), json!("input_required"));
                result.insert("inputRequests".to_owned(), Value::Object(requests));
                if let Some(state) = state {
                    let digest = request_digest(params);
                    let binding = binding(method, params, auth, digest);
                    let sealed = self
                        .server
                        .inner
                        .sealer
                        .seal(&state, &binding, now_ms())
                        .map_err(|e| error(ErrorCode::INTERNAL_ERROR, e.to_string()))?;
                    result.insert("requestState".to_owned(), json!(sealed));
                }
                Ok(Value::Object(result))
            }
        }
    }
}

/// An admitted call not yet recorded: abandoned on drop.
struct Admitted<'a> {
    store: &'a Mutex<IdempotencyStore>,
    session: SessionId,
    id: Option<RequestId>,
}

impl Admitted<'_> {
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

/// What a sealed state is bound to: the caller, the method, its target and
/// the request's digest.
fn binding(
    method: &str,
    params: &JsonObject,
    auth: &AuthContext,
    digest: crate::domain::canonical::RequestDigest,
) -> StateBinding {
    let target = params
        .get("name")
        .or_else(|| params.get("uri"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    StateBinding {
        principal: auth.subject().map(str::to_owned),
        method: method.to_owned(),
        target: target.to_owned(),
        digest,
    }
}

fn finish(value: Value, method: &str, version: ProtocolVersion, server: &Server) -> Value {
    let Value::Object(mut map) = value else {
        return value;
    };
    let codec = for_version(version);
    codec.finish_result(Some(method), &mut map);
    if version.era() == Era::Modern {
        let meta = map
            .entry("_meta")
            .or_insert_with(|| Value::Object(JsonObject::new()));
        if let Value::Object(meta) = meta {
            meta.entry(SERVER_INFO_META)
                .or_insert_with(|| server.server_info());
        }
    }
    Value::Object(map)
}

fn meta_of(params: &JsonObject) -> JsonObject {
    object_member(params, "_meta")
}

fn object_member(params: &JsonObject, key: &str) -> JsonObject {
    params
        .get(key)
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

fn required_str<'a>(params: &'a JsonObject, key: &str) -> Result<&'a str, ErrorObject> {
    params.get(key).and_then(Value::as_str).ok_or_else(|| {
        error(
            ErrorCode::INVALID_PARAMS,
            format!("`{key}` must be a string"),
        )
    })
}

/// Lists are served as one page, so any cursor is one this server never
/// issued.
fn reject_cursor(params: &JsonObject) -> Result<(), ErrorObject> {
    match params.get("cursor") {
        None | Some(Value::Null) => Ok(()),
        Some(_) => Err(error(ErrorCode::INVALID_PARAMS, "invalid cursor")),
    }
}

fn to_value<T: serde::Serialize>(value: &T) -> Result<Value, CallError> {
    serde_json::to_value(value).map_err(|e| CallError::internal(e.to_string()))
}
