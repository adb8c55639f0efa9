//! The token endpoint: redeeming an authorization code (with PKCE and RFC
//! 8707's `resource`) and refreshing, authenticated the way the client is
//! registered and the server allows.

use std::time::{Duration, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use tracing::debug;

use super::AuthError;
use super::discovery::ServerMetadata;
use super::http;
use super::store::{ClientRegistration, TokenSet};

/// `client_secret_basic`: the credentials in an HTTP Basic header.
pub(crate) const BASIC: &str = "client_secret_basic";
/// `client_secret_post`: the credentials in the form body.
pub(crate) const POST: &str = "client_secret_post";
/// `none`: a public client, identified by `client_id` alone.
pub(crate) const NONE: &str = "none";

/// How the client authenticates at the token endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AuthMethod {
    Basic,
    Post,
    None,
}

impl AuthMethod {
    /// The method for `registration` at the server `metadata` describes: the
    /// registered one if the registration names it; otherwise the first of
    /// `client_secret_basic`, `client_secret_post` that the server lists
    /// (RFC 8414's default list being `client_secret_basic` alone) and a
    /// secret makes possible; otherwise `none`.
    pub(crate) fn choose(
        registration: &ClientRegistration,
        metadata: &ServerMetadata,
    ) -> Result<Self, AuthError> {
        if let Some(method) = registration.token_endpoint_auth_method.as_deref() {
            let chosen = match method {
                BASIC => Self::Basic,
                POST => Self::Post,
                NONE => Self::None,
                other => {
                    return Err(AuthError::Refused(format!(
                        "token endpoint authentication {other} is not one this client can do"
                    )));
                }
            };
            if chosen != Self::None && registration.client_secret.is_none() {
                return Err(AuthError::Refused(format!(
                    "token endpoint authentication {method} needs a client secret"
                )));
            }
            return Ok(chosen);
        }
        let listed = |method: &str| match &metadata.token_endpoint_auth_methods_supported {
            Some(list) => list.iter().any(|m| m == method),
            None => method == BASIC,
        };
        if registration.client_secret.is_some() {
            if listed(BASIC) {
                return Ok(Self::Basic);
            }
            if listed(POST) {
                return Ok(Self::Post);
            }
        }
        Ok(Self::None)
    }
}

/// A token request's form, before client authentication is added.
pub(crate) struct Grant<'a> {
    pub(crate) params: Vec<(&'static str, &'a str)>,
    /// The scope requested, recorded as granted when the response omits one.
    pub(crate) requested_scope: Option<&'a str>,
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    token_type: Option<String>,
    #[serde(default)]
    expires_in: Option<ExpiresIn>,
    #[serde(default)]
    refresh_token: Option<String>,
    #[serde(default)]
    scope: Option<String>,
}

/// `expires_in` is a number, but some servers send it as a string.
#[derive(Deserialize)]
#[serde(untagged)]
enum ExpiresIn {
    Seconds(u64),
    Text(String),
}

impl ExpiresIn {
    fn seconds(&self) -> Option<u64> {
        match self {
            Self::Seconds(seconds) => Some(*seconds),
            Self::Text(text) => text.trim().parse().ok(),
        }
    }
}

#[derive(Deserialize)]
struct ErrorResponse {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

/// Sends `grant` to the token endpoint of `metadata`, authenticated as
/// `registration`, and reads the tokens.
pub(crate) async fn request(
    client: &reqwest::Client,
    metadata: &ServerMetadata,
    registration: &ClientRegistration,
    grant: Grant<'_>,
) -> Result<TokenSet, AuthError> {
    let Some(endpoint) = metadata.token_endpoint.as_deref() else {
        return Err(AuthError::Refused(format!(
            "{} publishes no token endpoint",
            metadata.issuer
        )));
    };
    let method = AuthMethod::choose(registration, metadata)?;
    let mut params = grant.params;
    let secret = registration.client_secret.as_deref().unwrap_or_default();
    let mut builder = client.post(endpoint);
    match method {
        AuthMethod::Basic => {
            // RFC 6749 §2.3.1: each part is form-urlencoded before encoding.
            let credentials = format!(
                "{}:{}",
                form_encode(&registration.client_id),
                form_encode(secret)
            );
            builder = builder.header(
                reqwest::header::AUTHORIZATION,
                format!("Basic {}", STANDARD.encode(credentials)),
            );
        }
        AuthMethod::Post => {
            params.push(("client_id", &registration.client_id));
            params.push(("client_secret", secret));
        }
        AuthMethod::None => params.push(("client_id", &registration.client_id)),
    }
    debug!(endpoint, ?method, "requesting tokens");
    let fetched = http::send(
        builder
            .header(reqwest::header::ACCEPT, "application/json")
            .form(&params),
        "token request",
    )
    .await?;
    if !fetched.status.is_success() {
        let reason = fetched
            .json::<ErrorResponse>("the token error response")
            .map(|error| match error.error_description {
                Some(description) => format!("{}: {description}", error.error),
                None => error.error,
            })
            .unwrap_or_else(|_| fetched.excerpt());
        return Err(AuthError::Server(format!(
            "token request at {endpoint}: HTTP {}: {reason}",
            fetched.status
        )));
    }
    let response: TokenResponse = fetched.json("the token response")?;
    if let Some(kind) = &response.token_type {
        if !kind.eq_ignore_ascii_case("bearer") {
            return Err(AuthError::Refused(format!(
                "{} issued a {kind} token; only bearer tokens are supported",
                metadata.issuer
            )));
        }
    }
    let expires_at = response
        .expires_in
        .as_ref()
        .and_then(ExpiresIn::seconds)
        .and_then(|seconds| SystemTime::now().checked_add(Duration::from_secs(seconds)));
    Ok(TokenSet {
        access_token: response.access_token,
        refresh_token: response.refresh_token,
        expires_at,
        scope: response
            .scope
            .or_else(|| grant.requested_scope.map(str::to_owned)),
        issuer: metadata.issuer.clone(),
    })
}

/// `value` as `application/x-www-form-urlencoded` writes it: what each part
/// of HTTP Basic client credentials is before it is joined (RFC 6749
/// §2.3.1).
pub(crate) fn form_encode(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::secondary::oauth::store::RegistrationKind;

    fn metadata(supported: Option<&[&str]>) -> ServerMetadata {
        let mut document = serde_json::json!({"issuer": "http://as"});
        if let (Some(list), Some(object)) = (supported, document.as_object_mut()) {
            object.insert("token_endpoint_auth_methods_supported".into(), list.into());
        }
        serde_json::from_value(document).unwrap_or_else(|_| unreachable!())
    }

    fn registration(secret: bool, method: Option<&str>) -> ClientRegistration {
        ClientRegistration {
            client_id: "id".to_owned(),
            client_secret: secret.then(|| "s".to_owned()),
            token_endpoint_auth_method: method.map(str::to_owned),
            issuer: None,
            kind: RegistrationKind::PreRegistered,
        }
    }

    #[test]
    fn the_registered_method_is_used_as_registered() -> Result<(), AuthError> {
        let any = metadata(Some(&[BASIC, POST, NONE]));
        assert_eq!(
            AuthMethod::choose(&registration(true, Some(POST)), &any)?,
            AuthMethod::Post
        );
        assert_eq!(
            AuthMethod::choose(&registration(true, Some(NONE)), &any)?,
            AuthMethod::None
        );
        assert!(AuthMethod::choose(&registration(false, Some(BASIC)), &any).is_err());
        assert!(AuthMethod::choose(&registration(true, Some("private_key_jwt")), &any).is_err());
        Ok(())
    }

    #[test]
    fn without_a_registered_method_the_server_list_decides() -> Result<(), AuthError> {
        let secret = registration(true, None);
        assert_eq!(
            AuthMethod::choose(&secret, &metadata(None))?,
            AuthMethod::Basic
        );
        assert_eq!(
            AuthMethod::choose(&secret, &metadata(Some(&[POST])))?,
            AuthMethod::Post
        );
        assert_eq!(
            AuthMethod::choose(&secret, &metadata(Some(&[NONE])))?,
            AuthMethod::None
        );
        assert_eq!(
            AuthMethod::choose(&registration(false, None), &metadata(Some(&[BASIC, NONE])))?,
            AuthMethod::None
        );
        Ok(())
    }
}
