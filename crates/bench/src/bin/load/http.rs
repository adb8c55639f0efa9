//! `tools/call` over Streamable HTTP, stateless and in sessions, and the
//! memory an idle session costs.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{ACCEPT, CONTENT_TYPE, HOST};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use protocol_droid_bench::{
    LEGACY_VERSION, STATELESS_VERSION, initialize_request, initialized_notification,
    write_named_echo_call, write_named_stateless_echo_call,
};

use crate::servers::{Binaries, Target, free_port, memory};
use crate::stats::{Sample, float};

/// Which era's requests to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Era {
    /// 2026-07-28: no session; headers and `_meta` on every request.
    Stateless,
    /// 2025-11-25: one session per connection, opened by `initialize`.
    Sessions,
}

/// One keep-alive connection to the server, and its session if it has one.
struct Client {
    sender: SendRequest<Full<Bytes>>,
    host: String,
    session: Option<String>,
    /// The echo tool's name where the server offers it.
    tool: &'static str,
}

impl Client {
    async fn connect(port: u16, target: Target) -> anyhow::Result<Self> {
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .context("connecting to 127.0.0.1")?;
        stream.set_nodelay(true)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .context("the HTTP handshake")?;
        tokio::spawn(async move {
            // The connection ends when the client is dropped; an error here
            // shows up as the next request failing.
            let _closed = connection.await;
        });
        Ok(Self {
            sender,
            host: format!("127.0.0.1:{port}"),
            session: None,
            tool: target.echo_tool(),
        })
    }

    /// POSTs `body` to `/mcp`; the status, the session id the server named,
    /// and the body.
    async fn post(
        &mut self,
        body: Vec<u8>,
        headers: &[(&'static str, &str)],
    ) -> anyhow::Result<(StatusCode, Option<String>, Bytes)> {
        let mut request = Request::post("/mcp")
            .header(HOST, &self.host)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session);
        }
        self.sender.ready().await.context("the connection closed")?;
        let response = self
            .sender
            .send_request(request.body(Full::new(Bytes::from(body)))?)
            .await
            .context("sending a request")?;
        let status = response.status();
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, session, body))
    }

    /// Opens a legacy session on this connection.
    async fn open_session(&mut self) -> anyhow::Result<()> {
        let (status, session, body) = self
            .post(serde_json::to_vec(&initialize_request())?, &[])
            .await?;
        if status != StatusCode::OK {
            bail!("initialize: {status} {}", String::from_utf8_lossy(&body));
        }
        self.session = Some(session.context("initialize named no Mcp-Session-Id")?);
        let headers = [("mcp-protocol-version", LEGACY_VERSION)];
        let (status, _, body) = self
            .post(serde_json::to_vec(&initialized_notification())?, &headers)
            .await?;
        if !status.is_success() {
            bail!(
                "notifications/initialized: {status} {}",
                String::from_utf8_lossy(&body)
            );
        }
        Ok(())
    }

    /// Calls `echo` once, as `era` asks.
    async fn call(&mut self, era: Era, id: u64, body: &mut Vec<u8>) -> anyhow::Result<()> {
        body.clear();
        let (status, _, reply) = match era {
            Era::Stateless => {
                write_named_stateless_echo_call(id, self.tool, body);
                let headers = [
                    ("mcp-protocol-version", STATELESS_VERSION),
                    ("mcp-method", "tools/call"),
                    ("mcp-name", self.tool),
                ];
                self.post(body.clone(), &headers).await?
            }
            Era::Sessions => {
                write_named_echo_call(id, self.tool, body);
                let headers = [("mcp-protocol-version", LEGACY_VERSION)];
                self.post(body.clone(), &headers).await?
            }
        };
        // A JSON body or an event stream: either way the reply's members
        // appear as written, and a refusal has a top-level `error`.
        if status != StatusCode::OK
            || !contains(&reply, br#""result""#)
            || contains(&reply, br#""error""#)
        {
            bail!("call {id}: {status} {}", String::from_utf8_lossy(&reply));
        }
        Ok(())
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// Measures `target` with `concurrency` connections, each calling `echo`
/// as fast as its replies come.
pub(crate) async fn measure(
    binaries: &Binaries,
    target: Target,
    era: Era,
    concurrency: u64,
    warmup: Duration,
    measured: Duration,
) -> anyhow::Result<Sample> {
    let port = free_port()?;
    let server = binaries.http(target, port, era == Era::Sessions).await?;
    let (calls, latencies, elapsed) =
        drive(port, target, era, concurrency, warmup, measured).await?;
    let peak = memory(&server)?.peak_kib;
    Ok(Sample::new(calls, latencies, elapsed, peak))
}

/// Drives whatever listens on `port` as `target` would be driven: the
/// calls answered in the measured window, their latencies in nanoseconds,
/// and how long the window took.
pub(crate) async fn drive(
    port: u16,
    target: Target,
    era: Era,
    concurrency: u64,
    warmup: Duration,
    measured: Duration,
) -> anyhow::Result<Phase> {
    let mut clients = Vec::new();
    for _ in 0..concurrency {
        let mut client = Client::connect(port, target).await?;
        if era == Era::Sessions {
            client.open_session().await?;
        }
        clients.push(client);
    }
    let (clients, _) = phase(clients, era, warmup).await?;
    let (_, measured) = phase(clients, era, measured).await?;
    Ok(measured)
}

pub(crate) type Phase = (u64, Vec<u64>, Duration);

/// Every client calls until `duration` has passed.
async fn phase(
    clients: Vec<Client>,
    era: Era,
    duration: Duration,
) -> anyhow::Result<(Vec<Client>, Phase)> {
    let started = Instant::now();
    let deadline = started + duration;
    let mut workers = Vec::new();
    for (worker, mut client) in (0_u64..).zip(clients) {
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut body = Vec::with_capacity(512);
            // Ids only have to differ within a session or connection.
            let mut id = worker << 32;
            let mut last = Instant::now();
            while last < deadline {
                let sent = Instant::now();
                client.call(era, id, &mut body).await?;
                last = Instant::now();
                latencies.push(u64::try_from((last - sent).as_nanos()).unwrap_or(u64::MAX));
                id += 1;
            }
            anyhow::Ok((client, latencies, last))
        }));
    }
    let mut clients = Vec::new();
    let mut latencies = Vec::new();
    let mut finished = started;
    for worker in workers {
        let (client, mut own, last) = worker.await??;
        clients.push(client);
        latencies.append(&mut own);
        finished = finished.max(last);
    }
    let calls = u64::try_from(latencies.len())?;
    Ok((clients, (calls, latencies, finished - started)))
}

/// The server's resident set grows by this much per idle legacy session,
/// in KiB: `sessions` are opened (and left open) after one warm-up session,
/// and the growth is divided among them.
pub(crate) async fn memory_per_session(
    binaries: &Binaries,
    target: Target,
    sessions: u64,
) -> anyhow::Result<f64> {
    let port = free_port()?;
    let server = binaries.http(target, port, true).await?;
    let mut warm = Client::connect(port, target).await?;
    warm.open_session().await?;
    warm.call(Era::Sessions, 1, &mut Vec::new()).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = memory(&server)?.resident_kib;

    // Sixteen connections open the sessions; each session then sits idle,
    // as a client that went quiet would leave it.
    let connections = 16;
    let mut openers = Vec::new();
    for connection in 0..connections {
        openers.push(tokio::spawn(async move {
            let mut client = Client::connect(port, target).await?;
            let mut opened = 0_u64;
            let mut n = connection;
            while n < sessions {
                client.session = None;
                client.open_session().await?;
                opened += 1;
                n += connections;
            }
            anyhow::Ok(opened)
        }));
    }
    let mut opened = 0;
    for opener in openers {
        opened += opener.await??;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = memory(&server)?.resident_kib;
    drop(warm);
    Ok(float(after.saturating_sub(before)) / float(opened.max(1)))
}
