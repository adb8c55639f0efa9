//! The gateway at work: upstream clients feeding the catalog, a server
//! offering each session its own tool set, and every call through the gate.
//!
//! Each cataloged tool is registered with the server under its catalog id
//! (`upstream/name`). The server asks the gateway, for every `tools/list`
//! and `tools/call`, whether the session may see the tool; the tool's handler
//! asks the [`ExecutionGate`] again before forwarding, so a tool whose
//! definition drifted after it was given to a session is refused by name
//! even while it is still listed somewhere.
//!
//! In progressive mode a session starts with the discovery tools only
//! (`discovery`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio::sync::mpsc;

use super::catalog::{CatalogChange, Pins, ToolCatalog, ToolSource, Upsert};
use super::gate::ExecutionGate;
use super::session::{DropReason, DroppedActivation, SessionToolSet};
use super::trust::{Approval, Trust, TrustStore};
use super::upstream::{
    self, Upstream, UpstreamError, UpstreamHealth, UpstreamOptions, UpstreamStatus,
};
use crate::application::bridge::Connector;
use crate::application::client::{Client, ClientError, ClientHandler, Notice, RequestOptions};
use crate::application::server::{AuthContext, PeerSession};
use crate::application::server::{
    Call, CallError, Server, ServerBuilder, ToolAccess, ToolSpec, ToolVisibility,
};
use crate::domain::Refusal;
use crate::domain::SessionId;
use crate::domain::catalog::{Provenance, SchemaDigest, ToolId};
use crate::domain::ir::{JsonObject, ToolResult};
use crate::domain::jsonrpc::{ErrorCode, ErrorObject};
use crate::wire::Tool;

/// How many sessions' tool sets are kept; the oldest goes first.
pub const MAX_SESSIONS: usize = 10_000;

/// How many drift reports are kept for [`Gateway::drift`].
pub const MAX_DRIFT_REPORTS: usize = 256;

/// How sessions get their tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disclosure {
    /// Every verified tool is core for every session.
    Default,
    /// Sessions start with the discovery tools and activate the rest exactly.
    Progressive,
}

/// A change to a tool an operator should know about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriftReport {
    /// The tool.
    pub id: ToolId,
    /// Its digest before, if it existed.
    pub old: Option<SchemaDigest>,
    /// Its digest now, if it still exists.
    pub new: Option<SchemaDigest>,
    /// Session activations dropped because of it.
    pub dropped_activations: usize,
}

pub(super) struct State {
    /// Shared, so a search ranks a snapshot without holding the lock every
    /// session's lists and calls wait on; changed copy-on-write.
    pub(super) catalog: Arc<ToolCatalog>,
    /// The pins in force, derived from the three below ([`State::repin`]).
    pub(super) pins: Pins,
    /// The configuration's pins.
    configured: Pins,
    /// What was trusted on first use, for tools the configuration does not
    /// pin.
    first_use: Pins,
    /// The operator's approvals on the running gateway; each holds while
    /// the configuration pins its tool as it did when it was made.
    approved: BTreeMap<ToolId, Approval>,
    upstreams: BTreeMap<String, Upstream>,
    /// The scope a caller needs to see and call a tool, by id.
    pub(super) scopes: BTreeMap<ToolId, String>,
    pub(super) sessions: BTreeMap<SessionId, SessionToolSet>,
    /// Why each session lost the activations it lost, so a call to one is
    /// refused by naming the reason rather than as an unknown tool.
    pub(super) lost: BTreeMap<SessionId, BTreeMap<ToolId, String>>,
    pub(super) drift: VecDeque<DriftReport>,
    /// Where pins trusted on first use are kept beyond this process.
    trust_store: Option<Arc<dyn TrustStore>>,
    /// The session standing for each authenticated 2026-07-28 principal,
    /// whose activations it keeps across requests.
    principals: HashMap<String, KeptPrincipal>,
    next_principal: u64,
}

/// A principal's session, and when it was last used.
struct KeptPrincipal {
    session: SessionId,
    used: Instant,
}

/// How many principals' activations are kept; the least recently used goes
/// first.
pub const MAX_PRINCIPALS: usize = 10_000;

/// How long a principal's activations outlive its last request.
pub const PRINCIPAL_IDLE: Duration = Duration::from_secs(3600);

/// How many lost activations are remembered per session.
const MAX_LOST: usize = 256;

impl State {
    /// The session's set, built on first use and rebuilt (carrying what
    /// still matches) when the catalog moved on.
    fn session_set(&mut self, session: SessionId, disclosure: Disclosure) -> &SessionToolSet {
        let stale = self
            .sessions
            .get(&session)
            .is_none_or(|set| set.is_stale(&self.catalog));
        if stale {
            let next = match self.sessions.get(&session) {
                Some(set) => {
                    let (next, dropped) = set
                        .rebuilt_for_catalog(&self.catalog, disclosure == Disclosure::Progressive);
                    report_dropped(session, &dropped);
                    self.remember_lost(session, &dropped);
                    next
                }
                None => {
                    if self.sessions.len() >= MAX_SESSIONS {
                        if let Some((old, _)) = self.sessions.pop_first() {
                            self.lost.remove(&old);
                        }
                    }
                    fresh_set(session, &self.catalog, disclosure)
                }
            };
            self.sessions.insert(session, next);
        }
        self.sessions
            .entry(session)
            .or_insert_with(|| fresh_set(session, &self.catalog, disclosure))
    }

    fn remember_lost(&mut self, session: SessionId, dropped: &[DroppedActivation]) {
        if dropped.is_empty() {
            return;
        }
        let lost = self.lost.entry(session).or_default();
        for d in dropped {
            let id = &d.activation.id;
            let why = match &d.reason {
                DropReason::Removed => format!("{id} is no longer offered by its upstream"),
                DropReason::Drifted { pinned, current } => format!(
                    "{id} changed after it was activated (digest {pinned}, now {current}); \
                     its activation was dropped and it must be approved and activated again"
                ),
                DropReason::Untrusted { pinned, current } => format!(
                    "{id} was {pinned} when activated and is {current} now; its activation was dropped"
                ),
                DropReason::OtherSession => continue,
            };
            if lost.len() >= MAX_LOST {
                lost.pop_first();
            }
            lost.insert(id.clone(), why);
        }
    }

    /// The set serving `peer` and `caller`: its session's, kept and rebuilt,
    /// when the session outlives the request; for a 2026-07-28 request over
    /// HTTP, which is its own session, the set its authenticated principal
    /// keeps across requests (progressive mode), or else a fresh core that
    /// keeps nothing.
    pub(super) fn set_for(
        &mut self,
        peer: &PeerSession,
        caller: &AuthContext,
        disclosure: Disclosure,
    ) -> SessionToolSet {
        match self.keeping_session(peer, caller, disclosure) {
            Some(session) => self.session_set(session, disclosure).clone(),
            None => fresh_set(peer.session(), &self.catalog, disclosure),
        }
    }

    /// The session whose set outlives this request: the peer's own when it
    /// lasts, else the authenticated principal's (in progressive mode, where
    /// there is anything to keep), else none. Anonymous 2026-07-28 callers
    /// share no set: they would see each other's activations.
    pub(super) fn keeping_session(
        &mut self,
        peer: &PeerSession,
        caller: &AuthContext,
        disclosure: Disclosure,
    ) -> Option<SessionId> {
        if peer.is_lasting() {
            return Some(peer.session());
        }
        if disclosure != Disclosure::Progressive {
            return None;
        }
        let key = caller.principal_key()?;
        Some(self.principal_session(key))
    }

    /// The session standing for `principal`, made or renewed now. One idle
    /// past [`PRINCIPAL_IDLE`] starts afresh; past [`MAX_PRINCIPALS`] the
    /// least recently used goes.
    fn principal_session(&mut self, principal: String) -> SessionId {
        let now = Instant::now();
        let fresh = self
            .principals
            .get(&principal)
            .filter(|kept| now.duration_since(kept.used) <= PRINCIPAL_IDLE)
            .map(|kept| kept.session);
        if let Some(session) = fresh {
            if let Some(kept) = self.principals.get_mut(&principal) {
                kept.used = now;
            }
            return session;
        }
        if let Some(expired) = self.principals.remove(&principal) {
            self.forget_session(expired.session);
        }
        if self.principals.len() >= MAX_PRINCIPALS {
            let oldest = self
                .principals
                .iter()
                .min_by_key(|(_, kept)| kept.used)
                .map(|(key, _)| key.clone());
            if let Some(kept) = oldest.and_then(|key| self.principals.remove(&key)) {
                self.forget_session(kept.session);
            }
        }
        // Numbered from the top of the range, so never a session the server
        // numbered.
        self.next_principal = self.next_principal.wrapping_add(1);
        let session = SessionId::new(u64::MAX - self.next_principal);
        self.principals
            .insert(principal, KeptPrincipal { session, used: now });
        session
    }

    fn forget_session(&mut self, session: SessionId) {
        self.sessions.remove(&session);
        self.lost.remove(&session);
    }

    /// What the server may do with `id` for `peer` and `caller`.
    fn access(
        &mut self,
        peer: &PeerSession,
        caller: &AuthContext,
        disclosure: Disclosure,
        id: &ToolId,
    ) -> ToolAccess {
        let set = self.set_for(peer, caller, disclosure);
        if set.is_core(id) || set.activation(id).is_some() {
            return ToolAccess::Granted;
        }
        match self.lost.get(set.session()).and_then(|lost| lost.get(id)) {
            Some(why) => ToolAccess::Refused(why.clone()),
            None => ToolAccess::Hidden,
        }
    }

    /// The pins in force: first-use trust, over it the configuration's pins,
    /// and over those each approval made against the configured pin still
    /// in force.
    fn effective_pins(&self) -> Pins {
        let mut pins = self.first_use.clone();
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
    fn repin(&mut self, disclosure: Disclosure) -> Vec<SessionId> {
        self.pins = self.effective_pins();
        let pins = self.pins.clone();
        if Arc::make_mut(&mut self.catalog).repin(&pins).is_empty() {
            return Vec::new();
        }
        self.rebuild_sessions(disclosure).0
    }

    /// Rebuilds every session's set against the catalog as it is now:
    /// the sessions whose list changed, and how many activations each tool
    /// lost.
    fn rebuild_sessions(
        &mut self,
        disclosure: Disclosure,
    ) -> (Vec<SessionId>, HashMap<ToolId, usize>) {
        let sessions: Vec<SessionId> = self.sessions.keys().copied().collect();
        let mut dropped_by_tool: HashMap<ToolId, usize> = HashMap::new();
        let mut touched = Vec::new();
        for session in sessions {
            let Some(set) = self.sessions.get(&session) else {
                continue;
            };
            let (next, dropped) =
                set.rebuilt_for_catalog(&self.catalog, disclosure == Disclosure::Progressive);
            if !set.visible().eq(next.visible()) || !dropped.is_empty() {
                touched.push(session);
            }
            report_dropped(session, &dropped);
            self.remember_lost(session, &dropped);
            for d in &dropped {
                *dropped_by_tool.entry(d.activation.id.clone()).or_default() += 1;
            }
            self.sessions.insert(session, next);
        }
        (touched, dropped_by_tool)
    }

    fn record_drift(&mut self, report: DriftReport) {
        if self.drift.len() >= MAX_DRIFT_REPORTS {
            self.drift.pop_front();
        }
        self.drift.push_back(report);
    }
}

/// A new set for `session`: the core `disclosure` gives, no activations.
fn fresh_set(session: SessionId, catalog: &ToolCatalog, disclosure: Disclosure) -> SessionToolSet {
    match disclosure {
        Disclosure::Default => SessionToolSet::default_core_for_catalog(session, catalog),
        Disclosure::Progressive => SessionToolSet::progressive_core_for_catalog(session, catalog),
    }
}

fn report_dropped(session: SessionId, dropped: &[DroppedActivation]) {
    for d in dropped {
        tracing::warn!(
            %session,
            tool = %d.activation.id,
            reason = ?d.reason,
            "activation dropped"
        );
    }
}

pub(super) struct Inner {
    pub(super) server: Server,
    pub(super) disclosure: Disclosure,
    pub(super) state: Arc<Mutex<State>>,
    pub(super) refresh: mpsc::Sender<String>,
}

/// A gateway: one MCP server in front of many upstream servers.
///
/// Its upstreams are clients, opened by whoever knows where they are; the
/// crate's `connect` adapter shows a gateway put together end to end, and
/// `examples/gateway.rs` is one that runs.
#[derive(Clone)]
pub struct Gateway {
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("disclosure", &self.inner.disclosure)
            .finish_non_exhaustive()
    }
}

pub(super) fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Gateway {
    /// A gateway serving through a server built from `builder`, with
    /// `pins` vouching for upstream digests. The server's tool visibility
    /// is the gateway's.
    ///
    /// # Errors
    ///
    /// When the server cannot be built (no entropy for its state key).
    pub fn build(
        builder: ServerBuilder,
        disclosure: Disclosure,
        pins: Pins,
    ) -> Result<Self, crate::application::server::request_state::KeyError> {
        let state = Arc::new(Mutex::new(State {
            catalog: Arc::new(ToolCatalog::new()),
            configured: pins.clone(),
            first_use: Pins::default(),
            approved: BTreeMap::new(),
            pins,
            upstreams: BTreeMap::new(),
            scopes: BTreeMap::new(),
            sessions: BTreeMap::new(),
            lost: BTreeMap::new(),
            drift: VecDeque::new(),
            trust_store: None,
            principals: HashMap::new(),
            next_principal: 0,
        }));
        let seen = Arc::clone(&state);
        let visibility: ToolVisibility = Arc::new(move |peer, caller, name| {
            lock(&seen).access(peer, caller, disclosure, &ToolId::new(name))
        });
        let server = builder.tool_visibility(visibility).build()?;
        let (refresh, mut requests) = mpsc::channel::<String>(64);
        let gateway = Self {
            inner: Arc::new(Inner {
                server,
                disclosure,
                state,
                refresh,
            }),
        };
        if disclosure == Disclosure::Progressive {
            gateway.add_discovery_tools();
        }
        let weak = Arc::downgrade(&gateway.inner);
        tokio::spawn(async move {
            while let Some(upstream) = requests.recv().await {
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                let gateway = Self { inner };
                if let Err(error) = gateway.refresh(&upstream).await {
                    tracing::warn!(%upstream, %error, "refreshing the upstream's tools failed");
                }
            }
        });
        Ok(gateway)
    }

    /// The server to serve over any transport.
    #[must_use]
    pub fn server(&self) -> &Server {
        &self.inner.server
    }

    /// The client handler the gateway gives each connection to the
    /// upstream called `name`: it asks the gateway to refresh that
    /// upstream's tools whenever it says they changed, and to reconnect when
    /// the connection ends.
    fn notices_for(&self, name: &str) -> Arc<dyn ClientHandler> {
        Arc::new(UpstreamNotices {
            name: name.to_owned(),
            refresh: self.inner.refresh.clone(),
            gateway: Arc::downgrade(&self.inner),
        })
    }

    /// Keeps what is trusted on first use in `store` from now on, and takes
    /// what it already holds as the first use of the upstreams it names.
    /// Set it before adding upstreams.
    ///
    /// An approval recorded there holds while the configuration still pins
    /// the tool as it did when the approval was made; a configuration that
    /// pins it anew since is the newer word.
    pub fn set_trust_store(&self, store: Arc<dyn TrustStore>) {
        let mut state = lock(&self.inner.state);
        for approval in store.approvals() {
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
    pub fn set_pins(&self, pins: Pins) {
        lock(&self.inner.state).configured = pins;
        self.repin();
    }

    fn repin(&self) {
        let touched = lock(&self.inner.state).repin(self.inner.disclosure);
        for session in touched {
            self.inner.server.tools_changed_for(session);
        }
    }

    /// Vouches for each tool in `ids` as it is now, on the running gateway:
    /// its current digest becomes its pin (kept in the [`TrustStore`], so a
    /// restart holds it), it is verified again, and sessions whose lists
    /// change are told. A drifted tool approved this way is callable again
    /// at once wherever it is core; an activation it lost must be made
    /// again.
    ///
    /// # Errors
    ///
    /// [`ApproveError::Unknown`] naming the first id that is no upstream
    /// tool of the catalog; nothing is approved then.
    pub fn approve(&self, ids: &[ToolId]) -> Result<Approved, ApproveError> {
        let (approvals, touched, store) = {
            let mut state = lock(&self.inner.state);
            let mut approvals = Vec::with_capacity(ids.len());
            for id in ids {
                let record = state
                    .catalog
                    .get(id)
                    .filter(|r| matches!(r.source, ToolSource::Upstream(_)))
                    .ok_or_else(|| ApproveError::Unknown(id.clone()))?;
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
        let mut not_kept = None;
        if let Some(store) = store {
            for approval in &approvals {
                if let Err(error) = store.record_approval(approval) {
                    tracing::error!(tool = %approval.id, %error, "the approval could not be kept; a restart would forget it");
                    not_kept = Some(error.to_string());
                }
            }
        }
        for session in touched {
            self.inner.server.tools_changed_for(session);
        }
        Ok(Approved {
            approvals,
            not_kept,
        })
    }

    /// Requires `scope` of a caller to see and call the tool `id`, now and
    /// whenever the tool is registered again; the server's authorization
    /// answers a hidden tool as an unknown one.
    pub fn require_scope(&self, id: ToolId, scope: String) {
        let _registered = self
            .inner
            .server
            .set_tool_scope(id.as_str(), Some(scope.clone()));
        lock(&self.inner.state).scopes.insert(id, scope);
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
        {
            let mut state = lock(&self.inner.state);
            if name.is_empty() || name.contains('/') || state.upstreams.contains_key(name) {
                return Err(UpstreamError::Name(name.to_owned()));
            }
            let mut upstream = Upstream::new(connector, options);
            let recorded = match (&state.trust_store, upstream.options.trust) {
                (Some(store), Trust::OnFirstUse) => store.first_use(name),
                _ => None,
            };
            // Used before: recorded in the store, or trusted by an earlier
            // upstream of this name in this process (one a reload replaced).
            let prefix = format!("{name}/");
            let used_before = recorded.is_some()
                || state
                    .first_use
                    .iter()
                    .any(|(id, _)| id.as_str().starts_with(&prefix));
            if let Some(recorded) = recorded {
                // Used before: what was trusted then is trusted now, and
                // nothing more. A pin from configuration wins over it.
                for (id, digest) in recorded {
                    state.first_use.pin(id, digest);
                }
            }
            upstream.first_use_done = used_before;
            state.upstreams.insert(name.to_owned(), upstream);
            if used_before {
                let _touched = state.repin(self.inner.disclosure);
            }
        }
        let attempt = self.connect(name).await;
        if attempt.is_err() {
            self.reconnect_later(name);
        }
        attempt
    }

    /// One attempt to open `name` and load its tools; its health says how
    /// it went.
    async fn connect(&self, name: &str) -> Result<(), UpstreamError> {
        let (connector, timeout) = {
            let state = lock(&self.inner.state);
            let Some(upstream) = state.upstreams.get(name) else {
                return Ok(());
            };
            (upstream.connector.clone(), upstream.options.timeout)
        };
        let outcome = match upstream::open(name, &connector, self.notices_for(name), timeout).await
        {
            Ok(client) => {
                let version = client.version();
                if let Some(upstream) = lock(&self.inner.state).upstreams.get_mut(name) {
                    upstream.client = Some(client);
                    if let Some(version) = version {
                        upstream.health = UpstreamHealth::Up { version };
                    }
                }
                match tokio::time::timeout(timeout, self.refresh(name)).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(source)) => Err(UpstreamError::List {
                        upstream: name.to_owned(),
                        source,
                    }),
                    Err(_) => Err(UpstreamError::TimedOut {
                        upstream: name.to_owned(),
                        after: timeout,
                    }),
                }
            }
            Err(error) => Err(error),
        };
        if let Err(error) = &outcome {
            let closing = {
                let mut state = lock(&self.inner.state);
                state.upstreams.get_mut(name).and_then(|upstream| {
                    let attempts = match &upstream.health {
                        UpstreamHealth::Down { attempts, .. } => attempts.saturating_add(1),
                        _ => 1,
                    };
                    upstream.health = UpstreamHealth::Down {
                        reason: error.to_string(),
                        attempts,
                    };
                    upstream.client.take()
                })
            };
            // Closed outside the lock: closing tells the handler, which
            // takes it.
            if let Some(client) = closing {
                client.close().await;
            }
        }
        outcome
    }

    /// Retries `name` with a backoff until it is up, unless a retry loop is
    /// already running for it. The loop holds the gateway only while it
    /// tries, so a gateway that is dropped stops it.
    fn reconnect_later(&self, name: &str) {
        {
            let mut state = lock(&self.inner.state);
            let Some(upstream) = state.upstreams.get_mut(name) else {
                return;
            };
            if upstream.reconnecting {
                return;
            }
            upstream.reconnecting = true;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let weak = Arc::downgrade(&self.inner);
        let name = name.to_owned();
        let generation = lock(&self.inner.state)
            .upstreams
            .get(&name)
            .map(|u| u.generation);
        runtime.spawn(async move {
            let mut attempt = 1;
            loop {
                tokio::time::sleep(upstream::backoff(attempt)).await;
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                let gateway = Self { inner };
                // An upstream removed, or replaced by a reloaded one of the
                // same name, is no longer this loop's to open.
                let current = lock(&gateway.inner.state)
                    .upstreams
                    .get(&name)
                    .map(|u| u.generation);
                if current.is_none() || current != generation {
                    return;
                }
                match gateway.connect(&name).await {
                    Ok(()) => {
                        tracing::info!(upstream = %name, attempt, "the upstream is up again");
                        gateway.reconnected(&name);
                        return;
                    }
                    Err(error) => {
                        tracing::warn!(upstream = %name, attempt, %error, "reconnecting failed");
                    }
                }
                attempt = attempt.saturating_add(1);
            }
        });
    }

    fn reconnected(&self, name: &str) {
        if let Some(upstream) = lock(&self.inner.state).upstreams.get_mut(name) {
            upstream.reconnecting = false;
        }
    }

    /// The connection to `name` ended: unless it was already replaced, the
    /// upstream is down until it is reopened.
    fn upstream_closed(&self, name: &str, reason: &str) {
        let down = {
            let mut state = lock(&self.inner.state);
            let Some(upstream) = state.upstreams.get_mut(name) else {
                return;
            };
            match &upstream.client {
                Some(client) if client.closed().is_some() => {
                    upstream.client = None;
                    upstream.health = UpstreamHealth::Down {
                        reason: format!("the connection ended: {reason}"),
                        attempts: 0,
                    };
                    true
                }
                _ => false,
            }
        };
        if down {
            tracing::warn!(upstream = %name, %reason, "the upstream's connection ended; reconnecting");
            self.reconnect_later(name);
        }
    }

    /// Removes the upstream called `name`: its tools leave the catalog and
    /// the server, sessions whose lists change are told, and its connection
    /// is closed. Returns whether there was one.
    pub async fn remove_upstream(&self, name: &str) -> bool {
        let (client, gone, touched) = {
            let mut state = lock(&self.inner.state);
            let Some(upstream) = state.upstreams.remove(name) else {
                return false;
            };
            let pins = state.pins.clone();
            let gone = Arc::make_mut(&mut state.catalog).sync_upstream(name, Vec::new(), &pins);
            let (touched, _dropped) = state.rebuild_sessions(self.inner.disclosure);
            (upstream.client, gone, touched)
        };
        for (id, _) in gone {
            let _removed = self.inner.server.remove_tool(id.as_str());
        }
        for session in touched {
            self.inner.server.tools_changed_for(session);
        }
        if let Some(client) = client {
            client.close().await;
        }
        tracing::info!(upstream = %name, "removed");
        true
    }

    /// Drops the scope rule of the tool `id`: it is open to every caller the
    /// session's tool set lets see it.
    pub fn drop_scope(&self, id: &ToolId) {
        let _registered = self.inner.server.set_tool_scope(id.as_str(), None);
        lock(&self.inner.state).scopes.remove(id);
    }

    /// The scope rules in force, by tool id.
    #[must_use]
    pub fn scopes(&self) -> BTreeMap<ToolId, String> {
        lock(&self.inner.state).scopes.clone()
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
                health: upstream.health.clone(),
                tools: state
                    .catalog
                    .records()
                    .filter(|r| matches!(&r.source, ToolSource::Upstream(u) if u == name))
                    .count(),
            })
            .collect()
    }

    /// Lists an upstream's tools again and applies what changed: new tools
    /// registered, changed ones re-derived from the pins (a drifted pinned
    /// tool becomes unverified) and reported with both digests, removed ones
    /// unregistered; session sets are rebuilt and sessions whose tools
    /// changed are told.
    ///
    /// # Errors
    ///
    /// When the upstream's tools cannot be listed.
    pub async fn refresh(&self, name: &str) -> Result<(), ClientError> {
        let (client, policy) = {
            let state = lock(&self.inner.state);
            match state.upstreams.get(name) {
                Some(Upstream {
                    client: Some(client),
                    options,
                    ..
                }) => (client.clone(), options.tools.clone()),
                _ => return Ok(()),
            }
        };
        // Always from the upstream, never from a cache: a cached list
        // would hide the change the refresh is for.
        let tools = client.refresh_tools().await?;
        let offered: Vec<JsonObject> = tools
            .iter()
            .filter_map(|t| match serde_json::to_value(t) {
                Ok(Value::Object(map)) => Some(map),
                _ => None,
            })
            .collect();
        for named in policy.named() {
            if !offered
                .iter()
                .any(|d| d.get("name").and_then(Value::as_str) == Some(named))
            {
                tracing::warn!(upstream = %name, tool = %named, "the tool policy names a tool the upstream does not offer");
            }
        }
        let definitions = policy.apply(name, offered);
        let mut state = lock(&self.inner.state);
        let first_use = state
            .upstreams
            .get(name)
            .is_some_and(|u| u.options.trust == Trust::OnFirstUse && !u.first_use_done);
        if let Some(upstream) = state.upstreams.get_mut(name) {
            upstream.first_use_done = true;
        }
        if first_use {
            let mut trusted = BTreeMap::new();
            for definition in &definitions {
                let tool = definition
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let id = ToolId::namespaced(name, tool);
                let digest = SchemaDigest::of_definition(definition);
                // What an earlier upstream of this name was trusted with
                // (before a reload replaced it) is not trusted anew.
                let digest = *state.first_use.get(&id).unwrap_or(&digest);
                state.first_use.pin(id.clone(), digest);
                trusted.insert(id, digest);
            }
            state.pins = state.effective_pins();
            if let Some(store) = &state.trust_store {
                if let Err(error) = store.record_first_use(name, &trusted) {
                    tracing::error!(upstream = %name, %error, "the pins trusted on first use could not be kept; a restart would trust anew");
                }
            }
        }
        let pins = state.pins.clone();
        let changes = Arc::make_mut(&mut state.catalog).sync_upstream(name, definitions, &pins);
        if changes.is_empty() {
            return Ok(());
        }
        // Rebuild every session's set now, so drift is reported once, here.
        let (touched, dropped_by_tool) = state.rebuild_sessions(self.inner.disclosure);
        for (id, change) in &changes {
            let (old, new) = match change {
                CatalogChange::Added => (None, state.catalog.get(id).map(|r| r.digest)),
                CatalogChange::Updated(Upsert::Changed { old, new }) => (Some(*old), Some(*new)),
                CatalogChange::Updated(_) => continue,
                CatalogChange::Removed { old } => (Some(*old), None),
            };
            if old.is_some() {
                tracing::warn!(
                    tool = %id,
                    old = ?old.map(|d| d.to_string()),
                    new = ?new.map(|d| d.to_string()),
                    "an upstream changed a tool's definition"
                );
            }
            let report = DriftReport {
                id: id.clone(),
                old,
                new,
                dropped_activations: dropped_by_tool.get(id).copied().unwrap_or(0),
            };
            state.record_drift(report);
        }
        // Register what the catalog has now; unregister what it lost.
        let registrations: Vec<(ToolId, Option<Tool>)> = changes
            .iter()
            .map(|(id, _)| {
                let tool = state.catalog.get(id).and_then(|record| {
                    let mut definition = record.definition.clone();
                    definition.insert("name".to_owned(), Value::from(id.as_str()));
                    serde_json::from_value::<Tool>(Value::Object(definition)).ok()
                });
                (id.clone(), tool)
            })
            .collect();
        drop(state);
        for (id, tool) in registrations {
            match tool {
                Some(tool) => self.register_upstream_tool(&id, tool),
                None => {
                    let _removed = self.inner.server.remove_tool(id.as_str());
                }
            }
        }
        for session in touched {
            self.inner.server.tools_changed_for(session);
        }
        Ok(())
    }

    fn register_upstream_tool(&self, id: &ToolId, tool: Tool) {
        // Weak: the server holds the handlers and the gateway holds the
        // server, so a strong handle here would keep both alive forever.
        let gateway = Arc::downgrade(&self.inner);
        let mut spec = ToolSpec::from_definition(tool);
        if let Some(scope) = lock(&self.inner.state).scopes.get(id) {
            spec = spec.scope(scope.clone());
        }
        let id = id.clone();
        self.inner.server.add_tool(spec, move |call: Call| {
            let gateway = gateway.upgrade().map(|inner| Self { inner });
            let id = id.clone();
            async move {
                match gateway {
                    Some(gateway) => gateway.forward(&id, call).await,
                    None => Err(CallError::internal("the gateway is shutting down")),
                }
            }
        });
    }

    /// Authorizes a call through the gate and forwards it upstream.
    async fn forward(&self, id: &ToolId, call: Call) -> Result<ToolResult, CallError> {
        let route = {
            let mut state = lock(&self.inner.state);
            let set = state.set_for(call.peer(), call.caller(), self.inner.disclosure);
            state.route(&set, id)?
        };
        let arguments: JsonObject = call.args()?;
        self.call_upstream(route, arguments).await
    }

    /// Calls the tool `route` leads to with `arguments`.
    pub(super) async fn call_upstream(
        &self,
        route: Route,
        arguments: JsonObject,
    ) -> Result<ToolResult, CallError> {
        let Route {
            client,
            name,
            upstream,
            timeout,
        } = route;
        let options = RequestOptions {
            timeout: Some(timeout),
            ..RequestOptions::default()
        };
        match client.call_tool(&name, Some(arguments), &options).await {
            Ok(reply) => Ok(reply.value),
            // These describe the gateway's own link to the upstream, not the
            // caller's request; passed on, they would send the caller to fix
            // what it did not do.
            Err(ClientError::Server(error))
                if [
                    ErrorCode::HEADER_MISMATCH,
                    ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
                    ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
                ]
                .contains(&error.code) =>
            {
                Err(CallError::internal(format!(
                    "upstream {upstream} refused the call: {}",
                    error.message
                )))
            }
            Err(ClientError::Server(error)) => Err(CallError::Protocol(error)),
            Err(error) => Err(CallError::internal(format!(
                "upstream {upstream} failed the call: {error}"
            ))),
        }
    }

    /// The catalog as it stands: each tool's id, digest and provenance.
    #[must_use]
    pub fn catalog(&self) -> Vec<(ToolId, SchemaDigest, Provenance)> {
        lock(&self.inner.state)
            .catalog
            .records()
            .map(|r| (r.id.clone(), r.digest, r.provenance))
            .collect()
    }

    /// The most recent drift reports, oldest first.
    #[must_use]
    pub fn drift(&self) -> Vec<DriftReport> {
        lock(&self.inner.state).drift.iter().cloned().collect()
    }
}

/// Where an authorized call goes: the upstream's connection, and the name
/// the upstream knows the tool by.
pub(super) struct Route {
    client: Client,
    name: String,
    upstream: String,
    timeout: Duration,
}

impl State {
    /// Authorizes `id` for `set` through the gate and finds its upstream.
    pub(super) fn route(&self, set: &SessionToolSet, id: &ToolId) -> Result<Route, CallError> {
        let record =
            ExecutionGate::authorize(set, &self.catalog, id).map_err(|e| refused(e.to_string()))?;
        let ToolSource::Upstream(upstream) = &record.source else {
            return Err(refused(format!("{id} has no upstream")));
        };
        let linked = self
            .upstreams
            .get(upstream)
            .ok_or_else(|| refused(format!("upstream {upstream} is gone")))?;
        let client = linked.usable(upstream).map_err(CallError::internal)?;
        let name = linked
            .options
            .tools
            .upstream_name(record.source_name())
            .to_owned();
        Ok(Route {
            client,
            name,
            upstream: upstream.clone(),
            timeout: linked.options.timeout,
        })
    }
}

/// What [`Gateway::approve`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Approved {
    /// Each tool approved, at the digest approved.
    pub approvals: Vec<Approval>,
    /// Why the approvals could not be kept beyond this process, if they
    /// could not; they hold in memory all the same.
    pub not_kept: Option<String>,
}

/// Why an approval was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApproveError {
    /// The id names no upstream tool of the catalog.
    #[error("{0} is no upstream tool of the catalog (see --print-digests)")]
    Unknown(ToolId),
}

/// Forwards an upstream's list changes, and the end of its connection, to
/// the gateway.
#[derive(Debug)]
struct UpstreamNotices {
    name: String,
    refresh: mpsc::Sender<String>,
    gateway: Weak<Inner>,
}

impl ClientHandler for UpstreamNotices {
    fn notification(&self, notice: &Notice) {
        if notice.method == "notifications/tools/list_changed" {
            // A full queue already holds a refresh that will see this change.
            let _queued = self.refresh.try_send(self.name.clone());
        }
    }

    fn closed(&self, reason: &str) {
        // Handled on a task of its own: this is called from inside the
        // client, which may be closing while the gateway holds its lock.
        let (Some(inner), Ok(runtime)) = (
            self.gateway.upgrade(),
            tokio::runtime::Handle::try_current(),
        ) else {
            return;
        };
        let name = self.name.clone();
        let reason = reason.to_owned();
        runtime.spawn(async move { Gateway { inner }.upstream_closed(&name, &reason) });
    }

    fn other(
        &self,
        method: &str,
        _params: Option<Value>,
    ) -> BoxFuture<'_, Result<Value, ErrorObject>> {
        let error = crate::application::client::handler::unsupported(method);
        Box::pin(async move { Err(error) })
    }
}

/// A refusal of the caller's request, by name (`-32602`).
pub(super) fn refused(message: String) -> CallError {
    Refusal::invalid_params(message).into()
}
