//! Why a client operation failed.

use crate::domain::jsonrpc::ErrorObject;

use super::link::LinkError;

/// Why a client operation failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The server answered with a JSON-RPC error.
    #[error("the server answered {}: {}", .0.code.0, .0.message)]
    Server(ErrorObject),
    /// The transport failed.
    #[error(transparent)]
    Link(#[from] LinkError),
    /// No answer came in time; the request was cancelled.
    #[error("no answer to {method} within {millis} ms; the request was cancelled")]
    Timeout {
        /// The method.
        method: String,
        /// The limit, in milliseconds; or the whole wait, when progress
        /// kept the request waited for until the ceiling.
        millis: u128,
    },
    /// The server asked for input more often than the client allows.
    #[error("{method} still asked for input after {rounds} rounds; giving up")]
    TooManyRounds {
        /// The method.
        method: String,
        /// The rounds answered.
        rounds: usize,
    },
    /// The server's answer does not fit what the method returns.
    #[error("the answer to {method} does not fit: {detail}")]
    InvalidResult {
        /// The method.
        method: String,
        /// What did not fit.
        detail: String,
    },
    /// No protocol version is spoken by both sides.
    #[error("no protocol version in common: {0}")]
    Negotiation(String),
    /// The negotiated revision has no such method or feature.
    #[error("{0} is not available at the negotiated revision")]
    Unsupported(String),
}

impl ClientError {
    /// The JSON-RPC error the server sent, if that is what this is.
    #[must_use]
    pub const fn server_error(&self) -> Option<&ErrorObject> {
        match self {
            Self::Server(error) => Some(error),
            _ => None,
        }
    }
}
