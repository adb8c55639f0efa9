//! Tasks a 2025-11-25 server asks this client to run.
//!
//! A client whose handler declares `tasks.requests.elicitation.create` (or
//! `tasks.requests.sampling.createMessage`) takes such a request carrying
//! `params.task` as a task: it answers at once with the task, working, and
//! the handler answers meanwhile, however long a person takes. The server
//! polls with `tasks/get`, fetches the answer with `tasks/result` (which
//! waits for the end), lists with `tasks/list` and stops one with
//! `tasks/cancel`. A request without `params.task`, or of a kind the
//! handler did not declare, is answered in the request, as before.
//!
//! Bounded: at most [`MAX_OWN_TASKS`] are kept, the oldest ended one making
//! room for a new one; with none ended, a request is answered in the request
//! (a server takes a direct answer at its word). Each is kept for its TTL
//! (at most [`MAX_TTL`]), then forgotten and stopped if it still runs; a
//! `tasks/result` waits no longer than that either. Every handler still
//! running stops when the connection closes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::handler::{ClientHandler, answer as answer_with};
use crate::domain::Refusal;
use crate::domain::ir::JsonObject;
use crate::domain::jsonrpc::ErrorObject;
use crate::wire::ClientCapabilities;
use crate::wire::tasks::{ListTasksResult, Task, TaskIdParams, TaskMetadata, TaskStatus};

/// How many of the server's tasks a client keeps at once.
pub const MAX_OWN_TASKS: usize = 64;

/// The longest a task is kept, whatever TTL the server asks for.
pub const MAX_TTL: Duration = Duration::from_secs(60 * 60);

/// The shortest a task is kept, whatever TTL the server asks for: one of
/// none would be gone before the first poll.
const MIN_TTL: Duration = Duration::from_secs(1);

/// How long a task is kept when the server names no TTL.
const DEFAULT_TTL: Duration = Duration::from_secs(10 * 60);

/// The polling interval suggested to the server: a person answers in
/// seconds, not milliseconds.
const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// The `_meta` key tying a result to its task.
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// The tasks a server asked this client to run.
#[derive(Debug, Default)]
pub(super) struct OwnTasks {
    tasks: Mutex<HashMap<String, Own>>,
}

/// One task and how it stands.
#[derive(Debug)]
struct Own {
    created_ms: u64,
    updated_ms: u64,
    ttl_ms: u64,
    /// When it is forgotten: on the runtime's clock, which no change of
    /// the wall clock moves.
    expires: Instant,
    /// Where it is; watched by `tasks/result`.
    status: watch::Sender<TaskStatus>,
    /// The handler's answer, once it ended.
    outcome: Option<Result<Value, ErrorObject>>,
    /// Stops the handler.
    abort: Option<AbortHandle>,
}

impl Own {
    fn wire(&self, id: &str) -> Task {
        Task {
            task_id: id.to_owned(),
            status: *self.status.borrow(),
            status_message: None,
            created_at: timestamp(self.created_ms),
            last_updated_at: timestamp(self.updated_ms),
            ttl: Some(self.ttl_ms),
            poll_interval: Some(millis(POLL_INTERVAL)),
            meta: None,
            extra: JsonObject::new(),
        }
    }

    fn ended(&self) -> bool {
        matches!(
            *self.status.borrow(),
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }
}

impl Drop for OwnTasks {
    fn drop(&mut self) {
        self.stop_all();
    }
}

impl OwnTasks {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Own>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stops every handler still running and forgets every task: the
    /// connection has closed, and nobody is left to poll them.
    pub(super) fn stop_all(&self) {
        for (_, mut own) in self.lock().drain() {
            if let Some(abort) = own.abort.take() {
                abort.abort();
            }
        }
    }

    /// Takes the request `method` with `params` as a task, if it asks for
    /// one, `capabilities` (the client's) declare that the client runs such
    /// requests as tasks, and there is room: its `CreateTaskResult`, the
    /// handler running meanwhile. `Err` gives the params back, to be
    /// answered in the request.
    pub(super) fn start(
        self: &Arc<Self>,
        capabilities: &ClientCapabilities,
        handler: &Arc<dyn ClientHandler>,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, Option<Value>> {
        if !runs_as_task(capabilities, method) {
            return Err(params);
        }
        let Some(Value::Object(mut params)) = params else {
            return Err(params);
        };
        let Some(asked) = params.remove("task") else {
            return Err(Some(Value::Object(params)));
        };
        let ttl = serde_json::from_value::<TaskMetadata>(asked)
            .ok()
            .and_then(|task| task.ttl)
            .map_or(DEFAULT_TTL, Duration::from_millis)
            .clamp(MIN_TTL, MAX_TTL);
        let now = now_ms();
        let mut tasks = self.lock();
        forget_expired(&mut tasks);
        if tasks.len() >= MAX_OWN_TASKS && !forget_oldest_ended(&mut tasks) {
            return Err(Some(Value::Object(params)));
        }
        // Unguessable; unique without entropy.
        let id = crate::application::random::unique_hex();
        // Spawned under the table's lock, so the handler's end, which takes
        // it, always finds its entry.
        let running = {
            let (own, handler, method, id) = (
                Arc::downgrade(self),
                Arc::clone(handler),
                method.to_owned(),
                id.clone(),
            );
            tokio::spawn(async move {
                let outcome =
                    answer_with(handler.as_ref(), &method, Some(Value::Object(params))).await;
                if let Some(own) = own.upgrade() {
                    own.end(&id, outcome);
                }
            })
        };
        let (status, _) = watch::channel(TaskStatus::Working);
        let own = Own {
            created_ms: now,
            updated_ms: now,
            ttl_ms: millis(ttl),
            expires: Instant::now() + ttl,
            status,
            outcome: None,
            abort: Some(running.abort_handle()),
        };
        let created = own.wire(&id);
        let _fresh = tasks.insert(id, own);
        Ok(json!({ "task": created }))
    }

    /// Records how the task `id` ended, unless it was cancelled first.
    fn end(&self, id: &str, outcome: Result<Value, ErrorObject>) {
        let mut tasks = self.lock();
        let Some(own) = tasks.get_mut(id) else {
            return;
        };
        if own.ended() {
            return;
        }
        let status = if outcome.is_ok() {
            TaskStatus::Completed
        } else {
            TaskStatus::Failed
        };
        own.outcome = Some(outcome);
        own.updated_ms = now_ms();
        own.abort = None;
        own.status.send_replace(status);
    }

    /// Whether `method` is one of the requests a server makes of the tasks
    /// it asked for, which this client serves once it declared `tasks`.
    pub(super) fn serves(capabilities: &ClientCapabilities, method: &str) -> bool {
        capabilities.tasks.is_some()
            && matches!(
                method,
                "tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel"
            )
    }

    /// Answers `tasks/get`, `tasks/result`, `tasks/list` or `tasks/cancel`.
    pub(super) async fn answer(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, ErrorObject> {
        if method == "tasks/list" {
            return self.list();
        }
        let id = serde_json::from_value::<TaskIdParams>(params.unwrap_or(Value::Null))
            .map_err(|e| ErrorObject::from(Refusal::invalid_params(e.to_string())))?
            .task_id;
        match method {
            "tasks/get" => self.read(&id, |own| to_value(&own.wire(&id))),
            "tasks/cancel" => self.cancel(&id),
            _ => self.result(&id).await,
        }
    }

    /// Reads the task `id` with `read`, or says it is unknown.
    fn read<T>(
        &self,
        id: &str,
        read: impl FnOnce(&mut Own) -> Result<T, ErrorObject>,
    ) -> Result<T, ErrorObject> {
        let mut tasks = self.lock();
        forget_expired(&mut tasks);
        tasks.get_mut(id).map_or_else(|| Err(unknown(id)), read)
    }

    fn list(&self) -> Result<Value, ErrorObject> {
        let mut tasks = self.lock();
        forget_expired(&mut tasks);
        let mut listed: Vec<(u64, Task)> = tasks
            .iter()
            .map(|(id, own)| (own.created_ms, own.wire(id)))
            .collect();
        listed.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.task_id.cmp(&b.1.task_id)));
        // Never more than fit in one page: the table is bounded.
        to_value(&ListTasksResult {
            tasks: listed.into_iter().map(|(_, task)| task).collect(),
            next_cursor: None,
            meta: None,
            extra: JsonObject::new(),
        })
    }

    fn cancel(&self, id: &str) -> Result<Value, ErrorObject> {
        self.read(id, |own| {
            if own.ended() {
                return Err(Refusal::invalid_params(format!(
                    "task {id} has ended and cannot be cancelled"
                ))
                .into());
            }
            if let Some(abort) = own.abort.take() {
                abort.abort();
            }
            own.updated_ms = now_ms();
            own.status.send_replace(TaskStatus::Cancelled);
            to_value(&own.wire(id))
        })
    }

    /// The task `id`'s answer, once it ended, tagged with the task.
    async fn result(&self, id: &str) -> Result<Value, ErrorObject> {
        let (mut status, expires) =
            self.read(id, |own| Ok((own.status.subscribe(), own.expires)))?;
        // Waited for without the table, which the handler's end takes, and
        // no longer than the task is kept: a handler that never answers
        // (a person who walked away) does not hold the request for ever.
        let ending = status.wait_for(|status| {
            matches!(
                status,
                TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
            )
        });
        let _end = tokio::time::timeout_at(expires, ending).await;
        self.read(id, |own| match own.outcome.clone() {
            Some(Ok(Value::Object(mut result))) => {
                let meta = result
                    .entry("_meta")
                    .or_insert_with(|| Value::Object(JsonObject::new()));
                if let Value::Object(meta) = meta {
                    meta.insert(RELATED_TASK.to_owned(), json!({ "taskId": id }));
                }
                Ok(Value::Object(result))
            }
            Some(Ok(other)) => Ok(other),
            Some(Err(error)) => Err(error),
            None => {
                Err(Refusal::internal(format!("task {id} was cancelled before it answered")).into())
            }
        })
    }
}

/// Whether `capabilities` declare that the client runs `method` as a task.
fn runs_as_task(capabilities: &ClientCapabilities, method: &str) -> bool {
    let Some(requests) = capabilities
        .tasks
        .as_ref()
        .and_then(|tasks| tasks.requests.as_ref())
    else {
        return false;
    };
    match method {
        "elicitation/create" => requests
            .elicitation
            .as_ref()
            .is_some_and(|e| e.create.is_some()),
        "sampling/createMessage" => requests
            .sampling
            .as_ref()
            .is_some_and(|s| s.create_message.is_some()),
        _ => false,
    }
}

/// Forgets the tasks past their TTL, stopping those that run.
fn forget_expired(tasks: &mut HashMap<String, Own>) {
    let now = Instant::now();
    tasks.retain(|_, own| {
        let kept = now < own.expires;
        if !kept {
            if let Some(abort) = own.abort.take() {
                abort.abort();
            }
        }
        kept
    });
}

/// Forgets the task that ended longest ago, to make room: whether there
/// was one.
fn forget_oldest_ended(tasks: &mut HashMap<String, Own>) -> bool {
    let oldest = tasks
        .iter()
        .filter(|(_, own)| own.ended())
        .min_by_key(|(_, own)| own.updated_ms)
        .map(|(id, _)| id.clone());
    oldest.is_some_and(|id| tasks.remove(&id).is_some())
}

fn unknown(id: &str) -> ErrorObject {
    Refusal::invalid_params(format!("unknown task {id}")).into()
}

fn to_value<T: serde::Serialize>(value: &T) -> Result<Value, ErrorObject> {
    serde_json::to_value(value).map_err(|e| Refusal::internal(e.to_string()).into())
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, millis)
}

/// `ms` since the Unix epoch in RFC 3339, as task times are written.
fn timestamp(ms: u64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms).saturating_mul(1_000_000))
        .ok()
        .and_then(|at| at.format(&Rfc3339).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use futures_util::future::BoxFuture;

    use super::*;
    use crate::domain::jsonrpc::ErrorCode;
    use crate::wire::{ElicitRequestParams, ElicitResult};

    /// Answers once `open` is set; says whether it was stopped first.
    #[derive(Debug, Default)]
    struct Waiting {
        open: tokio::sync::Notify,
        stopped: Arc<AtomicBool>,
    }

    struct Stopped(Arc<AtomicBool>, bool);

    impl Drop for Stopped {
        fn drop(&mut self) {
            if !self.1 {
                self.0.store(true, Ordering::SeqCst);
            }
        }
    }

    impl ClientHandler for Waiting {
        fn elicit(
            &self,
            _params: ElicitRequestParams,
        ) -> BoxFuture<'_, Result<ElicitResult, ErrorObject>> {
            Box::pin(async {
                let mut stopped = Stopped(Arc::clone(&self.stopped), false);
                self.open.notified().await;
                stopped.1 = true;
                serde_json::from_value(json!({ "action": "accept", "content": { "ok": true } }))
                    .map_err(|e| Refusal::internal(e.to_string()).into())
            })
        }
    }

    fn declaring() -> ClientCapabilities {
        serde_json::from_value(
            json!({ "elicitation": {}, "tasks": { "list": {}, "cancel": {},
            "requests": { "elicitation": { "create": {} } } } }),
        )
        .unwrap_or_default()
    }

    fn question(task: bool) -> Option<Value> {
        let mut params = json!({ "message": "ok?", "requestedSchema": { "type": "object",
            "properties": { "ok": { "type": "boolean" } } } });
        if let (true, Value::Object(params)) = (task, &mut params) {
            params.insert("task".to_owned(), json!({ "ttl": 60_000 }));
        }
        Some(params)
    }

    fn id_of(created: &Value) -> String {
        created
            .pointer("/task/taskId")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    }

    async fn ask(own: &OwnTasks, method: &str, id: &str) -> Result<Value, ErrorObject> {
        own.answer(method, Some(json!({ "taskId": id }))).await
    }

    /// A table with one question taken as a task: the table, the handler
    /// answering it, and the task created.
    fn started() -> Result<(Arc<OwnTasks>, Arc<Waiting>, Value), ErrorObject> {
        let own = Arc::new(OwnTasks::default());
        let waiting = Arc::new(Waiting::default());
        let handler: Arc<dyn ClientHandler> = waiting.clone();
        let created = own
            .start(&declaring(), &handler, "elicitation/create", question(true))
            .map_err(|_| Refusal::internal("not taken as a task"))?;
        Ok((own, waiting, created))
    }

    #[tokio::test]
    async fn a_question_asked_as_a_task_is_answered_through_it() -> Result<(), ErrorObject> {
        let (own, waiting, created) = started()?;
        assert_eq!(created.pointer("/task/status"), Some(&json!("working")));
        let id = id_of(&created);
        let got = ask(&own, "tasks/get", &id).await?;
        assert_eq!(got.get("status"), Some(&json!("working")));
        let listed = own.answer("tasks/list", None).await?;
        assert_eq!(listed.pointer("/tasks/0/taskId"), Some(&json!(id)));

        let result = {
            let own = Arc::clone(&own);
            let id = id.clone();
            tokio::spawn(async move { ask(&own, "tasks/result", &id).await })
        };
        tokio::task::yield_now().await;
        waiting.open.notify_one();
        let result = result
            .await
            .map_err(|e| Refusal::internal(e.to_string()))??;
        assert_eq!(result.pointer("/content/ok"), Some(&json!(true)));
        assert_eq!(
            result.pointer("/_meta/io.modelcontextprotocol~1related-task/taskId"),
            Some(&json!(id))
        );
        assert_eq!(
            ask(&own, "tasks/get", &id).await?.get("status"),
            Some(&json!("completed"))
        );
        assert!(ask(&own, "tasks/cancel", &id).await.is_err(), "ended");
        Ok(())
    }

    #[tokio::test]
    async fn a_cancelled_task_stops_its_handler_and_says_so() -> Result<(), ErrorObject> {
        let (own, waiting, created) = started()?;
        let id = id_of(&created);
        tokio::task::yield_now().await;
        let cancelled = ask(&own, "tasks/cancel", &id).await?;
        assert_eq!(cancelled.get("status"), Some(&json!("cancelled")));
        for _ in 0..100 {
            if waiting.stopped.load(Ordering::SeqCst) {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(
            waiting.stopped.load(Ordering::SeqCst),
            "the handler stopped"
        );
        assert!(ask(&own, "tasks/result", &id).await.is_err());
        assert!(ask(&own, "tasks/get", "nobody's").await.is_err(), "unknown");
        Ok(())
    }

    /// Fails every question it is asked.
    #[derive(Debug)]
    struct Failing;

    impl ClientHandler for Failing {
        fn elicit(
            &self,
            _params: ElicitRequestParams,
        ) -> BoxFuture<'_, Result<ElicitResult, ErrorObject>> {
            Box::pin(async { Err(Refusal::invalid_params("no person here").into()) })
        }
    }

    #[tokio::test]
    async fn a_failed_task_gives_its_error_and_an_ended_one_is_not_cancelled()
    -> Result<(), ErrorObject> {
        let own = Arc::new(OwnTasks::default());
        let handler: Arc<dyn ClientHandler> = Arc::new(Failing);
        let created = own
            .start(&declaring(), &handler, "elicitation/create", question(true))
            .map_err(|_| Refusal::internal("not taken as a task"))?;
        let id = id_of(&created);
        let failed = ask(&own, "tasks/result", &id).await.err();
        assert_eq!(failed.map(|e| e.code), Some(ErrorCode::INVALID_PARAMS));
        assert_eq!(
            ask(&own, "tasks/get", &id).await?.get("status"),
            Some(&json!("failed"))
        );
        let refused = ask(&own, "tasks/cancel", &id).await.err();
        assert_eq!(refused.map(|e| e.code), Some(ErrorCode::INVALID_PARAMS));
        Ok(())
    }

    /// Past its TTL a task is gone and its handler stopped, and a
    /// `tasks/result` waiting on it waits no longer.
    #[tokio::test(start_paused = true)]
    async fn a_task_past_its_ttl_is_gone_with_its_handler_and_its_waiter() -> Result<(), ErrorObject>
    {
        let own = Arc::new(OwnTasks::default());
        let waiting = Arc::new(Waiting::default());
        let handler: Arc<dyn ClientHandler> = waiting.clone();
        let mut params = question(false);
        if let Some(Value::Object(params)) = &mut params {
            params.insert("task".to_owned(), json!({ "ttl": 1_000 }));
        }
        let created = own
            .start(&declaring(), &handler, "elicitation/create", params)
            .map_err(|_| Refusal::internal("not taken as a task"))?;
        assert_eq!(created.pointer("/task/ttl"), Some(&json!(1_000)));
        let id = id_of(&created);
        let result = {
            let (own, id) = (Arc::clone(&own), id.clone());
            tokio::spawn(async move { ask(&own, "tasks/result", &id).await })
        };
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let waited = result.await.map_err(|e| Refusal::internal(e.to_string()))?;
        assert!(waited.is_err(), "the waiter let go: {waited:?}");
        assert!(ask(&own, "tasks/get", &id).await.is_err(), "forgotten");
        tokio::task::yield_now().await;
        assert!(
            waiting.stopped.load(Ordering::SeqCst),
            "the handler stopped"
        );
        Ok(())
    }

    #[tokio::test]
    async fn closing_stops_every_handler() {
        let own = Arc::new(OwnTasks::default());
        let waiting = Arc::new(Waiting::default());
        let handler: Arc<dyn ClientHandler> = waiting.clone();
        assert!(
            own.start(&declaring(), &handler, "elicitation/create", question(true))
                .is_ok()
        );
        tokio::task::yield_now().await;
        own.stop_all();
        for _ in 0..100 {
            if waiting.stopped.load(Ordering::SeqCst) {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(waiting.stopped.load(Ordering::SeqCst));
        assert_eq!(
            own.answer("tasks/list", None)
                .await
                .ok()
                .and_then(|l| l.get("tasks").cloned()),
            Some(json!([]))
        );
    }

    #[tokio::test]
    async fn what_is_not_asked_or_declared_or_has_no_room_is_answered_in_the_request() {
        let own = Arc::new(OwnTasks::default());
        let handler: Arc<dyn ClientHandler> = Arc::new(Waiting::default());
        let plain = own.start(
            &declaring(),
            &handler,
            "elicitation/create",
            question(false),
        );
        assert!(plain.is_err(), "no task asked for");
        let undeclared = own.start(
            &ClientCapabilities::default(),
            &handler,
            "elicitation/create",
            question(true),
        );
        assert!(undeclared.is_err(), "no task declared");
        let other = own.start(
            &declaring(),
            &handler,
            "sampling/createMessage",
            question(true),
        );
        assert!(other.is_err(), "sampling was not declared");
        for _ in 0..MAX_OWN_TASKS {
            assert!(
                own.start(&declaring(), &handler, "elicitation/create", question(true))
                    .is_ok()
            );
        }
        let full = own.start(&declaring(), &handler, "elicitation/create", question(true));
        let back = full.err().flatten();
        assert!(
            back.as_ref()
                .is_some_and(|p| p.get("task").is_none() && p.get("message").is_some()),
            "given back without the task, to be answered: {back:?}"
        );
    }

    #[tokio::test]
    async fn an_ended_task_makes_room_for_a_new_one() -> Result<(), ErrorObject> {
        let own = Arc::new(OwnTasks::default());
        let failing: Arc<dyn ClientHandler> = Arc::new(Failing);
        let ended = own
            .start(&declaring(), &failing, "elicitation/create", question(true))
            .map_err(|_| Refusal::internal("not taken as a task"))?;
        let ended = id_of(&ended);
        let _failed = ask(&own, "tasks/result", &ended).await;
        let waiting: Arc<dyn ClientHandler> = Arc::new(Waiting::default());
        for _ in 1..MAX_OWN_TASKS {
            assert!(
                own.start(&declaring(), &waiting, "elicitation/create", question(true))
                    .is_ok()
            );
        }
        assert!(
            own.start(&declaring(), &waiting, "elicitation/create", question(true))
                .is_ok(),
            "the ended one made room"
        );
        assert!(ask(&own, "tasks/get", &ended).await.is_err(), "and is gone");
        Ok(())
    }
}
