//! The store several instances share, in Redis: the
//! [`KeyRingStore`] and [`RoundLedger`] ports over one multiplexed
//! connection.
//!
//! One connection carries every instance's requests to Redis, pipelined:
//! the connection manager of the `redis` crate sends each command as it
//! comes and matches answers in order, so there is nothing to pool. It
//! reconnects by itself after a failure; a command sent while Redis is
//! away fails within [`RedisOptions::timeout`] as
//! [`StoreError::Unavailable`], and the next one tries again.
//!
//! # What is kept, under the key prefix (`droid:` unless told otherwise)
//!
//! | key | value | lifetime |
//! |---|---|---|
//! | `state-keys` | the `requestState` [key ring](crate::application::server::KeyRing), JSON | kept; rotated in place |
//! | `round:<tag>` | hex digest of a round's `inputResponses` | until the state expires |
//!
//! The key ring holds secrets: a Redis that others can read lets them mint
//! states. Keep it on a private network, with a password or ACL user in the
//! URL (`redis://user:password@host:6379/0`).
//!
//! Every check-and-write is one Lua script, so it is atomic in Redis
//! whichever instance sends it and however their commands interleave.

use core::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::application::server::{
    BoxFuture, KeyRingStore, RotationPolicy, Round, RoundLedger, SharedState, StoreError,
};

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
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            prefix: "droid:".to_owned(),
            timeout: Duration::from_secs(2),
        }
    }
}

/// The shared store in Redis.
#[derive(Clone)]
pub struct RedisStore {
    connection: ConnectionManager,
    /// The URL without its password, for messages.
    shown: String,
    prefix: String,
    replace_ring: Arc<redis::Script>,
    answer_round: Arc<redis::Script>,
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
    /// Connects to the Redis at `url` (`redis://[user:password@]host[:port][/db]`
    /// or `redis+unix:///path/to.sock`), and checks it answers.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when the URL is not one, or Redis does
    /// not answer within the timeout. The message never carries a password.
    pub async fn connect(url: &str, options: RedisOptions) -> Result<Self, StoreError> {
        let shown = redact(url);
        let client = redis::Client::open(url)
            .map_err(|e| StoreError::Unavailable(format!("{shown}: {e}")))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(options.timeout))
            .set_response_timeout(Some(options.timeout))
            .set_number_of_retries(2)
            .set_max_delay(options.timeout);
        let connection = tokio::time::timeout(
            options.timeout.saturating_mul(2),
            ConnectionManager::new_with_config(client, config),
        )
        .await
        .map_err(|_| StoreError::Unavailable(format!("{shown}: no answer in time")))?
        .map_err(|e| StoreError::Unavailable(format!("{shown}: {e}")))?;
        let store = Self {
            connection,
            shown,
            prefix: options.prefix,
            replace_ring: Arc::new(redis::Script::new(REPLACE_RING)),
            answer_round: Arc::new(redis::Script::new(ANSWER_ROUND)),
        };
        store.ping().await?;
        Ok(store)
    }

    /// What a server shares through this store, rotating its keys by
    /// `rotation`.
    #[must_use]
    pub fn shared(&self, rotation: RotationPolicy) -> SharedState {
        let store = Arc::new(self.clone());
        SharedState {
            keys: store.clone(),
            rounds: store,
            rotation,
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

    /// Runs `attempt` on the connection, and once more when the connection
    /// had broken: the first command after Redis comes back finds the
    /// broken connection and starts the manager's reconnection, and the
    /// second rides the new connection. Each script here is safe to run
    /// twice: a compare-and-swap that did land answers "changed" the second
    /// time and is read again, a round recorded answers as its own retry.
    async fn run<T, F, Fut>(&self, mut attempt: F) -> Result<T, StoreError>
    where
        F: FnMut(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        match attempt(self.connection.clone()).await {
            Err(error) if error.is_io_error() || error.is_unrecoverable_error() => {
                attempt(self.connection.clone()).await
            }
            done => done,
        }
        .map_err(|e| self.unavailable(&e))
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

fn hex(bytes: &[u8]) -> String {
    use fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, byte| {
            let _ = write!(out, "{byte:02x}");
            out
        })
}

/// `url` with any password replaced, for logs and errors.
fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
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
    }

    #[test]
    fn digests_are_written_as_lower_case_hex() {
        assert_eq!(hex(&[0, 15, 255]), "000fff");
    }
}
