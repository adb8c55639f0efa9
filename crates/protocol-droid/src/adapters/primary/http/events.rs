//! Recorded events, for resuming a dropped stream with `Last-Event-ID`.
//!
//! Every event a legacy session's response streams carry is recorded here
//! before it is sent, so a client whose connection dropped can come back
//! with a GET naming the last id it saw and receive the rest: the rest of
//! that stream only, never another stream's events. The record is bounded
//! in events and in bytes; the oldest events go first. Events are kept as
//! the text that was sent, so what the bound counts is what is held.
//!
//! Where sessions are shared between instances, a client may resume on
//! another instance than the one writing the stream. A stream whose reader
//! left is then copied to the shared store ([`Mirror`]) as it goes on, and
//! its event ids name the instance, so the one the client reaches reads it
//! from there.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::json;
use tokio::sync::Notify;

use crate::application::server::{SessionStore, StoreError};

/// Where a shared session's streams are copied once their reader leaves.
pub(super) struct Mirror {
    pub(super) store: Arc<dyn SessionStore>,
    pub(super) session: String,
    /// This instance's name, which the streams' ids carry.
    pub(super) instance: String,
    /// How long a copied stream is kept after its last event.
    pub(super) ttl_ms: u64,
}

/// The first line of every copied stream, so a resumer can tell a stream
/// being copied from one that never will be.
const OPENED: &str = r#"{"open":true}"#;

/// How long a resume on another instance waits for a stream that has no
/// copy at all before it gives up: one whose reader never left, or that
/// never existed.
pub(super) const UNCOPIED_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

impl core::fmt::Debug for Mirror {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Mirror")
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl Mirror {
    /// The name of this instance's stream `stream` in the store.
    pub(super) fn key(&self, stream: u64) -> String {
        format!("{}/{stream}", self.instance)
    }
}

/// What the sessions of one opener (a principal, or an anonymous caller's
/// address: the key its session quota counts under) keep for resumption
/// together, and what every session keeps in all. A session's own bound
/// alone let one opener's many sessions hold gigabytes between them.
#[derive(Debug)]
pub(super) struct ReplayBudget {
    per_opener: usize,
    in_all: usize,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    in_all: usize,
    by_opener: HashMap<String, usize>,
}

impl ReplayBudget {
    /// A budget of `per_opener` bytes for each opener and `in_all` for
    /// every session together.
    pub(super) fn new(per_opener: usize, in_all: usize) -> Arc<Self> {
        Arc::new(Self {
            per_opener,
            in_all,
            held: Mutex::default(),
        })
    }

    /// Counts `taken` more bytes and `given` fewer for `opener`: whether
    /// the opener and everyone together are still within their bounds.
    fn settle(&self, opener: &str, taken: usize, given: usize) -> bool {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.in_all = held.in_all.saturating_add(taken).saturating_sub(given);
        let within_all = held.in_all <= self.in_all;
        let mine = match held.by_opener.get_mut(opener) {
            Some(mine) => {
                *mine = mine.saturating_add(taken).saturating_sub(given);
                *mine
            }
            None => {
                if taken > 0 {
                    held.by_opener.insert(opener.to_owned(), taken);
                }
                taken
            }
        };
        if mine == 0 {
            held.by_opener.remove(opener);
        }
        within_all && mine <= self.per_opener
    }

    /// The bytes held for `opener` (tests).
    #[cfg(test)]
    fn held_by(&self, opener: &str) -> usize {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.by_opener.get(opener).copied().unwrap_or(0)
    }
}

/// A session's place in a [`ReplayBudget`]: the budget, and whose share
/// its events count against.
#[derive(Debug)]
pub(super) struct Share {
    pub(super) budget: Arc<ReplayBudget>,
    pub(super) opener: String,
}

/// One recorded event.
#[derive(Clone, Debug)]
pub(super) struct Recorded {
    pub(super) stream: u64,
    pub(super) seq: u64,
    /// The event's data as sent: one JSON value.
    pub(super) data: Arc<str>,
    /// A notification, which the shared bounds may drop. An answer or a
    /// question is kept, counted only against its session's own bound: a
    /// stream released for polling, or dropped, reaches them only by a
    /// resume.
    pub(super) spare: bool,
}

/// Where an event id points: the instance that wrote it (where sessions
/// are shared), its stream, and its place in the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct EventId<'a> {
    pub(super) instance: Option<&'a str>,
    pub(super) stream: u64,
    pub(super) seq: u64,
}

/// Reads an id back into where it points: `STREAM-SEQ`, or
/// `INSTANCE/STREAM-SEQ` from an instance sharing its sessions.
pub(super) fn parse_event_id(id: &str) -> Option<EventId<'_>> {
    let id = id.trim();
    let (instance, place) = match id.rsplit_once('/') {
        Some((instance, place)) if !instance.is_empty() => (Some(instance), place),
        Some(_) => return None,
        None => (None, id),
    };
    let (stream, seq) = place.split_once('-')?;
    Some(EventId {
        instance,
        stream: stream.parse().ok()?,
        seq: seq.parse().ok()?,
    })
}

#[derive(Debug, Default)]
struct Log {
    events: VecDeque<Recorded>,
    /// The bytes of `events`' data.
    bytes: usize,
    /// Streams still being written. Any other stream, whether finished or
    /// never opened, has nothing more coming, so a resume of it ends after
    /// replaying what is left rather than waiting for ever.
    live: std::collections::HashSet<u64>,
    next_stream: u64,
    /// Which reader holds each live stream a resume took over: the
    /// resume's ticket. A stream absent here is held by the response it
    /// was opened for (ticket 0). A message is sent on one stream only, so
    /// the newest resume of a stream takes it from whoever held it.
    readers: HashMap<u64, u64>,
    next_ticket: u64,
}

/// A session's bounded event record.
#[derive(Debug)]
pub(super) struct EventStore {
    capacity: usize,
    max_bytes: usize,
    log: Mutex<Log>,
    appended: Notify,
    mirror: Option<Mirror>,
    /// What its events count against besides its own bound, if anything.
    share: Option<Share>,
}

impl EventStore {
    pub(super) fn new(
        capacity: usize,
        max_bytes: usize,
        mirror: Option<Mirror>,
        share: Option<Share>,
    ) -> Self {
        Self {
            capacity: capacity.max(1),
            max_bytes,
            log: Mutex::default(),
            appended: Notify::new(),
            mirror,
            share,
        }
    }

    /// Counts `taken` more bytes and `given` fewer against the session's
    /// share: whether it is still within it (always, without one).
    fn settle(&self, taken: usize, given: usize) -> bool {
        self.share
            .as_ref()
            .is_none_or(|share| share.budget.settle(&share.opener, taken, given))
    }

    /// Where this session's streams are copied, if it is shared.
    pub(super) const fn mirror(&self) -> Option<&Mirror> {
        self.mirror.as_ref()
    }

    /// The SSE id of event `seq` of `stream`: which stream, where in it,
    /// and, where sessions are shared, which instance wrote it.
    pub(super) fn id_of(&self, stream: u64, seq: u64) -> String {
        match &self.mirror {
            Some(mirror) => format!("{}/{stream}-{seq}", mirror.instance),
            None => format!("{stream}-{seq}"),
        }
    }

    /// Copies the events of `stream` after `after` (all of it, opening the
    /// copy, when `None`) to the shared store, and that the stream is over
    /// with `done`, for a resume on another instance; answers the last
    /// event copied. Nothing happens for a session that is not shared.
    pub(super) async fn copy_out(
        &self,
        stream: u64,
        after: Option<u64>,
        done: bool,
    ) -> Result<u64, StoreError> {
        let first = after.is_none();
        let after = after.unwrap_or(0);
        let Some(mirror) = &self.mirror else {
            return Ok(after);
        };
        let mut last = after;
        let mut lines: Vec<String> = first.then(|| OPENED.to_owned()).into_iter().collect();
        let copied: Vec<String> = self.log.lock().map_or_else(
            |_| Vec::new(),
            |log| {
                log.events
                    .iter()
                    .filter(|e| e.stream == stream && e.seq > after)
                    .map(|e| {
                        last = last.max(e.seq);
                        format!(r#"{{"seq":{},"data":{}}}"#, e.seq, e.data)
                    })
                    .collect()
            },
        );
        lines.extend(copied);
        if done {
            lines.push(json!({ "done": true }).to_string());
        }
        mirror
            .store
            .append_events(
                &mirror.session,
                &mirror.key(stream),
                &lines,
                done,
                self.capacity.saturating_add(2),
                mirror.ttl_ms,
            )
            .await?;
        Ok(last)
    }

    /// A fresh stream number.
    pub(super) fn open_stream(&self) -> u64 {
        self.log.lock().map_or(0, |mut log| {
            log.next_stream += 1;
            let stream = log.next_stream;
            log.live.insert(stream);
            stream
        })
    }

    /// A resume of `stream` takes it over: from now on what is recorded
    /// for it is sent to this resume alone, not to the response it was
    /// opened for nor to an earlier resume (each of which then ends). Its
    /// ticket, for [`Self::holds`].
    pub(super) fn take_over(&self, stream: u64) -> u64 {
        let ticket = self.log.lock().map_or(0, |mut log| {
            log.next_ticket += 1;
            let ticket = log.next_ticket;
            if log.live.contains(&stream) {
                log.readers.insert(stream, ticket);
            }
            ticket
        });
        // Whoever held it hears it was taken.
        self.appended.notify_waiters();
        ticket
    }

    /// Whether the reader of `ticket` still holds `stream` (0 for the
    /// response it was opened for). A finished stream is anyone's to
    /// replay.
    pub(super) fn holds(&self, stream: u64, ticket: u64) -> bool {
        self.log
            .lock()
            .is_ok_and(|log| log.readers.get(&stream).is_none_or(|held| *held == ticket))
    }

    /// Records `data` (one JSON value's text) as event `seq` of `stream`,
    /// making room from the oldest. The newest event is kept even when it
    /// is larger than the session's byte bound by itself (an answer, most
    /// often, which a resume must not lose): it is then the only one kept.
    /// Past its opener's share, or the share of every session together,
    /// the session's own notifications go (`spare`), the oldest first and
    /// this one too if need be: a resume may miss them. Answers and
    /// questions stay, within the session's own bound.
    ///
    /// Whether the response `stream` was opened for still holds it (no
    /// resume took it over), read in the same moment: if not, the event is
    /// the resume's to send, not the response's.
    pub(super) fn record(&self, stream: u64, seq: u64, data: Arc<str>, spare: bool) -> bool {
        let mut held = true;
        if let Ok(mut log) = self.log.lock() {
            held = !log.readers.contains_key(&stream);
            let mut freed = 0_usize;
            while log.events.len() >= self.capacity
                || (!log.events.is_empty() && log.bytes.saturating_add(data.len()) > self.max_bytes)
            {
                let Some(oldest) = log.events.pop_front() else {
                    break;
                };
                log.bytes = log.bytes.saturating_sub(oldest.data.len());
                freed = freed.saturating_add(oldest.data.len());
            }
            let mut within = self.settle(data.len(), freed);
            log.bytes = log.bytes.saturating_add(data.len());
            log.events.push_back(Recorded {
                stream,
                seq,
                data,
                spare,
            });
            while !within {
                let Some(oldest) = log
                    .events
                    .iter()
                    .position(|e| e.spare)
                    .and_then(|at| log.events.remove(at))
                else {
                    break;
                };
                log.bytes = log.bytes.saturating_sub(oldest.data.len());
                within = self.settle(0, oldest.data.len());
            }
        }
        self.appended.notify_waiters();
        held
    }

    /// Marks `stream` complete: nothing more will be recorded for it.
    pub(super) fn finish(&self, stream: u64) {
        if let Ok(mut log) = self.log.lock() {
            log.live.remove(&stream);
            log.readers.remove(&stream);
        }
        self.appended.notify_waiters();
    }

    /// The events of `stream` after `seq`, and whether the stream is done.
    pub(super) fn after(&self, stream: u64, seq: u64) -> (Vec<Recorded>, bool) {
        self.log.lock().map_or((Vec::new(), true), |log| {
            let events = log
                .events
                .iter()
                .filter(|e| e.stream == stream && e.seq > seq)
                .cloned()
                .collect();
            (events, !log.live.contains(&stream))
        })
    }

    /// Resolves once something is recorded or a stream finishes after this
    /// call; take it before reading, or an append in between is missed.
    pub(super) fn changed(&self) -> core::pin::Pin<Box<tokio::sync::futures::Notified<'_>>> {
        let mut notified = Box::pin(self.appended.notified());
        // Enabled now, not at its first poll, so `notify_waiters` reaches it.
        notified.as_mut().enable();
        notified
    }
}

impl Drop for EventStore {
    /// What the session held is its opener's, and everyone's, again.
    fn drop(&mut self) {
        let bytes = self
            .log
            .get_mut()
            .map_or_else(|poisoned| poisoned.into_inner().bytes, |log| log.bytes);
        if bytes > 0 {
            let _within = self.settle(0, bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resuming_replays_only_that_stream_after_the_id() {
        let store = EventStore::new(16, usize::MAX, None, None);
        let a = store.open_stream();
        let b = store.open_stream();
        store.record(a, 1, "\"a1\"".into(), true);
        store.record(b, 1, "\"b1\"".into(), true);
        store.record(a, 2, "\"a2\"".into(), true);
        store.finish(a);
        let (events, done) = store.after(a, 1);
        assert!(done);
        assert_eq!(
            events
                .iter()
                .map(|e| e.data.to_string())
                .collect::<Vec<_>>(),
            ["\"a2\""]
        );
        let id = events.first().map(|e| store.id_of(e.stream, e.seq));
        assert_eq!(
            id.as_deref().and_then(parse_event_id),
            Some(EventId {
                instance: None,
                stream: a,
                seq: 2
            })
        );
    }

    #[test]
    fn the_record_is_bounded_in_bytes_too() {
        let store = EventStore::new(16, 10, None, None);
        let s = store.open_stream();
        store.record(s, 1, "\"abcd\"".into(), true);
        store.record(s, 2, "\"efgh\"".into(), true);
        let (events, _) = store.after(s, 0);
        assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [2]);
        // Larger than the bound by itself: kept alone, until the next.
        store.record(s, 3, "\"0123456789\"".into(), true);
        let (events, _) = store.after(s, 0);
        assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [3]);
        store.record(s, 4, "1".into(), true);
        store.record(s, 5, "2".into(), true);
        let (events, _) = store.after(s, 0);
        assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [4, 5]);
    }

    #[test]
    fn an_openers_sessions_share_one_bound_and_give_it_back() {
        let budget = ReplayBudget::new(10, 16);
        let share = |opener: &str| {
            Some(Share {
                budget: Arc::clone(&budget),
                opener: opener.to_owned(),
            })
        };
        let seqs = |store: &EventStore, stream| {
            store
                .after(stream, 0)
                .0
                .iter()
                .map(|e| e.seq)
                .collect::<Vec<_>>()
        };
        let first = EventStore::new(16, 1024, None, share("a"));
        let second = EventStore::new(16, 1024, None, share("a"));
        let (one, two) = (first.open_stream(), second.open_stream());
        first.record(one, 1, "\"1234\"".into(), true);
        // Past the opener's 10 bytes: the session recording goes without,
        // and the other session of the opener keeps its events.
        second.record(two, 1, "\"5678\"".into(), true);
        assert_eq!(seqs(&second, two), Vec::<u64>::new());
        assert_eq!(seqs(&first, one), [1]);
        assert_eq!(budget.held_by("a"), 6);
        // Within it, the session's own older events go first.
        first.record(one, 2, "\"ab\"".into(), true);
        first.record(one, 3, "\"cd\"".into(), true);
        assert_eq!(seqs(&first, one), [2, 3]);
        // Another opener has a share of its own, until all are 16 bytes.
        let other = EventStore::new(16, 1024, None, share("b"));
        let three = other.open_stream();
        other.record(three, 1, "\"xyz\"".into(), true);
        assert_eq!(seqs(&other, three), [1]);
        other.record(three, 2, "\"0123456\"".into(), true);
        assert_eq!(seqs(&other, three), Vec::<u64>::new());
        assert_eq!(budget.held_by("b"), 0);
        // An ended session gives back what it held.
        drop(first);
        assert_eq!(budget.held_by("a"), 0);
        second.record(two, 2, "\"5678\"".into(), true);
        assert_eq!(seqs(&second, two), [2]);
        // An answer or a question is kept past the share; the session's
        // notifications go first to make room.
        second.record(two, 3, "\"answer\"".into(), false);
        assert_eq!(seqs(&second, two), [3]);
        second.record(two, 4, "\"question\"".into(), false);
        assert_eq!(seqs(&second, two), [3, 4]);
        assert_eq!(budget.held_by("a"), 18);
        drop(second);
        assert_eq!(budget.held_by("a"), 0);
    }

    #[test]
    fn a_stream_never_opened_is_done_at_once() {
        let store = EventStore::new(4, usize::MAX, None, None);
        let (events, done) = store.after(99, 0);
        assert!(events.is_empty());
        assert!(done, "nothing will ever come: the resume must not wait");
    }

    #[test]
    fn the_record_is_bounded_and_drops_the_oldest() {
        let store = EventStore::new(2, usize::MAX, None, None);
        let s = store.open_stream();
        for seq in 1..=3 {
            store.record(s, seq, seq.to_string().into(), true);
        }
        let (events, _) = store.after(s, 0);
        assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [2, 3]);
    }

    #[test]
    fn malformed_ids_are_not_read() {
        assert_eq!(parse_event_id("x-1"), None);
        assert_eq!(parse_event_id("12"), None);
        assert_eq!(parse_event_id("/3-4"), None);
        let at = |instance, stream, seq| {
            Some(EventId {
                instance,
                stream,
                seq,
            })
        };
        assert_eq!(parse_event_id(" 3-4 "), at(None, 3, 4));
        assert_eq!(parse_event_id("web-1.x/3-4"), at(Some("web-1.x"), 3, 4));
    }
}
