//! `droid gateway`: many upstream MCP servers behind one, configured in TOML.
//!
//! ```toml
//! listen = "127.0.0.1:8931"      # Streamable HTTP at /mcp; stdio when absent
//! mode = "progressive"           # or "default": every verified tool for everyone
//!
//! [[upstream]]
//! name = "files"                 # the namespace: tools are `files/<name>`
//! command = ["npx", "some-server"]
//!
//! [[upstream]]
//! name = "web"
//! url = "http://127.0.0.1:9000/mcp"
//! revision = "2025-11-25"        # optional: pin the revision
//! trust = "on-first-use"         # pin what is seen at start; default "pinned"
//!
//! [pins]                         # the operator's approvals, by digest
//! "files/read_file" = "3f1c…"
//! ```
//!
//! Without `--config` the embedded default runs: the built-in fixture server
//! (`droid serve`) as the one upstream, trusted on first use, so a fresh
//! checkout serves at once. `--print-digests` lists every tool's id, digest
//! and provenance and exits: what an operator pastes into `[pins]` to approve
//! a tool, or again after a drift.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, bail};
use protocol_droid::adapters::secondary::connect::{ConnectOptions, Target, connect};
use protocol_droid::adapters::secondary::http::HttpOptions;
use protocol_droid::adapters::secondary::tls::Trust as TlsTrust;
use protocol_droid::application::client::ClientOptions;
use protocol_droid::application::gateway::{Disclosure, Gateway, Pins, Trust};
use protocol_droid::application::server::{Primitive, Server};
use protocol_droid::domain::ProtocolVersion;
use protocol_droid::domain::catalog::{SchemaDigest, ToolId};
use serde::Deserialize;

use crate::auth::AuthArgs;

/// The configuration used when none is given. `{self}` is this program.
pub(crate) const EMBEDDED_DEFAULT: &str = r#"
# The built-in fixture server as the one upstream, trusted on first use.
mode = "default"

[[upstream]]
name = "fixture"
command = ["{self}", "serve"]
trust = "on-first-use"
"#;

/// The configuration file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    /// Where to serve Streamable HTTP; stdio when absent.
    listen: Option<String>,
    /// `default` or `progressive`.
    #[serde(default)]
    mode: Mode,
    /// The upstream servers.
    #[serde(default)]
    upstream: Vec<UpstreamConfig>,
    /// Approved digests, by tool id.
    #[serde(default)]
    pins: BTreeMap<String, String>,
    /// The scope a caller needs for a tool, by tool id (with authorization
    /// on, see `--auth-issuer`).
    #[serde(default)]
    scopes: BTreeMap<String, String>,
}

#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Mode {
    #[default]
    Default,
    Progressive,
}

#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum TrustConfig {
    #[default]
    Pinned,
    OnFirstUse,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpstreamConfig {
    name: String,
    command: Option<Vec<String>>,
    url: Option<String>,
    revision: Option<String>,
    #[serde(default)]
    trust: TrustConfig,
    /// A private CA for this upstream's `https` URL, besides the default
    /// roots and in place of `--ca-file`.
    ca_file: Option<std::path::PathBuf>,
    /// Variables set for a command upstream, which otherwise gets only
    /// PATH, HOME, the locale and TERM of the gateway's environment.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Variables of the gateway's environment passed on to a command
    /// upstream by name.
    #[serde(default)]
    pass_env: Vec<String>,
}

impl Config {
    /// Reads `path`, or the embedded default.
    pub(crate) fn load(path: Option<&Path>) -> anyhow::Result<Self> {
        let text = match path {
            Some(path) => std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?,
            None => {
                let me = std::env::current_exe().context("finding this program")?;
                EMBEDDED_DEFAULT.replace("{self}", &me.to_string_lossy().replace('\\', "\\\\"))
            }
        };
        let config: Self = toml::from_str(&text).context("reading the gateway configuration")?;
        let mut names = std::collections::BTreeSet::new();
        for upstream in &config.upstream {
            if !names.insert(upstream.name.as_str()) {
                bail!("two upstreams are called {:?}", upstream.name);
            }
            if upstream.name.is_empty() || upstream.name.contains('/') {
                bail!(
                    "upstream name {:?} must be non-empty and have no '/'",
                    upstream.name
                );
            }
            if upstream.url.is_some() && (!upstream.env.is_empty() || !upstream.pass_env.is_empty())
            {
                bail!(
                    "upstream {:?}: env and pass_env are for command upstreams",
                    upstream.name
                );
            }
            if upstream.command.is_some() == upstream.url.is_some() {
                bail!(
                    "upstream {:?} needs exactly one of command and url",
                    upstream.name
                );
            }
        }
        Ok(config)
    }

    fn pins(&self) -> anyhow::Result<Pins> {
        let mut pins = Pins::default();
        for (id, digest) in &self.pins {
            let digest = SchemaDigest::from_hex(digest)
                .with_context(|| format!("pin for {id} is not a 64-digit hex digest"))?;
            pins.pin(ToolId::new(id.as_str()), digest);
        }
        Ok(pins)
    }
}

/// Builds the gateway: connects every upstream and loads its tools.
pub(crate) async fn start(
    config: &Config,
    auth: &AuthArgs,
    tls_trust: &TlsTrust,
) -> anyhow::Result<Gateway> {
    let disclosure = match config.mode {
        Mode::Default => Disclosure::Default,
        Mode::Progressive => Disclosure::Progressive,
    };
    let builder = Server::builder("droid-gateway", env!("CARGO_PKG_VERSION"))
        .instructions("A gateway in front of several MCP servers; tool names are `upstream/tool`.");
    let gateway = Gateway::build(builder, disclosure, config.pins()?)
        .context("building the gateway's server")?;
    for upstream in &config.upstream {
        let target = match (&upstream.command, &upstream.url) {
            (Some(command), None) => {
                let mut target = Target::command(command.clone())?;
                if let Target::Command(child) = &mut target {
                    child.env = upstream
                        .env
                        .iter()
                        .map(|(key, value)| (key.into(), value.into()))
                        .collect();
                    child.pass_env = upstream.pass_env.iter().map(Into::into).collect();
                }
                target
            }
            (None, Some(url)) => Target::url(url)?,
            _ => bail!(
                "upstream {:?} needs exactly one of command and url",
                upstream.name
            ),
        };
        let mut client = ClientOptions {
            handler: gateway.notices_for(&upstream.name),
            // The gateway lists again exactly when an upstream says its
            // tools changed; a cached list would hide the change.
            cache: false,
            ..ClientOptions::default()
        };
        client.client_info.name = "droid-gateway".to_owned();
        if let Some(revision) = &upstream.revision {
            client.revisions =
                vec![revision.parse::<ProtocolVersion>().with_context(|| {
                    format!("upstream {:?}: revision {revision}", upstream.name)
                })?];
        }
        let trust = match &upstream.ca_file {
            Some(path) => TlsTrust::with_ca_file(path)
                .with_context(|| format!("upstream {:?}: ca_file", upstream.name))?,
            None => tls_trust.clone(),
        };
        let options = ConnectOptions {
            client,
            http: HttpOptions {
                trust,
                ..HttpOptions::default()
            },
            ..ConnectOptions::default()
        };
        let connected = connect(&target, options)
            .await
            .with_context(|| format!("connecting to upstream {:?} ({target})", upstream.name))?;
        let trust = match upstream.trust {
            TrustConfig::Pinned => Trust::Pinned,
            TrustConfig::OnFirstUse => Trust::OnFirstUse,
        };
        gateway
            .add_upstream(&upstream.name, connected, trust)
            .await
            .with_context(|| format!("listing the tools of upstream {:?}", upstream.name))?;
    }
    // Scopes are set once every upstream is in, and each must name a tool
    // the catalog holds (verified or not): a typo would leave the tool it
    // meant open to everyone.
    let mut rules: Vec<(String, String)> = config.scopes.clone().into_iter().collect();
    for rule in auth.scope_rules()? {
        anyhow::ensure!(
            rule.kind == Primitive::Tool,
            "--auth-scope {}:{}: the gateway scopes tools only, by their `upstream/tool` id",
            rule.kind.word(),
            rule.name
        );
        rules.push((rule.name, rule.scope));
    }
    let catalog = gateway.catalog();
    for (tool, scope) in rules {
        let id = ToolId::new(tool.as_str());
        anyhow::ensure!(
            catalog.iter().any(|(known, _, _)| *known == id),
            "the scope rule for {tool:?} names no tool of any upstream (ids are `upstream/tool`; \
             see --print-digests)"
        );
        gateway.require_scope(id, scope);
    }
    Ok(gateway)
}

/// `droid gateway`.
pub(crate) fn run(
    config: Option<&Path>,
    print_digests: bool,
    mut listening: crate::Listening<'_>,
) -> anyhow::Result<()> {
    let config = Config::load(config)?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let gateway = start(&config, listening.auth, listening.trust).await?;
        if print_digests {
            let mut out = std::io::stdout().lock();
            for (id, digest, provenance) in gateway.catalog() {
                use std::io::Write as _;
                writeln!(out, "{id:<48} {digest} {provenance}")?;
            }
            return Ok(());
        }
        let unverified = gateway
            .catalog()
            .iter()
            .filter(|(_, _, p)| !p.is_verified())
            .count();
        if unverified > 0 {
            tracing::warn!(
                target: "droid",
                "{unverified} tool(s) are unverified and hidden until approved (see --print-digests)"
            );
        }
        listening.listen = listening.listen.or_else(|| config.listen.clone());
        crate::serve_on(gateway.server().clone(), listening).await
    })
}
