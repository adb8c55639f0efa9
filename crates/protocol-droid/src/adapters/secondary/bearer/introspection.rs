//! OAuth 2.0 Token Introspection (RFC 7662): asking the authorization server
//! whether an opaque token is active, and for what.

use core::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::fetch;
use crate::adapters::secondary::tls::Trust;
use crate::application::server::auth::{
    TokenError, TokenValidator, audience_includes, normalize_claims,
};
use crate::application::server::context::{AuthClaims, BoxFuture};

/// How long one introspection request may take, connection included.
const INTROSPECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// Validates tokens by introspection.
///
/// The server authenticates to the endpoint with HTTP Basic (RFC 7662 §2.1
/// requires some authentication; Basic is what every authorization server
/// accepts). An active token must name this resource in `aud` (RFC 8707):
/// an introspection answer without one is refused, because a token that
/// does not say whom it is for could be any resource's.
pub struct IntrospectionValidator {
    endpoint: reqwest::Url,
    client_id: String,
    client_secret: String,
    audience: String,
    /// Further values of `aud` accepted besides [`Self::audience`].
    also: Vec<String>,
    issuer: Option<String>,
    leeway: Duration,
    client: reqwest::Client,
}

/// The client secret never prints.
impl fmt::Debug for IntrospectionValidator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IntrospectionValidator")
            .field("endpoint", &self.endpoint.as_str())
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .field("audience", &self.audience)
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

impl IntrospectionValidator {
    /// Introspects at `endpoint` as `client_id`/`client_secret`, accepting
    /// tokens whose `aud` names `audience`. Requests time out after 5 s.
    ///
    /// # Errors
    ///
    /// [`TokenError::Unavailable`] when `endpoint` is not an `http` or
    /// `https` URL, or no HTTP client could be built.
    pub fn new(
        endpoint: &str,
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
        audience: impl Into<String>,
    ) -> Result<Self, TokenError> {
        let endpoint = reqwest::Url::parse(endpoint)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https"))
            .ok_or_else(|| {
                TokenError::Unavailable(format!("introspection endpoint {endpoint:?} is not a URL"))
            })?;
        Ok(Self {
            endpoint,
            client_id: client_id.into(),
            client_secret: client_secret.into(),
            audience: audience.into(),
            also: Vec::new(),
            issuer: None,
            leeway: Duration::from_secs(30),
            client: fetch::client(INTROSPECTION_TIMEOUT, &Trust::default())?,
        })
    }

    /// Checks an `https` endpoint's certificate against `trust` instead of
    /// the platform's and the webpki roots.
    ///
    /// # Errors
    ///
    /// [`TokenError::Unavailable`] when no HTTP client could be built.
    pub fn trust(mut self, trust: &Trust) -> Result<Self, TokenError> {
        self.client = fetch::client(INTROSPECTION_TIMEOUT, trust)?;
        Ok(self)
    }

    /// Also accepts tokens whose `aud` names `audience`, besides the one
    /// given to [`Self::new`].
    #[must_use]
    pub fn also_audience(mut self, audience: impl Into<String>) -> Self {
        self.also.push(audience.into());
        self
    }

    /// Also requires the answer's `iss`, when it carries one, to be `issuer`.
    #[must_use]
    pub fn issuer(mut self, issuer: impl Into<String>) -> Self {
        self.issuer = Some(issuer.into());
        self
    }

    async fn check(&self, token: &str) -> Result<AuthClaims, TokenError> {
        let invalid = |why: &str| TokenError::Invalid(why.to_owned());
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("token", token)
            .append_pair("token_type_hint", "access_token")
            .finish();
        let request = self
            .client
            .post(self.endpoint.clone())
            .basic_auth(&self.client_id, Some(&self.client_secret))
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(reqwest::header::ACCEPT, "application/json")
            .body(form);
        let body = fetch::body(request, "introspecting", fetch::MAX_DOCUMENT_BYTES).await?;
        let Ok(Value::Object(answer)) = serde_json::from_slice::<Value>(&body) else {
            return Err(TokenError::Unavailable(
                "the introspection answer is not a JSON object".to_owned(),
            ));
        };
        if answer.get("active") != Some(&Value::Bool(true)) {
            return Err(invalid("the token is not active"));
        }
        let named = std::iter::once(&self.audience)
            .chain(&self.also)
            .any(|audience| audience_includes(answer.get("aud"), audience));
        if !named {
            return Err(invalid("the token is for another audience"));
        }
        if let (Some(expected), Some(iss)) = (&self.issuer, answer.get("iss")) {
            if iss.as_str() != Some(expected.as_str()) {
                return Err(invalid("the token is from another issuer"));
            }
        }
        // The server said active, but its clock and ours may disagree about
        // a token at the edge of its life; the stricter reading wins.
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let leeway = self.leeway.as_secs();
        if let Some(exp) = answer.get("exp").and_then(Value::as_u64) {
            if exp.saturating_add(leeway) <= now {
                return Err(invalid("the token has expired"));
            }
        }
        if let Some(nbf) = answer.get("nbf").and_then(Value::as_u64) {
            if nbf > now.saturating_add(leeway) {
                return Err(invalid("the token is not valid yet"));
            }
        }
        Ok(normalize_claims(answer))
    }
}

impl TokenValidator for IntrospectionValidator {
    fn validate<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<AuthClaims, TokenError>> {
        Box::pin(self.check(token))
    }
}
