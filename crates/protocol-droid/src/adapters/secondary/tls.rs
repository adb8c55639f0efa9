//! Outbound TLS: which certificate authorities a connection trusts, and what
//! a refused handshake is called.
//!
//! Every HTTP client the library builds (MCP transports, the OAuth client,
//! key sets and introspection) starts from one [`Trust`], so one policy
//! holds everywhere: rustls, the platform's roots and the webpki roots, plus
//! any private authority the operator names. The Redis store, whose client
//! builds its own TLS, takes the platform's roots and the private ones
//! ([`Trust::private_authorities_pem`]).

use std::error::Error as StdError;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use rustls::{CertificateError, RootCertStore};

/// The most bytes a PEM file named by path may hold: a bundle of every
/// public root is a few hundred kilobytes.
pub(crate) const MAX_PEM_FILE: u64 = 16 * 1024 * 1024;

/// Why a trust configuration could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A CA file could not be read or holds no certificate.
    #[error("{path}: {detail}")]
    CaFile {
        /// The file named.
        path: String,
        /// What was wrong with it.
        detail: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// The certificate authorities outbound connections trust.
///
/// [`Trust::default`] is the platform's store together with the webpki
/// roots; [`Trust::with_ca_file`] adds a private authority on top.
#[derive(Clone, Default)]
pub struct Trust {
    /// `None` for the defaults, which every [`Trust::default`] shares.
    custom: Option<Arc<rustls::ClientConfig>>,
    /// The private authorities, as PEM: for a connection made by a crate
    /// that builds its TLS itself (the Redis store's).
    extra_pem: Option<Arc<[u8]>>,
}

impl fmt::Debug for Trust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trust")
            .field("private_authorities", &self.custom.is_some())
            .finish()
    }
}

impl Trust {
    /// The default roots and every certificate in the PEM file at `path`.
    ///
    /// # Errors
    ///
    /// [`TlsError::CaFile`] when the file cannot be read, is not PEM, or
    /// holds no usable certificate.
    pub fn with_ca_file(path: impl AsRef<Path>) -> Result<Self, TlsError> {
        let path = path.as_ref();
        let named = |detail: String| TlsError::CaFile {
            path: path.display().to_string(),
            detail,
        };
        let pem = super::local_file::read_regular(path, MAX_PEM_FILE)
            .map_err(|e| named(e.to_string()))?;
        Self::with_ca_pem(&pem).map_err(|e| match e {
            TlsError::CaFile { detail, .. } => named(detail),
            other @ TlsError::Config(_) => other,
        })
    }

    /// The default roots and every certificate in `pem`.
    ///
    /// # Errors
    ///
    /// [`TlsError::CaFile`] when `pem` holds no certificate or one that
    /// cannot be a trust anchor.
    pub fn with_ca_pem(pem: &[u8]) -> Result<Self, TlsError> {
        let unusable = |detail: String| TlsError::CaFile {
            path: "PEM".to_owned(),
            detail,
        };
        let extra = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| unusable(format!("not a PEM certificate: {e}")))?;
        if extra.is_empty() {
            return Err(unusable("holds no certificate".to_owned()));
        }
        let mut roots = default_roots();
        for certificate in extra {
            roots
                .add(certificate)
                .map_err(|e| unusable(format!("not a usable CA certificate: {e}")))?;
        }
        Ok(Self {
            custom: Some(client_config(roots)?),
            extra_pem: Some(Arc::from(pem)),
        })
    }

    /// The private authorities added to the defaults, as the PEM they were
    /// given in; `None` for the defaults alone.
    #[must_use]
    pub fn private_authorities_pem(&self) -> Option<&[u8]> {
        self.extra_pem.as_deref()
    }

    /// A `reqwest` client builder speaking TLS with these roots: what every
    /// outbound HTTP connection of the crate is made with, and what an
    /// application making its own (an exporter's, say) can use to trust the
    /// same authorities.
    ///
    /// # Errors
    ///
    /// [`TlsError::Config`] when rustls refuses its safe defaults, which the
    /// ring provider always has.
    pub fn client_builder(&self) -> Result<reqwest::ClientBuilder, TlsError> {
        let config = match &self.custom {
            Some(config) => Arc::clone(config),
            None => DEFAULT
                .get_or_init(|| client_config(default_roots()).map_err(|e| e.to_string()))
                .clone()
                .map_err(TlsError::Config)?,
        };
        Ok(reqwest::Client::builder().use_preconfigured_tls((*config).clone()))
    }
}

/// The default configuration, built once: reading the platform's store
/// costs milliseconds, and a bridge opens a connection per session.
static DEFAULT: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();

/// The webpki roots and the platform's. A damaged or absent platform store
/// leaves the webpki roots, which is what a container without
/// ca-certificates has anyway.
fn default_roots() -> RootCertStore {
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    roots
}

fn client_config(roots: RootCertStore) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// `error` as a sentence naming its cause, with any credentials in the URL
/// removed: "`https://host/mcp`: the server's certificate is not valid for
/// this host name" rather than reqwest's "error sending request".
pub(crate) fn describe(error: &reqwest::Error) -> String {
    let cause = cause(error);
    match error.url() {
        Some(url) => format!("{}: {cause}", redacted(url)),
        None => cause,
    }
}

/// `url` for messages and logs: without userinfo, and without its query
/// and fragment (shown as `?…`), which is where some servers take an API
/// key.
pub(crate) fn redacted(url: &url::Url) -> String {
    let hidden = url.query().is_some() || url.fragment().is_some();
    let mut shown = url.clone();
    shown.set_query(None);
    shown.set_fragment(None);
    let mut shown = without_credentials(&shown);
    if hidden {
        shown.push_str("?…");
    }
    shown
}

/// `url` without userinfo, and otherwise whole: what names a resource to an
/// authorization server.
pub(crate) fn without_credentials(url: &url::Url) -> String {
    if url.username().is_empty() && url.password().is_none() {
        return url.to_string();
    }
    let mut url = url.clone();
    // Only URLs that cannot have userinfo refuse these, and they have none.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.to_string()
}

/// The most specific cause in `error`'s chain.
fn cause(error: &reqwest::Error) -> String {
    if let Some(tls) = tls_error_in(error) {
        return tls_cause(tls, UPSTREAM_CA_HINT);
    }
    let mut source: Option<&(dyn StdError + 'static)> = Some(error);
    let mut deepest = None;
    while let Some(current) = source {
        deepest = Some(current);
        source = next_cause(current);
    }
    if error.is_timeout() {
        return "no answer in time".to_owned();
    }
    if error.is_connect() {
        if let Some(deepest) = deepest.filter(|e| !std::ptr::addr_eq(*e, error)) {
            return format!("cannot connect: {deepest}");
        }
        return "cannot connect".to_owned();
    }
    deepest.map_or_else(|| error.to_string(), ToString::to_string)
}

/// How an upstream's client is told to trust a private authority.
const UPSTREAM_CA_HINT: &str = "name a private CA with --ca-file or ca_file";

/// The error after `error` in its chain. An `io::Error`'s `source` skips
/// the error it wraps (and the TLS stack wraps `io::Error`s in others), so
/// this steps into it instead.
fn next_cause<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a (dyn StdError + 'static)> {
    match error.downcast_ref::<std::io::Error>() {
        Some(io) => io
            .get_ref()
            .map(|inner| -> &(dyn StdError + 'static) { inner }),
        None => error.source(),
    }
}

/// The TLS error in `error`'s chain, if there is one.
fn tls_error_in<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a rustls::Error> {
    let mut source = Some(error);
    while let Some(current) = source {
        if let Some(tls) = current.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        source = next_cause(current);
    }
    None
}

/// What went wrong with TLS in `error`'s chain, as a sentence, if that is
/// what went wrong; an unknown issuer is told `hint` (how to name a
/// private authority where `error` came from).
pub(crate) fn tls_failure(error: &(dyn StdError + 'static), hint: &str) -> Option<String> {
    tls_error_in(error).map(|tls| tls_cause(tls, hint))
}

fn tls_cause(error: &rustls::Error, hint: &str) -> String {
    let certificate = |what: &str| format!("TLS: the server's certificate {what}");
    match error {
        rustls::Error::InvalidCertificate(reason) => match reason {
            CertificateError::UnknownIssuer => {
                certificate(&format!("is signed by an unknown issuer ({hint})"))
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                certificate("is not valid for this host name")
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                certificate("has expired")
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                certificate("is not valid yet")
            }
            CertificateError::Revoked => certificate("has been revoked"),
            CertificateError::BadSignature => certificate("has a bad signature"),
            CertificateError::Other(other)
                if matches!(
                    other.0.downcast_ref::<webpki::Error>(),
                    Some(webpki::Error::CaUsedAsEndEntity)
                ) =>
            {
                // What `openssl req -x509` makes by default. A certificate
                // marked as an authority is never accepted as a server's
                // own, trusted or not, so naming a CA file cannot help.
                certificate(
                    "is a CA certificate (basicConstraints CA:TRUE), which cannot be a \
                     server's own; serve one issued by that CA, or a self-signed one without CA:TRUE",
                )
            }
            other => certificate(&format!("was refused: {other:?}")),
        },
        other => format!("TLS: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_in_a_message_shows_neither_credentials_nor_query() -> Result<(), url::ParseError> {
        let url = url::Url::parse("https://user:secret@mcp.example/mcp?api_key=k1#frag")?;
        assert_eq!(redacted(&url), "https://mcp.example/mcp?…");
        let plain = url::Url::parse("https://mcp.example/mcp")?;
        assert_eq!(redacted(&plain), "https://mcp.example/mcp");
        // The resource an authorization server is told keeps its query.
        assert_eq!(
            without_credentials(&url),
            "https://mcp.example/mcp?api_key=k1#frag"
        );
        Ok(())
    }
}
