//! The issuer's signing keys: fetched over HTTP, cached, and refetched when a
//! token names a key the cache does not hold, at a bounded rate.

use core::fmt;
use std::time::{Duration, Instant};

use jsonwebtoken::Algorithm;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyOperations, PublicKeyUse};
use serde_json::Value;

use super::fetch;
use crate::adapters::secondary::tls::Trust;
use crate::application::server::auth::TokenError;

/// How a remote key set is fetched and kept. Bounded by default.
#[derive(Clone, Debug)]
pub struct JwksOptions {
    /// How long one fetch may take, connection included (5 s).
    pub timeout: Duration,
    /// The least time between two fetches (30 s). A token naming an unknown
    /// `kid` triggers a refetch only when the last one is at least this old,
    /// so a stream of tokens with invented key ids costs the issuer one
    /// request per interval, not one per token.
    pub min_refresh_interval: Duration,
    /// The least time between two fetches while no set is held at all (5 s),
    /// counted from the last one's start and, when it failed, its end:
    /// tokens are refused as unavailable until one is, and told to come
    /// back after this long (`Retry-After`), so the wait they are told is
    /// the wait there is. An issuer that is down costs one request per
    /// interval, and callers that waited on a failed fetch are refused at
    /// once rather than each fetching again.
    pub retry_interval: Duration,
    /// How long a fetched set is used before it is fetched again (1 hour),
    /// so a key the issuer withdrew stops being accepted.
    pub max_age: Duration,
    /// The largest key set read (64 KiB).
    pub max_bytes: usize,
    /// How long a set is still used after its last successful fetch while
    /// the issuer cannot be reached (1 day); past that, tokens cannot be
    /// checked and are refused as unavailable, so a key the issuer withdrew
    /// during the outage is not trusted for ever.
    pub max_stale: Duration,
    /// The certificate authorities an `https` key set URL is checked against.
    pub trust: Trust,
}

impl Default for JwksOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(5),
            min_refresh_interval: Duration::from_secs(30),
            retry_interval: Duration::from_secs(5),
            max_age: Duration::from_secs(3600),
            max_bytes: fetch::MAX_DOCUMENT_BYTES,
            max_stale: Duration::from_secs(24 * 3600),
            trust: Trust::default(),
        }
    }
}

enum Source {
    Remote {
        url: reqwest::Url,
        client: reqwest::Client,
    },
    Fixed,
}

#[derive(Default)]
struct Cached {
    keys: Vec<Jwk>,
    /// When the keys were last read successfully.
    fetched_at: Option<Instant>,
    /// When a fetch was last tried, successful or not: what the refresh
    /// rate is measured from, so an issuer that is down is not hammered.
    attempted_at: Option<Instant>,
    fetches: u64,
}

/// An issuer's JSON Web Key Set (RFC 7517), as a token validator reads it.
pub struct Jwks {
    source: Source,
    options: JwksOptions,
    /// Held only to read or replace the keys, never across a fetch: a token
    /// whose key is known is checked while a fetch is under way.
    cached: std::sync::Mutex<Cached>,
    /// Held across a fetch: concurrent requests that all miss wait for one
    /// fetch instead of each starting their own, and only they wait.
    fetching: tokio::sync::Mutex<()>,
}

impl fmt::Debug for Jwks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            Source::Remote { url, .. } => url.as_str(),
            Source::Fixed => "<fixed>",
        };
        f.debug_struct("Jwks")
            .field("source", &source)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Jwks {
    /// The key set published at `url` (an issuer's `jwks_uri`), fetched on
    /// first use.
    ///
    /// # Errors
    ///
    /// [`TokenError::Unavailable`] when `url` is not an `http` or `https`
    /// URL, or no HTTP client could be built.
    pub fn remote(url: &str, options: JwksOptions) -> Result<Self, TokenError> {
        let url = reqwest::Url::parse(url)
            .map_err(|e| TokenError::Unavailable(format!("JWKS URL {url:?}: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(TokenError::Unavailable(format!(
                "JWKS URL {url} is not http or https"
            )));
        }
        let client = fetch::client(options.timeout, &options.trust)?;
        Ok(Self {
            source: Source::Remote { url, client },
            options,
            cached: std::sync::Mutex::default(),
            fetching: tokio::sync::Mutex::const_new(()),
        })
    }

    /// A key set given whole (read from a file, say), never refetched.
    ///
    /// # Errors
    ///
    /// [`TokenError::Unavailable`] when `json` is not a key set.
    pub fn fixed(json: &[u8]) -> Result<Self, TokenError> {
        let keys = parse(json)?;
        Ok(Self {
            source: Source::Fixed,
            options: JwksOptions::default(),
            cached: std::sync::Mutex::new(Cached {
                keys,
                ..Cached::default()
            }),
            fetching: tokio::sync::Mutex::const_new(()),
        })
    }

    /// How many times the set has been fetched: what a test or a metric reads
    /// to see the refresh rate hold.
    pub async fn fetches(&self) -> u64 {
        self.cached().fetches
    }

    fn cached(&self) -> std::sync::MutexGuard<'_, Cached> {
        self.cached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The key that verifies a token signed with `alg` under `kid`.
    pub(super) async fn key(&self, kid: Option<&str>, alg: Algorithm) -> Result<Jwk, TokenError> {
        let Source::Remote { url, client } = &self.source else {
            return pick(&self.cached().keys, kid, alg).ok_or_else(no_key);
        };
        let (found, stale) = {
            let cached = self.cached();
            let stale = cached
                .fetched_at
                .is_none_or(|t| t.elapsed() >= self.options.max_age);
            (self.usable(&cached, kid, alg), stale)
        };
        match found {
            Ok(key) if !stale => return Ok(key),
            // Past its age: one caller refreshes it, and everyone, that one
            // included when the issuer is away, goes on with the key held.
            Ok(key) => {
                if let Ok(_fetching) = self.fetching.try_lock() {
                    if self.may_fetch() {
                        match self.refresh(url, client).await {
                            // A fresh set decides: a key it dropped is withdrawn.
                            Ok(()) => return self.usable(&self.cached(), kid, alg),
                            Err(e) => tracing::warn!("keeping the cached JWKS: {e}"),
                        }
                    }
                }
                // No fresh set (the issuer is away, or another caller is
                // fetching it): the key held still verifies, within max_stale.
                return Ok(key);
            }
            Err(_) => {}
        }
        // No key for this token: fetch (once, for every caller that missed)
        // when the last attempt is old enough; only these callers wait.
        let _fetching = self.fetching.lock().await;
        if let Ok(key) = self.usable(&self.cached(), kid, alg) {
            return Ok(key);
        }
        if self.may_fetch() {
            if let Err(e) = self.refresh(url, client).await {
                let held = self.cached().keys.is_empty();
                if held {
                    return Err(e);
                }
                tracing::warn!("refetching the JWKS for an unknown key id: {e}");
            }
        }
        self.usable(&self.cached(), kid, alg)
    }

    /// The key for `kid` and `alg` among those held, if they are not older
    /// than [`JwksOptions::max_stale`].
    fn usable(
        &self,
        cached: &Cached,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Jwk, TokenError> {
        if matches!(self.source, Source::Remote { .. }) {
            match cached.fetched_at {
                None if cached.attempted_at.is_some() => {
                    return Err(TokenError::Unavailable(
                        "the issuer's key set could not be fetched recently".to_owned(),
                    ));
                }
                None => return Err(no_key()),
                Some(at) if at.elapsed() >= self.options.max_stale => {
                    return Err(TokenError::Unavailable(
                        "the issuer's key set could not be fetched for too long".to_owned(),
                    ));
                }
                Some(_) => {}
            }
        }
        pick(&cached.keys, kid, alg).ok_or_else(no_key)
    }

    fn may_fetch(&self) -> bool {
        let cached = self.cached();
        let interval = if cached.fetched_at.is_some() {
            self.options.min_refresh_interval
        } else {
            self.options.retry_interval
        };
        cached.attempted_at.is_none_or(|t| t.elapsed() >= interval)
    }

    async fn refresh(
        &self,
        url: &reqwest::Url,
        client: &reqwest::Client,
    ) -> Result<(), TokenError> {
        {
            let mut cached = self.cached();
            cached.attempted_at = Some(Instant::now());
            cached.fetches += 1;
        }
        let request = client
            .get(url.clone())
            .header(reqwest::header::ACCEPT, "application/json");
        let fetched = match fetch::body(request, "fetching the JWKS", self.options.max_bytes).await
        {
            Ok(body) => parse(&body),
            Err(error) => Err(error),
        };
        let mut cached = self.cached();
        match fetched {
            Ok(keys) => {
                cached.keys = keys;
                cached.fetched_at = Some(Instant::now());
                Ok(())
            }
            Err(error) => {
                // Counted from the failure's end too: a fetch that took its
                // whole timeout does not leave the next caller (one that
                // waited for it) free to take as long again at once.
                cached.attempted_at = Some(Instant::now());
                Err(error)
            }
        }
    }
}

fn no_key() -> TokenError {
    TokenError::Invalid("no key in the issuer's set verifies this token".to_owned())
}

/// Reads a key set, keeping the keys it can use and skipping the rest: a set
/// that also publishes an encryption key or a key type this validator does
/// not verify with is still a set.
fn parse(json: &[u8]) -> Result<Vec<Jwk>, TokenError> {
    let document: Value = serde_json::from_slice(json)
        .map_err(|e| TokenError::Unavailable(format!("the JWKS is not JSON: {e}")))?;
    let Some(keys) = document.get("keys").and_then(Value::as_array) else {
        return Err(TokenError::Unavailable(
            "the JWKS has no `keys` array".to_owned(),
        ));
    };
    Ok(keys
        .iter()
        .filter_map(|k| serde_json::from_value::<Jwk>(k.clone()).ok())
        .filter(|k| match unsound(k) {
            None => true,
            Some(why) => {
                // Once a fetch at most: an operator learns why the
                // issuer's tokens signed with it are refused.
                tracing::warn!(
                    kid = k.common.key_id.as_deref().unwrap_or("(none)"),
                    "a key of the JWKS is not used: {why}"
                );
                false
            }
        })
        .collect())
}

/// The bits of an RSA modulus below which a key is refused: RFC 7518 §3.3
/// requires 2048 for the RS and PS algorithms, and a smaller modulus can be
/// factored, which would let anyone sign.
const MIN_RSA_BITS: usize = 2048;

/// The bits of an RSA modulus above which the verifier refuses the key
/// (the `rsa` crate's bound on public keys); such a key is dropped with a
/// reason rather than left to fail each token without one.
const MAX_RSA_BITS: usize = 4096;

/// Why `key` cannot be a verification key, if it cannot.
fn unsound(key: &Jwk) -> Option<String> {
    use base64::Engine as _;
    let bytes = |text: &str| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .ok()
    };
    match &key.algorithm {
        // A symmetric key in a published set is everyone's secret: never a
        // verification key.
        AlgorithmParameters::OctetKey(_) => Some("it is a symmetric key".to_owned()),
        AlgorithmParameters::RSA(rsa) => {
            let Some(modulus) = bytes(&rsa.n) else {
                return Some("its modulus is not base64url".to_owned());
            };
            let bits = modulus_bits(&modulus);
            if bits < MIN_RSA_BITS {
                Some(format!(
                    "its modulus has {bits} bits, fewer than {MIN_RSA_BITS}"
                ))
            } else if bits > MAX_RSA_BITS {
                Some(format!(
                    "its modulus has {bits} bits, more than the {MAX_RSA_BITS} this verifier takes"
                ))
            } else {
                None
            }
        }
        // The curve is the key's, and its coordinates must be of the
        // curve's size: a key that says P-256 and holds another curve's
        // point is not the key it says.
        AlgorithmParameters::EllipticCurve(ec) => {
            let size = match ec.curve {
                EllipticCurve::P256 => 32,
                EllipticCurve::P384 => 48,
                _ => return Some("its curve is not P-256 or P-384".to_owned()),
            };
            let fits = |c: &str| bytes(c).is_some_and(|b| b.len() == size);
            (!(fits(&ec.x) && fits(&ec.y)))
                .then(|| "its coordinates are not of its curve's size".to_owned())
        }
        AlgorithmParameters::OctetKeyPair(okp) => {
            if okp.curve != EllipticCurve::Ed25519 {
                return Some("its curve is not Ed25519".to_owned());
            }
            bytes(&okp.x)
                .is_none_or(|b| b.len() != 32)
                .then(|| "its public key is not of Ed25519's size".to_owned())
        }
    }
}

/// The bits of a big-endian unsigned integer, leading zeros not counted.
fn modulus_bits(bytes: &[u8]) -> usize {
    let significant = bytes.iter().skip_while(|b| **b == 0);
    let mut rest = significant.clone();
    match rest.next() {
        None => 0,
        Some(first) => {
            let first_bits = 8 - usize::try_from(first.leading_zeros()).unwrap_or(8);
            first_bits + 8 * significant.count().saturating_sub(1)
        }
    }
}

/// The key for `alg` and `kid`: one meant for signatures, of the right
/// family, whose declared algorithm (if any) is `alg`. Without a `kid` only
/// an unambiguous set answers.
fn pick(keys: &[Jwk], kid: Option<&str>, alg: Algorithm) -> Option<Jwk> {
    let mut candidates = keys.iter().filter(|k| {
        let for_signing = k
            .common
            .public_key_use
            .as_ref()
            .is_none_or(|u| *u == PublicKeyUse::Signature)
            && k.common
                .key_operations
                .as_ref()
                .is_none_or(|ops| ops.contains(&KeyOperations::Verify));
        let algorithm = k
            .common
            .key_algorithm
            .is_none_or(|a| a.to_string() == format!("{alg:?}"));
        let family = matches!(
            (&k.algorithm, alg),
            (
                AlgorithmParameters::RSA(_),
                Algorithm::RS256
                    | Algorithm::RS384
                    | Algorithm::RS512
                    | Algorithm::PS256
                    | Algorithm::PS384
                    | Algorithm::PS512
            ) | (AlgorithmParameters::OctetKeyPair(_), Algorithm::EdDSA)
        ) || match (&k.algorithm, alg) {
            // ES256 is P-256's and ES384 P-384's (RFC 7518 §3.4).
            (AlgorithmParameters::EllipticCurve(ec), Algorithm::ES256) => {
                ec.curve == EllipticCurve::P256
            }
            (AlgorithmParameters::EllipticCurve(ec), Algorithm::ES384) => {
                ec.curve == EllipticCurve::P384
            }
            _ => false,
        };
        for_signing && algorithm && family
    });
    match kid {
        Some(kid) => candidates
            .find(|k| k.common.key_id.as_deref() == Some(kid))
            .cloned(),
        None => {
            let first = candidates.next()?;
            candidates.next().is_none().then(|| first.clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SET: &str = r#"{"keys":[
        {"kty":"RSA","kid":"r1","use":"sig","alg":"RS256","n":"sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw","e":"AQAB"},
        {"kty":"EC","kid":"e1","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
        {"kty":"oct","kid":"h1","k":"c2VjcmV0"},
        {"kty":"RSA","kid":"enc","use":"enc","n":"AQAB","e":"AQAB"},
        {"kty":"weird"}
    ]}"#;

    #[test]
    fn only_signature_keys_of_the_tokens_family_are_picked() {
        let keys = parse(SET.as_bytes()).unwrap_or_default();
        assert_eq!(
            keys.len(),
            2,
            "the oct key, the unreadable one and the 17-bit one are dropped"
        );
        assert!(pick(&keys, Some("r1"), Algorithm::RS256).is_some());
        assert!(
            pick(&keys, Some("r1"), Algorithm::ES256).is_none(),
            "an RSA key never verifies an ES256 token"
        );
        assert!(
            pick(&keys, Some("r1"), Algorithm::PS256).is_none(),
            "the key declares RS256"
        );
        assert!(pick(&keys, Some("e1"), Algorithm::ES256).is_some());
        assert!(pick(&keys, Some("enc"), Algorithm::RS256).is_none());
        assert!(pick(&keys, Some("h1"), Algorithm::HS256).is_none());
        assert!(pick(&keys, Some("nope"), Algorithm::RS256).is_none());
    }

    #[test]
    fn without_a_kid_only_an_unambiguous_set_answers() {
        let keys = parse(SET.as_bytes()).unwrap_or_default();
        assert!(pick(&keys, None, Algorithm::ES256).is_some(), "one EC key");
        let two_ec: Vec<Jwk> = keys
            .iter()
            .filter(|k| k.common.key_id.as_deref() == Some("e1"))
            .cloned()
            .chain(
                keys.iter()
                    .filter(|k| k.common.key_id.as_deref() == Some("e1"))
                    .cloned(),
            )
            .collect();
        assert!(pick(&two_ec, None, Algorithm::ES256).is_none());
    }

    /// A key set of one key of `kty` with the given members.
    fn one(kty: &str, members: &str) -> Vec<Jwk> {
        parse(format!(r#"{{"keys":[{{"kty":"{kty}","kid":"k",{members}}}]}}"#).as_bytes())
            .unwrap_or_default()
    }

    /// `bytes` bytes of 0xff, as base64url.
    fn ones(bytes: usize) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(vec![0xff_u8; bytes])
    }

    #[test]
    fn keys_too_weak_or_not_what_they_say_are_dropped() {
        let rsa = |bytes: usize| one("RSA", &format!(r#""n":"{}","e":"AQAB""#, ones(bytes)));
        assert!(rsa(64).is_empty(), "512 bits");
        assert!(rsa(255).is_empty(), "2040 bits");
        assert_eq!(rsa(256).len(), 1, "2048 bits");
        assert_eq!(rsa(512).len(), 1, "4096 bits");
        assert!(rsa(513).is_empty(), "more than the verifier takes");
        // Leading zero bytes are no bits.
        let padded = {
            use base64::Engine as _;
            let mut n = vec![0_u8; 8];
            n.extend(vec![0xff_u8; 64]);
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(n)
        };
        assert!(one("RSA", &format!(r#""n":"{padded}","e":"AQAB""#)).is_empty());

        let ec = |crv: &str, size: usize| {
            one(
                "EC",
                &format!(r#""crv":"{crv}","x":"{}","y":"{}""#, ones(size), ones(size)),
            )
        };
        assert_eq!(ec("P-256", 32).len(), 1);
        assert_eq!(ec("P-384", 48).len(), 1);
        assert!(ec("P-256", 48).is_empty(), "a P-384 point said to be P-256");
        assert!(ec("P-384", 32).is_empty());
        assert!(ec("P-521", 66).is_empty());
        let okp =
            |crv: &str, size: usize| one("OKP", &format!(r#""crv":"{crv}","x":"{}""#, ones(size)));
        assert_eq!(okp("Ed25519", 32).len(), 1);
        assert!(okp("Ed25519", 31).is_empty());
    }

    #[test]
    fn an_ec_key_answers_only_its_curves_algorithm() {
        let keys = parse(SET.as_bytes()).unwrap_or_default();
        assert!(pick(&keys, Some("e1"), Algorithm::ES256).is_some());
        assert!(
            pick(&keys, Some("e1"), Algorithm::ES384).is_none(),
            "e1 is P-256"
        );
    }

    #[test]
    fn a_document_without_keys_is_not_a_key_set() {
        assert!(parse(b"{}").is_err());
        assert!(parse(b"not json").is_err());
    }
}
