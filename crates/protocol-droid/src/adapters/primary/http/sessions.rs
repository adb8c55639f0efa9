//! Legacy Streamable HTTP sessions: minted, looked up, ended and reaped.
//!
//! A session outlives the requests that use it, so its ports cannot point
//! at any one response stream. Its sink and exchange route each message to
//! the stream of the request being served (a task-local the transport sets
//! around every handler), or, outside any request, to the session's own GET
//! stream.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use super::events::{EventStore, Mirror, ReplayBudget, Share};
use super::lane::{Lane, Unsent};
use super::owed::Owed;
use super::respond::CURRENT;
use super::task_streams::{TaskStreams, Watch};
use crate::application::server::tasks::wire::related_meta;
use crate::application::server::{
    AuthContext, BoxFuture, CallbackExchange, DynFrameSink, ExchangeError, ImageChange, Lasting,
    SharedSessions,
};
use crate::application::server::{Change, Connection, Server};
use crate::application::squelch::Squelch;
use crate::domain::jsonrpc::{ErrorCode, ErrorObject, Message, Notification, Request, RequestId};
use crate::domain::{SessionId, TransportKind};

/// How many requests one session may have in flight, on either legacy HTTP
/// transport and in a batch: the same bound stdio has.
pub(super) const MAX_IN_FLIGHT: usize = 256;

type Pending = Mutex<HashMap<RequestId, oneshot::Sender<Result<Value, ErrorObject>>>>;

/// One legacy session.
pub(super) struct Session {
    pub(super) id: String,
    /// Which transport opened it; an id is only good on that transport.
    pub(super) transport: TransportKind,
    /// Who opened it (issuer, subject and client). The id alone is not a
    /// credential: a request with another caller's token (or none, for a
    /// session opened with one) is answered as if the session did not exist.
    pub(super) owner: Option<String>,
    connection: OnceLock<Arc<Connection>>,
    pending: Pending,
    pub(super) events: Arc<EventStore>,
    standalone: Mutex<Option<mpsc::Sender<Value>>>,
    /// Where a 2024-11-05 session's answers, and what its requests say,
    /// go: its stream, bounded in bytes (none on Streamable HTTP, whose
    /// answers travel on their POSTs).
    lane: OnceLock<Lane>,
    /// Where a 2025-11-25 task's own requests go: its `tasks/result`
    /// streams, and those held until the client opens one.
    tasks: Arc<TaskStreams>,
    last_seen: Mutex<Instant>,
    next_request: AtomicU64,
    /// Requests in flight, so `notifications/cancelled` can stop them.
    pub(super) in_flight: Mutex<HashMap<RequestId, AbortHandle>>,
    exchange_timeout: Duration,
    /// The task forwarding list changes to this session; stopped on close,
    /// so an abandoned session leaves no task waiting for the next change.
    forwarder: Mutex<Option<AbortHandle>>,
    /// Whose share of the session quota this session is.
    pub(super) quota: String,
    /// How long an answer waits for room on a stream nobody reads.
    stall_timeout: Duration,
    /// Set once the session has ended: lookups no longer find it, and the
    /// reaper takes it out of the table at once.
    closed: AtomicBool,
    /// What starts the ids of the requests this instance sends the client
    /// (`droid-`, or `droid-<instance>-` where sessions are shared, so an
    /// answer posted to another instance finds its way back).
    request_prefix: String,
    /// What this instance last took of the shared session (nothing where
    /// nothing is shared).
    synced: Mutex<Synced>,
    /// Whether the session is being read again from the store, told that
    /// another instance changed it, and whether it was told again since
    /// (see [`Session::start_rereading`]).
    rereading: AtomicBool,
    reread_wanted: AtomicBool,
}

/// What an instance last took of a shared session: the version the store
/// kept (how many changes it had had: every change counts one, so a
/// version names what was kept) and what its client had changed then,
/// which the next reading is compared with so that only what changed
/// elsewhere is taken.
#[derive(Debug, Default)]
pub(super) struct Synced {
    pub(super) version: u64,
    pub(super) lasting: Lasting,
    /// Set by a write of this instance's own ([`Synced::fold`]): what the
    /// store holds at `version` may be more than `lasting`.
    pub(super) stale: bool,
}

impl Synced {
    /// Whether [`Self::take`] would do anything with a reading at
    /// `version`: a later one, or this one after a write of this
    /// instance's own.
    fn would_take(&self, version: u64) -> bool {
        version > self.version || (version == self.version && self.stale)
    }

    /// Takes `next`, a reading of the shared session, unless this instance
    /// took or wrote a later one (a reading fetched before a write of its
    /// own landed, or fetched by another request and taken late, would undo
    /// what came after it) or the same: what it had taken before, for the
    /// change between the two to be applied.
    fn take(&mut self, next: Self) -> Option<Lasting> {
        if !self.would_take(next.version) {
            return None;
        }
        Some(std::mem::replace(self, next).lasting)
    }

    /// Notes that the store now also holds `change`, which this instance
    /// made there itself as the session's `version`th change: taken as what
    /// it last read, so that an instance putting the session back as it was
    /// before is seen as a change, and a reading older than the write is
    /// passed over. What else the store holds now is not known: the next
    /// reading at this version or later is taken.
    fn fold(&mut self, change: &ImageChange, version: u64) {
        self.version = self.version.max(version);
        if let Some(level) = change.level {
            self.lasting.level = Some(level);
        }
        for uri in &change.unsubscribed {
            self.lasting.subscribed.remove(uri);
        }
        self.lasting
            .subscribed
            .extend(change.subscribed.iter().cloned());
        self.stale = true;
    }
}

/// Why a request was not started.
pub(super) struct Refused {
    pub(super) status: axum::http::StatusCode,
    pub(super) code: ErrorCode,
    pub(super) message: String,
}

impl Session {
    /// Whether a reading of the shared session at `version` would change
    /// what this instance took last.
    pub(super) fn would_take(&self, version: u64) -> bool {
        self.synced
            .lock()
            .is_ok_and(|synced| synced.would_take(version))
    }

    /// See [`Synced::take`].
    pub(super) fn take(&self, next: Synced) -> Option<Lasting> {
        self.synced.lock().ok()?.take(next)
    }

    /// See [`Synced::fold`].
    pub(super) fn fold(&self, change: &ImageChange, version: u64) {
        if let Ok(mut synced) = self.synced.lock() {
            synced.fold(change, version);
        }
    }

    /// Asks for the session to be read again from the store: `true` when
    /// the caller is to do it, none being under way; else the one under way
    /// reads it once more when it is done (see [`Self::reread_more`]), so
    /// one instance reads a session at most twice however often it is told.
    ///
    /// Sequentially consistent throughout: an asker writes one flag and
    /// reads the other, the reader the other way round, and with weaker
    /// orders each could miss the other's write, leaving a notice unread.
    pub(super) fn start_rereading(&self) -> bool {
        self.reread_wanted.store(true, Ordering::SeqCst);
        !self.rereading.swap(true, Ordering::SeqCst)
    }

    /// Called by the one reading the session again before each reading.
    pub(super) fn rereading_now(&self) {
        self.reread_wanted.store(false, Ordering::SeqCst);
    }

    /// Called by the one reading the session again after each reading:
    /// whether it is to read once more, having been asked meanwhile.
    pub(super) fn reread_more(&self) -> bool {
        if self.reread_wanted.load(Ordering::SeqCst) {
            return true;
        }
        self.rereading.store(false, Ordering::SeqCst);
        // Asked between the two: taken up here, unless an asker took it.
        self.reread_wanted.load(Ordering::SeqCst) && !self.rereading.swap(true, Ordering::SeqCst)
    }

    pub(super) fn connection(&self) -> Option<&Arc<Connection>> {
        self.connection.get()
    }

    fn touch(&self) {
        if let Ok(mut seen) = self.last_seen.lock() {
            *seen = Instant::now();
        }
    }

    /// Whether the session is in use without sending requests here: a
    /// stream still open to its client, a request still running, a request
    /// of the server's still waiting for its answer (which may be posted to
    /// another instance), a `tasks/result` on another instance waiting for
    /// this one's questions, or a task of the session running here (whose
    /// statuses go through this copy of it). Such a session is not idle,
    /// however long since its last POST.
    fn busy(&self) -> bool {
        let streaming = self
            .standalone
            .lock()
            .is_ok_and(|s| s.as_ref().is_some_and(|tx| !tx.is_closed()));
        let asking = self.pending.lock().is_ok_and(|p| !p.is_empty());
        let running = self.connection().is_some_and(|c| c.runs_tasks());
        streaming || self.working() || asking || running || self.tasks.watched_elsewhere()
    }

    /// Whether a request of the session is still being served.
    fn working(&self) -> bool {
        self.in_flight.lock().is_ok_and(|m| !m.is_empty())
    }

    fn idle_for(&self) -> Duration {
        self.last_seen
            .lock()
            .map_or(Duration::MAX, |seen| seen.elapsed())
    }

    /// Sends `message` on the current request's stream, or else, for a
    /// message tagged with a task, on an open `tasks/result` stream of that
    /// task, or else on the GET stream; `false` when none can take it.
    fn route(&self, message: Value) -> bool {
        let message = match self.on_request(message) {
            Ok(()) => return true,
            Err(message) => message,
        };
        let message = match self.tasks.stream_for(&message) {
            Some(tx) => match tx.try_send(message) {
                Ok(()) => return true,
                Err(refused) => refused.into_inner(),
            },
            None => message,
        };
        self.standalone_tx()
            .is_some_and(|tx| tx.try_send(message).is_ok())
    }

    /// Sends `message` on the stream of the request the current task
    /// serves, if it has one; gives it back when it has none.
    fn on_request(&self, message: Value) -> Result<(), Value> {
        // A request answered as plain JSON has no stream to carry anything
        // else; its messages go to the session's stream, if there is one.
        let on_request = CURRENT
            .try_with(|c| c.streams.then(|| c.tx.clone()))
            .ok()
            .flatten();
        match on_request {
            Some(tx) => tx.try_send(message).map_err(|e| e.into_inner()),
            None => Err(message),
        }
    }

    /// The session's own stream (GET), if one is open.
    pub(super) fn standalone_tx(&self) -> Option<mpsc::Sender<Value>> {
        self.standalone.lock().ok().and_then(|s| s.clone())
    }

    /// Where this session's tasks' requests go.
    pub(super) fn task_streams(&self) -> &TaskStreams {
        &self.tasks
    }

    /// Makes `tx`, the stream of a `tasks/result` for `task`, where that
    /// task's requests go while the returned guard lives.
    pub(super) fn watch_task(&self, task: &str, tx: mpsc::Sender<Value>) -> Watch {
        self.tasks.watch(task, tx)
    }

    /// Sends on the session's own stream (GET, or the 2024-11-05 stream).
    pub(super) fn send_standalone(&self, message: Value) -> bool {
        self.standalone
            .lock()
            .ok()
            .and_then(|s| s.clone())
            .is_some_and(|tx| tx.try_send(message).is_ok())
    }

    /// Makes `lane` where this 2024-11-05 session's answers go.
    pub(super) fn set_lane(&self, lane: Lane) {
        let _set = self.lane.set(lane);
    }

    /// Sends an answer, or what a request says, on this 2024-11-05
    /// session's lane, waiting for room rather than dropping it: answers
    /// must not be lost. A stream that takes nothing for
    /// [`HttpOptions::stall_timeout`](super::HttpOptions) is not being read,
    /// and the session ends: its answers would otherwise wait, and hold
    /// memory, for ever. `false` when it was not sent (a session without a
    /// lane has no such stream).
    pub(super) async fn send_answer(&self, message: Value) -> bool {
        let Some(lane) = self.lane.get() else {
            return false;
        };
        match lane.send(message, self.stall_timeout).await {
            Ok(()) => true,
            Err(Unsent::Closed) => false,
            Err(Unsent::Stalled) => {
                tracing::debug!(session = %self.id, "the session's stream is not read; ending it");
                self.close();
                false
            }
        }
    }

    /// Whether an answer of this 2024-11-05 session waits for its stream
    /// to take what it holds: no new request is taken meanwhile.
    pub(super) fn lane_backed_up(&self) -> bool {
        self.lane.get().is_some_and(Lane::backed_up)
    }

    /// Sends an answer on the session's lane if it has room now.
    pub(super) fn try_send_answer(&self, message: &Value) -> bool {
        self.lane.get().is_some_and(|lane| lane.try_send(message))
    }

    /// Starts `work`, the answering of request `id`, in its own task,
    /// registered so a cancellation can stop it; refuses an id already in
    /// flight in this session, and a request past [`MAX_IN_FLIGHT`]. Every
    /// request of either legacy HTTP transport, batched or not, comes
    /// through here.
    pub(super) fn start<T: Send + 'static>(
        self: &Arc<Self>,
        id: &RequestId,
        work: impl Future<Output = T> + Send + 'static,
    ) -> Result<tokio::task::JoinHandle<T>, Refused> {
        use axum::http::StatusCode;
        let Ok(mut in_flight) = self.in_flight.lock() else {
            return Err(Refused {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                code: ErrorCode::INTERNAL_ERROR,
                message: "session unavailable".to_owned(),
            });
        };
        if in_flight.len() >= MAX_IN_FLIGHT {
            return Err(Refused {
                status: StatusCode::SERVICE_UNAVAILABLE,
                code: ErrorCode::INTERNAL_ERROR,
                message: format!("this session has {MAX_IN_FLIGHT} requests in flight already"),
            });
        }
        if in_flight.contains_key(id) {
            return Err(Refused {
                status: StatusCode::OK,
                code: ErrorCode::INVALID_REQUEST,
                message: format!("request id {id} is already in flight"),
            });
        }
        let owner = Arc::clone(self);
        let own_id = id.clone();
        // The table stays locked across the spawn, so the task cannot remove
        // its entry before it is inserted.
        let task = tokio::spawn(async move {
            let outcome = work.await;
            if let Ok(mut in_flight) = owner.in_flight.lock() {
                let mine = in_flight
                    .get(&own_id)
                    .is_some_and(|h| h.id() == tokio::task::id());
                if mine {
                    in_flight.remove(&own_id);
                }
            }
            outcome
        });
        in_flight.insert(id.clone(), task.abort_handle());
        Ok(task)
    }

    /// Takes a notification from the client: `notifications/cancelled`
    /// stops the request it names, if it is in flight, and
    /// `notifications/roots/list_changed` is passed to the session's
    /// connection; any other is left alone. The request a cancellation
    /// named that is not running here, for the caller to pass on to the
    /// instances sharing the session.
    pub(super) fn notified(&self, notification: &Notification) -> Option<RequestId> {
        if notification.method == "notifications/roots/list_changed" {
            if let Some(connection) = self.connection() {
                connection.roots_changed();
            }
            return None;
        }
        if notification.method != "notifications/cancelled" {
            return None;
        }
        let target = notification
            .params
            .as_ref()
            .and_then(|p| p.get("requestId"))
            .and_then(RequestId::from_json)?;
        (!self.cancel(&target)).then_some(target)
    }

    /// Stops the request `id` if it runs here; whether it did.
    pub(super) fn cancel(&self, id: &RequestId) -> bool {
        let handle = self.in_flight.lock().ok().and_then(|mut f| f.remove(id));
        handle.map(|handle| handle.abort()).is_some()
    }

    /// Makes `tx` the session's GET stream, replacing any earlier one.
    pub(super) fn set_standalone(&self, tx: mpsc::Sender<Value>) {
        let flushing = tx.clone();
        if let Ok(mut standalone) = self.standalone.lock() {
            *standalone = Some(tx);
        }
        // Set before the held requests are looked at: one held from now on
        // has seen this stream first.
        self.tasks.flush_all(&flushing);
    }

    /// Whether a request of this instance's with id `id` waits for the
    /// client's answer here.
    pub(super) fn awaits(&self, id: &RequestId) -> bool {
        self.pending.lock().is_ok_and(|p| p.contains_key(id))
    }

    /// Delivers the client's answer to a server-initiated request.
    pub(super) fn answer(&self, id: &RequestId, outcome: Result<Value, ErrorObject>) -> bool {
        let waiter = self.pending.lock().ok().and_then(|mut p| p.remove(id));
        waiter.is_some_and(|w| w.send(outcome).is_ok())
    }

    /// Ends the standing stream, if one is open; the client may open
    /// another, and its requests go on.
    fn close_stream(&self) {
        if let Ok(mut standalone) = self.standalone.lock() {
            *standalone = None;
        }
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if let Some(forwarder) = self.forwarder.lock().ok().and_then(|mut f| f.take()) {
            forwarder.abort();
        }
        if let Some(connection) = self.connection() {
            connection.close();
        }
        if let Ok(mut pending) = self.pending.lock() {
            pending.clear();
        }
        if let Ok(mut in_flight) = self.in_flight.lock() {
            for (_, handle) in in_flight.drain() {
                handle.abort();
            }
        }
        if let Ok(mut standalone) = self.standalone.lock() {
            *standalone = None;
        }
        self.tasks.clear();
    }
}

/// The session's sink: the current request's stream, else the GET stream.
struct RoutedSink(Weak<Session>);

impl DynFrameSink for RoutedSink {
    fn send(&self, message: Message) -> bool {
        self.0
            .upgrade()
            .is_some_and(|s| s.route(message.into_value()))
    }

    fn release(&self) {
        let _inside_a_request = CURRENT.try_with(|c| c.release.notify_one());
    }
}

/// The session's exchange: requests go where notifications go; answers
/// come back as responses the client posts.
struct RoutedExchange(Weak<Session>);

impl CallbackExchange for RoutedExchange {
    async fn exchange(&self, method: &str, params: Value) -> Result<Value, ExchangeError> {
        self.send(None, method, params).await
    }

    async fn exchange_for_task(
        &self,
        task: &str,
        method: &str,
        params: Value,
    ) -> Result<Value, ExchangeError> {
        self.send(Some(task), method, params).await
    }
}

impl RoutedExchange {
    /// Sends the request and waits for the client's answer; a task's request
    /// that finds no stream waits for the client to open one (see
    /// `task_streams`), any other has nowhere to go.
    async fn send(
        &self,
        task: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, ExchangeError> {
        let session = self.0.upgrade().ok_or(ExchangeError::Closed)?;
        // A task outlives its session: once the session ended, its
        // questions have nobody to reach.
        if session.closed.load(Ordering::Acquire) {
            return Err(ExchangeError::Closed);
        }
        let id = RequestId::String(format!(
            "{}{}",
            session.request_prefix,
            session.next_request.fetch_add(1, Ordering::Relaxed)
        ));
        let (tx, rx) = oneshot::channel();
        if let Ok(mut pending) = session.pending.lock() {
            pending.insert(id.clone(), tx);
        }
        // However this wait ends (an answer, a timeout, the caller dropped),
        // the waiter leaves the table, and a request sent but not answered
        // is called off.
        let _forget = Forget {
            session: self.0.clone(),
            id: id.clone(),
            task: task.map(str::to_owned),
        };
        let request = Message::Request(Request {
            id: id.clone(),
            method: method.to_owned(),
            params: Some(params),
        })
        .into_value();
        let sent = match (session.on_request(request), task) {
            (Ok(()), _) => true,
            (Err(request), Some(task)) => session
                .tasks
                .send_or_hold(task, &id, request, || session.standalone_tx()),
            (Err(request), None) => session
                .standalone_tx()
                .is_some_and(|tx| tx.try_send(request).is_ok()),
        };
        if !sent {
            if let Ok(mut pending) = session.pending.lock() {
                pending.remove(&id);
            }
            return Err(ExchangeError::Unsupported);
        }
        let timeout = session.exchange_timeout;
        // Not holding the session while waiting: an ended session must be
        // able to go away and fail this wait.
        drop(session);
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(Ok(result))) => Ok(result),
            Ok(Ok(Err(error))) => Err(ExchangeError::Peer(error)),
            Ok(Err(_)) => Err(ExchangeError::Closed),
            Err(_) => Err(ExchangeError::TimedOut),
        }
    }
}

/// Removes a server request's waiter when its wait ends.
struct Forget {
    session: Weak<Session>,
    id: RequestId,
    /// The task the request was made for, if any: the call-off is tagged
    /// with it, and so goes where the request went.
    task: Option<String>,
}

impl Drop for Forget {
    fn drop(&mut self) {
        let Some(session) = self.session.upgrade() else {
            return;
        };
        let unanswered = session
            .pending
            .lock()
            .ok()
            .and_then(|mut pending| pending.remove(&self.id))
            .is_some();
        // A request still held was never sent: nothing to call off.
        let held = session.tasks.forget(&self.id);
        if unanswered && !held {
            let mut params = json!({ "requestId": self.id.to_json(),
                "reason": "the server stopped waiting for this answer" });
            if let (Some(task), Value::Object(params)) = (&self.task, &mut params) {
                params.insert("_meta".to_owned(), related_meta(task));
            }
            let _told = session.route(
                Message::Notification(Notification {
                    method: "notifications/cancelled".to_owned(),
                    params: Some(params),
                })
                .into_value(),
            );
        }
    }
}

/// Every open session, bounded in number in all and per opener.
pub(super) struct Sessions {
    map: Mutex<Table>,
    limits: SessionLimits,
    /// Where sessions are shared with other instances, if they are.
    pub(super) shared: Option<SharedSessions>,
    /// What tells the other instances a task's status for a shared session
    /// whose stream this instance does not hold, if sessions are shared.
    tell_status: Option<StatusTeller>,
    /// Cancelled when a shutdown's grace is over: every request still
    /// running, in a session or not, is then answered with an error.
    pub(super) stop: CancellationToken,
    /// What the sessions' records for resumption hold, by opener and in all.
    replay: Arc<ReplayBudget>,
}

/// Tells every other instance a task's status notification (the message)
/// for the shared session named: given to the table by the server that
/// builds it, so the table need not know how instances talk.
pub(super) type StatusTeller = Arc<dyn Fn(String, Value) -> BoxFuture<'static, ()> + Send + Sync>;

#[derive(Default)]
struct Table {
    sessions: HashMap<String, Arc<Session>>,
    /// How many sessions each quota key holds.
    held: HashMap<String, usize>,
}

impl Table {
    fn insert(&mut self, session: Arc<Session>) {
        *self.held.entry(session.quota.clone()).or_default() += 1;
        self.sessions.insert(session.id.clone(), session);
    }

    fn remove(&mut self, id: &str) -> Option<Arc<Session>> {
        let session = self.sessions.remove(id)?;
        if let std::collections::hash_map::Entry::Occupied(mut held) =
            self.held.entry(session.quota.clone())
        {
            *held.get_mut() -= 1;
            if *held.get() == 0 {
                held.remove();
            }
        }
        Some(session)
    }
}

/// What bounds the session table; see [`HttpOptions`](super::HttpOptions).
#[derive(Clone, Copy, Debug)]
pub(super) struct SessionLimits {
    pub(super) max: usize,
    pub(super) per_principal: usize,
    pub(super) per_address: usize,
    pub(super) replay_events: usize,
    pub(super) replay_bytes: usize,
    pub(super) replay_bytes_per_opener: usize,
    pub(super) replay_bytes_in_all: usize,
    pub(super) exchange_timeout: Duration,
    pub(super) stall_timeout: Duration,
    /// How long a session may idle: a shared record's lifetime too.
    pub(super) idle: Duration,
}

/// Why no session was opened.
#[derive(Debug)]
pub(super) enum Full {
    /// The server holds as many as it may.
    Server,
    /// This opener (a principal, or an anonymous caller's address) holds
    /// its share.
    Quota,
}

/// The answer to an `initialize` (or an SSE `GET`) that found no room: 503
/// when the server is full, 429 when the opener holds its share.
pub(super) fn sessions_full(full: &Full, id: Option<&RequestId>) -> axum::response::Response {
    use axum::http::StatusCode;
    let (status, message) = match full {
        Full::Server => (StatusCode::SERVICE_UNAVAILABLE, "too many sessions"),
        Full::Quota => (
            StatusCode::TOO_MANY_REQUESTS,
            "this caller has as many sessions open as it may; end one (DELETE) first",
        ),
    };
    super::respond::refusal(status, id, ErrorCode::INTERNAL_ERROR, message)
}

/// Whose share of the quota a session opened by `opener` from `peer` is: an
/// authenticated principal's, else the anonymous caller's address.
fn quota_key(opener: &AuthContext, peer: Option<IpAddr>) -> (String, bool) {
    match opener.principal_key() {
        Some(principal) => (principal, true),
        None => (
            format!(
                "address\u{1f}{}",
                peer.map_or_else(String::new, |ip| {
                    crate::application::server::rate::network_of(ip).to_string()
                })
            ),
            false,
        ),
    }
}

impl Sessions {
    pub(super) fn new(
        limits: SessionLimits,
        shared: Option<SharedSessions>,
        tell_status: Option<StatusTeller>,
    ) -> Arc<Self> {
        Arc::new(Self {
            map: Mutex::default(),
            limits,
            shared,
            tell_status,
            stop: CancellationToken::new(),
            replay: ReplayBudget::new(limits.replay_bytes_per_opener, limits.replay_bytes_in_all),
        })
    }

    /// How long a shared record lives without being used.
    pub(super) const fn idle(&self) -> Duration {
        self.limits.idle
    }

    /// Opens a session of `server`'s for `opener`, who connected from
    /// `peer`; refused when the server or the opener's quota is full.
    pub(super) fn open(
        &self,
        server: &Server,
        transport: TransportKind,
        opener: &AuthContext,
        peer: Option<IpAddr>,
    ) -> Result<Arc<Session>, Full> {
        let (quota, principal) = quota_key(opener, peer);
        let share = if principal {
            self.limits.per_principal
        } else {
            self.limits.per_address
        };
        // Checked first, so a refused session costs nothing.
        self.room_for(&quota, share)?;
        // 128 bits from the CSPRNG, as hex (visible ASCII, as the spec
        // requires); none without entropy.
        let id = crate::application::random::secret_hex().ok_or(Full::Server)?;
        self.admit(server, id, transport, opener.principal_key(), quota, share)
    }

    /// Serves here the session `id` another instance opened, for `owner`
    /// with its `quota`, once `settle` has settled its connection as that
    /// instance did; the session already here if another request made it
    /// first. Refused as `open` is when this instance is full.
    pub(super) fn adopt(
        &self,
        server: &Server,
        id: &str,
        owner: Option<String>,
        quota: String,
        settle: impl FnOnce(&Connection) -> bool,
    ) -> Result<Option<Arc<Session>>, Full> {
        if let Some(session) = self.map.lock().map_err(|_| Full::Server)?.sessions.get(id) {
            return Ok(Some(Arc::clone(session)));
        }
        let share = if owner.is_some() {
            self.limits.per_principal
        } else {
            self.limits.per_address
        };
        self.room_for(&quota, share)?;
        let session = self.build(
            server,
            id.to_owned(),
            TransportKind::StreamableHttp,
            owner,
            quota,
        );
        // A copy that is not kept is closed, so that nothing its server
        // was told of it (a forwarder's subscriptions, say) is left behind.
        if !session.connection().is_some_and(|c| settle(c)) {
            session.close();
            return Ok(None);
        }
        let Ok(mut map) = self.map.lock() else {
            session.close();
            return Err(Full::Server);
        };
        if let Some(first) = map.sessions.get(id) {
            let first = Arc::clone(first);
            drop(map);
            session.close();
            return Ok(Some(first));
        }
        if let Err(full) = Self::check(&map, &session.quota, share, self.limits.max) {
            drop(map);
            session.close();
            return Err(full);
        }
        // Named as it enters, under the table's lock: a request finding it
        // there finds it named.
        self.name(&session);
        map.insert(Arc::clone(&session));
        drop(map);
        self.start_forwarding(server, &session);
        Ok(Some(session))
    }

    /// A new session of `server`'s, not yet in the table.
    fn build(
        &self,
        server: &Server,
        id: String,
        transport: TransportKind,
        owner: Option<String>,
        quota: String,
    ) -> Arc<Session> {
        let shared = self
            .shared
            .as_ref()
            .filter(|_| transport == TransportKind::StreamableHttp);
        let request_prefix = shared.map_or_else(
            || "droid-".to_owned(),
            |shared| format!("droid-{}-", shared.instance),
        );
        let mirror = shared.map(|shared| Mirror {
            store: Arc::clone(&shared.store),
            session: id.clone(),
            instance: shared.instance.clone(),
            ttl_ms: u64::try_from(self.limits.idle.as_millis()).unwrap_or(u64::MAX),
        });
        let session = Arc::new(Session {
            id,
            transport,
            owner,
            connection: OnceLock::new(),
            pending: Mutex::default(),
            events: Arc::new(EventStore::new(
                self.limits.replay_events,
                self.limits.replay_bytes,
                mirror,
                Some(Share {
                    budget: Arc::clone(&self.replay),
                    opener: quota.clone(),
                }),
            )),
            standalone: Mutex::default(),
            lane: OnceLock::new(),
            tasks: Arc::default(),
            last_seen: Mutex::new(Instant::now()),
            next_request: AtomicU64::new(1),
            in_flight: Mutex::default(),
            exchange_timeout: self.limits.exchange_timeout,
            forwarder: Mutex::default(),
            quota,
            stall_timeout: self.limits.stall_timeout,
            closed: AtomicBool::new(false),
            request_prefix,
            synced: Mutex::default(),
            rereading: AtomicBool::new(false),
            reread_wanted: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&session);
        let connection = server
            .connect(
                transport,
                Arc::new(RoutedExchange(weak.clone())),
                Arc::new(RoutedSink(weak)),
            )
            .stopping_on(self.stop.clone());
        let _set = session.connection.set(Arc::new(connection));
        session
    }

    /// Names `session` among the instances sharing it, as it enters the
    /// table (under its lock): only the copy kept is named, not one built
    /// and let go (refused, or beaten to the table by another request
    /// adopting the same session), which a forwarder would otherwise take
    /// for it; and no request finds the copy before it is named.
    fn name(&self, session: &Session) {
        let shared = self.shared.is_some() && session.transport == TransportKind::StreamableHttp;
        if let Some(connection) = session.connection().filter(|_| shared) {
            connection.share_as(session.id.clone());
        }
    }

    /// Enters a new session in the table, within its opener's share.
    fn admit(
        &self,
        server: &Server,
        id: String,
        transport: TransportKind,
        owner: Option<String>,
        quota: String,
        share: usize,
    ) -> Result<Arc<Session>, Full> {
        let session = self.build(server, id, transport, owner, quota);
        {
            let Ok(mut map) = self.map.lock() else {
                session.close();
                return Err(Full::Server);
            };
            if let Err(full) = Self::check(&map, &session.quota, share, self.limits.max) {
                drop(map);
                // Nothing its server was told of it is left behind.
                session.close();
                return Err(full);
            }
            self.name(&session);
            map.insert(Arc::clone(&session));
        }
        // Only for a session that made it into the table: a refused one
        // must leave no task behind.
        self.start_forwarding(server, &session);
        Ok(session)
    }

    fn start_forwarding(&self, server: &Server, session: &Arc<Session>) {
        let Some(id) = session.connection().map(|c| c.session()) else {
            return;
        };
        // A task's status is carried to the instance holding the stream
        // (see `task_relay`) from a copy of a shared session that holds
        // none; an HTTP+SSE session is never shared.
        let teller = self
            .tell_status
            .clone()
            .filter(|_| session.transport == TransportKind::StreamableHttp);
        let forwarder = forward_changes(server, Arc::downgrade(session), id, teller);
        if let Ok(mut slot) = session.forwarder.lock() {
            *slot = Some(forwarder);
        }
    }

    /// The shared sessions held here that are in use without requests (see
    /// `Session::busy`): a standing stream open, a request still running, a
    /// question out, a `tasks/result` elsewhere waiting for questions, or a
    /// task running here.
    pub(super) fn busy_shared(&self) -> Vec<Arc<Session>> {
        self.map.lock().map_or_else(
            |_| Vec::new(),
            |map| {
                map.sessions
                    .values()
                    .filter(|s| s.transport == TransportKind::StreamableHttp && s.busy())
                    .map(Arc::clone)
                    .collect()
            },
        )
    }

    /// The session `id` if this instance holds it, whoever asks: what a
    /// message relayed from another instance is delivered to.
    pub(super) fn local(&self, id: &str) -> Option<Arc<Session>> {
        self.map.lock().ok()?.sessions.get(id).cloned()
    }

    fn room_for(&self, quota: &str, share: usize) -> Result<(), Full> {
        let map = self.map.lock().map_err(|_| Full::Server)?;
        Self::check(&map, quota, share, self.limits.max)
    }

    fn check(table: &Table, quota: &str, share: usize, max: usize) -> Result<(), Full> {
        if table.sessions.len() >= max {
            return Err(Full::Server);
        }
        if table.held.get(quota).copied().unwrap_or(0) >= share {
            return Err(Full::Quota);
        }
        Ok(())
    }

    /// The session `id` of `transport`'s, marked as just used, when `caller`
    /// is who opened it.
    pub(super) fn get(
        &self,
        id: &str,
        transport: TransportKind,
        caller: &AuthContext,
    ) -> Option<Arc<Session>> {
        let session = self.map.lock().ok()?.sessions.get(id).cloned()?;
        if session.transport != transport
            || session.owner != caller.principal_key()
            || session.closed.load(Ordering::Acquire)
        {
            return None;
        }
        session.touch();
        Some(session)
    }

    /// Ends the session `id`; whether there was one.
    pub(super) fn end(&self, id: &str) -> bool {
        let removed = self.map.lock().ok().and_then(|mut m| m.remove(id));
        removed.map(|s| s.close()).is_some()
    }

    /// Lets the sessions wind down while their requests finish: what
    /// shutting down does first, and again while it waits. A Streamable
    /// HTTP session's standing stream (its `GET`) is closed, so that an open
    /// stream does not hold the server up while calls are answered. An
    /// HTTP+SSE session's stream is where its answers go, so it is ended
    /// only once nothing of it is in flight (an answer already queued on
    /// the stream is still written).
    pub(super) fn settle(&self) {
        let (streamable, idle_sse): (Vec<Arc<Session>>, Vec<String>) = match self.map.lock() {
            Ok(map) => (
                map.sessions
                    .values()
                    .filter(|s| s.transport != TransportKind::HttpSse)
                    .cloned()
                    .collect(),
                map.sessions
                    .iter()
                    .filter(|(_, s)| s.transport == TransportKind::HttpSse && !s.working())
                    .map(|(id, _)| id.clone())
                    .collect(),
            ),
            Err(_) => return,
        };
        for session in streamable {
            session.close_stream();
        }
        for id in idle_sse {
            self.end(&id);
        }
    }

    /// Ends every session, cancelling what is still in flight: what shutting
    /// down does last, once the requests in flight had their time.
    pub(super) fn end_all(&self) {
        let all: Vec<Arc<Session>> = self
            .map
            .lock()
            .map(|mut m| {
                m.held.clear();
                m.sessions.drain().map(|(_, s)| s).collect()
            })
            .unwrap_or_default();
        for session in all {
            session.close();
        }
    }

    /// How many sessions are open.
    pub(super) fn len(&self) -> usize {
        self.map.lock().map_or(0, |m| m.sessions.len())
    }

    /// Ends every session idle for longer than `idle`, and takes out every
    /// one that already ended (a stream that was not read).
    pub(super) fn reap(&self, idle: Duration) -> usize {
        let stale: Vec<Arc<Session>> = match self.map.lock() {
            Ok(mut map) => {
                let ids: Vec<String> = map
                    .sessions
                    .iter()
                    .filter(|(_, s)| {
                        s.closed.load(Ordering::Acquire) || (s.idle_for() > idle && !s.busy())
                    })
                    .map(|(id, _)| id.clone())
                    .collect();
                ids.iter().filter_map(|id| map.remove(id)).collect()
            }
            Err(_) => Vec::new(),
        };
        for session in &stale {
            session.close();
        }
        if let Ok(mut map) = self.map.lock() {
            // Give back what a burst of sessions grew the table to.
            if map.sessions.capacity() > 4 * map.sessions.len().max(16) {
                map.sessions.shrink_to_fit();
                map.held.shrink_to_fit();
            }
        }
        stale.len()
    }
}

/// How long a session's change waits to be told to the other instances
/// before it is dropped: the session's next changes wait behind it.
const RELAY_PATIENCE: Duration = Duration::from_millis(500);

/// How often what a session's stream is owed looks again for the stream it
/// is to go on, which the client may have replaced; and how long it waits
/// for a new one after its stream closed.
const OWED_LOOK_AGAIN: Duration = Duration::from_secs(1);

/// Tells a legacy session about changes to what is offered, and what is
/// for it alone (its connection's `id`), on its own stream, until the
/// session is gone. Where the session is shared (a `teller` given) and
/// this copy holds no stream, a task's status is told to the other
/// instances instead.
fn forward_changes(
    server: &Server,
    session: Weak<Session>,
    id: SessionId,
    teller: Option<StatusTeller>,
) -> AbortHandle {
    let mut feed = server.change_feed(id);
    let task = tokio::spawn(async move {
        let mut owed = Owed::default();
        // Since when the stream what is owed waits for has been closed.
        let mut closed_since: Option<tokio::time::Instant> = None;
        loop {
            let change = if owed.is_empty() {
                feed.next().await
            } else {
                // Only the sender is held while room is awaited: the session
                // itself may end meanwhile (which aborts this task).
                let Some(stream) = session.upgrade().and_then(|s| s.standalone_tx()) else {
                    owed.forgive();
                    closed_since = None;
                    continue;
                };
                if stream.is_closed() {
                    // The client may be opening another stream: what is
                    // owed waits a moment for it, then is forgiven.
                    let since = *closed_since.get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() >= OWED_LOOK_AGAIN {
                        owed.forgive();
                        closed_since = None;
                        continue;
                    }
                    tokio::select! {
                        change = feed.next() => change,
                        () = tokio::time::sleep(OWED_LOOK_AGAIN / 4) => continue,
                    }
                } else {
                    closed_since = None;
                    tokio::select! {
                        change = feed.next() => change,
                        // Paid, or the stream closed meanwhile (looked at
                        // again above).
                        _paid = owed.pay(&stream) => continue,
                        // A client that opened a new stream while the old
                        // one stalls is owed on the new one, not after the
                        // next change.
                        () = tokio::time::sleep(OWED_LOOK_AGAIN) => continue,
                    }
                }
            };
            let Some(change) = change else {
                return;
            };
            let Some(session) = session.upgrade() else {
                return;
            };
            let message = session
                .connection()
                .and_then(|c| c.legacy_notification(&change));
            let Some(message) = message else {
                continue;
            };
            let message = message.into_value();
            let message = match session.standalone_tx() {
                Some(stream) => match stream.try_send(message) {
                    Ok(()) => continue,
                    // A full stream owes a list's change or a resource's
                    // update, said once when there is room; a log record or
                    // a task's status is dropped, as on one instance, which
                    // is at least said here.
                    Err(mpsc::error::TrySendError::Full(message)) => {
                        if !(Owed::can_owe(&change) && owed.owe(message)) {
                            static DROPPED: Squelch = Squelch::new(Duration::from_secs(10));
                            if let Some(also) = DROPPED.admit() {
                                tracing::warn!(
                                    session = %session.id,
                                    dropped_before = also,
                                    "a session's stream is full: a notification for it was dropped"
                                );
                            }
                        }
                        continue;
                    }
                    Err(mpsc::error::TrySendError::Closed(message)) => message,
                },
                None => message,
            };
            // No stream here. Lists changed and resources updated every
            // instance is told itself, and so is a gateway session's own
            // tool list (its activations are shared); a log line a
            // bridge's or a gateway's upstream sends outside any request
            // reaches the client only from the instance holding its stream
            // (docs/scaling.md).
            if let (Some(teller), Change::TaskStatus { .. }) = (&teller, &change) {
                // In order, so this session's next changes wait for it, but
                // not for long: a slow relay (Redis) drops it, as a full
                // stream would.
                let told = teller(session.id.clone(), message);
                if tokio::time::timeout(RELAY_PATIENCE, told).await.is_err() {
                    tracing::debug!(session = %session.id, "a task's status was not told in time");
                }
            }
        }
    });
    task.abort_handle()
}

/// Reaps idle sessions until the session table itself is dropped.
pub(super) fn spawn_reaper(sessions: &Arc<Sessions>, idle: Duration) {
    let weak = Arc::downgrade(sessions);
    let every = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            let Some(sessions) = weak.upgrade() else {
                return;
            };
            let reaped = sessions.reap(idle);
            if reaped > 0 {
                tracing::debug!("reaped {reaped} idle sessions");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lasting(subscribed: &[&str]) -> Lasting {
        Lasting {
            level: None,
            subscribed: subscribed.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn reading(version: u64, subscribed: &[&str]) -> Synced {
        Synced {
            version,
            lasting: lasting(subscribed),
            stale: false,
        }
    }

    #[test]
    fn a_reading_older_than_a_write_of_its_own_is_passed_over() {
        let mut synced = Synced::default();
        assert!(synced.take(reading(1, &["y"])).is_some());
        // This instance subscribes to x, the session's second change.
        synced.fold(
            &ImageChange {
                subscribed: vec!["x".to_owned()],
                ..ImageChange::default()
            },
            2,
        );
        // A reading fetched before that write landed would drop x.
        assert!(!synced.would_take(1));
        assert_eq!(synced.take(reading(1, &["y"])), None);
        // The reading at that write is taken (the store may hold more than
        // this instance knows), and changes nothing here.
        let before = synced.take(reading(2, &["x", "y"]));
        assert_eq!(before, Some(lasting(&["x", "y"])));
        // Put back by another instance as it was before (the third change):
        // a change here too, though the store holds what it held at 1.
        let before = synced.take(reading(3, &["y"]));
        assert_eq!(
            before.map(|b| b.change_to(&lasting(&["y"]))),
            Some(ImageChange {
                unsubscribed: vec!["x".to_owned()],
                ..ImageChange::default()
            })
        );
    }

    #[test]
    fn a_version_is_taken_once() {
        let mut synced = Synced::default();
        assert!(synced.take(reading(4, &["y"])).is_some());
        assert!(!synced.would_take(4));
        assert_eq!(synced.take(reading(4, &["y"])), None);
        // A later version moves it on, so an older reading stays passed
        // over, whatever it holds.
        assert!(synced.take(reading(5, &["y"])).is_some());
        assert_eq!(synced.take(reading(4, &["y", "z"])), None);
    }
}
