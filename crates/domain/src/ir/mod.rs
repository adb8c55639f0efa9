//! The revision-neutral model of what MCP messages carry.
//!
//! Each type here is the union of what every revision can say about the
//! thing it models: a field one revision lacks is an `Option`, and anything
//! this build does not model is kept in an `extra` map (or, for a content
//! block of a type added after this build, as [`ContentBlock::Unknown`]) so
//! that it is forwarded rather than lost. The names on the wire are the
//! spec's, so serialising a value writes the newest revision's shape; what an
//! older revision can express is [`lower`]'s business.

pub mod content;
pub mod lower;
mod tool_result;

pub use content::{
    Annotations, AudioContent, ContentBlock, EmbeddedResource, Icon, ImageContent,
    ResourceContents, ResourceLink, Role, TextContent, ToolResultContent, ToolUseContent,
};
pub use lower::{Downgrade, LowerError, TranslationReport};
pub use tool_result::{
    RESULT_TYPE_COMPLETE, RESULT_TYPE_INPUT_REQUIRED, RESULT_TYPE_TASK, ToolResult,
};

pub use crate::feature::FeatureSet;

/// A JSON object, as every open-ended part of MCP (`_meta`, capabilities,
/// arguments) is.
pub type JsonObject = serde_json::Map<String, serde_json::Value>;

/// Reads a member that is there, even as `null`, as `Some`.
///
/// For `#[serde(deserialize_with = "present")]` on an `Option` field. Plain
/// `Option<T>` reads `null` as absent, so a peer's explicit `null` (allowed as
/// structured content and as error data) would vanish on the way back out.
///
/// # Errors
///
/// Whatever reading a `T` fails with.
pub fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}
