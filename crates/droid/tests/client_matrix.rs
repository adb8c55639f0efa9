//! The project's client against the project's fixture server (`droid serve`),
//! over every transport and at every revision: the same operations must give
//! the same answers whichever way the two sides settle.

// Indexing a `serde_json::Value` yields `Null` for a missing member and never
// panics, which is what reading replies wants.
#![allow(clippy::indexing_slicing)]

use std::sync::Arc;
use std::sync::atomic::Ordering;

use protocol_droid::adapters::secondary::connect::{
    ConnectOptions, Target, cached_version, connect, remember,
};
use protocol_droid::application::client::{Client, ClientOptions};
use protocol_droid::domain::ProtocolVersion;
use serde_json::json;

mod support;

use support::answers::{Answers, call, counting_progress, text_of};
use support::{Running, TestError, listening};

fn options(revisions: &[ProtocolVersion]) -> ConnectOptions {
    ConnectOptions {
        client: ClientOptions {
            revisions: revisions.to_vec(),
            handler: Arc::new(Answers),
            ..ClientOptions::default()
        },
        ..ConnectOptions::default()
    }
}

fn stdio_target(extra: &[&str]) -> Result<Target, TestError> {
    let mut argv = vec![env!("CARGO_BIN_EXE_droid"), "serve"];
    argv.extend_from_slice(extra);
    Ok(Target::command(argv)?)
}

/// `droid serve --listen 127.0.0.1:0`, stopped when dropped.
struct HttpServer {
    _running: Running,
    base: String,
}

impl HttpServer {
    fn start(extra: &[&str]) -> Result<Self, TestError> {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let (running, address) = listening(&args, "http")?;
        Ok(Self {
            _running: running,
            base: format!("http://{address}"),
        })
    }

    fn url(&self, path: &str) -> Result<Target, TestError> {
        Ok(Target::url(&format!("{}{path}", self.base))?)
    }
}

/// The operations every revision has, and the rounds each revision can
/// carry, checked against the fixture's known answers.
async fn exercise(client: &Client, expected: ProtocolVersion) -> Result<(), TestError> {
    let version = client.version().ok_or("not negotiated")?;
    assert_eq!(version, expected, "negotiated revision");

    let tools = client.list_all_tools().await?;
    assert!(
        tools.iter().any(|t| t.name == "test_simple_text"),
        "{tools:?}"
    );
    assert_eq!(
        call(client, "test_simple_text", json!({})).await?,
        "This is a simple text response for testing."
    );

    let resource = client.read_resource("test://static-text").await?;
    assert!(
        resource.raw["contents"][0]["text"].as_str().is_some(),
        "{}",
        resource.raw
    );
    let prompt = client.get_prompt("test_simple_prompt", None).await?;
    assert!(!prompt.value.messages.is_empty());

    // Sampling: a server-to-client request in the legacy era, an input
    // round at 2026-07-28; the handler sees no difference.
    let sampled = call(client, "test_sampling", json!({ "prompt": "hi" })).await?;
    assert_eq!(sampled, "LLM response: sampled-by-droid");
    if version >= ProtocolVersion::V2025_06_18 {
        let elicited = call(client, "test_elicitation", json!({ "message": "who?" })).await?;
        assert!(
            elicited.contains("action=accept") && elicited.contains("username-answer"),
            "{elicited}"
        );
    }
    if version == ProtocolVersion::V2026_07_28 {
        let rounds = call(client, "test_input_required_result_multi_round", json!({})).await?;
        assert_eq!(
            rounds,
            "Hello, name-answer! Your favorite color is color-answer."
        );
    }

    let (progress, seen) = counting_progress();
    let reply = client
        .call_tool("test_tool_with_progress", None, &progress)
        .await?;
    assert_eq!(
        text_of(&reply.value),
        "Tool with progress executed successfully"
    );
    assert_eq!(
        seen.load(Ordering::SeqCst),
        3,
        "progress notifications at {version}"
    );

    client.close().await;
    Ok(())
}

#[tokio::test]
async fn stdio_at_every_revision() -> Result<(), TestError> {
    for version in ProtocolVersion::ALL {
        let client = connect(&stdio_target(&[])?, options(&[version])).await?;
        exercise(&client, version).await?;
    }
    Ok(())
}

#[tokio::test]
async fn streamable_http_at_every_revision() -> Result<(), TestError> {
    let server = HttpServer::start(&[])?;
    for version in ProtocolVersion::ALL {
        let client = connect(&server.url("/mcp")?, options(&[version])).await?;
        exercise(&client, version).await?;
    }
    Ok(())
}

#[tokio::test]
async fn http_sse_at_2024_11_05() -> Result<(), TestError> {
    let server = HttpServer::start(&[])?;
    let client = connect(
        &server.url("/sse")?,
        options(&[ProtocolVersion::V2024_11_05]),
    )
    .await?;
    exercise(&client, ProtocolVersion::V2024_11_05).await
}

#[tokio::test]
async fn an_unpinned_client_prefers_2026_and_falls_back_to_the_handshake() -> Result<(), TestError>
{
    let all = ProtocolVersion::ALL;
    let modern = connect(&stdio_target(&[])?, options(&all)).await?;
    exercise(&modern, ProtocolVersion::V2026_07_28).await?;
    let legacy_only = ["--revisions", "2025-11-25"];
    let legacy = connect(&stdio_target(&legacy_only)?, options(&all)).await?;
    exercise(&legacy, ProtocolVersion::V2025_11_25).await?;

    let server = HttpServer::start(&legacy_only)?;
    let legacy = connect(&server.url("/mcp")?, options(&all)).await?;
    exercise(&legacy, ProtocolVersion::V2025_11_25).await
}

/// What the client was told, by name.
#[derive(Debug, Default)]
struct Notices(std::sync::Mutex<Vec<String>>);

impl Notices {
    /// What the client was told so far.
    fn told(&self) -> Vec<String> {
        self.0.lock().map(|told| told.clone()).unwrap_or_default()
    }

    /// Whether the client was told something `heard` picks out within 15 s.
    async fn heard_within(&self, heard: impl Fn(&str) -> bool) -> bool {
        for _ in 0..150 {
            if self.told().iter().any(|t| heard(t)) {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        false
    }
}

impl protocol_droid::application::client::ClientHandler for Notices {
    fn notification(&self, notice: &protocol_droid::application::client::Notice) {
        if let Ok(mut told) = self.0.lock() {
            told.push(notice.method.clone());
        }
    }

    fn closed(&self, reason: &str) {
        if let Ok(mut told) = self.0.lock() {
            told.push(format!("closed: {reason}"));
        }
    }
}

/// A 2025-11-25 client of `server`, its notices recorded, that has made
/// one call.
async fn recorded_legacy_client(server: &HttpServer) -> Result<(Client, Arc<Notices>), TestError> {
    let mut options = options(&[ProtocolVersion::V2025_11_25]);
    let notices = Arc::new(Notices::default());
    options.client.handler = notices.clone();
    let client = connect(&server.url("/mcp")?, options).await?;
    assert_eq!(
        call(&client, "test_simple_text", json!({})).await?,
        "This is a simple text response for testing."
    );
    Ok((client, notices))
}

/// A legacy HTTP server that goes away for good (its GET stream ends and
/// cannot be opened again) closes the connection, so whoever keeps it is
/// told rather than taking it for alive while every request fails.
#[tokio::test]
async fn a_legacy_http_server_that_is_gone_closes_the_connection() -> Result<(), TestError> {
    let server = HttpServer::start(&["--revisions", "2025-11-25"])?;
    let (_client, notices) = recorded_legacy_client(&server).await?;
    drop(server);
    // Five attempts a second apart, then closed.
    let closed = notices.heard_within(|t| t.starts_with("closed: ")).await;
    assert!(closed, "{:?}", notices.told());
    Ok(())
}

/// A legacy HTTP server restarted at the same address ends the client's
/// session, which the client learns when it opens its GET stream again: its
/// handler hears that the server's lists may have changed, with no request
/// of its own (a gateway then lists a restarted upstream's tools, and so
/// starts a new session, before a session calls one).
#[tokio::test]
async fn a_restarted_legacy_http_server_is_told_at_once() -> Result<(), TestError> {
    let server = HttpServer::start(&["--revisions", "2025-11-25"])?;
    let address = server
        .base
        .strip_prefix("http://")
        .ok_or("no address")?
        .to_owned();
    let (client, notices) = recorded_legacy_client(&server).await?;
    drop(server);
    let (_again, _) = listening(
        &["serve", "--revisions", "2025-11-25", "--listen", &address],
        "http",
    )?;
    let told = notices
        .heard_within(|t| t == "notifications/tools/list_changed")
        .await;
    assert!(told, "{:?}", notices.told());
    // The next request starts a new session, which serves.
    assert_eq!(
        call(&client, "test_simple_text", json!({})).await?,
        "This is a simple text response for testing."
    );
    Ok(())
}

/// A session the server ended is replaced by a new handshake; the new
/// session may be a new server, so the client hears that its lists may
/// have changed (a gateway lists the upstream's tools again).
#[tokio::test]
async fn an_expired_legacy_session_is_replaced_by_a_new_handshake() -> Result<(), TestError> {
    let server = HttpServer::start(&["--session-idle", "1"])?;
    let mut options = options(&[ProtocolVersion::V2025_11_25]);
    let notices = Arc::new(Notices::default());
    options.client.handler = notices.clone();
    // Without the GET stream the session is idle between requests.
    options.http.listen = false;
    let client = connect(&server.url("/mcp")?, options).await?;
    assert_eq!(
        call(&client, "test_simple_text", json!({})).await?,
        "This is a simple text response for testing."
    );
    assert!(notices.told().is_empty(), "{:?}", notices.told());
    // Long enough for the server to reap the idle session; the next request
    // meets a 404 and the client initializes again.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(
        call(&client, "test_simple_text", json!({})).await?,
        "This is a simple text response for testing."
    );
    let told = notices.told();
    assert!(
        told.contains(&"notifications/tools/list_changed".to_owned()),
        "{told:?}"
    );
    Ok(())
}

/// A server that forgets its sessions (restarted) and says so with a 400
/// naming the session, as servers built on the TypeScript SDK's examples
/// do, is met with a new handshake as a 404 is; before, every later request
/// on the connection failed with that 400.
#[tokio::test]
async fn a_session_refused_with_a_400_naming_it_is_replaced_too() -> Result<(), TestError> {
    use std::io::BufRead as _;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/upstreams/faulty_http.py"
    );
    let mut child = std::process::Command::new("python3")
        .args([script, "forgetful"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let _server = Running(child);
    let mut port = String::new();
    std::io::BufReader::new(stdout).read_line(&mut port)?;
    let target = Target::url(&format!("http://127.0.0.1:{}/mcp", port.trim()))?;
    let mut options = options(&[ProtocolVersion::V2025_11_25]);
    options.http.listen = false;
    let client = connect(&target, options).await?;
    // Each call is answered, then every session is forgotten: the second
    // meets the 400 and goes through on a new session.
    for _ in 0..2 {
        call(&client, "forget", json!({})).await?;
    }
    Ok(())
}

#[tokio::test]
async fn an_unpinned_client_finds_the_http_sse_transport_from_its_url() -> Result<(), TestError> {
    let server = HttpServer::start(&[])?;
    let client = connect(&server.url("/sse")?, options(&ProtocolVersion::ALL)).await?;
    exercise(&client, ProtocolVersion::V2024_11_05).await
}

#[tokio::test]
async fn a_remembered_revision_the_server_no_longer_speaks_is_probed_again() -> Result<(), TestError>
{
    let target = stdio_target(&["--revisions", "2025-06-18,2025-11-25"])?;
    // As if an earlier connection had settled 2026-07-28 with this server.
    remember(&target, ProtocolVersion::V2026_07_28);
    let client = connect(&target, options(&ProtocolVersion::ALL)).await?;
    assert_eq!(client.version(), Some(ProtocolVersion::V2025_11_25));
    assert_eq!(cached_version(&target), Some(ProtocolVersion::V2025_11_25));
    client.close().await;
    // The next connection starts from what was learnt.
    let again = connect(&target, options(&ProtocolVersion::ALL)).await?;
    assert_eq!(again.version(), Some(ProtocolVersion::V2025_11_25));
    again.close().await;
    Ok(())
}
