//! ACP's JSON-RPC envelope: reading one line into a frame, and writing one.
//!
//! This is not the domain's MCP envelope: ACP's `RequestId` admits `null`
//! (`"id": null` is a request there, refused by MCP), and ACP has no batches.
//! The blame split is the same: bytes that are not JSON are -32700, JSON that
//! is not a message is -32600, and params are left to the method (-32602).

use serde::Serialize;
use serde_json::{Map, Value};

use super::error::ClientError;
use crate::domain::jsonrpc::{ErrorCode, VERSION, mend_lone_surrogates};

/// One message read from the client.
#[derive(Debug)]
pub(super) enum Frame {
    /// A request: the `id` key was present, whatever its value.
    Request {
        id: Value,
        method: String,
        params: Option<Value>,
    },
    /// A notification: no `id` key at all.
    Notification {
        method: String,
        params: Option<Value>,
    },
    /// An answer to one of the agent's own requests.
    Response {
        id: Value,
        outcome: Result<Value, ClientError>,
    },
    /// Response-shaped but malformed; the reference SDK ignores these, and
    /// answering would risk a reply loop with a client doing the same.
    Ignored(&'static str),
}

/// A line that must be answered with an error.
#[derive(Debug)]
pub(super) struct Refusal {
    pub(super) id: Value,
    pub(super) code: ErrorCode,
    pub(super) message: String,
}

impl Refusal {
    pub(super) fn new(code: ErrorCode, message: impl Into<String>, id: Value) -> Self {
        Self {
            id,
            code,
            message: message.into(),
        }
    }
}

/// Whether `value` may be a JSON-RPC id: `null`, a string, or an integer.
///
/// A fraction is refused rather than echoed: `1.5` would come back as
/// whatever the float formatter writes, and ACP's schema types ids `int64`.
pub(super) fn is_id(value: &Value) -> bool {
    match value {
        Value::Null | Value::String(_) => true,
        Value::Number(n) => n.is_i64() || n.is_u64(),
        Value::Bool(_) | Value::Array(_) | Value::Object(_) => false,
    }
}

/// Reads one line.
pub(super) fn parse(line: &[u8]) -> Result<Frame, Refusal> {
    let refused = |e: serde_json::Error| {
        Refusal::new(
            ErrorCode::PARSE_ERROR,
            format!("Parse error: {e}"),
            Value::Null,
        )
    };
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        // A lone surrogate (half of an emoji, as `JSON.stringify` writes
        // it) is read as U+FFFD, rather than the request refused with no
        // id its client could match.
        Err(e) => {
            let mended = core::str::from_utf8(line)
                .ok()
                .and_then(mend_lone_surrogates)
                .ok_or_else(|| refused(e))?;
            serde_json::from_str(&mended).map_err(refused)?
        }
    };
    let Value::Object(mut map) = value else {
        // Arrays included: ACP defines no batches, and clients send single
        // messages, so a batch is refused whole rather than half-supported.
        return Err(Refusal::new(
            ErrorCode::INVALID_REQUEST,
            "Invalid request: a message must be a JSON object",
            Value::Null,
        ));
    };
    // The key, not the value, decides: `"id": null` is a request.
    let id = match map.remove("id") {
        Some(id) if !is_id(&id) => {
            return Err(Refusal::new(
                ErrorCode::INVALID_REQUEST,
                "Invalid request: `id` must be a string, an integer or null",
                Value::Null,
            ));
        }
        other => other,
    };
    let echo = id.clone().unwrap_or(Value::Null);
    if map.get("jsonrpc").and_then(Value::as_str) != Some(VERSION) {
        return Err(Refusal::new(
            ErrorCode::INVALID_REQUEST,
            "Invalid request: `jsonrpc` must be \"2.0\"",
            echo,
        ));
    }
    match map.remove("method") {
        Some(Value::String(method)) => {
            let params = map.remove("params");
            Ok(match id {
                Some(id) => Frame::Request { id, method, params },
                None => Frame::Notification { method, params },
            })
        }
        Some(_) => Err(Refusal::new(
            ErrorCode::INVALID_REQUEST,
            "Invalid request: `method` must be a string",
            echo,
        )),
        None => response(map, id),
    }
}

fn response(mut map: Map<String, Value>, id: Option<Value>) -> Result<Frame, Refusal> {
    let (result, error) = (map.remove("result"), map.remove("error"));
    let Some(id) = id else {
        if result.is_some() || error.is_some() {
            return Ok(Frame::Ignored("a response without an id"));
        }
        return Err(Refusal::new(
            ErrorCode::INVALID_REQUEST,
            "Invalid request: a message needs `method`, `result` or `error`",
            Value::Null,
        ));
    };
    match (result, error) {
        (Some(result), None) => Ok(Frame::Response {
            id,
            outcome: Ok(result),
        }),
        (None, Some(error)) => {
            let error = serde_json::from_value::<ClientError>(error.clone()).unwrap_or_else(|_| {
                // The waiter is still owed an answer; a malformed error is
                // still an error, so it gets one with the raw value attached.
                ClientError {
                    code: i64::from(ErrorCode::INTERNAL_ERROR.0),
                    message: "the client sent a malformed error object".to_owned(),
                    data: Some(error),
                }
            });
            Ok(Frame::Response {
                id,
                outcome: Err(error),
            })
        }
        (Some(_), Some(_)) => Ok(Frame::Ignored("a response with both result and error")),
        (None, None) => Err(Refusal::new(
            ErrorCode::INVALID_REQUEST,
            "Invalid request: a message needs `method`, `result` or `error`",
            id,
        )),
    }
}

/// `{"jsonrpc":"2.0","id":..,"result":..}`; `result` is always written,
/// `null` included.
#[derive(Serialize)]
pub(super) struct ReplyFrame<'a> {
    pub(super) jsonrpc: &'static str,
    pub(super) id: &'a Value,
    pub(super) result: &'a Value,
}

/// `{"jsonrpc":"2.0","id":..,"error":{..}}`.
#[derive(Serialize)]
pub(super) struct ErrorFrame<'a> {
    pub(super) jsonrpc: &'static str,
    pub(super) id: &'a Value,
    pub(super) error: ErrorBody<'a>,
}

/// The error member; `code` stays an `i64` so any code the application
/// chooses is written as given.
#[derive(Serialize)]
pub(super) struct ErrorBody<'a> {
    pub(super) code: i64,
    pub(super) message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) data: Option<&'a Value>,
}

/// `{"jsonrpc":"2.0","method":..,"params":..}`, with no `id` key at all.
#[derive(Serialize)]
pub(super) struct NotificationFrame<'a, P> {
    pub(super) jsonrpc: &'static str,
    pub(super) method: &'a str,
    pub(super) params: P,
}

/// `{"jsonrpc":"2.0","id":..,"method":..,"params":..}`.
#[derive(Serialize)]
pub(super) struct RequestFrame<'a, P> {
    pub(super) jsonrpc: &'static str,
    pub(super) id: i64,
    pub(super) method: &'a str,
    pub(super) params: P,
}

/// One line ready for the writer: the JSON and its `\n`.
///
/// `serde_json::to_writer` escapes control characters inside strings, so the
/// only raw newline in the line is the terminator.
pub(super) fn line<T: Serialize>(frame: &T) -> Result<Vec<u8>, serde_json::Error> {
    let mut line = serde_json::to_vec(frame)?;
    line.push(b'\n');
    Ok(line)
}
