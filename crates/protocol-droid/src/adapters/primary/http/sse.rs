//! Writing server-sent events.
//!
//! Written by hand rather than through axum's `Sse`, for one reason: a
//! priming event (SSE polling) is an id with an *empty* `data:` line, which
//! clients rely on, and an event type that omits empty data cannot write it.

use core::fmt::Write as _;
use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use tokio::sync::mpsc;

/// How often an idle stream gets a comment, so proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// One event, ready to write.
#[derive(Clone, Debug, Default)]
pub(super) struct SseEvent {
    id: Option<String>,
    event: Option<&'static str>,
    data: String,
    retry: Option<Duration>,
}

impl SseEvent {
    /// A `message` event carrying `data` (one line of JSON).
    pub(super) fn message(data: String) -> Self {
        Self {
            event: Some("message"),
            data,
            ..Self::default()
        }
    }

    /// An event of type `name`.
    pub(super) fn named(name: &'static str, data: String) -> Self {
        Self {
            event: Some(name),
            data,
            ..Self::default()
        }
    }

    /// A priming event: an id to resume from, empty data, and how long to
    /// wait before reconnecting.
    pub(super) fn priming(id: String, retry: Duration) -> Self {
        Self {
            id: Some(id),
            retry: Some(retry),
            ..Self::default()
        }
    }

    /// This event, with an id.
    pub(super) fn with_id(mut self, id: String) -> Self {
        self.id = Some(id);
        self
    }

    fn encode(&self) -> Bytes {
        let mut out = String::new();
        if let Some(id) = &self.id {
            let _ = writeln!(out, "id: {id}");
        }
        if let Some(event) = self.event {
            let _ = writeln!(out, "event: {event}");
        }
        if let Some(retry) = self.retry {
            let _ = writeln!(out, "retry: {}", retry.as_millis());
        }
        // JSON on one line never holds a newline; split anyway, so no data
        // can ever end an event early.
        for line in self.data.split('\n') {
            let _ = writeln!(out, "data: {line}");
        }
        out.push('\n');
        Bytes::from(out)
    }
}

/// A `text/event-stream` response of the events `rx` yields, with
/// keep-alive comments while it is quiet; it ends when `rx` closes.
pub(super) fn response(rx: mpsc::Receiver<SseEvent>) -> Response {
    let chunks = stream::unfold(rx, |mut rx| async move {
        let chunk = tokio::select! {
            event = rx.recv() => event?.encode(),
            () = tokio::time::sleep(KEEP_ALIVE) => Bytes::from_static(b": keep-alive\n\n"),
        };
        Some((Ok::<_, Infallible>(chunk), rx))
    });
    let mut response = (StatusCode::OK, Body::from_stream(chunks)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_priming_event_has_an_id_a_retry_and_an_empty_data_line() {
        let bytes = SseEvent::priming("3-0".to_owned(), Duration::from_millis(500)).encode();
        assert_eq!(&bytes[..], b"id: 3-0\nretry: 500\ndata: \n\n");
    }

    #[test]
    fn a_message_event_names_its_type() {
        let bytes = SseEvent::message("{}".to_owned())
            .with_id("1-1".to_owned())
            .encode();
        assert_eq!(&bytes[..], b"id: 1-1\nevent: message\ndata: {}\n\n");
    }
}
