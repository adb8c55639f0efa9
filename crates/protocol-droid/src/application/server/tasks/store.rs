//! Where tasks are kept: the [`TaskStore`] port, what it keeps
//! ([`TaskRecord`]), and the in-memory store a server uses unless given
//! another.
//!
//! A record is everything about a task that must outlive the request that
//! created it, and that another instance would need to answer `tasks/get`:
//! its owner, status, times, the questions it waits on and, once it ends,
//! its result or error. What only the running handler has (the future
//! itself, the channels its answers arrive on) stays with the runtime in
//! `tasks`, never in a store.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use serde_json::Value;

use super::super::BoxFuture;
use crate::domain::ir::JsonObject;
use crate::domain::jsonrpc::ErrorObject;
use crate::wire::tasks::TaskStatus;

/// One task as a store keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskRecord {
    /// The task's id: 128 random bits, so unguessable.
    pub id: String,
    /// Whose task it is: the principal that created it (see
    /// `Tasks::owner_of`). Every lookup names the owner, so another
    /// principal finds nothing, exactly as for an id that does not exist.
    pub owner: String,
    /// Where it is.
    pub status: TaskStatus,
    /// Why it is there, in words, if anything says.
    pub status_message: Option<String>,
    /// When it was created, in milliseconds since the Unix epoch.
    pub created_ms: u64,
    /// When its status last changed, in milliseconds since the Unix epoch.
    pub updated_ms: u64,
    /// How long it is kept from creation, in milliseconds.
    pub ttl_ms: u64,
    /// How often a client should poll it, in milliseconds.
    pub poll_interval_ms: u64,
    /// The questions it waits on (2026-07-28 `inputRequests`), by key.
    pub input_requests: JsonObject,
    /// How it ended, once it has.
    pub outcome: Option<TaskOutcome>,
    /// The process running its handler, where several share the store
    /// (`<instance>/<token>`, fresh each start): what another instance asks
    /// [`TaskStore::alive`] about before it shows the task as still running.
    /// `None` where nothing is shared.
    pub runner: Option<String>,
}

#[cfg(test)]
impl TaskRecord {
    /// A working task of `owner`'s, last changed at `updated_ms`, for tests.
    pub(crate) fn working(owner: &str, id: &str, updated_ms: u64) -> Self {
        Self {
            id: id.to_owned(),
            owner: owner.to_owned(),
            status: TaskStatus::Working,
            status_message: None,
            created_ms: updated_ms,
            updated_ms,
            ttl_ms: 60_000,
            poll_interval_ms: 500,
            input_requests: JsonObject::new(),
            outcome: None,
            runner: None,
        }
    }
}

impl TaskRecord {
    /// Whether the task has ended: a terminal record never changes again.
    #[must_use]
    pub const fn is_terminal(&self) -> bool {
        matches!(
            self.status,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }

    /// When the store may forget it, in milliseconds since the Unix epoch.
    #[must_use]
    pub const fn expires_ms(&self) -> u64 {
        self.created_ms.saturating_add(self.ttl_ms)
    }

    /// What the record holds that can be large, in bytes as JSON: its
    /// result or error, the questions it waits on and its status message.
    /// Counted without writing them out.
    #[must_use]
    pub fn kept_bytes(&self) -> usize {
        let mut counted = ByteCount(0);
        let outcome = match &self.outcome {
            Some(TaskOutcome::Result(value)) => serde_json::to_writer(&mut counted, value),
            Some(TaskOutcome::Error(error)) => serde_json::to_writer(&mut counted, error),
            None => Ok(()),
        };
        let questions = if self.input_requests.is_empty() {
            Ok(())
        } else {
            serde_json::to_writer(&mut counted, &self.input_requests)
        };
        // Writing to a counter fails only for a value JSON cannot hold,
        // which a record never has: counted as far as it got.
        let _written = (outcome, questions);
        counted.0 + self.status_message.as_ref().map_or(0, String::len)
    }
}

/// Counts the bytes written to it.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 = self.0.saturating_add(bytes.len());
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A [`TaskRecord`] as a shared store keeps it: JSON, every field by the
/// name it has here.
#[derive(serde::Serialize, serde::Deserialize)]
struct RecordText<'a> {
    id: std::borrow::Cow<'a, str>,
    owner: std::borrow::Cow<'a, str>,
    status: TaskStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status_message: Option<std::borrow::Cow<'a, str>>,
    created_ms: u64,
    updated_ms: u64,
    ttl_ms: u64,
    poll_interval_ms: u64,
    #[serde(default, skip_serializing_if = "JsonObject::is_empty")]
    input_requests: std::borrow::Cow<'a, JsonObject>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<std::borrow::Cow<'a, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<std::borrow::Cow<'a, ErrorObject>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    runner: Option<std::borrow::Cow<'a, str>>,
}

impl TaskRecord {
    /// The record as a shared store keeps it.
    #[must_use]
    pub fn encode(&self) -> String {
        use std::borrow::Cow;
        let (result, error) = match &self.outcome {
            Some(TaskOutcome::Result(value)) => (Some(Cow::Borrowed(value)), None),
            Some(TaskOutcome::Error(error)) => (None, Some(Cow::Borrowed(error))),
            None => (None, None),
        };
        serde_json::to_string(&RecordText {
            id: Cow::Borrowed(&self.id),
            owner: Cow::Borrowed(&self.owner),
            status: self.status,
            status_message: self.status_message.as_deref().map(Cow::Borrowed),
            created_ms: self.created_ms,
            updated_ms: self.updated_ms,
            ttl_ms: self.ttl_ms,
            poll_interval_ms: self.poll_interval_ms,
            input_requests: Cow::Borrowed(&self.input_requests),
            result,
            error,
            runner: self.runner.as_deref().map(Cow::Borrowed),
        })
        .unwrap_or_default()
    }

    /// The record [`Self::encode`] made, or `None` for text that is not one.
    #[must_use]
    pub fn decode(text: &str) -> Option<Self> {
        let kept: RecordText<'_> = serde_json::from_str(text).ok()?;
        let outcome = match (kept.result, kept.error) {
            (Some(result), None) => Some(TaskOutcome::Result(result.into_owned())),
            (None, Some(error)) => Some(TaskOutcome::Error(error.into_owned())),
            (None, None) => None,
            (Some(_), Some(_)) => return None,
        };
        Some(Self {
            id: kept.id.into_owned(),
            owner: kept.owner.into_owned(),
            status: kept.status,
            status_message: kept.status_message.map(std::borrow::Cow::into_owned),
            created_ms: kept.created_ms,
            updated_ms: kept.updated_ms,
            ttl_ms: kept.ttl_ms,
            poll_interval_ms: kept.poll_interval_ms,
            input_requests: kept.input_requests.into_owned(),
            outcome,
            runner: kept.runner.map(std::borrow::Cow::into_owned),
        })
    }
}

/// How a task ended.
#[derive(Clone, Debug, PartialEq)]
pub enum TaskOutcome {
    /// The result of the request the task ran, written for the revision of
    /// the request that created it (a tool error is a result too).
    Result(Value),
    /// The JSON-RPC error the request ended with.
    Error(ErrorObject),
}

/// Why a store could not do what it was asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TaskStoreError {
    /// The owner has as many tasks as one owner may keep.
    #[error("at most {0} tasks per caller; wait for one to end or expire")]
    OwnerFull(usize),
    /// The anonymous sessions of the caller's network have as many tasks
    /// running as they may together.
    #[error(
        "at most {0} running tasks for the sessions without a token from one address; \
         wait for one to end or expire"
    )]
    NetworkFull(usize),
    /// The store holds as many tasks as it may.
    #[error("the server holds as many tasks as it may ({0}); try again later")]
    Full(usize),
    /// The store could not be reached.
    #[error("the task store is unavailable: {0}")]
    Unavailable(String),
    /// The record (its result, error or questions) is larger than what
    /// one owner's tasks may hold together, besides what its running
    /// tasks hold: it is not kept (a task ending so is recorded as failed,
    /// saying why).
    #[error(
        "the task's result, error or questions are {bytes} bytes as JSON, more than the \
         {bound} bytes one caller's tasks may hold together"
    )]
    TooLarge {
        /// The record's size, as [`TaskRecord::kept_bytes`] counts it.
        bytes: usize,
        /// [`StoreBounds::bytes_per_owner`].
        bound: usize,
    },
    /// The store holds as many bytes of tasks as it may
    /// ([`StoreBounds::bytes_total`]), running tasks' mostly, with too few
    /// ended ones to give way.
    #[error("the server holds as many bytes of tasks as it may ({0}); try again later")]
    BytesFull(usize),
}

/// Where tasks are kept.
///
/// Every method names the owner along with the id: a store never answers
/// for a task to anyone but the principal that created it. A task is gone
/// once its TTL has passed, whether or not anything swept it yet.
pub trait TaskStore: Send + Sync + core::fmt::Debug + 'static {
    /// Keeps a new task. A full store may forget an ended task of the
    /// caller keeping the most to make room.
    ///
    /// # Errors
    ///
    /// [`TaskStoreError::OwnerFull`] or [`TaskStoreError::Full`] at a bound;
    /// [`TaskStoreError::Unavailable`] when the store cannot be reached.
    fn create(&self, record: TaskRecord, now_ms: u64) -> BoxFuture<'_, Result<(), TaskStoreError>>;

    /// The task `id` of `owner`, unless it does not exist, is someone
    /// else's, or has expired.
    ///
    /// # Errors
    ///
    /// [`TaskStoreError::Unavailable`] when the store cannot be reached.
    fn get<'a>(
        &'a self,
        owner: &'a str,
        id: &'a str,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, TaskStoreError>>;

    /// Replaces a task's record, unless the one kept has already ended (a
    /// terminal task never changes) or is gone: answers whether it was
    /// replaced.
    ///
    /// # Errors
    ///
    /// [`TaskStoreError::Unavailable`] when the store cannot be reached.
    fn update(&self, record: TaskRecord) -> BoxFuture<'_, Result<bool, TaskStoreError>>;

    /// Up to `limit` of `owner`'s tasks, oldest first, starting after the
    /// task `after`; and whether more follow.
    ///
    /// # Errors
    ///
    /// [`TaskStoreError::Unavailable`] when the store cannot be reached.
    fn list<'a>(
        &'a self,
        owner: &'a str,
        after: Option<&'a str>,
        limit: usize,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<(Vec<TaskRecord>, bool), TaskStoreError>>;

    /// Forgets every task whose TTL has passed, answering their ids so the
    /// runtime can stop any still running.
    fn expire(&self, now_ms: u64) -> BoxFuture<'_, Vec<String>>;

    /// Forgets every task of `owner`'s before its TTL: an owner nobody can
    /// speak for any more (an anonymous session that ended), whose results
    /// nobody could read.
    ///
    /// # Errors
    ///
    /// [`TaskStoreError::Unavailable`] when the store cannot be reached.
    fn forget_owner<'a>(&'a self, owner: &'a str) -> BoxFuture<'a, Result<(), TaskStoreError>>;

    /// Records that the process `runner` is alive for `lease_ms` more: it
    /// says so again well before then, for as long as it runs. A store no
    /// other process reads need not keep it, which is this default.
    ///
    /// # Errors
    ///
    /// [`TaskStoreError::Unavailable`] when the store cannot be reached.
    fn beat<'a>(
        &'a self,
        runner: &'a str,
        lease_ms: u64,
    ) -> BoxFuture<'a, Result<(), TaskStoreError>> {
        let _ = (runner, lease_ms);
        Box::pin(async { Ok(()) })
    }

    /// Whether the process `runner` said it was alive within its last
    /// lease ([`Self::beat`]). This default, for a store no other process
    /// reads, answers yes: its one process is the asker.
    ///
    /// # Errors
    ///
    /// [`TaskStoreError::Unavailable`] when the store cannot be reached.
    fn alive<'a>(&'a self, runner: &'a str) -> BoxFuture<'a, Result<bool, TaskStoreError>> {
        let _ = runner;
        Box::pin(async { Ok(true) })
    }
}

/// How many tasks a store keeps, and how many bytes of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreBounds {
    /// Tasks one owner may have at once (running or ended, until expiry).
    pub per_owner: usize,
    /// Tasks the store holds in all.
    pub total: usize,
    /// Bytes one owner's tasks may hold together ([`TaskRecord::kept_bytes`]):
    /// past it the owner's oldest ended tasks are forgotten to make room, and
    /// a result larger than this alone is not kept.
    pub bytes_per_owner: usize,
    /// Bytes the store's tasks may hold in all: past it the oldest ended
    /// tasks of the owner holding the most are forgotten to make room. The
    /// in-memory store holds to it; a shared store holds to
    /// [`Self::bytes_per_owner`] for each result.
    pub bytes_total: usize,
}

impl Default for StoreBounds {
    fn default() -> Self {
        Self {
            per_owner: 1024,
            total: 16_384,
            bytes_per_owner: 64 << 20,
            bytes_total: 512 << 20,
        }
    }
}

/// The in-memory [`TaskStore`]: one process's tasks, gone with it.
#[derive(Debug, Default)]
pub struct MemoryTaskStore {
    bounds: StoreBounds,
    inner: Mutex<Memory>,
}

#[derive(Debug, Default)]
struct Memory {
    /// Each task, with its [`TaskRecord::kept_bytes`].
    tasks: HashMap<String, (TaskRecord, usize)>,
    /// Ids by owner, in creation order (ids sort by creation; see
    /// `Tasks::new_id`), for listing and counting.
    by_owner: HashMap<String, BTreeSet<String>>,
    /// The bytes each owner's tasks hold.
    bytes_of: HashMap<String, usize>,
    /// The bytes every task holds.
    bytes: usize,
    /// `(expiry, id)`, soonest first, so a sweep reads only what expired.
    by_expiry: BTreeSet<(u64, String)>,
}

impl Memory {
    /// Forgets the task `id`, whatever its state.
    fn remove(&mut self, id: &str) -> Option<TaskRecord> {
        let (record, bytes) = self.tasks.remove(id)?;
        self.by_expiry.remove(&(record.expires_ms(), id.to_owned()));
        if let Some(ids) = self.by_owner.get_mut(&record.owner) {
            ids.remove(id);
            if ids.is_empty() {
                self.by_owner.remove(&record.owner);
            }
        }
        self.count_bytes(&record.owner, bytes, 0);
        Some(record)
    }

    /// Counts an owner's task as holding `now` bytes where it held `before`.
    fn count_bytes(&mut self, owner: &str, before: usize, now: usize) {
        self.bytes = self.bytes.saturating_sub(before).saturating_add(now);
        let held = self.bytes_of.get(owner).copied().unwrap_or(0);
        let held = held.saturating_sub(before).saturating_add(now);
        if held == 0 {
            self.bytes_of.remove(owner);
        } else {
            self.bytes_of.insert(owner.to_owned(), held);
        }
    }

    /// `owner`'s ended tasks other than `keep`, oldest first, with their
    /// bytes.
    fn ended_of(&self, owner: &str, keep: &str) -> Vec<(String, usize)> {
        self.by_owner
            .get(owner)
            .into_iter()
            .flatten()
            .filter(|id| id.as_str() != keep)
            .filter_map(|id| {
                let (record, bytes) = self.tasks.get(id)?;
                record.is_terminal().then(|| (id.clone(), *bytes))
            })
            .collect()
    }

    /// Makes room for `owner`'s task `id` to hold `bytes` where it held
    /// `before`: first from that owner's own ended tasks, oldest first,
    /// then, while the store is over its bytes, from the ended tasks of
    /// whoever holds the most. Whether room can be made is worked out
    /// before anything is forgotten, so a refusal leaves every task kept.
    fn room_for(
        &mut self,
        owner: &str,
        id: &str,
        before: usize,
        bytes: usize,
        bounds: StoreBounds,
    ) -> Result<(), TaskStoreError> {
        let held = self.bytes_of.get(owner).copied().unwrap_or(0);
        let own = held.saturating_sub(before).saturating_add(bytes);
        let mut own_excess = own.saturating_sub(bounds.bytes_per_owner);
        let total = self.bytes.saturating_sub(before).saturating_add(bytes);
        let mut total_excess = total.saturating_sub(bounds.bytes_total);
        if own_excess == 0 && total_excess == 0 {
            return Ok(());
        }
        let own_ended = self.ended_of(owner, id);
        if own_ended.iter().map(|(_, b)| b).sum::<usize>() < own_excess {
            return Err(TaskStoreError::TooLarge {
                bytes,
                bound: bounds.bytes_per_owner,
            });
        }
        // Everything ended but this task could go, this owner's included.
        let ended: usize = self
            .tasks
            .iter()
            .filter(|(kept, (record, _))| kept.as_str() != id && record.is_terminal())
            .map(|(_, (_, bytes))| bytes)
            .sum();
        if ended < total_excess {
            return Err(TaskStoreError::BytesFull(bounds.bytes_total));
        }
        for (ended, freed) in own_ended {
            if own_excess == 0 {
                break;
            }
            let _forgotten = self.remove(&ended);
            own_excess = own_excess.saturating_sub(freed);
            total_excess = total_excess.saturating_sub(freed);
        }
        // The heaviest first, each owner weighed once and again only after
        // it gave something up: not every owner sorted for each task.
        let mut heaviest: std::collections::BinaryHeap<(usize, String)> = self
            .bytes_of
            .iter()
            .map(|(owner, held)| (*held, owner.clone()))
            .collect();
        while total_excess > 0 {
            let Some((_, owner)) = heaviest.pop() else {
                break;
            };
            let Some((ended, freed)) = self.ended_of(&owner, id).into_iter().next() else {
                continue;
            };
            let _forgotten = self.remove(&ended);
            total_excess = total_excess.saturating_sub(freed);
            heaviest.push((self.bytes_of.get(&owner).copied().unwrap_or(0), owner));
        }
        Ok(())
    }

    /// Makes room in a full store: forgets the oldest ended task of the
    /// owner keeping the most, before its TTL. A store full of one
    /// caller's finished work thus gives way at that caller's expense, not
    /// everyone's; a store full of running tasks refuses.
    fn evict_ended(&mut self) -> bool {
        let mut owners: Vec<(&String, usize)> = self
            .by_owner
            .iter()
            .map(|(owner, ids)| (owner, ids.len()))
            .collect();
        owners.sort_by_key(|&(_, count)| core::cmp::Reverse(count));
        let found = owners.iter().find_map(|(owner, _)| {
            self.by_owner.get(*owner)?.iter().find_map(|id| {
                let (record, _) = self.tasks.get(id)?;
                record.is_terminal().then(|| id.clone())
            })
        });
        found.is_some_and(|id| self.remove(&id).is_some())
    }

    fn sweep(&mut self, now_ms: u64) -> Vec<String> {
        let mut gone = Vec::new();
        while let Some((expiry, id)) = self.by_expiry.first().cloned() {
            if expiry > now_ms {
                break;
            }
            self.by_expiry.pop_first();
            let _forgotten = self.remove(&id);
            gone.push(id);
        }
        gone
    }
}

impl MemoryTaskStore {
    /// A store keeping at most `bounds`.
    #[must_use]
    pub fn with_bounds(bounds: StoreBounds) -> Self {
        Self {
            bounds,
            inner: Mutex::default(),
        }
    }

    /// How many tasks the store holds now, and their bytes as
    /// [`TaskRecord::kept_bytes`] counts them.
    #[must_use]
    pub fn usage(&self) -> (usize, usize) {
        self.with(|memory| (memory.tasks.len(), memory.bytes))
            .unwrap_or_default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut Memory) -> T) -> Result<T, TaskStoreError> {
        self.inner
            .lock()
            .map(|mut memory| f(&mut memory))
            .map_err(|_| TaskStoreError::Unavailable("the task table is poisoned".to_owned()))
    }
}

impl TaskStore for MemoryTaskStore {
    fn create(&self, record: TaskRecord, now_ms: u64) -> BoxFuture<'_, Result<(), TaskStoreError>> {
        let bounds = self.bounds;
        // Counted before the lock every task request waits on.
        let bytes = record.kept_bytes();
        let created = self
            .with(|memory| {
                memory.sweep(now_ms);
                // Made already: a create retried is no second task.
                if let Some((kept, _)) = memory.tasks.get(&record.id) {
                    return if *kept == record {
                        Ok(())
                    } else {
                        Err(TaskStoreError::Unavailable(
                            "a task of this id is kept already".to_owned(),
                        ))
                    };
                }
                if memory.tasks.len() >= bounds.total && !memory.evict_ended() {
                    return Err(TaskStoreError::Full(bounds.total));
                }
                let owned = memory.by_owner.get(&record.owner).map_or(0, BTreeSet::len);
                if owned >= bounds.per_owner {
                    return Err(TaskStoreError::OwnerFull(bounds.per_owner));
                }
                if bytes > bounds.bytes_per_owner {
                    return Err(TaskStoreError::TooLarge {
                        bytes,
                        bound: bounds.bytes_per_owner,
                    });
                }
                memory.room_for(&record.owner, &record.id, 0, bytes, bounds)?;
                memory
                    .by_owner
                    .entry(record.owner.clone())
                    .or_default()
                    .insert(record.id.clone());
                memory
                    .by_expiry
                    .insert((record.expires_ms(), record.id.clone()));
                memory.count_bytes(&record.owner, 0, bytes);
                memory.tasks.insert(record.id.clone(), (record, bytes));
                Ok(())
            })
            .and_then(|created| created);
        Box::pin(async move { created })
    }

    fn get<'a>(
        &'a self,
        owner: &'a str,
        id: &'a str,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, TaskStoreError>> {
        let found = self.with(|memory| {
            memory
                .tasks
                .get(id)
                .map(|(r, _)| r)
                .filter(|r| r.owner == owner && r.expires_ms() > now_ms)
                .cloned()
        });
        Box::pin(async move { found })
    }

    fn update(&self, record: TaskRecord) -> BoxFuture<'_, Result<bool, TaskStoreError>> {
        let bounds = self.bounds;
        // Counted before the lock every task request waits on: a large
        // result is written out once, by the task that ends with it.
        let bytes = record.kept_bytes();
        let replaced = self
            .with(|memory| {
                let before = match memory.tasks.get(&record.id) {
                    Some((kept, bytes)) if kept.owner == record.owner && !kept.is_terminal() => {
                        *bytes
                    }
                    _ => return Ok(false),
                };
                if bytes > bounds.bytes_per_owner {
                    return Err(TaskStoreError::TooLarge {
                        bytes,
                        bound: bounds.bytes_per_owner,
                    });
                }
                // Made from ended tasks only, never this one.
                memory.room_for(&record.owner, &record.id, before, bytes, bounds)?;
                memory.count_bytes(&record.owner, before, bytes);
                if let Some(kept) = memory.tasks.get_mut(&record.id) {
                    *kept = (record, bytes);
                }
                Ok(true)
            })
            .and_then(|replaced| replaced);
        Box::pin(async move { replaced })
    }

    fn list<'a>(
        &'a self,
        owner: &'a str,
        after: Option<&'a str>,
        limit: usize,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<(Vec<TaskRecord>, bool), TaskStoreError>> {
        let page = self.with(|memory| {
            let Some(ids) = memory.by_owner.get(owner) else {
                return (Vec::new(), false);
            };
            let mut live = ids
                .iter()
                .filter(|id| after.is_none_or(|after| id.as_str() > after))
                .filter_map(|id| memory.tasks.get(id).map(|(r, _)| r))
                .filter(|r| r.expires_ms() > now_ms);
            let page: Vec<TaskRecord> = live.by_ref().take(limit).cloned().collect();
            let more = live.next().is_some();
            (page, more)
        });
        Box::pin(async move { page })
    }

    fn expire(&self, now_ms: u64) -> BoxFuture<'_, Vec<String>> {
        let gone = self.with(|memory| memory.sweep(now_ms)).unwrap_or_default();
        Box::pin(async move { gone })
    }

    fn forget_owner<'a>(&'a self, owner: &'a str) -> BoxFuture<'a, Result<(), TaskStoreError>> {
        let forgotten = self.with(|memory| {
            let ids = memory.by_owner.remove(owner).unwrap_or_default();
            for id in ids {
                let _forgotten = memory.remove(&id);
            }
            memory.bytes_of.remove(owner);
        });
        Box::pin(async move { forgotten })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, owner: &str, created_ms: u64, ttl_ms: u64) -> TaskRecord {
        TaskRecord {
            id: id.to_owned(),
            owner: owner.to_owned(),
            status: TaskStatus::Working,
            status_message: None,
            created_ms,
            updated_ms: created_ms,
            ttl_ms,
            poll_interval_ms: 500,
            input_requests: JsonObject::new(),
            outcome: None,
            runner: None,
        }
    }

    #[tokio::test]
    async fn a_task_is_found_only_by_its_owner_and_only_until_it_expires()
    -> Result<(), TaskStoreError> {
        let store = MemoryTaskStore::default();
        store
            .create(record("a", "alice", 1_000, 500), 1_000)
            .await?;
        assert!(store.get("alice", "a", 1_200).await?.is_some());
        assert_eq!(store.get("bob", "a", 1_200).await?, None);
        assert_eq!(store.get("alice", "a", 1_500).await?, None);
        assert_eq!(store.expire(1_500).await, vec!["a".to_owned()]);
        assert_eq!(
            store.list("alice", None, 10, 1_500).await?,
            (Vec::new(), false)
        );
        Ok(())
    }

    #[tokio::test]
    async fn an_owner_is_bounded_and_others_are_not_held_back_by_it() -> Result<(), TaskStoreError>
    {
        let store = MemoryTaskStore::with_bounds(StoreBounds {
            per_owner: 2,
            total: 3,
            ..StoreBounds::default()
        });
        store.create(record("1", "alice", 0, 10_000), 0).await?;
        store.create(record("2", "alice", 0, 10_000), 0).await?;
        assert_eq!(
            store.create(record("3", "alice", 0, 10_000), 0).await,
            Err(TaskStoreError::OwnerFull(2))
        );
        store.create(record("4", "bob", 0, 10_000), 0).await?;
        assert_eq!(
            store.create(record("5", "carol", 0, 10_000), 0).await,
            Err(TaskStoreError::Full(3))
        );
        // Once Alice's first task has ended, a full store gives it up for
        // Carol: the caller keeping the most makes the room.
        let mut ended = record("1", "alice", 0, 10_000);
        ended.status = TaskStatus::Completed;
        assert!(store.update(ended).await?);
        store.create(record("5", "carol", 0, 10_000), 0).await?;
        assert_eq!(store.get("alice", "1", 1).await?, None);
        assert!(store.get("alice", "2", 1).await?.is_some());
        // Expiry frees the places.
        store
            .create(record("6", "carol", 20_000, 10_000), 20_000)
            .await?;
        Ok(())
    }

    /// `record` ended with a result of `bytes` bytes of text.
    fn ended(id: &str, owner: &str, bytes: usize) -> TaskRecord {
        let mut ended = record(id, owner, 0, 10_000);
        ended.status = TaskStatus::Completed;
        ended.outcome = Some(TaskOutcome::Result(Value::String("x".repeat(bytes))));
        ended
    }

    #[tokio::test]
    async fn results_are_kept_within_their_owners_bytes_and_the_stores()
    -> Result<(), TaskStoreError> {
        // A 1,000-byte text is 1,002 bytes of JSON.
        let store = MemoryTaskStore::with_bounds(StoreBounds {
            bytes_per_owner: 2_500,
            bytes_total: 3_500,
            ..StoreBounds::default()
        });
        for id in ["a1", "a2", "a3"] {
            store.create(record(id, "alice", 0, 10_000), 0).await?;
            assert!(store.update(ended(id, "alice", 1_000)).await?);
        }
        // Alice's third result made room from her oldest.
        assert_eq!(store.get("alice", "a1", 1).await?, None);
        assert!(store.get("alice", "a2", 1).await?.is_some());
        assert_eq!(store.usage(), (2, 2_004));
        // Bob's and Carol's results fill the store: the room comes from
        // whoever holds the most, Alice.
        store.create(record("b1", "bob", 0, 10_000), 0).await?;
        assert!(store.update(ended("b1", "bob", 1_000)).await?);
        store.create(record("c1", "carol", 0, 10_000), 0).await?;
        assert!(store.update(ended("c1", "carol", 1_000)).await?);
        assert_eq!(store.get("alice", "a2", 1).await?, None);
        for (owner, id) in [("alice", "a3"), ("bob", "b1"), ("carol", "c1")] {
            assert!(store.get(owner, id, 1).await?.is_some(), "{id}");
        }
        assert_eq!(store.usage(), (3, 3_006));
        // A result larger than an owner's share alone is refused; the task
        // is still working, for the runtime to end otherwise.
        store.create(record("c2", "carol", 0, 10_000), 0).await?;
        assert_eq!(
            store.update(ended("c2", "carol", 3_000)).await,
            Err(TaskStoreError::TooLarge {
                bytes: 3_002,
                bound: 2_500
            })
        );
        let working = store.get("carol", "c2", 1).await?;
        assert_eq!(working.map(|r| r.status), Some(TaskStatus::Working));
        // Forgetting an owner forgets its tasks, running or ended, and
        // gives their bytes back.
        store.forget_owner("carol").await?;
        assert_eq!(store.get("carol", "c1", 1).await?, None);
        assert_eq!(store.get("carol", "c2", 1).await?, None);
        assert_eq!(store.usage(), (2, 2_004));
        store.forget_owner("alice").await?;
        store.forget_owner("bob").await?;
        assert_eq!(store.usage(), (0, 0));
        Ok(())
    }

    /// A store whose bytes are held by running tasks refuses, and what it
    /// refuses takes nothing from anyone: no ended task is forgotten for a
    /// room that cannot be made.
    #[tokio::test]
    async fn a_store_full_of_running_tasks_bytes_refuses_and_forgets_nothing()
    -> Result<(), TaskStoreError> {
        let store = MemoryTaskStore::with_bounds(StoreBounds {
            bytes_per_owner: 2_500,
            bytes_total: 3_500,
            ..StoreBounds::default()
        });
        // Carol's finished result, and Alice's running task waiting on
        // questions of 2,000 bytes.
        store.create(record("c1", "carol", 0, 10_000), 0).await?;
        assert!(store.update(ended("c1", "carol", 1_000)).await?);
        let mut asking = record("a1", "alice", 0, 10_000);
        asking.status = TaskStatus::InputRequired;
        asking
            .input_requests
            .insert("q".to_owned(), Value::String("x".repeat(1_990)));
        store.create(record("a1", "alice", 0, 10_000), 0).await?;
        assert!(store.update(asking).await?);
        // Bob's 2,000 bytes would need 1,500 given up; only Carol's 1,002
        // could be.
        store.create(record("b1", "bob", 0, 10_000), 0).await?;
        assert_eq!(
            store.update(ended("b1", "bob", 2_000)).await,
            Err(TaskStoreError::BytesFull(3_500))
        );
        assert!(store.get("carol", "c1", 1).await?.is_some(), "kept");
        // A create retried is no second task, and takes no more room.
        let usage = store.usage();
        store.create(record("b1", "bob", 0, 10_000), 0).await?;
        assert_eq!(store.usage(), usage);
        Ok(())
    }

    #[tokio::test]
    async fn a_terminal_task_is_never_replaced() -> Result<(), TaskStoreError> {
        let store = MemoryTaskStore::default();
        store.create(record("t", "alice", 0, 10_000), 0).await?;
        let mut cancelled = record("t", "alice", 0, 10_000);
        cancelled.status = TaskStatus::Cancelled;
        assert!(store.update(cancelled).await?);
        let mut completed = record("t", "alice", 0, 10_000);
        completed.status = TaskStatus::Completed;
        assert!(!store.update(completed).await?);
        let kept = store.get("alice", "t", 1).await?.map(|r| r.status);
        assert_eq!(kept, Some(TaskStatus::Cancelled));
        // Nor can another owner write over it.
        assert!(!store.update(record("t", "bob", 0, 10_000)).await?);
        Ok(())
    }

    #[test]
    fn a_record_reads_back_as_it_was_kept() {
        let mut working = record("t", "principal\u{1f}alice", 5, 10_000);
        working.input_requests.insert(
            "confirm".to_owned(),
            serde_json::json!({ "method": "elicitation/create" }),
        );
        working.status_message = Some("asking".to_owned());
        assert_eq!(TaskRecord::decode(&working.encode()), Some(working.clone()));
        let mut done = working.clone();
        done.outcome = Some(TaskOutcome::Result(serde_json::json!({ "content": [] })));
        assert_eq!(TaskRecord::decode(&done.encode()), Some(done));
        let mut failed = working;
        failed.outcome = Some(TaskOutcome::Error(ErrorObject::new(
            crate::domain::jsonrpc::ErrorCode::INTERNAL_ERROR,
            "boom",
        )));
        assert_eq!(TaskRecord::decode(&failed.encode()), Some(failed));
        assert_eq!(TaskRecord::decode("{}"), None);
    }

    #[tokio::test]
    async fn a_list_pages_in_creation_order() -> Result<(), TaskStoreError> {
        let store = MemoryTaskStore::default();
        for id in ["a", "b", "c"] {
            store.create(record(id, "alice", 0, 10_000), 0).await?;
        }
        let (first, more) = store.list("alice", None, 2, 1).await?;
        let ids: Vec<&str> = first.iter().map(|r| r.id.as_str()).collect();
        assert_eq!((ids, more), (vec!["a", "b"], true));
        let (rest, more) = store.list("alice", Some("b"), 2, 1).await?;
        let ids: Vec<&str> = rest.iter().map(|r| r.id.as_str()).collect();
        assert_eq!((ids, more), (vec!["c"], false));
        Ok(())
    }
}
