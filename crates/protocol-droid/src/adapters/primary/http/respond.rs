//! Answering one request (or one 2025-03-26 batch): as JSON, or as an event
//! stream once a handler has something to say before the answer.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

use super::events::EventStore;
use super::sse::{self, SseEvent};
use crate::application::server::Reply;
use crate::application::server::reply::response_bytes;
use crate::domain::Refusal;
use crate::domain::jsonrpc::{
    ErrorCode, ErrorObject, Message, RequestId, Response as RpcResponse, ResponseId,
};

/// How many messages a request may have waiting for its stream.
const REQUEST_QUEUE: usize = 256;

tokio::task_local! {
    /// The response stream of the request the current task is serving;
    /// where its notifications and server-initiated requests go.
    pub(super) static CURRENT: RequestChannel;
}

/// The channel a request's own messages travel on before its response.
#[derive(Clone, Debug)]
pub(super) struct RequestChannel {
    pub(super) tx: mpsc::Sender<Value>,
    /// Whether the response may become a stream; when not, nothing reads
    /// `tx` before the response, and routing must look elsewhere.
    pub(super) streams: bool,
    /// Signalled when the handler asks for its stream to be closed early
    /// (SSE polling): the client resumes with `Last-Event-ID`.
    pub(super) release: Arc<Notify>,
}

/// A fresh channel and its receiving end.
pub(super) fn channel(streams: bool) -> (RequestChannel, mpsc::Receiver<Value>) {
    let (tx, rx) = mpsc::channel(REQUEST_QUEUE);
    (
        RequestChannel {
            tx,
            streams,
            release: Arc::new(Notify::new()),
        },
        rx,
    )
}

/// A JSON-RPC error body, with the id when the request's was readable.
pub(super) fn error_body(id: Option<&RequestId>, code: ErrorCode, message: &str) -> Response {
    let response = RpcResponse {
        id: id.map_or(ResponseId::Null, |id| ResponseId::Id(id.clone())),
        outcome: Err(ErrorObject::new(code, message)),
    };
    json(StatusCode::OK, &Message::Response(response).into_value())
}

/// `value` as an `application/json` response with `status`.
pub(super) fn json(status: StatusCode, value: &Value) -> Response {
    // Written straight into bytes: `to_string` would go through the
    // formatting machinery one fragment at a time.
    json_body(status, serde_json::to_vec(value))
}

/// `body`, once written, as an `application/json` response with `status`.
fn json_body(status: StatusCode, body: serde_json::Result<Vec<u8>>) -> Response {
    match body {
        Ok(body) => (status, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => {
            tracing::error!("a response could not be serialised: {e}");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// An error response with the HTTP status its code calls for.
pub(super) fn refusal(
    status: StatusCode,
    id: Option<&RequestId>,
    code: ErrorCode,
    message: &str,
) -> Response {
    let mut response = error_body(id, code, message);
    *response.status_mut() = status;
    response
}

/// The HTTP status a 2026-07-28 outcome travels with.
pub(super) fn modern_status<T>(outcome: &Result<T, ErrorObject>) -> StatusCode {
    match outcome {
        Ok(_) => StatusCode::OK,
        Err(e) if e.code == ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        Err(e)
            if [
                ErrorCode::INVALID_PARAMS,
                ErrorCode::HEADER_MISMATCH,
                ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
                ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
                ErrorCode::INVALID_REQUEST,
                ErrorCode::PARSE_ERROR,
            ]
            .contains(&e.code) =>
        {
            StatusCode::BAD_REQUEST
        }
        Err(_) => StatusCode::OK,
    }
}

/// How the answer to one request may be delivered.
#[derive(Clone, Debug)]
pub(super) struct Plan {
    /// 2026-07-28: error statuses per code, and a dropped stream cancels.
    pub(super) modern: bool,
    /// Whether the client accepts `text/event-stream`.
    pub(super) streams: bool,
    /// Whether the client accepts `application/json`: one that takes only
    /// event streams gets even a lone answer as one (a refusal keeps its
    /// status and JSON).
    pub(super) json: bool,
    /// For a legacy session: where events are recorded for resumption, and
    /// whether to prime the stream (2025-11-25 SSE polling).
    pub(super) record: Option<(Arc<EventStore>, bool)>,
    /// The `retry:` hint for a primed stream.
    pub(super) retry: Duration,
}

impl Plan {
    /// Whether the stream is primed for SSE polling, so closing it early
    /// leaves the client a way back.
    fn pollable(&self) -> bool {
        matches!(self.record, Some((_, true)))
    }
}

/// Aborts a task when dropped, unless disarmed.
struct Cancel(Option<tokio::task::AbortHandle>);

impl Drop for Cancel {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            handle.abort();
        }
    }
}

/// Serves one running request: JSON if it finishes without saying anything
/// first, otherwise an event stream of what it says, then its response.
pub(super) async fn respond(
    id: RequestId,
    work: JoinHandle<Result<Reply, ErrorObject>>,
    mut rx: mpsc::Receiver<Value>,
    release: Arc<Notify>,
    plan: &Plan,
) -> Response {
    // A 2026-07-28 client that goes away has cancelled; a legacy one has
    // not (it may resume), so only the modern request is tied to us.
    let mut cancel = Cancel(plan.modern.then(|| work.abort_handle()));
    let mut work = work;
    let mut released = false;
    let first = tokio::select! {
        biased;
        // `None` only means the handler's task let go of its channel,
        // which it does on finishing: not a reason to stream.
        Some(message) = rx.recv(), if plan.streams => Some(message),
        // The handler asked to close the stream early: only a primed
        // stream (one the client knows to resume) may be closed.
        () = release.notified(), if plan.streams && plan.pollable() => {
            released = true;
            None
        }
        done = &mut work => {
            cancel.0 = None;
            // Cancelled (`notifications/cancelled`, or its session ended):
            // a cancelled request is not answered.
            if done.as_ref().is_err_and(tokio::task::JoinError::is_cancelled) {
                return unanswered(plan);
            }
            let outcome = joined(done);
            // A client that takes only event streams gets its answer as
            // one; a refusal keeps its status (400, 429, 503), which a
            // stream would lose.
            if !plan.json && plan.streams && outcome.is_ok() {
                return single_event(&id, outcome);
            }
            let status = if plan.modern { modern_status(&outcome) } else { StatusCode::OK };
            let mut response = answered(status, &id, &outcome);
            mark_unbuffered(&mut response);
            mark_refused(&mut response, outcome.as_ref().err());
            return response;
        }
    };
    cancel.0 = None;
    let last = move |done| {
        // A cancelled request ends its stream unanswered.
        let cancelled = matches!(&done, Err(e) if tokio::task::JoinError::is_cancelled(e));
        (!cancelled).then(|| answer(&id, joined(done)))
    };
    stream_response(first, released, work, last, rx, release, plan)
}

/// Serves a running 2025-03-26 batch, whose `work` yields its responses:
/// one JSON array if nothing is said first, otherwise an event stream of
/// what its requests say (progress, questions to the client), ending with
/// that array. No answers at all is `202 Accepted` for a batch of only
/// notifications and responses, and an empty stream for one whose requests
/// (`asked`) were all cancelled.
pub(super) async fn respond_batch(
    work: JoinHandle<Vec<Value>>,
    asked: bool,
    mut rx: mpsc::Receiver<Value>,
    release: Arc<Notify>,
    plan: &Plan,
) -> Response {
    let mut work = work;
    let first = tokio::select! {
        biased;
        Some(message) = rx.recv(), if plan.streams => message,
        done = &mut work => {
            return match done {
                // A client that takes only event streams gets them as one.
                Ok(answers) if !answers.is_empty() && !plan.json && plan.streams => {
                    one_event(Value::Array(answers).to_string())
                }
                Ok(answers) if !answers.is_empty() => {
                    let mut response = json(StatusCode::OK, &Value::Array(answers));
                    mark_unbuffered(&mut response);
                    response
                }
                Ok(_) if asked => unanswered(plan),
                Ok(_) => StatusCode::ACCEPTED.into_response(),
                Err(_) => {
                    tracing::error!("a batch's answers could not be gathered");
                    StatusCode::INTERNAL_SERVER_ERROR.into_response()
                }
            };
        }
    };
    let last = |done: Result<Vec<Value>, tokio::task::JoinError>| match done {
        Ok(answers) => (!answers.is_empty()).then_some(Value::Array(answers)),
        Err(_) => {
            tracing::error!("a batch's answers could not be gathered");
            None
        }
    };
    stream_response(Some(first), false, work, last, rx, release, plan)
}

fn joined(
    done: Result<Result<Reply, ErrorObject>, tokio::task::JoinError>,
) -> Result<Reply, ErrorObject> {
    done.unwrap_or_else(|e| {
        if e.is_panic() {
            tracing::error!("a request handler panicked");
        }
        Err(Refusal::internal("the handler failed").into())
    })
}

/// The response to `id` as an `application/json` response with `status`,
/// written straight from the outcome (a tool's result is never a JSON
/// object first).
fn answered(status: StatusCode, id: &RequestId, outcome: &Result<Reply, ErrorObject>) -> Response {
    json_body(status, Ok(response_bytes(id, outcome)))
}

/// The answer to `id` as an event stream of that one event.
fn single_event(id: &RequestId, outcome: Result<Reply, ErrorObject>) -> Response {
    one_event(answer(id, outcome).to_string())
}

/// The answer to a POST whose request was cancelled before it said
/// anything: an event stream that ends empty. A request's POST is answered
/// with a stream or with JSON, never `202` (which is for notifications and
/// responses), and a cancelled request gets no response; a client that
/// takes no event stream gets `202`, the one answer left that carries none.
fn unanswered(plan: &Plan) -> Response {
    if !plan.streams {
        return StatusCode::ACCEPTED.into_response();
    }
    // Its sender dropped at once: the stream ends after its headers.
    let (_, rx) = mpsc::channel(1);
    sse::response(rx)
}

/// An event stream of the one event `data`.
pub(super) fn one_event(data: String) -> Response {
    let (tx, rx) = mpsc::channel(1);
    let _queued = tx.try_send(SseEvent::message(data));
    let mut response = sse::response(rx);
    mark_unbuffered(&mut response);
    response
}

/// The response to `id` as a JSON value, for a stream that records it.
fn answer(id: &RequestId, outcome: Result<Reply, ErrorObject>) -> Value {
    Message::Response(RpcResponse {
        id: ResponseId::Id(id.clone()),
        outcome: outcome.map(Reply::into_value),
    })
    .into_value()
}

/// A rate limit's refusal, in either era, travels as `429 Too Many
/// Requests` with `Retry-After` in whole seconds (rounded up), besides the
/// JSON-RPC error that says the same to the millisecond; a shared store out
/// of reach as `503 Service Unavailable`, to be tried again in a second
/// (perhaps on another instance).
pub(super) fn mark_refused(response: &mut Response, error: Option<&ErrorObject>) {
    if error.is_some_and(|e| e.code == ErrorCode::STORE_UNAVAILABLE) {
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(1_u32));
        return;
    }
    let Some(error) = error.filter(|e| e.code == ErrorCode::RATE_LIMITED) else {
        return;
    };
    let wait_ms = error
        .data
        .as_ref()
        .and_then(|data| data.get("retryAfterMs"))
        .and_then(Value::as_u64)
        .unwrap_or(1000);
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(wait_ms.div_ceil(1000)),
    );
}

/// Asks proxies not to buffer the response (the revision recommends it).
fn mark_unbuffered(response: &mut Response) {
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
}

/// The stream: a pump task reads the messages of the request (or batch)
/// `work` serves, records them for resumption when the session keeps a
/// record, and forwards them while the client listens; once `work` is
/// done, what `last` makes of its outcome ends the stream.
fn stream_response<T: Send + 'static>(
    first: Option<Value>,
    released: bool,
    work: JoinHandle<T>,
    last: impl FnOnce(Result<T, tokio::task::JoinError>) -> Option<Value> + Send + 'static,
    mut rx: mpsc::Receiver<Value>,
    release: Arc<Notify>,
    plan: &Plan,
) -> Response {
    let (live_tx, live_rx) = mpsc::channel::<SseEvent>(REQUEST_QUEUE);
    let stream_no = plan
        .record
        .as_ref()
        .map_or(0, |(store, _)| store.open_stream());
    let modern = plan.modern;
    let record = plan.record.clone();
    let pollable = plan.pollable();
    let retry = plan.retry;
    let abort = work.abort_handle();
    tokio::spawn(async move {
        let mut live = Some(live_tx);
        let mut seq = 0u64;
        // How far the stream was copied to the shared store, once its reader
        // left: not yet, up to an event, or given up on (the store failed,
        // and the handler is not to wait on it at every event).
        let mut copied = Copied::No;
        if let Some((_, true)) = &record {
            // SSE polling: an id the client can resume from, and how long
            // to wait before it does.
            let priming = SseEvent::priming(store_id(&record, stream_no, 0), retry);
            forward(&mut live, priming).await;
        }
        if released {
            live = None;
        }
        let mut emit = |data: Value, live: &mut Option<mpsc::Sender<SseEvent>>| {
            seq += 1;
            // A notification has no id: what the shared replay bounds may
            // drop (answers and questions only a resume may bring back).
            let spare = data.get("id").is_none();
            let text = data.to_string();
            drop(data);
            let (event, held) = match &record {
                Some((store, _)) => {
                    let held = store.record(stream_no, seq, Arc::from(text.as_str()), spare);
                    let event = SseEvent::message(text).with_id(store.id_of(stream_no, seq));
                    (event, held)
                }
                None => (SseEvent::message(text), true),
            };
            // A resume took the stream over: the event is its to send.
            let sender = live.clone().filter(|_| held);
            async move {
                match sender {
                    Some(tx) => tx.send(event).await.is_ok(),
                    None => false,
                }
            }
        };
        if let Some(first) = first {
            if !emit(first, &mut live).await {
                live = None;
            }
        }
        let mut work = work;
        let outcome = loop {
            tokio::select! {
                message = rx.recv() => match message {
                    Some(message) => {
                        if !emit(message, &mut live).await {
                            live = None;
                        }
                    }
                    None => break (&mut work).await,
                },
                () = release.notified(), if pollable => live = None,
                // The client went away: noticed now, not at the next write,
                // which for a quiet handler may be never.
                () = closed(live.as_ref()), if live.is_some() => live = None,
                done = &mut work => {
                    // Anything the handler queued before finishing goes first.
                    while let Ok(message) = rx.try_recv() {
                        if !emit(message, &mut live).await {
                            live = None;
                        }
                    }
                    break done;
                }
            }
            if live.is_none() && modern {
                // Nobody is listening to a 2026-07-28 stream: cancelled.
                abort.abort();
                return;
            }
            if live.is_none() {
                copied = copy_out(&record, stream_no, copied, false).await;
            }
        };
        if let Some(last) = last(outcome) {
            if !emit(last, &mut live).await {
                live = None;
            }
        }
        if let Some((store, _)) = &record {
            store.finish(stream_no);
        }
        // A stream whose reader left may be resumed on another instance:
        // the rest of it, and its end, go where that instance reads them.
        if live.is_none() || copied != Copied::No {
            let _copied = copy_out(&record, stream_no, copied, true).await;
        }
    });
    let mut response = sse::response(live_rx);
    mark_unbuffered(&mut response);
    response
}

/// The id of event `seq` of `stream`, by the session's record.
fn store_id(record: &Option<(Arc<EventStore>, bool)>, stream: u64, seq: u64) -> String {
    record.as_ref().map_or_else(
        || format!("{stream}-{seq}"),
        |(store, _)| store.id_of(stream, seq),
    )
}

/// How far a stream was copied to the shared store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Copied {
    /// Not at all: its reader is still there, or it is not shared.
    No,
    /// Up to this event.
    UpTo(u64),
    /// Given up on: the store failed once.
    Failed,
}

/// Copies what `stream` recorded since `copied` to the shared store, where
/// the session is shared. A store that fails costs only a resume on
/// another instance: it is logged once, and the stream is not copied
/// further, so the handler does not wait on the store at every event.
async fn copy_out(
    record: &Option<(Arc<EventStore>, bool)>,
    stream: u64,
    copied: Copied,
    done: bool,
) -> Copied {
    let Some((store, _)) = record
        .as_ref()
        .filter(|(store, _)| store.mirror().is_some())
    else {
        return copied;
    };
    let after = match copied {
        Copied::No => None,
        Copied::UpTo(seq) => Some(seq),
        // Its end is still told, if the store is back: a resumer then stops
        // waiting (without the answer, which it asks for again).
        Copied::Failed if done => Some(u64::MAX),
        Copied::Failed => return Copied::Failed,
    };
    match store.copy_out(stream, after, done).await {
        Ok(_) if copied == Copied::Failed => Copied::Failed,
        Ok(last) => Copied::UpTo(last),
        Err(error) => {
            tracing::warn!(target: "droid", %error, "a stream could not be copied for another instance to resume");
            Copied::Failed
        }
    }
}

/// Resolves when the stream's reader is gone.
async fn closed(live: Option<&mpsc::Sender<SseEvent>>) {
    match live {
        Some(tx) => tx.closed().await,
        None => core::future::pending().await,
    }
}

async fn forward(live: &mut Option<mpsc::Sender<SseEvent>>, event: SseEvent) {
    if let Some(tx) = live {
        if tx.send(event).await.is_err() {
            *live = None;
        }
    }
}
