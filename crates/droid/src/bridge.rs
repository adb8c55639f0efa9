//! `droid bridge`: any client in front of any server.
//!
//! The upstream is a URL or a command line; the downstream is stdio, or
//! Streamable HTTP (both eras) and HTTP+SSE with `--listen`. Each leg speaks
//! its own revision, and what one cannot express of the other's is
//! translated under the degrade policy, every loss logged.

use std::time::Duration;

use anyhow::Context as _;
use protocol_droid::adapters::secondary::connect::{ConnectOptions, Target, connector};
use protocol_droid::adapters::secondary::http::HttpOptions;
use protocol_droid::adapters::secondary::tls::Trust as TlsTrust;
use protocol_droid::application::bridge::{Bridge, BridgeOptions, feature_named};
use protocol_droid::application::client::ClientOptions;
use protocol_droid::application::server::{RateLimits, ScopeRules};
use protocol_droid::domain::{DegradePolicy, ProtocolVersion};

use crate::auth::AuthArgs;

/// What `droid bridge` was asked to do.
#[derive(Debug, clap::Args)]
pub(crate) struct BridgeArgs {
    /// Serve Streamable HTTP at http://HOST:PORT/mcp instead of stdio.
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<String>,
    /// Restrict the revisions offered to the client, e.g. `2026-07-28`.
    #[arg(long, value_delimiter = ',', value_name = "R,R,...")]
    revisions: Vec<String>,
    /// Speak only this revision to the upstream.
    #[arg(long, value_name = "R")]
    upstream_revision: Option<String>,
    /// What a translation may lose: nothing (`strict`, the default), or
    /// whatever this build can downgrade (`permissive`).
    #[arg(long, value_enum, default_value = "strict")]
    degrade: Degrade,
    /// Also allow losing this feature (e.g. `titles`, `icons`,
    /// `tool-output-schema`); repeatable.
    #[arg(long, value_name = "FEATURE")]
    allow: Vec<String>,
    /// Never lose this feature, even when permissive; repeatable.
    #[arg(long, value_name = "FEATURE")]
    refuse: Vec<String>,
    /// Put each reply's translation report in its `_meta`.
    #[arg(long)]
    report_meta: bool,
    /// The upstream server's URL (Streamable HTTP, or HTTP+SSE).
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    upstream: Option<String>,
    /// Read a bearer token for an HTTP upstream from this file, or set
    /// `DROID_UPSTREAM_TOKEN`. Never the client's own token: the bridge does
    /// not pass tokens through. The file is read again when the upstream
    /// refuses the token, so a token rotated in place is taken up.
    #[arg(long, value_name = "FILE")]
    upstream_token_file: Option<std::path::PathBuf>,
    /// Over HTTP, end a session idle for this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    session_idle: u64,
    /// How long a request waits for the upstream's answer (and, before it
    /// is sent, for a place on the upstream's connection) before the client
    /// is told (`-32603`) and the request is cancelled upstream. A request
    /// waiting on the client's own answers to the upstream's questions is
    /// not counted meanwhile, and a call whose upstream reports progress is
    /// waited for again from each progress notification (up to an hour for
    /// each wait). It also bounds the upstream's handshake, at start and for each
    /// connection opened later.
    #[arg(long, value_name = "SECONDS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..))]
    timeout: u64,
    /// Set an environment variable for the upstream command (repeatable).
    /// The command gets only PATH, HOME, USER, LOGNAME, the locale, TERM,
    /// TMPDIR and TZ of this process's environment otherwise.
    #[arg(long = "upstream-env", value_name = "KEY=VALUE")]
    upstream_env: Vec<String>,
    /// Pass this variable of this process's environment on to the upstream
    /// command (repeatable).
    #[arg(long = "pass-env", value_name = "NAME")]
    pass_env: Vec<String>,
    /// The upstream server's command line, after `--`.
    #[arg(last = true)]
    command: Vec<String>,
    #[command(flatten)]
    served: crate::listen::ListenArgs,
    // Boxed, as for `serve`.
    #[command(flatten)]
    auth: Box<AuthArgs>,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Degrade {
    Strict,
    Permissive,
}

impl BridgeArgs {
    fn policy(&self) -> anyhow::Result<DegradePolicy> {
        let mut policy = match self.degrade {
            Degrade::Strict => DegradePolicy::strict(),
            Degrade::Permissive => DegradePolicy::permissive(),
        };
        for name in &self.allow {
            let feature = feature_named(name)
                .with_context(|| format!("--allow {name:?} names no feature"))?;
            policy = policy.allowing(feature);
        }
        for name in &self.refuse {
            let feature = feature_named(name)
                .with_context(|| format!("--refuse {name:?} names no feature"))?;
            policy = policy.refusing(feature);
        }
        Ok(policy)
    }

    fn target(&self) -> anyhow::Result<Target> {
        match (&self.upstream, self.command.is_empty()) {
            (Some(url), true) => Ok(Target::Url(
                url.parse().with_context(|| format!("--upstream {url:?}"))?,
            )),
            (None, false) => {
                let mut target = Target::command(&self.command).context("the upstream command")?;
                if let Target::Command(child) = &mut target {
                    for pair in &self.upstream_env {
                        let (key, value) = pair
                            .split_once('=')
                            .filter(|(key, _)| !key.is_empty())
                            .with_context(|| format!("--upstream-env {pair:?} is not KEY=VALUE"))?;
                        child.env.push((key.into(), value.into()));
                    }
                    child.pass_env = self.pass_env.iter().map(Into::into).collect();
                }
                Ok(target)
            }
            _ => anyhow::bail!("name the upstream: --upstream URL, or -- COMMAND [ARGS...]"),
        }
    }
}

/// Runs the bridge until interrupted.
pub(crate) fn run(args: &BridgeArgs, trust: &TlsTrust, tracing: bool) -> anyhow::Result<()> {
    let policy = args.policy()?;
    let target = args.target()?;
    let offered = crate::offered(&args.revisions)?;
    // The upstream's handshake, at start and for every connection opened
    // later, waits no longer than a request would: a server that never
    // answers `initialize` is given up on within `--timeout`.
    let mut client = ClientOptions {
        request_timeout: Duration::from_secs(args.timeout),
        ..ClientOptions::default()
    };
    if let Some(revision) = &args.upstream_revision {
        client.revisions = vec![
            revision
                .parse::<ProtocolVersion>()
                .context("--upstream-revision")?,
        ];
    }
    let variable = "DROID_UPSTREAM_TOKEN";
    let token = crate::secret::read(variable, args.upstream_token_file.as_deref())?;
    let authorizer = crate::secret::bearer(token, args.upstream_token_file.as_deref(), variable)?;
    let connector = connector(
        target,
        ConnectOptions {
            client,
            authorizer,
            http: HttpOptions {
                trust: trust.clone(),
                ..HttpOptions::default()
            },
        },
    );
    let mut listening = crate::Listening {
        listen: args.listen.clone(),
        idle: Duration::from_secs(args.session_idle),
        served: &args.served,
        auth: &args.auth,
        trust,
        ready: None,
        metrics: None,
        tracing,
        scopes: protocol_droid::adapters::primary::http::SupportedScopes::default(),
    };
    let setup = listening.setup(RateLimits::default())?;
    let options = BridgeOptions {
        policy,
        report_meta: args.report_meta,
        observer: setup.observer.clone(),
        request_timeout: Duration::from_secs(args.timeout),
        ..BridgeOptions::default()
    };
    let runtime = crate::runtime_for(args.listen.is_none())?;
    crate::run_to_end(runtime, args.listen.is_none(), async {
        let bridge = Bridge::connect(connector, options)
            .await
            .context("connecting to the upstream")?;
        args.served
            .share_bridge(&bridge, args.listen.is_some(), trust)
            .await?;
        tracing::info!(
            target: "droid",
            upstream = %bridge.upstream().version,
            "bridging"
        );
        // Every rule must name something the upstream offers now: a typo
        // would otherwise leave the primitive it meant open to everyone.
        let mut rules = ScopeRules::default();
        for rule in args.auth.scope_rules()? {
            let offered = bridge
                .offers(rule.kind, &rule.name)
                .await
                .context("checking --auth-scope against the upstream")?;
            anyhow::ensure!(
                offered,
                "--auth-scope names the {} {:?}, which the upstream does not offer",
                rule.kind.word(),
                rule.name
            );
            rules.require(rule.kind, rule.name, rule.scope);
        }
        let server = bridge
            .server(|builder| {
                setup
                    .apply(builder)
                    .revisions(offered)
                    .forwarded_scopes(rules)
            })
            .context("building the bridge's server")?;
        crate::serve_on(server, listening).await
    })
}
