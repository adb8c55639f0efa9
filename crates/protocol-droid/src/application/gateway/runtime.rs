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
//! What the gateway knows is `state`'s, behind one lock. In progressive
//! mode a session starts with the discovery tools only (`discovery`).
//! Upstreams are kept up by `supervise`, listed by
//! `refresh`; the pins in force are `pins`'s, the principals that keep
//! activations without a session `principals`'s.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use super::catalog::{Pins, ToolCatalog};
use super::forwarding::{Forwarding, rename_blocks};
use super::names;
use super::principals::{MAX_PRINCIPALS, PRINCIPAL_IDLE, Principals};
use super::state::{Disclosure, DriftReport, Route, State, link_error, lock};
use super::watches::Watches;
use crate::application::observe::upstream_call;
use crate::application::server::{
    Call, CallError, Server, ServerBuilder, ToolEdits, ToolSpec, ToolVisibility,
};
use crate::application::server::{Primitive, ScopeRules};
use crate::domain::catalog::{Provenance, SchemaDigest, ToolId};
use crate::domain::ir::{JsonObject, ToolResult};
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

pub(super) struct Inner {
    pub(super) server: Server,
    pub(super) disclosure: Disclosure,
    pub(super) state: Arc<Mutex<State>>,
    /// What the other instances of this gateway share with it, once
    /// [`Gateway::share`] is called.
    pub(super) shared: std::sync::OnceLock<super::shared::SharedGateway>,
    /// Where the upstreams' parked calls are reached from the other
    /// instances, once shared.
    pub(super) parked: std::sync::OnceLock<crate::application::bridge::ParkedCalls>,
    /// Held by one approval at a time from its decision to its record, so
    /// that the records are kept in the order the approvals were made: of
    /// two approvals of one tool, the state file keeps the later.
    pub(super) approving: tokio::sync::Mutex<()>,
    /// Whether an announcement of a changed prompt (resource) list is due:
    /// every upstream's announcements, and its coming up and going down,
    /// gathered so that those close together are announced once.
    pub(super) prompts_pending: Arc<std::sync::atomic::AtomicBool>,
    pub(super) resources_pending: Arc<std::sync::atomic::AtomicBool>,
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

/// A handle on a [`Gateway`] that does not keep it alive: for what the
/// gateway's own server holds (a metrics source, say), which a strong handle
/// would make a cycle of.
#[derive(Clone, Debug)]
pub struct WeakGateway(std::sync::Weak<Inner>);

impl WeakGateway {
    /// The gateway, while it lives.
    #[must_use]
    pub fn upgrade(&self) -> Option<Gateway> {
        self.0.upgrade().map(|inner| Gateway { inner })
    }
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("disclosure", &self.inner.disclosure)
            .finish_non_exhaustive()
    }
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
            retiring: BTreeSet::new(),
            sessions: BTreeMap::new(),
            lost: BTreeMap::new(),
            drift: VecDeque::new(),
            drift_kept: HashMap::new(),
            trust_store: None,
            watches: Watches::default(),
            principals: Principals::new(MAX_PRINCIPALS, PRINCIPAL_IDLE),
            approval_versions: BTreeMap::new(),
            shared_activations: HashMap::new(),
            unclaimed: BTreeMap::new(),
        }));
        let seen = Arc::clone(&state);
        let visibility: ToolVisibility = Arc::new(move |peer, caller, name| {
            lock(&seen).access(peer, caller, disclosure, &ToolId::new(name))
        });
        let forwarding = Arc::new(Forwarding {
            state: Arc::clone(&state),
            observer: builder.observer_handle(),
            disclosure,
        });
        let server = builder
            .tool_visibility(visibility)
            .forward(forwarding)
            .build()?;
        let gateway = Self {
            inner: Arc::new(Inner {
                server,
                disclosure,
                state,
                shared: std::sync::OnceLock::new(),
                parked: std::sync::OnceLock::new(),
                approving: tokio::sync::Mutex::new(()),
                prompts_pending: Arc::default(),
                resources_pending: Arc::default(),
            }),
        };
        if disclosure == Disclosure::Progressive {
            gateway.add_discovery_tools();
        }
        // Weak, as for the tools' handlers: the server holds the hook.
        let weak = gateway.downgrade();
        let _set = gateway
            .inner
            .server
            .catch_up_tools_with(Arc::new(move |peer, caller| {
                let gateway = weak.upgrade();
                let (peer, caller) = (peer.clone(), caller.clone());
                Box::pin(async move {
                    match gateway {
                        Some(gateway) => gateway.catch_up(&peer, &caller).await,
                        None => false,
                    }
                })
            }));
        Ok(gateway)
    }

    /// A handle that does not keep this gateway alive.
    #[must_use]
    pub fn downgrade(&self) -> WeakGateway {
        WeakGateway(Arc::downgrade(&self.inner))
    }

    /// The server to serve over any transport.
    #[must_use]
    pub fn server(&self) -> &Server {
        &self.inner.server
    }

    /// Requires `scope` of a caller to see and call the tool `id`, now and
    /// whenever the tool is registered again; the server's authorization
    /// answers a hidden tool as an unknown one. An upstream that comes up
    /// listing no tool a rule names for it is kept down
    /// ([`UpstreamError::ScopeRule`](super::UpstreamError::ScopeRule)): the
    /// rule is taken for a typo that would leave the tool it meant open.
    pub fn require_scope(&self, id: ToolId, scope: String) {
        // The rule first, then the tool: a registration of the tool between
        // the two reads the rule after registering, and sets it.
        let name = id.as_str().to_owned();
        {
            let mut state = lock(&self.inner.state);
            state.retiring.remove(&id);
            state.scopes.insert(id, scope.clone());
        }
        let _registered = self.inner.server.set_tool_scope(&name, Some(scope));
    }

    /// Drops the scope rule of the tool `id`: it is open to every caller the
    /// session's tool set lets see it.
    pub fn drop_scope(&self, id: &ToolId) {
        {
            let mut state = lock(&self.inner.state);
            state.retiring.remove(id);
            state.scopes.remove(id);
        }
        let _registered = self.inner.server.set_tool_scope(id.as_str(), None);
    }

    /// Marks the scope rule of the tool `id` as on its way out: it stays
    /// in force until [`Self::drop_scope`], but its upstream, replaced
    /// meanwhile, is not kept down for no longer listing the tool (see
    /// [`Self::require_scope`]). For a reload that drops the rule once the
    /// replacement is up, and until then must not open what it closes.
    pub fn retire_scope(&self, id: &ToolId) {
        let mut state = lock(&self.inner.state);
        if state.scopes.contains_key(id) {
            state.retiring.insert(id.clone());
        }
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

    /// Registers (`Some`) or unregisters (`None`) the upstream tools
    /// `registrations` name, as one change of the server's tools: an
    /// upstream relisting thousands of tools is one edit, not one each.
    pub(super) fn register_upstream_tools(&self, registrations: Vec<(ToolId, Option<Tool>)>) {
        if registrations.is_empty() {
            return;
        }
        let scopes = lock(&self.inner.state).scopes.clone();
        self.inner.server.edit_tools(|tools| {
            for (id, tool) in registrations {
                match tool {
                    Some(tool) => self.register_upstream_tool(tools, &id, tool, scopes.get(&id)),
                    None => {
                        let _removed = tools.remove(id.as_str());
                    }
                }
            }
        });
        // A scope rule set or dropped while the tools were being registered
        // found them missing, or was overwritten: read again now they are
        // there.
        let now = lock(&self.inner.state).scopes.clone();
        if now != scopes {
            self.inner.server.edit_tools(|tools| {
                for id in scopes.keys().chain(now.keys()) {
                    if scopes.get(id) != now.get(id) {
                        let _registered = tools.set_scope(id.as_str(), now.get(id).cloned());
                    }
                }
            });
        }
    }

    /// Registers the upstream tool `id` within `tools`, requiring `scope`.
    fn register_upstream_tool(
        &self,
        tools: &mut ToolEdits<'_>,
        id: &ToolId,
        tool: Tool,
        scope: Option<&String>,
    ) {
        // Weak: the server holds the handlers and the gateway holds the
        // server, so a strong handle here would keep both alive forever.
        let gateway = Arc::downgrade(&self.inner);
        // Registered as the gateway runs it, which may differ from how its
        // upstream does.
        let support = tool.execution.as_ref().and_then(|e| e.task_support);
        let mut spec = ToolSpec::from_definition(tool);
        if let Some(support) = support {
            spec = spec.task_support(support.through_intermediary());
        }
        if let Some(scope) = scope {
            spec = spec.scope(scope.clone());
        }
        let registered = id.clone();
        tools.add(spec, move |call: Call| {
            let gateway = gateway.upgrade().map(|inner| Self { inner });
            let id = registered.clone();
            async move {
                match gateway {
                    Some(gateway) => gateway.forward(&id, call).await,
                    None => Err(CallError::internal("the gateway is shutting down")),
                }
            }
        });
    }

    /// Authorizes a call through the gate and forwards it upstream.
    async fn forward(&self, id: &ToolId, mut call: Call) -> Result<ToolResult, CallError> {
        let route = self.route(id, &call)?;
        // Moved, not copied: nothing after this reads them from the call.
        let arguments = std::mem::take(&mut call.arguments);
        self.call_upstream(route, arguments, &call).await
    }

    /// Where `call` of the tool `id` goes, if its caller was given the tool.
    fn route(&self, id: &ToolId, call: &Call) -> Result<Route, CallError> {
        let mut state = lock(&self.inner.state);
        state.with_set(
            call.peer(),
            call.caller(),
            self.inner.disclosure,
            |state, set| state.route(set, id),
        )
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
        // Room for the `_meta` the bridge adds: growing rehashes the names.
        let mut params = JsonObject::with_capacity(3);
        params.insert("name".to_owned(), Value::String(name));
        params.insert("arguments".to_owned(), Value::Object(arguments));
        // Boxed: carried inline, the bridge's future would be held twice
        // over in this one, and copied whole at every move up to the
        // runtime (each call's handler future is moved several times).
        let forwarded = Box::pin(bridge.forward_tool_call(params, call));
        let observer = self.inner.server.observer();
        match upstream_call(&**observer, &upstream, "tools/call", forwarded).await {
            Ok(Ok(mut result)) => {
                // The upstream's name for itself was left out as it was read.
                rename_blocks(&prefix, &mut result.content);
                Ok(result)
            }
            Ok(Err(error)) => {
                tracing::warn!(%upstream, %error, "an upstream's tool result does not parse");
                Err(CallError::internal(format!(
                    "upstream {upstream} answered the call with something that is not a tool result"
                )))
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

    /// The digests the tools `ids` are trusted at (pinned in the
    /// configuration, trusted on first use, or approved), for those that
    /// are: what an unverified tool's change is to be weighed against,
    /// however many unapproved changes came between. Read under one lock,
    /// however many are asked for.
    #[must_use]
    pub fn trusted_digests<'a>(
        &self,
        ids: impl IntoIterator<Item = &'a ToolId>,
    ) -> BTreeMap<ToolId, SchemaDigest> {
        let state = lock(&self.inner.state);
        ids.into_iter()
            .filter_map(|id| state.pins.get(id).map(|digest| (id.clone(), *digest)))
            .collect()
    }

    /// The most recent drift reports, oldest first.
    #[must_use]
    pub fn drift(&self) -> Vec<DriftReport> {
        lock(&self.inner.state).drift.iter().cloned().collect()
    }
}
