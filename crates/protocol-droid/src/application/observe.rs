//! What the application tells an operator about its work: the port that
//! metrics plug into.
//!
//! The server, the bridge and the gateway report events (a request answered,
//! an upstream called, a reply translated down, a definition drifted, a
//! caller refused by a rate limit) to an [`Observer`] and go on; what is
//! counted, and how it is exposed, is the adapter's. Every label an event
//! carries is bounded: a method is one some revision defines or `"other"`,
//! an error code one the specification names or `"other"`, an upstream one
//! the operator configured. Nothing a client chooses freely (arguments,
//! ids, tool names it made up) becomes a label.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::domain::feature::Feature;
use crate::domain::jsonrpc::ErrorCode;
use crate::domain::{Era, TransportKind};
use crate::wire::codec::{Kind, METHODS, Sender};

/// Receives what the application reports. Every method has a default that
/// does nothing, so an observer implements only what it records.
///
/// Called on the request path: an implementation must be quick and must not
/// block (an atomic add, not a lock held across I/O).
pub trait Observer: Send + Sync {
    /// A request was read and is about to be served.
    fn request_started(&self, request: &RequestLabels) {
        let _ = request;
    }

    /// A request [`request_started`](Self::request_started) reported is done.
    fn request_finished(&self, request: &RequestLabels, outcome: Outcome, elapsed: Duration) {
        let _ = (request, outcome, elapsed);
    }

    /// A request forwarded to the upstream `upstream` (a gateway's, by its
    /// configured name) is done.
    fn upstream_call(&self, upstream: &str, method: Method, outcome: Outcome, elapsed: Duration) {
        let _ = (upstream, method, outcome, elapsed);
    }

    /// A reply was translated for an older client, losing `feature`.
    fn translated(&self, feature: Feature) {
        let _ = feature;
    }

    /// `upstream` changed or took away a tool it had listed.
    fn drifted(&self, upstream: &str) {
        let _ = upstream;
    }

    /// A caller was refused by a rate limit.
    fn rate_limited(&self, limit: LimitKind) {
        let _ = limit;
    }

    /// Writing to or reading from a store failed (`store` names which).
    fn store_failed(&self, store: &'static str) {
        let _ = store;
    }

    /// A request's span was opened, before it is entered; `incoming` is the
    /// trace context its client sent in `_meta`, if any. A tracer makes the
    /// span a child of that trace.
    fn request_span(&self, span: &tracing::Span, incoming: Option<&TraceContext>) {
        let _ = (span, incoming);
    }

    /// The trace context to send on with a request made while serving one
    /// whose client sent `incoming` (from within that request's span). By
    /// default `incoming` as it came, as an intermediary that takes no part
    /// in the trace passes it on; a tracer names its own span as the parent.
    fn outgoing_trace(&self, incoming: Option<&TraceContext>) -> Option<TraceContext> {
        incoming.cloned()
    }
}

/// What a log line or a span may show of `uri`: no query or fragment, nor
/// a user and password before its host, which may all be secrets (a signed
/// URL's signature, a database password, an API key).
#[must_use]
pub fn shown_uri(uri: &str) -> String {
    let uri = uri.split(['?', '#']).next().unwrap_or_default();
    match uri.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let host = authority
                .rsplit_once('@')
                .map_or(authority, |(_, host)| host);
            format!("{scheme}://{host}{path}")
        }
        None => uri.to_owned(),
    }
}

/// The `_meta` key of a request's W3C `traceparent`.
pub const TRACEPARENT_META: &str = "traceparent";
/// The `_meta` key of a request's W3C `tracestate`.
pub const TRACESTATE_META: &str = "tracestate";

/// The most of a `tracestate` carried on (W3C Trace Context allows 32
/// members of at most 256 characters each; 512 is what it asks a
/// participant to propagate at least).
const MAX_TRACESTATE: usize = 512;

/// W3C Trace Context, as a request carries it in `_meta`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceContext {
    /// `VERSION-TRACEID-PARENTID-FLAGS`, lowercase hex.
    pub traceparent: String,
    /// Vendors' trace state, passed on as it came.
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// The trace context in `meta`, if its `traceparent` is well formed (a
    /// malformed one is dropped, as W3C Trace Context asks); a `tracestate`
    /// longer than a participant must carry is dropped too.
    #[must_use]
    pub fn from_meta(meta: &crate::domain::ir::JsonObject) -> Option<Self> {
        let traceparent = meta.get(TRACEPARENT_META)?.as_str()?;
        if !is_traceparent(traceparent) {
            return None;
        }
        let tracestate = meta
            .get(TRACESTATE_META)
            .and_then(serde_json::Value::as_str)
            .filter(|state| state.len() <= MAX_TRACESTATE)
            .map(str::to_owned);
        Some(Self {
            traceparent: traceparent.to_owned(),
            tracestate,
        })
    }

    /// The trace id: 32 hex digits.
    #[must_use]
    pub fn trace_id(&self) -> &str {
        self.traceparent.get(3..35).unwrap_or_default()
    }

    /// Writes this into `meta`, replacing any trace context there.
    pub fn write_into(&self, meta: &mut crate::domain::ir::JsonObject) {
        meta.insert(
            TRACEPARENT_META.to_owned(),
            serde_json::Value::String(self.traceparent.clone()),
        );
        match &self.tracestate {
            Some(state) => {
                meta.insert(
                    TRACESTATE_META.to_owned(),
                    serde_json::Value::String(state.clone()),
                );
            }
            None => {
                meta.remove(TRACESTATE_META);
            }
        }
    }
}

/// Whether `value` is a version-00 `traceparent` (or a later version's,
/// read by its first four fields): two hex digits, a trace id of 32 and a
/// parent id of 16, neither all zeros, and two of flags.
fn is_traceparent(value: &str) -> bool {
    let hex = |part: &str, len: usize| {
        part.len() == len
            && part
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let mut parts = value.split('-');
    let (Some(version), Some(trace), Some(parent), Some(flags)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let rest_allowed = version != "00" || parts.next().is_none();
    hex(version, 2)
        && version != "ff"
        && hex(trace, 32)
        && trace.bytes().any(|b| b != b'0')
        && hex(parent, 16)
        && parent.bytes().any(|b| b != b'0')
        && hex(flags, 2)
        && rest_allowed
}

/// An observer that records nothing: the default.
#[derive(Clone, Copy, Debug, Default)]
pub struct Unobserved;

impl Observer for Unobserved {}

/// An observer as every part that reports holds it: cheap to clone, and
/// [`Unobserved`] by default.
#[derive(Clone)]
pub struct SharedObserver {
    observer: Arc<dyn Observer>,
    /// False for [`Unobserved`]: a request's report can then be skipped
    /// whole, which a lone request on stdio was measured to feel.
    active: bool,
}

impl SharedObserver {
    /// Shares `observer`.
    #[must_use]
    pub fn new(observer: impl Observer + 'static) -> Self {
        Self {
            observer: Arc::new(observer),
            active: true,
        }
    }

    /// Whether anything is told: false only for the default.
    #[must_use]
    pub const fn is_active(&self) -> bool {
        self.active
    }
}

impl Default for SharedObserver {
    fn default() -> Self {
        Self {
            observer: Arc::new(Unobserved),
            active: false,
        }
    }
}

impl core::ops::Deref for SharedObserver {
    type Target = dyn Observer;

    fn deref(&self) -> &Self::Target {
        &*self.observer
    }
}

impl core::fmt::Debug for SharedObserver {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("SharedObserver(..)")
    }
}

/// A method name as a label: one some revision defines as a client request,
/// or `"other"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Method(&'static str);

impl Method {
    /// `method` if some revision defines it as a client request, else
    /// `"other"`.
    #[must_use]
    pub fn of(method: &str) -> Self {
        Self(
            METHODS
                .iter()
                .find(|row| {
                    row.method == method
                        && row.sender == Sender::Client
                        && row.kind == Kind::Request
                })
                .map_or("other", |row| row.method),
        )
    }

    /// The label.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        self.0
    }
}

/// What a request is counted under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RequestLabels {
    /// The method, bounded.
    pub method: Method,
    /// The era it was served in.
    pub era: Era,
    /// The transport it came on.
    pub transport: TransportKind,
}

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Answered with a result.
    Ok,
    /// Answered with an error; the code if the specification names it.
    Error(Option<ErrorCode>),
    /// Never answered: its caller went away or cancelled it.
    Cancelled,
}

impl Outcome {
    /// The outcome of an error answer with `code`: the code kept only when
    /// the specification names it (or it is this implementation's rate
    /// limit's), so the label stays bounded.
    #[must_use]
    pub const fn error(code: ErrorCode) -> Self {
        Self::Error(
            if code.name().is_some() || code.0 == ErrorCode::RATE_LIMITED.0 {
                Some(code)
            } else {
                None
            },
        )
    }

    /// `"ok"`, `"error"` or `"cancelled"`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Error(_) => "error",
            Self::Cancelled => "cancelled",
        }
    }
}

/// Which rate limit refused a caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LimitKind {
    /// The caller's own limit over all its requests.
    Principal,
    /// The caller's limit on one tool's calls.
    Tool,
}

impl LimitKind {
    /// `"principal"` or `"tool"`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Principal => "principal",
            Self::Tool => "tool",
        }
    }
}

/// One request being served: reports its start at once, and its end when
/// told, or as cancelled if dropped before (its future dropped because the
/// caller went away), to the observer and on the request's span.
pub(crate) struct InFlight<'a> {
    /// `None` when nothing observes: then only the span hears the outcome.
    watched: Option<Watched<'a>>,
    span: tracing::Span,
    finished: bool,
}

struct Watched<'a> {
    observer: &'a dyn Observer,
    labels: RequestLabels,
    started: Instant,
}

impl<'a> InFlight<'a> {
    pub(crate) fn start(
        observer: &'a dyn Observer,
        labels: RequestLabels,
        span: tracing::Span,
    ) -> Self {
        observer.request_started(&labels);
        Self {
            watched: Some(Watched {
                observer,
                labels,
                started: Instant::now(),
            }),
            span,
            finished: false,
        }
    }

    /// A request nothing observes: no labels worked out, no clock read.
    pub(crate) const fn unwatched(span: tracing::Span) -> Self {
        Self {
            watched: None,
            span,
            finished: false,
        }
    }

    pub(crate) fn finish(mut self, outcome: Outcome) {
        self.finished = true;
        self.report(outcome);
    }

    fn report(&self, outcome: Outcome) {
        self.span.record("outcome", outcome.as_str());
        if let Some(watched) = &self.watched {
            watched
                .observer
                .request_finished(&watched.labels, outcome, watched.started.elapsed());
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.report(Outcome::Cancelled);
        }
    }
}

/// Awaits `call`, a request of `method` forwarded to `upstream`, and
/// reports how long it took and whether it was answered with a result.
pub(crate) async fn upstream_call<T, E>(
    observer: &dyn Observer,
    upstream: &str,
    method: &str,
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let started = Instant::now();
    let answer = call.await;
    let outcome = if answer.is_ok() {
        Outcome::Ok
    } else {
        Outcome::Error(None)
    };
    observer.upstream_call(upstream, Method::of(method), outcome, started.elapsed());
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_method_no_revision_defines_is_other() {
        assert_eq!(Method::of("tools/call").as_str(), "tools/call");
        assert_eq!(
            Method::of("subscriptions/listen").as_str(),
            "subscriptions/listen"
        );
        assert_eq!(Method::of("x/made-up-by-a-client").as_str(), "other");
        // A server's request, not a client's.
        assert_eq!(Method::of("sampling/createMessage").as_str(), "other");
    }

    #[test]
    fn a_traceparent_is_read_only_when_well_formed() {
        let meta = |value: &str| {
            let mut meta = crate::domain::ir::JsonObject::new();
            meta.insert(TRACEPARENT_META.to_owned(), value.into());
            meta.insert(TRACESTATE_META.to_owned(), "vendor=1".into());
            meta
        };
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let read = TraceContext::from_meta(&meta(good));
        assert_eq!(
            read.as_ref().map(TraceContext::trace_id),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        assert_eq!(read.and_then(|t| t.tracestate), Some("vendor=1".to_owned()));
        for bad in [
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "",
        ] {
            assert_eq!(TraceContext::from_meta(&meta(bad)), None, "{bad}");
        }
        // A later version may add fields after the four it shares.
        assert!(
            TraceContext::from_meta(&meta(
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future"
            ))
            .is_some()
        );
    }

    #[test]
    fn a_shown_uri_keeps_no_secret() {
        assert_eq!(
            shown_uri("https://user:pass@example.test:8443/mcp?api_key=k#x"),
            "https://example.test:8443/mcp"
        );
        assert_eq!(shown_uri("postgres://u:pw@db/notes"), "postgres://db/notes");
        assert_eq!(shown_uri("urn:x:y?token=t"), "urn:x:y");
        assert_eq!(shown_uri("file:///etc/hosts"), "file:///etc/hosts");
    }

    #[test]
    fn only_named_codes_are_kept() {
        assert_eq!(
            Outcome::error(ErrorCode::INVALID_PARAMS),
            Outcome::Error(Some(ErrorCode::INVALID_PARAMS))
        );
        assert_eq!(Outcome::error(ErrorCode(-31999)), Outcome::Error(None));
        assert_eq!(
            Outcome::error(ErrorCode::RATE_LIMITED),
            Outcome::Error(Some(ErrorCode::RATE_LIMITED))
        );
    }
}
