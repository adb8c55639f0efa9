//! What `serve`, `bridge` and `gateway` share about how they listen: TLS
//! termination, whether a public address may be served without
//! authorization, and the certificate authorities their outbound
//! connections trust.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use protocol_droid::adapters::primary::http::ServerTls;
use protocol_droid::adapters::secondary::tls::Trust;

/// How `--listen` serves.
#[derive(Debug, Default, clap::Args)]
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
