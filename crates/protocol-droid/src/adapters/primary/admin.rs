//! The gateway's admin endpoint: a Unix socket on which the operator asks a
//! running gateway for its status and approves tools, without a restart.
//!
//! Authentication is the operating system's: each connection's peer
//! credentials are checked, and only the user the gateway runs as (and
//! root) is answered. The socket is also made readable and writable by its
//! owner only, and a folder made for it is its owner's alone; an existing
//! folder is left as it is. Nothing is reachable from the network.
//!
//! One request per connection, one JSON object per line each way:
//!
//! ```text
//! → {"command": "status"}
//! ← {"ok": true, "status": {"upstreams": […], "unverified": […], "drift": […]}}
//! → {"command": "approve", "ids": ["files/write_file@9a0e…"]}
//! ← {"ok": true, "approved": [{"id": "files/write_file", "digest": "9a0e…"}]}
//! ← {"ok": false, "error": "…"}
//! ```
//!
//! A request is at most [`MAX_REQUEST`] bytes and must arrive within
//! [`IO_TIMEOUT`]. Connections are served each on its own task, at most
//! [`MAX_CONNECTIONS`] at once (more are told so and closed), so a client
//! that stalls holds only its own place until its deadline, never another
//! operator's request, and takes nothing from the sessions the gateway
//! serves. Approvals still happen one at a time, in the gateway.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinHandle;

use crate::application::gateway::{Gateway, UpstreamHealth};
use crate::domain::catalog::{SchemaDigest, ToolId};

/// The most bytes one request may take.
pub const MAX_REQUEST: u64 = 64 * 1024;

/// How long one exchange may take, each way.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// How many admin connections are served at once.
pub const MAX_CONNECTIONS: usize = 16;

/// The answer to a connection past [`MAX_CONNECTIONS`].
const BUSY: &[u8] =
    b"{\"ok\":false,\"error\":\"the gateway is serving as many admin connections as it may; try again\"}\n";

/// What the operator asks.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(tag = "command", rename_all = "kebab-case", deny_unknown_fields)]
#[non_exhaustive]
pub enum AdminRequest {
    /// Every upstream's health, the tools awaiting approval, recent drift.
    Status,
    /// Approve these tools as they are now.
    Approve {
        /// Tool ids (`upstream/tool`), each optionally with the digest the
        /// operator saw (`upstream/tool@<64 hex digits>`): the approval is
        /// then refused if the tool changed since.
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
    use std::os::unix::fs::{DirBuilderExt as _, FileTypeExt as _, PermissionsExt as _};

    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !parent.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)?;
        }
    }
    match std::fs::symlink_metadata(path) {
        // A socket left by a gateway that died is replaced; one that still
        // answers belongs to a running gateway and is not taken over.
        Ok(meta) if meta.file_type().is_socket() => match UnixStream::connect(path).await {
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => std::fs::remove_file(path)?,
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("another gateway serves {}", path.display()),
                ));
            }
            // Not ours to judge (another user's socket, say): left alone.
            Err(e) => return Err(e),
        },
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists and is not a socket; it is left as it is",
                    path.display()
                ),
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    // The user the gateway runs as, from the process itself: what is at
    // the path could have been swapped since it was bound.
    let owner = nix::unistd::geteuid().as_raw();
    let task = tokio::spawn(async move {
        let mut serving = tokio::task::JoinSet::new();
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of descriptors, say: wait rather than spin.
                    tracing::debug!(%error, "accepting an admin connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            // The file's mode alone would leave a window between bind and
            // chmod, and nothing guards a folder that was there before.
            let permitted = stream
                .peer_cred()
                .is_ok_and(|peer| peer.uid() == owner || peer.uid() == 0);
            if !permitted {
                tracing::warn!("an admin connection from another user was refused");
                continue;
            }
            // Each on a task of its own, so that a connection that sends
            // nothing holds only its own place until its deadline, never
            // the operator's next `status`; at most so many at once. The
            // tasks are this one's: when the endpoint goes, so do they.
            while serving.try_join_next().is_some() {}
            if serving.len() >= MAX_CONNECTIONS {
                // Said, not only closed: the operator learns why.
                let _unsent = stream.try_write(BUSY);
                continue;
            }
            let gateway = gateway.clone();
            serving.spawn(async move {
                if let Err(error) = serve_one(&gateway, stream).await {
                    tracing::debug!(%error, "an admin request failed");
                }
            });
        }
    });
    Ok(AdminEndpoint {
        path: path.to_path_buf(),
        task,
    })
}

async fn serve_one(gateway: &Gateway, stream: UnixStream) -> io::Result<()> {
    let (read, mut write) = stream.into_split();
    // Bytes, not a `String`: a line that is not UTF-8 is answered as not a
    // request (the JSON reader says where), rather than dropped unanswered.
    let mut line = Vec::new();
    let read = tokio::time::timeout(
        IO_TIMEOUT,
        BufReader::new(read.take(MAX_REQUEST)).read_until(b'\n', &mut line),
    )
    .await;
    let reply = match read {
        Err(_) => json!({ "ok": false, "error": "no request in time" }),
        Ok(Err(error)) => return Err(error),
        Ok(Ok(_)) if !line.ends_with(b"\n") => {
            json!({ "ok": false, "error": format!("a request is one line of at most {MAX_REQUEST} bytes") })
        }
        Ok(Ok(_)) => match serde_json::from_slice::<AdminRequest>(&line) {
            Ok(request) => answer(gateway, request).await,
            Err(error) => json!({ "ok": false, "error": format!("not a request: {error}") }),
        },
    };
    let mut bytes = serde_json::to_vec(&reply).map_err(io::Error::other)?;
    bytes.push(b'\n');
    tokio::time::timeout(IO_TIMEOUT, write.write_all(&bytes))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the reply was not read in time"))?
}

async fn answer(gateway: &Gateway, request: AdminRequest) -> Value {
    match request {
        AdminRequest::Status => json!({ "ok": true, "status": status(gateway, false) }),
        AdminRequest::Approve { ids } => approve(gateway, &ids).await,
    }
}

/// Approves `ids` (each `ID` or `ID@DIGEST`, all or none) on `gateway`:
/// the reply an operator reads, `ok` saying whether it was done.
pub(crate) async fn approve(gateway: &Gateway, ids: &[String]) -> Value {
    if let Some((id, digest)) = ids.iter().find_map(|id| cut_digest(id).map(|d| (id, d))) {
        return json!({ "ok": false, "error": format!(
            "{id}: `{digest}` is not a digest; give the 64 hex digits `status` shows, or the bare id"
        ) });
    }
    let tools: Vec<(ToolId, Option<SchemaDigest>)> = ids.iter().map(|id| seen(id)).collect();
    match gateway.approve(&tools).await {
        Ok(done) => json!({
            "ok": true,
            "approved": done.approvals.iter().map(|a| json!({
                "id": a.id.as_str(),
                "digest": a.digest.to_string(),
            })).collect::<Vec<_>>(),
            "notKept": done.not_kept,
            "notShared": done.not_shared,
        }),
        Err(error) => json!({ "ok": false, "error": error.to_string() }),
    }
}

/// A tool id, and the digest the operator saw if it carries one
/// (`id@<64 hex digits>`, in either case).
pub(crate) fn seen(id: &str) -> (ToolId, Option<SchemaDigest>) {
    match id
        .rsplit_once('@')
        .and_then(|(tool, hex)| Some((tool, SchemaDigest::from_hex(&hex.to_ascii_lowercase())?)))
    {
        Some((tool, digest)) => (ToolId::new(tool), Some(digest)),
        None => (ToolId::new(id), None),
    }
}

/// What follows the last `@` of `id` when it looks meant as a digest (hex
/// digits only) but is not one (too short, as a digest cut for a line is):
/// refused rather than taken for part of a tool's name.
fn cut_digest(id: &str) -> Option<&str> {
    let (_, hex) = id.rsplit_once('@')?;
    let hexlike = !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit());
    (hexlike && seen(id).1.is_none()).then_some(hex)
}

/// The status an operator reads; with `definitions`, each drifted tool's
/// definitions before and after too (what the admin page shows side by
/// side, and a terminal does not).
pub(crate) fn status(gateway: &Gateway, definitions: bool) -> Value {
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
    let awaiting: Vec<_> = gateway
        .catalog()
        .into_iter()
        .filter(|(_, _, provenance)| !provenance.is_verified())
        .collect();
    // Changes to tools that existed: a tool's first appearance is no news
    // to an operator, and would bury the changes that are.
    let changes: Vec<_> = gateway
        .drift()
        .into_iter()
        .filter(|d| d.old.is_some())
        .collect();
    let trusted = gateway.trusted_digests(
        awaiting
            .iter()
            .map(|(id, _, _)| id)
            .chain(changes.iter().map(|d| &d.id)),
    );
    let trusted_at = |id: &ToolId| trusted.get(id).map(ToString::to_string);
    let unverified: Vec<Value> = awaiting
        .into_iter()
        .map(|(id, digest, _)| {
            json!({
                "id": id.as_str(),
                "digest": digest.to_string(),
                // What it was last trusted at: the page shows a change
                // against that, not against an unapproved one before it.
                "trusted": trusted_at(&id),
            })
        })
        .collect();
    let drift: Vec<Value> = changes
        .into_iter()
        .map(|d| {
            let mut shown = json!({
                "id": d.id.as_str(),
                "old": d.old.map(|x| x.to_string()),
                "new": d.new.map(|x| x.to_string()),
                // What the tool is trusted at now: whether this change's
                // outcome is it, or was superseded.
                "trusted": trusted_at(&d.id),
                "droppedActivations": d.dropped_activations,
            });
            if let (true, Value::Object(shown)) = (definitions, &mut shown) {
                shown.insert(
                    "oldDefinition".to_owned(),
                    json!(d.old_definition.as_deref()),
                );
                shown.insert(
                    "newDefinition".to_owned(),
                    json!(d.new_definition.as_deref()),
                );
            }
            shown
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
