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
//!   request. Nothing is kept in the bridge: the upstream state and the
//!   questions travel sealed in the downstream `requestState`.
//! - **Legacy upstream.** The server asks by sending requests of its own
//!   while the forwarded request is in flight ([`Flight`]). In front of a
//!   2026-07-28 client that is the hard case (multi round-trip synthesis):
//!   the upstream request has to stay open across the client's retry, so
//!   the flight is parked under a handle, the handle is sealed into
//!   `requestState`, and the retry picks it up and answers the waiting
//!   questions. Parked flights are bounded in number and in time; one that
//!   expires is dropped, which cancels the upstream request.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::lower::Lowering;
use super::upstream::{Ask, Lease, Registration, Relay, lock};
use crate::application::client::{ClientError, RequestOptions};
use crate::application::server::{Call, CallError, INPUT_KEY_META, Question};
use crate::domain::ir::{JsonObject, TranslationReport};
use crate::domain::jsonrpc::{ErrorCode, ErrorObject};
use crate::domain::{DegradePolicy, Leg};

/// How many flights may be parked waiting for their client's retry.
pub const MAX_PARKED: usize = 1024;

/// How long, after a legacy server's question, the bridge waits for others
/// sent alongside it, so a 2026-07-28 client gets them in one round.
const GATHER: Duration = Duration::from_millis(25);

/// The key a parked flight's handle travels under in the sealed state.
const PARKED: &str = "parked";

/// A legacy upstream request in flight, with the questions it asked.
pub(super) struct Flight {
    // Dropped before the lease, so the connection is free of this request
    // before another may take it.
    registration: Registration,
    asks: mpsc::Receiver<Ask>,
    task: AbortOnDrop,
    open: Vec<(String, Ask)>,
    next_key: u32,
    rounds: usize,
    lease: Lease,
}

/// The upstream request's task, cancelled (and the upstream told) when the
/// flight is dropped unfinished.
struct AbortOnDrop(JoinHandle<Result<Value, ClientError>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

enum Step {
    Done(Result<Value, ClientError>),
    Asked,
}

impl Flight {
    /// Starts `method` upstream for `call`, on the leased connection.
    pub(super) fn start(
        lease: Lease,
        relay: mpsc::Sender<Relay>,
        method: &str,
        params: JsonObject,
        options: RequestOptions,
    ) -> Self {
        let (registration, asks) = lease.upstream.handler.register(relay);
        let client = lease.upstream.client.clone();
        let method = method.to_owned();
        let task = tokio::spawn(async move {
            client
                .request(&method, Some(Value::Object(params)), &options)
                .await
        });
        Self {
            registration,
            asks,
            task: AbortOnDrop(task),
            open: Vec::new(),
            next_key: 1,
            rounds: 0,
            lease,
        }
    }

    /// Waits for the result, or for the next questions; with `gather`,
    /// also for the questions that follow the first closely.
    async fn next(&mut self, gather: bool) -> Step {
        if !self.open.is_empty() {
            return Step::Asked;
        }
        tokio::select! {
            joined = &mut self.task.0 => Step::Done(joined.unwrap_or_else(|e| {
                Err(ClientError::InvalidResult {
                    method: "upstream request".to_owned(),
                    detail: e.to_string(),
                })
            })),
            Some(ask) = self.asks.recv() => {
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

    /// Withdraws every open question with `error`.
    fn refuse_open(&mut self, error: &ErrorObject) {
        for (_, ask) in self.open.drain(..) {
            let _gone = ask.answer.send(Err(error.clone()));
        }
    }
}

/// Flights waiting for their client's retry, by handle.
#[derive(Default)]
pub(super) struct Parking {
    flights: HashMap<u64, (Flight, Instant)>,
    next: u64,
}

impl Parking {
    /// Parks `flight` until `deadline`; `None` when the lot is full.
    fn park(&mut self, flight: Flight, deadline: Instant) -> Option<u64> {
        self.expire(Instant::now());
        if self.flights.len() >= MAX_PARKED {
            return None;
        }
        self.next += 1;
        self.flights.insert(self.next, (flight, deadline));
        Some(self.next)
    }

    /// Takes the flight parked under `handle`, if it has not expired.
    pub(super) fn take(&mut self, handle: u64) -> Option<Flight> {
        self.expire(Instant::now());
        self.flights.remove(&handle).map(|(flight, _)| flight)
    }

    /// Drops every flight whose client did not come back in time, which
    /// cancels its upstream request.
    pub(super) fn expire(&mut self, now: Instant) {
        self.flights.retain(|_, (_, deadline)| *deadline > now);
    }

    /// How many flights are parked.
    pub(super) fn len(&self) -> usize {
        self.flights.len()
    }
}

/// Where a legacy upstream request starts from.
pub(super) enum Start {
    /// A new request, on this connection.
    New(Lease),
    /// A request parked by an earlier round, resumed by the client's retry.
    Parked(Flight),
}

/// The handle a parked flight's retry names, if `state` is such a retry's.
pub(super) fn parked_handle(state: Option<&Value>) -> Option<u64> {
    state.and_then(|s| s.get(PARKED)).and_then(Value::as_u64)
}

/// What the round loop needs from the bridge.
pub(super) struct Rounds<'a> {
    pub(super) parking: &'a std::sync::Mutex<Parking>,
    pub(super) leg: &'a Leg,
    pub(super) policy: DegradePolicy,
    pub(super) report: &'a mut TranslationReport,
    pub(super) max_rounds: usize,
    pub(super) park_for: Duration,
    pub(super) options: RequestOptions,
    /// Where the upstream's notifications about this request go.
    pub(super) relay: mpsc::Sender<Relay>,
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
        let mut flight = match start {
            Start::Parked(flight) => {
                flight.registration.relay_to(self.relay.clone());
                flight
            }
            Start::New(lease) => Flight::start(
                lease,
                self.relay.clone(),
                method,
                params,
                self.options.clone(),
            ),
        };
        loop {
            let gather = call.peer.negotiated().era() == crate::domain::Era::Modern;
            match flight.next(gather).await {
                Step::Done(result) => return Ok(result),
                Step::Asked => {
                    flight.rounds += 1;
                    if flight.rounds > self.max_rounds {
                        let error = CallError::internal(format!(
                            "the server asked for input more than {} times",
                            self.max_rounds
                        ));
                        return Err(error);
                    }
                    let questions = match self.questions(
                        flight
                            .open
                            .iter()
                            .map(|(k, a)| (k.clone(), a.method.clone(), a.params.clone())),
                    ) {
                        Ok(questions) => questions,
                        Err(error) => {
                            if let CallError::Protocol(object) = &error {
                                flight.refuse_open(object);
                            }
                            return Err(error);
                        }
                    };
                    match call.ask_all(questions).await {
                        Ok(answers) => {
                            for ((_, ask), answer) in flight.open.drain(..).zip(answers) {
                                if ask.method == "roots/list" {
                                    flight.lease.upstream.handler.remember_roots(&answer);
                                }
                                let _gone = ask.answer.send(Ok(answer));
                            }
                        }
                        Err(CallError::InputRequired(asked)) => {
                            let deadline = Instant::now() + self.park_for;
                            let Some(handle) = lock(self.parking).park(flight, deadline) else {
                                return Err(CallError::internal(
                                    "too many requests are waiting for input; try again later",
                                ));
                            };
                            let mut asked = *asked;
                            asked.state = Some(json!({ PARKED: handle }));
                            return Err(CallError::InputRequired(Box::new(asked)));
                        }
                        Err(error) => {
                            let object = match &error {
                                CallError::Protocol(object) => object.clone(),
                                other => {
                                    ErrorObject::new(ErrorCode::INTERNAL_ERROR, other.to_string())
                                }
                            };
                            flight.refuse_open(&object);
                            return Err(error);
                        }
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
    ) -> Result<Result<Value, ClientError>, CallError> {
        let state = call.state().unwrap_or(Value::Null);
        let mut asked: JsonObject = state
            .get("asked")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let mut upstream_state = state.get("upstream").cloned().filter(|s| !s.is_null());
        let mut rounds = state.get("rounds").and_then(Value::as_u64).unwrap_or(0);
        // Registered so the server's log lines about it can find it.
        let (_registration, _asks) = lease.upstream.handler.register(self.relay.clone());
        loop {
            let mut request = params.clone();
            if !asked.is_empty() {
                let questions = self.questions(asked.iter().map(|(key, q)| {
                    (
                        key.clone(),
                        q.get("method")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        q.get("params").cloned().unwrap_or_else(|| json!({})),
                    )
                }))?;
                call.keep_state(json!({
                    "asked": asked, "upstream": upstream_state, "rounds": rounds,
                }));
                let answers = call.ask_all(questions).await?;
                let responses: Map<String, Value> = asked.keys().cloned().zip(answers).collect();
                request.insert("inputResponses".to_owned(), Value::Object(responses));
            }
            if let Some(state) = &upstream_state {
                request.insert("requestState".to_owned(), state.clone());
            }
            let client = &lease.upstream.client;
            let request = Some(Value::Object(request));
            let result = match client
                .request_once(method, request.clone(), &self.options)
                .await
            {
                Ok(result) => result,
                // The tool's header annotations changed since the bridge
                // last listed them (or it never did): list, then once more.
                Err(ClientError::Server(error))
                    if method == "tools/call" && error.code == ErrorCode::HEADER_MISMATCH =>
                {
                    if let Err(error) = client.refresh_tools().await {
                        return Ok(Err(error));
                    }
                    match client.request_once(method, request, &self.options).await {
                        Ok(result) => result,
                        Err(error) => return Ok(Err(error)),
                    }
                }
                Err(error) => return Ok(Err(error)),
            };
            if result.get("resultType").and_then(Value::as_str) != Some("input_required") {
                if method == "tools/list" {
                    client.remember_tools(&result);
                }
                return Ok(Ok(result));
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

    /// The downstream questions for `(key, method, params)` triples, each
    /// lowered for the client's revision.
    fn questions(
        &mut self,
        asked: impl Iterator<Item = (String, String, Value)>,
    ) -> Result<Vec<Question>, CallError> {
        asked
            .map(|(key, method, mut params)| {
                Lowering {
                    leg: self.leg,
                    policy: self.policy,
                    report: self.report,
                }
                .question(&method, &mut params)
                .map_err(|e| super::runtime::refusal(&e))?;
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
