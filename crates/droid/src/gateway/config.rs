//! The gateway's configuration: one model that the TOML file and the JSON
//! forms other MCP clients keep (`json`) are both read into.
//!
//! ```toml
//! listen = "127.0.0.1:8931"      # Streamable HTTP at /mcp; stdio when absent
//! mode = "progressive"           # or "default": every verified tool for everyone
//! state = "/var/lib/droid/gateway.json"  # pins trusted on first use
//!
//! [[upstream]]
//! name = "files"                 # the namespace: tools are `files/<name>`
//! command = ["npx", "some-server"]
//! cwd = "/srv/files"
//! env = { LOG_LEVEL = "warn" }
//! pass_env = ["FILES_KEY"]       # passed on from the gateway's own
//!
//! [[upstream]]
//! name = "web"
//! url = "https://mcp.example.internal/mcp"
//! headers = { "X-Tenant" = "blue" }
//! bearer_token_env = "WEB_TOKEN" # or bearer_token_file
//! revision = "2025-11-25"        # optional: pin the revision
//! trust = "on-first-use"         # pin what is seen first; default "pinned"
//! timeout = 30                   # seconds to connect, list or answer a call
//! tools = { deny = ["delete_page"], rename = { search = "web_search" } }
//! degrade = "permissive"         # what an older client's answers may lose; "strict" refuses
//!
//! [pins]                         # the operator's approvals, by digest
//! "files/read_file" = "3f1c…"
//!
//! [store]                        # shared with other instances (docs/scaling.md)
//! url = "redis://10.0.0.5:6379/0" # or --store, or DROID_STORE for a password
//! instance_id = "gateway-a"
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use protocol_droid::application::gateway::{
    DEFAULT_TIMEOUT, MAX_UPSTREAM_NAME, Pins, ToolPolicy, readable_name, uri_prefix,
};
use protocol_droid::application::observe::shown_uri;
use protocol_droid::application::server::{Rate, RateLimits};
use protocol_droid::domain::catalog::{SchemaDigest, ToolId};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};

/// The configuration used when none is given. `{self}` is this program.
pub(crate) const EMBEDDED_DEFAULT: &str = r#"
# The built-in fixture server as the one upstream, trusted on first use.
mode = "default"

[[upstream]]
name = "fixture"
command = ["{self}", "serve"]
trust = "on-first-use"
"#;

/// The gateway's configuration, whichever form it was read from.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    /// Where to serve Streamable HTTP; stdio when absent.
    pub(crate) listen: Option<String>,
    /// `default` or `progressive`.
    #[serde(default)]
    pub(crate) mode: Mode,
    /// Where the pins trusted on first use are kept.
    pub(crate) state: Option<PathBuf>,
    /// Where the admin socket (`droid gateway status`, `approve`) listens.
    pub(crate) admin_socket: Option<PathBuf>,
    /// The upstream servers.
    #[serde(default)]
    pub(crate) upstream: Vec<UpstreamConfig>,
    /// Approved digests, by tool id.
    #[serde(default)]
    pub(crate) pins: BTreeMap<String, String>,
    /// The scope a caller needs for a tool, by tool id (with authorization
    /// on, see `--auth-issuer`).
    #[serde(default)]
    pub(crate) scopes: BTreeMap<String, String>,
    /// How many requests a caller may make.
    #[serde(default)]
    pub(crate) limits: LimitsConfig,
    /// The Redis shared with the other instances (`--store` is the newer
    /// word, and `DROID_STORE` keeps a password out of the file).
    #[serde(default)]
    pub(crate) store: StoreConfig,
}

/// `[store]`: what the instances serving one endpoint share, and how this
/// one is named among them; each key as its flag.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct StoreConfig {
    /// `--store`.
    pub(crate) url: Option<String>,
    /// `--store-prefix`.
    pub(crate) prefix: Option<String>,
    /// `--instance-id`.
    pub(crate) instance_id: Option<String>,
}

/// `[limits]`: rates as `COUNT/UNIT` (`"600/min"`), per caller (a token's
/// principal, else an address).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitsConfig {
    /// Every request, whatever its method.
    pub(crate) per_caller: Option<String>,
    /// The calls of any one tool, each tool counted apart.
    pub(crate) per_tool: Option<String>,
    /// The calls of the tool with this id, in place of `per_tool`.
    #[serde(default)]
    pub(crate) tools: BTreeMap<String, String>,
}

impl LimitsConfig {
    /// The limits, each rate read.
    pub(crate) fn rate_limits(&self) -> anyhow::Result<RateLimits> {
        let read = |text: &String, key: &str| {
            text.parse::<Rate>()
                .with_context(|| format!("limits.{key}"))
        };
        Ok(RateLimits {
            per_caller: self
                .per_caller
                .as_ref()
                .map(|r| read(r, "per_caller"))
                .transpose()?,
            per_tool: self
                .per_tool
                .as_ref()
                .map(|r| read(r, "per_tool"))
                .transpose()?,
            tools: self
                .tools
                .iter()
                .map(|(id, rate)| Ok((id.clone(), read(rate, &format!("tools.{id:?}"))?)))
                .collect::<anyhow::Result<_>>()?,
        })
    }
}

/// How sessions get their tools.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Mode {
    #[default]
    Default,
    Progressive,
}

/// How an upstream's tools earn trust.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum TrustConfig {
    #[default]
    Pinned,
    OnFirstUse,
}

/// What translating an upstream's answers for an older client may lose.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum DegradeConfig {
    /// Nothing: an answer the client's revision cannot carry whole is
    /// refused, naming what it lacks.
    #[default]
    Strict,
    /// Whatever this build can downgrade, each loss reported.
    Permissive,
}

/// One upstream server.
#[derive(Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpstreamConfig {
    pub(crate) name: String,
    pub(crate) command: Option<Vec<String>>,
    pub(crate) url: Option<String>,
    pub(crate) revision: Option<String>,
    #[serde(default)]
    pub(crate) trust: TrustConfig,
    /// A private CA for this upstream's `https` URL, besides the default
    /// roots and in place of `--ca-file`.
    pub(crate) ca_file: Option<PathBuf>,
    /// The working directory of a command upstream.
    pub(crate) cwd: Option<PathBuf>,
    /// Variables set for a command upstream, which otherwise gets only
    /// PATH, HOME, USER, LOGNAME, the locale, TERM, TMPDIR and TZ of the
    /// gateway's environment.
    #[serde(default)]
    pub(crate) env: BTreeMap<String, String>,
    /// Variables of the gateway's environment passed on to a command
    /// upstream by name.
    #[serde(default)]
    pub(crate) pass_env: Vec<String>,
    /// Headers sent with every request to a URL upstream.
    #[serde(default)]
    pub(crate) headers: BTreeMap<String, String>,
    /// The variable holding a bearer token for a URL upstream.
    pub(crate) bearer_token_env: Option<String>,
    /// The file holding a bearer token for a URL upstream, read again when
    /// the upstream refuses the token (rotated in place).
    pub(crate) bearer_token_file: Option<PathBuf>,
    /// Seconds to connect, list tools or answer a call.
    pub(crate) timeout: Option<f64>,
    /// `false` leaves the upstream out.
    pub(crate) enabled: Option<bool>,
    /// Which tools are offered, under which names.
    #[serde(default)]
    pub(crate) tools: ToolsConfig,
    /// What translating its answers for an older client may lose.
    #[serde(default)]
    pub(crate) degrade: DegradeConfig,
}

impl std::fmt::Debug for UpstreamConfig {
    /// Without the values of `env` and `headers`, which often carry keys,
    /// nor the URL's query.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamConfig")
            .field("name", &self.name)
            .field("command", &self.command.as_ref().and_then(|c| c.first()))
            .field("url", &self.url.as_deref().map(shown_uri))
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The `tools` table of an upstream.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolsConfig {
    /// Only these (by the upstream's names).
    pub(crate) allow: Option<Vec<String>>,
    /// Never these.
    #[serde(default)]
    pub(crate) deny: Vec<String>,
    /// New names, by the upstream's names.
    #[serde(default)]
    pub(crate) rename: BTreeMap<String, String>,
    /// Descriptions shown in place of the upstream's.
    #[serde(default)]
    pub(crate) descriptions: BTreeMap<String, String>,
}

impl Config {
    /// The rules no form can check on its own.
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        let mut names = BTreeSet::new();
        let mut prefixes: BTreeMap<String, &str> = BTreeMap::new();
        for upstream in &self.upstream {
            let name = &upstream.name;
            ensure!(
                names.insert(name.as_str()),
                "two upstreams are called {name:?}"
            );
            // A name that is no URI scheme gets one made from it, which
            // another upstream may be called: both cannot be served.
            let prefix = uri_prefix(name);
            if let Some(other) = prefixes.insert(prefix.clone(), name) {
                bail!(
                    "upstreams {other:?} and {name:?} would both name their resources \
                     {prefix}+…; rename one"
                );
            }
            ensure!(
                readable_name(name, MAX_UPSTREAM_NAME) && !name.contains('/'),
                "upstream name {name:?} must be 1 to {MAX_UPSTREAM_NAME} characters, with no '/', control or invisible character, nor white space at an end"
            );
            ensure!(
                upstream.command.is_some() != upstream.url.is_some(),
                "upstream {name:?} needs exactly one of command and url"
            );
            if upstream.command.as_ref().is_some_and(Vec::is_empty) {
                bail!("upstream {name:?}: the command is empty");
            }
            if upstream.url.is_some() {
                ensure!(
                    upstream.env.is_empty()
                        && upstream.pass_env.is_empty()
                        && upstream.cwd.is_none(),
                    "upstream {name:?}: env, pass_env and cwd are for command upstreams"
                );
                let mut named = BTreeSet::new();
                for header in upstream.headers.keys() {
                    let lower = header.to_ascii_lowercase();
                    ensure!(
                        !RESERVED_HEADERS.contains(&lower.as_str()) && !lower.starts_with("mcp-"),
                        "upstream {name:?}: the header {header:?} is the transport's to set, not the configuration's"
                    );
                    // Header names are read without case: two spellings of
                    // one would both be sent, and which a server heeds is
                    // its own choice.
                    ensure!(
                        named.insert(lower.clone()),
                        "upstream {name:?}: the header {header:?} is named twice (names are read without case)"
                    );
                    ensure!(
                        lower != "authorization"
                            || (upstream.bearer_token_env.is_none()
                                && upstream.bearer_token_file.is_none()),
                        "upstream {name:?}: an Authorization header and a bearer token: give the credential one way"
                    );
                }
            } else {
                ensure!(
                    upstream.headers.is_empty()
                        && upstream.bearer_token_env.is_none()
                        && upstream.bearer_token_file.is_none()
                        && upstream.ca_file.is_none(),
                    "upstream {name:?}: headers, bearer tokens and ca_file are for url upstreams"
                );
            }
            for (key, value) in &upstream.env {
                ensure!(
                    !key.is_empty() && !key.contains(['=', '\0']) && !value.contains('\0'),
                    "upstream {name:?}: the environment variable {key:?} cannot be set (a name must be non-empty without '=' or NUL, a value without NUL)"
                );
            }
            ensure!(
                upstream.bearer_token_env.is_none() || upstream.bearer_token_file.is_none(),
                "upstream {name:?}: give the bearer token one way, bearer_token_env or bearer_token_file"
            );
            if let Some(seconds) = upstream.timeout {
                ensure!(
                    seconds.is_finite() && (0.001..=86_400.0).contains(&seconds),
                    "upstream {name:?}: timeout must be a number of seconds from 0.001 to a day"
                );
            }
            upstream
                .policy()
                .with_context(|| format!("upstream {name:?}: tools"))?;
        }
        self.limits.rate_limits()?;
        Ok(())
    }

    /// The upstreams to run: those not disabled.
    pub(crate) fn enabled(&self) -> impl Iterator<Item = &UpstreamConfig> {
        self.upstream.iter().filter(|u| u.enabled != Some(false))
    }

    /// The operator's pins.
    pub(crate) fn pins(&self) -> anyhow::Result<Pins> {
        let mut pins = Pins::default();
        for (id, digest) in &self.pins {
            let digest = SchemaDigest::from_hex(digest).with_context(|| {
                format!("pin for {id} is not a digest: 64 lowercase hex digits")
            })?;
            pins.pin(ToolId::new(id.as_str()), digest);
        }
        Ok(pins)
    }
}

impl UpstreamConfig {
    /// The tool policy its `tools` table describes.
    pub(crate) fn policy(&self) -> anyhow::Result<ToolPolicy> {
        let tools = &self.tools;
        let mut policy = ToolPolicy::default().deny(tools.deny.iter().cloned());
        if let Some(allow) = &tools.allow {
            policy = policy.allow(allow.iter().cloned());
        }
        for (from, to) in &tools.rename {
            policy = policy.rename(from.clone(), to.clone())?;
        }
        for (name, description) in &tools.descriptions {
            policy = policy.describe(name.clone(), description.clone());
        }
        Ok(policy)
    }

    /// How long it may take.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
            .map_or(DEFAULT_TIMEOUT, Duration::from_secs_f64)
    }
}

/// Where the pins trusted on first use are kept for the configuration at
/// `config`, when the configuration does not say: under the user's state
/// directory, named after the configuration's own path, so two gateways
/// with two configurations keep two states.
///
/// A state file named the way earlier versions named it (after the
/// configuration's canonical path, links followed, or after its absolute
/// path with its `..` kept) is taken over when the file of the new name is
/// not there: an upgrade must not start the gateway on an empty state,
/// trusting every upstream anew on first use and dropping every approval.
/// With `adopt`, it is copied to the new name, and left where it is for
/// whatever still goes by that name (the same file reached without the link
/// is a configuration path of its own); without (a look that writes
/// nothing, as `--print-digests` is), it is read where it is.
pub(crate) fn default_state(config: &Path, adopt: bool) -> Option<PathBuf> {
    let folder = state_base()?.join("droid").join("gateway");
    let named = folder.join(state_name(config));
    match named_before(&folder, config, &named) {
        // Where it could not be moved (a file system without links, say),
        // it is used where it is, unless the new name appeared meanwhile.
        Some(old) if adopt => Some(if adopt_state(&old, &named) || named.exists() {
            named
        } else {
            old
        }),
        Some(old) => Some(old),
        None => Some(named),
    }
}

/// A state file an earlier version named after `config` (its canonical
/// path, or its absolute path with any `..` kept), if one is there and a
/// file named `named` is not.
fn named_before(folder: &Path, config: &Path, named: &Path) -> Option<PathBuf> {
    if named.exists() {
        return None;
    }
    let file = named.file_name()?.to_string_lossy().into_owned();
    let digest = path_digest(Some(config));
    let canonical = std::fs::canonicalize(config).ok();
    let absolute = std::path::absolute(config).ok();
    [canonical, absolute]
        .into_iter()
        .flatten()
        .map(|path| {
            let before = digest_of_name(&path.to_string_lossy());
            folder.join(file.replacen(&digest, &before, 1))
        })
        .find(|old| old != named && old.exists())
}

/// Copies the state file `old` to `named`, never over a file there: a new
/// link fails if one is (another gateway that wrote it meanwhile). The file
/// is written anew (beside, then renamed over) at every change, so the two
/// names part at the first. Whether it was copied.
fn adopt_state(old: &Path, named: &Path) -> bool {
    if let Err(error) = std::fs::hard_link(old, named) {
        tracing::warn!(
            target: "droid",
            "the state file {} could not be copied to {}: {error}",
            old.display(),
            named.display()
        );
        return false;
    }
    tracing::info!(
        target: "droid",
        "the state file {} is continued as {}",
        old.display(),
        named.display()
    );
    true
}

/// The user's state directory: `$XDG_STATE_HOME`, else `~/.local/state`.
pub(crate) fn state_base() -> Option<PathBuf> {
    std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|home| PathBuf::from(home).join(".local").join("state"))
        })
}

/// The state file's name for the configuration at `config`: a digest of
/// its path, so distinct paths give distinct names of a bounded length, and
/// its file name, so a reader can tell which is which.
fn state_name(config: &Path) -> String {
    let file = config
        .file_name()
        .map(|name| name.to_string_lossy().chars().take(64).collect::<String>())
        .unwrap_or_default();
    format!("{}-{file}.state.json", path_digest(Some(config)))
}

/// Headers an upstream's configuration may not set: the ones that frame the
/// message (a `Content-Length` of the configuration's would cut every body
/// short) or route the connection, and the ones MCP's transport sets itself
/// (every `Mcp-*` header is refused too).
const RESERVED_HEADERS: [&str; 13] = [
    "content-length",
    "transfer-encoding",
    "host",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-connection",
    "content-type",
    "accept",
    "last-event-id",
    "expect",
];

/// Sixteen hex digits naming a configuration by its path (or the embedded
/// default, for `None`): what its state file and admin socket are called.
///
/// The path is made absolute but its symbolic links are not followed: a
/// configuration reached through a link that is pointed elsewhere (a
/// mounted config map, a dotfile manager's switch) is still the same
/// configuration, and keeps its trust on first use and its admin socket.
/// A path spelled with `..` names what it leads to (after a link, `..`
/// leads out of the link's target), so `../conf/gateway.toml` and
/// `conf/gateway.toml` from the folder above are one configuration, with
/// one state and one socket.
pub(crate) fn path_digest(config: Option<&Path>) -> String {
    let name = match config {
        Some(path) => spelled(path).to_string_lossy().into_owned(),
        None => "the embedded default".to_owned(),
    };
    digest_of_name(&name)
}

/// `path` made absolute, each `..` in it taken as the file system takes
/// it: back out of the folder before it, or, when that is a symbolic link,
/// out of the link's target. No other link is followed (see
/// [`path_digest`]).
fn spelled(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = PathBuf::new();
    for component in absolute.components() {
        if component == Component::ParentDir {
            let link = std::fs::symlink_metadata(&out).is_ok_and(|m| m.file_type().is_symlink());
            if let Some(target) = link.then(|| std::fs::canonicalize(&out).ok()).flatten() {
                out = target;
            }
            out.pop();
        } else {
            out.push(component);
        }
    }
    out
}

/// Sixteen hex digits of `name`'s SHA-256.
fn digest_of_name(name: &str) -> String {
    Sha256::digest(name.as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toml(text: &str) -> anyhow::Result<Config> {
        let config: Config = toml::from_str(text)?;
        config.check()?;
        Ok(config)
    }

    #[test]
    fn every_upstream_setting_is_read() -> anyhow::Result<()> {
        let config = toml(
            r#"
            state = "/tmp/state.json"
            [[upstream]]
            name = "web"
            url = "https://example.test/mcp"
            headers = { "X-Tenant" = "blue" }
            bearer_token_env = "WEB_TOKEN"
            timeout = 2.5
            enabled = true
            tools = { allow = ["a", "b"], deny = ["b"], rename = { a = "alpha" }, descriptions = { a = "A." } }

            [[upstream]]
            name = "off"
            command = ["x"]
            cwd = "/srv"
            enabled = false
            "#,
        )?;
        assert_eq!(config.state.as_deref(), Some(Path::new("/tmp/state.json")));
        let [web, off] = &config.upstream[..] else {
            bail!("two upstreams expected");
        };
        assert_eq!(
            web.headers.get("X-Tenant").map(String::as_str),
            Some("blue")
        );
        assert_eq!(web.timeout(), Duration::from_millis(2500));
        let policy = web.policy()?;
        assert_eq!(policy.upstream_name("alpha"), "a");
        assert_eq!(
            config
                .enabled()
                .map(|u| u.name.as_str())
                .collect::<Vec<_>>(),
            ["web"]
        );
        assert_eq!(off.cwd.as_deref(), Some(Path::new("/srv")));
        Ok(())
    }

    /// `Spy` is no URI scheme, so its resources are named by one made
    /// from it; an upstream called that very name is refused with the
    /// configuration, never left out of it while the rest is served.
    #[test]
    fn a_name_another_upstreams_resources_are_named_by_is_refused() {
        let made = uri_prefix("Spy");
        assert_ne!(made, "Spy");
        let text = format!(
            "[[upstream]]\nname = \"Spy\"\ncommand = [\"a\"]\n\
             [[upstream]]\nname = {made:?}\ncommand = [\"b\"]\n"
        );
        let refused = toml(&text).map(drop).map_err(|e| e.to_string());
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("\"Spy\"") && e.contains(&format!("{made}+"))),
            "{refused:?}"
        );
    }

    #[test]
    fn headers_the_transport_sets_and_unsettable_variables_are_refused() {
        for header in [
            "Content-Length",
            "host",
            "Mcp-Session-Id",
            "MCP-Protocol-Version",
            "Transfer-Encoding",
        ] {
            let text = format!(
                "[[upstream]]\nname = \"web\"\nurl = \"https://example.test/mcp\"\nheaders = {{ {header:?} = \"1\" }}\n"
            );
            let refused = toml(&text).map_err(|e| e.to_string());
            assert!(
                refused
                    .as_ref()
                    .is_err_and(|e| e.contains("is the transport's to set")),
                "{header}: {refused:?}"
            );
        }
        let allowed = "[[upstream]]\nname = \"web\"\nurl = \"https://example.test/mcp\"\n\
                       headers = { \"Authorization\" = \"Bearer t\", \"X-Tenant\" = \"blue\" }\n";
        assert!(toml(allowed).is_ok());
        for (text, said) in [
            (
                "headers = { \"Authorization\" = \"Bearer one\", authorization = \"Bearer two\" }\n",
                "named twice",
            ),
            (
                "headers = { \"Authorization\" = \"Bearer one\" }\nbearer_token_env = \"T\"\n",
                "give the credential one way",
            ),
        ] {
            let text =
                format!("[[upstream]]\nname = \"web\"\nurl = \"https://example.test/mcp\"\n{text}");
            let refused = toml(&text).map_err(|e| e.to_string());
            assert!(
                refused.as_ref().is_err_and(|e| e.contains(said)),
                "{text}: {refused:?}"
            );
        }
        for env in [r#""A=B" = "c""#, r#""" = "x""#, r#"K = "a\u0000b""#] {
            let text =
                format!("[[upstream]]\nname = \"s\"\ncommand = [\"x\"]\nenv = {{ {env} }}\n");
            let refused = toml(&text).map_err(|e| e.to_string());
            assert!(
                refused.as_ref().is_err_and(|e| e.contains("cannot be set")),
                "{env}: {refused:?}"
            );
        }
    }

    #[test]
    fn settings_for_the_other_kind_of_upstream_are_refused() {
        for (text, needle) in [
            (
                "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\nheaders = { A = \"b\" }",
                "headers, bearer tokens and ca_file are for url upstreams",
            ),
            (
                "[[upstream]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/mcp\"\ncwd = \"/\"",
                "env, pass_env and cwd are for command upstreams",
            ),
            (
                "[[upstream]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/mcp\"\nbearer_token_env = \"A\"\nbearer_token_file = \"/a\"",
                "give the bearer token one way",
            ),
            (
                "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\ntimeout = 0",
                "timeout must be a number of seconds from 0.001 to a day",
            ),
            (
                "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\ntimeout = 1e-300",
                "timeout must be a number of seconds from 0.001 to a day",
            ),
            (
                "[[upstream]]\nname = \"a\\nb\"\ncommand = [\"x\"]",
                "upstream name \"a\\nb\" must be 1 to 64 characters",
            ),
            (
                "[[upstream]]\nname = \"fix\\u202e\"\ncommand = [\"x\"]",
                "no '/', control or invisible character",
            ),
            (
                "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\ntools = { rename = { b = \"c/d\" } }",
                "cannot be a tool name",
            ),
            (
                "[[upstream]]\nname = \"a\"\ncommand = []",
                "the command is empty",
            ),
        ] {
            let error = toml(text).err().map(|e| format!("{e:#}"));
            assert!(
                error.as_deref().is_some_and(|e| e.contains(needle)),
                "{text}: {error:?}"
            );
        }
    }

    #[test]
    fn an_upstream_is_printed_without_its_credentials_or_query() {
        let upstream = UpstreamConfig {
            url: Some("https://u:secret@example.test/mcp?key=secret".to_owned()),
            headers: BTreeMap::from([("X-Key".to_owned(), "secret".to_owned())]),
            ..UpstreamConfig::default()
        };
        assert!(!format!("{upstream:?}").contains("secret"));
    }

    /// A state file named after the canonical path, as earlier versions
    /// named it, is taken over rather than left for an empty one.
    #[test]
    fn a_state_file_named_the_old_way_is_taken_over() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        std::fs::create_dir(dir.path().join("real"))?;
        std::fs::write(dir.path().join("real").join("gateway.toml"), "")?;
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("link"))?;
        let config = dir.path().join("link").join("gateway.toml");
        let folder = dir.path().join("state");
        std::fs::create_dir(&folder)?;
        let canonical = std::fs::canonicalize(&config)?;
        let old = folder.join(format!(
            "{}-gateway.toml.state.json",
            digest_of_name(&canonical.to_string_lossy())
        ));
        std::fs::write(&old, "{\"trustedOnFirstUse\": {}}")?;
        let named = folder.join(state_name(&config));
        assert_ne!(old, named);
        // Looked at only, it is read where it is.
        assert_eq!(named_before(&folder, &config, &named).as_ref(), Some(&old));
        assert!(adopt_state(&old, &named));
        // Kept for the configuration that goes by the canonical path.
        assert!(old.exists());
        assert_eq!(
            std::fs::read_to_string(&named)?,
            "{\"trustedOnFirstUse\": {}}"
        );
        // Never over a file of the new name.
        std::fs::remove_file(&old)?;
        std::fs::write(&old, "older")?;
        assert_eq!(named_before(&folder, &config, &named), None);
        assert!(!adopt_state(&old, &named));
        assert_eq!(
            std::fs::read_to_string(&named)?,
            "{\"trustedOnFirstUse\": {}}"
        );
        Ok(())
    }

    /// A link in the path pointed elsewhere leaves the name as it was.
    #[test]
    fn a_configuration_behind_a_relinked_path_keeps_its_name() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        for version in ["one", "two"] {
            std::fs::create_dir(dir.path().join(version))?;
            std::fs::write(dir.path().join(version).join("gateway.toml"), "")?;
        }
        let link = dir.path().join("current");
        std::os::unix::fs::symlink(dir.path().join("one"), &link)?;
        let config = link.join("gateway.toml");
        let before = path_digest(Some(&config));
        std::fs::remove_file(&link)?;
        std::os::unix::fs::symlink(dir.path().join("two"), &link)?;
        assert_eq!(path_digest(Some(&config)), before);
        Ok(())
    }

    /// A path spelled with `..` names the configuration it leads to, even
    /// through a link, while the link itself is not followed.
    #[test]
    fn a_path_with_dot_dot_names_what_it_leads_to() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let root = std::fs::canonicalize(dir.path())?;
        for folder in ["conf", "other", "deep/inner"] {
            std::fs::create_dir_all(root.join(folder))?;
        }
        std::fs::write(root.join("conf/gateway.toml"), "")?;
        let plain = path_digest(Some(&root.join("conf/gateway.toml")));
        assert_eq!(
            path_digest(Some(&root.join("other/../conf/gateway.toml"))),
            plain
        );
        assert_eq!(path_digest(Some(&root.join("conf/./gateway.toml"))), plain);
        // After a link, `..` leads out of its target, as the file system
        // reads it.
        std::os::unix::fs::symlink(root.join("deep/inner"), root.join("hop"))?;
        std::fs::create_dir(root.join("deep/conf"))?;
        std::fs::write(root.join("deep/conf/gateway.toml"), "")?;
        assert_eq!(
            path_digest(Some(&root.join("hop/../conf/gateway.toml"))),
            path_digest(Some(&root.join("deep/conf/gateway.toml")))
        );
        assert_ne!(
            path_digest(Some(&root.join("hop/../conf/gateway.toml"))),
            plain
        );
        // A link above the `..` is not followed: the path keeps naming the
        // configuration as its plain spelling through that link does.
        std::os::unix::fs::symlink(&root, root.join("above"))?;
        assert_eq!(
            path_digest(Some(&root.join("above/other/../conf/gateway.toml"))),
            path_digest(Some(&root.join("above/conf/gateway.toml")))
        );
        Ok(())
    }

    #[test]
    fn the_default_state_is_named_after_the_configuration() {
        let name = state_name(Path::new("/nonexistent/a/mcp.json"));
        assert!(name.ends_with("-mcp.json.state.json"), "{name}");
        assert_eq!(name.len(), 16 + "-mcp.json.state.json".len());
        assert_ne!(name, state_name(Path::new("/nonexistent/b/mcp.json")));
        // However long the path, the name stays short enough for any file
        // system.
        let deep = format!("/{}/{}", "d".repeat(4000), "x".repeat(300));
        assert!(state_name(Path::new(&deep)).len() < 255);
    }
}
