//! One session's tools: a small core set plus exactly activated deferred
//! tools, each pinned to the digest and provenance it had when the session
//! got it.
//!
//! Every operation that can fail validates everything first and mutates
//! after, so a failure leaves the set exactly as it was. Grants name their
//! session, and nothing is ever carried from one session to another.

use std::collections::{BTreeMap, BTreeSet};

use super::catalog::{ToolCatalog, ToolRecord, ToolRole};
use crate::domain::SessionId;
use crate::domain::catalog::{CatalogGeneration, Provenance, SchemaDigest, ToolId};

/// The pin of a core tool: what its record was when the set was built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CorePin {
    /// The schema digest then.
    pub digest: SchemaDigest,
    /// The provenance then.
    pub provenance: Provenance,
}

/// One exact activation of a deferred tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActivatedTool {
    /// The tool.
    pub id: ToolId,
    /// The digest it was activated at.
    pub digest: SchemaDigest,
    /// The provenance it was activated with.
    pub provenance: Provenance,
    /// The catalog generation the grant was issued at.
    pub granted_at: CatalogGeneration,
}

/// Permission for one session to activate one tool as the catalog has it at
/// one generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionActivationGrant {
    session: SessionId,
    id: ToolId,
    generation: CatalogGeneration,
    digest: SchemaDigest,
}

impl SessionActivationGrant {
    /// A grant for `session` to activate `id` as `catalog` has it now, or
    /// `None` when the catalog has no such tool.
    #[must_use]
    pub fn issue(session: SessionId, id: &ToolId, catalog: &ToolCatalog) -> Option<Self> {
        catalog.get(id).map(|record| Self {
            session,
            id: id.clone(),
            generation: catalog.generation(),
            digest: record.digest,
        })
    }

    /// A grant with every field given: for replaying stored grants.
    #[must_use]
    pub const fn new(
        session: SessionId,
        id: ToolId,
        generation: CatalogGeneration,
        digest: SchemaDigest,
    ) -> Self {
        Self {
            session,
            id,
            generation,
            digest,
        }
    }

    /// The session it is for.
    #[must_use]
    pub const fn session(&self) -> SessionId {
        self.session
    }

    /// The tool it activates.
    #[must_use]
    pub const fn id(&self) -> &ToolId {
        &self.id
    }
}

/// Why an activation was not carried into a rebuilt set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// The catalog no longer has the tool.
    Removed,
    /// The tool's definition changed since it was activated.
    Drifted {
        /// The digest it was activated at.
        pinned: SchemaDigest,
        /// The digest it has now.
        current: SchemaDigest,
    },
    /// The tool's provenance changed, or it is no longer trusted.
    Untrusted {
        /// The provenance it was activated with.
        pinned: Provenance,
        /// The provenance it has now.
        current: Provenance,
    },
    /// The next set belongs to another session.
    OtherSession,
}

/// An activation a rebuild did not carry, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DroppedActivation {
    /// The activation as it was.
    pub activation: ActivatedTool,
    /// Why it was dropped.
    pub reason: DropReason,
}

/// Why a set could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionToolSetError {
    /// A configured core id is not in the catalog.
    #[error("core tool {0} is not in the catalog")]
    UnknownCoreTool(ToolId),
}

/// Why a revocation was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExactRevocationError {
    /// Core tools are not activations and cannot be revoked.
    #[error("{0} is a core tool; only activations can be revoked")]
    CoreTool(ToolId),
    /// The tool is not activated in this session.
    #[error("{0} is not activated in this session")]
    NotActivated(ToolId),
}

/// Why an activation was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ActivationError {
    /// The grant is for another session.
    #[error("the grant for {id} belongs to {grant}, not {set}")]
    ForeignSession {
        /// The tool.
        id: ToolId,
        /// The grant's session.
        grant: SessionId,
        /// This set's session.
        set: SessionId,
    },
    /// The catalog has no such tool.
    #[error("{0} is not in the catalog")]
    UnknownTool(ToolId),
    /// The grant was issued at an older catalog generation.
    #[error("the grant for {id} was issued at {grant}, the catalog is at {catalog}")]
    StaleGeneration {
        /// The tool.
        id: ToolId,
        /// The grant's generation.
        grant: CatalogGeneration,
        /// The catalog's.
        catalog: CatalogGeneration,
    },
    /// The tool's definition is not the one granted.
    #[error("{id} was granted at digest {granted}, the catalog has {current}")]
    DigestMismatch {
        /// The tool.
        id: ToolId,
        /// The granted digest.
        granted: SchemaDigest,
        /// The current one.
        current: SchemaDigest,
    },
    /// The set was built against an older catalog and must be rebuilt first.
    #[error("this set was built at {set}, the catalog is at {catalog}: rebuild it first")]
    StaleSet {
        /// The set's generation.
        set: CatalogGeneration,
        /// The catalog's.
        catalog: CatalogGeneration,
    },
    /// The tool is already activated.
    #[error("{0} is already activated")]
    AlreadyActivated(ToolId),
    /// The tool is in the core set.
    #[error("{0} is a core tool")]
    CoreTool(ToolId),
    /// Nothing vouches for the tool: it must be approved first.
    #[error("{0} is unverified: an operator must approve it first")]
    Untrusted(ToolId),
}

/// Why a bulk activation applied nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BulkActivationError {
    /// The batch names one tool twice.
    #[error("{0} appears twice in the batch")]
    DuplicateInBatch(ToolId),
    /// One grant failed; none was applied.
    #[error("grant {index} ({id}) failed: {error}")]
    Grant {
        /// Its position in the batch.
        index: usize,
        /// Its tool.
        id: ToolId,
        /// Why.
        error: ActivationError,
    },
}

/// The core set plus exact activations of one session, pinned to the
/// catalog generation it was built against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionToolSet {
    session: SessionId,
    generation: CatalogGeneration,
    core: BTreeMap<ToolId, CorePin>,
    activated: BTreeMap<ToolId, ActivatedTool>,
    schema_generation: u64,
}

fn pin_of(record: &ToolRecord) -> CorePin {
    CorePin {
        digest: record.digest,
        provenance: record.provenance,
    }
}

impl SessionToolSet {
    /// A fresh set for `session` with the configured `core` ids pinned from
    /// `catalog`, and no activations.
    ///
    /// # Errors
    ///
    /// [`SessionToolSetError::UnknownCoreTool`] for a core id the catalog
    /// does not have.
    pub fn new(
        session: SessionId,
        core: impl IntoIterator<Item = ToolId>,
        catalog: &ToolCatalog,
    ) -> Result<Self, SessionToolSetError> {
        let mut pins = BTreeMap::new();
        for id in core {
            let record = catalog
                .get(&id)
                .ok_or_else(|| SessionToolSetError::UnknownCoreTool(id.clone()))?;
            pins.insert(id, pin_of(record));
        }
        Ok(Self::with_core(session, catalog, pins))
    }

    fn with_core(
        session: SessionId,
        catalog: &ToolCatalog,
        core: BTreeMap<ToolId, CorePin>,
    ) -> Self {
        Self {
            session,
            generation: catalog.generation(),
            core,
            activated: BTreeMap::new(),
            schema_generation: 0,
        }
    }

    /// The session this set belongs to.
    #[must_use]
    pub const fn session(&self) -> &SessionId {
        &self.session
    }

    /// The default set: every verified tool in the catalog is core,
    /// unverified ones are left out, nothing is activated.
    #[must_use]
    pub fn default_core_for_catalog(session: SessionId, catalog: &ToolCatalog) -> Self {
        let core = catalog
            .records()
            .filter(|r| r.provenance.is_verified())
            .map(|r| (r.id.clone(), pin_of(r)))
            .collect();
        Self::with_core(session, catalog, core)
    }

    /// The progressive set: only verified essential and discovery tools are
    /// core; everything else waits for an exact activation.
    #[must_use]
    pub fn progressive_core_for_catalog(session: SessionId, catalog: &ToolCatalog) -> Self {
        let core = catalog
            .records()
            .filter(|r| {
                r.provenance.is_verified()
                    && matches!(r.role, ToolRole::Essential | ToolRole::Discovery)
            })
            .map(|r| (r.id.clone(), pin_of(r)))
            .collect();
        Self::with_core(session, catalog, core)
    }

    /// This set rebuilt against a newer `catalog`: the core derived afresh,
    /// the activations that still match their pins carried, the rest
    /// dropped and reported.
    #[must_use]
    pub fn rebuilt_for_catalog(
        &self,
        catalog: &ToolCatalog,
        progressive: bool,
    ) -> (Self, Vec<DroppedActivation>) {
        let next = if progressive {
            Self::progressive_core_for_catalog(self.session, catalog)
        } else {
            Self::default_core_for_catalog(self.session, catalog)
        };
        self.carry_activations_into(next, catalog)
    }

    /// Carries this set's activations into `next`, a fresh core for the
    /// same session against `catalog`, with the checks of
    /// [`Self::rebuilt_for_catalog`]. Ids promoted to `next`'s core are not
    /// carried (nor reported: the session still has them). A `next` for
    /// another session inherits nothing, and every activation is reported.
    ///
    /// The carried set's schema generation continues this set's, advanced by
    /// one when anything was dropped, since the tools the session sees
    /// changed.
    #[must_use]
    pub fn carry_activations_into(
        &self,
        mut next: Self,
        catalog: &ToolCatalog,
    ) -> (Self, Vec<DroppedActivation>) {
        let mut dropped = Vec::new();
        if next.session != self.session {
            dropped.extend(self.activated.values().map(|a| DroppedActivation {
                activation: a.clone(),
                reason: DropReason::OtherSession,
            }));
            return (next, dropped);
        }
        for activation in self.activated.values() {
            if next.is_core(&activation.id) {
                continue;
            }
            let reason = match catalog.get(&activation.id) {
                None => Some(DropReason::Removed),
                Some(r) if r.digest != activation.digest => Some(DropReason::Drifted {
                    pinned: activation.digest,
                    current: r.digest,
                }),
                Some(r) if r.provenance != activation.provenance || !r.provenance.is_verified() => {
                    Some(DropReason::Untrusted {
                        pinned: activation.provenance,
                        current: r.provenance,
                    })
                }
                Some(_) => None,
            };
            match reason {
                Some(reason) => dropped.push(DroppedActivation {
                    activation: activation.clone(),
                    reason,
                }),
                None => {
                    next.activated.insert(
                        activation.id.clone(),
                        ActivatedTool {
                            granted_at: catalog.generation(),
                            ..activation.clone()
                        },
                    );
                }
            }
        }
        next.schema_generation = self.schema_generation + u64::from(!dropped.is_empty());
        (next, dropped)
    }

    /// Removes one exact activation; the schema generation advances by one.
    ///
    /// # Errors
    ///
    /// [`ExactRevocationError`] for a core tool or a tool not activated; the
    /// set is unchanged.
    pub fn revoke_exact(&mut self, id: &ToolId) -> Result<(), ExactRevocationError> {
        if self.is_core(id) {
            return Err(ExactRevocationError::CoreTool(id.clone()));
        }
        if self.activated.remove(id).is_none() {
            return Err(ExactRevocationError::NotActivated(id.clone()));
        }
        self.schema_generation += 1;
        Ok(())
    }

    /// The catalog generation this set was built against.
    #[must_use]
    pub const fn catalog_generation(&self) -> CatalogGeneration {
        self.generation
    }

    /// Whether the catalog has changed since this set was built.
    #[must_use]
    pub fn is_stale(&self, catalog: &ToolCatalog) -> bool {
        catalog.generation() != self.generation
    }

    /// The core ids, in id order.
    pub fn core_ids(&self) -> impl Iterator<Item = &ToolId> {
        self.core.keys()
    }

    /// Whether `id` is in the core set.
    #[must_use]
    pub fn is_core(&self, id: &ToolId) -> bool {
        self.core.contains_key(id)
    }

    /// The digest a core tool was pinned at.
    #[must_use]
    pub fn core_schema_digest(&self, id: &ToolId) -> Option<&SchemaDigest> {
        self.core.get(id).map(|pin| &pin.digest)
    }

    /// The full pin of a core tool.
    #[must_use]
    pub fn core_pin(&self, id: &ToolId) -> Option<&CorePin> {
        self.core.get(id)
    }

    /// The exact activations, in id order.
    pub fn activated(&self) -> impl Iterator<Item = &ActivatedTool> {
        self.activated.values()
    }

    /// The activation of `id`, if any.
    #[must_use]
    pub fn activation(&self, id: &ToolId) -> Option<&ActivatedTool> {
        self.activated.get(id)
    }

    /// How many nonempty activation batches (or revocations) changed this
    /// set's tools.
    #[must_use]
    pub const fn schema_generation(&self) -> u64 {
        self.schema_generation
    }

    /// Every tool the session may see: the core, then the activations.
    pub fn visible(&self) -> impl Iterator<Item = &ToolId> {
        self.core.keys().chain(self.activated.keys())
    }

    /// Checks one grant against this set and `catalog` without changing
    /// anything; the activation it would record.
    fn check(
        &self,
        grant: SessionActivationGrant,
        catalog: &ToolCatalog,
    ) -> Result<ActivatedTool, ActivationError> {
        let id = &grant.id;
        if grant.session != self.session {
            return Err(ActivationError::ForeignSession {
                id: id.clone(),
                grant: grant.session,
                set: self.session,
            });
        }
        if self.is_stale(catalog) {
            return Err(ActivationError::StaleSet {
                set: self.generation,
                catalog: catalog.generation(),
            });
        }
        let record = catalog
            .get(id)
            .ok_or_else(|| ActivationError::UnknownTool(id.clone()))?;
        if grant.generation != catalog.generation() {
            return Err(ActivationError::StaleGeneration {
                id: id.clone(),
                grant: grant.generation,
                catalog: catalog.generation(),
            });
        }
        if grant.digest != record.digest {
            return Err(ActivationError::DigestMismatch {
                id: id.clone(),
                granted: grant.digest,
                current: record.digest,
            });
        }
        if self.is_core(id) {
            return Err(ActivationError::CoreTool(id.clone()));
        }
        if self.activated.contains_key(id) {
            return Err(ActivationError::AlreadyActivated(id.clone()));
        }
        if !record.provenance.is_verified() {
            return Err(ActivationError::Untrusted(id.clone()));
        }
        Ok(ActivatedTool {
            digest: record.digest,
            provenance: record.provenance,
            granted_at: grant.generation,
            id: grant.id,
        })
    }

    /// Records one exact activation: a batch of one, so the schema
    /// generation advances by one.
    ///
    /// # Errors
    ///
    /// [`ActivationError`] for any mismatch; the set is unchanged.
    pub fn activate(
        &mut self,
        grant: SessionActivationGrant,
        catalog: &ToolCatalog,
    ) -> Result<(), ActivationError> {
        let activation = self.check(grant, catalog)?;
        self.activated.insert(activation.id.clone(), activation);
        self.schema_generation += 1;
        Ok(())
    }

    /// Records every grant or none: all are checked first, then applied in
    /// id order, and the schema generation advances by exactly one. An empty
    /// batch changes nothing. Returns how many were applied.
    ///
    /// # Errors
    ///
    /// [`BulkActivationError`] for a duplicate or the first failing grant;
    /// the set is unchanged.
    pub fn activate_many(
        &mut self,
        grants: Vec<SessionActivationGrant>,
        catalog: &ToolCatalog,
    ) -> Result<usize, BulkActivationError> {
        let mut seen = BTreeSet::new();
        let mut checked = BTreeMap::new();
        for (index, grant) in grants.into_iter().enumerate() {
            let id = grant.id.clone();
            if !seen.insert(id.clone()) {
                return Err(BulkActivationError::DuplicateInBatch(id));
            }
            let activation = self
                .check(grant, catalog)
                .map_err(|error| BulkActivationError::Grant { index, id, error })?;
            checked.insert(activation.id.clone(), activation);
        }
        let applied = checked.len();
        if applied == 0 {
            return Ok(0);
        }
        self.activated.extend(checked);
        self.schema_generation += 1;
        Ok(applied)
    }
}
