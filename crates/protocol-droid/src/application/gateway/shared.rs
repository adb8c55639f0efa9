//! What the instances of one gateway share through a store they all reach:
//! the port, and the text each record travels as.
//!
//! Behind a load balancer the same operator and the same clients meet every
//! instance, so what one instance decides of trust or of a principal's
//! tools must hold on all of them:
//!
//! - the pins taken on an upstream's first use: the first instance to list
//!   the upstream records them, and every other instance (and every
//!   restart) holds the upstream to them, rather than trusting what it
//!   shows by then;
//! - the operator's approvals, made on any instance's admin endpoint;
//! - the activations of each authenticated 2026-07-28 principal, whose
//!   requests each land on whichever instance the balancer picks.
//!
//! Each instance keeps a copy of all of it in memory, so no request waits
//! on the store: a change is written to the store and told to the others
//! through the [`Relay`](crate::application::server::Relay) before the
//! request that made it is answered, and every instance reads the whole
//! again now and then, for a message the relay lost.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::trust::Approval;
use crate::application::server::{BoxFuture, StoreError};
use crate::domain::catalog::{SchemaDigest, ToolId};

/// Where a gateway's instances keep what they share. The records are text
/// the gateway makes and reads; the store only keeps them.
pub trait GatewayStore: Send + Sync + core::fmt::Debug {
    /// The pins recorded at `upstream`'s first use, or `None` when no
    /// instance has used it yet.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be read.
    fn first_use<'a>(
        &'a self,
        upstream: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, StoreError>>;

    /// The upstreams whose first use is recorded.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be read.
    fn first_uses(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>>;

    /// Records `pins` as `upstream`'s first use unless one is recorded
    /// already, atomically; answers the record kept, this one or the one
    /// another instance made first.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be written.
    fn claim_first_use<'a>(
        &'a self,
        upstream: &'a str,
        pins: &'a str,
    ) -> BoxFuture<'a, Result<String, StoreError>>;

    /// Every approval recorded, by tool id, each with its version.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be read.
    fn approvals(&self) -> BoxFuture<'_, Result<Vec<Versioned>, StoreError>>;

    /// Records `approval` of `tool` at `version`, unless one of a version
    /// as new or newer is kept (answers whether it was kept): two
    /// approvals of one tool keep the newer, whichever lands last.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be written.
    fn record_approval<'a>(
        &'a self,
        tool: &'a str,
        approval: &'a str,
        version: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Every principal's activations kept, by principal, each with its
    /// version.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be read.
    fn activations(&self) -> BoxFuture<'_, Result<Vec<Versioned>, StoreError>>;

    /// The activations kept for `principal`, if any: the one record, for
    /// an instance that must not wait for the next reading of them all. By
    /// default read from all of them; a store that can read one alone
    /// should.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be read.
    fn activations_of<'a>(
        &'a self,
        principal: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        Box::pin(async move {
            Ok(self
                .activations()
                .await?
                .into_iter()
                .find(|record| record.name == principal)
                .map(|record| record.text))
        })
    }

    /// Keeps `activations` as `principal`'s at `version`, unless a record
    /// as new or newer is kept; answers whether it was kept.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be written.
    fn keep_activations<'a>(
        &'a self,
        principal: &'a str,
        activations: &'a str,
        version: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Keeps `activations` as `principal`'s at `version` only if the record
    /// kept is still at version `kept`: the same set, lasting longer, and
    /// never over a record written meanwhile. Answers whether it was kept.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be written.
    fn renew_activations<'a>(
        &'a self,
        principal: &'a str,
        activations: &'a str,
        kept: u64,
        version: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Forgets each principal's activations that are still at the version
    /// given (they lapsed); a record written anew since is kept.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be written.
    fn forget_activations<'a>(
        &'a self,
        lapsed: &'a [(String, u64)],
    ) -> BoxFuture<'a, Result<(), StoreError>>;
}

/// One shared record: its name (a tool, a principal), its text, and its
/// version, which only grows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Versioned {
    /// Whose record it is.
    pub name: String,
    /// The record.
    pub text: String,
    /// Its version: a newer record has a greater one.
    pub version: u64,
}

/// What a gateway shares with the other instances of it.
#[derive(Clone, Debug)]
pub struct SharedGateway {
    /// Where trust and activations are kept.
    pub store: std::sync::Arc<dyn GatewayStore>,
    /// What tells the other instances of a change as it is made.
    pub relay: std::sync::Arc<dyn crate::application::server::Relay>,
    /// This instance's name, so it passes over what it told itself.
    pub instance: String,
}

/// The largest record of one principal's activations, in bytes: what one
/// principal can make every instance keep.
pub(super) const MAX_ACTIVATIONS_RECORD: usize = 64 * 1024;

/// An upstream's first-use pins as kept: tool id to digest.
pub(super) fn encode_pins(pins: &BTreeMap<ToolId, SchemaDigest>) -> String {
    let map: BTreeMap<&str, String> = pins
        .iter()
        .map(|(id, digest)| (id.as_str(), digest.to_string()))
        .collect();
    serde_json::to_string(&map).unwrap_or_default()
}

/// Pins as [`encode_pins`] keeps them; `None` for text that is not.
pub(super) fn decode_pins(text: &str) -> Option<BTreeMap<ToolId, SchemaDigest>> {
    let map: BTreeMap<String, String> = serde_json::from_str(text).ok()?;
    map.into_iter()
        .map(|(id, hex)| Some((ToolId::new(id.as_str()), SchemaDigest::from_hex(&hex)?)))
        .collect()
}

#[derive(Serialize, Deserialize)]
struct ApprovalRecord {
    digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    over: Option<String>,
}

/// An approval as kept (its tool is the record's name).
pub(super) fn encode_approval(approval: &Approval) -> String {
    serde_json::to_string(&ApprovalRecord {
        digest: approval.digest.to_string(),
        over: approval.over.map(|d| d.to_string()),
    })
    .unwrap_or_default()
}

/// The approval of `tool` kept as `text`; `None` for text that is not one.
pub(super) fn decode_approval(tool: &str, text: &str) -> Option<Approval> {
    let record: ApprovalRecord = serde_json::from_str(text).ok()?;
    let over = match record.over {
        Some(hex) => Some(SchemaDigest::from_hex(&hex)?),
        None => None,
    };
    Some(Approval::new(
        ToolId::new(tool),
        SchemaDigest::from_hex(&record.digest)?,
        over,
    ))
}

/// A principal's activations as kept: each tool at the digest it was
/// activated at, and when the record lapses (Unix milliseconds).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ActivationsRecord {
    pub(super) tools: BTreeMap<ToolId, SchemaDigest>,
    pub(super) expires_at_ms: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ActivationsText {
    tools: BTreeMap<String, String>,
    expires_at_ms: u64,
}

impl ActivationsRecord {
    pub(super) fn encode(&self) -> String {
        serde_json::to_string(&ActivationsText {
            tools: self
                .tools
                .iter()
                .map(|(id, digest)| (id.as_str().to_owned(), digest.to_string()))
                .collect(),
            expires_at_ms: self.expires_at_ms,
        })
        .unwrap_or_default()
    }

    /// The record kept as `text`; `None` for text that is not one, or
    /// larger than [`MAX_ACTIVATIONS_RECORD`].
    pub(super) fn decode(text: &str) -> Option<Self> {
        if text.len() > MAX_ACTIVATIONS_RECORD {
            return None;
        }
        let kept: ActivationsText = serde_json::from_str(text).ok()?;
        let tools = kept
            .tools
            .into_iter()
            .map(|(id, hex)| Some((ToolId::new(id.as_str()), SchemaDigest::from_hex(&hex)?)))
            .collect::<Option<_>>()?;
        Some(Self {
            tools,
            expires_at_ms: kept.expires_at_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(n: u8) -> SchemaDigest {
        SchemaDigest::of_definition(&serde_json::Map::from_iter([(
            "name".to_owned(),
            serde_json::Value::from(n),
        )]))
    }

    #[test]
    fn each_record_reads_back_as_written() {
        let pins = BTreeMap::from([(ToolId::new("fs/read"), digest(1))]);
        assert_eq!(decode_pins(&encode_pins(&pins)), Some(pins));
        let approval = Approval::new(ToolId::new("fs/read"), digest(2), Some(digest(1)));
        assert_eq!(
            decode_approval("fs/read", &encode_approval(&approval)),
            Some(approval)
        );
        let record = ActivationsRecord {
            tools: BTreeMap::from([(ToolId::new("fs/write"), digest(3))]),
            expires_at_ms: 42,
        };
        assert_eq!(ActivationsRecord::decode(&record.encode()), Some(record));
    }

    #[test]
    fn what_is_not_a_record_is_refused() {
        assert_eq!(decode_pins(r#"{"fs/read": "not hex"}"#), None);
        assert_eq!(decode_approval("fs/read", "[]"), None);
        assert_eq!(ActivationsRecord::decode(r#"{"tools": {}}"#), None);
        let huge = format!(
            r#"{{"tools": {{}}, "expiresAtMs": 1, "pad": "{}"}}"#,
            "x".repeat(MAX_ACTIVATIONS_RECORD)
        );
        assert_eq!(ActivationsRecord::decode(&huge), None);
    }
}
