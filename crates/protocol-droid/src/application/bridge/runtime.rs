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
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use serde_json::{Map, Value, json};

use super::content::translate;
use super::exchange::{Owner, Parking, Rounds, Start, parked_handle, progress_to};
use super::lower::{Lowering, refusal};
use super::upstream::{
    Connector, ConnectorError, Lease, RELAY_BACKLOG, Relay, Upstream, UpstreamHandler, lock,
};
use crate::application::client::{ClientError, RequestOptions, ServerState};
use crate::application::server::context::LOG_LEVEL_META;
use crate::application::server::dispatch::{
    CLIENT_CAPABILITIES_META, CLIENT_INFO_META, PROTOCOL_VERSION_META,
};
use crate::application::server::forward::Forward;
use crate::application::server::request_state::KeyError;
use crate::application::server::{Call, CallError, Primitive, Question, Server, ServerBuilder};
use crate::domain::ir::{JsonObject, LowerError, TranslationReport};
use crate::domain::jsonrpc::{ErrorCode, ErrorObject};
use crate::domain::{Capability, DegradePolicy, Era, Feature, Leg, ProtocolVersion, SessionId};
use crate::wire::ClientCapabilities;
use crate::wire::tools::Tool;

/// The `_meta` key a reply's translation report travels under, when
/// [`BridgeOptions::report_meta`] asks for it.
pub const REPORT_META: &str = "protocol-droid/translation";

/// How many tool definitions the bridge keeps for header checks.
const MAX_KNOWN_TOOLS: usize = 4096;

/// How many translation reports [`Bridge::reports`] keeps.
pub const MAX_REPORTS: usize = 256;

/// The `_meta` keys of a request the bridge speaks for itself upstream: the
/// 2026-07-28 envelope, and the progress token (the bridge's own client
/// mints one per upstream request).
const REQUEST_META_KEYS: [&str; 5] = [
    PROTOCOL_VERSION_META,
    CLIENT_CAPABILITIES_META,
    CLIENT_INFO_META,
    LOG_LEVEL_META,
    "progressToken",
];

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
    /// principal; anonymous callers share one count).
    pub max_upstreams_per_caller: usize,
    /// How long an unused upstream connection is kept.
    pub idle: Duration,
    /// Whether a connection whose server went away (a child that exited) is
    /// opened again for the next request.
    pub restart: bool,
    /// How long the bridge waits for its server at a time (a request's
    /// answer, or its next question) before the request is cancelled
    /// upstream and refused downstream. Time spent waiting for the client's
    /// input is bounded by [`Self::park_for`] instead.
    pub request_timeout: Duration,
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
            idle: Duration::from_secs(600),
            restart: true,
            request_timeout: Duration::from_secs(300),
        }
    }
}

/// Which connection a request goes through.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Affinity {
    /// The one connection to a stateless upstream.
    Shared,
    /// A legacy downstream session's own.
    Session(SessionId),
    /// A stateless caller's own, by principal (`None`: anonymous) and by
    /// the capabilities its requests declare: a legacy server hears them
    /// once, at the handshake, so each set gets its own connections.
    Caller(Option<String>, String),
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
    #[error("the upstream could not be reached: {0}")]
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
    inner: Arc<Inner>,
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

struct Inner {
    options: BridgeOptions,
    connector: Connector,
    /// What the first connection learned of the server.
    upstream: ServerState,
    /// One connection per affinity, or a pool of exclusively leased ones
    /// for the stateless callers of a legacy upstream.
    upstreams: Mutex<HashMap<Affinity, Vec<Arc<Upstream>>>>,
    /// One connection is opened at a time, so a burst of first requests
    /// does not start a child process each.
    opening: tokio::sync::Mutex<()>,
    parking: Mutex<Parking>,
    server: Mutex<Option<Server>>,
    reports: Mutex<VecDeque<Report>>,
    /// The tools as the clients were last given them, by name: what the
    /// server checks `Mcp-Param-*` headers against. Bounded.
    tools: Mutex<HashMap<String, Tool>>,
    /// The upstream's tools that only run as tasks (2025-11-25
    /// `execution.taskSupport: "required"`), as last listed; `None` before
    /// the first list.
    task_tools: Mutex<Option<std::collections::HashSet<String>>>,
    /// The resources each session watches (by `resources/subscribe`, or in
    /// its listens), counted: a session may watch one twice.
    watched: Mutex<HashMap<SessionId, HashMap<String, usize>>>,
    /// Tells the task that watches upstream that `watched` changed.
    rewatch: Arc<tokio::sync::Notify>,
    /// Dropped with the bridge, which ends its background tasks.
    closing: tokio::sync::watch::Sender<()>,
    /// Set when a connection ended and [`BridgeOptions::restart`] is off:
    /// from then on every request is refused.
    ended: Mutex<Option<String>>,
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
        let handler = Arc::new(UpstreamHandler::new(full_capabilities(), None, false));
        let client = connector(handler.clone())
            .await
            .map_err(BridgeError::Connect)?;
        let upstream = client.server().ok_or(BridgeError::NoRevision)?;
        let affinity = if upstream.version.era() == Era::Modern {
            Affinity::Shared
        } else {
            Affinity::Caller(None, capabilities_key(&full_capabilities()))
        };
        let first = Arc::new(Upstream::new(client, handler));
        let bridge = Self {
            inner: Arc::new(Inner {
                options,
                connector,
                upstream,
                upstreams: Mutex::new(HashMap::from([(affinity, vec![first])])),
                opening: tokio::sync::Mutex::new(()),
                parking: Mutex::default(),
                server: Mutex::default(),
                reports: Mutex::default(),
                task_tools: Mutex::default(),
                tools: Mutex::default(),
                watched: Mutex::default(),
                rewatch: Arc::default(),
                closing: tokio::sync::watch::channel(()).0,
                ended: Mutex::default(),
            }),
        };
        for upstream in lock(&bridge.inner.upstreams).values().flatten() {
            upstream.handler.on_tools_changed(bridge.relist_hook());
        }
        bridge.spawn_reaper();
        // The tools are known before any client lists them, so the first
        // call's `Mcp-Param-*` headers can be checked.
        if bridge.inner.upstream.capabilities.tools.is_some() {
            bridge.learn_tools().await;
        }
        if bridge.inner.upstream.version.era() == Era::Modern {
            bridge.spawn_listener();
        } else {
            bridge.spawn_watcher();
        }
        Ok(bridge)
    }

    /// The downstream server: named as the upstream names itself, with its
    /// instructions, forwarding to this bridge. `configure` sets the rest
    /// (the revisions offered, a shared sealing key).
    ///
    /// The server refers to the bridge without keeping it alive: keep the
    /// bridge for as long as the server serves (once it is dropped, its
    /// connections close and the server answers every primitive with an
    /// error).
    ///
    /// # Errors
    ///
    /// When the server's `requestState` key could not be made.
    pub fn server(
        &self,
        configure: impl FnOnce(ServerBuilder) -> ServerBuilder,
    ) -> Result<Server, KeyError> {
        let (name, version) = self.inner.upstream.server_info.as_ref().map_or_else(
            || {
                (
                    "protocol-droid bridge".to_owned(),
                    env!("CARGO_PKG_VERSION").to_owned(),
                )
            },
            |info| (info.name.clone(), info.version.clone()),
        );
        // The server holds the bridge weakly: the bridge holds the server
        // (to announce the upstream's changes), and a cycle would keep both,
        // and their background tasks and child processes, alive forever.
        let forwarding = Forwarding(Arc::downgrade(&self.inner));
        let mut builder = Server::builder(name, version).forward(Arc::new(forwarding));
        if let Some(instructions) = &self.inner.upstream.instructions {
            builder = builder.instructions(instructions.clone());
        }
        let server = configure(builder).build()?;
        *lock(&self.inner.server) = Some(server.clone());
        for upstream in lock(&self.inner.upstreams).values().flatten() {
            upstream.handler.attach(server.clone());
        }
        Ok(server)
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
        lock(&self.inner.parking).len()
    }

    /// Closes idle connections and expired parked requests every so often,
    /// for as long as the bridge lives.
    fn spawn_reaper(&self) {
        let weak = Arc::downgrade(&self.inner);
        let every =
            (self.inner.options.idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(30));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                let now = Instant::now();
                lock(&inner.parking).expire(now);
                let mut idle: Vec<Arc<Upstream>> = Vec::new();
                {
                    let mut upstreams = lock(&inner.upstreams);
                    for (affinity, pool) in upstreams.iter_mut() {
                        if *affinity == Affinity::Shared {
                            continue;
                        }
                        pool.retain(|u| {
                            let retired = u.retired.load(std::sync::atomic::Ordering::Acquire);
                            let stale = u.is_idle()
                                && (retired
                                    || now.duration_since(*lock(&u.last_used))
                                        > inner.options.idle);
                            if stale {
                                idle.push(Arc::clone(u));
                            }
                            !stale
                        });
                    }
                    upstreams.retain(|_, pool| !pool.is_empty());
                }
                for upstream in idle {
                    upstream.client.close().await;
                }
            }
        });
    }

    /// Which connections `call` may use.
    fn affinity(&self, call: &Call) -> Affinity {
        if self.inner.upstream.version.era() == Era::Modern {
            Affinity::Shared
        } else if call.peer.negotiated().era() == Era::Legacy {
            Affinity::Session(call.session())
        } else {
            let declared = legacy_capabilities(&call.ctx.client_capabilities);
            Affinity::Caller(call.caller().principal_key(), capabilities_key(&declared))
        }
    }

    /// A connection for `call`: the affinity's one, or, for a stateless
    /// caller of a legacy upstream, one leased to this request alone, opened
    /// when none is free.
    async fn lease_for(&self, call: &Call) -> Result<Lease, CallError> {
        let affinity = self.affinity(call);
        // A legacy session's connection declares what that client declared;
        // any other declares everything the bridge can ask a client for.
        let capabilities = match &affinity {
            Affinity::Session(_) | Affinity::Caller(..) => {
                legacy_capabilities(&call.ctx.client_capabilities)
            }
            Affinity::Shared => full_capabilities(),
        };
        self.lease(affinity, capabilities).await
    }

    /// A connection of `affinity`, opened declaring `capabilities` when none
    /// is free.
    async fn lease(
        &self,
        affinity: Affinity,
        capabilities: ClientCapabilities,
    ) -> Result<Lease, CallError> {
        let exclusive = matches!(affinity, Affinity::Caller(..));
        if let Some(found) = self.free(&affinity, exclusive)? {
            return Ok(found);
        }
        let _one = self.inner.opening.lock().await;
        if lock(&self.inner.ended).is_some() {
            return Err(CallError::internal(
                "the upstream connection ended, and the bridge does not restart it",
            ));
        }
        if let Some(found) = self.free(&affinity, exclusive)? {
            return Ok(found);
        }
        if self.connections() >= self.inner.options.max_upstreams && !self.evict_one() {
            return Err(CallError::internal(
                "the bridge has as many upstream connections open as it may; try again later",
            ));
        }
        if let Affinity::Caller(principal, _) = &affinity {
            let held: usize = lock(&self.inner.upstreams)
                .iter()
                .filter(|(a, _)| matches!(a, Affinity::Caller(p, _) if p == principal))
                .map(|(_, pool)| pool.len())
                .sum();
            if held >= self.inner.options.max_upstreams_per_caller {
                return Err(CallError::internal(
                    "this caller holds as many upstream connections as it may; try again later",
                ));
            }
        }
        let one_client = matches!(affinity, Affinity::Session(_));
        let server = lock(&self.inner.server).clone();
        let handler = Arc::new(UpstreamHandler::new(capabilities, server, one_client));
        handler.on_tools_changed(self.relist_hook());
        let client = (self.inner.connector)(handler.clone()).await.map_err(|e| {
            tracing::warn!(target: "droid::bridge", error = %e, "the upstream could not be reached");
            CallError::internal("the upstream could not be reached; the bridge's log says why")
        })?;
        let upstream = Arc::new(Upstream::new(client, handler));
        let lease = if exclusive {
            upstream
                .try_lease()
                .ok_or_else(|| CallError::internal("a new connection was taken"))?
        } else {
            upstream.share()
        };
        lock(&self.inner.upstreams)
            .entry(affinity)
            .or_default()
            .push(upstream);
        Ok(lease)
    }

    /// Every resource some session watches.
    fn watched_uris(&self) -> std::collections::BTreeSet<String> {
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
    fn spawn_watcher(&self) {
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
                let Ok(lease) = bridge.lease(Affinity::Shared, full_capabilities()).await else {
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
    fn spawn_listener(&self) {
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
                let lease = bridge.lease(Affinity::Shared, full_capabilities()).await;
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
    fn listen_params(&self) -> Value {
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

    /// Closes the least recently used connection no request uses (a retired
    /// one first), to make room; false when every connection is in use.
    fn evict_one(&self) -> bool {
        let victim = {
            let mut upstreams = lock(&self.inner.upstreams);
            let found = upstreams
                .iter()
                .filter(|(affinity, _)| **affinity != Affinity::Shared)
                .flat_map(|(affinity, pool)| pool.iter().map(move |u| (affinity.clone(), u)))
                .filter(|(_, u)| u.is_idle())
                .min_by_key(|(_, u)| {
                    let retired = u.retired.load(std::sync::atomic::Ordering::Acquire);
                    (!retired, *lock(&u.last_used))
                })
                .map(|(affinity, u)| (affinity, Arc::clone(u)));
            let Some((affinity, victim)) = found else {
                return false;
            };
            if let Some(pool) = upstreams.get_mut(&affinity) {
                pool.retain(|u| !Arc::ptr_eq(u, &victim));
                if pool.is_empty() {
                    upstreams.remove(&affinity);
                }
            }
            victim
        };
        tokio::spawn(async move { victim.client.close().await });
        true
    }

    /// An open connection of `affinity` free for this request; those whose
    /// server went away are forgotten, and refused when restarting is off.
    fn free(&self, affinity: &Affinity, exclusive: bool) -> Result<Option<Lease>, CallError> {
        let mut upstreams = lock(&self.inner.upstreams);
        let Some(pool) = upstreams.get_mut(affinity) else {
            return Ok(None);
        };
        let mut ended = None;
        let mut retired = Vec::new();
        pool.retain(|u| {
            if let Some(reason) = u.client.closed() {
                ended = Some(reason);
                return false;
            }
            // A connection kept from other requests is closed once free.
            if u.retired.load(std::sync::atomic::Ordering::Acquire) && u.is_idle() {
                retired.push(Arc::clone(u));
                return false;
            }
            true
        });
        for upstream in retired {
            tokio::spawn(async move { upstream.client.close().await });
        }
        if let Some(reason) = ended {
            tracing::warn!(target: "droid::bridge", %reason, "an upstream connection ended");
            if !self.inner.options.restart {
                *lock(&self.inner.ended) = Some(reason);
            }
        }
        if lock(&self.inner.ended).is_some() {
            return Err(CallError::internal(
                "the upstream connection ended, and the bridge does not restart it",
            ));
        }
        Ok(if exclusive {
            pool.iter().find_map(Upstream::try_lease)
        } else {
            pool.first().map(Upstream::share)
        })
    }

    async fn forward_call(
        &self,
        method: &str,
        params: JsonObject,
        call: Call,
    ) -> Result<Value, CallError> {
        let version = self.inner.upstream.version;
        // A retry of a round parked in front of a legacy server continues
        // on the connection its request is open on.
        let owner = Owner::of(&call, method, &params);
        let parked = match parked_handle(call.state().as_ref()) {
            Some(handle) if version.era() == Era::Legacy => Some(
                lock(&self.inner.parking)
                    .take(&handle, &owner)
                    .ok_or_else(|| {
                        CallError::invalid_params(
                            "the request this retry continues is no longer waiting (it expired or \
                         was already answered); send it again without requestState",
                        )
                    })?,
            ),
            _ => None,
        };
        let lease = match parked {
            Some(_) => None,
            None => Some(self.lease_for(&call).await?),
        };
        let leg = Leg::new(call.peer.negotiated(), call.peer.profile());
        let params = upstream_params(method, params, &call, version);
        if let Some(lease) = lease.as_ref().filter(|_| version.era() == Era::Legacy) {
            self.settle_level(&lease.upstream, &call).await;
        }
        let as_task = match lease.as_ref() {
            Some(lease) if method == "tools/call" => self.runs_as_task(lease, &params).await,
            _ => false,
        };
        let (relay, mut relayed) = tokio::sync::mpsc::channel(RELAY_BACKLOG);
        let relay = Arc::new(Mutex::new(relay));
        let mut options = RequestOptions {
            timeout: Some(self.inner.options.request_timeout),
            ..RequestOptions::default()
        };
        if call.ctx.progress_token().is_some() {
            // Pointed at the relay by the round loop, which knows which
            // task serves the request now.
            options.on_progress = Some(progress_to(Arc::clone(&relay)));
        }
        let mut report = TranslationReport::new(leg.version);
        let outcome = {
            let mut rounds = Rounds {
                parking: &self.inner.parking,
                leg: &leg,
                policy: self.inner.options.policy,
                report: &mut report,
                max_rounds: self.inner.options.max_rounds,
                park_for: self.inner.options.park_for,
                options,
                relay,
                owner,
                as_task,
            };
            let work = async {
                match (parked, lease) {
                    (Some(flight), _) => {
                        rounds
                            .legacy(&call, method, params, Start::Parked(flight))
                            .await
                    }
                    (None, Some(lease)) if version.era() == Era::Modern => {
                        rounds.modern(&call, method, params, &lease).await
                    }
                    (None, Some(lease)) => {
                        rounds
                            .legacy(&call, method, params, Start::New(lease))
                            .await
                    }
                    (None, None) => Err(CallError::internal("no upstream connection")),
                }
            };
            tokio::pin!(work);
            // Notifications are sent from this task, the request's own, in
            // the order they came, and all of them before the answer.
            let outcome = loop {
                tokio::select! {
                    biased;
                    Some(relayed) = relayed.recv() => emit(&call, relayed),
                    outcome = &mut work => break outcome,
                }
            };
            while let Ok(late) = relayed.try_recv() {
                emit(&call, late);
            }
            outcome
        };
        let result = match outcome? {
            Ok(result) => result,
            Err(ClientError::Server(error))
                if error.code == ErrorCode::URL_ELICITATION_REQUIRED
                    && leg.version.era() == Era::Modern =>
            {
                return Err(url_round(&call, error).await);
            }
            Err(error) => return Err(upstream_error(error, &leg)),
        };
        let mut value = self
            .translate(method, result, version, &leg, &mut report)
            .inspect_err(|e| {
                tracing::warn!(target: "droid::bridge", method, error = %e, "translation refused");
            })
            .map_err(|e| refusal(&e))?;
        if !report.is_empty() {
            self.record(method, &report, &mut value);
        }
        Ok(value)
    }

    /// Whether the tool `params` call only runs as a task upstream: a tool
    /// list of the upstream says so, listed when none is known yet.
    async fn runs_as_task(&self, lease: &Lease, params: &JsonObject) -> bool {
        let offers_tasks = lease.upstream.client.server().is_some_and(|s| {
            s.version == ProtocolVersion::V2025_11_25 && s.capabilities.tasks.is_some()
        });
        if !offers_tasks {
            return false;
        }
        let Some(name) = params.get("name").and_then(Value::as_str) else {
            return false;
        };
        if lock(&self.inner.task_tools).is_none() {
            self.learn_tools().await;
        }
        lock(&self.inner.task_tools)
            .as_ref()
            .is_some_and(|tools| tools.contains(name))
    }

    /// What an upstream connection calls when the tool list changed: list
    /// again, so the definitions the bridge checks headers against and the
    /// task-only tools are the server's current ones.
    fn relist_hook(&self) -> Arc<dyn Fn() + Send + Sync> {
        let weak = Arc::downgrade(&self.inner);
        Arc::new(move || {
            let Some(inner) = weak.upgrade() else {
                return;
            };
            let bridge = Self { inner };
            tokio::spawn(async move { bridge.learn_tools().await });
        })
    }

    /// Lists the upstream's tools afresh, on any live connection, and keeps
    /// what the bridge needs of them: the definitions it checks headers
    /// against and the tools that only run as tasks.
    async fn learn_tools(&self) {
        let client = lock(&self.inner.upstreams)
            .values()
            .flatten()
            .find(|u| u.client.closed().is_none())
            .map(|u| u.client.clone());
        let Some(client) = client else {
            return;
        };
        let fresh = RequestOptions {
            fresh: true,
            ..RequestOptions::default()
        };
        if let Ok(listed) = client.request("tools/list", None, &fresh).await {
            lock(&self.inner.tools).clear();
            *lock(&self.inner.task_tools) = None;
            self.note_tools(&listed);
            self.note_task_tools(&listed);
        }
    }

    /// Keeps the definitions of a `tools/list` page as the client got them.
    fn note_tools(&self, listed: &Value) {
        let Some(tools) = listed.get("tools").and_then(Value::as_array) else {
            return;
        };
        let mut known = lock(&self.inner.tools);
        for tool in tools {
            let Ok(tool) = serde_json::from_value::<Tool>(tool.clone()) else {
                continue;
            };
            if known.len() >= MAX_KNOWN_TOOLS && !known.contains_key(&tool.name) {
                continue;
            }
            known.insert(tool.name.clone(), tool);
        }
    }

    /// Records which tools of a `tools/list` page only run as tasks.
    fn note_task_tools(&self, listed: &Value) {
        let Some(tools) = listed.get("tools").and_then(Value::as_array) else {
            return;
        };
        let mut known = lock(&self.inner.task_tools);
        let known = known.get_or_insert_with(Default::default);
        for tool in tools {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            let required = tool
                .get("execution")
                .and_then(|e| e.get("taskSupport"))
                .and_then(Value::as_str)
                == Some("required");
            if required {
                known.insert(name.to_owned());
            } else {
                known.remove(name);
            }
        }
    }

    /// Translates a result from the upstream's revision into the client's.
    fn translate(
        &self,
        method: &str,
        result: Value,
        from: ProtocolVersion,
        leg: &Leg,
        report: &mut TranslationReport,
    ) -> Result<Value, LowerError> {
        let policy = self.inner.options.policy;
        if method == "tools/list" {
            self.note_task_tools(&result);
        }
        let mut value = if method == "tools/call" {
            let mut reply = Map::new();
            reply.insert("result".to_owned(), result);
            let translated = translate(reply, from, leg, policy)?;
            report.absorb(&translated.report);
            let mut reply = translated.reply;
            reply.remove("result").unwrap_or(Value::Null)
        } else {
            result
        };
        Lowering {
            leg,
            policy,
            report,
        }
        .result(method, &mut value)?;
        if method == "tools/list" {
            self.note_tools(&value);
        }
        Ok(value)
    }

    /// Logs a translation, keeps it, and puts it in the reply if asked to.
    fn record(&self, method: &str, report: &TranslationReport, value: &mut Value) {
        let lines: Vec<String> = report
            .downgrades()
            .iter()
            .map(ToString::to_string)
            .collect();
        tracing::info!(
            target: "droid::bridge",
            method,
            revision = %report.target(),
            downgrades = ?lines,
            "translated a reply for an older client"
        );
        {
            let mut reports = lock(&self.inner.reports);
            if reports.len() >= MAX_REPORTS {
                reports.pop_front();
            }
            reports.push_back(Report {
                method: method.to_owned(),
                report: report.clone(),
            });
        }
        if self.inner.options.report_meta {
            if let Value::Object(object) = value {
                let meta = object
                    .entry("_meta")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(meta) = meta {
                    let downgrades: Vec<Value> = report
                        .downgrades()
                        .iter()
                        .map(|d| json!({ "feature": format!("{:?}", d.feature), "detail": d.detail }))
                        .collect();
                    meta.insert(
                        REPORT_META.to_owned(),
                        json!({ "revision": report.target().as_str(), "downgrades": downgrades }),
                    );
                }
            }
        }
    }

    /// Sets a legacy upstream's session log level to what the request
    /// asked for, when it differs from what was last set.
    async fn settle_level(&self, upstream: &Upstream, call: &Call) {
        let Some(level) = call.ctx.log_level else {
            return;
        };
        if upstream
            .client
            .server()
            .is_none_or(|s| s.capabilities.logging.is_none())
        {
            return;
        }
        if *lock(&upstream.handler.level) == Some(level) {
            return;
        }
        match upstream.client.set_logging_level(level).await {
            Ok(()) => *lock(&upstream.handler.level) = Some(level),
            Err(error) => {
                tracing::debug!(target: "droid::bridge", %error, "the upstream refused the log level");
            }
        }
    }
}

/// What the bridge's own server forwards through: the bridge, held weakly.
struct Forwarding(std::sync::Weak<Inner>);

impl Forwarding {
    fn bridge(&self) -> Option<Bridge> {
        self.0.upgrade().map(|inner| Bridge { inner })
    }
}

impl Forward for Forwarding {
    fn forward<'a>(
        &'a self,
        method: &'a str,
        params: JsonObject,
        call: Call,
    ) -> BoxFuture<'a, Result<Value, CallError>> {
        Box::pin(async move {
            let Some(bridge) = self.bridge() else {
                return Err(CallError::internal("the bridge has shut down"));
            };
            bridge.forward_call(method, params, call).await
        })
    }

    fn tool(&self, name: &str) -> Option<Tool> {
        self.bridge()
            .and_then(|b| lock(&b.inner.tools).get(name).cloned())
    }

    fn capabilities(&self, version: ProtocolVersion) -> Option<JsonObject> {
        self.bridge().map(|b| b.offered_capabilities(version))
    }

    fn subscription(&self, session: SessionId, uri: &str, subscribed: bool) {
        if let Some(bridge) = self.bridge() {
            bridge.watch(session, uri, subscribed);
        }
    }

    fn session_closed(&self, session: SessionId) {
        if let Some(bridge) = self.bridge() {
            bridge.end_session(session);
        }
    }
}

impl Bridge {
    /// The upstream's capabilities, less what the bridge does not carry
    /// across, as a client at `version` is to read them.
    fn offered_capabilities(&self, version: ProtocolVersion) -> JsonObject {
        let mut caps = match serde_json::to_value(&self.inner.upstream.capabilities) {
            Ok(Value::Object(caps)) => caps,
            _ => JsonObject::new(),
        };
        caps.remove("tasks");
        caps.remove("extensions");
        if !Capability::Completions.exists_at(version) {
            caps.remove("completions");
        }
        caps
    }

    /// Counts `session` watching `uri` (or no longer), and tells the task
    /// that watches upstream when the set watched overall changed.
    fn watch(&self, session: SessionId, uri: &str, subscribed: bool) {
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
    fn end_session(&self, session: SessionId) {
        let before = self.watched_uris();
        lock(&self.inner.watched).remove(&session);
        if self.watched_uris() != before {
            self.inner.rewatch.notify_one();
        }
        let pool = lock(&self.inner.upstreams).remove(&Affinity::Session(session));
        for upstream in pool.into_iter().flatten() {
            tokio::spawn(async move { upstream.client.close().await });
        }
    }
}

/// Sends a relayed notification on `call`'s stream.
fn emit(call: &Call, relayed: Relay) {
    match relayed {
        Relay::Progress {
            progress,
            total,
            message,
        } => call.progress(progress, total, message.as_deref()),
        Relay::Log { level, data } => call.log(level, data),
    }
}

/// The params to send upstream: the client's own, without what the bridge
/// says for itself (the 2026-07-28 `_meta` keys, the input round members),
/// and, toward a 2026-07-28 server, with the client's capabilities, identity
/// and log level in `_meta`.
fn upstream_params(
    method: &str,
    mut params: JsonObject,
    call: &Call,
    upstream: ProtocolVersion,
) -> JsonObject {
    let era = upstream.era();
    params.remove("inputResponses");
    params.remove("requestState");
    // The bridge offers no tasks; a task asked for anyway is not passed on.
    params.remove("task");
    // A completion's context (2025-06-18) means nothing to an older server;
    // its completions are simply less precise without it.
    if method == "completion/complete" && !Feature::CompletionContext.exists_at(upstream) {
        params.remove("context");
    }
    let mut meta = match params.remove("_meta") {
        Some(Value::Object(meta)) => meta,
        _ => JsonObject::new(),
    };
    for key in REQUEST_META_KEYS {
        meta.remove(key);
    }
    if era == Era::Modern {
        let mut caps = JsonObject::clone(&call.ctx.client_capabilities);
        // Legacy-only members have no 2026-07-28 meaning.
        if let Some(Value::Object(roots)) = caps.get_mut("roots") {
            roots.remove("listChanged");
        }
        caps.remove("tasks");
        meta.insert(CLIENT_CAPABILITIES_META.to_owned(), Value::Object(caps));
        if let Some(info) = &call.ctx.client_info {
            meta.insert(
                CLIENT_INFO_META.to_owned(),
                Value::Object(JsonObject::clone(info)),
            );
        }
        if let Some(level) = call.ctx.log_level {
            meta.insert(LOG_LEVEL_META.to_owned(), json!(level));
        }
    }
    if !meta.is_empty() {
        params.insert("_meta".to_owned(), Value::Object(meta));
    }
    params
}

/// Everything a bridge can ask a client for on an upstream's behalf.
fn full_capabilities() -> ClientCapabilities {
    serde_json::from_value(json!({
        "roots": { "listChanged": false },
        "sampling": {},
        "elicitation": { "form": {}, "url": {} },
    }))
    .unwrap_or_default()
}

/// What a legacy client declared, as the upstream is to hear it.
fn legacy_capabilities(declared: &JsonObject) -> ClientCapabilities {
    let mut declared = declared.clone();
    declared.remove("tasks");
    serde_json::from_value(Value::Object(declared)).unwrap_or_default()
}

/// A stable key for a capability set.
fn capabilities_key(capabilities: &ClientCapabilities) -> String {
    serde_json::to_string(capabilities).unwrap_or_default()
}

/// The key the state of a URL round travels under.
const URL_ASKED: &str = "urlAsked";

/// A 2025-11-25 server's `-32042` (URL elicitation required), for a
/// 2026-07-28 client: an input round asking the URLs, whose retry sends the
/// request upstream again. A retry the server still refuses gets the
/// server's error.
async fn url_round(call: &Call, error: ErrorObject) -> CallError {
    let retried = call.state().is_some_and(|s| s.get(URL_ASKED).is_some());
    let elicitations = error
        .data
        .as_ref()
        .and_then(|d| d.get("elicitations"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if retried || elicitations.is_empty() {
        return CallError::Protocol(error);
    }
    let questions = elicitations
        .into_iter()
        .enumerate()
        .map(|(i, mut params)| {
            // The id is the upstream's bookkeeping; 2026-07-28 has none.
            if let Value::Object(params) = &mut params {
                params.remove("elicitationId");
            }
            Question::Elicit {
                key: format!("url{i}"),
                params,
            }
        })
        .collect();
    call.keep_state(json!({ URL_ASKED: true }));
    match call.ask_all(questions).await {
        Err(round @ CallError::InputRequired(_)) => round,
        Err(other) => other,
        // Answers already in hand mean this is the retry; the server's
        // error stands.
        Ok(_) => CallError::Protocol(error),
    }
}

/// An upstream failure as the client is to read it.
fn upstream_error(error: ClientError, leg: &Leg) -> CallError {
    match error {
        ClientError::Server(mut object) => {
            // A missing resource is `-32602` from 2026-07-28 on.
            if object.code == ErrorCode::RESOURCE_NOT_FOUND
                && !leg.profile.allows(Feature::LegacyResourceNotFound)
            {
                object.code = ErrorCode::INVALID_PARAMS;
            }
            CallError::Protocol(object)
        }
        // The detail names the upstream (its URL, its command): logged,
        // not told to the client.
        ClientError::Timeout { method, millis } => {
            tracing::warn!(target: "droid::bridge", method, millis, "the upstream did not answer in time");
            CallError::internal(format!(
                "the upstream gave no answer to {method} within {millis} ms; the request was cancelled"
            ))
        }
        other => {
            tracing::warn!(target: "droid::bridge", error = %other, "the upstream failed");
            CallError::internal("the upstream failed; the bridge's log says why")
        }
    }
}
