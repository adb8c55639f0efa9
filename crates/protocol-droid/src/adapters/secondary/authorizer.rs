//! What the HTTP client transport asks of whoever holds the caller's
//! credentials.
//!
//! The transport knows when a server refused a request and what the refusal
//! said; it does not know how credentials are obtained. An [`Authorizer`]
//! supplies the `Authorization` header for each request and is told about each
//! challenge, so an OAuth client, a static token or anything a user plugs in
//! can sit behind the same transport.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

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

/// How long after the token changed a refusal is still taken for one of
/// the old token, in flight when it changed, and answered with a retry.
const ROTATION_GRACE: Duration = Duration::from_secs(30);

/// A bearer token kept in a file that is rotated in place (a mounted
/// secret, a file another process renews). Read when opened, and read
/// again when the server refuses the token: a rotated token is taken up at
/// the first refusal of the old one, with no restart and nothing read on
/// the way of a request the server accepts.
pub struct TokenFile {
    path: PathBuf,
    held: Mutex<Held>,
}

struct Held {
    token: String,
    /// When the file last gave a token other than the one before.
    changed_at: Option<Instant>,
}

impl TokenFile {
    /// Reads the token in `path`: its text without a trailing newline.
    ///
    /// # Errors
    ///
    /// When the file cannot be read or holds no token.
    pub fn open(path: impl Into<PathBuf>) -> std::io::Result<Self> {
        let path = path.into();
        let token = read_token(&path)?;
        Ok(Self {
            path,
            held: Mutex::new(Held {
                token,
                changed_at: None,
            }),
        })
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The most bytes a token file may hold: tokens are kilobytes at most.
const MAX_TOKEN_FILE: u64 = 64 * 1024;

/// The token in `path`: files written by `echo` end in a newline no token
/// contains.
fn read_token(path: &Path) -> std::io::Result<String> {
    let invalid = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
    let bytes = super::local_file::read_regular(path, MAX_TOKEN_FILE)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| invalid(format!("{} is not UTF-8 text", path.display())))?;
    let token = text.trim_end_matches(['\n', '\r']);
    if token.is_empty() {
        return Err(invalid(format!("{} holds no token", path.display())));
    }
    check_token(token).map_err(|why| invalid(format!("{}: {why}", path.display())))?;
    Ok(token.to_owned())
}

/// Whether `token` can be sent as `Authorization: Bearer <token>`: visible
/// ASCII only (RFC 6750's `b64token` and more, never a space or a line
/// break). A token that cannot be would otherwise go out as no token at
/// all, and the server's refusal would be blamed on the token.
///
/// # Errors
///
/// Why it cannot, without the token.
pub fn check_token(token: &str) -> Result<(), &'static str> {
    if token.is_empty() {
        return Err("the token is empty");
    }
    if token.bytes().all(|b| b.is_ascii_graphic()) {
        Ok(())
    } else {
        Err(
            "the token holds a character a bearer token cannot carry (a space, a line break, a control or a non-ASCII character)",
        )
    }
}

impl fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The path may be shown; the token is a secret and must not.
        f.debug_struct("TokenFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Authorizer for TokenFile {
    fn authorization(&self) -> BoxFuture<'_, Result<Option<String>, AuthError>> {
        let header = format!("Bearer {}", self.held().token);
        Box::pin(async move { Ok(Some(header)) })
    }

    fn challenged<'a>(&'a self, challenge: &'a Challenge) -> BoxFuture<'a, Result<(), AuthError>> {
        Box::pin(async move {
            let refused = || {
                AuthError::Refused(format!(
                    "the server answered {} to the token in {}",
                    challenge.status,
                    self.path.display()
                ))
            };
            // A file is read off the runtime's threads: a slow disk holds up
            // this request only.
            let path = self.path.clone();
            let read = tokio::task::spawn_blocking(move || read_token(&path))
                .await
                .map_err(|_| refused())?;
            let Ok(token) = read else {
                return Err(refused());
            };
            let mut held = self.held();
            if token != held.token {
                held.token = token;
                held.changed_at = Some(Instant::now());
                return Ok(());
            }
            // The same token as held: this request may have carried the one
            // before, if the change was a moment ago, and is sent again. A
            // new token the server refuses as well costs each request the
            // transport's few tries, and only in that moment.
            match held.changed_at {
                Some(at) if at.elapsed() < ROTATION_GRACE => Ok(()),
                _ => Err(refused()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestError = Box<dyn std::error::Error>;

    fn challenge() -> Challenge {
        Challenge {
            status: 401,
            resource: "https://example.com/mcp".to_owned(),
            www_authenticate: None,
        }
    }

    #[tokio::test]
    async fn a_rotated_token_is_read_again_at_the_first_refusal() -> Result<(), TestError> {
        let path = std::env::temp_dir().join(format!("droid-token-{}", std::process::id()));
        std::fs::write(&path, "first\n")?;
        let tokens = TokenFile::open(&path)?;
        assert_eq!(
            tokens.authorization().await?.as_deref(),
            Some("Bearer first")
        );
        // Refused with nothing new in the file: no retry.
        assert!(tokens.challenged(&challenge()).await.is_err());

        std::fs::write(&path, "second\n")?;
        // Nothing is read until the server refuses.
        assert_eq!(
            tokens.authorization().await?.as_deref(),
            Some("Bearer first")
        );
        tokens.challenged(&challenge()).await?;
        assert_eq!(
            tokens.authorization().await?.as_deref(),
            Some("Bearer second")
        );
        // A request that carried the old token meanwhile is retried too.
        tokens.challenged(&challenge()).await?;

        // An emptied file is no token: refused, and the held one stays.
        std::fs::write(&path, "\n")?;
        assert!(tokens.challenged(&challenge()).await.is_err());
        assert_eq!(
            tokens.authorization().await?.as_deref(),
            Some("Bearer second")
        );
        std::fs::remove_file(&path)?;
        assert!(TokenFile::open(&path).is_err());
        let debug = format!("{tokens:?}");
        assert!(!debug.contains("second"), "{debug}");
        Ok(())
    }
}
