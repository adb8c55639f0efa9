//! Secondary (driven) adapters: what the application calls out to.

pub mod authorizer;
pub mod bearer;
pub mod child;
pub mod connect;
pub mod http;
pub mod local_file;
pub mod metrics;
pub mod oauth;
pub mod redis;
pub mod tls;
pub mod trust_file;
