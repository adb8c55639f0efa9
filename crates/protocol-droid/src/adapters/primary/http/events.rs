//! Recorded events, for resuming a dropped stream with `Last-Event-ID`.
//!
//! Every event a legacy session's response streams carry is recorded here
//! before it is sent, so a client whose connection dropped can come back
//! with a GET naming the last id it saw and receive the rest: the rest of
//! that stream only, never another stream's events. The record is bounded;
//! the oldest events go first.

use std::collections::VecDeque;
use std::sync::Mutex;

use serde_json::Value;
use tokio::sync::Notify;

/// One recorded event.
#[derive(Clone, Debug)]
pub(super) struct Recorded {
    pub(super) stream: u64,
    pub(super) seq: u64,
    pub(super) data: Value,
}

impl Recorded {
    /// The SSE id of this event: which stream, and where in it.
    pub(super) fn id(&self) -> String {
        event_id(self.stream, self.seq)
    }
}

pub(super) fn event_id(stream: u64, seq: u64) -> String {
    format!("{stream}-{seq}")
}

/// Reads an id back into its stream and position.
pub(super) fn parse_event_id(id: &str) -> Option<(u64, u64)> {
    let (stream, seq) = id.trim().split_once('-')?;
    Some((stream.parse().ok()?, seq.parse().ok()?))
}

#[derive(Debug, Default)]
struct Log {
    events: VecDeque<Recorded>,
    /// Streams still being written. Any other stream, whether finished or
    /// never opened, has nothing more coming, so a resume of it ends after
    /// replaying what is left rather than waiting for ever.
    live: std::collections::HashSet<u64>,
    next_stream: u64,
}

/// A session's bounded event record.
#[derive(Debug)]
pub(super) struct EventStore {
    capacity: usize,
    log: Mutex<Log>,
    appended: Notify,
}

impl EventStore {
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            log: Mutex::default(),
            appended: Notify::new(),
        }
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

    /// Records `data` as the next event of `stream`.
    pub(super) fn record(&self, stream: u64, seq: u64, data: Value) -> Recorded {
        let event = Recorded { stream, seq, data };
        if let Ok(mut log) = self.log.lock() {
            if log.events.len() >= self.capacity {
                log.events.pop_front();
            }
            log.events.push_back(event.clone());
        }
        self.appended.notify_waiters();
        event
    }

    /// Marks `stream` complete: nothing more will be recorded for it.
    pub(super) fn finish(&self, stream: u64) {
        if let Ok(mut log) = self.log.lock() {
            log.live.remove(&stream);
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn resuming_replays_only_that_stream_after_the_id() {
        let store = EventStore::new(16);
        let a = store.open_stream();
        let b = store.open_stream();
        store.record(a, 1, json!("a1"));
        store.record(b, 1, json!("b1"));
        store.record(a, 2, json!("a2"));
        store.finish(a);
        let (events, done) = store.after(a, 1);
        assert!(done);
        assert_eq!(
            events.iter().map(|e| e.data.clone()).collect::<Vec<_>>(),
            [json!("a2")]
        );
        assert_eq!(
            events.first().and_then(|e| parse_event_id(&e.id())),
            Some((a, 2))
        );
    }

    #[test]
    fn a_stream_never_opened_is_done_at_once() {
        let store = EventStore::new(4);
        let (events, done) = store.after(99, 0);
        assert!(events.is_empty());
        assert!(done, "nothing will ever come: the resume must not wait");
    }

    #[test]
    fn the_record_is_bounded_and_drops_the_oldest() {
        let store = EventStore::new(2);
        let s = store.open_stream();
        for seq in 1..=3 {
            store.record(s, seq, json!(seq));
        }
        let (events, _) = store.after(s, 0);
        assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [2, 3]);
    }

    #[test]
    fn malformed_ids_are_not_read() {
        assert_eq!(parse_event_id("x-1"), None);
        assert_eq!(parse_event_id("12"), None);
        assert_eq!(parse_event_id(" 3-4 "), Some((3, 4)));
    }
}
