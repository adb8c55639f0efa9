//! The 2024-11-05 HTTP+SSE transport: a GET event stream whose first event
//! names the endpoint to POST messages to; every answer travels on the
//! stream.

use std::sync::Arc;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::sync::mpsc;

use super::App;
use super::body::BodyCharge;
use super::headers::context;
use super::lane::Lane;
use super::respond::{CURRENT, channel, refusal};
use super::sessions::sessions_full;
use super::sse::{self, SseEvent};
use super::streamable::{Refused, check_post, unreadable_answer};
use crate::application::server::AuthContext;
use crate::domain::jsonrpc::{ErrorCode, Incoming, Message, Response as RpcResponse, ResponseId};
use crate::domain::{Era, TransportKind};

/// GET `/sse`: opens a session and its stream.
pub(super) async fn open(
    State(app): State<App>,
    Extension(caller): Extension<AuthContext>,
    peer: Option<Extension<ConnectInfo<std::net::SocketAddr>>>,
) -> Response {
    // The transport carries only the handshake revisions: a server that
    // offers none would open a session no message could ever initialize.
    if !app
        .server
        .offered()
        .iter()
        .any(|revision| revision.era() == Era::Legacy)
    {
        return refusal(
            StatusCode::NOT_FOUND,
            None,
            ErrorCode::INVALID_REQUEST,
            "this server offers no revision the HTTP+SSE transport carries (2024-11-05 to \
             2025-11-25); use Streamable HTTP",
        );
    }
    let peer = peer.map(|Extension(ConnectInfo(addr))| addr.ip());
    let session = match app
        .sessions
        .open(&app.server, TransportKind::HttpSse, &caller, peer)
    {
        Ok(session) => session,
        Err(full) => return sessions_full(&full, None),
    };
    let (tx, rx) = mpsc::channel::<Value>(256);
    session.set_standalone(tx);
    let (lane, mut answers) = Lane::new();
    session.set_lane(lane);
    let endpoint = format!("/messages?sessionId={}", session.id);
    // The stream owns the session: when the client goes, so does it.
    let guard = SessionGuard {
        sessions: Arc::clone(&app.sessions),
        id: session.id.clone(),
    };
    // One: an answer's bytes count against the lane until it is here, so
    // past it is only this one and the one being written.
    let (out, events) = mpsc::channel::<SseEvent>(1);
    tokio::spawn(async move {
        // Owned by this task, which ends with the client's stream.
        let _guard = guard;
        if out
            .send(SseEvent::named("endpoint", endpoint))
            .await
            .is_err()
        {
            return;
        }
        let mut rx = rx;
        loop {
            // The client leaving is noticed at once, not at the next
            // message, so a quiet session ends with its stream.
            let (text, held) = tokio::select! {
                message = rx.recv() => match message {
                    Some(message) => (message.to_string(), None),
                    None => return,
                },
                said = answers.recv() => match said {
                    Some(said) => (said.text, Some(said.held)),
                    None => return,
                },
                () = out.closed() => return,
            };
            if out.send(SseEvent::message(text)).await.is_err() {
                return;
            }
            drop(held);
        }
    });
    sse::response(events)
}

struct SessionGuard {
    sessions: Arc<super::sessions::Sessions>,
    id: String,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        self.sessions.end(&self.id);
    }
}

/// POST `/messages?sessionId=…`: accepted at once; answers go on the stream.
pub(super) async fn post(
    State(app): State<App>,
    Extension(caller): Extension<AuthContext>,
    peer: Option<Extension<ConnectInfo<std::net::SocketAddr>>>,
    Query(query): Query<Vec<(String, String)>>,
    charge: Option<Extension<BodyCharge>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut named = query.iter().filter(|(key, _)| key == "sessionId");
    let (Some((_, id)), None) = (named.next(), named.next()) else {
        // None, or two: which one a proxy reads is not which one this would.
        return refusal(
            StatusCode::BAD_REQUEST,
            None,
            ErrorCode::INVALID_REQUEST,
            "the endpoint takes exactly one sessionId",
        );
    };
    let Some(session) = app.sessions.get(id, TransportKind::HttpSse, &caller) else {
        return refusal(
            StatusCode::NOT_FOUND,
            None,
            ErrorCode::INVALID_REQUEST,
            "unknown or ended session",
        );
    };
    let incoming = match check_post(&headers, &body) {
        Ok(incoming) => incoming,
        Err(Refused {
            response,
            unanswered,
        }) => {
            if let Some((id, why)) = unanswered {
                let _failed = session.answer(&id, Err(unreadable_answer(&why)));
            }
            return response;
        }
    };
    let Some(connection) = session.connection().cloned() else {
        return refusal(
            StatusCode::NOT_FOUND,
            None,
            ErrorCode::INVALID_REQUEST,
            "session unavailable",
        );
    };
    match incoming {
        // The stream is behind: this answer would only wait with the others.
        // Refused on the POST, as the stream has no room for the refusal.
        Incoming::Single(Message::Request(request)) if session.lane_backed_up() => {
            let mut refused = refusal(
                StatusCode::TOO_MANY_REQUESTS,
                Some(&request.id),
                ErrorCode::INTERNAL_ERROR,
                "this session's stream holds answers it has not read yet; read them before sending more",
            );
            refused
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            refused
        }
        Incoming::Single(Message::Request(request)) => {
            let ctx = context(
                &headers,
                &caller,
                peer.map(|Extension(ConnectInfo(addr))| addr),
            );
            // Its messages all travel on the session's stream.
            let (channel, mut rx) = channel(true);
            let owner = Arc::clone(&session);
            let id = request.id.clone();
            // In the session's in-flight table like any legacy request:
            // capped, unique and cancellable.
            let started = session.start(&id, async move {
                // The body stays counted against its address until the
                // answer is handed on: the 202 went long ago.
                let _charge = charge;
                // Everything this request says goes on the session's stream.
                let relay = Arc::clone(&owner);
                let forward = tokio::spawn(async move {
                    while let Some(message) = rx.recv().await {
                        let _sent = relay.send_answer(message).await;
                    }
                });
                let id = request.id.clone();
                let outcome = CURRENT
                    .scope(channel, connection.handle(request, ctx))
                    .await;
                let _drained = forward.await;
                let response = Message::Response(RpcResponse {
                    id: ResponseId::Id(id),
                    outcome,
                });
                // Waits for room, for a bounded time: an answer is never
                // dropped while the client reads its stream.
                let _sent = owner.send_answer(response.into_value()).await;
            });
            match started {
                Ok(_running) => StatusCode::ACCEPTED.into_response(),
                // A 2024-11-05 client reads every answer on its stream, a
                // refusal included. When the stream has no room, the POST
                // carries the refusal instead: waiting for room would let a
                // client that posts without reading pile refusals up here.
                Err(refused) => {
                    let response = Message::Response(RpcResponse {
                        id: ResponseId::Id(id.clone()),
                        outcome: Err(crate::domain::jsonrpc::ErrorObject::new(
                            refused.code,
                            refused.message.clone(),
                        )),
                    });
                    if session.try_send_answer(&response.into_value()) {
                        StatusCode::ACCEPTED.into_response()
                    } else {
                        refusal(
                            StatusCode::TOO_MANY_REQUESTS,
                            Some(&id),
                            refused.code,
                            &refused.message,
                        )
                    }
                }
            }
        }
        Incoming::Single(Message::Response(response)) => {
            if let Some(id) = response.id.request_id() {
                let _delivered = session.answer(id, response.outcome);
            }
            StatusCode::ACCEPTED.into_response()
        }
        Incoming::Single(Message::Notification(notification)) => {
            // An HTTP+SSE session lives on one instance: a request not
            // running here runs nowhere.
            let _elsewhere = session.notified(&notification);
            StatusCode::ACCEPTED.into_response()
        }
        Incoming::Batch(_) => refusal(
            StatusCode::BAD_REQUEST,
            None,
            ErrorCode::INVALID_REQUEST,
            "the 2024-11-05 transport has no batches",
        ),
    }
}
