//! From a target (a command line or a URL) to a connected client.
//!
//! A URL is tried as Streamable HTTP first, with the era probe the client
//! always runs. When the server refuses the POST of `initialize` with `400`,
//! `404` or `405` and no JSON-RPC answer, it may be a 2024-11-05 HTTP+SSE
//! server, so the client GETs the URL and, if an `endpoint` event comes,
//! speaks that transport instead.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::sync::Arc;

use url::Url;

use super::authorizer::Authorizer;
use super::child::{ChildOptions, ChildProcess};
use super::http::{HttpOptions, LegacySse, StreamableHttp};
use crate::application::bridge::{Connector, ConnectorError};
use crate::application::client::{Client, ClientError, ClientOptions, LinkError, inbound_queue};
use crate::domain::ProtocolVersion;

/// What to connect to.
#[derive(Clone, Debug)]
pub enum Target {
    /// A server run as a child process, over its stdio.
    Command(ChildOptions),
    /// A server at an HTTP URL.
    Url(Url),
}

impl Target {
    /// A command line: the program, then its arguments.
    ///
    /// # Errors
    ///
    /// When `argv` is empty.
    pub fn command<I, S>(argv: I) -> Result<Self, ConnectError>
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let mut argv = argv.into_iter().map(Into::into);
        let program = argv
            .next()
            .ok_or_else(|| ConnectError::Target("an empty command line".to_owned()))?;
        Ok(Self::Command(ChildOptions::new(program, argv)))
    }

    /// A URL.
    ///
    /// # Errors
    ///
    /// When `url` is not an `http` or `https` URL.
    pub fn url(url: &str) -> Result<Self, ConnectError> {
        // A URL that does not parse is not repeated: it may hold a password.
        let url = Url::parse(url).map_err(|e| ConnectError::Target(format!("not a URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            // Not repeated, not even its scheme: without `//`, what comes
            // first may be a key (`sk-live-…:x@host` reads as the scheme
            // `sk-live-…`).
            return Err(ConnectError::Target(
                "the URL is not http or https (is `http://` missing?): only http and https URLs are servers"
                    .to_owned(),
            ));
        }
        Ok(Self::Url(url))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Command(options) => {
                write!(f, "{}", options.program.to_string_lossy())?;
                for arg in &options.args {
                    write!(f, " {}", arg.to_string_lossy())?;
                }
                Ok(())
            }
            // Userinfo is a credential; it never reaches a message or a log.
            Self::Url(url) => f.write_str(&super::tls::redacted(url)),
        }
    }
}

/// How to connect.
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    /// How the client behaves.
    pub client: ClientOptions,
    /// Credentials for HTTP servers.
    pub authorizer: Option<Arc<dyn Authorizer>>,
    /// How the HTTP transport behaves.
    pub http: HttpOptions,
}

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The target is not usable.
    #[error("bad target: {0}")]
    Target(String),
    /// The child process could not be started.
    #[error("could not start the server: {0}")]
    Spawn(#[from] std::io::Error),
    /// The server was reached but the client could not settle with it.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// Connects to `target` and settles a revision.
///
/// # Errors
///
/// [`ConnectError`] when the server cannot be started or reached, or no
/// revision is shared.
///
/// # Examples
///
/// A client that lists a server's tools and calls one:
///
/// ```no_run
/// use protocol_droid::adapters::secondary::connect::{ConnectOptions, Target, connect};
/// use protocol_droid::application::client::RequestOptions;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let target = Target::url("http://127.0.0.1:8931/mcp")?;
/// let client = connect(&target, ConnectOptions::default()).await?;
/// for tool in client.list_all_tools().await? {
///     println!("{}", tool.name);
/// }
/// let reply = client.call_tool("fixture/add", None, &RequestOptions::default()).await?;
/// println!("{:?}", reply.value.content);
/// # Ok(())
/// # }
/// ```
///
/// A gateway whose one upstream is a server from npm, served on stdio (the
/// gateway opens it through [`connector`], and again whenever it dies):
///
/// ```no_run
/// use protocol_droid::adapters::primary::stdio::{StdioOptions, serve_process};
/// use protocol_droid::adapters::secondary::connect::{ConnectOptions, Target, connector};
/// use protocol_droid::application::gateway::{Disclosure, Gateway, Pins, Trust, UpstreamOptions};
/// use protocol_droid::application::server::Server;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let gateway = Gateway::build(
///     Server::builder("my-gateway", "1.0.0"),
///     Disclosure::Default,
///     Pins::default(),
/// )?;
/// let target = Target::command(["npx", "-y", "@modelcontextprotocol/server-everything"])?;
/// let mut options = UpstreamOptions::default();
/// options.trust = Trust::OnFirstUse;
/// let upstream = connector(target, ConnectOptions::default());
/// gateway.add_upstream("everything", upstream, options).await?;
/// serve_process(gateway.server().clone(), StdioOptions::default()).await?;
/// # Ok(())
/// # }
/// ```
pub async fn connect(target: &Target, options: ConnectOptions) -> Result<Client, ConnectError> {
    // The revision settled last time is tried first, without the probe; a
    // server that no longer speaks it is probed afresh.
    let shown = target.to_string();
    let remembered = cached_version(target).filter(|v| options.client.revisions.contains(v));
    if let Some(version) = remembered.filter(|_| options.client.revisions.len() > 1) {
        let mut pinned = options.clone();
        pinned.client.revisions = vec![version];
        match connect_uncached(target, pinned).await {
            Ok(client) => return Ok(client),
            Err(error) => {
                tracing::debug!(target = %shown, %version, %error, "the remembered revision failed; probing");
                forget(target);
            }
        }
    }
    let client = connect_uncached(target, options).await?;
    if let Some(version) = client.version() {
        remember(target, version);
    }
    Ok(client)
}

/// The bridge's [`Connector`] port over [`connect`]: each connection it
/// opens reaches `target` with `options`, answering the server's questions
/// with the handler the bridge gives it.
///
/// ```no_run
/// use protocol_droid::adapters::secondary::connect::{ConnectOptions, Target, connector};
/// use protocol_droid::application::bridge::{Bridge, BridgeOptions};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let upstream = Target::command(["npx", "-y", "@modelcontextprotocol/server-everything"])?;
/// let bridge = Bridge::connect(
///     connector(upstream, ConnectOptions::default()),
///     BridgeOptions::default(),
/// )
/// .await?;
/// println!("the upstream speaks {}", bridge.upstream().version);
/// # Ok(())
/// # }
/// ```
#[must_use]
pub fn connector(target: Target, options: ConnectOptions) -> Connector {
    Arc::new(move |handler| {
        let target = target.clone();
        let mut options = options.clone();
        options.client.handler = handler;
        Box::pin(async move {
            connect(&target, options)
                .await
                .map_err(|e| -> ConnectorError { Box::new(e) })
        })
    })
}

/// At most this many servers' revisions are remembered.
const ERA_CACHE_ENTRIES: usize = 256;

/// The revision last settled with each server (by its command line or URL),
/// for this process.
static ERA_CACHE: std::sync::LazyLock<std::sync::Mutex<BTreeMap<String, ProtocolVersion>>> =
    std::sync::LazyLock::new(Default::default);

fn era_cache() -> std::sync::MutexGuard<'static, BTreeMap<String, ProtocolVersion>> {
    ERA_CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What the revision cache knows `target` by: the whole URL (two servers
/// may differ only in the query a message leaves out), or the command line.
/// Kept in memory only, never shown.
fn cache_key(target: &Target) -> String {
    match target {
        Target::Url(url) => url.as_str().to_owned(),
        Target::Command(_) => target.to_string(),
    }
}

/// The revision last settled with `target` in this process, if any.
#[must_use]
pub fn cached_version(target: &Target) -> Option<ProtocolVersion> {
    era_cache().get(&cache_key(target)).copied()
}

/// Remembers `version` as the one `target` speaks.
pub fn remember(target: &Target, version: ProtocolVersion) {
    let key = cache_key(target);
    let mut cache = era_cache();
    if cache.len() >= ERA_CACHE_ENTRIES && !cache.contains_key(&key) {
        cache.pop_first();
    }
    cache.insert(key, version);
}

/// Forgets what `target` speaks, so the next connection probes.
pub fn forget(target: &Target) {
    era_cache().remove(&cache_key(target));
}

async fn connect_uncached(
    target: &Target,
    options: ConnectOptions,
) -> Result<Client, ConnectError> {
    match target {
        Target::Command(child) => {
            let (tx, rx) = inbound_queue();
            let link = ChildProcess::spawn(child, tx)?;
            Ok(Client::connect(Arc::new(link), rx, options.client).await?)
        }
        Target::Url(url) => connect_url(url, options).await,
    }
}

async fn connect_url(url: &Url, options: ConnectOptions) -> Result<Client, ConnectError> {
    let (tx, rx) = inbound_queue();
    let link = StreamableHttp::new(
        url.clone(),
        tx,
        options.authorizer.clone(),
        options.http.clone(),
    )?;
    let streamable = Client::connect(Arc::new(link), rx, options.client.clone()).await;
    let refused = match &streamable {
        Err(ClientError::Link(LinkError::Http { status, .. })) => matches!(status, 400 | 404 | 405),
        _ => false,
    };
    let legacy_allowed = options
        .client
        .revisions
        .contains(&ProtocolVersion::V2024_11_05);
    if !refused || !legacy_allowed {
        return Ok(streamable?);
    }
    tracing::debug!(url = %super::tls::redacted(url), "Streamable HTTP refused; trying HTTP+SSE");
    let (tx, rx) = inbound_queue();
    let link = match LegacySse::connect(url.clone(), tx, options.authorizer.clone(), &options.http)
        .await
    {
        Ok(link) => link,
        // An HTTP+SSE server that refused the credentials: that says more
        // than the other transport's refusal.
        Err(error @ LinkError::Unauthorized(_)) => return Err(error.into()),
        // Not an HTTP+SSE server either: the first refusal says more.
        Err(LinkError::Http { .. }) => return Ok(streamable?),
        // An event stream that went wrong (no endpoint named, one on another
        // origin): that is what the user needs to hear, beside the refusal.
        Err(sse) => {
            return Err(match streamable {
                Err(ClientError::Link(LinkError::Http { status, body })) => LinkError::Http {
                    status,
                    // Cut: the endpoint it names is the server's to make long.
                    body: format!(
                        "{body}; its HTTP+SSE stream failed: {}",
                        cut(&sse.to_string())
                    ),
                }
                .into(),
                other => other.err().map_or_else(|| sse.into(), Into::into),
            });
        }
    };
    let mut client_options = options.client;
    client_options.revisions = vec![ProtocolVersion::V2024_11_05];
    Ok(Client::connect(Arc::new(link), rx, client_options).await?)
}

/// `text` cut to 300 characters, marked where it was cut.
fn cut(text: &str) -> String {
    let mut chars = text.chars();
    let kept: String = chars.by_ref().take(300).collect();
    if chars.next().is_some() {
        format!("{kept}…")
    } else {
        kept
    }
}

impl From<LinkError> for ConnectError {
    fn from(error: LinkError) -> Self {
        Self::Client(ClientError::Link(error))
    }
}
