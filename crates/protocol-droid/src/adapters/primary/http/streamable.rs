//! `/mcp`: Streamable HTTP, legacy sessions and the routing to the
//! stateless 2026-07-28 path.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::sync::mpsc;

use super::body::BodyCharge;
use super::events::{UNCOPIED_PATIENCE, parse_event_id};
use super::headers::{
    SESSION_HEADER, VERSION_HEADER, accepts, context, header, repeated_mcp_header, takes,
};
use super::respond::{self, CURRENT, Plan, refusal};
use super::sessions::{MAX_IN_FLIGHT, Session, sessions_full};
use super::sse::{self, SseEvent};
use super::{App, shared, stateless, task_relay};
use crate::application::server::{AuthContext, Server, served_as_modern};
use crate::application::squelch::Squelch;
use crate::domain::ir::JsonObject;
use crate::domain::jsonrpc::framing::{DEFAULT_MAX_DEPTH, deeper_than, request_id, response_id};
use crate::domain::jsonrpc::{
    EnvelopeError, ErrorCode, ErrorObject, Incoming, Message, Request, RequestId,
    Response as RpcResponse, ResponseId, parse,
};
use crate::domain::{Era, Feature, ProtocolVersion, TransportKind};

/// A POST refused before its body reached a session.
pub(super) struct Refused {
    /// The response that ends the POST.
    pub(super) response: Response,
    /// The server's own request that the body meant to answer and could
    /// not (an answer nested too deep, or no answer), and why: it fails at
    /// once, as on stdio, rather than wait until it times out.
    pub(super) unanswered: Option<(RequestId, String)>,
}

impl From<Response> for Refused {
    fn from(response: Response) -> Self {
        Self {
            response,
            unanswered: None,
        }
    }
}

/// The checks every POST passes before its body is read as JSON-RPC.
// The error holds the response that ends the request; boxing it would only
// move the allocation.
#[allow(clippy::result_large_err)]
pub(super) fn check_post(headers: &HeaderMap, body: &[u8]) -> Result<Incoming, Refused> {
    if let Some(refused) = refuse_repeated(headers, Some(body)) {
        return Err(refused.into());
    }
    // Two say two ways to read the body: a proxy may read it by the one
    // this server does not.
    if headers
        .get_all(header::CONTENT_TYPE)
        .iter()
        .nth(1)
        .is_some()
    {
        return Err(refusal(
            StatusCode::BAD_REQUEST,
            request_id(body).as_ref(),
            ErrorCode::INVALID_REQUEST,
            "more than one content-type header",
        )
        .into());
    }
    let content_type = header(headers, header::CONTENT_TYPE.as_str()).unwrap_or_default();
    let mut parts = content_type.split(';');
    let json_body = parts
        .next()
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
    // JSON is UTF-8 (RFC 8259); a body said to be in another charset would
    // be read as what it is not.
    let utf8 = parts.all(|parameter| match parameter.split_once('=') {
        Some((name, value)) if name.trim().eq_ignore_ascii_case("charset") => {
            let value = value.trim().trim_matches('"');
            value.eq_ignore_ascii_case("utf-8") || value.eq_ignore_ascii_case("utf8")
        }
        _ => true,
    });
    if json_body && !utf8 {
        return Err(refusal(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            None,
            ErrorCode::INVALID_REQUEST,
            "a JSON body is UTF-8: send it so, or without a charset",
        )
        .into());
    }
    if !json_body {
        return Err(refusal(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            None,
            ErrorCode::INVALID_REQUEST,
            "Content-Type must be application/json",
        )
        .into());
    }
    // The body is read as it came: one the client encoded (gzip, say)
    // would only fail to parse, under a misleading error.
    let encoded = headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|coding| !coding.is_empty() && !coding.eq_ignore_ascii_case("identity"));
    if encoded {
        return Err(refusal(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            None,
            ErrorCode::INVALID_REQUEST,
            "Content-Encoding is not supported: send the body as it is",
        )
        .into());
    }
    // No Accept at all accepts anything; one that names neither form an
    // answer can take is refused.
    if !takes(headers, "application/json") && !takes(headers, "text/event-stream") {
        return Err(refusal(
            StatusCode::NOT_ACCEPTABLE,
            None,
            ErrorCode::INVALID_REQUEST,
            "Accept must include application/json or text/event-stream",
        )
        .into());
    }
    if deeper_than(body, DEFAULT_MAX_DEPTH) {
        // Refused under the request's own id when one can be read without
        // parsing, as on stdio, so the client knows which request it was.
        let why = "message nested too deeply";
        return Err(Refused {
            response: refusal(
                StatusCode::BAD_REQUEST,
                request_id(body).as_ref(),
                ErrorCode::INVALID_REQUEST,
                why,
            ),
            unanswered: response_id(body).map(|id| (id, why.to_owned())),
        });
    }
    parse(body).map_err(|e| {
        // An answer's refusal names no id: its id is the server's own.
        let id = e.to_response().id.request_id().cloned();
        Refused {
            response: refusal(StatusCode::BAD_REQUEST, id.as_ref(), e.code, &e.message),
            unanswered: e.answered().map(|id| (id.clone(), e.message.clone())),
        }
    })
}

/// The outcome a question of the server's gets when the client's answer to
/// it could not be read (`why`).
pub(super) fn unreadable_answer(why: &str) -> ErrorObject {
    // One client's flood of them is said once per interval.
    static NO_ANSWER: Squelch = Squelch::new(Duration::from_secs(10));
    if let Some(also) = NO_ANSWER.admit() {
        tracing::warn!(
            passed_over_before = also,
            "an answer that could not be read fails the request it names"
        );
    }
    ErrorObject::unreadable_answer(why)
}

/// The refusal of a request with an MCP header sent twice: `-32020` where
/// its first revision header names the 2026-07-28 era, whose header checks
/// it fails, `-32600` otherwise; under the id of the request in `body`
/// when one can be read without parsing it.
fn refuse_repeated(headers: &HeaderMap, body: Option<&[u8]>) -> Option<Response> {
    let name = repeated_mcp_header(headers)?;
    let modern = header(headers, VERSION_HEADER)
        .and_then(ProtocolVersion::from_wire)
        .is_some_and(|v| v.era() == Era::Modern);
    let code = if modern {
        ErrorCode::HEADER_MISMATCH
    } else {
        ErrorCode::INVALID_REQUEST
    };
    Some(refusal(
        StatusCode::BAD_REQUEST,
        body.and_then(request_id).as_ref(),
        code,
        &format!("more than one {name} header"),
    ))
}

/// Whether a POST is to be served statelessly (2026-07-28), with that
/// revision's header checks: when its revision header names it, or when its
/// body is a request the server serves that way. A 2026-07-28 request
/// ignores any `Mcp-Session-Id` it carries, so neither depends on one:
/// otherwise a request the session answers statelessly anyway would skip
/// the checks, and its refusals would go out as `200`.
fn is_modern(server: &Server, headers: &HeaderMap, message: &Incoming) -> bool {
    let header_modern = header(headers, VERSION_HEADER)
        .and_then(ProtocolVersion::from_wire)
        .is_some_and(|v| v.era() == Era::Modern);
    let body_modern = match message {
        Incoming::Single(Message::Request(request)) => modern_request(server, request),
        _ => false,
    };
    header_modern || body_modern
}

/// Whether `server` serves `request` statelessly, whatever its headers.
fn modern_request(server: &Server, request: &Request) -> bool {
    let empty = JsonObject::new();
    let params = request
        .params
        .as_ref()
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    request.method != "initialize" && served_as_modern(server, &request.method, params)
}

/// POST `/mcp`.
pub(super) async fn post(
    State(app): State<App>,
    Extension(caller): Extension<AuthContext>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    charge: Option<Extension<BodyCharge>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let charge = charge.map(|Extension(charge)| charge);
    let incoming = match check_post(&headers, &body) {
        Ok(incoming) => incoming,
        Err(Refused {
            response,
            unanswered,
        }) => {
            if let Some((id, why)) = unanswered {
                fail_question(&app, &headers, &caller, id, &why).await;
            }
            return response;
        }
    };
    let peer = peer.map(|Extension(ConnectInfo(addr))| addr);
    if is_modern(&app.server, &headers, &incoming) {
        return stateless::post(&app, &headers, &caller, peer, incoming).await;
    }
    // A legacy request carrying an unknown or modern revision header.
    if let Some(version) = header(&headers, VERSION_HEADER) {
        let legacy = ProtocolVersion::from_wire(version).is_some_and(|v| v.era() == Era::Legacy);
        if !legacy {
            return refusal(
                StatusCode::BAD_REQUEST,
                None,
                ErrorCode::INVALID_REQUEST,
                &format!("unsupported MCP-Protocol-Version {version}"),
            );
        }
    }
    match incoming {
        Incoming::Single(Message::Request(request)) if request.method == "initialize" => {
            initialize(&app, &headers, &caller, peer, request).await
        }
        incoming => {
            let Some(id) = header(&headers, SESSION_HEADER) else {
                return refusal(
                    StatusCode::BAD_REQUEST,
                    None,
                    ErrorCode::INVALID_REQUEST,
                    "Mcp-Session-Id is required; send initialize first",
                );
            };
            let session = match shared::find(&app.server, &app.sessions, id, &caller).await {
                Ok(Some(session)) => session,
                Ok(None) => return unknown_session(),
                Err(unavailable) => return unavailable,
            };
            in_session(&app, &headers, &caller, peer, &session, incoming, charge).await
        }
    }
}

async fn initialize(
    app: &App,
    headers: &HeaderMap,
    caller: &AuthContext,
    peer: Option<SocketAddr>,
    request: Request,
) -> Response {
    let session = match app.sessions.open(
        &app.server,
        TransportKind::StreamableHttp,
        caller,
        peer.map(|addr| addr.ip()),
    ) {
        Ok(session) => session,
        Err(full) => return sessions_full(&full, Some(&request.id)),
    };
    let Some(connection) = session.connection().cloned() else {
        return refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            ErrorCode::INTERNAL_ERROR,
            "session unavailable",
        );
    };
    let id = request.id.clone();
    let mut outcome = connection
        .handle(request, context(headers, caller, peer))
        .await;
    // Shared, the session exists once its record is written: a store out
    // of reach fails the handshake rather than leave a session that other
    // instances would not know.
    if outcome.is_ok() {
        if let Err(error) = shared::create(&app.sessions, &session).await {
            outcome = Err(error);
        }
    }
    let failed = outcome.is_err();
    if failed {
        // A failed handshake leaves no session behind, and names none.
        app.sessions.end(&session.id);
    }
    // A refused handshake still says why as JSON-RPC; a rate limit's
    // refusal is a 429 with Retry-After besides, a store out of reach a 503.
    let limited = outcome.as_ref().err().cloned();
    let answer = Message::Response(RpcResponse {
        id: ResponseId::Id(id),
        outcome,
    })
    .into_value();
    // As JSON, unless the client takes only an event stream: then as one,
    // as every other answer to it would be.
    let mut response = if takes(headers, "application/json") {
        respond::json(StatusCode::OK, &answer)
    } else {
        respond::one_event(answer.to_string())
    };
    respond::mark_refused(&mut response, limited.as_ref());
    if !failed {
        if let Ok(value) = HeaderValue::from_str(&session.id) {
            response.headers_mut().insert(SESSION_HEADER, value);
        }
    }
    response
}

/// A legacy session's POST. Its requests run as the session's own tasks,
/// which outlive the POST when the client goes (`charge`, the body's count
/// against its address, goes with them until they are answered).
async fn in_session(
    app: &App,
    headers: &HeaderMap,
    caller: &AuthContext,
    peer: Option<SocketAddr>,
    session: &Arc<Session>,
    incoming: Incoming,
    charge: Option<BodyCharge>,
) -> Response {
    let Some(connection) = session.connection().cloned() else {
        return refusal(
            StatusCode::NOT_FOUND,
            None,
            ErrorCode::INVALID_REQUEST,
            "session unavailable",
        );
    };
    // After the handshake a request names the negotiated revision, or none
    // (clients older than the header).
    if let (Some(sent), Some(negotiated)) =
        (header(headers, VERSION_HEADER), connection.negotiated())
    {
        if sent != negotiated.as_str() {
            return refusal(
                StatusCode::BAD_REQUEST,
                None,
                ErrorCode::INVALID_REQUEST,
                &format!("MCP-Protocol-Version {sent} is not this session's {negotiated}"),
            );
        }
    }
    match incoming {
        Incoming::Single(Message::Request(request)) => {
            let version = connection.negotiated();
            let plan = Plan {
                modern: false,
                streams: accepts(headers, "text/event-stream"),
                json: accepts(headers, "application/json"),
                record: Some((
                    Arc::clone(&session.events),
                    version.is_some_and(|v| Feature::SsePolling.exists_at(v)),
                )),
                retry: app.options.sse_retry,
            };
            let (channel, rx) = respond::channel(plan.streams);
            let release = Arc::clone(&channel.release);
            let id = request.id.clone();
            let ctx = context(headers, caller, peer);
            // A 2025-11-25 client waiting on a task's result hears the
            // task's questions there (see `task_streams`), whichever
            // instance runs it (`task_relay`); watched once the request
            // runs, as a refused one has no stream to take them.
            let watch = plan
                .streams
                .then(|| waited_task(&request))
                .flatten()
                .map(|task| {
                    let tx = channel.tx.clone();
                    (
                        Arc::clone(&app.sessions),
                        Arc::clone(session),
                        task.to_owned(),
                        tx,
                    )
                });
            // What outlives the request is shared before the request is
            // answered, so the client's next request, wherever it lands,
            // finds it.
            let lasting = app
                .sessions
                .shared
                .as_ref()
                .and_then(|_| shared::intent(&request))
                .map(|intent| (Arc::clone(&app.sessions), Arc::clone(session), intent));
            let answering = CURRENT.scope(channel, async move {
                let _charge = charge;
                let _watch = watch.map(|(sessions, session, task, tx)| {
                    let here = session.watch_task(&task, tx);
                    (here, task_relay::announce(&sessions, &session.id, &task))
                });
                let answer = connection.answer(request, ctx).await;
                match lasting {
                    Some((sessions, session, intent)) if answer.is_ok() => {
                        shared::share_change(&sessions, &session, &[intent])
                            .await
                            .and(answer)
                    }
                    _ => answer,
                }
            });
            let work = match session.start(&id, answering) {
                Ok(work) => work,
                Err(refused) => {
                    return refusal(refused.status, Some(&id), refused.code, &refused.message);
                }
            };
            respond::respond(id, work, rx, release, &plan).await
        }
        Incoming::Single(Message::Notification(notification)) => {
            if let Some(elsewhere) = session.notified(&notification) {
                shared::relay_cancel(&app.sessions, session, &elsewhere);
            }
            StatusCode::ACCEPTED.into_response()
        }
        Incoming::Single(Message::Response(response)) => {
            answer(app, session, response).await;
            StatusCode::ACCEPTED.into_response()
        }
        Incoming::Batch(items) => {
            batch(
                app,
                headers,
                caller,
                peer,
                &connection,
                session,
                items,
                charge,
            )
            .await
        }
    }
}

/// The task a `tasks/result` request waits for.
fn waited_task(request: &Request) -> Option<&str> {
    if request.method != "tasks/result" {
        return None;
    }
    request.params.as_ref()?.get("taskId")?.as_str()
}

/// Hands the client's answer to the request of this session's that waits
/// for it, here or, relayed, on the instance that asked.
async fn answer(app: &App, session: &Session, response: RpcResponse) {
    let Some(id) = response.id.request_id().cloned() else {
        return;
    };
    // Answered here unless another instance asked: relaying is the rare
    // case, and only it needs the message written out again.
    let delivered = if app.sessions.shared.is_none() || session.awaits(&id) {
        session.answer(&id, response.outcome)
    } else {
        let relayed = Message::Response(response).into_value().to_string();
        shared::relay_answer(&app.sessions, session, &id, &relayed).await
    };
    if !delivered {
        // One client's flood of them is said once per interval.
        static UNWAITED: Squelch = Squelch::new(Duration::from_secs(10));
        if let Some(also) = UNWAITED.admit() {
            tracing::warn!(
                id = %id.clipped(64),
                passed_over_before = also,
                "a response to a request this session never sent was dropped"
            );
        }
    }
}

/// Fails the question `id` of the session the POST names, whose answer
/// could not be read (`why`); a POST that names no session of its caller's
/// fails nothing.
async fn fail_question(
    app: &App,
    headers: &HeaderMap,
    caller: &AuthContext,
    id: RequestId,
    why: &str,
) {
    let Some(session_id) = header(headers, SESSION_HEADER) else {
        return;
    };
    if let Ok(Some(session)) = shared::find(&app.server, &app.sessions, session_id, caller).await {
        let failure = RpcResponse {
            id: ResponseId::Id(id),
            outcome: Err(unreadable_answer(why)),
        };
        answer(app, &session, failure).await;
    }
}

fn unknown_session() -> Response {
    refusal(
        StatusCode::NOT_FOUND,
        None,
        ErrorCode::INVALID_REQUEST,
        "unknown or ended session",
    )
}

/// A 2025-03-26 batch: answered together, as one JSON array (at the end of
/// an event stream when its requests say something first).
#[allow(clippy::too_many_arguments)] // One caller, `in_session`'s arguments and the batch.
async fn batch(
    app: &App,
    headers: &HeaderMap,
    caller: &AuthContext,
    peer: Option<SocketAddr>,
    connection: &Arc<crate::application::server::Connection>,
    session: &Arc<Session>,
    items: Vec<Result<Message, EnvelopeError>>,
    charge: Option<BodyCharge>,
) -> Response {
    let batching = connection
        .negotiated()
        .is_some_and(|v| Feature::Batching.exists_at(v));
    if !batching {
        return refusal(
            StatusCode::BAD_REQUEST,
            None,
            ErrorCode::INVALID_REQUEST,
            "JSON-RPC batches are only part of 2025-03-26",
        );
    }
    // The same bound as on stdio: one body must not start more work than
    // the session may have in flight.
    if items.len() > MAX_IN_FLIGHT {
        return refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            None,
            ErrorCode::INVALID_REQUEST,
            &format!("a batch holds at most {MAX_IN_FLIGHT} messages"),
        );
    }
    let plan = Plan {
        modern: false,
        streams: accepts(headers, "text/event-stream"),
        json: accepts(headers, "application/json"),
        record: Some((Arc::clone(&session.events), false)),
        retry: app.options.sse_retry,
    };
    // One channel for the whole batch: what any of its requests says before
    // the answers rides the batch's response, as it would a request's own.
    let (channel, rx) = respond::channel(plan.streams);
    let release = Arc::clone(&channel.release);
    let mut answers = Vec::new();
    let mut running = Vec::new();
    for item in items {
        match item {
            Err(e) => {
                if let Some(id) = e.answered() {
                    let failure = RpcResponse {
                        id: ResponseId::Id(id.clone()),
                        outcome: Err(unreadable_answer(&e.message)),
                    };
                    answer(app, session, failure).await;
                }
                answers.push(Message::Response(e.to_response()).into_value());
            }
            // 2026-07-28 has no batches, and its requests bypass the session
            // (and the header checks a POST of one alone gets).
            Ok(Message::Request(request)) if modern_request(&app.server, &request) => answers.push(
                Message::Response(RpcResponse {
                    id: ResponseId::Id(request.id),
                    outcome: Err(ErrorObject::new(
                        ErrorCode::INVALID_REQUEST,
                        "a 2026-07-28 request cannot be part of a batch",
                    )),
                })
                .into_value(),
            ),
            Ok(Message::Request(request)) => {
                let intent = app
                    .sessions
                    .shared
                    .as_ref()
                    .and_then(|_| shared::intent(&request));
                let connection = Arc::clone(connection);
                let ctx = context(headers, caller, peer);
                let id = request.id.clone();
                let charge = charge.clone();
                let answering = CURRENT.scope(channel.clone(), async move {
                    let _charge = charge;
                    connection.handle(request, ctx).await
                });
                // Each request enters the session's in-flight table as a
                // single one does: capped, unique and cancellable.
                match session.start(&id, answering) {
                    Ok(task) => running.push((id, task, intent)),
                    Err(refused) => answers.push(
                        Message::Response(RpcResponse {
                            id: ResponseId::Id(id),
                            outcome: Err(ErrorObject::new(refused.code, refused.message)),
                        })
                        .into_value(),
                    ),
                }
            }
            Ok(Message::Response(response)) => answer(app, session, response).await,
            Ok(Message::Notification(notification)) => {
                if let Some(elsewhere) = session.notified(&notification) {
                    shared::relay_cancel(&app.sessions, session, &elsewhere);
                }
            }
        }
    }
    // A batch of requests is answered with a stream or JSON even when
    // every one of them was cancelled (`respond::unanswered`).
    let asked = !running.is_empty();
    // The stream ends once the requests, the only senders left, are done.
    drop(channel);
    let sessions = Arc::clone(&app.sessions);
    let session = Arc::clone(session);
    let work = tokio::spawn(async move {
        // What the batch's requests change of what the session keeps,
        // shared once they are answered (see `shared::share_change`).
        let mut intents = Vec::new();
        for (id, task, intent) in running {
            let outcome = match task.await {
                Ok(outcome) => outcome,
                // A cancelled request is answered with nothing, as alone.
                Err(join) if join.is_cancelled() => continue,
                Err(_) => Err(crate::domain::Refusal::internal("the handler failed").into()),
            };
            if let Some(intent) = intent.filter(|_| outcome.is_ok()) {
                intents.push(intent);
            }
            answers.push(
                Message::Response(RpcResponse {
                    id: ResponseId::Id(id),
                    outcome,
                })
                .into_value(),
            );
        }
        if !intents.is_empty() {
            if let Err(error) = shared::share_change(&sessions, &session, &intents).await {
                tracing::warn!(%error.message, "a batch's lasting change was not shared");
            }
        }
        answers
    });
    respond::respond_batch(work, asked, rx, release, &plan).await
}

/// GET `/mcp`: the session's own stream, or a resumed one.
pub(super) async fn get(
    State(app): State<App>,
    Extension(caller): Extension<AuthContext>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = refuse_repeated(&headers, None) {
        return refused;
    }
    if header(&headers, VERSION_HEADER)
        .and_then(ProtocolVersion::from_wire)
        .is_some_and(|v| v.era() == Era::Modern)
        || !headers.contains_key(SESSION_HEADER)
    {
        // 2026-07-28 has no GET; a client with no session has nothing to
        // listen to.
        return (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "POST")]).into_response();
    }
    if !takes(&headers, "text/event-stream") {
        return refusal(
            StatusCode::NOT_ACCEPTABLE,
            None,
            ErrorCode::INVALID_REQUEST,
            "Accept must include text/event-stream",
        );
    }
    let Some(id) = header(&headers, SESSION_HEADER) else {
        return unknown_session();
    };
    let session = match shared::find(&app.server, &app.sessions, id, &caller).await {
        Ok(Some(session)) => session,
        Ok(None) => return unknown_session(),
        Err(unavailable) => return unavailable,
    };
    // Present but not text is as unreadable as text that names no event,
    // not a header left out.
    let last = headers
        .get("last-event-id")
        .map(|v| v.to_str().map(str::trim).unwrap_or_default());
    if let Some(last) = last {
        let Some(at) = parse_event_id(last) else {
            return refusal(
                StatusCode::BAD_REQUEST,
                None,
                ErrorCode::INVALID_REQUEST,
                "unreadable Last-Event-ID",
            );
        };
        // A stream another instance wrote is read from the shared store.
        if let (Some(instance), Some(mirror)) = (at.instance, session.events.mirror()) {
            if instance != mirror.instance {
                return resume_elsewhere(
                    &session,
                    instance,
                    at.stream,
                    at.seq,
                    app.options.idle_timeout,
                );
            }
        }
        return resume(&session, at.stream, at.seq);
    }
    let (tx, mut rx) = mpsc::channel::<Value>(256);
    session.set_standalone(tx);
    let (out, events) = mpsc::channel::<SseEvent>(256);
    tokio::spawn(async move {
        loop {
            // Gone with the client's stream, not at the next message: the
            // session then holds no stream, and what is for it (a task's
            // status, where sessions are shared) goes to the instance that
            // holds its next one instead of into this closed one.
            let message = tokio::select! {
                message = rx.recv() => message,
                () = out.closed() => return,
            };
            let Some(message) = message else {
                return;
            };
            if out
                .send(SseEvent::message(message.to_string()))
                .await
                .is_err()
            {
                return;
            }
        }
    });
    sse::response(events)
}

/// Replays `stream` after `seq` from the session's record, then follows it
/// until its response has been sent, or a later resume takes it over.
fn resume(session: &Arc<Session>, stream_no: u64, seq: u64) -> Response {
    let store = Arc::clone(&session.events);
    // Taken over before the answer goes out: what is recorded from now on
    // reaches this resume alone.
    let ticket = store.take_over(stream_no);
    let (out, events) = mpsc::channel::<SseEvent>(256);
    tokio::spawn(async move {
        let mut seq = seq;
        loop {
            // Registered before reading, so nothing recorded in between is
            // missed.
            let changed = store.changed();
            // A later resume took the stream: it sends the rest.
            if !store.holds(stream_no, ticket) {
                return;
            }
            let (recorded, finished) = store.after(stream_no, seq);
            for event in recorded {
                if !store.holds(stream_no, ticket) {
                    return;
                }
                seq = event.seq;
                let sse = SseEvent::message(event.data.to_string())
                    .with_id(store.id_of(event.stream, event.seq));
                if out.send(sse).await.is_err() {
                    return;
                }
            }
            if finished {
                return;
            }
            // A client that gave up on the resume ends it too.
            tokio::select! {
                () = changed => {}
                () = out.closed() => return,
            }
        }
    });
    sse::response(events)
}

/// Replays `instance`'s stream `stream_no` after `seq` from the shared
/// store, where that instance copies a stream once its reader left, and
/// follows it until its end, or for `patience` (the session's idle timeout)
/// if the end never comes.
fn resume_elsewhere(
    session: &Arc<Session>,
    instance: &str,
    stream_no: u64,
    seq: u64,
    patience: Duration,
) -> Response {
    /// How often the store is read again while the stream goes on.
    const POLL: Duration = Duration::from_millis(100);
    let (out, events) = mpsc::channel::<SseEvent>(256);
    let session = Arc::clone(session);
    let key = format!("{instance}/{stream_no}");
    let instance = instance.to_owned();
    tokio::spawn(async move {
        let Some(mirror) = session.events.mirror() else {
            return;
        };
        let started = tokio::time::Instant::now();
        let deadline = started.checked_add(patience).unwrap_or(started);
        let mut read = 0;
        // The last event sent: a copy may hold one twice (a retried append).
        let mut sent = seq;
        while tokio::time::Instant::now() < deadline {
            let lines = match mirror.store.events(&mirror.session, &key, read).await {
                Ok(lines) => lines,
                Err(error) => {
                    tracing::warn!(target: "droid", %error, "a stream of another instance could not be read");
                    Vec::new()
                }
            };
            // No copy at all, a while after the resume began: the stream's
            // reader never left, or it never existed; nothing will come.
            if read == 0 && lines.is_empty() && started.elapsed() > UNCOPIED_PATIENCE {
                return;
            }
            read += lines.len();
            for line in lines {
                let Ok(event) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if event.get("done").is_some() {
                    return;
                }
                let number = event.get("seq").and_then(Value::as_u64).unwrap_or(0);
                let (Some(data), true) = (event.get("data"), number > sent) else {
                    continue;
                };
                sent = number;
                let id = format!("{instance}/{stream_no}-{number}");
                if out
                    .send(SseEvent::message(data.to_string()).with_id(id))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            tokio::select! {
                () = tokio::time::sleep(POLL) => {}
                () = out.closed() => return,
            }
        }
    });
    sse::response(events)
}

/// DELETE `/mcp`: ends a session; later requests with its id get 404.
pub(super) async fn delete(
    State(app): State<App>,
    Extension(caller): Extension<AuthContext>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = refuse_repeated(&headers, None) {
        return refused;
    }
    let Some(id) = header(&headers, SESSION_HEADER) else {
        return (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "POST")]).into_response();
    };
    // Only who opened a session may end it.
    match shared::end(&app.sessions, id, &caller).await {
        Ok(true) => StatusCode::OK.into_response(),
        Ok(false) => unknown_session(),
        Err(unavailable) => unavailable,
    }
}
