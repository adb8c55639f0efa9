//! Who a bearer token says the caller is: the port a resource server checks
//! tokens through, and the one normalisation of the claims it answers with.
//!
//! A transport never reads a token itself. It hands the string to a
//! [`TokenValidator`] and overlays the [`AuthContext`] built from the answer
//! onto the request it is serving, so a signed JWT, an introspection endpoint
//! or anything a user plugs in arrive at handlers in the same shape.

use core::fmt;
use std::sync::Arc;

use serde_json::Value;

use super::ports::BoxFuture;
use crate::domain::ir::JsonObject;

/// Why a token was not accepted.
///
/// Split by who is to blame, because the answer differs: a bad token is the
/// caller's (`401 invalid_token`, and a new token may cure it), an issuer that
/// cannot be reached is nobody's the caller can fix (`503`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The token is malformed, expired, not yet valid, for another audience or
    /// issuer, badly signed, revoked or otherwise not acceptable. The reason
    /// is for the server's log and never carries the token.
    #[error("invalid token: {0}")]
    Invalid(String),
    /// The token could not be checked: the key set or the introspection
    /// endpoint did not answer usably.
    #[error("token validation unavailable: {0}")]
    Unavailable(String),
}

/// Checks a bearer token and answers its normalised claims.
///
/// Object safe, so a resource server holds one as `Arc<dyn TokenValidator>`
/// and a user can plug in their own (a cache in front of introspection, a
/// test double).
pub trait TokenValidator: Send + Sync + fmt::Debug {
    /// Validates `token` (the string after `Bearer `).
    ///
    /// # Errors
    ///
    /// [`TokenError::Invalid`] for a token that must be refused,
    /// [`TokenError::Unavailable`] when it could not be checked.
    fn validate<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<AuthClaims, TokenError>>;
}

/// Normalises a token's claims (a JWT payload, an introspection response).
///
/// Every issuer spells scopes a little differently: `scope` is a
/// space-separated string in RFC 8693 and RFC 7662, some issuers send it as
/// an array, and some send `scp` instead. All of them end up in
/// [`AuthClaims::scopes`], deduplicated and in the order given, with
/// [`AuthClaims::scope`] the same list joined by spaces. `client_id` falls
/// back to `azp`, the `OpenID Connect` name for the same party. Numeric times
/// that are not whole non-negative seconds are dropped rather than guessed.
///
/// # Errors
///
/// [`TokenError::Invalid`] when `sub`, `client_id` or `azp` is there but
/// not a string (RFC 7519 §4.1.2, RFC 9068 §2.2): read as absent, two
/// users' tokens naming them by number would be one caller. A `null` is
/// read as absent, as some issuers write one for a claim they do not have.
pub(crate) fn normalize_claims(raw: JsonObject) -> Result<AuthClaims, TokenError> {
    for key in ["sub", "client_id", "azp"] {
        if raw.get(key).is_some_and(|v| !v.is_string() && !v.is_null()) {
            return Err(TokenError::Invalid(format!(
                "the token's {key} is not a string"
            )));
        }
    }
    let mut scopes: Vec<String> = Vec::new();
    for key in ["scope", "scp"] {
        let words: Vec<&str> = match raw.get(key) {
            // Scopes are separated by the space character alone (RFC 6749
            // §3.3): split at any whitespace, one scope written with a
            // no-break space or a tab inside would grant each of its parts.
            Some(Value::String(s)) => s.split(' ').collect(),
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        for word in words {
            if !word.is_empty() && !scopes.iter().any(|s| s == word) {
                scopes.push(word.to_owned());
            }
        }
    }
    // An empty name names no one: read as absent, never as a caller of
    // its own that every other empty-named token would share.
    let string = |key: &str| {
        raw.get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    Ok(AuthClaims {
        sub: string("sub"),
        aud: raw.get("aud").cloned(),
        scope: (!scopes.is_empty()).then(|| scopes.join(" ")),
        scopes,
        exp: raw.get("exp").and_then(seconds),
        iat: raw.get("iat").and_then(Value::as_u64),
        client_id: string("client_id").or_else(|| string("azp")),
        raw_claims: raw,
    })
}

/// A `NumericDate` (RFC 7519 §2): whole seconds, or a number with a
/// fraction, which is taken down to its second.
pub(crate) fn seconds(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        let secs = value.as_f64().filter(|s| s.is_finite() && *s >= 0.0)?;
        std::time::Duration::try_from_secs_f64(secs)
            .ok()
            .map(|d| d.as_secs())
    })
}

/// Whether a token's `aud` (a string or an array of strings) names `resource`.
#[must_use]
pub(crate) fn audience_includes(aud: Option<&Value>, resource: &str) -> bool {
    match aud {
        Some(Value::String(one)) => one == resource,
        Some(Value::Array(many)) => many.iter().any(|a| a.as_str() == Some(resource)),
        _ => false,
    }
}

/// The normalised claims of a validated bearer token.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AuthClaims {
    /// The subject.
    pub sub: Option<String>,
    /// The audience, as the token wrote it.
    pub aud: Option<Value>,
    /// The space-separated scope string.
    pub scope: Option<String>,
    /// The scopes, split.
    pub scopes: Vec<String>,
    /// Expiry, seconds since the epoch.
    pub exp: Option<u64>,
    /// Issue time, seconds since the epoch.
    pub iat: Option<u64>,
    /// The OAuth client the token was issued to.
    pub client_id: Option<String>,
    /// Every claim, as the token carried them.
    pub raw_claims: JsonObject,
}

/// Who is calling: nobody in particular, or a principal with claims.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AuthContext {
    claims: Option<Arc<AuthClaims>>,
}

impl AuthContext {
    /// The anonymous caller, holding no scopes.
    ///
    /// Default-deny by construction: a primitive that needs any scope is
    /// invisible to it.
    #[must_use]
    pub const fn anonymous() -> Self {
        Self { claims: None }
    }

    /// A caller identified by validated `claims`.
    #[must_use]
    pub fn principal(claims: AuthClaims) -> Self {
        Self {
            claims: Some(Arc::new(claims)),
        }
    }

    /// Whether no principal is known.
    #[must_use]
    pub const fn is_anonymous(&self) -> bool {
        self.claims.is_none()
    }

    /// The claims, when there is a principal.
    #[must_use]
    pub fn claims(&self) -> Option<&AuthClaims> {
        self.claims.as_deref()
    }

    /// The subject, when there is a principal that names one.
    #[must_use]
    pub fn subject(&self) -> Option<&str> {
        self.claims().and_then(|c| c.sub.as_deref())
    }

    /// Who the caller is, as one key: `None` for the anonymous caller;
    /// otherwise the issuer, subject and client the token was issued to, so
    /// a principal without a `sub` is never mistaken for nobody, nor for
    /// another `sub`-less client.
    ///
    /// Written as a JSON array, whose escaping keeps the three apart: no
    /// character inside one (a separator, a quote) can make two callers'
    /// keys the same, and an absent member (`null`) is not an empty one.
    #[must_use]
    pub fn principal_key(&self) -> Option<String> {
        let claims = self.claims()?;
        let iss = claims.raw_claims.get("iss").and_then(Value::as_str);
        Some(
            Value::from(vec![
                iss.map(Value::from),
                claims.sub.as_deref().map(Value::from),
                claims.client_id.as_deref().map(Value::from),
            ])
            .to_string(),
        )
    }

    /// Whether the caller holds `scope`. The anonymous caller holds none.
    #[must_use]
    pub fn has_scope(&self, scope: &str) -> bool {
        self.claims()
            .is_some_and(|c| c.scopes.iter().any(|s| s == scope))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(value: Value) -> JsonObject {
        match value {
            Value::Object(map) => map,
            _ => JsonObject::new(),
        }
    }

    #[test]
    fn the_claims_are_normalised_to_the_listed_fields() -> Result<(), TokenError> {
        let claims = normalize_claims(object(json!({
            "iss": "https://issuer.example",
            "sub": "alice",
            "aud": "https://mcp.example/mcp",
            "scope": "tools:read  tools:write",
            "exp": 1_900_000_000u64,
            "iat": 1_800_000_000u64,
            "client_id": "client-abc",
        })))?;
        assert_eq!(claims.sub.as_deref(), Some("alice"));
        assert_eq!(claims.aud, Some(json!("https://mcp.example/mcp")));
        assert_eq!(claims.scope.as_deref(), Some("tools:read tools:write"));
        assert_eq!(claims.scopes, ["tools:read", "tools:write"]);
        assert_eq!(claims.exp, Some(1_900_000_000));
        assert_eq!(claims.iat, Some(1_800_000_000));
        assert_eq!(claims.client_id.as_deref(), Some("client-abc"));
        assert_eq!(
            claims.raw_claims.get("iss"),
            Some(&json!("https://issuer.example"))
        );
        Ok(())
    }

    #[test]
    fn scopes_arrive_from_every_spelling_once() -> Result<(), TokenError> {
        let claims = normalize_claims(object(json!({
            "scope": ["a", "b"],
            "scp": "b c",
            "azp": "web",
        })))?;
        assert_eq!(claims.scopes, ["a", "b", "c"]);
        assert_eq!(claims.client_id.as_deref(), Some("web"));
        Ok(())
    }

    #[test]
    fn scopes_are_separated_by_spaces_alone() -> Result<(), TokenError> {
        let claims = normalize_claims(object(json!({
            "scope": "a  dyn:x\u{a0}tools:write\ttools:read\u{3000}b",
        })))?;
        assert_eq!(
            claims.scopes,
            ["a", "dyn:x\u{a0}tools:write\ttools:read\u{3000}b"]
        );
        assert!(!claims.scopes.iter().any(|s| s == "tools:write"));
        Ok(())
    }

    #[test]
    fn no_scope_claim_means_no_scope() -> Result<(), TokenError> {
        let claims = normalize_claims(object(json!({ "sub": "x", "exp": -5 })))?;
        assert!(claims.scopes.is_empty());
        assert_eq!(claims.scope, None);
        assert_eq!(claims.exp, None, "a negative time is dropped, not wrapped");
        Ok(())
    }

    #[test]
    fn a_name_that_is_not_a_string_refuses_the_token() {
        // Read as absent, users 123 and 456 of one client would be one
        // caller, sharing sessions, rounds and tasks.
        for claims in [
            json!({ "sub": 123, "client_id": "c1" }),
            json!({ "sub": "alice", "client_id": 7 }),
            json!({ "sub": ["alice"] }),
            json!({ "sub": "alice", "azp": { "id": "web" } }),
        ] {
            assert!(
                matches!(
                    normalize_claims(object(claims.clone())),
                    Err(TokenError::Invalid(_))
                ),
                "{claims}"
            );
        }
        let absent = normalize_claims(object(json!({ "sub": null, "azp": "web" })));
        assert!(absent.is_ok_and(|claims| claims.sub.is_none()));
    }

    #[test]
    fn no_two_callers_share_a_principal_key() {
        let key = |claims: Value| {
            normalize_claims(object(claims))
                .ok()
                .and_then(|claims| AuthContext::principal(claims).principal_key())
        };
        let iss = "https://issuer.example";
        let callers = [
            key(json!({ "iss": iss, "sub": "a\u{1f}b", "client_id": "c" })),
            key(json!({ "iss": iss, "sub": "a", "client_id": "b\u{1f}c" })),
            key(json!({ "iss": iss, "sub": "a\",\"b", "client_id": "c" })),
            key(json!({ "iss": iss, "sub": "a", "client_id": "b\",\"c" })),
            key(json!({ "iss": iss, "sub": "a" })),
            key(json!({ "iss": iss, "client_id": "a" })),
            key(json!({ "sub": "a" })),
        ];
        for (i, one) in callers.iter().enumerate() {
            assert!(one.is_some());
            for other in callers.iter().skip(i + 1) {
                assert_ne!(one, other);
            }
        }
        // An empty name is no name: not a caller of its own.
        assert_eq!(
            key(json!({ "iss": iss, "sub": "", "client_id": "a" })),
            key(json!({ "iss": iss, "client_id": "a" }))
        );
    }

    #[test]
    fn an_audience_matches_as_a_string_or_a_member() {
        let r = "https://mcp.example/mcp";
        assert!(audience_includes(Some(&json!(r)), r));
        assert!(audience_includes(Some(&json!(["other", r])), r));
        assert!(!audience_includes(Some(&json!("https://mcp.example")), r));
        assert!(!audience_includes(None, r));
    }
}
