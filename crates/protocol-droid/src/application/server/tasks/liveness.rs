//! Whether the process running a task is still there.
//!
//! Where several instances share a task store, a task's handler runs in the
//! one process that created it, and dies with it. Each such process names
//! itself (`<instance>/<token>`, the token fresh each start, so a restarted
//! instance reusing its name is not taken for the one that died), and says
//! in the store every few seconds that it is alive ([`spawn_beat`]). An
//! instance reading a task that another process runs asks whether that
//! process's word still holds ([`Liveness::alive`]); once it has been
//! missing for longer than a beat, the task is failed rather than shown as
//! running until its TTL.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::store::TaskStore;

/// How a process says it is alive, and how another is judged dead.
#[derive(Clone, Copy, Debug)]
pub(super) struct Timing {
    /// How long a runner's word that it is alive holds in the store.
    pub(super) lease: Duration,
    /// How often a runner says it again: a third of a lease, so a beat or
    /// two lost to a slow store does not make it look dead.
    pub(super) beat: Duration,
    /// How long a runner must be seen absent, from the first time, before
    /// it is taken for dead: longer than a beat and its timeout, so a store
    /// that lost every key (restarted empty, failed over) hears each live
    /// runner again first.
    pub(super) proof: Duration,
    /// How long what the store said of a runner is taken as still true.
    pub(super) memory: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(15),
            beat: Duration::from_secs(5),
            proof: Duration::from_secs(11),
            memory: Duration::from_secs(1),
        }
    }
}

/// What the store last said of one runner.
#[derive(Clone, Copy, Debug)]
struct Seen {
    /// When it was asked.
    asked: Instant,
    /// Since when the runner's word has been missing, if it is.
    absent_since: Option<Instant>,
}

/// This process's name among the others, and what it heard of theirs.
#[derive(Debug, Default)]
pub(super) struct Liveness {
    /// This process, once its tasks are shared: the runner they name.
    runner: OnceLock<String>,
    /// What the store said of other runners: asked at most once a
    /// [`Timing::memory`] each.
    seen: Mutex<HashMap<String, Seen>>,
    /// When this process last failed to say in the store that it is alive:
    /// while that is recent, it judges no other process either.
    beat_failed: Mutex<Option<Instant>>,
    /// How liveness is said and judged.
    timing: Timing,
}

/// A fresh name for this process, as an instance called `instance`.
pub(super) fn runner_name(instance: &str) -> String {
    // Unique, not secret.
    let token = crate::application::random::unique_hex();
    format!("{instance}/{token}")
}

impl Liveness {
    /// Liveness said and judged by `timing` (shorter, in tests).
    #[cfg(test)]
    pub(super) fn with_timing(timing: Timing) -> Self {
        Self {
            timing,
            ..Self::default()
        }
    }

    /// Names this process `runner` (once; a second name is ignored).
    pub(super) fn named(&self, runner: String) {
        let _first = self.runner.set(runner);
    }

    /// This process's name, once its tasks are shared.
    pub(super) fn runner(&self) -> Option<&str> {
        self.runner.get().map(String::as_str)
    }

    /// The lease, in milliseconds: a task younger than this is never
    /// judged, as its runner may not have said a word yet.
    pub(super) fn lease_ms(&self) -> u64 {
        u64::try_from(self.timing.lease.as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether this process failed to reach the store lately: it may be
    /// the one cut off, and judges nobody until it is heard again itself.
    pub(super) fn cut_off(&self) -> bool {
        self.beat_failed
            .lock()
            .ok()
            .and_then(|failed| *failed)
            .is_some_and(|at| at.elapsed() < self.timing.lease)
    }

    /// Whether `runner` is to be taken as alive: unless `store` has said
    /// it is not for longer than [`Timing::proof`]. The store is asked at
    /// most once a [`Timing::memory`]; a store that cannot say is taken as
    /// yes, as is a runner missing only since lately (a store restarted
    /// empty has lost every runner's word until it beats again).
    pub(super) async fn alive(&self, store: &dyn TaskStore, runner: &str) -> bool {
        let timing = self.timing;
        let judged = |seen: &Seen| {
            seen.absent_since
                .is_none_or(|since| since.elapsed() < timing.proof)
        };
        let remembered = self.seen.lock().ok().and_then(|known| {
            known
                .get(runner)
                .filter(|seen| seen.asked.elapsed() < timing.memory)
                .copied()
        });
        if let Some(seen) = remembered {
            return judged(&seen);
        }
        let Ok(present) = store.alive(runner).await else {
            return true;
        };
        let Ok(mut known) = self.seen.lock() else {
            return true;
        };
        let now = Instant::now();
        let absent_since = if present {
            None
        } else {
            Some(
                known
                    .get(runner)
                    .and_then(|seen| seen.absent_since)
                    .unwrap_or(now),
            )
        };
        // Kept long enough to prove an absence, and no longer.
        let keep = timing.proof.saturating_mul(2);
        known.retain(|_, seen| seen.asked.elapsed() < keep);
        let seen = Seen {
            asked: now,
            absent_since,
        };
        known.insert(runner.to_owned(), seen);
        judged(&seen)
    }

    fn beat_failed(&self) {
        if let Ok(mut failed) = self.beat_failed.lock() {
            *failed = Some(Instant::now());
        }
    }
}

/// Says in `store` that this process is alive every [`Timing::beat`], for
/// a [`Timing::lease`], until `liveness` (the runtime's) is dropped: while
/// it does, other instances show its tasks as running; once it stops (the
/// process died), they fail them.
pub(super) fn spawn_beat(store: Arc<dyn TaskStore>, liveness: Weak<Liveness>) {
    tokio::spawn(async move {
        let mut failing = false;
        let mut ticks: Option<tokio::time::Interval> = None;
        loop {
            let Some((runner, timing)) = liveness
                .upgrade()
                .and_then(|liveness| Some((liveness.runner()?.to_owned(), liveness.timing)))
            else {
                return;
            };
            // On a steady beat, not a sleep after each: a slow store does
            // not stretch the time between two beats past a lease.
            let ticks = ticks.get_or_insert_with(|| {
                let mut ticks = tokio::time::interval(timing.beat);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                ticks
            });
            ticks.tick().await;
            let lease_ms = u64::try_from(timing.lease.as_millis()).unwrap_or(u64::MAX);
            let beat = tokio::time::timeout(timing.beat, store.beat(&runner, lease_ms)).await;
            let beaten = matches!(beat, Ok(Ok(())));
            if !beaten {
                if let Some(liveness) = liveness.upgrade() {
                    liveness.beat_failed();
                }
            }
            match (beaten, failing) {
                (true, true) => {
                    failing = false;
                    tracing::warn!(target: "droid::tasks", "this instance's tasks are kept alive in the store again");
                }
                (false, false) => {
                    failing = true;
                    tracing::warn!(target: "droid::tasks", "this instance could not say in the store that its tasks are alive; past its lease other instances fail them");
                }
                _ => {}
            }
        }
    });
}
