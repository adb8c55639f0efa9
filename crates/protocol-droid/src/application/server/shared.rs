//! What several instances of one server share, through a store they all
//! reach: the ports, and how a server keeps its `requestState` keys in step
//! with them.
//!
//! One instance keeps everything in its own memory, and that is the
//! default. Behind a load balancer each request may land on another
//! instance, so whatever one instance decides that another must honour
//! lives in the shared store instead:
//!
//! - the `requestState` keys ([`KeyRingStore`]), so a state sealed by one
//!   instance opens on every other (see [`KeyRing`] for the rotation);
//! - which rounds were answered and how ([`RoundLedger`]), so a client
//!   cannot try answer after answer against one question by sending each
//!   to another instance.
//!
//! - legacy sessions ([`SessionStore`]), so any instance serves any
//!   session's requests, and a [`Relay`] that carries a client's answer to
//!   the instance that asked the question.
//!
//! A store that cannot be reached fails only what needs it, with
//! [`StoreError::Unavailable`]: a request that carries no `requestState`
//! needs nothing shared and is served as ever.

use std::sync::Arc;

use super::key_ring::{KeyRing, RingError, RotationPolicy};
use super::ports::BoxFuture;
use super::request_state::{Opened, Round, Rounds, StateSealer, TAG_LEN};

/// Why the shared store did not answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// It could not be reached, or did not answer in time. The reason is
    /// for the operator's log; callers are told only that the store is
    /// unavailable.
    #[error("the shared store is unavailable: {0}")]
    Unavailable(String),
    /// It answered with something that is not what was kept.
    #[error("the shared store holds something unreadable: {0}")]
    Corrupt(String),
}

/// Where the shared `requestState` keys are kept, as the text
/// [`KeyRing::encode`] makes.
pub trait KeyRingStore: Send + Sync + core::fmt::Debug {
    /// The ring kept, or `None` when there is none yet.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be read.
    fn load(&self) -> BoxFuture<'_, Result<Option<String>, StoreError>>;

    /// Keeps `next` if the ring kept is still `expected` (`None`: there is
    /// none), atomically; answers whether it was kept. Two instances
    /// rotating at once: one wins, the other reads the winner's ring.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be written.
    fn replace<'a>(
        &'a self,
        expected: Option<&'a str>,
        next: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
}

/// Which `requestState` rounds were answered, and with what.
pub trait RoundLedger: Send + Sync + core::fmt::Debug {
    /// Records that the round sealed as `state` (its tag) is answered with
    /// `responses` (a digest of the `inputResponses`), unless it was
    /// answered otherwise before; kept until the state expires at
    /// `expires_at_ms`.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be reached: the round is then
    /// neither served nor recorded.
    fn answer(
        &self,
        state: [u8; TAG_LEN],
        expires_at_ms: u64,
        responses: [u8; 32],
        now_ms: u64,
    ) -> BoxFuture<'_, Result<Round, StoreError>>;
}

/// A legacy session as a [`SessionStore`] keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeptSession {
    /// The record written when it was opened.
    pub record: String,
    /// The log level its client set since, as the wire names it.
    pub level: Option<String>,
    /// The resources its client is subscribed to, in order.
    pub subscribed: Vec<String>,
    /// How many changes were made to it since it was opened: a reading
    /// older than one already taken is passed over.
    pub version: u64,
}

/// A change to a kept session, made by a request of its client.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeptChange<'a> {
    /// The log level set, as the wire names it.
    pub level: Option<&'a str>,
    /// Resources subscribed to.
    pub subscribed: &'a [String],
    /// Resources no longer subscribed to.
    pub unsubscribed: &'a [String],
    /// How many subscriptions the session may hold: a subscription past
    /// them is not kept.
    pub max_subscribed: usize,
}

/// What became of a [`KeptChange`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKept {
    /// Made, as the session's `version`th change.
    Made {
        /// The session's version after it.
        version: u64,
    },
    /// Made, but for subscriptions past the session's bound.
    Full {
        /// The session's version after it.
        version: u64,
    },
    /// The session is not kept: nothing was made.
    Gone,
}

/// Where legacy sessions are kept, as text the transport writes, so any
/// instance can serve any of them. A record lives while its session is
/// used: each read restarts its idle time, and one left idle for its
/// `ttl_ms` is gone.
///
/// A session is kept in two parts: the record written when it was opened,
/// never written again, and what its client changed since (its log level,
/// its subscriptions), each change made in the store in one step
/// ([`SessionStore::change`]). Two instances changing one session at once
/// (a `logging/setLevel` on one, a `resources/subscribe` on another) then
/// both keep theirs.
pub trait SessionStore: Send + Sync + core::fmt::Debug {
    /// Keeps a new session's record; `false` when the id is already taken.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be written.
    fn create<'a>(
        &'a self,
        id: &'a str,
        record: &'a str,
        ttl_ms: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Session `id` as kept, its idle time restarted; `None` when it ended
    /// or expired (or is kept in a form this build does not read).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be read.
    fn fetch<'a>(
        &'a self,
        id: &'a str,
        ttl_ms: u64,
    ) -> BoxFuture<'a, Result<Option<KeptSession>, StoreError>>;

    /// Makes `change` to a session still kept, in one step, and restarts
    /// its idle time; [`ChangeKept::Gone`] when it is not kept (a session
    /// ended elsewhere is not brought back).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be written.
    fn change<'a>(
        &'a self,
        id: &'a str,
        change: &'a KeptChange<'a>,
        ttl_ms: u64,
    ) -> BoxFuture<'a, Result<ChangeKept, StoreError>>;

    /// Forgets session `id`; `true` when it was kept.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be written.
    fn remove<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Appends `events` (text the transport writes) to the stream `stream`
    /// of session `id`, for any instance to resume it from, while it holds
    /// fewer than `max_events` (the last of `events` always, when it `ends`
    /// the stream); the stream is kept `ttl_ms` after its last append.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be written.
    #[allow(clippy::too_many_arguments)] // Each says one thing of the append.
    fn append_events<'a>(
        &'a self,
        id: &'a str,
        stream: &'a str,
        events: &'a [String],
        ends: bool,
        max_events: usize,
        ttl_ms: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The events of session `id`'s stream `stream` from the `from`th
    /// (counting from 0), as appended.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be read.
    fn events<'a>(
        &'a self,
        id: &'a str,
        stream: &'a str,
        from: usize,
    ) -> BoxFuture<'a, Result<Vec<String>, StoreError>>;
}

/// Carries messages between the instances sharing a store, each heard by
/// name. At most once: a message sent while its instance is not listening
/// is lost, and whoever waits for its effect must time out.
pub trait Relay: Send + Sync + core::fmt::Debug {
    /// Sends `message` to the instance named `instance`; answers how many
    /// listeners heard it (none: nobody listens under that name now).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be reached.
    fn send<'a>(
        &'a self,
        instance: &'a str,
        message: &'a str,
    ) -> BoxFuture<'a, Result<usize, StoreError>>;

    /// Starts hearing what is sent to `instance`, on the receiver answered,
    /// for as long as it is kept; listening resumes by itself after the
    /// store comes back from an outage.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be reached now.
    fn listen<'a>(
        &'a self,
        instance: &'a str,
    ) -> BoxFuture<'a, Result<tokio::sync::mpsc::Receiver<String>, StoreError>>;
}

/// The name every instance listens on, besides its own: what is sent to it
/// reaches them all. No instance can be named so, as names hold no `*`.
pub const EVERY_INSTANCE: &str = "*";

/// What the shared idempotency record said of a `tools/call` being
/// admitted (see [`IdempotencyLedger::admit`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SharedAdmission {
    /// Never seen, or its running mark lapsed (its instance died, or lost
    /// the store for longer than a lease): run it.
    Fresh,
    /// Answered already: this JSON (`{"result": …}` or `{"error": …}`)
    /// again, and run nothing.
    Replay(String),
    /// Running now, its lease held: refuse the duplicate.
    InFlight,
    /// The id was used in this session for other params: refuse.
    Conflict,
    /// The session has as many calls running and recorded as it may.
    Full,
}

/// What [`IdempotencyLedger::record`] records.
#[derive(Clone, Copy, Debug)]
pub struct CallRecord<'a> {
    /// The session.
    pub session: &'a str,
    /// The call's id, as JSON text.
    pub id: &'a str,
    /// The digest of its params.
    pub digest: [u8; 32],
    /// The token it was admitted under.
    pub token: &'a str,
    /// What it answered: `{"result": …}` or `{"error": …}`.
    pub outcome: &'a str,
    /// What is recorded instead when the answer cannot fit.
    pub too_large: &'a str,
    /// How long the answer is replayed, in milliseconds.
    pub ttl_ms: u64,
    /// The most bytes of answers the session keeps.
    pub session_bytes: usize,
    /// The most bytes of answers kept for every session together, those
    /// recorded longest ago making room.
    pub bytes_in_all: usize,
    /// The most answers kept for every session together.
    pub answers_in_all: usize,
}

/// Which `tools/call`s of shared sessions were answered, or are running,
/// on any instance: a retry that reaches another instance replays the
/// answer, and a duplicate is refused while the first runs.
///
/// A running call holds a lease that its instance renews while it runs; a
/// call whose instance died stops being renewed, and a retry runs it once
/// the lease lapses. Every admission has a token of its own, and only the
/// holder of the current token may record or abandon the call, so a
/// late-answering first run cannot overwrite what a second run recorded.
pub trait IdempotencyLedger: Send + Sync + core::fmt::Debug {
    /// Admits call `id` of `session` with the params digest `digest`, under
    /// `token` (random, the admission's own), leased for `lease_ms`, unless
    /// the record says otherwise or the session holds `per_session` calls
    /// already. The same token admitted again (a retried command) is
    /// `Fresh` again.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be reached: nothing runs.
    fn admit<'a>(
        &'a self,
        session: &'a str,
        id: &'a str,
        digest: [u8; 32],
        token: &'a str,
        lease_ms: u64,
        per_session: usize,
    ) -> BoxFuture<'a, Result<SharedAdmission, StoreError>>;

    /// Keeps call `id`'s lease for `lease_ms` more, if `token` still holds
    /// it (marking it running again, with its params' `digest`, if the
    /// mark lapsed and nobody took it); whether it does.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be reached.
    fn renew<'a>(
        &'a self,
        session: &'a str,
        id: &'a str,
        digest: [u8; 32],
        token: &'a str,
        lease_ms: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Records what a call answered, if its token still holds it (or its
    /// mark lapsed and nobody took it) and nothing was recorded; whether it
    /// was. The session's answers stay within their bytes, those recorded
    /// longest ago forgotten first; an answer that cannot fit is recorded
    /// as `too_large`.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be written.
    fn record<'a>(&'a self, call: CallRecord<'a>) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Forgets call `id` of `session` if `token` still holds it unanswered:
    /// a call that ended with nothing worth replaying. Answers whether it
    /// did.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be written.
    fn abandon<'a>(
        &'a self,
        session: &'a str,
        id: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
}

/// Legacy sessions and tasks shared between instances: where they are
/// kept, how a message reaches another instance, and this instance's name
/// there.
#[derive(Clone, Debug)]
pub struct SharedSessions {
    /// Where the sessions are kept.
    pub store: Arc<dyn SessionStore>,
    /// What carries an answer to the instance waiting for it.
    pub relay: Arc<dyn Relay>,
    /// Which calls were answered or are running, on any instance.
    pub idempotency: Arc<dyn IdempotencyLedger>,
    /// Where every instance's tasks are kept, so a task created on one is
    /// polled, answered and cancelled on any (the [`Relay`] reaches the
    /// instance running it).
    pub tasks: Arc<dyn super::tasks::store::TaskStore>,
    /// This instance's name: unique among the instances, of letters,
    /// digits, `.`, `_` and `-` only, since it travels in request ids.
    pub instance: String,
}

/// The rounds answered, in this process's memory, bounded: the ledger of a
/// server that shares nothing.
#[derive(Debug)]
pub(crate) struct MemoryRounds(std::sync::Mutex<Rounds>);

impl MemoryRounds {
    /// A ledger remembering at most `capacity` rounds.
    pub(crate) fn new(capacity: usize) -> Self {
        Self(std::sync::Mutex::new(Rounds::new(capacity)))
    }
}

impl RoundLedger for MemoryRounds {
    fn answer(
        &self,
        state: [u8; TAG_LEN],
        expires_at_ms: u64,
        responses: [u8; 32],
        now_ms: u64,
    ) -> BoxFuture<'_, Result<Round, StoreError>> {
        let round = self.0.lock().map_or(Round::Conflict, |mut rounds| {
            rounds.answer(
                &Opened {
                    payload: serde_json::Value::Null,
                    asked: None,
                    id: state,
                    expires_at_ms,
                },
                responses,
                now_ms,
            )
        });
        Box::pin(async move { Ok(round) })
    }
}

/// What a server shares with the other instances of it.
#[derive(Clone, Debug)]
pub struct SharedState {
    /// Where the `requestState` keys are kept.
    pub keys: Arc<dyn KeyRingStore>,
    /// Where answered rounds are recorded.
    pub rounds: Arc<dyn RoundLedger>,
    /// When the keys rotate and how often they are read.
    pub rotation: RotationPolicy,
    /// Legacy sessions too, or `None` to keep each with the instance that
    /// opened it (behind a balancer that sticks a session to one instance).
    pub sessions: Option<SharedSessions>,
}

/// Why a server could not start sharing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShareError {
    /// The store did not answer.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The ring kept is not one, or a key could not be made.
    #[error(transparent)]
    Ring(#[from] RingError),
}

/// Reads the ring (writing the first, or the next when a rotation is due)
/// and answers it with the sealer it gives at `now_ms`.
///
/// A store that has lost the ring (a Redis restarted without persistence)
/// is given back `known`, the ring this instance last read, rather than a
/// new one: the states sealed before the loss still open. Whichever
/// instance writes first wins, and the others read what it wrote. When the
/// first to write was an instance that knew no ring (one just started), its
/// new ring shares no key with `known`, and `known`'s keys are put back
/// beside its own: each instance seals with the newest key once it has
/// read the joined ring, and opens both.
pub(super) async fn sync_ring(
    store: &dyn KeyRingStore,
    rotation: &RotationPolicy,
    lifetime_ms: u64,
    now_ms: u64,
    known: Option<&KeyRing>,
) -> Result<(KeyRing, StateSealer), ShareError> {
    // A replaced key opens for a state's whole lifetime after the last
    // instance stopped sealing with it, which may be a read later than its
    // successor came into force.
    let rotation = &RotationPolicy {
        keep_ms: rotation
            .keep_ms
            .max(lifetime_ms)
            .saturating_add(rotation.refresh_ms),
        ..*rotation
    };
    // Three reads at most: a lost race means another instance wrote a ring
    // just now, and the next read finds it settled.
    let mut ring = None;
    for _ in 0..3 {
        let kept = store.load().await?;
        let next = match (&kept, known) {
            (Some(text), known) => {
                let stored = KeyRing::decode(text)?;
                let rejoined = match known {
                    Some(known) => stored
                        .rejoined(known, now_ms, rotation)
                        .map_err(RingError::from)?,
                    None => None,
                };
                let next = match rejoined {
                    Some(rejoined) => {
                        tracing::warn!(
                            target: "droid",
                            "the shared key ring was written anew without the keys this instance seals with (the store lost it); they are put back in it, so the states sealed before still open"
                        );
                        Some(rejoined)
                    }
                    None => stored.next(now_ms, rotation).map_err(RingError::from)?,
                };
                let Some(next) = next else {
                    ring = Some(stored);
                    break;
                };
                next
            }
            (None, known) => {
                let current = match known {
                    Some(known) => known.clone(),
                    None => KeyRing::first(now_ms).map_err(RingError::from)?,
                };
                current
                    .next(now_ms, rotation)
                    .map_err(RingError::from)?
                    .unwrap_or(current)
            }
        };
        if store.replace(kept.as_deref(), &next.encode()).await? {
            ring = Some(next);
            break;
        }
    }
    let ring = ring.ok_or_else(|| {
        StoreError::Unavailable("the key ring changed under every read".to_owned())
    })?;
    let sealer = ring.sealer(now_ms, lifetime_ms)?;
    Ok((ring, sealer))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A store in memory with the compare-and-swap the port promises.
    #[derive(Debug, Default)]
    struct Kept(Mutex<Option<String>>);

    impl KeyRingStore for Kept {
        fn load(&self) -> BoxFuture<'_, Result<Option<String>, StoreError>> {
            let kept = self
                .0
                .lock()
                .map(|kept| kept.clone())
                .map_err(|_| StoreError::Unavailable("poisoned".into()));
            Box::pin(async move { kept })
        }

        fn replace<'a>(
            &'a self,
            expected: Option<&'a str>,
            next: &'a str,
        ) -> BoxFuture<'a, Result<bool, StoreError>> {
            let swapped = self
                .0
                .lock()
                .map(|mut kept| {
                    let same = kept.as_deref() == expected;
                    if same {
                        *kept = Some(next.to_owned());
                    }
                    same
                })
                .map_err(|_| StoreError::Unavailable("poisoned".into()));
            Box::pin(async move { swapped })
        }
    }

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    #[tokio::test]
    async fn the_first_instance_writes_the_ring_and_the_next_reads_it() -> TestResult {
        let store = Kept::default();
        let policy = RotationPolicy::default();
        let (_, a) = sync_ring(&store, &policy, 1_000, 5, None).await?;
        let (_, b) = sync_ring(&store, &policy, 1_000, 6, None).await?;
        assert_eq!(a.current_key_id(), b.current_key_id());
        Ok(())
    }

    #[tokio::test]
    async fn a_store_that_lost_the_ring_is_given_back_the_one_known() -> TestResult {
        let store = Kept::default();
        let policy = RotationPolicy::default();
        let (ring, before) = sync_ring(&store, &policy, 1_000, 5, None).await?;
        *store.0.lock().map_err(|_| "poisoned")? = None;
        let (_, after) = sync_ring(&store, &policy, 1_000, 6, Some(&ring)).await?;
        assert_eq!(before.current_key_id(), after.current_key_id());
        assert_eq!(store.load().await?, Some(ring.encode()));
        Ok(())
    }

    #[tokio::test]
    async fn a_ring_written_anew_by_a_starting_instance_gets_the_known_keys_back() -> TestResult {
        use super::super::request_state::StateBinding;
        let binding = StateBinding {
            principal: None,
            method: "tools/call".to_owned(),
            target: "t".to_owned(),
            digest: crate::domain::canonical::request_digest(&serde_json::Map::new()),
        };
        let store = Kept::default();
        let policy = RotationPolicy::default();
        let (known, running) = sync_ring(&store, &policy, 600_000, 5, None).await?;
        let sealed = running.seal(&serde_json::json!({"n": 1}), &binding, 5)?;
        // The store restarted empty, and an instance that just started read
        // it before the running one did: it writes a ring of its own.
        *store.0.lock().map_err(|_| "poisoned")? = None;
        let (started_ring, started) = sync_ring(&store, &policy, 600_000, 6, None).await?;
        assert_ne!(started.current_key_id(), running.current_key_id());
        // The running instance's next read puts its keys back beside the
        // new one, and the started instance's next read takes the joined
        // ring: the state sealed before the loss opens on both, and both
        // seal with one key.
        let (_, running) = sync_ring(&store, &policy, 600_000, 7, Some(&known)).await?;
        let (_, started) = sync_ring(&store, &policy, 600_000, 8, Some(&started_ring)).await?;
        assert!(running.open(&sealed, &binding, 9).is_ok());
        assert!(started.open(&sealed, &binding, 9).is_ok());
        assert_eq!(running.current_key_id(), started.current_key_id());
        Ok(())
    }

    #[tokio::test]
    async fn a_due_rotation_is_written_once() -> TestResult {
        let store = Kept::default();
        let policy = RotationPolicy::default();
        let _first = sync_ring(&store, &policy, 1_000, 0, None).await?;
        let due = policy.rotate_every_ms;
        let _a = sync_ring(&store, &policy, 1_000, due, None).await?;
        let _b = sync_ring(&store, &policy, 1_000, due + 1, None).await?;
        let kept = store.load().await?.ok_or("a ring is kept")?;
        assert_eq!(KeyRing::decode(&kept)?.ids().count(), 2);
        Ok(())
    }

    #[tokio::test]
    async fn the_memory_ledger_serves_a_round_once_per_answer() -> TestResult {
        let ledger = MemoryRounds::new(8);
        let state = [7; TAG_LEN];
        assert_eq!(ledger.answer(state, 100, [1; 32], 0).await?, Round::First);
        assert_eq!(ledger.answer(state, 100, [1; 32], 1).await?, Round::Retry);
        assert_eq!(
            ledger.answer(state, 100, [2; 32], 2).await?,
            Round::Conflict
        );
        Ok(())
    }
}
