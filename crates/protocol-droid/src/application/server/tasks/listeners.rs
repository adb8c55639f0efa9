//! Who hears of a task's changes as they happen: each `subscriptions/listen`
//! that watches tasks, registered under the owner whose tasks it may watch.
//!
//! A change goes only to its owner's listeners, each through a queue of
//! its own: a caller whose tasks change faster than its listeners read
//! fills its own queues, and no other caller's listen wakes for its
//! changes or loses one of its own to them. A listener whose queue was full
//! is told it missed something, and reads what it watches again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::sync::mpsc;

use super::TaskEvent;
use super::store::TaskRecord;

/// How many changes one listener may fall behind by before it is told it
/// missed some.
const BACKLOG: usize = 64;

/// Every listener, by owner.
#[derive(Default)]
pub(crate) struct Listeners {
    by_owner: Mutex<HashMap<String, Vec<Registered>>>,
    next: AtomicU64,
}

/// One listener as the sender sees it.
struct Registered {
    id: u64,
    queue: mpsc::Sender<Arc<TaskEvent>>,
    missed: Arc<AtomicBool>,
}

impl Listeners {
    /// A new listener for the changes of `owner`'s tasks, from now on;
    /// unregistered when dropped.
    pub(crate) fn listen(self: &Arc<Self>, owner: &str) -> TaskEvents {
        let (queue, events) = mpsc::channel(BACKLOG);
        let missed = Arc::new(AtomicBool::new(false));
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.by_owner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(owner.to_owned())
            .or_default()
            .push(Registered {
                id,
                queue,
                missed: Arc::clone(&missed),
            });
        TaskEvents {
            events,
            missed,
            _registration: Registration {
                listeners: Arc::downgrade(self),
                owner: owner.to_owned(),
                id,
            },
        }
    }

    /// Whether anyone listens for `owner`'s tasks here.
    pub(crate) fn any_for(&self, owner: &str) -> bool {
        self.by_owner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(owner)
    }

    /// Tells `record`'s owner's listeners that it changed; the record is
    /// copied only when someone listens.
    pub(crate) fn publish(&self, record: &TaskRecord) {
        let by_owner = self.by_owner.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(listeners) = by_owner.get(&record.owner) else {
            return;
        };
        let event = Arc::new(TaskEvent {
            record: record.clone(),
        });
        for listener in listeners {
            if listener.queue.try_send(Arc::clone(&event)).is_err() {
                listener.missed.store(true, Ordering::Release);
            }
        }
    }

    fn forget(&self, owner: &str, id: u64) {
        let mut by_owner = self.by_owner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(listeners) = by_owner.get_mut(owner) {
            listeners.retain(|l| l.id != id);
            if listeners.is_empty() {
                by_owner.remove(owner);
            }
        }
    }
}

/// The changes of one owner's tasks, as one listener hears them.
pub(crate) struct TaskEvents {
    events: mpsc::Receiver<Arc<TaskEvent>>,
    missed: Arc<AtomicBool>,
    /// Unregisters the listener when it is dropped.
    _registration: Registration,
}

impl TaskEvents {
    /// The next change; never ends while the tasks are kept.
    pub(crate) async fn recv(&mut self) -> Option<Arc<TaskEvent>> {
        self.events.recv().await
    }

    /// Whether changes were dropped since this was last asked, the queue
    /// being full: what is watched should be read again. The changes still
    /// queued are then older than what a reading finds, and are let go.
    pub(crate) fn missed(&mut self) -> bool {
        if !self.missed.swap(false, Ordering::AcqRel) {
            return false;
        }
        while self.events.try_recv().is_ok() {}
        true
    }
}

/// Takes a listener out of the table when it is dropped.
struct Registration {
    listeners: Weak<Listeners>,
    owner: String,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(listeners) = self.listeners.upgrade() {
            listeners.forget(&self.owner, self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(owner: &str, id: &str) -> TaskRecord {
        TaskRecord::working(owner, id, 0)
    }

    #[tokio::test]
    async fn a_change_reaches_only_its_owners_listeners() {
        let listeners = Arc::new(Listeners::default());
        let mut alice = listeners.listen("alice");
        let mut bob = listeners.listen("bob");
        listeners.publish(&record("alice", "a1"));
        let heard = alice.recv().await.map(|e| e.record.id.clone());
        assert_eq!(heard.as_deref(), Some("a1"));
        assert!(bob.events.try_recv().is_err(), "bob heard alice's task");
    }

    #[tokio::test]
    async fn one_owners_flood_costs_another_owner_nothing() {
        let listeners = Arc::new(Listeners::default());
        let mut alice = listeners.listen("alice");
        let mut bob = listeners.listen("bob");
        // Alice's change comes first and is read last, after a flood of
        // Bob's far longer than any one queue: a queue shared by all would
        // have lost it.
        listeners.publish(&record("alice", "a1"));
        for n in 0..BACKLOG * 16 {
            listeners.publish(&record("bob", &format!("b{n}")));
        }
        assert!(!alice.missed(), "alice missed nothing of her own");
        let heard = alice.recv().await.map(|e| e.record.id.clone());
        assert_eq!(heard.as_deref(), Some("a1"));
        // Bob's own listener fell behind, and is told so, once; what was
        // still queued, older than what he reads next, is let go.
        assert_eq!(bob.events.len(), BACKLOG);
        assert!(bob.missed());
        assert!(!bob.missed());
        assert!(bob.events.try_recv().is_err());
    }

    #[tokio::test]
    async fn a_dropped_listener_leaves_nothing_behind() {
        let listeners = Arc::new(Listeners::default());
        let first = listeners.listen("alice");
        let second = listeners.listen("alice");
        assert!(listeners.any_for("alice"));
        drop(first);
        assert!(listeners.any_for("alice"));
        drop(second);
        assert!(!listeners.any_for("alice"));
        assert!(
            listeners
                .by_owner
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_empty()
        );
    }
}
