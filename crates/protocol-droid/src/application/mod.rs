//! The use cases, each declaring the ports it needs.
//!
//! Nothing here reads a socket: a use case asks its ports (traits it
//! declares itself) and the domain's profile, and the adapters supply the
//! rest. The shared wire types (a `Tool`, a `Prompt`) are still read from
//! `adapters::secondary::codec` in the files `scripts/layers-baseline.txt`
//! lists; they have no I/O and are to move where this layer may import them.

pub mod bridge;
pub mod client;
pub mod gateway;
pub mod server;
