//! Calling a tool as a task, in whichever form the server runs tasks, and
//! polling it to its end.
//!
//! A 2025-11-25 server that declares `tasks.requests.tools.call` is asked
//! for a task with `params.task`; the client polls `tasks/get` at the
//! interval the task suggests and fetches the result with `tasks/result`
//! once the task ends or waits on the client (its questions then arrive as
//! requests of their own, which the [`ClientHandler`](super::ClientHandler)
//! answers as it answers any). A 2026-07-28 server that declares the
//! `io.modelcontextprotocol/tasks` extension is sent the call with the
//! extension declared; if it answers with a task, the client polls
//! `tasks/get` and answers the questions the task parks on with
//! `tasks/update`, through the same handler. A server with neither gets an
//! ordinary call.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::connection::{Client, RequestOptions, meta};
use super::error::ClientError;
use super::handler::answer;
use super::ops::{Reply, tool_call_params};
use crate::domain::capability::TASKS_EXTENSION;
use crate::domain::ir::{JsonObject, ToolResult};
use crate::domain::jsonrpc::ErrorObject;
use crate::domain::{Era, ProtocolVersion};
use crate::wire::tasks::TaskStatus;

/// The shortest and longest wait between two polls, whatever the task
/// suggests: a server cannot make a client spin, nor park it for hours.
const POLL_BOUNDS: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(5));

/// What a task said when it was last polled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskUpdate {
    /// The task.
    pub task_id: String,
    /// Where it is.
    pub status: TaskStatus,
    /// Its status message, if it gave one.
    pub message: Option<String>,
}

/// Hears each change of a task's status while it is polled.
pub type TaskStatusFn = Arc<dyn Fn(&TaskUpdate) + Send + Sync>;

/// How to call a tool as a task.
#[derive(Clone, Default)]
pub struct TaskOptions {
    /// How long the server should keep the task, in milliseconds
    /// (2025-11-25 asks; a 2026-07-28 server decides).
    pub ttl_ms: Option<u64>,
    /// Hears the task's status as it changes.
    pub on_status: Option<TaskStatusFn>,
    /// The options of each request made.
    pub request: RequestOptions,
}

impl core::fmt::Debug for TaskOptions {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TaskOptions")
            .field("ttl_ms", &self.ttl_ms)
            .field("on_status", &self.on_status.is_some())
            .field("request", &self.request)
            .finish()
    }
}

/// The form of tasks a server runs tool calls in, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// 2025-11-25's core tasks.
    Core,
    /// 2026-07-28's extension.
    Extension,
}

impl Client {
    /// Calls the tool `name` as a task if the server runs tasks, polling it
    /// to its end; as an ordinary call otherwise. The result is the tool's,
    /// as [`Self::call_tool`] answers it.
    ///
    /// # Errors
    ///
    /// [`ClientError`] as for any request; a task that failed is the error it
    /// failed with (`-32603` for a failed task that gave none), and a task
    /// cancelled by someone else is reported as such.
    pub async fn call_tool_as_task(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
        options: &TaskOptions,
    ) -> Result<Reply<ToolResult>, ClientError> {
        let mut params = tool_call_params(name, arguments);
        let raw = match self.task_form() {
            None => {
                self.request("tools/call", Some(Value::Object(params)), &options.request)
                    .await?
            }
            Some(Form::Core) => {
                let mut task = Map::new();
                if let Some(ttl) = options.ttl_ms {
                    task.insert("ttl".to_owned(), json!(ttl));
                }
                params.insert("task".to_owned(), Value::Object(task));
                let created = self
                    .request_once("tools/call", Some(Value::Object(params)), &options.request)
                    .await?;
                match created.pointer("/task/taskId").and_then(Value::as_str) {
                    Some(id) => {
                        let mut last = None;
                        if let Some(task) = created.get("task") {
                            self.heard(id, task, &mut last, options);
                        }
                        self.follow_core(id, last, options).await?
                    }
                    // The server ran it in the request after all.
                    None => created,
                }
            }
            Some(Form::Extension) => {
                let params = self.with_extension(params);
                let created = self
                    .request("tools/call", Some(params), &options.request)
                    .await?;
                let is_task = created.get("resultType").and_then(Value::as_str) == Some("task");
                match created.get("taskId").and_then(Value::as_str) {
                    Some(id) if is_task => {
                        let mut last = None;
                        self.heard(id, &created, &mut last, options);
                        self.follow_extension(id, last, options).await?
                    }
                    _ => created,
                }
            }
        };
        match serde_json::from_value(raw.clone()) {
            Ok(value) => Ok(Reply { value, raw }),
            Err(e) => Err(ClientError::InvalidResult {
                method: "tools/call".to_owned(),
                detail: e.to_string(),
            }),
        }
    }

    /// Cancels the task `id`.
    ///
    /// # Errors
    ///
    /// [`ClientError`] as for any request: the server knows no such task,
    /// or (2025-11-25) it has already ended.
    pub async fn cancel_task(&self, id: &str) -> Result<(), ClientError> {
        let params = match self.task_form() {
            Some(Form::Extension) => {
                let mut params = Map::new();
                params.insert("taskId".to_owned(), json!(id));
                self.with_extension(params)
            }
            _ => json!({ "taskId": id }),
        };
        self.request_once("tasks/cancel", Some(params), &RequestOptions::default())
            .await
            .map(drop)
    }

    /// The form of tasks the server runs tool calls in.
    fn task_form(&self) -> Option<Form> {
        let state = self.server()?;
        match state.version.era() {
            Era::Legacy => (state.version == ProtocolVersion::V2025_11_25
                && state.capabilities.runs_tool_calls_as_tasks())
            .then_some(Form::Core),
            Era::Modern => state
                .capabilities
                .declares_extension(TASKS_EXTENSION)
                .then_some(Form::Extension),
        }
    }

    /// `params` with the tasks extension declared among this client's
    /// capabilities, for this request only.
    fn with_extension(&self, mut params: Map<String, Value>) -> Value {
        let mut caps = match serde_json::to_value(self.capabilities()) {
            Ok(Value::Object(caps)) => caps,
            _ => Map::new(),
        };
        let extensions = caps
            .entry("extensions")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(extensions) = extensions {
            extensions.insert(TASKS_EXTENSION.to_owned(), json!({}));
        }
        let mut declared = Map::new();
        declared.insert(meta::CLIENT_CAPABILITIES.to_owned(), Value::Object(caps));
        params.insert("_meta".to_owned(), Value::Object(declared));
        Value::Object(params)
    }

    /// Polls a 2025-11-25 task until it ends or waits on the client, then
    /// reads its result with `tasks/result` (which waits for the end, while
    /// the task's questions reach the handler as requests).
    async fn follow_core(
        &self,
        id: &str,
        mut last: Option<TaskUpdate>,
        options: &TaskOptions,
    ) -> Result<Value, ClientError> {
        let began = Instant::now();
        loop {
            let task = self
                .request_once("tasks/get", Some(json!({ "taskId": id })), &options.request)
                .await?;
            let (status, interval) = self.heard(id, &task, &mut last, options);
            if status == TaskStatus::Working {
                self.unless_overdue(id, &task, began).await?;
            }
            if matches!(
                status,
                TaskStatus::InputRequired
                    | TaskStatus::Completed
                    | TaskStatus::Failed
                    | TaskStatus::Cancelled
            ) {
                break;
            }
            tokio::time::sleep(interval).await;
        }
        let mut result = self
            .request_once(
                "tasks/result",
                Some(json!({ "taskId": id })),
                &options.request,
            )
            .await?;
        // The result is the call's own; which task carried it is not part
        // of it.
        if let Some(Value::Object(meta)) = result.get_mut("_meta") {
            meta.remove("io.modelcontextprotocol/related-task");
            if meta.is_empty() {
                if let Value::Object(result) = &mut result {
                    result.remove("_meta");
                }
            }
        }
        Ok(result)
    }

    /// Polls a 2026-07-28 task to its end, answering the questions it
    /// parks on with `tasks/update`.
    async fn follow_extension(
        &self,
        id: &str,
        mut last: Option<TaskUpdate>,
        options: &TaskOptions,
    ) -> Result<Value, ClientError> {
        let mut answered = std::collections::HashSet::new();
        let began = Instant::now();
        loop {
            let mut params = Map::new();
            params.insert("taskId".to_owned(), json!(id));
            let task = self
                .request_once(
                    "tasks/get",
                    Some(self.with_extension(params)),
                    &options.request,
                )
                .await?;
            let (status, interval) = self.heard(id, &task, &mut last, options);
            if matches!(status, TaskStatus::Working | TaskStatus::InputRequired) {
                self.unless_overdue(id, &task, began).await?;
            }
            match status {
                TaskStatus::Completed => {
                    return task
                        .get("result")
                        .cloned()
                        .ok_or_else(|| ClientError::InvalidResult {
                            method: "tasks/get".to_owned(),
                            detail: "a completed task without its result".to_owned(),
                        });
                }
                TaskStatus::Failed | TaskStatus::Cancelled => return Err(ended(id, status, &task)),
                TaskStatus::InputRequired => {
                    let responses = self.answers(&task, &mut answered).await?;
                    if !responses.is_empty() {
                        let mut params = Map::new();
                        params.insert("taskId".to_owned(), json!(id));
                        params.insert("inputResponses".to_owned(), Value::Object(responses));
                        self.request_once(
                            "tasks/update",
                            Some(self.with_extension(params)),
                            &options.request,
                        )
                        .await?;
                        continue;
                    }
                }
                TaskStatus::Working => {}
            }
            tokio::time::sleep(interval).await;
        }
    }

    /// The handler's answers to the questions a task waits on that were not
    /// answered before (keys are the task's for its whole life).
    async fn answers(
        &self,
        task: &Value,
        answered: &mut std::collections::HashSet<String>,
    ) -> Result<Map<String, Value>, ClientError> {
        let handler = self.options().handler.as_ref();
        let mut responses = Map::new();
        let Some(Value::Object(requests)) = task.get("inputRequests") else {
            return Ok(responses);
        };
        for (key, request) in requests {
            if answered.contains(key) {
                continue;
            }
            let method = request
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let answer = answer(handler, method, request.get("params").cloned())
                .await
                .map_err(ClientError::Server)?;
            answered.insert(key.clone());
            responses.insert(key.clone(), answer);
        }
        Ok(responses)
    }

    /// [`overdue`]; a task given up on is cancelled as it is left (as far
    /// as the server will, within a moment), so it does not run on unseen.
    async fn unless_overdue(
        &self,
        id: &str,
        task: &Value,
        began: Instant,
    ) -> Result<(), ClientError> {
        let Err(error) = overdue(id, task, began) else {
            return Ok(());
        };
        let cancelling = tokio::time::timeout(POLL_BOUNDS.1, self.cancel_task(id)).await;
        if !matches!(cancelling, Ok(Ok(_))) {
            tracing::debug!(task = %id.escape_debug(), "a task given up on could not be cancelled");
        }
        Err(error)
    }

    /// Reads a polled task's status and the wait before the next poll,
    /// telling the caller of a change.
    fn heard(
        &self,
        id: &str,
        task: &Value,
        last: &mut Option<TaskUpdate>,
        options: &TaskOptions,
    ) -> (TaskStatus, Duration) {
        let status = task
            .get("status")
            .cloned()
            .and_then(|s| serde_json::from_value(s).ok())
            .unwrap_or(TaskStatus::Working);
        let update = TaskUpdate {
            task_id: id.to_owned(),
            status,
            message: task
                .get("statusMessage")
                .and_then(Value::as_str)
                .map(str::to_owned),
        };
        if last.as_ref() != Some(&update) {
            if let Some(on_status) = &options.on_status {
                on_status(&update);
            }
            *last = Some(update);
        }
        let suggested = task
            .get("pollIntervalMs")
            .or_else(|| task.get("pollInterval"))
            .and_then(Value::as_u64)
            .map_or(POLL_BOUNDS.0 * 10, Duration::from_millis);
        (status, suggested.clamp(POLL_BOUNDS.0, POLL_BOUNDS.1))
    }
}

/// Refuses to follow a task further once it has outlived the time its
/// server keeps it (`ttl`, counted from when the client first polled it,
/// with the longest poll's slack): a task that still says it runs then is
/// not one the server keeps, and a server that says so forever would
/// otherwise be polled forever. A task kept without limit (`ttl` null) is
/// followed until it ends or the caller gives up.
fn overdue(id: &str, task: &Value, began: Instant) -> Result<(), ClientError> {
    let ttl = task
        .get("ttlMs")
        .or_else(|| task.get("ttl"))
        .and_then(Value::as_u64);
    match ttl {
        Some(ttl) if began.elapsed() > Duration::from_millis(ttl) + POLL_BOUNDS.1 => {
            Err(ClientError::InvalidResult {
                method: "tasks/get".to_owned(),
                detail: format!(
                    "task {id} still runs past the {ttl} ms its server keeps it for; it is no longer followed"
                ),
            })
        }
        _ => Ok(()),
    }
}

/// The error a task that did not complete ended with.
fn ended(id: &str, status: TaskStatus, task: &Value) -> ClientError {
    let fallback = || {
        let why = if status == TaskStatus::Cancelled {
            "was cancelled"
        } else {
            "failed"
        };
        ErrorObject::new(
            crate::domain::jsonrpc::ErrorCode::INTERNAL_ERROR,
            format!("task {id} {why}"),
        )
    };
    let error = task
        .get("error")
        .cloned()
        .and_then(|e| serde_json::from_value::<ErrorObject>(e).ok())
        .unwrap_or_else(fallback);
    ClientError::Server(error)
}
