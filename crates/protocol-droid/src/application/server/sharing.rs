//! How a server keeps in step with the other instances sharing its store
//! ([`Server::share`]): its `requestState` keys read again and rotated in
//! the background, and its changes to what it offers told to them and
//! theirs to it. The ports it works through are in `shared`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::host::{Change, Inner, Server};
use super::key_ring::KeyRing;
use super::request_state::DEFAULT_LIFETIME_MS;
use super::shared::{EVERY_INSTANCE, ShareError, SharedSessions, SharedState, sync_ring};
use super::tasks::{SharedTasks, TaskMessage, now_ms};

impl Server {
    /// Shares this server's `requestState` keys and answered rounds with
    /// the other instances that reach `shared`'s store, from now on: what
    /// serving one endpoint from several processes needs (docs/scaling.md).
    ///
    /// Reads the key ring (writing the first when there is none) before it
    /// returns, so the first state this server seals already opens on every
    /// other instance; then reads it again every
    /// [`refresh_ms`](super::RotationPolicy::refresh_ms) in the background,
    /// rotating it when due, until the server is dropped. Needs a Tokio
    /// runtime.
    ///
    /// # Errors
    ///
    /// [`ShareError`] when the store cannot be reached, or holds a ring that
    /// is not one; the server is then left as it was.
    pub async fn share(&self, shared: SharedState) -> Result<(), ShareError> {
        let lifetime_ms = self
            .inner
            .sealer
            .read()
            .map_or(DEFAULT_LIFETIME_MS, |sealer| sealer.lifetime_ms());
        let (ring, sealer) = sync_ring(
            shared.keys.as_ref(),
            &shared.rotation,
            lifetime_ms,
            now_ms(),
            None,
        )
        .await?;
        if let Ok(mut current) = self.inner.sealer.write() {
            *current = sealer;
        }
        if let Ok(mut rounds) = self.inner.rounds.write() {
            *rounds = Arc::clone(&shared.rounds);
        }
        if let Some(sessions) = &shared.sessions {
            self.inner.tasks.share(SharedTasks {
                store: Arc::clone(&sessions.tasks),
                relay: Arc::clone(&sessions.relay),
                instance: sessions.instance.clone(),
            });
            if self.inner.shared_sessions.set(sessions.clone()).is_ok() {
                let relay = spawn_change_relay(&self.inner, sessions);
                let _first = self.inner.relay_changes.set(relay);
            }
        }
        let health = Arc::clone(
            self.inner
                .store_health
                .get_or_init(|| Arc::new(AtomicBool::new(true))),
        );
        spawn_refresh(
            Arc::downgrade(&self.inner),
            shared,
            lifetime_ms,
            health,
            ring,
        );
        Ok(())
    }
}

/// Keeps the server's sealer in step with the shared ring until the server
/// is dropped, and `health` saying whether the store answered. A store that
/// cannot be reached leaves the sealer as it was (logged once per outage):
/// states keep sealing and opening with the keys last read.
pub(super) fn spawn_refresh(
    inner: Weak<Inner>,
    shared: SharedState,
    lifetime_ms: u64,
    health: Arc<AtomicBool>,
    ring: KeyRing,
) {
    let period = Duration::from_millis(shared.rotation.refresh_ms.max(10));
    tokio::spawn(async move {
        let mut known = ring;
        let mut failing = false;
        loop {
            tokio::time::sleep(period).await;
            let Some(server) = inner.upgrade() else {
                return;
            };
            let synced = sync_ring(
                shared.keys.as_ref(),
                &shared.rotation,
                lifetime_ms,
                now_ms(),
                Some(&known),
            )
            .await;
            health.store(synced.is_ok(), Ordering::Relaxed);
            match synced {
                Ok((ring, sealer)) => {
                    if failing {
                        tracing::warn!(target: "droid", "the shared key ring is readable again");
                    }
                    failing = false;
                    known = ring;
                    if let Ok(mut current) = server.sealer.write() {
                        *current = sealer;
                    }
                }
                Err(error) => {
                    if !failing {
                        tracing::warn!(
                            target: "droid",
                            %error,
                            "the shared key ring could not be read; sealing with the keys last read"
                        );
                    }
                    failing = true;
                }
            }
        }
    });
}

/// How many changes wait to be told to the other instances.
const CHANGE_BACKLOG: usize = 256;

/// Tells the other instances sharing `sessions` about this server's
/// changes to what it offers (lists, and resources' contents), and this
/// server's listeners about theirs, until the server is dropped: a
/// session's stream may be held by any instance. Answers where to queue a
/// change to tell.
pub(super) fn spawn_change_relay(
    inner: &Arc<Inner>,
    sessions: &SharedSessions,
) -> tokio::sync::mpsc::Sender<Change> {
    let (tx, mut outgoing) = tokio::sync::mpsc::channel::<Change>(CHANGE_BACKLOG);
    let relay = Arc::clone(&sessions.relay);
    let me = sessions.instance.clone();
    tokio::spawn({
        let relay = Arc::clone(&relay);
        let me = me.clone();
        async move {
            while let Some(change) = outgoing.recv().await {
                let Some(change) = relayed(&change) else {
                    continue;
                };
                let text = serde_json::json!({ "from": me, "change": change }).to_string();
                if let Err(error) = relay.send(EVERY_INSTANCE, &text).await {
                    tracing::warn!(target: "droid", %error, "a change could not be told to the other instances");
                }
            }
        }
    });
    let weak = Arc::downgrade(inner);
    tokio::spawn(async move {
        let mut heard = loop {
            match relay.listen(EVERY_INSTANCE).await {
                Ok(heard) => break heard,
                Err(_) if weak.strong_count() > 0 => {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(_) => return,
            }
        };
        loop {
            // Woken now and then without a message, so a dropped server is
            // noticed on a quiet channel too; dropping `heard` then ends
            // the subscription.
            let text = tokio::select! {
                text = heard.recv() => text,
                () = tokio::time::sleep(Duration::from_secs(5)) => {
                    if weak.strong_count() == 0 {
                        return;
                    }
                    continue;
                }
            };
            let (Some(text), Some(server)) = (text, weak.upgrade()) else {
                return;
            };
            let Ok(mut message) = serde_json::from_str::<serde_json::Value>(&text) else {
                continue;
            };
            if message.get("from").and_then(serde_json::Value::as_str) == Some(me.as_str()) {
                continue;
            }
            if let Some(change) = message.get("change").and_then(unrelayed) {
                // Straight to this server's listeners: told again, it would
                // echo between the instances for ever.
                let _listeners = server.changes.send(change);
            }
            let task = message
                .get_mut("task")
                .map(serde_json::Value::take)
                .and_then(|task| serde_json::from_value::<TaskMessage>(task).ok());
            if let Some(task) = task {
                // Queued, to be acted on in order apart from this loop:
                // acting on it may read the store.
                server.tasks.hear(task);
            }
        }
    });
    tx
}

/// A change as the other instances are told it; `None` for what concerns
/// one of this instance's sessions only.
fn relayed(change: &Change) -> Option<serde_json::Value> {
    use Change;
    Some(match change {
        Change::Tools => serde_json::json!("tools"),
        Change::Prompts => serde_json::json!("prompts"),
        Change::Resources => serde_json::json!("resources"),
        Change::ResourceUpdated(uri) => serde_json::json!({ "resourceUpdated": uri }),
        Change::ToolsFor(_)
        | Change::SessionResourceUpdated { .. }
        | Change::Log { .. }
        | Change::TaskStatus { .. } => return None,
    })
}

/// A change another instance told.
fn unrelayed(value: &serde_json::Value) -> Option<Change> {
    use Change;
    match value {
        serde_json::Value::String(kind) => match kind.as_str() {
            "tools" => Some(Change::Tools),
            "prompts" => Some(Change::Prompts),
            "resources" => Some(Change::Resources),
            _ => None,
        },
        serde_json::Value::Object(object) => object
            .get("resourceUpdated")
            .and_then(serde_json::Value::as_str)
            .map(|uri| Change::ResourceUpdated(uri.to_owned())),
        _ => None,
    }
}
