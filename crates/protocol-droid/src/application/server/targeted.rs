//! What is for one session only: log lines an upstream sent outside any of
//! the session's requests, and updates of resources the session subscribed
//! to on its own upstream connection.
//!
//! They do not travel on the broadcast every session listens to: there, a
//! flood meant for one session would push out of the backlog the list
//! changes meant for all of them. Each session that listens has a bounded
//! queue of its own instead; when it is full, what is for that session is
//! dropped, and nothing is taken from any other. A [`ChangeFeed`] gives a
//! session's writer both, in one stream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::sync::{broadcast, mpsc};

use super::change::Change;
use crate::domain::SessionId;

/// How many changes for one session may wait for it.
pub const TARGETED_BACKLOG: usize = 64;

/// Each listening session's queue, with the number of the listener that
/// opened it.
type Queues = Mutex<HashMap<SessionId, (u64, mpsc::Sender<Change>)>>;

/// Numbers the listeners, so one only ever closes its own queue.
static NEXT_LISTENER: AtomicU64 = AtomicU64::new(0);

/// The queues of the sessions listening now.
#[derive(Debug, Default)]
pub(super) struct Targets(Arc<Queues>);

impl Targets {
    /// Queues `change` for `session`; false when it does not listen, or
    /// its queue is full.
    pub(super) fn send(&self, session: SessionId, change: Change) -> bool {
        let queue = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&session)
            .map(|(_, queue)| queue.clone());
        queue.is_some_and(|queue| queue.try_send(change).is_ok())
    }

    /// Opens the queue of `session`, replacing any earlier one.
    pub(super) fn open(&self, session: SessionId) -> SessionChanges {
        let (sender, receiver) = mpsc::channel(TARGETED_BACKLOG);
        let listener = NEXT_LISTENER.fetch_add(1, Ordering::Relaxed);
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(session, (listener, sender));
        SessionChanges {
            receiver,
            session,
            listener,
            queues: Arc::downgrade(&self.0),
        }
    }
}

/// The changes for one session, while it listens; its queue closes when
/// this is dropped.
#[derive(Debug)]
pub struct SessionChanges {
    receiver: mpsc::Receiver<Change>,
    session: SessionId,
    listener: u64,
    queues: Weak<Queues>,
}

impl SessionChanges {
    /// The next change for the session; `None` once the server is gone or
    /// another listener replaced this one.
    pub async fn recv(&mut self) -> Option<Change> {
        self.receiver.recv().await
    }
}

impl Drop for SessionChanges {
    fn drop(&mut self) {
        let Some(queues) = self.queues.upgrade() else {
            return;
        };
        let mut queues = queues.lock().unwrap_or_else(PoisonError::into_inner);
        // Only its own: a later listener of the session may have replaced it.
        if queues
            .get(&self.session)
            .is_some_and(|(listener, _)| *listener == self.listener)
        {
            queues.remove(&self.session);
        }
    }
}

/// Everything a legacy session is told outside its requests: the changes
/// every session hears, and those for it alone.
#[derive(Debug)]
pub struct ChangeFeed {
    shared: broadcast::Receiver<Change>,
    own: SessionChanges,
}

impl ChangeFeed {
    pub(super) const fn new(shared: broadcast::Receiver<Change>, own: SessionChanges) -> Self {
        Self { shared, own }
    }

    /// The next change, whichever comes first; `None` once the server is
    /// gone. A listener that fell behind on the shared changes has lost
    /// some; list changes are idempotent, so it carries on from the newest.
    pub async fn next(&mut self) -> Option<Change> {
        loop {
            tokio::select! {
                change = self.shared.recv() => match change {
                    Ok(change) => return Some(change),
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                Some(change) = self.own.recv() => return Some(change),
            }
        }
    }
}
