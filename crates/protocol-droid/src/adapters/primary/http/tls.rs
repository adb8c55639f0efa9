//! TLS termination, for a server that faces its clients without a reverse
//! proxy in front.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// Why a certificate or key could not be served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerTlsError {
    /// A file could not be read or parsed.
    #[error("{path}: {detail}")]
    File {
        /// The file named.
        path: String,
        /// What was wrong with it.
        detail: String,
    },
    /// rustls refused the pair (the key does not match the certificate, or
    /// is of a kind it cannot use).
    #[error("TLS certificate and key: {0}")]
    Config(String),
}

/// A certificate chain and its private key, ready to accept connections.
#[derive(Clone)]
pub struct ServerTls {
    acceptor: TlsAcceptor,
}

/// The key never prints.
impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls").finish_non_exhaustive()
    }
}

impl ServerTls {
    /// The chain in the PEM file `cert` (leaf first) and the key in `key`.
    ///
    /// # Errors
    ///
    /// [`ServerTlsError::File`] when a file cannot be read or holds no
    /// certificate or key; [`ServerTlsError::Config`] when the key does not
    /// fit the certificate.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Self, ServerTlsError> {
        let read = |path: &Path| {
            crate::adapters::secondary::local_file::read_regular(
                path,
                crate::adapters::secondary::tls::MAX_PEM_FILE,
            )
            .map_err(|e| ServerTlsError::File {
                path: path.display().to_string(),
                detail: e.to_string(),
            })
        };
        let named = |path: &Path, error: ServerTlsError| match error {
            ServerTlsError::File { detail, .. } => ServerTlsError::File {
                path: path.display().to_string(),
                detail,
            },
            other @ ServerTlsError::Config(_) => other,
        };
        let chain = certificates(&read(cert)?).map_err(|e| named(cert, e))?;
        let key_pem = read(key)?;
        let key_der =
            PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| ServerTlsError::File {
                path: key.display().to_string(),
                detail: format!("no PEM private key: {e}"),
            })?;
        Self::from_der(chain, key_der)
    }

    /// The chain and key given as PEM text.
    ///
    /// # Errors
    ///
    /// As [`Self::from_pem_files`].
    pub fn from_pem(cert: &[u8], key: &[u8]) -> Result<Self, ServerTlsError> {
        let chain = certificates(cert)?;
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| ServerTlsError::File {
            path: "PEM".to_owned(),
            detail: format!("no PEM private key: {e}"),
        })?;
        Self::from_der(chain, key)
    }

    fn from_der(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<Self, ServerTlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ServerTlsError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| match e {
                // Most often a chain file with the CA first: the key is the
                // server's, and only the first certificate is read as that.
                rustls::Error::InconsistentKeys(_) => ServerTlsError::Config(format!(
                    "{e}: the key must be that of the first certificate in the chain file, \
                     the server's own (the leaf comes first, then the certificates that \
                     signed it)"
                )),
                other => ServerTlsError::Config(other.to_string()),
            })?;
        // The transports speak HTTP/1.1 only; saying so lets a client that
        // offers h2 fall back instead of failing after the handshake.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    pub(super) const fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }
}

fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, ServerTlsError> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ServerTlsError::File {
            path: "PEM".to_owned(),
            detail: format!("not a PEM certificate: {e}"),
        })?;
    if chain.is_empty() {
        return Err(ServerTlsError::File {
            path: "PEM".to_owned(),
            detail: "holds no certificate".to_owned(),
        });
    }
    Ok(chain)
}
