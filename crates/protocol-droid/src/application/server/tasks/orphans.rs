//! A task whose instance died: failed, rather than left working until its
//! TTL.
//!
//! Instances sharing their tasks each run the handlers of the tasks they
//! created; the record names that instance (`runner`). A task read on
//! another instance while unfinished has its runner asked after: an
//! instance that lives listens on the relay under its name. One that has
//! not listened for [`GRACE`] (longer than an instance takes to listen
//! again after losing the store for a moment) is gone, and so is the
//! handler: the task is failed, once, for every instance (the store refuses
//! to change an ended task, so a runner that was only slow cannot be
//! overwritten either way), and its listeners are told.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{SharedTasks, TaskOutcome, TaskRecord, Tasks, now_ms};
use crate::domain::jsonrpc::{ErrorCode, ErrorObject};
use crate::wire::tasks::TaskStatus;

/// How long a task's runner may listen nowhere before its tasks are failed.
pub(super) const GRACE: Duration = Duration::from_secs(10);

/// How often one runner is asked after, at most: polls of its tasks from
/// many clients cost one question a second.
const ASK_EVERY: Duration = Duration::from_secs(1);

/// The most runners remembered; past it, what is remembered starts over
/// (a runner then needs its grace again).
const MAX_RUNNERS: usize = 256;

/// What this instance last learned of each other runner.
#[derive(Default)]
pub(super) struct Runners {
    seen: std::sync::Mutex<HashMap<String, Seen>>,
}

#[derive(Clone, Copy)]
struct Seen {
    /// When it was last asked after.
    asked: Instant,
    /// Since when it has listened nowhere, if it has not.
    absent_since: Option<Instant>,
}

impl Seen {
    fn gone(self, now: Instant) -> bool {
        self.absent_since
            .is_some_and(|since| now.duration_since(since) >= GRACE)
    }
}

impl Runners {
    /// Whether `runner` has listened nowhere for [`GRACE`]: asked of the
    /// relay at most once every [`ASK_EVERY`]; a store out of reach says
    /// nothing, and nothing is decided on it.
    async fn gone(&self, shared: &SharedTasks, runner: &str) -> bool {
        let now = Instant::now();
        let known = self
            .seen
            .lock()
            .ok()
            .and_then(|seen| seen.get(runner).copied());
        if let Some(seen) = known.filter(|s| now.duration_since(s.asked) < ASK_EVERY) {
            return seen.gone(now);
        }
        let Ok(listeners) = shared.relay.listeners(runner).await else {
            return false;
        };
        let Ok(mut seen) = self.seen.lock() else {
            return false;
        };
        if seen.len() >= MAX_RUNNERS && !seen.contains_key(runner) {
            seen.clear();
        }
        let entry = seen.entry(runner.to_owned()).or_insert(Seen {
            asked: now,
            absent_since: None,
        });
        entry.asked = now;
        if listeners > 0 {
            entry.absent_since = None;
        } else if entry.absent_since.is_none() {
            entry.absent_since = Some(now);
        }
        entry.gone(now)
    }
}

impl Tasks {
    /// `record` as it stands once its runner is known to live: failed,
    /// for every instance, when it was unfinished and its runner is
    /// another instance that is gone.
    pub(super) async fn unless_orphaned(&self, record: TaskRecord) -> TaskRecord {
        let Some(shared) = self.shared.get() else {
            return record;
        };
        let Some(runner) = record.runner.as_deref() else {
            return record;
        };
        if record.is_terminal()
            || runner == shared.instance
            || !self.runners.gone(shared, runner).await
        {
            return record;
        }
        let runner = runner.to_owned();
        let _writing = self.writes.lock().await;
        let now = now_ms();
        let current = match self.store().get(&record.owner, &record.id, now).await {
            Ok(Some(current)) if !current.is_terminal() => current,
            Ok(Some(ended)) => return ended,
            Ok(None) | Err(_) => return record,
        };
        let mut failed = current;
        failed.status = TaskStatus::Failed;
        failed.status_message = Some(format!(
            "the instance running it ({runner}) stopped before it ended"
        ));
        failed.outcome = Some(TaskOutcome::Error(ErrorObject::new(
            ErrorCode::INTERNAL_ERROR,
            "the instance running this task stopped before it ended; run it again",
        )));
        failed.input_requests.clear();
        failed.updated_ms = now;
        match self.store().update(failed.clone()).await {
            Ok(true) => {
                tracing::warn!(target: "droid::tasks", task = %failed.id, %runner, "a task whose instance stopped was failed");
                self.changed(&failed, None);
                failed
            }
            // Ended meanwhile, by its runner after all or by another
            // instance: as it is now.
            Ok(false) => match self.store().get(&record.owner, &record.id, now).await {
                Ok(Some(now_kept)) => now_kept,
                Ok(None) | Err(_) => record,
            },
            Err(error) => {
                tracing::warn!(target: "droid::tasks", task = %failed.id, %error, "an orphaned task could not be failed");
                record
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{GRACE, Seen};

    /// A runner is gone only once it has listened nowhere for its grace.
    #[test]
    fn a_runner_is_gone_only_after_its_grace() {
        let now = Instant::now();
        let seen = |absent_for: Option<Duration>| Seen {
            asked: now,
            absent_since: absent_for.and_then(|d| now.checked_sub(d)),
        };
        assert!(!seen(None).gone(now), "heard: alive");
        assert!(
            !seen(Some(GRACE / 2)).gone(now),
            "a moment's absence: listening again"
        );
        assert!(seen(Some(GRACE)).gone(now));
        assert!(seen(Some(GRACE * 3)).gone(now));
    }
}
