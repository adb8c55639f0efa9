//! The connection a 2026-07-28 upstream shares among every downstream
//! session, shared fairly.
//!
//! A server bounds what it runs at once on one connection (`droid serve`
//! on stdio answers 256 requests at a time and reads the rest only as they
//! finish). Everything the bridge's clients ask of such an upstream goes
//! through that one connection, so without a bound of the bridge's own, one
//! session's slow calls could fill the upstream's allowance and leave every
//! other session's requests queued behind them. Each session (or, for a
//! client without one, each caller) may therefore have only so many
//! requests on the shared connection at once; its further requests wait for
//! its own to finish, within the request's timeout, and nobody else's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::application::server::rate::Caller;
use crate::application::server::{Call, CallError};
use crate::domain::session::SessionId;
use crate::domain::{Era, TransportKind};

/// Locks, recovering from a poisoned lock: what is kept here (counts, and a
/// lease's one place) has no invariant a panic elsewhere could break
/// half-way. Its own, so that the lease (`upstream`), which holds a seat
/// here, is not also imported from here.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whose share a request counts against.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Holder {
    /// A legacy session's.
    Session(SessionId),
    /// A stateless client's: its principal, or its network when anonymous.
    Caller(Caller),
}

impl Holder {
    /// Who `call` is, for its share; nobody on stdio, where the one client
    /// has the connection to itself.
    pub(super) fn of(call: &Call) -> Option<Self> {
        if call.peer.transport() == TransportKind::Stdio {
            None
        } else if call.peer.negotiated().era() == Era::Legacy {
            Some(Self::Session(call.session()))
        } else {
            Some(Self::Caller(Caller::of(&call.ctx)))
        }
    }
}

/// Each holder's requests on the shared connection, counted.
#[derive(Debug)]
pub(super) struct Shares {
    /// How many requests one holder may have on it at once; zero for no
    /// bound.
    per_holder: usize,
    /// The holders with a request on it, or waiting for room: an entry
    /// goes with its holder's last request, so the table is bounded by the
    /// requests in flight, and a fast hasher is safe here.
    held: Mutex<HashMap<Holder, Arc<Semaphore>, foldhash::fast::RandomState>>,
}

/// One request's place in its holder's share, or its wait for one; given
/// back (and the holder forgotten, if this was its last) when dropped,
/// whether the place was taken or the wait given up or cancelled.
#[derive(Debug)]
pub(super) struct Share {
    /// The holder's count; `None` once given back.
    semaphore: Option<Arc<Semaphore>>,
    /// Whether a place was taken (one permit, given back on drop).
    placed: bool,
    holder: Holder,
    shares: Arc<Shares>,
}

impl Shares {
    /// Shares of `per_holder` requests each (zero: unbounded).
    pub(super) fn new(per_holder: usize) -> Arc<Self> {
        Arc::new(Self {
            per_holder,
            held: Mutex::default(),
        })
    }

    /// A place for one more of `holder`'s requests, once one of its own
    /// finishes if it has as many as it may; refused when none finishes
    /// within `patience`.
    pub(super) async fn take(
        self: &Arc<Self>,
        holder: Option<Holder>,
        patience: Duration,
    ) -> Result<Option<Share>, CallError> {
        let Some(holder) = holder.filter(|_| self.per_holder > 0) else {
            return Ok(None);
        };
        let semaphore = Arc::clone(
            lock(&self.held)
                .entry(holder.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_holder))),
        );
        // Held from here on, so a wait given up or cancelled still forgets
        // a holder no request of whose is left.
        let mut share = Share {
            semaphore: Some(semaphore),
            placed: false,
            holder,
            shares: Arc::clone(self),
        };
        let Some(semaphore) = share.semaphore.as_ref() else {
            return Ok(None);
        };
        // Most often there is room: taken at once, without arming a timer.
        // A permit taken is counted by hand from here, so the share owns
        // its place.
        let placed = match semaphore.try_acquire() {
            Ok(permit) => {
                permit.forget();
                true
            }
            Err(_) => match tokio::time::timeout(patience, semaphore.acquire()).await {
                Ok(Ok(permit)) => {
                    permit.forget();
                    true
                }
                // The semaphore is never closed: running out of patience
                // is the one way not to get a place.
                Ok(Err(_)) | Err(_) => false,
            },
        };
        if placed {
            share.placed = true;
            return Ok(Some(share));
        }
        // Holders are session ids, principals and networks: said as they
        // are, no secret among them.
        tracing::warn!(
            target: "droid::bridge",
            holder = ?share.holder,
            "a client's requests to the upstream waited for its own to finish, and none did in time"
        );
        Err(CallError::internal(format!(
            "this client has {} requests with the upstream already, and none finished \
             within {} ms",
            self.per_holder,
            patience.as_millis()
        )))
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        if let Some(semaphore) = self.semaphore.take() {
            if self.placed {
                semaphore.add_permits(1);
            }
        }
        let mut held = lock(&self.shares.held);
        // Only the table's reference left: no request of this holder's holds
        // a place or waits for one.
        if held
            .get(&self.holder)
            .is_some_and(|semaphore| Arc::strong_count(semaphore) == 1)
        {
            held.remove(&self.holder);
        }
    }
}

/// A lease's place in its holder's share, which it may give up while it
/// waits on something other than the upstream (its client's answers, a
/// task the upstream runs) and take again before it asks the upstream
/// anything more.
#[derive(Debug)]
pub(super) struct Seat {
    shares: Arc<Shares>,
    holder: Holder,
    patience: Duration,
    share: Mutex<Option<Share>>,
}

impl Seat {
    /// `share`, taken for `holder` from `shares`.
    pub(super) fn new(
        shares: &Arc<Shares>,
        holder: Holder,
        patience: Duration,
        share: Share,
    ) -> Self {
        Self {
            shares: Arc::clone(shares),
            holder,
            patience,
            share: Mutex::new(Some(share)),
        }
    }

    /// Gives the place up for now.
    pub(super) fn step_out(&self) {
        drop(lock(&self.share).take());
    }

    /// Takes a place again, if it was given up.
    pub(super) async fn step_in(&self) -> Result<(), CallError> {
        if lock(&self.share).is_some() {
            return Ok(());
        }
        let taken = self
            .shares
            .take(Some(self.holder.clone()), self.patience)
            .await?;
        *lock(&self.share) = taken;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(n: u64) -> Holder {
        Holder::Session(SessionId::new(n))
    }

    #[tokio::test]
    async fn a_holder_waits_for_its_own_and_no_other() -> Result<(), CallError> {
        let shares = Shares::new(2);
        let patience = Duration::from_millis(50);
        let first = shares.take(Some(holder(1)), patience).await?;
        let _second = shares.take(Some(holder(1)), patience).await?;
        assert!(
            shares.take(Some(holder(1)), patience).await.is_err(),
            "a third is refused once its wait runs out"
        );
        assert!(
            shares.take(Some(holder(2)), patience).await?.is_some(),
            "another holder is let through"
        );
        drop(first);
        assert!(shares.take(Some(holder(1)), patience).await?.is_some());
        Ok(())
    }

    #[tokio::test]
    async fn a_holder_is_forgotten_with_its_last_request() -> Result<(), CallError> {
        let shares = Shares::new(1);
        let patience = Duration::from_millis(10);
        let taken = shares.take(Some(holder(7)), patience).await?;
        let refused = shares.take(Some(holder(7)), patience).await;
        assert!(refused.is_err());
        assert_eq!(lock(&shares.held).len(), 1, "still held by the first");
        drop(taken);
        assert!(lock(&shares.held).is_empty(), "nothing kept for it");
        Ok(())
    }

    #[tokio::test]
    async fn a_wait_cancelled_leaves_nothing_behind() -> Result<(), CallError> {
        let shares = Shares::new(1);
        let taken = shares.take(Some(holder(3)), PATIENCE).await?;
        let waiting = {
            let shares = Arc::clone(&shares);
            tokio::spawn(async move { shares.take(Some(holder(3)), PATIENCE).await })
        };
        tokio::task::yield_now().await;
        // In this order: the place goes to the waiter, which is cancelled
        // before it runs, so only the waiter's own drop can forget the
        // holder (the other way round, the first place's drop would).
        drop(taken);
        waiting.abort();
        let _cancelled = waiting.await;
        assert!(lock(&shares.held).is_empty(), "nothing kept for it");
        Ok(())
    }

    #[tokio::test]
    async fn a_seat_given_up_frees_its_place_until_taken_again() -> Result<(), CallError> {
        let shares = Shares::new(1);
        let share = shares
            .take(Some(holder(4)), PATIENCE)
            .await?
            .ok_or_else(|| CallError::internal("no share"))?;
        let seat = Seat::new(&shares, holder(4), PATIENCE, share);
        seat.step_out();
        let other = shares
            .take(Some(holder(4)), Duration::from_millis(10))
            .await?;
        assert!(other.is_some(), "its place was free");
        drop(other);
        seat.step_in().await?;
        assert!(
            shares
                .take(Some(holder(4)), Duration::from_millis(10))
                .await
                .is_err(),
            "taken again"
        );
        Ok(())
    }

    /// Long enough that a test never waits it out by accident.
    const PATIENCE: Duration = Duration::from_secs(600);

    #[tokio::test]
    async fn no_bound_takes_nothing() -> Result<(), CallError> {
        let shares = Shares::new(0);
        for _ in 0..10 {
            assert!(
                shares
                    .take(Some(holder(1)), Duration::from_millis(1))
                    .await?
                    .is_none()
            );
        }
        assert!(lock(&shares.held).is_empty());
        Ok(())
    }
}
