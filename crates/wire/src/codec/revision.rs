//! What one revision's wire looks like: its methods and its result rules.
//!
//! The revisions differ mostly by addition, so the typed message model in
//! [`wire`](crate) is shared and each revision is described by data: the
//! methods it defines in each direction are rows of one table
//! ([`super::methods`]), and a [`RevisionCodec`] reads them for its revision
//! and says how a result is finished for it (a 2026-07-28 result carries
//! `resultType` and cache hints; a legacy one must not depend on them).

use std::sync::OnceLock;

use serde::Deserialize as _;
use serde_json::{Map, Value};

use super::methods::{Kind, METHODS, Sender};
use crate::message::{ClientNotification, ClientRequest, ServerNotification, ServerRequest};
use crate::meta::{ResultMeta, SERVER_INFO};

use protocol_droid_domain::ir::lower::{LowerError, TranslationReport, lower_tool_result_in_place};
use protocol_droid_domain::ir::{JsonObject, RESULT_TYPE_COMPLETE, ToolResult};
use protocol_droid_domain::{
    CapabilitySet, DegradePolicy, Era, FeatureProfile, Negotiation, ProtocolVersion, TransportKind,
    resolve,
};

/// The methods whose 2026-07-28 results are cacheable and carry `ttlMs` and
/// `cacheScope`.
pub const CACHEABLE_METHODS: [&str; 6] = [
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// The members only a 2026-07-28 result has.
const MODERN_RESULT_MEMBERS: [&str; 3] = ["resultType", "ttlMs", "cacheScope"];

/// One revision's wire: which methods it defines (read from the one
/// [`METHODS`] table) and how a result is finished for it.
#[derive(Debug)]
pub struct RevisionCodec {
    /// The revision described.
    pub version: ProtocolVersion,
}

/// Why a codec did not read a message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The revision has no such method in that direction: answered
    /// `-32601` by a receiver.
    #[error("{method} is not a method of {version}")]
    UnknownMethod {
        /// The method named.
        method: String,
        /// The revision read at.
        version: ProtocolVersion,
    },
    /// The params do not fit the method: answered `-32602`.
    #[error("params of {method} do not fit: {source}")]
    InvalidParams {
        /// The method named.
        method: String,
        /// What did not fit.
        source: serde_json::Error,
    },
}

impl RevisionCodec {
    /// The methods of `kind` that `sender` may send at this revision, in
    /// the table's order.
    pub fn methods(&self, sender: Sender, kind: Kind) -> impl Iterator<Item = &'static str> + '_ {
        METHODS
            .iter()
            .filter(move |row| row.sender == sender && row.kind == kind)
            .filter(|row| row.defined_at(self.version))
            .map(|row| row.method)
    }

    /// Whether `sender` may send the request `method` at this revision.
    #[must_use]
    pub fn defines_request(&self, sender: Sender, method: &str) -> bool {
        self.defines(sender, Kind::Request, method)
    }

    /// Whether `sender` may send the notification `method` at this revision.
    #[must_use]
    pub fn defines_notification(&self, sender: Sender, method: &str) -> bool {
        self.defines(sender, Kind::Notification, method)
    }

    fn defines(&self, sender: Sender, kind: Kind, method: &str) -> bool {
        METHODS.iter().any(|row| {
            row.method == method
                && row.sender == sender
                && row.kind == kind
                && row.defined_at(self.version)
        })
    }

    /// Reads a request a client sent, if this revision defines its method.
    ///
    /// # Errors
    ///
    /// [`ReadError::UnknownMethod`] for a method the revision does not define
    /// (an `initialize` at 2026-07-28, a `server/discover` at 2025-11-25),
    /// [`ReadError::InvalidParams`] for params that do not fit.
    pub fn read_client_request(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<ClientRequest, ReadError> {
        self.check(self.defines_request(Sender::Client, method), method)?;
        ClientRequest::decode(method, params).map_err(|source| invalid(method, source))
    }

    /// Reads a notification a client sent, as [`Self::read_client_request`].
    ///
    /// # Errors
    ///
    /// As [`Self::read_client_request`].
    pub fn read_client_notification(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<ClientNotification, ReadError> {
        self.check(self.defines_notification(Sender::Client, method), method)?;
        ClientNotification::decode(method, params).map_err(|source| invalid(method, source))
    }

    /// Reads a request a server sent, as [`Self::read_client_request`].
    ///
    /// # Errors
    ///
    /// As [`Self::read_client_request`]; every method, at 2026-07-28, where
    /// servers send no requests.
    pub fn read_server_request(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<ServerRequest, ReadError> {
        self.check(self.defines_request(Sender::Server, method), method)?;
        ServerRequest::decode(method, params).map_err(|source| invalid(method, source))
    }

    /// Reads a notification a server sent, as [`Self::read_client_request`].
    ///
    /// # Errors
    ///
    /// As [`Self::read_client_request`].
    pub fn read_server_notification(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<ServerNotification, ReadError> {
        self.check(self.defines_notification(Sender::Server, method), method)?;
        ServerNotification::decode(method, params).map_err(|source| invalid(method, source))
    }

    fn check(&self, defined: bool, method: &str) -> Result<(), ReadError> {
        if defined {
            Ok(())
        } else {
            Err(ReadError::UnknownMethod {
                method: method.to_owned(),
                version: self.version,
            })
        }
    }

    /// Everything this revision can express in a result, whatever was
    /// declared: what a codec lowers toward.
    #[must_use]
    pub fn expressible(&self) -> FeatureProfile {
        // The same answer for every result of a revision: resolved once,
        // not once per tool call.
        static PROFILES: [OnceLock<FeatureProfile>; ProtocolVersion::ALL.len()] =
            [const { OnceLock::new() }; ProtocolVersion::ALL.len()];
        let resolved = || {
            let caps = CapabilitySet::all_for(self.version);
            resolve(Negotiation {
                version: self.version,
                client_caps: caps,
                server_caps: caps,
                transport: TransportKind::Stdio,
            })
        };
        let slot = ProtocolVersion::ALL
            .iter()
            .position(|v| *v == self.version)
            .and_then(|at| PROFILES.get(at));
        slot.map_or_else(resolved, |slot| *slot.get_or_init(resolved))
    }

    /// Reads a `CallToolResult` written at this revision.
    ///
    /// `None` for a shape the model does not read (a known content type with
    /// a member of the wrong type, say); the caller forwards such a value
    /// untouched. A block of an unknown type is read, and kept whole.
    #[must_use]
    pub fn lift_tool_result(&self, wire: &Value) -> Option<ToolResult> {
        ToolResult::deserialize(wire).ok()
    }

    /// Writes `value` as a `CallToolResult` of this revision, lowering what it
    /// cannot express as `policy` authorises.
    ///
    /// # Errors
    ///
    /// [`LowerError`] when a needed downgrade is not authorised, or a field
    /// does not fit the shape this revision types it as.
    pub fn lower_tool_result(
        &self,
        value: ToolResult,
        policy: DegradePolicy,
        report: &mut TranslationReport,
    ) -> Result<Value, LowerError> {
        let mut lowered = value;
        self.lower_tool_result_in_place(&mut lowered, policy, report)?;
        let written = serde_json::to_value(&lowered).map_err(|e| self.unwritable("result", &e))?;
        match written {
            Value::Object(_) => Ok(written),
            _ => Err(self.unwritable("result", &"not an object")),
        }
    }

    /// [`lower_tool_result`](Self::lower_tool_result), left typed and where
    /// it lies, so that it can be written straight to a frame: finished for
    /// this revision as [`finish_result`](Self::finish_result) finishes a
    /// `tools/call` result.
    ///
    /// # Errors
    ///
    /// As [`lower_tool_result`](Self::lower_tool_result); a refused value is
    /// left as it was.
    pub fn lower_tool_result_in_place(
        &self,
        lowered: &mut ToolResult,
        policy: DegradePolicy,
        report: &mut TranslationReport,
    ) -> Result<(), LowerError> {
        // Checked first, so that a refusal changes nothing: lowering never
        // touches the result's own `_meta`.
        self.check_result_meta(lowered.meta.as_ref())?;
        let made = lower_tool_result_in_place(lowered, &self.expressible(), self.version, policy)?;
        report.absorb(&made);
        match self.version.era() {
            // `tools/call` is not cacheable: only `resultType` is added.
            Era::Modern => {
                if lowered.result_type.is_none() && !lowered.extra.contains_key("resultType") {
                    lowered.result_type = Some(RESULT_TYPE_COMPLETE.to_owned());
                }
            }
            Era::Legacy => {
                lowered.result_type = None;
                for member in MODERN_RESULT_MEMBERS {
                    lowered.extra.shift_remove(member);
                }
                if let Some(meta) = &mut lowered.meta {
                    meta.shift_remove(SERVER_INFO);
                    if meta.is_empty() {
                        lowered.meta = None;
                    }
                }
            }
        }
        Ok(())
    }

    /// Makes a result object of `method` what this revision expects.
    ///
    /// A 2026-07-28 result gets `resultType: "complete"` when it has none, and
    /// a cacheable one gets the most conservative cache hints (`ttlMs: 0`,
    /// `cacheScope: "private"`) when it has none. A legacy result loses those
    /// members: legacy schemas would tolerate them, but a legacy client has no
    /// way to read them and a bridge forwarding them would look like it
    /// promised a cache policy it never checked. So does the server's name
    /// in `_meta` (a legacy client had it from `initialize`), and `_meta`
    /// with it when nothing else was there.
    pub fn finish_result(&self, method: Option<&str>, result: &mut Map<String, Value>) {
        match self.version.era() {
            Era::Modern => {
                result
                    .entry("resultType")
                    .or_insert_with(|| Value::from(RESULT_TYPE_COMPLETE));
                if method.is_some_and(|m| CACHEABLE_METHODS.contains(&m))
                    && result.get("resultType").and_then(Value::as_str)
                        == Some(RESULT_TYPE_COMPLETE)
                {
                    result.entry("ttlMs").or_insert_with(|| Value::from(0));
                    result
                        .entry("cacheScope")
                        .or_insert_with(|| Value::from("private"));
                }
            }
            Era::Legacy => {
                for member in MODERN_RESULT_MEMBERS {
                    result.remove(member);
                }
                if let Some(Value::Object(meta)) = result.get_mut("_meta") {
                    meta.shift_remove(SERVER_INFO);
                    if meta.is_empty() {
                        result.remove("_meta");
                    }
                }
            }
        }
    }

    /// Checks the `_meta` keys this revision gives a type to
    /// (`ResultMetaObject`: `serverInfo` is an `Implementation`, ...).
    fn check_result_meta(&self, meta: Option<&JsonObject>) -> Result<(), LowerError> {
        let Some(meta) = meta.filter(|_| self.version.era() == Era::Modern) else {
            return Ok(());
        };
        ResultMeta::deserialize(Value::Object(meta.clone()))
            .map(drop)
            .map_err(|e| self.unwritable("_meta", &e))
    }

    fn unwritable(&self, field: &str, why: &dyn core::fmt::Display) -> LowerError {
        LowerError::FieldNotRepresentable {
            field: field.to_owned(),
            version: self.version,
            reason: why.to_string(),
        }
    }
}

fn invalid(method: &str, source: serde_json::Error) -> ReadError {
    ReadError::InvalidParams {
        method: method.to_owned(),
        source,
    }
}
