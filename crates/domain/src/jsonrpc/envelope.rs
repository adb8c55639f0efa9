//! The four kinds of JSON-RPC message, and reading them from bytes.

use core::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::VERSION;
use super::error::{ErrorCode, ErrorObject};
use super::id::{RequestId, ResponseId};
use super::surrogates::mend_lone_surrogates;

/// A request: it has an `id` and expects exactly one answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// The id the answer must carry.
    pub id: RequestId,
    /// The method.
    pub method: String,
    /// The params, as sent; `None` when the member was absent.
    pub params: Option<Value>,
}

/// A notification: no `id`, and never an answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Notification {
    /// The method.
    pub method: String,
    /// The params, as sent.
    pub params: Option<Value>,
}

/// An answer to a request.
#[derive(Clone, Debug, PartialEq)]
pub struct Response {
    /// Which request this answers.
    pub id: ResponseId,
    /// The result, or the error.
    pub outcome: Result<Value, ErrorObject>,
}

/// Any one JSON-RPC message.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// A request.
    Request(Request),
    /// A notification.
    Notification(Notification),
    /// A response, successful or not.
    Response(Response),
}

/// What one frame held: a single message or a batch (2025-03-26).
#[derive(Clone, Debug, PartialEq)]
pub enum Incoming {
    /// One message.
    Single(Message),
    /// A JSON-RPC batch, each element read separately so that one bad element
    /// is answered on its own rather than failing its siblings.
    Batch(Vec<Result<Message, EnvelopeError>>),
}

/// Why a frame is not a JSON-RPC message.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{}: {message}", code.0)]
#[non_exhaustive]
pub struct EnvelopeError {
    /// [`ErrorCode::PARSE_ERROR`] or [`ErrorCode::INVALID_REQUEST`].
    pub code: ErrorCode,
    /// What was wrong.
    pub message: String,
    /// The id, when it could be read, so the error can be addressed to it.
    pub id: ResponseId,
    /// Whether the frame was shaped as an answer (an object with no
    /// `method`, and a `result` or an `error`): its id is then one of the receiver's own requests, which
    /// the unreadable answer fails, and the error sent back names no id
    /// (the sender may have a request of its own under the same one).
    pub answer: bool,
}

impl EnvelopeError {
    fn invalid(message: impl Into<String>, id: ResponseId) -> Self {
        Self {
            code: ErrorCode::INVALID_REQUEST,
            message: message.into(),
            id,
            answer: false,
        }
    }

    /// The receiver's own request this frame meant to answer and could not,
    /// if it was shaped as an answer naming one: that request is to fail at
    /// once, rather than wait for an answer that will not come.
    #[must_use]
    pub fn answered(&self) -> Option<&RequestId> {
        match (&self.id, self.answer) {
            (ResponseId::Id(id), true) => Some(id),
            _ => None,
        }
    }

    /// The error response a receiver should send back.
    ///
    /// A request whose id could not be read is answered with `"id": null`,
    /// as JSON-RPC requires; so is an answer, whose id is not the sender's.
    #[must_use]
    pub fn to_response(&self) -> Response {
        let id = match &self.id {
            ResponseId::Id(id) if !self.answer => ResponseId::Id(id.clone()),
            ResponseId::Id(_) | ResponseId::Null | ResponseId::Absent => ResponseId::Null,
        };
        Response {
            id,
            outcome: Err(ErrorObject::new(self.code, self.message.clone())),
        }
    }
}

/// Reads one frame.
///
/// The envelope is read straight from the bytes into its members, without a
/// JSON object for the envelope itself; members no message has are read (so
/// that malformed JSON anywhere is a parse error) and dropped. Building a
/// JSON object for the envelope, only to take it apart again, was the larger
/// part of reading a message.
///
/// # Errors
///
/// A parse error for bytes that are not JSON (including invalid UTF-8 and
/// nesting past `serde_json`'s recursion limit), an invalid-request error for
/// JSON that is not a message or an empty batch.
pub fn parse(frame: &[u8]) -> Result<Incoming, EnvelopeError> {
    let not_json = |e: &dyn fmt::Display| EnvelopeError {
        code: ErrorCode::PARSE_ERROR,
        message: format!("not JSON: {e}"),
        id: ResponseId::Null,
        answer: false,
    };
    // UTF-8 is checked once for the whole frame: reading bytes, serde_json
    // checks every string on its own, which costs more than one pass.
    let text = core::str::from_utf8(frame).map_err(|e| not_json(&e))?;
    let frame: Frame = match serde_json::from_str(text) {
        Ok(frame) => frame,
        // JSON a Rust string cannot hold (a lone surrogate) is read with
        // U+FFFD in its place, rather than refused with no id to answer.
        Err(e) => {
            let mended = mend_lone_surrogates(text).ok_or_else(|| not_json(&e))?;
            serde_json::from_str(&mended).map_err(|e| not_json(&e))?
        }
    };
    match frame {
        Frame::Batch(items) if items.is_empty() => Err(EnvelopeError::invalid(
            "an empty batch is not a request",
            ResponseId::Null,
        )),
        Frame::Batch(items) => Ok(Incoming::Batch(
            items.into_iter().map(Frame::into_message).collect(),
        )),
        other => other.into_message().map(Incoming::Single),
    }
}

impl Message {
    /// Reads a message from a JSON value.
    ///
    /// # Errors
    ///
    /// [`ErrorCode::INVALID_REQUEST`], with the id when it was readable.
    pub fn from_value(value: Value) -> Result<Self, EnvelopeError> {
        match value {
            Value::Object(mut map) => Members {
                jsonrpc: map.remove("jsonrpc"),
                id: map.remove("id"),
                method: map.remove("method"),
                params: map.remove("params"),
                result: map.remove("result"),
                error: map.remove("error"),
                repeated: None,
            }
            .into_message(),
            _ => Frame::Other.into_message(),
        }
    }

    /// The message as a JSON value.
    #[must_use]
    pub fn to_value(&self) -> Value {
        self.clone().into_value()
    }

    /// The message as a JSON value, its params or result moved rather than
    /// copied.
    #[must_use]
    pub fn into_value(self) -> Value {
        let mut map = Map::with_capacity(4);
        map.insert("jsonrpc".to_owned(), Value::from(VERSION));
        match self {
            Self::Request(Request { id, method, params }) => {
                map.insert("id".to_owned(), id.to_json());
                map.insert("method".to_owned(), Value::String(method));
                if let Some(params) = params {
                    map.insert("params".to_owned(), params);
                }
            }
            Self::Notification(Notification { method, params }) => {
                map.insert("method".to_owned(), Value::String(method));
                if let Some(params) = params {
                    map.insert("params".to_owned(), params);
                }
            }
            Self::Response(Response { id, outcome }) => {
                match id {
                    ResponseId::Id(id) => {
                        map.insert("id".to_owned(), id.to_json());
                    }
                    ResponseId::Null => {
                        map.insert("id".to_owned(), Value::Null);
                    }
                    ResponseId::Absent => {}
                }
                match outcome {
                    Ok(result) => map.insert("result".to_owned(), result),
                    Err(error) => map.insert("error".to_owned(), error.to_json()),
                };
            }
        }
        Value::Object(map)
    }
}

/// A frame as `serde_json` reads it, before any JSON-RPC rule is applied.
enum Frame {
    /// A JSON object: a message, or why it is not one. Read into a message
    /// as soon as its members are, so what is moved about afterwards is the
    /// message rather than six slots for its members.
    Object(Result<Message, EnvelopeError>),
    /// A JSON array: a batch.
    Batch(Vec<Self>),
    /// Any other JSON value, which no message is.
    Other,
}

impl Frame {
    fn into_message(self) -> Result<Message, EnvelopeError> {
        match self {
            Self::Object(message) => message,
            Self::Batch(_) | Self::Other => Err(EnvelopeError::invalid(
                "a message must be a JSON object",
                ResponseId::Null,
            )),
        }
    }
}

/// The members of a message object; any other member is read and dropped.
///
/// Each is kept as whatever JSON it held, so that a member of the wrong type
/// is an invalid request (with the id, when that was readable) rather than
/// a parse error.
#[derive(Default)]
struct Members {
    jsonrpc: Option<Value>,
    id: Option<Value>,
    method: Option<Value>,
    params: Option<Value>,
    result: Option<Value>,
    error: Option<Value>,
    /// A member given twice, if any: refused, since readers that keep the
    /// first and readers that keep the last would read two messages.
    repeated: Option<&'static str>,
}

impl Members {
    fn into_message(self) -> Result<Message, EnvelopeError> {
        // Without either, it may as well be a request that lost its
        // method, and is refused under its id as one.
        let answer = self.method.is_none() && (self.result.is_some() || self.error.is_some());
        self.read().map_err(|mut error| {
            error.answer = answer;
            error
        })
    }

    fn read(self) -> Result<Message, EnvelopeError> {
        if self.repeated == Some("id") {
            return Err(EnvelopeError::invalid(
                "a message may not repeat its member `id`",
                ResponseId::Null,
            ));
        }
        let id = match self.id {
            None => ResponseId::Absent,
            Some(Value::Null) => ResponseId::Null,
            Some(raw) => match RequestId::from_json(&raw) {
                Some(id) => ResponseId::Id(id),
                None => {
                    return Err(EnvelopeError::invalid(
                        "`id` must be a string or an integer",
                        ResponseId::Null,
                    ));
                }
            },
        };
        if let Some(member) = self.repeated {
            return Err(EnvelopeError::invalid(
                format!("a message may not repeat its member `{member}`"),
                id,
            ));
        }
        if self.jsonrpc.as_ref().and_then(Value::as_str) != Some(VERSION) {
            return Err(EnvelopeError::invalid("`jsonrpc` must be \"2.0\"", id));
        }
        match self.method {
            Some(method) => Self::call(method, self.params, id),
            None => Self::response(self.result, self.error, id),
        }
    }

    fn call(
        method: Value,
        params: Option<Value>,
        id: ResponseId,
    ) -> Result<Message, EnvelopeError> {
        let Value::String(method) = method else {
            return Err(EnvelopeError::invalid("`method` must be a string", id));
        };
        if params
            .as_ref()
            .is_some_and(|p| !p.is_object() && !p.is_array())
        {
            return Err(EnvelopeError::invalid(
                "`params` must be an object or an array",
                id,
            ));
        }
        match id {
            ResponseId::Absent => Ok(Message::Notification(Notification { method, params })),
            ResponseId::Id(id) => Ok(Message::Request(Request { id, method, params })),
            ResponseId::Null => Err(EnvelopeError::invalid(
                "a request id may not be null",
                ResponseId::Null,
            )),
        }
    }

    fn response(
        result: Option<Value>,
        error: Option<Value>,
        id: ResponseId,
    ) -> Result<Message, EnvelopeError> {
        match (result, error) {
            (Some(result), None) => match id {
                ResponseId::Id(_) => Ok(Message::Response(Response {
                    id,
                    outcome: Ok(result),
                })),
                ResponseId::Null | ResponseId::Absent => Err(EnvelopeError::invalid(
                    "a result must carry the id of the request it answers",
                    ResponseId::Null,
                )),
            },
            (None, Some(error)) => {
                let error: ErrorObject = serde_json::from_value(error).map_err(|e| {
                    EnvelopeError::invalid(format!("malformed `error`: {e}"), id.clone())
                })?;
                Ok(Message::Response(Response {
                    id,
                    outcome: Err(error),
                }))
            }
            (Some(_), Some(_)) => Err(EnvelopeError::invalid(
                "a response has `result` or `error`, not both",
                id,
            )),
            (None, None) => Err(EnvelopeError::invalid(
                "a message needs `method`, `result` or `error`",
                id,
            )),
        }
    }
}

impl<'de> Deserialize<'de> for Frame {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(FrameVisitor)
    }
}

struct FrameVisitor;

impl<'de> Visitor<'de> for FrameVisitor {
    type Value = Frame;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC message or batch")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Frame, A::Error> {
        let mut members = Members::default();
        while let Some(key) = map.next_key::<Member>()? {
            let (slot, name) = match key {
                Member::Jsonrpc => (&mut members.jsonrpc, "jsonrpc"),
                Member::Id => (&mut members.id, "id"),
                Member::Method => (&mut members.method, "method"),
                Member::Params => (&mut members.params, "params"),
                Member::Result => (&mut members.result, "result"),
                Member::Error => (&mut members.error, "error"),
                // Read whole and dropped rather than skipped: serde_json's
                // skipping does not check UTF-8, escapes, number range or
                // depth, and malformed JSON is a parse error wherever it is.
                Member::Other => {
                    map.next_value::<Value>()?;
                    continue;
                }
            };
            if slot.is_some() {
                // A repeated `id` names no one; it wins over another.
                if name == "id" {
                    members.repeated = Some(name);
                } else {
                    members.repeated.get_or_insert(name);
                }
            }
            *slot = Some(map.next_value()?);
        }
        Ok(Frame::Object(members.into_message()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Frame, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element::<Frame>()? {
            items.push(item);
        }
        Ok(Frame::Batch(items))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Frame, E> {
        Ok(Frame::Other)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Frame, E> {
        Ok(Frame::Other)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Frame, E> {
        Ok(Frame::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Frame, E> {
        Ok(Frame::Other)
    }

    fn visit_str<E>(self, _: &str) -> Result<Frame, E> {
        Ok(Frame::Other)
    }

    fn visit_unit<E>(self) -> Result<Frame, E> {
        Ok(Frame::Other)
    }
}

/// The name of a member of a message object.
enum Member {
    Jsonrpc,
    Id,
    Method,
    Params,
    Result,
    Error,
    Other,
}

impl<'de> Deserialize<'de> for Member {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_identifier(MemberVisitor)
    }
}

struct MemberVisitor;

impl Visitor<'_> for MemberVisitor {
    type Value = Member;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E>(self, name: &str) -> Result<Member, E> {
        Ok(match name {
            "jsonrpc" => Member::Jsonrpc,
            "id" => Member::Id,
            "method" => Member::Method,
            "params" => Member::Params,
            "result" => Member::Result,
            "error" => Member::Error,
            _ => Member::Other,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn single(frame: &str) -> Result<Message, EnvelopeError> {
        match parse(frame.as_bytes())? {
            Incoming::Single(message) => Ok(message),
            Incoming::Batch(_) => Err(EnvelopeError::invalid("batch", ResponseId::Null)),
        }
    }

    #[test]
    fn malformed_json_is_a_parse_error_answered_with_a_null_id() {
        let err = parse(b"{\"jsonrpc\":").err();
        let err = err.map(|e| (e.code, e.to_response().id));
        assert_eq!(err, Some((ErrorCode::PARSE_ERROR, ResponseId::Null)));
    }

    #[test]
    fn invalid_utf8_is_a_parse_error() {
        let err = parse(b"{\"jsonrpc\":\"2.0\",\"method\":\"\xff\"}").err();
        assert_eq!(err.map(|e| e.code), Some(ErrorCode::PARSE_ERROR));
    }

    #[test]
    fn a_non_object_is_an_invalid_request() {
        for frame in ["42", "\"ping\"", "null"] {
            assert_eq!(
                single(frame).err().map(|e| e.code),
                Some(ErrorCode::INVALID_REQUEST)
            );
        }
    }

    #[test]
    fn a_request_without_a_method_keeps_its_id_for_the_error() {
        let err = single(r#"{"jsonrpc":"2.0","id":7}"#).err();
        assert_eq!(
            err.map(|e| (e.code, e.id)),
            Some((
                ErrorCode::INVALID_REQUEST,
                ResponseId::Id(RequestId::Number(7))
            ))
        );
    }

    #[test]
    fn requests_and_notifications_differ_by_the_presence_of_an_id() -> Result<(), EnvelopeError> {
        let request = single(r#"{"jsonrpc":"2.0","id":"a","method":"tools/list"}"#)?;
        assert!(matches!(
            request,
            Message::Request(Request {
                id: RequestId::String(_),
                ..
            })
        ));
        let note = single(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)?;
        assert!(matches!(note, Message::Notification(_)));
        Ok(())
    }

    #[test]
    fn an_error_with_a_null_id_is_kept_apart_from_one_with_none() -> Result<(), EnvelopeError> {
        let null = single(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#)?;
        let absent = single(r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"x"}}"#)?;
        assert!(matches!(
            null,
            Message::Response(Response {
                id: ResponseId::Null,
                ..
            })
        ));
        assert!(matches!(
            absent,
            Message::Response(Response {
                id: ResponseId::Absent,
                ..
            })
        ));
        Ok(())
    }

    #[test]
    fn a_repeated_member_is_refused_and_a_repeated_id_names_no_one() {
        let refused = single(r#"{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}"#);
        assert!(
            matches!(&refused, Err(e) if e.code == ErrorCode::INVALID_REQUEST
                && e.id == ResponseId::Id(RequestId::Number(1))
                && e.message.contains("`method`")),
            "{refused:?}"
        );
        let refused = single(r#"{"jsonrpc":"2.0","id":20,"method":"ping","i\u0064":21}"#);
        assert!(
            matches!(&refused, Err(e) if e.id == ResponseId::Null && e.message.contains("`id`")),
            "{refused:?}"
        );
    }

    #[test]
    fn an_answer_that_is_no_answer_is_refused_under_no_id() {
        let refused =
            single(r#"{"jsonrpc":"2.0","id":"q-1","result":{},"error":{"code":1,"message":"x"}}"#);
        assert!(
            matches!(&refused, Err(e) if e.answer
                && e.answered() == Some(&RequestId::String("q-1".into()))
                && e.to_response().id == ResponseId::Null),
            "{refused:?}"
        );
        // A request's refusal still goes to its id.
        let refused = single(r#"{"jsonrpc":"2.0","id":"r-1","method":7}"#);
        assert!(
            matches!(&refused, Err(e) if !e.answer && e.answered().is_none()
                && e.to_response().id == ResponseId::Id(RequestId::String("r-1".into()))),
            "{refused:?}"
        );
    }

    #[test]
    fn a_batch_is_read_element_by_element() -> Result<(), EnvelopeError> {
        let Incoming::Batch(items) = parse(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}, 5]"#)?
        else {
            return Err(EnvelopeError::invalid("not a batch", ResponseId::Null));
        };
        assert!(matches!(items.first(), Some(Ok(Message::Request(_)))));
        assert!(matches!(items.get(1), Some(Err(_))));
        Ok(())
    }

    #[test]
    fn reading_bytes_agrees_with_reading_a_json_value() {
        for frame in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#,
            r#"{"method":"ping","extra":{"deep":[1,{"a":null}]},"jsonrpc":"2.0","id":"s"}"#,
            r#"{"jsonr\u0070c":"2.0","i\u0064":3,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
            r#"{"jsonrpc":2,"id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":"x"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":"x"}}"#,
            r#"{"jsonrpc":"2.0","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            r#"{}"#,
            "true",
            "[1]",
        ] {
            let read = parse(frame.as_bytes());
            let value: Value = serde_json::from_str(frame).unwrap_or(Value::Null);
            let expected = match value {
                Value::Array(items) => Ok(Incoming::Batch(
                    items.into_iter().map(Message::from_value).collect(),
                )),
                other => Message::from_value(other).map(Incoming::Single),
            };
            assert_eq!(read, expected, "{frame}");
        }
    }

    #[test]
    fn malformed_json_in_a_member_no_message_has_is_still_a_parse_error() {
        // A lone surrogate is JSON, and read (see `surrogates`).
        let lone = br#"{"jsonrpc":"2.0","id":1,"method":"ping","x":"\ud800"}"#;
        assert!(parse(lone).is_ok());
        let frames: [&[u8]; 3] = [
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"x\":\"\xff\"}",
            br#"{"jsonrpc":"2.0","id":1,"method":"ping","x":1e400}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"ping","x":{"y":[1,}}"#,
        ];
        for frame in frames {
            assert_eq!(
                parse(frame).err().map(|e| e.code),
                Some(ErrorCode::PARSE_ERROR),
                "{}",
                String::from_utf8_lossy(frame)
            );
        }
    }

    #[test]
    fn a_batch_element_that_is_itself_a_batch_is_invalid() -> Result<(), EnvelopeError> {
        let Incoming::Batch(items) = parse(br#"[[{"jsonrpc":"2.0","method":"ping"}]]"#)? else {
            return Err(EnvelopeError::invalid("not a batch", ResponseId::Null));
        };
        assert_eq!(
            items
                .first()
                .map(|item| item.as_ref().err().map(|e| e.code)),
            Some(Some(ErrorCode::INVALID_REQUEST))
        );
        Ok(())
    }

    #[test]
    fn messages_write_back_what_they_read() -> Result<(), EnvelopeError> {
        for frame in [
            json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}),
            json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}),
            json!({"jsonrpc":"2.0","id":"r","result":{}}),
            json!({"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"bad","data":[1]}}),
        ] {
            let message = Message::from_value(frame.clone())?;
            assert_eq!(message.to_value(), frame);
        }
        Ok(())
    }
}
