//! The typed views of `_meta` that 2026-07-28 defines for requests,
//! notifications and results.
//!
//! Params and results keep `_meta` as a plain object so nothing is lost;
//! these types read the keys the revision names.

use serde::{Deserialize, Serialize};

use super::jsonrpc_meta::{ProgressToken, RequestId};
use super::lifecycle::{ClientCapabilities, Implementation};
use super::logging::LoggingLevel;
use protocol_droid_domain::ir::JsonObject;

/// The key of a 2026-07-28 result's `_meta` naming its server
/// ([`ResultMeta::server_info`]).
pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// The keys 2026-07-28 defines in a request's `_meta`: `RequestMetaObject`.
///
/// Params keep `_meta` as a plain object so nothing is lost; read it into
/// this type when the typed keys are wanted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestMeta {
    /// Opt-in to progress notifications for this request.
    #[serde(
        rename = "progressToken",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub progress_token: Option<ProgressToken>,
    /// The protocol version of this request (required in 2026-07-28).
    #[serde(
        rename = "io.modelcontextprotocol/protocolVersion",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub protocol_version: Option<String>,
    /// Who the client says it is; advisory only.
    #[serde(
        rename = "io.modelcontextprotocol/clientInfo",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub client_info: Option<Implementation>,
    /// What the client supports for this request (required in 2026-07-28).
    #[serde(
        rename = "io.modelcontextprotocol/clientCapabilities",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub client_capabilities: Option<Box<ClientCapabilities>>,
    /// Opt-in to log notifications at or above this level.
    #[serde(
        rename = "io.modelcontextprotocol/logLevel",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub log_level: Option<LoggingLevel>,
    /// Keys this build does not model (trace context, extensions).
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The keys 2026-07-28 defines in a notification's `_meta`:
/// `NotificationMetaObject`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NotificationMeta {
    /// The `subscriptions/listen` request this notification belongs to.
    #[serde(
        rename = "io.modelcontextprotocol/subscriptionId",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub subscription_id: Option<RequestId>,
    /// Keys this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The keys 2026-07-28 defines in a result's `_meta`: `ResultMetaObject`
/// (and `SubscriptionsListenResultMetaObject`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResultMeta {
    /// Who the server says it is; advisory only.
    #[serde(
        rename = "io.modelcontextprotocol/serverInfo",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub server_info: Option<Implementation>,
    /// On a `subscriptions/listen` result: the subscription it closes.
    #[serde(
        rename = "io.modelcontextprotocol/subscriptionId",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub subscription_id: Option<RequestId>,
    /// Keys this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}
