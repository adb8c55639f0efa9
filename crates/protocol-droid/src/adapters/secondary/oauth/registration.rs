//! Who the client is at an authorization server: pre-registered credentials,
//! a Client ID Metadata Document URL, or RFC 7591 Dynamic Client
//! Registration, tried in that order as the MCP spec lists them.

use serde::{Deserialize, Serialize};
use tracing::debug;
use url::Url;

use super::AuthError;
use super::discovery::ServerMetadata;
use super::http;
use super::store::{ClientRegistration, RegistrationKind};
use super::token::{BASIC, NONE, POST};

/// What the client says about itself when it registers.
#[derive(Clone, Debug)]
pub(crate) struct ClientProfile {
    /// `client_name` in a registration.
    pub(crate) client_name: String,
    /// Where the authorization server sends the user back.
    pub(crate) redirect_uri: String,
    /// The `https` URL of this client's metadata document, if it has one.
    pub(crate) metadata_document: Option<Url>,
    /// Credentials configured out of band, if any.
    pub(crate) pre_registered: Option<ClientRegistration>,
}

/// Which identity to use at the server `metadata` describes, without
/// registering: a `held` registration that belongs to it, else pre-registered
/// credentials that do, else the metadata document if the server accepts
/// one. `None` means Dynamic Client Registration is needed.
pub(crate) fn existing(
    held: Option<&ClientRegistration>,
    profile: &ClientProfile,
    metadata: &ServerMetadata,
) -> Option<ClientRegistration> {
    let usable = |registration: &&ClientRegistration| {
        registration.belongs_to(&metadata.issuer)
            && (registration.kind != RegistrationKind::MetadataDocument
                || metadata.client_id_metadata_document_supported)
    };
    if let Some(registration) = held.filter(usable) {
        return Some(registration.clone());
    }
    if let Some(registration) = profile.pre_registered.as_ref().filter(usable) {
        return Some(registration.clone());
    }
    let document = profile.metadata_document.as_ref()?;
    metadata
        .client_id_metadata_document_supported
        .then(|| ClientRegistration {
            client_id: document.to_string(),
            client_secret: None,
            token_endpoint_auth_method: Some(NONE.to_owned()),
            // The document is portable: any server that fetches it accepts it.
            issuer: None,
            kind: RegistrationKind::MetadataDocument,
        })
}

#[derive(Serialize)]
struct RegistrationRequest<'a> {
    redirect_uris: [&'a str; 1],
    client_name: &'a str,
    // `refresh_token` is listed so that a server may issue one (SEP-2207).
    grant_types: [&'a str; 2],
    response_types: [&'a str; 1],
    token_endpoint_auth_method: &'a str,
    // A command-line or desktop client with a loopback redirect (SEP-837).
    application_type: &'a str,
}

#[derive(Deserialize)]
struct RegistrationResponse {
    client_id: String,
    #[serde(default)]
    client_secret: Option<String>,
    #[serde(default)]
    token_endpoint_auth_method: Option<String>,
}

/// The method to ask for in a registration: `none` where the server allows
/// it, as a native client cannot keep a secret; else the first secret-based
/// method it lists. RFC 8414's default list is `client_secret_basic`.
fn requested_auth_method(metadata: &ServerMetadata) -> &'static str {
    let supported = metadata.token_endpoint_auth_methods_supported.as_deref();
    let listed = |method: &str| supported.is_some_and(|list| list.iter().any(|m| m == method));
    [NONE, BASIC, POST]
        .into_iter()
        .find(|method| listed(method))
        .unwrap_or(BASIC)
}

/// Registers with RFC 7591 Dynamic Client Registration and checks the result
/// is usable before anyone is sent to authorize.
pub(crate) async fn register(
    client: &reqwest::Client,
    profile: &ClientProfile,
    metadata: &ServerMetadata,
) -> Result<ClientRegistration, AuthError> {
    let Some(endpoint) = metadata.registration_endpoint.as_deref() else {
        return Err(AuthError::Refused(format!(
            "{} offers no registration endpoint, and no client credentials for it are configured",
            metadata.issuer
        )));
    };
    let requested = requested_auth_method(metadata);
    let body = RegistrationRequest {
        redirect_uris: [&profile.redirect_uri],
        client_name: &profile.client_name,
        grant_types: ["authorization_code", "refresh_token"],
        response_types: ["code"],
        token_endpoint_auth_method: requested,
        application_type: "native",
    };
    debug!(endpoint, method = requested, "registering the client");
    let fetched = http::send(client.post(endpoint).json(&body), "client registration").await?;
    if !fetched.status.is_success() {
        return Err(AuthError::Server(format!(
            "client registration at {endpoint}: HTTP {}: {}",
            fetched.status,
            fetched.excerpt()
        )));
    }
    let response: RegistrationResponse = fetched.json("the client registration response")?;
    // RFC 7591 §3.2.1: the server may change what was asked for; the client
    // must check that what it got is something it can use.
    let method = response
        .token_endpoint_auth_method
        .unwrap_or_else(|| requested.to_owned());
    let secret_based = method == BASIC || method == POST;
    if !(secret_based || method == NONE) {
        return Err(AuthError::Refused(format!(
            "{} registered the client for token endpoint authentication {method}, which this client cannot do",
            metadata.issuer
        )));
    }
    if secret_based && response.client_secret.is_none() {
        return Err(AuthError::Refused(format!(
            "{} registered the client for {method} but issued no secret",
            metadata.issuer
        )));
    }
    Ok(ClientRegistration {
        client_id: response.client_id,
        client_secret: response.client_secret,
        token_endpoint_auth_method: Some(method),
        issuer: Some(metadata.issuer.clone()),
        kind: RegistrationKind::Dynamic,
    })
}
