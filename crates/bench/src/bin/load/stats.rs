//! Turning latencies and runs into the figures the table shows.

use std::time::Duration;

/// One scenario's figures for one server in one run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sample {
    /// Calls answered per second.
    pub(crate) per_second: f64,
    /// Median latency, in microseconds.
    pub(crate) p50_us: f64,
    /// 99th percentile latency, in microseconds.
    pub(crate) p99_us: f64,
    /// The server's peak resident set, in MiB.
    pub(crate) peak_mib: f64,
    /// Processor time per call, where it was read.
    pub(crate) cpu: Option<PerCall>,
}

impl Sample {
    /// Figures from `calls` answered in `elapsed`, with their latencies in
    /// nanoseconds, and the server's peak resident set in KiB.
    pub(crate) fn new(
        calls: u64,
        mut latencies: Vec<u64>,
        elapsed: Duration,
        peak_kib: u64,
    ) -> Self {
        latencies.sort_unstable();
        Self {
            per_second: float(calls) / elapsed.as_secs_f64().max(f64::EPSILON),
            p50_us: percentile(&latencies, 50) / 1_000.0,
            p99_us: percentile(&latencies, 99) / 1_000.0,
            peak_mib: float(peak_kib) / 1_024.0,
            cpu: None,
        }
    }

    /// The same figures, with the processor time per call.
    pub(crate) const fn with_cpu(self, cpu: PerCall) -> Self {
        Self {
            cpu: Some(cpu),
            ..self
        }
    }
}

/// Processor time per call, in microseconds (read by `cpu`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PerCall {
    /// The program measured.
    pub(crate) own_us: f64,
    /// The processes it started (a gateway's or a bridge's upstream).
    pub(crate) upstream_us: f64,
    /// The load generator.
    pub(crate) generator_us: f64,
}

/// The nearest-rank percentile of sorted values.
fn percentile(sorted: &[u64], percent: usize) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (sorted.len() * percent).div_ceil(100).max(1) - 1;
    sorted.get(rank).copied().map_or(f64::NAN, float)
}

/// `value` as a float; counts and sizes here are far below 2^53, where the
/// conversion would start rounding.
#[expect(
    clippy::cast_precision_loss,
    clippy::as_conversions,
    reason = "counts, sizes and nanoseconds of a run stay far below 2^53"
)]
pub(crate) fn float(value: u64) -> f64 {
    value as f64
}

/// The median, least and greatest of a figure over runs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Spread {
    /// The median.
    pub(crate) median: f64,
    /// The least.
    pub(crate) min: f64,
    /// The greatest.
    pub(crate) max: f64,
}

impl Spread {
    /// The spread of `values`; `None` when there are none.
    pub(crate) fn of(values: &[f64]) -> Option<Self> {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let middle = sorted.len() / 2;
        let median = if sorted.len() % 2 == 1 {
            *sorted.get(middle)?
        } else {
            (sorted.get(middle.checked_sub(1)?)? + sorted.get(middle)?) / 2.0
        };
        Some(Self {
            median,
            min: *sorted.first()?,
            max: *sorted.last()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{Spread, percentile};

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&values, 50), 50.0);
        assert_eq!(percentile(&values, 99), 99.0);
        assert_eq!(percentile(&[7], 99), 7.0);
    }

    #[test]
    fn a_spread_reports_the_median_of_unsorted_runs() {
        let spread = Spread::of(&[3.0, 1.0, 2.0]);
        assert_eq!(
            spread.map(|s| (s.median, s.min, s.max)),
            Some((2.0, 1.0, 3.0))
        );
        assert!(Spread::of(&[]).is_none());
    }
}
