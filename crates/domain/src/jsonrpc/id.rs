//! Request identifiers.

use core::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// A request's `id`: a string or an integer, never `null`.
///
/// Kept as the peer sent it. A string `"1"` and an integer `1` are different
/// ids, and answering one with the other is answering a request nobody sent.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RequestId {
    /// An integer id.
    Number(i64),
    /// A string id.
    String(String),
}

impl RequestId {
    /// Reads an id from a JSON value, if it is one MCP allows.
    ///
    /// Fractions, `null`, booleans and containers are refused: the MCP schema
    /// types `RequestId` as `string | integer`.
    #[must_use]
    pub fn from_json(value: &Value) -> Option<Self> {
        match value {
            Value::String(s) => Some(Self::String(s.clone())),
            Value::Number(n) => n.as_i64().map(Self::Number),
            _ => None,
        }
    }

    /// The id as [`Display`](fmt::Display) shows it, cut to its first `max`
    /// characters (and `…`): for a log line, which a peer choosing a long
    /// id must not be able to fill.
    #[must_use]
    pub fn clipped(&self, max: usize) -> String {
        let shown = self.to_string();
        match shown.char_indices().nth(max) {
            Some((at, _)) => format!("{}…", shown.get(..at).unwrap_or_default()),
            None => shown,
        }
    }

    /// The id as a JSON value.
    #[must_use]
    pub fn to_json(&self) -> Value {
        match self {
            Self::Number(n) => Value::from(*n),
            Self::String(s) => Value::String(s.clone()),
        }
    }
}

impl From<i64> for RequestId {
    fn from(n: i64) -> Self {
        Self::Number(n)
    }
}

impl From<&str> for RequestId {
    fn from(s: &str) -> Self {
        Self::String(s.to_owned())
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Number(n) => write!(f, "{n}"),
            Self::String(s) => write!(f, "{s:?}"),
        }
    }
}

impl Serialize for RequestId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Number(n) => serializer.serialize_i64(*n),
            Self::String(s) => serializer.serialize_str(s),
        }
    }
}

impl<'de> Deserialize<'de> for RequestId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Self::from_json(&value)
            .ok_or_else(|| serde::de::Error::custom("a request id is a string or an integer"))
    }
}

/// The `id` of a response, where `null` is meaningful.
///
/// JSON-RPC answers a request whose id could not be read with an error whose
/// `id` is `null` (2025-11-25 also allows omitting it). Those are different
/// from each other and from a real id, and a peer that routes replies needs to
/// tell them apart.
///
/// As a serde field it wants `#[serde(default, skip_serializing_if =
/// "ResponseId::is_absent")]`: absent reads as [`Self::Absent`] and is not
/// written, `null` reads and writes as [`Self::Null`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum ResponseId {
    /// The id of the request being answered.
    Id(RequestId),
    /// `"id": null`: the request's id was unreadable.
    Null,
    /// No `id` member at all.
    #[default]
    Absent,
}

impl ResponseId {
    /// The request id, when there is one.
    #[must_use]
    pub const fn request_id(&self) -> Option<&RequestId> {
        match self {
            Self::Id(id) => Some(id),
            Self::Null | Self::Absent => None,
        }
    }
}

impl ResponseId {
    /// Whether there was no `id` member at all.
    #[must_use]
    pub const fn is_absent(&self) -> bool {
        matches!(self, Self::Absent)
    }
}

impl Serialize for ResponseId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Id(id) => id.serialize(serializer),
            // `Absent` only reaches here when a field forgot to skip it; the
            // nearest thing JSON-RPC has to "no id" is `null`.
            Self::Null | Self::Absent => serializer.serialize_unit(),
        }
    }
}

impl<'de> Deserialize<'de> for ResponseId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::Null => Ok(Self::Null),
            other => RequestId::from_json(&other).map(Self::Id).ok_or_else(|| {
                serde::de::Error::custom("a response id is a string, an integer or null")
            }),
        }
    }
}

impl From<RequestId> for ResponseId {
    fn from(id: RequestId) -> Self {
        Self::Id(id)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_clipped_id_is_cut_on_a_character() {
        assert_eq!(RequestId::Number(12345).clipped(3), "123…");
        assert_eq!(RequestId::from("éé").clipped(2), "\"é…");
        assert_eq!(RequestId::from("ab").clipped(8), "\"ab\"");
    }

    #[test]
    fn a_string_id_and_an_integer_id_are_different_ids() {
        assert_ne!(
            RequestId::from_json(&json!("1")),
            RequestId::from_json(&json!(1))
        );
    }

    #[test]
    fn a_null_response_id_reads_and_writes_as_null() -> Result<(), serde_json::Error> {
        let id: ResponseId = serde_json::from_value(json!(null))?;
        assert_eq!(id, ResponseId::Null);
        assert_eq!(serde_json::to_value(&id)?, json!(null));
        let id: ResponseId = serde_json::from_value(json!("a"))?;
        assert_eq!(id, ResponseId::Id(RequestId::String("a".to_owned())));
        Ok(())
    }

    #[test]
    fn null_fractions_and_containers_are_not_ids() {
        for bad in [json!(null), json!(1.5), json!(true), json!([1]), json!({})] {
            assert_eq!(RequestId::from_json(&bad), None, "{bad}");
        }
    }
}
