//! What the integration test binaries share: the error type and patience
//! every test uses, a loopback HTTP harness for a server, request headers
//! and the `initialize` request, the tool that asks its client a question,
//! and (in `pki`) certificates made in the test.
//!
//! Each binary uses its own part of this, so the module is included with
//! `dead_code` allowed.

pub(crate) mod pki;

use std::net::SocketAddr;
use std::time::Duration;

use protocol_droid::adapters::primary::http::{HttpOptions, HttpServer};
use protocol_droid::application::server::{Call, Server, ToolSpec};
use protocol_droid::domain::ir::ToolResult;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

pub(crate) use protocol_droid_test_support::TestError;

/// How long any one step of a test may wait: a deadline, never a measure.
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);
/// The newest handshake revision.
pub(crate) const LEGACY: &str = "2025-11-25";
/// The stateless revision.
pub(crate) const MODERN: &str = "2026-07-28";
/// The `Accept` a Streamable HTTP POST carries.
pub(crate) const BOTH: &str = "application/json, text/event-stream";

/// A loopback listener and the base URL it answers on.
pub(crate) async fn loopback() -> Result<(tokio::net::TcpListener, String), TestError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr: SocketAddr = listener.local_addr()?;
    Ok((listener, format!("http://{addr}")))
}

/// A server on a loopback port, until this is dropped.
pub(crate) struct Serving {
    /// The transport, to ask how many sessions it holds.
    pub(crate) http: HttpServer,
    /// `http://127.0.0.1:PORT`.
    pub(crate) base: String,
    /// A client with [`PATIENCE`] as its timeout.
    pub(crate) client: reqwest::Client,
    /// Dropping it stops the server.
    pub(crate) stop: tokio::sync::oneshot::Sender<()>,
}

impl Serving {
    /// Serves `server` with `options` on a new loopback port.
    pub(crate) async fn start(server: Server, options: HttpOptions) -> Result<Self, TestError> {
        let (listener, base) = loopback().await?;
        Self::on(listener, base, HttpServer::new(server, options))
    }

    /// Serves `http` on `listener`, whose URL is `base`.
    pub(crate) fn on(
        listener: tokio::net::TcpListener,
        base: String,
        http: HttpServer,
    ) -> Result<Self, TestError> {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(http.clone().serve(listener, async {
            let _ = stopped.await;
        }));
        Ok(Self {
            http,
            base,
            client: reqwest::Client::builder().timeout(PATIENCE).build()?,
            stop,
        })
    }
}

/// A client with [`PATIENCE`] as its timeout, connecting from the loopback
/// `address` (so a server counts it apart from other addresses' clients).
pub(crate) fn client_from(address: &str) -> Result<reqwest::Client, TestError> {
    Ok(reqwest::Client::builder()
        .local_address(Some(address.parse()?))
        .timeout(PATIENCE)
        .build()?)
}

/// Request headers from name/value pairs.
pub(crate) fn headers(pairs: &[(&'static str, &str)]) -> Result<HeaderMap, TestError> {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.insert(*name, HeaderValue::from_str(value)?);
    }
    Ok(map)
}

/// An `initialize` request at `version`, declaring `capabilities`.
pub(crate) fn initialize(id: impl Into<Value>, version: &str, capabilities: &Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id.into(), "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": capabilities,
        "clientInfo": { "name": "t", "version": "1" } } })
}

/// The headers of a request in the [`LEGACY`] session `session`.
pub(crate) fn legacy_session(session: &str) -> [(&'static str, &str); 2] {
    [
        ("mcp-session-id", session),
        ("mcp-protocol-version", LEGACY),
    ]
}

/// Registers `sampler`, which asks its client's model (a sampling request)
/// and answers `model said TEXT`.
pub(crate) fn add_sampler_tool(server: &Server) {
    server.add_tool(
        ToolSpec::new("sampler", "Asks the client's model."),
        |call: Call| async move {
            let question = json!({
                "messages": [{ "role": "user", "content": { "type": "text", "text": "?" } }],
                "maxTokens": 5 });
            let answer = call.sample("q", question).await?;
            let text = answer["content"]["text"].as_str().unwrap_or_default();
            Ok(ToolResult::text(format!("model said {text}")))
        },
    );
}

/// Registers `ask`, which asks its client for a name with `message` (an
/// elicitation) and answers `hello NAME`.
pub(crate) fn add_ask_tool(server: &Server, message: &'static str) {
    server.add_tool(
        ToolSpec::new("ask", "Asks the user a question."),
        move |call: Call| async move {
            let answer = call
                .elicit(
                    "who",
                    json!({ "message": message, "requestedSchema": {
                        "type": "object", "properties": { "name": { "type": "string" } } } }),
                )
                .await?;
            let name = answer["content"]["name"].as_str().unwrap_or_default();
            Ok(ToolResult::text(format!("hello {name}")))
        },
    );
}
