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
pub use lower::{Downgrade, LowerError, TranslationReport, audio_description};
pub use tool_result::{
    RESULT_TYPE_COMPLETE, RESULT_TYPE_INPUT_REQUIRED, RESULT_TYPE_TASK, ToolResult, WithoutMeta,
};

pub use crate::feature::FeatureSet;

/// A JSON object, as every open-ended part of MCP (`_meta`, capabilities,
/// arguments) is.
pub type JsonObject = serde_json::Map<String, serde_json::Value>;

/// How many members an object may have for its members to be found by
/// comparing names rather than by hashing the one looked for.
const LINEAR_LOOKUP: usize = 8;

/// The member `key` of `object`.
///
/// Request params and `_meta` objects hold a handful of members, and
/// comparing their names is cheaper than hashing the one looked for (a
/// [`JsonObject`] hashes with `SipHash`); a larger object is looked up by
/// hash.
#[must_use]
pub fn member<'a>(object: &'a JsonObject, key: &str) -> Option<&'a serde_json::Value> {
    if object.len() <= LINEAR_LOOKUP {
        object
            .iter()
            .find_map(|(name, value)| (name == key).then_some(value))
    } else {
        object.get(key)
    }
}

/// The member `key` of `object`, to change in place, as
/// [`JsonObject::get_mut`] finds it (see [`member`]).
pub fn member_mut<'a>(object: &'a mut JsonObject, key: &str) -> Option<&'a mut serde_json::Value> {
    if object.len() <= LINEAR_LOOKUP {
        object
            .iter_mut()
            .find_map(|(name, value)| (name == key).then_some(value))
    } else {
        object.get_mut(key)
    }
}

/// Takes the member `key` out of `object`, as [`JsonObject::remove`] does,
/// hashing `key` only when a small object has it (see [`member`]).
pub fn take_member(object: &mut JsonObject, key: &str) -> Option<serde_json::Value> {
    if object.len() <= LINEAR_LOOKUP && !object.keys().any(|name| name == key) {
        return None;
    }
    object.remove(key)
}

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

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn object(value: Value) -> JsonObject {
        match value {
            Value::Object(object) => object,
            _ => JsonObject::new(),
        }
    }

    #[test]
    fn members_are_found_and_taken_in_small_and_large_objects() {
        let small = object(json!({"a": 1, "b": 2, "c": 3}));
        let large = object(Value::Object(
            (0..20).map(|i| (format!("k{i}"), json!(i))).collect(),
        ));
        for mut map in [small, large] {
            let first = map.keys().next().cloned().unwrap_or_default();
            let last = map.keys().next_back().cloned().unwrap_or_default();
            assert_eq!(member(&map, &last), map.get(&last));
            assert_eq!(member(&map, "absent"), None);
            let before = map.len();
            assert_eq!(take_member(&mut map, "absent"), None);
            assert_eq!(map.len(), before);
            let expected = map.get(&first).cloned();
            assert_eq!(take_member(&mut map, &first), expected);
            assert_eq!(map.len(), before - 1);
            assert_eq!(member(&map, &first), None);
        }
    }
}
