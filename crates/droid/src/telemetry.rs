//! What a server tells its operator while it runs: the observer every
//! server `droid` builds reports to (the `/metrics` counters when it
//! listens, OpenTelemetry traces when `--otlp-endpoint` is set), and the
//! OTLP exporter behind those traces.
//!
//! Traces are off unless an endpoint is given. With one, each request's span
//! (target `droid::request`) is exported over OTLP/HTTP as JSON, a child of
//! the trace its client sent in `_meta` (`traceparent`, `tracestate`), and a
//! request the server makes upstream for it (a bridge's, a gateway's)
//! carries that span as its parent. Without one, a client's trace context is
//! still passed upstream as it came.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context as _;
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use protocol_droid::adapters::secondary::metrics::Metrics;
use protocol_droid::adapters::secondary::tls::Trust;
use protocol_droid::application::observe::{
    LimitKind, Method, Observer, Outcome, RequestLabels, TRACEPARENT_META, TRACESTATE_META,
    TraceContext,
};
use protocol_droid::domain::feature::Feature;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// How long one export may take before it is given up: short, since the
/// last one is sent while the process stops, and a service manager waits
/// only so long for that.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(3);

/// The exporter's tracer provider, kept to flush and stop it at exit.
pub(crate) struct Tracing {
    provider: SdkTracerProvider,
}

impl Tracing {
    /// Exports spans to the collector at `endpoint` (its base URL, as
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` gives it: `/v1/traces` is added),
    /// over connections that trust `trust`.
    pub(crate) fn start(endpoint: &str, trust: &Trust) -> anyhow::Result<Self> {
        let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpJson)
            .with_endpoint(url)
            .with_timeout(EXPORT_TIMEOUT)
            .with_http_client(ExportClient::new(trust)?)
            .build()
            .context("--otlp-endpoint")?;
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name("droid")
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        Ok(Self { provider })
    }

    /// The layer that turns spans into exported ones.
    pub(crate) fn layer<S>(&self) -> impl tracing_subscriber::Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    {
        tracing_opentelemetry::layer().with_tracer(self.provider.tracer("droid"))
    }

    /// Sends what is still buffered and stops the exporter.
    pub(crate) fn stop(self) {
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!(target: "droid", "the last spans were not exported: {error}");
        }
    }
}

/// The exporter's HTTP client: the project's own `reqwest`, with the same
/// trusted authorities as every other outbound connection, run on a runtime
/// of its own (the exporter sends from a thread that has none).
struct ExportClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for ExportClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ExportClient(..)")
    }
}

impl ExportClient {
    fn new(trust: &Trust) -> anyhow::Result<Self> {
        let client = trust
            .client_builder()?
            .timeout(EXPORT_TIMEOUT)
            .build()
            .context("building the exporter's HTTP client")?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("droid-otlp")
            .enable_all()
            .build()
            .context("starting the exporter's runtime")?;
        Ok(Self { client, runtime })
    }
}

#[async_trait::async_trait]
impl HttpClient for ExportClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request = reqwest::Request::try_from(request.map(reqwest::Body::from))?;
        let client = self.client.clone();
        // Spawned, not awaited in place: the runtime's own thread drives
        // the connection, and the handle can be awaited from anywhere.
        let sent = self.runtime.spawn(async move {
            let response = client.execute(request).await?;
            let status = response.status();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, body))
        });
        let (status, body) = sent.await??;
        Ok(Response::builder().status(status).body(body)?)
    }
}

/// What a server `droid` builds reports to.
#[derive(Clone, Debug, Default)]
pub(crate) struct Observed {
    /// The counters `/metrics` exposes, when the server listens.
    pub(crate) metrics: Option<Metrics>,
    /// Whether spans are exported, and so continue and hand on traces.
    pub(crate) tracing: bool,
}

impl Observer for Observed {
    fn request_started(&self, request: &RequestLabels) {
        if let Some(metrics) = &self.metrics {
            metrics.request_started(request);
        }
    }

    fn request_finished(&self, request: &RequestLabels, outcome: Outcome, elapsed: Duration) {
        if let Some(metrics) = &self.metrics {
            metrics.request_finished(request, outcome, elapsed);
        }
    }

    fn upstream_call(&self, upstream: &str, method: Method, outcome: Outcome, elapsed: Duration) {
        if let Some(metrics) = &self.metrics {
            metrics.upstream_call(upstream, method, outcome, elapsed);
        }
    }

    fn translated(&self, feature: Feature) {
        if let Some(metrics) = &self.metrics {
            metrics.translated(feature);
        }
    }

    fn drifted(&self, upstream: &str) {
        if let Some(metrics) = &self.metrics {
            metrics.drifted(upstream);
        }
    }

    fn rate_limited(&self, limit: LimitKind) {
        if let Some(metrics) = &self.metrics {
            metrics.rate_limited(limit);
        }
    }

    fn store_failed(&self, store: &'static str) {
        if let Some(metrics) = &self.metrics {
            metrics.store_failed(store);
        }
    }

    fn request_span(&self, span: &tracing::Span, incoming: Option<&TraceContext>) {
        let Some(incoming) = incoming.filter(|_| self.tracing) else {
            return;
        };
        let mut carrier = HashMap::new();
        carrier.insert(TRACEPARENT_META.to_owned(), incoming.traceparent.clone());
        if let Some(state) = &incoming.tracestate {
            carrier.insert(TRACESTATE_META.to_owned(), state.clone());
        }
        let parent = TraceContextPropagator::new().extract(&carrier);
        // Refused only for a span already started, and this one is not.
        let _continued = span.set_parent(parent);
    }

    fn outgoing_trace(&self, incoming: Option<&TraceContext>) -> Option<TraceContext> {
        if !self.tracing {
            return incoming.cloned();
        }
        let mut carrier: HashMap<String, String> = HashMap::new();
        TraceContextPropagator::new()
            .inject_context(&tracing::Span::current().context(), &mut carrier);
        match carrier.remove(TRACEPARENT_META) {
            Some(traceparent) => Some(TraceContext {
                traceparent,
                tracestate: carrier.remove(TRACESTATE_META),
            }),
            // No span of ours is current (nothing sampled): the client's
            // context goes on as it came.
            None => incoming.cloned(),
        }
    }
}
