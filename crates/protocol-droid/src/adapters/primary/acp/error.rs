//! What can go wrong when the agent talks to the client.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Why a send, or a request to the client, did not succeed.
///
/// Grouped by who is to blame: the connection ([`Self::Closed`],
/// [`Self::Write`]), the client ([`Self::Rejected`], [`Self::TimedOut`],
/// [`Self::UnexpectedResult`]) or the calling code ([`Self::Encode`],
/// [`Self::InvalidId`], [`Self::NotAdvertised`]). None of them leaves the
/// peer unusable except the first two, which mean the wire is gone.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AcpPeerError {
    /// The connection is closed: the client closed stdin, the output broke
    /// earlier, or the peer was dropped.
    #[error("the ACP connection is closed")]
    Closed,
    /// Writing this message to the client failed (for example `BrokenPipe`
    /// once the client has died).
    #[error("writing to the client failed: {0}")]
    Write(#[source] Arc<std::io::Error>),
    /// The client answered the agent's request with an error.
    #[error("the client refused {method}: {error}")]
    Rejected {
        /// The method the agent called.
        method: String,
        /// The error the client sent (boxed to keep every `Result` small).
        error: Box<ClientError>,
    },
    /// The client did not answer in time; the agent sent it
    /// `$/cancel_request` and stopped waiting.
    #[error("the client did not answer {method} within {after:?}")]
    TimedOut {
        /// The method the agent called.
        method: String,
        /// How long the agent waited.
        after: Duration,
    },
    /// The client's result did not have the shape the method defines.
    #[error("the client's result for {method} is malformed: {reason}")]
    UnexpectedResult {
        /// The method the agent called.
        method: String,
        /// What did not fit.
        reason: String,
    },
    /// The params or result given to the peer could not be serialised.
    #[error("the message could not be encoded: {0}")]
    Encode(#[from] serde_json::Error),
    /// The id given to `send_reply`/`send_error` is not a JSON-RPC id (a
    /// string, an integer or `null`), so no client could match it.
    #[error("{0} is not a JSON-RPC request id")]
    InvalidId(Value),
    /// The client did not advertise the capability this method needs in
    /// `initialize`, so ACP forbids calling it.
    #[error("the client did not advertise {capability}, which {method} needs")]
    NotAdvertised {
        /// The method the agent tried to call.
        method: String,
        /// The client capability it needs, as a path (`fs.readTextFile`).
        capability: &'static str,
    },
}

impl AcpPeerError {
    /// Whether the connection is gone, so no further send can succeed.
    #[must_use]
    pub const fn is_closed(&self) -> bool {
        matches!(self, Self::Closed | Self::Write(_))
    }
}

/// A JSON-RPC error object sent by the client.
///
/// The code is an `i64` rather than the domain's `i32` `ErrorCode`: ACP lets
/// a client use any integer ("Other" in the schema), and a code that does not
/// fit must still reach the caller rather than fail the whole response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ClientError {
    /// The error code.
    pub code: i64,
    /// The human-readable message.
    pub message: String,
    /// Anything else the client attached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}
