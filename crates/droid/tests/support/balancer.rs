//! A real load balancer (Debian's haproxy, round-robin, no stickiness) in
//! front of several instances, on loopback ports of the test's own.
//! `scripts/services.sh` installs it.

use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use protocol_droid_test_support::redis::free_port;
use serde_json::{Value, json};

use super::{Files, Running, TestError, raw_post};

/// Waits until `ready` holds, for at most 20 seconds.
pub(crate) fn wait_for(what: &str, mut ready: impl FnMut() -> bool) -> Result<(), TestError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if ready() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("{what} was not ready within 20 s").into())
}

/// haproxy in front of `backends`, round-robin, naming the instance that
/// served each answer in `X-Served-By`.
pub(crate) struct Balancer {
    _process: Running,
    _files: Files,
    /// Where it listens, `HOST:PORT`.
    pub(crate) address: String,
}

impl Balancer {
    /// Starts haproxy in front of `backends` (each `HOST:PORT`).
    pub(crate) fn start(backends: &[String]) -> Result<Self, TestError> {
        let port = free_port()?;
        let servers: String = backends
            .iter()
            .enumerate()
            .map(|(i, address)| format!("  server droid{i} {address}\n"))
            .collect();
        let config = format!(
            "global\n  maxconn 256\n\
             defaults\n  mode http\n  timeout connect 2s\n  timeout client 30s\n  timeout server 30s\n\
             frontend mcp\n  bind 127.0.0.1:{port}\n  default_backend droids\n\
             backend droids\n  balance roundrobin\n  http-response set-header X-Served-By %[srv_name]\n\
             {servers}"
        );
        let files = Files::fresh("droid-haproxy")?;
        let path = files.write("haproxy.cfg", &config)?;
        let process = Command::new("haproxy")
            .args(["-db", "-f", &path])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting haproxy (scripts/services.sh installs it): {e}"))?;
        let balancer = Self {
            _process: Running(process),
            _files: files,
            address: format!("127.0.0.1:{port}"),
        };
        wait_for("haproxy", || TcpStream::connect(&balancer.address).is_ok())?;
        Ok(balancer)
    }
}

/// A raw HTTP reply through the balancer: its status, the instance that
/// served it (`X-Served-By`), and its body as JSON (`Null` when it is not).
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) served_by: Option<String>,
    pub(crate) body: Value,
    pub(crate) raw: String,
}

impl Reply {
    /// Reads `raw`, a whole HTTP/1.1 reply.
    pub(crate) fn parse(raw: String) -> Self {
        let status = raw
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or(0);
        let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
        let served_by = head.lines().find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("x-served-by")
                .then(|| value.trim().to_owned())
        });
        let body = serde_json::from_str(body).unwrap_or(Value::Null);
        Self {
            status,
            served_by,
            body,
            raw,
        }
    }
}

/// The params of a 2025-11-25 `initialize`.
pub(crate) fn hello() -> Value {
    json!({ "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": { "name": "scale-out", "version": "1" } })
}

/// A legacy request to `address` in session `session` (none: the
/// handshake), its body as raw HTTP; the session id a handshake is given.
pub(crate) fn legacy(
    address: &str,
    session: Option<&str>,
    method: &str,
    params: &Value,
) -> Result<(Reply, Option<String>), TestError> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    legacy_as(address, session, id, method, params)
}

/// As [`legacy`], as request `id`: what a retry of a request sends again.
pub(crate) fn legacy_as(
    address: &str,
    session: Option<&str>,
    id: u64,
    method: &str,
    params: &Value,
) -> Result<(Reply, Option<String>), TestError> {
    let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
    let mut headers = vec!["MCP-Protocol-Version: 2025-11-25".to_owned()];
    if let Some(session) = session {
        headers.push(format!("Mcp-Session-Id: {session}"));
    }
    let raw = raw_post(address, &headers, &body.to_string())?;
    let id = raw.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("mcp-session-id")
            .then(|| value.trim().to_owned())
    });
    Ok((Reply::parse(raw), id))
}
