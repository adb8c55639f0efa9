//! What the HTTP client transport asks of whoever holds the caller's
//! credentials.
//!
//! The transport knows when a server refused a request and what the refusal
//! said; it does not know how credentials are obtained. An [`Authorizer`]
//! supplies the `Authorization` header for each request and is told about each
//! challenge, so an OAuth client, a static token or anything a user plugs in
//! can sit behind the same transport.

use std::fmt;

use futures_util::future::BoxFuture;

/// A refusal by the resource server that credentials might cure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// `401` (no or bad credentials) or `403` (the token lacks a scope).
    pub status: u16,
    /// The URL of the MCP endpoint that refused: the protected resource.
    pub resource: String,
    /// The `WWW-Authenticate` header as sent, if any.
    pub www_authenticate: Option<String>,
}

/// Why credentials could not be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// The challenge cannot be answered by this authorizer (a static token
    /// refused, step-up attempts exhausted, no usable metadata).
    #[error("authorization refused: {0}")]
    Refused(String),
    /// Talking to an authorization server failed.
    #[error("authorization server: {0}")]
    Server(String),
    /// An answer from an authorization server broke a rule that protects the
    /// client (issuer mismatch, resource mismatch, missing `iss`).
    #[error("authorization rejected: {0}")]
    Rejected(String),
}

/// Supplies credentials to an HTTP client transport and answers challenges.
pub trait Authorizer: Send + Sync + fmt::Debug {
    /// The value of the `Authorization` header for the next request, if any
    /// (for example `Bearer <token>`), refreshing an expired token first when
    /// it can.
    fn authorization(&self) -> BoxFuture<'_, Result<Option<String>, AuthError>>;

    /// The server refused a request: obtain credentials that answer the
    /// challenge. On `Ok` the transport retries the request once with the new
    /// [`Self::authorization`]; the authorizer bounds how often it agrees to
    /// try again for the same resource.
    ///
    /// # Errors
    ///
    /// [`AuthError`] when no credentials can answer the challenge; the
    /// transport then fails the request with it.
    fn challenged<'a>(&'a self, challenge: &'a Challenge) -> BoxFuture<'a, Result<(), AuthError>>;
}

/// A fixed bearer token, for a caller that already holds one.
#[derive(Clone)]
pub struct StaticToken {
    token: String,
}

impl StaticToken {
    /// Presents `token` as `Authorization: Bearer <token>` on every request.
    #[must_use]
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            token: token.into(),
        }
    }
}

impl fmt::Debug for StaticToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The token is a secret and must not reach logs.
        f.debug_struct("StaticToken").finish_non_exhaustive()
    }
}

impl Authorizer for StaticToken {
    fn authorization(&self) -> BoxFuture<'_, Result<Option<String>, AuthError>> {
        Box::pin(async move { Ok(Some(format!("Bearer {}", self.token))) })
    }

    fn challenged<'a>(&'a self, challenge: &'a Challenge) -> BoxFuture<'a, Result<(), AuthError>> {
        Box::pin(async move {
            Err(AuthError::Refused(format!(
                "the server answered {} to a fixed token",
                challenge.status
            )))
        })
    }
}
