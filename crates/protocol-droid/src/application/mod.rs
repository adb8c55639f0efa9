//! The use cases, each declaring the ports it needs.
//!
//! Nothing here reads a socket: a use case asks its ports (traits it
//! declares itself), the domain's profile and the wire model
//! ([`crate::wire`], as sans-IO as the domain), and the adapters supply the
//! rest. `scripts/check-layers.sh` fails the test command if this layer
//! ever imports an adapter.

pub mod bridge;
pub mod client;
pub mod gateway;
pub mod observe;
pub(crate) mod random;
pub mod server;
pub(crate) mod squelch;
