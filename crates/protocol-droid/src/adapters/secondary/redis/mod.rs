//! The store several instances share, in Redis: the
//! [`KeyRingStore`] and [`RoundLedger`] ports, and every other port of
//! what instances share, over one multiplexed connection.
//!
//! One connection carries every instance's requests to Redis, pipelined:
//! the connection manager of the `redis` crate sends each command as it
//! comes and matches answers in order, so there is nothing to pool. It
//! reconnects by itself after a failure; a command sent while Redis is
//! away fails within [`RedisOptions::timeout`] as
//! [`StoreError::Unavailable`], and the next one tries again. A
//! connection that answers nothing in time, or answers out of turn, is
//! replaced with a new one: the manager would keep it, since it did not
//! drop.
//!
//! # What is kept, under the key prefix (`droid:` unless told otherwise)
//!
//! | key | value | lifetime |
//! |---|---|---|
//! | `state-keys` | the `requestState` [key ring](crate::application::server::KeyRing), JSON | kept; rotated in place |
//! | `round:<tag>` | hex digest of a round's `inputResponses` | until the state expires |
//! | `session:<id>` | a hash: a legacy session's record as opened, JSON (`record`), the log level its client set (`level`), one field per subscription (`s:<uri>`), how many changes it had (`v`) | while used, then its idle timeout |
//! | `call:<session>:<id>` | a `tools/call` running (its lease) or its answer, JSON | the lease, renewed while it runs; then the answer's replay time |
//! | `calls:<session>`, `callsizes:<session>` | the session's calls, by when each lapses; their answers' sizes, and those sizes' sum under `#bytes` | as long as its newest call |
//! | `answers`, `answersizes` | every session's recorded answers (their `call:` keys), by when each lapses; their sizes, and their sum under `#bytes` | as long as the newest answer |
//! | `events:<id>:<stream>` | a list: the events of a stream whose reader left, JSON each | the idle timeout after the last |
//! | `task:<id>`, `tasks-of:<owner>`, `tasks:expiry` | tasks and their indexes (see `tasks`) | each task's TTL |
//! | `gateway:first-use`, `gateway:approvals`, `gateway:activations` | a gateway's trust, and principals' and legacy sessions' activations, one hash each (see `gateway`) | kept; activations until they lapse |
//!
//! Messages between instances travel on channels named `instance:<name>`
//! (`PUBLISH`); each name an instance listens on (its own, `*` for all,
//! and those of the gateway, the parked calls and the task streams, such
//! as `instance:*task-streams` and `instance:<name>*task-streams`) is a
//! `SUBSCRIBE` connection of its own.
//!
//! The key ring holds secrets: a Redis that others can read lets them mint
//! states. Keep it on a private network, with a password or ACL user in the
//! URL (`redis://user:password@host:6379/0`).
//!
//! Every check-and-write is one Lua script, so it is atomic in Redis
//! whichever instance sends it and however their commands interleave.

mod gateway;
mod tasks;

pub use tasks::RedisTasks;

use core::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use futures_util::StreamExt as _;
use tokio::sync::mpsc;

use crate::application::server::{
    BoxFuture, CallRecord, ChangeKept, IdempotencyLedger, KeptChange, KeptSession, KeyRingStore,
    Relay, RotationPolicy, Round, RoundLedger, SessionStore, SharedAdmission, SharedSessions,
    SharedState, StoreBounds, StoreError,
};

/// How many relayed messages wait for their instance to take them; more
/// are dropped (and the one waiting for each times out).
const RELAY_BACKLOG: usize = 1024;

/// Keeps a new session's record (ARGV[1]) for ARGV[2] ms unless the id is
/// taken; the same record already kept is this write's own, landed before
/// its reply was lost, and counts as kept.
const CREATE_SESSION: &str = r"
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  redis.call('HSET', KEYS[1], 'record', ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if kind == 'hash' and redis.call('HGET', KEYS[1], 'record') == ARGV[1] then return 1 end
return 0
";

/// Reads a session (its fields and values, in turn) and restarts its idle
/// time (ARGV[1] ms) in one step; nothing for none, or for a key of
/// another form (an older build's).
const FETCH_SESSION: &str = r"
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then return false end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return redis.call('HGETALL', KEYS[1])
";

/// Changes a session still kept, in one step, counts the change (`v`) and
/// restarts its idle time (ARGV[1] ms): the log level ARGV[3] unless empty;
/// ARGV[4] subscriptions dropped, named next; the rest subscribed to,
/// while it holds fewer than ARGV[2]. Answers {0, 0}: not kept; {1, v}:
/// made, the session's `v`th change; {2, v}: made but for subscriptions
/// past the bound.
const CHANGE_SESSION: &str = r"
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then return {0, 0} end
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'level', ARGV[3]) end
local dropped = tonumber(ARGV[4])
for i = 5, 4 + dropped do redis.call('HDEL', KEYS[1], 's:' .. ARGV[i]) end
local held = redis.call('HLEN', KEYS[1]) - 1 - redis.call('HEXISTS', KEYS[1], 'level')
  - redis.call('HEXISTS', KEYS[1], 'v')
local made = 1
for i = 5 + dropped, #ARGV do
  local field = 's:' .. ARGV[i]
  if redis.call('HEXISTS', KEYS[1], field) == 0 then
    if held < tonumber(ARGV[2]) then
      redis.call('HSET', KEYS[1], field, '1')
      held = held + 1
    else
      made = 2
    end
  end
end
local version = redis.call('HINCRBY', KEYS[1], 'v', 1)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return {made, version}
";

/// Keeps the next ring only if the ring kept is still the one the caller
/// read (ARGV[1] = "1" and ARGV[2] the text, or ARGV[1] = "0": none).
const REPLACE_RING: &str = r"
local kept = redis.call('GET', KEYS[1])
if ARGV[1] == '0' then
  if kept then return 0 end
elseif kept ~= ARGV[2] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[3])
return 1
";

/// 0: first answer (recorded until ARGV[2], Unix milliseconds); 1: the same
/// answer again; 2: another answer to a round already answered.
const ANSWER_ROUND: &str = r"
local kept = redis.call('GET', KEYS[1])
if kept then
  if kept == ARGV[1] then return 1 end
  return 2
end
redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[2])
return 0
";

/// How a [`RedisStore`] connects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisOptions {
    /// What every key this store writes starts with (`droid:`): several
    /// deployments can share one Redis under prefixes of their own.
    pub prefix: String,
    /// How long a connection attempt, and then each command, may take
    /// (2 s). A store that does not answer in time is unavailable, never a
    /// request left hanging.
    pub timeout: Duration,
    /// Certificate authorities (PEM) a `rediss://` store's certificate may
    /// be signed by besides the platform's (`None`: the platform's alone),
    /// as [`Trust::private_authorities_pem`](crate::adapters::secondary::tls::Trust::private_authorities_pem)
    /// gives them.
    pub private_authorities: Option<Vec<u8>>,
    /// How often each subscription that carries messages from the other
    /// instances is proven alive (20 s): a probe is published to it, and a
    /// subscription that does not hear it within half as long again is
    /// opened afresh. A connection that died without closing (a network
    /// partition, a balancer or NAT dropping an idle flow) would otherwise
    /// leave the instance deaf to the others, believing it listens.
    pub relay_probe: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            prefix: "droid:".to_owned(),
            timeout: Duration::from_secs(2),
            private_authorities: None,
            relay_probe: Duration::from_secs(20),
        }
    }
}

/// The shared store in Redis.
#[derive(Clone)]
pub struct RedisStore {
    client: redis::Client,
    /// The connection in use, replaced whole when it cannot be trusted.
    connection: Arc<RwLock<ConnectionManager>>,
    /// How a connection is made and kept.
    config: ConnectionManagerConfig,
    /// Whether a new connection is being made.
    renewing: Arc<AtomicBool>,
    /// The URL without its password, for messages.
    shown: String,
    prefix: String,
    timeout: Duration,
    relay_probe: Duration,
    replace_ring: Arc<redis::Script>,
    answer_round: Arc<redis::Script>,
    fetch_session: Arc<redis::Script>,
    create_session: Arc<redis::Script>,
    change_session: Arc<redis::Script>,
    append_events: Arc<redis::Script>,
    admit_call: Arc<redis::Script>,
    renew_call: Arc<redis::Script>,
    record_call: Arc<redis::Script>,
    abandon_call: Arc<redis::Script>,
    remove_session: Arc<redis::Script>,
    claim_field: Arc<redis::Script>,
    keep_newer: Arc<redis::Script>,
    forget_at: Arc<redis::Script>,
    renew_at: Arc<redis::Script>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.shown)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to the Redis at `url` (`redis://[user:password@]host[:port][/db]`,
    /// `rediss://…` for TLS, its certificate verified against the
    /// platform's authorities and `options.private_authorities`, or
    /// `redis+unix:///path/to.sock`), and checks it answers.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when the URL is not one, or Redis does
    /// not answer within the timeout. The message never carries a password.
    pub async fn connect(url: &str, options: RedisOptions) -> Result<Self, StoreError> {
        let shown = redact(url);
        let client = open(url, options.private_authorities.as_deref())
            .map_err(|e| StoreError::Unavailable(format!("{shown}: {e}")))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(options.timeout))
            .set_response_timeout(Some(options.timeout))
            .set_number_of_retries(2)
            .set_max_delay(options.timeout);
        let connection = tokio::time::timeout(
            options.timeout.saturating_mul(2),
            ConnectionManager::new_with_config(client.clone(), config.clone()),
        )
        .await
        .map_err(|_| StoreError::Unavailable(format!("{shown}: no answer in time")))?
        .map_err(|e| StoreError::Unavailable(format!("{shown}: {}", connect_failure(&e))))?;
        let [claim, keep_newer, forget_at, renew_at] = gateway::scripts();
        let store = Self {
            client,
            connection: Arc::new(RwLock::new(connection)),
            config,
            renewing: Arc::default(),
            shown,
            prefix: options.prefix,
            timeout: options.timeout,
            relay_probe: options.relay_probe.max(Duration::from_millis(100)),
            replace_ring: Arc::new(redis::Script::new(REPLACE_RING)),
            answer_round: Arc::new(redis::Script::new(ANSWER_ROUND)),
            fetch_session: Arc::new(redis::Script::new(FETCH_SESSION)),
            create_session: Arc::new(redis::Script::new(CREATE_SESSION)),
            change_session: Arc::new(redis::Script::new(CHANGE_SESSION)),
            admit_call: Arc::new(with_prune(ADMIT_CALL)),
            renew_call: Arc::new(with_prune(RENEW_CALL)),
            record_call: Arc::new(with_prune(RECORD_CALL)),
            abandon_call: Arc::new(with_prune(ABANDON_CALL)),
            remove_session: Arc::new(with_prune(REMOVE_SESSION)),
            append_events: Arc::new(redis::Script::new(APPEND_EVENTS)),
            claim_field: Arc::new(claim),
            keep_newer: Arc::new(keep_newer),
            forget_at: Arc::new(forget_at),
            renew_at: Arc::new(renew_at),
        };
        store.ping().await?;
        Ok(store)
    }

    /// What a server shares through this store, rotating its keys by
    /// `rotation`: the `requestState` keys and the rounds answered.
    #[must_use]
    pub fn shared(&self, rotation: RotationPolicy) -> SharedState {
        let store = Arc::new(self.clone());
        SharedState {
            keys: store.clone(),
            rounds: store,
            rotation,
            sessions: None,
        }
    }

    /// As [`Self::shared`], and the legacy sessions too, this instance named
    /// `instance` among the others.
    #[must_use]
    pub fn shared_with_sessions(&self, rotation: RotationPolicy, instance: String) -> SharedState {
        let store = Arc::new(self.clone());
        SharedState {
            sessions: Some(SharedSessions {
                tasks: Arc::new(self.tasks(StoreBounds::default())),
                store: store.clone(),
                relay: store.clone(),
                idempotency: store,
                instance,
            }),
            ..self.shared(rotation)
        }
    }

    /// Whether Redis answers now.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when it does not.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let pong: String =
            self.run(|mut connection| async move {
                redis::cmd("PING").query_async(&mut connection).await
            })
            .await?;
        if pong == "PONG" {
            Ok(())
        } else {
            Err(StoreError::Corrupt(format!(
                "{}: PING answered {pong:?}",
                self.shown
            )))
        }
    }

    /// The URL this store connects to, without its password.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.shown
    }

    fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Runs one of the call scripts on call `id` of `session`'s keys with
    /// `args`.
    async fn call_script<T: redis::FromRedisValue>(
        &self,
        script: &redis::Script,
        session: &str,
        id: &str,
        args: &[String],
    ) -> Result<T, StoreError> {
        let keys = &self.call_keys(session, id);
        self.run(|mut connection| async move {
            let mut invocation = script.prepare_invoke();
            for key in keys {
                invocation.key(key);
            }
            for arg in args {
                invocation.arg(arg);
            }
            invocation.invoke_async(&mut connection).await
        })
        .await
    }

    /// A call's record, its session's index of calls, and of their
    /// answers' sizes; every session's answers, and their sizes.
    fn call_keys(&self, session: &str, id: &str) -> [String; 5] {
        [
            self.key(&format!("call:{session}:{id}")),
            self.key(&format!("calls:{session}")),
            self.key(&format!("callsizes:{session}")),
            self.key("answers"),
            self.key("answersizes"),
        ]
    }

    /// Runs `script` on `keys` with `args` (through [`Self::run`]).
    async fn invoke<T: redis::FromRedisValue>(
        &self,
        script: &redis::Script,
        keys: &[String],
        args: &[String],
    ) -> Result<T, StoreError> {
        self.run(|mut connection| async move {
            script
                .key(keys)
                .arg(args)
                .invoke_async(&mut connection)
                .await
        })
        .await
    }

    /// Runs `attempt` on the connection, and once more when the connection
    /// had broken: the first command after Redis comes back finds the
    /// broken connection and starts the manager's reconnection, and the
    /// second rides the new connection. Each command here is safe to run
    /// twice: a compare-and-swap that did land answers "changed" the second
    /// time and is read again, a round recorded answers as its own retry, a
    /// session created finds its own record, and the rest write the same
    /// value again (a relayed message, an appended event may arrive twice;
    /// an answer's second copy finds no one waiting).
    async fn run<T, F, Fut>(&self, mut attempt: F) -> Result<T, StoreError>
    where
        F: FnMut(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        match attempt(self.current()).await {
            // Asked again on the same silent connection, it would only
            // wait as long again: a new one is made for what comes next.
            Err(error) if error.is_timeout() => Err(error),
            Err(error) if error.is_io_error() || error.is_unrecoverable_error() => {
                attempt(self.current()).await
            }
            done => done,
        }
        .map_err(|e| {
            if untrusted(&e) {
                self.renew();
            }
            self.unavailable(&e)
        })
    }

    /// The connection in use.
    fn current(&self) -> ConnectionManager {
        self.connection
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Makes a new connection in the background and uses it from then on:
    /// the one in use answered out of turn or not at all, and the manager
    /// reconnects by itself only when the connection is seen to drop. A
    /// connection a firewall silently forgot, or one whose answers came
    /// out of order, would otherwise fail every command for good.
    fn renew(&self) {
        if self.renewing.swap(true, Ordering::AcqRel) {
            return;
        }
        let store = self.clone();
        tokio::spawn(async move {
            let made = tokio::time::timeout(
                store.timeout.saturating_mul(2),
                ConnectionManager::new_with_config(store.client.clone(), store.config.clone()),
            )
            .await;
            match made {
                Ok(Ok(connection)) => {
                    tracing::warn!(target: "droid::store", url = %store.shown, "the connection to the store was replaced");
                    *store
                        .connection
                        .write()
                        .unwrap_or_else(PoisonError::into_inner) = connection;
                }
                Ok(Err(error)) => {
                    tracing::debug!(target: "droid::store", %error, "a new connection to the store failed");
                }
                Err(_) => {
                    tracing::debug!(target: "droid::store", "a new connection to the store took too long");
                }
            }
            store.renewing.store(false, Ordering::Release);
        });
    }

    fn unavailable(&self, error: &redis::RedisError) -> StoreError {
        StoreError::Unavailable(format!("{}: {error}", self.shown))
    }
}

impl KeyRingStore for RedisStore {
    fn load(&self) -> BoxFuture<'_, Result<Option<String>, StoreError>> {
        let key = self.key("state-keys");
        Box::pin(async move {
            let key = &key;
            self.run(|mut connection| async move {
                redis::cmd("GET")
                    .arg(key)
                    .query_async(&mut connection)
                    .await
            })
            .await
        })
    }

    fn replace<'a>(
        &'a self,
        expected: Option<&'a str>,
        next: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let key = self.key("state-keys");
        Box::pin(async move {
            let (key, script) = (&key, &self.replace_ring);
            let kept: i64 = self
                .run(|mut connection| async move {
                    script
                        .key(key)
                        .arg(if expected.is_some() { "1" } else { "0" })
                        .arg(expected.unwrap_or_default())
                        .arg(next)
                        .invoke_async(&mut connection)
                        .await
                })
                .await?;
            Ok(kept == 1)
        })
    }
}

impl RoundLedger for RedisStore {
    fn answer(
        &self,
        state: [u8; 32],
        expires_at_ms: u64,
        responses: [u8; 32],
        _now_ms: u64,
    ) -> BoxFuture<'_, Result<Round, StoreError>> {
        let key = self.key(&format!("round:{}", hex(&state)));
        let responses = hex(&responses);
        Box::pin(async move {
            let (key, responses, script) = (&key, &responses, &self.answer_round);
            let round: i64 = self
                .run(|mut connection| async move {
                    script
                        .key(key)
                        .arg(responses)
                        .arg(expires_at_ms.max(1))
                        .invoke_async(&mut connection)
                        .await
                })
                .await?;
            match round {
                0 => Ok(Round::First),
                1 => Ok(Round::Retry),
                2 => Ok(Round::Conflict),
                other => Err(StoreError::Corrupt(format!(
                    "{}: a round answered {other}",
                    self.shown
                ))),
            }
        })
    }
}

impl SessionStore for RedisStore {
    fn create<'a>(
        &'a self,
        id: &'a str,
        record: &'a str,
        ttl_ms: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let key = self.key(&format!("session:{id}"));
        Box::pin(async move {
            let (key, script) = (&key, &self.create_session);
            let kept: i64 = self
                .run(|mut connection| async move {
                    script
                        .key(key)
                        .arg(record)
                        .arg(ttl_ms.max(1))
                        .invoke_async(&mut connection)
                        .await
                })
                .await?;
            Ok(kept == 1)
        })
    }

    fn fetch<'a>(
        &'a self,
        id: &'a str,
        ttl_ms: u64,
    ) -> BoxFuture<'a, Result<Option<KeptSession>, StoreError>> {
        let key = self.key(&format!("session:{id}"));
        Box::pin(async move {
            let (key, script) = (&key, &self.fetch_session);
            let fields: Option<Vec<String>> = self
                .run(|mut connection| async move {
                    script
                        .key(key)
                        .arg(ttl_ms.max(1))
                        .invoke_async(&mut connection)
                        .await
                })
                .await?;
            Ok(fields.and_then(kept_session))
        })
    }

    fn change<'a>(
        &'a self,
        id: &'a str,
        change: &'a KeptChange<'a>,
        ttl_ms: u64,
    ) -> BoxFuture<'a, Result<ChangeKept, StoreError>> {
        let key = self.key(&format!("session:{id}"));
        Box::pin(async move {
            let (key, script) = (&key, &self.change_session);
            let (made, version): (i64, u64) = self
                .run(|mut connection| async move {
                    let mut invocation = script.key(key);
                    invocation
                        .arg(ttl_ms.max(1))
                        .arg(change.max_subscribed)
                        .arg(change.level.unwrap_or(""))
                        .arg(change.unsubscribed.len());
                    for uri in change.unsubscribed.iter().chain(change.subscribed) {
                        invocation.arg(uri);
                    }
                    invocation.invoke_async(&mut connection).await
                })
                .await?;
            Ok(match made {
                0 => ChangeKept::Gone,
                2 => ChangeKept::Full { version },
                _ => ChangeKept::Made { version },
            })
        })
    }

    fn append_events<'a>(
        &'a self,
        id: &'a str,
        stream: &'a str,
        events: &'a [String],
        ends: bool,
        max_events: usize,
        ttl_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let key = self.key(&format!("events:{id}:{stream}"));
        Box::pin(async move {
            if events.is_empty() {
                return Ok(());
            }
            let (key, script) = (&key, &self.append_events);
            let _appended: i64 = self
                .run(|mut connection| async move {
                    let mut invocation = script.key(key);
                    invocation
                        .arg(ttl_ms.max(1))
                        .arg(max_events)
                        .arg(if ends { "1" } else { "0" });
                    for event in events {
                        invocation.arg(event);
                    }
                    invocation.invoke_async(&mut connection).await
                })
                .await?;
            Ok(())
        })
    }

    fn events<'a>(
        &'a self,
        id: &'a str,
        stream: &'a str,
        from: usize,
    ) -> BoxFuture<'a, Result<Vec<String>, StoreError>> {
        let key = self.key(&format!("events:{id}:{stream}"));
        Box::pin(async move {
            let key = &key;
            self.run(|mut connection| async move {
                redis::cmd("LRANGE")
                    .arg(key)
                    .arg(from)
                    .arg(-1)
                    .query_async(&mut connection)
                    .await
            })
            .await
        })
    }

    fn remove<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        // The session's calls go with it: their answers are replayed to
        // no-one now, and a client opening and ending sessions in a loop
        // would otherwise leave each one's answers for their replay time.
        let [_, calls, sizes, answers, answer_sizes] = self.call_keys(id, "");
        let keys = [
            self.key(&format!("session:{id}")),
            calls,
            sizes,
            answers,
            answer_sizes,
        ];
        let args = [self.key(&format!("call:{id}:"))];
        Box::pin(async move {
            let removed: i64 = self.invoke(&self.remove_session, &keys, &args).await?;
            Ok(removed > 0)
        })
    }
}

/// A session's index of calls: KEYS[2] by lapse time, KEYS[3] the sizes of
/// the answers recorded and, under `#bytes` (no call id, which is JSON,
/// reads so), their sum: kept as they change, so that no call pays for the
/// session's other calls, and in the same key as the sizes, so that an
/// eviction takes both or neither. A sum found below zero, or too high to
/// make room under, is counted afresh once. `prune` drops the calls that
/// lapsed and answers the bytes still kept; `make_room` forgets the oldest
/// answered or lapsed calls, reading the index sixteen at a time from the
/// oldest, until a call and its answer fit. Shared by the scripts below.
const PRUNE: &str = r"
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- The session's call keys start with this (each script sets it), so that
-- an answer forgotten here is forgotten among every session's too.
local call_prefix = ''
-- Takes `field`'s size out of the hash of sizes `sizes` and its sum.
local function unsize(sizes, field)
  local size = redis.call('HGET', sizes, field)
  if size then
    redis.call('HDEL', sizes, field)
    redis.call('HINCRBY', sizes, '#bytes', -tonumber(size))
  end
  return tonumber(size or '0')
end
local function forget_in_all(key)
  redis.call('ZREM', KEYS[4], key)
  return unsize(KEYS[5], key)
end
local function forget_size(id)
  -- Whether or not the session's sizes still had it (Redis may have
  -- evicted them): an answer forgotten is forgotten among every session's.
  forget_in_all(call_prefix .. id)
  return unsize(KEYS[3], id)
end
local function summed(key)
  local total = 0
  local sizes = redis.call('HGETALL', key)
  for i = 1, #sizes, 2 do
    if sizes[i] ~= '#bytes' then total = total + tonumber(sizes[i + 1]) end
  end
  redis.call('HSET', key, '#bytes', total)
  return total
end
local function prune(now)
  local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
  for _, id in ipairs(gone) do forget_size(id) end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now) end
  local bytes = tonumber(redis.call('HGET', KEYS[3], '#bytes') or '0')
  if bytes < 0 then return summed(KEYS[3]) end
  return bytes
end
local function index(now, id, lasts_ms, keep_ms)
  redis.call('ZADD', KEYS[2], now + lasts_ms, id)
  redis.call('PEXPIRE', KEYS[2], keep_ms)
  redis.call('PEXPIRE', KEYS[3], keep_ms)
end
local function make_room(prefix, max_calls, bytes, needed, max_bytes)
  local count = redis.call('ZCARD', KEYS[2])
  local skipped = 0
  local recounted = false
  while count >= max_calls or bytes + needed > max_bytes do
    local batch = redis.call('ZRANGE', KEYS[2], skipped, skipped + 15)
    if #batch == 0 then
      -- Nothing more to forget: the sum may have drifted from the sizes
      -- (a key evicted, an older instance's write); counted once afresh.
      if recounted then return false end
      recounted = true
      bytes = summed(KEYS[3])
    end
    for _, old in ipairs(batch) do
      if count < max_calls and bytes + needed <= max_bytes then return true end
      local answered = redis.call('HEXISTS', KEYS[3], old) == 1
      if answered or redis.call('EXISTS', prefix .. old) == 0 then
        bytes = bytes - forget_size(old)
        redis.call('DEL', prefix .. old)
        redis.call('ZREM', KEYS[2], old)
        count = count - 1
      else
        skipped = skipped + 1
      end
    end
  end
  return true
end
-- Every session's answers together: those that lapsed are forgotten, then
-- the ones recorded longest ago, whichever session's, until `needed` more
-- bytes and one more answer fit. An answer taken from another session
-- leaves that session's index too (its keys are found from the answer's,
-- `<store>call:<session>:<id>`, `store` being the keys' prefix; a session
-- id holds no colon).
local function make_room_in_all(store, now, needed, max_bytes, max_answers)
  local lapsed = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
  for _, key in ipairs(lapsed) do forget_in_all(key) end
  local bytes = tonumber(redis.call('HGET', KEYS[5], '#bytes') or '0')
  local count = redis.call('ZCARD', KEYS[4])
  local recounted = false
  while count >= max_answers or bytes + needed > max_bytes do
    local oldest = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
    if not oldest then
      -- The sum drifted from the sizes (a key evicted): counted afresh
      -- once, of the answers still listed only, so that sizes whose list
      -- Redis evicted do not hold the room for ever.
      if recounted then return false end
      recounted = true
      bytes = 0
      local sizes = redis.call('HGETALL', KEYS[5])
      for i = 1, #sizes, 2 do
        if sizes[i] ~= '#bytes' then
          if redis.call('ZSCORE', KEYS[4], sizes[i]) then
            bytes = bytes + tonumber(sizes[i + 1])
          else
            redis.call('HDEL', KEYS[5], sizes[i])
          end
        end
      end
      redis.call('HSET', KEYS[5], '#bytes', bytes)
      count = redis.call('ZCARD', KEYS[4])
    else
      bytes = bytes - forget_in_all(oldest)
      count = count - 1
      redis.call('DEL', oldest)
      local rest = string.sub(oldest, string.len(store) + 6)
      local colon = string.find(rest, ':', 1, true)
      if colon then
        local session = string.sub(rest, 1, colon - 1)
        local id = string.sub(rest, colon + 1)
        unsize(store .. 'callsizes:' .. session, id)
        redis.call('ZREM', store .. 'calls:' .. session, id)
      end
    end
  end
  return true
end
";

/// Removes session KEYS[1] and its calls (their keys start ARGV[1]):
/// their records, its index of them (KEYS[2], KEYS[3]) and their answers
/// among every session's. Answers how many session keys were removed.
const REMOVE_SESSION: &str = r"
call_prefix = ARGV[1]
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  forget_size(id)
  redis.call('DEL', call_prefix .. id)
end
redis.call('DEL', KEYS[2], KEYS[3])
return redis.call('DEL', KEYS[1])
";

/// Admits call KEYS[1] (id ARGV[5]) with digest ARGV[1] under token
/// ARGV[2], leased ARGV[3] ms; its session holds at most ARGV[4] calls,
/// the answered ones recorded longest ago forgotten to make room (the call
/// keys of the session start ARGV[7]); the index lives ARGV[6] ms. Answers
/// 'fresh', 'flight', 'conflict', 'full' (every call of the session is
/// running) or the recorded answer.
const ADMIT_CALL: &str = r"
local kept = redis.call('GET', KEYS[1])
if kept then
  local entry = cjson.decode(kept)
  if entry.digest ~= ARGV[1] then return 'conflict' end
  if entry.outcome then return entry.outcome end
  if entry.token == ARGV[2] then return 'fresh' end
  return 'flight'
end
call_prefix = ARGV[7]
local now = now_ms()
forget_size(ARGV[5])
local bytes = prune(now)
if not make_room(ARGV[7], tonumber(ARGV[4]), bytes, 0, math.huge) then return 'full' end
redis.call('SET', KEYS[1], cjson.encode({ digest = ARGV[1], token = ARGV[2] }), 'PX', ARGV[3])
index(now, ARGV[5], tonumber(ARGV[3]), ARGV[6])
return 'fresh'
";

/// Renews call KEYS[1]'s lease (ARGV[2] ms) if token ARGV[1] holds it
/// unanswered, marking it running again (digest ARGV[5]) if its mark
/// lapsed untaken; id ARGV[3], index lifetime ARGV[4].
const RENEW_CALL: &str = r"
local kept = redis.call('GET', KEYS[1])
local entry = { digest = ARGV[5], token = ARGV[1] }
if kept then entry = cjson.decode(kept) end
if entry.outcome or entry.token ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], cjson.encode(entry), 'PX', ARGV[2])
index(now_ms(), ARGV[3], tonumber(ARGV[2]), ARGV[4])
return 1
";

/// Records call KEYS[1]'s answer ARGV[2] for ARGV[3] ms if token ARGV[1]
/// holds it unanswered (or its mark lapsed untaken; digest ARGV[8]),
/// within the session's ARGV[6] bytes of answers, the answers recorded
/// longest ago forgotten to make room (the session's call keys start
/// ARGV[7]); an answer larger than ARGV[6] is recorded as ARGV[9] instead.
/// Id ARGV[4], index lifetime ARGV[5]. Every session's answers together
/// are at most ARGV[10] bytes and ARGV[11] answers (the store's keys start
/// ARGV[12]), those recorded longest ago forgotten to make room. Answers 1,
/// or 0 when another admission holds the call or nothing fits.
const RECORD_CALL: &str = r"
local kept = redis.call('GET', KEYS[1])
local entry = { digest = ARGV[8], token = ARGV[1] }
if kept then entry = cjson.decode(kept) end
if entry.outcome or entry.token ~= ARGV[1] then return 0 end
call_prefix = ARGV[7]
local now = now_ms()
forget_size(ARGV[4])
local bytes = prune(now)
local outcome = ARGV[2]
-- An answer larger than the session may keep would only empty it: the
-- placeholder is recorded in its place, at once.
if string.len(outcome) > tonumber(ARGV[6]) then outcome = ARGV[9] end
if not make_room(ARGV[7], math.huge, bytes, string.len(outcome), tonumber(ARGV[6])) then
  return 0
end
local size = string.len(outcome)
if not make_room_in_all(ARGV[12], now, size, tonumber(ARGV[10]), tonumber(ARGV[11])) then
  return 0
end
entry.outcome = outcome
redis.call('SET', KEYS[1], cjson.encode(entry), 'PX', ARGV[3])
redis.call('HSET', KEYS[3], ARGV[4], size)
redis.call('HINCRBY', KEYS[3], '#bytes', size)
index(now, ARGV[4], tonumber(ARGV[3]), ARGV[5])
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[3]), KEYS[1])
redis.call('HSET', KEYS[5], KEYS[1], size)
redis.call('HINCRBY', KEYS[5], '#bytes', size)
redis.call('PEXPIRE', KEYS[4], ARGV[5])
redis.call('PEXPIRE', KEYS[5], ARGV[5])
return 1
";

/// Forgets call KEYS[1] (id ARGV[2]) if token ARGV[1] holds it unanswered.
const ABANDON_CALL: &str = r"
call_prefix = string.sub(KEYS[1], 1, string.len(KEYS[1]) - string.len(ARGV[2]))
local kept = redis.call('GET', KEYS[1])
if not kept then return 0 end
local entry = cjson.decode(kept)
if entry.outcome or entry.token ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
forget_size(ARGV[2])
return 1
";

/// How long a session's index of calls lives at least after its newest
/// entry: it is only bookkeeping, and lives as long as any answer it
/// counts (see `index_ms`).
const CALL_INDEX_MS: u64 = 2 * 60 * 60 * 1000;

/// How long a session's index lives after an entry kept for `ttl_ms`.
fn index_ms(ttl_ms: u64) -> u64 {
    CALL_INDEX_MS.max(ttl_ms.saturating_add(60_000))
}

/// Appends ARGV[4..] to the list KEYS[1] while it holds fewer than ARGV[2]
/// entries; a batch that ends the stream (ARGV[3] = '1') whole, since it
/// carries the answer and the end a resumer must learn (it is bounded by
/// what the instance keeps for replay). Keeps it ARGV[1] ms more.
const APPEND_EVENTS: &str = r"
for i = 4, #ARGV do
  if ARGV[3] == '1' or redis.call('LLEN', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('RPUSH', KEYS[1], ARGV[i])
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
";

impl IdempotencyLedger for RedisStore {
    fn admit<'a>(
        &'a self,
        session: &'a str,
        id: &'a str,
        digest: [u8; 32],
        token: &'a str,
        lease_ms: u64,
        per_session: usize,
    ) -> BoxFuture<'a, Result<SharedAdmission, StoreError>> {
        let args = [
            hex(&digest),
            token.to_owned(),
            lease_ms.max(1).to_string(),
            per_session.to_string(),
            id.to_owned(),
            CALL_INDEX_MS.to_string(),
            self.key(&format!("call:{session}:")),
        ];
        Box::pin(async move {
            let said: String = self
                .call_script(&self.admit_call, session, id, &args)
                .await?;
            Ok(match said.as_str() {
                "fresh" => SharedAdmission::Fresh,
                "flight" => SharedAdmission::InFlight,
                "conflict" => SharedAdmission::Conflict,
                "full" => SharedAdmission::Full,
                _ => SharedAdmission::Replay(said),
            })
        })
    }

    fn renew<'a>(
        &'a self,
        session: &'a str,
        id: &'a str,
        digest: [u8; 32],
        token: &'a str,
        lease_ms: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let args = [
            token.to_owned(),
            lease_ms.max(1).to_string(),
            id.to_owned(),
            CALL_INDEX_MS.to_string(),
            hex(&digest),
        ];
        Box::pin(async move {
            let held: i64 = self
                .call_script(&self.renew_call, session, id, &args)
                .await?;
            Ok(held == 1)
        })
    }

    fn record<'a>(&'a self, call: CallRecord<'a>) -> BoxFuture<'a, Result<bool, StoreError>> {
        let CallRecord {
            session,
            id,
            digest,
            token,
            outcome,
            too_large,
            ttl_ms,
            session_bytes,
            bytes_in_all,
            answers_in_all,
        } = call;
        let args = [
            token.to_owned(),
            outcome.to_owned(),
            ttl_ms.max(1).to_string(),
            id.to_owned(),
            index_ms(ttl_ms).to_string(),
            session_bytes.to_string(),
            self.key(&format!("call:{session}:")),
            hex(&digest),
            too_large.to_owned(),
            bytes_in_all.to_string(),
            answers_in_all.to_string(),
            self.prefix.clone(),
        ];
        Box::pin(async move {
            let kept: i64 = self
                .call_script(&self.record_call, session, id, &args)
                .await?;
            Ok(kept == 1)
        })
    }

    fn abandon<'a>(
        &'a self,
        session: &'a str,
        id: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let args = [token.to_owned(), id.to_owned()];
        Box::pin(async move {
            let forgot: i64 = self
                .call_script(&self.abandon_call, session, id, &args)
                .await?;
            Ok(forgot == 1)
        })
    }
}

impl Relay for RedisStore {
    fn send<'a>(
        &'a self,
        instance: &'a str,
        message: &'a str,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        let channel = self.key(&format!("instance:{instance}"));
        Box::pin(async move {
            let channel = &channel;
            let heard: usize = self
                .run(|mut connection| async move {
                    redis::cmd("PUBLISH")
                        .arg(channel)
                        .arg(message)
                        .query_async(&mut connection)
                        .await
                })
                .await?;
            Ok(heard)
        })
    }

    fn listen<'a>(
        &'a self,
        instance: &'a str,
    ) -> BoxFuture<'a, Result<mpsc::Receiver<String>, StoreError>> {
        let channel = self.key(&format!("instance:{instance}"));
        Box::pin(async move {
            // The first subscription is made here, so a store out of reach
            // is reported to the caller; later ones by the task, after an
            // outage.
            let first = self.subscribe(&channel).await?;
            let (tx, rx) = mpsc::channel(RELAY_BACKLOG);
            let store = self.clone();
            let instance = instance.to_owned();
            tokio::spawn(async move {
                let mut subscription = Some(first);
                loop {
                    let pubsub = match subscription.take() {
                        Some(pubsub) => pubsub,
                        None => {
                            tokio::select! {
                                () = tokio::time::sleep(Duration::from_millis(500)) => {}
                                () = tx.closed() => return,
                            }
                            match store.subscribe(&channel).await {
                                Ok(pubsub) => pubsub,
                                Err(_) => continue,
                            }
                        }
                    };
                    let mut messages = pubsub.into_on_message();
                    let mut probing = Probing::new(store.relay_probe);
                    loop {
                        tokio::select! {
                            message = messages.next() => {
                                let Some(message) = message else {
                                    tracing::warn!(target: "droid", "the relay's subscription ended; subscribing again");
                                    break;
                                };
                                let Ok(text) = message.get_payload::<String>() else { continue };
                                if text.starts_with(PROBE) {
                                    probing.heard(&text);
                                    continue;
                                }
                                if tx.try_send(text).is_err() {
                                    if tx.is_closed() {
                                        return;
                                    }
                                    tracing::warn!(target: "droid", "a relayed message was dropped: the backlog is full");
                                }
                            }
                            () = probing.due() => {
                                let probe = probing.next_probe();
                                match store.send(&instance, &probe).await {
                                    // Not even this subscription is there.
                                    Ok(0) => {
                                        tracing::warn!(target: "droid", "the relay's subscription is gone from the store; subscribing again");
                                        break;
                                    }
                                    Ok(_) => probing.sent(probe),
                                    // The store is away: nothing can be proven now,
                                    // and the next probe tries again.
                                    Err(_) => probing.not_sent(),
                                }
                            }
                            () = probing.overdue() => {
                                tracing::warn!(target: "droid", "the relay's subscription stopped hearing its own probe; subscribing again");
                                break;
                            }
                            () = tx.closed() => return,
                        }
                    }
                }
            });
            Ok(rx)
        })
    }
}

/// What a probe of a relay's subscription starts with: a relayed message is
/// JSON, or an answer relayed to a session (its id, which is hex, then the
/// answer), so never this.
const PROBE: &str = "\u{0}probe ";

/// When a relay's subscription is next proven alive, and the probe it
/// waits to hear.
struct Probing {
    every: Duration,
    next: tokio::time::Instant,
    waiting: Option<(String, tokio::time::Instant)>,
}

impl Probing {
    fn new(every: Duration) -> Self {
        Self {
            every,
            next: tokio::time::Instant::now() + every,
            waiting: None,
        }
    }

    /// Ready when a probe is due and none is waiting to be heard.
    async fn due(&self) {
        if self.waiting.is_some() {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep_until(self.next).await;
    }

    /// Ready when the probe sent was not heard in time.
    async fn overdue(&self) {
        match &self.waiting {
            Some((_, by)) => tokio::time::sleep_until(*by).await,
            None => std::future::pending().await,
        }
    }

    fn next_probe(&self) -> String {
        format!("{PROBE}{}", crate::application::random::unique_hex())
    }

    fn sent(&mut self, probe: String) {
        let now = tokio::time::Instant::now();
        self.waiting = Some((probe, now + self.every / 2));
        self.next = now + self.every;
    }

    fn not_sent(&mut self) {
        self.next = tokio::time::Instant::now() + self.every;
    }

    /// Another instance's probes on a channel every instance hears are
    /// theirs to wait for, not this one's.
    fn heard(&mut self, probe: &str) {
        if self.waiting.as_ref().is_some_and(|(sent, _)| sent == probe) {
            self.waiting = None;
        }
    }
}

/// A session from its hash's fields and values, in turn; `None` without
/// its record.
fn kept_session(fields: Vec<String>) -> Option<KeptSession> {
    let mut kept = KeptSession::default();
    let mut record = None;
    let mut pairs = fields.into_iter();
    while let (Some(field), Some(value)) = (pairs.next(), pairs.next()) {
        match field.as_str() {
            "record" => record = Some(value),
            "level" => kept.level = Some(value),
            "v" => kept.version = value.parse().unwrap_or(0),
            _ => {
                if let Some(uri) = field.strip_prefix("s:") {
                    kept.subscribed.push(uri.to_owned());
                }
            }
        }
    }
    kept.subscribed.sort_unstable();
    kept.record = record?;
    Some(kept)
}

impl RedisStore {
    async fn subscribe(&self, channel: &str) -> Result<redis::aio::PubSub, StoreError> {
        let subscribing = async {
            let mut pubsub = self
                .client
                .get_async_pubsub()
                .await
                .map_err(|e| self.unavailable(&e))?;
            pubsub
                .subscribe(channel)
                .await
                .map_err(|e| self.unavailable(&e))?;
            Ok(pubsub)
        };
        tokio::time::timeout(self.timeout, subscribing)
            .await
            .map_err(|_| StoreError::Unavailable(format!("{}: no answer in time", self.shown)))?
    }
}

/// A script with the index helpers before it.
fn with_prune(body: &str) -> redis::Script {
    redis::Script::new(&format!("{PRUNE}\n{body}"))
}

fn hex(bytes: &[u8]) -> String {
    use fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, byte| {
            let _ = write!(out, "{byte:02x}");
            out
        })
}

/// A client for `url`. One speaking TLS (`rediss://`, `valkeys://`) trusts
/// the platform's authorities and, given `private`, those too. The Redis
/// client builds its TLS itself and takes authorities only as PEM, in place
/// of the platform's, so both are handed to it; and it gives up on a
/// platform store with a single certificate it cannot use, which this
/// leaves out, as the HTTP clients do.
fn open(url: &str, private: Option<&[u8]>) -> redis::RedisResult<redis::Client> {
    let tls = url::Url::parse(url).is_ok_and(|u| matches!(u.scheme(), "rediss" | "valkeys"));
    if !tls {
        return redis::Client::open(url);
    }
    // The Redis client asks rustls for the process's provider; this build
    // has ring only, made the process's default here (kept if one was set
    // already).
    let _already = rustls::crypto::ring::default_provider().install_default();
    let mut roots = platform_roots_pem();
    if let Some(private) = private {
        roots.extend_from_slice(private);
    }
    redis::Client::build_with_tls(
        url,
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(roots),
        },
    )
}

/// The platform's certificate authorities as PEM, which is the form the
/// Redis client takes them in: those that can be trust anchors, the others
/// left out. (The webpki roots the HTTP clients also trust are anchors,
/// not certificates, so they cannot be handed over this way.)
fn platform_roots_pem() -> Vec<u8> {
    use base64::Engine as _;
    let mut pem = Vec::new();
    for certificate in rustls_native_certs::load_native_certs().certs {
        if webpki::anchor_from_trusted_cert(&certificate).is_err() {
            continue;
        }
        let encoded = base64::engine::general_purpose::STANDARD.encode(certificate.as_ref());
        pem.extend_from_slice(b"-----BEGIN CERTIFICATE-----\n");
        for line in encoded.as_bytes().chunks(64) {
            pem.extend_from_slice(line);
            pem.push(b'\n');
        }
        pem.extend_from_slice(b"-----END CERTIFICATE-----\n");
    }
    pem
}

/// Whether `error` says the connection can no longer be trusted: an
/// answer of the wrong kind (one meant for another command, the
/// connection's answers out of turn) or none in time (a peer that went
/// silent). Redis's own refusals (out of memory, a script missing) leave
/// it sound.
fn untrusted(error: &redis::RedisError) -> bool {
    error.is_timeout() || matches!(error.kind(), redis::ErrorKind::UnexpectedReturnType)
}

/// Why connecting failed, as a sentence: a TLS failure named as such (an
/// unknown issuer with how to trust a private one), else the client's own
/// words.
fn connect_failure(error: &redis::RedisError) -> String {
    const HINT: &str = "name a private CA with --ca-file";
    if let Some(tls) = crate::adapters::secondary::tls::tls_failure(error, HINT) {
        return tls;
    }
    // The connection manager keeps a failure as text (an error it hands to
    // every waiter must be cloned), so the TLS error is found in its words:
    // rustls's own for this one.
    let words = error.to_string();
    if words.contains("invalid peer certificate: UnknownIssuer") {
        return format!("TLS: the server's certificate is signed by an unknown issuer ({HINT})");
    }
    words
}

/// `url` with any password replaced and its query dropped, for logs and
/// errors: a `redis+unix://` URL carries its password as `?pass=`.
fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            parsed.set_query(None);
            parsed.to_string()
        }
        // Not a URL: nothing is shown of it, since it may be all secret.
        Err(_) => "(an unreadable store URL)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_reaches_a_message() {
        let shown = redact("redis://app:s3cret@10.0.0.5:6379/2");
        assert!(!shown.contains("s3cret"));
        assert!(shown.contains("10.0.0.5"));
        assert_eq!(redact("not a url s3cret"), "(an unreadable store URL)");
        let socket = redact("redis+unix:///run/redis.sock?db=1&pass=s3cret");
        assert!(!socket.contains("s3cret"), "{socket}");
        assert!(socket.contains("/run/redis.sock"), "{socket}");
    }

    #[test]
    fn the_platforms_authorities_are_handed_over_as_pem() {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject as _;
        let platform: Vec<CertificateDer<'_>> = rustls_native_certs::load_native_certs()
            .certs
            .into_iter()
            .filter(|c| webpki::anchor_from_trusted_cert(c).is_ok())
            .collect();
        let pem = platform_roots_pem();
        let read: Vec<CertificateDer<'_>> = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<_, _>>()
            .unwrap_or_default();
        assert_eq!(read, platform);
    }

    /// A TLS store's client is built from the platform's authorities and a
    /// private one together, whatever the platform's store holds.
    #[test]
    fn a_tls_client_takes_the_platforms_authorities_and_a_private_one() -> Result<(), rcgen::Error>
    {
        let key = rcgen::KeyPair::generate()?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = params.self_signed(&key)?.pem();
        for url in ["rediss://127.0.0.1:1", "valkeys://127.0.0.1:1"] {
            assert!(open(url, Some(ca.as_bytes())).is_ok(), "{url}");
            assert!(open(url, None).is_ok(), "{url}");
        }
        assert!(open("redis://127.0.0.1:1", Some(ca.as_bytes())).is_ok());
        Ok(())
    }

    #[test]
    fn digests_are_written_as_lower_case_hex() {
        assert_eq!(hex(&[0, 15, 255]), "000fff");
    }
}
