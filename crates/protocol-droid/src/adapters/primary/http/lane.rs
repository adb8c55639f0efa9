//! The lane a 2024-11-05 session's answers take to its one event stream,
//! bounded in bytes.
//!
//! On that transport a POST is accepted at once and its answer travels on
//! the stream the client holds open. A client that posts without reading
//! would otherwise have answers pile up here, each as large as a message
//! may be, hundreds deep. The lane holds at most [`LANE_BYTES`] of them
//! (one larger answer alone), besides the one the stream is writing; the
//! next waits for room in its request's in-flight place, and while any
//! waits the session takes no new request ([`Lane::backed_up`]). What can
//! still wait is the requests that were already running when the lane
//! filled, at most the in-flight share; and a stream that takes nothing
//! for the stall timeout ends the session.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

/// Bytes of answers a session's stream holds unsent.
pub(super) const LANE_BYTES: usize = 4 * 1024 * 1024;

/// How many messages the lane itself holds; their bytes are what bounds it.
const LANE_MESSAGES: usize = 256;

/// A message on its way to the stream, written, with its share of the
/// lane's bytes: given back once the stream has taken it.
#[derive(Debug)]
pub(super) struct Said {
    /// The message, as JSON text.
    pub(super) text: String,
    /// Its bytes of the lane.
    pub(super) held: OwnedSemaphorePermit,
}

/// Why a message did not go on the lane.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Unsent {
    /// The stream took nothing for the time allowed.
    Stalled,
    /// The stream is gone.
    Closed,
}

/// The sending end of a session's lane.
#[derive(Debug)]
pub(super) struct Lane {
    tx: mpsc::Sender<Said>,
    bytes: Arc<Semaphore>,
    /// How many messages wait for room.
    waiting: AtomicUsize,
    /// How many messages the stream has taken: a wait is given up only
    /// when this stood still for the whole patience.
    taken: Arc<AtomicU64>,
}

/// The end of a lane its stream reads.
#[derive(Debug)]
pub(super) struct LaneReader {
    rx: mpsc::Receiver<Said>,
    taken: Arc<AtomicU64>,
}

impl LaneReader {
    /// The next message, counted as taken; `None` once the lane is gone.
    pub(super) async fn recv(&mut self) -> Option<Said> {
        let said = self.rx.recv().await?;
        self.taken.fetch_add(1, Ordering::SeqCst);
        Some(said)
    }
}

/// Counts one message waiting for room while it lives, so a cancelled wait
/// is uncounted too.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Lane {
    /// A lane, and the end its stream reads.
    pub(super) fn new() -> (Self, LaneReader) {
        let (tx, rx) = mpsc::channel(LANE_MESSAGES);
        let bytes = Arc::new(Semaphore::new(LANE_BYTES));
        let taken = Arc::new(AtomicU64::new(0));
        let lane = Self {
            tx,
            bytes,
            waiting: AtomicUsize::new(0),
            taken: Arc::clone(&taken),
        };
        (lane, LaneReader { rx, taken })
    }

    /// Puts `message` on the lane once there is room for it, waiting while
    /// the stream takes something at least every `patience`. It waits
    /// written, the message itself dropped: one copy of it is held, not
    /// two.
    pub(super) async fn send(&self, message: Value, patience: Duration) -> Result<(), Unsent> {
        let text = message.to_string();
        drop(message);
        let wanted = Self::share(&text);
        let said = async {
            // Counted from the first wait to the end, so that a message
            // waiting for the lane's bytes or for a place in it is seen.
            let mut waiting = None;
            let held = match Arc::clone(&self.bytes).try_acquire_many_owned(wanted) {
                Ok(held) => held,
                Err(_) => {
                    waiting = Some(Waiting::new(&self.waiting));
                    Arc::clone(&self.bytes)
                        .acquire_many_owned(wanted)
                        .await
                        .map_err(|_| Unsent::Closed)?
                }
            };
            match self.tx.try_send(Said { text, held }) {
                Ok(()) => Ok(()),
                Err(mpsc::error::TrySendError::Closed(_)) => Err(Unsent::Closed),
                Err(mpsc::error::TrySendError::Full(said)) => {
                    let _waiting = waiting.unwrap_or_else(|| Waiting::new(&self.waiting));
                    self.tx.send(said).await.map_err(|_| Unsent::Closed)
                }
            }
        };
        let mut said = std::pin::pin!(said);
        let mut seen = self.taken.load(Ordering::SeqCst);
        loop {
            if let Ok(sent) = tokio::time::timeout(patience, said.as_mut()).await {
                return sent;
            }
            // Behind others the stream is still taking: not stalled.
            let now = self.taken.load(Ordering::SeqCst);
            if now == seen {
                return Err(Unsent::Stalled);
            }
            seen = now;
        }
    }

    /// Whether the stream is behind: a message waits for room, or the lane
    /// is full by bytes or by count, so a new request's answer would only
    /// wait too.
    pub(super) fn backed_up(&self) -> bool {
        self.waiting.load(Ordering::SeqCst) > 0
            || self.bytes.available_permits() == 0
            || self.tx.capacity() == 0
    }

    /// Puts `message` on the lane if its bytes fit now.
    pub(super) fn try_send(&self, message: &Value) -> bool {
        let text = message.to_string();
        let Ok(held) = Arc::clone(&self.bytes).try_acquire_many_owned(Self::share(&text)) else {
            return false;
        };
        self.tx.try_send(Said { text, held }).is_ok()
    }

    /// The bytes of the lane `text` takes: its length, or the whole lane
    /// for a message larger than that, which then goes alone.
    fn share(text: &str) -> u32 {
        let bytes = text.len().clamp(1, LANE_BYTES);
        u32::try_from(bytes).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn answers_wait_for_the_bytes_the_stream_has_not_taken() {
        let (lane, mut rx) = Lane::new();
        let big = json!("x".repeat(LANE_BYTES / 2));
        assert_eq!(lane.send(big.clone(), Duration::from_secs(1)).await, Ok(()));
        // Half the lane is left; a second half-lane answer (with its
        // quotes) does not fit until the first is taken.
        assert!(!lane.try_send(&big));
        assert!(!lane.backed_up());
        let mut waiting = Box::pin(lane.send(big.clone(), Duration::from_secs(5)));
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        assert!(lane.backed_up(), "an answer waits for room");
        assert_eq!(
            lane.send(big.clone(), Duration::from_millis(20)).await,
            Err(Unsent::Stalled)
        );
        drop(waiting);
        assert!(!lane.backed_up(), "a wait given up is uncounted");
        let first = rx.recv().await;
        assert!(first.is_some());
        drop(first);
        assert!(lane.try_send(&big));
        // Small ones still fit beside it.
        assert!(lane.try_send(&json!({ "id": 1 })));
    }

    /// A stream that keeps taking, however slowly, is not stalled: an
    /// answer behind others waits longer than the patience in all, and
    /// still goes.
    #[tokio::test(start_paused = true)]
    async fn a_wait_behind_a_stream_still_taking_is_not_a_stall() {
        let (lane, mut rx) = Lane::new();
        let lane = Arc::new(lane);
        let half = json!("x".repeat(LANE_BYTES / 2 - 16));
        let patience = Duration::from_secs(1);
        for _ in 0..2 {
            assert_eq!(lane.send(half.clone(), patience).await, Ok(()));
        }
        let reader = tokio::spawn(async move {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(800)).await;
                drop(rx.recv().await);
            }
            rx
        });
        // Three more at once, waiting in order for the reader: the last
        // waits about 2.4 s in all, with something taken every 0.8 s.
        let sends = (0..3).map(|_| lane.send(half.clone(), patience));
        let sent = futures_util::future::join_all(sends).await;
        assert_eq!(sent, [Ok(()), Ok(()), Ok(())]);
        let rx = reader.await;
        assert!(rx.is_ok());
        // A reader that takes nothing: once the lane is full, a wait is a
        // stall.
        for _ in 0..2 {
            assert_eq!(lane.send(half.clone(), patience).await, Ok(()));
        }
        assert_eq!(
            lane.send(half.clone(), patience).await,
            Err(Unsent::Stalled)
        );
    }

    #[tokio::test]
    async fn a_message_larger_than_the_lane_goes_alone() {
        let (lane, mut rx) = Lane::new();
        let huge = json!("x".repeat(LANE_BYTES * 2));
        assert!(lane.try_send(&huge));
        assert!(!lane.try_send(&json!(1)), "the lane is the huge one's");
        let taken = rx.recv().await.map(|said| said.text.len());
        assert_eq!(taken, Some(LANE_BYTES * 2 + 2));
        assert!(lane.try_send(&json!(1)));
    }

    #[tokio::test]
    async fn a_lane_whose_stream_is_gone_says_so() {
        let (lane, rx) = Lane::new();
        drop(rx);
        assert_eq!(
            lane.send(json!(1), Duration::from_secs(1)).await,
            Err(Unsent::Closed)
        );
    }
}
