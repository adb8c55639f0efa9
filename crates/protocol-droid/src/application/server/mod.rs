//! The server side: sessions and requests, handlers, and dispatch for both
//! eras.
//!
//! - [`auth`]: the [`auth::TokenValidator`] port a resource server checks
//!   bearer tokens through, and the normalisation of their claims.
//! - [`context`]: who a handler is serving ([`context::PeerSession`],
//!   [`context::RequestContext`]) and the ports to reach the client.
//! - [`call`]: what a handler receives, and the one "ask the client" step
//!   that works in both eras.
//! - [`registry`]: what a server offers.
//! - [`forward`]: the [`Forward`] port, serving primitives from elsewhere
//!   (what a bridge is).
//! - [`host`]: the [`Server`]: identity, registry and change feed.
//! - [`dispatch`]: a [`Connection`], one client's view of a server, routing
//!   each request by era.
//! - [`request_state`]: the sealed `requestState` of multi round-trip
//!   requests.
//! - [`idempotency`]: replaying a retried `tools/call`'s recorded answer.
//! - [`reply`]: a result as a transport writes it, a tool's kept typed.
//! - [`scopes`]: the scopes forwarded primitives require.
//! - [`typed`]: typed tools, typed output and typed questions to the
//!   client.

pub mod auth;
pub mod call;
pub mod context;
pub mod dispatch;
pub mod forward;
pub mod host;
pub mod idempotency;
pub mod registry;
pub mod reply;
pub mod request_state;
pub mod scopes;
pub mod typed;

pub use call::{Call, CallError, INPUT_KEY_META, InputRequired, Question};
pub use dispatch::Connection;
pub use forward::Forward;
pub use host::{Change, Server, ServerBuilder, ToolAccess, ToolVisibility};
pub use registry::ToolSpec;
pub use reply::Reply;
pub use scopes::{Primitive, ScopeRules};
pub use typed::{Elicited, Structured, ToolOutput};
