//! Where a 2025-11-25 task's own requests go in a legacy session.
//!
//! A task's handler outlives the `tools/call` that started it, so the
//! questions it asks (elicitation, sampling, roots, each tagged with its
//! task in `_meta`) have no request stream to travel on. The revision has a
//! client that sees a task `input_required` call `tasks/result`, and that
//! request's stream is where the task's messages go first; the session's
//! GET stream is next. A question that finds neither is held, in order and
//! bounded, until the client opens one: a client that polls with
//! `tasks/get` and keeps no GET stream is the usual case, and failing its
//! task for that would be the server's fault, not the client's.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::mpsc;

use crate::application::server::tasks::wire::related_task;
use crate::domain::jsonrpc::RequestId;

/// How many of a session's task requests may wait for a stream at once:
/// as many as a session may have in flight the other way.
pub(super) const MAX_HELD: usize = 256;

/// How many other instances' `tasks/result` streams a session keeps track
/// of at once; past that the oldest is let go (one whose end was never
/// heard, most likely).
const MAX_REMOTE: usize = 64;

/// How long another instance's stream is taken as open after it was last
/// told of: its instance tells it again every third of this while it
/// waits (`task_relay`), so one whose end was never heard (its instance
/// died, or the message was lost) lapses.
pub(super) const REMOTE_LEASE: Duration = Duration::from_secs(60);

/// A session's `tasks/result` streams and the task requests waiting for one.
#[derive(Default)]
pub(super) struct TaskStreams {
    /// The streams of the `tasks/result` requests still being answered
    /// here, by task id, oldest first.
    open: Mutex<HashMap<String, Vec<mpsc::Sender<Value>>>>,
    /// The `tasks/result` requests being answered on other instances, oldest
    /// first: what is sent here is carried there (see `task_relay`).
    remote: Mutex<VecDeque<Remote>>,
    /// Requests of tasks that found no stream, oldest first.
    held: Mutex<VecDeque<Held>>,
}

/// A `tasks/result` stream of another instance's, for one task.
struct Remote {
    task: String,
    /// The stream's name, its instance's own for it: what its opening, its
    /// end and what is carried to it are told by.
    watch: String,
    /// Where what goes to it is carried from.
    tx: mpsc::Sender<Value>,
    /// When its instance last told of it.
    seen: Instant,
}

impl Remote {
    /// Whether it is still taken as open.
    fn open(&self) -> bool {
        !self.tx.is_closed() && self.seen.elapsed() < REMOTE_LEASE
    }
}

/// One task request waiting for a stream.
struct Held {
    task: String,
    id: RequestId,
    message: Value,
}

impl TaskStreams {
    /// The stream of the newest `tasks/result` still open for the task
    /// `message` is tagged with, if there is one.
    pub(super) fn stream_for(&self, message: &Value) -> Option<mpsc::Sender<Value>> {
        self.stream_of(related_task(message)?)
    }

    /// Where the task `task`'s requests go: this instance's newest open
    /// `tasks/result` stream for it, else another instance's.
    fn stream_of(&self, task: &str) -> Option<mpsc::Sender<Value>> {
        self.local_stream_of(task).or_else(|| {
            let remote = self.remote.lock().ok()?;
            remote
                .iter()
                .rev()
                .find(|r| r.task == task && r.open())
                .map(|r| r.tx.clone())
        })
    }

    /// This instance's newest open `tasks/result` stream for `task`: where
    /// a request carried here from another instance goes, never on to a
    /// third.
    pub(super) fn local_stream_of(&self, task: &str) -> Option<mpsc::Sender<Value>> {
        let open = self.open.lock().ok()?;
        open.get(task)?
            .iter()
            .rev()
            .find(|tx| !tx.is_closed())
            .cloned()
    }

    /// Takes `watch`, a `tasks/result` stream for `task` another instance
    /// holds, as one of the task's: given the sender `carrier` makes, which
    /// carries what it is sent there, and sent the task's held requests. A
    /// watch known already is only taken as open for longer.
    pub(super) fn watch_remote(
        &self,
        task: &str,
        watch: &str,
        carrier: impl FnOnce() -> mpsc::Sender<Value>,
    ) {
        let tx = {
            let Ok(mut remote) = self.remote.lock() else {
                return;
            };
            remote.retain(Remote::open);
            if let Some(known) = remote.iter_mut().find(|r| r.watch == watch) {
                known.seen = Instant::now();
                return;
            }
            if remote.len() >= MAX_REMOTE {
                let _oldest = remote.pop_front();
            }
            let tx = carrier();
            remote.push_back(Remote {
                task: task.to_owned(),
                watch: watch.to_owned(),
                tx: tx.clone(),
                seen: Instant::now(),
            });
            tx
        };
        // Registered before the held queue is looked at, as in `watch`.
        if let Ok(mut held) = self.held.lock() {
            flush(&mut held, &tx, Some(task));
        }
    }

    /// Whether a `tasks/result` on another instance waits for this
    /// session's questions.
    pub(super) fn watched_elsewhere(&self) -> bool {
        self.remote
            .lock()
            .is_ok_and(|remote| remote.iter().any(Remote::open))
    }

    /// Lets go of `watch`: it ended, or a request carried there found it
    /// gone, or nobody heard it.
    pub(super) fn unwatch_remote(&self, watch: &str) {
        if let Ok(mut remote) = self.remote.lock() {
            remote.retain(|r| r.watch != watch);
        }
    }

    /// Makes `tx`, the stream of a `tasks/result` for `task`, where that
    /// task's requests go until the returned guard is dropped, and sends it
    /// the requests of the task that were held.
    pub(super) fn watch(self: &Arc<Self>, task: &str, tx: mpsc::Sender<Value>) -> Watch {
        if let Ok(mut open) = self.open.lock() {
            open.entry(task.to_owned()).or_default().push(tx.clone());
        }
        // Registered before the held queue is looked at: a request held
        // from now on has seen this stream first (see `send_or_hold`).
        if let Ok(mut held) = self.held.lock() {
            flush(&mut held, &tx, Some(task));
        }
        Watch {
            streams: Arc::clone(self),
            task: task.to_owned(),
            tx,
        }
    }

    /// Sends every held request to `tx`, the session's new GET stream.
    pub(super) fn flush_all(&self, tx: &mpsc::Sender<Value>) {
        if let Ok(mut held) = self.held.lock() {
            flush(&mut held, tx, None);
        }
    }

    /// Sends `message`, the request `id` the task `task` makes, on the
    /// task's newest open `tasks/result` stream, else on `fallback` (the
    /// session's GET stream, if open), else holds it until one opens; never
    /// ahead of a request of the same task held before it. `false` when too
    /// many wait already.
    pub(super) fn send_or_hold(
        &self,
        task: &str,
        id: &RequestId,
        message: Value,
        fallback: impl FnOnce() -> Option<mpsc::Sender<Value>>,
    ) -> bool {
        // The streams are looked up under the lock the openers flush under,
        // so one opened meanwhile is either seen here or flushes this.
        let Ok(mut held) = self.held.lock() else {
            return false;
        };
        let tx = self.stream_of(task).or_else(fallback);
        if let Some(tx) = &tx {
            flush(&mut held, tx, Some(task));
        }
        let behind = held.iter().any(|waiting| waiting.task == task);
        let message = match tx {
            Some(tx) if !behind => match tx.try_send(message) {
                Ok(()) => return true,
                Err(refused) => refused.into_inner(),
            },
            _ => message,
        };
        if held.len() >= MAX_HELD {
            return false;
        }
        held.push_back(Held {
            task: task.to_owned(),
            id: id.clone(),
            message,
        });
        true
    }

    /// Drops the held request `id`, whose wait is over; whether it was
    /// still held (never sent).
    pub(super) fn forget(&self, id: &RequestId) -> bool {
        let Ok(mut held) = self.held.lock() else {
            return false;
        };
        let before = held.len();
        held.retain(|waiting| &waiting.id != id);
        held.len() < before
    }

    /// Forgets every stream and held request: the session has ended.
    pub(super) fn clear(&self) {
        if let Ok(mut open) = self.open.lock() {
            open.clear();
        }
        if let Ok(mut remote) = self.remote.lock() {
            remote.clear();
        }
        if let Ok(mut held) = self.held.lock() {
            held.clear();
        }
    }
}

/// Sends `tx` the held requests (of the task `only`, or all), in order,
/// for as long as it takes them; what it does not take stays held.
fn flush(held: &mut VecDeque<Held>, tx: &mpsc::Sender<Value>, only: Option<&str>) {
    let mut kept = VecDeque::with_capacity(held.len());
    let mut full = false;
    for waiting in held.drain(..) {
        if full || only.is_some_and(|task| task != waiting.task) {
            kept.push_back(waiting);
            continue;
        }
        if let Err(refused) = tx.try_send(waiting.message) {
            // Nothing after it may overtake it.
            full = true;
            kept.push_back(Held {
                message: refused.into_inner(),
                ..waiting
            });
        }
    }
    *held = kept;
}

/// A `tasks/result` stream's registration, undone when dropped (when its
/// request has been answered, or was stopped).
pub(super) struct Watch {
    streams: Arc<TaskStreams>,
    task: String,
    tx: mpsc::Sender<Value>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        let Ok(mut open) = self.streams.open.lock() else {
            return;
        };
        if let Some(streams) = open.get_mut(&self.task) {
            streams.retain(|tx| !tx.same_channel(&self.tx));
            if streams.is_empty() {
                open.remove(&self.task);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn question(id: i64) -> Value {
        json!({ "jsonrpc": "2.0", "id": id, "method": "elicitation/create" })
    }

    fn nowhere() -> Option<mpsc::Sender<Value>> {
        None
    }

    #[test]
    fn a_held_request_goes_to_its_tasks_stream_when_one_opens() {
        let streams = Arc::new(TaskStreams::default());
        assert!(streams.send_or_hold("a", &RequestId::Number(1), question(1), nowhere));
        assert!(streams.send_or_hold("b", &RequestId::Number(2), question(2), nowhere));
        let (tx, mut rx) = mpsc::channel(4);
        let watch = streams.watch("b", tx);
        assert_eq!(rx.try_recv().ok(), Some(question(2)));
        assert!(rx.try_recv().is_err(), "only task b's request");
        // While it is open, task b's requests go straight to it.
        assert!(streams.send_or_hold("b", &RequestId::Number(3), question(3), nowhere));
        assert_eq!(rx.try_recv().ok(), Some(question(3)));
        drop(watch);
        assert!(streams.stream_of("b").is_none());
        // The GET stream takes what is left.
        let (tx, mut rx) = mpsc::channel(4);
        streams.flush_all(&tx);
        assert_eq!(rx.try_recv().ok(), Some(question(1)));
    }

    #[test]
    fn a_request_never_overtakes_one_of_its_task_held_before_it() {
        let streams = Arc::new(TaskStreams::default());
        let (tx, mut rx) = mpsc::channel(1);
        let _watch = streams.watch("a", tx);
        assert!(streams.send_or_hold("a", &RequestId::Number(1), question(1), nowhere));
        // The stream is full: the next two wait, in order.
        assert!(streams.send_or_hold("a", &RequestId::Number(2), question(2), nowhere));
        assert_eq!(rx.try_recv().ok(), Some(question(1)));
        assert!(streams.send_or_hold("a", &RequestId::Number(3), question(3), nowhere));
        assert_eq!(rx.try_recv().ok(), Some(question(2)));
        assert!(streams.send_or_hold("a", &RequestId::Number(4), question(4), nowhere));
        assert_eq!(rx.try_recv().ok(), Some(question(3)));
    }

    #[test]
    fn the_get_stream_takes_a_request_when_no_tasks_result_waits() {
        let streams = TaskStreams::default();
        let (tx, mut rx) = mpsc::channel(4);
        assert!(streams.send_or_hold("a", &RequestId::Number(1), question(1), || Some(tx)));
        assert_eq!(rx.try_recv().ok(), Some(question(1)));
    }

    #[test]
    fn a_forgotten_request_is_not_sent() {
        let streams = TaskStreams::default();
        assert!(streams.send_or_hold("a", &RequestId::Number(2), question(2), nowhere));
        assert!(streams.forget(&RequestId::Number(2)));
        assert!(!streams.forget(&RequestId::Number(2)));
        let (tx, mut rx) = mpsc::channel(4);
        streams.flush_all(&tx);
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn another_instances_stream_takes_what_was_held_and_comes_after_this_ones() {
        let streams = Arc::new(TaskStreams::default());
        assert!(streams.send_or_hold("a", &RequestId::Number(1), question(1), nowhere));
        let (far, mut carried) = mpsc::channel(4);
        streams.watch_remote("a", "w1", || far);
        assert_eq!(
            carried.try_recv().ok(),
            Some(question(1)),
            "held, then carried"
        );
        // A stream of this instance's own comes first.
        let (near, mut rx) = mpsc::channel(4);
        let watch = streams.watch("a", near);
        assert!(streams.send_or_hold("a", &RequestId::Number(2), question(2), nowhere));
        assert_eq!(rx.try_recv().ok(), Some(question(2)));
        assert!(carried.try_recv().is_err());
        drop(watch);
        assert!(streams.send_or_hold("a", &RequestId::Number(3), question(3), nowhere));
        assert_eq!(carried.try_recv().ok(), Some(question(3)));
        assert!(
            streams.local_stream_of("a").is_none(),
            "a carried request never goes on to a third instance"
        );
    }

    #[test]
    fn each_of_another_instances_streams_ends_on_its_own() {
        let streams = TaskStreams::default();
        let (first, _first) = mpsc::channel(4);
        streams.watch_remote("a", "w1", || first);
        let (second, mut carried) = mpsc::channel(4);
        streams.watch_remote("a", "w2", || second);
        streams.watch_remote("a", "w2", never_made);
        streams.unwatch_remote("w1");
        assert!(
            streams.send_or_hold("a", &RequestId::Number(1), question(1), nowhere),
            "the other still waits"
        );
        assert_eq!(carried.try_recv().ok(), Some(question(1)));
        streams.unwatch_remote("w2");
        assert!(streams.stream_of("a").is_none());
    }

    /// A carrier made only if the watch were not known: closed, so what it
    /// would take shows missing.
    fn never_made() -> mpsc::Sender<Value> {
        let (tx, rx) = mpsc::channel(1);
        drop(rx);
        tx
    }

    #[test]
    fn another_instances_stream_not_told_of_again_lapses() {
        let streams = TaskStreams::default();
        let (far, _carried) = mpsc::channel(4);
        streams.watch_remote("a", "w1", || far);
        assert!(streams.watched_elsewhere());
        let long_ago = Instant::now().checked_sub(REMOTE_LEASE + Duration::from_secs(1));
        if let (Ok(mut remote), Some(long_ago)) = (streams.remote.lock(), long_ago) {
            for r in remote.iter_mut() {
                r.seen = long_ago;
            }
        }
        assert!(!streams.watched_elsewhere(), "its end was never heard");
        assert!(streams.stream_of("a").is_none());
        // Told of again, it is open again.
        let (again, _carried) = mpsc::channel(4);
        streams.watch_remote("a", "w1", || again);
        assert!(streams.watched_elsewhere());
    }

    #[test]
    fn streams_of_other_instances_are_bounded() {
        let streams = TaskStreams::default();
        let mut carriers = Vec::new();
        for n in 0..=MAX_REMOTE {
            let (far, carried) = mpsc::channel(1);
            carriers.push(carried);
            streams.watch_remote(&format!("t{n}"), &format!("w{n}"), || far);
        }
        assert!(streams.stream_of("t0").is_none(), "the oldest let go");
        assert!(streams.stream_of(&format!("t{MAX_REMOTE}")).is_some());
    }

    #[test]
    fn holding_is_bounded() {
        let streams = TaskStreams::default();
        for n in 0..MAX_HELD {
            let id = i64::try_from(n).unwrap_or(i64::MAX);
            assert!(streams.send_or_hold("a", &RequestId::Number(id), question(id), nowhere));
        }
        assert!(!streams.send_or_hold("a", &RequestId::Number(-1), question(-1), nowhere));
    }
}
