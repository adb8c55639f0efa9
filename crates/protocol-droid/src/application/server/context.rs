//! Who a handler is serving: the negotiated session and the request at hand.
//!
//! [`PeerSession`] is the connection as negotiated: revision, profile,
//! session id, transport, and the two ports (`ports`) through which the
//! server reaches the client. [`RequestContext`] is one request: its headers,
//! caller, `_meta`, era fields and multi round-trip inputs. A transport builds
//! the second per request and overlays the caller onto the first.

use core::fmt;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};

use serde_json::Value;

use super::auth::AuthContext;
use super::log_gate::LogGate;
use super::ports::{DynExchange, DynFrameSink};
use crate::domain::canonical::RequestDigest;
use crate::domain::feature::{Feature, FeatureProfile};
use crate::domain::ir::{JsonObject, member};
use crate::domain::session::SessionId;
use crate::domain::{LoggingLevel, ProtocolVersion, TransportKind};

/// The negotiated connection a handler is serving.
///
/// Cheap to clone: a `Copy` revision, profile, session id and gate, and
/// reference-counted ports and caller, so a handler can hand one to a spawned
/// task without ceremony.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
///
/// use protocol_droid::application::server::{
///     CallbackExchange, DynFrameSink, ExchangeError, PeerSession,
/// };
/// use protocol_droid::domain::feature::{Feature, FeatureProfile};
/// use protocol_droid::domain::jsonrpc::Message;
/// use protocol_droid::domain::session::SessionId;
/// use protocol_droid::domain::{ProtocolVersion, TransportKind};
/// use serde_json::Value;
///
/// struct NoExchange;
///
/// impl CallbackExchange for NoExchange {
///     async fn exchange(&self, _: &str, _: Value) -> Result<Value, ExchangeError> {
///         Err(ExchangeError::Unsupported)
///     }
/// }
///
/// struct NullSink;
///
/// impl DynFrameSink for NullSink {
///     fn send(&self, _: Message) -> bool {
///         false
///     }
/// }
///
/// let peer = PeerSession::new(
///     ProtocolVersion::V2025_03_26,
///     FeatureProfile::empty().with(Feature::Sampling),
///     SessionId::new(1),
///     TransportKind::Stdio,
///     Arc::new(NoExchange),
///     Arc::new(NullSink),
/// );
///
/// // Elicitation was never negotiated; sampling was. A handler that asks
/// // first gets an answer, not a frame the peer may reject.
/// assert!(!peer.allows(Feature::Elicitation));
/// assert!(peer.allows(Feature::Sampling));
/// ```
#[derive(Clone)]
pub struct PeerSession {
    negotiated: ProtocolVersion,
    profile: FeatureProfile,
    session: SessionId,
    transport: TransportKind,
    log_gate: LogGate,
    auth: AuthContext,
    exchange: Arc<dyn DynExchange>,
    sink: Arc<dyn DynFrameSink>,
}

impl PeerSession {
    /// Records what a connection negotiated and where its frames go.
    ///
    /// The caller starts as [`AuthContext::anonymous`], which holds no
    /// scopes: a transport that never calls [`Self::with_auth`] serves
    /// exactly the primitives nobody had to authorise.
    #[must_use]
    pub fn new(
        negotiated: ProtocolVersion,
        profile: FeatureProfile,
        session: SessionId,
        transport: TransportKind,
        exchange: Arc<dyn DynExchange>,
        sink: Arc<dyn DynFrameSink>,
    ) -> Self {
        Self {
            negotiated,
            profile,
            session,
            transport,
            log_gate: LogGate::closed(),
            auth: AuthContext::anonymous(),
            exchange,
            sink,
        }
    }

    /// This peer, filtering its log records through `gate`.
    ///
    /// A legacy session moves its gate with `logging/setLevel`; a 2026-07-28
    /// request replaces it with `LogGate::for_request`.
    #[must_use]
    pub fn with_log_gate(mut self, gate: LogGate) -> Self {
        self.log_gate = gate;
        self
    }

    /// The threshold this peer's log records are filtered against.
    #[must_use]
    pub const fn log_gate(&self) -> &LogGate {
        &self.log_gate
    }

    /// The transport this session runs over; part of the session because a
    /// profile cannot be resolved without it.
    #[must_use]
    pub const fn transport(&self) -> TransportKind {
        self.transport
    }

    /// The caller, for the visibility gate.
    #[must_use]
    pub const fn auth(&self) -> &AuthContext {
        &self.auth
    }

    /// Narrows what this session may do; never widens.
    ///
    /// A 2026-07-28 request is served against its own profile, which may
    /// hold less than the connection's. Widening would let code grant a
    /// feature the negotiation never produced.
    #[must_use]
    pub fn with_profile(mut self, profile: FeatureProfile) -> Self {
        self.profile = self.profile.narrowed_to(profile);
        self
    }

    /// Records who the caller is, for this request.
    ///
    /// Per request because a token can be refreshed, replaced or withdrawn
    /// between two requests of one session: the principal belongs to the
    /// request, not to the session.
    #[must_use]
    pub fn with_auth(mut self, auth: AuthContext) -> Self {
        self.auth = auth;
        self
    }

    /// This session with the principal dropped: what a transport persists.
    ///
    /// Keeps the revision, profile and session id, and answers
    /// [`Self::auth`] with the anonymous caller, so a later reader that
    /// forgets to overlay its own caller is served as nobody rather than as
    /// whoever opened the session.
    #[must_use]
    pub fn without_auth(self) -> Self {
        self.with_auth(AuthContext::anonymous())
    }

    /// This peer, opening server-initiated requests through `exchange`.
    /// Replaces, never layers: a peer has one exchange.
    #[must_use]
    pub fn with_exchange(mut self, exchange: Arc<dyn DynExchange>) -> Self {
        self.exchange = exchange;
        self
    }

    /// This peer, identified as `id`.
    ///
    /// Everything a session does is keyed on its id (the idempotency store,
    /// the in-flight map). A transport opening several sessions from one
    /// seed must rebind each, or one session's recorded answer is replayed
    /// to another.
    #[must_use]
    pub const fn with_session(mut self, id: SessionId) -> Self {
        self.session = id;
        self
    }

    /// This peer, publishing notifications through `sink`. Replaces, never
    /// layers: a peer has exactly one sink.
    #[must_use]
    pub fn with_sink(mut self, sink: Arc<dyn DynFrameSink>) -> Self {
        self.sink = sink;
        self
    }

    /// The revision this connection settled on.
    #[must_use]
    pub const fn negotiated(&self) -> ProtocolVersion {
        self.negotiated
    }

    /// Whether this session outlives the request being served: false for a
    /// 2026-07-28 request over HTTP, whose connection is that one request.
    #[must_use]
    pub fn is_lasting(&self) -> bool {
        !(self.negotiated.era() == crate::domain::Era::Modern
            && self.transport == TransportKind::StreamableHttp)
    }

    /// The profile the revision and the capabilities produced.
    #[must_use]
    pub const fn profile(&self) -> FeatureProfile {
        self.profile
    }

    /// Which session this is.
    #[must_use]
    pub const fn session(&self) -> SessionId {
        self.session
    }

    /// Whether `feature` may be used on this connection.
    #[must_use]
    pub const fn allows(&self, feature: Feature) -> bool {
        self.profile.allows(feature)
    }

    /// The port for a server-initiated round trip.
    #[must_use]
    pub const fn exchange(&self) -> &Arc<dyn DynExchange> {
        &self.exchange
    }

    /// The port for a one-way notification.
    #[must_use]
    pub const fn sink(&self) -> &Arc<dyn DynFrameSink> {
        &self.sink
    }
}

/// Prints the negotiation and deliberately not the ports, which hold
/// channels and sockets and would print only noise.
impl fmt::Debug for PeerSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerSession")
            .field("negotiated", &self.negotiated)
            .field("profile", &self.profile)
            .field("session", &self.session)
            .field("transport", &self.transport)
            .field("log_gate", &self.log_gate)
            .field("anonymous", &self.auth.is_anonymous())
            .finish_non_exhaustive()
    }
}

/// One request, as the server is serving it.
///
/// Built fresh by the transport for every request; mutating it has no
/// lasting effect. In the legacy era the era fields were settled by the
/// `initialize` handshake and are copied in; in 2026-07-28 they are read from
/// this request's own `_meta` and never inherited.
#[derive(Clone)]
pub struct RequestContext {
    /// HTTP headers, names lowercased; empty on stdio.
    pub headers: BTreeMap<String, String>,
    /// The peer's address; `None` on stdio.
    pub remote_addr: Option<SocketAddr>,
    /// The caller.
    pub auth: AuthContext,
    /// The `_meta` of the `initialize` request (legacy era); empty otherwise.
    ///
    /// Shared with the session rather than copied into every request.
    pub init_meta: Arc<JsonObject>,
    /// This request's own `_meta`.
    pub request_meta: JsonObject,
    /// The revision this request speaks.
    pub protocol_version: Option<ProtocolVersion>,
    /// The client's capabilities, as declared for this request (in the
    /// legacy era, shared with the session).
    pub client_capabilities: Arc<JsonObject>,
    /// The client's self-description; advisory only.
    pub client_info: Option<Arc<JsonObject>>,
    /// The log threshold for this request.
    pub log_level: Option<LoggingLevel>,
    /// Answers to a previous round's input requests (2026-07-28).
    pub input_responses: JsonObject,
    /// The verified payload of this request's `requestState`; never the raw
    /// string a client sent.
    pub request_state: Option<Value>,
    /// SHA-256 of the params less `_meta`, `inputResponses` and
    /// `requestState`, to which the request's verified `requestState` was
    /// bound; `None` when the request carried none.
    pub request_digest: Option<RequestDigest>,
}

/// The empty object a fresh context shares until the session or the
/// request declares one: a context is built for every request, and two
/// allocations each time bought nothing.
static NO_MEMBERS: LazyLock<Arc<JsonObject>> = LazyLock::new(|| Arc::new(JsonObject::new()));

/// The shared empty object (see [`NO_MEMBERS`]).
pub(crate) fn no_members() -> Arc<JsonObject> {
    Arc::clone(&NO_MEMBERS)
}

impl Default for RequestContext {
    fn default() -> Self {
        Self {
            headers: BTreeMap::new(),
            remote_addr: None,
            auth: AuthContext::anonymous(),
            init_meta: Arc::clone(&NO_MEMBERS),
            request_meta: JsonObject::new(),
            protocol_version: None,
            client_capabilities: Arc::clone(&NO_MEMBERS),
            client_info: None,
            log_level: None,
            input_responses: JsonObject::new(),
            request_state: None,
            request_digest: None,
        }
    }
}

/// Redacts what is the caller's or the user's: credential headers, claims,
/// the verified state and the answers to input requests print as their
/// shape only, so a context can be logged.
impl fmt::Debug for RequestContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: BTreeMap<&str, &str> = self
            .headers
            .iter()
            .map(|(name, value)| {
                let shown = match name.as_str() {
                    "authorization" | "cookie" | "proxy-authorization" | "set-cookie" => {
                        "<redacted>"
                    }
                    _ => value.as_str(),
                };
                (name.as_str(), shown)
            })
            .collect();
        f.debug_struct("RequestContext")
            .field("headers", &headers)
            .field("remote_addr", &self.remote_addr)
            .field("subject", &self.auth.subject())
            .field("protocol_version", &self.protocol_version)
            .field("log_level", &self.log_level)
            .field(
                "input_responses",
                &self.input_responses.keys().collect::<Vec<_>>(),
            )
            .field(
                "request_state",
                &self.request_state.as_ref().map(|_| "<verified>"),
            )
            .field("request_digest", &self.request_digest)
            .finish_non_exhaustive()
    }
}

impl RequestContext {
    /// The progress token this request opted in with, if any (a `null`
    /// one asks for nothing).
    #[must_use]
    pub fn progress_token(&self) -> Option<&Value> {
        member(&self.request_meta, "progressToken").filter(|token| !token.is_null())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;
    use crate::application::server::{
        AuthClaims, CallbackExchange, ExchangeError, LOG_LEVEL_META, NoExchange, NullSink,
    };
    use crate::domain::jsonrpc::Message;

    /// A sink that remembers what it was given.
    #[derive(Default)]
    struct Recording(Mutex<Vec<Message>>);

    impl DynFrameSink for Recording {
        fn send(&self, message: Message) -> bool {
            self.0.lock().map(|mut v| v.push(message)).is_ok()
        }
    }

    fn peer() -> PeerSession {
        PeerSession::new(
            ProtocolVersion::V2025_06_18,
            FeatureProfile::empty()
                .with(Feature::Sampling)
                .with(Feature::Elicitation),
            SessionId::new(7),
            TransportKind::Stdio,
            Arc::new(NoExchange),
            Arc::new(NullSink),
        )
    }

    fn principal(sub: &str, scopes: &[&str]) -> AuthContext {
        AuthContext::principal(AuthClaims {
            sub: Some(sub.to_owned()),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
            ..AuthClaims::default()
        })
    }

    #[test]
    fn a_new_session_is_anonymous_and_holds_no_scope() {
        let peer = peer();
        assert!(peer.auth().is_anonymous());
        assert!(!peer.auth().has_scope("tools:read"));
    }

    #[test]
    fn with_profile_narrows_and_cannot_widen() {
        let narrowed = peer().with_profile(FeatureProfile::empty().with(Feature::Sampling));
        assert!(narrowed.allows(Feature::Sampling));
        assert!(!narrowed.allows(Feature::Elicitation));
        let widened = narrowed.with_profile(
            FeatureProfile::empty()
                .with(Feature::Elicitation)
                .with(Feature::Roots),
        );
        assert!(!widened.allows(Feature::Elicitation));
        assert!(!widened.allows(Feature::Roots));
    }

    #[test]
    fn the_principal_is_per_request_and_dropped_for_persistence() {
        let served = peer().with_auth(principal("alice", &["tools:read"]));
        assert_eq!(served.auth().subject(), Some("alice"));
        let persisted = served.clone().without_auth();
        assert!(persisted.auth().is_anonymous());
        assert_eq!(persisted.session(), served.session());
        assert_eq!(persisted.profile(), served.profile());
        assert_eq!(persisted.negotiated(), served.negotiated());
    }

    #[test]
    fn with_session_rebinds_only_the_session() {
        let seed = peer().with_auth(principal("alice", &[]));
        let rebound = seed.clone().with_session(SessionId::new(8));
        assert_eq!(rebound.session(), SessionId::new(8));
        assert_eq!(rebound.negotiated(), seed.negotiated());
        assert_eq!(rebound.profile(), seed.profile());
        assert_eq!(rebound.auth(), seed.auth());
    }

    fn note() -> Message {
        Message::Notification(crate::domain::jsonrpc::Notification {
            method: "notifications/tools/list_changed".to_owned(),
            params: None,
        })
    }

    fn count(sink: &Recording) -> usize {
        sink.0.lock().map(|v| v.len()).unwrap_or(usize::MAX)
    }

    #[test]
    fn with_sink_replaces_the_sink_rather_than_adding_one() {
        let first = Arc::new(Recording::default());
        let second = Arc::new(Recording::default());
        let peer = peer().with_sink(first.clone()).with_sink(second.clone());
        assert!(peer.sink().send(note()));
        assert_eq!(count(&second), 1);
        assert_eq!(count(&first), 0, "the replaced sink hears nothing");
    }

    #[tokio::test]
    async fn with_exchange_replaces_the_exchange_rather_than_adding_one() {
        struct Named(&'static str, std::sync::atomic::AtomicUsize);
        impl CallbackExchange for Named {
            async fn exchange(&self, _: &str, _: Value) -> Result<Value, ExchangeError> {
                self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(json!(self.0))
            }
        }
        let first = Arc::new(Named("first", 0.into()));
        let second = Arc::new(Named("second", 0.into()));
        let peer = peer()
            .with_exchange(first.clone())
            .with_exchange(second.clone());
        assert_eq!(
            peer.exchange().exchange_dyn("roots/list", json!({})).await,
            Ok(json!("second"))
        );
        assert_eq!(first.1.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[test]
    fn debug_prints_the_negotiation_not_the_ports() {
        let printed = format!("{:?}", peer().with_auth(principal("alice", &[])));
        assert!(printed.contains("V2025_06_18"), "{printed}");
        assert!(!printed.contains("exchange"), "{printed}");
        assert!(!printed.contains("sink"), "{printed}");
        assert!(
            !printed.contains("alice"),
            "a principal is not a negotiation: {printed}"
        );
    }

    #[test]
    fn a_context_prints_no_credentials_and_no_user_data() {
        let mut ctx = RequestContext::default();
        ctx.headers
            .insert("authorization".to_owned(), "Bearer s3cret".to_owned());
        ctx.headers
            .insert("accept".to_owned(), "application/json".to_owned());
        ctx.input_responses
            .insert("pin".to_owned(), json!({ "content": { "pin": "1234" } }));
        ctx.request_state = Some(json!({ "token": "hunter2" }));
        let printed = format!("{ctx:?}");
        for secret in ["s3cret", "1234", "hunter2"] {
            assert!(!printed.contains(secret), "{secret} leaked: {printed}");
        }
        assert!(printed.contains("application/json"), "{printed}");
        assert!(
            printed.contains("pin"),
            "the shape is still there: {printed}"
        );
    }

    #[test]
    fn a_request_log_gate_opens_only_at_its_own_level() {
        let mut meta = JsonObject::new();
        assert_eq!(LogGate::for_request(&meta), LogGate::closed());
        meta.insert(LOG_LEVEL_META.to_owned(), json!("warning"));
        let gate = LogGate::for_request(&meta);
        assert!(gate.allows(LoggingLevel::Error));
        assert!(!gate.allows(LoggingLevel::Info));
        assert!(!LogGate::closed().allows(LoggingLevel::Emergency));
    }
}
