//! The bridge's listings of the upstream's tools: one at a time, so that
//! calls waiting to learn the tools share the one under way, and a listing
//! begun later is never overwritten by one begun earlier; at most one
//! relisting waiting for its turn however often the upstream says its tools
//! changed; and a pause after one failed.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// How many listings have begun: each is numbered by it.
    begun: AtomicU64,
    /// The number of the last listing that ran to its end: one abandoned
    /// part way (its call cancelled) serves nobody waiting.
    ended: AtomicU64,
    /// When the last listing failed, if it did.
    failed_at: Mutex<Option<Instant>>,
    /// Whether a relisting started by the upstream's announcement waits to
    /// begin: it serves every announcement made until it does.
    relist_waiting: AtomicBool,
}

/// Who asks for a listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Asker {
    /// A call that needs to know how its tool runs: it does without when
    /// the upstream failed a listing a moment ago.
    Call,
    /// The bridge itself, at start or when the upstream says its tools
    /// changed: it lists whatever went before.
    Bridge,
}

/// A listing's turn: held while it runs.
pub(super) struct Turn<'a> {
    listing: &'a Listing,
    number: u64,
    _running: tokio::sync::MutexGuard<'a, ()>,
}

impl Listing {
    /// Waits for the listing under way, if any: the turn to list in, or
    /// `None` when a listing that began after this call was asked has run
    /// to its end meanwhile and serves for it, or (for a call) when the
    /// last listing failed a moment ago.
    pub(super) async fn turn(&self, asker: Asker) -> Option<Turn<'_>> {
        let asked = self.begun.load(Ordering::SeqCst);
        let running = self.running.lock().await;
        if self.ended.load(Ordering::SeqCst) > asked {
            return None;
        }
        // Looked at again now: the listing this call waited for may have
        // failed meanwhile.
        if asker == Asker::Call && self.paused() {
            return None;
        }
        let number = self.begun.fetch_add(1, Ordering::SeqCst).saturating_add(1);
        Some(Turn {
            listing: self,
            number,
            _running: running,
        })
    }

    /// Notes the upstream's announcement that its tools changed: `true`
    /// when a relisting must be started for it ([`Self::relist_turn`]),
    /// `false` when one already waits to begin, which will serve it too.
    /// However often an upstream announces, at most one relisting waits.
    pub(super) fn announced(&self) -> bool {
        !self.relist_waiting.swap(true, Ordering::SeqCst)
    }

    /// The turn of the relisting [`Self::announced`] asked to start: after
    /// the listing under way, and always a listing of its own, as it must
    /// begin after every announcement it serves. An announcement from the
    /// moment it begins asks for another.
    pub(super) async fn relist_turn(&self) -> Turn<'_> {
        let running = self.running.lock().await;
        self.relist_waiting.store(false, Ordering::SeqCst);
        let number = self.begun.fetch_add(1, Ordering::SeqCst).saturating_add(1);
        Turn {
            listing: self,
            number,
            _running: running,
        }
    }

    /// Whether the last listing failed too recently to list again for a
    /// call.
    pub(super) fn paused(&self) -> bool {
        lock(&self.failed_at).is_some_and(|failed| failed.elapsed() < RELIST_PAUSE)
    }
}

impl Turn<'_> {
    /// Notes that the listing ran to its end, and whether it was read whole.
    pub(super) fn ended(self, learned: bool) {
        *lock(&self.listing.failed_at) = if learned { None } else { Some(Instant::now()) };
        self.listing.ended.store(self.number, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_takes_a_listing_begun_after_it_was_asked_but_not_one_begun_before() {
        let listing = std::sync::Arc::new(Listing::default());
        let under_way = listing.turn(Asker::Bridge).await;
        assert!(under_way.is_some(), "nothing under way: list");
        // Two calls asked while that listing runs: it began before either.
        let ask = || {
            let listing = std::sync::Arc::clone(&listing);
            tokio::spawn(async move {
                match listing.turn(Asker::Bridge).await {
                    Some(turn) => {
                        turn.ended(true);
                        true
                    }
                    None => false,
                }
            })
        };
        let (a, b) = (ask(), ask());
        tokio::task::yield_now().await;
        if let Some(turn) = under_way {
            turn.ended(true);
        }
        // The first to get its turn lists; the other takes that listing,
        // which began after it was asked.
        let (a, b) = (a.await, b.await);
        assert!(matches!((&a, &b), (Ok(true), Ok(false))), "{a:?} {b:?}");
        // A call asked later lists again.
        assert!(listing.turn(Asker::Bridge).await.is_some());
    }

    #[tokio::test]
    async fn announcements_while_a_relisting_waits_start_no_other() {
        let listing = Listing::default();
        let under_way = listing.turn(Asker::Bridge).await;
        assert!(listing.announced(), "the first starts a relisting");
        for _ in 0..1_000 {
            assert!(!listing.announced(), "served by the one waiting");
        }
        drop(under_way);
        let relisting = listing.relist_turn().await;
        // Begun: what is announced now needs a listing that begins later.
        assert!(listing.announced());
        assert!(!listing.announced());
        relisting.ended(true);
        let again = listing.relist_turn().await;
        again.ended(true);
        assert!(listing.announced());
    }

    #[tokio::test]
    async fn a_listing_abandoned_part_way_serves_nobody_waiting() {
        let listing = std::sync::Arc::new(Listing::default());
        let under_way = listing.turn(Asker::Bridge).await;
        // Two calls asked while that listing runs. The first to get its
        // turn is cancelled part way: its turn dropped, never ended.
        let abandoning = {
            let listing = std::sync::Arc::clone(&listing);
            tokio::spawn(async move { listing.turn(Asker::Bridge).await.is_some() })
        };
        let waiting = {
            let listing = std::sync::Arc::clone(&listing);
            tokio::spawn(async move { listing.turn(Asker::Bridge).await.is_some() })
        };
        tokio::task::yield_now().await;
        if let Some(turn) = under_way {
            turn.ended(true);
        }
        assert!(matches!(abandoning.await, Ok(true)));
        assert!(
            matches!(waiting.await, Ok(true)),
            "the other call lists itself"
        );
    }

    #[tokio::test]
    async fn a_failed_listing_pauses_the_next_for_a_call_but_not_for_the_bridge() {
        let listing = Listing::default();
        assert!(!listing.paused());
        let failing = listing.turn(Asker::Call).await;
        if let Some(turn) = failing {
            turn.ended(false);
        }
        assert!(listing.paused());
        assert!(listing.turn(Asker::Call).await.is_none());
        let relisting = listing.turn(Asker::Bridge).await;
        assert!(relisting.is_some());
        if let Some(turn) = relisting {
            turn.ended(true);
        }
        assert!(!listing.paused());
    }
}
