//! The server side: sessions and requests, handlers, and dispatch for both
//! eras.
//!
//! Start at [`Server`]: build one, register tools, resources and prompts on
//! it (typed with [`Server::add_typed_tool`]), and hand it to a transport. The
//! modules behind it, one concept each:
//!
//! - `host`: the [`Server`] itself: identity, registry and change feed.
//! - `registry`, `specs` and `typed`: what a server offers, the builders of
//!   resource and prompt definitions ([`ResourceSpec`], [`PromptSpec`]),
//!   and typed tools, typed output ([`Structured`]) and typed questions
//!   ([`Elicited`]).
//! - `call`: what a handler receives ([`Call`]), and the one "ask the
//!   client" step that works in both eras.
//! - `context`: who a handler is serving ([`PeerSession`],
//!   [`RequestContext`]); `ports`: how the server reaches the client
//!   ([`DynExchange`], [`DynFrameSink`]); `log_gate`: the threshold its log
//!   records pass ([`LogGate`]).
//! - `auth`: who is calling ([`AuthContext`], [`AuthClaims`]), and the
//!   [`TokenValidator`] port a resource server checks bearer tokens through.
//! - `dispatch`: a [`Connection`], one client's view of a server, routing
//!   each request by era.
//! - `forward`: the [`Forward`] port, serving primitives from elsewhere (what
//!   a bridge is); `scopes`: the scopes forwarded primitives require.
//! - `request_state`: the sealed `requestState` of multi round-trip requests
//!   ([`StateSealer`]).
//! - `shared`: what several instances of a server share through a store
//!   ([`SharedState`]: the ports [`KeyRingStore`] and [`RoundLedger`]);
//!   `key_ring`: the shared `requestState` keys and their rotation
//!   ([`KeyRing`]); `sharing`: how a server keeps in step with the others
//!   ([`Server::share`]).
//! - `idempotency`: replaying a retried `tools/call`'s recorded answer.
//! - `rate`: how many requests one caller may make ([`RateLimits`]).
//! - `reply`: a result as a transport writes it, a tool's kept typed.
//! - `tasks`: calls run in the background and polled, in both eras'
//!   forms, kept in a [`TaskStore`].

pub(crate) mod auth;
pub(crate) mod call;
pub(crate) mod change;
pub(crate) mod client_tasks;
pub(crate) mod context;
pub(crate) mod dispatch;
pub(crate) mod forward;
pub(crate) mod host;
pub(crate) mod idempotency;
pub(crate) mod key_ring;
pub(crate) mod log_gate;
pub(crate) mod ports;
pub(crate) mod rate;
pub(crate) mod registry;
pub(crate) mod reply;
pub(crate) mod request_state;
pub(crate) mod scopes;
pub(crate) mod shared;
pub(crate) mod sharing;
pub(crate) mod specs;
pub(crate) mod targeted;
pub(crate) mod tasks;
pub(crate) mod typed;

pub use auth::{AuthClaims, AuthContext, TokenError, TokenValidator};
pub use call::{Call, CallError, INPUT_KEY_META, InputRequired, Question};
pub use context::{PeerSession, RequestContext};
pub use dispatch::{
    CLIENT_CAPABILITIES_META, CLIENT_INFO_META, Connection, ImageChange, Lasting,
    PROTOCOL_VERSION_META, SERVER_INFO_META, SUBSCRIPTION_ID_META, SessionImage,
};
pub(crate) use dispatch::{MAX_SUBSCRIPTIONS, served_as_modern};
pub use forward::{FORWARDED, Forward};
pub use host::{
    Change, Server, ServerBuilder, ToolAccess, ToolCatchUp, ToolVisibility, every_capability,
};
pub use idempotency::IdempotencyLimits;
pub use key_ring::{KeyRing, RingError, RotationPolicy};
pub use log_gate::{LOG_LEVEL_META, LogGate};
pub use ports::{
    BoxFuture, CallbackExchange, DynExchange, DynFrameSink, ExchangeError, NoExchange, NullSink,
};
pub use rate::{Rate, RateError, RateLimits};
pub use registry::{ToolEdits, ToolSpec};
pub use reply::Reply;
pub use request_state::{
    DEFAULT_LIFETIME_MS, KeyError, MAX_KEY_ID_LEN, MAX_PREVIOUS_KEYS, MAX_SEALED_LEN, Opened,
    Round, SealError, StateBinding, StateError, StateKey, StateSealer,
};
pub use scopes::{Primitive, ScopeRules};
pub use shared::{
    CallRecord, ChangeKept, EVERY_INSTANCE, IdempotencyLedger, KeptChange, KeptSession,
    KeyRingStore, Relay, RoundLedger, SessionStore, ShareError, SharedAdmission, SharedSessions,
    SharedState, StoreError,
};
pub use specs::{PromptOutput, PromptSpec, ResourceSpec};
pub use targeted::{ChangeFeed, SessionChanges, TARGETED_BACKLOG};
pub use tasks::{
    MemoryTaskStore, StoreBounds, TaskLimits, TaskOutcome, TaskRecord, TaskStore, TaskStoreError,
};
pub use typed::{Elicited, Structured, ToolOutput};
