//! Adapters: the code that speaks to the world outside the domain.
//!
//! Primary (driving) adapters bring requests in: the transports. Secondary
//! (driven) adapters are what the application calls out to through its
//! ports: connections to upstream servers (a child process, HTTP), TLS, the
//! OAuth client and the bearer-token validators.

pub mod primary;
pub mod secondary;
