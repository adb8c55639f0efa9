//! Why a request is not served, and the one mapping from that reason to the
//! JSON-RPC error a peer reads.
//!
//! A [`Refusal`] says what went wrong in terms of the request, not of the
//! wire: "no tool of that name", "this revision has no such method". Which
//! code each reason gets, and which revisions answer a missing resource with
//! `-32002` instead of `-32602`, is decided once, in
//! [`From<Refusal> for ErrorObject`](#impl-From<Refusal>-for-ErrorObject),
//! rather than at each place a request is refused. [`Refusal::blame`] says
//! whose doing it was, which is what decides, for instance, whether an
//! answer is worth recording for a retry.

use std::borrow::Cow;

use serde_json::json;

use crate::feature::Feature;
use crate::ir::JsonObject;
use crate::jsonrpc::{ErrorCode, ErrorObject};
use crate::version::ProtocolVersion;

/// Text for a person, borrowed when it never changes.
pub type Reason = Cow<'static, str>;

/// Why a request is refused.
///
/// Each variant names its cause; the code it is answered with follows from
/// the variant (and, for a missing resource, the revision), never from the
/// call site.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The message is not a request this session can take now: not yet
    /// initialized, initialized twice, an id reused (`-32600`).
    #[error("{0}")]
    InvalidRequest(Reason),
    /// The params do not fit the method (`-32602`).
    #[error("{0}")]
    InvalidParams(Reason),
    /// The method is not one the revision defines, or one this side does
    /// not serve (`-32601`).
    #[error("{0}")]
    MethodNotFound(Reason),
    /// The request names something that is not there, or that the caller
    /// may not see: the two are refused alike.
    #[error("{0}")]
    Unknown(Unknown),
    /// The request's revision is not one this side speaks per request
    /// (`-32022`). One it speaks after `initialize` (listed as supported,
    /// for the client to fall back to) is told so, rather than said to be
    /// unsupported beside a list that names it.
    #[error(
        "protocol version {requested} {}",
        if supported.contains(&requested.as_str()) {
            "is spoken only in a session: send `initialize` to use it"
        } else {
            "is not supported"
        }
    )]
    UnsupportedVersion {
        /// The revision the request named.
        requested: String,
        /// The revisions that are spoken, newest first.
        supported: Vec<&'static str>,
    },
    /// `initialize` reached a server that speaks only 2026-07-28
    /// (`-32602`, listing what it does speak).
    #[error(
        "this server speaks only 2026-07-28: send requests with `_meta` instead of `initialize`"
    )]
    NoHandshake {
        /// The revision the client asked for.
        requested: String,
        /// The revisions that are spoken.
        supported: Vec<&'static str>,
    },
    /// The request needs a client capability it did not declare (`-32021`).
    #[error("the request needs a client capability it did not declare")]
    MissingCapability {
        /// The capabilities needed, as `requiredCapabilities` lists them.
        required: JsonObject,
    },
    /// This side failed; nothing the peer did or could change (`-32603`).
    #[error("{0}")]
    Internal(Reason),
}

/// A name or URI a request refers to that is not offered to the caller.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unknown {
    /// No tool of this name.
    #[error("unknown tool {0}")]
    Tool(String),
    /// No prompt of this name.
    #[error("unknown prompt {0}")]
    Prompt(String),
    /// No resource at this URI; the code depends on the revision.
    #[error("resource not found: {uri}")]
    Resource {
        /// The URI asked for.
        uri: String,
        /// The revision the answer is for.
        at: ProtocolVersion,
    },
    /// No resource at this URI to subscribe to: `-32602` in every
    /// revision, as `-32002` is defined for reads only.
    #[error("no such resource: {0}")]
    Subscription(String),
    /// No prompt or resource template of this name to complete for.
    #[error("nothing to complete for {0}")]
    CompletionTarget(String),
}

/// Whose doing a refusal was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Blame {
    /// The peer sent something this side does not accept; sending it again
    /// gets the same answer.
    Peer,
    /// This side failed; the same request may succeed later.
    Local,
}

impl Refusal {
    /// Whose doing this refusal was.
    #[must_use]
    pub const fn blame(&self) -> Blame {
        match self {
            Self::Internal(_) => Blame::Local,
            _ => Blame::Peer,
        }
    }

    /// A refusal for params that do not fit.
    #[must_use]
    pub fn invalid_params(reason: impl Into<Reason>) -> Self {
        Self::InvalidParams(reason.into())
    }

    /// A refusal for a message this session cannot take now.
    #[must_use]
    pub fn invalid_request(reason: impl Into<Reason>) -> Self {
        Self::InvalidRequest(reason.into())
    }

    /// A refusal for a method that is not served.
    #[must_use]
    pub fn method_not_found(reason: impl Into<Reason>) -> Self {
        Self::MethodNotFound(reason.into())
    }

    /// A failure of this side's.
    #[must_use]
    pub fn internal(reason: impl Into<Reason>) -> Self {
        Self::Internal(reason.into())
    }

    /// The JSON-RPC code this refusal is answered with.
    #[must_use]
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::InvalidRequest(_) => ErrorCode::INVALID_REQUEST,
            Self::InvalidParams(_) | Self::NoHandshake { .. } => ErrorCode::INVALID_PARAMS,
            Self::MethodNotFound(_) => ErrorCode::METHOD_NOT_FOUND,
            Self::Unknown(Unknown::Resource { at, .. })
                if Feature::LegacyResourceNotFound.exists_at(*at) =>
            {
                ErrorCode::RESOURCE_NOT_FOUND
            }
            Self::Unknown(_) => ErrorCode::INVALID_PARAMS,
            Self::UnsupportedVersion { .. } => ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
            Self::MissingCapability { .. } => ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
            Self::Internal(_) => ErrorCode::INTERNAL_ERROR,
        }
    }
}

impl From<Unknown> for Refusal {
    fn from(unknown: Unknown) -> Self {
        Self::Unknown(unknown)
    }
}

impl From<Refusal> for ErrorObject {
    fn from(refusal: Refusal) -> Self {
        let code = refusal.code();
        let message = refusal.to_string();
        let data = match refusal {
            Refusal::Unknown(Unknown::Resource { uri, .. } | Unknown::Subscription(uri)) => {
                Some(json!({ "uri": uri }))
            }
            Refusal::UnsupportedVersion {
                requested,
                supported,
            }
            | Refusal::NoHandshake {
                requested,
                supported,
            } => Some(json!({ "supported": supported, "requested": requested })),
            Refusal::MissingCapability { required } => {
                Some(json!({ "requiredCapabilities": required }))
            }
            _ => None,
        };
        let object = Self::new(code, message);
        match data {
            Some(data) => object.with_data(data),
            None => object,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_resource_is_answered_in_the_code_of_its_revision() {
        let at = |version| {
            ErrorObject::from(Refusal::from(Unknown::Resource {
                uri: "file:///gone".into(),
                at: version,
            }))
        };
        let legacy = at(ProtocolVersion::V2025_11_25);
        assert_eq!(legacy.code, ErrorCode::RESOURCE_NOT_FOUND);
        assert_eq!(legacy.message, "resource not found: file:///gone");
        assert_eq!(legacy.data, Some(json!({ "uri": "file:///gone" })));
        assert_eq!(
            at(ProtocolVersion::V2026_07_28).code,
            ErrorCode::INVALID_PARAMS
        );
    }

    #[test]
    fn only_a_failure_of_this_side_is_blamed_on_it() {
        assert_eq!(Refusal::internal("lost").blame(), Blame::Local);
        for peer in [
            Refusal::invalid_params("x"),
            Refusal::invalid_request("x"),
            Refusal::method_not_found("x"),
            Unknown::Tool("t".into()).into(),
        ] {
            assert_eq!(peer.blame(), Blame::Peer, "{peer:?}");
        }
    }

    #[test]
    fn each_reason_carries_the_data_its_code_defines() {
        let unsupported = ErrorObject::from(Refusal::UnsupportedVersion {
            requested: "1999-01-01".into(),
            supported: vec!["2026-07-28"],
        });
        assert_eq!(unsupported.code, ErrorCode::UNSUPPORTED_PROTOCOL_VERSION);
        assert_eq!(
            unsupported.data,
            Some(json!({ "supported": ["2026-07-28"], "requested": "1999-01-01" }))
        );
        let mut required = JsonObject::new();
        required.insert("sampling".into(), json!({}));
        let missing = ErrorObject::from(Refusal::MissingCapability { required });
        assert_eq!(missing.code, ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY);
        assert_eq!(
            missing.data,
            Some(json!({ "requiredCapabilities": { "sampling": {} } }))
        );
        let plain = ErrorObject::from(Refusal::invalid_params("`name` must be a string"));
        assert_eq!(plain.code, ErrorCode::INVALID_PARAMS);
        assert_eq!(plain.message, "`name` must be a string");
        assert_eq!(plain.data, None);
    }

    #[test]
    fn a_revision_spoken_only_in_a_session_is_not_called_unsupported() {
        let message = |requested: &str| {
            ErrorObject::from(Refusal::UnsupportedVersion {
                requested: requested.into(),
                supported: vec!["2026-07-28", "2025-11-25"],
            })
            .message
        };
        assert_eq!(
            message("2025-11-25"),
            "protocol version 2025-11-25 is spoken only in a session: send `initialize` to use it"
        );
        assert_eq!(
            message("1999-01-01"),
            "protocol version 1999-01-01 is not supported"
        );
    }
}
