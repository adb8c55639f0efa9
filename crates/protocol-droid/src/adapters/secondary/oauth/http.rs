//! Talking to authorization servers: bounded in time and in size.

use std::time::Duration;

use serde::de::DeserializeOwned;

use super::AuthError;
use crate::adapters::secondary::tls::{Trust, describe};

/// The largest metadata document, registration or token response read; real
/// ones are a few kilobytes.
pub(crate) const MAX_DOCUMENT_BYTES: usize = 64 * 1024;

/// Builds the client every authorization-server request goes through.
///
/// Redirects are not followed: a metadata document must come from the URL
/// its issuer names (RFC 8414 §3.3, RFC 9728 §3.3), and a token request must
/// not be replayed somewhere else with its credentials.
pub(crate) fn client(timeout: Duration, trust: &Trust) -> Result<reqwest::Client, AuthError> {
    trust
        .client_builder()
        .map_err(|error| AuthError::Server(error.to_string()))?
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout)
        .connect_timeout(timeout)
        .build()
        .map_err(|error| AuthError::Server(format!("cannot build an HTTP client: {error}")))
}

/// A response whose body has been read, up to [`MAX_DOCUMENT_BYTES`].
pub(crate) struct Fetched {
    pub(crate) status: reqwest::StatusCode,
    pub(crate) body: Vec<u8>,
}

impl Fetched {
    /// The body read as JSON into `T`.
    pub(crate) fn json<T: DeserializeOwned>(&self, what: &str) -> Result<T, AuthError> {
        serde_json::from_slice(&self.body)
            .map_err(|error| AuthError::Server(format!("{what} is not the JSON expected: {error}")))
    }

    /// A short, printable excerpt of the body for error messages: an OAuth
    /// error response is small JSON, anything longer is cut.
    pub(crate) fn excerpt(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        text.chars().take(300).collect()
    }
}

/// Sends `request` and reads its body, refusing one larger than
/// [`MAX_DOCUMENT_BYTES`].
pub(crate) async fn send(
    request: reqwest::RequestBuilder,
    what: &str,
) -> Result<Fetched, AuthError> {
    let mut response = request
        .send()
        .await
        .map_err(|error| AuthError::Server(format!("{what}: {}", describe(&error))))?;
    let status = response.status();
    if response
        .content_length()
        .is_some_and(|length| length > u64::try_from(MAX_DOCUMENT_BYTES).unwrap_or(u64::MAX))
    {
        return Err(AuthError::Server(format!(
            "{what}: the response is larger than {MAX_DOCUMENT_BYTES} bytes"
        )));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|error| AuthError::Server(format!("{what}: {}", describe(&error))))?
    {
        if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
            return Err(AuthError::Server(format!(
                "{what}: the response is larger than {MAX_DOCUMENT_BYTES} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Fetched { status, body })
}
