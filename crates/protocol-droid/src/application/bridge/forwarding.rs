//! The bridge as the downstream server's [`Forward`]: the server the bridge
//! builds for its clients hands every primitive request to the bridge, and
//! holds it weakly so the bridge outlives no server it serves.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::observer::Observer;
use super::runtime::{Bridge, Inner};
use super::upstream::lock;
use crate::application::server::forward::Forward;
use crate::application::server::request_state::KeyError;
use crate::application::server::{Call, CallError, Server, ServerBuilder};
use crate::domain::ir::JsonObject;
use crate::domain::{Capability, ProtocolVersion, SessionId};
use crate::wire::tools::{TaskSupport, Tool};

/// What the bridge's own server forwards through: the bridge, held weakly.
pub(super) struct Forwarding(pub(super) std::sync::Weak<Inner>);

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
            bridge.forward_call(method, params, &call).await
        })
    }

    fn tool(&self, name: &str) -> Option<Tool> {
        self.bridge()
            .and_then(|b| lock(&b.inner.tools).get(name).cloned())
    }

    fn knows_tool(&self, name: &str) -> bool {
        self.bridge()
            .is_some_and(|b| lock(&b.inner.tools).contains_key(name))
    }

    fn capabilities(&self, version: ProtocolVersion) -> Option<JsonObject> {
        self.bridge().map(|b| b.offered_capabilities(version))
    }

    fn task_support<'a>(&'a self, name: &'a str) -> BoxFuture<'a, TaskSupport> {
        Box::pin(async move {
            match self.bridge() {
                Some(bridge) => bridge.task_support(name).await.through_intermediary(),
                None => TaskSupport::Forbidden,
            }
        })
    }

    fn offers_tasks(&self) -> bool {
        self.bridge().is_some_and(|b| b.upstream_offers_tasks())
    }

    fn task_follows_upstream(&self) -> bool {
        self.bridge().is_some_and(|b| b.upstream_tasks_extension())
    }

    fn subscription(&self, session: SessionId, uri: &str, subscribed: bool) {
        if let Some(bridge) = self.bridge() {
            bridge.watch(session, uri, subscribed);
        }
    }

    fn session_subscription(
        &self,
        session: SessionId,
        declared: &JsonObject,
        uri: &str,
        subscribed: bool,
    ) {
        if let Some(bridge) = self.bridge() {
            bridge.watch_for_session(session, declared, uri, subscribed);
        }
    }

    fn watches_for_session(&self, session: SessionId, uri: &str) -> bool {
        self.bridge()
            .is_some_and(|bridge| bridge.watches_for_session(session, uri))
    }

    fn session_closed(&self, session: SessionId) {
        if let Some(bridge) = self.bridge() {
            bridge.end_session(session);
        }
    }

    fn roots_changed(&self, session: SessionId) {
        if let Some(bridge) = self.bridge() {
            bridge.roots_changed(session);
        }
    }
}

impl Bridge {
    /// The upstream's capabilities, less what the bridge does not carry
    /// across, as a client at `version` is to read them.
    pub(crate) fn offered_capabilities(&self, version: ProtocolVersion) -> JsonObject {
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
}

impl Bridge {
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
        let observer: Arc<dyn Observer> = Arc::new(server.clone());
        *lock(&self.inner.observer) = Some(Arc::clone(&observer));
        for upstream in lock(&self.inner.upstreams).values().flatten() {
            upstream.handler.attach(Arc::clone(&observer));
        }
        Ok(server)
    }
}
