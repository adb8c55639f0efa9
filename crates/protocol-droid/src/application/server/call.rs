//! What a handler receives, and the one "ask the client" step that works in
//! both eras.
//!
//! A handler asks for input with [`Call::elicit`], [`Call::sample`] or
//! [`Call::list_roots`]. In the legacy era the question travels as a
//! server-initiated request and the answer comes back inline. In 2026-07-28
//! there is no back channel: the first round ends with
//! [`CallError::InputRequired`], which the dispatcher turns into an
//! `InputRequiredResult`, and the client's retry carries the answer in
//! `inputResponses`, where the same call finds it. The handler is written once.

use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::client_tasks;
use super::tasks::{TaskRef, wire};
use super::{ExchangeError, PeerSession, RequestContext};
use crate::domain::Refusal;
use crate::domain::feature::Feature;
use crate::domain::ir::JsonObject;
use crate::domain::jsonrpc::{ErrorObject, Message, Notification};
use crate::domain::{Era, LoggingLevel, SessionId};

/// The `_meta` key under which a legacy server-to-client request names the
/// input key the same question has in 2026-07-28.
///
/// A legacy request has no key of its own; naming it lets a bridge in front
/// of this server ask a 2026-07-28 client under the key the server would
/// have used itself, so the question reads the same through the bridge as
/// from the server directly. Any other client ignores it.
pub const INPUT_KEY_META: &str = "protocol-droid/inputKey";

/// `params` with `key` named in their `_meta`.
fn with_input_key(params: Value, key: &str) -> Value {
    let Value::Object(mut params) = params else {
        return params;
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(JsonObject::new()));
    if let Value::Object(meta) = meta {
        meta.insert(INPUT_KEY_META.to_owned(), json!(key));
    }
    Value::Object(params)
}

/// Why a handler did not produce a result.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The client must answer these input requests and retry (2026-07-28).
    /// Not a failure: the dispatcher answers it as `InputRequiredResult`.
    #[error("input required: {}", .0.requests.keys().cloned().collect::<Vec<_>>().join(", "))]
    InputRequired(Box<InputRequired>),
    /// The request needs a client capability the request did not declare
    /// (`-32021`, with `data.requiredCapabilities`).
    #[error("the client did not declare a capability this needs")]
    MissingCapability {
        /// What is required, as a capabilities object.
        required: JsonObject,
    },
    /// A JSON-RPC error to send as it is.
    #[error("{}: {}", .0.code, .0.message)]
    Protocol(ErrorObject),
}

/// What a round that ends asking for input carries.
#[derive(Clone, Debug, PartialEq)]
pub struct InputRequired {
    /// The input requests, by key.
    pub requests: JsonObject,
    /// State to seal into `requestState`, if the handler kept any.
    pub state: Option<Value>,
}

impl CallError {
    /// Ends this round asking for `requests`, keeping `state` for the next.
    #[must_use]
    pub fn input_required(requests: JsonObject, state: Option<Value>) -> Self {
        Self::InputRequired(Box::new(InputRequired { requests, state }))
    }

    /// An invalid-params error (`-32602`).
    #[must_use]
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Refusal::invalid_params(message.into()).into()
    }

    /// An internal error (`-32603`).
    #[must_use]
    pub fn internal(message: impl Into<String>) -> Self {
        Refusal::internal(message.into()).into()
    }
}

impl From<Refusal> for CallError {
    fn from(refusal: Refusal) -> Self {
        Self::Protocol(refusal.into())
    }
}

impl From<ExchangeError> for CallError {
    fn from(error: ExchangeError) -> Self {
        match error {
            ExchangeError::Peer(object) => Self::Protocol(object),
            other => Self::internal(other.to_string()),
        }
    }
}

/// One invocation of a tool, prompt or resource handler.
#[derive(Clone)]
pub struct Call {
    /// The request being served.
    pub ctx: RequestContext,
    /// The session it arrived on, with this request's caller and profile.
    pub peer: PeerSession,
    /// The arguments (tool arguments, prompt arguments, or `{uri}` plus the
    /// template variables for a resource).
    pub arguments: JsonObject,
    asked: Arc<Mutex<AskState>>,
    /// Only a call that may run as a task has one: an ordinary call (most
    /// of them) allocates nothing for tasks.
    task: Option<Arc<Mutex<TaskMode>>>,
}

/// Whether a call runs as a task, and so where its questions go.
#[derive(Debug, Default)]
pub(crate) enum TaskMode {
    /// Not a task (or not yet): questions are the request's own.
    #[default]
    Request,
    /// Runs in the request until the handler calls
    /// [`Call::continue_as_task`], which sends this signal: the runtime
    /// then starts the task and answers the request with it, and the
    /// acknowledgement comes back once the call runs as the task.
    Starting(oneshot::Sender<oneshot::Sender<()>>),
    /// Runs as this task.
    Running(TaskRef),
}

/// Prints the arguments' names, never their values: a tool's arguments
/// are the user's data and may hold secrets.
impl core::fmt::Debug for Call {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Call")
            .field("ctx", &self.ctx)
            .field("peer", &self.peer)
            .field("arguments", &self.arguments.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// What a handler asked for in this round, collected across several asks so
/// a 2026-07-28 round can carry all of them at once.
#[derive(Debug, Default)]
struct AskState {
    requests: JsonObject,
    state: Option<Value>,
}

impl Call {
    /// A call with these parts.
    #[must_use]
    pub fn new(ctx: RequestContext, peer: PeerSession, arguments: JsonObject) -> Self {
        Self {
            ctx,
            peer,
            arguments,
            asked: Arc::default(),
            task: None,
        }
    }

    /// This call, able to run as a task: what the runtime makes before it
    /// hands the call to a handler it may run as one.
    pub(crate) fn tasked(mut self) -> Self {
        self.task = Some(Arc::default());
        self
    }

    /// This call's task mode, shared with the runtime that runs it; `None`
    /// for a call not made [`tasked`](Self::tasked).
    pub(crate) fn task_mode(&self) -> Option<Arc<Mutex<TaskMode>>> {
        self.task.clone()
    }

    /// The task this call runs as, if it runs as one.
    fn running_task(&self) -> Option<TaskRef> {
        match &*self.task.as_ref()?.lock().ok()? {
            TaskMode::Running(task) => Some(task.clone()),
            _ => None,
        }
    }

    /// Whether this call runs as a task, or may yet ([`Self::continue_as_task`]).
    pub(crate) fn may_run_as_task(&self) -> bool {
        self.task.as_ref().is_some_and(|task| {
            task.lock()
                .is_ok_and(|mode| !matches!(*mode, TaskMode::Request))
        })
    }

    /// Whether this call runs as a task: its client polls for the result
    /// rather than waiting on the request.
    #[must_use]
    pub fn is_task(&self) -> bool {
        self.running_task().is_some()
    }

    /// Continues this call as a task, for a tool registered with
    /// [`ToolSpec::task_after_input`](super::ToolSpec::task_after_input):
    /// the request is answered with the new task (`CreateTaskResult`) and
    /// the handler goes on in the background; questions asked from here on
    /// park the task until the client answers them with `tasks/update`.
    ///
    /// Does nothing when the call already runs as a task, or runs in the
    /// request only (its client did not take tasks); the handler simply
    /// goes on. Should the task not be created (the caller has as many as
    /// it may), the request is answered with that error and the handler
    /// is not resumed.
    pub async fn continue_as_task(&self) {
        let Some(task) = &self.task else {
            return;
        };
        let signal = match task.lock() {
            Ok(mut mode) => match core::mem::take(&mut *mode) {
                TaskMode::Starting(signal) => signal,
                other => {
                    *mode = other;
                    return;
                }
            },
            Err(_) => return,
        };
        let (ack, acked) = oneshot::channel();
        if signal.send(ack).is_ok() {
            let _started = acked.await;
        }
    }

    /// The session this call belongs to.
    #[must_use]
    pub const fn session(&self) -> SessionId {
        self.peer.session()
    }

    /// What was settled with the caller's session.
    #[must_use]
    pub const fn peer(&self) -> &PeerSession {
        &self.peer
    }

    /// The caller, as this request's credentials say.
    #[must_use]
    pub const fn caller(&self) -> &super::AuthContext {
        &self.ctx.auth
    }

    /// The arguments read as `T`.
    ///
    /// # Errors
    ///
    /// [`CallError::Protocol`] with `-32602` when they do not fit.
    pub fn args<T: DeserializeOwned>(&self) -> Result<T, CallError> {
        self.read_args().map_err(CallError::invalid_params)
    }

    /// The arguments read as `T`, without copying them, or why they do not
    /// fit, in words for the caller: a typed tool answers that as a tool
    /// error, everything else as `-32602`.
    pub(super) fn read_args<T: DeserializeOwned>(&self) -> Result<T, String> {
        T::deserialize(&self.arguments).map_err(|e| format!("invalid arguments: {e}"))
    }

    /// One argument as a string, if present.
    #[must_use]
    pub fn arg_str(&self, name: &str) -> Option<&str> {
        self.arguments.get(name).and_then(Value::as_str)
    }

    /// The state in force: what this call last kept, or else what the
    /// previous round kept (verified from its `requestState`).
    ///
    /// The same code reads it in both eras. In the legacy era a question is
    /// answered within the one call, so what was kept is simply still there;
    /// in 2026-07-28 it came back sealed with the retry.
    #[must_use]
    pub fn state(&self) -> Option<Value> {
        let kept = self.asked.lock().ok().and_then(|a| a.state.clone());
        kept.or_else(|| self.ctx.request_state.clone())
    }

    /// Keeps `state` for the next round: sealed into `requestState` if this
    /// round ends asking for input.
    pub fn keep_state(&self, state: Value) {
        if let Ok(mut asked) = self.asked.lock() {
            asked.state = Some(state);
        }
    }

    /// Lets the transport close this request's stream now and deliver the
    /// rest when the client resumes; for a long call behind a proxy that
    /// would otherwise time the connection out. See
    /// [`DynFrameSink::release`](super::DynFrameSink::release).
    pub fn release_stream(&self) {
        self.peer.sink().release();
    }

    /// Sends a log record, if the gate in force lets `level` through.
    ///
    /// The gate is the session's (legacy `logging/setLevel`) or the
    /// request's own (`_meta` logLevel in 2026-07-28); closed means silent.
    pub fn log(&self, level: LoggingLevel, data: Value) {
        if self.peer.log_gate().allows(level) {
            self.send_log(level, None, data);
        }
    }

    /// Sends a log record naming the `logger` that wrote it (a component
    /// of the server, as the record's `logger` member says), if the gate
    /// in force lets `level` through; see [`Self::log`].
    pub fn log_named(&self, level: LoggingLevel, logger: &str, data: Value) {
        if self.peer.log_gate().allows(level) {
            self.send_log(level, Some(logger.to_owned()), data);
        }
    }

    /// Sends a log record another server wrote (an upstream's, carried by
    /// a bridge or gateway), naming the `logger` it named, if the gate in
    /// force lets it through ([`super::LogGate::allows_forwarded`]: a legacy
    /// client that never chose a level gets what the server chose to send).
    pub fn forward_log(&self, level: LoggingLevel, logger: Option<String>, data: Value) {
        let legacy = self.peer.negotiated().era() == Era::Legacy;
        if self.peer.log_gate().allows_forwarded(level, legacy) {
            self.send_log(level, logger, data);
        }
    }

    fn send_log(&self, level: LoggingLevel, logger: Option<String>, data: Value) {
        let mut params = JsonObject::new();
        params.insert("level".to_owned(), json!(level));
        if let Some(logger) = logger {
            params.insert("logger".to_owned(), Value::String(logger));
        }
        params.insert("data".to_owned(), data);
        self.notify("notifications/message", Value::Object(params));
    }

    /// Reports progress, if the request opted in with a progress token.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let Some(token) = self.ctx.progress_token().cloned() else {
            return;
        };
        let mut params = JsonObject::new();
        params.insert("progressToken".to_owned(), token);
        params.insert("progress".to_owned(), json!(progress));
        if let Some(total) = total {
            params.insert("total".to_owned(), json!(total));
        }
        if let Some(message) = message.filter(|_| self.peer.allows(Feature::ProgressMessage)) {
            params.insert("message".to_owned(), json!(message));
        }
        self.notify("notifications/progress", Value::Object(params));
    }

    fn notify(&self, method: &str, params: Value) {
        // A full queue drops the record: a notification is never worth
        // stalling the handler that produced it.
        let _queued = self.peer.sink().send(Message::Notification(Notification {
            method: method.to_owned(),
            params: Some(params),
        }));
    }

    /// Asks the client to fill in a form (or open a URL), as `key`.
    ///
    /// # Errors
    ///
    /// [`CallError::InputRequired`] to end a 2026-07-28 round;
    /// [`CallError::MissingCapability`] when the request did not declare
    /// elicitation; a protocol error when the legacy client refused, or
    /// when its answer is not an elicitation result (no `action` of
    /// `accept`, `decline` or `cancel`, a `content` that is not an object).
    pub async fn elicit(&self, key: &str, params: Value) -> Result<Value, CallError> {
        self.ask_checked(Question::Elicit {
            key: key.to_owned(),
            params,
        })
        .await
    }

    /// Asks the client's model for a completion, as `key`.
    ///
    /// # Errors
    ///
    /// As [`Self::elicit`], for sampling: an answer is a sampling result
    /// when it has a `role` (`user` or `assistant`), a `model` string and
    /// a `content` that is a block or a list of them.
    pub async fn sample(&self, key: &str, params: Value) -> Result<Value, CallError> {
        self.ask_checked(Question::Sample {
            key: key.to_owned(),
            params,
        })
        .await
    }

    /// Asks the client for its roots, as `key`.
    ///
    /// # Errors
    ///
    /// As [`Self::elicit`], for roots: an answer is a list of roots when
    /// its `roots` is a list whose every entry has a `uri` string.
    pub async fn list_roots(&self, key: &str) -> Result<Value, CallError> {
        self.ask_checked(Question::ListRoots {
            key: key.to_owned(),
        })
        .await
    }

    /// Asks `question`, and checks that the answer holds what every answer
    /// to it must ([`checked`]).
    async fn ask_checked(&self, question: Question) -> Result<Value, CallError> {
        let method = question.method();
        let era = self.peer.negotiated().era();
        checked(method, era, self.ask_one(question).await?)
    }

    async fn ask(
        &self,
        key: &str,
        method: &str,
        params: Value,
        feature: Feature,
        required: Value,
    ) -> Result<Value, CallError> {
        if let Some(answer) = self.given(key) {
            return Ok(answer);
        }
        self.may_ask(feature, &required)?;
        if let Some(task) = self.running_task() {
            return self.ask_in_task(&task, key, method, params).await;
        }
        match self.peer.negotiated().era() {
            Era::Legacy => {
                let params = with_input_key(params, key);
                Ok(self.exchange(None, method, params).await?)
            }
            Era::Modern => {
                self.note(key, method, params)?;
                Err(self.round()?)
            }
        }
    }

    /// The client's answer to the question `key`, when this 2026-07-28
    /// request carries one. An answer that is not even an object cannot be
    /// the result the question asked for: asked again, as a missing one
    /// would be.
    fn given(&self, key: &str) -> Option<Value> {
        if self.peer.negotiated().era() != Era::Modern {
            return None;
        }
        self.ctx
            .input_responses
            .get(key)
            .filter(|a| a.is_object())
            .cloned()
    }

    /// Whether the client may be asked what needs `feature` (`required`
    /// is the capability, as a missing one is named); the error to answer
    /// with when not.
    fn may_ask(&self, feature: Feature, required: &Value) -> Result<(), CallError> {
        if self.peer.allows(feature) {
            return Ok(());
        }
        Err(match self.peer.negotiated().era() {
            Era::Modern => CallError::MissingCapability {
                required: required.as_object().cloned().unwrap_or_default(),
            },
            // The client's request was valid; this server cannot finish it
            // on this connection, which is the server's failure.
            Era::Legacy => ExchangeError::NotNegotiated(feature).into(),
        })
    }

    /// Notes the question `key` among this 2026-07-28 round's input
    /// requests.
    fn note(&self, key: &str, method: &str, params: Value) -> Result<(), CallError> {
        let mut request = JsonObject::new();
        request.insert("method".to_owned(), json!(method));
        request.insert("params".to_owned(), params);
        let mut asked = self
            .asked
            .lock()
            .map_err(|_| CallError::internal("input bookkeeping poisoned"))?;
        asked
            .requests
            .insert(key.to_owned(), Value::Object(request));
        Ok(())
    }

    /// The end of this 2026-07-28 round: every question noted, and the
    /// state in force, which goes out again even when this round kept
    /// nothing new, or the round after would start from nothing.
    fn round(&self) -> Result<CallError, CallError> {
        let requests = self
            .asked
            .lock()
            .map_err(|_| CallError::internal("input bookkeeping poisoned"))?
            .requests
            .clone();
        Ok(CallError::input_required(requests, self.state()))
    }

    /// Sends the client `method` (on behalf of the task `task`, if asked
    /// from one) and waits for its answer: as a task of the client's where
    /// it declared that it runs `method` as one (see [`client_tasks`]),
    /// else as a plain request.
    async fn exchange(
        &self,
        task: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, ExchangeError> {
        let declared = &self.ctx.client_capabilities;
        let exchange = self.peer.exchange();
        if Feature::Tasks.exists_at(self.peer.negotiated())
            && client_tasks::runs_as_task(declared, method)
        {
            let asking = client_tasks::Asking {
                exchange,
                on_behalf_of: task,
                cancel: client_tasks::cancels(declared),
            };
            return asking.ask(method, params).await;
        }
        match task {
            Some(task) => exchange.exchange_for_task_dyn(task, method, params).await,
            None => exchange.exchange_dyn(method, params).await,
        }
    }

    /// Asks `method` of the client for the task `task`.
    ///
    /// A 2025-11-25 task asks the way its session always could, with a
    /// request of its own tagged with the task (`related-task`), and is
    /// `input_required` until the answer comes. A 2026-07-28 task has no
    /// back channel: the question is parked on the task, where `tasks/get`
    /// shows it, until `tasks/update` answers it.
    async fn ask_in_task(
        &self,
        task: &TaskRef,
        key: &str,
        method: &str,
        params: Value,
    ) -> Result<Value, CallError> {
        match self.peer.negotiated().era() {
            Era::Legacy => {
                let mut params = with_input_key(params, key);
                if let (Value::Object(params), Value::Object(related)) =
                    (&mut params, wire::related_meta(&task.id))
                {
                    let meta = params
                        .entry("_meta")
                        .or_insert_with(|| Value::Object(JsonObject::new()));
                    if let Value::Object(meta) = meta {
                        meta.extend(related);
                    }
                }
                // Counted while out; a handler that stops waiting uncounts it.
                let asking = task.tasks.asking(task).await;
                let answer = self.exchange(Some(&task.id), method, params).await;
                asking.done().await;
                Ok(answer?)
            }
            Era::Modern => {
                let request = json!({ "method": method, "params": params });
                task.tasks
                    .ask(task, key, request)
                    .await
                    .ok_or_else(|| CallError::internal("the task ended before it was answered"))
            }
        }
    }

    /// Asks several questions in one round, answering all of them at once.
    ///
    /// In 2026-07-28 every unanswered question goes out in the same
    /// `InputRequiredResult`; in the legacy era they are asked in order.
    ///
    /// # Errors
    ///
    /// As [`Self::elicit`], each answer checked as the method asking it
    /// has it checked.
    pub async fn ask_all(&self, questions: Vec<Question>) -> Result<Vec<Value>, CallError> {
        let methods: Vec<&'static str> = questions.iter().map(Question::method).collect();
        let era = self.peer.negotiated().era();
        let answers = self.ask_all_unchecked(questions).await?;
        methods
            .into_iter()
            .zip(answers)
            .map(|(method, answer)| checked(method, era, answer))
            .collect()
    }

    /// [`Self::ask_all`], the answers not checked: for a forwarder, whose
    /// server reads them.
    pub(crate) async fn ask_all_unchecked(
        &self,
        questions: Vec<Question>,
    ) -> Result<Vec<Value>, CallError> {
        if self.peer.negotiated().era() == Era::Modern {
            if let Some(task) = self.running_task() {
                return self.ask_together_in_task(&task, questions).await;
            }
        }
        if self.peer.negotiated().era() == Era::Legacy || self.is_task() {
            // Asked together, as the client may answer them in any order
            // (a task's questions are all pending at once); the answers
            // come back in the order asked.
            return futures_util::future::try_join_all(
                questions.into_iter().map(|question| self.ask_one(question)),
            )
            .await;
        }
        // Every question not yet answered is noted, and the round ends
        // once, carrying them all: ended at each, it would copy the round
        // so far every time, and a thousand questions cost a million.
        let mut answers = Vec::with_capacity(questions.len());
        let mut missing = false;
        for question in questions {
            let (key, method, params, feature, required) = question.parts();
            if let Some(answer) = self.given(&key) {
                answers.push(answer);
                continue;
            }
            self.may_ask(feature, &required)?;
            self.note(&key, method, params)?;
            missing = true;
        }
        if missing {
            return Err(self.round()?);
        }
        Ok(answers)
    }
}

impl Call {
    /// In the legacy era, asks each of `questions` at once, each answered
    /// or refused on its own, in the order asked: one the client cannot be
    /// asked (a capability it did not declare) or refuses leaves the others
    /// asked.
    /// What a forwarder uses to put each of its server's questions to the
    /// client, so that each server request hears its own answer.
    ///
    /// In the 2026-07-28 era the questions are one round (or, in a task,
    /// parked together), as [`Self::ask_all`] has them: a question not yet
    /// answered makes every answer that round's error.
    pub async fn ask_each(&self, questions: Vec<Question>) -> Vec<Result<Value, CallError>> {
        if self.peer.negotiated().era() == Era::Modern {
            let count = questions.len();
            // A forwarder's questions are its server's, the answers its
            // server's to read: passed on as the client gave them.
            return match self.ask_all_unchecked(questions).await {
                Ok(answers) => answers.into_iter().map(Ok).collect(),
                Err(error) => vec![Err(error); count],
            };
        }
        futures_util::future::join_all(questions.into_iter().map(|q| self.ask_one(q))).await
    }

    /// A 2026-07-28 task's questions, parked on the task together, so that
    /// `tasks/get` shows them all at once; each answered already in the
    /// request is not asked again.
    async fn ask_together_in_task(
        &self,
        task: &TaskRef,
        questions: Vec<Question>,
    ) -> Result<Vec<Value>, CallError> {
        let mut answers: Vec<Option<Value>> = Vec::with_capacity(questions.len());
        let mut asked = Vec::new();
        for question in questions {
            let (key, method, params, feature, required) = question.parts();
            if let Some(answer) = self.given(&key) {
                answers.push(Some(answer));
                continue;
            }
            self.may_ask(feature, &required)?;
            asked.push((key, json!({ "method": method, "params": params })));
            answers.push(None);
        }
        if !asked.is_empty() {
            let mut given = task
                .tasks
                .ask_together(task, asked)
                .await
                .ok_or_else(|| CallError::internal("the task ended before it was answered"))?
                .into_iter();
            for slot in answers.iter_mut().filter(|slot| slot.is_none()) {
                *slot = given.next();
            }
        }
        Ok(answers.into_iter().flatten().collect())
    }

    async fn ask_one(&self, question: Question) -> Result<Value, CallError> {
        let (key, method, params, feature, required) = question.parts();
        self.ask(&key, method, params, feature, required).await
    }
}

/// `answer`, if it holds what every answer to `method` must (the members
/// its schema requires, of their types), so that a handler reading it finds
/// them; the call's error otherwise, naming what is wrong. Members beyond
/// those are the handler's to read as it likes. The error is the client's
/// in `era` 2026-07-28, where the answer is part of its request
/// (`inputResponses`, -32602), and the call's own in a legacy one, where it
/// came apart from the request (-32603).
fn checked(method: &str, era: Era, answer: Value) -> Result<Value, CallError> {
    let one_of = |value: Option<&Value>, allowed: &[&str]| {
        value
            .and_then(Value::as_str)
            .is_some_and(|v| allowed.contains(&v))
    };
    let object = answer.as_object();
    let wrong = match (method, object) {
        (_, None) => Some("it is not an object"),
        ("elicitation/create", Some(answer)) => {
            if !one_of(answer.get("action"), &["accept", "decline", "cancel"]) {
                Some("`action` is not accept, decline or cancel")
            } else if answer
                .get("content")
                .is_some_and(|c| !c.is_object() && !c.is_null())
            {
                Some("`content` is not an object")
            } else {
                None
            }
        }
        ("sampling/createMessage", Some(answer)) => {
            let content = answer.get("content");
            if !one_of(answer.get("role"), &["user", "assistant"]) {
                Some("`role` is not user or assistant")
            } else if !answer.get("model").is_some_and(Value::is_string) {
                Some("`model` is not a string")
            } else if !content.is_some_and(|c| c.is_object() || c.is_array()) {
                Some("`content` is neither a content block nor a list of them")
            } else {
                None
            }
        }
        ("roots/list", Some(answer)) => {
            let root = |r: &Value| r.get("uri").is_some_and(Value::is_string);
            match answer.get("roots").and_then(Value::as_array) {
                Some(roots) if roots.iter().all(root) => None,
                Some(_) => Some("a root has no `uri` string"),
                None => Some("`roots` is not a list"),
            }
        }
        _ => None,
    };
    let Some(wrong) = wrong else {
        return Ok(answer);
    };
    let why = format!("the client's answer to {method} is malformed: {wrong}");
    Err(match era {
        Era::Modern => Refusal::invalid_params(why).into(),
        Era::Legacy => CallError::internal(why),
    })
}

impl Question {
    /// The method that asks it.
    const fn method(&self) -> &'static str {
        match self {
            Self::Elicit { .. } => "elicitation/create",
            Self::Sample { .. } => "sampling/createMessage",
            Self::ListRoots { .. } => "roots/list",
        }
    }

    /// The question's key, method and params, the feature it needs and
    /// that feature as a capabilities object.
    fn parts(self) -> (String, &'static str, Value, Feature, Value) {
        match self {
            Self::Elicit { key, params } => {
                let url = params.get("mode").and_then(Value::as_str) == Some("url");
                let (feature, required) = if url {
                    (
                        Feature::ElicitationUrl,
                        json!({ "elicitation": { "url": {} } }),
                    )
                } else {
                    (Feature::Elicitation, json!({ "elicitation": {} }))
                };
                (key, "elicitation/create", params, feature, required)
            }
            Self::Sample { key, params } => (
                key,
                "sampling/createMessage",
                params,
                Feature::Sampling,
                json!({ "sampling": {} }),
            ),
            Self::ListRoots { key } => (
                key,
                "roots/list",
                json!({}),
                Feature::Roots,
                json!({ "roots": {} }),
            ),
        }
    }
}

/// One question for [`Call::ask_all`].
#[derive(Clone, Debug, PartialEq)]
pub enum Question {
    /// `elicitation/create` with these params.
    Elicit {
        /// The input key.
        key: String,
        /// The request params.
        params: Value,
    },
    /// `sampling/createMessage` with these params.
    Sample {
        /// The input key.
        key: String,
        /// The request params.
        params: Value,
    },
    /// `roots/list`.
    ListRoots {
        /// The input key.
        key: String,
    },
}
