//! Replaying a retried `tools/call` instead of running it twice.
//!
//! A client that loses a connection mid-call cannot tell whether the tool
//! ran, and the safe thing for it is to send the same request again with the
//! same id. A tool that moves money or deletes files must not run twice for
//! that. [`IdempotencyStore`] remembers, per session and request id, what a
//! call answered, and hands that answer back to the retry.
//!
//! The dispatcher records legacy calls on the transports whose session
//! outlives a connection (Streamable HTTP, HTTP+SSE). A stdio session ends
//! with its pipe, so no retry could reach a record there, and none is made.
//!
//! # The calling contract
//!
//! For each `tools/call`:
//!
//! 1. [`admit`](IdempotencyStore::admit) it with its session, id and
//!    [`request_digest`](crate::domain::canonical::request_digest).
//! 2. On [`Admission::Fresh`], run the call, then either
//!    [`record`](IdempotencyStore::record) its answer or, if it was
//!    cancelled or failed in a way a retry should re-run,
//!    [`abandon`](IdempotencyStore::abandon) it. Exactly one of the two:
//!    an entry never settled stays in flight, holding its slot and refusing
//!    its retries, until its session [ends](IdempotencyStore::end_session).
//!    A drop guard around the call is the robust way to keep this promise.
//! 3. On [`Admission::Replay`], answer with the recorded outcome without
//!    running anything.
//! 4. On any refusal ([`Admission::InFlight`], [`Admission::Conflict`],
//!    [`Admission::Full`]), answer with an error and run nothing.
//!
//! # Bounds
//!
//! Every bound that one client could fill is per session, so that no
//! session's calls can crowd out another's ([`IdempotencyLimits`]):
//!
//! - A session holds at most `per_session` entries, in flight and completed
//!   together. When its share is full its own completed entry recorded
//!   longest ago makes room; an in-flight entry is never evicted, because
//!   forgetting it would let its duplicate run while it is still running. If
//!   all of a session's entries are in flight, `admit` refuses that session
//!   alone with [`Admission::Full`].
//! - Recorded answers are bounded in bytes, per session and in all. An
//!   answer larger than `max_record_bytes` is not kept; its retry is told so
//!   (and runs nothing) instead of replaying gigabytes. Past a byte budget,
//!   or past `capacity` completed entries in all, the answers recorded
//!   longest ago (the session's own first, for its budget) are forgotten.
//! - In-flight entries are not bounded in all by the store: each is a few
//!   words, their number is bounded by the sessions times `per_session`,
//!   and a global bound there is exactly what let one session starve every
//!   other.
//!
//! A completed entry is replayable for `ttl_ms` after it was recorded.
//!
//! # Concurrency and time
//!
//! The store is plain data with `&mut self` methods, meant to sit behind a
//! `Mutex` shared by a server's request handlers: hold the lock for one
//! method call, never across the tool call itself. Time is an argument, in
//! milliseconds from any fixed origin, so expiry is tested without a clock.

use core::fmt;
use std::collections::{BTreeMap, HashMap, hash_map};

use serde_json::Value;

use super::reply::Reply;
use crate::domain::SessionId;
use crate::domain::canonical::RequestDigest;
use crate::domain::jsonrpc::RequestId;

/// What a completed call answered: the member of its JSON-RPC response.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Recorded {
    /// The response's `result` object, as it was first written.
    Result(Reply),
    /// The response's `error` object.
    Error(Value),
}

/// The store's verdict on a `tools/call`.
///
/// Ignoring it is always a bug: either a call runs that must not, or a
/// [`Fresh`](Self::Fresh) entry is never settled.
#[must_use = "a Fresh admission must be recorded or abandoned; a refusal must be answered"]
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Admission {
    /// Never seen: run it, then [`record`](IdempotencyStore::record) or
    /// [`abandon`](IdempotencyStore::abandon).
    Fresh,
    /// Already answered: send this again and run nothing.
    Replay(Recorded),
    /// The same call is running now. Refuse the duplicate: JSON-RPC ids are
    /// unique among a peer's outstanding requests, and running it would run
    /// the tool twice.
    InFlight,
    /// The id was used in this session for a call with other params. A reused
    /// id for another call is not a retry, and replaying the first call's
    /// answer to it would be answering a question nobody asked. Refuse.
    Conflict,
    /// Every slot holds a call still in flight. Refuse rather than grow.
    Full,
}

type Key = (SessionId, RequestId);

/// The bounds of the store that replays a retried `tools/call` (per HTTP
/// session): every one that a client could fill is per session, so no
/// session's calls crowd out another's; the totals cap the whole store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdempotencyLimits {
    /// Completed entries kept in all (4 096).
    pub capacity: usize,
    /// Entries one session holds, in flight and completed (256).
    pub per_session: usize,
    /// Bytes of recorded answers kept in all (64 MiB).
    pub max_bytes: usize,
    /// Bytes of recorded answers one session keeps (4 MiB).
    pub per_session_bytes: usize,
    /// The largest answer kept for replay (1 MiB).
    pub max_record_bytes: usize,
    /// How long a recorded answer is replayed, in milliseconds (10 min).
    pub ttl_ms: u64,
}

impl Default for IdempotencyLimits {
    fn default() -> Self {
        Self {
            capacity: 4096,
            per_session: 256,
            max_bytes: 64 * 1024 * 1024,
            per_session_bytes: 4 * 1024 * 1024,
            max_record_bytes: 1024 * 1024,
            ttl_ms: 10 * 60 * 1000,
        }
    }
}

/// What one session holds.
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    entries: usize,
    bytes: usize,
}

/// Remembers recent `tools/call` answers per session and request id.
///
/// See the [module docs](self) for the calling contract.
pub(crate) struct IdempotencyStore {
    limits: IdempotencyLimits,
    entries: HashMap<Key, Entry>,
    usage: HashMap<SessionId, Usage>,
    /// Bytes of every recorded answer held.
    bytes: usize,
    /// Completed entries by when they were recorded, oldest first: the front
    /// is both the next to expire and the next to evict.
    completed: BTreeMap<Stamp, Key>,
    /// Breaks ties between entries recorded in the same millisecond, so each
    /// has its own place in `completed`.
    next_seq: u64,
}

/// When an entry was recorded, and in which order within that millisecond.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Stamp {
    recorded_at_ms: u64,
    seq: u64,
}

struct Entry {
    digest: RequestDigest,
    state: State,
}

enum State {
    InFlight,
    Completed { outcome: Recorded, bytes: usize },
}

impl IdempotencyStore {
    /// A store holding at most `capacity` entries per session and
    /// completed in all, replaying each answer for `ttl_ms` after it was
    /// recorded, with the default byte bounds.
    ///
    /// A capacity of zero admits nothing: every call is refused as
    /// [`Admission::Full`].
    #[cfg(test)]
    #[must_use]
    pub(crate) fn new(capacity: usize, ttl_ms: u64) -> Self {
        Self::with_limits(IdempotencyLimits {
            capacity,
            per_session: capacity,
            ttl_ms,
            ..IdempotencyLimits::default()
        })
    }

    /// A store with these bounds.
    #[must_use]
    pub(crate) fn with_limits(limits: IdempotencyLimits) -> Self {
        Self {
            limits,
            entries: HashMap::new(),
            usage: HashMap::new(),
            bytes: 0,
            completed: BTreeMap::new(),
            next_seq: 0,
        }
    }

    /// Decides what to do with a `tools/call` with this `id` in `session`,
    /// whose params digest to `digest`.
    ///
    /// A [`Fresh`](Admission::Fresh) admission takes a slot and marks the
    /// call in flight; every other answer leaves the store as it was, apart
    /// from forgetting entries that expired by `now_ms`.
    pub(crate) fn admit(
        &mut self,
        session: SessionId,
        id: &RequestId,
        digest: RequestDigest,
        now_ms: u64,
    ) -> Admission {
        self.purge_expired(now_ms);
        let full = self.usage_of(session).entries >= self.limits.per_session;
        let fresh = Entry {
            digest,
            state: State::InFlight,
        };
        // One lookup for the common case, a call never seen in a store
        // with room.
        let key = match self.entries.entry((session, id.clone())) {
            hash_map::Entry::Occupied(held) => {
                let entry = held.get();
                if entry.digest != digest {
                    return Admission::Conflict;
                }
                return match &entry.state {
                    State::InFlight => Admission::InFlight,
                    State::Completed { outcome, .. } => Admission::Replay(outcome.clone()),
                };
            }
            hash_map::Entry::Vacant(slot) if !full => {
                slot.insert(fresh);
                self.usage.entry(session).or_default().entries += 1;
                return Admission::Fresh;
            }
            hash_map::Entry::Vacant(slot) => slot.into_key(),
        };
        // The session's share is full: only its own answers make room.
        if self.limits.per_session == 0 || !self.evict_oldest_of(Some(session)) {
            return Admission::Full;
        }
        self.entries.insert(key, fresh);
        self.usage.entry(session).or_default().entries += 1;
        Admission::Fresh
    }

    /// Records what the in-flight call `id` in `session` answered.
    ///
    /// Returns whether it was recorded. It is not when there is no such call
    /// in flight: it was abandoned, its session ended, it was recorded
    /// already (the first answer stands), or it was never admitted.
    pub(crate) fn record(
        &mut self,
        session: SessionId,
        id: &RequestId,
        outcome: Recorded,
        now_ms: u64,
    ) -> bool {
        let size = size_of(&outcome);
        self.settle(session, id, size, || outcome, now_ms)
    }

    /// [`record`](Self::record) for an outcome measured (and copied, if it
    /// is small enough to keep) before the store was locked: `size` is what
    /// [`measure`] said of it, and `outcome` is `None` when it was too large
    /// to copy. Writing and copying a large answer is the caller's work, not
    /// something every session's calls wait on the store's lock for.
    pub(crate) fn record_measured(
        &mut self,
        session: SessionId,
        id: &RequestId,
        outcome: Option<Recorded>,
        size: usize,
        now_ms: u64,
    ) -> bool {
        let limit = self.limits.max_record_bytes;
        self.settle(
            session,
            id,
            size,
            || outcome.unwrap_or_else(|| too_large(limit)),
            now_ms,
        )
    }

    fn settle(
        &mut self,
        session: SessionId,
        id: &RequestId,
        size: usize,
        outcome: impl FnOnce() -> Recorded,
        now_ms: u64,
    ) -> bool {
        let key = (session, id.clone());
        let Some(entry) = self.entries.get_mut(&key) else {
            return false;
        };
        if !matches!(entry.state, State::InFlight) {
            return false;
        }
        // Too large to keep: the retry learns the call answered and is not
        // run again, rather than the store holding the answer.
        let (outcome, bytes) = if size > self.limits.max_record_bytes {
            let refusal = too_large(self.limits.max_record_bytes);
            let bytes = size_of(&refusal);
            (refusal, bytes)
        } else {
            (outcome(), size)
        };
        // The id is held twice, as the entry's key and in `completed`, and
        // a client chooses its length: it counts as the answer does.
        let bytes = bytes.saturating_add(id_bytes(id).saturating_mul(2));
        let stamp = Stamp {
            recorded_at_ms: now_ms,
            seq: self.next_seq,
        };
        self.next_seq = self.next_seq.wrapping_add(1);
        entry.state = State::Completed { outcome, bytes };
        self.completed.insert(stamp, key);
        self.bytes += bytes;
        self.usage.entry(session).or_default().bytes += bytes;
        // The session's own budget first, from its own oldest answers; then
        // the store's, from everyone's oldest.
        while self.usage_of(session).bytes > self.limits.per_session_bytes
            && self.evict_oldest_of(Some(session))
        {}
        // Past a bound in all, the session holding the most pays, so one
        // client's answers never push out another's (whose retries would
        // then run again).
        while self.bytes > self.limits.max_bytes || self.completed.len() > self.limits.capacity {
            let heaviest = self
                .usage
                .iter()
                .filter(|(_, usage)| usage.bytes > 0)
                .max_by_key(|(_, usage)| usage.bytes)
                .map(|(owner, _)| *owner);
            if !heaviest.is_some_and(|owner| self.evict_oldest_of(Some(owner))) {
                break;
            }
        }
        true
    }

    fn usage_of(&self, session: SessionId) -> Usage {
        self.usage.get(&session).copied().unwrap_or_default()
    }

    /// Forgets the entry at `key`, whatever its state, keeping the counts.
    fn forget(&mut self, key: &Key) -> Option<Entry> {
        let entry = self.entries.remove(key)?;
        let bytes = match &entry.state {
            State::Completed { bytes, .. } => *bytes,
            State::InFlight => 0,
        };
        self.bytes = self.bytes.saturating_sub(bytes);
        if let hash_map::Entry::Occupied(mut usage) = self.usage.entry(key.0) {
            let held = usage.get_mut();
            held.entries = held.entries.saturating_sub(1);
            held.bytes = held.bytes.saturating_sub(bytes);
            if held.entries == 0 {
                usage.remove();
            }
        }
        Some(entry)
    }

    /// Forgets the in-flight call `id` in `session`, as though it had never
    /// been admitted.
    ///
    /// For a call that was cancelled, or that failed in a way its retry
    /// should run again. A recorded answer is not touched: once a call has
    /// answered, its retries get that answer. Returns whether anything was
    /// forgotten.
    pub(crate) fn abandon(&mut self, session: SessionId, id: &RequestId) -> bool {
        let key = (session, id.clone());
        if matches!(
            self.entries.get(&key),
            Some(Entry {
                state: State::InFlight,
                ..
            })
        ) {
            self.forget(&key);
            return true;
        }
        false
    }

    /// Forgets everything belonging to `session`, in flight or not.
    ///
    /// For when a session closes: nobody can retry into it any more, so its
    /// entries would only hold slots until they expired. A call still running
    /// for it will find its [`record`](Self::record) ignored.
    pub(crate) fn end_session(&mut self, session: SessionId) {
        let mut freed = 0;
        self.entries.retain(|(owner, _), entry| {
            if *owner != session {
                return true;
            }
            if let State::Completed { bytes, .. } = entry.state {
                freed += bytes;
            }
            false
        });
        self.completed.retain(|_, (owner, _)| *owner != session);
        self.bytes = self.bytes.saturating_sub(freed);
        self.usage.remove(&session);
    }

    /// How many entries are held, in flight and completed.
    #[must_use]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is held.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many held entries are calls still in flight.
    #[must_use]
    pub(crate) fn in_flight(&self) -> usize {
        self.entries.len().saturating_sub(self.completed.len())
    }

    /// Bytes of recorded answers held.
    #[cfg(test)]
    #[must_use]
    pub(crate) const fn bytes(&self) -> usize {
        self.bytes
    }

    /// The store's bounds.
    #[must_use]
    pub(crate) const fn limits(&self) -> &IdempotencyLimits {
        &self.limits
    }

    /// Drops every completed entry recorded `ttl_ms` or more before `now_ms`.
    fn purge_expired(&mut self, now_ms: u64) {
        while let Some(entry) = self.completed.first_entry() {
            if entry
                .key()
                .recorded_at_ms
                .saturating_add(self.limits.ttl_ms)
                > now_ms
            {
                break;
            }
            let key = entry.remove();
            self.forget(&key);
        }
    }

    /// Makes room by dropping the completed entry recorded longest ago, of
    /// `session` or of anyone. Returns false if there is none, when every
    /// such entry is in flight.
    fn evict_oldest_of(&mut self, session: Option<SessionId>) -> bool {
        let stamp = self
            .completed
            .iter()
            .find(|(_, (owner, _))| session.is_none_or(|s| s == *owner))
            .map(|(stamp, _)| *stamp);
        let Some(key) = stamp.and_then(|stamp| self.completed.remove(&stamp)) else {
            return false;
        };
        self.forget(&key);
        true
    }
}

impl fmt::Debug for IdempotencyStore {
    /// Counts only: the recorded answers are tool output, which may be large
    /// and may be private to the session that asked.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyStore")
            .field("limits", &self.limits)
            .field("len", &self.len())
            .field("bytes", &self.bytes)
            .field("in_flight", &self.in_flight())
            .finish_non_exhaustive()
    }
}

/// The bytes a held copy of `id` takes beyond its fixed part.
fn id_bytes(id: &RequestId) -> usize {
    match id {
        RequestId::Number(_) => 0,
        RequestId::String(text) => text.len(),
    }
}

/// How many bytes `outcome` takes written as JSON: what a recorded answer
/// is charged, counted without writing it anywhere.
fn size_of(outcome: &Recorded) -> usize {
    match outcome {
        Recorded::Result(reply) => written_size(reply),
        Recorded::Error(value) => written_size(value),
    }
}

/// How many bytes `reply` takes written as JSON, counted without writing it
/// anywhere: what [`IdempotencyStore::record_measured`] is given.
#[must_use]
pub(crate) fn measure(reply: &Reply) -> usize {
    written_size(reply)
}

/// How many bytes `value` takes written as JSON; `usize::MAX`, too large to
/// keep, if it cannot be written.
fn written_size(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).map_or(usize::MAX, |()| count.0)
}

/// What a retry of a call whose answer was too large to keep is told.
pub(crate) fn too_large(limit: usize) -> Recorded {
    Recorded::Error(serde_json::json!({
        "code": crate::domain::jsonrpc::ErrorCode::INVALID_REQUEST.0,
        "message": format!(
            "this request was answered already, and the answer (over {limit} bytes) was too \
             large to keep for a retry; the call was not run again"
        ),
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::canonical::request_digest;

    const TTL: u64 = 1_000;

    fn digest(amount: i64) -> RequestDigest {
        let params = json!({"name": "transfer", "arguments": {"amount": amount}});
        request_digest(params.as_object().unwrap_or(&serde_json::Map::new()))
    }

    fn id(n: i64) -> RequestId {
        RequestId::Number(n)
    }

    fn result(text: &str) -> Recorded {
        Recorded::Result(Reply::Value(
            json!({"content": [{"type": "text", "text": text}]}),
        ))
    }

    const S1: SessionId = SessionId::new(1);
    const S2: SessionId = SessionId::new(2);

    /// Admits and records `n` in `session` at `at`, checking both succeed.
    fn complete(store: &mut IdempotencyStore, session: SessionId, n: i64, at: u64) {
        assert_eq!(
            store.admit(session, &id(n), digest(n), at),
            Admission::Fresh
        );
        assert!(store.record(session, &id(n), result(&n.to_string()), at));
    }

    #[test]
    fn a_call_never_seen_is_fresh() {
        let mut store = IdempotencyStore::new(4, TTL);
        assert_eq!(store.admit(S1, &id(1), digest(10), 0), Admission::Fresh);
        assert_eq!(store.len(), 1);
        assert_eq!(store.in_flight(), 1);
    }

    #[test]
    fn a_retry_of_a_recorded_call_replays_its_result_instead_of_running() {
        let mut store = IdempotencyStore::new(4, TTL);
        assert_eq!(store.admit(S1, &id(1), digest(10), 0), Admission::Fresh);
        assert!(store.record(S1, &id(1), result("sent 10"), 5));
        assert_eq!(
            store.admit(S1, &id(1), digest(10), 10),
            Admission::Replay(result("sent 10"))
        );
        // Replaying is not re-admitting: it stays completed, nothing runs.
        assert_eq!(store.in_flight(), 0);
    }

    #[test]
    fn a_recorded_error_replays_as_an_error() {
        let mut store = IdempotencyStore::new(4, TTL);
        let error = Recorded::Error(json!({"code": -32602, "message": "Unknown tool"}));
        assert_eq!(store.admit(S1, &id(1), digest(10), 0), Admission::Fresh);
        assert!(store.record(S1, &id(1), error.clone(), 0));
        assert_eq!(
            store.admit(S1, &id(1), digest(10), 1),
            Admission::Replay(error)
        );
    }

    #[test]
    fn a_duplicate_while_the_first_runs_is_refused_as_in_flight() {
        let mut store = IdempotencyStore::new(4, TTL);
        assert_eq!(store.admit(S1, &id(1), digest(10), 0), Admission::Fresh);
        assert_eq!(store.admit(S1, &id(1), digest(10), 1), Admission::InFlight);
        assert_eq!(store.len(), 1, "a refused duplicate takes no slot");
    }

    #[test]
    fn a_reused_id_for_other_params_conflicts_instead_of_replaying() {
        let mut store = IdempotencyStore::new(4, TTL);
        assert_eq!(store.admit(S1, &id(1), digest(10), 0), Admission::Fresh);
        assert_eq!(store.admit(S1, &id(1), digest(999), 1), Admission::Conflict);
        assert!(store.record(S1, &id(1), result("sent 10"), 2));
        assert_eq!(store.admit(S1, &id(1), digest(999), 3), Admission::Conflict);
        // The conflict changed nothing: the genuine retry still replays.
        assert_eq!(
            store.admit(S1, &id(1), digest(10), 4),
            Admission::Replay(result("sent 10"))
        );
    }

    #[test]
    fn string_and_number_ids_are_different_calls() {
        let mut store = IdempotencyStore::new(4, TTL);
        complete(&mut store, S1, 1, 0);
        assert_eq!(
            store.admit(S1, &RequestId::from("1"), digest(1), 1),
            Admission::Fresh
        );
    }

    #[test]
    fn the_same_id_in_another_session_is_fresh_and_isolated() {
        let mut store = IdempotencyStore::new(4, TTL);
        assert_eq!(store.admit(S1, &id(1), digest(10), 0), Admission::Fresh);
        // In flight in S1 is nothing to S2, even with identical params.
        assert_eq!(store.admit(S2, &id(1), digest(10), 1), Admission::Fresh);
        assert!(store.record(S1, &id(1), result("S1's answer"), 2));
        assert!(store.record(S2, &id(1), result("S2's answer"), 3));
        assert_eq!(
            store.admit(S2, &id(1), digest(10), 4),
            Admission::Replay(result("S2's answer"))
        );
        assert_eq!(
            store.admit(S1, &id(1), digest(10), 5),
            Admission::Replay(result("S1's answer"))
        );
    }

    #[test]
    fn another_sessions_recorded_answer_is_never_replayed() {
        let mut store = IdempotencyStore::new(4, TTL);
        complete(&mut store, S1, 1, 0);
        // A store keyed on the id alone would replay S1's answer here.
        assert_eq!(store.admit(S2, &id(1), digest(1), 1), Admission::Fresh);
        // And would call this a conflict.
        assert_eq!(
            store.admit(SessionId::new(3), &id(1), digest(7), 1),
            Admission::Fresh
        );
    }

    #[test]
    fn an_abandoned_call_leaves_nothing_behind() {
        let mut store = IdempotencyStore::new(4, TTL);
        assert_eq!(store.admit(S1, &id(1), digest(10), 0), Admission::Fresh);
        assert!(store.abandon(S1, &id(1)));
        assert!(store.is_empty());
        assert_eq!(store.admit(S1, &id(1), digest(10), 1), Admission::Fresh);
        // Nor does a record arriving after the abandonment resurrect it.
        assert!(store.abandon(S1, &id(1)));
        assert!(!store.record(S1, &id(1), result("late"), 2));
        assert!(store.is_empty());
    }

    #[test]
    fn abandoning_does_not_erase_a_recorded_answer() {
        let mut store = IdempotencyStore::new(4, TTL);
        complete(&mut store, S1, 1, 0);
        assert!(!store.abandon(S1, &id(1)));
        assert_eq!(
            store.admit(S1, &id(1), digest(1), 1),
            Admission::Replay(result("1"))
        );
    }

    #[test]
    fn recording_twice_keeps_the_first_answer() {
        let mut store = IdempotencyStore::new(4, TTL);
        complete(&mut store, S1, 1, 0);
        assert!(!store.record(S1, &id(1), result("second"), 1));
        assert_eq!(
            store.admit(S1, &id(1), digest(1), 2),
            Admission::Replay(result("1"))
        );
    }

    #[test]
    fn recording_a_call_never_admitted_is_ignored() {
        let mut store = IdempotencyStore::new(4, TTL);
        assert!(!store.record(S1, &id(1), result("stray"), 0));
        assert!(store.is_empty());
        assert_eq!(store.admit(S1, &id(1), digest(1), 1), Admission::Fresh);
    }

    #[test]
    fn a_recorded_answer_replays_until_the_ttl_and_not_after() {
        let mut store = IdempotencyStore::new(4, TTL);
        assert_eq!(store.admit(S1, &id(1), digest(1), 0), Admission::Fresh);
        // The ttl runs from the recording, not from the admission.
        assert!(store.record(S1, &id(1), result("1"), 500));
        assert_eq!(
            store.admit(S1, &id(1), digest(1), 500 + TTL - 1),
            Admission::Replay(result("1"))
        );
        assert_eq!(
            store.admit(S1, &id(1), digest(1), 500 + TTL),
            Admission::Fresh
        );
    }

    #[test]
    fn an_expired_entry_no_longer_conflicts() {
        let mut store = IdempotencyStore::new(4, TTL);
        complete(&mut store, S1, 1, 0);
        assert_eq!(store.admit(S1, &id(1), digest(2), TTL), Admission::Fresh);
    }

    #[test]
    fn a_long_running_call_stays_in_flight_past_the_ttl() {
        // Expiring it would let its duplicate run while it is still running.
        let mut store = IdempotencyStore::new(4, TTL);
        assert_eq!(store.admit(S1, &id(1), digest(1), 0), Admission::Fresh);
        assert_eq!(
            store.admit(S1, &id(1), digest(1), 10 * TTL),
            Admission::InFlight
        );
    }

    #[test]
    fn when_full_the_answer_recorded_longest_ago_is_evicted_first() {
        let mut store = IdempotencyStore::new(3, TTL);
        // Admitted 1, 2, 3 in that order, but 2 answered first.
        for n in 1..=3 {
            assert_eq!(store.admit(S1, &id(n), digest(n), 0), Admission::Fresh);
        }
        assert!(store.record(S1, &id(2), result("2"), 10));
        assert!(store.record(S1, &id(1), result("1"), 20));
        assert!(store.record(S1, &id(3), result("3"), 30));

        assert_eq!(store.admit(S1, &id(4), digest(4), 40), Admission::Fresh);
        assert_eq!(store.len(), 3);
        // 2 went, not 1: the order is by recording, not by admission.
        assert_eq!(
            store.admit(S1, &id(1), digest(1), 41),
            Admission::Replay(result("1"))
        );
        assert_eq!(
            store.admit(S1, &id(3), digest(3), 41),
            Admission::Replay(result("3"))
        );
        assert_eq!(store.admit(S1, &id(2), digest(2), 42), Admission::Fresh);
        // That admission needed room too, and 1 was now the oldest: 3 stays.
        assert_eq!(
            store.admit(S1, &id(3), digest(3), 43),
            Admission::Replay(result("3"))
        );
        assert_eq!(store.admit(S1, &id(1), digest(1), 43), Admission::Fresh);
    }

    #[test]
    fn answers_recorded_in_the_same_millisecond_evict_in_recording_order() {
        let mut store = IdempotencyStore::new(2, TTL);
        for n in [7, 3] {
            complete(&mut store, S1, n, 5);
        }
        assert_eq!(store.admit(S1, &id(9), digest(9), 5), Admission::Fresh);
        assert_eq!(
            store.admit(S1, &id(3), digest(3), 5),
            Admission::Replay(result("3"))
        );
    }

    #[test]
    fn an_in_flight_call_is_never_evicted() {
        let mut store = IdempotencyStore::new(2, TTL);
        assert_eq!(store.admit(S1, &id(1), digest(1), 0), Admission::Fresh);
        complete(&mut store, S1, 2, 1);
        // Room for 3 comes from the completed 2, not the older in-flight 1.
        assert_eq!(store.admit(S1, &id(3), digest(3), 2), Admission::Fresh);
        assert_eq!(store.admit(S1, &id(1), digest(1), 3), Admission::InFlight);
        assert_eq!(store.admit(S1, &id(2), digest(2), 3), Admission::Full);
    }

    #[test]
    fn a_session_all_in_flight_is_refused_and_no_other_session_is() {
        let mut store = IdempotencyStore::new(3, TTL);
        for n in 1..=3 {
            assert_eq!(store.admit(S1, &id(n), digest(n), 0), Admission::Fresh);
        }
        // S1's share is spent on calls still running: S1 is refused, S2 not.
        assert_eq!(store.admit(S1, &id(4), digest(4), 1), Admission::Full);
        assert_eq!(store.admit(S2, &id(4), digest(4), 1), Admission::Fresh);
        assert_eq!(store.len(), 4);
        // Settling one of S1's frees its slot for S1.
        assert!(store.abandon(S1, &id(2)));
        assert_eq!(store.admit(S1, &id(4), digest(4), 2), Admission::Fresh);
    }

    #[test]
    fn an_answer_too_large_to_keep_is_not_kept_and_its_retry_runs_nothing() {
        let mut store = IdempotencyStore::with_limits(IdempotencyLimits {
            max_record_bytes: 1024,
            ttl_ms: TTL,
            ..IdempotencyLimits::default()
        });
        assert_eq!(store.admit(S1, &id(1), digest(1), 0), Admission::Fresh);
        assert!(store.record(S1, &id(1), result(&"x".repeat(4096)), 0));
        assert!(store.bytes() < 1024, "{} bytes kept", store.bytes());
        // The retry of a call whose answer was not kept must not run.
        let retry = store.admit(S1, &id(1), digest(1), 1);
        let message = match &retry {
            Admission::Replay(Recorded::Error(error)) => {
                error.get("message").and_then(Value::as_str)
            }
            _ => None,
        };
        assert!(
            message.is_some_and(|m| m.contains("not run again")),
            "{retry:?}"
        );
    }

    #[test]
    fn a_session_over_its_byte_budget_forgets_its_own_oldest_answers_only() {
        let mut store = IdempotencyStore::with_limits(IdempotencyLimits {
            per_session_bytes: 3_000,
            ttl_ms: TTL,
            ..IdempotencyLimits::default()
        });
        let big = "y".repeat(900);
        assert_eq!(store.admit(S2, &id(100), digest(100), 0), Admission::Fresh);
        assert!(store.record(S2, &id(100), result(&big), 0));
        for n in 1..=10 {
            assert_eq!(store.admit(S1, &id(n), digest(n), 0), Admission::Fresh);
            assert!(store.record(S1, &id(n), result(&big), 0));
        }
        // S1 keeps what fits its budget, its newest; S2's answer stands.
        assert!(matches!(
            store.admit(S1, &id(10), digest(10), 1),
            Admission::Replay(_)
        ));
        assert_eq!(store.admit(S1, &id(1), digest(1), 1), Admission::Fresh);
        assert!(matches!(
            store.admit(S2, &id(100), digest(100), 1),
            Admission::Replay(_)
        ));
    }

    #[test]
    fn a_long_id_counts_against_the_budget_as_its_answer_does() {
        let mut store = IdempotencyStore::with_limits(IdempotencyLimits {
            per_session_bytes: 3_000,
            ttl_ms: TTL,
            ..IdempotencyLimits::default()
        });
        let long = |n: i64| RequestId::String(format!("{n}{}", "i".repeat(1_000)));
        for n in 1..=10 {
            assert_eq!(store.admit(S1, &long(n), digest(n), 0), Admission::Fresh);
            assert!(store.record(S1, &long(n), result("."), 0));
        }
        assert!(store.bytes() <= 3_000, "{} bytes kept", store.bytes());
        assert_eq!(store.admit(S1, &long(1), digest(1), 1), Admission::Fresh);
    }

    #[test]
    fn expired_answers_make_room_before_live_ones_are_evicted() {
        let mut store = IdempotencyStore::new(2, TTL);
        complete(&mut store, S1, 1, 0);
        complete(&mut store, S1, 2, TTL / 2);
        // At TTL, 1 has expired and 2 has not: 3 takes 1's slot.
        assert_eq!(store.admit(S1, &id(3), digest(3), TTL), Admission::Fresh);
        assert_eq!(
            store.admit(S1, &id(2), digest(2), TTL),
            Admission::Replay(result("2"))
        );
    }

    #[test]
    fn one_sessions_answers_never_push_out_anothers() {
        let mut store = IdempotencyStore::with_limits(IdempotencyLimits {
            capacity: 4,
            per_session: 100,
            ttl_ms: TTL,
            ..IdempotencyLimits::default()
        });
        assert_eq!(store.admit(S2, &id(100), digest(100), 0), Admission::Fresh);
        assert!(store.record(S2, &id(100), result("mine"), 0));
        for n in 1..=10 {
            assert_eq!(store.admit(S1, &id(n), digest(n), 1), Admission::Fresh);
            assert!(store.record(S1, &id(n), result("flood"), 1));
        }
        // Past the bound in all, S1 (holding the most) paid for it.
        assert_eq!(
            store.admit(S2, &id(100), digest(100), 2),
            Admission::Replay(result("mine"))
        );
        assert!(store.len() - store.in_flight() <= 4);
    }

    #[test]
    fn the_store_never_holds_more_than_its_bounds() {
        let mut store = IdempotencyStore::new(8, TTL);
        for n in 0..200_i64 {
            let session = SessionId::new(n.unsigned_abs() % 3);
            let now = n.unsigned_abs();
            if store.admit(session, &id(n), digest(n), now) == Admission::Fresh {
                // Leave every fifth call running, abandon every seventh.
                if n % 7 == 0 {
                    assert!(store.abandon(session, &id(n)));
                } else if n % 5 != 0 {
                    assert!(store.record(session, &id(n), result("x"), now));
                }
            }
            let completed = store.len() - store.in_flight();
            assert!(completed <= 8, "{completed} answers kept after call {n}");
            for owner in 0..3 {
                let held = store.usage_of(SessionId::new(owner)).entries;
                assert!(held <= 8, "session {owner} holds {held} after call {n}");
            }
        }
        // Each session's calls left running fill its own share only.
        assert_eq!(store.in_flight(), 24);
        assert_eq!(
            store.admit(SessionId::new(0), &id(1_000), digest(1), 1_000),
            Admission::Full
        );
        assert_eq!(
            store.admit(SessionId::new(9), &id(1_000), digest(1), 1_000),
            Admission::Fresh
        );
    }

    #[test]
    fn a_store_of_capacity_zero_admits_nothing() {
        let mut store = IdempotencyStore::new(0, TTL);
        assert_eq!(store.admit(S1, &id(1), digest(1), 0), Admission::Full);
        assert!(store.is_empty());
    }

    #[test]
    fn ending_a_session_frees_its_slots_and_only_its_own() {
        let mut store = IdempotencyStore::new(4, TTL);
        complete(&mut store, S1, 1, 0);
        assert_eq!(store.admit(S1, &id(2), digest(2), 0), Admission::Fresh);
        complete(&mut store, S2, 1, 0);
        store.end_session(S1);
        assert_eq!(store.len(), 1);
        assert!(!store.record(S1, &id(2), result("late"), 1));
        assert_eq!(
            store.admit(S2, &id(1), digest(1), 1),
            Admission::Replay(result("1"))
        );
        // The ended session's completed entry must not linger in the eviction
        // order, where it would later evict a live entry in its place.
        let mut small = IdempotencyStore::new(1, TTL);
        complete(&mut small, S1, 1, 0);
        small.end_session(S1);
        complete(&mut small, S2, 2, 1);
        assert_eq!(small.admit(S2, &id(3), digest(3), 2), Admission::Fresh);
        assert_eq!(small.len(), 1);
    }

    #[test]
    fn debug_prints_counts_and_not_recorded_answers() {
        let mut store = IdempotencyStore::new(4, TTL);
        assert_eq!(store.admit(S1, &id(1), digest(1), 0), Admission::Fresh);
        assert!(store.record(S1, &id(1), result("private tool output"), 0));
        let printed = format!("{store:?}");
        assert!(printed.contains("len: 1"), "{printed}");
        assert!(!printed.contains("private"), "{printed}");
    }
}
