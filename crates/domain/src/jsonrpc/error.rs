//! Error codes and the error object.

use core::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A JSON-RPC error code.
///
/// An open newtype rather than an enum: a peer may send any integer, and a
/// code this build has no name for must still be carried and forwarded
/// unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ErrorCode(pub i32);

impl ErrorCode {
    /// The bytes were not JSON.
    pub const PARSE_ERROR: Self = Self(-32700);
    /// The JSON was not a valid JSON-RPC message.
    pub const INVALID_REQUEST: Self = Self(-32600);
    /// No such method, or one gated by a capability that was not declared.
    pub const METHOD_NOT_FOUND: Self = Self(-32601);
    /// The params do not fit the method; in 2026-07-28 also a missing
    /// required `_meta` key and a missing resource.
    pub const INVALID_PARAMS: Self = Self(-32602);
    /// The receiver failed.
    pub const INTERNAL_ERROR: Self = Self(-32603);
    /// A resource was not found (2024-11-05 to 2025-11-25 only).
    pub const RESOURCE_NOT_FOUND: Self = Self(-32002);
    /// URL elicitation is required first (2025-11-25 only).
    pub const URL_ELICITATION_REQUIRED: Self = Self(-32042);
    /// An HTTP header disagrees with the body (2026-07-28).
    pub const HEADER_MISMATCH: Self = Self(-32020);
    /// The request needs a client capability it did not declare (2026-07-28).
    pub const MISSING_REQUIRED_CLIENT_CAPABILITY: Self = Self(-32021);
    /// The request's protocol version is not supported (2026-07-28).
    pub const UNSUPPORTED_PROTOCOL_VERSION: Self = Self(-32022);
    /// The caller is over a rate limit; `data.retryAfterMs` says when to
    /// try again. Not a code of the specification, which has none for it:
    /// this implementation's, so outside -32768 to -32000, which JSON-RPC
    /// and MCP keep for themselves (2026-07-28 forbids sending a code it has
    /// not defined from -32020 to -32099), and far from the small numbers an
    /// application picks for its own errors, since this one is sent with
    /// HTTP status 429 and `Retry-After`.
    pub const RATE_LIMITED: Self = Self(-31_429);
    /// What the request needs is kept in a store shared by several
    /// instances, and that store cannot be reached now; trying again later
    /// may succeed. This implementation's code, chosen as
    /// [`Self::RATE_LIMITED`] is, and sent over HTTP with status 503 and
    /// `Retry-After`.
    pub const STORE_UNAVAILABLE: Self = Self(-31_503);
    /// The user rejected a sampling request (a documented legacy example, not
    /// a schema code).
    pub const USER_REJECTED: Self = Self(-1);

    /// The code's name in the specification, if it has one.
    #[must_use]
    pub const fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            -32700 => "Parse error",
            -32600 => "Invalid request",
            -32601 => "Method not found",
            -32602 => "Invalid params",
            -32603 => "Internal error",
            -32002 => "Resource not found",
            -32042 => "URL elicitation required",
            -32020 => "Header mismatch",
            -32021 => "Missing required client capability",
            -32022 => "Unsupported protocol version",
            _ => return None,
        })
    }

    /// Whether the code is one the 2026-07-28 era defines for itself, which a
    /// dual-era client reads as proof of a modern server.
    #[must_use]
    pub const fn is_modern(self) -> bool {
        matches!(self.0, -32022..=-32020)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{} ({name})", self.0),
            None => write!(f, "{}", self.0),
        }
    }
}

/// The `error` member of an error response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// What went wrong, as a number.
    pub code: ErrorCode,
    /// What went wrong, for a person.
    pub message: String,
    /// Anything the code defines in addition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error with no `data`.
    #[must_use]
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// What a request of the receiver's own fails with when the peer's
    /// answer to it could not be read (`why`: too long, nested too deep, or
    /// no answer), at once rather than at its timeout; the same words on
    /// every transport.
    #[must_use]
    pub fn unreadable_answer(why: &str) -> Self {
        Self::new(
            ErrorCode::INTERNAL_ERROR,
            format!("the client's answer could not be read: {why}"),
        )
    }

    /// The error object as JSON; infallible, unlike a general serialiser.
    #[must_use]
    pub fn to_json(&self) -> Value {
        let mut map = serde_json::Map::new();
        map.insert("code".to_owned(), Value::from(self.code.0));
        map.insert("message".to_owned(), Value::String(self.message.clone()));
        if let Some(data) = &self.data {
            map.insert("data".to_owned(), data.clone());
        }
        Value::Object(map)
    }

    /// This error, carrying `data`.
    #[must_use]
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}
