//! The bridge's listings of the upstream's tools: one at a time, so that
//! calls waiting to learn the tools share the one under way, and a listing
//! begun later is never overwritten by one begun earlier; and a pause after
//! one failed.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::upstream::lock;

/// How long after a listing failed a call does not list the tools again to
/// learn whether its tool runs as a task: a listing costs many round trips,
/// and an upstream failing them would otherwise be listed again for every
/// call.
const RELIST_PAUSE: Duration = Duration::from_secs(5);

/// The listings of one bridge's upstream tools.
#[derive(Debug, Default)]
pub(super) struct Listing {
    /// Held while a listing runs.
    running: tokio::sync::Mutex<()>,
    /// How many listings have begun.
    begun: AtomicU64,
    /// When the last listing failed, if it did.
    failed_at: Mutex<Option<Instant>>,
}

impl Listing {
    /// Waits for the listing under way, if any: the guard to list under,
    /// or `None` when a listing that began after this call has ended
    /// meanwhile and serves for it.
    pub(super) async fn turn(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        let asked = self.begun.load(Ordering::SeqCst);
        let running = self.running.lock().await;
        if self.begun.load(Ordering::SeqCst) > asked {
            return None;
        }
        self.begun.fetch_add(1, Ordering::SeqCst);
        Some(running)
    }

    /// Notes how the listing just run went.
    pub(super) fn ended(&self, learned: bool) {
        *lock(&self.failed_at) = if learned { None } else { Some(Instant::now()) };
    }

    /// Whether the last listing failed too recently to list again for a
    /// call.
    pub(super) fn paused(&self) -> bool {
        lock(&self.failed_at).is_some_and(|failed| failed.elapsed() < RELIST_PAUSE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_takes_a_listing_begun_after_it_was_asked_but_not_one_begun_before() {
        let listing = std::sync::Arc::new(Listing::default());
        let under_way = listing.turn().await;
        assert!(under_way.is_some(), "nothing under way: list");
        // Two calls asked while that listing runs: it began before either.
        let ask = || {
            let listing = std::sync::Arc::clone(&listing);
            tokio::spawn(async move { listing.turn().await.is_some() })
        };
        let (a, b) = (ask(), ask());
        tokio::task::yield_now().await;
        drop(under_way);
        // The first to get its turn lists; the other takes that listing,
        // which began after it was asked.
        let (a, b) = (a.await, b.await);
        assert!(matches!((&a, &b), (Ok(true), Ok(false))), "{a:?} {b:?}");
        // A call asked later lists again.
        assert!(listing.turn().await.is_some());
    }

    #[test]
    fn a_failed_listing_pauses_the_next() {
        let listing = Listing::default();
        assert!(!listing.paused());
        listing.ended(false);
        assert!(listing.paused());
        listing.ended(true);
        assert!(!listing.paused());
    }
}
