//! OAuth 2.0 Token Introspection (RFC 7662): asking the authorization server
//! whether an opaque token is active, and for what.

use core::fmt;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::fetch;
use crate::adapters::secondary::oauth::form_encode;
use crate::adapters::secondary::tls::Trust;
use crate::application::server::auth::{
    TokenError, TokenValidator, audience_includes, normalize_claims, seconds,
};
use crate::application::server::{AuthClaims, BoxFuture};

/// How long one introspection request may take, connection included.
const INTROSPECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an active answer is kept when the token names no `exp`, and
/// the longest any is kept: a revocation is seen within this.
const MAX_POSITIVE: Duration = Duration::from_secs(300);

/// How long an inactive or refused token is remembered: long enough that a
/// client retrying a bad token does not reach the authorization server
/// each time, short enough that a token just issued is not refused for long.
const NEGATIVE: Duration = Duration::from_secs(10);

/// The most answers kept.
const CACHE_ENTRIES: usize = 10_000;

/// Introspection requests per second, sustained, and in a burst: a flood of
/// made-up tokens costs the authorization server this, not a request each.
const RATE_PER_SECOND: f64 = 20.0;
const BURST: f64 = 40.0;

/// Answers kept by the SHA-256 of the token (the token itself is never
/// kept), and the budget for asking again.
struct Cache {
    answers: HashMap<[u8; 32], (Instant, Result<AuthClaims, String>)>,
    tokens: f64,
    refilled: Instant,
}

impl Cache {
    fn new() -> Self {
        Self {
            answers: HashMap::new(),
            tokens: BURST,
            refilled: Instant::now(),
        }
    }

    fn get(&mut self, key: &[u8; 32], now: Instant) -> Option<Result<AuthClaims, TokenError>> {
        let (until, answer) = self.answers.get(key)?;
        if *until <= now {
            self.answers.remove(key);
            return None;
        }
        Some(answer.clone().map_err(TokenError::Invalid))
    }

    fn put(
        &mut self,
        key: [u8; 32],
        until: Instant,
        answer: Result<AuthClaims, String>,
        now: Instant,
    ) {
        if self.answers.len() >= CACHE_ENTRIES {
            self.answers.retain(|_, (until, _)| *until > now);
            // Still full of live answers: the oldest-expiring half goes.
            if self.answers.len() >= CACHE_ENTRIES {
                let mut expiries: Vec<Instant> = self.answers.values().map(|(u, _)| *u).collect();
                expiries.sort_unstable();
                let cut = expiries.get(CACHE_ENTRIES / 2).copied();
                if let Some(cut) = cut {
                    self.answers.retain(|_, (until, _)| *until > cut);
                }
            }
        }
        self.answers.insert(key, (until, answer));
    }

    /// Takes one request from the budget, or says there is none.
    fn spend(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = elapsed.mul_add(RATE_PER_SECOND, self.tokens).min(BURST);
        self.refilled = now;
        if self.tokens < 1.0 {
            return false;
        }
        self.tokens -= 1.0;
        true
    }
}

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
    cache: Mutex<Cache>,
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
            cache: Mutex::new(Cache::new()),
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

    /// The cached answer for `token`, or a fresh one, within the rate.
    async fn validate_cached(&self, token: &str) -> Result<AuthClaims, TokenError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        {
            let mut cache = self
                .cache
                .lock()
                .map_err(|_| TokenError::Unavailable("the cache is unavailable".to_owned()))?;
            if let Some(answer) = cache.get(&key, now) {
                return answer;
            }
            if !cache.spend(now) {
                return Err(TokenError::Unavailable(
                    "introspection is rate limited; try again shortly".to_owned(),
                ));
            }
        }
        let answer = self.check(token).await;
        let now = Instant::now();
        let keep = match &answer {
            Ok(claims) => Some((now + positive_life(claims), Ok(claims.clone()))),
            Err(TokenError::Invalid(why)) => Some((now + NEGATIVE, Err(why.clone()))),
            // The server did not answer usably: nothing learnt to keep.
            Err(TokenError::Unavailable(_)) => None,
        };
        if let (Some((until, kept)), Ok(mut cache)) = (keep, self.cache.lock()) {
            cache.put(key, until, kept, now);
        }
        answer
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
            // RFC 6749 §2.3.1: each part form-encoded before it is joined,
            // so a `:` or `%` in either reaches the server as written.
            .basic_auth(
                form_encode(&self.client_id),
                Some(form_encode(&self.client_secret)),
            )
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
        // A date that is there but no date refuses the token: read as
        // absent, it would have the token live as long as the cache lets.
        let date = |name: &str| match answer.get(name) {
            None => Ok(None),
            Some(value) => seconds(value)
                .map(Some)
                .ok_or_else(|| invalid("the introspection answer has a date that is not one")),
        };
        if let Some(exp) = date("exp")? {
            if exp.saturating_add(leeway) <= now {
                return Err(invalid("the token has expired"));
            }
        }
        if let Some(nbf) = date("nbf")? {
            if nbf > now.saturating_add(leeway) {
                return Err(invalid("the token is not valid yet"));
            }
        }
        normalize_claims(answer)
    }
}

impl TokenValidator for IntrospectionValidator {
    fn validate<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<AuthClaims, TokenError>> {
        Box::pin(self.validate_cached(token))
    }
}

/// How long an active answer is kept: until the token's `exp`, at most
/// [`MAX_POSITIVE`].
fn positive_life(claims: &AuthClaims) -> Duration {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let left = claims.exp.map_or(MAX_POSITIVE, |exp| {
        Duration::from_secs(exp.saturating_sub(now))
    });
    left.min(MAX_POSITIVE)
}
