//! JSON-RPC envelopes, ids, and the shared parts of params and results. The
//! typed views of `_meta` are in [`super::meta`]; a result that may be an
//! input request or a task is an [`super::outcome::Outcome`].
//!
//! The envelopes are generic over the method marker and the params or result
//! type, so `Request<ToolsCall, CallToolRequestParams>` both checks the method
//! and types the params, while `Request` with its defaults reads any request.
//! The domain is growing its own JSON-RPC module; this one stays local to the
//! wire so the two can be reconciled later without a flag day.

use serde::de::{Deserializer, Error as _};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Number, Value};

use super::literals::JsonRpcVersion;
use protocol_droid_domain::ir::{
    JsonObject, RESULT_TYPE_COMPLETE, RESULT_TYPE_INPUT_REQUIRED, RESULT_TYPE_TASK,
};
use protocol_droid_domain::jsonrpc::ErrorCode;

/// A request id, shared with the domain's JSON-RPC layer.
pub use protocol_droid_domain::jsonrpc::RequestId;
use protocol_droid_domain::jsonrpc::ResponseId;

/// A progress token: a string or a number (the spec does not say integer).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ProgressToken {
    /// A string token.
    String(String),
    /// A numeric token, kept as the peer wrote it.
    Number(Number),
}

impl Serialize for ProgressToken {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::String(s) => serializer.serialize_str(s),
            Self::Number(n) => n.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for ProgressToken {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::String(s) => Ok(Self::String(s)),
            Value::Number(n) => Ok(Self::Number(n)),
            _ => Err(D::Error::custom(
                "a progress token must be a string or a number",
            )),
        }
    }
}

/// A JSON-RPC request: `{jsonrpc, id, method, params?}`.
///
/// `M` is the method: a marker from [`super::literals`] to insist on one
/// method, or `String` for any. `P` is the params type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
// Written out: serde would otherwise ask `P: Default` for `params`.
#[serde(bound(deserialize = "M: Deserialize<'de>, P: Deserialize<'de>"))]
pub struct Request<M = String, P = Value> {
    /// Always `"2.0"`.
    pub jsonrpc: JsonRpcVersion,
    /// The request's id.
    pub id: RequestId,
    /// The method.
    pub method: M,
    /// The params; optional for some methods in some revisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<P>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// A JSON-RPC notification: `{jsonrpc, method, params?}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
// Written out: serde would otherwise ask `P: Default` for `params`.
#[serde(bound(deserialize = "M: Deserialize<'de>, P: Deserialize<'de>"))]
pub struct Notification<M = String, P = Value> {
    /// Always `"2.0"`.
    pub jsonrpc: JsonRpcVersion,
    /// The method.
    pub method: M,
    /// The params.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<P>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// A successful JSON-RPC response: `{jsonrpc, id, result}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResultResponse<R = Value> {
    /// Always `"2.0"`.
    pub jsonrpc: JsonRpcVersion,
    /// The id of the request this answers.
    pub id: RequestId,
    /// The result.
    pub result: R,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// A JSON-RPC error response: `{jsonrpc, id?, error}`.
///
/// When the request's id could not be read, JSON-RPC 2.0 writes `"id":
/// null` and 2025-11-25 also allows leaving `id` out; the two are kept apart
/// so an error is written back as the peer wrote it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorResponse<D = Value> {
    /// Always `"2.0"`.
    pub jsonrpc: JsonRpcVersion,
    /// The id of the request this answers, `null`, or absent.
    #[serde(default, skip_serializing_if = "ResponseId::is_absent")]
    pub id: ResponseId,
    /// The error.
    pub error: ErrorObject<D>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// A JSON-RPC error object: `{code, message, data?}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
// Written out because `deserialize_with` hides `D` from serde's inference.
#[serde(bound(deserialize = "D: Deserialize<'de>"))]
pub struct ErrorObject<D = Value> {
    /// The error code.
    pub code: ErrorCode,
    /// A short description.
    pub message: String,
    /// Further detail. A `null` here is kept as `Some(Value::Null)` when `D`
    /// is [`Value`], so it is written back.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "protocol_droid_domain::ir::present"
    )]
    pub data: Option<D>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// Params carrying nothing but `_meta`: `RequestParams`.
///
/// In 2026-07-28 every request's `_meta` is required and holds the
/// protocol version and client capabilities (see [`RequestMeta`](super::meta::RequestMeta)); before
/// that it was optional. Kept as an object so unknown keys survive.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestParams {
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// Params of the paginated list requests: `PaginatedRequestParams`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PaginatedRequestParams {
    /// The opaque cursor from the previous page's `nextCursor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// Params carrying nothing but `_meta`: `NotificationParams`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NotificationParams {
    /// Notification metadata (see [`NotificationMeta`](super::meta::NotificationMeta)).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// A result with no members of its own: `EmptyResult` (and the base
/// `Result`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EmptyResult {
    /// What kind of result this is (2026-07-28); absent means complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_type: Option<ResultType>,
    /// Result metadata (see [`ResultMeta`](super::meta::ResultMeta)).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The caching members a cacheable result adds (2026-07-28):
/// `CacheableResult`.
///
/// The list, read and discover results carry `ttl_ms` and `cache_scope`
/// themselves; this type is the bare shape.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheableResult {
    /// What kind of result this is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_type: Option<ResultType>,
    /// How long the result stays fresh, in milliseconds. Signed because the
    /// spec tells receivers to treat a negative value as 0, not to refuse it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<i64>,
    /// Who may share a cached copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_scope: Option<CacheScope>,
    /// Result metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// Who may reuse a cached result (2026-07-28).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheScope {
    /// Any cache, shared ones included, for any user.
    Public,
    /// Only within the same authorization context.
    Private,
}

/// A result's `resultType` (2026-07-28). Open: extensions add values.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ResultType {
    /// `complete`: the request is done.
    Complete,
    /// `input_required`: the client must answer and retry.
    InputRequired,
    /// `task`: the tasks extension's deferred result.
    Task,
    /// A value this build does not know, kept as sent.
    Other(String),
}

impl ResultType {
    /// The value on the wire.
    #[must_use]
    pub fn as_str(&self) -> &str {
        match self {
            Self::Complete => RESULT_TYPE_COMPLETE,
            Self::InputRequired => RESULT_TYPE_INPUT_REQUIRED,
            Self::Task => RESULT_TYPE_TASK,
            Self::Other(s) => s,
        }
    }

    /// The result type a wire string names.
    #[must_use]
    pub fn from_wire(value: &str) -> Self {
        match value {
            RESULT_TYPE_COMPLETE => Self::Complete,
            RESULT_TYPE_INPUT_REQUIRED => Self::InputRequired,
            RESULT_TYPE_TASK => Self::Task,
            other => Self::Other(other.to_owned()),
        }
    }
}

impl Serialize for ResultType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ResultType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Self::from_wire(&String::deserialize(deserializer)?))
    }
}

/// The `resultType` of a result object, if it has one.
///
/// # Errors
///
/// When `resultType` is present but not a string.
pub fn result_type_of(result: &Value) -> Result<Option<ResultType>, serde_json::Error> {
    match result.get("resultType") {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(ResultType::from_wire(s))),
        Some(_) => Err(serde_json::Error::custom("`resultType` must be a string")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_error_with_a_null_id_is_written_back_with_a_null_id() -> Result<(), serde_json::Error> {
        for wire in [
            json!({ "jsonrpc": "2.0", "id": null, "error": { "code": -32700, "message": "x" } }),
            json!({ "jsonrpc": "2.0", "error": { "code": -32700, "message": "x" } }),
            json!({ "jsonrpc": "2.0", "id": 3, "error": { "code": -32601, "message": "x" } }),
        ] {
            let read: ErrorResponse = serde_json::from_value(wire.clone())?;
            assert_eq!(serde_json::to_value(&read)?, wire);
        }
        Ok(())
    }

    #[test]
    fn an_integer_id_stays_an_integer_and_a_float_id_is_refused() -> Result<(), serde_json::Error> {
        let id: RequestId = serde_json::from_value(json!(7))?;
        assert_eq!(id, RequestId::Number(7));
        assert_eq!(serde_json::to_value(&id)?, json!(7));
        assert!(serde_json::from_value::<RequestId>(json!(7.5)).is_err());
        assert!(serde_json::from_value::<RequestId>(json!(null)).is_err());
        Ok(())
    }

    #[test]
    fn a_null_error_data_is_written_back() -> Result<(), serde_json::Error> {
        let wire = json!({ "code": -32603, "message": "x", "data": null });
        let error: ErrorObject = serde_json::from_value(wire.clone())?;
        assert_eq!(error.data, Some(Value::Null));
        assert_eq!(serde_json::to_value(&error)?, wire);
        Ok(())
    }

    #[test]
    fn a_request_for_one_method_refuses_another() {
        use crate::literals::ToolsCall;
        let wire = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" });
        assert!(serde_json::from_value::<Request<ToolsCall>>(wire.clone()).is_err());
        assert!(serde_json::from_value::<Request>(wire).is_ok());
    }
}
