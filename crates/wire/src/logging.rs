//! Logging: levels, `logging/setLevel` (up to 2025-11-25) and
//! `notifications/message`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use protocol_droid_domain::ir::JsonObject;

pub use protocol_droid_domain::LoggingLevel;

/// Params of `logging/setLevel` (2024-11-05 to 2025-11-25):
/// `SetLevelRequestParams`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SetLevelRequestParams {
    /// The least severe level the client wants.
    pub level: LoggingLevel,
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// Params of `notifications/message`: `LoggingMessageNotificationParams`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoggingMessageNotificationParams {
    /// The message's severity.
    pub level: LoggingLevel,
    /// The logger's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logger: Option<String>,
    /// The message: any JSON.
    pub data: Value,
    /// Notification metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}
