//! Multi round-trip requests (2026-07-28): a server that needs input answers
//! with an [`InputRequiredResult`], and the client retries the request with
//! the answers in `inputResponses`.
//!
//! The input requests are the old server→client requests without `jsonrpc`
//! or `id`. They are read by `method`; an answer has no tag of its own, so it
//! is read by the member only its kind has, or, better, by the method of the
//! request it answers ([`InputResponse::decode`]).

use std::collections::BTreeMap;

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::elicitation::{ElicitRequestParams, ElicitResult};
use super::literals::{ElicitationCreate, InputRequired, RootsList, SamplingCreateMessage};
use super::roots::{ListRootsRequestParams, ListRootsResult};
use super::sampling::{CreateMessageRequestParams, CreateMessageResult};
use protocol_droid_domain::ir::JsonObject;

/// `sampling/createMessage` as an input request: `CreateMessageRequest`.
///
/// Up to 2025-11-25 this was a JSON-RPC request; read as this type, its
/// `jsonrpc` and `id` stay in `extra`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CreateMessageRequest {
    /// Always `sampling/createMessage`.
    pub method: SamplingCreateMessage,
    /// What to sample.
    pub params: CreateMessageRequestParams,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// `elicitation/create` as an input request: `ElicitRequest`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ElicitRequest {
    /// Always `elicitation/create`.
    pub method: ElicitationCreate,
    /// What to ask.
    pub params: ElicitRequestParams,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// `roots/list` as an input request: `ListRootsRequest`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ListRootsRequest {
    /// Always `roots/list`.
    pub method: RootsList,
    /// Only `_meta`, if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<ListRootsRequestParams>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// One thing the server asks the client for: `InputRequest`.
#[derive(Clone, Debug, PartialEq)]
pub enum InputRequest {
    /// Sample the client's model.
    CreateMessage(Box<CreateMessageRequest>),
    /// Ask the user.
    Elicit(Box<ElicitRequest>),
    /// List the client's roots.
    ListRoots(ListRootsRequest),
    /// A method an extension added, kept whole.
    Other(JsonObject),
}

impl InputRequest {
    /// The request's method.
    #[must_use]
    pub fn method(&self) -> &str {
        match self {
            Self::CreateMessage(_) => SamplingCreateMessage::VALUE,
            Self::Elicit(_) => ElicitationCreate::VALUE,
            Self::ListRoots(_) => RootsList::VALUE,
            Self::Other(map) => map.get("method").and_then(Value::as_str).unwrap_or(""),
        }
    }
}

impl Serialize for InputRequest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::CreateMessage(r) => r.serialize(serializer),
            Self::Elicit(r) => r.serialize(serializer),
            Self::ListRoots(r) => r.serialize(serializer),
            Self::Other(map) => map.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for InputRequest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = JsonObject::deserialize(deserializer)?;
        let method = match map.get("method") {
            Some(Value::String(method)) => method.clone(),
            Some(_) => {
                return Err(D::Error::custom(
                    "an input request's `method` must be a string",
                ));
            }
            None => return Err(D::Error::missing_field("method")),
        };
        let value = Value::Object(map);
        match method.as_str() {
            SamplingCreateMessage::VALUE => read(value).map(|r| Self::CreateMessage(Box::new(r))),
            ElicitationCreate::VALUE => read(value).map(|r| Self::Elicit(Box::new(r))),
            RootsList::VALUE => read(value).map(Self::ListRoots),
            _ => match value {
                Value::Object(map) => Ok(Self::Other(map)),
                _ => Err(D::Error::custom("an input request must be an object")),
            },
        }
    }
}

/// The input requests of one round, by key: `InputRequests`. Sorted by key,
/// as JSON object order carries no meaning.
pub type InputRequests = BTreeMap<String, InputRequest>;

/// One answer to an input request: `InputResponse`.
#[derive(Clone, Debug, PartialEq)]
pub enum InputResponse {
    /// The model's message.
    CreateMessage(Box<CreateMessageResult>),
    /// The user's answer.
    Elicit(ElicitResult),
    /// The client's roots.
    ListRoots(ListRootsResult),
    /// The answer to a method an extension added, kept whole.
    Other(JsonObject),
}

impl InputResponse {
    /// Reads the answer to an input request with `method`: the reliable way,
    /// since the answer itself carries no tag.
    ///
    /// # Errors
    ///
    /// When `value` is not a valid answer to `method`.
    pub fn decode(method: &str, value: Value) -> Result<Self, serde_json::Error> {
        match method {
            SamplingCreateMessage::VALUE => read(value).map(|r| Self::CreateMessage(Box::new(r))),
            ElicitationCreate::VALUE => read(value).map(Self::Elicit),
            RootsList::VALUE => read(value).map(Self::ListRoots),
            _ => read(value).map(Self::Other),
        }
    }
}

impl Serialize for InputResponse {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::CreateMessage(r) => r.serialize(serializer),
            Self::Elicit(r) => r.serialize(serializer),
            Self::ListRoots(r) => r.serialize(serializer),
            Self::Other(map) => map.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for InputResponse {
    /// Without the request at hand, an answer is read by the one required
    /// member only its kind has: `action`, `roots` or `model`. An object with
    /// more than one of them is refused rather than guessed at.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = JsonObject::deserialize(deserializer)?;
        let marks = [
            ("action", ElicitationCreate::VALUE),
            ("roots", RootsList::VALUE),
            ("model", SamplingCreateMessage::VALUE),
        ];
        let mut kinds = marks.iter().filter(|(member, _)| map.contains_key(*member));
        let method = match (kinds.next(), kinds.next()) {
            (Some((_, method)), None) => *method,
            (None, _) => "",
            (Some(_), Some(_)) => {
                return Err(D::Error::custom(
                    "an input response with members of several kinds is ambiguous",
                ));
            }
        };
        Self::decode(method, Value::Object(map)).map_err(D::Error::custom)
    }
}

/// The answers of one round, by the keys of the requests: `InputResponses`.
pub type InputResponses = BTreeMap<String, InputResponse>;

/// The server needs input before it can answer: `InputRequiredResult`.
///
/// Only `tools/call`, `prompts/get` and `resources/read` may return it. At
/// least one of `input_requests` and `request_state` is present.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InputRequiredResult {
    /// Always `input_required`.
    pub result_type: InputRequired,
    /// What the client should answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_requests: Option<InputRequests>,
    /// Opaque state to echo byte for byte in the retry. Never parsed by a
    /// client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_state: Option<String>,
    /// Result metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The retry members of a multi round-trip request:
/// `InputResponseRequestParams`.
///
/// The three requests that can be retried carry these members themselves;
/// this type is the bare shape.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InputResponseRequestParams {
    /// Answers to the previous round's input requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_responses: Option<InputResponses>,
    /// The previous round's state, echoed byte for byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_state: Option<String>,
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

fn read<T: DeserializeOwned, E: serde::de::Error>(value: Value) -> Result<T, E> {
    serde_json::from_value(value).map_err(E::custom)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_input_request_is_read_by_its_method() -> Result<(), serde_json::Error> {
        let roots: InputRequest = serde_json::from_value(json!({ "method": "roots/list" }))?;
        assert!(matches!(roots, InputRequest::ListRoots(_)));
        let future = json!({ "method": "x.example/ask", "params": { "q": 1 } });
        let read: InputRequest = serde_json::from_value(future.clone())?;
        assert!(matches!(read, InputRequest::Other(_)));
        assert_eq!(serde_json::to_value(&read)?, future);
        // A known method with the wrong params is an error, not `Other`.
        let broken = json!({ "method": "sampling/createMessage", "params": {} });
        assert!(serde_json::from_value::<InputRequest>(broken).is_err());
        Ok(())
    }

    #[test]
    fn an_ambiguous_input_response_is_refused() {
        let both = json!({ "action": "accept", "roots": [] });
        assert!(serde_json::from_value::<InputResponse>(both).is_err());
    }

    #[test]
    fn an_input_response_is_read_by_its_distinguishing_member() -> Result<(), serde_json::Error> {
        let elicit: InputResponse = serde_json::from_value(json!({ "action": "decline" }))?;
        assert!(matches!(elicit, InputResponse::Elicit(_)));
        let roots: InputResponse = serde_json::from_value(json!({ "roots": [] }))?;
        assert!(matches!(roots, InputResponse::ListRoots(_)));
        Ok(())
    }

    #[test]
    fn an_input_required_result_must_say_so() {
        let wire = json!({ "resultType": "complete", "requestState": "s" });
        assert!(serde_json::from_value::<InputRequiredResult>(wire).is_err());
    }
}
