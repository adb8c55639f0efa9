//! Primary (driving) adapters: the transports that bring requests in.

pub mod acp;
pub mod http;
pub mod stdio;
