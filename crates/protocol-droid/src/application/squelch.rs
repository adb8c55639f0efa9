//! A warning that may recur without bound (a peer's flood of one fault) is
//! said at most once per interval, with how often it came meanwhile; one
//! said of each item of a batch a peer sized (the tools of a listing) is
//! said of the first few, the rest counted. The operator learns of it, and
//! one peer fills no disk.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// One recurring warning's budget. Kept in a `static` beside the warning:
/// every peer's occurrences share it, since the line says the same of each.
#[derive(Debug)]
pub(crate) struct Squelch {
    every: Duration,
    /// When the warning was last said, and how many came since.
    state: Mutex<(Option<Instant>, u64)>,
}

impl Squelch {
    /// A budget of one warning per `every`.
    pub(crate) const fn new(every: Duration) -> Self {
        Self {
            every,
            state: Mutex::new((None, 0)),
        }
    }

    /// Whether this occurrence is to be said, and if so how many before it
    /// were passed over since the last one said.
    pub(crate) fn admit(&self) -> Option<u64> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (said, passed) = &mut *state;
        if said.is_some_and(|at| now.saturating_duration_since(at) < self.every) {
            *passed += 1;
            return None;
        }
        *said = Some(now);
        Some(std::mem::take(passed))
    }
}

/// How many items of one batch a warning names one by one.
pub(crate) const NAMED_PER_BATCH: usize = 16;

/// One warning's count over one batch: the first [`NAMED_PER_BATCH`]
/// items are said, the rest counted, to be said in one line after.
#[derive(Debug, Default)]
pub(crate) struct PerBatch {
    named: usize,
    more: usize,
}

impl PerBatch {
    /// Whether this item is to be said; counted among the rest if not.
    pub(crate) fn admit(&mut self) -> bool {
        if self.named < NAMED_PER_BATCH {
            self.named += 1;
            true
        } else {
            self.more += 1;
            false
        }
    }

    /// How many items were not said, if any: the line to write after the
    /// batch.
    pub(crate) fn passed_over(&self) -> Option<usize> {
        (self.more > 0).then_some(self.more)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_of_a_batch_are_said_and_the_rest_counted() {
        let mut batch = PerBatch::default();
        assert_eq!(batch.passed_over(), None);
        let said = (0..100).filter(|_| batch.admit()).count();
        assert_eq!(said, NAMED_PER_BATCH);
        assert_eq!(batch.passed_over(), Some(100 - NAMED_PER_BATCH));
    }

    #[test]
    fn the_first_is_said_then_one_per_interval_with_the_count_between() {
        let squelch = Squelch::new(Duration::from_secs(10));
        let start = Instant::now();
        assert_eq!(squelch.admit_at(start), Some(0));
        for second in 1..=5 {
            assert_eq!(squelch.admit_at(start + Duration::from_secs(second)), None);
        }
        assert_eq!(squelch.admit_at(start + Duration::from_secs(10)), Some(5));
        assert_eq!(squelch.admit_at(start + Duration::from_secs(11)), None);
        assert_eq!(squelch.admit_at(start + Duration::from_secs(30)), Some(1));
    }
}
