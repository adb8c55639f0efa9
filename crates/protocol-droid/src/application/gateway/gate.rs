//! The check on every call: the tool must be in the session's set, and its
//! catalog record must still be what the session was given.

use super::catalog::{ToolCatalog, ToolRecord};
use super::session::SessionToolSet;
use crate::domain::catalog::{Provenance, SchemaDigest, ToolId};

/// Why a call was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GateError {
    /// The session was never given the tool (or it was revoked).
    #[error("{0} is not available in this session")]
    NotInSession(ToolId),
    /// The catalog no longer has the tool.
    #[error("{0} is no longer offered by its source")]
    Removed(ToolId),
    /// The tool's definition changed after the session was given it.
    #[error(
        "{id} changed after it was approved for this session (digest {pinned}, now {current}); it must be approved again"
    )]
    Drifted {
        /// The tool.
        id: ToolId,
        /// The digest the session was given.
        pinned: SchemaDigest,
        /// The digest the catalog has now.
        current: SchemaDigest,
    },
    /// The tool's provenance changed after the session was given it.
    #[error("{id} was {pinned} when given to this session and is {current} now")]
    ProvenanceChanged {
        /// The tool.
        id: ToolId,
        /// The provenance the session was given.
        pinned: Provenance,
        /// The provenance now.
        current: Provenance,
    },
    /// Nothing vouches for the tool.
    #[error("{0} is unverified and cannot be called until an operator approves it")]
    Unverified(ToolId),
}

/// Authorizes calls against a session's set and the current catalog.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExecutionGate;

impl ExecutionGate {
    /// The record to call `id` through, when `set` holds it and its pin
    /// still matches `catalog`.
    ///
    /// # Errors
    ///
    /// [`GateError`] naming what does not hold.
    pub fn authorize<'c>(
        set: &SessionToolSet,
        catalog: &'c ToolCatalog,
        id: &ToolId,
    ) -> Result<&'c ToolRecord, GateError> {
        let (digest, provenance) = match (set.core_pin(id), set.activation(id)) {
            (Some(pin), _) => (pin.digest, pin.provenance),
            (None, Some(activation)) => (activation.digest, activation.provenance),
            (None, None) => return Err(GateError::NotInSession(id.clone())),
        };
        let record = catalog
            .get(id)
            .ok_or_else(|| GateError::Removed(id.clone()))?;
        if record.digest != digest {
            return Err(GateError::Drifted {
                id: id.clone(),
                pinned: digest,
                current: record.digest,
            });
        }
        if record.provenance != provenance {
            return Err(GateError::ProvenanceChanged {
                id: id.clone(),
                pinned: provenance,
                current: record.provenance,
            });
        }
        if !record.provenance.is_verified() {
            return Err(GateError::Unverified(id.clone()));
        }
        Ok(record)
    }
}
