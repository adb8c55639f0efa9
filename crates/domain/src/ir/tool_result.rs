//! The result of a `tools/call`.

use std::fmt;

use serde::de::{DeserializeSeed, Error as _, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::JsonObject;
use super::content::ContentBlock;
use crate::feature::{Feature, FeatureSet};

/// The `resultType` of a finished result (2026-07-28).
pub const RESULT_TYPE_COMPLETE: &str = "complete";
/// The `resultType` of a result asking the client for more input (2026-07-28).
pub const RESULT_TYPE_INPUT_REQUIRED: &str = "input_required";
/// The `resultType` the tasks extension adds (2026-07-28).
pub const RESULT_TYPE_TASK: &str = "task";

/// What a tool call produced, in no revision in particular.
///
/// Read member by member ([`Deserialize`] is written by hand): the derived
/// form, with `extra` flattened, buffered every unmodelled member and built
/// `extra` again from the buffer, and every result a bridge or gateway
/// carries is read.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    /// The unstructured result.
    pub content: Vec<ContentBlock>,
    /// The structured result (2025-06-18: an object; 2026-07-28: any JSON,
    /// so a present `null` is kept as `Some(Value::Null)`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
    /// Whether the tool reported a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// What kind of result this is (2026-07-28); absent means `complete`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_type: Option<String>,
    /// Result metadata.
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

impl<'de> Deserialize<'de> for ToolResult {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ToolResultVisitor { unkept_meta: None })
    }
}

/// Reads a [`ToolResult`] as its [`Deserialize`] does, but without the one
/// `_meta` member named here: skipped, not built. A `_meta` left with
/// nothing else in it is absent.
///
/// For an intermediary that answers as itself: a server's
/// `io.modelcontextprotocol/serverInfo` names a server its client is not
/// talking to, and building it only to drop it is a large part of reading
/// a small result.
#[derive(Clone, Copy, Debug)]
pub struct WithoutMeta<'a>(pub &'a str);

impl<'de> DeserializeSeed<'de> for WithoutMeta<'_> {
    type Value = ToolResult;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<ToolResult, D::Error> {
        deserializer.deserialize_map(ToolResultVisitor {
            unkept_meta: Some(self.0),
        })
    }
}

/// Reads a `CallToolResult` object: `content` required, a `null` optional
/// member absent (but a `null` `structuredContent` kept), the rest in
/// `extra` in the order it came. A member given twice counts with its last
/// value, as when the object is first read into a JSON value (and as
/// JavaScript's `JSON.parse` reads it), so a result reads the same from
/// text as from a value.
struct ToolResultVisitor<'a> {
    /// The `_meta` member [`WithoutMeta`] leaves out.
    unkept_meta: Option<&'a str>,
}

impl<'de> Visitor<'de> for ToolResultVisitor<'_> {
    type Value = ToolResult;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a tool result object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ToolResult, A::Error> {
        let mut content = None;
        let mut structured_content = None;
        let mut is_error = None;
        let mut result_type = None;
        let mut meta = None;
        let mut extra = JsonObject::new();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "content" => content = Some(map.next_value()?),
                "structuredContent" => structured_content = Some(map.next_value()?),
                "isError" => is_error = Some(map.next_value::<Option<bool>>()?),
                "resultType" => result_type = Some(map.next_value::<Option<String>>()?),
                "_meta" => {
                    meta = Some(match self.unkept_meta {
                        None => map.next_value::<Option<JsonObject>>()?,
                        Some(unkept) => map.next_value_seed(MetaWithout(unkept))?,
                    });
                }
                _ => {
                    let value = map.next_value()?;
                    extra.insert(key, value);
                }
            }
        }
        Ok(ToolResult {
            content: content.ok_or_else(|| A::Error::missing_field("content"))?,
            structured_content,
            is_error: is_error.flatten(),
            result_type: result_type.flatten(),
            meta: meta.flatten(),
            extra,
        })
    }
}

/// A result's `_meta` without one member, as [`WithoutMeta`] reads it.
struct MetaWithout<'a>(&'a str);

impl<'de> DeserializeSeed<'de> for MetaWithout<'_> {
    type Value = Option<JsonObject>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        // `deserialize_option` so that a `null` reads as absent, as
        // `Option<JsonObject>` reads it.
        deserializer.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for MetaWithout<'_> {
    type Value = Option<JsonObject>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a `_meta` object or null")
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut meta = JsonObject::new();
        let mut left_out = false;
        while let Some(key) = map.next_key::<String>()? {
            if key == self.0 {
                map.next_value::<IgnoredAny>()?;
                left_out = true;
            } else {
                let value = map.next_value::<Value>()?;
                meta.insert(key, value);
            }
        }
        Ok((!left_out || !meta.is_empty()).then_some(meta))
    }
}

impl ToolResult {
    /// A result holding one text block.
    #[must_use]
    pub fn text(text: impl Into<String>) -> Self {
        Self::from_content(vec![ContentBlock::text(text)])
    }

    /// A result holding `content` and nothing else.
    #[must_use]
    pub fn from_content(content: Vec<ContentBlock>) -> Self {
        Self {
            content,
            structured_content: None,
            is_error: None,
            result_type: None,
            meta: None,
            extra: JsonObject::new(),
        }
    }

    /// This result, carrying the structured output written in `json`.
    ///
    /// Takes JSON text because that is what a tool usually has in hand: the
    /// serialised form it also puts in a text block for older clients.
    ///
    /// # Errors
    ///
    /// When `json` is not valid JSON.
    pub fn with_structured(self, json: &str) -> Result<Self, serde_json::Error> {
        Ok(self.with_structured_value(serde_json::from_str(json)?))
    }

    /// This result, carrying `value` as its structured output.
    #[must_use]
    pub fn with_structured_value(mut self, value: Value) -> Self {
        self.structured_content = Some(value);
        self
    }

    /// This result, marked as a tool failure.
    #[must_use]
    pub const fn as_error(mut self) -> Self {
        self.is_error = Some(true);
        self
    }

    /// Whether an unmodelled member has the name of a modelled one, which
    /// only a result built by hand can have: reading one never puts a
    /// modelled member in [`extra`](Self::extra). Written as it is, such a
    /// result names that member twice; as a JSON object, the unmodelled
    /// member replaces the modelled one.
    #[must_use]
    pub fn extra_repeats_a_field(&self) -> bool {
        const FIELDS: [&str; 5] = [
            "content",
            "structuredContent",
            "isError",
            "resultType",
            "_meta",
        ];
        !self.extra.is_empty() && FIELDS.iter().any(|field| self.extra.contains_key(*field))
    }

    /// Whether the result is finished: `resultType` absent or `complete`.
    #[must_use]
    pub fn is_complete(&self) -> bool {
        self.result_type
            .as_deref()
            .is_none_or(|kind| kind == RESULT_TYPE_COMPLETE)
    }

    /// What writing this result as it is needs.
    #[must_use]
    pub fn required_features(&self) -> FeatureSet {
        let mut needs = self
            .content
            .iter()
            .map(ContentBlock::required_features)
            .fold(FeatureSet::empty(), FeatureSet::union);
        match &self.structured_content {
            None => {}
            Some(Value::Object(_)) => needs = needs.with(Feature::ToolStructuredOutput),
            Some(_) => {
                needs = needs
                    .with(Feature::ToolStructuredOutput)
                    .with(Feature::StructuredContentAnyJson);
            }
        }
        if let Some(kind) = &self.result_type {
            needs = needs.with(Feature::ToolResultType);
            match kind.as_str() {
                RESULT_TYPE_INPUT_REQUIRED => needs = needs.with(Feature::MultiRoundTrip),
                RESULT_TYPE_TASK => needs = needs.with(Feature::TasksExtension),
                _ => {}
            }
        }
        needs
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_null_structured_result_is_kept_apart_from_none() -> Result<(), serde_json::Error> {
        let wire = json!({ "content": [], "structuredContent": null, "resultType": "complete" });
        let read: ToolResult = serde_json::from_value(wire.clone())?;
        assert_eq!(read.structured_content, Some(Value::Null));
        assert_eq!(serde_json::to_value(&read)?, wire);
        Ok(())
    }

    #[test]
    fn a_result_is_read_as_the_derived_form_read_it() -> Result<(), serde_json::Error> {
        // Members in any order, a `null` optional member absent, and what is
        // not modelled kept, in the order it came.
        let read: ToolResult = serde_json::from_str(
            r#"{"z": 1, "isError": null, "resultType": null, "_meta": null,
                "content": [{"text": "hi", "k": 2, "type": "text", "annotations": null,
                             "_meta": null, "j": 3}],
                "a": 2}"#,
        )?;
        let mut text = super::super::content::TextContent::new("hi");
        text.extra = serde_json::from_value(json!({ "k": 2, "j": 3 }))?;
        let mut expected = ToolResult::from_content(vec![ContentBlock::Text(text)]);
        expected.extra = serde_json::from_value(json!({ "z": 1, "a": 2 }))?;
        assert_eq!(read, expected);
        let order = |object: &JsonObject| object.keys().cloned().collect::<Vec<_>>();
        assert_eq!(order(&read.extra), ["z", "a"]);
        let blocks = read.content.iter().map(|block| match block {
            ContentBlock::Text(text) => order(&text.extra),
            _ => Vec::new(),
        });
        assert_eq!(blocks.collect::<Vec<_>>(), [["k", "j"]]);
        for refused in [
            "[]",
            "{}",
            r#"{"content": [], "isError": "yes"}"#,
            r#"{"content": [], "_meta": []}"#,
            r#"{"content": [{"type": "text"}]}"#,
            r#"{"content": [{"type": "text", "text": 1}]}"#,
            r#"{"content": [{"type": "text", "text": "a", "_meta": []}]}"#,
            r#"{"content": [{"type": "text", "text": "a", "annotations": 1}]}"#,
        ] {
            assert!(
                serde_json::from_str::<ToolResult>(refused).is_err(),
                "{refused}"
            );
        }
        Ok(())
    }

    /// A member given twice counts with its last value, read from text as
    /// from a JSON value (which keeps the last).
    #[test]
    fn a_member_given_twice_reads_the_same_from_text_and_from_a_value()
    -> Result<(), serde_json::Error> {
        for text in [
            r#"{"content": [], "content": [{"type": "text", "text": "b"}]}"#,
            r#"{"content": [], "isError": true, "isError": false}"#,
            r#"{"content": [], "resultType": "input_required", "resultType": "complete"}"#,
            r#"{"content": [], "_meta": {"a": 1}, "_meta": null}"#,
            r#"{"content": [], "structuredContent": 1, "structuredContent": {"x": 2}}"#,
            r#"{"content": [], "v": 1, "v": 2}"#,
        ] {
            let from_text: ToolResult = serde_json::from_str(text)?;
            let from_value: ToolResult = serde_json::from_value(serde_json::from_str(text)?)?;
            assert_eq!(from_text, from_value, "{text}");
        }
        let last: ToolResult =
            serde_json::from_str(r#"{"content": [], "isError": true, "isError": false}"#)?;
        assert_eq!(last.is_error, Some(false));
        Ok(())
    }

    #[test]
    fn a_read_result_never_repeats_a_field_but_a_built_one_can() -> Result<(), serde_json::Error> {
        let wire = json!({ "content": [], "isError": true, "_meta": {}, "vendor": 1 });
        let read: ToolResult = serde_json::from_value(wire)?;
        assert!(!read.extra_repeats_a_field());
        for field in [
            "content",
            "structuredContent",
            "isError",
            "resultType",
            "_meta",
        ] {
            let mut built = read.clone();
            built.extra.insert(field.to_owned(), json!(null));
            assert!(built.extra_repeats_a_field(), "{field}");
        }
        Ok(())
    }

    #[test]
    fn without_meta_leaves_out_one_member_and_reads_the_rest_as_before()
    -> Result<(), serde_json::Error> {
        const NAME: &str = "io.modelcontextprotocol/serverInfo";
        let read = |wire: &str| -> Result<(ToolResult, ToolResult, ToolResult), serde_json::Error> {
            let whole: ToolResult = serde_json::from_str(wire)?;
            let from_text =
                WithoutMeta(NAME).deserialize(&mut serde_json::Deserializer::from_str(wire))?;
            let from_value = WithoutMeta(NAME).deserialize(serde_json::from_str::<Value>(wire)?)?;
            Ok((whole, from_text, from_value))
        };
        // Only the named member: `_meta` goes with it; the rest is as read whole.
        let (whole, text, value) = read(
            r#"{"content":[{"type":"text","text":"a"}],"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s","version":"1"}},"x":1}"#,
        )?;
        assert_eq!(text.meta, None);
        assert_eq!(text, value);
        assert_eq!(
            ToolResult {
                meta: None,
                ..whole
            },
            text
        );
        // Other members stay, in their order; an escaped name is the name.
        let (_, text, value) = read(
            r#"{"content":[],"_meta":{"b":1,"io.modelcontextprotocol\/serverInfo":{},"a":{"c":[2]},"io.modelcontextprotocol/serverInfo":3}}"#,
        )?;
        let meta = text.meta.clone().unwrap_or_default();
        assert_eq!(meta.keys().collect::<Vec<_>>(), ["b", "a"]);
        assert_eq!(Value::Object(meta), json!({"b": 1, "a": {"c": [2]}}));
        assert_eq!(text, value);
        // Without the member, or empty, or null: as read whole.
        for wire in [
            r#"{"content":[],"_meta":{"k":"v"}}"#,
            r#"{"content":[],"_meta":{}}"#,
            r#"{"content":[],"_meta":null}"#,
            r#"{"content":[]}"#,
            r#"{"content":[],"_meta":{"k":1},"_meta":{"l":2}}"#,
        ] {
            let (whole, text, value) = read(wire)?;
            assert_eq!(whole, text, "{wire}");
            assert_eq!(whole, value, "{wire}");
        }
        // What is not an object is refused, as read whole.
        for wire in [
            r#"{"content":[],"_meta":5}"#,
            r#"{"content":[],"_meta":[]}"#,
        ] {
            assert!(serde_json::from_str::<ToolResult>(wire).is_err(), "{wire}");
            assert!(
                WithoutMeta(NAME)
                    .deserialize(&mut serde_json::Deserializer::from_str(wire))
                    .is_err(),
                "{wire}"
            );
            assert!(
                WithoutMeta(NAME)
                    .deserialize(serde_json::from_str::<Value>(wire)?)
                    .is_err(),
                "{wire}"
            );
        }
        Ok(())
    }
}
