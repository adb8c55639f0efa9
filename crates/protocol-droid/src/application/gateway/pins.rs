//! The pins in force, and the operator's changes to them on a running
//! gateway: the configuration's pins replaced by a reload, and approvals.
//!
//! Three sources, one derivation ([`State::effective_pins`]): what was
//! trusted on first use (for upstreams trusted that way now), over it the
//! configuration's pins, and over those each approval made against the
//! configured pin still in force. Every change derives them again and
//! every tool's provenance with them, so no path can verify a tool the
//! derivation would not.

use std::sync::Arc;

use super::catalog::Pins;
use super::runtime::Gateway;
use super::state::{Disclosure, State, lock};
use super::trust::{Approval, Trust, TrustStore};
use crate::domain::SessionId;
use crate::domain::catalog::{SchemaDigest, ToolId};

impl State {
    /// The pins in force now.
    pub(super) fn effective_pins(&self) -> Pins {
        let mut pins = Pins::default();
        // First-use trust counts only for upstreams trusted that way now: an
        // upstream reloaded to `pinned`, or removed, keeps none of it.
        for (id, digest) in self.first_use.iter() {
            let upstream = id.as_str().split_once('/').map(|(upstream, _)| upstream);
            let on_first_use = upstream
                .and_then(|name| self.upstreams.get(name))
                .is_some_and(|u| u.options.trust == Trust::OnFirstUse);
            if on_first_use {
                pins.pin(id.clone(), *digest);
            }
        }
        for (id, digest) in self.configured.iter() {
            pins.pin(id.clone(), *digest);
        }
        for approval in self.approved.values() {
            if self.configured.get(&approval.id).copied() == approval.over {
                pins.pin(approval.id.clone(), approval.digest);
            }
        }
        pins
    }

    /// Derives the pins in force again and every tool's provenance from
    /// them; returns the sessions whose lists changed.
    pub(super) fn repin(&mut self, disclosure: Disclosure) -> Vec<SessionId> {
        self.pins = self.effective_pins();
        let pins = self.pins.clone();
        if Arc::make_mut(&mut self.catalog).repin(&pins).is_empty() {
            return Vec::new();
        }
        self.rebuild_sessions(disclosure).0
    }
}

/// What [`Gateway::approve`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Approved {
    /// Each tool approved, at the digest approved.
    pub approvals: Vec<Approval>,
    /// Why the approvals will not outlive this process, if they will not
    /// (no [`TrustStore`], or it failed); they hold until then all the same.
    pub not_kept: Option<String>,
    /// Why the other instances of a shared gateway do not hold the
    /// approvals, if they do not (the shared store failed); this instance
    /// holds them all the same, and keeps them as [`Self::not_kept`] says.
    pub not_shared: Option<String>,
}

/// Why an approval was refused; nothing was approved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApproveError {
    /// The id names no upstream tool of the catalog.
    #[error("{0} is no upstream tool of the catalog (see --print-digests)")]
    Unknown(ToolId),
    /// The tool is no longer what the operator saw: it changed between
    /// looking and approving.
    #[error(
        "{id} changed since it was seen (digest {seen}, now {now}); look again before approving"
    )]
    Changed {
        /// The tool.
        id: ToolId,
        /// The digest the operator approved.
        seen: SchemaDigest,
        /// Its digest now.
        now: SchemaDigest,
    },
}

impl Gateway {
    /// Keeps what is trusted on first use, and the operator's approvals, in
    /// `store` from now on, and takes what it already holds: the first use
    /// of the upstreams it names, and the approvals made before. Set it
    /// before adding upstreams.
    ///
    /// An approval recorded there holds while the configuration still pins
    /// the tool as it did when the approval was made; a configuration that
    /// pins it anew since is the newer word.
    pub fn set_trust_store(&self, store: Arc<dyn TrustStore>) {
        // Read before the lock every list and call waits on: the store may
        // read a file.
        let recorded = store.approvals();
        let mut state = lock(&self.inner.state);
        for approval in recorded {
            state.approved.insert(approval.id.clone(), approval);
        }
        state.trust_store = Some(store);
        drop(state);
        self.repin();
    }

    /// Replaces the configuration's pins (a reloaded configuration): every
    /// tool's provenance is derived again, and sessions whose lists change
    /// are told. What was trusted on first use stays; an approval stays
    /// while the configuration pins its tool as it did when it was made.
    /// Approvals the [`TrustStore`] holds are read again: another gateway
    /// keeping the same store (one started on the same configuration) may
    /// have recorded some since.
    pub fn set_pins(&self, pins: Pins) {
        // Read before the lock every list and call waits on: the store may
        // read a file.
        // Shared among instances, approvals travel through the shared store
        // (newer than this instance's own file may hold), not the file.
        let store = lock(&self.inner.state)
            .trust_store
            .clone()
            .filter(|_| self.inner.shared.get().is_none());
        // While an approval is being made here it is held before it is
        // written: the store's word on its tool is older then, and only
        // what this gateway does not hold is taken.
        // Held until the approvals are taken, so none starts meanwhile.
        let quiet = self.inner.approving.try_lock();
        let settled = quiet.is_ok();
        let recorded = store.map(|store| store.approvals()).unwrap_or_default();
        let mut state = lock(&self.inner.state);
        for approval in recorded {
            if settled {
                state.approved.insert(approval.id.clone(), approval);
            } else {
                state
                    .approved
                    .entry(approval.id.clone())
                    .or_insert(approval);
            }
        }
        state.configured = pins;
        drop(state);
        drop(quiet);
        self.repin();
    }

    /// Derives the pins in force again and tells the sessions whose lists
    /// changed.
    pub(super) fn repin(&self) {
        let touched = lock(&self.inner.state).repin(self.inner.disclosure);
        for session in touched {
            self.inner.server.tools_changed_for(session);
        }
    }

    /// Vouches for each tool in `tools` as it is now, on the running
    /// gateway: its current digest becomes its pin (kept in the
    /// [`TrustStore`], so a restart holds it), it is verified again, and
    /// sessions whose lists change are told. A drifted tool approved this
    /// way is callable again at once wherever it is core; an activation it
    /// lost must be made again.
    ///
    /// Each tool may name the digest the operator saw: the approval is then
    /// refused if the tool changed since, so what is approved is what was
    /// looked at.
    ///
    /// # Errors
    ///
    /// [`ApproveError`] naming the first tool that is unknown or changed;
    /// nothing is approved then.
    pub async fn approve(
        &self,
        tools: &[(ToolId, Option<SchemaDigest>)],
    ) -> Result<Approved, ApproveError> {
        let _one_at_a_time = self.inner.approving.lock().await;
        let (approvals, touched, store) = {
            let mut state = lock(&self.inner.state);
            let mut approvals = Vec::with_capacity(tools.len());
            for (id, seen) in tools {
                let record = state
                    .catalog
                    .get(id)
                    .filter(|r| r.is_upstream())
                    .ok_or_else(|| ApproveError::Unknown(id.clone()))?;
                if let Some(seen) = seen.filter(|seen| *seen != record.digest) {
                    return Err(ApproveError::Changed {
                        id: id.clone(),
                        seen,
                        now: record.digest,
                    });
                }
                let over = state.configured.get(id).copied();
                approvals.push(Approval::new(id.clone(), record.digest, over));
            }
            for approval in &approvals {
                tracing::warn!(tool = %approval.id, digest = %approval.digest, "approved by the operator");
                state.approved.insert(approval.id.clone(), approval.clone());
            }
            let touched = state.repin(self.inner.disclosure);
            (approvals, touched, state.trust_store.clone())
        };
        // Kept outside the lock every list and call waits on: the store
        // writes a file.
        // Shared first, so the instances agree before the operator is told.
        let not_shared = self.share_approvals(&approvals).await;
        let not_kept = match store {
            // The shared store keeps them, when it took them.
            None if self.inner.shared.get().is_some() && not_shared.is_none() => None,
            None => Some(
                "there is no state file; the approval lasts until the gateway stops".to_owned(),
            ),
            Some(store) => match store.record_approvals(&approvals) {
                Ok(()) => None,
                Err(error) => {
                    self.inner.server.observer().store_failed("trust_file");
                    tracing::error!(tools = approvals.len(), %error, "the approvals could not be kept; a restart would forget them");
                    Some(error.to_string())
                }
            },
        };
        for session in touched {
            self.inner.server.tools_changed_for(session);
        }
        Ok(Approved {
            approvals,
            not_kept,
            not_shared,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::application::gateway::{Disclosure, UpstreamOptions};
    use crate::application::server::Server;
    use crate::domain::catalog::Provenance;
    use crate::domain::ir::JsonObject;

    fn definition(description: &str) -> JsonObject {
        match json!({ "name": "write", "description": description, "inputSchema": { "type": "object" } })
        {
            serde_json::Value::Object(map) => map,
            _ => JsonObject::new(),
        }
    }

    /// A gateway with one upstream, `fs`, trusted as `trust`, offering
    /// `fs/write` as `description` says.
    fn gateway(trust: Trust, description: &str) -> Result<Gateway, Box<dyn std::error::Error>> {
        let gateway = Gateway::build(
            Server::builder("test", "0"),
            Disclosure::Default,
            Pins::default(),
        )?;
        let never: crate::application::bridge::Connector =
            Arc::new(|_| Box::pin(async { Err("not reached in these tests".into()) }));
        let options = UpstreamOptions {
            trust,
            ..UpstreamOptions::default()
        };
        let mut state = lock(&gateway.inner.state);
        state.upstreams.insert(
            "fs".to_owned(),
            crate::application::gateway::upstream::Upstream::new(never, options, "fs".to_owned()),
        );
        let pins = state.pins.clone();
        Arc::make_mut(&mut state.catalog).sync_upstream("fs", vec![definition(description)], &pins);
        drop(state);
        Ok(gateway)
    }

    fn provenance(gateway: &Gateway) -> Option<Provenance> {
        lock(&gateway.inner.state)
            .catalog
            .get(&ToolId::new("fs/write"))
            .map(|r| r.provenance)
    }

    fn digest(gateway: &Gateway) -> Option<SchemaDigest> {
        lock(&gateway.inner.state)
            .catalog
            .get(&ToolId::new("fs/write"))
            .map(|r| r.digest)
    }

    #[tokio::test]
    async fn an_approval_verifies_until_the_configuration_pins_the_tool_anew()
    -> Result<(), Box<dyn std::error::Error>> {
        let gateway = gateway(Trust::Pinned, "Writes files.")?;
        assert_eq!(provenance(&gateway), Some(Provenance::Unverified));
        let id = ToolId::new("fs/write");
        let approved = gateway.approve(&[(id.clone(), None)]).await?;
        assert_eq!(approved.approvals.len(), 1);
        assert!(approved.not_kept.is_some(), "no store, and it says so");
        assert_eq!(provenance(&gateway), Some(Provenance::Pinned));
        // The configuration pins something else: it is the newer word.
        let mut other = Pins::default();
        other.pin(id, SchemaDigest::of_definition(&definition("Another.")));
        gateway.set_pins(other);
        assert_eq!(provenance(&gateway), Some(Provenance::Unverified));
        Ok(())
    }

    #[tokio::test]
    async fn an_approval_of_what_was_not_seen_is_refused() -> Result<(), Box<dyn std::error::Error>>
    {
        let gateway = gateway(Trust::Pinned, "Writes files.")?;
        let id = ToolId::new("fs/write");
        let seen = SchemaDigest::of_definition(&definition("What the operator read."));
        let refused = gateway.approve(&[(id.clone(), Some(seen))]).await;
        assert!(
            matches!(&refused, Err(ApproveError::Changed { id: named, .. }) if *named == id),
            "{refused:?}"
        );
        assert_eq!(provenance(&gateway), Some(Provenance::Unverified));
        // What was seen, approved.
        gateway.approve(&[(id, digest(&gateway))]).await?;
        assert_eq!(provenance(&gateway), Some(Provenance::Pinned));
        let unknown = gateway.approve(&[(ToolId::new("fs/nothing"), None)]).await;
        assert!(
            matches!(unknown, Err(ApproveError::Unknown(_))),
            "{unknown:?}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn first_use_trust_counts_only_while_the_upstream_is_trusted_that_way()
    -> Result<(), Box<dyn std::error::Error>> {
        let gateway = gateway(Trust::OnFirstUse, "Writes files.")?;
        let id = ToolId::new("fs/write");
        {
            let mut state = lock(&gateway.inner.state);
            let seen = state
                .catalog
                .get(&id)
                .map(|r| r.digest)
                .ok_or("no record")?;
            state.first_use.pin(id, seen);
        }
        gateway.repin();
        assert_eq!(provenance(&gateway), Some(Provenance::Pinned));
        // Reloaded as `pinned`: what was trusted on first use no longer counts.
        if let Some(upstream) = lock(&gateway.inner.state).upstreams.get_mut("fs") {
            upstream.options.trust = Trust::Pinned;
        }
        gateway.repin();
        assert_eq!(provenance(&gateway), Some(Provenance::Unverified));
        Ok(())
    }
}
