//! Bounded reads from an issuer: a key set or an introspection answer.

use std::time::Duration;

use crate::adapters::secondary::tls::{Trust, describe};
use crate::application::server::auth::TokenError;

/// The largest document read from an issuer. A key set with a handful of
/// RSA keys is a few kilobytes; anything near this is not a key set.
pub(super) const MAX_DOCUMENT_BYTES: usize = 64 * 1024;

/// The client every request to an issuer goes through.
///
/// Redirects are not followed: a key set must come from the URL configured
/// for it, and an introspection request carries the server's credentials,
/// which must not be replayed elsewhere.
pub(super) fn client(timeout: Duration, trust: &Trust) -> Result<reqwest::Client, TokenError> {
    trust
        .client_builder()
        .map_err(|e| TokenError::Unavailable(e.to_string()))?
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout)
        .connect_timeout(timeout)
        .build()
        .map_err(|e| TokenError::Unavailable(format!("cannot build an HTTP client: {e}")))
}

/// Sends `request` and reads a successful answer's body, refusing one larger
/// than `max` bytes without reading the rest.
pub(super) async fn body(
    request: reqwest::RequestBuilder,
    what: &str,
    max: usize,
) -> Result<Vec<u8>, TokenError> {
    let unavailable = |detail: String| TokenError::Unavailable(format!("{what}: {detail}"));
    let mut response = request
        .send()
        .await
        .map_err(|e| unavailable(describe(&e)))?;
    let status = response.status();
    if !status.is_success() {
        return Err(unavailable(format!("answered {status}")));
    }
    let declared = response
        .content_length()
        .and_then(|n| usize::try_from(n).ok());
    if declared.is_some_and(|n| n > max) {
        return Err(unavailable(format!("larger than {max} bytes")));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| unavailable(describe(&e)))?
    {
        if body.len() + chunk.len() > max {
            return Err(unavailable(format!("larger than {max} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
