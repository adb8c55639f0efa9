//! Sampling: the server asking the client's model for a message.
//!
//! A server→client request up to 2025-11-25; an input request inside a
//! multi round-trip request in 2026-07-28, where it is deprecated.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Number, Value};

use super::tasks::TaskMetadata;
use super::tools::Tool;
use protocol_droid_domain::ir::{ContentBlock, JsonObject, Role};

/// What the server would like in a model: `ModelPreferences`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelPreferences {
    /// Model names to consider, best first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hints: Option<Vec<ModelHint>>,
    /// How much cost matters, 0 to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_priority: Option<Number>,
    /// How much speed matters, 0 to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_priority: Option<Number>,
    /// How much capability matters, 0 to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intelligence_priority: Option<Number>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// A hint naming a model or family: `ModelHint`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelHint {
    /// A substring of a model name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The content of a sampling message: one block, or (2025-11-25) an array.
///
/// Kept apart because a bridge to an older revision must know which was
/// sent: a one-element array is not the same wire value as a bare block.
#[derive(Clone, Debug, PartialEq)]
pub enum SamplingContent {
    /// A single block.
    One(Box<ContentBlock>),
    /// Several blocks (2025-11-25).
    Many(Vec<ContentBlock>),
}

impl Serialize for SamplingContent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::One(block) => block.serialize(serializer),
            Self::Many(blocks) => blocks.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for SamplingContent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // The JSON type is the discriminator: an array is many, an object one.
        match Value::deserialize(deserializer)? {
            Value::Array(items) => serde_json::from_value(Value::Array(items))
                .map(Self::Many)
                .map_err(D::Error::custom),
            object @ Value::Object(_) => serde_json::from_value(object)
                .map(Self::One)
                .map_err(D::Error::custom),
            _ => Err(D::Error::custom(
                "sampling content must be a content block or an array of them",
            )),
        }
    }
}

/// One message of a sampling conversation: `SamplingMessage`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SamplingMessage {
    /// Who says it.
    pub role: Role,
    /// What is said.
    pub content: SamplingContent,
    /// Message metadata (2025-11-25).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// Which MCP servers' context to include (soft-deprecated beyond `none`
/// from 2025-11-25).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum IncludeContext {
    /// No context.
    None,
    /// The requesting server's context.
    ThisServer,
    /// Every connected server's context.
    AllServers,
}

/// How the model may use the offered tools (2025-11-25): `ToolChoice`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolChoice {
    /// The mode; `auto` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ToolChoiceMode>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// `ToolChoice.mode` (2025-11-25).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolChoiceMode {
    /// The model decides.
    Auto,
    /// The model must use a tool.
    Required,
    /// The model must not use a tool.
    None,
}

/// Params of `sampling/createMessage`: `CreateMessageRequestParams`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateMessageRequestParams {
    /// The conversation so far.
    pub messages: Vec<SamplingMessage>,
    /// Model preferences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_preferences: Option<ModelPreferences>,
    /// A system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Which servers' context to include.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_context: Option<IncludeContext>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<Number>,
    /// The most tokens to sample.
    pub max_tokens: u64,
    /// Sequences that stop sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_sequences: Option<Vec<String>>,
    /// Provider-specific metadata, passed through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
    /// Tools the model may call (2025-11-25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Tool>>,
    /// How the model may use them (2025-11-25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Asks for a task instead of a result (2025-11-25 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskMetadata>,
    /// Request metadata (legacy; 2026-07-28 defines none here).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The answer to `sampling/createMessage`: `CreateMessageResult`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateMessageResult {
    /// Who says it (the assistant, in practice).
    pub role: Role,
    /// What the model produced.
    pub content: SamplingContent,
    /// The model that produced it.
    pub model: String,
    /// Why sampling stopped: `endTurn`, `stopSequence`, `maxTokens`,
    /// `toolUse` or anything else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Result metadata (legacy; 2026-07-28 defines none here).
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
    fn a_one_element_array_stays_an_array() -> Result<(), serde_json::Error> {
        let wire = json!({ "role": "user", "content": [{ "type": "text", "text": "hi" }] });
        let message: SamplingMessage = serde_json::from_value(wire.clone())?;
        assert!(matches!(message.content, SamplingContent::Many(_)));
        assert_eq!(serde_json::to_value(&message)?, wire);
        Ok(())
    }

    #[test]
    fn an_integer_priority_is_written_back_as_an_integer() -> Result<(), serde_json::Error> {
        let wire = json!({ "costPriority": 1, "speedPriority": 0.5 });
        let prefs: ModelPreferences = serde_json::from_value(wire.clone())?;
        assert_eq!(
            serde_json::to_string(&prefs)?,
            r#"{"costPriority":1,"speedPriority":0.5}"#
        );
        assert_eq!(serde_json::to_value(&prefs)?, wire);
        Ok(())
    }
}
