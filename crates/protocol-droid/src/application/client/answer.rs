//! A request's result as its transport delivered it.
//!
//! A transport that reads whole messages as JSON hands the client a parsed
//! result. The stdio transport hands over a plain response's `result` as the
//! server wrote it instead, checked to be JSON but not built into a tree: a
//! caller that wants it typed (a forwarded tool result) then reads the text
//! once, rather than building a [`Value`] and reading that again.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::domain::jsonrpc::RequestId;

/// A request's result, parsed or as the server wrote it.
#[derive(Debug)]
pub enum Answer {
    /// Already read as JSON.
    Parsed(Value),
    /// The server's text, known to be one JSON value, not yet read.
    Raw(Box<RawValue>),
}

impl Answer {
    /// The result as JSON.
    ///
    /// # Errors
    ///
    /// When raw text cannot be built into a [`Value`]: nested deeper than the
    /// parser allows.
    pub fn into_value(self) -> Result<Value, serde_json::Error> {
        match self {
            Self::Parsed(value) => Ok(value),
            Self::Raw(raw) => serde_json::from_str(raw.get()),
        }
    }

    /// The result read as `T`: from the text in one pass when it is raw.
    ///
    /// # Errors
    ///
    /// When the result is not a `T`.
    pub fn read<T: DeserializeOwned>(self) -> Result<T, serde_json::Error> {
        match self {
            Self::Parsed(value) => serde_json::from_value(value),
            Self::Raw(raw) => serde_json::from_str(raw.get()),
        }
    }

    /// The result read by `seed`, as [`read`](Self::read) reads it.
    ///
    /// # Errors
    ///
    /// When the result is not what `seed` reads.
    pub fn read_seed<S, T>(self, seed: S) -> Result<T, serde_json::Error>
    where
        S: for<'de> DeserializeSeed<'de, Value = T>,
    {
        match self {
            Self::Parsed(value) => seed.deserialize(value),
            Self::Raw(raw) => {
                let mut text = serde_json::Deserializer::from_str(raw.get());
                let read = seed.deserialize(&mut text)?;
                text.end()?;
                Ok(read)
            }
        }
    }

    /// Which of `kinds` the result's `resultType` (2026-07-28) is, if any.
    ///
    /// Raw text with no escape and none of the kinds' letters cannot say
    /// one: that is a search, where [`result_type`](Self::result_type)
    /// reads the whole object through the parser.
    #[must_use]
    pub fn result_type_among<'k>(&self, kinds: &[&'k str]) -> Option<&'k str> {
        if let Self::Raw(raw) = self {
            let text = raw.get();
            if memchr::memchr(b'\\', text.as_bytes()).is_none()
                && !kinds.iter().any(|kind| text.contains(kind))
            {
                return None;
            }
        }
        let found = self.result_type()?;
        kinds.iter().copied().find(|kind| *kind == found)
    }

    /// The result's `resultType` (2026-07-28), when it is an object with a
    /// string there.
    #[must_use]
    pub fn result_type(&self) -> Option<Cow<'_, str>> {
        /// Only the one member; the rest is skipped, not built.
        #[derive(Deserialize)]
        struct Peek<'a> {
            #[serde(rename = "resultType", borrow, default)]
            result_type: Option<Cow<'a, str>>,
        }
        match self {
            Self::Parsed(value) => value
                .get("resultType")
                .and_then(Value::as_str)
                .map(Cow::Borrowed),
            // An array would read as the struct's one field.
            Self::Raw(raw) if !raw.get().trim_start().starts_with('{') => None,
            Self::Raw(raw) => match serde_json::from_str::<Peek<'_>>(raw.get()) {
                Ok(peek) => peek.result_type,
                // Not an object, or one the peek cannot take (a key given
                // twice): read as a tree reads it, where the last one counts.
                Err(_) => serde_json::from_str::<Value>(raw.get())
                    .ok()?
                    .get("resultType")
                    .and_then(Value::as_str)
                    .map(|kind| Cow::Owned(kind.to_owned())),
            },
        }
    }
}

/// The `id` and `result` of `line` when it is a plain response: one object
/// with both, and with neither a `method` nor an `error`. Anything else (a
/// request, a notification, an error, a batch, a member given twice, an
/// escaped member name, an unusable id) is `None`, left to be read whole.
#[must_use]
pub(crate) fn plain_response(line: &[u8]) -> Option<(RequestId, Box<RawValue>)> {
    // Checked whole first: members skipped below are not, and a line the
    // full read would refuse is left to it.
    let line = std::str::from_utf8(line).ok()?;
    let plain: Plain<'_> = serde_json::from_str(line).ok()?;
    let id = serde_json::from_str::<RequestId>(plain.id?.get()).ok()?;
    Some((id, plain.result?.to_owned()))
}

/// What [`plain_response`] reads of a message: the rest is skipped.
struct Plain<'a> {
    id: Option<&'a RawValue>,
    result: Option<&'a RawValue>,
}

impl<'de> Deserialize<'de> for Plain<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Plain<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON-RPC response")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Plain<'de>, A::Error> {
                let mut plain = Plain {
                    id: None,
                    result: None,
                };
                while let Some(key) = map.next_key::<&'de str>()? {
                    match key {
                        "id" if plain.id.is_none() => plain.id = Some(map.next_value()?),
                        "result" if plain.result.is_none() => {
                            plain.result = Some(map.next_value()?);
                        }
                        // Stops at once: the message is read whole instead.
                        "id" | "result" | "method" | "error" => {
                            return Err(de::Error::custom("not a plain response"));
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(plain)
            }
        }
        deserializer.deserialize_map(Members)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    type TestError = Box<dyn std::error::Error>;

    fn raw(text: &str) -> Result<Answer, serde_json::Error> {
        Ok(Answer::Raw(RawValue::from_string(text.to_owned())?))
    }

    #[test]
    fn both_forms_read_the_same() -> Result<(), TestError> {
        let text = r#"{"content":[{"type":"text","text":"a\nb"}],"resultType":"complete","x":1}"#;
        let value: Value = serde_json::from_str(text)?;
        assert_eq!(raw(text)?.into_value()?, value);
        assert_eq!(Answer::Parsed(value.clone()).into_value()?, value);
        assert_eq!(raw(text)?.read::<Value>()?, value);
        assert_eq!(raw(text)?.result_type().as_deref(), Some("complete"));
        assert_eq!(
            Answer::Parsed(value).result_type().as_deref(),
            Some("complete")
        );
        Ok(())
    }

    #[test]
    fn a_result_type_is_read_only_where_it_is_a_string_of_an_object() -> Result<(), TestError> {
        let kind = |text: &str| -> Result<Option<String>, TestError> {
            Ok(raw(text)?.result_type().map(Cow::into_owned))
        };
        assert_eq!(
            kind(r#"{"resultType":"input_required"}"#)?.as_deref(),
            Some("input_required")
        );
        assert_eq!(
            kind(r#"{"resultType":"in\u0070ut_required"}"#)?.as_deref(),
            Some("input_required")
        );
        assert_eq!(kind(r#"{"content":[]}"#)?, None);
        assert_eq!(kind(r#"{"resultType":7}"#)?, None);
        assert_eq!(
            kind(r#"{"resultType":"complete","resultType":"input_required"}"#)?.as_deref(),
            Some("input_required"),
            "the last of two counts, as in a tree"
        );
        assert_eq!(kind("[1,2]")?, None);
        assert_eq!(kind(r#"["input_required"]"#)?, None);
        assert_eq!(
            kind(r#" {"resultType":"complete"}"#)?.as_deref(),
            Some("complete")
        );
        assert_eq!(Answer::Parsed(json!({"resultType": 7})).result_type(), None);
        Ok(())
    }

    #[test]
    fn a_result_type_is_told_as_the_full_read_tells_it() -> Result<(), TestError> {
        for (text, kind, is) in [
            (
                r#"{"content":[],"resultType":"input_required"}"#,
                "input_required",
                true,
            ),
            (
                r#"{"content":[],"resultType":"in\u0070ut_required"}"#,
                "input_required",
                true,
            ),
            (
                r#"{"content":[],"resultType":"complete"}"#,
                "input_required",
                false,
            ),
            // The letters elsewhere are not the member.
            (
                r#"{"content":[{"type":"text","text":"input_required"}],"resultType":"complete"}"#,
                "input_required",
                false,
            ),
            (
                r#"{"content":[{"type":"text","text":"a\nb"}]}"#,
                "input_required",
                false,
            ),
            (r#"{"content":[],"resultType":"task"}"#, "task", true),
            (r#"{"content":[],"resultType":"t\u0061sk"}"#, "task", true),
            (r#"{"content":[]}"#, "task", false),
        ] {
            let expected = is.then_some(kind);
            assert_eq!(raw(text)?.result_type_among(&[kind]), expected, "{text}");
            let both = ["other", kind];
            assert_eq!(raw(text)?.result_type_among(&both), expected, "{text}");
            let parsed = Answer::Parsed(serde_json::from_str(text)?);
            assert_eq!(parsed.result_type_among(&[kind]), expected, "{text}");
        }
        Ok(())
    }

    #[test]
    fn only_a_plain_response_is_taken_apart() {
        let taken = plain_response(br#"{"jsonrpc":"2.0","id":7,"result":{"content":[]},"x":[1]}"#)
            .map(|(id, result)| (id, result.get().to_owned()));
        assert_eq!(
            taken,
            Some((RequestId::Number(7), r#"{"content":[]}"#.to_owned()))
        );
        let taken = plain_response(br#"{"result":null,"id":"a"}"#).map(|(id, _)| id);
        assert_eq!(taken, Some(RequestId::String("a".to_owned())));
        for other in [
            r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":1,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{},"error":null}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{},"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":7,"id":8,"result":{}}"#,
            r#"{"jsonrpc":"2.0","i\u0064":7,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":null,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"result":{}}"#,
            r#"{"jsonrpc":"2.0","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":7}"#,
            r#"[{"jsonrpc":"2.0","id":7,"result":{}}]"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{}} trailing"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"#,
        ] {
            assert!(plain_response(other.as_bytes()).is_none(), "{other}");
        }
        let mut not_text = br#"{"id":1,"result":{},"x":""#.to_vec();
        not_text.extend_from_slice(&[0xff, 0xfe]);
        not_text.extend_from_slice(br#""}"#);
        assert!(
            plain_response(&not_text).is_none(),
            "bytes that are not UTF-8"
        );
    }

    #[test]
    fn raw_text_nested_past_the_parser_limit_is_an_error_not_a_panic() -> Result<(), TestError> {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(raw(&deep)?.into_value().is_err());
        assert!(raw(&deep)?.read::<Value>().is_err());
        // Taken apart without recursing, however deep: the request waiting
        // for it gets an error at once instead of waiting out its timeout.
        let depth = 1_000_000;
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":3,"result":{}{}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        );
        let (id, result) = plain_response(line.as_bytes()).ok_or("a plain response")?;
        assert_eq!(id, RequestId::Number(3));
        assert!(Answer::Raw(result).read::<Value>().is_err());
        Ok(())
    }
}
