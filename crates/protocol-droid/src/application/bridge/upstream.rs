//! The upstream leg: connections to the server behind the bridge, and what
//! the server sends on them unprompted.
//!
//! A legacy upstream keeps state per connection (the session the handshake
//! opened, its log level, its subscriptions), so connections are never
//! shared between downstream sessions: each legacy downstream session gets
//! its own, and each caller of the stateless era gets one. A 2026-07-28
//! upstream keeps nothing between requests, so one connection serves all.
//!
//! A legacy server asks its questions (`elicitation/create`,
//! `sampling/createMessage`, `roots/list`) as requests of its own on the
//! connection. They belong to whichever forwarded request is in flight on
//! it: the [`UpstreamHandler`] hands each to that request's [`Flight`],
//! which asks the downstream client. When more than one request is in flight
//! on a connection the protocol gives no way to tell which one asked, so the
//! question is refused rather than put to the wrong caller.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Instant;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::adapters::secondary::codec::wire::{
    ClientCapabilities, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, ListRootsResult,
};
use crate::application::client::{Client, ClientHandler, Notice};
use crate::application::server::Server;
use crate::domain::LoggingLevel;
use crate::domain::jsonrpc::{ErrorCode, ErrorObject};

/// Opens a connection to the upstream server, answering its questions with
/// `handler`. Supplied by whoever knows where the server is (a command line,
/// a URL) and how to reach it.
pub type Connector =
    Arc<dyn Fn(Arc<dyn ClientHandler>) -> BoxFuture<'static, Result<Client, String>> + Send + Sync>;

/// How many questions a flight may have waiting before the upstream is
/// refused: a server asking without end must not grow memory.
const MAX_WAITING_ASKS: usize = 16;

/// A question the upstream asked, waiting for the downstream client.
#[derive(Debug)]
pub(super) struct Ask {
    pub(super) method: String,
    pub(super) params: Value,
    pub(super) answer: oneshot::Sender<Result<Value, ErrorObject>>,
}

/// A notification about a forwarded request, carried into the request's
/// own task: the transport sends on a request's stream only from there.
#[derive(Debug)]
pub(super) enum Relay {
    /// `notifications/progress`.
    Progress {
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
    /// `notifications/message`.
    Log { level: LoggingLevel, data: Value },
}

/// How many notifications may wait for their request's task; beyond that
/// they are dropped, as a notification is never worth stalling a reader.
pub(super) const RELAY_BACKLOG: usize = 256;

/// One forwarded request in flight on a connection: where the upstream's
/// questions and notifications about it go.
#[derive(Debug)]
struct FlightSlot {
    asks: mpsc::Sender<Ask>,
    relay: mpsc::Sender<Relay>,
}

/// What a forwarded request holds while it is in flight; dropping it ends
/// the registration.
#[derive(Debug)]
pub(super) struct Registration {
    handler: Weak<UpstreamHandler>,
    id: u64,
}

impl Registration {
    /// Sends this request's notifications to `relay` from now on: a
    /// request resumed by a retry is served by a new task.
    pub(super) fn relay_to(&self, relay: mpsc::Sender<Relay>) {
        if let Some(handler) = self.handler.upgrade() {
            if let Some(slot) = lock(&handler.flights).get_mut(&self.id) {
                slot.relay = relay;
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(handler) = self.handler.upgrade() {
            lock(&handler.flights).remove(&self.id);
        }
    }
}

/// Answers the upstream's questions by asking the downstream client, and
/// passes its notifications on.
#[derive(Debug)]
pub(super) struct UpstreamHandler {
    capabilities: ClientCapabilities,
    flights: Mutex<HashMap<u64, FlightSlot>>,
    next: AtomicU64,
    server: Mutex<Option<Server>>,
    /// The roots a downstream client last gave, for a `roots/list` that
    /// arrives outside any request.
    roots: Mutex<Option<Value>>,
    /// The log level last set upstream (legacy `logging/setLevel`).
    pub(super) level: Mutex<Option<LoggingLevel>>,
    /// Whether every request on the connection comes from one client (a
    /// legacy downstream session's own connection).
    one_client: bool,
}

impl UpstreamHandler {
    /// A handler declaring `capabilities` to the upstream.
    pub(super) fn new(
        capabilities: ClientCapabilities,
        server: Option<Server>,
        one_client: bool,
    ) -> Self {
        Self {
            one_client,
            capabilities,
            flights: Mutex::default(),
            next: AtomicU64::new(1),
            server: Mutex::new(server),
            roots: Mutex::default(),
            level: Mutex::default(),
        }
    }

    /// Registers a forwarded request: its questions arrive on the returned
    /// receiver until the registration is dropped.
    pub(super) fn register(
        self: &Arc<Self>,
        relay: mpsc::Sender<Relay>,
    ) -> (Registration, mpsc::Receiver<Ask>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(MAX_WAITING_ASKS);
        lock(&self.flights).insert(id, FlightSlot { asks: tx, relay });
        (
            Registration {
                handler: Arc::downgrade(self),
                id,
            },
            rx,
        )
    }

    /// Passes the upstream's change notifications to `server` from now on.
    pub(super) fn attach(&self, server: Server) {
        *lock(&self.server) = Some(server);
    }

    /// Remembers the roots a client gave, for questions outside requests.
    pub(super) fn remember_roots(&self, roots: &Value) {
        *lock(&self.roots) = Some(roots.clone());
    }

    /// The request a question or a log line belongs to: the only one in
    /// flight, or, on a legacy session's own connection, where every
    /// request comes from the same client, the oldest.
    fn sole_flight(&self) -> Option<(mpsc::Sender<Ask>, mpsc::Sender<Relay>)> {
        let flights = lock(&self.flights);
        let oldest = flights
            .iter()
            .min_by_key(|(id, _)| **id)
            .map(|(_, slot)| slot);
        match (flights.len(), oldest) {
            (1, Some(slot)) => Some((slot.asks.clone(), slot.relay.clone())),
            (_, Some(slot)) if self.one_client => Some((slot.asks.clone(), slot.relay.clone())),
            _ => None,
        }
    }

    /// Puts one question to the request in flight and waits for the
    /// downstream client's answer.
    async fn ask(&self, method: &str, params: Value) -> Result<Value, ErrorObject> {
        let Some((asks, _)) = self.sole_flight() else {
            if method == "roots/list" {
                // Outside any request: the roots last seen, or none.
                return Ok(lock(&self.roots)
                    .clone()
                    .unwrap_or_else(|| json!({ "roots": [] })));
            }
            return Err(ErrorObject::new(
                ErrorCode::INTERNAL_ERROR,
                format!(
                    "{method} arrived with no single request in flight, so the bridge cannot \
                     tell which client to ask"
                ),
            ));
        };
        let (answer, answered) = oneshot::channel();
        let ask = Ask {
            method: method.to_owned(),
            params,
            answer,
        };
        if asks.try_send(ask).is_err() {
            return Err(ErrorObject::new(
                ErrorCode::INTERNAL_ERROR,
                format!("too many questions waiting; {method} refused"),
            ));
        }
        // The flight ended without answering (its client went away, or the
        // round timed out): the question is withdrawn.
        answered.await.unwrap_or_else(|_| {
            Err(ErrorObject::new(
                ErrorCode::INTERNAL_ERROR,
                format!("the request that {method} belonged to ended"),
            ))
        })
    }
}

impl ClientHandler for UpstreamHandler {
    fn capabilities(&self) -> ClientCapabilities {
        self.capabilities.clone()
    }

    fn create_message(
        &self,
        params: CreateMessageRequestParams,
    ) -> BoxFuture<'_, Result<CreateMessageResult, ErrorObject>> {
        Box::pin(async move {
            let params = serde_json::to_value(params).map_err(internal)?;
            let answer = self.ask("sampling/createMessage", params).await?;
            serde_json::from_value(answer).map_err(invalid_answer)
        })
    }

    fn elicit(
        &self,
        params: ElicitRequestParams,
    ) -> BoxFuture<'_, Result<ElicitResult, ErrorObject>> {
        Box::pin(async move {
            let params = serde_json::to_value(params).map_err(internal)?;
            match self.ask("elicitation/create", params).await {
                Ok(answer) => serde_json::from_value(answer).map_err(invalid_answer),
                // A question nobody can answer is cancelled, which a server
                // handles as the user dismissing it.
                Err(_) => serde_json::from_value(json!({ "action": "cancel" })).map_err(internal),
            }
        })
    }

    fn list_roots(&self) -> BoxFuture<'_, Result<ListRootsResult, ErrorObject>> {
        self.list_roots_for(None)
    }

    fn list_roots_for(
        &self,
        params: Option<Value>,
    ) -> BoxFuture<'_, Result<ListRootsResult, ErrorObject>> {
        Box::pin(async move {
            let params = params.unwrap_or_else(|| json!({}));
            let answer = self.ask("roots/list", params).await?;
            serde_json::from_value(answer).map_err(invalid_answer)
        })
    }

    fn notification(&self, notice: &Notice) {
        let params = notice.params.clone().unwrap_or(Value::Null);
        match notice.method.as_str() {
            "notifications/message" => {
                // Attributable only when one request is in flight; a log
                // line nobody asked for is not sent anywhere.
                if let Some((_, relay)) = self.sole_flight() {
                    let level = params
                        .get("level")
                        .cloned()
                        .and_then(|l| serde_json::from_value(l).ok())
                        .unwrap_or(LoggingLevel::Info);
                    let data = params.get("data").cloned().unwrap_or(Value::Null);
                    let _full = relay.try_send(Relay::Log { level, data });
                }
            }
            "notifications/tools/list_changed" => self.with_server(Server::tools_changed),
            "notifications/prompts/list_changed" => self.with_server(Server::prompts_changed),
            "notifications/resources/list_changed" => {
                self.with_server(Server::resources_changed);
            }
            "notifications/resources/updated" => {
                if let Some(uri) = params.get("uri").and_then(Value::as_str) {
                    let uri = uri.to_owned();
                    self.with_server(|server| server.resource_updated(uri));
                }
            }
            _ => {}
        }
    }
}

impl UpstreamHandler {
    fn with_server(&self, f: impl FnOnce(&Server)) {
        if let Some(server) = lock(&self.server).as_ref() {
            f(server);
        }
    }
}

/// One connection to the upstream, and when it was last used.
#[derive(Debug)]
pub(super) struct Upstream {
    pub(super) client: Client,
    pub(super) handler: Arc<UpstreamHandler>,
    pub(super) last_used: Mutex<Instant>,
    /// Held by one request at a time, when the connection is leased
    /// exclusively.
    pub(super) busy: AtomicBool,
}

impl Upstream {
    /// A connection not yet used.
    pub(super) fn new(client: Client, handler: Arc<UpstreamHandler>) -> Self {
        Self {
            client,
            handler,
            last_used: Mutex::new(Instant::now()),
            busy: AtomicBool::new(false),
        }
    }

    pub(super) fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    /// Takes the connection for one request, if no other holds it.
    pub(super) fn try_lease(self: &Arc<Self>) -> Option<Lease> {
        self.busy
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| Lease {
                upstream: Arc::clone(self),
                exclusive: true,
            })
    }

    /// Uses the connection alongside any other request.
    pub(super) fn share(self: &Arc<Self>) -> Lease {
        Lease {
            upstream: Arc::clone(self),
            exclusive: false,
        }
    }
}

/// A request's use of a connection. An exclusive lease is what lets a
/// legacy server's questions be attributed: only one request is in flight
/// on the connection until the lease is dropped.
#[derive(Debug)]
pub(super) struct Lease {
    pub(super) upstream: Arc<Upstream>,
    exclusive: bool,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.upstream.touch();
        if self.exclusive {
            self.upstream.busy.store(false, Ordering::Release);
        }
    }
}

fn internal(error: impl std::fmt::Display) -> ErrorObject {
    ErrorObject::new(ErrorCode::INTERNAL_ERROR, error.to_string())
}

fn invalid_answer(error: impl std::fmt::Display) -> ErrorObject {
    ErrorObject::new(
        ErrorCode::INTERNAL_ERROR,
        format!("the client's answer does not fit the question: {error}"),
    )
}

/// Locks, recovering from a poisoned lock: the maps hold no invariant a
/// panic elsewhere could have broken half-way.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
