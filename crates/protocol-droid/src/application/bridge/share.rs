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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::upstream::lock;
use crate::application::server::rate::Caller;
use crate::application::server::{Call, CallError};
use crate::domain::Era;
use crate::domain::session::SessionId;

/// Whose share a request counts against.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Holder {
    /// A legacy session's.
    Session(SessionId),
    /// A stateless client's: its principal, its network, or the one client
    /// of a stdio connection.
    Caller(Caller),
}

impl Holder {
    /// Who `call` is, for its share.
    pub(super) fn of(call: &Call) -> Self {
        if call.peer.negotiated().era() == Era::Legacy {
            Self::Session(call.session())
        } else {
            Self::Caller(Caller::of(&call.ctx))
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

/// One request's place in its holder's share, given back when dropped.
#[derive(Debug)]
pub(super) struct Share {
    permit: Option<OwnedSemaphorePermit>,
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
        holder: Holder,
        patience: Duration,
    ) -> Result<Option<Share>, CallError> {
        if self.per_holder == 0 {
            return Ok(None);
        }
        let semaphore = Arc::clone(
            lock(&self.held)
                .entry(holder.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_holder))),
        );
        // Most often there is room: taken at once, without arming a timer.
        let semaphore = match Arc::clone(&semaphore).try_acquire_owned() {
            Ok(permit) => {
                return Ok(Some(Share {
                    permit: Some(permit),
                    holder,
                    shares: Arc::clone(self),
                }));
            }
            Err(_) => semaphore,
        };
        let waited = tokio::time::timeout(patience, semaphore.acquire_owned()).await;
        // The semaphore is never closed: running out of patience is the one
        // way not to get a place.
        let Ok(Ok(permit)) = waited else {
            // Dropped as a place would be, so an entry no one uses goes.
            drop(Share {
                permit: None,
                holder,
                shares: Arc::clone(self),
            });
            return Err(CallError::internal(format!(
                "{} requests of this client's are already with the upstream, and none \
                 finished within {} s",
                self.per_holder,
                patience.as_secs()
            )));
        };
        Ok(Some(Share {
            permit: Some(permit),
            holder,
            shares: Arc::clone(self),
        }))
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        drop(self.permit.take());
        let mut held = lock(&self.shares.held);
        // Only the table's reference left: no request of this holder's holds
        // a place (a permit keeps its semaphore) or waits for one.
        if held
            .get(&self.holder)
            .is_some_and(|semaphore| Arc::strong_count(semaphore) == 1)
        {
            held.remove(&self.holder);
        }
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
        let first = shares.take(holder(1), patience).await?;
        let _second = shares.take(holder(1), patience).await?;
        assert!(
            shares.take(holder(1), patience).await.is_err(),
            "a third is refused once its wait runs out"
        );
        assert!(
            shares.take(holder(2), patience).await?.is_some(),
            "another holder is let through"
        );
        drop(first);
        assert!(shares.take(holder(1), patience).await?.is_some());
        Ok(())
    }

    #[tokio::test]
    async fn a_holder_is_forgotten_with_its_last_request() -> Result<(), CallError> {
        let shares = Shares::new(1);
        let patience = Duration::from_millis(10);
        let taken = shares.take(holder(7), patience).await?;
        let refused = shares.take(holder(7), patience).await;
        assert!(refused.is_err());
        assert_eq!(lock(&shares.held).len(), 1, "still held by the first");
        drop(taken);
        assert!(lock(&shares.held).is_empty(), "nothing kept for it");
        Ok(())
    }

    #[tokio::test]
    async fn no_bound_takes_nothing() -> Result<(), CallError> {
        let shares = Shares::new(0);
        for _ in 0..10 {
            assert!(
                shares
                    .take(holder(1), Duration::from_millis(1))
                    .await?
                    .is_none()
            );
        }
        assert!(lock(&shares.held).is_empty());
        Ok(())
    }
}
