//! Resource subscriptions across the bridge: which downstream sessions
//! watch which URIs, and the one upstream subscription (or listen) that
//! serves them all.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::runtime::Bridge;
use super::upstream::{Affinity, full_capabilities};
use super::upstream::{RootsWords, Upstream, lock};
use crate::application::client::RequestOptions;
use crate::domain::SessionId;

impl Bridge {
    /// Every resource some session watches.
    pub(super) fn watched_uris(&self) -> std::collections::BTreeSet<String> {
        lock(&self.inner.watched)
            .values()
            .flat_map(HashMap::keys)
            .cloned()
            .collect()
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
            let mut subscribed = std::collections::BTreeSet::new();
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
        let watched = self.watched_uris();
        if !watched.is_empty() {
            notifications.insert("resourceSubscriptions".to_owned(), json!(watched));
        }
        json!({ "notifications": notifications })
    }

    /// Counts `session` watching `uri` (or no longer), and tells the task
    /// that watches upstream when the set watched overall changed.
    pub(crate) fn watch(&self, session: SessionId, uri: &str, subscribed: bool) {
        let before = self.watched_uris();
        {
            let mut watched = lock(&self.inner.watched);
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
        }
        // A second watcher of a resource, or one of two leaving, is nothing
        // to the upstream (and reopening a listen would lose what it
        // carried).
        if self.watched_uris() != before {
            self.inner.rewatch.notify_one();
        }
    }

    /// Forgets what `session` watched and closes its upstream session.
    pub(crate) fn end_session(&self, session: SessionId) {
        let before = self.watched_uris();
        lock(&self.inner.watched).remove(&session);
        if let Some(worker) = lock(&self.inner.session_watches).remove(&session) {
            // Wakes the worker to find its session gone.
            worker.wake.notify_one();
        }
        if self.watched_uris() != before {
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
