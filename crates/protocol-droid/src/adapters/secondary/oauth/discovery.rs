//! Finding the authorization server: protected resource metadata (RFC 9728)
//! and authorization server metadata (RFC 8414, OIDC Discovery), at
//! the locations and in the order the MCP authorization spec gives.

use serde::Deserialize;
use tracing::debug;
use url::Url;

use super::AuthError;
use super::http::{self, Fetched};

const PRM_WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";
const OAUTH_WELL_KNOWN: &str = "/.well-known/oauth-authorization-server";
const OIDC_WELL_KNOWN: &str = "/.well-known/openid-configuration";

/// Protected resource metadata (RFC 9728 §2), the members this client uses.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct ResourceMetadata {
    /// The resource identifier; sent as RFC 8707's `resource` exactly as
    /// written here.
    pub(crate) resource: String,
    /// Issuer identifiers of the authorization servers the resource trusts.
    #[serde(default)]
    pub(crate) authorization_servers: Vec<String>,
    /// Scopes the resource understands; requested when a challenge names none.
    #[serde(default)]
    pub(crate) scopes_supported: Option<Vec<String>>,
}

/// Authorization server metadata (RFC 8414 §2), the members this client uses.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct ServerMetadata {
    /// Must equal the issuer identifier the document was looked up for.
    pub(crate) issuer: String,
    #[serde(default)]
    pub(crate) authorization_endpoint: Option<String>,
    #[serde(default)]
    pub(crate) token_endpoint: Option<String>,
    #[serde(default)]
    pub(crate) registration_endpoint: Option<String>,
    #[serde(default)]
    pub(crate) scopes_supported: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) code_challenge_methods_supported: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) token_endpoint_auth_methods_supported: Option<Vec<String>>,
    /// Client ID Metadata Documents: an `https` URL may serve as `client_id`.
    #[serde(default)]
    pub(crate) client_id_metadata_document_supported: bool,
    /// RFC 9207: the authorization response carries `iss`.
    #[serde(default)]
    pub(crate) authorization_response_iss_parameter_supported: bool,
}

impl ServerMetadata {
    /// Endpoints at their conventional places under `origin`, for a server
    /// of the 2025-03-26 era that publishes no metadata at all.
    fn conventional(origin: &Url) -> Self {
        let at = |path: &str| origin.join(path).ok().map(String::from);
        Self {
            issuer: origin_string(origin),
            authorization_endpoint: at("/authorize"),
            token_endpoint: at("/token"),
            registration_endpoint: at("/register"),
            scopes_supported: None,
            // Such a server cannot advertise PKCE; the 2025-03-26 revision
            // required it of every server, so it is assumed.
            code_challenge_methods_supported: Some(vec![super::pkce::S256.to_owned()]),
            token_endpoint_auth_methods_supported: None,
            client_id_metadata_document_supported: false,
            authorization_response_iss_parameter_supported: false,
        }
    }
}

/// Where protected resource metadata may be, in the order to try: the
/// challenge's `resource_metadata`, then the path-aware well-known URL, then
/// the root one.
pub(crate) fn resource_metadata_urls(challenge_url: Option<&str>, endpoint: &Url) -> Vec<Url> {
    let mut urls = Vec::with_capacity(3);
    if let Some(url) = challenge_url.and_then(|url| Url::parse(url).ok()) {
        urls.push(url);
    }
    let path = endpoint.path().trim_end_matches('/');
    if !path.is_empty() {
        urls.extend(endpoint.join(&format!("{PRM_WELL_KNOWN}{path}")).ok());
    }
    urls.extend(endpoint.join(PRM_WELL_KNOWN).ok());
    urls
}

/// Where an issuer's metadata may be, in the order the 2025-11-25 spec lists:
/// with a path, RFC 8414 path insertion, OIDC path insertion, then OIDC path
/// appending; without one, RFC 8414 then OIDC.
pub(crate) fn server_metadata_urls(issuer: &Url) -> Vec<Url> {
    let path = issuer.path().trim_end_matches('/');
    let candidates = if path.is_empty() {
        vec![OAUTH_WELL_KNOWN.to_owned(), OIDC_WELL_KNOWN.to_owned()]
    } else {
        vec![
            format!("{OAUTH_WELL_KNOWN}{path}"),
            format!("{OIDC_WELL_KNOWN}{path}"),
            format!("{path}{OIDC_WELL_KNOWN}"),
        ]
    };
    candidates
        .iter()
        .filter_map(|candidate| issuer.join(candidate).ok())
        .collect()
}

/// Whether `resource`, as a protected resource metadata document names it,
/// covers the MCP endpoint: same origin, and the endpoint's path at or below
/// the resource's (RFC 9728 §3.3; a server may protect `/` and serve `/mcp`).
pub(crate) fn resource_covers(resource: &str, endpoint: &Url) -> bool {
    let Ok(resource) = Url::parse(resource) else {
        return false;
    };
    if resource.fragment().is_some() || resource.origin() != endpoint.origin() {
        return false;
    }
    let with_slash = |path: &str| {
        if path.ends_with('/') {
            path.to_owned()
        } else {
            format!("{path}/")
        }
    };
    with_slash(endpoint.path()).starts_with(&with_slash(resource.path()))
}

/// Finds the endpoint's protected resource metadata.
///
/// `Ok(None)` when no location serves it, which leaves the 2025-03-26
/// fallback; an error when one refused with a server error (which says
/// nothing about whether metadata exists) or when the document names a
/// resource that does not cover `endpoint`.
pub(crate) async fn resource_metadata(
    client: &reqwest::Client,
    challenge_url: Option<&str>,
    endpoint: &Url,
) -> Result<Option<ResourceMetadata>, AuthError> {
    let mut failure = None;
    for url in resource_metadata_urls(challenge_url, endpoint) {
        let fetched = match fetch(client, &url, "protected resource metadata").await {
            Ok(fetched) => fetched,
            Err(error) => {
                failure = Some(error);
                continue;
            }
        };
        if fetched.status.is_server_error() {
            failure = Some(AuthError::Server(format!(
                "protected resource metadata at {url}: HTTP {}",
                fetched.status
            )));
            continue;
        }
        if !fetched.status.is_success() {
            debug!(%url, status = %fetched.status, "no protected resource metadata here");
            continue;
        }
        let Ok(metadata) = fetched.json::<ResourceMetadata>("protected resource metadata") else {
            debug!(%url, "unreadable protected resource metadata");
            continue;
        };
        if !resource_covers(&metadata.resource, endpoint) {
            return Err(AuthError::Rejected(format!(
                "protected resource metadata at {url} names resource {} for endpoint {endpoint}",
                metadata.resource
            )));
        }
        return Ok(Some(metadata));
    }
    failure.map_or(Ok(None), Err)
}

/// Fetches the metadata of `issuer` and checks that it names that issuer,
/// character for character (RFC 8414 §3.3).
pub(crate) async fn server_metadata(
    client: &reqwest::Client,
    issuer: &str,
) -> Result<ServerMetadata, AuthError> {
    let issuer_url = Url::parse(issuer).map_err(|error| {
        AuthError::Rejected(format!(
            "authorization server {issuer} is not a URL: {error}"
        ))
    })?;
    require_secure(&issuer_url, "authorization server")?;
    for url in server_metadata_urls(&issuer_url) {
        let fetched = fetch(client, &url, "authorization server metadata").await?;
        if fetched.status.is_server_error() {
            return Err(AuthError::Server(format!(
                "authorization server metadata at {url}: HTTP {}",
                fetched.status
            )));
        }
        if !fetched.status.is_success() {
            debug!(%url, status = %fetched.status, "no authorization server metadata here");
            continue;
        }
        let metadata: ServerMetadata = fetched.json("authorization server metadata")?;
        if metadata.issuer != issuer {
            return Err(AuthError::Rejected(format!(
                "metadata at {url} names issuer {}, not {issuer}",
                metadata.issuer
            )));
        }
        for endpoint in [
            &metadata.authorization_endpoint,
            &metadata.token_endpoint,
            &metadata.registration_endpoint,
        ]
        .into_iter()
        .flatten()
        {
            let parsed = Url::parse(endpoint).map_err(|error| {
                AuthError::Rejected(format!("endpoint {endpoint} is not a URL: {error}"))
            })?;
            require_secure(&parsed, "authorization server endpoint")?;
        }
        return Ok(metadata);
    }
    Err(AuthError::Refused(format!(
        "authorization server {issuer} publishes no metadata"
    )))
}

/// The 2025-03-26 fallback for a server without protected resource metadata:
/// the authorization server is the endpoint's origin, with RFC 8414 metadata
/// at its root or, failing that, the conventional endpoints.
pub(crate) async fn origin_server_metadata(
    client: &reqwest::Client,
    endpoint: &Url,
) -> Result<ServerMetadata, AuthError> {
    let origin = endpoint
        .join("/")
        .map_err(|error| AuthError::Rejected(format!("endpoint {endpoint}: {error}")))?;
    let url = origin
        .join(OAUTH_WELL_KNOWN)
        .map_err(|error| AuthError::Rejected(format!("endpoint {endpoint}: {error}")))?;
    let fetched = fetch(client, &url, "authorization server metadata").await?;
    if fetched.status.is_server_error() {
        return Err(AuthError::Server(format!(
            "authorization server metadata at {url}: HTTP {}",
            fetched.status
        )));
    }
    if !fetched.status.is_success() {
        return Ok(ServerMetadata::conventional(&origin));
    }
    let metadata: ServerMetadata = fetched.json("authorization server metadata")?;
    // The origin is the issuer here; `http://host` and `http://host/` name it alike.
    if metadata.issuer.trim_end_matches('/') != origin_string(&origin) {
        return Err(AuthError::Rejected(format!(
            "metadata at {url} names issuer {}, not {}",
            metadata.issuer,
            origin_string(&origin)
        )));
    }
    Ok(metadata)
}

/// Codes, verifiers and secrets travel only over TLS, or to this machine:
/// an MCP server naming a plain-HTTP authorization server elsewhere would
/// have them sent in the clear, or to itself.
pub(crate) fn require_secure(url: &Url, what: &str) -> Result<(), AuthError> {
    let loopback = match url.host() {
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    if url.scheme() == "https" || (url.scheme() == "http" && loopback) {
        Ok(())
    } else {
        Err(AuthError::Rejected(format!(
            "{what} {url} is neither https nor on this machine"
        )))
    }
}

fn origin_string(url: &Url) -> String {
    url.origin().ascii_serialization()
}

async fn fetch(client: &reqwest::Client, url: &Url, what: &str) -> Result<Fetched, AuthError> {
    debug!(%url, "fetching {what}");
    http::send(
        client
            .get(url.clone())
            .header(reqwest::header::ACCEPT, "application/json"),
        what,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), url::ParseError>;

    fn strings(urls: &[Url]) -> Vec<&str> {
        urls.iter().map(Url::as_str).collect()
    }

    #[test]
    fn resource_metadata_is_sought_in_the_challenge_then_path_aware_then_root() -> TestResult {
        let endpoint = Url::parse("http://localhost:3000/api/mcp")?;
        let urls = resource_metadata_urls(Some("http://localhost:3000/custom.json"), &endpoint);
        assert_eq!(
            strings(&urls),
            [
                "http://localhost:3000/custom.json",
                "http://localhost:3000/.well-known/oauth-protected-resource/api/mcp",
                "http://localhost:3000/.well-known/oauth-protected-resource",
            ]
        );
        Ok(())
    }

    #[test]
    fn an_endpoint_at_the_root_has_only_the_root_location() -> TestResult {
        let urls = resource_metadata_urls(None, &Url::parse("http://localhost:3000/")?);
        assert_eq!(
            strings(&urls),
            ["http://localhost:3000/.well-known/oauth-protected-resource"]
        );
        Ok(())
    }

    #[test]
    fn an_issuer_with_a_path_is_tried_at_the_three_locations_in_spec_order() -> TestResult {
        let urls = server_metadata_urls(&Url::parse("http://localhost:1/tenant1")?);
        assert_eq!(
            strings(&urls),
            [
                "http://localhost:1/.well-known/oauth-authorization-server/tenant1",
                "http://localhost:1/.well-known/openid-configuration/tenant1",
                "http://localhost:1/tenant1/.well-known/openid-configuration",
            ]
        );
        Ok(())
    }

    #[test]
    fn an_issuer_without_a_path_is_tried_at_rfc_8414_then_oidc() -> TestResult {
        let urls = server_metadata_urls(&Url::parse("http://localhost:1")?);
        assert_eq!(
            strings(&urls),
            [
                "http://localhost:1/.well-known/oauth-authorization-server",
                "http://localhost:1/.well-known/openid-configuration",
            ]
        );
        Ok(())
    }

    #[test]
    fn only_tls_or_this_machine_is_trusted_with_codes_and_secrets() -> TestResult {
        for good in [
            "https://as.example/",
            "http://localhost:9000/",
            "http://127.0.0.1/t",
            "http://[::1]/",
        ] {
            assert!(require_secure(&Url::parse(good)?, "x").is_ok(), "{good}");
        }
        for bad in ["http://as.example/", "http://10.0.0.1/", "ftp://localhost/"] {
            assert!(require_secure(&Url::parse(bad)?, "x").is_err(), "{bad}");
        }
        Ok(())
    }

    #[test]
    fn a_resource_covers_endpoints_at_or_below_its_path_on_its_origin() -> TestResult {
        let endpoint = Url::parse("http://localhost:3000/mcp")?;
        assert!(resource_covers("http://localhost:3000", &endpoint));
        assert!(resource_covers("http://localhost:3000/mcp", &endpoint));
        assert!(resource_covers("http://LOCALHOST:3000/mcp/", &endpoint));
        assert!(!resource_covers("http://localhost:3000/mc", &endpoint));
        assert!(!resource_covers(
            "http://localhost:3000/mcp/admin",
            &endpoint
        ));
        assert!(!resource_covers("https://evil.example.com/mcp", &endpoint));
        assert!(!resource_covers("http://localhost:3001/mcp", &endpoint));
        assert!(!resource_covers("not a url", &endpoint));
        Ok(())
    }
}
