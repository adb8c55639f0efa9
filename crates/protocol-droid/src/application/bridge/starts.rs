//! How the last starts of an upstream connection went, so that an upstream
//! that fails to start is not started again for every request.

use std::time::{Duration, Instant};

use crate::application::server::CallError;

/// A connection that ends within this long of being opened failed to
/// start: the server exited at once, or right after its handshake.
const FAILED_START: Duration = Duration::from_secs(5);

/// The wait after the first failed start; it doubles with each failure
/// after, up to [`MOST_BETWEEN_STARTS`], as the gateway's restarts do.
const FIRST_WAIT: Duration = Duration::from_millis(500);

/// The longest wait between two starts of a failing upstream.
const MOST_BETWEEN_STARTS: Duration = Duration::from_secs(30);

/// The longest wait a request sits out before the next start: a server
/// that failed once or twice (a crash mid-call) is started again for the
/// request that comes next, a little later; past this the request is
/// refused at once.
const WAITED_OUT: Duration = Duration::from_secs(1);

/// How the last starts of an upstream connection went. A server that
/// fails to start (it cannot be reached, or ends as soon as it started) is
/// not started again for every request, which for a child process is one
/// process a request, but once a wait has passed that doubles with each
/// failure; a request meanwhile sits out a short wait ([`WAITED_OUT`]) and
/// is refused at once when the wait is longer, saying when the next start
/// is.
#[derive(Debug, Default)]
pub(super) struct Starts {
    failures: u32,
    not_before: Option<Instant>,
}

impl Starts {
    /// How long to wait before a connection may be started, at most
    /// [`WAITED_OUT`]; the refusal when the wait is longer.
    pub(super) fn wait(&self, now: Instant) -> Result<Duration, CallError> {
        let wait = self
            .not_before
            .map_or(Duration::ZERO, |at| at.saturating_duration_since(now));
        if wait > WAITED_OUT {
            return Err(CallError::internal(format!(
                "the upstream failed to start {} time(s) in a row; it is started again in {} ms",
                self.failures,
                wait.as_millis()
            )));
        }
        Ok(wait)
    }

    /// A start failed at `now`.
    pub(super) fn failed(&mut self, now: Instant) {
        self.failures = self.failures.saturating_add(1);
        let doublings = self.failures.saturating_sub(1).min(16);
        let wait = FIRST_WAIT
            .saturating_mul(1 << doublings)
            .min(MOST_BETWEEN_STARTS);
        self.not_before = Some(now + wait);
    }

    /// A connection this bridge closed (idle, or given up) had lived
    /// `lived`: proof the upstream starts when that was long, and nothing
    /// either way when it was not, since the server did not end it.
    pub(super) fn closed(&mut self, lived: Duration) {
        if lived >= FAILED_START {
            self.failures = 0;
            self.not_before = None;
        }
    }

    /// A connection opened `lived` ago ended at `now`, its server gone: a
    /// failed start when that was soon, else proof the upstream starts.
    pub(super) fn ended(&mut self, lived: Duration, now: Instant) {
        if lived < FAILED_START {
            self.failed(now);
        } else {
            self.failures = 0;
            self.not_before = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_with_each_failed_start_and_a_long_life_ends_it() {
        let mut starts = Starts::default();
        let now = Instant::now();
        assert_eq!(starts.wait(now).ok(), Some(Duration::ZERO));
        starts.failed(now);
        assert_eq!(starts.wait(now).ok(), Some(FIRST_WAIT));
        starts.ended(Duration::from_secs(1), now);
        assert_eq!(starts.wait(now).ok(), Some(FIRST_WAIT * 2));
        // Past a second the request is refused, saying when.
        starts.failed(now);
        let refused = starts
            .wait(now)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(refused.contains("3 time(s) in a row"), "{refused}");
        for _ in 0..20 {
            starts.failed(now);
        }
        assert!(starts.not_before <= Some(now + MOST_BETWEEN_STARTS));
        // One this bridge closed soon says nothing; one that lived ends
        // the count.
        starts.closed(Duration::from_secs(1));
        assert!(starts.wait(now).is_err());
        starts.ended(FAILED_START, now);
        assert_eq!(starts.wait(now).ok(), Some(Duration::ZERO));
    }
}
