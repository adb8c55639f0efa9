//! Who the peers are and what they support: `initialize` (2024-11-05 to
//! 2025-11-25), `server/discover` (2026-07-28) and the capability objects.
//!
//! Capability objects are open in every revision (2025-11-25 added `tasks`,
//! 2026-07-28 added `extensions` and dropped `tasks` again), so each level
//! keeps what it does not model in `extra`.

use serde::{Deserialize, Serialize};

use super::jsonrpc_meta::{CacheScope, RequestParams, ResultType};
use protocol_droid_domain::ir::{Icon, JsonObject};

/// A client's or server's name and version: `Implementation`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Implementation {
    /// Programmatic name.
    pub name: String,
    /// Display name (2025-06-18).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Version string.
    pub version: String,
    /// What it is (2025-11-25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its website (2025-11-25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub website_url: Option<String>,
    /// Icons (2025-11-25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icons: Option<Vec<Icon>>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// What a client supports: `ClientCapabilities`.
///
/// Declared once in `initialize` up to 2025-11-25, and on every request's
/// `_meta` from 2026-07-28.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientCapabilities {
    /// Non-standard capabilities, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experimental: Option<JsonObject>,
    /// Roots (legacy `{listChanged?}`; 2026-07-28 `{}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roots: Option<RootsCapability>,
    /// Sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<ClientSamplingCapability>,
    /// Elicitation (2025-06-18); `{}` means form mode only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elicitation: Option<ClientElicitationCapability>,
    /// Task-augmented requests the client accepts (2025-11-25 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<ClientTasksCapability>,
    /// Extensions by id, with their settings (2026-07-28).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The client's `roots` capability.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RootsCapability {
    /// Whether the client sends `notifications/roots/list_changed` (legacy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_changed: Option<bool>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The client's `sampling` capability.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientSamplingCapability {
    /// Supports `includeContext` other than `none` (2025-11-25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<JsonObject>,
    /// Supports `tools` and `toolChoice` (2025-11-25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The client's `elicitation` capability.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientElicitationCapability {
    /// Supports form mode (2025-11-25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub form: Option<JsonObject>,
    /// Supports URL mode (2025-11-25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The client's `tasks` capability (2025-11-25).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientTasksCapability {
    /// Supports `tasks/list`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list: Option<JsonObject>,
    /// Supports `tasks/cancel`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<JsonObject>,
    /// Which server requests may be task-augmented.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<ClientTaskRequestsCapability>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// `ClientCapabilities.tasks.requests` (2025-11-25).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientTaskRequestsCapability {
    /// Task-augmented sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<SamplingTaskCapability>,
    /// Task-augmented elicitation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elicitation: Option<ElicitationTaskCapability>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// `ClientCapabilities.tasks.requests.sampling` (2025-11-25).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SamplingTaskCapability {
    /// `sampling/createMessage` may be task-augmented.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_message: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// `ClientCapabilities.tasks.requests.elicitation` (2025-11-25).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ElicitationTaskCapability {
    /// `elicitation/create` may be task-augmented.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// What a server supports: `ServerCapabilities`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerCapabilities {
    /// Non-standard capabilities, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experimental: Option<JsonObject>,
    /// Sends log messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logging: Option<JsonObject>,
    /// Answers `completion/complete` (2025-03-26).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completions: Option<JsonObject>,
    /// Offers prompts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<PromptsCapability>,
    /// Offers resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourcesCapability>,
    /// Offers tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolsCapability>,
    /// Task-augmented requests the server accepts (2025-11-25 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<ServerTasksCapability>,
    /// Extensions by id, with their settings (2026-07-28).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

impl ServerCapabilities {
    /// Whether the server runs `tools/call` as a task when asked
    /// (2025-11-25 `tasks.requests.tools.call`).
    #[must_use]
    pub fn runs_tool_calls_as_tasks(&self) -> bool {
        self.tasks
            .as_ref()
            .and_then(|t| t.requests.as_ref())
            .and_then(|r| r.tools.as_ref())
            .and_then(|t| t.call.as_ref())
            .is_some()
    }

    /// Whether the server declares the extension `id` (2026-07-28).
    #[must_use]
    pub fn declares_extension(&self, id: &str) -> bool {
        self.extensions.as_ref().is_some_and(|e| e.contains_key(id))
    }
}

/// The server's `prompts` capability.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptsCapability {
    /// Sends `notifications/prompts/list_changed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_changed: Option<bool>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The server's `resources` capability.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourcesCapability {
    /// Supports per-resource update subscriptions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscribe: Option<bool>,
    /// Sends `notifications/resources/list_changed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_changed: Option<bool>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The server's `tools` capability.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolsCapability {
    /// Sends `notifications/tools/list_changed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_changed: Option<bool>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The server's `tasks` capability (2025-11-25).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerTasksCapability {
    /// Supports `tasks/list`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list: Option<JsonObject>,
    /// Supports `tasks/cancel`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<JsonObject>,
    /// Which client requests may be task-augmented.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<ServerTaskRequestsCapability>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// `ServerCapabilities.tasks.requests` (2025-11-25).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerTaskRequestsCapability {
    /// Task-augmented tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolsTaskCapability>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// `ServerCapabilities.tasks.requests.tools` (2025-11-25).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolsTaskCapability {
    /// `tools/call` may be task-augmented.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// Params of `initialize` (2024-11-05 to 2025-11-25):
/// `InitializeRequestParams`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeRequestParams {
    /// The version the client wants.
    pub protocol_version: String,
    /// What the client supports.
    pub capabilities: ClientCapabilities,
    /// Who the client is.
    pub client_info: Implementation,
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The answer to `initialize` (2024-11-05 to 2025-11-25): `InitializeResult`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    /// The version the server chose.
    pub protocol_version: String,
    /// What the server supports.
    pub capabilities: ServerCapabilities,
    /// Who the server is.
    pub server_info: Implementation,
    /// How to use the server, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// Result metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// Params of `ping` (2024-11-05 to 2025-11-25): only `_meta`.
pub type PingRequestParams = RequestParams;

/// Params of `server/discover` (2026-07-28): only `_meta`.
pub type DiscoverRequestParams = RequestParams;

/// The answer to `server/discover` (2026-07-28): `DiscoverResult`.
///
/// The server's identity is not a member: it travels in
/// `_meta["io.modelcontextprotocol/serverInfo"]` (see
/// [`super::meta::ResultMeta`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoverResult {
    /// Every protocol version the server speaks.
    pub supported_versions: Vec<String>,
    /// What the server supports.
    pub capabilities: ServerCapabilities,
    /// How to use the server, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// How long the answer stays fresh, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<i64>,
    /// Who may share a cached copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_scope: Option<CacheScope>,
    /// What kind of result this is.
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
    fn unknown_capability_members_survive_at_every_level() -> Result<(), serde_json::Error> {
        let wire = json!({
            "tools": { "listChanged": true, "future": 1 },
            "tasks": { "requests": { "tools": { "call": {} }, "x": [] } },
            "someday": { "a": 1 },
        });
        let caps: ServerCapabilities = serde_json::from_value(wire.clone())?;
        assert_eq!(caps.tools.as_ref().and_then(|t| t.list_changed), Some(true));
        assert_eq!(serde_json::to_value(&caps)?, wire);
        Ok(())
    }
}
