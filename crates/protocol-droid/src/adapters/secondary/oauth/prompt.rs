//! The one step a program cannot take alone: sending the user to the
//! authorization server and receiving the redirect back.

use std::fmt;

use futures_util::future::BoxFuture;
use url::Url;

use super::AuthError;

/// The parameters of the redirect back from the authorization endpoint.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct AuthorizationResponse {
    /// `code`: exchanged for tokens.
    pub code: Option<String>,
    /// `state`: must echo the request's.
    pub state: Option<String>,
    /// `iss` (RFC 9207): the issuer that answered.
    pub iss: Option<String>,
    /// `error`, when the server refused (`access_denied` and friends).
    pub error: Option<String>,
}

impl AuthorizationResponse {
    /// Reads the response from the redirect URL's query.
    #[must_use]
    pub fn from_redirect(redirect: &Url) -> Self {
        let mut response = Self::default();
        for (name, value) in redirect.query_pairs() {
            let slot = match name.as_ref() {
                "code" => &mut response.code,
                "state" => &mut response.state,
                "iss" => &mut response.iss,
                "error" => &mut response.error,
                _ => continue,
            };
            // A repeated parameter is a malformed response (RFC 6749 §3.1);
            // keeping the first stops a later one overriding it.
            if slot.is_none() {
                *slot = Some(value.into_owned());
            }
        }
        response
    }
}

impl fmt::Debug for AuthorizationResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The code is a bearer credential until it is redeemed.
        f.debug_struct("AuthorizationResponse")
            .field("code", &self.code.as_ref().map(|_| "<redacted>"))
            .field("state", &self.state)
            .field("iss", &self.iss)
            .field("error", &self.error)
            .finish()
    }
}

/// Takes the user through the authorization endpoint: opens `url` (in a
/// browser, say) and returns what the authorization server's redirect to the
/// client's `redirect_uri` carried.
pub trait AuthorizationPrompt: Send + Sync + fmt::Debug {
    /// Visits `url` and waits for the redirect back.
    ///
    /// # Errors
    ///
    /// [`AuthError`] when the user could not be sent there or no redirect
    /// came back.
    fn authorize<'a>(
        &'a self,
        url: &'a Url,
    ) -> BoxFuture<'a, Result<AuthorizationResponse, AuthError>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_of_a_repeated_parameter_is_kept() -> Result<(), url::ParseError> {
        let redirect = Url::parse("http://localhost/cb?code=a&state=s&iss=http%3A%2F%2Fas&code=b")?;
        let response = AuthorizationResponse::from_redirect(&redirect);
        assert_eq!(response.code.as_deref(), Some("a"));
        assert_eq!(response.state.as_deref(), Some("s"));
        assert_eq!(response.iss.as_deref(), Some("http://as"));
        assert!(!format!("{response:?}").contains("\"a\""));
        Ok(())
    }
}
