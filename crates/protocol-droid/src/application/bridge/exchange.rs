//! Carrying one forwarded request to its end across input rounds, in
//! whichever direction the eras differ.
//!
//! Four cases meet here, and one loop serves them all, because the
//! downstream half is always the same [`Call::ask_all`]: in the legacy era it
//! sends the questions as server-to-client requests and returns the
//! answers, in 2026-07-28 it ends the round with an `InputRequiredResult`
//! whose retry brings the answers back.
//!
//! - **2026-07-28 upstream.** The server answers `input_required`; its
//!   `inputRequests` become the downstream questions under the same keys,
//!   and the answers go back upstream with its `requestState`, in a new
//!   request. Nothing is kept in the bridge: the upstream state, the
//!   questions and any answers already given travel sealed in the
//!   downstream `requestState`.
//! - **Legacy upstream.** The server asks by sending requests of its own
//!   while the forwarded request is in flight ([`Flight`]). In front of a
//!   2026-07-28 client that is the hard case (multi round-trip synthesis):
//!   the upstream request has to stay open across the client's retry, so
//!   the flight is parked under a random handle, the handle is sealed into
//!   `requestState`, and the retry picks it up and answers the waiting
//!   questions. A parked flight also remembers whose request it is (caller,
//!   method, target), and only a retry of that request takes it. Parked
//!   flights are bounded in number and in time; one that expires is
//!   dropped, which cancels the upstream request.
//!
//! The client's `inputResponses` answer the questions of the round they
//! were asked in, once: a question asked again later in the same request,
//! under a key already answered, goes to the client again rather than
//! receiving the old answer.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt as _;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::lower::Lowering;
use super::upstream::{Ask, Lease, Registration, Relay, RelayCell, lock};
use crate::application::client::patience::{Heard, MAX_PATIENCE, within};
use crate::application::client::{Answer, ClientError, RequestOptions};
use crate::application::server::dispatch::{CLIENT_CAPABILITIES_META, CLIENT_INFO_META};
use crate::application::server::rate::caller_key;
use crate::application::server::tasks::wire::without_related_task;
use crate::application::server::{Call, CallError, INPUT_KEY_META, LOG_LEVEL_META, Question};
use crate::domain::Refusal;
use crate::domain::capability::TASKS_EXTENSION;
use crate::domain::ir::{
    JsonObject, RESULT_TYPE_INPUT_REQUIRED, RESULT_TYPE_TASK, TranslationReport,
};
use crate::domain::jsonrpc::{ErrorCode, ErrorObject};
use crate::domain::{DegradePolicy, Era, Leg};

/// How many flights may be parked waiting for their client's retry.
pub const MAX_PARKED: usize = 1024;

/// How many of them one caller may have parked.
pub const MAX_PARKED_PER_CALLER: usize = 64;

/// The most questions a server may put to a client through the bridge at
/// once (one round's, or a task's input requests): each is a request the
/// client must answer, and a server asking thousands is flooding it.
pub(super) const MAX_QUESTIONS_PER_ROUND: usize = 64;

/// How long, after a legacy server's question, the bridge waits for others
/// sent alongside it, so a 2026-07-28 client gets them in one round.
const GATHER: Duration = Duration::from_millis(25);

/// The key a parked flight's handle travels under in the sealed state.
const PARKED: &str = "parked";

/// The key the instance holding a parked flight travels under in the
/// sealed state, when instances share their keys (`remote`).
const AT: &str = "at";

/// The methods whose requests may take input rounds; a question a server
/// asks during any other is not put to the client.
pub(super) const MULTI_ROUND_METHODS: [&str; 3] = ["tools/call", "prompts/get", "resources/read"];

/// Adds to `params` what a 2026-07-28 request says of its client: the
/// client's capabilities, identity and log level, in `_meta`.
///
/// Added to each request as it is built rather than kept in the params a
/// round copies, so the capabilities are copied once a request.
fn with_envelope(params: &mut JsonObject, call: &Call, tasks: bool) {
    let mut caps = JsonObject::clone(&call.ctx.client_capabilities);
    // Legacy-only members have no 2026-07-28 meaning.
    if let Some(Value::Object(roots)) = caps.get_mut("roots") {
        roots.remove("listChanged");
    }
    caps.remove("tasks");
    // The bridge's tasks are its own: the upstream is asked for one only
    // for a call the bridge runs as a task itself, which then waits for
    // the upstream's (`Rounds::follow_task`).
    if let Some(Value::Object(extensions)) = caps.get_mut("extensions") {
        extensions.remove(TASKS_EXTENSION);
    }
    if tasks {
        let extensions = caps
            .entry("extensions")
            .or_insert_with(|| Value::Object(JsonObject::new()));
        if let Value::Object(extensions) = extensions {
            extensions.insert(TASKS_EXTENSION.to_owned(), json!({}));
        }
    }
    // Room for what is added here, and for the revision (and a progress
    // token) the client adds.
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(JsonObject::with_capacity(5)));
    let Value::Object(meta) = meta else {
        // `upstream_params` leaves `_meta` an object or absent.
        return;
    };
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

/// An upstream task the bridge waits for: cancelled upstream if the wait
/// is dropped before it ends (the bridge's own task was cancelled).
struct UpstreamTask {
    client: crate::application::client::Client,
    call: Call,
    /// `None` once the task has ended.
    id: Option<String>,
}

impl UpstreamTask {
    /// The params of a request about the task, declaring the extension.
    fn params(&self, mut params: JsonObject) -> Value {
        params.insert("taskId".to_owned(), json!(self.id));
        with_envelope(&mut params, &self.call, true);
        Value::Object(params)
    }
}

impl Drop for UpstreamTask {
    fn drop(&mut self) {
        if self.id.is_none() {
            return;
        }
        let params = self.params(JsonObject::new());
        let client = self.client.clone();
        // Best effort, after the fact: nobody waits for the answer.
        tokio::spawn(async move {
            let _cancelled = client
                .request_once("tasks/cancel", Some(params), &RequestOptions::default())
                .await;
        });
    }
}

/// Whose request a parked flight is: only a retry of the same request, by
/// the same caller, resumes it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Owner {
    /// The caller: its principal, or for an anonymous one its network (an
    /// IPv6 address's /64), as every other per-caller share counts it;
    /// `None` only when no address is known (a stdio client, the
    /// connection's one, or a router served without peer addresses).
    pub(super) principal: Option<String>,
    pub(super) method: String,
    pub(super) target: String,
}

impl Owner {
    /// The owner of `call`'s request for `method` with `params`.
    pub(super) fn of(call: &Call, method: &str, params: &JsonObject) -> Self {
        let target = params
            .get("name")
            .or_else(|| params.get("uri"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        // Anonymous callers are told apart by their network: otherwise any
        // of them could resume (and answer) another's parked request, and
        // together they would share one caller's room in the lot.
        Self {
            principal: caller_key(call.caller(), call.ctx.remote_addr),
            method: method.to_owned(),
            target: target.to_owned(),
        }
    }
}

/// A legacy upstream request in flight, with the questions it asked.
pub(super) struct Flight {
    // Fields drop in order: the registration goes before the lease, so the
    // connection is free of this request before another may take it.
    _registration: Registration,
    asks: mpsc::Receiver<Ask>,
    request: UpstreamRequest,
    /// Whether the request has its answer.
    finished: bool,
    open: Vec<(String, Ask)>,
    next_key: u32,
    rounds: usize,
    relay: RelayCell,
    /// How long the flight waits for its server at a time.
    wait_limit: Duration,
    /// When the server last reported progress, when that starts the wait
    /// again.
    heard: Option<Heard>,
    /// The method sent, to name in a timeout.
    method: String,
    lease: Lease,
}

/// The upstream request, polled by whichever task serves the flight now.
/// It is not a task of its own: a request that never parks (most) would pay
/// for a spawn and a wake-up across tasks for nothing, and a parked one
/// loses nothing by waiting unpolled, as its answer is kept for it. Dropped
/// unfinished, it cancels the request upstream.
type UpstreamRequest = Pin<Box<dyn Future<Output = Result<Value, ClientError>> + Send>>;

impl Drop for Flight {
    fn drop(&mut self) {
        // Abandoned while the server may still be working on it (expired,
        // cancelled, refused): what the server sends next on the connection
        // could be about this request, so no other request may have it.
        // An answer that came while the flight was parked, unpolled, is
        // there to be taken: the request is over, not abandoned.
        if !self.finished && (&mut self.request).now_or_never().is_none() {
            self.lease.retire();
        }
    }
}

/// What ended the wait for a client's answers before they came.
enum Overtaken {
    /// The request's answer: what the server made of it without them.
    Answered(Result<Value, ClientError>),
    /// The server withdrew one of the questions.
    Withdrawn,
}

/// What a flight's wait for its server ended with, before the limit.
enum Woke {
    Asked(Ask),
    Answered(Result<Value, ClientError>),
}

enum Step {
    Done(Result<Value, ClientError>),
    Asked,
}

/// Where a flight stands after [`Flight::advance`].
pub(super) enum Advance {
    /// The request ended upstream.
    Done(Result<Value, ClientError>),
    /// The server asked what only the client can answer: the flight's open
    /// questions, a new round.
    Asked,
}

impl Flight {
    /// Starts `method` upstream on the leased connection, its
    /// notifications going to `relay` and its progress too.
    fn start(
        lease: Lease,
        relay: RelayCell,
        method: &str,
        params: JsonObject,
        mut options: RequestOptions,
        as_task: bool,
    ) -> Self {
        let (registration, asks) = lease.upstream.handler.register(Arc::clone(&relay));
        // The flight waits for its server itself (`next`), so it hears the
        // progress that starts that wait again.
        let heard =
            (options.reset_timeout_on_progress && options.on_progress.is_some()).then(Heard::now);
        options.reset_timeout_on_progress = false;
        if options.on_progress.is_some() {
            let relayed = progress_to(Arc::clone(&relay));
            options.on_progress = Some(match &heard {
                Some(heard) => {
                    let heard = heard.clone();
                    Arc::new(move |progress| {
                        heard.touch();
                        relayed(progress);
                    })
                }
                None => relayed,
            });
        }
        // The time the flight spends parked, waiting for a person, is not
        // the server's: the limit applies to each wait for the server
        // instead (`next`), and parking has its own.
        let wait_limit = options.timeout.unwrap_or(UNBOUNDED_WAIT);
        options.timeout = Some(UNBOUNDED_WAIT);
        let client = lease.upstream.client.clone();
        let method = method.to_owned();
        let sent = method.clone();
        let request = Box::pin(async move {
            if as_task {
                return run_as_task(&client, &method, params, &options).await;
            }
            client
                .request(&method, Some(Value::Object(params)), &options)
                .await
        });
        Self {
            _registration: registration,
            asks,
            request,
            finished: false,
            open: Vec::new(),
            next_key: 1,
            rounds: 0,
            relay,
            wait_limit,
            heard,
            method: sent,
            lease,
        }
    }

    /// Sends this request's notifications to `relay` from now on: a
    /// request resumed by a retry is served by a new task.
    pub(super) fn relay_to(&self, relay: &RelayCell) {
        let current = lock(relay).clone();
        *lock(&self.relay) = current;
    }

    /// Waits for the result, or for the next questions; with `gather`,
    /// also for the questions that follow the first closely.
    async fn next(&mut self, gather: bool) -> Step {
        if !self.open.is_empty() {
            return Step::Asked;
        }
        // Progress heard meanwhile starts the wait for the server again.
        let heard = self.heard.clone();
        let (asks, request) = (&mut self.asks, &mut self.request);
        let woke = within(self.wait_limit, heard.as_ref(), MAX_PATIENCE, async move {
            tokio::select! {
                // A question is taken before a result that is ready at the
                // same moment: it is waiting for an answer, the result is not.
                biased;
                Some(ask) = asks.recv() => Woke::Asked(ask),
                answered = request => Woke::Answered(answered),
            }
        })
        .await;
        match woke {
            Ok(Woke::Asked(ask)) => {
                self.take(ask);
                // Questions asked together go out together.
                while let Ok(more) = self.asks.try_recv() {
                    self.take(more);
                }
                if gather {
                    let window = tokio::time::sleep(GATHER);
                    tokio::pin!(window);
                    loop {
                        tokio::select! {
                            Some(more) = self.asks.recv() => self.take(more),
                            () = &mut window => break,
                        }
                    }
                }
                Step::Asked
            }
            Ok(Woke::Answered(answered)) => {
                self.finished = true;
                Step::Done(answered)
            }
            Err(waited) => Step::Done(Err(ClientError::Timeout {
                method: self.method.clone(),
                millis: waited.as_millis(),
            })),
        }
    }

    /// Keeps a question under the key the server named for it, or else a
    /// key of the bridge's own.
    fn take(&mut self, ask: Ask) {
        let named = ask
            .params
            .get("_meta")
            .and_then(|m| m.get(INPUT_KEY_META))
            .and_then(Value::as_str)
            .filter(|k| !k.is_empty() && !self.open.iter().any(|(open, _)| open == k))
            .map(str::to_owned);
        let key = named.unwrap_or_else(|| {
            self.next_key += 1;
            format!("q{}", self.next_key - 1)
        });
        self.open.push((key, ask));
    }

    /// Answers the open question under `key` with `answer`.
    fn answer(&mut self, key: &str, answer: Value) {
        if let Some(index) = self.open.iter().position(|(k, _)| k == key) {
            let (_, ask) = self.open.remove(index);
            if ask.method == "roots/list" {
                self.lease.upstream.handler.remember_roots(&answer);
            }
            let _gone = ask.answer.send(Ok(answer));
        }
    }

    /// Refuses the open question under `key` with `error`.
    fn refuse(&mut self, key: &str, error: &ErrorObject) {
        if let Some(index) = self.open.iter().position(|(k, _)| k == key) {
            let (_, ask) = self.open.remove(index);
            let _gone = ask.answer.send(Err(error.clone()));
        }
    }

    /// Withdraws every open question with `error`.
    pub(super) fn refuse_open(&mut self, error: &ErrorObject) {
        for (_, ask) in self.open.drain(..) {
            let _gone = ask.answer.send(Err(error.clone()));
        }
    }

    /// Gives the request up on a server that asks past what the bridge
    /// bounds: its open questions are refused with `error`, and its
    /// connection serves no later call, whose questions its leftovers
    /// would otherwise become.
    pub(super) fn give_up(&mut self, error: &ErrorObject) {
        self.refuse_open(error);
        self.lease.discard();
    }

    /// Carries the request on until it ends or its server asks what only
    /// the client can answer. `responses`, the client's answers to the
    /// questions open when its retry came, answer them once and are spent;
    /// a question the method cannot put to a client is refused upstream.
    /// Where the round is put to the client is the caller's: this instance
    /// or, for a flight resumed from another one, that instance.
    pub(super) async fn advance(
        &mut self,
        modern: bool,
        asks_client: bool,
        responses: &mut JsonObject,
        max_rounds: usize,
    ) -> Result<Advance, CallError> {
        loop {
            match self.next(modern).await {
                Step::Done(result) => {
                    // The server may still be at work on a request the
                    // bridge gave up on (it timed out, its answer could not
                    // be read): its connection serves nobody else.
                    if matches!(
                        result,
                        Err(ClientError::Timeout { .. } | ClientError::Link(_))
                    ) {
                        self.lease.retire();
                    }
                    return Ok(Advance::Done(result));
                }
                Step::Asked if !asks_client => {
                    // Nothing a client can answer fits this method's reply.
                    self.refuse_open(
                        &Refusal::internal(format!(
                            "the bridge cannot put a question to the client during {}",
                            self.method
                        ))
                        .into(),
                    );
                }
                Step::Asked => {
                    let keys: Vec<String> = self.open.iter().map(|(k, _)| k.clone()).collect();
                    for key in keys {
                        if let Some(answer) = responses.remove(&key).filter(Value::is_object) {
                            self.answer(&key, answer);
                        }
                    }
                    responses.clear();
                    if self.open.is_empty() {
                        continue;
                    }
                    self.rounds += 1;
                    if self.rounds > max_rounds {
                        let error = Refusal::internal(format!(
                            "the server asked for input more than {max_rounds} times"
                        ));
                        // The server is still at the request, and may ask
                        // on.
                        self.give_up(&error.clone().into());
                        return Err(error.into());
                    }
                    return Ok(Advance::Asked);
                }
            }
        }
    }

    /// What overtakes the client's answers to the open questions: the
    /// request's own answer (a server that stopped waiting for them), or a
    /// question the server withdrew (`notifications/cancelled`). Never
    /// resolves while neither happens.
    async fn overtaken(&mut self) -> Overtaken {
        let withdrawn = async {
            if self.open.is_empty() {
                return std::future::pending().await;
            }
            let closed = self
                .open
                .iter_mut()
                .map(|(_, ask)| Box::pin(ask.answer.closed()));
            futures_util::future::select_all(closed).await;
        };
        tokio::select! {
            answered = &mut self.request => {
                self.finished = true;
                // As in `advance`: a connection that failed serves nobody
                // else.
                if matches!(
                    answered,
                    Err(ClientError::Timeout { .. } | ClientError::Link(_))
                ) {
                    self.lease.retire();
                }
                Overtaken::Answered(answered)
            }
            () = withdrawn => Overtaken::Withdrawn,
        }
    }

    /// Forgets the open questions the server withdrew.
    fn forget_withdrawn(&mut self) {
        self.open.retain(|(_, ask)| !ask.answer.is_closed());
    }

    /// The open questions, as the server asked them, under their keys.
    pub(super) fn open_questions(&self) -> Vec<(String, String, Value)> {
        self.open
            .iter()
            .map(|(k, a)| (k.clone(), a.method.clone(), a.params.clone()))
            .collect()
    }
}

/// The client-level limit of a flight's upstream request, which the
/// flight's own per-wait limit and the parking limit make moot.
const UNBOUNDED_WAIT: Duration = Duration::from_secs(24 * 60 * 60);

/// How long a task the bridge starts upstream may live there, in
/// milliseconds: as long as one request may take.
const TASK_TTL_MS: u64 = 300_000;

/// Runs a tool that only runs as a task (2025-11-25, `taskSupport:
/// "required"`): created upstream, then its result waited for with
/// `tasks/result`, which blocks until the task ends. The client sees an
/// ordinary call. The server's questions while the task needs input arrive
/// on the same connection, so they reach the same request.
async fn run_as_task(
    client: &crate::application::client::Client,
    method: &str,
    mut params: JsonObject,
    options: &RequestOptions,
) -> Result<Value, ClientError> {
    params.insert("task".to_owned(), json!({ "ttl": TASK_TTL_MS }));
    let created = client
        .request(method, Some(Value::Object(params)), options)
        .await?;
    let Some(task_id) = created
        .get("task")
        .and_then(|t| t.get("taskId"))
        .and_then(Value::as_str)
    else {
        // The server answered at once after all.
        return Ok(created);
    };
    let result = client
        .request("tasks/result", Some(json!({ "taskId": task_id })), options)
        .await?;
    // The client made no task, and the upstream's id means nothing at this
    // bridge (a task of the bridge's own is marked where its result is
    // given).
    Ok(without_related_task(result))
}

/// A progress callback sending to whichever task serves the request now.
pub(super) fn progress_to(cell: RelayCell) -> crate::application::client::ProgressFn {
    Arc::new(move |p| {
        super::upstream::relay(
            &cell,
            Relay::Progress {
                progress: p.progress.as_f64().unwrap_or_default(),
                total: p.total.as_ref().and_then(serde_json::Number::as_f64),
                message: p.message,
            },
        );
    })
}

/// Flights waiting for their client's retry, by handle. Generic over what
/// is parked so its rules can be tested without a connection.
pub(super) struct Parking<T = Flight> {
    flights: HashMap<String, (T, Owner, Instant)>,
}

impl<T> Default for Parking<T> {
    fn default() -> Self {
        Self {
            flights: HashMap::new(),
        }
    }
}

impl<T> Parking<T> {
    /// Parks `flight` until `deadline` under a fresh random handle; `None`
    /// when the lot, or the caller's share of it, is full, or no handle
    /// could be drawn.
    pub(super) fn park(&mut self, flight: T, owner: Owner, deadline: Instant) -> Option<String> {
        self.expire(Instant::now());
        let callers = self
            .flights
            .values()
            .filter(|(_, o, _)| o.principal == owner.principal)
            .count();
        if self.flights.len() >= MAX_PARKED || callers >= MAX_PARKED_PER_CALLER {
            return None;
        }
        // Random rather than counted: a handle means nothing to another
        // process, or to this one after a restart, even under a shared
        // sealing key.
        let handle = super::random_hex()?;
        self.flights
            .insert(handle.clone(), (flight, owner, deadline));
        Some(handle)
    }

    /// Takes the flight parked under `handle` for `owner`, if it has not
    /// expired; another caller's or another request's stays where it is.
    pub(super) fn take(&mut self, handle: &str, owner: &Owner) -> Option<T> {
        self.expire(Instant::now());
        if self.flights.get(handle).is_some_and(|(_, o, _)| o == owner) {
            return self.flights.remove(handle).map(|(flight, _, _)| flight);
        }
        None
    }

    /// Drops every flight whose client did not come back in time, which
    /// cancels its upstream request.
    pub(super) fn expire(&mut self, now: Instant) {
        self.flights.retain(|_, (_, _, deadline)| *deadline > now);
    }

    /// How many flights are parked.
    pub(super) fn len(&self) -> usize {
        self.flights.len()
    }
}

/// Where a bridge's flights wait for their clients' retries, with the
/// limits a flight resumed from another instance keeps to.
pub(super) struct Lot {
    pub(super) flights: std::sync::Mutex<Parking>,
    /// How long a flight waits parked.
    pub(super) park_for: Duration,
    /// The most input rounds one request may take.
    pub(super) max_rounds: usize,
}

impl Lot {
    /// An empty lot whose flights wait `park_for` and take at most
    /// `max_rounds` rounds.
    pub(super) fn new(park_for: Duration, max_rounds: usize) -> Self {
        Self {
            flights: std::sync::Mutex::default(),
            park_for,
            max_rounds,
        }
    }
}

/// Where a legacy upstream request starts from.
pub(super) enum Start {
    /// A new request, on this connection.
    New(Lease),
    /// A request parked by an earlier round, resumed by the client's retry.
    Parked(Flight),
}

/// What the server hears for a question the client refused or could not
/// be asked: the client's own error, or one saying why.
fn refusal_of(error: &CallError) -> ErrorObject {
    match error {
        CallError::Protocol(object) => object.clone(),
        other => Refusal::internal(other.to_string()).into(),
    }
}

/// `call` as its questions are put to the client: without the answers it
/// came with, which were for the round before. Made when the server first
/// asks, since most requests take no round and a call is a deep copy.
pub(super) fn asking_call(call: &Call) -> Call {
    let mut asking = call.clone();
    asking.ctx.input_responses = JsonObject::new();
    asking
}

/// The handle a parked flight's retry names, if `state` is such a retry's.
pub(super) fn parked_handle(state: Option<&Value>) -> Option<String> {
    state
        .and_then(|s| s.get(PARKED))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The instance holding the flight a retry's `state` names, if it said.
pub(super) fn parked_at(state: Option<&Value>) -> Option<&str> {
    state.and_then(|s| s.get(AT)).and_then(Value::as_str)
}

/// The state to seal for a flight parked under `handle`, at the instance
/// `at` when instances share their keys.
pub(super) fn parked_state(handle: &str, at: Option<&str>) -> Value {
    match at {
        Some(at) => json!({ PARKED: handle, AT: at }),
        None => json!({ PARKED: handle }),
    }
}

/// The refusal of a retry whose parked flight is no longer there.
pub(super) fn no_longer_waiting() -> CallError {
    CallError::invalid_params(
        "the request this retry continues is no longer waiting (it expired or was already \
         answered); send it again without requestState",
    )
}

/// What the round loop needs from the bridge.
pub(super) struct Rounds<'a> {
    pub(super) parking: &'a std::sync::Mutex<Parking<Flight>>,
    pub(super) leg: &'a Leg,
    pub(super) policy: DegradePolicy,
    pub(super) report: &'a mut TranslationReport,
    pub(super) max_rounds: usize,
    pub(super) park_for: Duration,
    pub(super) options: RequestOptions,
    /// Where the upstream's notifications about this request go.
    pub(super) relay: RelayCell,
    /// Whose request this is.
    pub(super) owner: Owner,
    /// Whether the tool only runs as a task upstream.
    pub(super) as_task: bool,
    /// This instance's name, for the state of a flight parked here, when
    /// instances share their keys.
    pub(super) here: Option<&'a str>,
}

impl Rounds<'_> {
    /// Runs `method` on a legacy upstream to its result.
    pub(super) async fn legacy(
        &mut self,
        call: &Call,
        method: &str,
        params: JsonObject,
        start: Start,
    ) -> Result<Result<Value, ClientError>, CallError> {
        // The client's answers are for the questions open when this request
        // arrived, so only a retry of a parked call has any to give.
        let mut responses = match &start {
            Start::Parked(_) => call.ctx.input_responses.clone(),
            Start::New(_) => JsonObject::new(),
        };
        let mut flight = match start {
            Start::Parked(flight) => {
                flight.relay_to(&self.relay);
                flight
            }
            Start::New(lease) => Flight::start(
                lease,
                Arc::clone(&self.relay),
                method,
                params,
                self.options.clone(),
                self.as_task,
            ),
        };
        let modern = call.peer.negotiated().era() == Era::Modern;
        let asks_client = MULTI_ROUND_METHODS.contains(&method);
        // Made when the server first asks: most requests never do, and a
        // call is a deep copy.
        let mut asking: Option<Call> = None;
        loop {
            match flight
                .advance(modern, asks_client, &mut responses, self.max_rounds)
                .await?
            {
                Advance::Done(result) => return Ok(result),
                Advance::Asked => {
                    let open = flight.open_questions();
                    if open.len() > MAX_QUESTIONS_PER_ROUND {
                        let error = Refusal::internal(format!(
                            "the server asked more than {MAX_QUESTIONS_PER_ROUND} questions at once"
                        ));
                        flight.give_up(&error.clone().into());
                        return Err(error.into());
                    }
                    let questions = match self.questions(open.into_iter()) {
                        Ok(questions) => questions,
                        Err(error) => {
                            if let CallError::Protocol(object) = &error {
                                flight.refuse_open(object);
                            }
                            return Err(error);
                        }
                    };
                    let asking = asking.get_or_insert_with(|| asking_call(call));
                    // The server may answer the request, or withdraw a
                    // question, while the client is still being asked:
                    // then the client's question is withdrawn in turn (the
                    // ask, dropped, tells it so) rather than held up.
                    // A legacy client's answers each go to their own
                    // question: one refused (a capability not declared)
                    // refuses only that one, and leaves the others asked.
                    let asking_each = async {
                        if modern {
                            asking
                                .ask_all(questions)
                                .await
                                .map(|answers| answers.into_iter().map(Ok).collect())
                        } else {
                            Ok(asking.ask_each(questions).await)
                        }
                    };
                    let asked: Result<Vec<Result<Value, CallError>>, CallError> = tokio::select! {
                        asked = Box::pin(asking_each) => asked,
                        overtaken = flight.overtaken() => match overtaken {
                            Overtaken::Answered(result) => return Ok(result),
                            Overtaken::Withdrawn => {
                                // The questions left are put again, in the
                                // same round: dropping the ask withdrew
                                // them all from the client.
                                flight.forget_withdrawn();
                                flight.rounds = flight.rounds.saturating_sub(1);
                                continue;
                            }
                        },
                    };
                    match asked {
                        Ok(answers) => {
                            let keys: Vec<String> =
                                flight.open.iter().map(|(k, _)| k.clone()).collect();
                            for (key, answer) in keys.into_iter().zip(answers) {
                                match answer {
                                    Ok(answer) => flight.answer(&key, answer),
                                    Err(error) => flight.refuse(&key, &refusal_of(&error)),
                                }
                            }
                        }
                        Err(CallError::InputRequired(asked)) => {
                            let deadline = Instant::now() + self.park_for;
                            let parked =
                                lock(self.parking).park(flight, self.owner.clone(), deadline);
                            let Some(handle) = parked else {
                                return Err(CallError::internal(
                                    "too many requests are waiting for input; try again later",
                                ));
                            };
                            let mut asked = *asked;
                            asked.state = Some(parked_state(&handle, self.here));
                            return Err(CallError::InputRequired(Box::new(asked)));
                        }
                        // A 2026-07-28 client that did not declare what the
                        // question needs is told so (-32021, naming it), as
                        // a server of its own would: it can declare it and
                        // call again.
                        Err(error @ CallError::MissingCapability { .. }) => {
                            flight.refuse_open(&Refusal::internal(error.to_string()).into());
                            return Err(error);
                        }
                        // The client refused (or its revision cannot be
                        // asked): the server hears it as its question's
                        // answer, and what the request comes to is still the
                        // server's to say.
                        Err(error) => flight.refuse_open(&refusal_of(&error)),
                    }
                }
            }
        }
    }

    /// Runs `method` on a 2026-07-28 upstream to its result.
    pub(super) async fn modern(
        &mut self,
        call: &Call,
        method: &str,
        params: JsonObject,
        lease: &Lease,
    ) -> Result<Result<Answer, ClientError>, CallError> {
        let state = call.state().unwrap_or(Value::Null);
        let member = |key: &str| -> JsonObject {
            state
                .get(key)
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        let mut asked = member("asked");
        // Answers given in earlier retries of this round, kept sealed until
        // every question has one.
        let mut answered = member("answered");
        let mut upstream_state = state.get("upstream").cloned().filter(|s| !s.is_null());
        let mut rounds = state.get("rounds").and_then(Value::as_u64).unwrap_or(0);
        // The client's answers are for the questions of the round it retries;
        // a request that retries none has none to give.
        let mut responses = if asked.is_empty() {
            JsonObject::new()
        } else {
            call.ctx.input_responses.clone()
        };
        // The call as its questions are asked: made when the server first
        // asks, since most requests take no round.
        let mut asking: Option<Call> = None;
        // Registered so the server's log lines about it can find it.
        let _registration = lease
            .upstream
            .handler
            .register_unasked(Arc::clone(&self.relay));
        let mut options = self.options.clone();
        if options.on_progress.is_some() {
            options.on_progress = Some(progress_to(Arc::clone(&self.relay)));
        }
        // A call the bridge runs (or may run) as a task of its own may run
        // as a task upstream too, when the upstream runs them: then the
        // bridge's task waits for the upstream's.
        let tasks = method == "tools/call"
            && call.may_run_as_task()
            && lease
                .upstream
                .client
                .server()
                .is_some_and(|s| s.capabilities.declares_extension(TASKS_EXTENSION));
        loop {
            // The answers this round sends, kept apart from the request so
            // that a retry can send them again.
            let mut responses_sent = None;
            if !asked.is_empty() {
                for key in asked.keys() {
                    if let Some(answer) = responses.remove(key).filter(Value::is_object) {
                        answered.insert(key.clone(), answer);
                    }
                }
                responses.clear();
                let missing: Vec<(String, Value)> = asked
                    .iter()
                    .filter(|(key, _)| !answered.contains_key(*key))
                    .map(|(k, q)| (k.clone(), q.clone()))
                    .collect();
                if !missing.is_empty() {
                    let questions = self.questions(missing.iter().map(|(key, q)| {
                        (
                            key.clone(),
                            q.get("method")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                            q.get("params").cloned().unwrap_or_else(|| json!({})),
                        )
                    }))?;
                    let asking = asking.get_or_insert_with(|| asking_call(call));
                    asking.keep_state(json!({
                        "asked": asked, "answered": answered,
                        "upstream": upstream_state, "rounds": rounds,
                    }));
                    // Nothing of this request's is with the upstream while
                    // its client answers: its place in the session's share
                    // is given up meanwhile.
                    lease.step_out();
                    let answers = Box::pin(asking.ask_all(questions)).await?;
                    lease.step_in().await?;
                    for ((key, _), answer) in missing.into_iter().zip(answers) {
                        answered.insert(key, answer);
                    }
                }
                responses_sent = Some(std::mem::take(&mut answered));
            }
            // Built for each send rather than kept and copied: a request is
            // sent again only when its tool's headers changed.
            let request = || {
                let mut request = params.clone();
                with_envelope(&mut request, call, tasks);
                if let Some(responses) = &responses_sent {
                    request.insert(
                        "inputResponses".to_owned(),
                        Value::Object(Map::clone(responses)),
                    );
                }
                if let Some(state) = &upstream_state {
                    request.insert("requestState".to_owned(), state.clone());
                }
                Some(Value::Object(request))
            };
            let client = &lease.upstream.client;
            let answer = match client.request_answer(method, request(), &options).await {
                Ok(answer) => answer,
                // The tool's header annotations changed since the bridge
                // last listed them (or it never did): list, then once more.
                Err(ClientError::Server(error))
                    if method == "tools/call" && error.code == ErrorCode::HEADER_MISMATCH =>
                {
                    if let Err(error) = Box::pin(client.refresh_tools()).await {
                        return Ok(Err(error));
                    }
                    match client.request_answer(method, request(), &options).await {
                        Ok(answer) => answer,
                        Err(error) => return Ok(Err(error)),
                    }
                }
                Err(error) => return Ok(Err(error)),
            };
            // Read once for both: the shortcut that rules them out most
            // often reads the whole result when it cannot.
            let kinds: &[&str] = if tasks {
                &[RESULT_TYPE_TASK, RESULT_TYPE_INPUT_REQUIRED]
            } else {
                &[RESULT_TYPE_INPUT_REQUIRED]
            };
            let kind = answer.result_type_among(kinds);
            if kind == Some(RESULT_TYPE_TASK) {
                let created = match answer.into_value() {
                    Ok(created) => created,
                    Err(e) => {
                        return Ok(Err(ClientError::InvalidResult {
                            method: method.to_owned(),
                            detail: e.to_string(),
                        }));
                    }
                };
                // The bridge's call becomes a task now, if it was waiting
                // to (its client's request is answered with it).
                call.continue_as_task().await;
                // The upstream runs it now; only brief polls of it go out.
                lease.step_out();
                return Box::pin(self.follow_task(call, client, &created)).await;
            }
            let complete = kind != Some(RESULT_TYPE_INPUT_REQUIRED);
            if complete && method != "tools/list" {
                // Left as the upstream wrote it: a tool result is read once,
                // typed, by the caller.
                return Ok(Ok(answer));
            }
            let result = match answer.into_value() {
                Ok(result) => result,
                Err(e) => {
                    return Ok(Err(ClientError::InvalidResult {
                        method: method.to_owned(),
                        detail: e.to_string(),
                    }));
                }
            };
            if complete {
                client.remember_tools(&result);
                return Ok(Ok(Answer::Parsed(result)));
            }
            if !MULTI_ROUND_METHODS.contains(&method) {
                return Err(CallError::internal(format!(
                    "the server asked for input during {method}, which has no input rounds"
                )));
            }
            rounds += 1;
            if usize::try_from(rounds).map_or(true, |r| r > self.max_rounds) {
                return Err(CallError::internal(format!(
                    "the server asked for input more than {} times",
                    self.max_rounds
                )));
            }
            asked = result
                .get("inputRequests")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            upstream_state = result.get("requestState").cloned();
            if asked.is_empty() && upstream_state.is_none() {
                return Err(CallError::internal(
                    "the server asked for input without saying what, or how to continue",
                ));
            }
        }
    }

    /// Waits for the 2026-07-28 upstream's task `created` to end, for a
    /// call the bridge runs as a task of its own: polls `tasks/get` at the
    /// interval it suggests, puts each question the upstream task parks on
    /// to the bridge's client (which parks the bridge's task in turn) and
    /// sends the answers back with `tasks/update`. The upstream task is
    /// cancelled if the bridge's is (this future dropped).
    async fn follow_task(
        &mut self,
        call: &Call,
        client: &crate::application::client::Client,
        created: &Value,
    ) -> Result<Result<Answer, ClientError>, CallError> {
        let Some(id) = created.get("taskId").and_then(Value::as_str) else {
            return Ok(Err(ClientError::InvalidResult {
                method: "tools/call".to_owned(),
                detail: "a task without its taskId".to_owned(),
            }));
        };
        let mut upstream = UpstreamTask {
            client: client.clone(),
            call: call.clone(),
            id: Some(id.to_owned()),
        };
        let mut asked = std::collections::HashSet::new();
        let mut interval = created.get("pollIntervalMs").and_then(Value::as_u64);
        loop {
            let task = match client
                .request_once(
                    "tasks/get",
                    Some(upstream.params(JsonObject::new())),
                    &self.options,
                )
                .await
            {
                Ok(task) => task,
                Err(error) => return Ok(Err(error)),
            };
            interval = task
                .get("pollIntervalMs")
                .and_then(Value::as_u64)
                .or(interval);
            match task.get("status").and_then(Value::as_str) {
                Some("completed") => {
                    upstream.id = None;
                    let result = task.get("result").cloned().unwrap_or_else(|| json!({}));
                    return Ok(Ok(Answer::Parsed(result)));
                }
                Some(status @ ("failed" | "cancelled")) => {
                    upstream.id = None;
                    let error = task
                        .get("error")
                        .cloned()
                        .and_then(|e| serde_json::from_value::<ErrorObject>(e).ok())
                        .unwrap_or_else(|| {
                            ErrorObject::from(Refusal::internal(format!(
                                "the server's task {status}"
                            )))
                        });
                    return Ok(Err(ClientError::Server(error)));
                }
                Some("input_required") => {
                    let questions: Vec<(String, String, Value)> = task
                        .get("inputRequests")
                        .and_then(Value::as_object)
                        .into_iter()
                        .flatten()
                        .filter(|(key, _)| !asked.contains(*key))
                        .map(|(key, q)| {
                            let method =
                                q.get("method").and_then(Value::as_str).unwrap_or_default();
                            let params = q.get("params").cloned().unwrap_or_else(|| json!({}));
                            (key.clone(), method.to_owned(), params)
                        })
                        .collect();
                    if !questions.is_empty() {
                        let keys: Vec<String> =
                            questions.iter().map(|(k, _, _)| k.clone()).collect();
                        let answers = call.ask_all(self.questions(questions.into_iter())?).await?;
                        let mut responses = JsonObject::new();
                        for (key, answer) in keys.into_iter().zip(answers) {
                            asked.insert(key.clone());
                            responses.insert(key, answer);
                        }
                        let mut update = JsonObject::new();
                        update.insert("inputResponses".to_owned(), Value::Object(responses));
                        if let Err(error) = client
                            .request_once(
                                "tasks/update",
                                Some(upstream.params(update)),
                                &self.options,
                            )
                            .await
                        {
                            return Ok(Err(error));
                        }
                        continue;
                    }
                }
                _ => {}
            }
            let wait = Duration::from_millis(interval.unwrap_or(500))
                .clamp(Duration::from_millis(50), Duration::from_secs(5));
            tokio::time::sleep(wait).await;
        }
    }

    /// The downstream questions for `(key, method, params)` triples, each
    /// lowered for the client's revision; refused when there are more than
    /// [`MAX_QUESTIONS_PER_ROUND`].
    pub(super) fn questions(
        &mut self,
        asked: impl Iterator<Item = (String, String, Value)>,
    ) -> Result<Vec<Question>, CallError> {
        let asked: Vec<_> = asked.take(MAX_QUESTIONS_PER_ROUND + 1).collect();
        if asked.len() > MAX_QUESTIONS_PER_ROUND {
            return Err(CallError::internal(format!(
                "the server asked more than {MAX_QUESTIONS_PER_ROUND} questions at once"
            )));
        }
        asked
            .into_iter()
            .map(|(key, method, mut params)| {
                Lowering {
                    leg: self.leg,
                    policy: self.policy,
                    report: self.report,
                }
                .question(&method, &mut params)
                .map_err(|e| super::lower::refusal(&e))?;
                match method.as_str() {
                    "elicitation/create" => Ok(Question::Elicit { key, params }),
                    "sampling/createMessage" => Ok(Question::Sample { key, params }),
                    "roots/list" => Ok(Question::ListRoots { key }),
                    other => Err(CallError::internal(format!(
                        "the server asked {other}, which the bridge cannot put to a client"
                    ))),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{MAX_PARKED_PER_CALLER, Owner, Parking};

    fn owner(principal: &str, target: &str) -> Owner {
        Owner {
            principal: Some(principal.to_owned()),
            method: "tools/call".to_owned(),
            target: target.to_owned(),
        }
    }

    #[test]
    fn a_parked_call_is_taken_only_by_its_owner_and_only_once() {
        let mut lot = Parking::<u32>::default();
        let later = Instant::now() + Duration::from_secs(60);
        let handle = lot.park(7, owner("ada", "t"), later).unwrap_or_default();
        assert_eq!(handle.len(), 32, "a 128-bit random handle");
        assert_eq!(
            lot.take(&handle, &owner("bob", "t")),
            None,
            "another caller"
        );
        assert_eq!(lot.take(&handle, &owner("ada", "u")), None, "another tool");
        assert_eq!(lot.take("0", &owner("ada", "t")), None, "another handle");
        assert_eq!(lot.len(), 1, "refusals leave it parked");
        assert_eq!(lot.take(&handle, &owner("ada", "t")), Some(7));
        assert_eq!(lot.take(&handle, &owner("ada", "t")), None, "taken once");
    }

    #[test]
    fn a_parked_call_expires_and_one_caller_cannot_fill_the_lot() {
        let mut lot = Parking::<u32>::default();
        let past = Instant::now();
        let handle = lot.park(1, owner("ada", "t"), past).unwrap_or_default();
        lot.expire(Instant::now() + Duration::from_millis(1));
        assert_eq!(lot.take(&handle, &owner("ada", "t")), None);
        let later = Instant::now() + Duration::from_secs(60);
        for n in 0..MAX_PARKED_PER_CALLER {
            assert!(
                lot.park(
                    u32::try_from(n).unwrap_or_default(),
                    owner("ada", "t"),
                    later
                )
                .is_some()
            );
        }
        assert!(
            lot.park(0, owner("ada", "t"), later).is_none(),
            "ada's share is full"
        );
        assert!(
            lot.park(0, owner("bob", "t"), later).is_some(),
            "bob still parks"
        );
    }
}
