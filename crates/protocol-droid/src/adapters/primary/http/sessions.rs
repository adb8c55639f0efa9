//! Legacy Streamable HTTP sessions: minted, looked up, ended and reaped.
//!
//! A session outlives the requests that use it, so its ports cannot point
//! at any one response stream. Its sink and exchange route each message to
//! the stream of the request being served (a task-local the transport sets
//! around every handler), or, outside any request, to the session's own GET
//! stream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;

use super::events::EventStore;
use super::respond::CURRENT;
use crate::application::server::context::{
    AuthContext, CallbackExchange, DynFrameSink, ExchangeError,
};
use crate::application::server::{Connection, Server};
use crate::domain::TransportKind;
use crate::domain::jsonrpc::{ErrorObject, Message, Notification, Request, RequestId};

type Pending = Mutex<HashMap<RequestId, oneshot::Sender<Result<Value, ErrorObject>>>>;

/// One legacy session.
pub(super) struct Session {
    pub(super) id: String,
    /// Which transport opened it; an id is only good on that transport.
    pub(super) transport: TransportKind,
    /// Who opened it (issuer, subject and client). The id alone is not a
    /// credential: a request with another caller's token (or none, for a
    /// session opened with one) is answered as if the session did not exist.
    owner: Option<String>,
    connection: OnceLock<Arc<Connection>>,
    pending: Pending,
    pub(super) events: Arc<EventStore>,
    standalone: Mutex<Option<mpsc::Sender<Value>>>,
    last_seen: Mutex<Instant>,
    next_request: AtomicU64,
    /// Requests in flight, so `notifications/cancelled` can stop them.
    pub(super) in_flight: Mutex<HashMap<RequestId, AbortHandle>>,
    exchange_timeout: Duration,
    /// The task forwarding list changes to this session; stopped on close,
    /// so an abandoned session leaves no task waiting for the next change.
    forwarder: Mutex<Option<AbortHandle>>,
}

impl Session {
    pub(super) fn connection(&self) -> Option<&Arc<Connection>> {
        self.connection.get()
    }

    fn touch(&self) {
        if let Ok(mut seen) = self.last_seen.lock() {
            *seen = Instant::now();
        }
    }

    /// Whether the session is in use without sending requests: a stream
    /// still open to its client, or a request still running. Such a session
    /// is not idle, however long since its last POST.
    fn busy(&self) -> bool {
        let streaming = self
            .standalone
            .lock()
            .is_ok_and(|s| s.as_ref().is_some_and(|tx| !tx.is_closed()));
        let working = self.in_flight.lock().is_ok_and(|m| !m.is_empty());
        streaming || working
    }

    fn idle_for(&self) -> Duration {
        self.last_seen
            .lock()
            .map_or(Duration::MAX, |seen| seen.elapsed())
    }

    /// Sends `message` on the current request's stream, or else on the GET
    /// stream; `false` when neither can take it.
    fn route(&self, message: Value) -> bool {
        // A request answered as plain JSON has no stream to carry anything
        // else; its messages go to the session's stream, if there is one.
        let on_request = CURRENT
            .try_with(|c| c.streams.then(|| c.tx.clone()))
            .ok()
            .flatten();
        if let Some(tx) = on_request {
            return tx.try_send(message).is_ok();
        }
        self.standalone
            .lock()
            .ok()
            .and_then(|s| s.clone())
            .is_some_and(|tx| tx.try_send(message).is_ok())
    }

    /// Sends on the session's own stream (GET, or the 2024-11-05 stream).
    pub(super) fn send_standalone(&self, message: Value) -> bool {
        self.standalone
            .lock()
            .ok()
            .and_then(|s| s.clone())
            .is_some_and(|tx| tx.try_send(message).is_ok())
    }

    /// Sends on the session's own stream, waiting for room rather than
    /// dropping: for answers, which must not be lost.
    pub(super) async fn send_standalone_waiting(&self, message: Value) -> bool {
        let tx = self.standalone.lock().ok().and_then(|s| s.clone());
        match tx {
            Some(tx) => tx.send(message).await.is_ok(),
            None => false,
        }
    }

    /// Makes `tx` the session's GET stream, replacing any earlier one.
    pub(super) fn set_standalone(&self, tx: mpsc::Sender<Value>) {
        if let Ok(mut standalone) = self.standalone.lock() {
            *standalone = Some(tx);
        }
    }

    /// Delivers the client's answer to a server-initiated request.
    pub(super) fn answer(&self, id: &RequestId, outcome: Result<Value, ErrorObject>) -> bool {
        let waiter = self.pending.lock().ok().and_then(|mut p| p.remove(id));
        waiter.is_some_and(|w| w.send(outcome).is_ok())
    }

    fn close(&self) {
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
        let session = self.0.upgrade().ok_or(ExchangeError::Closed)?;
        let id = RequestId::String(format!(
            "droid-{}",
            session.next_request.fetch_add(1, Ordering::Relaxed)
        ));
        let (tx, rx) = oneshot::channel();
        if let Ok(mut pending) = session.pending.lock() {
            pending.insert(id.clone(), tx);
        }
        // However this wait ends (an answer, a timeout, the caller dropped),
        // the waiter leaves the table.
        let _forget = Forget {
            session: self.0.clone(),
            id: id.clone(),
        };
        let request = Message::Request(Request {
            id: id.clone(),
            method: method.to_owned(),
            params: Some(params),
        });
        if !session.route(request.into_value()) {
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
            Err(_) => {
                if let Some(session) = self.0.upgrade() {
                    if let Ok(mut pending) = session.pending.lock() {
                        pending.remove(&id);
                    }
                    let _told = session.route(
                        Message::Notification(Notification {
                            method: "notifications/cancelled".to_owned(),
                            params: Some(json!({ "requestId": id.to_json(),
                                "reason": "the server stopped waiting for this answer" })),
                        })
                        .into_value(),
                    );
                }
                Err(ExchangeError::TimedOut)
            }
        }
    }
}

/// Removes a server request's waiter when its wait ends.
struct Forget {
    session: Weak<Session>,
    id: RequestId,
}

impl Drop for Forget {
    fn drop(&mut self) {
        if let Some(session) = self.session.upgrade() {
            if let Ok(mut pending) = session.pending.lock() {
                pending.remove(&self.id);
            }
        }
    }
}

/// Every open session, bounded in number.
pub(super) struct Sessions {
    map: Mutex<HashMap<String, Arc<Session>>>,
    max: usize,
}

impl Sessions {
    pub(super) fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            map: Mutex::default(),
            max,
        })
    }

    /// Opens a session of `server`'s, or `None` when the limit is reached.
    pub(super) fn open(
        &self,
        server: &Server,
        transport: TransportKind,
        replay_events: usize,
        exchange_timeout: Duration,
        opener: &AuthContext,
    ) -> Option<Arc<Session>> {
        // Checked first, so a refused session costs nothing.
        if self.len() >= self.max {
            return None;
        }
        let id = mint_id()?;
        let session = Arc::new(Session {
            id: id.clone(),
            transport,
            owner: opener.principal_key(),
            connection: OnceLock::new(),
            pending: Mutex::default(),
            events: Arc::new(EventStore::new(replay_events)),
            standalone: Mutex::default(),
            last_seen: Mutex::new(Instant::now()),
            next_request: AtomicU64::new(1),
            in_flight: Mutex::default(),
            exchange_timeout,
            forwarder: Mutex::default(),
        });
        let weak = Arc::downgrade(&session);
        let connection = server.connect(
            transport,
            Arc::new(RoutedExchange(weak.clone())),
            Arc::new(RoutedSink(weak)),
        );
        let _set = session.connection.set(Arc::new(connection));
        {
            let mut map = self.map.lock().ok()?;
            if map.len() >= self.max {
                return None;
            }
            map.insert(id, Arc::clone(&session));
        }
        // Only for a session that made it into the table: a refused one
        // must leave no task behind.
        let forwarder = forward_changes(server, Arc::downgrade(&session));
        if let Ok(mut slot) = session.forwarder.lock() {
            *slot = Some(forwarder);
        }
        Some(session)
    }

    /// The session `id` of `transport`'s, marked as just used, when `caller`
    /// is who opened it.
    pub(super) fn get(
        &self,
        id: &str,
        transport: TransportKind,
        caller: &AuthContext,
    ) -> Option<Arc<Session>> {
        let session = self.map.lock().ok()?.get(id).cloned()?;
        if session.transport != transport || session.owner != caller.principal_key() {
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

    /// Ends every session: what shutting down does first, so their streams
    /// close and their clients are not left waiting.
    pub(super) fn end_all(&self) {
        let all: Vec<Arc<Session>> = self
            .map
            .lock()
            .map(|mut m| m.drain().map(|(_, s)| s).collect())
            .unwrap_or_default();
        for session in all {
            session.close();
        }
    }

    /// How many sessions are open.
    pub(super) fn len(&self) -> usize {
        self.map.lock().map_or(0, |m| m.len())
    }

    /// Ends every session idle for longer than `idle`.
    pub(super) fn reap(&self, idle: Duration) -> usize {
        let stale: Vec<Arc<Session>> = match self.map.lock() {
            Ok(mut map) => {
                let ids: Vec<String> = map
                    .iter()
                    .filter(|(_, s)| s.idle_for() > idle && !s.busy())
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
            if map.capacity() > 4 * map.len().max(16) {
                map.shrink_to_fit();
            }
        }
        stale.len()
    }
}

/// Tells a legacy session about changes to what is offered, on its own
/// stream, until the session is gone.
fn forward_changes(server: &Server, session: Weak<Session>) -> AbortHandle {
    let mut changes = server.changes();
    let task = tokio::spawn(async move {
        loop {
            let change = match changes.recv().await {
                Ok(change) => change,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            let Some(session) = session.upgrade() else {
                return;
            };
            let message = session
                .connection()
                .and_then(|c| c.legacy_notification(&change));
            if let Some(message) = message {
                let _sent = session.send_standalone(message.into_value());
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

/// A session id: 128 bits from the operating system's CSPRNG, as hex (all
/// visible ASCII, as the spec requires).
fn mint_id() -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
