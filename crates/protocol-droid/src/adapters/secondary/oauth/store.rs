//! Where tokens and client credentials live between requests and, with a
//! persistent [`TokenStore`], between runs.

use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use futures_util::future::BoxFuture;

use super::AuthError;

/// Tokens one authorization server issued for the protected resource.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenSet {
    /// The access token, presented as `Authorization: Bearer <token>`.
    pub access_token: String,
    /// The refresh token, if the server issued one.
    pub refresh_token: Option<String>,
    /// When the access token stops working, if the server said (`expires_in`).
    pub expires_at: Option<SystemTime>,
    /// The scopes granted: the response's `scope`, or the scopes requested
    /// when the response omits it (RFC 6749 §5.1).
    pub scope: Option<String>,
    /// The issuer of the authorization server that issued the tokens; they
    /// are never presented to, or refreshed at, another (SEP-2352).
    pub issuer: String,
}

impl TokenSet {
    /// Whether the access token has expired at `now`, a little early so a
    /// request in flight does not arrive with a token that just lapsed.
    #[must_use]
    pub fn is_expired(&self, now: SystemTime) -> bool {
        const EARLY: std::time::Duration = std::time::Duration::from_secs(30);
        self.expires_at
            .is_some_and(|at| at.checked_sub(EARLY).unwrap_or(at) <= now)
    }
}

impl fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Tokens are secrets and must not reach logs.
        f.debug_struct("TokenSet")
            .field(
                "refresh_token",
                &self.refresh_token.as_ref().map(|_| "<redacted>"),
            )
            .field("expires_at", &self.expires_at)
            .field("scope", &self.scope)
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

/// How the client came by its `client_id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegistrationKind {
    /// Configured out of band with the authorization server.
    PreRegistered,
    /// A Client ID Metadata Document: the `client_id` is the document's
    /// `https` URL, which any server that supports such documents accepts.
    MetadataDocument,
    /// Registered at the server with RFC 7591 Dynamic Client Registration.
    Dynamic,
}

/// The client's identity at an authorization server.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientRegistration {
    /// The `client_id`.
    pub client_id: String,
    /// The `client_secret`, for a confidential client.
    pub client_secret: Option<String>,
    /// The token endpoint authentication method the server registered, if it
    /// said (`client_secret_basic`, `client_secret_post`, `none`).
    pub token_endpoint_auth_method: Option<String>,
    /// The issuer these credentials belong to; `None` when they are not
    /// bound to one server (a metadata document, or pre-registered
    /// credentials configured without an issuer).
    pub issuer: Option<String>,
    /// How the `client_id` was obtained.
    pub kind: RegistrationKind,
}

impl ClientRegistration {
    /// Whether these credentials may be presented to `issuer` (SEP-2352:
    /// credentials from one authorization server are never assumed to work
    /// at another).
    #[must_use]
    pub fn belongs_to(&self, issuer: &str) -> bool {
        self.issuer.as_deref().is_none_or(|own| own == issuer)
    }
}

impl fmt::Debug for ClientRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientRegistration")
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field(
                "token_endpoint_auth_method",
                &self.token_endpoint_auth_method,
            )
            .field("issuer", &self.issuer)
            .field("kind", &self.kind)
            .finish()
    }
}

/// Keeps the tokens and the client registration of one protected resource.
///
/// An [`super::OAuthClient`] reads the store when it starts and writes every
/// change through it, so a store that persists lets a later run skip the
/// authorization step.
pub trait TokenStore: Send + Sync + fmt::Debug {
    /// The tokens held, if any.
    ///
    /// # Errors
    ///
    /// [`AuthError`] when the store cannot be read.
    fn tokens(&self) -> BoxFuture<'_, Result<Option<TokenSet>, AuthError>>;

    /// Replaces the tokens held; `None` forgets them.
    ///
    /// # Errors
    ///
    /// [`AuthError`] when the store cannot be written.
    fn set_tokens(&self, tokens: Option<TokenSet>) -> BoxFuture<'_, Result<(), AuthError>>;

    /// The client registration held, if any.
    ///
    /// # Errors
    ///
    /// [`AuthError`] when the store cannot be read.
    fn registration(&self) -> BoxFuture<'_, Result<Option<ClientRegistration>, AuthError>>;

    /// Replaces the client registration held; `None` forgets it.
    ///
    /// # Errors
    ///
    /// [`AuthError`] when the store cannot be written.
    fn set_registration(
        &self,
        registration: Option<ClientRegistration>,
    ) -> BoxFuture<'_, Result<(), AuthError>>;
}

/// A [`TokenStore`] in memory: everything is forgotten when it is dropped.
#[derive(Default)]
pub struct MemoryTokenStore {
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    tokens: Option<TokenSet>,
    registration: Option<ClientRegistration>,
}

impl MemoryTokenStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut Held) -> T) -> T {
        // Nothing in `Held` can be left half-written by a panic, so a
        // poisoned lock still guards consistent data.
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut held)
    }
}

impl fmt::Debug for MemoryTokenStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryTokenStore").finish_non_exhaustive()
    }
}

impl TokenStore for MemoryTokenStore {
    fn tokens(&self) -> BoxFuture<'_, Result<Option<TokenSet>, AuthError>> {
        let tokens = self.with(|held| held.tokens.clone());
        Box::pin(async move { Ok(tokens) })
    }

    fn set_tokens(&self, tokens: Option<TokenSet>) -> BoxFuture<'_, Result<(), AuthError>> {
        self.with(|held| held.tokens = tokens);
        Box::pin(async { Ok(()) })
    }

    fn registration(&self) -> BoxFuture<'_, Result<Option<ClientRegistration>, AuthError>> {
        let registration = self.with(|held| held.registration.clone());
        Box::pin(async move { Ok(registration) })
    }

    fn set_registration(
        &self,
        registration: Option<ClientRegistration>,
    ) -> BoxFuture<'_, Result<(), AuthError>> {
        self.with(|held| held.registration = registration);
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn tokens(expires_at: Option<SystemTime>) -> TokenSet {
        TokenSet {
            access_token: "secret-access".to_owned(),
            refresh_token: Some("secret-refresh".to_owned()),
            expires_at,
            scope: None,
            issuer: "http://as".to_owned(),
        }
    }

    #[test]
    fn debug_shows_no_token_or_secret() {
        let shown = format!("{:?}", tokens(None));
        assert!(!shown.contains("secret"));
        let registration = ClientRegistration {
            client_id: "id".to_owned(),
            client_secret: Some("secret-client".to_owned()),
            token_endpoint_auth_method: None,
            issuer: None,
            kind: RegistrationKind::Dynamic,
        };
        assert!(!format!("{registration:?}").contains("secret-client"));
    }

    #[test]
    fn a_token_counts_as_expired_shortly_before_its_expiry() {
        let now = SystemTime::now();
        assert!(!tokens(None).is_expired(now));
        assert!(!tokens(Some(now + Duration::from_secs(3600))).is_expired(now));
        assert!(tokens(Some(now + Duration::from_secs(5))).is_expired(now));
    }

    #[test]
    fn unbound_credentials_belong_to_every_issuer_and_bound_ones_to_theirs() {
        let mut registration = ClientRegistration {
            client_id: "id".to_owned(),
            client_secret: None,
            token_endpoint_auth_method: None,
            issuer: None,
            kind: RegistrationKind::PreRegistered,
        };
        assert!(registration.belongs_to("http://a"));
        registration.issuer = Some("http://a".to_owned());
        assert!(registration.belongs_to("http://a"));
        assert!(!registration.belongs_to("http://a/"));
    }
}
