//! A certificate authority that exists only for one test, and the server
//! certificates it signs: real X.509 chains, made with rcgen, served with
//! rustls on loopback.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    date_time_ymd,
};

use super::TestError;

/// A test CA.
pub(crate) struct Authority {
    /// The CA certificate, PEM, as a client would be given it.
    pub(crate) pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A server's certificate chain and key, PEM.
pub(crate) struct Leaf {
    pub(crate) cert: String,
    pub(crate) key: String,
}

/// How a leaf is made.
#[derive(Clone, Copy)]
pub(crate) enum Validity {
    /// Valid now.
    Current,
    /// Expired years ago.
    Expired,
}

impl Authority {
    pub(crate) fn new(name: &str) -> Result<Self, TestError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key)?;
        Ok(Self {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// A server certificate for `names` (DNS names or IP addresses).
    pub(crate) fn leaf(&self, names: &[&str], validity: Validity) -> Result<Leaf, TestError> {
        let key = KeyPair::generate()?;
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names)?;
        params
            .distinguished_name
            .push(DnType::CommonName, "test server");
        if let Validity::Expired = validity {
            params.not_before = date_time_ymd(2020, 1, 1);
            params.not_after = date_time_ymd(2021, 1, 1);
        }
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}

/// Serves `router` over TLS with `leaf` on `listener`, until the task is
/// dropped: for the test's own auxiliary servers (an issuer, an upstream).
pub(crate) fn serve_tls(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    leaf: &Leaf,
) -> Result<tokio::task::JoinHandle<()>, TestError> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain =
        CertificateDer::pem_slice_iter(leaf.cert.as_bytes()).collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(leaf.key.as_bytes())?;
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(chain, key)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    Ok(tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let service = hyper_util::service::TowerToHyperService::new(router.clone());
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(stream).await else {
                    return;
                };
                let _served = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    }))
}
