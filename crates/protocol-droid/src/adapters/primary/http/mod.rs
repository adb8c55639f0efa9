//! Streamable HTTP for both eras, and the 2024-11-05 HTTP+SSE transport.
//!
//! One router serves three things:
//!
//! - `/mcp`, Streamable HTTP. A POST carrying `MCP-Protocol-Version:
//!   2026-07-28` (or a 2026 `_meta`) and no session is served statelessly;
//!   anything else follows the legacy shape: `initialize` mints an
//!   `Mcp-Session-Id`, later requests carry it, GET opens the session's own
//!   event stream, DELETE ends it.
//! - `/sse` and `/messages`, the 2024-11-05 transport: a GET event stream
//!   whose first event names the endpoint to POST to.
//!
//! Every request is checked for a loopback `Host` and `Origin` first (DNS
//! rebinding); with a [`ResourceServer`] configured, every request to those
//! endpoints then needs a bearer token, and the server publishes its
//! Protected Resource Metadata at the well-known path; bodies are bounded, sessions are bounded in number and reaped
//! when idle, and a response answers with JSON unless the handler starts
//! talking before it finishes, in which case it becomes an event stream.

mod accept;
mod admin_page;
mod auth;
mod body;
mod events;
mod guard;
mod headers;
mod health;
mod lane;
mod legacy_sse;
mod metrics;
mod owed;
mod respond;
mod sessions;
mod shared;
mod sse;
mod stateless;
mod streamable;
mod task_relay;
mod task_streams;
mod tls;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use tokio::net::TcpListener;

use crate::adapters::secondary::metrics::Metrics;
use crate::application::server::Server;

pub use admin_page::AdminPage;
pub use auth::{METADATA_PREFIX, ResourceServer, ResourceServerError, SupportedScopes};
pub use guard::HostPolicy;
pub use health::Readiness;
pub use tls::{ServerTls, ServerTlsError};

/// How long a shutdown waits for requests in flight.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Limits and policies for the HTTP transports. Bounded by default.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    /// The largest request body accepted (4 MiB); larger gets 413.
    pub max_body: usize,
    /// How many sessions may be open at once (16 384); more get 503.
    pub max_sessions: usize,
    /// How many of those one authenticated principal may hold (256); more
    /// get 429.
    pub max_sessions_per_principal: usize,
    /// How many one anonymous caller's address may hold (1 024); more get
    /// 429.
    pub max_sessions_per_address: usize,
    /// How long an answer may wait for room on a session's stream before
    /// the stream counts as unread and the session ends, and how long a
    /// write to any connection may make no progress before the connection
    /// is closed (30 s).
    pub stall_timeout: Duration,
    /// How long a session may sit unused before it is reaped (10 minutes).
    pub idle_timeout: Duration,
    /// How many events a session keeps for `Last-Event-ID` resumption (512).
    pub replay_events: usize,
    /// How many bytes of those events a session keeps (4 MiB): the oldest
    /// go first, and the newest is kept, alone if it is larger.
    pub replay_bytes: usize,
    /// How many bytes of those events the sessions of one opener (an
    /// authenticated principal, or an anonymous caller's address) keep
    /// together (64 MiB): past it, the recording session's own events go,
    /// the newest too if need be.
    pub replay_bytes_per_opener: usize,
    /// How many bytes of those events every session keeps together
    /// (1 GiB), gone the same way.
    pub replay_bytes_in_all: usize,
    /// The `retry:` hint sent to clients of a pollable stream (500 ms).
    pub sse_retry: Duration,
    /// How long a server-initiated request waits for its answer (60 s).
    pub exchange_timeout: Duration,
    /// Which `Host` and `Origin` values are accepted.
    pub hosts: HostPolicy,
    /// Authorization: `None` (the default) serves every caller as the
    /// anonymous caller, who sees only what requires no scope.
    pub auth: Option<ResourceServer>,
    /// TLS termination: `None` (the default) serves plain HTTP.
    pub tls: Option<ServerTls>,
    /// How many connections may be open at once (4 096); more are closed
    /// as they arrive.
    pub max_connections: usize,
    /// How many of those one client address may hold (256).
    pub max_connections_per_address: usize,
    /// How long a request head (and a TLS handshake) may take to arrive
    /// (10 s); then the connection is closed.
    pub header_timeout: Duration,
    /// How long a request body may take to arrive once its head has (30 s);
    /// then the request is answered with 408.
    pub body_timeout: Duration,
    /// How many bytes of request bodies may be being read at once, from
    /// every client together (256 MiB, and never less than
    /// [`Self::max_body`]); a body that would pass it is answered with 503.
    pub body_bytes_in_flight: usize,
    /// How many bytes of request bodies one client address may have being
    /// read or served (32 MiB, and never less than [`Self::max_body`]): a
    /// body counts against its address until its request is answered. A
    /// body that would pass it is answered with 429.
    pub body_bytes_in_flight_per_address: usize,
    /// What `/readyz` asks (none: always ready). `/healthz` and `/readyz`
    /// answer without a token.
    pub readiness: Option<Readiness>,
    /// What `/metrics` exposes (none: no such route). It asks for the same
    /// token as the MCP endpoints, and reports this server's open sessions.
    pub metrics: Option<Metrics>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            max_body: 4 * 1024 * 1024,
            max_sessions: 16_384,
            max_sessions_per_principal: 256,
            max_sessions_per_address: 1024,
            stall_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(600),
            replay_events: 512,
            replay_bytes: 4 * 1024 * 1024,
            replay_bytes_per_opener: 64 * 1024 * 1024,
            replay_bytes_in_all: 1024 * 1024 * 1024,
            sse_retry: Duration::from_millis(500),
            exchange_timeout: Duration::from_secs(60),
            hosts: HostPolicy::loopback(),
            auth: None,
            tls: None,
            max_connections: 4096,
            max_connections_per_address: 256,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            body_bytes_in_flight: 256 * 1024 * 1024,
            body_bytes_in_flight_per_address: 32 * 1024 * 1024,
            readiness: None,
            metrics: None,
        }
    }
}

/// The shared state every route handler sees.
#[derive(Clone)]
struct App {
    server: Server,
    sessions: Arc<sessions::Sessions>,
    options: Arc<HttpOptions>,
}

/// A server on HTTP: the routes, the session table and its reaper.
///
/// The reaper that closes idle sessions runs while this (or the router it
/// made) is alive.
#[derive(Clone)]
pub struct HttpServer {
    app: App,
}

impl core::fmt::Debug for HttpServer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HttpServer")
            .field("options", &self.app.options)
            .field("open_sessions", &self.open_sessions())
            .finish_non_exhaustive()
    }
}

impl HttpServer {
    /// `server` on HTTP with `options`. Needs a Tokio runtime (the reaper
    /// is a task).
    #[must_use]
    pub fn new(server: Server, options: HttpOptions) -> Self {
        let sessions = sessions::Sessions::new(
            sessions::SessionLimits {
                max: options.max_sessions,
                per_principal: options.max_sessions_per_principal,
                per_address: options.max_sessions_per_address,
                replay_events: options.replay_events,
                replay_bytes: options.replay_bytes,
                replay_bytes_per_opener: options.replay_bytes_per_opener,
                replay_bytes_in_all: options.replay_bytes_in_all,
                exchange_timeout: options.exchange_timeout,
                stall_timeout: options.stall_timeout,
                idle: options.idle_timeout,
            },
            server.shared_sessions().cloned(),
            server
                .shared_sessions()
                .cloned()
                .map(task_relay::status_teller),
        );
        sessions::spawn_reaper(&sessions, options.idle_timeout);
        if let Some(shared) = server.shared_sessions() {
            shared::spawn_listener(&sessions, shared.clone());
            shared::spawn_session_changes(&sessions, shared.clone());
            task_relay::spawn_listeners(&sessions, shared);
            shared::spawn_keeper(&sessions);
        }
        if let Some(metrics) = &options.metrics {
            let open = Arc::clone(&sessions);
            metrics.sessions_from(move || open.len());
        }
        Self {
            app: App {
                server,
                sessions,
                options: Arc::new(options),
            },
        }
    }

    /// How many legacy sessions are open right now.
    #[must_use]
    pub fn open_sessions(&self) -> usize {
        self.app.sessions.len()
    }

    /// The router: `/mcp` (Streamable HTTP) and `/sse` + `/messages`
    /// (2024-11-05), for serving or for embedding in a larger application;
    /// `/healthz` and `/readyz` for probes; `/metrics` when
    /// [`HttpOptions::metrics`] is set; with authorization on, also the
    /// Protected Resource Metadata.
    pub fn router(&self) -> Router {
        let app = self.app.clone();
        let limit = app.options.max_body;
        let hosts = app.options.hosts.clone();
        let resource_server = app.options.auth.clone().map(Arc::new);
        let mut router = Router::new()
            .route(
                "/mcp",
                post(streamable::post)
                    .get(streamable::get)
                    .delete(streamable::delete),
            )
            .route("/sse", get(legacy_sse::open))
            .route("/messages", post(legacy_sse::post));
        if app.options.metrics.is_some() {
            router = router.route("/metrics", get(metrics::scrape));
        }
        router = router
            // Bodies are read whole within their deadline inside the token
            // check, so an unauthenticated client never gets a body read.
            .route_layer(axum::middleware::from_fn_with_state(
                body::BodyLimits {
                    max_bytes: limit,
                    timeout: app.options.body_timeout,
                    // Never below one body of the largest size: a budget
                    // under it would refuse such a body for ever, however
                    // often it came back.
                    budget: Arc::new(body::BodyBudget::new(
                        app.options.body_bytes_in_flight.max(limit),
                        app.options.body_bytes_in_flight_per_address.max(limit),
                    )),
                },
                body::read_whole,
            ))
            // A route layer, so only the MCP routes above demand a token: the
            // metadata that tells a client how to get one must not.
            .route_layer(axum::middleware::from_fn_with_state(
                resource_server.clone(),
                auth::authenticate,
            ));
        // After the token check's layer, so probes (which carry no token)
        // reach them; they say no more than whether.
        router = router
            .route("/healthz", get(health::alive))
            .route("/readyz", get(health::ready));
        if let Some(resource_server) = resource_server {
            // Made for each request: the scopes it lists may change while
            // the server runs (see `SupportedScopes`).
            let described = Arc::clone(&resource_server);
            let serve = move || {
                let document = described.metadata();
                async move { auth::metadata(&document) }
            };
            let path = resource_server.metadata_path();
            // The path-suffixed form is what RFC 9728 §3.1 derives from the
            // resource; the root form is where clients that ignore the path
            // look first.
            if path != METADATA_PREFIX {
                router = router.route(&path, get(serve.clone()));
            }
            router = router.route(METADATA_PREFIX, get(serve));
        }
        router
            .layer(axum::middleware::from_fn_with_state(hosts, guard::check))
            .layer(DefaultBodyLimit::max(limit))
            .with_state(app)
    }

    /// Serves on `listener` (over TLS when [`HttpOptions::tls`] is set)
    /// until `shutdown` resolves. Then it stops accepting connections,
    /// closes every Streamable HTTP session's standing stream, lets the
    /// requests in flight finish and be answered for at most
    /// [`SHUTDOWN_GRACE`] (ending each HTTP+SSE session once it has none),
    /// and ends every session.
    ///
    /// ```no_run
    /// use protocol_droid::prelude::*;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = Server::builder("hello", "1.0.0").build()?;
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:8000").await?;
    /// let stop = async {
    ///     let _ = tokio::signal::ctrl_c().await;
    /// };
    /// HttpServer::new(server, HttpOptions::default()).serve(listener, stop).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// An I/O error from the listener.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        /// How often, while shutting down, sessions whose work is done are
        /// let go.
        const SETTLE_EVERY: Duration = Duration::from_millis(100);
        let sessions = Arc::clone(&self.app.sessions);
        let settling = Arc::clone(&sessions);
        let stopping = Arc::new(tokio::sync::Notify::new());
        let signal = Arc::clone(&stopping);
        let admission = accept::Admission::new(&self.app.options);
        let served = accept::run(listener, self.router(), admission, async move {
            shutdown.await;
            // Not every session ended yet: ending one cancels its requests,
            // and a call in flight is to be answered.
            settling.settle();
            signal.notify_one();
        });
        /// How long, once the grace is over, the requests still running
        /// have to write the error they are answered with.
        const LAST_WORDS: Duration = Duration::from_secs(1);
        let mut served = std::pin::pin!(served);
        // Long-lived streams (a 2026-07-28 listen) would hold a graceful
        // shutdown open for ever; past the grace period they are cut.
        let outcome = tokio::select! {
            served = &mut served => served,
            () = async {
                stopping.notified().await;
                let _graced = tokio::time::timeout(SHUTDOWN_GRACE, async {
                    loop {
                        tokio::time::sleep(SETTLE_EVERY).await;
                        sessions.settle();
                    }
                })
                .await;
            } => {
                // What still runs is answered with an error saying the
                // server stopped, rather than left to a closed connection.
                self.app.sessions.stop.cancel();
                tokio::time::timeout(LAST_WORDS, &mut served)
                    .await
                    .unwrap_or(Ok(()))
            }
        };
        self.app.sessions.end_all();
        outcome
    }
}
