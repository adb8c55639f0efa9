//! Tools: their definitions, `tools/list` and `tools/call`.

use serde::{Deserialize, Serialize};

use super::jsonrpc_meta::{CacheScope, ResultType};
use protocol_droid_domain::ir::{Icon, JsonObject};

/// A tool the server offers: `Tool`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tool {
    /// Programmatic name.
    pub name: String,
    /// Display name (2025-06-18).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What the tool does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments. Kept as an object: 2026-07-28 allows
    /// any 2020-12 keyword, and a bridge must pass the schema on untouched.
    pub input_schema: JsonObject,
    /// JSON Schema of `structuredContent` (2025-06-18; any root type from
    /// 2026-07-28).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<JsonObject>,
    /// Behaviour hints (2025-03-26).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotations>,
    /// Task support (2025-11-25 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<ToolExecution>,
    /// Icons (2025-11-25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icons: Option<Vec<Icon>>,
    /// Tool metadata (2025-06-18).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// Hints about a tool's behaviour (2025-03-26): `ToolAnnotations`.
///
/// Untrusted unless the server is; never a basis for a security decision.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Does not modify its environment (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// May destroy data (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Repeating a call has no further effect (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// Talks to an open world of entities (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// How a tool may be run (2025-11-25 only): `ToolExecution`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolExecution {
    /// Whether calls may or must be task-augmented (default forbidden).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_support: Option<TaskSupport>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// `ToolExecution.taskSupport` (2025-11-25).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskSupport {
    /// Calls must not be task-augmented.
    Forbidden,
    /// Calls may be task-augmented.
    Optional,
    /// Calls must be task-augmented.
    Required,
}

impl TaskSupport {
    /// How the tool runs through an intermediary that can wait for a task
    /// itself (a bridge, a gateway): one its server only runs as a task
    /// (`Required`) runs either way there (`Optional`), since a call that is
    /// not a task is served by waiting for the server's; the rest as they are.
    #[must_use]
    pub const fn through_intermediary(self) -> Self {
        match self {
            Self::Required => Self::Optional,
            other => other,
        }
    }
}

/// The answer to `tools/list`: `ListToolsResult`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListToolsResult {
    /// This page of tools.
    pub tools: Vec<Tool>,
    /// The cursor for the next page, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// How long the page stays fresh, in milliseconds (2026-07-28).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<i64>,
    /// Who may share a cached copy (2026-07-28).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_scope: Option<CacheScope>,
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
    use super::TaskSupport;

    #[test]
    fn only_a_task_only_tool_changes_through_an_intermediary() {
        assert_eq!(
            TaskSupport::Required.through_intermediary(),
            TaskSupport::Optional
        );
        for kept in [TaskSupport::Optional, TaskSupport::Forbidden] {
            assert_eq!(kept.through_intermediary(), kept);
        }
    }
}
