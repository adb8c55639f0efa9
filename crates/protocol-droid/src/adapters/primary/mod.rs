//! Primary (driving) adapters: the transports that bring requests in, and
//! the gateway's admin endpoint.

pub mod acp;
#[cfg(unix)]
pub mod admin;
pub mod http;
pub mod stdio;
