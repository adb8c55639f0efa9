//! How a gateway keeps in step with the other instances sharing its store
//! ([`Gateway::share`]): first-use pins claimed once for all of them,
//! approvals and the activations of principals and legacy sessions
//! written, told and taken, and all of it read again now and then. The port and the records are `shared`'s.
//!
//! Nothing here is on a request's way unless the request changes what is
//! shared: lists and calls read the copy in memory.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::principals::MAX_PRINCIPALS;
use super::runtime::Gateway;
use super::session::SessionActivationGrant;
use super::shared::{
    ActivationsRecord, MAX_ACTIVATIONS_RECORD, SharedGateway, decode_approval, decode_pins,
    encode_approval, encode_pins,
};
use super::state::{State, fresh_set, lock};
use super::trust::{Approval, Trust};
use crate::application::bridge::ParkedCalls;
use crate::application::server::tasks::now_ms;
use crate::application::server::{AuthContext, PeerSession, StoreError};
use crate::domain::SessionId;
use crate::domain::catalog::{SchemaDigest, ToolId};

/// The relay's name for what every instance of the gateway hears. Holding a
/// `*`, it is no instance's name.
const EVERY_GATEWAY: &str = "*gateway";

/// How often every instance reads the whole shared record again, for a
/// change whose message the relay lost.
const RESYNC: Duration = Duration::from_secs(10);

/// The longest a call refused a tool waits for the caller's shared
/// activations to be read again (see [`Gateway::catch_up`]).
const CATCH_UP_WAIT: Duration = Duration::from_millis(500);

impl Gateway {
    /// Shares this gateway's trust (first-use pins and approvals) and its
    /// principals' activations with the other instances that reach
    /// `shared`'s store, from now on; a call an upstream holds open for its
    /// client's input (parked) is resumed by the retry through any of them. Call it before adding upstreams, so
    /// that an upstream another instance used first is held to what it
    /// showed then. Needs a Tokio runtime.
    ///
    /// What the store holds is taken before this returns: the approvals
    /// recorded, and the activations of every principal and legacy session.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be reached; the gateway is then
    /// left as it was.
    pub async fn share(&self, shared: SharedGateway) -> Result<(), StoreError> {
        if self.inner.shared.get().is_some() {
            return Ok(());
        }
        let heard = shared.relay.listen(EVERY_GATEWAY).await?;
        self.resync(&shared).await?;
        let parked = ParkedCalls::listen(Arc::clone(&shared.relay), &shared.instance).await?;
        if self.inner.shared.set(shared.clone()).is_err() {
            return Ok(());
        }
        let _set = self.inner.parked.set(parked);
        spawn_listener(self.downgrade(), shared.instance.clone(), heard);
        spawn_resync(self.downgrade(), shared);
        Ok(())
    }

    /// The pins another instance (or this one, before a restart) recorded
    /// at `upstream`'s first use, when the gateway is shared; a store out
    /// of reach is logged and answers none.
    pub(super) async fn shared_first_use(
        &self,
        upstream: &str,
    ) -> Option<BTreeMap<ToolId, SchemaDigest>> {
        let shared = self.inner.shared.get()?;
        match shared.store.first_use(upstream).await {
            Ok(text) => text.as_deref().and_then(decode_pins),
            Err(error) => {
                tracing::error!(%upstream, %error, "the first use of an upstream could not be read from the shared store; trusting it on first use here");
                None
            }
        }
    }

    /// Claims `trusted` as `upstream`'s first use for every instance; when
    /// another instance claimed first, its pins replace these, and what
    /// this instance saw that differs is drift like any other. A claim the
    /// store did not take is tried again at every reading of the store.
    /// Answers the pins in force for the upstream's first use.
    pub(super) async fn claim_first_use(
        &self,
        upstream: &str,
        trusted: &BTreeMap<ToolId, SchemaDigest>,
    ) -> BTreeMap<ToolId, SchemaDigest> {
        let Some(shared) = self.inner.shared.get() else {
            return trusted.clone();
        };
        match shared
            .store
            .claim_first_use(upstream, &encode_pins(trusted))
            .await
        {
            Ok(kept) => {
                lock(&self.inner.state).unclaimed.remove(upstream);
                self.adopt_first_use(upstream, &kept, trusted)
            }
            Err(error) => {
                self.inner.server.observer().store_failed("gateway");
                tracing::error!(%upstream, %error, "the first use of an upstream could not be shared; trusting what this instance saw until the store takes it");
                lock(&self.inner.state)
                    .unclaimed
                    .insert(upstream.to_owned(), trusted.clone());
                trusted.clone()
            }
        }
    }

    /// Holds `upstream` to `kept`, the first use the store kept, when it is
    /// not `trusted`, what this instance took; answers the pins in force.
    fn adopt_first_use(
        &self,
        upstream: &str,
        kept: &str,
        trusted: &BTreeMap<ToolId, SchemaDigest>,
    ) -> BTreeMap<ToolId, SchemaDigest> {
        let Some(kept) = decode_pins(kept) else {
            tracing::error!(%upstream, "the shared store holds a first use that is not one; keeping this instance's");
            return trusted.clone();
        };
        if &kept == trusted {
            return kept;
        }
        tracing::warn!(%upstream, "another instance used this upstream first; holding it to what it showed then");
        self.hold_to_first_use(upstream, kept)
    }

    /// Holds `upstream` to `kept`, the first use another instance or
    /// gateway recorded, in place of this one's: what this one saw that
    /// differs is drift. Answers the pins in force.
    pub(super) fn hold_to_first_use(
        &self,
        upstream: &str,
        kept: BTreeMap<ToolId, SchemaDigest>,
    ) -> BTreeMap<ToolId, SchemaDigest> {
        let touched = {
            let mut state = lock(&self.inner.state);
            let prefix = format!("{upstream}/");
            let ours: Vec<ToolId> = state
                .first_use
                .iter()
                .map(|(id, _)| id.clone())
                .filter(|id| id.as_str().starts_with(&prefix))
                .collect();
            for id in ours {
                state.first_use.unpin(&id);
            }
            for (id, digest) in &kept {
                state.first_use.pin(id.clone(), *digest);
            }
            state.repin(self.inner.disclosure)
        };
        for session in touched {
            self.inner.server.tools_changed_for(session);
        }
        kept
    }

    /// Writes `approvals` to the shared store and tells the other
    /// instances; the reason when they could not be shared.
    pub(super) async fn share_approvals(&self, approvals: &[Approval]) -> Option<String> {
        let shared = self.inner.shared.get()?;
        // Each a version newer than any this instance knows of its tool.
        let versioned: Vec<(&Approval, u64)> = {
            let mut state = lock(&self.inner.state);
            approvals
                .iter()
                .map(|approval| {
                    let before = state
                        .approval_versions
                        .get(&approval.id)
                        .copied()
                        .unwrap_or(0);
                    let version = now_ms().max(before.saturating_add(1));
                    state.approval_versions.insert(approval.id.clone(), version);
                    (approval, version)
                })
                .collect()
        };
        let mut told = serde_json::Map::new();
        for (approval, version) in versioned {
            let text = encode_approval(approval);
            match shared
                .store
                .record_approval(approval.id.as_str(), &text, version)
                .await
            {
                Ok(true) => {}
                // A newer approval of the tool is kept (another instance's,
                // made meanwhile): it is taken at the next reading.
                Ok(false) => continue,
                Err(error) => {
                    self.inner.server.observer().store_failed("gateway");
                    tracing::error!(tool = %approval.id, %error, "an approval could not be shared; the other instances do not hold it");
                    return Some(error.to_string());
                }
            }
            told.insert(
                approval.id.as_str().to_owned(),
                json!({ "text": text, "version": version }),
            );
        }
        let message = json!({ "from": shared.instance, "approvals": told }).to_string();
        if let Err(error) = shared.relay.send(EVERY_GATEWAY, &message).await {
            // Recorded: the others read it at their next resync.
            tracing::warn!(%error, "an approval could not be told to the other instances; they take it within {} s", RESYNC.as_secs());
        }
        None
    }

    /// Writes the activations `session` keeps, when it stands for a
    /// principal or is a held legacy session and the gateway is shared,
    /// and tells the other instances.
    /// A failure is logged: the activations hold here all the same.
    pub(super) async fn share_activations(&self, session: SessionId) {
        let Some(shared) = self.inner.shared.get() else {
            return;
        };
        let (principal, record) = {
            let mut state = lock(&self.inner.state);
            let Some(principal) = state.principals.key_of(session).map(str::to_owned) else {
                return;
            };
            let tools = state.activations_of(session).into_iter().collect();
            // Later than any record before it, so it is never taken for
            // an older one.
            let expires_at_ms = now_ms()
                .saturating_add(duration_ms(state.principals.idle()))
                .max(
                    state
                        .principals
                        .shared_version(&principal)
                        .saturating_add(1),
                );
            state
                .principals
                .set_shared_version(&principal, expires_at_ms);
            let record = ActivationsRecord {
                tools,
                expires_at_ms,
            };
            state.cache_record(&principal, record.clone());
            (principal, record)
        };
        let text = record.encode();
        if text.len() > MAX_ACTIVATIONS_RECORD {
            tracing::warn!(
                activated = record.tools.len(),
                "a principal's or session's activations are too many to share ({} bytes, at most {MAX_ACTIVATIONS_RECORD}); they hold on this instance only",
                text.len()
            );
            return;
        }
        match shared
            .store
            .keep_activations(&principal, &text, record.expires_at_ms)
            .await
        {
            Ok(true) => {}
            // A newer record is kept: taken at the next reading.
            Ok(false) => return,
            Err(error) => {
                self.inner.server.observer().store_failed("gateway");
                tracing::error!(%error, "a principal's or session's activations could not be shared; the other instances do not hold them");
                return;
            }
        }
        let message =
            json!({ "from": shared.instance, "principal": principal, "activations": text })
                .to_string();
        if let Err(error) = shared.relay.send(EVERY_GATEWAY, &message).await {
            tracing::warn!(%error, "a principal's or session's activations could not be told to the other instances; they take them within {} s", RESYNC.as_secs());
        }
    }

    /// Activations shared for tools that were not offered here until an
    /// upstream was listed just now: taken again, from what was last read,
    /// by the principals this instance serves. Before the listing's tools
    /// are registered, so no request finds them without their activations.
    pub(super) fn retake_activations(&self) {
        if self.inner.shared.get().is_none() {
            return;
        }
        let touched = {
            let mut state = lock(&self.inner.state);
            let disclosure = self.inner.disclosure;
            let known: Vec<(SessionId, ActivationsRecord)> = state
                .shared_activations
                .iter()
                .filter_map(|(principal, record)| {
                    Some((state.principals.get(principal)?, record.clone()))
                })
                .collect();
            let mut touched = Vec::new();
            for (session, record) in known {
                if state.activations_of(session).len() < record.tools.len() {
                    state.apply_record(session, &record, disclosure);
                    touched.push(session);
                }
            }
            touched
        };
        for session in touched {
            self.inner.server.tools_changed_for(session);
        }
    }

    /// Reads everything shared and takes it: the approvals, and every
    /// principal's and legacy session's activations; forgets the
    /// activations that lapsed, and renews those of the legacy sessions held
    /// here, and of the principals used here lately, before they would; and
    /// tries again each first use the store did not take.
    async fn resync(&self, shared: &SharedGateway) -> Result<(), StoreError> {
        let approvals = shared.store.approvals().await?;
        let activations = shared.store.activations().await?;
        self.take_approvals(approvals.iter().filter_map(|record| {
            Some((decode_approval(&record.name, &record.text)?, record.version))
        }));
        let now = now_ms();
        let mut lapsed = Vec::new();
        for record in activations {
            match ActivationsRecord::decode(&record.text) {
                Some(taken) if taken.expires_at_ms > now => {
                    self.take_activations(&record.name, taken);
                }
                Some(_) => lapsed.push((record.name, record.version)),
                None => {
                    tracing::warn!(target: "droid", "the shared store holds activations that are not a record; passed over");
                }
            }
        }
        if !lapsed.is_empty() {
            shared.store.forget_activations(&lapsed).await?;
        }
        // A record lasts a principal's idle time from its writing, but
        // activations are kept as long as they are used, however long ago
        // they changed: a legacy session's while the session lives, a
        // principal's while it calls. So an instance holding such a session,
        // or where the principal was used in the last half of that time,
        // renews the record it last read before it would lapse. The same
        // set, as kept: not this instance's own, which leaves out what its
        // upstreams do not offer; and only if nobody wrote the record anew
        // meanwhile. A principal no instance has seen for half the time is
        // left to lapse.
        let (lapsing, lifetime) = {
            let state = lock(&self.inner.state);
            let idle = state.principals.idle();
            let lifetime = duration_ms(idle);
            let used_since = std::time::Instant::now().checked_sub(idle / 2);
            let lapsing: Vec<(String, ActivationsRecord)> = state
                .principals
                .lapsing(now.saturating_add(lifetime / 2), used_since)
                .into_iter()
                .filter_map(|session| {
                    let key = state.principals.key_of(session)?;
                    let record = state.shared_activations.get(key)?;
                    Some((key.to_owned(), record.clone()))
                })
                .collect();
            (lapsing, lifetime)
        };
        for (key, record) in lapsing {
            let renewed = ActivationsRecord {
                expires_at_ms: now
                    .saturating_add(lifetime)
                    .max(record.expires_at_ms.saturating_add(1)),
                tools: record.tools,
            };
            let kept = shared
                .store
                .renew_activations(
                    &key,
                    &renewed.encode(),
                    record.expires_at_ms,
                    renewed.expires_at_ms,
                )
                .await?;
            // Written anew meanwhile: taken at the next reading. Nor is a
            // set this instance wrote while the renewal was under way,
            // which is newer, replaced here by the renewed older one.
            if kept {
                let mut state = lock(&self.inner.state);
                if state.principals.shared_version(&key) < renewed.expires_at_ms {
                    state
                        .principals
                        .set_shared_version(&key, renewed.expires_at_ms);
                    state.cache_record(&key, renewed);
                }
            }
        }
        let unclaimed: Vec<(String, BTreeMap<ToolId, SchemaDigest>)> = lock(&self.inner.state)
            .unclaimed
            .iter()
            .map(|(upstream, pins)| (upstream.clone(), pins.clone()))
            .collect();
        for (upstream, trusted) in unclaimed {
            let _in_force = self.claim_first_use(&upstream, &trusted).await;
        }
        self.restore_first_uses(shared).await
    }

    /// Writes back each first use this instance holds that the store lost
    /// (a Redis emptied, or another in its place), as the key ring is
    /// written back: otherwise an instance starting now would trust anew
    /// what every running one holds its upstream to. A store that holds
    /// another first use for the upstream by then (another instance wrote
    /// what it saw once the store was empty) is left as it is, and said:
    /// this instance keeps its own, which it cannot tell is not the first.
    async fn restore_first_uses(&self, shared: &SharedGateway) -> Result<(), StoreError> {
        // No first use held here: nothing to look for, and no round trip
        // at every reading of the store.
        if lock(&self.inner.state).first_used.is_empty() {
            return Ok(());
        }
        let recorded: BTreeSet<String> = shared.store.first_uses().await?.into_iter().collect();
        let lost: Vec<(String, BTreeMap<ToolId, SchemaDigest>)> = {
            let state = lock(&self.inner.state);
            state
                .first_used
                .iter()
                .filter(|name| !recorded.contains(*name) && !state.unclaimed.contains_key(*name))
                .filter(|name| {
                    state
                        .upstreams
                        .get(*name)
                        .is_some_and(|u| u.options.trust == Trust::OnFirstUse)
                })
                .map(|name| {
                    let prefix = format!("{name}/");
                    let pins = state
                        .first_use
                        .iter()
                        .filter(|(id, _)| id.as_str().starts_with(&prefix))
                        .map(|(id, digest)| (id.clone(), *digest))
                        .collect();
                    (name.clone(), pins)
                })
                .collect()
        };
        for (upstream, pins) in lost {
            let kept = shared
                .store
                .claim_first_use(&upstream, &encode_pins(&pins))
                .await?;
            if decode_pins(&kept).as_ref() == Some(&pins) {
                tracing::warn!(%upstream, "the shared store held no first use of this upstream (emptied, or another store); written as this instance holds it");
            } else {
                tracing::error!(%upstream, "the shared store lost the first use of this upstream and holds another now; this instance keeps its own, and instances started since hold the upstream to the other");
            }
        }
        Ok(())
    }

    /// Takes approvals made on other instances, each at its version, where
    /// newer than what this instance holds; sessions whose lists change
    /// are told.
    fn take_approvals(&self, approvals: impl IntoIterator<Item = (Approval, u64)>) {
        let touched = {
            let mut state = lock(&self.inner.state);
            let mut changed = false;
            for (approval, version) in approvals {
                let held = state.approval_versions.get(&approval.id).copied();
                if held.is_some_and(|held| held >= version) {
                    continue;
                }
                state.approval_versions.insert(approval.id.clone(), version);
                if state.approved.get(&approval.id) != Some(&approval) {
                    state.approved.insert(approval.id.clone(), approval);
                    changed = true;
                }
            }
            if !changed {
                return;
            }
            state.repin(self.inner.disclosure)
        };
        for session in touched {
            self.inner.server.tools_changed_for(session);
        }
    }

    /// Reads the shared record of the activations of `caller` on `peer`
    /// now, when activations are shared and the caller keeps some (a
    /// principal, or a legacy session shared among instances): whether a
    /// record newer than the one held here was taken. For a call about to
    /// be refused a tool, and before the caller's set is changed and
    /// written whole: the caller may have changed it through another
    /// instance a moment ago, and this one not been told yet. The read is
    /// bounded by [`CATCH_UP_WAIT`], so a store out of reach delays a
    /// refusal by no more.
    pub(super) async fn catch_up(&self, peer: &PeerSession, caller: &AuthContext) -> bool {
        let Some(shared) = self.inner.shared.get() else {
            return false;
        };
        let (key, held) = {
            let mut state = lock(&self.inner.state);
            let Some(session) = state.keeping_session(peer, caller, self.inner.disclosure) else {
                return false;
            };
            let Some(key) = state.principals.key_of(session) else {
                return false;
            };
            (key.to_owned(), state.principals.shared_version(key))
        };
        let read = tokio::time::timeout(CATCH_UP_WAIT, shared.store.activations_of(&key)).await;
        let text = match read {
            Ok(Ok(Some(text))) => text,
            Ok(Ok(None)) => return false,
            Ok(Err(error)) => {
                self.inner.server.observer().store_failed("gateway");
                tracing::warn!(target: "droid", %error, "a caller's shared activations could not be read");
                return false;
            }
            Err(_) => return false,
        };
        match ActivationsRecord::decode(&text) {
            Some(record) if record.expires_at_ms > held && record.expires_at_ms > now_ms() => {
                self.take_activations(&key, record);
                true
            }
            _ => false,
        }
    }

    /// Takes `principal`'s activations as another instance kept them, if
    /// newer than what this instance holds: kept for when the principal
    /// next comes, and, for a principal this instance serves now, its set
    /// made the core plus each of them the catalog here still offers,
    /// verified, at the digest it was activated at.
    fn take_activations(&self, principal: &str, record: ActivationsRecord) {
        let changed = {
            let mut state = lock(&self.inner.state);
            let newest = state
                .shared_activations
                .get(principal)
                .is_none_or(|held| held.expires_at_ms < record.expires_at_ms);
            if !newest {
                return;
            }
            // Not a use: a principal this instance does not serve is made
            // only when it comes, from the record kept.
            let serving = state
                .principals
                .get(principal)
                .filter(|_| record.expires_at_ms > state.principals.shared_version(principal));
            let mut changed = None;
            if let Some(session) = serving {
                state
                    .principals
                    .set_shared_version(principal, record.expires_at_ms);
                let wanted: Vec<(ToolId, SchemaDigest)> = record
                    .tools
                    .iter()
                    .map(|(id, digest)| (id.clone(), *digest))
                    .collect();
                if state.activations_of(session) != wanted {
                    state.apply_record(session, &record, self.inner.disclosure);
                    changed = Some(session);
                }
            }
            state.cache_record(principal, record);
            changed
        };
        if let Some(session) = changed {
            self.inner.server.tools_changed_for(session);
        }
    }
}

impl State {
    /// Keeps `record` as the newest known of `principal`'s activations,
    /// the fewest kept being [`MAX_PRINCIPALS`]: the one lapsing soonest
    /// makes room.
    pub(super) fn cache_record(&mut self, principal: &str, record: ActivationsRecord) {
        if !self.shared_activations.contains_key(principal)
            && self.shared_activations.len() >= MAX_PRINCIPALS
        {
            let soonest = self
                .shared_activations
                .iter()
                .min_by_key(|(_, r)| r.expires_at_ms)
                .map(|(p, _)| p.clone());
            if let Some(soonest) = soonest {
                self.shared_activations.remove(&soonest);
            }
        }
        self.shared_activations.insert(principal.to_owned(), record);
    }

    /// Makes `session`'s set the core plus each activation of `record` the
    /// catalog offers, verified, at the digest it was activated at.
    pub(super) fn apply_record(
        &mut self,
        session: SessionId,
        record: &ActivationsRecord,
        disclosure: super::state::Disclosure,
    ) {
        let mut set = fresh_set(session, &self.catalog, disclosure);
        let catalog = Arc::clone(&self.catalog);
        for (id, digest) in &record.tools {
            let offered = catalog
                .get(id)
                .is_some_and(|r| r.provenance.is_verified() && r.digest == *digest);
            let grant = SessionActivationGrant::issue(session, id, &catalog).filter(|_| offered);
            if let Some(grant) = grant {
                let _activated = set.activate(grant, &catalog);
            }
        }
        self.sessions.insert(session, set);
    }

    /// Each tool `session` activated, in id order, at its digest then.
    pub(super) fn activations_of(&self, session: SessionId) -> Vec<(ToolId, SchemaDigest)> {
        self.sessions
            .get(&session)
            .map(|set| set.activated().map(|a| (a.id.clone(), a.digest)).collect())
            .unwrap_or_default()
    }
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Takes what the other instances tell, until the gateway is dropped.
fn spawn_listener(
    gateway: super::runtime::WeakGateway,
    me: String,
    mut heard: tokio::sync::mpsc::Receiver<String>,
) {
    tokio::spawn(async move {
        loop {
            // Woken now and then without a message, so a dropped gateway is
            // noticed on a quiet channel too; dropping `heard` then ends the
            // subscription.
            let text = tokio::select! {
                text = heard.recv() => text,
                () = tokio::time::sleep(Duration::from_secs(5)) => {
                    if gateway.upgrade().is_none() {
                        return;
                    }
                    continue;
                }
            };
            let (Some(text), Some(gateway)) = (text, gateway.upgrade()) else {
                return;
            };
            let Ok(message) = serde_json::from_str::<Value>(&text) else {
                continue;
            };
            if message.get("from").and_then(Value::as_str) == Some(me.as_str()) {
                continue;
            }
            if let Some(approvals) = message.get("approvals").and_then(Value::as_object) {
                gateway.take_approvals(approvals.iter().filter_map(|(tool, told)| {
                    let text = told.get("text").and_then(Value::as_str)?;
                    let version = told.get("version").and_then(Value::as_u64)?;
                    Some((decode_approval(tool, text)?, version))
                }));
            }
            let principal = message.get("principal").and_then(Value::as_str);
            let record = message
                .get("activations")
                .and_then(Value::as_str)
                .and_then(ActivationsRecord::decode);
            if let (Some(principal), Some(record)) = (principal, record) {
                gateway.take_activations(principal, record);
            }
        }
    });
}

/// Reads the whole shared record again every [`RESYNC`], until the gateway
/// is dropped; a store out of reach is logged once per outage.
fn spawn_resync(gateway: super::runtime::WeakGateway, shared: SharedGateway) {
    tokio::spawn(async move {
        let mut failing = false;
        loop {
            tokio::time::sleep(RESYNC).await;
            let Some(gateway) = gateway.upgrade() else {
                return;
            };
            match gateway.resync(&shared).await {
                Ok(()) if failing => {
                    failing = false;
                    tracing::warn!(target: "droid", "the gateway's shared store is readable again");
                }
                Ok(()) => {}
                Err(error) => {
                    if !failing {
                        tracing::warn!(target: "droid", %error, "the gateway's shared store could not be read; serving what was last read");
                    }
                    failing = true;
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::application::gateway::catalog::Pins;
    use crate::application::gateway::state::Disclosure;
    use crate::application::server::Server;
    use crate::domain::ir::JsonObject;

    fn definition() -> JsonObject {
        match json!({ "name": "write", "description": "Writes files.", "inputSchema": { "type": "object" } })
        {
            Value::Object(map) => map,
            _ => JsonObject::new(),
        }
    }

    /// A progressive gateway whose catalog offers `fs/write`, pinned.
    fn gateway() -> Result<(Gateway, SchemaDigest), Box<dyn std::error::Error>> {
        let digest = SchemaDigest::of_definition(&definition());
        let mut pins = Pins::default();
        pins.pin(ToolId::new("fs/write"), digest);
        let gateway = Gateway::build(Server::builder("test", "0"), Disclosure::Progressive, pins)?;
        let mut state = lock(&gateway.inner.state);
        let pins = state.pins.clone();
        Arc::make_mut(&mut state.catalog).sync_upstream("fs", vec![definition()], &pins);
        drop(state);
        Ok((gateway, digest))
    }

    /// Makes `principal` one this instance serves.
    fn comes(gateway: &Gateway, principal: &str) -> SessionId {
        let mut state = lock(&gateway.inner.state);
        state
            .principals
            .session_for(principal, std::time::Instant::now())
            .0
    }

    fn activated(gateway: &Gateway, principal: &str) -> Vec<ToolId> {
        let state = lock(&gateway.inner.state);
        state
            .principals
            .get(principal)
            .map(|session| {
                state
                    .activations_of(session)
                    .into_iter()
                    .map(|(id, _)| id)
                    .collect()
            })
            .unwrap_or_default()
    }

    fn record(tools: &[(&str, SchemaDigest)], expires_at_ms: u64) -> ActivationsRecord {
        ActivationsRecord {
            tools: tools
                .iter()
                .map(|(id, digest)| (ToolId::new(*id), *digest))
                .collect(),
            expires_at_ms,
        }
    }

    #[test]
    fn a_newer_record_is_taken_and_an_older_one_passed_over()
    -> Result<(), Box<dyn std::error::Error>> {
        let (gateway, digest) = gateway()?;
        let write = ToolId::new("fs/write");
        comes(&gateway, "alice");
        comes(&gateway, "bob");
        gateway.take_activations("alice", record(&[("fs/write", digest)], 100));
        assert_eq!(activated(&gateway, "alice"), std::slice::from_ref(&write));
        assert!(activated(&gateway, "bob").is_empty(), "alice's only");
        // Told late: a record older than the one taken changes nothing.
        gateway.take_activations("alice", record(&[], 50));
        assert_eq!(activated(&gateway, "alice"), std::slice::from_ref(&write));
        gateway.take_activations("alice", record(&[], 200));
        assert!(activated(&gateway, "alice").is_empty());
        Ok(())
    }

    #[test]
    fn a_principal_not_served_here_is_made_only_when_it_comes()
    -> Result<(), Box<dyn std::error::Error>> {
        let (gateway, digest) = gateway()?;
        let far = now_ms() + 60_000;
        gateway.take_activations("carol", record(&[("fs/write", digest)], far));
        assert_eq!(
            lock(&gateway.inner.state).principals.len(),
            0,
            "taking a record is no use of the principal"
        );
        assert!(
            lock(&gateway.inner.state)
                .shared_activations
                .contains_key("carol")
        );
        Ok(())
    }

    #[test]
    fn a_tool_at_another_digest_or_not_offered_is_not_activated()
    -> Result<(), Box<dyn std::error::Error>> {
        let (gateway, _) = gateway()?;
        comes(&gateway, "alice");
        let other = SchemaDigest::of_definition(&JsonObject::new());
        gateway.take_activations("alice", record(&[("fs/write", other)], 100));
        assert!(activated(&gateway, "alice").is_empty());
        gateway.take_activations("alice", record(&[("fs/gone", other)], 200));
        assert!(activated(&gateway, "alice").is_empty());
        Ok(())
    }
}
