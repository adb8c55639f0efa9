//! The MCP servers of a session: connecting to every `mcpServers` entry at
//! once, and finding a tool, prompt or resource among them.
//!
//! Rules, as `docs/acp.md` states them: a stdio entry is started with its
//! `env` added to this process's environment; an `http` entry is tried as
//! Streamable HTTP and then as HTTP+SSE, with its headers on every request;
//! an `sse` entry speaks 2024-11-05 HTTP+SSE, where only an `Authorization`
//! header can be sent. An entry of another `type` (`acp`), a duplicate name
//! or a server that does not connect in time is skipped and reported to the
//! user; the session goes on with the rest.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use protocol_droid::adapters::primary::acp::{McpServer, McpServerHttp, McpServerStdio};
use protocol_droid::adapters::secondary::authorizer::{AuthError, Authorizer, Challenge};
use protocol_droid::adapters::secondary::child::ChildOptions;
use protocol_droid::adapters::secondary::connect::{ConnectOptions, Target, connect};
use protocol_droid::adapters::secondary::http::{HttpOptions, LegacySse};
use protocol_droid::adapters::secondary::tls::Trust;
use protocol_droid::application::client::{Client, ClientError, ClientOptions, inbound_queue};
use protocol_droid::domain::ProtocolVersion;
use protocol_droid::wire::tools::Tool;

/// A connected MCP server.
#[derive(Debug)]
pub(crate) struct Connected {
    /// The entry's `name`: the `SERVER/` of qualified names.
    pub(crate) name: String,
    /// The entry it was connected from: what the user's grants are for.
    entry: McpServer,
    /// The connection.
    pub(crate) client: Client,
    /// The tools as last listed; `None` until listed.
    tools: Mutex<Option<Arc<[Tool]>>>,
    /// The tools of this server the user allowed for the rest of the
    /// session. Kept with the server, not by `SERVER/TOOL`, which two
    /// servers' tools may both spell; a `session/load` carries them over
    /// only to a server connected from the same entry.
    always_allowed: Mutex<HashSet<String>>,
}

impl Connected {
    /// Whether the user allowed this server's `tool` for the rest of the
    /// session.
    pub(crate) fn always_allowed(&self, tool: &str) -> bool {
        lock(&self.always_allowed).contains(tool)
    }

    /// Remembers that the user allowed this server's `tool` for the rest
    /// of the session.
    pub(crate) fn allow_always(&self, tool: &str) {
        lock(&self.always_allowed).insert(tool.to_owned());
    }

    /// Takes over the grants of `before`, if it was connected from the
    /// same entry: a server named alike but started otherwise is another
    /// server, and asks again.
    pub(crate) fn inherit_grants(&self, before: &Self) {
        if self.entry == before.entry {
            let granted = lock(&before.always_allowed).clone();
            lock(&self.always_allowed).extend(granted);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An entry that gave no connection, and why, in words for the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Failed {
    /// The entry's `name`.
    pub(crate) name: String,
    /// Why.
    pub(crate) reason: String,
}

/// Why `name` cannot name a server, if it cannot.
fn unfit_name(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        // Its tools would be `/TOOL`, and the next unnamed server's the same.
        Some("a server needs a name, which its tools are named after (`SERVER/TOOL`)")
    } else if name.contains('/') {
        // `SERVER/TOOL` splits at the first `/`: a server named with one
        // would make two servers' tools one name, and a grant for one the
        // other's.
        Some("a server's name cannot hold `/`, which separates it from the tool's")
    } else if name.chars().any(|c| c.is_control() || reorders(c)) {
        // Shown to the user in every tool's title, where a terminal would
        // act on an escape sequence, and a direction mark would show the
        // title's text in another order than it has.
        Some("a server's name cannot hold control characters or direction marks")
    } else {
        None
    }
}

/// Whether `c` changes the order text is shown in (Unicode's bidirectional
/// marks, embeddings, overrides and isolates).
const fn reorders(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Connects to every entry at once, each within `timeout`.
pub(crate) async fn connect_all(
    entries: &[McpServer],
    cwd: Option<&str>,
    timeout: Duration,
    trust: &Trust,
) -> (Vec<Arc<Connected>>, Vec<Failed>) {
    let mut failed = Vec::new();
    let mut attempts = Vec::new();
    let mut seen = HashMap::new();
    for entry in entries {
        let name = entry_name(entry);
        if let Some(reason) =
            unfit_name(&name).filter(|_| !matches!(entry, McpServer::Invalid { .. }))
        {
            failed.push(Failed {
                // Told to the client as written, but never its controls.
                name: name.escape_debug().to_string(),
                reason: reason.to_owned(),
            });
            continue;
        }
        // An unreadable entry is reported for what it is, however many
        // share its stand-in name.
        let readable = !matches!(entry, McpServer::Invalid { .. });
        if readable && seen.insert(name.clone(), ()).is_some() {
            failed.push(Failed {
                name,
                reason: "another server of this session has the same name".to_owned(),
            });
            continue;
        }
        let kept = entry.clone();
        let entry = entry.clone();
        let cwd = cwd.map(str::to_owned);
        let trust = trust.clone();
        let attempt = tokio::spawn(async move {
            let connecting = connect_one(&entry, cwd.as_deref(), &trust);
            match tokio::time::timeout(timeout, connecting).await {
                Ok(outcome) => outcome,
                Err(_) => Err(format!("no answer within {} s", timeout.as_secs())),
            }
        });
        attempts.push((name, kept, attempt));
    }
    let mut connected = Vec::new();
    for (name, entry, attempt) in attempts {
        match attempt.await {
            Ok(Ok(client)) => connected.push(Arc::new(Connected {
                name,
                entry,
                client,
                tools: Mutex::new(None),
                always_allowed: Mutex::default(),
            })),
            Ok(Err(reason)) => failed.push(Failed { name, reason }),
            Err(join) => failed.push(Failed {
                name,
                reason: format!("the connection attempt stopped: {join}"),
            }),
        }
    }
    (connected, failed)
}

fn entry_name(entry: &McpServer) -> String {
    match entry {
        McpServer::Stdio(stdio) => stdio.name.clone(),
        McpServer::Http(http) | McpServer::Sse(http) => http.name.clone(),
        McpServer::Other { raw, transport } => raw
            .get("name")
            .and_then(serde_json::Value::as_str)
            .map_or_else(|| format!("({transport} server)"), str::to_owned),
        McpServer::Invalid { raw, .. } => raw
            .get("name")
            .and_then(serde_json::Value::as_str)
            .map_or_else(|| "(an unreadable entry)".to_owned(), str::to_owned),
    }
}

async fn connect_one(
    entry: &McpServer,
    cwd: Option<&str>,
    trust: &Trust,
) -> Result<Client, String> {
    let options = ConnectOptions {
        client: client_options(),
        ..ConnectOptions::default()
    };
    match entry {
        McpServer::Stdio(stdio) => connect(&stdio_target(stdio, cwd), options)
            .await
            .map_err(|e| e.to_string()),
        McpServer::Http(http) => {
            let target = Target::url(&http.url).map_err(|e| e.to_string())?;
            let headers = http
                .headers
                .iter()
                .map(|h| (h.name.as_str(), h.value.as_str()));
            let options = ConnectOptions {
                http: http_options(headers, trust)?,
                ..options
            };
            connect(&target, options).await.map_err(|e| e.to_string())
        }
        McpServer::Sse(sse) => connect_sse(sse, trust).await,
        McpServer::Other { transport, .. } => Err(format!(
            "`{transport}` servers are not supported (stdio, http and sse are)"
        )),
        McpServer::Invalid { why, .. } => Err(format!("the entry could not be read: {why}")),
    }
}

/// HTTP options sending `headers` with every request, kept out of debug
/// output (a session's headers often carry keys).
fn http_options<'a>(
    headers: impl Iterator<Item = (&'a str, &'a str)>,
    trust: &Trust,
) -> Result<HttpOptions, String> {
    let mut options = HttpOptions {
        trust: trust.clone(),
        ..HttpOptions::default()
    };
    for (name, value) in headers {
        options
            .add_header(name, value)
            .map_err(|e| format!("a header cannot be sent: {e}"))?;
    }
    Ok(options)
}

fn client_options() -> ClientOptions {
    let mut options = ClientOptions::default();
    "droid-acp".clone_into(&mut options.client_info.name);
    options
}

/// A stdio server started in the session's working directory, as ACP asks.
fn stdio_target(stdio: &McpServerStdio, cwd: Option<&str>) -> Target {
    let mut child = ChildOptions::new(&stdio.command, &stdio.args);
    child.cwd = cwd.map(std::path::PathBuf::from);
    child.env = stdio
        .env
        .iter()
        .map(|pair| (pair.name.clone().into(), pair.value.clone().into()))
        .collect();
    Target::Command(child)
}

async fn connect_sse(sse: &McpServerHttp, trust: &Trust) -> Result<Client, String> {
    let Target::Url(url) = Target::url(&sse.url).map_err(|e| e.to_string())? else {
        return Err(format!("{} is not a URL", sse.url));
    };
    let authorization = sse
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("authorization"))
        .map(|h| {
            let authorizer: Arc<dyn Authorizer> = Arc::new(FixedAuthorization(h.value.clone()));
            authorizer
        });
    // The other headers go with every request as they are.
    let headers = sse
        .headers
        .iter()
        .filter(|h| !h.name.eq_ignore_ascii_case("authorization"))
        .map(|h| (h.name.as_str(), h.value.as_str()));
    let http = http_options(headers, trust)?;
    let (tx, rx) = inbound_queue();
    let link = LegacySse::connect(url, tx, authorization, &http)
        .await
        .map_err(|e| e.to_string())?;
    let mut options = client_options();
    options.revisions = vec![ProtocolVersion::V2024_11_05];
    Client::connect(Arc::new(link), rx, options)
        .await
        .map_err(|e| e.to_string())
}

/// The `Authorization` header an `sse` entry gave, sent as it is (the
/// entry's other headers go as plain headers).
struct FixedAuthorization(String);

impl std::fmt::Debug for FixedAuthorization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A credential; it must not reach logs.
        f.debug_struct("FixedAuthorization").finish_non_exhaustive()
    }
}

type AuthFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, AuthError>> + Send + 'a>>;

impl Authorizer for FixedAuthorization {
    fn authorization(&self) -> AuthFuture<'_, Option<String>> {
        let value = self.0.clone();
        Box::pin(async move { Ok(Some(value)) })
    }

    fn challenged<'a>(&'a self, challenge: &'a Challenge) -> AuthFuture<'a, ()> {
        let status = challenge.status;
        Box::pin(async move {
            Err(AuthError::Refused(format!(
                "the server refused the session's Authorization header ({status})"
            )))
        })
    }
}

impl Connected {
    /// The tools, listed once and then kept; `refresh` lists them again.
    pub(crate) async fn tools(&self, refresh: bool) -> Result<Arc<[Tool]>, ClientError> {
        if !refresh {
            if let Some(tools) = self
                .tools
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
            {
                return Ok(tools);
            }
        }
        let tools: Arc<[Tool]> = self.client.list_all_tools().await?.into();
        *self.tools.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&tools));
        Ok(tools)
    }

    /// Whether the server said it has `capability` (`tools`, `prompts`,
    /// `resources`).
    pub(crate) fn offers(&self, capability: &str) -> bool {
        self.client.server_supports(capability)
    }
}

/// A tool found among the session's servers.
#[derive(Clone, Debug)]
pub(crate) struct FoundTool {
    /// Its server.
    pub(crate) server: Arc<Connected>,
    /// Its definition.
    pub(crate) tool: Tool,
}

impl FoundTool {
    /// `SERVER/TOOL`.
    pub(crate) fn qualified(&self) -> String {
        format!("{}/{}", self.server.name, self.tool.name)
    }

    /// Whether the server says the tool may destroy data. Only an explicit
    /// `destructiveHint: true` counts, and `readOnlyHint: true` overrides
    /// it (the spec says the destructive hint means nothing then).
    /// MCP's default for a missing hint is "destructive", but asking before
    /// every unannotated call would teach users to allow without reading.
    pub(crate) fn destructive(&self) -> bool {
        self.tool
            .annotations
            .as_ref()
            .is_some_and(|a| a.destructive_hint == Some(true) && a.read_only_hint != Some(true))
    }

    /// The ACP `ToolKind` its annotations suggest.
    pub(crate) fn kind(&self) -> &'static str {
        let read_only = self
            .tool
            .annotations
            .as_ref()
            .is_some_and(|a| a.read_only_hint == Some(true));
        if read_only { "read" } else { "other" }
    }
}

/// Finds `name` (`SERVER/TOOL` or `TOOL`) among `servers`' tools, listing
/// them again once when it is not among those already listed.
///
/// A name a server's own prefix qualifies is looked for on that server
/// first, and a match there is the answer (matches on two servers whose
/// names nest are named back, as ambiguous): a call naming its server
/// waits for no other server's listing, so one that is slow or never
/// answers costs it nothing. Otherwise every server is listed at once, not
/// one after another, but for a named one whose listing just failed.
///
/// The error is a sentence for the user.
pub(crate) async fn find_tool(servers: &[Arc<Connected>], name: &str) -> Result<FoundTool, String> {
    let mut found = Vec::new();
    let mut failed: Vec<&Arc<Connected>> = Vec::new();
    for server in servers {
        let Some(qualified) = qualified_on(server, name) else {
            continue;
        };
        for refresh in [false, true] {
            let Ok(tools) = server.tools(refresh).await else {
                failed.push(server);
                break;
            };
            if let Some(tool) = tools.iter().find(|tool| tool.name == qualified) {
                found.push(FoundTool {
                    server: Arc::clone(server),
                    tool: tool.clone(),
                });
                break;
            }
        }
    }
    if let Some(answer) = one_of(found, name) {
        return answer;
    }
    for refresh in [false, true] {
        let mut found = Vec::new();
        let listed = futures_util::future::join_all(servers.iter().map(|server| {
            let skipped = failed.iter().any(|f| Arc::ptr_eq(f, server));
            async move {
                if skipped {
                    None
                } else {
                    server.tools(refresh).await.ok()
                }
            }
        }))
        .await;
        for (server, tools) in servers.iter().zip(listed) {
            let Some(tools) = tools else {
                continue;
            };
            let qualified = qualified_on(server, name);
            for tool in tools.iter() {
                if tool.name == name || qualified == Some(tool.name.as_str()) {
                    found.push(FoundTool {
                        server: Arc::clone(server),
                        tool: tool.clone(),
                    });
                }
            }
        }
        // A qualified match wins over the same words read as a bare name;
        // a bare name several servers have stays ambiguous.
        if found.len() > 1 && found.iter().any(|f| f.qualified() == name) {
            found.retain(|f| f.qualified() == name);
        }
        if let Some(answer) = one_of(found, name) {
            return answer;
        }
    }
    Err(format!(
        "No tool `{name}` on this session's servers. `tools` lists them."
    ))
}

/// What `name` names on `server` when it starts with the server's name and
/// a slash.
fn qualified_on<'n>(server: &Connected, name: &'n str) -> Option<&'n str> {
    name.strip_prefix(server.name.as_str())
        .and_then(|rest| rest.strip_prefix('/'))
}

/// The one tool `found` holds; an error naming them all when it holds
/// several; `None` when it holds none.
fn one_of(mut found: Vec<FoundTool>, name: &str) -> Option<Result<FoundTool, String>> {
    match found.len() {
        0 => None,
        1 => found.pop().map(Ok),
        _ => {
            let names: Vec<String> = found.iter().map(FoundTool::qualified).collect();
            Some(Err(format!(
                "More than one server has `{name}`; name one of: {}.",
                names.join(", ")
            )))
        }
    }
}

/// Closes every connection, each within `grace`.
pub(crate) async fn close_all(servers: &[Arc<Connected>], grace: Duration) {
    let closing: Vec<_> = servers
        .iter()
        .map(|server| {
            let client = server.client.clone();
            tokio::spawn(async move {
                let _closed_in_time = tokio::time::timeout(grace, client.close()).await;
            })
        })
        .collect();
    for task in closing {
        let _finished = task.await;
    }
}
