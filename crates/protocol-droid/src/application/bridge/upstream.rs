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
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Instant;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::observer::Observer;
use super::starts::Starts;
use crate::application::client::{Client, ClientHandler, Notice};
use crate::application::server::rate::Caller;
use crate::application::server::{DynExchange, ExchangeError};
use crate::domain::Refusal;
use crate::domain::ir::JsonObject;
use crate::domain::jsonrpc::ErrorObject;
use crate::domain::{LoggingLevel, SessionId};
use crate::wire::{
    ClientCapabilities, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, ListRootsResult,
};

/// Opens a connection to the upstream server, answering its questions with
/// `handler`. Supplied by whoever knows where the server is (a command line,
/// a URL) and how to reach it.
pub type Connector = Arc<
    dyn Fn(Arc<dyn ClientHandler>) -> BoxFuture<'static, Result<Client, ConnectorError>>
        + Send
        + Sync,
>;

/// Why a [`Connector`] could not open a connection: whatever the adapter
/// that knows the transport says, kept whole so its causes can be read.
pub type ConnectorError = Box<dyn std::error::Error + Send + Sync>;

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
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Relay {
    /// `notifications/progress`.
    Progress {
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
    /// `notifications/message`.
    Log {
        level: LoggingLevel,
        /// Absent from what an instance of an older build relays.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        logger: Option<String>,
        data: Value,
    },
}

/// How many notifications may wait for their request's task; beyond that
/// they are dropped, as a notification is never worth stalling a reader.
pub(super) const RELAY_BACKLOG: usize = 256;

/// Where a request's notifications go: replaced when a parked request is
/// resumed by a retry, which a new task serves.
pub(super) type RelayCell = Arc<Mutex<mpsc::Sender<Relay>>>;

/// Sends `relayed` to the request's current task, if it keeps up.
pub(super) fn relay(cell: &RelayCell, relayed: Relay) {
    let sender = lock(cell).clone();
    let _full = sender.try_send(relayed);
}

/// One forwarded request in flight on a connection: where the upstream's
/// questions and notifications about it go.
#[derive(Debug)]
struct FlightSlot {
    /// Where the request's questions go; none for a request to a
    /// 2026-07-28 server, which asks in input rounds instead.
    asks: Option<mpsc::Sender<Ask>>,
    relay: RelayCell,
}

/// What a forwarded request holds while it is in flight; dropping it ends
/// the registration.
#[derive(Debug)]
pub(super) struct Registration {
    handler: Weak<UpstreamHandler>,
    id: u64,
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
pub(super) struct UpstreamHandler {
    capabilities: ClientCapabilities,
    flights: Mutex<HashMap<u64, FlightSlot>>,
    next: AtomicU64,
    /// Who hears the upstream's announcements.
    observer: Mutex<Option<Arc<dyn Observer>>>,
    /// Whether this is the connection the bridge keeps for its life: its
    /// end is news for the observer.
    kept: bool,
    /// The roots a downstream client last gave, for a `roots/list` that
    /// arrives outside any request.
    roots: Mutex<Option<Value>>,
    /// The log level last set upstream (legacy `logging/setLevel`).
    pub(super) level: Mutex<Option<LoggingLevel>>,
    /// Whether every request on the connection comes from one client (a
    /// legacy downstream session's own connection).
    one_client: bool,
    /// That client's session, when it does.
    session: Option<SessionId>,
    /// That session's way to its client outside any request (its stream),
    /// for a `roots/list` the upstream asks between requests. Not kept
    /// alive from here: it goes with the session's connection.
    client: Mutex<Option<Weak<dyn DynExchange>>>,
    /// Whether a word that the client's roots changed is on its way up
    /// ([`WORD_IDLE`], [`WORD_SENDING`], or [`WORD_AGAIN`]: another is due
    /// once it is sent).
    roots_word: AtomicU8,
    /// Told when the upstream's tool list changed.
    tools_changed: Mutex<Option<Arc<dyn Fn() + Send + Sync>>>,
    /// Whether the connection serves stateless callers whose requests may
    /// come from different clients (anonymous ones from one address, or
    /// one principal's several clients).
    shared_by_callers: bool,
    /// Whether a downstream client's roots were given to the upstream on
    /// such a connection: the server may keep them for the connection
    /// (server-filesystem does), and would apply them to the next client's
    /// requests, so the connection serves none after the request it serves
    /// now.
    gave_roots: AtomicBool,
}

impl std::fmt::Debug for UpstreamHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamHandler")
            .field("capabilities", &self.capabilities)
            .field("in_flight", &lock(&self.flights).len())
            .field("one_client", &self.one_client)
            .finish_non_exhaustive()
    }
}

impl UpstreamHandler {
    /// A handler declaring `capabilities` to the upstream, telling
    /// `observer` what the upstream announces.
    /// `session` is set for a connection that serves one legacy session
    /// alone.
    pub(super) fn new(
        capabilities: ClientCapabilities,
        observer: Option<Arc<dyn Observer>>,
        session: Option<SessionId>,
    ) -> Self {
        Self {
            one_client: session.is_some(),
            session,
            tools_changed: Mutex::default(),
            capabilities,
            flights: Mutex::default(),
            next: AtomicU64::new(1),
            observer: Mutex::new(observer),
            kept: false,
            roots: Mutex::default(),
            level: Mutex::default(),
            client: Mutex::default(),
            roots_word: AtomicU8::new(WORD_IDLE),
            shared_by_callers: false,
            gave_roots: AtomicBool::new(false),
        }
    }

    /// A handler for a connection whose requests may come from different
    /// clients (see [`Self::gave_roots`]).
    pub(super) fn shared_by_callers(mut self) -> Self {
        self.shared_by_callers = true;
        self
    }

    /// Whether one client's roots were given on this connection, which
    /// serves more than one: it is theirs alone from then on.
    pub(super) fn gave_roots(&self) -> bool {
        self.gave_roots.load(Ordering::Acquire)
    }

    /// Gives a legacy session's own connection the session's way to its
    /// client, so that the upstream's `roots/list` between requests is put
    /// to the client rather than answered from what it last said.
    pub(super) fn reach_client(&self, exchange: &Arc<dyn DynExchange>) {
        if self.one_client {
            lock(&self.client).get_or_insert_with(|| Arc::downgrade(exchange));
        }
    }

    /// Whether a word that the client's roots changed is to go up now (the
    /// caller sends it); while one is on its way, another is noted as due,
    /// and its sender sends it once more. A flood is one word at a time.
    pub(super) fn roots_word_free(&self) -> bool {
        // Idle becomes sending (this caller sends); anything else, again.
        self.roots_word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
                Some(if word == WORD_IDLE {
                    WORD_SENDING
                } else {
                    WORD_AGAIN
                })
            })
            .is_ok_and(|before| before == WORD_IDLE)
    }

    /// A word was sent: whether another is due (its sender sends it).
    pub(super) fn roots_word_sent(&self) -> bool {
        // Again becomes sending (one more goes); anything else, idle.
        self.roots_word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
                Some(if word == WORD_AGAIN {
                    WORD_SENDING
                } else {
                    WORD_IDLE
                })
            })
            .is_ok_and(|before| before == WORD_AGAIN)
    }

    /// A sender that stopped before it was done (its task dropped): no
    /// word is on its way any more.
    pub(super) fn roots_word_dropped(&self) {
        self.roots_word.store(WORD_IDLE, Ordering::Release);
    }

    /// Registers a forwarded request: its questions arrive on the returned
    /// receiver until the registration is dropped.
    pub(super) fn register(
        self: &Arc<Self>,
        relay: RelayCell,
    ) -> (Registration, mpsc::Receiver<Ask>) {
        let (tx, rx) = mpsc::channel(MAX_WAITING_ASKS);
        (self.enter(Some(tx), relay), rx)
    }

    /// Registers a request that takes no questions this way (one to a
    /// 2026-07-28 server), so that its log lines still find it.
    pub(super) fn register_unasked(self: &Arc<Self>, relay: RelayCell) -> Registration {
        self.enter(None, relay)
    }

    fn enter(self: &Arc<Self>, asks: Option<mpsc::Sender<Ask>>, relay: RelayCell) -> Registration {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.flights).insert(id, FlightSlot { asks, relay });
        Registration {
            handler: Arc::downgrade(self),
            id,
        }
    }

    /// Calls `hook` whenever the upstream says its tool list changed.
    pub(super) fn on_tools_changed(&self, hook: Arc<dyn Fn() + Send + Sync>) {
        *lock(&self.tools_changed) = Some(hook);
    }

    /// The handler of the connection the bridge keeps for its life.
    pub(super) fn kept(mut self) -> Self {
        self.kept = true;
        self
    }

    /// Passes the upstream's announcements to `observer` from now on.
    pub(super) fn attach(&self, observer: Arc<dyn Observer>) {
        *lock(&self.observer) = Some(observer);
    }

    /// Forgets the roots the client last gave: it said they changed.
    pub(super) fn forget_roots(&self) {
        *lock(&self.roots) = None;
    }

    /// Remembers the roots a client gave, for questions outside requests;
    /// only on a connection serving one client, as roots are that client's.
    pub(super) fn remember_roots(&self, roots: &Value) {
        if self.one_client {
            *lock(&self.roots) = Some(roots.clone());
        }
    }

    /// The request a question belongs to: the only one in flight, or, on a
    /// legacy session's own connection, where every request comes from the
    /// same client, the oldest.
    fn asking_flight(&self) -> Option<mpsc::Sender<Ask>> {
        let flights = lock(&self.flights);
        let oldest = flights
            .iter()
            .min_by_key(|(id, _)| **id)
            .map(|(_, slot)| slot);
        match (flights.len(), oldest) {
            (1, Some(slot)) => slot.asks.clone(),
            (_, Some(slot)) if self.one_client => slot.asks.clone(),
            _ => None,
        }
    }

    /// The request a log line belongs to: only ever the one in flight; a
    /// line that could be another's is dropped.
    fn logging_flight(&self) -> Option<RelayCell> {
        let flights = lock(&self.flights);
        let mut slots = flights.values();
        match (slots.next(), slots.next()) {
            (Some(slot), None) => Some(Arc::clone(&slot.relay)),
            _ => None,
        }
    }

    /// Puts one question to the request in flight and waits for the
    /// downstream client's answer.
    async fn ask(&self, method: &str, params: Value) -> Result<Value, ErrorObject> {
        // A roots question outside any request waits this long in all for
        // a stream or a request of the session to carry it.
        let deadline = tokio::time::Instant::now() + ROOTS_OUTSIDE_REQUESTS;
        loop {
            if let Some(outcome) = self.ask_flights(method, &params).await {
                if method == "roots/list" && outcome.is_ok() && self.shared_by_callers {
                    self.gave_roots.store(true, Ordering::Release);
                }
                return outcome;
            }
            if method != "roots/list" {
                return Err(Refusal::internal(format!(
                    "{method} arrived outside any request the bridge can put it to"
                ))
                .into());
            }
            // Outside a request no call checks what the client declared
            // (in one, the call does, and counts the round): a client that
            // did not declare roots is not asked for them.
            if self.capabilities.roots.is_none() {
                return Err(Refusal::method_not_found(
                    "roots/list: the client did not declare roots",
                )
                .into());
            }
            // Outside any request: put to the session's client on its
            // stream (a server asks at once after the handshake, before
            // the first call), else the roots last seen, or none.
            match self.ask_session(method, &params, deadline).await {
                Outside::Answered(roots) => {
                    self.remember_roots(&roots);
                    return Ok(roots);
                }
                Outside::RequestBegan => {}
                Outside::Unasked => {
                    return Ok(lock(&self.roots)
                        .clone()
                        .unwrap_or_else(|| json!({ "roots": [] })));
                }
            }
        }
    }

    /// Puts the question to the request in flight, and to the next one of
    /// the same client should that request end first; `None` when none
    /// took it.
    async fn ask_flights(
        &self,
        method: &str,
        params: &Value,
    ) -> Option<Result<Value, ErrorObject>> {
        for _ in 0..MAX_REROUTES {
            let asks = self.asking_flight()?;
            let (answer, answered) = oneshot::channel();
            let ask = Ask {
                method: method.to_owned(),
                params: params.clone(),
                answer,
            };
            if asks.try_send(ask).is_err() {
                return Some(Err(Refusal::internal(format!(
                    "too many questions waiting; {method} refused"
                ))
                .into()));
            }
            match answered.await {
                Ok(outcome) => return Some(outcome),
                Err(_) if self.one_client => {}
                Err(_) => return None,
            }
        }
        None
    }

    /// Puts the question to the session's client on its stream, until
    /// `deadline`: a client opens its GET stream just after the handshake,
    /// when a server asks too, and a request of the session's that begins
    /// meanwhile can carry the question instead.
    async fn ask_session(
        &self,
        method: &str,
        params: &Value,
        deadline: tokio::time::Instant,
    ) -> Outside {
        let Some(client) = lock(&self.client).as_ref().and_then(Weak::upgrade) else {
            return Outside::Unasked;
        };
        let asked = tokio::time::timeout_at(deadline, async {
            loop {
                match client.exchange_dyn(method, params.clone()).await {
                    Ok(answer) => return Outside::Answered(answer),
                    Err(ExchangeError::Unsupported) => {
                        tokio::time::sleep(STREAM_AWAITED).await;
                        if self.asking_flight().is_some() {
                            return Outside::RequestBegan;
                        }
                    }
                    Err(_) => return Outside::Unasked,
                }
            }
        });
        asked.await.unwrap_or(Outside::Unasked)
    }
}

/// No word that the client's roots changed is on its way up.
const WORD_IDLE: u8 = 0;
/// One is on its way.
const WORD_SENDING: u8 = 1;
/// One is on its way, and another is due once it is sent.
const WORD_AGAIN: u8 = 2;

/// Sends the words that a client's roots changed on one connection; if its
/// task is dropped before it is done, the connection may send again.
pub(super) struct RootsWords {
    pub(super) handler: Arc<UpstreamHandler>,
    pub(super) done: bool,
}

impl RootsWords {
    /// The sender is done: nothing is on its way any more, by its own word.
    pub(super) fn finish(&mut self) {
        self.done = true;
    }
}

impl Drop for RootsWords {
    fn drop(&mut self) {
        if !self.done {
            self.handler.roots_word_dropped();
        }
    }
}

/// How a question outside any request went.
enum Outside {
    /// The client answered.
    Answered(Value),
    /// A request of the session began, to carry it.
    RequestBegan,
    /// It could not be put to the client in time.
    Unasked,
}

/// How often a question is routed again after the request it went to ended.
const MAX_REROUTES: usize = 4;

/// How long a `roots/list` between requests waits for the client before it
/// is answered with the roots last seen.
const ROOTS_OUTSIDE_REQUESTS: std::time::Duration = std::time::Duration::from_secs(10);

/// How often such a question looks again for a stream to go on.
const STREAM_AWAITED: std::time::Duration = std::time::Duration::from_millis(100);

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
                // A request's when one request is in flight; else, on a
                // session's own connection, the session's; a line that could
                // be anyone's is not sent anywhere.
                let level = params
                    .get("level")
                    .cloned()
                    .and_then(|l| serde_json::from_value(l).ok())
                    .unwrap_or(LoggingLevel::Info);
                let logger = params
                    .get("logger")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let data = params.get("data").cloned().unwrap_or(Value::Null);
                if let Some(cell) = self.logging_flight() {
                    relay(
                        &cell,
                        Relay::Log {
                            level,
                            logger,
                            data,
                        },
                    );
                } else if let Some(session) = self.session {
                    self.tell(|o| o.log(session, level, logger.as_deref(), &data));
                }
            }
            "notifications/tools/list_changed" => {
                if let Some(hook) = lock(&self.tools_changed).clone() {
                    hook();
                }
                self.tell(|o| o.tools_changed());
            }
            "notifications/prompts/list_changed" => self.tell(|o| o.prompts_changed()),
            "notifications/resources/list_changed" => self.tell(|o| o.resources_changed()),
            "notifications/resources/updated" => {
                if let Some(uri) = params.get("uri").and_then(Value::as_str) {
                    self.tell(|o| o.resource_updated(self.session, uri));
                }
            }
            _ => {}
        }
    }

    fn closed(&self, reason: &str) {
        if self.kept {
            self.tell(|o| o.kept_closed(reason));
        }
    }
}

impl UpstreamHandler {
    /// Tells the observer, outside the lock: it may attach itself anew.
    fn tell(&self, news: impl FnOnce(&dyn Observer)) {
        let observer = lock(&self.observer).clone();
        if let Some(observer) = observer {
            news(observer.as_ref());
        }
    }
}

/// One connection to the upstream, and when it was last used.
#[derive(Debug)]
pub(super) struct Upstream {
    pub(super) client: Client,
    pub(super) handler: Arc<UpstreamHandler>,
    /// When it was opened: one that ends soon after failed to start.
    opened: Instant,
    /// The bridge's record of how its starts went, told once of this
    /// connection's end ([`Self::ended`]).
    starts: Arc<Mutex<Starts>>,
    end_told: AtomicBool,
    pub(super) last_used: Mutex<Instant>,
    /// Held by one request at a time, when the connection is leased
    /// exclusively.
    pub(super) busy: AtomicBool,
    /// How many requests use the connection now; the reaper leaves it
    /// alone while any does.
    pub(super) in_use: AtomicUsize,
    /// Set when a request was abandoned on it while the server may still be
    /// working on it: whatever the server sends next could be about that
    /// request, so the connection is not given to another.
    pub(super) retired: AtomicBool,
    /// The resources its session subscribed to on it: a connection with
    /// any is its session's for as long as the session lasts, never reaped
    /// as idle.
    pub(super) subscribed: Mutex<std::collections::BTreeSet<String>>,
}

impl Upstream {
    /// A connection not yet used.
    pub(super) fn new(
        client: Client,
        handler: Arc<UpstreamHandler>,
        starts: Arc<Mutex<Starts>>,
    ) -> Self {
        Self {
            client,
            handler,
            opened: Instant::now(),
            starts,
            end_told: AtomicBool::new(false),
            last_used: Mutex::new(Instant::now()),
            busy: AtomicBool::new(false),
            in_use: AtomicUsize::new(0),
            retired: AtomicBool::new(false),
            subscribed: Mutex::default(),
        }
    }

    /// Tells the bridge's record of starts that this connection ended, its
    /// server gone, once however many notice: soon after it was opened, a
    /// failed start.
    pub(super) fn ended(&self) {
        if !self.end_told.swap(true, Ordering::AcqRel) {
            lock(&self.starts).ended(self.opened.elapsed(), Instant::now());
        }
    }

    /// Tells the bridge's record of starts that this connection is being
    /// closed here, its server still there (idle, or given up).
    pub(super) fn closing(&self) {
        if !self.end_told.swap(true, Ordering::AcqRel) {
            lock(&self.starts).closed(self.opened.elapsed());
        }
    }

    /// Whether the reaper may close it.
    pub(super) fn is_idle(&self) -> bool {
        self.in_use.load(Ordering::Acquire) == 0
            && !self.busy.load(Ordering::Acquire)
            && lock(&self.subscribed).is_empty()
    }

    fn lease(self: &Arc<Self>, exclusive: bool) -> Lease {
        self.in_use.fetch_add(1, Ordering::AcqRel);
        self.touch();
        Lease {
            upstream: Arc::clone(self),
            exclusive,
            seat: None,
        }
    }

    pub(super) fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    /// Whether no request but the one on it now may have the connection:
    /// one was abandoned on it, or it holds one client's roots. Such a
    /// connection is closed once free.
    pub(super) fn kept_from_others(&self) -> bool {
        self.retired.load(Ordering::Acquire) || self.handler.gave_roots()
    }

    /// Takes the connection for one request, if no other holds it.
    pub(super) fn try_lease(self: &Arc<Self>) -> Option<Lease> {
        if self.kept_from_others() {
            return None;
        }
        self.busy
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| self.lease(true))
    }

    /// Uses the connection alongside any other request.
    pub(super) fn share(self: &Arc<Self>) -> Lease {
        self.lease(false)
    }
}

/// A request's use of a connection. An exclusive lease is what lets a
/// legacy server's questions be attributed: only one request is in flight
/// on the connection until the lease is dropped.
#[derive(Debug)]
pub(super) struct Lease {
    pub(super) upstream: Arc<Upstream>,
    exclusive: bool,
    /// The request's place in its session's share of a shared connection
    /// (boxed: most leases have none, and a lease is held in every
    /// forwarded request's future).
    seat: Option<Box<super::share::Seat>>,
}

impl Lease {
    /// This lease, counted in its session's share of the connection until
    /// it is dropped (or steps out).
    pub(super) fn within(mut self, seat: Option<super::share::Seat>) -> Self {
        self.seat = seat.map(Box::new);
        self
    }

    /// Gives up the lease's place in its session's share while nothing of
    /// its is with the upstream (its client is being asked, or the upstream
    /// runs it as a task).
    pub(super) fn step_out(&self) {
        if let Some(seat) = &self.seat {
            seat.step_out();
        }
    }

    /// Takes the place again before the upstream is asked anything more.
    pub(super) async fn step_in(&self) -> Result<(), crate::application::server::CallError> {
        match &self.seat {
            Some(seat) => seat.step_in().await,
            None => Ok(()),
        }
    }

    /// Keeps the connection from every other request from now on: the
    /// request leased on it was abandoned while the server may still be
    /// working on it.
    pub(super) fn retire(&self) {
        if self.exclusive {
            self.upstream.retired.store(true, Ordering::Release);
        }
    }

    /// Closes the connection, shared or not: its server misbehaves past
    /// what the bridge bounds (it asks on and on), and on a shared
    /// connection what it asks next would be taken for the next request's
    /// questions. A legacy session's next request opens its session
    /// upstream anew, and its subscriptions are made again there, as for
    /// a connection whose server went away.
    pub(super) fn discard(&self) {
        self.upstream.retired.store(true, Ordering::Release);
        let upstream = Arc::clone(&self.upstream);
        tokio::spawn(async move { upstream.client.close().await });
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Noticed as the request that saw it end lets go, not when the
        // pool next looks: a server failing for every session's first
        // request is then not started again for each.
        if self.upstream.client.closed().is_some() {
            self.upstream.ended();
        }
        self.upstream.touch();
        self.upstream.in_use.fetch_sub(1, Ordering::AcqRel);
        if self.exclusive {
            self.upstream.busy.store(false, Ordering::Release);
        }
    }
}

fn internal(error: impl std::fmt::Display) -> ErrorObject {
    Refusal::internal(error.to_string()).into()
}

fn invalid_answer(error: impl std::fmt::Display) -> ErrorObject {
    Refusal::internal(format!(
        "the client's answer does not fit the question: {error}"
    ))
    .into()
}

/// Locks, recovering from a poisoned lock: the maps hold no invariant a
/// panic elsewhere could have broken half-way.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Which connection a request goes through.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(super) enum Affinity {
    /// The one connection to a stateless upstream.
    Shared,
    /// A legacy downstream session's own.
    Session(SessionId),
    /// The connection a bridge with an observer keeps for its life, in
    /// front of a legacy server: no request leases it, so no request
    /// abandoned on it can retire it, and it is never reaped.
    Kept,
    /// A stateless caller's own, by caller (its principal; when anonymous,
    /// its network; stdio's one client) and by the capabilities its
    /// requests declare: a legacy server hears them once, at the
    /// handshake, so each set gets its own connections. What a legacy
    /// server says on a connection outside the request it is serving (a
    /// log line, a question, after its answer) can only be given to the
    /// request holding the connection then, so a connection never passes
    /// from one caller to another.
    Caller(Caller, String),
}

/// Everything a bridge can ask a client for on an upstream's behalf.
pub(super) fn full_capabilities() -> ClientCapabilities {
    serde_json::from_value(json!({
        "roots": { "listChanged": false },
        "sampling": {},
        "elicitation": { "form": {}, "url": {} },
    }))
    .unwrap_or_default()
}

/// What a legacy client declared, as the upstream is to hear it.
pub(super) fn legacy_capabilities(declared: &JsonObject) -> ClientCapabilities {
    let mut declared = declared.clone();
    declared.remove("tasks");
    serde_json::from_value(Value::Object(declared)).unwrap_or_default()
}

/// A stable key for a capability set.
pub(super) fn capabilities_key(capabilities: &ClientCapabilities) -> String {
    serde_json::to_string(capabilities).unwrap_or_default()
}

/// What one session wants subscribed, and how to wake its worker.
#[derive(Debug)]
pub(super) struct SessionWatch {
    pub(super) wanted: std::collections::BTreeSet<String>,
    /// What the session's client declared, for a connection opened to
    /// subscribe on.
    pub(super) declared: JsonObject,
    pub(super) wake: Arc<tokio::sync::Notify>,
}
