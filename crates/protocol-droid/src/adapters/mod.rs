//! Adapters: the code that speaks to the world outside the domain.
//!
//! Only secondary (driven) adapters exist so far: the codec that turns MCP's
//! wire messages into typed values and back.

pub mod secondary;
