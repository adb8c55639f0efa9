//! The client: one connection to one MCP server, at any revision, over any
//! transport.
//!
//! [`Client::connect`] settles the era and revision ([`era`]), then the typed
//! operations ([`ops`]) send requests with what the revision needs: the
//! 2026-07-28 `_meta` on every request, `Mcp-Param-*` hints from tool
//! annotations ([`headers`]), cached answers where `ttlMs` allows
//! ([`cache`]), and input rounds answered by the application's
//! [`ClientHandler`] ([`input`]). Transports implement the [`Link`] port.

pub mod cache;
mod connection;
pub mod era;
mod error;
pub mod handler;
pub mod headers;
pub mod input;
pub mod link;
pub mod ops;

pub use connection::{
    Client, ClientOptions, MAX_SERVER_REQUESTS, ProgressFn, RequestOptions, ServerState,
};
pub use error::ClientError;
pub use handler::{ClientHandler, Declining, Notice};
pub use link::{Hints, Inbound, InboundRx, InboundTx, Link, LinkError, Outgoing, inbound_queue};
pub use ops::Reply;
