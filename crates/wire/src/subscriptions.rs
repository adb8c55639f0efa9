//! `subscriptions/listen` (2026-07-28): one long-lived request that carries
//! the notifications the client opted into.

use serde::{Deserialize, Serialize};

use super::jsonrpc_meta::ResultType;
use protocol_droid_domain::ir::JsonObject;

/// Which notifications a listener wants, or a server honours:
/// `SubscriptionFilter`. Extensions add members (the tasks extension's
/// `taskIds`), which stay in `extra`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionFilter {
    /// `notifications/tools/list_changed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools_list_changed: Option<bool>,
    /// `notifications/prompts/list_changed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts_list_changed: Option<bool>,
    /// `notifications/resources/list_changed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_list_changed: Option<bool>,
    /// URIs to receive `notifications/resources/updated` for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_subscriptions: Option<Vec<String>>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// Params of `subscriptions/listen`: `SubscriptionsListenRequestParams`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubscriptionsListenRequestParams {
    /// What to listen for.
    pub notifications: SubscriptionFilter,
    /// Request metadata (required in 2026-07-28).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The result that closes a listen stream: `SubscriptionsListenResult`.
///
/// Its `_meta` names the subscription (`io.modelcontextprotocol/subscriptionId`);
/// read it with [`super::meta::ResultMeta`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionsListenResult {
    /// What kind of result this is; always `complete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_type: Option<ResultType>,
    /// Result metadata (required: it holds the subscription id).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// Params of `notifications/subscriptions/acknowledged`:
/// `SubscriptionsAcknowledgedNotificationParams`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubscriptionsAcknowledgedNotificationParams {
    /// The subset of the request's filter the server honours.
    pub notifications: SubscriptionFilter,
    /// Notification metadata (holds the subscription id).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}
