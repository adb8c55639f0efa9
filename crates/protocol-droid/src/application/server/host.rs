//! The server host: what a server is and offers, and the change feed its
//! connections and listeners follow.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::call::{Call, CallError};
pub use super::change::Change;
use super::forward::Forward;
use super::idempotency::{IdempotencyLimits, IdempotencyStore};
use super::rate::{Limiters, RateLimits};
use super::registry::{Handler, Registry, ToolEdits, ToolSpec, handler};
use super::request_state::{KeyError, StateKey, StateSealer};
use super::scopes::{Primitive, ScopeRules};
use super::shared::{MemoryRounds, RoundLedger, SharedSessions};
use super::specs::{PromptOutput, PromptSpec, ResourceSpec};
use super::targeted::{ChangeFeed, SessionChanges, Targets};
use super::tasks::{MemoryTaskStore, TaskLimits, TaskStore, Tasks};
use super::typed::ToolOutput;
use super::{AuthContext, PeerSession, RequestContext};
use crate::application::observe::SharedObserver;
use crate::domain::ir::{JsonObject, ResourceContents, ToolResult};
use crate::domain::jsonrpc::ErrorObject;
use crate::domain::{
    Capability, CapabilitySet, FeatureProfile, LoggingLevel, Negotiation, ProtocolVersion,
    SessionId, resolve,
};
use crate::wire::prompts::{GetPromptResult, Prompt};
use crate::wire::resources::{Resource, ResourceTemplate};
use crate::wire::tools::TaskSupport;

/// How many answered `requestState`s are remembered, each until it expires.
const ROUNDS_REMEMBERED: usize = 65_536;

/// How many unread changes a slow listener may fall behind by.
const CHANGE_BACKLOG: usize = 256;

/// Every capability a server can declare at `version`: tools, prompts and
/// resources (subscribe and list changes included) and logging, and, with
/// `completions` and from the revision that has them, completions.
#[must_use]
pub fn every_capability(version: ProtocolVersion, completions: bool) -> JsonObject {
    let mut caps = JsonObject::new();
    caps.insert("tools".to_owned(), json!({ "listChanged": true }));
    caps.insert("prompts".to_owned(), json!({ "listChanged": true }));
    caps.insert(
        "resources".to_owned(),
        json!({ "subscribe": true, "listChanged": true }),
    );
    caps.insert("logging".to_owned(), json!({}));
    if completions && Capability::Completions.exists_at(version) {
        caps.insert("completions".to_owned(), json!({}));
    }
    caps
}

/// Decides whether a session's caller may see and call a tool, on top of
/// scopes: `(session, caller, tool name)`.
pub type ToolVisibility = Arc<dyn Fn(&PeerSession, &AuthContext, &str) -> ToolAccess + Send + Sync>;

/// Asked before a call of a registered tool is answered as for an unknown
/// one because [`ToolVisibility`] hid it: whether what the hook decides
/// from may have changed since (a gateway reading a caller's activations
/// made through another instance), so that it is asked once more.
pub type ToolCatchUp =
    Arc<dyn Fn(&PeerSession, &AuthContext) -> super::ports::BoxFuture<'static, bool> + Send + Sync>;

/// What a [`ToolVisibility`] hook decided for one tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolAccess {
    /// Listed and callable.
    Granted,
    /// Neither listed nor callable: a call is answered as for an unknown
    /// tool, so nothing is revealed.
    Hidden,
    /// Not listed, and a call is refused with this reason: for a tool the
    /// session had and lost (its definition drifted), where saying why is
    /// the point.
    Refused(String),
}

/// A server: what it is, and what it offers.
///
/// Cheap to clone; every clone serves the same registry. A transport serves
/// it: the stdio adapter's `serve_process`, or the HTTP adapter's
/// `HttpServer` (both in the crate's `prelude`).
///
/// ```
/// use protocol_droid::prelude::*;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = Server::builder("notes", "1.0.0")
///     .instructions("Keeps short notes.")
///     .build()?;
/// server.add_tool(ToolSpec::new("count", "How many notes there are"), |_call: Call| async {
///     Ok(ToolResult::text("0"))
/// });
/// assert_eq!(server.tool("count").map(|tool| tool.name), Some("count".to_owned()));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Server {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) name: String,
    pub(super) instructions: Option<String>,
    pub(super) offered: Vec<ProtocolVersion>,
    /// Replaced whole on every edit (copy on write), so a request takes a
    /// cheap snapshot and never holds the lock while a handler runs.
    pub(super) registry: RwLock<Arc<Registry>>,
    pub(super) changes: broadcast::Sender<Change>,
    /// What is for one session only.
    pub(super) targets: Targets,
    /// Behind a lock so its key can be rotated while the server runs.
    pub(super) sealer: RwLock<StateSealer>,
    pub(super) idempotency: Mutex<IdempotencyStore>,
    /// The `requestState`s answered, so each is answered once: in memory,
    /// or in the store several instances share ([`Server::share`]).
    pub(super) rounds: RwLock<Arc<dyn RoundLedger>>,
    /// Whether the shared store answered when last asked; unset while the
    /// server shares nothing.
    pub(super) store_health: std::sync::OnceLock<Arc<std::sync::atomic::AtomicBool>>,
    /// Where legacy sessions are shared, once [`Server::share`] says.
    pub(super) shared_sessions: std::sync::OnceLock<SharedSessions>,
    /// Where the changes to tell the other instances go, once shared.
    pub(super) relay_changes: std::sync::OnceLock<tokio::sync::mpsc::Sender<Change>>,
    pub(super) next_session: AtomicU64,
    pub(super) tool_visibility: Option<ToolVisibility>,
    /// Set once by whoever hides tools (see [`Server::catch_up_tools_with`]).
    pub(super) tool_catch_up: std::sync::OnceLock<ToolCatchUp>,
    pub(super) forward: Option<Arc<dyn Forward>>,
    /// Replaced whole when changed, as the registry is.
    pub(super) forward_scopes: RwLock<Arc<ScopeRules>>,
    pub(super) observer: SharedObserver,
    pub(super) limiters: Limiters,
    pub(super) tasks: Arc<Tasks>,
    /// Whether a registered tool runs as a task, as of the last edit.
    pub(super) task_tools: std::sync::atomic::AtomicBool,
    /// `{name, version}`, built once: every 2026-07-28 result names it.
    pub(super) server_info: Value,
    /// What each negotiation seen allows, so that a 2026-07-28 request,
    /// which negotiates afresh, does not walk every feature again. Few
    /// negotiations occur (a revision, two sets of capability flags, a
    /// transport); past [`PROFILES_REMEMBERED`] it starts over.
    ///
    /// Read far more often than written, hence a read-write lock: requests
    /// on every worker look up side by side.
    pub(super) profiles: RwLock<HashMap<Negotiation, FeatureProfile>>,
}

/// How many negotiations' profiles a server keeps.
const PROFILES_REMEMBERED: usize = 64;

impl core::fmt::Debug for Server {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Server")
            .field("name", &self.inner.name)
            .field("offered", &self.inner.offered)
            .finish_non_exhaustive()
    }
}

/// Builds a [`Server`].
pub struct ServerBuilder {
    name: String,
    version: String,
    instructions: Option<String>,
    offered: Vec<ProtocolVersion>,
    sealer: Option<StateSealer>,
    tool_visibility: Option<ToolVisibility>,
    forward: Option<Arc<dyn Forward>>,
    forward_scopes: ScopeRules,
    idempotency: IdempotencyLimits,
    observer: SharedObserver,
    rate_limits: RateLimits,
    task_store: Option<Arc<dyn TaskStore>>,
    task_limits: TaskLimits,
}

impl core::fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ServerBuilder")
            .field("name", &self.name)
            .field("offered", &self.offered)
            .field("tool_visibility", &self.tool_visibility.is_some())
            .field("forward", &self.forward.is_some())
            .finish_non_exhaustive()
    }
}

impl ServerBuilder {
    /// Serves the primitives through `forward` rather than the registry:
    /// what a bridge does.
    #[must_use]
    pub fn forward(mut self, forward: Arc<dyn Forward>) -> Self {
        self.forward = Some(forward);
        self
    }

    /// The scopes the forwarded primitives require (see [`ScopeRules`]):
    /// without them, everything the upstream offers is open to every
    /// caller the transport admitted.
    #[must_use]
    pub fn forwarded_scopes(mut self, rules: ScopeRules) -> Self {
        self.forward_scopes = rules;
        self
    }

    /// The bounds of the record that replays a retried `tools/call`'s answer
    /// (per session and in bytes; see `IdempotencyLimits`).
    #[must_use]
    pub const fn idempotency(mut self, limits: IdempotencyLimits) -> Self {
        self.idempotency = limits;
        self
    }

    /// Consults `visibility` for every tool a session lists or calls, after
    /// scopes: what a gateway uses to give each session its own tool set.
    #[must_use]
    pub fn tool_visibility(mut self, visibility: ToolVisibility) -> Self {
        self.tool_visibility = Some(visibility);
        self
    }

    /// Reports every request, and what a bridge or gateway built on this
    /// server does, to `observer` (by default, to nothing).
    #[must_use]
    pub fn observer(mut self, observer: SharedObserver) -> Self {
        self.observer = observer;
        self
    }

    /// Refuses a caller's requests beyond `limits` (none by default).
    #[must_use]
    pub fn rate_limits(mut self, limits: RateLimits) -> Self {
        self.rate_limits = limits;
        self
    }

    /// Keeps tasks in `store` rather than in this process's memory: what
    /// several instances sharing their tasks need.
    #[must_use]
    pub fn task_store(mut self, store: Arc<dyn TaskStore>) -> Self {
        self.task_store = Some(store);
        self
    }

    /// How long tasks are kept and how often clients are told to poll
    /// them (see [`TaskLimits`]).
    #[must_use]
    pub const fn task_limits(mut self, limits: TaskLimits) -> Self {
        self.task_limits = limits;
        self
    }

    /// The observer the server will report to, for what is built around
    /// it before it is.
    pub(crate) fn observer_handle(&self) -> SharedObserver {
        self.observer.clone()
    }

    /// Offers only `revisions` (all five by default).
    #[must_use]
    pub fn revisions(mut self, revisions: impl IntoIterator<Item = ProtocolVersion>) -> Self {
        let mut offered: Vec<_> = revisions.into_iter().collect();
        offered.sort();
        offered.dedup();
        self.offered = offered;
        self
    }

    /// Instructions for the client's model.
    #[must_use]
    pub fn instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = Some(instructions.into());
        self
    }

    /// Seals `requestState` with `sealer` rather than a fresh random key;
    /// what several processes sharing retries need.
    #[must_use]
    pub fn sealer(mut self, sealer: StateSealer) -> Self {
        self.sealer = Some(sealer);
        self
    }

    /// The server.
    ///
    /// # Errors
    ///
    /// When no sealer was given and the system could not supply the entropy
    /// for a fresh `requestState` key.
    pub fn build(self) -> Result<Server, KeyError> {
        let sealer = match self.sealer {
            Some(sealer) => sealer,
            None => StateSealer::generate()?,
        };
        let (changes, _) = broadcast::channel(CHANGE_BACKLOG);
        let server_info = json!({ "name": self.name, "version": self.version });
        Ok(Server {
            inner: Arc::new(Inner {
                name: self.name,
                instructions: self.instructions,
                offered: self.offered,
                registry: RwLock::default(),
                changes,
                targets: Targets::default(),
                sealer: RwLock::new(sealer),
                idempotency: Mutex::new(IdempotencyStore::with_limits(self.idempotency)),
                rounds: RwLock::new(Arc::new(MemoryRounds::new(ROUNDS_REMEMBERED))),
                store_health: std::sync::OnceLock::new(),
                shared_sessions: std::sync::OnceLock::new(),
                relay_changes: std::sync::OnceLock::new(),
                next_session: AtomicU64::new(1),
                tool_visibility: self.tool_visibility,
                tool_catch_up: std::sync::OnceLock::new(),
                forward: self.forward,
                forward_scopes: RwLock::new(Arc::new(self.forward_scopes)),
                observer: self.observer,
                limiters: Limiters::new(&self.rate_limits),
                task_tools: std::sync::atomic::AtomicBool::new(false),
                server_info,
                profiles: RwLock::default(),
                tasks: Arc::new(Tasks::new(
                    self.task_store
                        .unwrap_or_else(|| Arc::new(MemoryTaskStore::default())),
                    self.task_limits,
                )),
            }),
        })
    }
}

impl Server {
    /// A server called `name` at `version`, offering every revision.
    #[must_use]
    pub fn builder(name: impl Into<String>, version: impl Into<String>) -> ServerBuilder {
        ServerBuilder {
            name: name.into(),
            version: version.into(),
            instructions: None,
            offered: ProtocolVersion::ALL.to_vec(),
            sealer: None,
            tool_visibility: None,
            forward: None,
            forward_scopes: ScopeRules::default(),
            idempotency: IdempotencyLimits::default(),
            observer: SharedObserver::default(),
            rate_limits: RateLimits::default(),
            task_store: None,
            task_limits: TaskLimits::default(),
        }
    }

    /// Where this server's legacy sessions are shared, if they are: what a
    /// transport serving sessions reads.
    #[must_use]
    pub fn shared_sessions(&self) -> Option<&SharedSessions> {
        self.inner.shared_sessions.get()
    }

    /// Whether the store this server [shares](Self::share) through answered
    /// when it was last read (every few seconds), or `None` when it shares
    /// nothing.
    #[must_use]
    pub fn store_reachable(&self) -> Option<bool> {
        self.inner
            .store_health
            .get()
            .map(|health| health.load(Ordering::Relaxed))
    }

    /// The tasks this server runs and keeps.
    pub(crate) fn tasks(&self) -> &Arc<Tasks> {
        &self.inner.tasks
    }

    /// Whether any tool this server offers runs as a task: what decides
    /// whether it declares tasks (2025-11-25) or the tasks extension
    /// (2026-07-28).
    pub(crate) fn offers_tasks(&self) -> bool {
        self.inner
            .forward
            .as_ref()
            .is_some_and(|f| f.offers_tasks())
            || self.inner.task_tools.load(Ordering::Relaxed)
    }

    /// What this server reports its work to.
    #[must_use]
    pub fn observer(&self) -> &SharedObserver {
        &self.inner.observer
    }

    /// Takes one request from the allowance of `ctx`'s caller, or refuses
    /// it (reported to the observer).
    pub(crate) fn admit(&self, ctx: &RequestContext) -> Result<(), ErrorObject> {
        self.inner.limiters.admit(ctx).map_err(|refused| {
            self.inner.observer.rate_limited(refused.limit);
            refused.into()
        })
    }

    /// Takes one call of the tool `name` from the allowance of `ctx`'s
    /// caller, or refuses it. Asked once the caller may call the tool,
    /// wherever a call is made (the registry's, a forwarder's, a gateway's
    /// call by id); `known` says whether the tool is known to exist, which
    /// a forwarder may not know yet.
    pub(crate) fn admit_tool(
        &self,
        ctx: &RequestContext,
        name: &str,
        known: bool,
    ) -> Result<(), ErrorObject> {
        self.inner
            .limiters
            .admit_tool(ctx, name, known)
            .map_err(|refused| {
                self.inner.observer.rate_limited(refused.limit);
                refused.into()
            })
    }

    /// The revisions offered, oldest first.
    #[must_use]
    pub fn offered(&self) -> &[ProtocolVersion] {
        &self.inner.offered
    }

    fn edit(&self, change: Change, edit: impl FnOnce(&mut Registry)) {
        if let Ok(mut registry) = self.inner.registry.write() {
            edit(Arc::make_mut(&mut registry));
            // Counted once per edit, not on every 2026-07-28 request that
            // resolves its capabilities.
            let task_tools = registry
                .tools
                .values()
                .any(|t| t.task_support() != TaskSupport::Forbidden);
            self.inner.task_tools.store(task_tools, Ordering::Relaxed);
        }
        self.announce(change);
    }

    /// Tells every listener of this server about `change`, and, where
    /// sessions are shared, every other instance's listeners too (a
    /// session's stream may be held by any of them).
    fn announce(&self, change: Change) {
        if let Some(relay) = self.inner.relay_changes.get() {
            // Full: a flood of changes; the ones that made it say enough,
            // since each tells listeners to list again.
            let _queued = relay.try_send(change.clone());
        }
        // No receiver is not an error: nobody is listening yet.
        let _listeners = self.inner.changes.send(change);
    }

    /// The scopes the forwarded primitives require, as they are now.
    pub(super) fn forwarded_scopes(&self) -> Arc<ScopeRules> {
        // A poisoned lock still holds whole rules (they are replaced, never
        // edited in place); reading none would open everything.
        let rules = self
            .inner
            .forward_scopes
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(&rules)
    }

    /// Replaces the scopes the forwarded primitives require (see
    /// [`ServerBuilder::forwarded_scopes`]); the next request reads the new
    /// rules.
    pub fn set_forwarded_scopes(&self, rules: ScopeRules) {
        *self
            .inner
            .forward_scopes
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(rules);
    }

    /// A snapshot of what is offered right now.
    pub(super) fn registry(&self) -> Arc<Registry> {
        self.inner
            .registry
            .read()
            .map(|r| Arc::clone(&r))
            .unwrap_or_default()
    }

    /// The definition of the tool called `name`, if one is registered: what a
    /// transport reads `x-mcp-header` annotations from.
    #[must_use]
    pub fn tool(&self, name: &str) -> Option<crate::wire::tools::Tool> {
        self.registry().tools.get(name).map(|t| t.tool.clone())
    }

    /// Whether `caller`'s scopes let it see the tool `name`; a tool this
    /// server does not know passes (the call then says it is unknown).
    pub(crate) fn scopes_admit_tool(&self, name: &str, caller: &AuthContext) -> bool {
        match self.registry().tools.get(name) {
            Some(tool) => super::registry::visible(tool.scope.as_ref(), |s| caller.has_scope(s)),
            None => self
                .forwarded_scopes()
                .admits_tool(name, |s| caller.has_scope(s)),
        }
    }

    /// What `read` takes from the definition of the tool `name`, if
    /// `caller` may see it; a forwarded tool is the upstream's, as its last
    /// list gave it.
    fn read_tool<T>(
        &self,
        name: &str,
        caller: &AuthContext,
        read: impl Fn(&crate::wire::tools::Tool) -> T,
    ) -> Option<T> {
        self.registry()
            .tools
            .get(name)
            .filter(|t| super::registry::visible(t.scope.as_ref(), |s| caller.has_scope(s)))
            .map(|t| read(&t.tool))
            .or_else(|| {
                let scopes = self.forwarded_scopes();
                if !scopes.admits_tool(name, |s| caller.has_scope(s)) {
                    return None;
                }
                Some(read(&self.inner.forward.as_ref()?.tool(name)?))
            })
    }

    /// The `x-mcp-header` annotations of the tool `name` if `caller`'s
    /// scopes let it see it, as `(argument, header)` pairs, without copying
    /// the whole definition. Scopes only: the visibility hook needs the
    /// request, so transports ask the connection's `param_headers`, which
    /// asks both.
    #[must_use]
    pub(crate) fn param_headers(
        &self,
        name: &str,
        caller: &AuthContext,
    ) -> Option<Vec<(String, String)>> {
        self.read_tool(name, caller, |tool| header_annotations(&tool.input_schema))
    }

    /// Seals new `requestState`s with `next`, still opening those sealed
    /// with the key it replaces until they expire.
    pub fn rotate_state_key(&self, next: StateKey) {
        if let Ok(mut sealer) = self.inner.sealer.write() {
            sealer.rotate(next);
        }
    }

    /// Whether `session`'s `caller` may see and call the tool `name`, as the
    /// [`ServerBuilder::tool_visibility`] hook decides (granted, without
    /// one). Scopes are checked separately.
    #[must_use]
    pub fn tool_access(&self, peer: &PeerSession, caller: &AuthContext, name: &str) -> ToolAccess {
        self.inner
            .tool_visibility
            .as_ref()
            .map_or(ToolAccess::Granted, |decide| decide(peer, caller, name))
    }

    /// Has a call of a tool the [`ServerBuilder::tool_visibility`] hook hid
    /// wait for `catch_up`, and the hook asked again if it answers `true`,
    /// before the call is refused. Set once; a later call changes nothing
    /// and answers `false`.
    pub fn catch_up_tools_with(&self, catch_up: ToolCatchUp) -> bool {
        self.inner.tool_catch_up.set(catch_up).is_ok()
    }

    /// Whether `name`, hidden from `caller` on `peer`, is now granted after
    /// the [`Self::catch_up_tools_with`] hook had its look.
    pub(super) async fn tool_caught_up(
        &self,
        peer: &PeerSession,
        caller: &AuthContext,
        name: &str,
    ) -> bool {
        let Some(catch_up) = self.inner.tool_catch_up.get() else {
            return false;
        };
        catch_up(peer, caller).await && self.tool_access(peer, caller, name) == ToolAccess::Granted
    }

    /// Tells one session, and only it, that its tool list changed.
    pub fn tools_changed_for(&self, session: SessionId) {
        let _listeners = self.inner.changes.send(Change::ToolsFor(session));
    }

    /// Registers a tool, replacing one of the same name.
    ///
    /// Each call is a change of its own, told to every listener; many tools
    /// are registered as one change with [`Self::edit_tools`].
    pub fn add_tool<F, Fut>(&self, spec: ToolSpec, f: F)
    where
        F: Fn(Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ToolResult, CallError>> + Send + 'static,
    {
        self.edit_tools(|tools| tools.add(spec, f));
    }

    /// Registers, replaces, removes and scopes tools as one change: the
    /// registry is copied at most once and listeners are told once. Tool by
    /// tool, each change copies a registry a request is reading and looks
    /// at every tool, so registering many that way costs the square of
    /// their number.
    ///
    /// `edits` runs under the registry's lock: it must not call back into
    /// this server.
    pub fn edit_tools(&self, edits: impl FnOnce(&mut ToolEdits<'_>)) {
        self.edit(Change::Tools, |r| edits(&mut ToolEdits::new(&mut r.tools)));
    }

    /// Registers a tool whose arguments are `A`, replacing one of the same
    /// name: its input schema is derived from `A` (a struct, since MCP input
    /// schemas are objects; `struct NoArguments {}` for a tool that takes
    /// none; it replaces any schema set on `spec`), the arguments are read
    /// into `A` before `f` runs, and a [`Structured`](super::Structured)
    /// output declares its schema as the tool's `outputSchema`.
    ///
    /// Arguments that do not fit `A` never reach `f`: the call is answered
    /// with a tool error (`isError: true`) saying why, which is what MCP asks
    /// of input validation, so the model that made the call can correct it.
    ///
    /// ```
    /// use protocol_droid::prelude::*;
    ///
    /// #[derive(serde::Deserialize, JsonSchema)]
    /// #[schemars(crate = "protocol_droid::schemars")]
    /// struct Add {
    ///     /// The first addend.
    ///     a: f64,
    ///     /// The second.
    ///     b: f64,
    /// }
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = Server::builder("calculator", "1.0.0").build()?;
    /// server.add_typed_tool(
    ///     ToolSpec::new("add", "Adds two numbers"),
    ///     |Add { a, b }, _call| async move { Ok(format!("{}", a + b)) },
    /// );
    /// assert!(server.tool("add").is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn add_typed_tool<A, R, F, Fut>(&self, spec: ToolSpec, f: F)
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        R: ToolOutput,
        F: Fn(A, Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, CallError>> + Send + 'static,
    {
        let mut spec = spec.input::<A>();
        if let Some(schema) = R::output_schema() {
            spec = spec.output_schema(Value::Object(schema));
        }
        let f = Arc::new(f);
        self.add_tool(spec, move |call: Call| {
            let f = Arc::clone(&f);
            async move {
                let args = match call.read_args::<A>() {
                    Ok(args) => args,
                    Err(refused) => return Ok(ToolResult::text(refused).as_error()),
                };
                f(args, call).await?.into_tool_result()
            }
        });
    }

    /// Registers a resource whose contents are text, replacing one at the
    /// same URI: `f` answers the text, and the contents carry the
    /// resource's URI and media type.
    ///
    /// ```
    /// use protocol_droid::prelude::*;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = Server::builder("notes", "1.0.0").build()?;
    /// let readme = ResourceSpec::new("notes://readme", "readme").mime_type("text/markdown");
    /// server.add_text_resource(readme, |_call| async { Ok("# Notes".to_owned()) });
    /// # Ok(())
    /// # }
    /// ```
    pub fn add_text_resource<F, Fut>(&self, spec: ResourceSpec, f: F)
    where
        F: Fn(Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, CallError>> + Send + 'static,
    {
        let (resource, scope) = spec.into_parts();
        let uri = resource.uri.clone();
        let mime_type = resource.mime_type.clone();
        let f = Arc::new(f);
        self.add_resource(resource, scope, move |call: Call| {
            let f = Arc::clone(&f);
            let uri = uri.clone();
            let mime_type = mime_type.clone();
            async move {
                let text = f(call).await?;
                Ok(vec![ResourceContents::Text {
                    uri,
                    mime_type,
                    text,
                    meta: None,
                    extra: JsonObject::new(),
                }])
            }
        });
    }

    /// Registers a prompt whose arguments are `A`, replacing one of the same
    /// name: its arguments are `A`'s fields (see [`PromptSpec::arguments`]),
    /// and they are read into `A` before `f` runs; a `prompts/get` whose
    /// arguments do not fit is refused with `-32602`.
    ///
    /// ```
    /// use protocol_droid::prelude::*;
    ///
    /// #[derive(serde::Deserialize, JsonSchema)]
    /// #[schemars(crate = "protocol_droid::schemars")]
    /// struct Review {
    ///     /// The code to review.
    ///     code: String,
    /// }
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = Server::builder("reviewer", "1.0.0").build()?;
    /// server.add_typed_prompt(PromptSpec::new("review", "Reviews code"), |Review { code }, _| {
    ///     async move { Ok(format!("Please review:\n{code}")) }
    /// });
    /// # Ok(())
    /// # }
    /// ```
    pub fn add_typed_prompt<A, R, F, Fut>(&self, spec: PromptSpec, f: F)
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        R: PromptOutput,
        F: Fn(A, Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, CallError>> + Send + 'static,
    {
        let (prompt, scope) = spec.arguments::<A>().into_parts();
        let f = Arc::new(f);
        self.add_prompt(prompt, scope, move |call: Call| {
            let f = Arc::clone(&f);
            async move {
                let args = call.read_args::<A>().map_err(CallError::invalid_params)?;
                Ok(f(args, call).await?.into_prompt_result())
            }
        });
    }

    /// Makes the tool called `name` require `scope` (or, with `None`, nothing)
    /// to be seen and called; whether such a tool is registered.
    ///
    /// For a server whose tools are registered by code that knows nothing of
    /// authorization, as the command line's fixture is.
    #[must_use = "scoping an absent tool protects nothing"]
    pub fn set_tool_scope(&self, name: &str, scope: Option<String>) -> bool {
        // A rule set again as it is (a reload re-reads every rule) changes
        // nothing, and tells no session its tools changed.
        match self.registry().tools.get(name) {
            None => return false,
            Some(entry) if entry.scope == scope => return true,
            Some(_) => {}
        }
        let mut found = false;
        self.edit_tools(|tools| found = tools.set_scope(name, scope));
        found
    }

    /// Makes the registered primitive of `kind` called `name` require
    /// `scope` (or, with `None`, nothing) to be seen and used; whether such a
    /// primitive is registered. [`Self::set_tool_scope`] for any kind.
    #[must_use = "scoping an absent primitive protects nothing"]
    pub fn set_scope(&self, kind: Primitive, name: &str, scope: Option<String>) -> bool {
        let change = match kind {
            Primitive::Tool => return self.set_tool_scope(name, scope),
            Primitive::Prompt => Change::Prompts,
            Primitive::Resource | Primitive::Template => Change::Resources,
        };
        let mut found = false;
        self.edit(change, |r| {
            let slot = match kind {
                Primitive::Prompt => r.prompts.get_mut(name).map(|e| &mut e.scope),
                Primitive::Resource => r.resources.get_mut(name).map(|e| &mut e.scope),
                Primitive::Template => r.templates.get_mut(name).map(|e| &mut e.scope),
                Primitive::Tool => None,
            };
            if let Some(slot) = slot {
                *slot = scope;
                found = true;
            }
        });
        found
    }

    /// Removes a tool; whether it was there.
    #[must_use = "removing an absent tool is worth knowing about"]
    pub fn remove_tool(&self, name: &str) -> bool {
        let mut removed = false;
        self.edit_tools(|tools| removed = tools.remove(name));
        removed
    }

    /// Registers a resource.
    pub fn add_resource<F, Fut>(&self, resource: Resource, scope: Option<String>, f: F)
    where
        F: Fn(Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, CallError>> + Send + 'static,
    {
        let handler: Handler<Vec<ResourceContents>> = handler(f);
        self.edit(Change::Resources, |r| {
            r.resources.insert(
                resource.uri.clone(),
                super::registry::ResourceEntry {
                    resource,
                    scope,
                    handler,
                },
            );
        });
    }

    /// Registers a resource template.
    pub fn add_template<F, Fut>(&self, template: ResourceTemplate, scope: Option<String>, f: F)
    where
        F: Fn(Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, CallError>> + Send + 'static,
    {
        let handler: Handler<Vec<ResourceContents>> = handler(f);
        self.edit(Change::Resources, |r| {
            r.templates.insert(
                template.uri_template.clone(),
                super::registry::TemplateEntry {
                    template,
                    scope,
                    handler,
                },
            );
        });
    }

    /// Registers a prompt.
    pub fn add_prompt<F, Fut>(&self, prompt: Prompt, scope: Option<String>, f: F)
    where
        F: Fn(Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<GetPromptResult, CallError>> + Send + 'static,
    {
        let handler: Handler<GetPromptResult> = handler(f);
        self.edit(Change::Prompts, |r| {
            r.prompts.insert(
                prompt.name.clone(),
                super::registry::PromptEntry {
                    prompt,
                    scope,
                    handler,
                },
            );
        });
    }

    /// Removes a prompt; whether it was there.
    #[must_use = "removing an absent prompt is worth knowing about"]
    pub fn remove_prompt(&self, name: &str) -> bool {
        let mut removed = false;
        self.edit(Change::Prompts, |r| {
            removed = r.prompts.remove(name).is_some();
        });
        removed
    }

    /// Answers `completion/complete` with `completer`.
    pub fn set_completer(
        &self,
        completer: impl Fn(&JsonObject) -> Vec<String> + Send + Sync + 'static,
    ) {
        if let Ok(mut registry) = self.inner.registry.write() {
            Arc::make_mut(&mut registry).completer = Some(Arc::new(completer));
        }
    }

    /// Tells subscribers that the resource at `uri` changed.
    pub fn resource_updated(&self, uri: impl Into<String>) {
        self.announce(Change::ResourceUpdated(uri.into()));
    }

    /// Sends a log record (of `logger`, if named) to the legacy session
    /// `session` outside any of its requests, if its log level lets `level`
    /// through; dropped when the session is not listening or its queue is
    /// full.
    pub fn log_to(
        &self,
        session: SessionId,
        level: LoggingLevel,
        logger: Option<String>,
        data: Value,
    ) {
        let change = Change::Log {
            session,
            level,
            logger,
            data,
        };
        let _queued = self.inner.targets.send(session, change);
    }

    /// Tells `session` alone, if it subscribed to `uri`, that the resource
    /// changed (an update from the session's own upstream connection).
    pub fn resource_updated_for(&self, session: SessionId, uri: impl Into<String>) {
        let change = Change::SessionResourceUpdated {
            session,
            uri: uri.into(),
        };
        let _queued = self.inner.targets.send(session, change);
    }

    /// The changes meant for `session` alone, for whoever writes to it
    /// outside its requests ([`Server::changes`] carries the rest).
    #[must_use]
    pub fn session_changes(&self, session: SessionId) -> SessionChanges {
        self.inner.targets.open(session)
    }

    /// Every change `session` is to be told outside its requests: what
    /// [`Server::changes`] and [`Server::session_changes`] carry, together.
    #[must_use]
    pub fn change_feed(&self, session: SessionId) -> ChangeFeed {
        ChangeFeed::new(self.changes(), self.session_changes(session))
    }

    /// Announces that the tool list changed without changing it; what a
    /// server whose tools depend on outside state calls.
    pub fn tools_changed(&self) {
        self.announce(Change::Tools);
    }

    /// Announces that the prompt list changed.
    pub fn prompts_changed(&self) {
        self.announce(Change::Prompts);
    }

    /// Announces that the resource list changed.
    pub fn resources_changed(&self) {
        self.announce(Change::Resources);
    }

    /// Subscribes to changes.
    #[must_use]
    pub fn changes(&self) -> broadcast::Receiver<Change> {
        self.inner.changes.subscribe()
    }

    /// The capabilities object this server declares at `version`.
    #[must_use]
    pub fn capabilities(&self, version: ProtocolVersion) -> JsonObject {
        let mut caps = self
            .inner
            .forward
            .as_ref()
            .and_then(|f| f.capabilities(version))
            .unwrap_or_else(|| every_capability(version, self.registry().completer.is_some()));
        if self.offers_tasks() {
            if Capability::ServerTasks.exists_at(version) {
                caps.insert(
                    "tasks".to_owned(),
                    json!({ "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } }),
                );
            } else if Capability::ServerTasksExtension.exists_at(version) {
                let extensions = caps
                    .entry("extensions")
                    .or_insert_with(|| Value::Object(JsonObject::new()));
                if let Value::Object(extensions) = extensions {
                    extensions.insert(
                        crate::domain::capability::TASKS_EXTENSION.to_owned(),
                        json!({}),
                    );
                }
            }
        }
        caps
    }

    /// The capabilities [`capabilities`](Self::capabilities) declares, as
    /// negotiation reads them: every 2026-07-28 request resolves its own
    /// profile against them. A server's own are read without building their
    /// JSON; a forwarder's are its JSON, read.
    pub(super) fn capability_set(&self, version: ProtocolVersion) -> CapabilitySet {
        if self.inner.forward.is_some() {
            return CapabilitySet::from_server_json(&self.capabilities(version), version);
        }
        let mut set: CapabilitySet = [
            Capability::Tools,
            Capability::ToolsListChanged,
            Capability::Prompts,
            Capability::PromptsListChanged,
            Capability::Resources,
            Capability::ResourcesListChanged,
            Capability::ResourcesSubscribe,
            Capability::Logging,
        ]
        .into_iter()
        .collect();
        // `restricted_to` drops what `version` does not define, completions
        // before 2025-03-26 among them.
        if self.registry().completer.is_some() {
            set = set.with(Capability::Completions);
        }
        if self.offers_tasks() {
            set = set
                .with(Capability::ServerTasks)
                .with(Capability::ServerTasksExtension);
        }
        set.restricted_to(version)
    }

    pub(super) fn forwarder(&self) -> Option<&Arc<dyn Forward>> {
        self.inner.forward.as_ref()
    }

    pub(super) fn server_info(&self) -> Value {
        self.inner.server_info.clone()
    }

    /// What `negotiation` allows: [`resolve`]'s answer, remembered.
    pub(super) fn profile(&self, negotiation: Negotiation) -> FeatureProfile {
        let known = self
            .inner
            .profiles
            .read()
            .ok()
            .and_then(|profiles| profiles.get(&negotiation).copied());
        if let Some(profile) = known {
            return profile;
        }
        let Ok(mut profiles) = self.inner.profiles.write() else {
            return resolve(negotiation);
        };
        if profiles.len() >= PROFILES_REMEMBERED {
            profiles.clear();
        }
        *profiles
            .entry(negotiation)
            .or_insert_with(|| resolve(negotiation))
    }

    /// A session id no connection of this server has had.
    pub(super) fn next_session(&self) -> SessionId {
        SessionId::new(self.inner.next_session.fetch_add(1, Ordering::Relaxed))
    }
}

/// The `(argument, header)` pairs an input schema annotates with
/// `x-mcp-header`.
fn header_annotations(input_schema: &JsonObject) -> Vec<(String, String)> {
    input_schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(property, schema)| {
            let header = schema.get("x-mcp-header")?.as_str()?;
            Some((property.clone(), header.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remembered_profile_is_what_resolving_gives() -> Result<(), KeyError> {
        let server = Server::builder("t", "1").build()?;
        // More negotiations than are remembered, each asked twice, so both
        // a fresh answer, a remembered one and one after starting over are
        // checked.
        let mut asked = 0;
        for version in ProtocolVersion::ALL {
            for (n, flag) in Capability::ALL.into_iter().enumerate() {
                let client_caps: CapabilitySet = Capability::ALL.into_iter().take(n).collect();
                let negotiation = Negotiation {
                    version,
                    client_caps,
                    server_caps: [flag].into_iter().collect(),
                    transport: crate::domain::TransportKind::Stdio,
                };
                for _ in 0..2 {
                    assert_eq!(server.profile(negotiation), resolve(negotiation));
                }
                asked += 1;
            }
        }
        assert!(asked > PROFILES_REMEMBERED);
        Ok(())
    }

    #[test]
    fn the_capability_set_is_what_the_declared_capabilities_read_as() -> Result<(), KeyError> {
        let server = Server::builder("t", "1").build()?;
        for completing in [false, true] {
            if completing {
                server.set_completer(|_| Vec::new());
            }
            for version in ProtocolVersion::ALL {
                let declared = server.capabilities(version);
                assert_eq!(
                    server.capability_set(version),
                    CapabilitySet::from_server_json(&declared, version),
                    "at {version}, completer {completing}"
                );
            }
        }
        Ok(())
    }
}
