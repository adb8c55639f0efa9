//! Argument completion: `completion/complete`.

use std::collections::BTreeMap;

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::jsonrpc_meta::ResultType;
use super::literals::{RefPrompt, RefResource};
use protocol_droid_domain::ir::JsonObject;

/// What is being completed: a prompt's or a resource template's argument.
#[derive(Clone, Debug, PartialEq)]
pub enum CompletionReference {
    /// `ref/prompt`.
    Prompt(PromptReference),
    /// `ref/resource`.
    ResourceTemplate(ResourceTemplateReference),
}

impl Serialize for CompletionReference {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Prompt(r) => r.serialize(serializer),
            Self::ResourceTemplate(r) => r.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for CompletionReference {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        fn read<T: DeserializeOwned, E: serde::de::Error>(value: Value) -> Result<T, E> {
            serde_json::from_value(value).map_err(E::custom)
        }
        let value = Value::deserialize(deserializer)?;
        match value.get("type").and_then(Value::as_str) {
            Some(RefPrompt::VALUE) => read(value).map(Self::Prompt),
            Some(RefResource::VALUE) => read(value).map(Self::ResourceTemplate),
            Some(other) => Err(D::Error::custom(format_args!(
                "unknown completion reference type `{other}`"
            ))),
            None => Err(D::Error::custom(
                "a completion reference needs a string `type`",
            )),
        }
    }
}

/// A prompt, named for completion: `PromptReference`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PromptReference {
    /// Always `"ref/prompt"`.
    #[serde(rename = "type")]
    pub kind: RefPrompt,
    /// The prompt's name.
    pub name: String,
    /// Display name (2025-06-18).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// A resource template, named for completion: `ResourceTemplateReference`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResourceTemplateReference {
    /// Always `"ref/resource"`.
    #[serde(rename = "type")]
    pub kind: RefResource,
    /// The template (or URI).
    pub uri: String,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The 2024-11-05 and 2025-03-26 name of [`ResourceTemplateReference`]; the
/// wire shape is the same.
pub type ResourceReference = ResourceTemplateReference;

/// The argument being completed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompletionArgument {
    /// Its name.
    pub name: String,
    /// What has been typed so far.
    pub value: String,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// Values already given for other arguments (2025-06-18).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletionContext {
    /// Argument values by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<BTreeMap<String, String>>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// Params of `completion/complete`: `CompleteRequestParams`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompleteRequestParams {
    /// What is being completed.
    #[serde(rename = "ref")]
    pub reference: CompletionReference,
    /// The argument being completed.
    pub argument: CompletionArgument,
    /// Other arguments' values (2025-06-18).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<CompletionContext>,
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The completions offered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Completion {
    /// At most 100 values.
    pub values: Vec<String>,
    /// How many there are in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// Whether there are more than `values` holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub has_more: Option<bool>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The answer to `completion/complete`: `CompleteResult`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompleteResult {
    /// The completions.
    pub completion: Completion,
    /// What kind of result this is (2026-07-28).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_type: Option<ResultType>,
    /// Result metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_reference_is_read_by_its_type() -> Result<(), serde_json::Error> {
        let prompt: CompletionReference =
            serde_json::from_value(json!({ "type": "ref/prompt", "name": "p", "uri": "x" }))?;
        assert!(matches!(prompt, CompletionReference::Prompt(_)));
        let resource: CompletionReference =
            serde_json::from_value(json!({ "type": "ref/resource", "uri": "x", "name": "p" }))?;
        assert!(matches!(resource, CompletionReference::ResourceTemplate(_)));
        assert!(
            serde_json::from_value::<CompletionReference>(json!({ "type": "ref/tool" })).is_err()
        );
        Ok(())
    }
}
