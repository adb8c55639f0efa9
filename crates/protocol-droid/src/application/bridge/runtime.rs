//! The bridge at work: a server toward the client, a client toward the
//! server, and a translation of each reply the client cannot read as it is.
//!
//! The downstream half is an ordinary [`Server`] with the bridge as its
//! [`Forward`]: the server terminates the client's revision (handshake or
//! per-request `_meta`, sessions, headers, sealed `requestState`), and hands
//! every primitive request to [`Bridge`], which carries it upstream through
//! a [`Client`](crate::application::client::Client) speaking the upstream's
//! revision, and translates the answer for the client under the
//! [`DegradePolicy`].

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::exchange::Lot;
use super::observer::Observer;
use super::remote::{ParkedCalls, Route};
use super::upstream::{Affinity, capabilities_key, full_capabilities};
use super::upstream::{Connector, ConnectorError, SessionWatch, Upstream, UpstreamHandler, lock};
use crate::application::client::{Client, ClientError, ServerState};
use crate::application::observe::SharedObserver;
use crate::application::server::Primitive;
use crate::application::server::rate::Caller;
use crate::domain::ir::TranslationReport;
use crate::domain::{DegradePolicy, Era, SessionId};
use crate::wire::tools::Tool;

/// The `_meta` key a reply's translation report travels under, when
/// [`BridgeOptions::report_meta`] asks for it.
pub const REPORT_META: &str = "protocol-droid/translation";

/// How many translation reports [`Bridge::reports`] keeps.
pub const MAX_REPORTS: usize = 256;

/// How often a bridge closing once its requests are done looks whether
/// they are: a closing is rare, and a poll keeps every request free of
/// telling anyone that it ended.
const DRAIN_EVERY: Duration = Duration::from_millis(50);

/// How a bridge behaves.
#[derive(Clone, Debug)]
pub struct BridgeOptions {
    /// Which losses a translation may make; strict by default.
    pub policy: DegradePolicy,
    /// Whether a reply that was translated carries its report in `_meta`
    /// ([`REPORT_META`]). Reports are always logged.
    pub report_meta: bool,
    /// How long a request waiting for its client's input retry keeps its
    /// upstream request open.
    pub park_for: Duration,
    /// The most input rounds one request may take.
    pub max_rounds: usize,
    /// The most upstream connections open at once.
    pub max_upstreams: usize,
    /// The most upstream connections one stateless caller may hold (per
    /// principal; anonymous callers per network).
    pub max_upstreams_per_caller: usize,
    /// How many requests one session served on HTTP (or, for a client
    /// without one, one caller: its principal, or its network when
    /// anonymous) may have in flight at once on the connection a
    /// 2026-07-28 upstream shares among every session; its further
    /// requests wait for its own to finish, within
    /// [`Self::request_timeout`], so one session's slow calls cannot fill
    /// the upstream's allowance for everyone. A stdio client, the only one,
    /// is not bounded. Zero for no bound.
    pub max_in_flight_per_session: usize,
    /// How long an unused upstream connection is kept.
    pub idle: Duration,
    /// Whether a connection whose server went away (a child that exited) is
    /// opened again for the next request.
    pub restart: bool,
    /// How long the bridge waits for its server at a time (a request's
    /// answer, or its next question) before the request is cancelled
    /// upstream and refused downstream. Time spent waiting for the client's
    /// input is bounded by [`Self::park_for`] instead, and a call's progress
    /// notifications start the wait again (up to
    /// [`MAX_PATIENCE`](crate::application::client::MAX_PATIENCE) for each
    /// wait).
    pub request_timeout: Duration,
    /// What each downgrade in a translation is reported to, as well as
    /// being logged and kept.
    pub observer: SharedObserver,
    /// Whether the bridge lists the upstream's tools itself, at start and
    /// whenever the upstream says they changed (the default). A caller that
    /// lists them anyway, as a gateway does, turns this off and hands each
    /// listing to [`Bridge::learned_tools`], so the upstream is asked once,
    /// not twice.
    pub lists_tools: bool,
}

impl Default for BridgeOptions {
    fn default() -> Self {
        Self {
            policy: DegradePolicy::strict(),
            report_meta: false,
            park_for: Duration::from_secs(120),
            max_rounds: 16,
            max_upstreams: 256,
            max_upstreams_per_caller: 32,
            max_in_flight_per_session: 64,
            idle: Duration::from_secs(600),
            restart: true,
            request_timeout: Duration::from_secs(300),
            observer: SharedObserver::default(),
            lists_tools: true,
        }
    }
}

/// One reply's translation, as [`Bridge::reports`] keeps it.
#[derive(Clone, Debug)]
pub struct Report {
    /// The method whose reply was translated.
    pub method: String,
    /// What was changed.
    pub report: TranslationReport,
}

/// Why a bridge could not start, or could not answer a question about its
/// upstream.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BridgeError {
    /// The connector could not open a connection to the upstream.
    #[error("the upstream could not be reached")]
    Connect(#[source] ConnectorError),
    /// The upstream answered but no revision was settled with it.
    #[error("the upstream settled no revision")]
    NoRevision,
    /// Every upstream connection has ended.
    #[error("no upstream connection is open")]
    Closed,
    /// The upstream refused or failed a request.
    #[error(transparent)]
    Upstream(#[from] ClientError),
}

/// Any client in front of any server. Cheap to clone.
///
/// The upstream is reached through a [`Connector`]; the crate's `connect`
/// adapter provides one for a command line or a URL (its `connector`
/// function has an example), and `examples/bridge.rs` is a bridge that runs.
pub struct Bridge {
    pub(super) inner: Arc<Inner>,
}

impl Clone for Bridge {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl core::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Bridge")
            .field("upstream", &self.inner.upstream.version)
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

pub(super) struct Inner {
    pub(super) options: BridgeOptions,
    pub(super) connector: Connector,
    /// What the first connection learned of the server.
    pub(super) upstream: ServerState,
    /// One connection per affinity, or a pool of exclusively leased ones
    /// for the stateless callers of a legacy upstream.
    pub(super) upstreams: Mutex<HashMap<Affinity, Vec<Arc<Upstream>>>>,
    /// Each session's requests on the connection a stateless upstream
    /// shares, bounded.
    pub(super) shares: Arc<super::share::Shares>,
    /// One connection is opened at a time, so a burst of first requests
    /// does not start a child process each.
    pub(super) opening: tokio::sync::Mutex<()>,
    /// The flights parked for their clients' retries.
    pub(super) lot: Arc<Lot>,
    /// Where this bridge's flights are reached from other instances, once
    /// it is shared ([`Bridge::share`]).
    pub(super) route: std::sync::OnceLock<Route>,
    /// Who hears the upstream's announcements: the bridge's own server,
    /// or whoever connected it with an observer.
    pub(super) observer: Mutex<Option<Arc<dyn Observer>>>,
    /// The connection kept for the bridge's life, when it has an observer.
    pub(super) kept: Option<Client>,
    pub(super) reports: Mutex<VecDeque<Report>>,
    /// The tools as the clients were last given them, by name: what the
    /// server checks `Mcp-Param-*` headers against. Bounded.
    pub(super) tools: Mutex<HashMap<String, Tool>>,
    /// How each of the upstream's task-capable tools may run as a task
    /// (2025-11-25 `execution.taskSupport`), as last listed; `None` before
    /// the first list.
    pub(super) task_tools: Mutex<Option<HashMap<String, crate::wire::tools::TaskSupport>>>,
    /// The listings of the upstream's tools, one at a time (see
    /// [`Bridge::learn_tools`]).
    pub(super) listing: super::listing::Listing,
    /// The resources each session watches (by `resources/subscribe`, or in
    /// its listens), counted: a session may watch one twice.
    pub(super) watched: Mutex<HashMap<SessionId, HashMap<String, usize>>>,
    /// The legacy sessions that subscribed on their own connections.
    pub(super) session_watches: Mutex<HashMap<SessionId, SessionWatch>>,
    /// Tells the task that watches upstream that `watched` changed.
    pub(super) rewatch: Arc<tokio::sync::Notify>,
    /// Dropped with the bridge, which ends its background tasks.
    pub(super) closing: tokio::sync::watch::Sender<()>,
    /// Set when a connection ended and [`BridgeOptions::restart`] is off:
    /// from then on every request is refused.
    pub(super) ended: Mutex<Option<String>>,
    /// How the last starts of a connection went, so that an upstream that
    /// fails to start is not started again for every request.
    pub(super) starts: Arc<Mutex<super::starts::Starts>>,
}

impl Bridge {
    /// Connects to the upstream once, to learn what it is and offers, and
    /// keeps that connection for the first requests.
    ///
    /// # Errors
    ///
    /// [`BridgeError::Connect`] when the upstream could not be reached,
    /// [`BridgeError::NoRevision`] when it settled none.
    pub async fn connect(
        connector: Connector,
        options: BridgeOptions,
    ) -> Result<Self, BridgeError> {
        Self::open(connector, options, None).await
    }

    /// Connects as [`connect`](Self::connect) does, for whoever serves the
    /// upstream under names of its own (a gateway): `observer` hears what
    /// the upstream announces, and the end of the first connection, which
    /// the bridge keeps for as long as it lives ([`Self::client`]).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_observed(
        connector: Connector,
        options: BridgeOptions,
        observer: Arc<dyn Observer>,
    ) -> Result<Self, BridgeError> {
        Self::open(connector, options, Some(observer)).await
    }

    async fn open(
        connector: Connector,
        options: BridgeOptions,
        observer: Option<Arc<dyn Observer>>,
    ) -> Result<Self, BridgeError> {
        let mut handler = UpstreamHandler::new(full_capabilities(), observer.clone(), None);
        if observer.is_some() {
            handler = handler.kept();
        }
        let handler = Arc::new(handler);
        let client = connector(handler.clone())
            .await
            .map_err(BridgeError::Connect)?;
        let Some(upstream) = client.server() else {
            client.close().await;
            return Err(BridgeError::NoRevision);
        };
        let affinity = match (upstream.version.era(), &observer) {
            (Era::Modern, _) => Affinity::Shared,
            (Era::Legacy, Some(_)) => Affinity::Kept,
            // Stdio's one client's, which is who a bridge on stdio serves.
            (Era::Legacy, None) => {
                Affinity::Caller(Caller::Local, capabilities_key(&full_capabilities()))
            }
        };
        let kept = observer.as_ref().map(|_| client.clone());
        let starts = Arc::default();
        let first = Arc::new(Upstream::new(client, handler, Arc::clone(&starts)));
        let lot = Arc::new(Lot::new(options.park_for, options.max_rounds));
        let shares = super::share::Shares::new(options.max_in_flight_per_session);
        let bridge = Self {
            inner: Arc::new(Inner {
                options,
                connector,
                upstream,
                upstreams: Mutex::new(HashMap::from([(affinity, vec![first])])),
                shares,
                opening: tokio::sync::Mutex::new(()),
                lot,
                route: std::sync::OnceLock::new(),
                observer: Mutex::new(observer),
                kept,
                reports: Mutex::default(),
                task_tools: Mutex::default(),
                tools: Mutex::default(),
                listing: super::listing::Listing::default(),
                watched: Mutex::default(),
                session_watches: Mutex::default(),
                rewatch: Arc::default(),
                closing: tokio::sync::watch::channel(()).0,
                ended: Mutex::default(),
                starts,
            }),
        };
        for upstream in lock(&bridge.inner.upstreams).values().flatten() {
            upstream.handler.on_tools_changed(bridge.relist_hook());
        }
        bridge.spawn_reaper();
        // The tools are known before any client lists them, so the first
        // call's `Mcp-Param-*` headers can be checked.
        if bridge.inner.upstream.capabilities.tools.is_some() && bridge.inner.options.lists_tools {
            bridge.learn_tools(super::listing::Asker::Bridge).await;
        }
        if bridge.inner.upstream.version.era() == Era::Modern {
            bridge.spawn_listener();
        } else {
            bridge.spawn_watcher();
        }
        Ok(bridge)
    }

    /// Lets a call parked here (a 2026-07-28 client in front of a legacy
    /// server) be resumed by its client's retry at any instance that
    /// shares `parked`'s relay and this bridge's sealing keys: the retry is
    /// carried here, where the upstream request is open. `name` tells this
    /// bridge from the others of the instance (a gateway's upstream's
    /// name); each instance must give the same bridge the same name. A
    /// bridge is shared once; later calls change nothing.
    pub fn share(&self, parked: &ParkedCalls, name: &str) {
        if self.inner.route.get().is_none() {
            let _set = self.inner.route.set(parked.add(name, &self.inner.lot));
        }
    }

    /// Whether `other` is this bridge (a clone of it), not another one to
    /// the same server.
    #[must_use]
    pub fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The connection kept for the bridge's life (see
    /// [`connect_observed`](Self::connect_observed)), while it is open.
    #[must_use]
    pub fn client(&self) -> Option<Client> {
        self.inner
            .kept
            .as_ref()
            .filter(|client| client.closed().is_none())
            .cloned()
    }

    /// What the upstream said it is and offers.
    #[must_use]
    pub fn upstream(&self) -> &ServerState {
        &self.inner.upstream
    }

    /// Whether the upstream offers the primitive of `kind` called `name`
    /// (for a template, its URI template) right now: what a scope rule is
    /// checked against at start, so a rule with a typo is an error rather
    /// than a primitive left open.
    ///
    /// # Errors
    ///
    /// [`BridgeError::Closed`] when no upstream connection is open,
    /// [`BridgeError::Upstream`] when a list fails.
    pub async fn offers(&self, kind: Primitive, name: &str) -> Result<bool, BridgeError> {
        let client = lock(&self.inner.upstreams)
            .values()
            .flatten()
            .find(|u| u.client.closed().is_none())
            .map(|u| u.client.clone())
            .ok_or(BridgeError::Closed)?;
        let failed = BridgeError::Upstream;
        Ok(match kind {
            Primitive::Tool => client
                .list_all_tools()
                .await
                .map_err(failed)?
                .iter()
                .any(|tool| tool.name == name),
            Primitive::Prompt => client
                .list_all_prompts()
                .await
                .map_err(failed)?
                .iter()
                .any(|prompt| prompt.name == name),
            Primitive::Resource => client
                .list_all_resources()
                .await
                .map_err(failed)?
                .iter()
                .any(|resource| resource.uri == name),
            Primitive::Template => client
                .list_all_resource_templates()
                .await
                .map_err(failed)?
                .iter()
                .any(|template| template.uri_template == name),
        })
    }

    /// Closes every connection and stops the bridge's background work;
    /// from then on every request is refused. For whoever replaces a
    /// bridge while clones of it may still be held.
    pub async fn close(&self) {
        *lock(&self.inner.ended) = Some("the bridge was closed".to_owned());
        let _watchers = self.inner.closing.send(());
        lock(&self.inner.session_watches).clear();
        let all: Vec<Arc<Upstream>> = lock(&self.inner.upstreams)
            .drain()
            .flat_map(|(_, pool)| pool)
            .collect();
        for upstream in all {
            upstream.client.close().await;
        }
    }

    /// Closes the bridge as [`Self::close`] does, once no request is on any
    /// of its connections or `patience` has passed: for whoever replaces or
    /// removes a bridge whose requests in flight should end on it rather
    /// than fail. Requests must no longer reach it meanwhile.
    pub async fn close_when_done(&self, patience: Duration) {
        let start = tokio::time::Instant::now();
        // A moment first: a request handed this bridge just before it was
        // retired may not have reached it yet, and would find it closed.
        tokio::time::sleep(DRAIN_EVERY.min(patience)).await;
        while self.serving() && start.elapsed() < patience {
            tokio::time::sleep(DRAIN_EVERY).await;
        }
        self.close().await;
    }

    /// Whether a request is on one of the bridge's connections.
    fn serving(&self) -> bool {
        lock(&self.inner.upstreams).values().flatten().any(|u| {
            u.in_use.load(std::sync::atomic::Ordering::Acquire) > 0
                || u.busy.load(std::sync::atomic::Ordering::Acquire)
        })
    }

    /// The latest translation reports, oldest first.
    #[must_use]
    pub fn reports(&self) -> Vec<Report> {
        lock(&self.inner.reports).iter().cloned().collect()
    }

    /// How many upstream connections are open.
    #[must_use]
    pub fn connections(&self) -> usize {
        lock(&self.inner.upstreams).values().map(Vec::len).sum()
    }

    /// How many requests wait for their client's input retry.
    #[must_use]
    pub fn parked(&self) -> usize {
        lock(&self.inner.lot.flights).len()
    }
}
