//! The `echo` and `add` tools on rmcp, the official Rust SDK: the server the
//! load harness compares `droid serve` with.
//!
//! `rmcp-echo stdio` serves newline JSON on the process's pipes;
//! `rmcp-echo http PORT` serves Streamable HTTP at
//! `http://127.0.0.1:PORT/mcp` statelessly with JSON responses, and
//! `rmcp-echo http-sessions PORT` keeps legacy sessions (rmcp answers a
//! session's calls as event streams). Each is the fastest configuration rmcp
//! offers for what is measured: the non-blocking pipe transport, JSON
//! responses where sessions are not asked for, and a tool router built once
//! and shared, where rmcp's default handler would build one per call.

use std::sync::Arc;

use anyhow::{Context as _, bail};
use axum::serve::ListenerExt as _;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService, stdio_pipes};
use rmcp::{ServerHandler, ServiceExt as _, tool, tool_handler, tool_router};
use serde::Deserialize;

/// The server: nothing but the shared router.
#[derive(Clone)]
struct Echo {
    tool_router: Arc<ToolRouter<Self>>,
}

/// `echo`'s arguments.
#[derive(Deserialize, schemars::JsonSchema)]
struct EchoArguments {
    /// What to return.
    text: String,
}

/// `add`'s arguments.
#[derive(Deserialize, schemars::JsonSchema)]
struct AddArguments {
    /// The first number.
    a: f64,
    /// The second number.
    b: f64,
}

#[tool_router]
impl Echo {
    /// Returns `text` as one text block.
    #[tool(description = "Returns `text` as one text block.")]
    async fn echo(&self, Parameters(arguments): Parameters<EchoArguments>) -> String {
        arguments.text
    }

    /// Returns the sum of `a` and `b`, as text.
    #[tool(description = "Returns the sum of the numbers `a` and `b`, as text.")]
    async fn add(&self, Parameters(AddArguments { a, b }): Parameters<AddArguments>) -> String {
        (a + b).to_string()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Echo {}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_default();
    let port = args.next();
    // The same runtime droid serve uses: tokio's default multi-threaded one.
    let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
    let router = Arc::new(Echo::tool_router());
    match (mode.as_str(), port) {
        ("stdio", None) => runtime.block_on(stdio(router)),
        ("http", Some(port)) => runtime.block_on(http(router, &port, false)),
        ("http-sessions", Some(port)) => runtime.block_on(http(router, &port, true)),
        _ => bail!("usage: rmcp-echo stdio | rmcp-echo http PORT | rmcp-echo http-sessions PORT"),
    }
}

async fn stdio(tool_router: Arc<ToolRouter<Echo>>) -> anyhow::Result<()> {
    let service = Echo { tool_router }
        .serve(stdio_pipes())
        .await
        .context("starting the stdio service")?;
    service.waiting().await.context("serving stdio")?;
    Ok(())
}

async fn http(
    tool_router: Arc<ToolRouter<Echo>>,
    port: &str,
    sessions: bool,
) -> anyhow::Result<()> {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(sessions)
        .with_json_response(true)
        .with_sse_keep_alive(None);
    let factory = move || {
        Ok(Echo {
            tool_router: Arc::clone(&tool_router),
        })
    };
    let app = if sessions {
        let service =
            StreamableHttpService::new(factory, Arc::new(LocalSessionManager::default()), config);
        axum::Router::new().nest_service("/mcp", service)
    } else {
        let service =
            StreamableHttpService::new(factory, Arc::new(NeverSessionManager::default()), config);
        axum::Router::new().nest_service("/mcp", service)
    };
    // Loopback only: the harness never offers a server to the network.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port.parse::<u16>()?))
        .await
        .context("binding 127.0.0.1")?;
    // Nagle's algorithm would hold back the second write of a session's
    // event stream until the client's delayed ACK (some 40 ms); rmcp's best
    // configuration turns it off.
    let listener = listener.tap_io(|stream| {
        let _unchanged = stream.set_nodelay(true);
    });
    axum::serve(listener, app).await.context("serving HTTP")?;
    Ok(())
}
