//! Error codes and the data the spec attaches to some of them.
//!
//! The 2026-07-28 schema defines the five JSON-RPC errors as bare error
//! objects (`ParseError` is `{code, message, data?}`) and its own three as
//! whole error responses (`HeaderMismatchError` is `{jsonrpc, id, error}`);
//! the aliases below follow it. An alias does not check the code: read
//! [`ErrorObject::code`] for that.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::elicitation::ElicitRequestUrlParams;
use super::jsonrpc_meta::{ErrorObject, ErrorResponse};
use super::lifecycle::ClientCapabilities;
use protocol_droid_domain::ir::JsonObject;

/// The JSON-RPC error code, shared with the domain's JSON-RPC layer.
pub use protocol_droid_domain::jsonrpc::ErrorCode;

/// `data` of an unsupported-protocol-version error (2026-07-28).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UnsupportedProtocolVersionData {
    /// The versions the server speaks.
    pub supported: Vec<String>,
    /// The version the client asked for.
    pub requested: String,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// `data` of a missing-required-client-capability error (2026-07-28).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MissingRequiredClientCapabilityData {
    /// The capabilities the request needs.
    pub required_capabilities: ClientCapabilities,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// `data` of a URL-elicitation-required error (2025-11-25 only).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UrlElicitationRequiredData {
    /// The URL elicitations to complete before retrying.
    pub elicitations: Vec<ElicitRequestUrlParams>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// -32700 (2026-07-28 `ParseError`).
pub type ParseError = ErrorObject<Value>;
/// -32600 (2026-07-28 `InvalidRequestError`).
pub type InvalidRequestError = ErrorObject<Value>;
/// -32601 (2026-07-28 `MethodNotFoundError`).
pub type MethodNotFoundError = ErrorObject<Value>;
/// -32602 (2026-07-28 `InvalidParamsError`).
pub type InvalidParamsError = ErrorObject<Value>;
/// -32603 (2026-07-28 `InternalError`).
pub type InternalError = ErrorObject<Value>;

/// The whole -32020 response (2026-07-28 `HeaderMismatchError`).
pub type HeaderMismatchError = ErrorResponse<Value>;
/// The whole -32021 response (2026-07-28
/// `MissingRequiredClientCapabilityError`).
pub type MissingRequiredClientCapabilityError = ErrorResponse<MissingRequiredClientCapabilityData>;
/// The whole -32022 response (2026-07-28 `UnsupportedProtocolVersionError`).
pub type UnsupportedProtocolVersionError = ErrorResponse<UnsupportedProtocolVersionData>;
/// The whole -32042 response (2025-11-25 `URLElicitationRequiredError`).
pub type UrlElicitationRequiredError = ErrorResponse<UrlElicitationRequiredData>;
