//! Prometheus metrics: an [`Observer`] that counts what it is told, and its
//! exposition in the Prometheus text format.
//!
//! Every series is named `droid_…` and carries only bounded labels (see
//! [`crate::application::observe`]): a method some revision defines, an
//! era, a transport, an outcome, an error code the specification names, a
//! configured upstream's name, a feature of the profile. What is a level
//! rather than an event (open sessions, upstreams up) is read when scraped,
//! from sources set with [`Metrics::sessions_from`] and
//! [`Metrics::upstreams_from`].

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::application::observe::{LimitKind, Method, Observer, Outcome, RequestLabels};
use crate::domain::feature::Feature;

/// The `Content-Type` of what [`Metrics::render`] writes.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Where a level read at scrape time comes from.
type Source<T> = Arc<dyn Fn() -> T + Send + Sync>;

/// One upstream's state, as [`Metrics::upstreams_from`]'s source reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamLevel {
    /// The upstream's configured name.
    pub name: String,
    /// Whether it is connected and usable now.
    pub up: bool,
}

/// The counters, histograms and gauges of one process, and the [`Observer`]
/// that moves them. Cheap to clone: clones share the same series.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    requests: Family<RequestKey, Counter>,
    request_seconds: Family<TimingKey, Histogram, Latency>,
    in_flight: Family<InFlightKey, Gauge>,
    upstream_calls: Family<UpstreamCallKey, Counter>,
    upstream_seconds: Family<UpstreamKey, Histogram, Latency>,
    upstream_up: Family<UpstreamKey, Gauge>,
    sessions: Gauge,
    translations: Family<FeatureKey, Counter>,
    drift: Family<UpstreamKey, Counter>,
    rate_limited: Family<LimitKey, Counter>,
    store_errors: Family<StoreKey, Counter>,
    sources: Mutex<Sources>,
}

#[derive(Default)]
struct Sources {
    sessions: Option<Source<usize>>,
    upstreams: Option<Source<Vec<UpstreamLevel>>>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestKey {
    method: &'static str,
    era: &'static str,
    transport: &'static str,
    outcome: &'static str,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TimingKey {
    method: &'static str,
    era: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InFlightKey {
    transport: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamCallKey {
    upstream: String,
    method: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamKey {
    upstream: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FeatureKey {
    feature: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitKey {
    limit: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreKey {
    store: &'static str,
}

/// How a latency histogram is made for each new label set.
type Latency = fn() -> Histogram;

/// Latency buckets from 50 µs to about 100 s: a local call is answered in
/// tens of microseconds, a tool may run for a minute.
fn latency() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.5, 17))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Every series at zero.
    #[must_use]
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("droid");
        let requests = Family::<RequestKey, Counter>::default();
        registry.register(
            "requests",
            "Requests answered, by method, era, transport and outcome (with the error code when the specification names it)",
            requests.clone(),
        );
        let request_seconds =
            Family::<TimingKey, Histogram, Latency>::new_with_constructor(latency);
        registry.register(
            "request_duration_seconds",
            "Time from reading a request to its answer, by method and era",
            request_seconds.clone(),
        );
        let in_flight = Family::<InFlightKey, Gauge>::default();
        registry.register(
            "requests_in_flight",
            "Requests being served now, by transport",
            in_flight.clone(),
        );
        let sessions = Gauge::default();
        registry.register(
            "sessions",
            "Legacy sessions open over HTTP",
            sessions.clone(),
        );
        let upstream_calls = Family::<UpstreamCallKey, Counter>::default();
        registry.register(
            "upstream_calls",
            "Requests forwarded to an upstream, by upstream, method and outcome",
            upstream_calls.clone(),
        );
        let upstream_seconds =
            Family::<UpstreamKey, Histogram, Latency>::new_with_constructor(latency);
        registry.register(
            "upstream_call_duration_seconds",
            "Time an upstream took to answer a forwarded request, by upstream",
            upstream_seconds.clone(),
        );
        let upstream_up = Family::<UpstreamKey, Gauge>::default();
        registry.register(
            "upstream_up",
            "Whether an upstream is connected and usable (1) or not (0)",
            upstream_up.clone(),
        );
        let translations = Family::<FeatureKey, Counter>::default();
        registry.register(
            "translation_downgrades",
            "Features dropped or reshaped translating a reply for an older client, by feature",
            translations.clone(),
        );
        let drift = Family::<UpstreamKey, Counter>::default();
        registry.register(
            "drift_events",
            "Tools an upstream changed or took away after listing them, by upstream",
            drift.clone(),
        );
        let rate_limited = Family::<LimitKey, Counter>::default();
        registry.register(
            "rate_limited",
            "Requests refused by a rate limit, by which limit",
            rate_limited.clone(),
        );
        let store_errors = Family::<StoreKey, Counter>::default();
        registry.register(
            "store_errors",
            "Failed reads or writes of a store, by store",
            store_errors.clone(),
        );
        Self {
            inner: Arc::new(Inner {
                registry,
                requests,
                request_seconds,
                in_flight,
                upstream_calls,
                upstream_seconds,
                upstream_up,
                sessions,
                translations,
                drift,
                rate_limited,
                store_errors,
                sources: Mutex::new(Sources::default()),
            }),
        }
    }

    /// Reads the number of open sessions from `source` at every scrape.
    pub fn sessions_from(&self, source: impl Fn() -> usize + Send + Sync + 'static) {
        self.sources().sessions = Some(Arc::new(source));
    }

    /// Reads each upstream's state from `source` at every scrape.
    pub fn upstreams_from(&self, source: impl Fn() -> Vec<UpstreamLevel> + Send + Sync + 'static) {
        self.sources().upstreams = Some(Arc::new(source));
    }

    fn sources(&self) -> std::sync::MutexGuard<'_, Sources> {
        self.inner
            .sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Everything, in the Prometheus text format ([`CONTENT_TYPE`]), with
    /// the levels read now.
    #[must_use]
    pub fn render(&self) -> String {
        let (sessions, upstreams) = {
            let sources = self.sources();
            (sources.sessions.clone(), sources.upstreams.clone())
        };
        if let Some(sessions) = sessions {
            self.inner
                .sessions
                .set(i64::try_from(sessions()).unwrap_or(i64::MAX));
        }
        if let Some(upstreams) = upstreams {
            // Cleared first, so an upstream removed from the configuration
            // stops being reported.
            self.inner.upstream_up.clear();
            for level in upstreams() {
                self.inner
                    .upstream_up
                    .get_or_create(&UpstreamKey {
                        upstream: level.name,
                    })
                    .set(i64::from(level.up));
            }
        }
        let mut text = String::new();
        // Writing to a String does not fail, and every label is text.
        let _written =
            prometheus_client::encoding::prometheus_text::encode(&mut text, &self.inner.registry);
        text
    }
}

fn code(outcome: Outcome) -> String {
    match outcome {
        Outcome::Error(Some(code)) => code.0.to_string(),
        Outcome::Error(None) => "other".to_owned(),
        Outcome::Ok | Outcome::Cancelled => String::new(),
    }
}

impl Observer for Metrics {
    fn request_started(&self, request: &RequestLabels) {
        self.inner
            .in_flight
            .get_or_create(&InFlightKey {
                transport: request.transport.as_str(),
            })
            .inc();
    }

    fn request_finished(&self, request: &RequestLabels, outcome: Outcome, elapsed: Duration) {
        let inner = &self.inner;
        inner
            .in_flight
            .get_or_create(&InFlightKey {
                transport: request.transport.as_str(),
            })
            .dec();
        inner
            .requests
            .get_or_create(&RequestKey {
                method: request.method.as_str(),
                era: request.era.as_str(),
                transport: request.transport.as_str(),
                outcome: outcome.as_str(),
                code: code(outcome),
            })
            .inc();
        inner
            .request_seconds
            .get_or_create(&TimingKey {
                method: request.method.as_str(),
                era: request.era.as_str(),
            })
            .observe(elapsed.as_secs_f64());
    }

    fn upstream_call(&self, upstream: &str, method: Method, outcome: Outcome, elapsed: Duration) {
        let inner = &self.inner;
        inner
            .upstream_calls
            .get_or_create(&UpstreamCallKey {
                upstream: upstream.to_owned(),
                method: method.as_str(),
                outcome: outcome.as_str(),
            })
            .inc();
        inner
            .upstream_seconds
            .get_or_create(&UpstreamKey {
                upstream: upstream.to_owned(),
            })
            .observe(elapsed.as_secs_f64());
    }

    fn translated(&self, feature: Feature) {
        self.inner
            .translations
            .get_or_create(&FeatureKey {
                feature: format!("{feature:?}"),
            })
            .inc();
    }

    fn drifted(&self, upstream: &str) {
        self.inner
            .drift
            .get_or_create(&UpstreamKey {
                upstream: upstream.to_owned(),
            })
            .inc();
    }

    fn rate_limited(&self, limit: LimitKind) {
        self.inner
            .rate_limited
            .get_or_create(&LimitKey {
                limit: limit.as_str(),
            })
            .inc();
    }

    fn store_failed(&self, store: &'static str) {
        self.inner
            .store_errors
            .get_or_create(&StoreKey { store })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::jsonrpc::ErrorCode;
    use crate::domain::{Era, TransportKind};

    fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
        text.lines().find(|line| line.starts_with(prefix))
    }

    #[test]
    fn a_finished_request_moves_its_counter_and_leaves_nothing_in_flight() {
        let metrics = Metrics::new();
        let labels = RequestLabels {
            method: Method::of("tools/call"),
            era: Era::Modern,
            transport: TransportKind::StreamableHttp,
        };
        metrics.request_started(&labels);
        let during = metrics.render();
        assert_eq!(
            line(&during, "droid_requests_in_flight{"),
            Some("droid_requests_in_flight{transport=\"streamable_http\"} 1")
        );
        metrics.request_finished(
            &labels,
            Outcome::error(ErrorCode::INVALID_PARAMS),
            Duration::from_millis(3),
        );
        let after = metrics.render();
        assert_eq!(
            line(&after, "droid_requests_total{"),
            Some(
                "droid_requests_total{method=\"tools/call\",era=\"modern\",transport=\"streamable_http\",outcome=\"error\",code=\"-32602\"} 1"
            )
        );
        assert_eq!(
            line(&after, "droid_requests_in_flight{"),
            Some("droid_requests_in_flight{transport=\"streamable_http\"} 0")
        );
        assert!(
            after.contains(
                "droid_request_duration_seconds_count{method=\"tools/call\",era=\"modern\"} 1"
            ),
            "{after}"
        );
    }

    #[test]
    fn levels_are_read_when_scraped_and_a_removed_upstream_goes() {
        let metrics = Metrics::new();
        let up = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let seen = Arc::clone(&up);
        metrics.upstreams_from(move || {
            let mut levels = vec![UpstreamLevel {
                name: "a".to_owned(),
                up: true,
            }];
            if seen.load(std::sync::atomic::Ordering::SeqCst) {
                levels.push(UpstreamLevel {
                    name: "b".to_owned(),
                    up: false,
                });
            }
            levels
        });
        metrics.sessions_from(|| 7);
        let first = metrics.render();
        assert!(
            first.contains("droid_upstream_up{upstream=\"b\"} 0"),
            "{first}"
        );
        assert!(first.contains("droid_sessions 7"), "{first}");
        up.store(false, std::sync::atomic::Ordering::SeqCst);
        let second = metrics.render();
        assert!(
            second.contains("droid_upstream_up{upstream=\"a\"} 1"),
            "{second}"
        );
        assert!(!second.contains("upstream=\"b\""), "{second}");
    }
}
