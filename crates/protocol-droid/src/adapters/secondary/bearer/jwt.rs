//! Signed JWT access tokens (RFC 9068), verified against the issuer's keys.

use std::time::Duration;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};

use super::jwks::Jwks;
use crate::application::server::auth::{TokenError, TokenValidator, normalize_claims};
use crate::application::server::{AuthClaims, BoxFuture};
use crate::domain::ir::JsonObject;

/// The asymmetric algorithms accepted unless narrowed. The HMAC family is
/// never among them: its key would have to be published in the key set,
/// which would let anyone sign.
const ASYMMETRIC: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// The longest leeway a validator takes: clocks further apart than this
/// are a fault to mend, not one to tolerate.
pub const MAX_LEEWAY: Duration = Duration::from_secs(3600);

/// Validates JWT access tokens: signature against the issuer's [`Jwks`],
/// `iss`, `aud` (the resource server's canonical URI, RFC 8707), `exp` and
/// `nbf` with a small leeway.
#[derive(Debug)]
pub struct JwtValidator {
    jwks: Jwks,
    issuer: String,
    audience: String,
    /// Further values of `aud` accepted besides [`Self::audience`].
    also: Vec<String>,
    leeway: Duration,
    algorithms: Vec<Algorithm>,
}

impl JwtValidator {
    /// Tokens issued by `issuer` for `audience`, signed with a key of `jwks`.
    ///
    /// The leeway is 30 seconds, and every asymmetric algorithm is accepted;
    /// `alg: none` and the HMAC family never are.
    #[must_use]
    pub fn new(issuer: impl Into<String>, audience: impl Into<String>, jwks: Jwks) -> Self {
        Self {
            jwks,
            issuer: issuer.into(),
            audience: audience.into(),
            also: Vec::new(),
            leeway: Duration::from_secs(30),
            algorithms: ASYMMETRIC.to_vec(),
        }
    }
    /// Also accepts tokens whose `aud` names `audience` (an alias of the
    /// resource, say), besides the one given to [`Self::new`].
    #[must_use]
    pub fn also_audience(mut self, audience: impl Into<String>) -> Self {
        self.also.push(audience.into());
        self
    }

    /// Tolerates clocks `leeway` apart when checking `exp` and `nbf`; at
    /// most [`MAX_LEEWAY`], which a longer one is taken as.
    #[must_use]
    pub const fn leeway(mut self, leeway: Duration) -> Self {
        // Beyond the clock's own reading, the decoder's `now - leeway`
        // would wrap and refuse every token; long before, the check of
        // `exp` means nothing.
        self.leeway = if leeway.as_secs() > MAX_LEEWAY.as_secs() {
            MAX_LEEWAY
        } else {
            leeway
        };
        self
    }

    /// Accepts only `algorithms`; any HMAC algorithm among them is dropped.
    #[must_use]
    pub fn algorithms(mut self, algorithms: impl IntoIterator<Item = Algorithm>) -> Self {
        self.algorithms = algorithms
            .into_iter()
            .filter(|a| ASYMMETRIC.contains(a))
            .collect();
        self
    }

    /// The key set tokens are checked against.
    #[must_use]
    pub const fn jwks(&self) -> &Jwks {
        &self.jwks
    }

    async fn check(&self, token: &str) -> Result<AuthClaims, TokenError> {
        let invalid = |why: &str| TokenError::Invalid(why.to_owned());
        // `alg: none` is not an `Algorithm`, so such a header is unreadable.
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| invalid("the token's header is unreadable or names no usable alg"))?;
        if !self.algorithms.contains(&header.alg) {
            return Err(invalid(
                "the token is signed with an algorithm not accepted here",
            ));
        }
        if !typ_is_access_token(header.typ.as_deref()) {
            return Err(invalid("the token's typ says it is not an access token"));
        }
        let jwk = self.jwks.key(header.kid.as_deref(), header.alg).await?;
        let key = DecodingKey::from_jwk(&jwk)
            .map_err(|_| TokenError::Unavailable("a key in the JWKS is unusable".to_owned()))?;
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.leeway = self.leeway.as_secs();
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.issuer]);
        let mut audiences = vec![self.audience.as_str()];
        audiences.extend(self.also.iter().map(String::as_str));
        validation.set_audience(&audiences);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let data = jsonwebtoken::decode::<JsonObject>(token, &key, &validation).map_err(|e| {
            invalid(match e.kind() {
                ErrorKind::ExpiredSignature => "the token has expired",
                ErrorKind::ImmatureSignature => "the token is not valid yet",
                ErrorKind::InvalidAudience => "the token is for another audience",
                ErrorKind::InvalidIssuer => "the token is from another issuer",
                ErrorKind::InvalidSignature => "the token's signature does not verify",
                ErrorKind::MissingRequiredClaim(_) => "the token lacks exp, iss or aud",
                ErrorKind::InvalidAlgorithm => "the token's algorithm does not match its key",
                _ => "the token is malformed",
            })
        })?;
        // The decoder takes an `iss` array that includes the issuer; RFC 7519
        // makes it one string, and the caller's principal is keyed by it.
        if !data
            .claims
            .get("iss")
            .is_some_and(serde_json::Value::is_string)
        {
            return Err(invalid("the token's iss is not one string"));
        }
        normalize_claims(data.claims)
    }
}

impl TokenValidator for JwtValidator {
    fn validate<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<AuthClaims, TokenError>> {
        Box::pin(self.check(token))
    }
}

/// Whether a JWT's `typ` header allows it to be an access token.
///
/// RFC 9068 §4 types access tokens `at+jwt` (or `application/at+jwt`), and
/// that is what a typed token must say: an ID token, a logout token or a
/// security event token signed by the same issuer is refused here even
/// before its audience is checked. An untyped token, or one typed plainly
/// `JWT`, is still accepted, because many deployed issuers mint access
/// tokens so; the audience check keeps an ID token (whose audience is the
/// client) out.
fn typ_is_access_token(typ: Option<&str>) -> bool {
    let Some(typ) = typ else {
        return true;
    };
    let typ = typ.to_ascii_lowercase();
    let typ = typ.strip_prefix("application/").unwrap_or(&typ);
    matches!(typ, "at+jwt" | "jwt")
}

#[cfg(test)]
mod tests {
    use super::typ_is_access_token;

    #[test]
    fn only_access_token_types_pass() {
        for ok in [
            None,
            Some("at+jwt"),
            Some("application/at+jwt"),
            Some("AT+JWT"),
            Some("JWT"),
        ] {
            assert!(typ_is_access_token(ok), "{ok:?}");
        }
        for bad in [
            "logout+jwt",
            "secevent+jwt",
            "dpop+jwt",
            "id_token+jwt",
            "application/jose",
        ] {
            assert!(!typ_is_access_token(Some(bad)), "{bad}");
        }
    }
}
