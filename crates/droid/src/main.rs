//! `droid`: the protocol-droid command line.
//!
//! This is the only place in the project that uses `anyhow` and prints to the
//! terminal; everything it does is a call into the `protocol-droid` library.

mod acp;
mod auth;
mod bridge;
mod call;
mod fixture;
mod gateway;
mod listen;
mod secret;
mod telemetry;
mod terminal;

use std::io::Write as _;
use std::time::Duration;

// A quarter of the instructions of a trivial call went to the system
// allocator (`docs/benchmarks.md`); every message allocates its JSON tree.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use anyhow::Context as _;
use auth::AuthArgs;
use clap::{CommandFactory as _, Parser, Subcommand};
use protocol_droid::adapters::primary::http::{HttpOptions, HttpServer, SupportedScopes};
use protocol_droid::adapters::primary::stdio::{self, StdioOptions};
use protocol_droid::adapters::secondary::metrics::Metrics;
use protocol_droid::adapters::secondary::tls::Trust;
use protocol_droid::application::observe::SharedObserver;
use protocol_droid::application::server::{RateLimits, ServerBuilder};
use protocol_droid::domain::{
    CapabilitySet, Era, Feature, Negotiation, ProtocolVersion, TransportKind, resolve,
};
use telemetry::Observed;

/// What `droid --version` says: the build, and what it speaks. Kept in
/// step with `ProtocolVersion::ALL` by a test.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (MCP 2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25, 2026-07-28; ACP 1)"
);

/// MCP for every published revision: serve, bridge, aggregate, call.
#[derive(Debug, Parser)]
#[command(name = "droid", version = VERSION, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Also trust the certificate authorities in this PEM file for every
    /// outbound HTTPS connection (upstreams, servers called, the servers an
    /// ACP session names, key sets, introspection, authorization servers)
    /// and a rediss:// --store.
    #[arg(long, global = true, value_name = "PEM")]
    ca_file: Option<std::path::PathBuf>,
    /// How log lines are written on stderr: `text` for a person, `json`
    /// (one object a line) for a log collector. `DROID_LOG` sets what is
    /// logged (default `warn`).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Export each request's span over OTLP/HTTP (JSON) to the collector at
    /// this base URL (`/v1/traces` is added), continuing the trace a client
    /// sends in `_meta`. Off when not set.
    #[arg(
        long,
        global = true,
        value_name = "URL",
        env = "OTEL_EXPORTER_OTLP_ENDPOINT"
    )]
    otlp_endpoint: Option<String>,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum LogFormat {
    /// One readable line each.
    Text,
    /// One JSON object a line, the event's fields at its top level.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the built-in fixture server (the conformance suite's fixture).
    ///
    /// On stdio by default: newline-delimited JSON-RPC on stdin and stdout,
    /// logs on stderr, answering both the legacy handshake and 2026-07-28.
    /// With `--listen`, Streamable HTTP at `/mcp` (both eras) and the
    /// 2024-11-05 HTTP+SSE transport at `/sse`.
    Serve {
        /// Serve Streamable HTTP at http://HOST:PORT/mcp instead of stdio.
        #[arg(long, value_name = "HOST:PORT")]
        listen: Option<String>,
        /// Restrict the revisions offered, e.g. `2025-11-25,2026-07-28`.
        #[arg(long, value_delimiter = ',', value_name = "R,R,...")]
        revisions: Vec<String>,
        /// Over HTTP, end a session idle for this many seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 600)]
        session_idle: u64,
        #[command(flatten)]
        served: listen::ListenArgs,
        // Boxed: the flags outweigh every other subcommand's.
        #[command(flatten)]
        auth: Box<AuthArgs>,
    },
    /// Put any MCP client in front of any MCP server, whatever revision and
    /// transport each speaks.
    ///
    /// `droid bridge [--listen HOST:PORT] (--upstream URL | -- COMMAND
    /// [ARGS...])`. What the client's revision cannot express of the
    /// server's is refused (`--degrade strict`, the default) or downgraded
    /// (`--degrade permissive`), and every downgrade is logged (at info:
    /// `DROID_LOG=droid::bridge=info`); `--report-meta` also puts each
    /// reply's report in its `_meta`.
    Bridge(Box<bridge::BridgeArgs>),
    /// Send one request to an MCP server and print the answer.
    ///
    /// `droid call URL METHOD [JSON_PARAMS]`, or, for a server started as a
    /// child process over stdio, `droid call METHOD [JSON_PARAMS] -- COMMAND
    /// [ARGS...]`. The revision is probed unless `--revision` pins one.
    Call {
        /// `URL METHOD [JSON_PARAMS]`, or `METHOD [JSON_PARAMS]` before `--`.
        #[arg(required = true, num_args = 1..=3)]
        positional: Vec<String>,
        /// The server's command line, after `--`.
        #[arg(last = true)]
        command: Vec<String>,
        /// Speak only this revision, e.g. `2025-11-25`.
        #[arg(long, value_name = "R")]
        revision: Option<String>,
        /// Print the raw `result` as JSON.
        #[arg(long)]
        json: bool,
        /// Run a `tools/call` as a task when the server runs tasks (either
        /// form), printing its status to stderr as it changes; Ctrl-C
        /// cancels the task.
        #[arg(long)]
        task: bool,
        /// Read the bearer token for an HTTP server from this file (never
        /// sent to a stdio one); or set `DROID_TOKEN`. Not on the command
        /// line, where every user of the machine can read it.
        #[arg(long, value_name = "FILE")]
        token_file: Option<std::path::PathBuf>,
    },
    /// Serve many MCP servers as one: a catalog of their tools, each pinned
    /// by digest, and per session exactly the tools that session was given.
    ///
    /// Without `--config`, the embedded default: the built-in fixture server
    /// as the one upstream. Stdio unless `--listen` (or the config's
    /// `listen`) says where to serve Streamable HTTP.
    Gateway {
        /// The configuration: the gateway's TOML, or the `mcpServers` or
        /// `servers` JSON an MCP client keeps (a `.json` file).
        #[arg(long, global = true, value_name = "FILE")]
        config: Option<std::path::PathBuf>,
        /// The admin socket (`status`, `approve`); by default one named
        /// after the configuration in `$XDG_STATE_HOME/droid/gateway/`
        /// (`~/.local/state/droid/gateway/`).
        #[arg(long, global = true, value_name = "PATH")]
        admin_socket: Option<std::path::PathBuf>,
        /// Ask a running gateway instead of starting one.
        #[command(subcommand)]
        action: Option<gateway::admin::Action>,
        /// Serve Streamable HTTP at http://HOST:PORT/mcp.
        #[arg(long, value_name = "HOST:PORT")]
        listen: Option<String>,
        /// Serve the admin page (catalog, drift with Approve, sessions,
        /// upstream health, translations, live charts) at http://HOST:PORT/,
        /// behind the same authorization as /mcp. Off unless given; an
        /// address that is not loopback needs authorization (or
        /// `--allow-public-without-auth`, which serves approvals to anyone).
        /// With authorization on it needs `--auth-resource` too: the page
        /// accepts the tokens issued for the gateway's MCP endpoint.
        #[arg(long, value_name = "HOST:PORT")]
        admin_listen: Option<String>,
        /// With authorization on, the scope a token needs for the admin
        /// page's data and approvals, besides what /mcp asks.
        #[arg(long, value_name = "SCOPE", default_value = "droid:admin")]
        admin_scope: String,
        /// Print every tool's id, digest and provenance, then exit. Writes
        /// nothing: what is trusted on first use is kept only by a gateway
        /// that serves.
        #[arg(long)]
        print_digests: bool,
        /// Over HTTP, end a session idle for this many seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 600)]
        session_idle: u64,
        #[command(flatten)]
        served: listen::ListenArgs,
        // Boxed, as for `serve`.
        #[command(flatten)]
        auth: Box<AuthArgs>,
    },
    /// Be an ACP agent on stdio whose tools are MCP servers.
    ///
    /// An ACP client (an editor) starts `droid acp` and speaks ACP v1 on its
    /// stdin and stdout; logs go to stderr. Each session connects to the MCP
    /// servers the client lists (stdio, http, sse), and each prompt is one of
    /// the commands below, carried out against them.
    #[command(after_long_help = acp::HELP)]
    Acp {
        /// How long connecting to one MCP server may take.
        #[arg(long, value_name = "SECONDS", default_value_t = 20)]
        connect_timeout: u64,
        /// The most sessions open at once (at least 1).
        #[arg(
            long,
            value_name = "N",
            default_value_t = 64,
            value_parser = clap::value_parser!(u16).range(1..)
        )]
        max_sessions: u16,
    },
    /// Print which features each MCP revision allows, as this build resolves them.
    Revisions {
        /// Resolve as if over this transport.
        #[arg(long, value_enum, default_value = "stdio")]
        transport: Transport,
    },
    /// Print the completion script for SHELL, made from this build's
    /// commands and flags (for example `droid completions bash >
    /// ~/.local/share/bash-completion/completions/droid`).
    Completions {
        /// The shell to complete in.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), made from this build's commands and
    /// flags (for example `droid man > ~/.local/share/man/man1/droid.1`).
    Man,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Transport {
    Stdio,
    StreamableHttp,
    HttpSse,
}

impl From<Transport> for TransportKind {
    fn from(transport: Transport) -> Self {
        match transport {
            Transport::Stdio => Self::Stdio,
            Transport::StreamableHttp => Self::StreamableHttp,
            Transport::HttpSse => Self::HttpSse,
        }
    }
}

fn main() -> anyhow::Result<()> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let cli = Cli::parse();
    let trust = listen::trust(cli.ca_file.as_deref())?;
    let exporting = cli
        .otlp_endpoint
        .as_deref()
        .filter(|endpoint| !endpoint.is_empty())
        .map(|endpoint| telemetry::Tracing::start(endpoint, &trust))
        .transpose()?;
    // stdout carries protocol frames; every log line goes to stderr.
    let filter = tracing_subscriber::EnvFilter::try_from_env("DROID_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Colour only for a person at a terminal who has not asked for none
    // (NO_COLOR): an MCP client that starts droid keeps its stderr in a log
    // file, where escape codes are noise.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty());
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(colour);
    let logs = match cli.log_format {
        LogFormat::Text => logs.with_filter(filter).boxed(),
        LogFormat::Json => logs.json().flatten_event(true).with_filter(filter).boxed(),
    };
    // The exported spans have a filter of their own: whatever `DROID_LOG`
    // asks of the log, every request's span is exported.
    let spans = exporting.as_ref().map(|exporting| {
        exporting.layer().with_filter(
            tracing_subscriber::filter::Targets::new()
                .with_target("droid::request", tracing::Level::DEBUG),
        )
    });
    tracing_subscriber::registry().with(logs).with(spans).init();
    let ran = run(cli.command, &trust, exporting.is_some());
    if let Some(exporting) = exporting {
        exporting.stop();
    }
    // An error may quote a peer (an HTTP body, a stdio server's last
    // words): shown escaped, as a terminal must not obey it.
    if let Err(error) = ran {
        let shown = terminal::shown_lines(&format!("{error:?}"));
        let _unwritable = writeln!(std::io::stderr(), "Error: {shown}");
        std::process::exit(1);
    }
    Ok(())
}

/// Runs `command`; `tracing` says whether spans are exported.
fn run(command: Command, trust: &Trust, tracing: bool) -> anyhow::Result<()> {
    let trust = trust.clone();
    match command {
        Command::Serve {
            listen,
            revisions,
            session_idle,
            served,
            auth,
        } => serve(
            Listening {
                listen,
                idle: Duration::from_secs(session_idle),
                served: &served,
                auth: &auth,
                trust: &trust,
                ready: None,
                metrics: None,
                tracing,
                scopes: SupportedScopes::default(),
            },
            &revisions,
        ),
        Command::Bridge(args) => bridge::run(&args, &trust, tracing),
        Command::Call {
            positional,
            command,
            revision,
            json,
            task,
            token_file,
        } => {
            let token = secret::read("DROID_TOKEN", token_file.as_deref())?;
            let (target, method, params) = call::target_and_method(positional, command)?;
            let args = call::CallArgs {
                target,
                method,
                params,
                revision,
                json,
                token,
                trust,
                task,
            };
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            let called = runtime.block_on(call::run(
                args,
                &mut std::io::stdout().lock(),
                &mut std::io::stderr(),
            ));
            // A stdio server's reader may be blocked on its pipe still.
            runtime.shutdown_timeout(SHUTDOWN_GRACE);
            let succeeded = called?;
            if !succeeded {
                std::process::exit(2);
            }
            Ok(())
        }
        Command::Gateway {
            config,
            admin_socket,
            action: Some(action),
            ..
        } => gateway::admin::ask(config.as_deref(), admin_socket.as_deref(), &action),
        Command::Gateway {
            config,
            admin_socket,
            action: None,
            listen,
            admin_listen,
            admin_scope,
            print_digests,
            session_idle,
            served,
            auth,
        } => gateway::run(
            config.as_deref(),
            admin_socket.as_deref(),
            admin_listen
                .as_deref()
                .map(|addr| (addr, admin_scope.as_str())),
            print_digests,
            Listening {
                listen,
                idle: Duration::from_secs(session_idle),
                served: &served,
                auth: &auth,
                trust: &trust,
                ready: None,
                metrics: None,
                tracing,
                scopes: SupportedScopes::default(),
            },
        ),
        Command::Acp {
            connect_timeout,
            max_sessions,
        } => {
            let options = acp::AcpOptions {
                connect_timeout: Duration::from_secs(connect_timeout),
                max_sessions: usize::from(max_sessions),
                trust,
                ..acp::AcpOptions::default()
            };
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            runtime.block_on(async {
                // Pipes driven by the reactor where stdin and stdout are
                // pipes, as an editor starting an agent makes them, rather
                // than a blocking thread for every read and write.
                let (input, output) = stdio::process_streams();
                // A signal ends the agent as its client closing stdin does:
                // its sessions' servers are stopped, not left orphaned.
                let caught = |kind| {
                    tokio::signal::unix::signal(kind).context("catching SIGTERM, SIGINT and SIGHUP")
                };
                let mut signals = [
                    caught(tokio::signal::unix::SignalKind::terminate())?,
                    caught(tokio::signal::unix::SignalKind::interrupt())?,
                    caught(tokio::signal::unix::SignalKind::hangup())?,
                ];
                let stopped = async move {
                    let [terminate, interrupt, hangup] = &mut signals;
                    tokio::select! {
                        _ = terminate.recv() => {}
                        _ = interrupt.recv() => {}
                        _ = hangup.recv() => {}
                    }
                };
                acp::serve(input, output, options, stopped).await;
                anyhow::Ok(())
            })?;
            // A reader blocked on stdin (a terminal, a socket) would hold
            // the runtime's end for ever once a signal ended the agent.
            runtime.shutdown_timeout(SHUTDOWN_GRACE);
            Ok(())
        }
        Command::Revisions { transport } => {
            match revision_table(&mut std::io::stdout().lock(), transport.into()) {
                // A reader that stopped early (`| head`) is not a failure.
                Err(error)
                    if error
                        .downcast_ref::<std::io::Error>()
                        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
                {
                    Ok(())
                }
                other => other,
            }
        }
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "droid", &mut script);
            print(&script)
        }
        Command::Man => {
            let mut page = Vec::new();
            clap_mangen::Man::new(Cli::command())
                .render(&mut page)
                .context("writing the manual page")?;
            print(&page)
        }
    }
}

/// Writes `bytes` to stdout; a reader that stopped early (`| head`) is not
/// a failure.
fn print(bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;

    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing to stdout"),
    }
}

/// How `serve`, `bridge` and `gateway` serve: where, for how long a session
/// may idle, over TLS or not, with which authorization, trusting which
/// authorities for what they fetch.
pub(crate) struct Listening<'a> {
    pub(crate) listen: Option<String>,
    pub(crate) idle: Duration,
    pub(crate) served: &'a listen::ListenArgs,
    pub(crate) auth: &'a AuthArgs,
    pub(crate) trust: &'a Trust,
    /// What `/readyz` asks; none for a server that is ready once it listens.
    pub(crate) ready: Option<protocol_droid::adapters::primary::http::Readiness>,
    /// What `/metrics` exposes: set by [`Listening::setup`].
    pub(crate) metrics: Option<Metrics>,
    /// Whether spans are exported (`--otlp-endpoint`).
    pub(crate) tracing: bool,
    /// The scopes a server's challenge and metadata list beside those of
    /// the flags: a gateway's configuration's, kept current as it reloads.
    pub(crate) scopes: SupportedScopes,
}

impl Listening<'_> {
    /// What the server about to be built is given: an observer that counts
    /// into the [`Metrics`] served at `/metrics` when it listens (on stdio no
    /// one could scrape them) and continues traces when spans are exported;
    /// and the rate limits of the flags, over `limits` (a configuration's).
    pub(crate) fn setup(&mut self, limits: RateLimits) -> anyhow::Result<Setup> {
        if self.listen.is_some() {
            self.metrics.get_or_insert_with(Metrics::new);
        }
        // Set already when something else serves them (a gateway's page).
        let metrics = self.metrics.clone();
        let observer = SharedObserver::new(Observed {
            metrics,
            tracing: self.tracing,
        });
        Ok(Setup {
            observer,
            limits: self.served.rate_limits(limits)?,
        })
    }
}

/// What every server `droid` builds is given besides its primitives.
#[derive(Clone, Debug)]
pub(crate) struct Setup {
    /// What it reports its work to.
    pub(crate) observer: SharedObserver,
    /// How many requests a caller may make.
    pub(crate) limits: RateLimits,
}

impl Setup {
    /// `builder`, given this.
    pub(crate) fn apply(self, builder: ServerBuilder) -> ServerBuilder {
        builder.observer(self.observer).rate_limits(self.limits)
    }
}

/// The runtime a server runs on: one thread when it serves one peer on
/// stdio, a thread per core when it listens.
///
/// A stdio server has one client and waits on pipes, not on its cores. On
/// a worker pool each request, answer and pipe read is a wake-up handed
/// between threads, and when the client, this process and its upstream
/// share a machine's cores those hand-offs were a fifth of the work
/// (docs/benchmarks.md); on one thread they are a queue push.
pub(crate) fn runtime_for(stdio: bool) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = if stdio {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    builder
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// How long a server's runtime, its work done, waits for its blocking
/// threads before the process ends.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Runs a server's `work` on `runtime` to its end, then ends the runtime:
/// every task dropped (and with them the children a gateway or bridge
/// started, each process group killed), its blocking threads waited for no
/// longer than [`SHUTDOWN_GRACE`]. One may be reading a stdin that never
/// ends, when a signal ended the server.
///
/// A server on `stdio` is also ended so by `SIGTERM` or `SIGINT`, from its
/// first moment (a gateway still connecting its upstreams included): its
/// upstreams lead process groups of their own, which a terminal's signal
/// to its foreground group no longer reaches, and which the default action
/// would leave running. Over HTTP the server catches both itself, to answer
/// what is in flight first.
pub(crate) fn run_to_end(
    runtime: tokio::runtime::Runtime,
    stdio: bool,
    work: impl Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    let outcome = runtime.block_on(async {
        if !stdio {
            return work.await;
        }
        let caught =
            |kind| tokio::signal::unix::signal(kind).context("catching SIGTERM and SIGINT");
        let mut terminate = caught(tokio::signal::unix::SignalKind::terminate())?;
        let mut interrupt = caught(tokio::signal::unix::SignalKind::interrupt())?;
        tokio::select! {
            outcome = work => outcome,
            _ = interrupt.recv() => Ok(()),
            _ = terminate.recv() => Ok(()),
        }
    });
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    outcome
}

fn serve(mut listening: Listening<'_>, revisions: &[String]) -> anyhow::Result<()> {
    let offered = offered(revisions)?;
    let setup = listening.setup(RateLimits::default())?;
    // The worker pool even on stdio: measured, one thread answered a lone
    // request more slowly (12,792 against 20,926 calls/s), though it gained
    // with 64 in flight (docs/benchmarks.md).
    let runtime = runtime_for(false)?;
    let stdio = listening.listen.is_none();
    run_to_end(runtime, stdio, async {
        let server = fixture::server(&offered, setup).context("building the fixture server")?;
        for rule in listening.auth.scope_rules()? {
            anyhow::ensure!(
                server.set_scope(rule.kind, &rule.name, Some(rule.scope.clone())),
                "--auth-scope names the {} {:?}, which the server does not offer",
                rule.kind.word(),
                rule.name
            );
        }
        serve_on(server, listening).await
    })
}

/// Serves `server` on stdio, or on Streamable HTTP (and HTTP+SSE) where
/// `listening` says: what `droid serve`, `droid bridge` and `droid gateway`
/// share.
pub(crate) async fn serve_on(
    server: protocol_droid::application::server::Server,
    listening: Listening<'_>,
) -> anyhow::Result<()> {
    let Listening {
        listen,
        idle,
        served,
        auth,
        trust,
        ready,
        metrics,
        tracing: _,
        scopes,
    } = listening;
    served.share(&server, listen.is_some(), trust).await?;
    let Some(addr) = listen else {
        anyhow::ensure!(
            !auth.enabled(),
            "authorization needs --listen: stdio carries no bearer tokens"
        );
        anyhow::ensure!(!served.tls_enabled(), "--tls-cert needs --listen");
        // A signal is caught around the whole run (`run_to_end`).
        return stdio::serve_process(server, StdioOptions::default())
            .await
            .context("serving stdio");
    };
    auth::check_listen(auth, &addr)?;
    served.check_exposure(&addr, auth.enabled()).await?;
    let server_tls = served.server_tls()?;
    // SIGTERM is how service managers and container runtimes stop a
    // process, SIGINT how a terminal does: either lets the calls in flight
    // finish before the process exits. Caught from before the port is bound,
    // so that one sent as soon as the listening line is read is caught too.
    let caught = |kind| tokio::signal::unix::signal(kind).context("catching SIGTERM and SIGINT");
    let mut terminate = caught(tokio::signal::unix::SignalKind::terminate())?;
    let mut interrupt = caught(tokio::signal::unix::SignalKind::interrupt())?;
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let bound = listener.local_addr().context("reading the bound address")?;
    let scheme = if server_tls.is_some() {
        "https"
    } else {
        "http"
    };
    let shutdown = async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        tracing::warn!(target: "droid", "stopping: answering the requests in flight, then exiting");
    };
    let mut options = served.http_options(HttpOptions {
        idle_timeout: idle,
        tls: server_tls,
        readiness: ready,
        metrics,
        ..HttpOptions::default()
    });
    // Reached by the address it listens on, whatever loopback one that is.
    options.hosts = options.hosts.allowing_address(bound.ip());
    // Built before the listening line: a key set file that cannot be read
    // stops the server before a script takes it for up.
    if let Some(resource_server) = auth::resource_server(
        auth,
        bound,
        scheme,
        trust,
        &auth::Listed::Primitives(&scopes),
    )? {
        // A resource named by a public host name is reached by that name.
        if let Some(host) = resource_server.host() {
            options.hosts = options.hosts.allowing(host);
        }
        tracing::warn!(
            target: "droid",
            "authorization on: metadata at {}",
            resource_server.metadata_url()
        );
        options.auth = Some(resource_server);
    }
    // Scripts read this line to learn the port when `:0` picked one.
    let sse = if server
        .offered()
        .iter()
        .any(|revision| revision.era() == Era::Legacy)
    {
        " (HTTP+SSE at /sse)"
    } else {
        ""
    };
    tracing::warn!(target: "droid", "listening on {scheme}://{bound}/mcp{sse}");
    HttpServer::new(server, options)
        .serve(listener, shutdown)
        .await
        .context("serving HTTP")
}

pub(crate) fn offered(revisions: &[String]) -> anyhow::Result<Vec<ProtocolVersion>> {
    if revisions.is_empty() {
        return Ok(ProtocolVersion::ALL.to_vec());
    }
    revisions
        .iter()
        .map(|r| r.parse::<ProtocolVersion>().context("--revisions"))
        .collect()
}

fn revision_table(out: &mut impl std::io::Write, transport: TransportKind) -> anyhow::Result<()> {
    write!(out, "{:<28}", "feature")?;
    for version in ProtocolVersion::ALL {
        write!(out, " {version}")?;
    }
    writeln!(out)?;
    let profiles: Vec<_> = ProtocolVersion::ALL
        .into_iter()
        .map(|version| {
            let caps = CapabilitySet::all_for(version);
            resolve(Negotiation {
                version,
                client_caps: caps,
                server_caps: caps,
                transport,
            })
        })
        .collect();
    for feature in Feature::ALL {
        write!(out, "{:<28}", format!("{feature:?}"))?;
        for profile in &profiles {
            let mark = if profile.allows(feature) { "yes" } else { "-" };
            write!(out, " {mark:^10}")?;
        }
        writeln!(out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{ProtocolVersion, VERSION};

    /// `--version` names every revision this build speaks, in order, and no
    /// other.
    #[test]
    fn the_version_names_every_revision_spoken() {
        let named: Vec<&str> = ProtocolVersion::ALL.iter().map(|v| v.as_str()).collect();
        let expected = format!("(MCP {};", named.join(", "));
        assert!(VERSION.contains(&expected), "{VERSION} against {expected}");
    }
}
