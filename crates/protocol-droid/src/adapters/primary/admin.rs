//! The gateway's admin endpoint: a Unix socket on which the operator asks a
//! running gateway for its status and approves tools, without a restart.
//!
//! Authentication is the socket's: it is created readable and writable by
//! its owner only, in a folder only its owner may enter, so only the user
//! the gateway runs as (and root) can connect. Nothing is reachable from
//! the network.
//!
//! One request per connection, one JSON object per line each way:
//!
//! ```text
//! → {"command": "status"}
//! ← {"ok": true, "status": {"upstreams": […], "unverified": […], "drift": […]}}
//! → {"command": "approve", "ids": ["files/write_file"]}
//! ← {"ok": true, "approved": [{"id": "files/write_file", "digest": "9a0e…"}]}
//! ← {"ok": false, "error": "…"}
//! ```
//!
//! A request is at most [`MAX_REQUEST`] bytes and must arrive within
//! [`IO_TIMEOUT`]; connections are served one at a time, so a client that
//! stalls delays other operators by at most that long and takes nothing
//! from the sessions the gateway serves.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinHandle;

use crate::application::gateway::{Gateway, UpstreamHealth};
use crate::domain::catalog::ToolId;

/// The most bytes one request may take.
pub const MAX_REQUEST: u64 = 64 * 1024;

/// How long one exchange may take, each way.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// What the operator asks.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(tag = "command", rename_all = "kebab-case", deny_unknown_fields)]
#[non_exhaustive]
pub enum AdminRequest {
    /// Every upstream's health, the tools awaiting approval, recent drift.
    Status,
    /// Approve these tools as they are now.
    Approve {
        /// Tool ids (`upstream/tool`).
        ids: Vec<String>,
    },
}

/// The admin endpoint while it serves; dropping it stops serving and
/// removes the socket.
#[derive(Debug)]
pub struct AdminEndpoint {
    path: PathBuf,
    task: JoinHandle<()>,
}

impl AdminEndpoint {
    /// Where the socket is.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for AdminEndpoint {
    fn drop(&mut self) {
        self.task.abort();
        let _removed = std::fs::remove_file(&self.path);
    }
}

/// Serves `gateway`'s admin endpoint at `path`.
///
/// # Errors
///
/// When the socket cannot be made there, or another gateway already
/// answers on it.
pub async fn serve_admin(gateway: Gateway, path: &Path) -> io::Result<AdminEndpoint> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    if path.exists() {
        // A socket left by a gateway that died is replaced; one that still
        // answers belongs to a running gateway and is not taken over.
        if UnixStream::connect(path).await.is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("another gateway serves {}", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            if let Err(error) = serve_one(&gateway, stream).await {
                tracing::debug!(%error, "an admin request failed");
            }
        }
    });
    Ok(AdminEndpoint {
        path: path.to_path_buf(),
        task,
    })
}

async fn serve_one(gateway: &Gateway, stream: UnixStream) -> io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    let read = tokio::time::timeout(
        IO_TIMEOUT,
        BufReader::new(read.take(MAX_REQUEST)).read_line(&mut line),
    )
    .await;
    let reply = match read {
        Err(_) => json!({ "ok": false, "error": "no request in time" }),
        Ok(Err(error)) => return Err(error),
        Ok(Ok(_)) if !line.ends_with('\n') => {
            json!({ "ok": false, "error": format!("a request is one line of at most {MAX_REQUEST} bytes") })
        }
        Ok(Ok(_)) => match serde_json::from_str::<AdminRequest>(&line) {
            Ok(request) => answer(gateway, request),
            Err(error) => json!({ "ok": false, "error": format!("not a request: {error}") }),
        },
    };
    let mut bytes = serde_json::to_vec(&reply).map_err(io::Error::other)?;
    bytes.push(b'\n');
    tokio::time::timeout(IO_TIMEOUT, write.write_all(&bytes))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the reply was not read in time"))?
}

fn answer(gateway: &Gateway, request: AdminRequest) -> Value {
    match request {
        AdminRequest::Status => json!({ "ok": true, "status": status(gateway) }),
        AdminRequest::Approve { ids } => {
            let ids: Vec<ToolId> = ids.iter().map(|id| ToolId::new(id.as_str())).collect();
            match gateway.approve(&ids) {
                Ok(done) => json!({
                    "ok": true,
                    "approved": done.approvals.iter().map(|a| json!({
                        "id": a.id.as_str(),
                        "digest": a.digest.to_string(),
                    })).collect::<Vec<_>>(),
                    "notKept": done.not_kept,
                }),
                Err(error) => json!({ "ok": false, "error": error.to_string() }),
            }
        }
    }
}

/// The status an operator reads.
fn status(gateway: &Gateway) -> Value {
    let upstreams: Vec<Value> = gateway
        .upstreams()
        .into_iter()
        .map(|u| {
            let state = match &u.health {
                UpstreamHealth::Up { .. } => "up",
                UpstreamHealth::Down { .. } => "down",
                _ => "connecting",
            };
            json!({
                "name": u.name,
                "state": state,
                "health": u.health.to_string(),
                "tools": u.tools,
            })
        })
        .collect();
    let unverified: Vec<Value> = gateway
        .catalog()
        .into_iter()
        .filter(|(_, _, provenance)| !provenance.is_verified())
        .map(|(id, digest, _)| json!({ "id": id.as_str(), "digest": digest.to_string() }))
        .collect();
    // Changes to tools that existed: a tool's first appearance is no news
    // to an operator, and would bury the changes that are.
    let drift: Vec<Value> = gateway
        .drift()
        .into_iter()
        .filter(|d| d.old.is_some())
        .map(|d| {
            json!({
                "id": d.id.as_str(),
                "old": d.old.map(|x| x.to_string()),
                "new": d.new.map(|x| x.to_string()),
                "droppedActivations": d.dropped_activations,
            })
        })
        .collect();
    json!({ "upstreams": upstreams, "unverified": unverified, "drift": drift })
}

/// Sends `request` to the gateway whose admin endpoint is at `path`, and
/// returns its answer: what the `ok: true` reply carries.
///
/// # Errors
///
/// When no gateway answers there, the reply is not one, or the gateway
/// refused the request (its reason).
pub async fn admin_request(path: &Path, request: &AdminRequest) -> io::Result<Value> {
    let stream = UnixStream::connect(path).await.map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("no gateway answers at {}: {e}", path.display()),
        )
    })?;
    let (read, mut write) = stream.into_split();
    let mut bytes = serde_json::to_vec(request).map_err(io::Error::other)?;
    bytes.push(b'\n');
    tokio::time::timeout(IO_TIMEOUT, write.write_all(&bytes))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the gateway did not read"))??;
    let mut line = String::new();
    tokio::time::timeout(
        IO_TIMEOUT,
        BufReader::new(read.take(16 * 1024 * 1024)).read_line(&mut line),
    )
    .await
    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the gateway did not answer"))??;
    let reply: Value = serde_json::from_str(&line)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("not a reply: {e}")))?;
    if reply.get("ok") == Some(&Value::Bool(true)) {
        return Ok(reply);
    }
    let error = reply
        .get("error")
        .and_then(Value::as_str)
        .unwrap_or("the gateway refused");
    Err(io::Error::other(error.to_owned()))
}
