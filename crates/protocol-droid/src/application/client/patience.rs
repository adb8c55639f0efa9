//! How long a request is waited for when its server reports progress.
//!
//! A fixed deadline cuts off the long tools that report how far they
//! are, which are exactly the ones a caller is willing to wait for. With
//! [`RequestOptions::reset_timeout_on_progress`](super::RequestOptions),
//! each progress notification starts the wait again, so only a server
//! silent for the whole timeout is given up on; a ceiling on the whole
//! wait keeps a server that reports progress forever from holding the
//! request forever.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// When a request's server was last heard from (a progress notification),
/// shared between the callback that hears it and the wait that reads it.
#[derive(Clone, Debug)]
pub(crate) struct Heard(Arc<Mutex<Instant>>);

impl Heard {
    /// Heard from now: the request is being sent.
    pub(crate) fn now() -> Self {
        Self(Arc::new(Mutex::new(Instant::now())))
    }

    /// Records that the server was heard from just now.
    pub(crate) fn touch(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }

    /// When the server was last heard from.
    pub(crate) fn last(&self) -> Instant {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `at` plus `by`, or a moment thirty years on when that is past what an
/// instant can hold: a timeout of `Duration::MAX` means "no timeout".
pub(crate) fn later(at: Instant, by: Duration) -> Instant {
    at.checked_add(by)
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(30 * 365 * 24 * 60 * 60))
}

/// Waits for `work` until `limit` has passed with nothing heard: since
/// the start, or, when `heard` is given, since the server was last heard
/// from, but never past `ceiling` after the start. When the wait ran out,
/// `Err` with what to tell: `limit`, or how long it waited in all when the
/// ceiling ended it.
pub(crate) async fn within<F: Future>(
    limit: Duration,
    heard: Option<&Heard>,
    ceiling: Duration,
    work: F,
) -> Result<F::Output, Duration> {
    let start = Instant::now();
    let last_moment = later(start, ceiling.max(limit));
    let mut deadline = later(start, limit);
    tokio::pin!(work);
    loop {
        if let Ok(done) = tokio::time::timeout_at(deadline.min(last_moment), &mut work).await {
            return Ok(done);
        }
        let now = Instant::now();
        let next = heard.map(|heard| later(heard.last(), limit));
        match next {
            Some(next) if next > now && now < last_moment => deadline = next,
            _ if now >= last_moment => return Err(now.duration_since(start)),
            _ => return Err(limit),
        }
    }
}

/// How long a request that keeps reporting progress may be waited for in
/// all, unless its timeout is longer.
pub const MAX_PATIENCE: Duration = Duration::from_secs(60 * 60);

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_timeout_of_forever_waits_and_does_not_overflow() {
        let heard = Heard::now();
        let quick = tokio::time::sleep(Duration::from_secs(1));
        let out = within(Duration::MAX, Some(&heard), MAX_PATIENCE, quick).await;
        assert_eq!(out, Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn without_progress_the_limit_holds() {
        let heard = Heard::now();
        let slow = tokio::time::sleep(Duration::from_secs(10));
        let out = within(Duration::from_secs(2), Some(&heard), MAX_PATIENCE, slow).await;
        assert_eq!(out, Err(Duration::from_secs(2)));
    }

    #[tokio::test(start_paused = true)]
    async fn progress_starts_the_wait_again() {
        let heard = Heard::now();
        let beat = heard.clone();
        let work = async move {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                beat.touch();
            }
            "done"
        };
        let out = within(Duration::from_secs(2), Some(&heard), MAX_PATIENCE, work).await;
        assert_eq!(out, Ok("done"));
    }

    /// Work that reports progress every second, forever.
    async fn beating(heard: Heard) {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            heard.touch();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn progress_without_end_meets_the_ceiling() {
        let heard = Heard::now();
        let began = Instant::now();
        let ceiling = Duration::from_secs(30);
        let work = beating(heard.clone());
        let out = within(Duration::from_secs(2), Some(&heard), ceiling, work).await;
        assert_eq!(out, Err(ceiling));
        assert_eq!(began.elapsed(), ceiling);
    }

    #[tokio::test(start_paused = true)]
    async fn not_listening_for_progress_is_a_fixed_deadline() {
        let heard = Heard::now();
        let began = Instant::now();
        let out = within(Duration::from_secs(2), None, MAX_PATIENCE, beating(heard)).await;
        assert_eq!(out, Err(Duration::from_secs(2)));
        assert_eq!(began.elapsed(), Duration::from_secs(2));
    }
}
