//! Content blocks and the pieces they are made of.
//!
//! Serialisation is written by hand for the two unions ([`ContentBlock`] and
//! [`ResourceContents`]) because both must keep what they do not recognise: a
//! block whose `type` this build has never heard of is carried whole, where a
//! derived internally-tagged enum would refuse it.

use serde::de::Error as _;
use serde::ser::Error as _;
use serde::ser::SerializeMap as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Number, Value};

use super::JsonObject;
use crate::feature::{Feature, FeatureSet};

/// Who a piece of content is meant for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The human on the client side.
    User,
    /// The model.
    Assistant,
}

/// Hints for the client about how to use a block.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Annotations {
    /// Who the content is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<Vec<Role>>,
    /// How important it is, from 0 to 1. Kept as the peer's own number so an
    /// integer `1` is not rewritten as `1.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Number>,
    /// When the content last changed, ISO 8601 (2025-06-18).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<String>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// An icon a client may show for an entity (2025-11-25).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Icon {
    /// An `https:` or `data:` URI.
    pub src: String,
    /// The image's media type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Sizes such as `48x48` or `any`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sizes: Option<Vec<String>>,
    /// `light` or `dark`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub theme: Option<String>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// Plain text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TextContent {
    /// The text.
    pub text: String,
    /// Usage hints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Annotations>,
    /// Block metadata (2025-06-18).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

impl TextContent {
    /// A block holding `text` and nothing else.
    #[must_use]
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            annotations: None,
            meta: None,
            extra: JsonObject::new(),
        }
    }
}

/// A base64-encoded image.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageContent {
    /// The base64-encoded bytes.
    pub data: String,
    /// The image's media type.
    pub mime_type: String,
    /// Usage hints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Annotations>,
    /// Block metadata (2025-06-18).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// Base64-encoded audio (2025-03-26). Same shape as an image.
pub type AudioContent = ImageContent;

/// The contents of a resource, as text or as a base64 blob.
#[derive(Clone, Debug, PartialEq)]
pub enum ResourceContents {
    /// Textual contents.
    Text {
        /// The resource's URI.
        uri: String,
        /// Its media type.
        mime_type: Option<String>,
        /// The text.
        text: String,
        /// Contents metadata (2025-06-18).
        meta: Option<JsonObject>,
        /// Members this build does not model.
        extra: JsonObject,
    },
    /// Binary contents.
    Blob {
        /// The resource's URI.
        uri: String,
        /// Its media type.
        mime_type: Option<String>,
        /// The base64-encoded bytes.
        blob: String,
        /// Contents metadata (2025-06-18).
        meta: Option<JsonObject>,
        /// Members this build does not model.
        extra: JsonObject,
    },
}

impl ResourceContents {
    /// The resource's URI.
    #[must_use]
    pub fn uri(&self) -> &str {
        match self {
            Self::Text { uri, .. } | Self::Blob { uri, .. } => uri,
        }
    }

    /// The contents' metadata, whichever kind they are.
    #[must_use]
    pub const fn meta(&self) -> Option<&JsonObject> {
        match self {
            Self::Text { meta, .. } | Self::Blob { meta, .. } => meta.as_ref(),
        }
    }

    /// Drops the contents' metadata, answering whether there was any.
    pub fn take_meta(&mut self) -> bool {
        match self {
            Self::Text { meta, .. } | Self::Blob { meta, .. } => meta.take().is_some(),
        }
    }
}

impl Serialize for ResourceContents {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (uri, mime_type, key, body, meta, extra) = match self {
            Self::Text {
                uri,
                mime_type,
                text,
                meta,
                extra,
            } => (uri, mime_type, "text", text, meta, extra),
            Self::Blob {
                uri,
                mime_type,
                blob,
                meta,
                extra,
            } => (uri, mime_type, "blob", blob, meta, extra),
        };
        let mut map = extra.clone();
        map.insert("uri".to_owned(), Value::String(uri.clone()));
        if let Some(mime) = mime_type {
            map.insert("mimeType".to_owned(), Value::String(mime.clone()));
        }
        map.insert(key.to_owned(), Value::String(body.clone()));
        if let Some(meta) = meta {
            map.insert("_meta".to_owned(), Value::Object(meta.clone()));
        }
        map.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ResourceContents {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut map = JsonObject::deserialize(deserializer)?;
        let uri = take_string(&mut map, "uri")?.ok_or_else(|| D::Error::missing_field("uri"))?;
        let mime_type = take_string(&mut map, "mimeType")?;
        let meta = take_object(&mut map, "_meta")?;
        if let Some(text) = take_string(&mut map, "text")? {
            return Ok(Self::Text {
                uri,
                mime_type,
                text,
                meta,
                extra: map,
            });
        }
        if let Some(blob) = take_string(&mut map, "blob")? {
            return Ok(Self::Blob {
                uri,
                mime_type,
                blob,
                meta,
                extra: map,
            });
        }
        Err(D::Error::custom("resource contents need `text` or `blob`"))
    }
}

/// A resource's contents inside a message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EmbeddedResource {
    /// The contents.
    pub resource: ResourceContents,
    /// Usage hints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Annotations>,
    /// Block metadata (2025-06-18).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// A pointer to a resource the client may read (2025-06-18).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceLink {
    /// The resource's URI.
    pub uri: String,
    /// Its programmatic name.
    pub name: String,
    /// Its display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its media type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Its size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<Number>,
    /// Icons for it (2025-11-25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icons: Option<Vec<Icon>>,
    /// Usage hints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Annotations>,
    /// Block metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// A model's request to call a tool, inside sampling (2025-11-25).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolUseContent {
    /// Correlates the use with its result.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments.
    pub input: JsonObject,
    /// Block metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The result of a tool use, inside sampling (2025-11-25).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultContent {
    /// The `id` of the use this answers.
    pub tool_use_id: String,
    /// What the tool produced.
    pub content: Vec<ContentBlock>,
    /// Structured output; a present `null` is kept as `Some(Value::Null)`.
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub structured_content: Option<Value>,
    /// Whether the tool failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// Block metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// One block of content in a tool result, prompt message or sampling message.
#[derive(Clone, Debug, PartialEq)]
pub enum ContentBlock {
    /// `text`.
    Text(TextContent),
    /// `image`.
    Image(ImageContent),
    /// `audio` (2025-03-26).
    Audio(AudioContent),
    /// `resource`: an embedded resource.
    Resource(EmbeddedResource),
    /// `resource_link` (2025-06-18).
    ResourceLink(ResourceLink),
    /// `tool_use`, in sampling only (2025-11-25).
    ToolUse(ToolUseContent),
    /// `tool_result`, in sampling only (2025-11-25).
    ToolResult(ToolResultContent),
    /// A block of a type this build does not model, kept whole.
    Unknown(JsonObject),
}

impl ContentBlock {
    /// A text block.
    #[must_use]
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text(TextContent::new(text))
    }

    /// The block's `type` on the wire.
    #[must_use]
    pub fn kind(&self) -> &str {
        match self {
            Self::Text(_) => "text",
            Self::Image(_) => "image",
            Self::Audio(_) => "audio",
            Self::Resource(_) => "resource",
            Self::ResourceLink(_) => "resource_link",
            Self::ToolUse(_) => "tool_use",
            Self::ToolResult(_) => "tool_result",
            Self::Unknown(map) => map.get("type").and_then(Value::as_str).unwrap_or(""),
        }
    }

    /// The block's annotations, if its kind has any.
    #[must_use]
    pub const fn annotations(&self) -> Option<&Annotations> {
        match self {
            Self::Text(b) => b.annotations.as_ref(),
            Self::Image(b) | Self::Audio(b) => b.annotations.as_ref(),
            Self::Resource(b) => b.annotations.as_ref(),
            Self::ResourceLink(b) => b.annotations.as_ref(),
            Self::ToolUse(_) | Self::ToolResult(_) | Self::Unknown(_) => None,
        }
    }

    /// The block's annotations, mutably, if its kind has any.
    pub const fn annotations_mut(&mut self) -> Option<&mut Option<Annotations>> {
        match self {
            Self::Text(b) => Some(&mut b.annotations),
            Self::Image(b) | Self::Audio(b) => Some(&mut b.annotations),
            Self::Resource(b) => Some(&mut b.annotations),
            Self::ResourceLink(b) => Some(&mut b.annotations),
            Self::ToolUse(_) | Self::ToolResult(_) | Self::Unknown(_) => None,
        }
    }

    /// The block's own `_meta`, if its kind is modelled and it has one.
    #[must_use]
    pub const fn meta(&self) -> Option<&JsonObject> {
        match self {
            Self::Text(b) => b.meta.as_ref(),
            Self::Image(b) | Self::Audio(b) => b.meta.as_ref(),
            Self::Resource(b) => b.meta.as_ref(),
            Self::ResourceLink(b) => b.meta.as_ref(),
            Self::ToolUse(b) => b.meta.as_ref(),
            Self::ToolResult(b) => b.meta.as_ref(),
            Self::Unknown(_) => None,
        }
    }

    /// The block's own `_meta`, mutably, if its kind is modelled.
    pub const fn meta_mut(&mut self) -> Option<&mut Option<JsonObject>> {
        match self {
            Self::Text(b) => Some(&mut b.meta),
            Self::Image(b) | Self::Audio(b) => Some(&mut b.meta),
            Self::Resource(b) => Some(&mut b.meta),
            Self::ResourceLink(b) => Some(&mut b.meta),
            Self::ToolUse(b) => Some(&mut b.meta),
            Self::ToolResult(b) => Some(&mut b.meta),
            Self::Unknown(_) => None,
        }
    }

    /// What writing this block as it is needs.
    ///
    /// An unknown block needs nothing this build can name: it is forwarded as
    /// it came, and whether the far side reads it is the far side's business.
    #[must_use]
    pub fn required_features(&self) -> FeatureSet {
        let mut needs = match self {
            Self::Text(_) | Self::Image(_) | Self::Unknown(_) => FeatureSet::empty(),
            Self::Audio(_) => FeatureSet::empty().with(Feature::AudioContent),
            Self::Resource(b) => {
                if b.resource.meta().is_some() {
                    FeatureSet::empty().with(Feature::EntityMeta)
                } else {
                    FeatureSet::empty()
                }
            }
            Self::ResourceLink(link) => {
                let needs = FeatureSet::empty().with(Feature::ResourceLinkContent);
                if link.icons.is_some() {
                    needs.with(Feature::Icons)
                } else {
                    needs
                }
            }
            Self::ToolUse(_) => FeatureSet::empty().with(Feature::SamplingTools),
            Self::ToolResult(b) => b.content.iter().map(Self::required_features).fold(
                FeatureSet::empty().with(Feature::SamplingTools),
                FeatureSet::union,
            ),
        };
        if self
            .annotations()
            .is_some_and(|a| a.last_modified.is_some())
        {
            needs = needs.with(Feature::AnnotationsLastModified);
        }
        if self.meta().is_some() {
            needs = needs.with(Feature::EntityMeta);
        }
        needs
    }
}

impl Serialize for ContentBlock {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            // Nearly every block is plain text: written member by member,
            // in the order the derived form writes them, with no JSON object
            // built on the way. Members in `extra` or in the annotations'
            // own extras could collide with the typed ones, which the
            // generic path resolves as one object would; those blocks take it.
            Self::Text(b) if b.extra.is_empty() && b.annotations.is_none() => {
                let mut map = serializer.serialize_map(None)?;
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", &b.text)?;
                if let Some(meta) = &b.meta {
                    map.serialize_entry("_meta", meta)?;
                }
                map.end()
            }
            Self::Unknown(map) => map.serialize(serializer),
            _ => self.serialize_tagged(serializer),
        }
    }
}

impl ContentBlock {
    /// Writes a block as its body's own form with `type` put first.
    ///
    /// `type` comes from the variant alone, and first, as every example in
    /// the spec writes it: a stray `type` left in `extra` must not relabel
    /// the block.
    fn serialize_tagged<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let body = match self {
            Self::Text(b) => serde_json::to_value(b),
            Self::Image(b) | Self::Audio(b) => serde_json::to_value(b),
            Self::Resource(b) => serde_json::to_value(b),
            Self::ResourceLink(b) => serde_json::to_value(b),
            Self::ToolUse(b) => serde_json::to_value(b),
            Self::ToolResult(b) => serde_json::to_value(b),
            Self::Unknown(map) => return map.serialize(serializer),
        }
        .map_err(S::Error::custom)?;
        let Value::Object(fields) = body else {
            return Err(S::Error::custom(
                "a content block must serialise as an object",
            ));
        };
        let mut map = serializer.serialize_map(Some(fields.len() + 1))?;
        map.serialize_entry("type", self.kind())?;
        for (key, value) in fields.iter().filter(|(key, _)| *key != "type") {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(BlockVisitor)
    }
}

/// Blocks with at most this many members are gathered in a list rather than
/// a map: no hashing for the usual three or four, and a linear search that
/// stays short.
const FEW_MEMBERS: usize = 8;

/// Reads a block's members, then its kind.
struct BlockVisitor;

impl<'de> serde::de::Visitor<'de> for BlockVisitor {
    type Value = ContentBlock;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a content block object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<ContentBlock, A::Error> {
        let mut few: Vec<(String, Value)> = Vec::with_capacity(4);
        while let Some(key) = map.next_key::<String>()? {
            let value: Value = map.next_value()?;
            // A member given twice keeps its first place and its last value,
            // as in a map.
            if let Some((_, slot)) = few.iter_mut().find(|(k, _)| *k == key) {
                *slot = value;
            } else if few.len() < FEW_MEMBERS {
                few.push((key, value));
            } else {
                let mut many: JsonObject = few.into_iter().collect();
                many.insert(key, value);
                while let Some((key, value)) = map.next_entry::<String, Value>()? {
                    many.insert(key, value);
                }
                return ContentBlock::from_object(many);
            }
        }
        let is_text = few
            .iter()
            .any(|(k, v)| k == "type" && v.as_str() == Some("text"));
        if is_text {
            // Nearly every block: built from the list, with no map between.
            return Ok(ContentBlock::Text(text_body(few)?));
        }
        ContentBlock::from_object(few.into_iter().collect())
    }
}

impl ContentBlock {
    /// A block read from its members.
    fn from_object<E: serde::de::Error>(mut map: JsonObject) -> Result<Self, E> {
        let kind = match map.get("type") {
            Some(Value::String(kind)) => kind.clone(),
            Some(_) => return Err(E::custom("content block `type` must be a string")),
            None => return Err(E::missing_field("type")),
        };
        fn body<T: serde::de::DeserializeOwned, E: serde::de::Error>(
            map: JsonObject,
        ) -> Result<T, E> {
            serde_json::from_value(Value::Object(map)).map_err(E::custom)
        }
        let known = matches!(
            kind.as_str(),
            "text" | "image" | "audio" | "resource" | "resource_link" | "tool_use" | "tool_result"
        );
        if !known {
            return Ok(Self::Unknown(map));
        }
        map.shift_remove("type");
        Ok(match kind.as_str() {
            "text" => Self::Text(text_body(map)?),
            "image" => Self::Image(body(map)?),
            "audio" => Self::Audio(body(map)?),
            "resource" => Self::Resource(body(map)?),
            "resource_link" => Self::ResourceLink(body(map)?),
            "tool_use" => Self::ToolUse(body(map)?),
            _ => Self::ToolResult(body(map)?),
        })
    }
}

/// A text block's body, read from its members (each given once) by hand:
/// nearly every block is text, and the derived form was reached through a
/// JSON value made again from the members, with every unmodelled member
/// buffered to build `extra`. Reads what the derived form reads: `text`
/// required, a `null` `annotations` or `_meta` absent, and `extra` keeping
/// the rest in order. A `type` member is the block's kind, not part of it.
fn text_body<E: serde::de::Error>(
    members: impl IntoIterator<Item = (String, Value)>,
) -> Result<TextContent, E> {
    let mut text = None;
    let mut annotations = None;
    let mut meta = None;
    let mut extra = JsonObject::new();
    for (key, value) in members {
        match key.as_str() {
            "type" => {}
            "text" => match value {
                Value::String(value) => text = Some(value),
                _ => return Err(E::custom("`text` must be a string")),
            },
            "annotations" => {
                annotations = match value {
                    Value::Null => None,
                    value => Some(Annotations::deserialize(value).map_err(E::custom)?),
                };
            }
            "_meta" => {
                meta = match value {
                    Value::Null => None,
                    Value::Object(value) => Some(value),
                    _ => return Err(E::custom("`_meta` must be an object")),
                };
            }
            _ => {
                extra.insert(key, value);
            }
        }
    }
    Ok(TextContent {
        text: text.ok_or_else(|| E::missing_field("text"))?,
        annotations,
        meta,
        extra,
    })
}

fn take_string<E: serde::de::Error>(map: &mut JsonObject, key: &str) -> Result<Option<String>, E> {
    match map.shift_remove(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(E::custom(format_args!("`{key}` must be a string"))),
    }
}

fn take_object<E: serde::de::Error>(
    map: &mut JsonObject,
    key: &str,
) -> Result<Option<JsonObject>, E> {
    match map.shift_remove(key) {
        None => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o)),
        Some(_) => Err(E::custom(format_args!("`{key}` must be an object"))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The list a block's members are gathered in and the map a long block
    /// spills into read every block alike: the same block, or the same
    /// refusal.
    #[test]
    fn a_block_reads_the_same_however_its_members_are_gathered() -> Result<(), serde_json::Error> {
        let many: String = (0..20).map(|i| format!(r#","m{i}":{i}"#)).collect();
        for text in [
            r#"{"type":"text","text":"a"}"#.to_owned(),
            r#"{"text":"a","z":1,"type":"text","a":2,"_meta":{"k":1}}"#.to_owned(),
            r#"{"type":"text","text":"a","annotations":null,"_meta":null}"#.to_owned(),
            r#"{"type":"text","text":"a","text":"b","type":"text"}"#.to_owned(),
            r#"{"type":"image","type":"text","text":"a"}"#.to_owned(),
            r#"{"type":"text","text":"a","annotations":{"priority":0.5}}"#.to_owned(),
            format!(r#"{{"type":"text","text":"a"{many}}}"#),
            format!(r#"{{"type":"text"{many},"text":"a","text":"b"}}"#),
            format!(r#"{{"type":"hologram"{many}}}"#),
            r#"{"type":"image","data":"AAAA","mimeType":"image/png"}"#.to_owned(),
            r#"{"type":"hologram","frames":3}"#.to_owned(),
            r#"{"type":"text","text":5}"#.to_owned(),
            r#"{"type":"text"}"#.to_owned(),
            r#"{"type":5,"text":"a"}"#.to_owned(),
            r#"{"text":"a"}"#.to_owned(),
            r#"{"type":"text","text":"a","_meta":[]}"#.to_owned(),
        ] {
            let listed = serde_json::from_str::<ContentBlock>(&text).map_err(|e| e.to_string());
            let mapped = serde_json::from_str::<JsonObject>(&text)
                .map_err(|e| e.to_string())
                .and_then(|map| {
                    ContentBlock::from_object::<serde_json::Error>(map).map_err(|e| e.to_string())
                });
            assert_eq!(
                listed.is_ok(),
                mapped.is_ok(),
                "{text}: {listed:?} against {mapped:?}"
            );
            if let (Ok(listed), Ok(mapped)) = (&listed, &mapped) {
                assert_eq!(listed, mapped, "{text}");
            }
        }
        let block: ContentBlock =
            serde_json::from_str(r#"{"text":"a","z":1,"type":"text","a":2}"#)?;
        let order: Option<Vec<&str>> = match &block {
            ContentBlock::Text(text) => Some(text.extra.keys().map(String::as_str).collect()),
            _ => None,
        };
        assert_eq!(
            order,
            Some(vec!["z", "a"]),
            "unmodelled members keep their order"
        );
        Ok(())
    }

    #[test]
    fn a_block_of_an_unknown_type_round_trips_whole() -> Result<(), serde_json::Error> {
        let wire = json!({ "type": "hologram", "frames": 3, "_meta": { "x": 1 } });
        let block: ContentBlock = serde_json::from_value(wire.clone())?;
        assert!(matches!(block, ContentBlock::Unknown(_)));
        assert_eq!(serde_json::to_value(&block)?, wire);
        Ok(())
    }

    #[test]
    fn a_stray_type_in_extra_does_not_relabel_a_block() -> Result<(), serde_json::Error> {
        let mut text = TextContent::new("hi");
        text.extra.insert("type".to_owned(), json!("image"));
        let written = serde_json::to_value(ContentBlock::Text(text))?;
        assert_eq!(written, json!({ "type": "text", "text": "hi" }));
        Ok(())
    }

    #[test]
    fn text_is_written_as_the_generic_path_writes_it() -> Result<(), serde_json::Error> {
        let plain = json!({ "type": "text", "text": "hi", "_meta": { "k": [1, 2] } });
        let full = json!({
            "type": "text",
            "text": "hi",
            "annotations": { "audience": ["user"], "priority": 0.5 },
            "_meta": { "k": [1, 2] },
            "later": { "x": null },
            "first": true,
        });
        for wire in [plain, full] {
            let block: ContentBlock = serde_json::from_value(wire.clone())?;
            let direct = serde_json::to_string(&block)?;
            let generic = serde_json::to_string(&Tagged(&block))?;
            assert_eq!(direct, generic, "same members in the same order");
            assert_eq!(serde_json::from_str::<Value>(&direct)?, wire);
        }
        // A member of `extra` named like a typed one is written once.
        let mut text = TextContent::new("typed");
        text.extra.insert("text".to_owned(), json!("extra"));
        let written = serde_json::to_string(&ContentBlock::Text(text))?;
        assert_eq!(written.matches("\"text\":").count(), 1, "{written}");
        Ok(())
    }

    /// The generic path, for any block.
    struct Tagged<'a>(&'a ContentBlock);

    impl Serialize for Tagged<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            self.0.serialize_tagged(serializer)
        }
    }

    #[test]
    fn a_known_type_with_a_missing_field_is_refused_not_guessed() {
        let wire = json!({ "type": "image", "data": "AAAA" });
        assert!(serde_json::from_value::<ContentBlock>(wire).is_err());
    }

    #[test]
    fn unknown_members_of_a_known_block_survive() -> Result<(), serde_json::Error> {
        let wire = json!({ "type": "text", "text": "hi", "futureField": [1, 2] });
        let block: ContentBlock = serde_json::from_value(wire.clone())?;
        assert!(matches!(block, ContentBlock::Text(_)));
        assert_eq!(serde_json::to_value(&block)?, wire);
        Ok(())
    }

    #[test]
    fn resource_contents_pick_their_kind_from_their_members() -> Result<(), serde_json::Error> {
        let blob = json!({ "uri": "file:///a", "blob": "AAAA", "mimeType": "image/png" });
        let read: ResourceContents = serde_json::from_value(blob.clone())?;
        assert!(matches!(read, ResourceContents::Blob { .. }));
        assert_eq!(serde_json::to_value(&read)?, blob);
        assert!(serde_json::from_value::<ResourceContents>(json!({ "uri": "x" })).is_err());
        Ok(())
    }
}
