//! The client against servers that misbehave: each failure must end in a
//! clear error or be survived, never a hang, a panic or a lost message.
//!
//! The misbehaving server is `tests/fixtures/bad_server.py`, run as a real
//! child process over stdio, one mode per test; the HTTP cases use a small
//! loopback server written for the one behaviour they exercise.

// Indexing a `serde_json::Value` yields `Null` for a missing member and never
// panics, which is what reading replies wants.
#![allow(clippy::indexing_slicing)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::BoxFuture;
use protocol_droid::adapters::secondary::child::ChildOptions;
use protocol_droid::adapters::secondary::connect::{ConnectError, ConnectOptions, Target, connect};
use protocol_droid::application::client::{
    Client, ClientError, ClientHandler, ClientOptions, LinkError, Notice, RequestOptions,
};
use protocol_droid::domain::jsonrpc::ErrorObject;
use protocol_droid::wire::{ListRootsResult, RootsCapability};
use serde_json::{Map, Value};

#[allow(dead_code)] // Each test binary uses its own part of it.
mod support;

use support::TestError;

/// A guard against a test that would otherwise hang forever; not a
/// measurement.
const GUARD: Duration = Duration::from_secs(60);

/// Capabilities declaring roots.
fn with_roots() -> protocol_droid::wire::ClientCapabilities {
    protocol_droid::wire::ClientCapabilities {
        roots: Some(RootsCapability::default()),
        ..Default::default()
    }
}

/// An answer of no roots.
fn no_roots() -> ListRootsResult {
    ListRootsResult {
        roots: Vec::new(),
        meta: None,
        extra: Map::new(),
    }
}

#[derive(Debug, Default)]
struct Counting {
    notices: AtomicUsize,
}

impl ClientHandler for Counting {
    fn capabilities(&self) -> protocol_droid::wire::ClientCapabilities {
        with_roots()
    }

    fn list_roots(&self) -> BoxFuture<'_, Result<ListRootsResult, ErrorObject>> {
        Box::pin(async { Ok(no_roots()) })
    }

    fn notification(&self, notice: &Notice) {
        if notice.method == "notifications/message" {
            self.notices.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A client that declares roots and takes a second to give them.
#[derive(Debug, Default)]
struct SlowRoots;

impl ClientHandler for SlowRoots {
    fn capabilities(&self) -> protocol_droid::wire::ClientCapabilities {
        with_roots()
    }

    fn list_roots(&self) -> BoxFuture<'_, Result<ListRootsResult, ErrorObject>> {
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(no_roots())
        })
    }
}

/// A question the server withdraws (`notifications/cancelled`) is not
/// answered: the handler's work on it stops, as the revision asks.
#[tokio::test]
async fn a_question_the_server_withdraws_is_not_answered() -> Result<(), TestError> {
    let bad = bad_server("withdraws", |options| {
        options.handler = Arc::new(SlowRoots);
        options.revisions = vec![protocol_droid::domain::ProtocolVersion::V2025_11_25];
    })
    .await?;
    call(&bad.client, &RequestOptions::default()).await?;
    // Past when the handler would have answered.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let recorded = std::fs::read_to_string(&bad.record)?;
    assert!(!recorded.contains("answered withdrawn"), "{recorded}");
    Ok(())
}

struct Bad {
    client: Client,
    handler: Arc<Counting>,
    record: tempfile::TempPath,
}

async fn bad_server(mode: &str, tune: impl FnOnce(&mut ClientOptions)) -> Result<Bad, TestError> {
    bad_server_in(mode, None, tune).await
}

async fn bad_server_in(
    mode: &str,
    cwd: Option<PathBuf>,
    tune: impl FnOnce(&mut ClientOptions),
) -> Result<Bad, TestError> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bad_server.py");
    // Removed when the test's `Bad` is dropped.
    let record = tempfile::Builder::new()
        .prefix(&format!("droid-bad-server-{mode}-"))
        .suffix(".log")
        .tempfile()?
        .into_temp_path();
    let mut child = ChildOptions::new("python3", [script.into_os_string(), mode.into()]);
    child
        .env
        .push(("BAD_SERVER_RECORD".into(), record.as_os_str().to_owned()));
    child.cwd = cwd;
    let handler = Arc::new(Counting::default());
    let shared: Arc<dyn ClientHandler> = handler.clone();
    let mut client = ClientOptions {
        handler: shared,
        ..ClientOptions::default()
    };
    tune(&mut client);
    let options = ConnectOptions {
        client,
        ..ConnectOptions::default()
    };
    let client = tokio::time::timeout(GUARD, connect(&Target::Command(child), options)).await??;
    Ok(Bad {
        client,
        handler,
        record,
    })
}

async fn call(client: &Client, options: &RequestOptions) -> Result<Value, ClientError> {
    match tokio::time::timeout(GUARD, client.call_tool("anything", None, options)).await {
        Ok(answer) => answer.map(|reply| reply.raw),
        // Reported as an error no test expects, so the test fails.
        Err(_) => Err(ClientError::Unsupported("the call hung".to_owned())),
    }
}

fn recorded(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_server_that_dies_mid_response_fails_the_call_with_its_reason() -> Result<(), TestError> {
    let bad = bad_server("close-mid-response", |_| {}).await?;
    let error = call(&bad.client, &RequestOptions::default())
        .await
        .err()
        .ok_or("the call succeeded")?;
    let ClientError::Link(LinkError::Io(reason)) = &error else {
        return Err(format!("unexpected error {error:?}").into());
    };
    assert!(reason.contains("closed its stdout"), "{reason}");
    assert!(bad.client.closed().is_some());
    // Later requests fail at once rather than waiting for a dead server.
    assert!(call(&bad.client, &RequestOptions::default()).await.is_err());
    Ok(())
}

#[tokio::test]
async fn a_line_of_invalid_json_is_reported_and_the_connection_survives() -> Result<(), TestError> {
    let bad = bad_server("invalid-json", |_| {}).await?;
    for _ in 0..2 {
        let result = call(&bad.client, &RequestOptions::default()).await?;
        assert_eq!(result["content"][0]["text"], "done");
    }
    Ok(())
}

#[tokio::test]
async fn a_response_to_an_unknown_id_is_ignored_and_the_real_one_arrives() -> Result<(), TestError>
{
    let bad = bad_server("unknown-id", |_| {}).await?;
    let result = call(&bad.client, &RequestOptions::default()).await?;
    assert_eq!(result["content"][0]["text"], "done");
    Ok(())
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_and_is_told_to_cancel() -> Result<(), TestError> {
    let bad = bad_server("silent", |_| {}).await?;
    let options = RequestOptions {
        timeout: Some(Duration::from_millis(200)),
        ..RequestOptions::default()
    };
    let error = call(&bad.client, &options)
        .await
        .err()
        .ok_or("the call succeeded")?;
    assert!(
        matches!(&error, ClientError::Timeout { method, .. } if method == "tools/call"),
        "{error:?}"
    );
    // The cancellation reaches the server; poll its record for it.
    let mut cancelled = Vec::new();
    for _ in 0..200 {
        cancelled = recorded(&bad.record);
        if !cancelled.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let params: Value = serde_json::from_str(cancelled.first().ok_or("no cancellation")?)?;
    assert!(params["requestId"].is_number(), "{params}");
    // The connection is still usable for requests the server does answer.
    bad.client.ping().await?;
    Ok(())
}

#[tokio::test]
async fn a_flood_of_notifications_is_delivered_whole_before_the_answer() -> Result<(), TestError> {
    let bad = bad_server("flood", |_| {}).await?;
    let result = call(&bad.client, &RequestOptions::default()).await?;
    assert_eq!(result["content"][0]["text"], "done");
    // Notifications are handled in order on the reader, so all of them have
    // been seen once the answer that followed them arrived.
    assert_eq!(bad.handler.notices.load(Ordering::SeqCst), 10_000);
    Ok(())
}

#[tokio::test]
async fn endless_input_rounds_stop_at_the_limit_with_a_clear_error() -> Result<(), TestError> {
    let bad = bad_server("input-forever", |o| o.max_input_rounds = 3).await?;
    let error = call(&bad.client, &RequestOptions::default())
        .await
        .err()
        .ok_or("the call succeeded")?;
    assert!(
        matches!(&error, ClientError::TooManyRounds { rounds: 3, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("after 3 rounds"), "{error}");
    let rounds = recorded(&bad.record);
    assert_eq!(rounds.len(), 4, "the first request and three retries");
    // The first request has no state; each retry echoes the previous round's.
    assert_eq!(rounds.first().map(String::as_str), Some("null"));
    for pair in rounds.windows(2) {
        let (Some(_), Some(next)) = (pair.first(), pair.get(1)) else {
            continue;
        };
        assert!(next.starts_with("\"state-"), "{next}");
    }
    Ok(())
}

#[tokio::test]
async fn a_child_server_starts_in_the_directory_it_is_given() -> Result<(), TestError> {
    let folder = tempfile::Builder::new().prefix("droid-cwd-").tempdir()?;
    let dir = folder.path().to_path_buf();
    let bad = bad_server_in("cwd", Some(dir.clone()), |_| {}).await?;
    let result = call(&bad.client, &RequestOptions::default()).await?;
    let reported = result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(PathBuf::from(reported).canonicalize()?, dir.canonicalize()?);
    Ok(())
}

/// A legacy-era HTTP server that, like servers which answer on whichever
/// stream is open, is slow to answer the GET: `tools/call` reports whether the
/// GET stream was established when the call arrived.
mod slow_listen {
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use axum::body::{Body, Bytes};
    use axum::extract::State;
    use axum::http::{StatusCode, header};
    use axum::response::{IntoResponse, Response};
    use axum::routing::post;
    use futures_util::StreamExt as _;
    use serde_json::{Value, json};

    /// How long the GET waits before its headers; long enough that a client
    /// which does not wait for them sends its next request first.
    const GET_DELAY: Duration = Duration::from_millis(300);

    #[derive(Clone, Default)]
    pub(crate) struct Seen {
        listening: Arc<AtomicBool>,
    }

    fn json_reply(body: &Value) -> Response {
        (
            [
                (header::CONTENT_TYPE, "application/json"),
                (header::HeaderName::from_static("mcp-session-id"), "s1"),
            ],
            body.to_string(),
        )
            .into_response()
    }

    async fn on_post(State(seen): State<Seen>, body: Bytes) -> Response {
        let Ok(message) = serde_json::from_slice::<Value>(&body) else {
            return StatusCode::BAD_REQUEST.into_response();
        };
        let id = message["id"].clone();
        match message["method"].as_str() {
            Some("initialize") => json_reply(&json!({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "slow-listen", "version": "0"}}})),
            Some("tools/call") => {
                let listening = seen.listening.load(Ordering::SeqCst);
                json_reply(&json!({"jsonrpc": "2.0", "id": id, "result": {
                    "content": [{"type": "text", "text": listening.to_string()}]}}))
            }
            _ if id.is_null() => StatusCode::ACCEPTED.into_response(),
            _ => json_reply(&json!({"jsonrpc": "2.0", "id": id, "result": {}})),
        }
    }

    async fn on_get(State(seen): State<Seen>) -> Response {
        tokio::time::sleep(GET_DELAY).await;
        seen.listening.store(true, Ordering::SeqCst);
        // A priming event, then a stream that stays open.
        let events = futures_util::stream::iter([Ok::<_, Infallible>(Bytes::from_static(
            b"id: e1\nretry: 500\ndata: \n\n",
        ))])
        .chain(futures_util::stream::pending());
        (
            [(header::CONTENT_TYPE, "text/event-stream")],
            Body::from_stream(events),
        )
            .into_response()
    }

    /// The same server without a GET stream, answering a GET with `404`
    /// (as a server that routes only POST does), and refusing a request
    /// that does not name its session.
    pub(crate) async fn start_without_get() -> std::io::Result<String> {
        async fn on_post_in_session(
            State(seen): State<Seen>,
            headers: axum::http::HeaderMap,
            body: Bytes,
        ) -> Response {
            let handshake = serde_json::from_slice::<Value>(&body)
                .is_ok_and(|message| message["method"] == "initialize");
            let named = headers.get("mcp-session-id").is_some_and(|v| v == "s1");
            if !handshake && !named {
                return (StatusCode::BAD_REQUEST, "no session named").into_response();
            }
            on_post(State(seen), body).await
        }
        let app = axum::Router::new()
            .route(
                "/mcp",
                post(on_post_in_session).get(|| async { StatusCode::NOT_FOUND }),
            )
            .with_state(Seen::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(format!("http://{address}/mcp"))
    }

    pub(crate) async fn start() -> std::io::Result<(String, Seen)> {
        let seen = Seen::default();
        let app = axum::Router::new()
            .route("/mcp", post(on_post).get(on_get))
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok((format!("http://{address}/mcp"), seen))
    }
}

#[tokio::test]
async fn the_get_stream_is_open_before_the_first_request_after_initialize() -> Result<(), TestError>
{
    let (url, _) = slow_listen::start().await?;
    let mut options = ConnectOptions::default();
    options.client.revisions = vec![protocol_droid::domain::ProtocolVersion::V2025_11_25];
    let target = Target::Url(url.parse()?);
    let client = tokio::time::timeout(GUARD, connect(&target, options)).await??;
    let reply = call(&client, &RequestOptions::default()).await?;
    assert_eq!(
        reply["content"][0]["text"], "true",
        "the call overtook the GET stream: {reply}"
    );
    client.close().await;
    Ok(())
}

/// A server that answers the GET stream with `404` right after the
/// handshake has no such stream; its session is kept, and serves.
#[tokio::test]
async fn a_server_answering_the_get_with_404_keeps_its_session() -> Result<(), TestError> {
    let url = slow_listen::start_without_get().await?;
    let mut options = ConnectOptions::default();
    options.client.revisions = vec![protocol_droid::domain::ProtocolVersion::V2025_11_25];
    let target = Target::Url(url.parse()?);
    let client = tokio::time::timeout(GUARD, connect(&target, options)).await??;
    call(&client, &RequestOptions::default()).await?;
    // Past any retry of the stream.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    call(&client, &RequestOptions::default()).await?;
    client.close().await;
    Ok(())
}

/// A server that names a session on every answer, its refusal of the
/// `server/discover` probe too: the session the client keeps is the one
/// the answer to `initialize` names, and `initialize` itself goes out
/// naming none.
#[tokio::test]
async fn only_the_answer_to_initialize_names_the_session() -> Result<(), TestError> {
    use std::sync::Mutex;

    use axum::body::Bytes;
    use axum::extract::State;
    use axum::http::{HeaderMap, StatusCode, header};
    use axum::response::{IntoResponse, Response};
    use axum::routing::post;

    type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;
    async fn on_post(State(seen): State<Seen>, headers: HeaderMap, body: Bytes) -> Response {
        let Ok(message) = serde_json::from_slice::<Value>(&body) else {
            return StatusCode::BAD_REQUEST.into_response();
        };
        let method = message["method"].as_str().unwrap_or_default().to_owned();
        let named = headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        seen.lock()
            .map_err(|_| ())
            .map(|mut seen| seen.push((method.clone(), named)))
            .ok();
        let id = message["id"].clone();
        let (session, reply) = match method.as_str() {
            "server/discover" => (
                "probe",
                serde_json::json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": "no such method"}}),
            ),
            "initialize" => (
                "s1",
                serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                "serverInfo": {"name": "names-sessions", "version": "0"}}}),
            ),
            _ if id.is_null() => return StatusCode::ACCEPTED.into_response(),
            _ => (
                "other",
                serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {
                "content": [{"type": "text", "text": "done"}]}}),
            ),
        };
        (
            [
                (header::CONTENT_TYPE, "application/json"),
                (header::HeaderName::from_static("mcp-session-id"), session),
            ],
            reply.to_string(),
        )
            .into_response()
    }
    let seen = Seen::default();
    let app = axum::Router::new()
        .route(
            "/mcp",
            post(on_post).get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
        )
        .with_state(Arc::clone(&seen));
    let url = serve_mcp(app).await?;
    let target = Target::Url(url.parse()?);
    let client = tokio::time::timeout(GUARD, connect(&target, ConnectOptions::default())).await??;
    call(&client, &RequestOptions::default()).await?;
    call(&client, &RequestOptions::default()).await?;
    client.close().await;
    let seen = seen.lock().map_err(|_| "poisoned")?.clone();
    let named = |method: &str| -> Vec<Option<String>> {
        seen.iter()
            .filter(|(m, _)| m == method)
            .map(|(_, session)| session.clone())
            .collect()
    };
    assert_eq!(named("initialize"), [None], "{seen:?}");
    assert_eq!(
        named("tools/call"),
        [Some("s1".to_owned()), Some("s1".to_owned())],
        "{seen:?}"
    );
    Ok(())
}

/// Serves `app` on a loopback port of its own, in the background: the URL
/// of its `/mcp`.
async fn serve_mcp(app: axum::Router) -> std::io::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(format!("http://{address}/mcp"))
}

/// A 2025-11-25 server `name`'s answer to the `initialize` with `id`, as
/// one event.
fn handshake_event(id: &Value, name: &str) -> String {
    format!(
        "data: {}\n\n",
        serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": name, "version": "0"}}})
    )
}

/// A server whose event stream carries bytes that are not UTF-8, and goes
/// on after them.
mod bad_bytes {
    use std::convert::Infallible;

    use axum::body::{Body, Bytes};
    use axum::http::{StatusCode, header};
    use axum::response::{IntoResponse, Response};
    use axum::routing::post;
    use futures_util::StreamExt as _;
    use serde_json::{Value, json};

    async fn on_post(body: Bytes) -> Response {
        let Ok(message) = serde_json::from_slice::<Value>(&body) else {
            return StatusCode::BAD_REQUEST.into_response();
        };
        let id = message["id"].clone();
        let events: Vec<u8> = match message["method"].as_str() {
            Some("initialize") => super::handshake_event(&id, "bad-bytes").into_bytes(),
            Some("tools/call") => [
                &br#"data: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"#[..],
                b"\xFF\xFE",
                b"\"}}\n\n",
                br#"data: {"jsonrpc":"2.0","id":"#,
                id.to_string().as_bytes(),
                br#","result":{"content":[{"type":"text","text":"a"#,
                b"\xC3\x28",
                b"b\"}]}}\n\n",
            ]
            .concat(),
            _ if id.is_null() => return StatusCode::ACCEPTED.into_response(),
            _ => format!("data: {}\n\n", json!({"jsonrpc": "2.0", "id": id, "result": {}}))
                .into_bytes(),
        };
        // The stream stays open after its events, as a server's may.
        let stream = futures_util::stream::iter([Ok::<_, Infallible>(Bytes::from(events))])
            .chain(futures_util::stream::pending());
        (
            [
                (header::CONTENT_TYPE, "text/event-stream"),
                (header::HeaderName::from_static("mcp-session-id"), "s1"),
            ],
            Body::from_stream(stream),
        )
            .into_response()
    }

    pub(crate) async fn start() -> std::io::Result<String> {
        super::serve_mcp(axum::Router::new().route("/mcp", post(on_post))).await
    }
}

/// Bytes that are not UTF-8 are read as the event-stream rules say, each
/// invalid sequence one U+FFFD, and the stream goes on being read: what
/// follows them arrives, rather than piling up unread.
#[tokio::test]
async fn an_event_stream_with_invalid_utf8_is_decoded_and_read_on() -> Result<(), TestError> {
    let url = bad_bytes::start().await?;
    let mut options = ConnectOptions::default();
    options.client.revisions = vec![protocol_droid::domain::ProtocolVersion::V2025_11_25];
    let target = Target::Url(url.parse()?);
    let client = tokio::time::timeout(GUARD, connect(&target, options)).await??;
    let reply = call(&client, &RequestOptions::default()).await?;
    assert_eq!(reply["content"][0]["text"], "a\u{FFFD}(b", "{reply}");
    client.close().await;
    Ok(())
}

/// An answer that never ends fails its call once it has run past the
/// line limit, naming the limit, rather than at the request's timeout
/// (here longer than the test waits).
#[tokio::test]
async fn an_answer_that_never_ends_fails_its_call_before_its_timeout() -> Result<(), TestError> {
    let bad = bad_server("endless-answer", |options| {
        options.request_timeout = Duration::from_secs(600);
    })
    .await?;
    let failed = tokio::time::timeout(GUARD, call(&bad.client, &RequestOptions::default())).await?;
    let error = failed
        .err()
        .ok_or("an answer that never ended was taken")?
        .to_string();
    assert!(error.contains("limit"), "{error}");
    Ok(())
}

/// An answer the reader cannot take (both a result and an error) fails
/// its request naming the method it answered, which only the request
/// knows.
#[tokio::test]
async fn an_unreadable_answer_names_its_method() -> Result<(), TestError> {
    let bad = bad_server("result-and-error", |_| {}).await?;
    let failed = call(&bad.client, &RequestOptions::default()).await;
    let Err(error @ ClientError::InvalidResult { .. }) = failed else {
        return Err(format!("expected an unreadable answer, got {failed:?}").into());
    };
    assert!(
        error.to_string().contains("the answer to tools/call"),
        "{error}"
    );
    Ok(())
}

/// A request of the server's too long to read is refused under its id
/// (`-32600`), so the server is not left waiting for an answer, and the
/// call it came in goes on.
#[tokio::test]
async fn a_server_request_too_long_to_read_is_refused_under_its_id() -> Result<(), TestError> {
    let bad = bad_server("huge-request", |_| {}).await?;
    let reply = call(&bad.client, &RequestOptions::default()).await?;
    assert_eq!(reply["content"][0]["text"], "done", "{reply}");
    let heard = recorded(&bad.record);
    let refusal = heard
        .iter()
        .find_map(|line| line.strip_prefix("huge "))
        .ok_or_else(|| format!("the request was not answered: {heard:?}"))?;
    let refusal: Value = serde_json::from_str(refusal)?;
    assert_eq!(refusal["code"], -32600, "{refusal}");
    Ok(())
}

/// A server whose answer to a call is an event, with an id, then an event
/// past the client's bound that never ends.
mod huge_event {
    use std::convert::Infallible;

    use axum::body::{Body, Bytes};
    use axum::http::{StatusCode, header};
    use axum::response::{IntoResponse, Response};
    use axum::routing::post;
    use futures_util::StreamExt as _;
    use serde_json::{Value, json};

    async fn on_post(body: Bytes) -> Response {
        let Ok(message) = serde_json::from_slice::<Value>(&body) else {
            return StatusCode::BAD_REQUEST.into_response();
        };
        let id = message["id"].clone();
        let head = match message["method"].as_str() {
            Some("initialize") => super::handshake_event(&id, "huge-event"),
            Some("tools/call") => format!(
                "id: 1\ndata: {}\n\ndata: ",
                json!({"jsonrpc": "2.0", "method": "notifications/message",
                    "params": {"level": "info", "data": "before"}})
            ),
            _ if id.is_null() => return StatusCode::ACCEPTED.into_response(),
            _ => format!(
                "data: {}\n\n",
                json!({"jsonrpc": "2.0", "id": id, "result": {}})
            ),
        };
        let huge = message["method"] == "tools/call";
        // A megabyte at a time, seventeen times: past the 16 MiB bound.
        let filler = futures_util::stream::iter((0..17).filter(move |_| huge))
            .map(|_| Ok::<_, Infallible>(Bytes::from(vec![b'x'; 1024 * 1024])));
        let stream = futures_util::stream::iter([Ok::<_, Infallible>(Bytes::from(head))])
            .chain(filler)
            .chain(futures_util::stream::pending());
        (
            [
                (header::CONTENT_TYPE, "text/event-stream"),
                (header::HeaderName::from_static("mcp-session-id"), "s1"),
            ],
            Body::from_stream(stream),
        )
            .into_response()
    }

    pub(crate) async fn start() -> std::io::Result<String> {
        super::serve_mcp(axum::Router::new().route("/mcp", post(on_post))).await
    }
}

/// An answer's event past the bound fails the call saying so, at once:
/// not as a stream that ended early, and not resumed, which would only
/// bring the same event again.
#[tokio::test]
async fn an_event_past_the_bound_fails_its_call_saying_so() -> Result<(), TestError> {
    let url = huge_event::start().await?;
    let mut options = ConnectOptions::default();
    options.client.revisions = vec![protocol_droid::domain::ProtocolVersion::V2025_11_25];
    let target = Target::Url(url.parse()?);
    let client = tokio::time::timeout(GUARD, connect(&target, options)).await??;
    let failed = call(&client, &RequestOptions::default()).await;
    let Err(error) = failed else {
        return Err(format!("a call past the bound was answered: {failed:?}").into());
    };
    assert!(error.to_string().contains("longer than"), "{error}");
    client.close().await;
    Ok(())
}

/// A server whose answer to a call is an event stream that never ends,
/// counting the streams open.
mod endless {
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::body::{Body, Bytes};
    use axum::extract::State;
    use axum::http::{StatusCode, header};
    use axum::response::{IntoResponse, Response};
    use axum::routing::post;
    use serde_json::{Value, json};

    /// Counts a stream open until it is dropped: when its client goes.
    struct Open(Arc<AtomicUsize>);

    impl Drop for Open {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }

    async fn on_post(State(open): State<Arc<AtomicUsize>>, body: Bytes) -> Response {
        let Ok(message) = serde_json::from_slice::<Value>(&body) else {
            return StatusCode::BAD_REQUEST.into_response();
        };
        let id = message["id"].clone();
        match message["method"].as_str() {
            Some("initialize") => (
                [
                    (header::HeaderName::from_static("mcp-session-id"), "s1"),
                    (header::CONTENT_TYPE, "application/json"),
                ],
                json!({"jsonrpc": "2.0", "id": id, "result": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "endless", "version": "0"}}})
                .to_string(),
            )
                .into_response(),
            Some("tools/call") => {
                open.fetch_add(1, Ordering::SeqCst);
                let guard = Open(open);
                let stream = futures_util::stream::unfold(guard, |guard| async move {
                    std::future::pending::<()>().await;
                    Some((Ok::<_, Infallible>(Bytes::new()), guard))
                });
                (
                    [(header::CONTENT_TYPE, "text/event-stream")],
                    Body::from_stream(stream),
                )
                    .into_response()
            }
            _ if id.is_null() => StatusCode::ACCEPTED.into_response(),
            _ => (
                [(header::CONTENT_TYPE, "application/json")],
                json!({"jsonrpc": "2.0", "id": id, "result": {}}).to_string(),
            )
                .into_response(),
        }
    }

    /// The server's URL, and how many call streams it has open.
    pub(crate) async fn start() -> std::io::Result<(String, Arc<AtomicUsize>)> {
        let open = Arc::new(AtomicUsize::new(0));
        let app = axum::Router::new()
            .route("/mcp", post(on_post).delete(|| async { StatusCode::OK }))
            .with_state(Arc::clone(&open));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok((format!("http://{address}/mcp"), open))
    }
}

/// Closing a connection ends the answers it is still reading: a call's
/// event stream that never ends (a `subscriptions/listen`, say) does not
/// keep its HTTP connection to the server open after the client is gone.
#[tokio::test]
async fn closing_a_connection_ends_the_streams_its_requests_still_read() -> Result<(), TestError> {
    let (url, open) = endless::start().await?;
    let mut options = ConnectOptions::default();
    options.client.revisions = vec![protocol_droid::domain::ProtocolVersion::V2025_11_25];
    let target = Target::Url(url.parse()?);
    let client = Arc::new(tokio::time::timeout(GUARD, connect(&target, options)).await??);
    let calling = Arc::clone(&client);
    let pending = tokio::spawn(async move { call(&calling, &RequestOptions::default()).await });
    let deadline = tokio::time::Instant::now() + GUARD;
    while open.load(Ordering::SeqCst) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the call never reached the server"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    client.close().await;
    while open.load(Ordering::SeqCst) > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the call's stream outlived its connection"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pending.abort();
    Ok(())
}

/// A refusal whose JSON body is no JSON-RPC error (`{"error":
/// "invalid_token"}`, as OAuth resource servers answer a request without a
/// token) is told as the refusal it is, with its status, not as a broken
/// JSON-RPC answer.
#[tokio::test]
async fn a_refusal_with_a_json_body_is_told_with_its_status() -> Result<(), TestError> {
    use axum::http::StatusCode;
    use axum::routing::post;

    let app = axum::Router::new().route(
        "/mcp",
        post(|| async {
            (
                StatusCode::UNAUTHORIZED,
                [("content-type", "application/json")],
                r#"{"error":"invalid_token","error_description":"no token"}"#,
            )
        }),
    );
    let refused = connect_to(app).await?;
    let error = refused
        .err()
        .ok_or("connected to a server refusing everything")?;
    let said = error.to_string();
    assert!(
        said.contains("401") && said.contains("invalid_token"),
        "{said}"
    );
    assert!(!said.contains("unreadable error object"), "{said}");
    Ok(())
}

/// A server that refuses Streamable HTTP and whose HTTP+SSE stream names
/// an endpoint on another origin is not posted to, and the error says so
/// rather than only the first refusal's status.
#[tokio::test]
async fn an_sse_endpoint_on_another_origin_is_refused_saying_so() -> Result<(), TestError> {
    use axum::http::StatusCode;
    use axum::routing::get;

    let app = axum::Router::new().route(
        "/mcp",
        get(|| async {
            (
                [("content-type", "text/event-stream")],
                "event: endpoint\ndata: http://127.0.0.2:9/messages\n\n",
            )
        })
        .post(|| async { StatusCode::METHOD_NOT_ALLOWED }),
    );
    let refused = connect_to(app).await?;
    let said = refused
        .err()
        .ok_or("connected through another origin")?
        .to_string();
    assert!(
        said.contains("405") && said.contains("another origin"),
        "{said}"
    );
    Ok(())
}

/// Serves `app` on loopback and connects a client to its `/mcp`, with
/// default options.
async fn connect_to(app: axum::Router) -> Result<Result<Client, ConnectError>, TestError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    let target = Target::Url(format!("http://{address}/mcp").parse()?);
    Ok(tokio::time::timeout(
        Duration::from_secs(30),
        connect(&target, ConnectOptions::default()),
    )
    .await?)
}
