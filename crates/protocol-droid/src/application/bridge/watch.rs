//! Resource subscriptions across the bridge: which downstream sessions
//! watch which URIs, and the one upstream subscription (or listen) that
//! serves them all.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::runtime::Bridge;
use super::upstream::{Affinity, full_capabilities};
use super::upstream::{RootsWords, Upstream, lock};
use crate::application::client::RequestOptions;
use crate::application::squelch::Squelch;
use crate::domain::SessionId;

/// The most bytes of URIs one upstream `subscriptions/listen` names: the
/// request must fit what a server takes in one message (a few MiB is
/// common), or the listen fails for every session it serves.
const MAX_LISTEN_URI_BYTES: usize = 1024 * 1024;

/// The resources sessions watch (`watched`), at most `budget` bytes of
/// them as JSON, shared out fairly: one of each session's in turn
/// (sessions and their URIs in order, so the same sessions watching the
/// same resources name the same ones), so a session watching many or long
/// URIs leaves room for every other one's.
fn fair_share(
    watched: &HashMap<SessionId, HashMap<String, usize>>,
    budget: usize,
) -> BTreeSet<String> {
    let mut sessions: Vec<(&SessionId, &HashMap<String, usize>)> = watched.iter().collect();
    sessions.sort_unstable_by_key(|(session, _)| **session);
    let mut queues: Vec<Vec<&String>> = sessions
        .into_iter()
        .map(|(_, counts)| {
            let mut uris: Vec<&String> = counts.keys().collect();
            uris.sort_unstable();
            uris
        })
        .collect();
    let mut chosen = BTreeSet::new();
    let mut used = 0_usize;
    let mut turn = 0_usize;
    while !queues.is_empty() {
        queues.retain(|uris| uris.len() > turn);
        for uri in queues.iter().filter_map(|uris| uris.get(turn)) {
            if chosen.contains(*uri) {
                continue;
            }
            // As the listen writes it: quoted, escaped, and a comma.
            let written = serde_json::to_string(*uri).map_or(usize::MAX, |json| json.len() + 1);
            if let Some(total) = used.checked_add(written).filter(|t| *t <= budget) {
                used = total;
                chosen.insert((*uri).clone());
            }
        }
        turn = turn.saturating_add(1);
    }
    chosen
}

impl Bridge {
    /// Every resource some session watches.
    pub(super) fn watched_uris(&self) -> BTreeSet<String> {
        lock(&self.inner.watched)
            .values()
            .flat_map(HashMap::keys)
            .cloned()
            .collect()
    }

    /// Whether any session watches `uri`.
    fn anyone_watches(&self, uri: &str) -> bool {
        lock(&self.inner.watched)
            .values()
            .any(|counts| counts.contains_key(uri))
    }

    /// Keeps a legacy upstream subscribed to exactly the resources some
    /// session watches, on one connection kept for watching: its
    /// `resources/updated` notifications reach every session and listen
    /// watching the resource. One task does it, in order, and subscribes
    /// again on a new connection when the old one ended.
    pub(super) fn spawn_watcher(&self) {
        let weak = Arc::downgrade(&self.inner);
        let rewatch = Arc::clone(&self.inner.rewatch);
        let mut closing = self.inner.closing.subscribe();
        tokio::spawn(async move {
            let mut subscribed = BTreeSet::new();
            let mut on: Option<Arc<Upstream>> = None;
            let mut check = tokio::time::interval(Duration::from_secs(30));
            loop {
                tokio::select! {
                    () = rewatch.notified() => {}
                    _ = check.tick() => {}
                    _ = closing.changed() => return,
                }
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                let bridge = Self { inner };
                let wanted = bridge.watched_uris();
                if wanted.is_empty() && subscribed.is_empty() {
                    continue;
                }
                let Ok(lease) = bridge.lease(Affinity::Shared, full_capabilities).await else {
                    continue;
                };
                drop(bridge);
                if on.as_ref().is_none_or(|u| !Arc::ptr_eq(u, &lease.upstream)) {
                    // A new connection knows of no subscription.
                    subscribed.clear();
                    on = Some(Arc::clone(&lease.upstream));
                }
                let client = lease.upstream.client.clone();
                drop(lease);
                for uri in wanted.difference(&subscribed).cloned().collect::<Vec<_>>() {
                    match client.subscribe(&uri).await {
                        Ok(()) => {
                            subscribed.insert(uri);
                        }
                        Err(error) => {
                            tracing::debug!(target: "droid::bridge", %error, uri, "the upstream subscription failed");
                        }
                    }
                }
                for uri in subscribed.difference(&wanted).cloned().collect::<Vec<_>>() {
                    if let Err(error) = client.unsubscribe(&uri).await {
                        tracing::debug!(target: "droid::bridge", %error, uri, "the upstream unsubscription failed");
                    }
                    subscribed.remove(&uri);
                }
            }
        });
    }

    /// Keeps one `subscriptions/listen` open on a 2026-07-28 upstream, so
    /// its list changes and the updates of the resources legacy sessions
    /// subscribed to reach the bridge's own clients; reopened when it ends
    /// and whenever the set of watched resources changes.
    pub(super) fn spawn_listener(&self) {
        let weak = Arc::downgrade(&self.inner);
        let rewatch = Arc::clone(&self.inner.rewatch);
        let mut closing = self.inner.closing.subscribe();
        tokio::spawn(async move {
            let mut pause = Duration::from_millis(500);
            loop {
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                let bridge = Self { inner };
                let params = bridge.listen_params();
                let lease = bridge.lease(Affinity::Shared, full_capabilities).await;
                drop(bridge);
                let started = Instant::now();
                if let Ok(lease) = lease {
                    let client = lease.upstream.client.clone();
                    drop(lease);
                    let long = RequestOptions {
                        timeout: Some(Duration::from_secs(24 * 60 * 60)),
                        ..RequestOptions::default()
                    };
                    let listening =
                        client.request_once("subscriptions/listen", Some(params), &long);
                    tokio::select! {
                        outcome = listening => {
                            if let Err(error) = outcome {
                                tracing::debug!(target: "droid::bridge", %error, "the upstream listen ended");
                            }
                        }
                        () = rewatch.notified() => pause = Duration::ZERO,
                        _ = closing.changed() => return,
                    }
                }
                // A listen that keeps failing at once is retried ever less
                // often; one that lasted starts over.
                if started.elapsed() > Duration::from_secs(30) {
                    pause = Duration::from_millis(500);
                }
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    _ = closing.changed() => return,
                }
                pause = (pause * 2).clamp(Duration::from_millis(500), Duration::from_secs(30));
            }
        });
    }

    /// What the upstream listen asks for: every list the upstream offers
    /// changes of, and the resources legacy sessions subscribed to.
    pub(super) fn listen_params(&self) -> Value {
        let caps = serde_json::to_value(&self.inner.upstream.capabilities).unwrap_or_default();
        let mut notifications = Map::new();
        for (capability, key) in [
            ("tools", "toolsListChanged"),
            ("prompts", "promptsListChanged"),
            ("resources", "resourcesListChanged"),
        ] {
            if caps.get(capability).is_some() {
                notifications.insert(key.to_owned(), json!(true));
            }
        }
        let watched = {
            let all = lock(&self.inner.watched);
            let shared = fair_share(&all, MAX_LISTEN_URI_BYTES);
            let left_out = all
                .values()
                .flat_map(HashMap::keys)
                .filter(|uri| !shared.contains(*uri))
                .count();
            // Said once in a while: a client can make it be said at every
            // subscription.
            static LEFT_OUT: Squelch = Squelch::new(Duration::from_secs(10));
            if let Some(passed) = (left_out > 0).then(|| LEFT_OUT.admit()).flatten() {
                tracing::warn!(target: "droid::bridge", left_out, passed_over = passed, "resources watched past what one upstream listen names are not watched upstream");
            }
            shared
        };
        if !watched.is_empty() {
            notifications.insert("resourceSubscriptions".to_owned(), json!(watched));
        }
        json!({ "notifications": notifications })
    }

    /// Counts `session` watching `uri` (or no longer), and tells the task
    /// that watches upstream when the set watched overall changed.
    pub(crate) fn watch(&self, session: SessionId, uri: &str, subscribed: bool) {
        let anyone = |watched: &HashMap<SessionId, HashMap<String, usize>>| {
            watched.values().any(|counts| counts.contains_key(uri))
        };
        let changed = {
            let mut watched = lock(&self.inner.watched);
            let before = anyone(&watched);
            let counts = watched.entry(session).or_default();
            if subscribed {
                *counts.entry(uri.to_owned()).or_default() += 1;
            } else if let Some(count) = counts.get_mut(uri) {
                *count -= 1;
                if *count == 0 {
                    counts.remove(uri);
                }
            }
            if counts.is_empty() {
                watched.remove(&session);
            }
            anyone(&watched) != before
        };
        // A second watcher of a resource, or one of two leaving, is nothing
        // to the upstream (and reopening a listen would lose what it
        // carried).
        if changed {
            self.inner.rewatch.notify_one();
        }
    }

    /// Forgets what `session` watched and closes its upstream session.
    pub(crate) fn end_session(&self, session: SessionId) {
        let gone = lock(&self.inner.watched).remove(&session);
        if let Some(worker) = lock(&self.inner.session_watches).remove(&session) {
            // Wakes the worker to find its session gone.
            worker.wake.notify_one();
        }
        let unwatched =
            gone.is_some_and(|counts| counts.keys().any(|uri| !self.anyone_watches(uri)));
        if unwatched {
            self.inner.rewatch.notify_one();
        }
        let pool = lock(&self.inner.upstreams).remove(&Affinity::Session(session));
        for upstream in pool.into_iter().flatten() {
            tokio::spawn(async move { upstream.client.close().await });
        }
    }

    /// The client of the legacy `session` said its roots changed: its own
    /// upstream connection forgets the roots it last gave and is told, so
    /// that the server asks again.
    pub(crate) fn roots_changed(&self, session: SessionId) {
        let pool = lock(&self.inner.upstreams)
            .get(&Affinity::Session(session))
            .cloned()
            .unwrap_or_default();
        for upstream in pool {
            upstream.handler.forget_roots();
            // One word at a time per connection: a client repeating it in a
            // loop starts no task per repetition, and one that comes while
            // a word is on its way is sent once that one is.
            if !upstream.handler.roots_word_free() {
                continue;
            }
            // Made before the task, so that a task dropped unpolled frees
            // the connection to send again.
            let mut words = RootsWords {
                handler: Arc::clone(&upstream.handler),
                done: false,
            };
            tokio::spawn(async move {
                loop {
                    let told = upstream
                        .client
                        .notify("notifications/roots/list_changed", None)
                        .await;
                    if let Err(error) = told {
                        tracing::debug!(target: "droid::bridge", %error, "the upstream was not told the roots changed");
                    }
                    if !words.handler.roots_word_sent() {
                        break;
                    }
                }
                words.finish();
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session watching many long URIs takes no more than its turns: the
    /// others' are all in the listen, and the listen stays in its budget.
    #[test]
    fn the_listen_shares_its_bytes_out_by_session() {
        let mut watched: HashMap<SessionId, HashMap<String, usize>> = HashMap::new();
        let greedy = (0..100)
            .map(|n| (format!("test://greedy/{n:03}/{}", "x".repeat(1000)), 1))
            .collect();
        watched.insert(SessionId::new(1), greedy);
        // As long as the greedy session's: taken only in their turn, they
        // would find no room left after its.
        let own = |session: u64| format!("test://own/{session}/{}", "y".repeat(1000));
        for session in 2..=4 {
            watched.insert(SessionId::new(session), HashMap::from([(own(session), 1)]));
        }
        let shared = fair_share(&watched, 10_000);
        for session in 2..=4 {
            assert!(shared.contains(&own(session)), "{shared:?}");
        }
        let bytes: usize = shared.iter().map(String::len).sum();
        assert!(bytes <= 10_000, "{bytes}");
        assert!(shared.len() > 3, "the greedy session has none: {shared:?}");
        // Within the budget, everything.
        assert_eq!(fair_share(&watched, usize::MAX).len(), 103);
    }
}
