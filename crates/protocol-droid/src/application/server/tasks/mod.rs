//! Tasks: a request run in the background, polled for its status and
//! result, in both of the forms MCP has had.
//!
//! 2025-11-25 has tasks in its core: the client asks for one with
//! `params.task`, polls `tasks/get`, waits on `tasks/result`, lists and
//! cancels. 2026-07-28 moved them into the `io.modelcontextprotocol/tasks`
//! extension: the server decides, `tasks/get` carries the result or the
//! questions a task waits on, and `tasks/update` answers them. One runtime,
//! [`Tasks`], runs both: a tool handler is written once, as for any call,
//! and runs as a task in either era (see
//! [`ToolSpec::task_support`](super::ToolSpec::task_support)).
//!
//! What must outlive the request is a [`TaskRecord`] in a [`TaskStore`]
//! (`store`); what only this process has (the running handler and the
//! channels its answers arrive on) is kept here, beside it. Rendering a
//! record in each era's shape is `wire`'s.

mod listeners;
mod liveness;
pub(crate) mod store;
pub(crate) mod wire;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt as _;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::AbortHandle;

use super::shared::{EVERY_INSTANCE, Relay};
use super::{BoxFuture, RequestContext};
use crate::application::server::rate::network_of;
use crate::domain::ir::JsonObject;
use crate::domain::jsonrpc::{ErrorCode, ErrorObject};
use crate::domain::{Era, Refusal};
use crate::wire::tasks::TaskStatus;

use listeners::Listeners;
pub(crate) use listeners::TaskEvents;
use liveness::Liveness;
pub use store::{MemoryTaskStore, StoreBounds, TaskOutcome, TaskRecord, TaskStore, TaskStoreError};

/// How long tasks live and how often clients are told to poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskLimits {
    /// The TTL of a task whose request named none, in milliseconds.
    pub default_ttl_ms: u64,
    /// The longest TTL granted, in milliseconds; a longer one asked for is
    /// cut to this (and the task says so in its `ttl`).
    pub max_ttl_ms: u64,
    /// The polling interval suggested to clients, in milliseconds.
    pub poll_interval_ms: u64,
    /// How many tasks one caller may have running (not yet ended) in this
    /// process at once; how many it may keep, ended ones included, is the
    /// store's bound.
    pub running_per_owner: usize,
    /// How many tasks the anonymous 2025-11-25 sessions opened from one
    /// network (an address; an IPv6 one by its /64) may have running here
    /// together: each session is a caller of its own, and one address may
    /// open many.
    pub running_per_network: usize,
}

impl Default for TaskLimits {
    fn default() -> Self {
        Self {
            default_ttl_ms: 10 * 60 * 1000,
            max_ttl_ms: 60 * 60 * 1000,
            poll_interval_ms: 500,
            running_per_owner: 64,
            running_per_network: 256,
        }
    }
}

/// A change of one task's status, as listeners hear it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TaskEvent {
    /// The task as it now is.
    pub(crate) record: TaskRecord,
}

/// Tells the session that created a task of each change of its status
/// (2025-11-25 `notifications/tasks/status`).
pub(crate) type StatusNotifier = Arc<dyn Fn(&TaskRecord) + Send + Sync>;

/// The tasks of one server: its store, and the handlers running here.
pub(crate) struct Tasks {
    store: Arc<dyn TaskStore>,
    limits: TaskLimits,
    live: Mutex<HashMap<String, Live>>,
    /// Who hears of each change of status of a task run here (or told of
    /// by another instance), for `subscriptions/listen`: each owner's own.
    listeners: Arc<Listeners>,
    /// Held across each read-modify-write of a record, so a status change
    /// never writes over another made at the same time.
    writes: tokio::sync::Mutex<()>,
    /// The store and relay shared with other instances, once shared: the
    /// store in place of `store`.
    shared: std::sync::OnceLock<SharedTasks>,
    /// Where what other instances tell waits to be acted on, in order.
    heard: std::sync::OnceLock<mpsc::Sender<TaskMessage>>,
    /// This process's word that it runs its tasks, and what it heard of
    /// the others'.
    liveness: Arc<Liveness>,
}

/// How many messages from other instances wait to be acted on.
const HEARD_BACKLOG: usize = 1024;

/// How long a `tasks/update` for a task run by another instance waits for
/// that instance to take its answers before it is acknowledged anyway
/// (they were told; a busy instance takes them later).
const ANSWER_PATIENCE: Duration = Duration::from_secs(2);

/// What a runtime shares with the other instances of its server: where
/// every instance's tasks are kept, and what reaches the instance running
/// one, to answer or cancel it, and the instances whose clients listen for
/// its changes.
#[derive(Clone, Debug)]
pub(crate) struct SharedTasks {
    pub(crate) store: Arc<dyn TaskStore>,
    pub(crate) relay: Arc<dyn Relay>,
    pub(crate) instance: String,
}

/// What one instance tells the others of a task.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum TaskMessage {
    /// Cancelled elsewhere: stop its handler, if it runs here.
    Cancel {
        /// The task.
        id: String,
    },
    /// Answers to its questions, given elsewhere: deliver them, if it runs
    /// here.
    Answer {
        /// The task.
        id: String,
        /// Whose it is.
        owner: String,
        /// The answers, by key.
        responses: JsonObject,
    },
    /// Its status changed: tell whoever listens here.
    Changed {
        /// The task.
        id: String,
        /// Whose it is.
        owner: String,
    },
}

impl core::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let running = self.live.lock().map_or(0, |live| live.len());
        f.debug_struct("Tasks")
            .field("limits", &self.limits)
            .field("running", &running)
            .finish_non_exhaustive()
    }
}

/// What this process holds of a task it runs.
struct Live {
    /// Whose it is.
    owner: String,
    /// The network of the anonymous session it is, if it is one's.
    network: Option<IpAddr>,
    /// Stops the handler; `None` until it is started.
    abort: Option<AbortHandle>,
    /// The questions it waits on (2026-07-28), by key: where each answer
    /// goes.
    waiting: HashMap<String, oneshot::Sender<Value>>,
    /// Its status, for whoever waits for it to end (`tasks/result`).
    status: watch::Sender<TaskStatus>,
    /// The session to tell of its changes, if its form has notifications.
    notify: Option<StatusNotifier>,
    /// How many of its 2025-11-25 questions wait on the client now: the
    /// task is `input_required` until none does.
    asking: usize,
}

/// A new task's place in the table of those running here, taken back when
/// this is dropped still holding its id.
struct Placed<'a> {
    live: &'a Mutex<HashMap<String, Live>>,
    id: Option<String>,
}

impl Drop for Placed<'_> {
    fn drop(&mut self) {
        if let (Some(id), Ok(mut live)) = (self.id.take(), self.live.lock()) {
            live.remove(&id);
        }
    }
}

/// A task a handler runs as: what its questions are parked under.
#[derive(Clone)]
pub(crate) struct TaskRef {
    pub(crate) tasks: Arc<Tasks>,
    pub(crate) owner: String,
    pub(crate) id: String,
}

impl core::fmt::Debug for TaskRef {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TaskRef")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl From<TaskStoreError> for Refusal {
    fn from(error: TaskStoreError) -> Self {
        match error {
            // The caller's own bound: theirs to wait out, as a request they
            // may not make yet.
            TaskStoreError::OwnerFull(_) | TaskStoreError::NetworkFull(_) => {
                Self::invalid_request(error.to_string())
            }
            TaskStoreError::Full(_)
            | TaskStoreError::Unavailable(_)
            | TaskStoreError::TooLarge { .. }
            | TaskStoreError::BytesFull(_) => Self::internal(error.to_string()),
        }
    }
}

impl Tasks {
    /// A runtime keeping its tasks in `store`.
    #[must_use]
    pub(crate) fn new(store: Arc<dyn TaskStore>, limits: TaskLimits) -> Self {
        Self {
            store,
            limits,
            live: Mutex::default(),
            listeners: Arc::default(),
            writes: tokio::sync::Mutex::new(()),
            shared: std::sync::OnceLock::new(),
            heard: std::sync::OnceLock::new(),
            liveness: Arc::default(),
        }
    }

    /// Keeps tasks in `shared`'s store from now on, and tells the other
    /// instances what they must act on; set before any task is created.
    pub(crate) fn share(self: &Arc<Self>, shared: SharedTasks) {
        let runner = liveness::runner_name(&shared.instance);
        let store = Arc::clone(&shared.store);
        if self.shared.set(shared).is_err() {
            return;
        }
        self.liveness.named(runner);
        liveness::spawn_beat(store, Arc::downgrade(&self.liveness));
        // What the others tell is acted on in order, by one task: a status
        // heard late never overtakes a newer one.
        let (tx, mut heard) = mpsc::channel::<TaskMessage>(HEARD_BACKLOG);
        let _first = self.heard.set(tx);
        let tasks = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Some(message) = heard.recv().await {
                let Some(tasks) = tasks.upgrade() else {
                    return;
                };
                tasks.heard(message).await;
            }
        });
    }

    /// Queues what another instance told of a task, to be acted on in
    /// order; dropped, and logged, when too many wait.
    pub(crate) fn hear(&self, message: TaskMessage) {
        let Some(heard) = self.heard.get() else {
            return;
        };
        if heard.try_send(message).is_err() {
            tracing::warn!(target: "droid::tasks", "a task message from another instance was dropped: too many wait");
        }
    }

    /// Where the tasks are kept: the shared store once there is one.
    fn store(&self) -> &dyn TaskStore {
        match self.shared.get() {
            Some(shared) => shared.store.as_ref(),
            None => self.store.as_ref(),
        }
    }

    /// Tells the other instances `message`, when shared; on a task of its
    /// own, so no status change waits on the relay. At most once, like
    /// every relayed message: a task's record is in the store whatever
    /// becomes of it.
    fn tell(&self, message: &TaskMessage) {
        let Some(shared) = self.shared.get() else {
            return;
        };
        let text = serde_json::json!({ "from": shared.instance, "task": message }).to_string();
        let relay = Arc::clone(&shared.relay);
        tokio::spawn(async move {
            if let Err(error) = relay.send(EVERY_INSTANCE, &text).await {
                tracing::warn!(target: "droid::tasks", %error, "a task's change could not be told to the other instances");
            }
        });
    }

    /// Tells the other instances `message` and waits until the store took
    /// it: for what the caller is answered on (an answer, a cancellation).
    async fn tell_now(&self, message: &TaskMessage) -> Result<(), TaskStoreError> {
        let Some(shared) = self.shared.get() else {
            return Ok(());
        };
        let text = serde_json::json!({ "from": shared.instance, "task": message }).to_string();
        shared
            .relay
            .send(EVERY_INSTANCE, &text)
            .await
            .map(|_heard| ())
            .map_err(|error| TaskStoreError::Unavailable(error.to_string()))
    }

    /// Acts on what another instance told of a task.
    async fn heard(&self, message: TaskMessage) {
        match message {
            TaskMessage::Cancel { id } => {
                // The record says cancelled already; the handler stops here.
                let live = self.live.lock().ok().and_then(|mut l| l.remove(&id));
                if let Some(live) = live {
                    if let Some(abort) = &live.abort {
                        abort.abort();
                    }
                    live.status.send_replace(TaskStatus::Cancelled);
                }
            }
            TaskMessage::Answer {
                id,
                owner,
                responses,
            } => {
                let runs_here = self.live.lock().is_ok_and(|l| l.contains_key(&id));
                if runs_here {
                    if let Err(error) = self.answer_here(&owner, &id, responses).await {
                        tracing::warn!(target: "droid::tasks", task = %id, %error, "answers relayed from another instance were not delivered");
                    }
                }
            }
            TaskMessage::Changed { id, owner } => {
                let runs_here = self.live.lock().is_ok_and(|l| l.contains_key(&id));
                if !runs_here && !self.listeners.any_for(&owner) {
                    return;
                }
                let Ok(Some(record)) = self.store().get(&owner, &id, now_ms()).await else {
                    return;
                };
                if runs_here && record.is_terminal() {
                    // Ended by another instance while its handler runs
                    // here (taken for dead): the handler stops, and whoever
                    // waits here sees the end the store has.
                    let live = self.live.lock().ok().and_then(|mut l| l.remove(&id));
                    if let Some(live) = live {
                        if let Some(abort) = &live.abort {
                            abort.abort();
                        }
                        live.status.send_replace(record.status);
                    }
                }
                self.listeners.publish(&record);
            }
        }
    }

    /// The network an anonymous 2025-11-25 session's task counts against
    /// besides its session (see [`TaskLimits::running_per_network`]);
    /// `None` for any other caller, whose own bound is already one per
    /// principal or network.
    #[must_use]
    pub(crate) fn network_of_session(ctx: &RequestContext) -> Option<IpAddr> {
        let anonymous_session = ctx.auth.principal_key().is_none()
            && ctx.protocol_version.is_some_and(|v| v.era() == Era::Legacy);
        anonymous_session
            .then_some(ctx.remote_addr)
            .flatten()
            .map(|addr| network_of(addr.ip()))
    }

    /// Whose a request's tasks are: the principal its token names; without
    /// one, a legacy request's `session` (2025-11-25 binds tasks to the
    /// session where there is no authorization), and a 2026-07-28 request's
    /// network (it has no session: an IPv6 client by its /64, as rate
    /// limits count it), else the one local client of a pipe.
    ///
    /// With a token, not the session: a client that lost its session polls
    /// again from a new one. `session` must name the session alike on every
    /// instance that serves it, and no other session on any of them.
    #[must_use]
    pub(crate) fn owner_of(ctx: &RequestContext, session: &str) -> String {
        if let Some(principal) = ctx.auth.principal_key() {
            return format!("principal\u{1f}{principal}");
        }
        if ctx.protocol_version.is_some_and(|v| v.era() == Era::Legacy) {
            return Self::session_owner(session);
        }
        match ctx.remote_addr {
            Some(addr) => format!("network\u{1f}{}", network_of(addr.ip())),
            None => "local".to_owned(),
        }
    }

    /// The owner of the tasks an anonymous 2025-11-25 session names
    /// `session` makes (see [`Self::owner_of`]).
    #[must_use]
    pub(crate) fn session_owner(session: &str) -> String {
        format!("session\u{1f}{session}")
    }

    /// The tasks of `owner`'s running in this process.
    #[must_use]
    pub(crate) fn running_of(&self, owner: &str) -> Vec<String> {
        self.live
            .lock()
            .map(|live| {
                live.iter()
                    .filter(|(_, l)| l.owner == owner)
                    .map(|(id, _)| id.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Cancels the tasks `ids` of `owner`'s running here, saying `why`, then
    /// forgets every task of `owner`'s: for an owner nobody can reach any
    /// longer (an anonymous session that ended), whose tasks would otherwise
    /// run on unread, and whose results would be kept unread, until their
    /// TTL.
    pub(crate) async fn forget_all(&self, owner: &str, ids: Vec<String>, why: &str) {
        for id in ids {
            if let Err(error) = self.cancel_saying(owner, &id, why).await {
                tracing::warn!(target: "droid::tasks", task = %id, %error, "a task whose session ended could not be cancelled; it runs on until it ends or lapses");
            }
        }
        if let Err(error) = self.store().forget_owner(owner).await {
            tracing::warn!(target: "droid::tasks", %error, "the tasks of a session that ended could not be forgotten; they are kept until their TTL");
        }
    }

    /// Every change of status of `owner`'s tasks run here (or told of by
    /// another instance), from now on.
    #[must_use]
    pub(crate) fn events(&self, owner: &str) -> TaskEvents {
        self.listeners.listen(owner)
    }

    /// A new task of `owner`'s, kept `ttl_ms` (or the default), working;
    /// `notify` is told of each later change of its status.
    ///
    /// # Errors
    ///
    /// The store's refusal: a bound reached, or the store unreachable.
    pub(crate) async fn create(
        &self,
        owner: String,
        network: Option<IpAddr>,
        ttl_ms: Option<u64>,
        notify: Option<StatusNotifier>,
    ) -> Result<TaskRecord, TaskStoreError> {
        let now = now_ms();
        self.expire(now).await;
        // `min` then `max`, not `clamp`: a longest TTL of 0 is a caller's
        // mistake, not a reason to panic.
        let ttl_ms = ttl_ms
            .unwrap_or(self.limits.default_ttl_ms)
            .min(self.limits.max_ttl_ms)
            .max(1);
        let record = TaskRecord {
            id: new_id(now),
            owner,
            status: TaskStatus::Working,
            status_message: None,
            created_ms: now,
            updated_ms: now,
            ttl_ms,
            poll_interval_ms: self.limits.poll_interval_ms,
            input_requests: JsonObject::new(),
            outcome: None,
            runner: self.liveness.runner().map(str::to_owned),
        };
        // The caller's place is taken in the same lock that counts its
        // running tasks, before the store is written: creates made at once
        // cannot together pass the bound. It is given back unless the
        // store took the task, also when this is abandoned while the store
        // is written (the request cancelled): it would count for ever.
        let mut placed = Placed {
            live: &self.live,
            id: Some(record.id.clone()),
        };
        {
            let Ok(mut live) = self.live.lock() else {
                return Err(TaskStoreError::Unavailable(
                    "the task table is poisoned".to_owned(),
                ));
            };
            let running = live.values().filter(|l| l.owner == record.owner).count();
            if running >= self.limits.running_per_owner {
                return Err(TaskStoreError::OwnerFull(self.limits.running_per_owner));
            }
            if network.is_some() {
                let nearby = live.values().filter(|l| l.network == network).count();
                if nearby >= self.limits.running_per_network {
                    return Err(TaskStoreError::NetworkFull(self.limits.running_per_network));
                }
            }
            let (status, _) = watch::channel(TaskStatus::Working);
            live.insert(
                record.id.clone(),
                Live {
                    owner: record.owner.clone(),
                    network,
                    abort: None,
                    waiting: HashMap::new(),
                    status,
                    notify,
                    asking: 0,
                },
            );
        }
        self.store().create(record.clone(), now).await?;
        placed.id = None;
        Ok(record)
    }

    /// Runs `work` as the task `record`, in the background, until it ends
    /// or is cancelled. A handler that panics fails its task with
    /// `-32603`, and takes nothing else with it.
    pub(crate) fn start(
        self: &Arc<Self>,
        record: &TaskRecord,
        work: BoxFuture<'static, Result<Value, ErrorObject>>,
    ) {
        let tasks = Arc::clone(self);
        let (owner, id) = (record.owner.clone(), record.id.clone());
        let lifetime = Duration::from_millis(record.expires_ms().saturating_sub(now_ms()));
        let handle = tokio::spawn(async move {
            let work = core::panic::AssertUnwindSafe(work).catch_unwind();
            let finished = tokio::select! {
                finished = work => finished,
                // Its TTL passed while it ran: it is gone, handler and all,
                // whether or not anyone asks after it.
                () = tokio::time::sleep(lifetime) => {
                    tasks.expire(now_ms()).await;
                    // Another instance may have swept it from a shared
                    // store: what this one holds of it goes all the same.
                    if let Some(live) = tasks.live.lock().ok().and_then(|mut l| l.remove(&id)) {
                        live.status.send_replace(TaskStatus::Cancelled);
                    }
                    return;
                }
            };
            let outcome = match finished {
                Ok(Ok(result)) => TaskOutcome::Result(result),
                Ok(Err(error)) => TaskOutcome::Error(error),
                Err(_) => {
                    TaskOutcome::Error(Refusal::internal("the task's handler panicked").into())
                }
            };
            tasks.end(&owner, &id, outcome).await;
        });
        if let Ok(mut live) = self.live.lock() {
            match live.get_mut(&record.id) {
                Some(entry) => entry.abort = Some(handle.abort_handle()),
                // Cancelled or expired before it started.
                None => handle.abort(),
            }
        }
    }

    /// The task `id` of `owner`'s, if there is one.
    ///
    /// # Errors
    ///
    /// The store unreachable.
    pub(crate) async fn get(
        &self,
        owner: &str,
        id: &str,
    ) -> Result<Option<TaskRecord>, TaskStoreError> {
        let now = now_ms();
        self.expire(now).await;
        match self.store().get(owner, id, now).await? {
            Some(record) => Ok(Some(self.reclaimed(record, now).await)),
            None => Ok(None),
        }
    }

    /// A page of `owner`'s tasks after `after`, and whether more follow.
    ///
    /// # Errors
    ///
    /// The store unreachable.
    pub(crate) async fn list(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<TaskRecord>, bool), TaskStoreError> {
        let now = now_ms();
        self.expire(now).await;
        let (records, more) = self.store().list(owner, after, limit, now).await?;
        let mut reclaimed = Vec::with_capacity(records.len());
        for record in records {
            reclaimed.push(self.reclaimed(record, now).await);
        }
        Ok((reclaimed, more))
    }

    /// `record` as it is, unless it is still running on a process that is
    /// gone (its lease in the store lapsed): then it has failed, and is
    /// recorded and told so. A task younger than a lease is left alone, as
    /// its runner may not have said it is alive yet.
    async fn reclaimed(&self, record: TaskRecord, now: u64) -> TaskRecord {
        let Some(runner) = record.runner.as_deref() else {
            return record;
        };
        if record.is_terminal()
            || self.liveness.cut_off()
            || Some(runner) == self.liveness.runner()
            || now.saturating_sub(record.created_ms) < self.liveness.lease_ms()
            || self
                .live
                .lock()
                .is_ok_and(|live| live.contains_key(&record.id))
            || self.liveness.alive(self.store(), runner).await
        {
            return record;
        }
        let mut failed = record.clone();
        failed.status = TaskStatus::Failed;
        failed.status_message = Some("the instance running it stopped".to_owned());
        failed.outcome = Some(TaskOutcome::Error(
            Refusal::internal("the instance running this task stopped before it ended").into(),
        ));
        failed.input_requests.clear();
        failed.updated_ms = now;
        match self.store().update(failed.clone()).await {
            Ok(true) => {
                tracing::info!(target: "droid::tasks", task = %failed.id, runner, "a task whose instance stopped has failed");
                self.changed(&failed, None);
                failed
            }
            // It ended meanwhile, or the store is away: as it is now, or
            // as read.
            Ok(false) => self
                .store()
                .get(&record.owner, &record.id, now)
                .await
                .ok()
                .flatten()
                .unwrap_or(record),
            Err(_) => record,
        }
    }

    /// Cancels the task `id` of `owner`'s: its handler is stopped, and it
    /// is `cancelled`. Answers the task as it now is (a task that had
    /// already ended is left as it was), or `None` when there is none.
    ///
    /// # Errors
    ///
    /// The store unreachable.
    pub(crate) async fn cancel(
        &self,
        owner: &str,
        id: &str,
    ) -> Result<Option<TaskRecord>, TaskStoreError> {
        self.cancel_saying(owner, id, "cancelled by the client")
            .await
    }

    /// [`Self::cancel`], the record saying `why`.
    async fn cancel_saying(
        &self,
        owner: &str,
        id: &str,
        why: &str,
    ) -> Result<Option<TaskRecord>, TaskStoreError> {
        let _writing = self.writes.lock().await;
        // Reading may find the task's runner gone and fail it first: a few
        // more round trips under the lock, for such tasks only.
        let Some(mut record) = self.get(owner, id).await? else {
            return Ok(None);
        };
        if record.is_terminal() {
            return Ok(Some(record));
        }
        let live = self.live.lock().ok().and_then(|mut l| l.remove(id));
        if let Some(live) = &live {
            if let Some(abort) = &live.abort {
                abort.abort();
            }
            live.status.send_replace(TaskStatus::Cancelled);
        }
        record.status = TaskStatus::Cancelled;
        record.status_message = Some(why.to_owned());
        record.input_requests.clear();
        record.updated_ms = now_ms();
        if !self.store().update(record.clone()).await? {
            // It ended meanwhile (on another instance): as it ended.
            return self.get(owner, id).await;
        }
        if live.is_none() {
            // Run by another instance, if by any: it stops the handler.
            if let Err(error) = self
                .tell_now(&TaskMessage::Cancel { id: id.to_owned() })
                .await
            {
                tracing::warn!(target: "droid::tasks", task = %id, %error, "a cancellation could not be told to the instance running the task; its handler runs on until it ends or lapses");
            }
        }
        self.changed(&record, live.and_then(|l| l.notify).as_ref());
        Ok(Some(record))
    }

    /// Parks the question `request` of the task `task` under `key`: the
    /// task is `input_required` until every question is answered. Resolves
    /// to the answer, or to an error when the task ends first.
    pub(crate) async fn ask(&self, task: &TaskRef, key: &str, request: Value) -> Option<Value> {
        self.ask_together(task, vec![(key.to_owned(), request)])
            .await?
            .pop()
    }

    /// Parks the questions `requests` of the task `task` together, each
    /// under its key, in one write: a `tasks/get` shows all of them or none,
    /// never some before the others. Resolves to the answers in order, or
    /// to `None` when the task ends first.
    pub(crate) async fn ask_together(
        &self,
        task: &TaskRef,
        requests: Vec<(String, Value)>,
    ) -> Option<Vec<Value>> {
        let mut parked = Vec::with_capacity(requests.len());
        let mut answers = Vec::with_capacity(requests.len());
        {
            let _writing = self.writes.lock().await;
            let Ok(Some(mut record)) = self.get(&task.owner, &task.id).await else {
                return None;
            };
            if record.is_terminal() {
                return None;
            }
            for (key, request) in requests {
                let (answer, answered) = oneshot::channel();
                record.input_requests.insert(key.clone(), request);
                answers.push((key.clone(), answer));
                parked.push(Parked {
                    task: task.clone(),
                    key,
                    answered: Some(answered),
                });
            }
            record.status = TaskStatus::InputRequired;
            record.updated_ms = now_ms();
            let mut notify = None;
            if let Ok(mut live) = self.live.lock() {
                if let Some(entry) = live.get_mut(&task.id) {
                    entry.waiting.extend(answers);
                    entry.status.send_replace(TaskStatus::InputRequired);
                    notify.clone_from(&entry.notify);
                }
            }
            // Not replaced: it ended meanwhile (cancelled on another
            // instance), and nobody will answer.
            if !self.store().update(record.clone()).await.ok()? {
                if let Ok(mut live) = self.live.lock() {
                    if let Some(entry) = live.get_mut(&task.id) {
                        for one in &parked {
                            entry.waiting.remove(&one.key);
                        }
                    }
                }
                for one in &mut parked {
                    one.answered = None;
                }
                return None;
            }
            self.changed(&record, notify.as_ref());
        }
        let mut given = Vec::with_capacity(parked.len());
        for one in &mut parked {
            given.push(one.answer().await?);
        }
        Some(given)
    }

    /// Removes the waiter for `key` of the task `id`, if nobody waits on it
    /// any more (its receiver is gone): whether one was removed. A waiter a
    /// newer question registered under the same key is left alone.
    fn forget_waiter(&self, id: &str, key: &str) -> bool {
        let Ok(mut live) = self.live.lock() else {
            return false;
        };
        let Some(entry) = live.get_mut(id) else {
            return false;
        };
        if !entry
            .waiting
            .get(key)
            .is_some_and(oneshot::Sender::is_closed)
        {
            return false;
        }
        entry.waiting.remove(key);
        if entry.waiting.is_empty() {
            entry.status.send_replace(TaskStatus::Working);
        }
        true
    }

    /// Takes the question `key`, whose waiter is gone, off `task`'s record
    /// (2026-07-28): the task works again once none is left. A question
    /// asked again under the same key meanwhile is left where it is.
    async fn abandon(&self, task: &TaskRef, key: &str) {
        let _writing = self.writes.lock().await;
        let notify = self.live.lock().ok().and_then(|live| {
            let entry = live.get(&task.id)?;
            (!entry.waiting.contains_key(key)).then(|| entry.notify.clone())
        });
        let Some(notify) = notify else {
            return;
        };
        let Ok(Some(mut record)) = self.get(&task.owner, &task.id).await else {
            return;
        };
        if record.is_terminal() || record.input_requests.remove(key).is_none() {
            return;
        }
        if record.input_requests.is_empty() {
            record.status = TaskStatus::Working;
        }
        record.updated_ms = now_ms();
        if self.store().update(record.clone()).await.unwrap_or(false) {
            self.changed(&record, notify.as_ref());
        }
    }

    /// Counts a 2025-11-25 question of `task`'s out to the client as a
    /// request, and marks the task `input_required`: it stays so until the
    /// returned guard is done or dropped (however the asking ended), and no
    /// other question is out.
    pub(crate) async fn asking(&self, task: &TaskRef) -> Asking {
        // Counted before anything is awaited, and uncounted by the guard:
        // a handler that stops waiting at any point leaves the count right.
        let asking = Asking::counted(task);
        self.write_asking(task).await;
        asking
    }

    /// Counts one question of `id`'s more out (`up`), or one fewer.
    fn count_asking(&self, id: &str, up: bool) {
        if let Ok(mut live) = self.live.lock() {
            if let Some(entry) = live.get_mut(id) {
                entry.asking = if up {
                    entry.asking.saturating_add(1)
                } else {
                    entry.asking.saturating_sub(1)
                };
            }
        }
    }

    /// Records `task` as `input_required` while any of its 2025-11-25
    /// questions is out, `working` once none is.
    async fn write_asking(&self, task: &TaskRef) {
        let _writing = self.writes.lock().await;
        let asking = self
            .live
            .lock()
            .ok()
            .and_then(|live| live.get(&task.id).map(|entry| entry.asking > 0));
        let Some(asking) = asking else {
            return;
        };
        let status = if asking {
            TaskStatus::InputRequired
        } else {
            TaskStatus::Working
        };
        let Ok(Some(mut record)) = self.get(&task.owner, &task.id).await else {
            return;
        };
        if record.status == status {
            return;
        }
        record.status = status;
        record.updated_ms = now_ms();
        if self.store().update(record.clone()).await.unwrap_or(false) {
            let notify = self
                .live
                .lock()
                .ok()
                .as_ref()
                .and_then(|l| l.get(&task.id))
                .and_then(|live| {
                    live.status.send_replace(status);
                    live.notify.clone()
                });
            self.changed(&record, notify.as_ref());
        }
    }

    /// Answers the questions of the task `id` of `owner`'s that `responses`
    /// has keys for; the rest are ignored (2026-07-28 `tasks/update`). The
    /// task works again once nothing is left unanswered. Answers whether
    /// there is such a task, once the answers are taken: for a task run by
    /// another instance, once its record no longer asks what was answered
    /// (or [`ANSWER_PATIENCE`] passed), so the caller's next `tasks/get`,
    /// wherever it lands, does not show the question again.
    ///
    /// # Errors
    ///
    /// The store unreachable.
    pub(crate) async fn answer(
        &self,
        owner: &str,
        id: &str,
        responses: JsonObject,
    ) -> Result<bool, TaskStoreError> {
        let runs_here = self.live.lock().is_ok_and(|l| l.contains_key(id));
        if runs_here || self.shared.get().is_none() {
            return self.answer_here(owner, id, responses).await;
        }
        // Run by another instance, if by any: the answers go there, once
        // the task is known to be the caller's.
        let Some(record) = self.get(owner, id).await? else {
            return Ok(false);
        };
        if !record.is_terminal() {
            let asked: Vec<(String, Value)> = responses
                .keys()
                .filter_map(|key| {
                    let question = record.input_requests.get(key)?;
                    Some((key.clone(), question.clone()))
                })
                .collect();
            // Only once the store took them: a client told its answers
            // arrived must not have them lost on the way.
            self.tell_now(&TaskMessage::Answer {
                id: id.to_owned(),
                owner: owner.to_owned(),
                responses,
            })
            .await?;
            self.taken(owner, id, &asked, record.updated_ms).await;
        }
        Ok(true)
    }

    /// Waits until the record of task `id` no longer asks any of `asked`
    /// (keys, with the questions as they were asked): the instance running
    /// it took the answers told to it. A record written since `updated_ms`
    /// ends the wait too: something else changed, and the wait is for the
    /// caller's next read, not a guarantee. At most [`ANSWER_PATIENCE`],
    /// reads included; a record that cannot be read ends the wait, the
    /// answers being on their way.
    async fn taken(&self, owner: &str, id: &str, asked: &[(String, Value)], updated_ms: u64) {
        if asked.is_empty() {
            return;
        }
        let deadline = tokio::time::Instant::now() + ANSWER_PATIENCE;
        let mut pause = Duration::from_millis(2);
        loop {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
            let read = tokio::time::timeout_at(deadline, self.get(owner, id)).await;
            let still_asks = match read {
                Ok(Ok(Some(record))) => {
                    !record.is_terminal()
                        && record.updated_ms == updated_ms
                        && asked
                            .iter()
                            .any(|(key, question)| record.input_requests.get(key) == Some(question))
                }
                _ => false,
            };
            if !still_asks || tokio::time::Instant::now() >= deadline {
                return;
            }
        }
    }

    /// [`Self::answer`] for a task whose handler runs here, if any does.
    async fn answer_here(
        &self,
        owner: &str,
        id: &str,
        responses: JsonObject,
    ) -> Result<bool, TaskStoreError> {
        let _writing = self.writes.lock().await;
        let Some(mut record) = self.get(owner, id).await? else {
            return Ok(false);
        };
        if record.is_terminal() {
            return Ok(true);
        }
        let mut delivered = Vec::new();
        let mut notify = None;
        if let Ok(mut live) = self.live.lock() {
            if let Some(entry) = live.get_mut(id) {
                notify.clone_from(&entry.notify);
                for (key, response) in responses {
                    if let Some(waiter) = entry.waiting.remove(&key) {
                        let _gone = waiter.send(response);
                        delivered.push(key);
                    }
                }
                if entry.waiting.is_empty() {
                    entry.status.send_replace(TaskStatus::Working);
                }
            }
        }
        if delivered.is_empty() {
            return Ok(true);
        }
        for key in &delivered {
            record.input_requests.remove(key);
        }
        if record.input_requests.is_empty() {
            record.status = TaskStatus::Working;
        }
        record.updated_ms = now_ms();
        if self.store().update(record.clone()).await? {
            self.changed(&record, notify.as_ref());
        }
        Ok(true)
    }

    /// The task `id` of `owner`'s once it has ended (2025-11-25
    /// `tasks/result` blocks until then), or `None` when there is no such
    /// task or it expired while waited for.
    ///
    /// # Errors
    ///
    /// The store unreachable.
    pub(crate) async fn ended(
        &self,
        owner: &str,
        id: &str,
    ) -> Result<Option<TaskRecord>, TaskStoreError> {
        loop {
            let Some(record) = self.get(owner, id).await? else {
                return Ok(None);
            };
            if record.is_terminal() {
                return Ok(Some(record));
            }
            let watching = self
                .live
                .lock()
                .ok()
                .and_then(|live| live.get(id).map(|l| l.status.subscribe()));
            let until_expiry = Duration::from_millis(record.expires_ms().saturating_sub(now_ms()));
            match watching {
                // Woken by its next change, or by its expiry.
                Some(mut status) => {
                    let _woken = tokio::time::timeout(until_expiry, status.changed()).await;
                }
                // Run elsewhere (another instance sharing the store): polled.
                None => {
                    let interval = Duration::from_millis(record.poll_interval_ms.max(50));
                    tokio::time::sleep(interval.min(until_expiry)).await;
                }
            }
        }
    }

    /// Records how the task ended, unless it had already (cancelled).
    async fn end(&self, owner: &str, id: &str, outcome: TaskOutcome) {
        let _writing = self.writes.lock().await;
        let live = self.live.lock().ok().and_then(|mut live| live.remove(id));
        let Ok(Some(mut record)) = self.get(owner, id).await else {
            return;
        };
        let status = match outcome {
            TaskOutcome::Result(_) => TaskStatus::Completed,
            TaskOutcome::Error(_) => TaskStatus::Failed,
        };
        record.status = status;
        record.outcome = Some(outcome);
        record.input_requests.clear();
        record.updated_ms = now_ms();
        let mut written = self.store().update(record.clone()).await;
        if let Err(error @ (TaskStoreError::TooLarge { .. } | TaskStoreError::BytesFull(_))) =
            &written
        {
            // Kept as a failure that says why, rather than left working
            // until it lapses with nothing to read.
            tracing::warn!(target: "droid::tasks", task = %id, %error, "a task's result could not be kept");
            record.status = TaskStatus::Failed;
            record.outcome = Some(TaskOutcome::Error(ErrorObject::new(
                ErrorCode::INTERNAL_ERROR,
                error.to_string(),
            )));
            written = self.store().update(record.clone()).await;
        }
        let status = record.status;
        let replaced = match written {
            Ok(replaced) => replaced,
            Err(error) => {
                tracing::warn!(target: "droid::tasks", task = %id, %error, "a task's end was not recorded");
                false
            }
        };
        if let Some(live) = &live {
            live.status.send_replace(status);
        }
        if replaced {
            self.changed(&record, live.and_then(|l| l.notify).as_ref());
        }
    }

    /// Tells the listeners, and the session that made the task, that
    /// `record` changed.
    fn changed(&self, record: &TaskRecord, notify: Option<&StatusNotifier>) {
        // Nobody listening is no failure (a client polls), and then the
        // record, result and all, is not copied for nobody.
        self.listeners.publish(record);
        if let Some(notify) = notify {
            notify(record);
        }
        self.tell(&TaskMessage::Changed {
            id: record.id.clone(),
            owner: record.owner.clone(),
        });
    }

    /// Forgets the tasks whose TTL passed, stopping any still running.
    async fn expire(&self, now: u64) {
        let gone = self.store().expire(now).await;
        if gone.is_empty() {
            return;
        }
        if let Ok(mut live) = self.live.lock() {
            for id in gone {
                if let Some(entry) = live.remove(&id) {
                    if let Some(abort) = entry.abort {
                        abort.abort();
                    }
                    entry.status.send_replace(TaskStatus::Cancelled);
                }
            }
        }
    }
}

/// A new task id: the creation time, so ids sort by it (a listing pages in
/// creation order), then 128 random bits, so no id can be guessed (without
/// entropy it is still unique, and the owner check still keeps it from
/// anyone else).
fn new_id(now_ms: u64) -> String {
    format!("{now_ms:012x}{}", crate::application::random::unique_hex())
}

/// Whether `id` is written as [`new_id`] writes one: a `tasks/list`
/// cursor (the last id of the page before) must be, or it is no cursor
/// this server gave.
pub(crate) fn is_task_id(id: &str) -> bool {
    id.len() == 44 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A 2026-07-28 question parked on a task, waiting for its answer.
/// Dropped unanswered (its handler stopped waiting: a timeout of its own, a
/// `select!`), it is taken back, so the task does not stay
/// `input_required` for a question nobody waits on.
struct Parked {
    task: TaskRef,
    key: String,
    /// Where the answer comes; `None` once there is nothing to wait for.
    answered: Option<oneshot::Receiver<Value>>,
}

impl Parked {
    /// The answer, or `None` when the task ended first.
    async fn answer(&mut self) -> Option<Value> {
        let answer = match self.answered.as_mut() {
            Some(answered) => answered.await.ok(),
            None => None,
        };
        self.answered = None;
        answer
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        // Gone first, so the waiter reads as nobody's.
        if self.answered.take().is_none() {
            return;
        }
        if !self.task.tasks.forget_waiter(&self.task.id, &self.key) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (task, key) = (self.task.clone(), std::mem::take(&mut self.key));
        // Not awaited by the handler, which is gone from this wait.
        drop(runtime.spawn(async move { task.tasks.abandon(&task, &key).await }));
    }
}

/// A 2025-11-25 question of a task's out to the client as a request,
/// counted while it is; see [`Tasks::asking`].
pub(crate) struct Asking {
    /// `None` once uncounted.
    task: Option<TaskRef>,
}

impl Asking {
    fn counted(task: &TaskRef) -> Self {
        task.tasks.count_asking(&task.id, true);
        Self {
            task: Some(task.clone()),
        }
    }

    /// The question was answered (or failed): uncounted, and the task is
    /// `working` again once no other question is out.
    pub(crate) async fn done(mut self) {
        if let Some(task) = self.task.take() {
            task.tasks.count_asking(&task.id, false);
            task.tasks.write_asking(&task).await;
        }
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        task.tasks.count_asking(&task.id, false);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // The handler stopped waiting; the status is written without it.
        drop(runtime.spawn(async move { task.tasks.write_asking(&task).await }));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::liveness::Timing;
    use super::*;

    /// Sets its flag when dropped: when the handler holding it is stopped.
    struct Stopped(Arc<AtomicBool>);

    impl Drop for Stopped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// Runs `record` with a handler that never ends; the flag says when it
    /// was stopped.
    fn run_until_stopped(tasks: &Arc<Tasks>, record: &TaskRecord) -> Arc<AtomicBool> {
        let stopped = Arc::new(AtomicBool::new(false));
        let guard = Stopped(Arc::clone(&stopped));
        tasks.start(
            record,
            Box::pin(async move {
                let _held = guard;
                std::future::pending::<Result<Value, ErrorObject>>().await
            }),
        );
        stopped
    }

    /// Waits, boundedly, for `flag`; whether it was set.
    async fn set(flag: &AtomicBool) -> bool {
        for _ in 0..1000 {
            if flag.load(Ordering::SeqCst) {
                return true;
            }
            tokio::task::yield_now().await;
        }
        flag.load(Ordering::SeqCst)
    }

    /// A store in memory that is slow to create (each create yields first,
    /// as a round trip to a shared store would), and says of every other
    /// runner what `alive` holds (`None`: it cannot say).
    #[derive(Debug)]
    struct Slow(MemoryTaskStore, Mutex<Option<bool>>);

    impl Default for Slow {
        fn default() -> Self {
            Self(MemoryTaskStore::default(), Mutex::new(Some(true)))
        }
    }

    impl Slow {
        fn say(&self, alive: Option<bool>) {
            if let Ok(mut said) = self.1.lock() {
                *said = alive;
            }
        }
    }

    impl TaskStore for Slow {
        fn create(
            &self,
            record: TaskRecord,
            now_ms: u64,
        ) -> BoxFuture<'_, Result<(), TaskStoreError>> {
            Box::pin(async move {
                tokio::task::yield_now().await;
                self.0.create(record, now_ms).await
            })
        }

        fn alive<'a>(&'a self, _runner: &'a str) -> BoxFuture<'a, Result<bool, TaskStoreError>> {
            let said = self.1.lock().ok().and_then(|said| *said);
            Box::pin(
                async move { said.ok_or_else(|| TaskStoreError::Unavailable("away".to_owned())) },
            )
        }

        fn get<'a>(
            &'a self,
            owner: &'a str,
            id: &'a str,
            now_ms: u64,
        ) -> BoxFuture<'a, Result<Option<TaskRecord>, TaskStoreError>> {
            self.0.get(owner, id, now_ms)
        }

        fn update(&self, record: TaskRecord) -> BoxFuture<'_, Result<bool, TaskStoreError>> {
            self.0.update(record)
        }

        fn list<'a>(
            &'a self,
            owner: &'a str,
            after: Option<&'a str>,
            limit: usize,
            now_ms: u64,
        ) -> BoxFuture<'a, Result<(Vec<TaskRecord>, bool), TaskStoreError>> {
            self.0.list(owner, after, limit, now_ms)
        }

        fn expire(&self, now_ms: u64) -> BoxFuture<'_, Vec<String>> {
            self.0.expire(now_ms)
        }

        fn forget_owner<'a>(&'a self, owner: &'a str) -> BoxFuture<'a, Result<(), TaskStoreError>> {
            self.0.forget_owner(owner)
        }
    }

    /// A task of another runner's, older than a lease, as the store keeps
    /// it.
    fn theirs(id: &str, runner: &str, created_ms: u64) -> TaskRecord {
        TaskRecord {
            id: id.to_owned(),
            owner: "alice".to_owned(),
            status: TaskStatus::Working,
            status_message: None,
            created_ms,
            updated_ms: created_ms,
            ttl_ms: 600_000,
            poll_interval_ms: 500,
            input_requests: JsonObject::new(),
            outcome: None,
            runner: Some(runner.to_owned()),
        }
    }

    async fn status(tasks: &Tasks, id: &str) -> Option<TaskStatus> {
        tasks
            .get("alice", id)
            .await
            .ok()
            .flatten()
            .map(|r| r.status)
    }

    #[tokio::test]
    async fn a_task_fails_once_its_runner_is_proven_gone_and_not_before() {
        let store = Arc::new(Slow::default());
        let shared: Arc<dyn TaskStore> = store.clone();
        let mut tasks = Tasks::new(shared, TaskLimits::default());
        tasks.liveness = Arc::new(Liveness::with_timing(Timing {
            lease: Duration::from_millis(100),
            beat: Duration::from_millis(40),
            proof: Duration::from_millis(150),
            memory: Duration::ZERO,
        }));
        tasks.liveness.named("me/1".to_owned());
        let now = now_ms();
        let old = now.saturating_sub(1_000);
        for record in [theirs("old", "gone/1", old), theirs("mine", "me/1", old)] {
            assert!(store.create(record, now).await.is_ok());
        }
        let mut unowned = theirs("unowned", "gone/1", old);
        unowned.runner = None;
        assert!(store.create(unowned, now).await.is_ok());

        // Alive, or a store that cannot say: running.
        assert_eq!(status(&tasks, "old").await, Some(TaskStatus::Working));
        store.say(None);
        assert_eq!(status(&tasks, "old").await, Some(TaskStatus::Working));
        // Missing, but not for long yet (a store restarted empty): running.
        store.say(Some(false));
        assert_eq!(status(&tasks, "old").await, Some(TaskStatus::Working));
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Missing for longer than the proof: failed, and recorded so.
        let failed = tasks.get("alice", "old").await.ok().flatten();
        assert_eq!(failed.as_ref().map(|r| r.status), Some(TaskStatus::Failed));
        assert!(matches!(
            failed.and_then(|r| r.outcome),
            Some(TaskOutcome::Error(e)) if e.message.contains("stopped")
        ));
        assert_eq!(
            store
                .0
                .get("alice", "old", now_ms())
                .await
                .ok()
                .flatten()
                .map(|r| r.status),
            Some(TaskStatus::Failed)
        );
        // Younger than a lease (its runner may not have said a word yet),
        // this process's own, or naming no runner: left alone.
        let now = now_ms();
        assert!(
            store
                .create(theirs("young", "gone/1", now), now)
                .await
                .is_ok()
        );
        for id in ["young", "mine", "unowned"] {
            assert_eq!(status(&tasks, id).await, Some(TaskStatus::Working), "{id}");
        }
    }

    /// A task this process runs, ended by another instance (taken for
    /// dead), stops here once told, and whoever waits here sees that end.
    #[tokio::test]
    async fn a_task_ended_elsewhere_stops_its_handler_here() -> Result<(), TaskStoreError> {
        let store = Arc::new(MemoryTaskStore::default());
        let shared: Arc<dyn TaskStore> = store.clone();
        let tasks = Arc::new(Tasks::new(shared, TaskLimits::default()));
        let record = tasks.create("alice".to_owned(), None, None, None).await?;
        let stopped = run_until_stopped(&tasks, &record);
        let mut failed = record.clone();
        failed.status = TaskStatus::Failed;
        failed.outcome = Some(TaskOutcome::Error(Refusal::internal("gone").into()));
        assert!(store.update(failed).await?);
        let waiting = {
            let tasks = Arc::clone(&tasks);
            let id = record.id.clone();
            tokio::spawn(async move { tasks.ended("alice", &id).await })
        };
        tasks
            .heard(TaskMessage::Changed {
                id: record.id.clone(),
                owner: "alice".to_owned(),
            })
            .await;
        assert!(set(&stopped).await, "the handler was stopped");
        let ended = waiting
            .await
            .map_err(|e| TaskStoreError::Unavailable(e.to_string()))??;
        assert_eq!(ended.map(|r| r.status), Some(TaskStatus::Failed));
        Ok(())
    }

    /// A question given up on is taken back, but the same question asked
    /// again at once is not taken back with it: its answer reaches it.
    #[tokio::test]
    async fn a_question_asked_again_outlives_the_one_given_up() -> Result<(), TaskStoreError> {
        let tasks = Arc::new(Tasks::new(
            Arc::new(MemoryTaskStore::default()),
            TaskLimits::default(),
        ));
        let record = tasks.create("alice".to_owned(), None, None, None).await?;
        let task = TaskRef {
            tasks: Arc::clone(&tasks),
            owner: "alice".to_owned(),
            id: record.id.clone(),
        };
        let question = serde_json::json!({ "method": "elicitation/create" });
        let first = tokio::time::timeout(
            Duration::from_millis(20),
            tasks.ask(&task, "k", question.clone()),
        )
        .await;
        assert!(first.is_err(), "given up on");
        let again = {
            let task = task.clone();
            tokio::spawn(async move { task.tasks.ask(&task, "k", question).await })
        };
        // The take-back and the new question both land, in either order.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        let asked = tasks.get("alice", &record.id).await?;
        assert_eq!(
            asked.as_ref().map(|r| r.status),
            Some(TaskStatus::InputRequired)
        );
        let mut answers = JsonObject::new();
        answers.insert("k".to_owned(), serde_json::json!({ "action": "accept" }));
        assert!(tasks.answer_here("alice", &record.id, answers).await?);
        let answered = again
            .await
            .map_err(|e| TaskStoreError::Unavailable(e.to_string()))?;
        assert_eq!(answered, Some(serde_json::json!({ "action": "accept" })));
        Ok(())
    }

    #[tokio::test]
    async fn a_create_abandoned_while_the_store_is_written_gives_its_place_back() {
        let limits = TaskLimits {
            running_per_owner: 1,
            ..TaskLimits::default()
        };
        let tasks = Tasks::new(Arc::new(Slow::default()), limits);
        let mut abandoned = Box::pin(tasks.create("alice".to_owned(), None, None, None));
        assert!(futures_util::poll!(abandoned.as_mut()).is_pending());
        // Its place is taken while the store is written...
        assert!(matches!(
            tasks.create("alice".to_owned(), None, None, None).await,
            Err(TaskStoreError::OwnerFull(1))
        ));
        // ...and given back when the request making it is dropped.
        drop(abandoned);
        assert!(
            tasks
                .create("alice".to_owned(), None, None, None)
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn creates_made_at_once_keep_to_the_running_bound() {
        let limits = TaskLimits {
            running_per_owner: 2,
            ..TaskLimits::default()
        };
        let tasks = Tasks::new(Arc::new(Slow::default()), limits);
        let made = futures_util::future::join_all(
            (0..5).map(|_| tasks.create("alice".to_owned(), None, None, None)),
        )
        .await;
        assert_eq!(made.iter().filter(|made| made.is_ok()).count(), 2);
        assert!(
            made.iter()
                .all(|made| matches!(made, Ok(_) | Err(TaskStoreError::OwnerFull(2))))
        );
        let theirs = tasks.create("bob".to_owned(), None, None, None).await;
        assert!(theirs.is_ok(), "another owner's bound is its own");
    }

    #[tokio::test]
    async fn a_cancellation_told_by_another_instance_stops_the_handler_here()
    -> Result<(), TaskStoreError> {
        let tasks = Arc::new(Tasks::new(
            Arc::new(MemoryTaskStore::default()),
            TaskLimits::default(),
        ));
        let record = tasks.create("alice".to_owned(), None, None, None).await?;
        let stopped = run_until_stopped(&tasks, &record);
        tasks
            .heard(TaskMessage::Cancel {
                id: "another task".to_owned(),
            })
            .await;
        assert!(
            !set(&stopped).await,
            "another task's cancellation stops nothing"
        );
        tasks
            .heard(TaskMessage::Cancel {
                id: record.id.clone(),
            })
            .await;
        assert!(set(&stopped).await, "the handler was stopped");
        Ok(())
    }

    #[tokio::test]
    async fn answers_told_by_another_instance_reach_the_question_here() -> Result<(), TaskStoreError>
    {
        let tasks = Arc::new(Tasks::new(
            Arc::new(MemoryTaskStore::default()),
            TaskLimits::default(),
        ));
        let record = tasks.create("alice".to_owned(), None, None, None).await?;
        let task = TaskRef {
            tasks: Arc::clone(&tasks),
            owner: "alice".to_owned(),
            id: record.id.clone(),
        };
        let asking = tokio::spawn({
            let task = task.clone();
            async move {
                task.tasks
                    .ask(
                        &task,
                        "confirm",
                        serde_json::json!({ "method": "elicitation/create" }),
                    )
                    .await
            }
        });
        // Parked once the record says so.
        for _ in 0..1000 {
            let status = tasks.get("alice", &record.id).await?.map(|r| r.status);
            if status == Some(TaskStatus::InputRequired) {
                break;
            }
            tokio::task::yield_now().await;
        }
        let mut responses = JsonObject::new();
        responses.insert(
            "confirm".to_owned(),
            serde_json::json!({ "action": "accept" }),
        );
        tasks
            .heard(TaskMessage::Answer {
                id: record.id.clone(),
                owner: "alice".to_owned(),
                responses,
            })
            .await;
        let answered = asking
            .await
            .map_err(|e| TaskStoreError::Unavailable(e.to_string()))?;
        assert_eq!(answered, Some(serde_json::json!({ "action": "accept" })));
        let status = tasks.get("alice", &record.id).await?.map(|r| r.status);
        assert_eq!(status, Some(TaskStatus::Working));
        Ok(())
    }
}
