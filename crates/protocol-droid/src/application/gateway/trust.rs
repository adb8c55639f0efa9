//! How upstream tools earn trust, and where the trust granted while the
//! gateway runs is kept.
//!
//! An operator's pins come from configuration. Two more kinds of trust are
//! granted at run time: on first use (an upstream's tools as it first shows
//! them) and by approval (an operator vouching for a tool as it is now,
//! without a restart). A [`TrustStore`] keeps both beyond the process, so a
//! restart neither forgets an approval nor trusts anew what was trusted on
//! first use.

use std::collections::BTreeMap;
use std::fmt;

use crate::domain::catalog::{SchemaDigest, ToolId};

/// How an upstream's tools earn trust.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Trust {
    /// Only digests pinned in configuration are verified.
    #[default]
    Pinned,
    /// The digests seen when the upstream is first listed are pinned (and
    /// kept by the [`TrustStore`], when there is one, so a restart does not
    /// trust anew); a later change is drift like any other.
    OnFirstUse,
}

/// An operator's approval of a tool as it was when approved, made on a
/// running gateway.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Approval {
    /// The tool.
    pub id: ToolId,
    /// Its digest when approved.
    pub digest: SchemaDigest,
    /// The configuration's pin it superseded, if the configuration pinned
    /// the tool. Once the configuration pins something else, the
    /// configuration is the newer word and the approval lapses.
    pub over: Option<SchemaDigest>,
}

impl Approval {
    /// Approves `id` at `digest`, superseding the configured pin `over`.
    #[must_use]
    pub const fn new(id: ToolId, digest: SchemaDigest, over: Option<SchemaDigest>) -> Self {
        Self { id, digest, over }
    }
}

/// Why trust could not be kept.
pub type TrustStoreError = Box<dyn std::error::Error + Send + Sync>;

/// Keeps what was trusted on first use beyond this process, so a restart
/// does not trust whatever the upstreams show by then.
///
/// An upstream the store knows was used before: its pins are the ones
/// recorded, and tools it offers beyond them are unverified like any drift.
pub trait TrustStore: Send + Sync + fmt::Debug {
    /// The pins recorded at `upstream`'s first use, if it had one.
    fn first_use(&self, upstream: &str) -> Option<BTreeMap<ToolId, SchemaDigest>>;

    /// Records the pins of `upstream`'s first use. Answers the pins that
    /// stand instead when another writer of the same store (another
    /// gateway keeping the same file) recorded the upstream's first use
    /// before: the gateway then holds the upstream to those, and what it
    /// saw that differs is drift.
    ///
    /// # Errors
    ///
    /// When they cannot be kept; the gateway still holds them in memory and
    /// says so in its log.
    fn record_first_use(
        &self,
        upstream: &str,
        pins: &BTreeMap<ToolId, SchemaDigest>,
    ) -> Result<Option<BTreeMap<ToolId, SchemaDigest>>, TrustStoreError>;

    /// The approvals recorded, oldest first.
    fn approvals(&self) -> Vec<Approval>;

    /// Records `approval`, replacing any earlier one of the same tool.
    ///
    /// # Errors
    ///
    /// When it cannot be kept; the approval holds in memory all the same.
    fn record_approval(&self, approval: &Approval) -> Result<(), TrustStoreError>;

    /// Records `approvals` together, as [`Self::record_approval`] records
    /// each; a store that writes a file writes it once.
    ///
    /// # Errors
    ///
    /// When they cannot be kept; they hold in memory all the same.
    fn record_approvals(&self, approvals: &[Approval]) -> Result<(), TrustStoreError> {
        approvals.iter().try_for_each(|a| self.record_approval(a))
    }
}
