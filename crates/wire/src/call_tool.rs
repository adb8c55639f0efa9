//! `tools/call`: its params, which in 2026-07-28 carry the answers to an
//! earlier round's input requests, and its result.

use serde::{Deserialize, Serialize};

use super::input::InputResponses;
use super::tasks::TaskMetadata;
use protocol_droid_domain::ir::JsonObject;

/// The answer to `tools/call`: the domain's revision-neutral
/// [`ToolResult`](protocol_droid_domain::ir::ToolResult), which already has the
/// union of every revision's members.
pub type CallToolResult = protocol_droid_domain::ir::ToolResult;

/// Params of `tools/call`: `CallToolRequestParams`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallToolRequestParams {
    /// The tool's name.
    pub name: String,
    /// The arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<JsonObject>,
    /// Asks for a task instead of a result (2025-11-25 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskMetadata>,
    /// Answers to the previous round's input requests (2026-07-28).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_responses: Option<InputResponses>,
    /// The previous round's state, echoed byte for byte (2026-07-28).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_state: Option<String>,
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}
