//! What `serve`, `bridge` and `gateway` share about how they listen: TLS
//! termination, whether a public address may be served without
//! authorization, and the certificate authorities their outbound
//! connections trust.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use protocol_droid::adapters::primary::http::{HttpOptions, ServerTls};
use protocol_droid::adapters::secondary::redis::{RedisOptions, RedisStore};
use protocol_droid::adapters::secondary::tls::Trust;
use protocol_droid::application::bridge::ParkedCalls;
use protocol_droid::application::server::{Rate, RateLimits, RotationPolicy};

/// How `--listen` serves.
#[derive(Clone, Debug, Default, clap::Args)]
pub(crate) struct ListenArgs {
    /// Serve HTTPS with this PEM certificate chain, leaf first (needs
    /// --tls-key).
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve a non-loopback address without authorization. Without this
    /// flag such a listener is refused: anyone who can reach the address
    /// could use every tool.
    #[arg(long)]
    allow_public_without_auth: bool,
    /// The largest request body accepted, in bytes; larger gets 413.
    #[arg(long, value_name = "BYTES", default_value_t = 4 * 1024 * 1024)]
    max_body: usize,
    /// How many legacy sessions may be open at once; more get 503.
    #[arg(long, value_name = "N", default_value_t = 16_384)]
    max_sessions: usize,
    /// How many sessions one authenticated principal may hold; more get 429.
    #[arg(long, value_name = "N", default_value_t = 256)]
    max_sessions_per_principal: usize,
    /// How many sessions one anonymous caller's address may hold; more get
    /// 429.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    max_sessions_per_address: usize,
    /// How many connections may be open at once; more are closed at once.
    #[arg(long, value_name = "N", default_value_t = 4096)]
    max_connections: usize,
    /// How many connections one client address may hold.
    #[arg(long, value_name = "N", default_value_t = 256)]
    max_connections_per_address: usize,
    /// Seconds a request head (or a TLS handshake) may take to arrive.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    header_timeout: u64,
    /// Seconds a request body may take to arrive; then 408.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    body_timeout: u64,
    /// The most requests one caller (a token's principal, else a client
    /// address) may make, as COUNT/UNIT with a unit of s, min, h or d
    /// ("600/min"); more are refused (429 over HTTP) until allowed again.
    #[arg(long, value_name = "RATE")]
    rate_limit: Option<Rate>,
    /// The most calls of one tool one caller may make: RATE for every tool
    /// (each counted apart), or TOOL=RATE for one tool. Repeatable.
    #[arg(long, value_name = "[TOOL=]RATE")]
    tool_rate_limit: Vec<String>,
    /// Share what other instances serving the same endpoint must honour
    /// through the Redis at this URL (redis://user:password@host:port/db,
    /// each part but the host optional; rediss:// for TLS, verified against
    /// the platform's authorities and --ca-file's): the requestState keys and the
    /// rounds answered; legacy sessions; tasks; the bridge's calls parked
    /// for input; a gateway's trust and its activations. Without it
    /// everything stays in this process (docs/scaling.md). Also read from the environment (shown below),
    /// which keeps a password out of the process list.
    #[arg(long, value_name = "URL", env = "DROID_STORE", hide_env_values = true)]
    store: Option<String>,
    /// What every key this instance writes to --store starts with, so that
    /// several deployments can share one Redis (default: droid:).
    #[arg(long, value_name = "PREFIX")]
    store_prefix: Option<String>,
    /// This instance's name among those sharing --store (default: host
    /// name and process id): up to 64 letters, digits, `.`, `_` and `-`.
    /// It must be unique among them: the answers to the questions this
    /// instance asks clients are routed to it by name.
    #[arg(long, value_name = "ID", value_parser = instance_name)]
    instance_id: Option<String>,
    /// The connection to --store, once made: a gateway shares its trust
    /// through it before its server shares its keys.
    #[arg(skip)]
    connected: std::sync::OnceLock<RedisStore>,
}

impl ListenArgs {
    /// The certificate and key, read and checked, or `None` for plain HTTP.
    pub(crate) fn server_tls(&self) -> anyhow::Result<Option<ServerTls>> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Ok(Some(
                ServerTls::from_pem_files(cert, key).context("--tls-cert and --tls-key")?,
            )),
            _ => Ok(None),
        }
    }

    /// The HTTP options these flags set, over `base`.
    pub(crate) fn http_options(&self, base: HttpOptions) -> HttpOptions {
        HttpOptions {
            max_body: self.max_body,
            max_sessions: self.max_sessions,
            max_sessions_per_principal: self.max_sessions_per_principal,
            max_sessions_per_address: self.max_sessions_per_address,
            max_connections: self.max_connections,
            max_connections_per_address: self.max_connections_per_address,
            header_timeout: Duration::from_secs(self.header_timeout),
            body_timeout: Duration::from_secs(self.body_timeout),
            ..base
        }
    }

    /// The rate limits these flags set, over `base` (a configuration's).
    pub(crate) fn rate_limits(&self, base: RateLimits) -> anyhow::Result<RateLimits> {
        let mut limits = base;
        if let Some(rate) = self.rate_limit {
            limits.per_caller = Some(rate);
        }
        for flag in &self.tool_rate_limit {
            let context = || format!("--tool-rate-limit {flag:?}");
            match flag.rsplit_once('=') {
                Some((tool, rate)) if !tool.is_empty() => {
                    let rate = rate.parse().with_context(context)?;
                    limits.tools.insert(tool.to_owned(), rate);
                }
                _ => limits.per_tool = Some(flag.parse().with_context(context)?),
            }
        }
        Ok(limits)
    }

    /// Connects to `--store` and shares `server`'s state through it, its
    /// legacy sessions too, when one is given; needs `--listen`, as one
    /// stdio client has nothing to share.
    pub(crate) async fn share(
        &self,
        server: &protocol_droid::application::server::Server,
        listening: bool,
        trust: &Trust,
    ) -> anyhow::Result<()> {
        let Some(store) = self.store(listening, trust).await? else {
            return Ok(());
        };
        let shared = store.shared_with_sessions(RotationPolicy::default(), self.instance_id());
        server
            .share(shared)
            .await
            .with_context(|| format!("sharing state through {}", store.url()))?;
        tracing::warn!(
            target: "droid",
            instance = %self.instance_id(),
            "sharing requestState keys and rounds through {}",
            store.url()
        );
        Ok(())
    }

    /// These flags, with `url`, `prefix` and `instance` (a configuration's)
    /// where the flags say nothing.
    pub(crate) fn with_store(
        &self,
        url: Option<&str>,
        prefix: Option<&str>,
        instance: Option<&str>,
    ) -> Self {
        let mut args = self.clone();
        // Each setting on its own: a URL from the environment (keeping its
        // password out of the file) goes with the file's prefix.
        if args.store.is_none() {
            args.store = url.map(str::to_owned);
        }
        if args.store_prefix.is_none() {
            args.store_prefix = prefix.map(str::to_owned);
        }
        if args.instance_id.is_none() {
            args.instance_id = instance.map(str::to_owned);
        }
        args
    }

    /// Whether a store is named (`--store`, or a configuration's).
    pub(crate) const fn names_store(&self) -> bool {
        self.store.is_some()
    }

    /// Connects to `--store` (once; later calls answer the same
    /// connection), or `None` without one; a `rediss://` one trusting
    /// `--ca-file`'s authorities (in `trust`) besides the platform's. Needs
    /// `--listen`, as one stdio client has nothing to share.
    async fn store(&self, listening: bool, trust: &Trust) -> anyhow::Result<Option<RedisStore>> {
        let Some(url) = &self.store else {
            return Ok(None);
        };
        anyhow::ensure!(
            listening,
            "--store needs --listen: one stdio client shares nothing"
        );
        if let Some(store) = self.connected.get() {
            return Ok(Some(store.clone()));
        }
        let defaults = RedisOptions::default();
        let options = RedisOptions {
            prefix: self.store_prefix.clone().unwrap_or(defaults.prefix),
            private_authorities: trust.private_authorities_pem().map(<[u8]>::to_vec),
            ..defaults
        };
        let store = RedisStore::connect(url, options)
            .await
            .context("connecting to --store")?;
        Ok(Some(self.connected.get_or_init(|| store).clone()))
    }

    /// Connects to `--store` and shares `gateway`'s trust and principals'
    /// activations through it, when one is given: before any upstream is
    /// added, so an upstream another instance used first is held to what
    /// it showed then.
    pub(crate) async fn share_gateway(
        &self,
        gateway: &protocol_droid::application::gateway::Gateway,
        listening: bool,
        trust: &Trust,
    ) -> anyhow::Result<()> {
        let Some(store) = self.store(listening, trust).await? else {
            return Ok(());
        };
        gateway
            .share(store.shared_gateway(self.instance_id()))
            .await
            .with_context(|| format!("sharing the gateway's trust through {}", store.url()))?;
        Ok(())
    }

    /// Connects to `--store` and lets a call `bridge` parks for its
    /// client's input be resumed by the retry at any instance, when one is
    /// given: the retry is carried to the instance holding the call.
    pub(crate) async fn share_bridge(
        &self,
        bridge: &protocol_droid::application::bridge::Bridge,
        listening: bool,
        trust: &Trust,
    ) -> anyhow::Result<()> {
        let Some(store) = self.store(listening, trust).await? else {
            return Ok(());
        };
        let parked = ParkedCalls::listen(std::sync::Arc::new(store.clone()), &self.instance_id())
            .await
            .with_context(|| format!("sharing parked calls through {}", store.url()))?;
        bridge.share(&parked, "");
        Ok(())
    }

    /// This instance's name: `--instance-id` (checked by
    /// [`instance_name`]), else host name and process id, of which only
    /// what a name may hold is kept.
    pub(crate) fn instance_id(&self) -> String {
        let name = self.instance_id.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|name| name.trim().to_owned())
                .unwrap_or_else(|_| "droid".to_owned());
            let pid = std::process::id().to_string();
            // The host name is what gives way to the length bound, never
            // the process id: two processes of one host stay apart.
            let room = 64_usize.saturating_sub(pid.len() + 1);
            let host: String = host
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
                .take(room)
                .collect();
            format!("{host}-{pid}")
        });
        let kept: String = name
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            .take(64)
            .collect();
        if kept.is_empty() {
            "droid".to_owned()
        } else {
            kept
        }
    }

    /// Checks the instance name a configuration gives (`[store]
    /// instance_id`), as `--instance-id` is checked.
    ///
    /// # Errors
    ///
    /// As [`instance_name`].
    pub(crate) fn check_instance(instance: Option<&str>) -> anyhow::Result<()> {
        if let Some(name) = instance {
            instance_name(name).map_err(|e| anyhow::anyhow!("[store] instance_id: {e}"))?;
        }
        Ok(())
    }

    /// Whether TLS was asked for, which needs `--listen`.
    pub(crate) const fn tls_enabled(&self) -> bool {
        self.tls_cert.is_some()
    }

    /// Refuses, before anything is bound, to serve `listen` with no
    /// authorization when any address it names is not a loopback one,
    /// unless the operator said so explicitly.
    pub(crate) async fn check_exposure(
        &self,
        listen: &str,
        authorized: bool,
    ) -> anyhow::Result<()> {
        if authorized || self.allow_public_without_auth {
            return Ok(());
        }
        let addresses: Vec<SocketAddr> = tokio::net::lookup_host(listen)
            .await
            .with_context(|| format!("resolving {listen}"))?
            .collect();
        anyhow::ensure!(
            !addresses.is_empty() && addresses.iter().all(|a| a.ip().is_loopback()),
            "refusing to serve {listen} without authorization: every tool would be open to anyone \
             who can reach it. Configure --auth-issuer or --auth-introspection-url, listen on \
             127.0.0.1, or pass --allow-public-without-auth if a proxy in front authorizes"
        );
        Ok(())
    }
}

/// The roots outbound connections trust: the defaults, plus `ca_file`.
pub(crate) fn trust(ca_file: Option<&std::path::Path>) -> anyhow::Result<Trust> {
    ca_file.map_or_else(
        || Ok(Trust::default()),
        |path| Trust::with_ca_file(path).context("--ca-file"),
    )
}

/// Reads an instance name: it travels in the ids of the requests sent to
/// clients and names the instance's channel in the store, so it must be
/// 1 to 64 letters, digits, `.`, `_` and `-`. Refused rather than
/// trimmed: two names trimmed alike would route each other's answers.
fn instance_name(name: &str) -> Result<String, String> {
    let length = name.chars().count();
    if length == 0 || length > 64 {
        return Err(format!("{length} characters; an instance name has 1 to 64"));
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        Some(c) => Err(format!(
            "{c:?} is not allowed; an instance name has only letters, digits, '.', '_' and '-'"
        )),
        None => Ok(name.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_name_that_would_be_trimmed_is_refused() {
        assert_eq!(instance_name("web-1.a_b").as_deref(), Ok("web-1.a_b"));
        for bad in ["", "a b", "a/b", "a*", "ü", &"x".repeat(65)] {
            assert!(instance_name(bad).is_err(), "{bad:?}");
        }
        assert!(ListenArgs::check_instance(Some("gw 1")).is_err());
        assert!(ListenArgs::check_instance(Some("gw-1")).is_ok());
        assert!(ListenArgs::check_instance(None).is_ok());
    }

    #[test]
    fn a_configuration_fills_each_store_setting_the_flags_leave_open() {
        // The URL from the environment (here, as a flag would give it), the
        // prefix and the name from the file.
        let flags = ListenArgs {
            store: Some("redis://from-env".to_owned()),
            ..ListenArgs::default()
        };
        let merged = flags.with_store(Some("redis://from-file"), Some("team-a:"), Some("gw-1"));
        assert_eq!(merged.store.as_deref(), Some("redis://from-env"));
        assert_eq!(merged.store_prefix.as_deref(), Some("team-a:"));
        assert_eq!(merged.instance_id(), "gw-1");
        // A flag is the newer word.
        let flags = ListenArgs {
            store_prefix: Some("team-b:".to_owned()),
            ..ListenArgs::default()
        };
        let merged = flags.with_store(Some("redis://from-file"), Some("team-a:"), None);
        assert_eq!(merged.store.as_deref(), Some("redis://from-file"));
        assert_eq!(merged.store_prefix.as_deref(), Some("team-b:"));
    }
}
