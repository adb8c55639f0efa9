//! The port a client talks through: one message out, messages in.
//!
//! Every transport (a child process's stdio, Streamable HTTP, 2024-11-05
//! HTTP+SSE) is reduced to the same shape: the client hands it whole JSON-RPC
//! messages to deliver, and the transport pushes what the server sent, in
//! order, into an [`InboundTx`]. Transport failures that belong to one request
//! (an HTTP status, a refused challenge) come back as [`Inbound::Failed`] for
//! that request's id, so the client's correlation stays in one place.

use std::fmt;

use futures_util::future::BoxFuture;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use crate::domain::jsonrpc::RequestId;

/// How many inbound messages may wait for the client before a transport's
/// reader is held back: backpressure rather than an unbounded queue.
pub const INBOUND_QUEUE: usize = 1024;

/// Where a transport delivers what the server sent.
pub type InboundTx = mpsc::Sender<Inbound>;

/// Where a client reads what its transport delivered.
pub type InboundRx = mpsc::Receiver<Inbound>;

/// A bounded inbound queue of [`INBOUND_QUEUE`] entries.
#[must_use]
pub fn inbound_queue() -> (InboundTx, InboundRx) {
    mpsc::channel(INBOUND_QUEUE)
}

/// Something a transport delivers to the client.
#[derive(Debug)]
pub enum Inbound {
    /// One JSON-RPC message from the server (a response, a request or a
    /// notification), already parsed as JSON.
    Message(Value),
    /// A response with a `result` and nothing else to read, its result kept
    /// as the server wrote it: only the request waiting for it reads it.
    Answer {
        /// The request answered.
        id: RequestId,
        /// The result's text, known to be one JSON value.
        result: Box<RawValue>,
    },
    /// The transport could not carry the request `id` to an answer: an HTTP
    /// status without a JSON-RPC body, a broken response stream, a refused
    /// authorization.
    Failed {
        /// The request that failed.
        id: RequestId,
        /// Why.
        error: LinkError,
    },
    /// The server sent bytes that are not a JSON-RPC message. Reported so
    /// nothing is dropped silently; the connection goes on.
    Malformed(String),
    /// A request of the server's too long to read (past `limit` bytes),
    /// whose id was read on the way: the client refuses it under that id,
    /// as a server refuses such a request of a client's, rather than leave
    /// the server waiting for an answer.
    TooLarge {
        /// The request's id.
        id: RequestId,
        /// The bound it went past, in bytes.
        limit: usize,
    },
    /// The server ended the session, as the transport learned on its own
    /// (a legacy HTTP server answering `404` when the GET stream is opened
    /// again): the client tells its handler that the server's lists may
    /// have changed; its next request starts a new session.
    SessionEnded,
    /// The connection is gone; nothing more will arrive.
    Closed(Option<String>),
}

/// Why a transport could not deliver or carry a message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// The connection is closed.
    #[error("the connection is closed")]
    Closed,
    /// The server answered with an HTTP status and no JSON-RPC message.
    #[error("HTTP {status}: {body}")]
    Http {
        /// The status.
        status: u16,
        /// The start of the body, for the error message.
        body: String,
    },
    /// The HTTP session is gone (404 on a request carrying a session id): the
    /// client must initialize again.
    #[error("the HTTP session expired")]
    SessionExpired,
    /// Credentials could not be had.
    #[error("{0}")]
    Unauthorized(String),
    /// The answer ran past the transport's limit and was discarded unread.
    #[error("an answer over the {limit}-byte limit")]
    TooLarge {
        /// The limit in force.
        limit: usize,
    },
    /// Anything else the transport could not do (I/O, a broken stream).
    #[error("{0}")]
    Io(String),
}

/// Per-message hints a transport may turn into routing metadata. Stdio
/// ignores them; Streamable HTTP sends them as `Mcp-Param-*` headers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hints {
    /// `Mcp-Param-<name>` headers to send, by name, with their values already
    /// encoded for a header.
    pub param_headers: Vec<(String, String)>,
}

/// One message handed to a transport.
#[derive(Clone, Debug)]
pub struct Outgoing {
    /// The JSON-RPC message.
    pub message: Value,
    /// Routing hints.
    pub hints: Hints,
}

impl Outgoing {
    /// A message without hints.
    #[must_use]
    pub fn new(message: Value) -> Self {
        Self {
            message,
            hints: Hints::default(),
        }
    }

    /// The message's id when it is a request.
    #[must_use]
    pub fn request_id(&self) -> Option<RequestId> {
        self.message.get("method")?;
        self.message.get("id").and_then(RequestId::from_json)
    }
}

/// A client transport.
pub trait Link: Send + Sync + fmt::Debug {
    /// Delivers one message. For a request, the answer (or an
    /// [`Inbound::Failed`]) arrives later on the inbound queue.
    ///
    /// # Errors
    ///
    /// [`LinkError`] when the message could not be handed over at all.
    fn send(&self, message: Outgoing) -> BoxFuture<'_, Result<(), LinkError>>;

    /// The protocol version to repeat on every message, for transports that
    /// do (the HTTP `MCP-Protocol-Version` header); `None` sends none, as
    /// before the `initialize` handshake has settled one.
    fn set_protocol_version(&self, _version: Option<&str>) {}

    /// Gives up on the request `id`: a transport that carries each request
    /// separately (HTTP) drops its response stream, which is how a
    /// 2026-07-28 server learns of a cancellation. A no-op elsewhere.
    fn cancel(&self, _id: &RequestId) {}

    /// Whether this transport shares one connection between the server's
    /// requests and the client's (stdio), rather than carrying each request
    /// separately (HTTP). Era probing uses it to choose how to probe.
    fn is_stream(&self) -> bool;

    /// Asks the transport to open its standalone server-to-client channel
    /// (the HTTP GET stream) when it has one; a no-op elsewhere.
    fn open_listen_channel(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    /// Closes the connection in order: ends the session where there is one,
    /// then releases the transport's resources.
    fn close(&self) -> BoxFuture<'_, ()>;
}
