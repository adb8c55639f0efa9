//! A legacy session's own resource subscriptions, made on its own
//! connection to a legacy server.
//!
//! A legacy server keeps subscriptions per session, and often what makes a
//! resource change too (a tool a session calls to start updates), so a
//! session's `resources/subscribe` is sent on that session's connection,
//! and the updates that come back are that session's alone. Each session
//! with subscriptions has one worker, which brings what is subscribed
//! upstream to what the session wants, one change at a time and in order;
//! it ends with the session, and closes a connection it opened for a
//! session that ended meanwhile.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::sync::Notify;

use super::runtime::Bridge;
use super::upstream::{Affinity, SessionWatch, Upstream, legacy_capabilities, lock};
use crate::domain::ir::JsonObject;
use crate::domain::{Era, SessionId};

impl Bridge {
    /// A legacy session's `resources/subscribe` of `uri` (or, unless
    /// `subscribed`, its unsubscribe); `declared` is what its client
    /// declared. In front of a 2026-07-28 server, which keeps no sessions,
    /// the one listen serves every watcher instead.
    pub(crate) fn watch_for_session(
        &self,
        session: SessionId,
        declared: &JsonObject,
        uri: &str,
        subscribed: bool,
    ) {
        if self.inner.upstream.version.era() == Era::Modern {
            self.watch(session, uri, subscribed);
            return;
        }
        let mut watches = lock(&self.inner.session_watches);
        let watch = watches.entry(session).or_insert_with(|| {
            let wake = Arc::new(Notify::new());
            self.spawn_session_worker(session, Arc::clone(&wake));
            SessionWatch {
                wanted: BTreeSet::new(),
                declared: declared.clone(),
                wake,
            }
        });
        // The session's server bounds how many it may subscribe to.
        if subscribed {
            watch.wanted.insert(uri.to_owned());
        } else {
            watch.wanted.remove(uri);
        }
        watch.wake.notify_one();
    }

    /// Whether `session` is subscribed to `uri` upstream on a connection
    /// of its own that is open (a legacy session's subscription to a
    /// legacy upstream), whose updates are told to it alone. What it only
    /// asked for, not yet (or never) made there, is not.
    pub(crate) fn watches_for_session(&self, session: SessionId, uri: &str) -> bool {
        lock(&self.inner.upstreams)
            .get(&Affinity::Session(session))
            .is_some_and(|pool| {
                pool.iter()
                    .any(|u| u.client.closed().is_none() && lock(&u.subscribed).contains(uri))
            })
    }

    fn spawn_session_worker(&self, session: SessionId, wake: Arc<Notify>) {
        let weak = Arc::downgrade(&self.inner);
        let mut closing = self.inner.closing.subscribe();
        tokio::spawn(async move {
            let mut on: Option<Arc<Upstream>> = None;
            let mut done = BTreeSet::new();
            loop {
                tokio::select! {
                    () = wake.notified() => {}
                    // The bridge was closed (replaced, or its upstream
                    // removed): nothing is left to watch through it.
                    _ = closing.changed() => return,
                }
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                let bridge = Self { inner };
                let wanted = {
                    let watches = lock(&bridge.inner.session_watches);
                    let Some(watch) = watches.get(&session) else {
                        return;
                    };
                    (watch.wanted.clone(), watch.declared.clone())
                };
                if !bridge
                    .settle_session(session, &wanted.0, &wanted.1, &mut on, &mut done)
                    .await
                {
                    return;
                }
            }
        });
    }

    /// Brings what `session` has subscribed upstream (`done`, on the
    /// connection `on`) to `wanted`; false when the session ended.
    async fn settle_session(
        &self,
        session: SessionId,
        wanted: &BTreeSet<String>,
        declared: &JsonObject,
        on: &mut Option<Arc<Upstream>>,
        done: &mut BTreeSet<String>,
    ) -> bool {
        let affinity = Affinity::Session(session);
        // A connection that ended took its subscriptions with it: they are
        // made again on the next.
        if on.as_ref().is_some_and(|u| u.client.closed().is_some()) {
            *on = None;
            done.clear();
        }
        // Only something to subscribe to is worth opening a connection for.
        let lease = if wanted.difference(done).next().is_some() {
            let opening = self.lease(affinity.clone(), || legacy_capabilities(declared));
            match tokio::time::timeout(self.inner.options.request_timeout, opening).await {
                Ok(Ok(lease)) => Some(lease),
                Ok(Err(error)) => {
                    tracing::debug!(target: "droid::bridge", ?error, "no connection to subscribe on");
                    None
                }
                Err(_) => None,
            }
        } else {
            self.free(&affinity, false).ok().flatten()
        };
        // The session may have ended while its connection opened: the
        // connection is closed rather than left pinned by nobody.
        if !lock(&self.inner.session_watches).contains_key(&session) {
            drop(lease);
            self.end_session(session);
            return false;
        }
        let Some(lease) = lease else {
            return true;
        };
        let upstream = Arc::clone(&lease.upstream);
        if on.as_ref().is_none_or(|u| !Arc::ptr_eq(u, &upstream)) {
            // A new connection knows of no subscription.
            done.clear();
            *on = Some(Arc::clone(&upstream));
        }
        let client = upstream.client.clone();
        for uri in wanted.difference(&done.clone()) {
            match client.subscribe(uri).await {
                Ok(()) => {
                    done.insert(uri.clone());
                    lock(&upstream.subscribed).insert(uri.clone());
                }
                Err(error) => {
                    tracing::debug!(target: "droid::bridge", %error, uri, "the upstream refused a session's subscription");
                }
            }
        }
        for uri in done.difference(wanted).cloned().collect::<Vec<_>>() {
            if let Err(error) = client.unsubscribe(&uri).await {
                tracing::debug!(target: "droid::bridge", %error, uri, "the upstream refused a session's unsubscription");
            }
            done.remove(&uri);
            lock(&upstream.subscribed).remove(&uri);
        }
        true
    }
}
