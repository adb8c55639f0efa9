//! Adapters: the code that speaks to the world outside the domain.
//!
//! Primary (driving) adapters bring requests in: the transports. Secondary
//! (driven) adapters are what the application calls out to: the codec that
//! turns MCP's wire messages into typed values and back.

pub mod primary;
pub mod secondary;
