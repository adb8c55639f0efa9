//! From a configuration to the gateway's upstreams and scope rules: at
//! start, and again for what a reload changed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures_util::future::join_all;
use protocol_droid::adapters::secondary::connect::{ConnectOptions, Target, connector};
use protocol_droid::adapters::secondary::http::HttpOptions;
use protocol_droid::adapters::secondary::tls::Trust as TlsTrust;
use protocol_droid::adapters::secondary::trust_file::TrustFile;
use protocol_droid::application::bridge::Connector;
use protocol_droid::application::client::ClientOptions;
use protocol_droid::application::gateway::{
    Approval, Disclosure, Gateway, Trust, TrustStore, TrustStoreError, UpstreamError,
    UpstreamHealth, UpstreamOptions,
};
use protocol_droid::application::server::{Primitive, ScopeRules, Server};
use protocol_droid::domain::catalog::{SchemaDigest, ToolId};
use protocol_droid::domain::{DegradePolicy, ProtocolVersion};

use super::config::{self, Config, DegradeConfig, Mode, TrustConfig, UpstreamConfig};
use crate::auth::AuthArgs;

/// What a gateway is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// To serve clients.
    Serving,
    /// To show its catalog (`--print-digests`) and exit: it reads what was
    /// trusted and writes nothing, neither to the state file nor to a
    /// shared store, so that looking at the tools trusts none of them.
    Viewing,
}

/// Builds the gateway: connects every upstream at once and loads its
/// tools. An upstream that fails is logged and retried in the background;
/// the failures are returned beside the gateway.
pub(crate) async fn start(
    config: &Config,
    config_path: Option<&Path>,
    listening: &crate::Listening<'_>,
    setup: crate::Setup,
    purpose: Purpose,
) -> anyhow::Result<(Gateway, Vec<String>)> {
    let (auth, tls_trust) = (listening.auth, listening.trust);
    let disclosure = match config.mode {
        Mode::Default => Disclosure::Default,
        Mode::Progressive => Disclosure::Progressive,
    };
    let builder = setup
        .apply(Server::builder("droid-gateway", env!("CARGO_PKG_VERSION")))
        .instructions("A gateway in front of several MCP servers; tool names are `upstream/tool`.");
    let gateway = Gateway::build(builder, disclosure, config.pins()?)
        .context("building the gateway's server")?;
    // What was trusted on first use outlives the process, except for the
    // embedded default, whose one upstream is this program.
    let state = config.state.clone().or_else(|| {
        config_path.and_then(|path| config::default_state(path, purpose == Purpose::Serving))
    });
    match (&state, config_path) {
        (Some(path), _) => {
            let store = TrustFile::open(path).context("opening the gateway's state file")?;
            match purpose {
                Purpose::Serving => gateway.set_trust_store(Arc::new(store)),
                Purpose::Viewing => gateway.set_trust_store(Arc::new(ReadOnly(store))),
            }
        }
        (None, Some(_)) => tracing::warn!(
            target: "droid",
            "no state file (set `state`, or HOME): pins trusted on first use last only until exit"
        ),
        (None, None) => {}
    }
    // Before the upstreams are added: their first use may be another
    // instance's already. A gateway only looked at claims nothing there.
    if purpose == Purpose::Serving {
        listening
            .served
            .share_gateway(&gateway, listening.listen.is_some(), listening.trust)
            .await?;
    }
    let prepared = prepare_all(config.enabled(), tls_trust)?;
    // A list of digests is complete or says it is not; a gateway serving
    // clients serves those up soon, and no slow upstream holds the rest back.
    let wait = match purpose {
        Purpose::Serving => Some(START_WAIT),
        Purpose::Viewing => None,
    };
    let failures = add_prepared(&gateway, prepared, wait, Install::Add).await;
    let cli = cli_scopes(auth)?;
    listening
        .scopes
        .set(rule_scopes(config, &cli))
        .context("a scope rule")?;
    let rules = scope_rules(config, &cli);
    check_scopes(&rules, &gateway)?;
    set_scopes(&rules, &gateway);
    gateway
        .set_primitive_scopes(primitive_rules(config, &cli))
        .context("a scope rule")?;
    Ok((gateway, failures))
}

/// An upstream ready to add: its name, how to reach it, how to treat it.
pub(crate) type Prepared = (String, Connector, UpstreamOptions);

/// What adding `upstreams` needs, or the first that cannot be reached as
/// configured (a missing token, an unreadable CA file): nothing is added
/// then.
pub(crate) fn prepare_all<'a>(
    upstreams: impl IntoIterator<Item = &'a UpstreamConfig>,
    tls_trust: &TlsTrust,
) -> anyhow::Result<Vec<Prepared>> {
    upstreams
        .into_iter()
        .map(|upstream| {
            let (connector, options) = prepare(upstream, tls_trust)?;
            Ok((upstream.name.clone(), connector, options))
        })
        .collect()
}

/// How long a gateway starting to serve waits for its upstreams: the usual
/// server is up well within it, so the first sessions see a whole catalog,
/// and one that hangs (up to its own `timeout`) holds the others back no
/// longer. What is still connecting then comes up in the background, and its
/// tools appear as a list change.
pub(crate) const START_WAIT: Duration = Duration::from_secs(5);

/// How [`add_prepared`] puts an upstream in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Install {
    /// Beside the others; a name taken is refused.
    Add,
    /// In place of the upstream of its name, if any, made before the break
    /// ([`Gateway::replace_upstream`]).
    Replace,
}

/// Adds `prepared` to `gateway` at once, waiting for each at most `wait`
/// (`None`: until it is up or has failed); the first attempt of each that
/// failed (it is retried in the background), each said in the log.
pub(crate) async fn add_prepared(
    gateway: &Gateway,
    prepared: Vec<Prepared>,
    wait: Option<Duration>,
    install: Install,
) -> Vec<String> {
    let attempts = prepared.into_iter().map(|(name, connector, options)| {
        let gateway = gateway.clone();
        async move {
            let adding = async {
                match install {
                    Install::Add => gateway.add_upstream(&name, connector, options).await,
                    Install::Replace => gateway.replace_upstream(&name, connector, options).await,
                }
            };
            let Some(wait) = wait else {
                return adding.await.map_err(|error| failed(&error));
            };
            // The attempt runs on, or is retried, in the background.
            match tokio::time::timeout(wait, adding).await {
                Ok(added) => added.map_err(|error| failed(&error)),
                Err(_) => {
                    tracing::info!(
                        target: "droid",
                        upstream = %name,
                        "still connecting after {} s; serving the others meanwhile",
                        wait.as_secs()
                    );
                    Ok(())
                }
            }
        }
    });
    let failures: Vec<String> = join_all(attempts)
        .await
        .into_iter()
        .filter_map(Result::err)
        .collect();
    for failure in &failures {
        tracing::warn!(target: "droid", "{failure}");
    }
    failures
}

/// A first attempt that failed, said with what follows from it: retried in
/// the background, unless its name is one the gateway cannot serve.
fn failed(error: &UpstreamError) -> String {
    match error {
        UpstreamError::Name(_) => format!("{error}; it is not served"),
        _ => format!("{error}; retrying in the background"),
    }
}

/// The connector and options for one upstream.
fn prepare(
    upstream: &UpstreamConfig,
    tls_trust: &TlsTrust,
) -> anyhow::Result<(Connector, UpstreamOptions)> {
    let name = &upstream.name;
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
                child.cwd.clone_from(&upstream.cwd);
            }
            target
        }
        (None, Some(url)) => Target::url(url).with_context(|| format!("upstream {name:?}"))?,
        _ => anyhow::bail!("upstream {name:?} needs exactly one of command and url"),
    };
    let mut client = ClientOptions::default();
    client.client_info.name = "droid-gateway".to_owned();
    client.request_timeout = upstream.timeout();
    if let Some(revision) = &upstream.revision {
        client.revisions = vec![
            revision
                .parse::<ProtocolVersion>()
                .with_context(|| format!("upstream {name:?}: revision {revision}"))?,
        ];
    }
    let trust = match &upstream.ca_file {
        Some(path) => {
            TlsTrust::with_ca_file(path).with_context(|| format!("upstream {name:?}: ca_file"))?
        }
        None => tls_trust.clone(),
    };
    let mut http = HttpOptions {
        trust,
        ..HttpOptions::default()
    };
    for (header, value) in &upstream.headers {
        http.add_header(header, value)
            .with_context(|| format!("upstream {name:?}: headers"))?;
    }
    let token = crate::secret::read_named(
        upstream.bearer_token_env.as_deref(),
        upstream.bearer_token_file.as_deref(),
    )
    .with_context(|| format!("upstream {name:?}: bearer token"))?;
    let variable = upstream.bearer_token_env.as_deref().unwrap_or_default();
    let authorizer = crate::secret::bearer(token, upstream.bearer_token_file.as_deref(), variable)
        .with_context(|| format!("upstream {name:?}: bearer token"))?;
    // Allowed (a private network may be trusted), but said: a credential
    // sent over plain HTTP to another machine (a token, a configured
    // header, the URL's userinfo) can be read on the way.
    let credentials = authorizer.is_some() || !upstream.headers.is_empty();
    if let Target::Url(url) = &target {
        let credentials = credentials || url.password().is_some() || !url.username().is_empty();
        let loopback = url
            .host_str()
            .map(|host| host.trim_start_matches('[').trim_end_matches(']'))
            .is_some_and(|host| {
                host.eq_ignore_ascii_case("localhost")
                    || host
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback())
            });
        if credentials && url.scheme() == "http" && !loopback {
            tracing::warn!(
                target: "droid",
                upstream = %name,
                "the upstream's credentials (its token, headers or userinfo) are sent over plain HTTP to another machine"
            );
        }
    }
    let connect = ConnectOptions {
        client,
        authorizer,
        http,
    };
    let mut options = UpstreamOptions::default();
    options.trust = match upstream.trust {
        TrustConfig::Pinned => Trust::Pinned,
        TrustConfig::OnFirstUse => Trust::OnFirstUse,
    };
    options.tools = upstream.policy()?;
    options.timeout = upstream.timeout();
    options.bridge.policy = match upstream.degrade {
        DegradeConfig::Strict => DegradePolicy::strict(),
        DegradeConfig::Permissive => DegradePolicy::permissive(),
    };
    Ok((connector(target, connect), options))
}

/// The `--auth-scope` rules, as `[scopes]` keys: a tool's by its id, any
/// other's with its kind in front (`prompt:upstream/name`).
pub(crate) fn cli_scopes(auth: &AuthArgs) -> anyhow::Result<Vec<(String, String)>> {
    Ok(auth
        .scope_rules()?
        .into_iter()
        .map(|rule| match rule.kind {
            Primitive::Tool => (rule.name, rule.scope),
            kind => (format!("{}:{}", kind.word(), rule.name), rule.scope),
        })
        .collect())
}

/// The kind a `[scopes]` key names, and the name: `prompt:`, `resource:`
/// and `template:` say so; a key without one (or with `tool:`) is a tool id.
fn kind_of(key: &str) -> (Primitive, &str) {
    [
        Primitive::Tool,
        Primitive::Prompt,
        Primitive::Resource,
        Primitive::Template,
    ]
    .into_iter()
    .find_map(|kind| Some((kind, key.strip_prefix(kind.word())?.strip_prefix(':')?)))
    .unwrap_or((Primitive::Tool, key))
}

/// Every scope rule of `config` and of the command line, as `(kind, name,
/// scope)`.
fn all_rules<'a>(
    config: &'a Config,
    cli: &'a [(String, String)],
) -> impl Iterator<Item = (Primitive, &'a str, &'a String)> {
    config
        .scopes
        .iter()
        .chain(cli.iter().map(|(key, scope)| (key, scope)))
        .map(|(key, scope)| {
            let (kind, name) = kind_of(key);
            (kind, name, scope)
        })
}

/// Every scope a rule of `config` or of the command line names, once each:
/// what the gateway's challenge and metadata list as supported.
pub(crate) fn rule_scopes(config: &Config, cli: &[(String, String)]) -> Vec<String> {
    let named: BTreeSet<&String> = all_rules(config, cli).map(|(_, _, scope)| scope).collect();
    named.into_iter().cloned().collect()
}

/// The tool rules of `config` and of the command line, by tool id.
pub(crate) fn scope_rules(config: &Config, cli: &[(String, String)]) -> BTreeMap<ToolId, String> {
    all_rules(config, cli)
        .filter(|(kind, _, _)| *kind == Primitive::Tool)
        .map(|(_, tool, scope)| (ToolId::new(tool), scope.clone()))
        .collect()
}

/// The prompt, resource and template rules of `config` and of the command
/// line, by the names sessions see.
pub(crate) fn primitive_rules(config: &Config, cli: &[(String, String)]) -> ScopeRules {
    let mut rules = ScopeRules::default();
    for (kind, name, scope) in
        all_rules(config, cli).filter(|(kind, _, _)| *kind != Primitive::Tool)
    {
        rules.require(kind, name, scope.clone());
    }
    rules
}

/// Checks that each rule names an upstream, and, once that upstream is up,
/// one of its tools: a typo would leave the tool it meant open to everyone.
/// A rule for an upstream that is not up yet cannot be checked against its
/// tools, and passes: the gateway checks it when the upstream comes up, and
/// keeps that upstream down if the rule names none of its tools.
pub(crate) fn check_scopes(
    rules: &BTreeMap<ToolId, String>,
    gateway: &Gateway,
) -> anyhow::Result<()> {
    let catalog = gateway.catalog();
    let upstreams = gateway.upstreams();
    for id in rules.keys() {
        let tool = id.as_str();
        let upstream = tool.split_once('/').map(|(upstream, _)| upstream);
        let status = upstreams.iter().find(|u| Some(u.name.as_str()) == upstream);
        let checkable = status.is_some_and(|u| matches!(u.health, UpstreamHealth::Up { .. }));
        anyhow::ensure!(
            status.is_some() && (!checkable || catalog.iter().any(|(known, _, _)| known == id)),
            "the scope rule for {tool:?} names no tool of any upstream (ids are `upstream/tool`; \
             see --print-digests)"
        );
    }
    Ok(())
}

/// Puts `rules` in force and drops any other.
pub(crate) fn set_scopes(rules: &BTreeMap<ToolId, String>, gateway: &Gateway) {
    add_scopes(rules, gateway);
    for id in gateway.scopes().keys() {
        if !rules.contains_key(id) {
            gateway.drop_scope(id);
        }
    }
}

/// Puts `rules` in force, keeping the others: a rule only ever hides, so
/// adding it before anything else changes is the safe order.
pub(crate) fn add_scopes(rules: &BTreeMap<ToolId, String>, gateway: &Gateway) {
    for (id, scope) in rules {
        gateway.require_scope(id.clone(), scope.clone());
    }
}

/// A state file read and never written: first uses and approvals are
/// taken from it, and those made meanwhile are held in memory only.
#[derive(Debug)]
struct ReadOnly(TrustFile);

impl TrustStore for ReadOnly {
    fn first_use(&self, upstream: &str) -> Option<BTreeMap<ToolId, SchemaDigest>> {
        self.0.first_use(upstream)
    }

    fn record_first_use(
        &self,
        _upstream: &str,
        _pins: &BTreeMap<ToolId, SchemaDigest>,
    ) -> Result<Option<BTreeMap<ToolId, SchemaDigest>>, TrustStoreError> {
        Ok(None)
    }

    fn approvals(&self) -> Vec<Approval> {
        self.0.approvals()
    }

    fn record_approval(&self, _approval: &Approval) -> Result<(), TrustStoreError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scopes_key_says_its_kind_or_is_a_tool_id() {
        assert_eq!(kind_of("fs/write"), (Primitive::Tool, "fs/write"));
        assert_eq!(kind_of("tool:fs/write"), (Primitive::Tool, "fs/write"));
        assert_eq!(
            kind_of("prompt:fs/review"),
            (Primitive::Prompt, "fs/review")
        );
        assert_eq!(
            kind_of("resource:fs+file:///a"),
            (Primitive::Resource, "fs+file:///a")
        );
        assert_eq!(
            kind_of("template:fs+file:///{x}"),
            (Primitive::Template, "fs+file:///{x}")
        );
        // A word that is no kind is part of a tool id.
        assert_eq!(kind_of("promptly:x"), (Primitive::Tool, "promptly:x"));
    }
}
