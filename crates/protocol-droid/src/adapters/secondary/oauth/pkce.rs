//! Proof Key for Code Exchange (RFC 7636) with the `S256` method, which the
//! MCP authorization spec requires whenever the client can compute SHA-256.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest as _, Sha256};

use super::AuthError;

/// The only challenge method this client sends; `plain` would hand the
/// verifier to anyone who sees the authorization request.
pub(crate) const S256: &str = "S256";

/// A one-time verifier and the challenge derived from it.
pub(crate) struct Pkce {
    verifier: String,
    challenge: String,
}

impl Pkce {
    /// A fresh pair: 32 random bytes give a 43-character verifier, the
    /// shortest RFC 7636 allows, with 256 bits of entropy.
    pub(crate) fn generate() -> Result<Self, AuthError> {
        let verifier = random_token()?;
        Ok(Self::from_verifier(verifier))
    }

    fn from_verifier(verifier: String) -> Self {
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
        Self {
            verifier,
            challenge,
        }
    }

    /// Sent in the token request.
    pub(crate) fn verifier(&self) -> &str {
        &self.verifier
    }

    /// Sent in the authorization request as `code_challenge`.
    pub(crate) fn challenge(&self) -> &str {
        &self.challenge
    }
}

impl fmt::Debug for Pkce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The verifier is what turns a stolen code into a token.
        f.debug_struct("Pkce")
            .field("challenge", &self.challenge)
            .finish_non_exhaustive()
    }
}

/// 32 random bytes, base64url without padding: used for PKCE verifiers and
/// `state` values alike.
pub(crate) fn random_token() -> Result<String, AuthError> {
    let mut bytes = [0_u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|error| AuthError::Refused(format!("no randomness for PKCE: {error}")))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_challenge_is_the_rfc_7636_appendix_b_value_for_its_verifier() {
        let pkce = Pkce::from_verifier("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk".to_owned());
        assert_eq!(
            pkce.challenge(),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn a_generated_verifier_has_the_length_and_alphabet_rfc_7636_requires() -> Result<(), AuthError>
    {
        let pkce = Pkce::generate()?;
        let verifier = pkce.verifier();
        assert!((43..=128).contains(&verifier.len()));
        assert!(
            verifier
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
        );
        assert_ne!(Pkce::generate()?.verifier(), verifier);
        Ok(())
    }

    #[test]
    fn debug_never_shows_the_verifier() -> Result<(), AuthError> {
        let pkce = Pkce::generate()?;
        assert!(!format!("{pkce:?}").contains(pkce.verifier()));
        Ok(())
    }
}
