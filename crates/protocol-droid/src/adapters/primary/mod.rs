//! Primary (driving) adapters: the transports that bring requests in.

pub mod http;
pub mod stdio;
