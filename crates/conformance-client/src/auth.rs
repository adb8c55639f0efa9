//! Credentials for the suite's `auth/*` scenarios.
//!
//! Every `auth/*` scenario gets an [`OAuthClient`] whose authorization step
//! is headless: the suite's mock authorization server redirects at once, so
//! visiting the authorization URL without following the redirect yields the
//! `code`, `state` and `iss` a browser would have delivered to the redirect
//! URI.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures_util::future::BoxFuture;
use protocol_droid::adapters::secondary::authorizer::{AuthError, Authorizer};
use protocol_droid::adapters::secondary::oauth::{
    AuthorizationPrompt, AuthorizationResponse, OAuthClient,
};
use serde_json::Value;
use url::Url;

/// The Client ID Metadata Document URL the `auth/basic-cimd` scenario expects
/// as `client_id`; nothing fetches it during the run.
const CLIENT_METADATA_DOCUMENT: &str = "https://conformance-test.local/client-metadata.json";

/// Where the mock authorization server is asked to send the user back; never
/// visited, only read from the redirect.
const REDIRECT_URI: &str = "http://localhost:3000/callback";

/// How long the authorization endpoint may take to answer.
const PATIENCE: Duration = Duration::from_secs(10);

/// The authorizer for `scenario`, or None for scenarios without auth.
pub(crate) fn authorizer(
    scenario: &str,
    context: Option<&str>,
    server_url: &str,
) -> anyhow::Result<Option<Arc<dyn Authorizer>>> {
    if !scenario.starts_with("auth/") {
        return Ok(None);
    }
    let context: Value = match context {
        Some(text) => serde_json::from_str(text).context("MCP_CONFORMANCE_CONTEXT is not JSON")?,
        None => Value::Null,
    };
    let text = |name: &str| context.get(name).and_then(Value::as_str).map(str::to_owned);

    let prompt = Arc::new(HeadlessPrompt::new()?);
    let mut builder = OAuthClient::builder(server_url, REDIRECT_URI, prompt)
        .client_name("protocol-droid conformance client")
        .client_metadata_document(CLIENT_METADATA_DOCUMENT);
    if let Some(client_id) = text("client_id") {
        builder = builder.pre_registered(client_id, text("client_secret"), text("issuer"));
    }
    let client = builder.build().context("building the OAuth client")?;
    Ok(Some(Arc::new(client)))
}

/// Visits the authorization URL without following its redirect and reads the
/// response from the `Location` header.
#[derive(Debug)]
struct HeadlessPrompt {
    http: reqwest::Client,
}

impl HeadlessPrompt {
    fn new() -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(PATIENCE)
            .build()
            .context("building the HTTP client for the authorization step")?;
        Ok(Self { http })
    }

    async fn visit(&self, url: &Url) -> Result<AuthorizationResponse, AuthError> {
        let response = self
            .http
            .get(url.clone())
            .send()
            .await
            .map_err(|error| AuthError::Server(format!("authorization endpoint: {error}")))?;
        let status = response.status();
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|value| value.to_str().ok())
            .ok_or_else(|| {
                AuthError::Server(format!(
                    "the authorization endpoint answered {status} without a redirect"
                ))
            })?;
        let redirect = url.join(location).map_err(|error| {
            AuthError::Server(format!("the authorization redirect is not a URL: {error}"))
        })?;
        Ok(AuthorizationResponse::from_redirect(&redirect))
    }
}

impl AuthorizationPrompt for HeadlessPrompt {
    fn authorize<'a>(
        &'a self,
        url: &'a Url,
    ) -> BoxFuture<'a, Result<AuthorizationResponse, AuthError>> {
        Box::pin(self.visit(url))
    }
}
