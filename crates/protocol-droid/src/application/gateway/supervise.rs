//! Keeping upstreams up: the first attempt, the retries, the reopening of a
//! connection that ended, the refreshes an upstream asks for, and removal.
//!
//! Every upstream has a generation, and every attempt, retry loop, refresh
//! and closed connection carries the generation it was started for. After
//! each wait it checks, under the lock, that its upstream is still the one
//! of that generation before changing anything: an upstream removed, or
//! replaced by a reloaded configuration, is never touched by work started
//! for its predecessor.
//!
//! Refreshes are per upstream and coalesced: one runs at a time, and a
//! change announced meanwhile makes it run once more. A flood of
//! announcements from one upstream costs one refresh after another for that
//! upstream alone; no other upstream's announcement is lost or delayed.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::catalog::ToolSource;
use super::names;
use super::runtime::{Gateway, Inner};
use super::state::{State, lock};
use super::trust::Trust;
use super::upstream::{
    self, STABLE_FOR, Upstream, UpstreamCounts, UpstreamError, UpstreamHealth, UpstreamOptions,
    UpstreamStatus,
};
use super::watches::Replay;
use serde_json::Value;

use crate::application::bridge::{Bridge, BridgeError, Connector, Observer};
use crate::application::server::Server;
use crate::domain::catalog::ToolId;
use crate::domain::{LoggingLevel, SessionId};

/// How one attempt to bring an upstream up ended.
enum Attempt {
    Up,
    Failed(UpstreamError),
    /// The upstream was removed or replaced meanwhile: nothing to do.
    Superseded,
}

impl State {
    /// The first scope rule naming a tool of `name` that its catalog
    /// holds no record of, among those not on their way out.
    pub(super) fn rule_naming_nothing(&self, name: &str) -> Option<ToolId> {
        self.scopes
            .keys()
            .filter(|id| id.as_str().split_once('/').map(|(upstream, _)| upstream) == Some(name))
            .filter(|id| !self.retiring.contains(*id))
            .find(|id| self.catalog.get(id).is_none())
            .cloned()
    }

    /// The upstream `name`, if it is still the one of `generation`.
    pub(super) fn upstream_mut(&mut self, name: &str, generation: u64) -> Option<&mut Upstream> {
        self.upstreams
            .get_mut(name)
            .filter(|u| u.generation == generation)
    }
}

impl Gateway {
    /// What hears the upstream `name` of `generation`: it asks for a
    /// refresh whenever the upstream says its tools changed, passes its
    /// other announcements to the sessions under the gateway's names, and
    /// asks for a reconnection when the kept connection ends.
    fn observer_for(&self, name: &str, generation: u64) -> Arc<dyn Observer> {
        Arc::new(UpstreamEvents {
            name: name.to_owned(),
            generation,
            gateway: Arc::downgrade(&self.inner),
        })
    }

    /// Adds the upstream called `name` (the namespace of its tools), opened
    /// through `connector`, and makes a first attempt to connect and load
    /// its tools.
    ///
    /// Upstreams may be added concurrently; none waits for another.
    ///
    /// # Errors
    ///
    /// [`UpstreamError::Name`] when the name is taken or unusable; otherwise
    /// why the first attempt failed. The upstream is kept all the same and
    /// the gateway retries it with a backoff, so a caller may log the error
    /// and go on serving the others.
    pub async fn add_upstream(
        &self,
        name: &str,
        connector: Connector,
        options: UpstreamOptions,
    ) -> Result<(), UpstreamError> {
        self.install(name, connector, options, false).await
    }

    /// Replaces the upstream called `name` with one opened through
    /// `connector` under `options` (a reload changed its settings), or adds
    /// it if there is none, and makes a first attempt to connect and list
    /// its tools.
    ///
    /// The replacement is made before the break: while the new connection
    /// comes up, the one it replaces (if up) goes on carrying calls and its
    /// tools stay listed, so sessions keep their activations; the new
    /// listing is then applied as a refresh is (a tool that changed is held
    /// to its pin, one gone leaves the sessions that had it), and in the
    /// same moment calls start going to the new connection. A tool the new
    /// policy no longer admits leaves at once; the rest of the new settings
    /// serve from the new listing on. The old connection closes once the
    /// calls already on it have ended, within its timeout, or when the
    /// first attempt fails: a replacement that cannot come up leaves the
    /// upstream down and retried on its new settings alone.
    ///
    /// # Errors
    ///
    /// As [`Self::add_upstream`].
    pub async fn replace_upstream(
        &self,
        name: &str,
        connector: Connector,
        options: UpstreamOptions,
    ) -> Result<(), UpstreamError> {
        self.install(name, connector, options, true).await
    }

    /// [`Self::add_upstream`], or with `replace`
    /// [`Self::replace_upstream`].
    async fn install(
        &self,
        name: &str,
        connector: Connector,
        options: UpstreamOptions,
        replace: bool,
    ) -> Result<(), UpstreamError> {
        // What another instance recorded at the upstream's first use, read
        // before the lock every list and call waits on.
        let shared_first_use = if options.trust == Trust::OnFirstUse {
            self.shared_first_use(name).await
        } else {
            None
        };
        let (generation, replaced, touched, withdrawn) = {
            let mut state = lock(&self.inner.state);
            let prefix = names::prefix_for(name);
            let readable = names::readable_name(name, names::MAX_UPSTREAM_NAME);
            let taken = |state: &State| {
                state.upstreams.contains_key(name)
                    || state.upstreams.values().any(|u| u.prefix == prefix)
            };
            if !readable || name.contains('/') || (!replace && taken(&state)) {
                return Err(UpstreamError::Name(name.to_owned()));
            }
            let replaced = if replace {
                state.upstreams.remove(name)
            } else {
                None
            };
            if taken(&state) {
                // Only another upstream's prefix: the one replaced is back.
                if let Some(replaced) = replaced {
                    state.upstreams.insert(name.to_owned(), replaced);
                }
                return Err(UpstreamError::Name(name.to_owned()));
            }
            // What the new settings no longer offer leaves at once, not
            // once the replacement has listed: an operator who denies a
            // tool means now.
            let withdrawn: Vec<ToolId> = replaced.as_ref().map_or_else(Vec::new, |old| {
                let listed_under = old.listed_under();
                state
                    .catalog
                    .records()
                    .filter(|r| matches!(&r.source, ToolSource::Upstream(u) if u == name))
                    .filter(|r| {
                        !options
                            .tools
                            .admits(listed_under.upstream_name(r.source_name()))
                    })
                    .map(|r| r.id.clone())
                    .collect()
            });
            let mut touched = Vec::new();
            if !withdrawn.is_empty() {
                let catalog = Arc::make_mut(&mut state.catalog);
                for id in &withdrawn {
                    catalog.remove(id);
                }
                touched = state.rebuild_sessions(self.inner.disclosure).0;
            }
            let mut upstream = Upstream::new(connector, options, prefix);
            // What carried the calls of the one replaced carries them on.
            upstream.predecessor = replaced.as_ref().and_then(Upstream::serving);
            let serving = upstream.predecessor.as_ref().map(|p| p.bridge.clone());
            // The shared record is every instance's word; the state file
            // is this one's.
            let recorded = match (&state.trust_store, upstream.options.trust) {
                (_, Trust::OnFirstUse) if shared_first_use.is_some() => shared_first_use,
                (Some(store), Trust::OnFirstUse) => store.first_use(name),
                _ => None,
            };
            // Used before (recorded in the store): what was trusted then is
            // trusted now, and nothing more. First use in this process, by
            // an upstream of this name a reload replaced, is in `first_used`
            // already.
            if let Some(recorded) = recorded {
                for (id, digest) in recorded {
                    state.first_use.pin(id, digest);
                }
                state.first_used.insert(name.to_owned());
            }
            let generation = upstream.generation;
            state.upstreams.insert(name.to_owned(), upstream);
            // Its first-use pins count again now that it is here (and a
            // replacement's trust, changed, holds the tools still listed).
            touched.extend(state.repin(self.inner.disclosure));
            touched.sort_unstable();
            touched.dedup();
            (
                generation,
                replaced.map(|replaced| (replaced, serving)),
                touched,
                withdrawn,
            )
        };
        self.register_upstream_tools(withdrawn.into_iter().map(|id| (id, None)).collect());
        for session in touched {
            self.inner.server.tools_changed_for(session);
        }
        // The connection replaced, unless it serves on as the predecessor,
        // and one still coming up for it: closed once the calls on them
        // end. Work still running for it finds it superseded.
        if let Some((replaced, serving)) = replaced {
            for bridge in replaced.bridges() {
                if serving.as_ref().is_none_or(|serving| !serving.same(bridge)) {
                    upstream::retire(bridge.clone(), replaced.options.timeout);
                }
            }
        }
        // On a task of its own, so a caller that stops waiting (a timeout
        // around this call) leaves neither a refresh marked as running nor
        // an upstream that is never retried.
        let gateway = self.clone();
        let owned = name.to_owned();
        let first = tokio::spawn(async move {
            let outcome = gateway.attempt(&owned, generation).await;
            if matches!(outcome, Attempt::Failed(_)) {
                gateway.reconnect_later(&owned, generation);
            }
            outcome
        });
        match first.await {
            Ok(Attempt::Up | Attempt::Superseded) => Ok(()),
            Ok(Attempt::Failed(error)) => Err(error),
            // The attempt's task ended without an outcome (the runtime is
            // shutting down).
            Err(error) => Err(UpstreamError::Connect {
                upstream: name.to_owned(),
                source: Box::new(error),
            }),
        }
    }

    /// One attempt to open `name` of `generation` and load its tools; its
    /// health says how it went.
    async fn attempt(&self, name: &str, generation: u64) -> Attempt {
        // What the connection it replaces offers, if any: its prompts and
        // resources leave the lists when this one takes over.
        let (connector, options, replaced) = {
            let mut state = lock(&self.inner.state);
            let Some(upstream) = state.upstream_mut(name, generation) else {
                return Attempt::Superseded;
            };
            let replaced = upstream
                .predecessor
                .as_ref()
                .map(|predecessor| Offers::of(&predecessor.bridge))
                .unwrap_or_default();
            (
                upstream.connector.clone(),
                upstream.options.clone(),
                replaced,
            )
        };
        // The gateway's server reports the downgrades its upstreams' replies
        // take, whatever the options it was given say.
        let mut options = options;
        options.bridge.observer = self.inner.server.observer().clone();
        let timeout = options.timeout;
        let observer = self.observer_for(name, generation);
        let bridge = match upstream::open(name, &connector, &options, observer).await {
            Ok(bridge) => bridge,
            Err(error) => return self.failed(name, generation, error, None).await,
        };
        let Some(client) = bridge.client() else {
            let error = UpstreamError::Connect {
                upstream: name.to_owned(),
                source: Box::new(BridgeError::Closed),
            };
            return self.failed(name, generation, error, Some(bridge)).await;
        };
        // Installed, but not yet up: calls are refused until its tools are
        // listed, so none is sent on the strength of an earlier listing.
        let claimed = {
            let mut state = lock(&self.inner.state);
            match state.upstream_mut(name, generation) {
                Some(upstream) => {
                    upstream.client = Some(client.clone());
                    upstream.bridge = Some(bridge.clone());
                    // This first listing is the upstream's refresh, unless
                    // one is already running (on the connection before):
                    // then that one keeps the mark, and the order of what
                    // they list is kept by their sequence numbers.
                    let claimed = !upstream.refreshing;
                    upstream.refreshing = true;
                    Some((claimed, upstream.predecessor.is_some()))
                }
                None => None,
            }
        };
        let Some((claimed, replacing)) = claimed else {
            bridge.close().await;
            return Attempt::Superseded;
        };
        // Installed: its calls parked for a client's input may be retried
        // through any instance, which carries the retry here. A
        // replacement's, once it takes over from its predecessor (in
        // the refresh that applies its listing): until then the retries
        // of calls parked on the predecessor go there.
        if !replacing {
            self.share_parked(&bridge, name);
        }
        let listed = tokio::time::timeout(timeout, self.refresh_generation(name, generation)).await;
        if claimed && self.refreshed(name, generation) {
            // Announced while the first listing ran: listed again on a task
            // of its own, so this attempt's answer does not wait for it.
            let gateway = self.clone();
            let name = name.to_owned();
            tokio::spawn(async move { gateway.refresh_runs(&name, generation).await });
        }
        match listed {
            Ok(Ok(())) => {
                // A scope rule naming a tool this upstream does not list is
                // a typo that would leave the tool it meant open: the
                // upstream stays down until the rule is mended, as the
                // gateway's configuration check refuses it at start.
                if let Some(rule) = self.rule_naming_nothing(name) {
                    let error = UpstreamError::ScopeRule {
                        upstream: name.to_owned(),
                        rule,
                    };
                    return self.failed(name, generation, error, Some(bridge)).await;
                }
                // Listed and applied on a connection still open: a listing
                // that found the connection gone (it ended meanwhile)
                // applied nothing, and a replacement's predecessor would
                // still be serving.
                let applied =
                    lock(&self.inner.state)
                        .upstream_mut(name, generation)
                        .map(|upstream| {
                            upstream.predecessor.is_none()
                                && upstream
                                    .client
                                    .as_ref()
                                    .is_some_and(|open| open.closed().is_none())
                        });
                if applied == Some(false) {
                    let error = UpstreamError::Connect {
                        upstream: name.to_owned(),
                        source: Box::new(BridgeError::Closed),
                    };
                    return self.failed(name, generation, error, Some(bridge)).await;
                }
                let mut state = lock(&self.inner.state);
                let Some(upstream) = state.upstream_mut(name, generation) else {
                    return Attempt::Superseded;
                };
                upstream.up_since = Some(Instant::now());
                if let Some(version) = client.version() {
                    upstream.health = UpstreamHealth::Up { version };
                }
                let prefix = upstream.prefix.clone();
                // What sessions watched through the bridge before this one,
                // told under the lock their subscriptions and ends take.
                for watch in state.watches.replay(&prefix) {
                    match watch {
                        Replay::Subscribed {
                            session,
                            declared,
                            uri,
                        } => bridge.watch_for_session(session, &declared, &uri, true),
                        Replay::Listened { session, uri } => bridge.watch(session, &uri, true),
                    }
                }
                drop(state);
                // Its prompts and resources join the lists (and those of
                // the connection it replaced leave them): sessions that
                // listed them while it was away hear of it.
                self.lists_changed_soon(Offers::of(&bridge).or(replaced));
                Attempt::Up
            }
            Ok(Err(source)) => {
                let error = UpstreamError::List {
                    upstream: name.to_owned(),
                    source,
                };
                self.failed(name, generation, error, Some(bridge)).await
            }
            Err(_) => {
                let error = UpstreamError::TimedOut {
                    upstream: name.to_owned(),
                    after: timeout,
                };
                self.failed(name, generation, error, Some(bridge)).await
            }
        }
    }

    /// Lets calls of `name` parked on `bridge` for a client's input be
    /// retried through any instance.
    pub(super) fn share_parked(&self, bridge: &Bridge, name: &str) {
        if let Some(parked) = self.inner.parked.get() {
            bridge.share(parked, name);
        }
    }

    /// [`State::rule_naming_nothing`].
    fn rule_naming_nothing(&self, name: &str) -> Option<ToolId> {
        lock(&self.inner.state).rule_naming_nothing(name)
    }

    /// Records a failed attempt: the upstream is down, and the bridge the
    /// attempt opened, if any, is closed.
    async fn failed(
        &self,
        name: &str,
        generation: u64,
        error: UpstreamError,
        opened: Option<Bridge>,
    ) -> Attempt {
        let retired = {
            let mut state = lock(&self.inner.state);
            let mut retired = Offers::default();
            if let Some(upstream) = state.upstream_mut(name, generation) {
                upstream.failures = upstream.failures.saturating_add(1);
                upstream.health = UpstreamHealth::Down {
                    reason: error.to_string(),
                    attempts: upstream.failures,
                };
                upstream.client = None;
                upstream.bridge = None;
                // A replacement that cannot come up does not leave the
                // settings it replaces serving.
                if let Some(predecessor) = upstream.predecessor.take() {
                    retired = Offers::of(&predecessor.bridge);
                    predecessor.retire();
                }
            }
            retired
        };
        // What the retired connection offered leaves the lists.
        self.lists_changed_soon(retired);
        // Closed outside the lock: closing ends the connection, and its end
        // is reported back to this gateway.
        if let Some(bridge) = opened {
            bridge.close().await;
        }
        Attempt::Failed(error)
    }

    /// Retries `name` of `generation` with a backoff until it is up, unless
    /// a retry loop is already running for it. The loop holds the gateway
    /// only while it tries, so a gateway that is dropped stops it, and it
    /// ends when its upstream is removed or replaced.
    fn reconnect_later(&self, name: &str, generation: u64) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let first = {
            let mut state = lock(&self.inner.state);
            let Some(upstream) = state.upstream_mut(name, generation) else {
                return;
            };
            if upstream.reconnecting {
                return;
            }
            upstream.reconnecting = true;
            upstream.failures.max(1)
        };
        let weak = Arc::downgrade(&self.inner);
        let name = name.to_owned();
        runtime.spawn(async move {
            let mut attempt = first;
            loop {
                tokio::time::sleep(upstream::backoff(attempt)).await;
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                let gateway = Self { inner };
                match gateway.attempt(&name, generation).await {
                    Attempt::Superseded => return,
                    Attempt::Up => {
                        if gateway.reconnected(&name, generation) {
                            tracing::info!(upstream = %name, attempt, "the upstream is up again");
                            return;
                        }
                    }
                    Attempt::Failed(error) => {
                        tracing::warn!(upstream = %name, attempt, %error, "reconnecting failed");
                    }
                }
                attempt = attempt.saturating_add(1);
            }
        });
    }

    /// Ends the retry loop of `name` of `generation` if its connection is
    /// still open; false when it already ended again, and the loop goes on
    /// (the end was reported while the loop still ran, so no other loop was
    /// started for it).
    fn reconnected(&self, name: &str, generation: u64) -> bool {
        let mut state = lock(&self.inner.state);
        let Some(upstream) = state.upstream_mut(name, generation) else {
            return true;
        };
        let open = upstream
            .client
            .as_ref()
            .is_some_and(|client| client.closed().is_none());
        if open {
            upstream.reconnecting = false;
        }
        open
    }

    /// The connection to `name` of `generation` ended: unless it was
    /// already replaced, the upstream is down until it is reopened. One
    /// that dies soon after it came up counts as a failed attempt, so a
    /// server that crashes on start is restarted ever more slowly.
    fn upstream_closed(&self, name: &str, generation: u64, reason: &str) {
        let (down, ended) = {
            let mut state = lock(&self.inner.state);
            let Some(upstream) = state.upstream_mut(name, generation) else {
                return;
            };
            match &upstream.client {
                Some(client) if client.closed().is_some() => {
                    let stable = upstream
                        .up_since
                        .is_some_and(|since| since.elapsed() >= STABLE_FOR);
                    upstream.failures = if stable {
                        0
                    } else {
                        upstream.failures.saturating_add(1)
                    };
                    upstream.client = None;
                    upstream.health = UpstreamHealth::Down {
                        reason: format!("the connection ended: {reason}"),
                        attempts: upstream.failures,
                    };
                    (true, upstream.bridge.take())
                }
                _ => (false, None),
            }
        };
        // The bridge goes with its kept connection: sessions' connections
        // to the server that ended are opened anew on the next bridge. Its
        // prompts and resources leave the lists until then.
        if let Some(bridge) = ended {
            self.lists_changed_soon(Offers::of(&bridge));
            tokio::spawn(async move { bridge.close().await });
        }
        if down {
            tracing::warn!(upstream = %name, %reason, "the upstream's connection ended; reconnecting");
            self.reconnect_later(name, generation);
        }
    }

    /// Takes `name` of `generation` down for `reason`: its connection
    /// closed, its calls failing, and a connection tried again later.
    fn take_down(&self, name: &str, generation: u64, reason: &str) {
        let ended = {
            let mut state = lock(&self.inner.state);
            let Some(upstream) = state.upstream_mut(name, generation) else {
                return;
            };
            upstream.failures = upstream.failures.saturating_add(1);
            upstream.client = None;
            upstream.refreshing = false;
            upstream.refresh_again = false;
            upstream.health = UpstreamHealth::Down {
                reason: reason.to_owned(),
                attempts: upstream.failures,
            };
            upstream.bridge.take()
        };
        if let Some(bridge) = ended {
            self.lists_changed_soon(Offers::of(&bridge));
            tokio::spawn(async move { bridge.close().await });
        }
        self.reconnect_later(name, generation);
    }

    /// Asks for `name` of `generation` to be listed again: now, on a task of
    /// its own, unless a refresh is running, which then runs once more.
    fn refresh_later(&self, name: &str, generation: u64) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        {
            let mut state = lock(&self.inner.state);
            let Some(upstream) = state.upstream_mut(name, generation) else {
                return;
            };
            if upstream.refreshing {
                upstream.refresh_again = true;
                return;
            }
            upstream.refreshing = true;
        }
        let gateway = self.clone();
        let name = name.to_owned();
        runtime.spawn(async move { gateway.refresh_runs(&name, generation).await });
    }

    /// Refreshes `name` of `generation` until no announcement is pending.
    async fn refresh_runs(&self, name: &str, generation: u64) {
        loop {
            let timeout = {
                let mut state = lock(&self.inner.state);
                let Some(upstream) = state.upstream_mut(name, generation) else {
                    return;
                };
                upstream.options.timeout
            };
            match tokio::time::timeout(timeout, self.refresh_generation(name, generation)).await {
                Ok(Ok(())) => {}
                // An upstream serving already, whose list is now past the
                // bound: it is not held to its last list, which it no longer
                // serves (its calls would reach tools nobody approved), but
                // taken down, and connected again later.
                Ok(Err(error)) if super::refresh::past_the_bound(&error) => {
                    tracing::error!(upstream = %name, %error, "the upstream's tools are past the bound; taking it down");
                    self.take_down(name, generation, &error.to_string());
                    return;
                }
                Ok(Err(error)) => {
                    tracing::warn!(upstream = %name, %error, "refreshing the upstream's tools failed");
                }
                Err(_) => {
                    tracing::warn!(upstream = %name, "refreshing the upstream's tools took longer than its timeout");
                }
            }
            if !self.refreshed(name, generation) {
                return;
            }
        }
    }

    /// A refresh of `name` of `generation` is done; whether another was
    /// asked for meanwhile (then the caller runs it, and the upstream stays
    /// marked as refreshing).
    fn refreshed(&self, name: &str, generation: u64) -> bool {
        let mut state = lock(&self.inner.state);
        let Some(upstream) = state.upstream_mut(name, generation) else {
            return false;
        };
        let again = std::mem::take(&mut upstream.refresh_again);
        upstream.refreshing = again;
        again
    }

    /// Removes the upstream called `name`: its tools leave the catalog and
    /// the server, sessions whose lists change are told, and its
    /// connections are closed once the calls already on them have ended
    /// (within the upstream's timeout), so that a reload replacing it fails
    /// no call in flight. Work still running for it finds it gone and
    /// changes nothing. Returns whether there was one.
    pub async fn remove_upstream(&self, name: &str) -> bool {
        let (removed, gone, touched) = {
            let mut state = lock(&self.inner.state);
            let Some(upstream) = state.upstreams.remove(name) else {
                return false;
            };
            let pins = state.effective_pins();
            state.pins = pins.clone();
            let gone = Arc::make_mut(&mut state.catalog).sync_upstream(name, Vec::new(), &pins);
            let (touched, _dropped) = state.rebuild_sessions(self.inner.disclosure);
            (upstream, gone, touched)
        };
        self.register_upstream_tools(gone.into_iter().map(|(id, _)| (id, None)).collect());
        for session in touched {
            self.inner.server.tools_changed_for(session);
        }
        // Its calls in flight end before its connections go.
        if let Some(predecessor) = removed.predecessor {
            predecessor.retire();
        }
        if let Some(bridge) = removed.bridge {
            upstream::retire(bridge, removed.options.timeout);
        }
        self.lists_changed_soon(Offers::ALL);
        tracing::info!(upstream = %name, "removed");
        true
    }

    /// How many upstreams are up, connecting and down: for a probe that
    /// may come often and from anyone, so it copies nothing and reads no
    /// catalog, unlike [`upstreams`](Self::upstreams).
    #[must_use]
    pub fn upstream_counts(&self) -> UpstreamCounts {
        let state = lock(&self.inner.state);
        let mut counts = UpstreamCounts::default();
        for upstream in state.upstreams.values() {
            match upstream.health() {
                UpstreamHealth::Up { .. } => counts.up += 1,
                UpstreamHealth::Connecting => counts.connecting += 1,
                UpstreamHealth::Down { .. } => counts.down += 1,
            }
        }
        counts
    }

    /// Every upstream, in name order, with its health.
    #[must_use]
    pub fn upstreams(&self) -> Vec<UpstreamStatus> {
        let state = lock(&self.inner.state);
        state
            .upstreams
            .iter()
            .map(|(name, upstream)| UpstreamStatus {
                name: name.clone(),
                health: upstream.health(),
                tools: state
                    .catalog
                    .records()
                    .filter(|r| matches!(&r.source, ToolSource::Upstream(u) if u == name))
                    .count(),
            })
            .collect()
    }
}

/// Hears one upstream's announcements, and the end of the connection its
/// bridge keeps, for the gateway.
#[derive(Debug)]
struct UpstreamEvents {
    name: String,
    generation: u64,
    gateway: Weak<Inner>,
}

/// How long announcements of one list's change are gathered into one.
const ANNOUNCE_AFTER: Duration = Duration::from_millis(100);

impl UpstreamEvents {
    fn gateway(&self) -> Option<Gateway> {
        self.gateway.upgrade().map(|inner| Gateway { inner })
    }
}

impl Gateway {
    /// Announces that the prompt and resource lists changed, those that
    /// `offers` says did, shortly: once for every change told meanwhile.
    /// Every connection of an upstream's bridge tells its upstream's
    /// change (one per legacy session), and several upstreams may come up
    /// at once.
    fn lists_changed_soon(&self, offers: Offers) {
        let inner = &self.inner;
        let prompts: fn(&Server) = Server::prompts_changed;
        let due = [
            (offers.prompts, &inner.prompts_pending, prompts),
            (
                offers.resources,
                &inner.resources_pending,
                Server::resources_changed,
            ),
        ];
        for (changed, pending, announce) in due {
            if !changed || pending.swap(true, Ordering::AcqRel) {
                continue;
            }
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                pending.store(false, Ordering::Release);
                continue;
            };
            let (weak, pending) = (Arc::downgrade(inner), Arc::clone(pending));
            runtime.spawn(async move {
                tokio::time::sleep(ANNOUNCE_AFTER).await;
                pending.store(false, Ordering::Release);
                if let Some(inner) = weak.upgrade() {
                    announce(&inner.server);
                }
            });
        }
    }
}

/// Which of the lists an upstream's coming or going changes.
#[derive(Clone, Copy, Debug, Default)]
struct Offers {
    prompts: bool,
    resources: bool,
}

impl Offers {
    /// What the upstream `bridge` reaches offers.
    fn of(bridge: &Bridge) -> Self {
        let capabilities = &bridge.upstream().capabilities;
        Self {
            prompts: capabilities.prompts.is_some(),
            resources: capabilities.resources.is_some(),
        }
    }

    const ALL: Self = Self {
        prompts: true,
        resources: true,
    };

    /// What either offers.
    const fn or(self, other: Self) -> Self {
        Self {
            prompts: self.prompts || other.prompts,
            resources: self.resources || other.resources,
        }
    }
}

impl Observer for UpstreamEvents {
    fn tools_changed(&self) {
        if let Some(gateway) = self.gateway() {
            gateway.refresh_later(&self.name, self.generation);
        }
    }

    fn prompts_changed(&self) {
        if let Some(gateway) = self.gateway() {
            gateway.lists_changed_soon(Offers {
                prompts: true,
                resources: false,
            });
        }
    }

    fn resources_changed(&self) {
        if let Some(gateway) = self.gateway() {
            gateway.lists_changed_soon(Offers {
                prompts: false,
                resources: true,
            });
        }
    }

    fn resource_updated(&self, session: Option<SessionId>, uri: &str) {
        let Some(gateway) = self.gateway() else {
            return;
        };
        // Also from the connection a replacement is coming up for, which
        // serves its subscriptions meanwhile.
        let prefix = lock(&gateway.inner.state)
            .upstreams
            .get(&self.name)
            .filter(|u| u.hears(self.generation))
            .map(|u| u.prefix.clone());
        // Only the sessions subscribed to the URI under the gateway's name
        // for it hear of it; a session's own subscription, only that session.
        if let Some(prefix) = prefix {
            let outer = names::outer_uri(&prefix, uri);
            match session {
                Some(session) => gateway.inner.server.resource_updated_for(session, outer),
                None => gateway.inner.server.resource_updated(outer),
            }
        }
    }

    fn log(&self, session: SessionId, level: LoggingLevel, logger: Option<&str>, data: &Value) {
        if let Some(gateway) = self.gateway() {
            let logger = logger.map(str::to_owned);
            gateway
                .inner
                .server
                .log_to(session, level, logger, data.clone());
        }
    }

    fn kept_closed(&self, reason: &str) {
        // Handled on a task of its own: this is called from inside the
        // client, which may be closing while the gateway holds its lock.
        let (Some(gateway), Ok(runtime)) = (self.gateway(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let name = self.name.clone();
        let generation = self.generation;
        let reason = reason.to_owned();
        runtime.spawn(async move { gateway.upstream_closed(&name, generation, &reason) });
    }
}
