//! What `serve`, `bridge` and `gateway` share about how they listen: TLS
//! termination, and the certificate authorities their outbound connections
//! trust.

use std::path::PathBuf;

use anyhow::Context as _;
use protocol_droid::adapters::primary::http::ServerTls;
use protocol_droid::adapters::secondary::tls::Trust;

/// TLS for `--listen`.
#[derive(Debug, Default, clap::Args)]
pub(crate) struct TlsArgs {
    /// Serve HTTPS with this PEM certificate chain, leaf first (needs
    /// --tls-key).
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

impl TlsArgs {
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
    pub(crate) const fn enabled(&self) -> bool {
        self.tls_cert.is_some()
    }
}

/// The roots outbound connections trust: the defaults, plus `ca_file`.
pub(crate) fn trust(ca_file: Option<&std::path::Path>) -> anyhow::Result<Trust> {
    ca_file.map_or_else(
        || Ok(Trust::default()),
        |path| Trust::with_ca_file(path).context("--ca-file"),
    )
}
