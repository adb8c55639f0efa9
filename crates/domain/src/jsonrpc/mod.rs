//! JSON-RPC 2.0 as MCP uses it: ids, envelopes, error codes and framing.
//!
//! Parsing is split the way the specification splits blame. Bytes that are not
//! JSON are a [`ErrorCode::PARSE_ERROR`]; JSON that is not a JSON-RPC message
//! is an [`ErrorCode::INVALID_REQUEST`]; a message whose `params` do not fit
//! its method is the method's business and [`ErrorCode::INVALID_PARAMS`]. Each
//! failure carries the request id when one could be read, so the peer can be
//! answered rather than left waiting.

mod envelope;
mod error;
pub mod framing;
mod id;
mod surrogates;

pub use envelope::{EnvelopeError, Incoming, Message, Notification, Request, Response, parse};
pub use error::{ErrorCode, ErrorObject};
pub use id::{RequestId, ResponseId};
pub use surrogates::{mend_lone_surrogates, value_from_slice, value_from_str};

/// The only `jsonrpc` member value this protocol speaks.
pub const VERSION: &str = "2.0";
