//! How a gateway keeps in step with the other instances sharing its store
//! ([`Gateway::share`]): first-use pins claimed once for all of them,
//! approvals and principals' activations written, told and taken, and all
//! of it read again now and then. The port and the records are `shared`'s.
//!
//! Nothing here is on a request's way unless the request changes what is
//! shared: lists and calls read the copy in memory.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::runtime::Gateway;
use super::session::SessionActivationGrant;
use super::shared::{
    ActivationsRecord, SharedGateway, decode_approval, decode_pins, encode_approval, encode_pins,
};
use super::state::{State, fresh_set, lock};
use super::trust::Approval;
use crate::application::server::StoreError;
use crate::application::server::tasks::now_ms;
use crate::domain::SessionId;
use crate::domain::catalog::{SchemaDigest, ToolId};

/// The relay's name for what every instance of the gateway hears. Holding a
/// `*`, it is no instance's name.
const EVERY_GATEWAY: &str = "*gateway";

/// How often every instance reads the whole shared record again, for a
/// change whose message the relay lost.
const RESYNC: Duration = Duration::from_secs(10);

impl Gateway {
    /// Shares this gateway's trust (first-use pins and approvals) and its
    /// principals' activations with the other instances that reach
    /// `shared`'s store, from now on. Call it before adding upstreams, so
    /// that an upstream another instance used first is held to what it
    /// showed then. Needs a Tokio runtime.
    ///
    /// What the store holds is taken before this returns: the approvals
    /// recorded, and the activations of every principal.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be reached; the gateway is then
    /// left as it was.
    pub async fn share(&self, shared: SharedGateway) -> Result<(), StoreError> {
        let heard = shared.relay.listen(EVERY_GATEWAY).await?;
        self.resync(&shared).await?;
        if self.inner.shared.set(shared.clone()).is_err() {
            return Ok(());
        }
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
    /// this instance saw that differs is drift like any other.
    pub(super) async fn claim_first_use(
        &self,
        upstream: &str,
        trusted: &BTreeMap<ToolId, SchemaDigest>,
    ) {
        let Some(shared) = self.inner.shared.get() else {
            return;
        };
        let kept = match shared
            .store
            .claim_first_use(upstream, &encode_pins(trusted))
            .await
        {
            Ok(kept) => kept,
            Err(error) => {
                self.inner.server.observer().store_failed("gateway");
                tracing::error!(%upstream, %error, "the first use of an upstream could not be shared; the other instances will take their own");
                return;
            }
        };
        let Some(kept) = decode_pins(&kept) else {
            tracing::error!(%upstream, "the shared store holds a first use that is not one; keeping this instance's");
            return;
        };
        if &kept == trusted {
            return;
        }
        tracing::warn!(%upstream, "another instance used this upstream first; holding it to what it showed then");
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
            for (id, digest) in kept {
                state.first_use.pin(id, digest);
            }
            state.repin(self.inner.disclosure)
        };
        for session in touched {
            self.inner.server.tools_changed_for(session);
        }
    }

    /// Writes `approvals` to the shared store and tells the other
    /// instances; the reason when they could not be shared.
    pub(super) async fn share_approvals(&self, approvals: &[Approval]) -> Option<String> {
        let shared = self.inner.shared.get()?;
        let mut told = serde_json::Map::new();
        for approval in approvals {
            let text = encode_approval(approval);
            if let Err(error) = shared
                .store
                .record_approval(approval.id.as_str(), &text)
                .await
            {
                self.inner.server.observer().store_failed("gateway");
                tracing::error!(tool = %approval.id, %error, "an approval could not be shared; the other instances do not hold it");
                return Some(error.to_string());
            }
            told.insert(approval.id.as_str().to_owned(), Value::String(text));
        }
        let message = json!({ "from": shared.instance, "approvals": told }).to_string();
        if let Err(error) = shared.relay.send(EVERY_GATEWAY, &message).await {
            // Recorded: the others read it at their next resync.
            tracing::warn!(%error, "an approval could not be told to the other instances; they take it within {} s", RESYNC.as_secs());
        }
        None
    }

    /// Writes the activations `session` keeps, when it stands for a
    /// principal and the gateway is shared, and tells the other instances.
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
            (
                principal,
                ActivationsRecord {
                    tools,
                    expires_at_ms,
                },
            )
        };
        let text = record.encode();
        if let Err(error) = shared.store.keep_activations(&principal, &text).await {
            self.inner.server.observer().store_failed("gateway");
            tracing::error!(%error, "a principal's activations could not be shared; the other instances do not hold them");
            return;
        }
        let message =
            json!({ "from": shared.instance, "principal": principal, "activations": text })
                .to_string();
        if let Err(error) = shared.relay.send(EVERY_GATEWAY, &message).await {
            tracing::warn!(%error, "a principal's activations could not be told to the other instances; they take them within {} s", RESYNC.as_secs());
        }
    }

    /// Reads everything shared again, when the gateway is shared: for
    /// activations of tools an upstream listed just now, which were passed
    /// over while it had not. Before the listing's tools are registered, so
    /// no request finds them without what is shared of them.
    pub(super) async fn resync_after_listing(&self) {
        let Some(shared) = self.inner.shared.get() else {
            return;
        };
        if let Err(error) = self.resync(shared).await {
            tracing::warn!(target: "droid", %error, "the gateway's shared store could not be read after an upstream was listed; its activations are taken at the next reading");
        }
    }

    /// Reads everything shared and takes it: the approvals, and every
    /// principal's activations; forgets the activations that lapsed.
    async fn resync(&self, shared: &SharedGateway) -> Result<(), StoreError> {
        let approvals = shared.store.approvals().await?;
        let activations = shared.store.activations().await?;
        self.take_approvals(
            approvals
                .iter()
                .filter_map(|(tool, text)| decode_approval(tool, text)),
        );
        let now = now_ms();
        let mut lapsed = Vec::new();
        for (principal, text) in activations {
            match ActivationsRecord::decode(&text) {
                Some(record) if record.expires_at_ms > now => {
                    self.take_activations(&principal, &record);
                }
                _ => lapsed.push(principal),
            }
        }
        if !lapsed.is_empty() {
            shared.store.forget_activations(&lapsed).await?;
        }
        Ok(())
    }

    /// Takes approvals made on other instances; sessions whose lists change
    /// are told.
    fn take_approvals(&self, approvals: impl IntoIterator<Item = Approval>) {
        let touched = {
            let mut state = lock(&self.inner.state);
            let mut changed = false;
            for approval in approvals {
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

    /// Takes `principal`'s activations as another instance kept them: its
    /// set here becomes the core plus each of them the catalog here still
    /// offers, verified, at the digest it was activated at.
    fn take_activations(&self, principal: &str, record: &ActivationsRecord) {
        let session = {
            let mut state = lock(&self.inner.state);
            // A record older than the one last taken or written here (told
            // late, or read while a newer one was being written) is stale.
            // Checked first: reading it again must not count as a use.
            if record.expires_at_ms <= state.principals.shared_version(principal) {
                return;
            }
            let session = state.principal_session(principal);
            // Taken for good once every tool in it is offered here; until
            // then (an upstream not yet listed) it is taken again as the
            // catalog grows.
            let complete = record.tools.iter().all(|(id, digest)| {
                state
                    .catalog
                    .get(id)
                    .is_some_and(|r| r.provenance.is_verified() && r.digest == *digest)
            });
            if complete {
                state
                    .principals
                    .set_shared_version(principal, record.expires_at_ms);
            }
            let kept = state.activations_of(session);
            let wanted: Vec<(ToolId, SchemaDigest)> = record
                .tools
                .iter()
                .map(|(id, digest)| (id.clone(), *digest))
                .collect();
            if kept == wanted {
                return;
            }
            let mut set = fresh_set(session, &state.catalog, self.inner.disclosure);
            let catalog = Arc::clone(&state.catalog);
            for (id, digest) in &record.tools {
                let offered = catalog
                    .get(id)
                    .is_some_and(|r| r.provenance.is_verified() && r.digest == *digest);
                let grant =
                    SessionActivationGrant::issue(session, id, &catalog).filter(|_| offered);
                if let Some(grant) = grant {
                    let _activated = set.activate(grant, &catalog);
                }
            }
            state.sessions.insert(session, set);
            session
        };
        self.inner.server.tools_changed_for(session);
    }
}

impl State {
    /// The session standing for `principal`, made if there is none; the
    /// sessions of the principals forgotten to make room are dropped.
    fn principal_session(&mut self, principal: &str) -> SessionId {
        let (session, forgotten) = self.principals.session_for(principal, Instant::now());
        for session in forgotten {
            self.forget_session(session);
        }
        session
    }

    /// Each tool `session` activated, in id order, at its digest then.
    fn activations_of(&self, session: SessionId) -> Vec<(ToolId, SchemaDigest)> {
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
                gateway.take_approvals(approvals.iter().filter_map(|(tool, text)| {
                    text.as_str().and_then(|text| decode_approval(tool, text))
                }));
            }
            let principal = message.get("principal").and_then(Value::as_str);
            let record = message
                .get("activations")
                .and_then(Value::as_str)
                .and_then(ActivationsRecord::decode);
            if let (Some(principal), Some(record)) = (principal, record) {
                gateway.take_activations(principal, &record);
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

    fn activated(gateway: &Gateway, principal: &str) -> Vec<ToolId> {
        let mut state = lock(&gateway.inner.state);
        let session = state.principal_session(principal);
        state
            .sessions
            .get(&session)
            .map(|set| set.activated().map(|a| a.id.clone()).collect())
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
        gateway.take_activations("alice", &record(&[("fs/write", digest)], 100));
        assert_eq!(activated(&gateway, "alice"), std::slice::from_ref(&write));
        assert!(activated(&gateway, "bob").is_empty(), "alice's only");
        // Told late: a record older than the one taken changes nothing.
        gateway.take_activations("alice", &record(&[], 50));
        assert_eq!(activated(&gateway, "alice"), [write]);
        gateway.take_activations("alice", &record(&[], 200));
        assert!(activated(&gateway, "alice").is_empty());
        Ok(())
    }

    #[test]
    fn a_tool_at_another_digest_or_not_offered_is_not_activated()
    -> Result<(), Box<dyn std::error::Error>> {
        let (gateway, _) = gateway()?;
        let other = SchemaDigest::of_definition(&JsonObject::new());
        gateway.take_activations("alice", &record(&[("fs/write", other)], 100));
        assert!(activated(&gateway, "alice").is_empty());
        gateway.take_activations("alice", &record(&[("fs/gone", other)], 100));
        assert!(activated(&gateway, "alice").is_empty());
        // Not offered yet: not taken for good, so a later reading of the
        // same record is taken once the tool is there.
        assert_eq!(
            lock(&gateway.inner.state)
                .principals
                .shared_version("alice"),
            0
        );
        Ok(())
    }
}
