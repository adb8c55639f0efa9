//! `droid serve`'s authorization flags, turned into a resource server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::builder::NonEmptyStringValueParser;
use protocol_droid::adapters::primary::http::{ResourceServer, SupportedScopes};
use protocol_droid::adapters::secondary::bearer::{
    IntrospectionValidator, Jwks, JwksOptions, JwtValidator,
};
use protocol_droid::adapters::secondary::local_file;
use protocol_droid::adapters::secondary::tls::Trust;
use protocol_droid::application::server::Primitive;
use protocol_droid::application::server::TokenValidator;

/// Authorization for `--listen`: off unless an issuer or an introspection
/// endpoint is named; once on, a request without a valid token is refused.
#[derive(Debug, clap::Args)]
pub(crate) struct AuthArgs {
    /// The authorization server clients are sent to (its issuer
    /// identifier): JWT access tokens must name it in `iss`, and with
    /// `--auth-introspection-url` an answer that names an issuer must name
    /// this one.
    #[arg(long, value_name = "URL", value_parser = NonEmptyStringValueParser::new())]
    auth_issuer: Option<String>,
    /// Where the issuer publishes its signing keys (its `jwks_uri`).
    #[arg(long, value_name = "URL", conflicts_with = "auth_jwks_file")]
    auth_jwks_url: Option<String>,
    /// The issuer's signing keys, read once from a JWKS file.
    #[arg(long, value_name = "PATH")]
    auth_jwks_file: Option<std::path::PathBuf>,
    /// Validate opaque tokens at this RFC 7662 introspection endpoint
    /// instead of as JWTs (the issuer is still named with `--auth-issuer`).
    #[arg(
        long,
        value_name = "URL",
        conflicts_with_all = ["auth_jwks_url", "auth_jwks_file"]
    )]
    auth_introspection_url: Option<String>,
    /// The client id this server introspects as.
    #[arg(long, value_name = "ID", requires = "auth_introspection_url")]
    auth_client_id: Option<String>,
    /// Read the client secret this server introspects with from this
    /// file, or set `DROID_AUTH_CLIENT_SECRET`.
    #[arg(long, value_name = "FILE")]
    auth_client_secret_file: Option<std::path::PathBuf>,
    /// The canonical URI of this server, which tokens must name as their
    /// audience; `http://LISTEN/mcp` by default.
    #[arg(long, value_name = "URL", value_parser = NonEmptyStringValueParser::new())]
    auth_resource: Option<String>,
    /// Also accept tokens whose `aud` is this value.
    #[arg(long, value_name = "AUD", value_parser = NonEmptyStringValueParser::new())]
    auth_audience: Option<String>,
    /// A scope every request's token must hold (repeatable); a token
    /// without it is refused with 403 and a challenge naming the scope.
    #[arg(long = "auth-required-scope", value_name = "SCOPE")]
    required_scope: Vec<String>,
    /// Make a primitive require a scope to be seen and used (repeatable):
    /// `NAME=SCOPE` for a tool, or `tool:NAME=SCOPE`, `prompt:NAME=SCOPE`,
    /// `resource:URI=SCOPE`, `template:URI_TEMPLATE=SCOPE`. A rule naming
    /// nothing the server offers stops it from starting (the gateway checks
    /// a rule against the upstream it names: docs/gateway.md).
    #[arg(long = "auth-scope", value_name = "[KIND:]NAME=SCOPE")]
    scope: Vec<String>,
    /// Tolerate clocks this many seconds apart when checking exp and nbf
    /// (at most 300).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 30,
        value_parser = clap::value_parser!(u64).range(0..=300)
    )]
    auth_leeway: u64,
    /// Serve a request without a token as the anonymous caller, who sees
    /// only the tools that require no scope.
    #[arg(long)]
    auth_allow_anonymous: bool,
}

/// One `--auth-scope` rule.
#[derive(Clone, Debug)]
pub(crate) struct ScopeRule {
    pub(crate) kind: Primitive,
    pub(crate) name: String,
    pub(crate) scope: String,
}

impl ScopeRule {
    /// `[KIND:]NAME=SCOPE`; a name without a known kind is a tool's.
    pub(crate) fn parse(rule: &str) -> anyhow::Result<Self> {
        let (target, scope) = rule
            .rsplit_once('=')
            .filter(|(name, scope)| !name.is_empty() && !scope.is_empty())
            .with_context(|| format!("--auth-scope {rule:?} is not [KIND:]NAME=SCOPE"))?;
        let (kind, name) = [
            Primitive::Tool,
            Primitive::Prompt,
            Primitive::Resource,
            Primitive::Template,
        ]
        .into_iter()
        .find_map(|kind| {
            let name = target.strip_prefix(kind.word())?.strip_prefix(':')?;
            Some((kind, name))
        })
        .unwrap_or((Primitive::Tool, target));
        anyhow::ensure!(!name.is_empty(), "--auth-scope {rule:?} names nothing");
        Ok(Self {
            kind,
            name: name.to_owned(),
            scope: scope.to_owned(),
        })
    }
}

impl AuthArgs {
    /// The `--auth-scope` rules.
    pub(crate) fn scope_rules(&self) -> anyhow::Result<Vec<ScopeRule>> {
        self.scope
            .iter()
            .map(|rule| ScopeRule::parse(rule))
            .collect()
    }

    /// Whether authorization is configured at all.
    pub(crate) const fn enabled(&self) -> bool {
        self.auth_issuer.is_some() || self.auth_introspection_url.is_some()
    }

    /// Whether the resource was named (`--auth-resource`) rather than
    /// taken from the address listened on.
    pub(crate) const fn names_resource(&self) -> bool {
        self.auth_resource.is_some()
    }
}

/// Why introspection alone is refused.
const NO_ISSUER: &str = "--auth-introspection-url needs --auth-issuer: the authorization server \
                         clients are sent to for a token, which the resource metadata must name";

/// Refuses, before anything is bound, introspection without an issuer, and
/// a public listener with authorization on and no `--auth-resource`: its
/// resource must be a URL clients use.
pub(crate) fn check_listen(args: &AuthArgs, listen: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.auth_introspection_url.is_none() || args.auth_issuer.is_some(),
        NO_ISSUER
    );
    check_flags(args)?;
    if !args.enabled() || args.auth_resource.is_some() {
        return Ok(());
    }
    let host = listen.rsplit_once(':').map_or(listen, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    anyhow::ensure!(
        loopback,
        "--auth-resource is required when listening on {listen}: the resource must be the URL \
         clients use"
    );
    Ok(())
}

/// Refuses flags that contradict each other or mean nothing as given: said
/// before anything is bound or announced.
fn check_flags(args: &AuthArgs) -> anyhow::Result<()> {
    if !args.enabled() {
        // A flag that only means something with authorization on must not
        // leave a server open while its operator believes it protected.
        let stray = args.auth_jwks_url.is_some()
            || args.auth_jwks_file.is_some()
            || args.auth_resource.is_some()
            || args.auth_audience.is_some()
            || args.auth_client_id.is_some()
            || args.auth_allow_anonymous
            || !args.required_scope.is_empty();
        anyhow::ensure!(
            !stray,
            "authorization flags were given without --auth-issuer or --auth-introspection-url, \
             so authorization would be off; name the issuer or drop the flags"
        );
        return Ok(());
    }
    // The anonymous caller holds no scope, so with a scope every request
    // needs it could never be served: asking for both is a mistake to name,
    // not one of the two to drop.
    anyhow::ensure!(
        !args.auth_allow_anonymous || args.required_scope.is_empty(),
        "--auth-allow-anonymous and --auth-required-scope contradict each other: every request \
         must hold the required scopes, and an anonymous one holds none; use --auth-scope to \
         scope some primitives instead"
    );
    Ok(())
}

/// Which scopes a resource server lists in its metadata and challenges,
/// besides those every request needs.
pub(crate) enum Listed<'a> {
    /// An MCP endpoint's: those of `--auth-scope`, and what `shared` holds
    /// (a gateway's `[scopes]`), as it changes.
    Primitives(&'a SupportedScopes),
    /// The admin page's: its own scope only, so a client that follows the
    /// page's challenge asks for a token the page takes. The page is a
    /// resource of its own at `at` (its URL): tokens issued for it are
    /// taken besides the MCP endpoint's.
    Page {
        /// The page's scope.
        scope: &'a str,
        /// The page's URL.
        at: &'a str,
    },
}

/// The resource server `args` describe for a server bound at `bound`, or
/// `None` when authorization is off.
pub(crate) fn resource_server(
    args: &AuthArgs,
    bound: SocketAddr,
    scheme: &str,
    trust: &Trust,
    listed: &Listed<'_>,
) -> anyhow::Result<Option<ResourceServer>> {
    check_flags(args)?;
    if !args.enabled() {
        return Ok(None);
    }
    // The resource is what clients reach; an unspecified or public bind
    // address is not a name they use, so it must be said.
    anyhow::ensure!(
        args.auth_resource.is_some() || bound.ip().is_loopback(),
        "--auth-resource is required when listening on {bound}: the resource must be the URL \
         clients use"
    );
    let resource = args
        .auth_resource
        .clone()
        .unwrap_or_else(|| format!("{scheme}://{bound}/mcp"));
    let alias = args.auth_audience.clone();
    let audience = alias.clone().unwrap_or_else(|| resource.clone());
    // Audiences a token may name besides the resource.
    let page = match listed {
        Listed::Page { at, .. } => Some((*at).to_owned()),
        Listed::Primitives(_) => None,
    };
    let also: Vec<String> = alias.iter().chain(&page).cloned().collect();
    let leeway = Duration::from_secs(args.auth_leeway);
    // The metadata must name an authorization server (MCP authorization,
    // after RFC 9728): without one a client cannot find where to get a
    // token, whichever way tokens are then checked.
    let Some(issuer) = &args.auth_issuer else {
        anyhow::bail!(NO_ISSUER);
    };
    let validator: Arc<dyn TokenValidator> = match &args.auth_introspection_url {
        None => {
            let jwks = match (&args.auth_jwks_url, &args.auth_jwks_file) {
                (Some(url), _) => Jwks::remote(
                    url,
                    JwksOptions {
                        trust: trust.clone(),
                        ..JwksOptions::default()
                    },
                )?,
                (None, Some(path)) => {
                    // A key set is kilobytes; a fetched one is held to 64 KiB.
                    let bytes = local_file::read_regular(path, 1024 * 1024)
                        .with_context(|| format!("reading {}", path.display()))?;
                    Jwks::fixed(&bytes)?
                }
                (None, None) => {
                    anyhow::bail!("--auth-issuer needs --auth-jwks-url or --auth-jwks-file")
                }
            };
            let mut validator = JwtValidator::new(issuer, &resource, jwks).leeway(leeway);
            for audience in &also {
                validator = validator.also_audience(audience.clone());
            }
            Arc::new(validator)
        }
        Some(endpoint) => {
            let secret = crate::secret::read(
                "DROID_AUTH_CLIENT_SECRET",
                args.auth_client_secret_file.as_deref(),
            )?;
            let (Some(id), Some(secret)) = (&args.auth_client_id, &secret) else {
                anyhow::bail!(
                    "--auth-introspection-url needs --auth-client-id and \
                     DROID_AUTH_CLIENT_SECRET (or --auth-client-secret-file)"
                );
            };
            let mut validator = IntrospectionValidator::new(endpoint, id, secret, &resource)?
                .trust(trust)?
                .issuer(issuer.clone());
            for audience in &also {
                validator = validator.also_audience(audience.clone());
            }
            Arc::new(validator)
        }
    };
    let mut server = ResourceServer::new(&resource, validator)?
        .audience(audience)
        .require_scopes(&args.required_scope)?
        .token_leeway(Duration::from_secs(args.auth_leeway));
    server = match listed {
        Listed::Primitives(shared) => {
            let mut supported = args.required_scope.clone();
            for rule in args.scope_rules()? {
                if !supported.contains(&rule.scope) {
                    supported.push(rule.scope);
                }
            }
            server
                .scopes_supported(&supported)?
                .supported_scopes((*shared).clone())?
        }
        Listed::Page { scope, .. } => server.scopes_supported([scope])?,
    }
    .authorization_server(issuer);
    if args.auth_allow_anonymous {
        server = server.allow_anonymous();
    }
    Ok(Some(server))
}
