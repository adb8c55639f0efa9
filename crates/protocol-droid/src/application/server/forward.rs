//! Serving what another server offers: the port a bridge plugs into a
//! [`Server`](super::Server).
//!
//! With a [`Forward`] in place the server still terminates the protocol
//! itself, in every revision and on every transport: the handshake or the
//! per-request `_meta`, sessions, header checks, `requestState` sealing and
//! the era's finishing touches on each result. Only the primitives (the
//! methods that read or run what is offered) are handed over, together with
//! the [`Call`] that lets the forwarder ask the client for input in either
//! era.

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::call::{Call, CallError};
use crate::domain::ir::JsonObject;
use crate::domain::{ProtocolVersion, SessionId};
use crate::wire::codec::{Sender, for_version};
use crate::wire::tools::{TaskSupport, Tool};

/// The methods a [`Forward`] serves in place of the registry.
pub const FORWARDED: [&str; 8] = [
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "completion/complete",
];

/// Whether `method` is a client request no revision defines (an
/// extension's): a [`Forward`] is handed those too, as they are, since an
/// unmodelled request is the upstream's to answer, not this build's to
/// refuse.
#[must_use]
pub(crate) fn is_unmodelled(method: &str) -> bool {
    !ProtocolVersion::ALL
        .into_iter()
        .any(|v| for_version(v).defines_request(Sender::Client, method))
}

/// Serves the primitives of a server from somewhere else.
///
/// Declared here, by the server that consults it; implemented by the bridge.
pub trait Forward: Send + Sync {
    /// Answers one request for a method in [`FORWARDED`] (or one no revision
    /// defines, see `is_unmodelled`), as the client on `call.peer` can
    /// read it.
    ///
    /// `params` are the request's own, `_meta` included; `call` carries the
    /// request context and asks the client for input.
    ///
    /// # Errors
    ///
    /// [`CallError`]: an input round (2026-07-28), a missing client
    /// capability, or a JSON-RPC error to answer with.
    fn forward<'a>(
        &'a self,
        method: &'a str,
        params: JsonObject,
        call: Call,
    ) -> BoxFuture<'a, Result<Value, CallError>>;

    /// Whether `method` is this forwarder's to answer; one it declines is
    /// the server's own, served from its registry as without a forwarder.
    /// A gateway keeps its tools in the registry (each session sees its own
    /// set) and forwards the rest.
    fn serves(&self, _method: &str) -> bool {
        true
    }

    /// The definition of the tool called `name`, as the client was given it,
    /// if known: what a transport checks `Mcp-Param-*` headers against.
    fn tool(&self, _name: &str) -> Option<Tool> {
        None
    }

    /// Whether the tool called `name` is known, as [`tool`](Self::tool)
    /// would find it: asked on every call, so a forwarder that can answer
    /// without copying the definition should.
    fn knows_tool(&self, name: &str) -> bool {
        self.tool(name).is_some()
    }

    /// How the tool `name` may run as a task, as its server says: a call
    /// of it is then run as a task of this server's own when the client
    /// takes tasks, with the forwarded call as the task's work (see
    /// `docs/tasks.md`).
    fn task_support<'a>(&'a self, _name: &'a str) -> BoxFuture<'a, TaskSupport> {
        Box::pin(async { TaskSupport::Forbidden })
    }

    /// Whether a call run as a task by a client that lets the server
    /// decide (2026-07-28) becomes a task only when its forwarded call
    /// does: the work runs in the request until the upstream answers with a
    /// task, and continues as one from there (see
    /// [`Call::continue_as_task`]).
    fn task_follows_upstream(&self) -> bool {
        false
    }

    /// Whether any tool forwarded may run as a task: whether the server
    /// declares tasks.
    fn offers_tasks(&self) -> bool {
        false
    }

    /// The capabilities to declare at `version`; `None` keeps the server's
    /// own. The server adds its tasks to them.
    fn capabilities(&self, _version: ProtocolVersion) -> Option<JsonObject> {
        None
    }

    /// A session subscribed to `uri` (`subscribed`) or dropped it: a legacy
    /// `resources/subscribe`, or a `subscriptions/listen` watching it,
    /// opened or ended.
    fn subscription(&self, _session: SessionId, _uri: &str, _subscribed: bool) {}

    /// A legacy session subscribed to `uri` with `resources/subscribe`
    /// (`subscribed`), or dropped it; `declared` is what its client declared
    /// at the handshake. A legacy server keeps subscriptions per session,
    /// so a forwarder may subscribe on that session's own connection
    /// upstream; unless it says otherwise, this is
    /// [`subscription`](Self::subscription).
    fn session_subscription(
        &self,
        session: SessionId,
        _declared: &JsonObject,
        uri: &str,
        subscribed: bool,
    ) {
        self.subscription(session, uri, subscribed);
    }

    /// Whether `session`'s subscription to `uri` is kept on a connection
    /// upstream of its own, whose updates reach it alone
    /// ([`Server::resource_updated_for`](super::Server::resource_updated_for)):
    /// an update of `uri` told to every watcher is then not for it.
    fn watches_for_session(&self, _session: SessionId, _uri: &str) -> bool {
        false
    }

    /// A legacy session is shared among the instances of this server under
    /// `name` (its `Mcp-Session-Id`), which every instance serving it knows
    /// it by: what a forwarder keeps of the session that the others must
    /// see too can be kept in the shared store under that name.
    fn session_shared(&self, _session: SessionId, _name: &str) {}

    /// A session ended; whatever was kept for it can go.
    fn session_closed(&self, _session: SessionId) {}

    /// Why the item a `prompts/get`, `resources/read`,
    /// `completion/complete` or `tools/call` with `params` names cannot be
    /// reached now (its upstream is down), if that is so. Asked for an item
    /// hidden from the caller, or a tool the server does not serve it, so
    /// that one is answered during an outage as any other item of that
    /// upstream is: the outage, never "unknown" where a name that is not
    /// there would be told of the outage.
    fn unavailable(&self, _method: &str, _params: &JsonObject) -> Option<String> {
        None
    }

    /// The client of the legacy `session` said its roots changed
    /// (`notifications/roots/list_changed`): a forwarder tells the upstream
    /// connections that speak for that client.
    fn roots_changed(&self, _session: SessionId) {}
}

/// Lets a bare function serve, for tests and small adapters.
impl<F> Forward for F
where
    F: for<'a> Fn(&'a str, JsonObject, Call) -> BoxFuture<'a, Result<Value, CallError>>
        + Send
        + Sync,
{
    fn forward<'a>(
        &'a self,
        method: &'a str,
        params: JsonObject,
        call: Call,
    ) -> BoxFuture<'a, Result<Value, CallError>> {
        self(method, params, call)
    }
}
