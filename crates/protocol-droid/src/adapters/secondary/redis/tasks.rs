//! Tasks in Redis: the [`TaskStore`] port over the store's connection, so
//! a task created on one instance is polled, listed, answered and
//! cancelled on any other.
//!
//! | key | value | lifetime |
//! |---|---|---|
//! | `task:<id>` | the task's record, JSON | its TTL |
//! | `tasks-of:<owner digest>` | a sorted set: the owner's task ids, by when each lapses | as long as its newest task |
//! | `tasks:expiry` | a sorted set: every task id, by when it lapses | kept; swept as tasks lapse |
//! | `tasks:ended` | a sorted set: the ended tasks (owner's index and id), by when each lapses | kept; swept as tasks lapse |
//! | `task-runner:<runner digest>` | present while the process running tasks says it is alive | its lease (15 s), renewed every 5 s |
//!
//! An owner is named by the SHA-256 of its key, so a principal's name
//! never becomes a key. Every check-and-write is one Lua script. A full
//! store forgets ended tasks before their time to make room, those lapsing
//! soonest first (the in-memory store takes them from the owner keeping
//! the most); a store full of running tasks refuses.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest as _, Sha256};

use super::{RedisStore, hex};
use crate::application::server::{
    BoxFuture, StoreBounds, StoreError, TaskRecord, TaskStore, TaskStoreError,
};

/// 0: kept (or kept already: a retry of a create whose reply was lost);
/// 1: the owner has as many as it may; 2: the store is full of running
/// tasks. A full store first forgets the ended tasks lapsing soonest.
/// KEYS: the task, the owner's index, the expiry index, the ended index.
/// ARGV: the record, its id, when it lapses, now, the bound per owner, the
/// bound in all, the task key prefix.
const CREATE_TASK: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return 0 end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[4])
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then return 1 end
while redis.call('ZCOUNT', KEYS[3], '(' .. ARGV[4], '+inf') >= tonumber(ARGV[6]) do
  local ended = redis.call('ZPOPMIN', KEYS[4])
  if #ended == 0 then return 2 end
  local index, id = string.match(ended[1], '^(.*)\n([^\n]*)$')
  if id then
    redis.call('DEL', ARGV[7] .. id)
    redis.call('ZREM', index, id)
    redis.call('ZREM', KEYS[3], id)
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
local newest = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[2], newest[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
return 0
";

/// 1: replaced; 0: gone, another owner's, or ended (an ended task never
/// changes). A record that ends the task enters the ended index, from
/// which a full store forgets first. KEYS: the task, the owner's index,
/// the ended index. ARGV: the record, its owner, '1' when it ends the
/// task, when it lapses, its id.
const UPDATE_TASK: &str = r"
local kept = redis.call('GET', KEYS[1])
if not kept then return 0 end
local record = cjson.decode(kept)
if record.owner ~= ARGV[2] then return 0 end
local status = record.status
if status == 'completed' or status == 'failed' or status == 'cancelled' then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
if ARGV[3] == '1' then
  redis.call('ZADD', KEYS[3], ARGV[4], KEYS[2] .. '\n' .. ARGV[5])
end
return 1
";

/// `{more, records}`: up to ARGV[3] of the owner's tasks alive at ARGV[1],
/// in id (creation) order after ARGV[2] ('' for the first page), and 1 when
/// more follow. KEYS: the owner's index. ARGV[4]: the task key prefix.
const LIST_TASKS: &str = r"
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[1], '+inf')
table.sort(ids)
local page = {}
local more = 0
for _, id in ipairs(ids) do
  if ARGV[2] == '' or id > ARGV[2] then
    if #page >= tonumber(ARGV[3]) then
      more = 1
      break
    end
    local record = redis.call('GET', ARGV[4] .. id)
    if record then table.insert(page, record) end
  end
end
return {more, page}
";

/// The ids of up to 1,000 tasks lapsed by ARGV[1], taken off the expiry
/// index; the ended index forgets them too. KEYS: the expiry index, the
/// ended index.
const SWEEP_TASKS: &str = r"
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 1000)
if #ids > 0 then redis.call('ZREM', KEYS[1], unpack(ids)) end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[1])
return ids
";

/// Forgets every task of one owner's. KEYS: the owner's index, the expiry
/// index, the ended index. ARGV: the task key prefix.
const FORGET_OWNER: &str = r"
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
for _, id in ipairs(ids) do
  redis.call('DEL', ARGV[1] .. id)
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZREM', KEYS[3], KEYS[1] .. '\n' .. id)
end
redis.call('DEL', KEYS[1])
return #ids
";

/// How often an instance sweeps lapsed tasks, in milliseconds: every task
/// request would otherwise cost a round trip more. A lapsed task is gone
/// from the moment it lapses all the same (its key expires then); the
/// sweep only tells the runtime which handlers to stop.
const SWEEP_EVERY_MS: u64 = 1_000;

/// The [`TaskStore`] in Redis.
#[derive(Clone)]
pub struct RedisTasks {
    store: RedisStore,
    bounds: StoreBounds,
    swept_ms: Arc<AtomicU64>,
    create: Arc<redis::Script>,
    update: Arc<redis::Script>,
    list: Arc<redis::Script>,
    sweep: Arc<redis::Script>,
    forget: Arc<redis::Script>,
}

impl core::fmt::Debug for RedisTasks {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RedisTasks")
            .field("store", &self.store)
            .field("bounds", &self.bounds)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A task store in this Redis, keeping at most `bounds`.
    #[must_use]
    pub fn tasks(&self, bounds: StoreBounds) -> RedisTasks {
        RedisTasks {
            store: self.clone(),
            bounds,
            swept_ms: Arc::new(AtomicU64::new(0)),
            create: Arc::new(redis::Script::new(CREATE_TASK)),
            update: Arc::new(redis::Script::new(UPDATE_TASK)),
            list: Arc::new(redis::Script::new(LIST_TASKS)),
            sweep: Arc::new(redis::Script::new(SWEEP_TASKS)),
            forget: Arc::new(redis::Script::new(FORGET_OWNER)),
        }
    }
}

impl RedisTasks {
    fn task_key(&self, id: &str) -> String {
        self.store.key(&format!("task:{id}"))
    }

    fn runner_key(&self, runner: &str) -> String {
        self.store.key(&format!(
            "task-runner:{}",
            hex(&Sha256::digest(runner.as_bytes()))
        ))
    }

    fn owner_key(&self, owner: &str) -> String {
        self.store.key(&format!(
            "tasks-of:{}",
            hex(&Sha256::digest(owner.as_bytes()))
        ))
    }

    /// `record` as kept, unless it is larger than one owner's tasks may be.
    fn encoded(&self, record: &TaskRecord) -> Result<String, TaskStoreError> {
        let bytes = record.kept_bytes();
        if bytes > self.bounds.bytes_per_owner {
            return Err(TaskStoreError::TooLarge {
                bytes,
                bound: self.bounds.bytes_per_owner,
            });
        }
        Ok(record.encode())
    }

    /// Runs `script` on `keys` with `args`.
    async fn invoke<T: redis::FromRedisValue>(
        &self,
        script: &redis::Script,
        keys: &[String],
        args: &[String],
    ) -> Result<T, TaskStoreError> {
        self.store
            .invoke(script, keys, args)
            .await
            .map_err(unavailable)
    }
}

fn unavailable(error: StoreError) -> TaskStoreError {
    match error {
        StoreError::Unavailable(why) | StoreError::Corrupt(why) => TaskStoreError::Unavailable(why),
    }
}

impl TaskStore for RedisTasks {
    fn create(&self, record: TaskRecord, now_ms: u64) -> BoxFuture<'_, Result<(), TaskStoreError>> {
        Box::pin(async move {
            let keys = [
                self.task_key(&record.id),
                self.owner_key(&record.owner),
                self.store.key("tasks:expiry"),
                self.store.key("tasks:ended"),
            ];
            let args = [
                self.encoded(&record)?,
                record.id.clone(),
                record.expires_ms().to_string(),
                now_ms.to_string(),
                self.bounds.per_owner.to_string(),
                self.bounds.total.to_string(),
                self.store.key("task:"),
            ];
            let kept: i64 = self.invoke(&self.create, &keys, &args).await?;
            match kept {
                0 => Ok(()),
                1 => Err(TaskStoreError::OwnerFull(self.bounds.per_owner)),
                _ => Err(TaskStoreError::Full(self.bounds.total)),
            }
        })
    }

    fn get<'a>(
        &'a self,
        owner: &'a str,
        id: &'a str,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, TaskStoreError>> {
        Box::pin(async move {
            let key = &self.task_key(id);
            let kept: Option<String> = self
                .store
                .run(|mut connection| async move {
                    redis::cmd("GET")
                        .arg(key)
                        .query_async(&mut connection)
                        .await
                })
                .await
                .map_err(unavailable)?;
            Ok(kept
                .as_deref()
                .and_then(TaskRecord::decode)
                .filter(|r| r.owner == owner && r.id == id && r.expires_ms() > now_ms))
        })
    }

    fn update(&self, record: TaskRecord) -> BoxFuture<'_, Result<bool, TaskStoreError>> {
        Box::pin(async move {
            let keys = [
                self.task_key(&record.id),
                self.owner_key(&record.owner),
                self.store.key("tasks:ended"),
            ];
            let ends = if record.is_terminal() { "1" } else { "0" };
            let args = [
                self.encoded(&record)?,
                record.owner.clone(),
                ends.to_owned(),
                record.expires_ms().to_string(),
                record.id.clone(),
            ];
            let replaced: i64 = self.invoke(&self.update, &keys, &args).await?;
            Ok(replaced == 1)
        })
    }

    fn list<'a>(
        &'a self,
        owner: &'a str,
        after: Option<&'a str>,
        limit: usize,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<(Vec<TaskRecord>, bool), TaskStoreError>> {
        Box::pin(async move {
            let keys = [self.owner_key(owner)];
            let args = [
                now_ms.to_string(),
                after.unwrap_or_default().to_owned(),
                limit.to_string(),
                self.store.key("task:"),
            ];
            let (more, page): (i64, Vec<String>) = self.invoke(&self.list, &keys, &args).await?;
            let records = page
                .iter()
                .filter_map(|text| TaskRecord::decode(text))
                .filter(|r| r.owner == owner && r.expires_ms() > now_ms)
                .collect();
            Ok((records, more == 1))
        })
    }

    fn expire(&self, now_ms: u64) -> BoxFuture<'_, Vec<String>> {
        Box::pin(async move {
            let last = self.swept_ms.load(Ordering::Relaxed);
            if now_ms.saturating_sub(last) < SWEEP_EVERY_MS
                || self
                    .swept_ms
                    .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                return Vec::new();
            }
            let keys = [
                self.store.key("tasks:expiry"),
                self.store.key("tasks:ended"),
            ];
            self.invoke(&self.sweep, &keys, &[now_ms.to_string()])
                .await
                .unwrap_or_default()
        })
    }

    fn forget_owner<'a>(&'a self, owner: &'a str) -> BoxFuture<'a, Result<(), TaskStoreError>> {
        Box::pin(async move {
            let keys = [
                self.owner_key(owner),
                self.store.key("tasks:expiry"),
                self.store.key("tasks:ended"),
            ];
            let _forgotten: i64 = self
                .invoke(&self.forget, &keys, &[self.store.key("task:")])
                .await?;
            Ok(())
        })
    }

    fn beat<'a>(
        &'a self,
        runner: &'a str,
        lease_ms: u64,
    ) -> BoxFuture<'a, Result<(), TaskStoreError>> {
        Box::pin(async move {
            let key = &self.runner_key(runner);
            self.store
                .run(|mut connection| async move {
                    redis::cmd("SET")
                        .arg(key)
                        .arg(1)
                        .arg("PX")
                        .arg(lease_ms.max(1))
                        .query_async::<()>(&mut connection)
                        .await
                })
                .await
                .map_err(unavailable)
        })
    }

    fn alive<'a>(&'a self, runner: &'a str) -> BoxFuture<'a, Result<bool, TaskStoreError>> {
        Box::pin(async move {
            let key = &self.runner_key(runner);
            self.store
                .run(|mut connection| async move {
                    redis::cmd("EXISTS")
                        .arg(key)
                        .query_async::<bool>(&mut connection)
                        .await
                })
                .await
                .map_err(unavailable)
        })
    }
}
