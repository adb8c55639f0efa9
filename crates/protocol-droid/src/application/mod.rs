//! The use cases, each declaring the ports it needs.
//!
//! Nothing here reads a socket or names a revision's wire types: a use case
//! asks its ports (traits it declares itself) and the domain's profile, and
//! the adapters supply the rest.

pub mod bridge;
pub mod client;
pub mod gateway;
pub mod server;
