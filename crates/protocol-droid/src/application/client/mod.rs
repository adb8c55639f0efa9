//! The client: one connection to one MCP server, at any revision, over any
//! transport.
//!
//! [`Client::connect`] settles the era and revision (`era`), then the typed
//! operations (`ops`) send requests with what the revision needs: the
//! 2026-07-28 `_meta` on every request, `Mcp-Param-*` hints from tool
//! annotations ([`headers`]), cached answers where `ttlMs` allows
//! (`cache`), and input rounds answered by the application's
//! [`ClientHandler`] (`input`). Transports implement the [`Link`] port.
//! `tasks`: a tool called as a task ([`Client::call_tool_as_task`]) in
//! either form, polled to its end; `own_tasks`: a 2025-11-25 server's
//! question the client runs as a task of its own, when its handler
//! declares `tasks.requests`.

mod answer;
pub(crate) mod cache;
mod connection;
pub(crate) mod era;
mod error;
pub(crate) mod handler;
pub mod headers;
pub(crate) mod input;
pub(crate) mod link;
pub(crate) mod ops;
mod own_tasks;
pub(crate) mod patience;
mod request;
mod tasks;

pub use answer::Answer;
pub(crate) use answer::plain_response;
pub use connection::{
    Client, ClientOptions, MAX_SERVER_REQUESTS, ProgressFn, RequestOptions, ServerState,
};
pub use error::ClientError;
pub use handler::{ClientHandler, Declining, Notice, form_defaults, unsupported};
pub use link::{
    Hints, INBOUND_QUEUE, Inbound, InboundRx, InboundTx, Link, LinkError, Outgoing, inbound_queue,
};
pub use ops::{MAX_ITEMS, MAX_PAGES, Reply};
pub use own_tasks::{MAX_OWN_TASKS, MAX_TTL as MAX_OWN_TASK_TTL};
pub use patience::MAX_PATIENCE;
pub use tasks::{TaskOptions, TaskStatusFn, TaskUpdate};
