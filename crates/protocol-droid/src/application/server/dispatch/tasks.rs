//! Calls run as tasks, and the task methods, in each era's form.
//!
//! Whether a `tools/call` becomes a task is decided here ([`task_plan`]):
//! by the client in 2025-11-25 (`params.task`), by the server in the
//! 2026-07-28 extension, for a tool whose `execution.taskSupport` allows it
//! either way. The runtime that runs and keeps tasks is
//! `application::server::tasks`; this module turns its records into each
//! era's answers.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use tokio::sync::oneshot;

use super::Connection;
use super::finish::write_tool_result;
use super::request::TaskRequest;
use crate::application::server::call::{Call, CallError, TaskMode};
use crate::application::server::change::Change;
use crate::application::server::forward::Forward;
use crate::application::server::registry::Handler;
use crate::application::server::reply::Reply;
use crate::application::server::tasks::{
    StatusNotifier, TaskOutcome, TaskRecord, TaskRef, Tasks, is_task_id, wire,
};
use crate::application::server::{BoxFuture, PeerSession, RequestContext};
use crate::domain::capability::TASKS_EXTENSION;
use crate::domain::feature::Feature;
use crate::domain::ir::member;
use crate::domain::ir::{JsonObject, ToolResult};
use crate::domain::jsonrpc::ErrorObject;
use crate::domain::{Capability, Era, Refusal};
use crate::wire::tasks::TaskStatus;
use crate::wire::tools::TaskSupport;

/// How many tasks one page of 2025-11-25 `tasks/list` holds.
const LIST_PAGE: usize = 50;

/// How a call runs as a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TaskPlan {
    /// The task starts with the call, kept this long (or the default).
    Now {
        /// The TTL the client asked for, in milliseconds (2025-11-25).
        ttl_ms: Option<u64>,
    },
    /// The handler asks its questions in the request first and starts the
    /// task itself (2026-07-28).
    AfterInput,
}

/// Whether the call of `name` runs as a task, and how; or why it cannot be
/// served at all.
///
/// # Errors
///
/// 2025-11-25: `-32601` for a task asked of a tool that never runs as one,
/// or a tool that only runs as one called without `task`; `-32602` for a
/// `task` that is not an object. 2026-07-28: `-32021` for a tool that only
/// runs as a task, called without the extension.
pub(super) fn task_plan(
    name: &str,
    support: TaskSupport,
    after_input: bool,
    params: &JsonObject,
    peer: &PeerSession,
) -> Result<Option<TaskPlan>, ErrorObject> {
    let version = peer.negotiated();
    match version.era() {
        // Revisions before 2025-11-25 have no tasks: every tool runs in the
        // request there, one that would only run as a task included (the
        // handler is the same). A server that declares no tasks ignores a
        // `task` asked for, as 2025-11-25 says it must.
        Era::Legacy
            if !Capability::ServerTasks.exists_at(version) || !peer.allows(Feature::Tasks) =>
        {
            Ok(None)
        }
        Era::Legacy => match (support, member(params, "task")) {
            (_, Some(task)) if !task.is_object() => {
                Err(Refusal::invalid_params("`task` must be an object").into())
            }
            (TaskSupport::Forbidden, Some(_)) => {
                Err(Refusal::method_not_found(format!("tool {name} does not run as a task")).into())
            }
            (TaskSupport::Required, None) => Err(Refusal::method_not_found(format!(
                "tool {name} only runs as a task: call it with `task`"
            ))
            .into()),
            // A TTL that is not a number of milliseconds is the client's
            // mistake to hear of, not one to replace with the default.
            (_, Some(task)) => match task.get("ttl") {
                None | Some(Value::Null) => Ok(Some(TaskPlan::Now { ttl_ms: None })),
                Some(ttl) => match milliseconds(ttl) {
                    Some(ttl_ms) => Ok(Some(TaskPlan::Now {
                        ttl_ms: Some(ttl_ms),
                    })),
                    None => Err(Refusal::invalid_params(
                        "`task.ttl` must be a number of milliseconds, not negative",
                    )
                    .into()),
                },
            },
            (_, None) => Ok(None),
        },
        // The server decides; a `task` param (2025-11-25's way of asking)
        // changes nothing here.
        Era::Modern => match (support, peer.allows(Feature::TasksExtension)) {
            (TaskSupport::Forbidden, _) | (TaskSupport::Optional, false) => Ok(None),
            (TaskSupport::Required, false) => Err(Refusal::MissingCapability {
                required: extension_required(),
            }
            .into()),
            (_, true) if after_input => Ok(Some(TaskPlan::AfterInput)),
            (_, true) => Ok(Some(TaskPlan::Now { ttl_ms: None })),
        },
    }
}

/// The capabilities a 2026-07-28 request must declare to use tasks.
fn extension_required() -> JsonObject {
    let mut extensions = JsonObject::new();
    extensions.insert(TASKS_EXTENSION.to_owned(), json!({}));
    let mut required = JsonObject::new();
    required.insert("extensions".to_owned(), Value::Object(extensions));
    required
}

/// The refusal of a task id the caller has no task under: the same for one
/// that never existed, one that expired and another caller's.
fn unknown_task(id: &str) -> ErrorObject {
    Refusal::invalid_params(format!("unknown task {id}")).into()
}

/// `CreateTaskResult` for `record`, in `era`'s form.
fn created(record: &TaskRecord, era: Era) -> Reply {
    Reply::Value(match era {
        Era::Legacy => wire::legacy_created(record),
        Era::Modern => wire::modern_created(record),
    })
}

/// What a task runs: the call, its result written for the revision of the
/// request that made the task.
pub(super) type TaskWork = BoxFuture<'static, Result<Value, CallError>>;

/// The forwarded `tools/call` of `params` as a task's work.
pub(super) fn forwarded_work(
    forward: Arc<dyn Forward>,
    params: JsonObject,
    call: Call,
) -> TaskWork {
    Box::pin(async move { forward.forward("tools/call", params, call).await })
}

/// Work's outcome as a task keeps it: a result, or the JSON-RPC error the
/// request would have been answered with.
fn task_result(outcome: Result<Value, CallError>) -> Result<Value, ErrorObject> {
    match outcome {
        Ok(result) => Ok(result),
        Err(CallError::Protocol(error)) => Err(error),
        Err(CallError::MissingCapability { required }) => {
            Err(Refusal::MissingCapability { required }.into())
        }
        // A task's questions park the task; a round built by hand has no
        // request to answer it with.
        Err(CallError::InputRequired(_)) => Err(Refusal::internal(
            "the task's handler asked for input in a form only a request can carry",
        )
        .into()),
    }
}

/// Sets the mode a call runs in.
fn set_mode(mode: &std::sync::Mutex<TaskMode>, to: TaskMode) {
    if let Ok(mut mode) = mode.lock() {
        *mode = to;
    }
}

impl Connection {
    /// Whose tasks `ctx`'s request makes and reads: see [`Tasks::owner_of`].
    ///
    /// A session shared between instances is named by a digest of its
    /// `Mcp-Session-Id`, which every instance serving it knows; a digest,
    /// so the id is not copied into every task's record and every message
    /// telling of it. Any other is named by the number this process gave
    /// it, after a random name of the process's: the number alone would
    /// name another session's tasks in a store that outlives the process or
    /// is shared with others (an HTTP+SSE session's, with `--store`).
    pub(super) fn task_owner(&self, ctx: &RequestContext) -> String {
        match self.shared_as.get() {
            Some(name) => {
                let mut session = String::from("shared:");
                for byte in Sha256::digest(name.as_bytes()) {
                    let _infallible = write!(session, "{byte:02x}");
                }
                Tasks::owner_of(ctx, &session)
            }
            None => Tasks::owner_of(ctx, &format!("{}:{}", process_name(), self.session.get())),
        }
    }

    /// Cancels and forgets the tasks this session made without a token:
    /// they are the session's alone (see [`Tasks::owner_of`]), so once it
    /// ends nobody can read, answer or cancel them, and they would run on
    /// unread, holding their network's places, and their results be kept
    /// unread, until their TTL. Not for a session
    /// shared between instances, which lives on where another serves it,
    /// nor for tasks made with a token, which their principal reads from
    /// any session.
    pub(super) fn stop_session_tasks(&self) {
        // Nothing of this session's here: nothing to look for.
        if self.shared_as.get().is_some() || !self.made_tasks.load(Ordering::Acquire) {
            return;
        }
        let owner = Tasks::session_owner(&format!("{}:{}", process_name(), self.session.get()));
        let tasks = Arc::clone(self.server.tasks());
        let running = tasks.running_of(&owner);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            tasks
                .forget_all(&owner, running, "cancelled: its session ended")
                .await;
        });
    }

    /// Runs the call of the registered tool `handler` as a task, as `plan`
    /// says.
    pub(super) async fn call_tool_as_task(
        &self,
        handler: Handler<ToolResult>,
        plan: TaskPlan,
        arguments: JsonObject,
        params: &JsonObject,
        ctx: Box<RequestContext>,
        peer: PeerSession,
    ) -> Result<Reply, ErrorObject> {
        let version = peer.negotiated();
        let call = Call::new(*ctx, peer, arguments).tasked();
        let server = self.server.clone();
        let handled = handler(call.clone());
        let work: TaskWork = Box::pin(async move {
            let result = handled.await?;
            write_tool_result(&server, result, version).map(Reply::into_value)
        });
        match self.run_task(plan, call.clone(), work).await {
            Ok(reply) => Ok(reply),
            // Ended in the request, asking for input or refused: answered
            // as any call is.
            Err(error) => {
                let era = version.era();
                let remote = call.ctx.remote_addr;
                self.outcome(Err(error), "tools/call", params, call.caller(), remote, era)
                    .map(Reply::Value)
            }
        }
    }

    /// Runs `work`, the work of `call`, as a task, as `plan` says: answers
    /// with the task (`CreateTaskResult`), or, for work that asks first and
    /// never starts one, with what it ended with in the request.
    ///
    /// # Errors
    ///
    /// The task could not be made, or the work ended in the request with an
    /// error or a round of questions.
    pub(super) async fn run_task(
        &self,
        plan: TaskPlan,
        call: Call,
        mut work: TaskWork,
    ) -> Result<Reply, CallError> {
        let era = call.peer().negotiated().era();
        let tasks = Arc::clone(self.server.tasks());
        let owner = self.task_owner(&call.ctx);
        let network = Tasks::network_of_session(&call.ctx);
        let Some(mode) = call.task_mode() else {
            return Err(CallError::internal(
                "a call run as a task was not made for one",
            ));
        };
        // The handler holds its own clone; this one must not keep the call
        // (and what it holds of the request) alive for the task's life.
        drop(call);
        let ttl_ms = match plan {
            TaskPlan::Now { ttl_ms } => ttl_ms,
            TaskPlan::AfterInput => {
                let (signal, mut starting) = oneshot::channel::<oneshot::Sender<()>>();
                set_mode(&mode, TaskMode::Starting(signal));
                tokio::select! {
                    biased;
                    // Ended in the request: a round of questions, or a
                    // result that never needed a task.
                    outcome = &mut work => return outcome.map(Reply::Value),
                    Ok(started) = &mut starting => {
                        // Should the task not be made, the work is dropped
                        // where it waits, and the request says why.
                        let record = tasks
                            .create(owner.clone(), network, None, None)
                            .await
                            .map_err(Refusal::from)?;
                        set_mode(&mode, running(&tasks, owner, &record));
                        let _resumed = started.send(());
                        tasks.start(&record, Box::pin(async move { task_result(work.await) }));
                        return Ok(created(&record, era));
                    }
                }
            }
        };
        let record = tasks
            .create(owner.clone(), network, ttl_ms, self.status_notifier(era))
            .await
            .map_err(Refusal::from)?;
        set_mode(&mode, running(&tasks, owner, &record));
        tasks.start(&record, Box::pin(async move { task_result(work.await) }));
        Ok(created(&record, era))
    }

    /// What tells this connection's legacy session of a task's changes
    /// (`notifications/tasks/status`, on the session's own queue); `None`
    /// in 2026-07-28, whose listeners hear them on `subscriptions/listen`.
    fn status_notifier(&self, era: Era) -> Option<StatusNotifier> {
        if era != Era::Legacy {
            return None;
        }
        // Weak: the server holds the task runtime, which holds this.
        let server = Arc::downgrade(&self.server.inner);
        let session = self.session;
        // Held for as long as the runtime keeps this, that is while the task
        // runs here: the session is in use till then.
        let running = Running::start(&self.tasks_running);
        self.made_tasks.store(true, Ordering::Release);
        Some(Arc::new(move |record: &TaskRecord| {
            let _running = &running;
            let Some(inner) = server.upgrade() else {
                return;
            };
            let Ok(params) = serde_json::to_value(wire::legacy_task(record)) else {
                return;
            };
            // A full queue drops it: a client polls.
            let _queued = inner
                .targets
                .send(session, Change::TaskStatus { session, params });
        }))
    }

    /// Whether a 2025-11-25 task of this connection's session runs in this
    /// process: a transport keeps such a session, however long since its
    /// client's last request, so that the task's statuses still reach it.
    #[must_use]
    pub fn runs_tasks(&self) -> bool {
        self.tasks_running.load(Ordering::Acquire) > 0
    }

    /// A task method of a 2025-11-25 session.
    pub(super) async fn legacy_task_request(
        &self,
        request: TaskRequest,
        ctx: &RequestContext,
    ) -> Result<Reply, ErrorObject> {
        // Not declared, not served: tasks are a capability of their own.
        if !self.server.offers_tasks() {
            return Err(Refusal::method_not_found("this server runs no tasks").into());
        }
        let tasks = self.server.tasks();
        let owner = self.task_owner(ctx);
        let unavailable = |e| ErrorObject::from(Refusal::from(e));
        let task = |record: &TaskRecord| {
            serde_json::to_value(wire::legacy_task(record))
                .map_err(|e| ErrorObject::from(Refusal::internal(e.to_string())))
        };
        let answer = match request {
            TaskRequest::Get(id) => match tasks.get(&owner, &id).await.map_err(unavailable)? {
                Some(record) => task(&record)?,
                None => return Err(unknown_task(&id)),
            },
            TaskRequest::Result(id) => {
                let Some(record) = tasks.ended(&owner, &id).await.map_err(unavailable)? else {
                    return Err(unknown_task(&id));
                };
                return match record.outcome {
                    Some(TaskOutcome::Result(Value::Object(mut result))) => {
                        let meta = result
                            .entry("_meta")
                            .or_insert_with(|| Value::Object(JsonObject::new()));
                        if let (Value::Object(meta), Value::Object(related)) =
                            (meta, wire::related_meta(&id))
                        {
                            meta.extend(related);
                        }
                        Ok(Reply::Value(Value::Object(result)))
                    }
                    Some(TaskOutcome::Result(other)) => Ok(Reply::Value(other)),
                    Some(TaskOutcome::Error(error)) => Err(error),
                    None => Err(Refusal::internal(format!(
                        "task {id} was {} before it produced a result",
                        status_word(record.status)
                    ))
                    .into()),
                };
            }
            TaskRequest::List(cursor) => {
                if cursor.as_deref().is_some_and(|c| !is_task_id(c)) {
                    return Err(Refusal::invalid_params("invalid cursor").into());
                }
                let (page, more) = tasks
                    .list(&owner, cursor.as_deref(), LIST_PAGE)
                    .await
                    .map_err(unavailable)?;
                let next = more.then(|| page.last().map(|r| r.id.clone())).flatten();
                let listed = page.iter().map(task).collect::<Result<Vec<_>, _>>()?;
                let mut result = JsonObject::new();
                result.insert("tasks".to_owned(), Value::Array(listed));
                if let Some(next) = next {
                    result.insert("nextCursor".to_owned(), json!(next));
                }
                Value::Object(result)
            }
            TaskRequest::Cancel(id) => {
                let Some(before) = tasks.get(&owner, &id).await.map_err(unavailable)? else {
                    return Err(unknown_task(&id));
                };
                // 2025-11-25: a task that already ended (before this, or
                // while it was being cancelled) cannot be cancelled.
                let ended = |record: &TaskRecord| -> ErrorObject {
                    Refusal::invalid_params(format!(
                        "task {id} has already ended ({})",
                        status_word(record.status)
                    ))
                    .into()
                };
                if before.is_terminal() {
                    return Err(ended(&before));
                }
                match tasks.cancel(&owner, &id).await.map_err(unavailable)? {
                    Some(record) if record.status == TaskStatus::Cancelled => task(&record)?,
                    Some(record) => return Err(ended(&record)),
                    None => return Err(unknown_task(&id)),
                }
            }
            TaskRequest::Update(_) => {
                return Err(Refusal::method_not_found(
                    "tasks/update is not a method of 2025-11-25",
                )
                .into());
            }
        };
        Ok(Reply::Value(answer))
    }

    /// A method of the 2026-07-28 tasks extension, for a request that
    /// declared it.
    pub(super) async fn extension_task_request(
        &self,
        request: TaskRequest,
        params: &JsonObject,
        ctx: &RequestContext,
        peer: &PeerSession,
    ) -> Result<Reply, ErrorObject> {
        if !peer.allows(Feature::TasksExtension) {
            return Err(Refusal::MissingCapability {
                required: extension_required(),
            }
            .into());
        }
        let tasks = self.server.tasks();
        let owner = self.task_owner(ctx);
        let unavailable = |e| ErrorObject::from(Refusal::from(e));
        // The acknowledgements are empty: the task's state is read with the
        // next `tasks/get`.
        let answer = match request {
            TaskRequest::Get(id) => match tasks.get(&owner, &id).await.map_err(unavailable)? {
                Some(record) => wire::detailed(&record),
                None => return Err(unknown_task(&id)),
            },
            TaskRequest::Cancel(id) => {
                match tasks.cancel(&owner, &id).await.map_err(unavailable)? {
                    Some(_) => json!({}),
                    None => return Err(unknown_task(&id)),
                }
            }
            TaskRequest::Update(id) => {
                let responses = member(params, "inputResponses")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                if !tasks
                    .answer(&owner, &id, responses)
                    .await
                    .map_err(unavailable)?
                {
                    return Err(unknown_task(&id));
                }
                json!({})
            }
            TaskRequest::Result(_) | TaskRequest::List(_) => {
                return Err(
                    Refusal::method_not_found("the tasks extension has no such method").into(),
                );
            }
        };
        Ok(Reply::Value(answer))
    }
}

/// A status as the wire names it.
fn status_word(status: TaskStatus) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|s| s.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The mode of a call running as the task `record` of `owner`'s.
fn running(tasks: &Arc<Tasks>, owner: String, record: &TaskRecord) -> TaskMode {
    TaskMode::Running(TaskRef {
        tasks: Arc::clone(tasks),
        owner,
        id: record.id.clone(),
    })
}

/// This process's name among all that keep tasks in one store, drawn once.
fn process_name() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(crate::application::random::unique_hex)
}

/// One task of a session counted while it runs: taken when it starts,
/// given back when the runtime lets go of what tells the session of it.
struct Running(Arc<AtomicUsize>);

impl Running {
    fn start(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(count))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `ttl` as milliseconds: any number not negative, a fraction rounded up
/// (`60000.0`, or `1100.0000000000002` from a float's arithmetic, as some
/// JSON writers put them); one past what a `u64` holds is that much (the
/// server caps it anyway).
fn milliseconds(ttl: &Value) -> Option<u64> {
    if let Some(ms) = ttl.as_u64() {
        return Some(ms);
    }
    let ms = ttl.as_f64().filter(|ms| ms.is_finite() && *ms >= 0.0)?;
    // Through a duration, which says when a float is past its range.
    Some(
        std::time::Duration::try_from_secs_f64(ms.ceil() / 1000.0).map_or(u64::MAX, |d| {
            u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
        }),
    )
}
