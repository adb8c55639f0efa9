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
//! (`discovery`). Upstreams are kept up by `supervise`, listed by
//! `refresh`; the pins in force are `pins`'s, the principals that keep
//! activations without a session `principals`'s.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use super::catalog::{Pins, ToolCatalog, ToolSource};
use super::forwarding::{Forwarding, rename_content};
use super::gate::ExecutionGate;
use super::names;
use super::principals::{MAX_PRINCIPALS, PRINCIPAL_IDLE, Principals};
use super::session::{DropReason, DroppedActivation, SessionToolSet};
use super::trust::{Approval, TrustStore};
use super::upstream::Upstream;
use super::watches::Watches;
use crate::application::bridge::Bridge;
use crate::application::server::{AuthContext, PeerSession, Primitive, ScopeRules};
use crate::application::server::{
    Call, CallError, Server, ServerBuilder, ToolAccess, ToolSpec, ToolVisibility,
};
use crate::domain::Refusal;
use crate::domain::SessionId;
use crate::domain::catalog::{Provenance, SchemaDigest, ToolId};
use crate::domain::ir::{JsonObject, ToolResult};
use crate::domain::jsonrpc::ErrorCode;
use crate::wire::Tool;
use serde_json::Value;

/// Why [`Gateway::set_primitive_scopes`] refused its rules.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScopeRuleError {
    /// A rule names a tool.
    #[error("the rule for {0:?} names a tool; tools take their scope by id")]
    Tool(String),
    /// A rule names no upstream of the gateway.
    #[error("the {} rule for {name:?} names no upstream (prompts are `upstream/name`, resources `upstream+uri`)", .kind.word())]
    NoUpstream {
        /// What it names.
        kind: Primitive,
        /// The name.
        name: String,
    },
}

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
    pub(super) configured: Pins,
    /// What was trusted on first use, by upstreams trusted that way.
    pub(super) first_use: Pins,
    /// The upstreams whose first use has been taken (in this process, or
    /// recorded in the store), even those that showed nothing then.
    pub(super) first_used: BTreeSet<String>,
    /// The operator's approvals on the running gateway; each holds while
    /// the configuration pins its tool as it did when it was made.
    pub(super) approved: BTreeMap<ToolId, Approval>,
    pub(super) upstreams: BTreeMap<String, Upstream>,
    /// The scope a caller needs to see and call a tool, by id.
    pub(super) scopes: BTreeMap<ToolId, String>,
    pub(super) sessions: BTreeMap<SessionId, SessionToolSet>,
    /// Why each session lost the activations it lost, so a call to one is
    /// refused by naming the reason rather than as an unknown tool.
    pub(super) lost: BTreeMap<SessionId, BTreeMap<ToolId, String>>,
    pub(super) drift: VecDeque<DriftReport>,
    /// Where first-use trust and approvals are kept beyond this process.
    pub(super) trust_store: Option<Arc<dyn TrustStore>>,
    /// What sessions watch upstream, for a bridge opened anew.
    pub(super) watches: Watches,
    /// The session standing for each authenticated 2026-07-28 principal,
    /// whose activations it keeps across requests.
    principals: Principals,
}

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
                    // The server's sessions are bounded here; principals'
                    // by `principals`. Theirs are numbered from the top, so
                    // the first entry is always the server's oldest.
                    let served = self.sessions.len().saturating_sub(self.principals.len());
                    if served >= MAX_SESSIONS {
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

    /// Runs `f` with the set serving `peer` and `caller`, as
    /// [`Self::set_for`] finds it, without copying a kept set: what every
    /// call and every visibility check reads.
    pub(super) fn with_set<R>(
        &mut self,
        peer: &PeerSession,
        caller: &AuthContext,
        disclosure: Disclosure,
        f: impl FnOnce(&Self, &SessionToolSet) -> R,
    ) -> R {
        match self.keeping_session(peer, caller, disclosure) {
            Some(session) => {
                let _built = self.session_set(session, disclosure);
                match self.sessions.get(&session) {
                    Some(set) => f(self, set),
                    None => f(self, &fresh_set(session, &self.catalog, disclosure)),
                }
            }
            None => {
                let set = fresh_set(peer.session(), &self.catalog, disclosure);
                f(self, &set)
            }
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
        // A token naming neither subject nor client cannot tell two callers
        // apart: they would share activations.
        let claims = caller.claims()?;
        if claims.sub.is_none() && claims.client_id.is_none() {
            return None;
        }
        let key = caller.principal_key()?;
        let (session, forgotten) = self.principals.session_for(&key, Instant::now());
        for session in forgotten {
            self.forget_session(session);
        }
        Some(session)
    }

    pub(super) fn forget_session(&mut self, session: SessionId) {
        self.sessions.remove(&session);
        self.lost.remove(&session);
        self.watches.forget(session);
    }

    /// What the server may do with `id` for `peer` and `caller`.
    fn access(
        &mut self,
        peer: &PeerSession,
        caller: &AuthContext,
        disclosure: Disclosure,
        id: &ToolId,
    ) -> ToolAccess {
        self.with_set(peer, caller, disclosure, |state, set| {
            if set.is_core(id) || set.activation(id).is_some() {
                return ToolAccess::Granted;
            }
            match state.lost.get(set.session()).and_then(|lost| lost.get(id)) {
                Some(why) => ToolAccess::Refused(why.clone()),
                None => ToolAccess::Hidden,
            }
        })
    }

    /// Rebuilds every session's set against the catalog as it is now:
    /// the sessions whose list changed, and how many activations each tool
    /// lost.
    pub(super) fn rebuild_sessions(
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

    pub(super) fn record_drift(&mut self, report: DriftReport) {
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
            first_used: BTreeSet::new(),
            approved: BTreeMap::new(),
            pins,
            upstreams: BTreeMap::new(),
            scopes: BTreeMap::new(),
            sessions: BTreeMap::new(),
            lost: BTreeMap::new(),
            drift: VecDeque::new(),
            trust_store: None,
            watches: Watches::default(),
            principals: Principals::new(MAX_PRINCIPALS, PRINCIPAL_IDLE),
        }));
        let seen = Arc::clone(&state);
        let visibility: ToolVisibility = Arc::new(move |peer, caller, name| {
            lock(&seen).access(peer, caller, disclosure, &ToolId::new(name))
        });
        let forwarding = Arc::new(Forwarding(Arc::clone(&state)));
        let server = builder
            .tool_visibility(visibility)
            .forward(forwarding)
            .build()?;
        let gateway = Self {
            inner: Arc::new(Inner {
                server,
                disclosure,
                state,
            }),
        };
        if disclosure == Disclosure::Progressive {
            gateway.add_discovery_tools();
        }
        Ok(gateway)
    }

    /// The server to serve over any transport.
    #[must_use]
    pub fn server(&self) -> &Server {
        &self.inner.server
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

    /// Drops the scope rule of the tool `id`: it is open to every caller the
    /// session's tool set lets see it.
    pub fn drop_scope(&self, id: &ToolId) {
        let _registered = self.inner.server.set_tool_scope(id.as_str(), None);
        lock(&self.inner.state).scopes.remove(id);
    }

    /// Requires scopes of callers for prompts, resources and resource
    /// templates, by the names sessions see them under (`upstream/prompt`,
    /// `prefix+uri`; see the gateway's documentation), replacing the rules
    /// set this way before. A caller without the scope neither sees the
    /// primitive listed nor can get, read, subscribe to or complete it.
    ///
    /// # Errors
    ///
    /// [`ScopeRuleError`] for a rule on a tool (tools have
    /// [`Self::require_scope`]) or one naming no upstream of the gateway;
    /// nothing is changed then.
    pub fn set_primitive_scopes(&self, rules: ScopeRules) -> Result<(), ScopeRuleError> {
        {
            let state = lock(&self.inner.state);
            for (kind, name, _) in rules.iter() {
                let owner = match kind {
                    Primitive::Tool => return Err(ScopeRuleError::Tool(name.to_owned())),
                    Primitive::Prompt => names::split_name(name)
                        .is_some_and(|(upstream, _)| state.upstreams.contains_key(upstream)),
                    Primitive::Resource | Primitive::Template => names::split_uri(name)
                        .is_some_and(|(prefix, _)| {
                            state.upstreams.values().any(|u| u.prefix == prefix)
                        }),
                };
                if !owner {
                    return Err(ScopeRuleError::NoUpstream {
                        kind,
                        name: name.to_owned(),
                    });
                }
            }
        }
        self.inner.server.set_forwarded_scopes(rules);
        Ok(())
    }

    /// The scope rules in force, by tool id.
    #[must_use]
    pub fn scopes(&self) -> BTreeMap<ToolId, String> {
        lock(&self.inner.state).scopes.clone()
    }

    pub(super) fn register_upstream_tool(&self, id: &ToolId, tool: Tool) {
        // Weak: the server holds the handlers and the gateway holds the
        // server, so a strong handle here would keep both alive forever.
        let gateway = Arc::downgrade(&self.inner);
        let mut spec = ToolSpec::from_definition(tool);
        if let Some(scope) = lock(&self.inner.state).scopes.get(id) {
            spec = spec.scope(scope.clone());
        }
        let registered = id.clone();
        self.inner.server.add_tool(spec, move |call: Call| {
            let gateway = gateway.upgrade().map(|inner| Self { inner });
            let id = registered.clone();
            async move {
                match gateway {
                    Some(gateway) => gateway.forward(&id, call).await,
                    None => Err(CallError::internal("the gateway is shutting down")),
                }
            }
        });
        // A scope rule set while the tool was being registered found no
        // tool to set it on; read again now that the tool is there.
        if let Some(scope) = lock(&self.inner.state).scopes.get(id).cloned() {
            let _registered = self.inner.server.set_tool_scope(id.as_str(), Some(scope));
        }
    }

    /// Authorizes a call through the gate and forwards it upstream.
    async fn forward(&self, id: &ToolId, mut call: Call) -> Result<ToolResult, CallError> {
        let route = {
            let mut state = lock(&self.inner.state);
            state.with_set(
                call.peer(),
                call.caller(),
                self.inner.disclosure,
                |state, set| state.route(set, id),
            )?
        };
        // Moved, not copied: nothing after this reads them from the call.
        let arguments = std::mem::take(&mut call.arguments);
        self.call_upstream(route, arguments, &call).await
    }

    /// Calls the tool `route` leads to with `arguments`, for `call`: through
    /// the upstream's bridge, so the upstream's questions go to `call`'s
    /// client, its progress and log lines reach `call`'s stream, and a
    /// cancellation of `call` reaches the upstream.
    pub(super) async fn call_upstream(
        &self,
        route: Route,
        arguments: JsonObject,
        call: &Call,
    ) -> Result<ToolResult, CallError> {
        let Route {
            bridge,
            name,
            upstream,
            prefix,
        } = route;
        let mut params = JsonObject::new();
        params.insert("name".to_owned(), Value::String(name));
        params.insert("arguments".to_owned(), Value::Object(arguments));
        match bridge.forward_call("tools/call", params, call).await {
            Ok(mut result) => {
                if let Some(content) = result.get_mut("content") {
                    rename_content(&prefix, content);
                }
                serde_json::from_value(result).map_err(|error| {
                tracing::warn!(%upstream, %error, "an upstream's tool result does not parse");
                CallError::internal(format!(
                    "upstream {upstream} answered the call with something that is not a tool result"
                ))
                })
            }
            Err(error) => Err(link_error(&upstream, error)),
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
    bridge: Bridge,
    name: String,
    upstream: String,
    /// What the upstream's resource URIs are prefixed with.
    prefix: String,
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
        let bridge = linked.usable(upstream).map_err(CallError::internal)?;
        let name = linked
            .options
            .tools
            .upstream_name(record.source_name())
            .to_owned();
        Ok(Route {
            bridge,
            name,
            upstream: upstream.clone(),
            prefix: linked.prefix.clone(),
        })
    }
}

/// An upstream's error, as a session is to read it. Some describe the
/// gateway's own link to the upstream, not the caller's request; passed on,
/// they would send the caller to fix what it did not do. Which upstream
/// failed is worth saying when a session has many.
pub(super) fn link_error(upstream: &str, error: CallError) -> CallError {
    match error {
        CallError::Protocol(error)
            if [
                ErrorCode::HEADER_MISMATCH,
                ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
            ]
            .contains(&error.code) =>
        {
            CallError::internal(format!(
                "upstream {upstream} refused the request: {}",
                error.message
            ))
        }
        CallError::Protocol(mut error) if error.code == ErrorCode::INTERNAL_ERROR => {
            error.message = format!("upstream {upstream}: {}", error.message);
            CallError::Protocol(error)
        }
        other => other,
    }
}

/// A refusal of the caller's request, by name (`-32602`).
pub(super) fn refused(message: String) -> CallError {
    Refusal::invalid_params(message).into()
}
