//! A parked call resumed through another instance.
//!
//! Instances of a bridge (or a gateway) behind one balancer share their
//! sealing keys, so a client's retry of a parked call may reach any of
//! them, while the parked flight (an upstream request open on one
//! connection) lives in one and cannot move. The parked state names that
//! instance; the instance the retry reaches carries the retry there over
//! the shared relay ([`ParkedCalls`]) and answers the client as if the
//! flight were its own:
//!
//! - it sends the client's answers (`Resume`) to the holder, which takes
//!   the flight, answers its open questions and carries it on until it
//!   ends or asks again ([`Flight::advance`]);
//! - the upstream's notifications about the request (progress, log lines)
//!   come back as they happen (`Note`), and go out on the client's stream;
//! - the holder says how it ended (`Step`): the upstream's result or error,
//!   or the next questions, the flight parked again under a new handle.
//!   The questions are lowered for the client where the client is, and
//!   the next retry goes to the holder again, from whichever instance.
//!
//! A holder that is gone (nobody hears its name) or no longer has the
//! flight is the same to the client as a flight expired here: `-32602`,
//! and the request starts afresh. A retry whose client goes away before
//! the step stops the flight at the holder (`Cancel`), as dropping it here
//! would.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::exchange::{
    Advance, Lot, MULTI_ROUND_METHODS, Owner, Rounds, asking_call, no_longer_waiting, parked_state,
};
use super::upstream::{RELAY_BACKLOG, Relay as Note, RelayCell, lock, relay};
use crate::application::client::{ClientError, LinkError};
use crate::application::server::{Call, CallError, Relay, StoreError};
use crate::domain::Refusal;
use crate::domain::ir::JsonObject;
use crate::domain::jsonrpc::{ErrorCode, ErrorObject};

/// How much longer than one wait for its server a resuming instance waits
/// to hear from the holder: the holder's own limit ends the wait first,
/// and the relay's round trips take the rest.
const SLACK: Duration = Duration::from_secs(5);

/// The relay's name for the parked-call traffic of `instance`. Holding a
/// `*`, it is no instance's own name.
fn channel(instance: &str) -> String {
    format!("{instance}*parked")
}

/// Every bridge of this instance whose parked calls may be resumed from
/// another instance, and the exchanges under way with other instances'.
/// One per process, shared by the bridges in it (a gateway has one per
/// upstream, each under its upstream's name). Cheap to clone.
#[derive(Clone)]
pub struct ParkedCalls {
    routes: Arc<Routes>,
}

impl core::fmt::Debug for ParkedCalls {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ParkedCalls")
            .field("instance", &self.routes.instance)
            .finish_non_exhaustive()
    }
}

struct Routes {
    relay: Arc<dyn Relay>,
    instance: String,
    /// The bridges whose flights this instance holds, by name.
    bridges: Mutex<HashMap<String, Weak<Lot>>>,
    /// Exchanges this instance started, waiting to hear from the holder.
    waiting: Mutex<HashMap<String, Waiting>>,
    /// Exchanges this instance serves for others, stopped when told.
    serving: Mutex<HashMap<String, tokio::task::AbortHandle>>,
}

struct Waiting {
    notes: mpsc::Sender<Note>,
    step: Option<oneshot::Sender<Step>>,
}

/// A bridge's place among [`ParkedCalls`]: what its parked states name.
#[derive(Clone)]
pub(super) struct Route {
    calls: ParkedCalls,
    name: String,
}

impl Route {
    /// This instance's name.
    pub(super) fn instance(&self) -> &str {
        &self.calls.routes.instance
    }
}

/// What the instances say to each other about parked calls.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Message {
    /// To the holder: resume the flight with the client's answers.
    Resume(Resume),
    /// To the holder: the client of this exchange went away.
    Cancel { exchange: String },
    /// To the holder: the next questions could not be put to the client;
    /// refuse them upstream with `error`, ending the request.
    Refuse {
        bridge: String,
        handle: String,
        owner: Owner,
        error: ErrorObject,
    },
    /// From the holder: a notification about the request.
    Note { exchange: String, note: Note },
    /// From the holder: how the exchange ended.
    Step { exchange: String, step: Step },
}

/// A retry carried to the instance holding its flight.
#[derive(Debug, Serialize, Deserialize)]
struct Resume {
    exchange: String,
    /// The instance to answer.
    from: String,
    /// The bridge's name among the holder's ([`ParkedCalls`]).
    bridge: String,
    handle: String,
    owner: Owner,
    /// The client's answers, by key.
    responses: JsonObject,
}

/// How a resumed flight stands when its holder answers.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
enum Step {
    /// The upstream answered.
    Done { result: Value },
    /// The upstream answered with an error.
    Failed { error: ErrorObject },
    /// The upstream gave no answer in time.
    TimedOut { method: String, millis: u64 },
    /// The connection to the upstream failed; the detail is logged.
    Broken { detail: String },
    /// The server asked again: the flight is parked under `handle`.
    Asked {
        handle: String,
        questions: Vec<(String, String, Value)>,
    },
    /// The holder refused to carry the flight on.
    Refused { error: ErrorObject },
    /// The holder has no such flight (expired, answered, or another's).
    Gone,
}

impl ParkedCalls {
    /// Starts hearing, through `relay`, the retries other instances carry
    /// to this one (`instance`) and their holders' answers.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the relay cannot be reached.
    pub async fn listen(relay: Arc<dyn Relay>, instance: &str) -> Result<Self, StoreError> {
        let heard = relay.listen(&channel(instance)).await?;
        let routes = Arc::new(Routes {
            relay,
            instance: instance.to_owned(),
            bridges: Mutex::default(),
            waiting: Mutex::default(),
            serving: Mutex::default(),
        });
        tokio::spawn(hear(Arc::downgrade(&routes), heard));
        Ok(Self { routes })
    }

    /// Makes the flights parked in a bridge's `lot` reachable under `name`
    /// from now on.
    pub(super) fn add(&self, name: &str, lot: &Arc<Lot>) -> Route {
        lock(&self.routes.bridges).insert(name.to_owned(), Arc::downgrade(lot));
        Route {
            calls: self.clone(),
            name: name.to_owned(),
        }
    }
}

/// Hears what other instances send about parked calls, while this
/// instance's routes live.
async fn hear(routes: Weak<Routes>, mut heard: mpsc::Receiver<String>) {
    while let Some(text) = heard.recv().await {
        let Some(routes) = routes.upgrade() else {
            return;
        };
        let message = match serde_json::from_str::<Message>(&text) {
            Ok(message) => message,
            Err(error) => {
                tracing::warn!(target: "droid::bridge", %error, "an unreadable message about a parked call was dropped");
                continue;
            }
        };
        match message {
            Message::Resume(resume) => {
                // Holding the lock while spawning, so the task's own removal
                // of its entry comes after the entry is made.
                let mut serving = lock(&routes.serving);
                // The same retry delivered twice (a send retried after a
                // broken connection) is served once.
                if serving.contains_key(&resume.exchange) {
                    continue;
                }
                let id = resume.exchange.clone();
                let task = tokio::spawn(serve(Arc::clone(&routes), resume));
                serving.insert(id, task.abort_handle());
            }
            Message::Cancel { exchange } => {
                if let Some(task) = lock(&routes.serving).remove(&exchange) {
                    task.abort();
                }
            }
            Message::Refuse {
                bridge,
                handle,
                owner,
                error,
            } => {
                if let Some(lot) = routes.lot(&bridge) {
                    let taken = lock(&lot.flights).take(&handle, &owner);
                    if let Some(mut flight) = taken {
                        flight.refuse_open(&error);
                    }
                }
            }
            Message::Note { exchange, note } => {
                if let Some(waiting) = lock(&routes.waiting).get(&exchange) {
                    // As at home: a notification never stalls a reader.
                    let _full = waiting.notes.try_send(note);
                }
            }
            Message::Step { exchange, step } => {
                let sender = lock(&routes.waiting)
                    .get_mut(&exchange)
                    .and_then(|waiting| waiting.step.take());
                if let Some(sender) = sender {
                    let _gone = sender.send(step);
                }
            }
        }
    }
}

impl Routes {
    /// The lot of the bridge named `name`, while it lives.
    fn lot(&self, name: &str) -> Option<Arc<Lot>> {
        lock(&self.bridges).get(name).and_then(Weak::upgrade)
    }

    /// Sends `message` to `instance`'s parked-call channel; answers how
    /// many heard it (none when the store is away: it is logged).
    async fn tell(&self, instance: &str, message: &Message) -> usize {
        let text = match serde_json::to_string(message) {
            Ok(text) => text,
            Err(error) => {
                tracing::error!(target: "droid::bridge", %error, "a message about a parked call could not be written");
                return 0;
            }
        };
        match self.relay.send(&channel(instance), &text).await {
            Ok(heard) => heard,
            Err(error) => {
                tracing::warn!(target: "droid::bridge", %error, %instance, "a message about a parked call could not be sent");
                0
            }
        }
    }
}

/// The holder's half of one carried retry, to its step, told to the
/// instance that carried it.
async fn serve(routes: Arc<Routes>, resume: Resume) {
    let (from, exchange) = (resume.from.clone(), resume.exchange.clone());
    let step = match routes.lot(&resume.bridge) {
        Some(lot) => carry_on(&routes, &lot, resume).await,
        None => Step::Gone,
    };
    let told = Message::Step {
        exchange: exchange.clone(),
        step,
    };
    routes.tell(&from, &told).await;
    lock(&routes.serving).remove(&exchange);
}

/// Takes the flight `resume` names from `lot`, answers it with the
/// client's answers, and carries it on until it ends or asks again,
/// telling the carrying instance each notification on the way.
async fn carry_on(routes: &Arc<Routes>, lot: &Lot, resume: Resume) -> Step {
    let Resume {
        exchange,
        from,
        handle,
        owner,
        mut responses,
        ..
    } = resume;
    let Some(mut flight) = lock(&lot.flights).take(&handle, &owner) else {
        return Step::Gone;
    };
    let (sender, mut notes) = mpsc::channel(RELAY_BACKLOG);
    let cell: RelayCell = Arc::new(Mutex::new(sender));
    flight.relay_to(&cell);
    // Told by a task of their own, in the order they came: a store slow to
    // take them never holds the flight up, whose waits are its server's.
    let forwarding = {
        let routes = Arc::clone(routes);
        tokio::spawn(async move {
            while let Some(note) = notes.recv().await {
                let exchange = exchange.clone();
                routes.tell(&from, &Message::Note { exchange, note }).await;
            }
        })
    };
    let asks_client = MULTI_ROUND_METHODS.contains(&owner.method.as_str());
    let max_rounds = lot.max_rounds;
    let advanced = flight
        .advance(true, asks_client, &mut responses, max_rounds)
        .await;
    // What the server says of the flight from now on (parked again, or
    // over) is nobody's: with both ends of this channel's sender gone, the
    // forwarder ends once it has told all that came before the step.
    let (nobody, _) = mpsc::channel(1);
    flight.relay_to(&Arc::new(Mutex::new(nobody)));
    drop(cell);
    let _told = forwarding.await;
    match advanced {
        Ok(Advance::Done(Ok(result))) => Step::Done { result },
        Ok(Advance::Done(Err(ClientError::Server(error)))) => Step::Failed { error },
        Ok(Advance::Done(Err(ClientError::Timeout { method, millis }))) => Step::TimedOut {
            method,
            millis: u64::try_from(millis).unwrap_or(u64::MAX),
        },
        Ok(Advance::Done(Err(other))) => Step::Broken {
            detail: other.to_string(),
        },
        Ok(Advance::Asked) => {
            let questions = flight.open_questions();
            let deadline = Instant::now() + lot.park_for;
            match lock(&lot.flights).park(flight, owner.clone(), deadline) {
                Some(handle) => Step::Asked { handle, questions },
                None => Step::Refused {
                    error: Refusal::internal(
                        "too many requests are waiting for input; try again later",
                    )
                    .into(),
                },
            }
        }
        Err(error) => Step::Refused {
            error: error_object(&error),
        },
    }
}

/// `error` as the JSON-RPC error it answers with.
fn error_object(error: &CallError) -> ErrorObject {
    match error {
        CallError::Protocol(object) => object.clone(),
        other => Refusal::internal(other.to_string()).into(),
    }
}

/// A parked call to resume at another instance, as its retry named it.
pub(super) struct Elsewhere {
    pub(super) route: Route,
    /// The holder.
    pub(super) at: String,
    pub(super) handle: String,
}

/// An exchange this instance waits on: forgotten when it ends, and the
/// holder told to stop when it ends before its step (the client went).
struct Pending<'a> {
    routes: &'a Arc<Routes>,
    exchange: String,
    at: String,
    settled: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        lock(&self.routes.waiting).remove(&self.exchange);
        if self.settled {
            return;
        }
        let routes = Arc::clone(self.routes);
        let at = std::mem::take(&mut self.at);
        let exchange = std::mem::take(&mut self.exchange);
        tokio::spawn(async move {
            routes.tell(&at, &Message::Cancel { exchange }).await;
        });
    }
}

impl Route {
    /// Sends the retry's `responses` to `at`, the holder of the flight
    /// parked under `handle`, and waits for its step, putting the
    /// notifications it tells on the way into `relay_cell`; each wait for
    /// the holder is bounded by `wait`.
    async fn exchange(
        &self,
        at: &str,
        handle: &str,
        owner: &Owner,
        responses: JsonObject,
        relay_cell: &RelayCell,
        wait: Duration,
    ) -> Result<Step, CallError> {
        let routes = &self.calls.routes;
        let exchange = super::random_hex()
            .ok_or_else(|| CallError::internal("no randomness to name the exchange"))?;
        let (notes_to, mut notes) = mpsc::channel(RELAY_BACKLOG);
        let (step_to, mut step) = oneshot::channel();
        lock(&routes.waiting).insert(
            exchange.clone(),
            Waiting {
                notes: notes_to,
                step: Some(step_to),
            },
        );
        let mut pending = Pending {
            routes,
            exchange: exchange.clone(),
            at: at.to_owned(),
            settled: false,
        };
        let message = Message::Resume(Resume {
            exchange,
            from: routes.instance.clone(),
            bridge: self.name.clone(),
            handle: handle.to_owned(),
            owner: owner.clone(),
            responses,
        });
        let text = serde_json::to_string(&message)
            .map_err(|e| CallError::internal(format!("the retry could not be written: {e}")))?;
        match routes.relay.send(&channel(at), &text).await {
            Ok(0) => {
                // Its holder is gone, and the flight with it.
                pending.settled = true;
                return Ok(Step::Gone);
            }
            Ok(_) => {}
            Err(error) => {
                pending.settled = true;
                tracing::warn!(target: "droid::bridge", %error, "a parked call's retry could not be carried to its instance");
                return Err(CallError::Protocol(ErrorObject::new(
                    ErrorCode::STORE_UNAVAILABLE,
                    "the shared store is unavailable; retry",
                )));
            }
        }
        loop {
            tokio::select! {
                biased;
                Some(note) = notes.recv() => relay(relay_cell, note),
                told = &mut step => {
                    while let Ok(note) = notes.try_recv() {
                        relay(relay_cell, note);
                    }
                    pending.settled = true;
                    return told.map_err(|_| CallError::internal("the exchange ended without its step"));
                }
                () = tokio::time::sleep(wait) => {
                    return Err(CallError::internal(
                        "the instance holding the request did not answer in time",
                    ));
                }
            }
        }
    }
}

impl Rounds<'_> {
    /// Carries the retry of a call parked at another instance there, round
    /// after round, until the call ends or the client must answer again.
    pub(super) async fn resume_elsewhere(
        &mut self,
        call: &Call,
        elsewhere: Elsewhere,
    ) -> Result<Result<Value, ClientError>, CallError> {
        let Elsewhere {
            route,
            at,
            mut handle,
        } = elsewhere;
        let wait = self.options.timeout.unwrap_or(SLACK).saturating_add(SLACK);
        let owner = self.owner.clone();
        let mut responses = call.ctx.input_responses.clone();
        // Made when the holder first asks again, as at home.
        let mut asking: Option<Call> = None;
        loop {
            let step = route
                .exchange(&at, &handle, &owner, responses, &self.relay, wait)
                .await?;
            let (next, questions) = match step {
                Step::Done { result } => return Ok(Ok(result)),
                Step::Failed { error } => return Ok(Err(ClientError::Server(error))),
                Step::TimedOut { method, millis } => {
                    return Ok(Err(ClientError::Timeout {
                        method,
                        millis: u128::from(millis),
                    }));
                }
                Step::Broken { detail } => {
                    return Ok(Err(ClientError::Link(LinkError::Io(detail))));
                }
                Step::Refused { error } => return Err(CallError::Protocol(error)),
                Step::Gone => return Err(no_longer_waiting()),
                Step::Asked { handle, questions } => (handle, questions),
            };
            let refuse = |error: &CallError| {
                let message = Message::Refuse {
                    bridge: route.name.clone(),
                    handle: next.clone(),
                    owner: owner.clone(),
                    error: error_object(error),
                };
                let routes = Arc::clone(&route.calls.routes);
                let at = at.clone();
                tokio::spawn(async move {
                    routes.tell(&at, &message).await;
                });
            };
            let keys: Vec<String> = questions.iter().map(|(k, _, _)| k.clone()).collect();
            let questions = match self.questions(questions.into_iter()) {
                Ok(questions) => questions,
                Err(error) => {
                    refuse(&error);
                    return Err(error);
                }
            };
            let asking = asking.get_or_insert_with(|| asking_call(call));
            match asking.ask_all(questions).await {
                Ok(answers) => {
                    responses = keys.into_iter().zip(answers).collect();
                    handle = next;
                }
                Err(CallError::InputRequired(asked)) => {
                    let mut asked = *asked;
                    asked.state = Some(parked_state(&next, Some(&at)));
                    return Err(CallError::InputRequired(Box::new(asked)));
                }
                Err(error) => {
                    refuse(&error);
                    return Err(error);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{Message, Note, Owner, Resume, Step};
    use crate::domain::LoggingLevel;
    use crate::domain::jsonrpc::{ErrorCode, ErrorObject};

    fn owner() -> Owner {
        Owner {
            principal: Some("ada".to_owned()),
            method: "tools/call".to_owned(),
            target: "ask".to_owned(),
        }
    }

    /// What one instance writes, another reads back the same: every
    /// message and step, through the text the relay carries.
    #[test]
    fn every_message_reads_back_as_written() -> Result<(), serde_json::Error> {
        let messages = [
            Message::Resume(Resume {
                exchange: "x".to_owned(),
                from: "b".to_owned(),
                bridge: "fixture".to_owned(),
                handle: "h".to_owned(),
                owner: owner(),
                responses: serde_json::Map::from_iter([(
                    "q1".to_owned(),
                    json!({ "action": "accept" }),
                )]),
            }),
            Message::Cancel {
                exchange: "x".to_owned(),
            },
            Message::Refuse {
                bridge: String::new(),
                handle: "h".to_owned(),
                owner: owner(),
                error: ErrorObject::new(ErrorCode::INVALID_PARAMS, "no"),
            },
            Message::Note {
                exchange: "x".to_owned(),
                note: Note::Progress {
                    progress: 1.0,
                    total: Some(2.0),
                    message: None,
                },
            },
            Message::Note {
                exchange: "x".to_owned(),
                note: Note::Log {
                    level: LoggingLevel::Info,
                    logger: Some("upstream".to_owned()),
                    data: json!("line"),
                },
            },
        ];
        let steps = [
            Step::Done {
                result: json!({ "content": [] }),
            },
            Step::Failed {
                error: ErrorObject::new(ErrorCode::INTERNAL_ERROR, "failed"),
            },
            Step::TimedOut {
                method: "tools/call".to_owned(),
                millis: 60_000,
            },
            Step::Broken {
                detail: "closed".to_owned(),
            },
            Step::Asked {
                handle: "h2".to_owned(),
                questions: vec![(
                    "q1".to_owned(),
                    "elicitation/create".to_owned(),
                    json!({ "message": "who?" }),
                )],
            },
            Step::Refused {
                error: ErrorObject::new(ErrorCode::INTERNAL_ERROR, "too many"),
            },
            Step::Gone,
        ];
        let all = messages
            .into_iter()
            .chain(steps.into_iter().map(|step| Message::Step {
                exchange: "x".to_owned(),
                step,
            }));
        for message in all {
            let text = serde_json::to_string(&message)?;
            let read: Message = serde_json::from_str(&text)?;
            assert_eq!(serde_json::to_string(&read)?, text);
        }
        Ok(())
    }
}
