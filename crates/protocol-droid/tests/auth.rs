//! Authorization on the HTTP transports, with real tokens: an issuer whose
//! RSA and P-256 keys are generated here, a key set and an introspection
//! endpoint served on loopback, and a protected MCP server in front of them.
//!
//! Timeouts only stop a broken test from hanging; nothing asserts how long
//! anything took.

// Indexing a `serde_json::Value` yields `Null` for a missing member and never
// panics, which is what reading replies wants.
#![allow(clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::routing::{get, post};
use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::elliptic_curve::sec1::ToEncodedPoint as _;
use p256::pkcs8::EncodePrivateKey as _;
use protocol_droid::adapters::primary::http::{HttpOptions, HttpServer, ResourceServer};
use protocol_droid::adapters::secondary::bearer::{
    IntrospectionValidator, Jwks, JwksOptions, JwtValidator,
};
use protocol_droid::adapters::secondary::metrics::Metrics;
use protocol_droid::adapters::secondary::tls::Trust;
use protocol_droid::application::server::{AuthClaims, AuthContext, RequestContext};
use protocol_droid::application::server::{Call, CallError, Server, ToolSpec};
use protocol_droid::application::server::{NoExchange, NullSink};
use protocol_droid::application::server::{Rate, RateLimits};
use protocol_droid::application::server::{TokenError, TokenValidator};
use protocol_droid::domain::TransportKind;
use protocol_droid::domain::ir::{JsonObject, ToolResult};
use protocol_droid::domain::jsonrpc::{Request, RequestId};
use protocol_droid::wire::tools::TaskSupport;
use rsa::pkcs1::EncodeRsaPrivateKey as _;
use rsa::traits::PublicKeyParts as _;
use serde_json::{Value, json};

#[allow(dead_code)] // Each test binary uses its own part of it.
mod support;

use support::{
    BOTH, LEGACY, MODERN, PATIENCE, Serving, TestError, client_from, initialize, legacy_session,
    loopback, pki,
};

/// A resource URI no server here answers on: an audience that is not ours.
const ELSEWHERE: &str = "http://127.0.0.1:1/mcp";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A signing key of the test issuer, with its public half as a JWK.
struct SigningKey {
    kid: String,
    alg: Algorithm,
    encoding: EncodingKey,
    jwk: Value,
}

impl SigningKey {
    fn rsa(kid: &str) -> Result<Self, TestError> {
        let private = rsa::RsaPrivateKey::new(&mut rand::rngs::OsRng, 2048)?;
        let der = private.to_pkcs1_der()?;
        let public = private.to_public_key();
        Ok(Self {
            kid: kid.to_owned(),
            alg: Algorithm::RS256,
            encoding: EncodingKey::from_rsa_der(der.as_bytes()),
            jwk: json!({
                "kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
                "n": b64(&public.n().to_bytes_be()), "e": b64(&public.e().to_bytes_be()),
            }),
        })
    }

    fn ec(kid: &str) -> Result<Self, TestError> {
        let secret = p256::SecretKey::random(&mut rand::rngs::OsRng);
        let der = secret.to_pkcs8_der()?;
        let point = secret.public_key().to_encoded_point(false);
        let (Some(x), Some(y)) = (point.x(), point.y()) else {
            return Err("an uncompressed point has coordinates".into());
        };
        Ok(Self {
            kid: kid.to_owned(),
            alg: Algorithm::ES256,
            encoding: EncodingKey::from_ec_der(der.as_bytes()),
            jwk: json!({ "kty": "EC", "kid": kid, "crv": "P-256", "x": b64(x), "y": b64(y) }),
        })
    }

    fn sign(&self, claims: &Value) -> Result<String, TestError> {
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.clone());
        Ok(jsonwebtoken::encode(&header, claims, &self.encoding)?)
    }
}

fn as_json(value: &Value) -> ([(&'static str, &'static str); 1], String) {
    ([("content-type", "application/json")], value.to_string())
}

/// The test issuer's own HTTP server: the key set (counting its fetches) and
/// an introspection endpoint answering from a table.
#[derive(Clone, Default)]
struct IssuerState {
    jwks: Arc<Mutex<Value>>,
    fetches: Arc<AtomicU64>,
    introspection: Arc<Mutex<BTreeMap<String, Value>>>,
    introspections: Arc<AtomicU64>,
    /// While set, a key-set request is held until `release` is notified.
    hold: Arc<std::sync::atomic::AtomicBool>,
    release: Arc<tokio::sync::Notify>,
    /// While set, the key set is answered with 503.
    down: Arc<std::sync::atomic::AtomicBool>,
}

/// The issuer serves HTTPS, as every real one does, with a chain from a CA
/// made for the test that the resource server is told to trust.
struct Issuer {
    url: String,
    state: IssuerState,
    trust: Trust,
    served: tokio::task::JoinHandle<()>,
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.served.abort();
    }
}

impl Issuer {
    async fn start(keys: &[&SigningKey]) -> Result<Self, TestError> {
        let state = IssuerState::default();
        state.publish(keys);
        let app = axum::Router::new()
            .route(
                "/jwks",
                get(
                    |axum::extract::State(s): axum::extract::State<IssuerState>| async move {
                        s.fetches.fetch_add(1, Ordering::SeqCst);
                        if s.hold.load(Ordering::SeqCst) {
                            s.release.notified().await;
                        }
                        if s.down.load(Ordering::SeqCst) {
                            return Err(axum::http::StatusCode::SERVICE_UNAVAILABLE);
                        }
                        let body = s.jwks.lock().map(|v| v.clone()).unwrap_or(Value::Null);
                        Ok(as_json(&body))
                    },
                ),
            )
            .route(
                "/introspect",
                post(
                    |axum::extract::State(s): axum::extract::State<IssuerState>,
                     headers: axum::http::HeaderMap,
                     body: String| async move {
                        // The resource server must authenticate itself:
                        // as `rs`, or as `rs:x` with the secret `s:e c%ret`,
                        // each part form-encoded first (RFC 6749 §2.3.1).
                        let basic = |credentials: &str| {
                            format!(
                                "Basic {}",
                                base64::engine::general_purpose::STANDARD.encode(credentials)
                            )
                        };
                        let known = [basic("rs:rs-secret"), basic("rs%3Ax:s%3Ae+c%25ret")];
                        let presented = headers.get("authorization").and_then(|v| v.to_str().ok());
                        if !known.iter().any(|k| Some(k.as_str()) == presented) {
                            return as_json(&json!({ "error": "invalid_client" }));
                        }
                        s.introspections.fetch_add(1, Ordering::SeqCst);
                        let token = url::form_urlencoded::parse(body.as_bytes())
                            .find(|(k, _)| k == "token")
                            .map(|(_, v)| v.into_owned())
                            .unwrap_or_default();
                        let answer = s
                            .introspection
                            .lock()
                            .ok()
                            .and_then(|t| t.get(&token).cloned())
                            .unwrap_or_else(|| json!({ "active": false }));
                        as_json(&answer)
                    },
                ),
            )
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr: SocketAddr = listener.local_addr()?;
        let ca = pki::Authority::new("issuer ca")?;
        let leaf = ca.leaf(&["127.0.0.1"], pki::Validity::Current)?;
        let served = pki::serve_tls(listener, app, &leaf)?;
        Ok(Self {
            url: format!("https://{addr}"),
            state,
            trust: Trust::with_ca_pem(ca.pem.as_bytes())?,
            served,
        })
    }

    fn issuer(&self) -> String {
        format!("{}/issuer", self.url)
    }

    fn jwks(&self, min_refresh: Duration) -> Result<Jwks, TestError> {
        Ok(Jwks::remote(
            &format!("{}/jwks", self.url),
            JwksOptions {
                min_refresh_interval: min_refresh,
                trust: self.trust.clone(),
                ..JwksOptions::default()
            },
        )?)
    }

    fn fetches(&self) -> u64 {
        self.state.fetches.load(Ordering::SeqCst)
    }

    /// A validator of this issuer's tokens for [`ELSEWHERE`], its key set
    /// fetched as `options` say (the issuer's CA trusted).
    fn validator(&self, mut options: JwksOptions) -> Result<JwtValidator, TestError> {
        options.trust = self.trust.clone();
        let jwks = Jwks::remote(&format!("{}/jwks", self.url), options)?;
        Ok(JwtValidator::new(self.issuer(), ELSEWHERE, jwks))
    }

    /// A token of this issuer's for [`ELSEWHERE`], signed with `key`.
    fn token(&self, key: &SigningKey) -> Result<String, TestError> {
        key.sign(&json!({ "iss": self.issuer(), "aud": ELSEWHERE, "sub": "a", "exp": now() + 300 }))
    }
}

impl IssuerState {
    /// Has the introspection endpoint answer `answer` for `token`.
    fn introspected(&self, token: &str, answer: Value) {
        if let Ok(mut table) = self.introspection.lock() {
            table.insert(token.to_owned(), answer);
        }
    }

    fn publish(&self, keys: &[&SigningKey]) {
        let keys: Vec<Value> = keys.iter().map(|k| k.jwk.clone()).collect();
        if let Ok(mut jwks) = self.jwks.lock() {
            *jwks = json!({ "keys": keys });
        }
    }
}

/// The protected MCP server: a public tool, a scoped one and one that asks
/// for input and keeps state between rounds.
fn mcp_server() -> Result<Server, TestError> {
    limited_server(RateLimits::default())
}

/// The test server, refusing a caller's requests beyond `limits`.
fn limited_server(limits: RateLimits) -> Result<Server, TestError> {
    let server = Server::builder("auth-test", "1.0.0")
        .rate_limits(limits)
        .build()?;
    server.add_tool(ToolSpec::new("public", "Anyone may call it."), |_| async {
        Ok(ToolResult::text("public"))
    });
    server.add_tool(
        ToolSpec::new("secret", "Needs tools:secret.").scope("tools:secret"),
        |call: Call| async move {
            let who = call.peer.auth().subject().unwrap_or("nobody").to_owned();
            Ok(ToolResult::text(format!("secret for {who}")))
        },
    );
    server.add_tool(
        ToolSpec::new("stateful", "Asks once, then resumes."),
        |call: Call| async move {
            if call.state().is_some() {
                return Ok(ToolResult::text("resumed"));
            }
            let mut requests = JsonObject::new();
            requests.insert(
                "who".to_owned(),
                json!({ "method": "elicitation/create", "params": {
                    "message": "Who?", "requestedSchema": { "type": "object", "properties": {} } } }),
            );
            Err(CallError::input_required(requests, Some(json!({ "step": 1 }))))
        },
    );
    Ok(server)
}

struct Protected {
    base: String,
    client: reqwest::Client,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// Starts the MCP server on loopback, protected by what `configure` builds
/// from its canonical resource URI.
async fn protect(
    configure: impl FnOnce(&str) -> Result<ResourceServer, TestError>,
) -> Result<Protected, TestError> {
    protect_limited(configure, RateLimits::default()).await
}

/// As [`protect`], with `limits` on each caller.
async fn protect_limited(
    configure: impl FnOnce(&str) -> Result<ResourceServer, TestError>,
    limits: RateLimits,
) -> Result<Protected, TestError> {
    protect_server(configure, limited_server(limits)?).await
}

/// As [`protect`], serving `server`.
async fn protect_server(
    configure: impl FnOnce(&str) -> Result<ResourceServer, TestError>,
    server: Server,
) -> Result<Protected, TestError> {
    let (listener, base) = loopback().await?;
    let options = HttpOptions {
        auth: Some(configure(&format!("{base}/mcp"))?),
        metrics: Some(Metrics::new()),
        ..HttpOptions::default()
    };
    let serving = Serving::on(listener, base, HttpServer::new(server, options))?;
    Ok(Protected {
        base: serving.base,
        client: serving.client,
        _stop: serving.stop,
    })
}

/// A resource server checking JWTs from `issuer` for its own URI.
fn jwt_guard(
    issuer: &Issuer,
    min_refresh: Duration,
) -> impl FnOnce(&str) -> Result<ResourceServer, TestError> {
    let iss = issuer.issuer();
    let jwks = issuer.jwks(min_refresh);
    move |resource| {
        let validator = JwtValidator::new(&iss, resource, jwks?).leeway(Duration::from_secs(30));
        Ok(ResourceServer::new(resource, Arc::new(validator))?
            .authorization_server(iss)
            .scopes_supported(["tools:secret"])?)
    }
}

/// A server checking JWTs from `issuer` (the key set fetched again at most
/// once a minute) with the validator `validator` makes of a plain one, in
/// front of the resource server `guard` makes of a plain one.
async fn protect_jwt(
    issuer: &Issuer,
    validator: impl FnOnce(JwtValidator) -> JwtValidator,
    guard: impl FnOnce(ResourceServer) -> Result<ResourceServer, TestError>,
) -> Result<Protected, TestError> {
    let jwks = issuer.jwks(Duration::from_secs(60))?;
    let iss = issuer.issuer();
    protect(|resource| {
        let validator = validator(JwtValidator::new(&iss, resource, jwks));
        guard(ResourceServer::new(resource, Arc::new(validator))?)
    })
    .await
}

/// An issuer publishing `key`, and a server checking its JWTs (the key set
/// fetched again at most once a minute).
async fn guarded(key: &SigningKey) -> Result<(Issuer, Protected), TestError> {
    let issuer = Issuer::start(&[key]).await?;
    let server = protect(jwt_guard(&issuer, Duration::from_secs(60))).await?;
    Ok((issuer, server))
}

/// A resource server asking `issuer`'s introspection endpoint about every
/// token, for its own URI.
fn introspection_guard(issuer: &Issuer) -> impl FnOnce(&str) -> Result<ResourceServer, TestError> {
    let endpoint = format!("{}/introspect", issuer.url);
    let trust = issuer.trust.clone();
    move |resource| {
        let validator =
            IntrospectionValidator::new(&endpoint, "rs", "rs-secret", resource)?.trust(&trust)?;
        Ok(ResourceServer::new(resource, Arc::new(validator))?)
    }
}

impl Protected {
    fn resource(&self) -> String {
        format!("{}/mcp", self.base)
    }

    fn claims(&self, issuer: &Issuer, sub: &str, scope: &str) -> Value {
        json!({
            "iss": issuer.issuer(), "sub": sub, "aud": self.resource(),
            "scope": scope, "exp": now() + 300, "iat": now(), "client_id": "test-client",
        })
    }

    async fn post_to(
        &self,
        path: &str,
        token: Option<&str>,
        extra: &[(&str, &str)],
        body: &Value,
    ) -> Result<reqwest::Response, TestError> {
        let mut request = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .header("accept", BOTH)
            .body(body.to_string());
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        Ok(request.send().await?)
    }

    /// A 2026-07-28 request, stateless, with `token`.
    async fn modern(
        &self,
        token: Option<&str>,
        method: &str,
        mut params: Value,
    ) -> Result<reqwest::Response, TestError> {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": { "elicitation": {} },
        });
        let name = params["name"].as_str().map(str::to_owned);
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
        let mut extra = vec![("mcp-protocol-version", MODERN), ("mcp-method", method)];
        if let Some(name) = name.as_deref() {
            extra.push(("mcp-name", name));
        }
        self.post_to("/mcp", token, &extra, &body).await
    }

    /// The answer to a 2026-07-28 request with `token`, read as JSON.
    async fn answer(&self, token: &str, method: &str, params: Value) -> Result<Value, TestError> {
        Ok(self
            .modern(Some(token), method, params)
            .await?
            .json()
            .await?)
    }

    /// The status of a 2026-07-28 `tools/list` with `token`.
    async fn list_status(&self, token: &str) -> Result<reqwest::StatusCode, TestError> {
        Ok(self
            .modern(Some(token), "tools/list", json!({}))
            .await?
            .status())
    }

    /// Opens a legacy session with `token`; its id.
    async fn open_session(&self, token: &str) -> Result<String, TestError> {
        let init = initialize(0, LEGACY, &json!({}));
        let response = self.post_to("/mcp", Some(token), &[], &init).await?;
        assert_eq!(response.status(), 200);
        Ok(response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .ok_or("no session id")?
            .to_owned())
    }

    async fn tool_names(&self, token: Option<&str>) -> Result<Vec<String>, TestError> {
        let response = self.modern(token, "tools/list", json!({})).await?;
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await?;
        Ok(body["result"]["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }
}

fn challenge(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// Asserts a `401 invalid_token` carrying the metadata URL.
async fn assert_invalid_token(
    server: &Protected,
    token: &str,
    what: &str,
) -> Result<(), TestError> {
    let response = server.modern(Some(token), "tools/list", json!({})).await?;
    assert_eq!(response.status(), 401, "{what}");
    let challenge = challenge(&response);
    assert!(
        challenge.starts_with("Bearer ") && challenge.contains("error=\"invalid_token\""),
        "{what}: {challenge}"
    );
    assert!(
        challenge.contains(&format!(
            "resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
            server.base
        )),
        "{what}: {challenge}"
    );
    Ok(())
}

mod tokens {
    use super::*;

    #[tokio::test]
    async fn rs256_and_es256_tokens_from_the_issuer_are_accepted() -> Result<(), TestError> {
        let rsa = SigningKey::rsa("rsa-1")?;
        let ec = SigningKey::ec("ec-1")?;
        let issuer = Issuer::start(&[&rsa, &ec]).await?;
        let server = protect(jwt_guard(&issuer, Duration::from_secs(60))).await?;
        for key in [&rsa, &ec] {
            let token = key.sign(&server.claims(&issuer, "alice", "tools:secret"))?;
            let names = server.tool_names(Some(&token)).await?;
            assert!(
                names.contains(&"secret".to_owned()),
                "{:?}: {names:?}",
                key.alg
            );
        }
        assert_eq!(issuer.fetches(), 1, "the key set is cached");
        Ok(())
    }

    #[tokio::test]
    async fn a_fetch_for_an_unknown_kid_stalls_no_token_whose_key_is_known() -> Result<(), TestError>
    {
        let key = SigningKey::ec("known")?;
        let issuer = Issuer::start(&[&key]).await?;
        let iss = issuer.issuer();
        let validator = Arc::new(JwtValidator::new(
            &iss,
            ELSEWHERE,
            issuer.jwks(Duration::ZERO)?,
        ));
        let claims = json!({ "iss": iss, "aud": ELSEWHERE, "sub": "a", "exp": now() + 300 });
        validator.validate(&key.sign(&claims)?).await?;
        // The issuer now holds every key-set request; a token naming a key it
        // never published makes the validator fetch, and that fetch hangs.
        issuer.state.hold.store(true, Ordering::SeqCst);
        let bogus = SigningKey::ec("bogus")?.sign(&claims)?;
        let stalled = {
            let validator = Arc::clone(&validator);
            tokio::spawn(async move { validator.validate(&bogus).await.is_err() })
        };
        while issuer.fetches() < 2 {
            tokio::task::yield_now().await;
        }
        // Meanwhile a token whose key is held is checked at once.
        let good = tokio::time::timeout(PATIENCE, validator.validate(&key.sign(&claims)?)).await;
        assert!(
            matches!(good, Ok(Ok(_))),
            "a known key waited on another token's fetch"
        );
        assert!(
            !stalled.is_finished(),
            "the known key was checked only once the other token's fetch had ended"
        );
        issuer.state.hold.store(false, Ordering::SeqCst);
        issuer.state.release.notify_waiters();
        assert!(stalled.await?, "the unknown key was accepted");
        Ok(())
    }

    #[tokio::test]
    async fn keys_are_not_trusted_for_ever_while_the_issuer_is_unreachable() -> Result<(), TestError>
    {
        let key = SigningKey::ec("k")?;
        let issuer = Issuer::start(&[&key]).await?;
        let validator = issuer.validator(JwksOptions {
            min_refresh_interval: Duration::ZERO,
            max_age: Duration::from_millis(50),
            max_stale: Duration::from_millis(300),
            ..JwksOptions::default()
        })?;
        let token = issuer.token(&key)?;
        validator.validate(&token).await?;
        issuer.state.down.store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Stale but within the bound: the held key still works.
        validator.validate(&token).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let refused = validator.validate(&token).await;
        assert!(
            matches!(refused, Err(TokenError::Unavailable(_))),
            "{refused:?}"
        );
        Ok(())
    }

    /// An issuer that was down when the first token came, and is back: its
    /// key set is fetched again once the retry interval has passed (what
    /// `Retry-After` tells the client), not held off for the longer
    /// interval that bounds refetches for unknown key ids.
    #[tokio::test]
    async fn a_key_set_never_had_is_tried_again_after_the_retry_interval() -> Result<(), TestError>
    {
        let key = SigningKey::ec("k")?;
        let issuer = Issuer::start(&[&key]).await?;
        let validator = issuer.validator(JwksOptions {
            min_refresh_interval: Duration::from_secs(3600),
            retry_interval: Duration::from_millis(200),
            ..JwksOptions::default()
        })?;
        let token = issuer.token(&key)?;
        issuer.state.down.store(true, Ordering::SeqCst);
        let refused = validator.validate(&token).await;
        assert!(
            matches!(refused, Err(TokenError::Unavailable(_))),
            "{refused:?}"
        );
        issuer.state.down.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(300)).await;
        validator.validate(&token).await?;
        Ok(())
    }

    /// Callers that waited on a fetch of a key set never had, which failed
    /// (here: timed out), are refused as unavailable at once, not each given
    /// a fetch of its own that may take as long again.
    #[tokio::test]
    async fn callers_waiting_on_a_failed_fetch_do_not_each_fetch_again() -> Result<(), TestError> {
        let key = SigningKey::ec("k")?;
        let issuer = Issuer::start(&[&key]).await?;
        issuer.state.hold.store(true, Ordering::SeqCst);
        let validator = Arc::new(issuer.validator(JwksOptions {
            timeout: Duration::from_millis(300),
            retry_interval: Duration::from_millis(300),
            ..JwksOptions::default()
        })?);
        let token = issuer.token(&key)?;
        let callers: Vec<_> = (0..3)
            .map(|_| {
                let validator = Arc::clone(&validator);
                let token = token.clone();
                tokio::spawn(async move { validator.validate(&token).await })
            })
            .collect();
        for caller in callers {
            let refused = caller.await?;
            assert!(
                matches!(refused, Err(TokenError::Unavailable(_))),
                "{refused:?}"
            );
        }
        assert_eq!(issuer.fetches(), 1, "one fetch for the callers that waited");
        issuer.state.hold.store(false, Ordering::SeqCst);
        issuer.state.release.notify_waiters();
        Ok(())
    }

    #[tokio::test]
    async fn a_token_typed_as_something_else_is_refused() -> Result<(), TestError> {
        let key = SigningKey::ec("k")?;
        let issuer = Issuer::start(&[&key]).await?;
        let iss = issuer.issuer();
        let validator = JwtValidator::new(&iss, ELSEWHERE, issuer.jwks(Duration::from_secs(60))?);
        let claims = json!({ "iss": iss, "aud": ELSEWHERE, "sub": "a", "exp": now() + 300 });
        for (typ, accepted) in [
            ("at+jwt", true),
            ("logout+jwt", false),
            ("secevent+jwt", false),
        ] {
            let mut header = Header::new(key.alg);
            header.kid = Some(key.kid.clone());
            header.typ = Some(typ.to_owned());
            let token = jsonwebtoken::encode(&header, &claims, &key.encoding)?;
            assert_eq!(validator.validate(&token).await.is_ok(), accepted, "{typ}");
        }
        Ok(())
    }

    #[tokio::test]
    async fn every_bad_token_is_refused_with_invalid_token() -> Result<(), TestError> {
        let key = SigningKey::rsa("rsa-1")?;
        let stranger = SigningKey::rsa("rsa-1")?;
        let (issuer, server) = guarded(&key).await?;
        let good = server.claims(&issuer, "alice", "");
        let with = |patch: Value| {
            let mut claims = good.clone();
            if let (Value::Object(claims), Value::Object(patch)) = (&mut claims, patch) {
                claims.extend(patch);
            }
            claims
        };
        let cases = [
            ("expired", key.sign(&with(json!({ "exp": now() - 120 })))?),
            (
                "not yet valid",
                key.sign(&with(json!({ "nbf": now() + 300 })))?,
            ),
            (
                "wrong audience",
                key.sign(&with(json!({ "aud": ELSEWHERE })))?,
            ),
            (
                "wrong issuer",
                key.sign(&with(json!({ "iss": "http://127.0.0.1:1/evil" })))?,
            ),
            (
                // RFC 7519 §4.1.1: one string, not a list that includes it.
                "issuers",
                key.sign(&with(
                    json!({ "iss": ["http://127.0.0.1:1/evil", issuer.issuer()] }),
                ))?,
            ),
            ("no expiry", {
                let mut claims = good.clone();
                if let Value::Object(c) = &mut claims {
                    c.remove("exp");
                }
                key.sign(&claims)?
            }),
            ("bad signature", stranger.sign(&good)?),
            ("alg none", {
                let header = b64(br#"{"alg":"none","typ":"JWT"}"#);
                format!("{header}.{}.", b64(good.to_string().as_bytes()))
            }),
            ("hmac with the public key", {
                let mut header = Header::new(Algorithm::HS256);
                header.kid = Some("rsa-1".to_owned());
                jsonwebtoken::encode(
                    &header,
                    &good,
                    &EncodingKey::from_secret(key.jwk["n"].to_string().as_bytes()),
                )?
            }),
            ("not a jwt", "definitely-not-a-jwt".to_owned()),
            // Nothing to bind a session, a task or a state to: every such
            // token would be one caller.
            ("names no one", {
                let mut claims = good.clone();
                if let Value::Object(c) = &mut claims {
                    c.remove("sub");
                    c.remove("client_id");
                }
                key.sign(&claims)?
            }),
            (
                "names no one but emptily",
                key.sign(&with(json!({ "sub": "", "client_id": "" })))?,
            ),
            // RFC 7519 §4.1.2: read as absent, every user named by number
            // would be the same caller.
            (
                "a subject that is a number",
                key.sign(&with(json!({ "sub": 123, "client_id": "c1" })))?,
            ),
            (
                "a client that is a number",
                key.sign(&with(json!({ "client_id": 7 })))?,
            ),
        ];
        for (what, token) in &cases {
            assert_invalid_token(&server, token, what).await?;
        }
        Ok(())
    }

    #[tokio::test]
    async fn a_token_expired_within_the_leeway_is_still_accepted() -> Result<(), TestError> {
        let key = SigningKey::ec("ec-1")?;
        let (issuer, server) = guarded(&key).await?;
        let mut claims = server.claims(&issuer, "alice", "");
        claims["exp"] = json!(now() - 5);
        let response = server
            .modern(Some(&key.sign(&claims)?), "tools/list", json!({}))
            .await?;
        assert_eq!(response.status(), 200);
        Ok(())
    }

    #[tokio::test]
    async fn an_unknown_kid_refetches_the_key_set_at_a_bounded_rate() -> Result<(), TestError> {
        let known = SigningKey::ec("known")?;
        let unknown = SigningKey::ec("unknown")?;
        let issuer = Issuer::start(&[&known]).await?;
        let server = protect(jwt_guard(&issuer, Duration::from_secs(3600))).await?;
        let ok = known.sign(&server.claims(&issuer, "alice", ""))?;
        assert_eq!(server.list_status(&ok).await?, 200);
        for _ in 0..5 {
            let forged = unknown.sign(&server.claims(&issuer, "alice", ""))?;
            assert_invalid_token(&server, &forged, "unknown kid").await?;
        }
        assert_eq!(
            issuer.fetches(),
            1,
            "five unknown key ids within the interval cost no further fetch"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_key_rotated_in_is_found_by_refetching() -> Result<(), TestError> {
        let old = SigningKey::ec("old")?;
        let new = SigningKey::rsa("new")?;
        let issuer = Issuer::start(&[&old]).await?;
        let server = protect(jwt_guard(&issuer, Duration::ZERO)).await?;
        let first = old.sign(&server.claims(&issuer, "alice", ""))?;
        assert_eq!(server.list_status(&first).await?, 200);
        issuer.state.publish(&[&old, &new]);
        let rotated = new.sign(&server.claims(&issuer, "alice", ""))?;
        assert_eq!(server.list_status(&rotated).await?, 200);
        assert_eq!(issuer.fetches(), 2);
        Ok(())
    }

    #[tokio::test]
    async fn a_token_in_the_query_string_is_refused_even_beside_a_header() -> Result<(), TestError>
    {
        let key = SigningKey::ec("ec-1")?;
        let (issuer, server) = guarded(&key).await?;
        let token = key.sign(&server.claims(&issuer, "alice", ""))?;
        let body = initialize(0, LEGACY, &json!({}));
        for header in [None, Some(token.as_str())] {
            let response = server
                .post_to(&format!("/mcp?access_token={token}"), header, &[], &body)
                .await?;
            assert_eq!(response.status(), 400);
            assert!(
                challenge(&response).contains("error=\"invalid_request\""),
                "{}",
                challenge(&response)
            );
        }
        Ok(())
    }

    #[tokio::test]
    async fn introspection_accepts_an_active_token_for_this_resource_only() -> Result<(), TestError>
    {
        let issuer = Issuer::start(&[]).await?;
        let server = protect(introspection_guard(&issuer)).await?;
        let resource = server.resource();
        let answers = [
            (
                "opaque-good",
                json!({ "active": true, "sub": "alice", "aud": resource,
                        "scope": "tools:secret", "exp": now() + 300 }),
            ),
            (
                "opaque-elsewhere",
                json!({ "active": true, "sub": "alice", "aud": ELSEWHERE, "exp": now() + 300 }),
            ),
            (
                "opaque-no-aud",
                json!({ "active": true, "sub": "alice", "exp": now() + 300 }),
            ),
            // A date that is no date is not read as no date.
            (
                "opaque-exp-text",
                json!({ "active": true, "sub": "alice", "aud": resource, "exp": "1" }),
            ),
            (
                "opaque-nbf-text",
                json!({ "active": true, "sub": "alice", "aud": resource,
                        "exp": now() + 300, "nbf": "soon" }),
            ),
        ];
        for (token, answer) in answers {
            issuer.state.introspected(token, answer);
        }
        let names = server.tool_names(Some("opaque-good")).await?;
        assert!(names.contains(&"secret".to_owned()), "{names:?}");
        for bad in [
            "opaque-elsewhere",
            "opaque-no-aud",
            "opaque-revoked",
            "opaque-exp-text",
            "opaque-nbf-text",
        ] {
            assert_invalid_token(&server, bad, bad).await?;
        }
        Ok(())
    }

    /// A client id and secret with characters of their own reach the
    /// endpoint form-encoded inside the Basic credentials, as RFC 6749
    /// §2.3.1 asks and authorization servers decode them.
    #[tokio::test]
    async fn introspection_credentials_are_form_encoded() -> Result<(), TestError> {
        let issuer = Issuer::start(&[]).await?;
        let endpoint = format!("{}/introspect", issuer.url);
        let validator = IntrospectionValidator::new(&endpoint, "rs:x", "s:e c%ret", ELSEWHERE)?
            .trust(&issuer.trust)?;
        issuer.state.introspected(
            "t",
            json!({ "active": true, "sub": "alice", "aud": ELSEWHERE, "exp": now() + 300 }),
        );
        let claims = validator.validate("t").await?;
        assert_eq!(claims.sub.as_deref(), Some("alice"));
        Ok(())
    }

    #[tokio::test]
    async fn introspection_answers_are_cached_and_a_flood_of_made_up_tokens_is_rate_limited()
    -> Result<(), TestError> {
        let issuer = Issuer::start(&[]).await?;
        let endpoint = format!("{}/introspect", issuer.url);
        let resource = ELSEWHERE;
        let validator = IntrospectionValidator::new(&endpoint, "rs", "rs-secret", resource)?
            .trust(&issuer.trust)?;
        issuer.state.introspected(
            "cached",
            json!({ "active": true, "sub": "alice", "aud": resource, "exp": now() + 300 }),
        );
        for _ in 0..5 {
            let claims = validator.validate("cached").await?;
            assert_eq!(claims.sub.as_deref(), Some("alice"));
        }
        assert_eq!(
            issuer.state.introspections.load(Ordering::SeqCst),
            1,
            "a good token is asked once"
        );
        // A rejected token is remembered briefly too.
        for _ in 0..5 {
            assert!(validator.validate("made-up").await.is_err());
        }
        assert_eq!(issuer.state.introspections.load(Ordering::SeqCst), 2);
        // A flood of distinct made-up tokens reaches the server at a bounded
        // rate; the rest are refused as unavailable, not forwarded.
        let mut limited = 0;
        for n in 0..500 {
            if let Err(TokenError::Unavailable(_)) = validator.validate(&format!("bogus-{n}")).await
            {
                limited += 1;
            }
        }
        let asked = issuer.state.introspections.load(Ordering::SeqCst);
        assert!(asked < 100, "{asked} introspections for 500 made-up tokens");
        assert!(limited > 400, "{limited} of 500 were rate limited");
        Ok(())
    }

    #[tokio::test]
    async fn an_address_presenting_made_up_tokens_is_held_back_and_no_one_else_is()
    -> Result<(), TestError> {
        let issuer = Issuer::start(&[]).await?;
        let mut server = protect(introspection_guard(&issuer)).await?;
        let resource = server.resource();
        issuer.state.introspected(
            "real",
            json!({ "active": true, "sub": "bob", "aud": resource, "exp": now() + 300 }),
        );
        let mine = std::mem::replace(&mut server.client, client_from("127.0.0.9")?);
        // A caller at the flooding address whose token was found valid
        // before the flood (every local process shares loopback's).
        issuer.state.introspected(
            "neighbours",
            json!({ "active": true, "sub": "carol", "aud": resource, "exp": now() + 300 }),
        );
        let before = server.tool_names(Some("neighbours")).await?;
        assert!(before.contains(&"public".to_owned()), "{before:?}");
        let mut held_back = None;
        for n in 0..40 {
            let response = server
                .modern(Some(&format!("made-up-{n}")), "tools/list", json!({}))
                .await?;
            if response.status() == 429 {
                held_back = Some(n);
                assert!(response.headers().contains_key("retry-after"));
                break;
            }
            assert_eq!(response.status(), 401);
        }
        assert_eq!(
            held_back,
            Some(20),
            "held back after its twentieth refused token"
        );
        let asked = issuer.state.introspections.load(Ordering::SeqCst);
        assert_eq!(
            asked, 21,
            "a held-back token never reaches the authorization server"
        );
        // Carol's token, accepted before, is not held back with the flood.
        let during = server.tool_names(Some("neighbours")).await?;
        assert!(during.contains(&"public".to_owned()), "{during:?}");
        // Another address, with a real token, is served throughout.
        server.client = mine;
        let names = server.tool_names(Some("real")).await?;
        assert!(names.contains(&"public".to_owned()), "{names:?}");
        Ok(())
    }

    /// While the issuer is down a good token cannot be checked: 503, as
    /// often as it is presented, and never counted as a made-up token that
    /// would have its address held back once the issuer is back.
    #[tokio::test]
    async fn tokens_that_cannot_be_checked_do_not_hold_their_address_back() -> Result<(), TestError>
    {
        let key = SigningKey::ec("k")?;
        let issuer = Issuer::start(&[&key]).await?;
        issuer.state.down.store(true, Ordering::SeqCst);
        let mut server = protect(jwt_guard(&issuer, Duration::from_secs(60))).await?;
        server.client = client_from("127.0.0.10")?;
        let token = key.sign(&server.claims(&issuer, "alice", ""))?;
        for n in 0..30 {
            let response = server.modern(Some(&token), "tools/list", json!({})).await?;
            assert_eq!(response.status(), 503, "request {n}");
            let retry = response.headers().get("retry-after");
            assert!(
                retry.and_then(|v| v.to_str().ok()?.parse::<u64>().ok()) > Some(0),
                "request {n}: Retry-After {retry:?}"
            );
        }
        Ok(())
    }

    #[test]
    fn an_introspection_validator_never_prints_its_secret() -> Result<(), TestError> {
        let validator = IntrospectionValidator::new(
            "http://127.0.0.1:1/introspect",
            "rs",
            "hunter2",
            "http://127.0.0.1:2/mcp",
        )?;
        let printed = format!("{validator:?}");
        assert!(!printed.contains("hunter2"), "{printed}");
        Ok(())
    }
}

/// A subscription lasts as long as the token that opened it: past its `exp`
/// (and the leeway) the stream ends, as a new request with that token would
/// be refused, rather than go on telling its client what happens.
#[tokio::test]
async fn a_subscription_ends_when_the_token_that_opened_it_expires() -> Result<(), TestError> {
    let key = SigningKey::ec("ec-1")?;
    let issuer = Issuer::start(&[&key]).await?;
    let server = protect_jwt(
        &issuer,
        |validator| validator.leeway(Duration::ZERO),
        |guard| Ok(guard.token_leeway(Duration::ZERO)),
    )
    .await?;
    let mut claims = server.claims(&issuer, "alice", "");
    claims["exp"] = json!(now() + 3);
    let token = key.sign(&claims)?;
    let watch = json!({ "notifications": { "toolsListChanged": true } });
    let listen = server
        .modern(Some(&token), "subscriptions/listen", watch)
        .await?;
    assert_eq!(listen.status(), 200);
    // Read to its end: a stream that outlives its token is not ended, and
    // the client's own timeout fails the read.
    let read = listen.bytes().await;
    assert!(read.is_ok(), "the stream outlived its token: {read:?}");
    Ok(())
}

/// A subscription opened with a token already past its `exp` and the
/// stream's leeway (a validator tolerating more) is refused, not answered
/// with a stream that ends at once and is only opened again.
#[tokio::test]
async fn a_subscription_with_a_token_already_past_it_is_refused() -> Result<(), TestError> {
    let key = SigningKey::ec("ec-1")?;
    let issuer = Issuer::start(&[&key]).await?;
    let server = protect_jwt(
        &issuer,
        |validator| validator.leeway(Duration::from_secs(120)),
        |guard| Ok(guard.token_leeway(Duration::ZERO)),
    )
    .await?;
    let mut claims = server.claims(&issuer, "alice", "");
    claims["exp"] = json!(now() - 60);
    let token = key.sign(&claims)?;
    let watch = json!({ "notifications": { "toolsListChanged": true } });
    let listen = server
        .modern(Some(&token), "subscriptions/listen", watch)
        .await?;
    assert_eq!(listen.status(), 401);
    // An ordinary request with it is still served, within the leeway, and
    // so is a GET that opens no stream.
    assert_eq!(server.list_status(&token).await?, 200);
    let scrape = server
        .client
        .get(format!("{}/metrics", server.base))
        .bearer_auth(&token)
        .send()
        .await?;
    assert_eq!(scrape.status(), 200);
    Ok(())
}

mod challenges {
    use super::*;

    #[tokio::test]
    async fn no_token_gets_401_naming_the_metadata_which_is_served_without_one()
    -> Result<(), TestError> {
        let key = SigningKey::ec("ec-1")?;
        let (issuer, server) = guarded(&key).await?;
        let response = server.modern(None, "tools/list", json!({})).await?;
        assert_eq!(response.status(), 401);
        let metadata_url = format!("{}/.well-known/oauth-protected-resource/mcp", server.base);
        assert_eq!(
            challenge(&response),
            format!("Bearer resource_metadata=\"{metadata_url}\", scope=\"tools:secret\"")
        );
        for url in [
            metadata_url,
            format!("{}/.well-known/oauth-protected-resource", server.base),
        ] {
            let response = server.client.get(&url).send().await?;
            assert_eq!(response.status(), 200, "{url}");
            let document: Value = response.json().await?;
            assert_eq!(document["resource"], json!(server.resource()));
            assert_eq!(document["authorization_servers"], json!([issuer.issuer()]));
            assert_eq!(document["bearer_methods_supported"], json!(["header"]));
            assert_eq!(document["scopes_supported"], json!(["tools:secret"]));
        }
        // Every MCP route, and the metrics, are behind the same guard;
        // probes carry no token, and are answered without one.
        for (path, status) in [
            ("/sse", 401),
            ("/mcp", 401),
            ("/metrics", 401),
            ("/healthz", 200),
            ("/readyz", 200),
        ] {
            let response = server
                .client
                .get(format!("{}{path}", server.base))
                .send()
                .await?;
            assert_eq!(response.status(), status, "{path}");
        }
        // With a token, the scrape is answered.
        let token = key.sign(&server.claims(&issuer, "alice", ""))?;
        let response = server
            .client
            .get(format!("{}/metrics", server.base))
            .bearer_auth(&token)
            .send()
            .await?;
        assert_eq!(response.status(), 200);
        let text = response.text().await?;
        assert!(text.contains("# TYPE droid_sessions gauge"), "{text}");
        Ok(())
    }

    #[tokio::test]
    async fn a_token_without_a_required_scope_gets_one_step_up_challenge_naming_them_all()
    -> Result<(), TestError> {
        let key = SigningKey::ec("ec-1")?;
        let issuer = Issuer::start(&[&key]).await?;
        let server = protect_jwt(
            &issuer,
            |validator| validator,
            |guard| Ok(guard.require_scopes(["mcp:use", "mcp:tools"])?),
        )
        .await?;
        let token = key.sign(&server.claims(&issuer, "alice", "mcp:use"))?;
        let response = server.modern(Some(&token), "tools/list", json!({})).await?;
        assert_eq!(response.status(), 403);
        let challenge = challenge(&response);
        assert!(
            challenge.contains("error=\"insufficient_scope\""),
            "{challenge}"
        );
        assert!(
            challenge.contains("scope=\"mcp:use mcp:tools\""),
            "every scope the request needs, in one challenge: {challenge}"
        );
        // Scopes are separated by spaces alone (RFC 6749 §3.3): one scope
        // with another whitespace inside grants neither of its parts.
        for joined in ["mcp:use\u{a0}mcp:tools", "mcp:use\tmcp:tools"] {
            let disguised = key.sign(&server.claims(&issuer, "alice", joined))?;
            let response = server
                .modern(Some(&disguised), "tools/list", json!({}))
                .await?;
            assert_eq!(response.status(), 403, "{joined:?}");
        }
        let upgraded = key.sign(&server.claims(&issuer, "alice", "mcp:use mcp:tools"))?;
        let response = server
            .modern(Some(&upgraded), "tools/list", json!({}))
            .await?;
        assert_eq!(response.status(), 200);
        Ok(())
    }

    /// The anonymous caller holds no scope: where every request needs one,
    /// dropping a too-weak token does not get a request in.
    #[tokio::test]
    async fn a_required_scope_holds_for_anonymous_callers_too() -> Result<(), TestError> {
        let key = SigningKey::ec("ec-1")?;
        let issuer = Issuer::start(&[&key]).await?;
        let server = protect_jwt(
            &issuer,
            |validator| validator,
            |guard| Ok(guard.require_scopes(["mcp:use"])?.allow_anonymous()),
        )
        .await?;
        let weak = key.sign(&server.claims(&issuer, "alice", "other"))?;
        let response = server.modern(Some(&weak), "tools/list", json!({})).await?;
        assert_eq!(response.status(), 403);
        let response = server.modern(None, "tools/list", json!({})).await?;
        assert_eq!(response.status(), 401);
        assert!(challenge(&response).contains("scope=\"mcp:use\""));
        Ok(())
    }
}

mod scopes {
    use super::*;

    async fn anonymous_allowed(issuer: &Issuer) -> Result<Protected, TestError> {
        protect_jwt(
            issuer,
            |validator| validator,
            |guard| Ok(guard.allow_anonymous()),
        )
        .await
    }

    #[tokio::test]
    async fn anonymous_and_scoped_callers_see_different_tool_lists() -> Result<(), TestError> {
        let key = SigningKey::ec("ec-1")?;
        let issuer = Issuer::start(&[&key]).await?;
        let server = anonymous_allowed(&issuer).await?;
        let anonymous = server.tool_names(None).await?;
        assert_eq!(anonymous, ["public", "stateful"]);
        let unscoped = key.sign(&server.claims(&issuer, "alice", "other"))?;
        assert_eq!(server.tool_names(Some(&unscoped)).await?, anonymous);
        let scoped = key.sign(&server.claims(&issuer, "alice", "tools:secret"))?;
        assert_eq!(
            server.tool_names(Some(&scoped)).await?,
            ["public", "secret", "stateful"]
        );
        Ok(())
    }

    /// Where the anonymous caller may use `/mcp`, a scrape of `/metrics`
    /// still names a principal: the series are the operator's.
    #[tokio::test]
    async fn a_scrape_names_a_principal_where_anonymous_callers_may_use_mcp()
    -> Result<(), TestError> {
        let key = SigningKey::ec("ec-1")?;
        let issuer = Issuer::start(&[&key]).await?;
        let server = anonymous_allowed(&issuer).await?;
        assert_eq!(server.tool_names(None).await?, ["public", "stateful"]);
        let scrape = |token: Option<String>| {
            let request = server.client.get(format!("{}/metrics", server.base));
            match token {
                Some(token) => request.bearer_auth(token),
                None => request,
            }
            .send()
        };
        let refused = scrape(None).await?;
        assert_eq!(refused.status(), 401);
        // The challenge a request without a token gets, naming the metadata.
        assert!(
            challenge(&refused).contains("resource_metadata="),
            "{}",
            challenge(&refused)
        );
        let token = key.sign(&server.claims(&issuer, "alice", ""))?;
        assert_eq!(scrape(Some(token)).await?.status(), 200);
        Ok(())
    }

    #[tokio::test]
    async fn a_list_that_varies_by_caller_is_marked_private() -> Result<(), TestError> {
        let key = SigningKey::ec("ec-1")?;
        let issuer = Issuer::start(&[&key]).await?;
        let server = anonymous_allowed(&issuer).await?;
        let scoped = key.sign(&server.claims(&issuer, "alice", "tools:secret"))?;
        let body = server.answer(&scoped, "tools/list", json!({})).await?;
        assert_eq!(body["result"]["cacheScope"], json!("private"), "{body}");
        Ok(())
    }

    #[tokio::test]
    async fn calling_a_hidden_tool_is_answered_as_calling_an_unknown_one() -> Result<(), TestError>
    {
        let key = SigningKey::ec("ec-1")?;
        let issuer = Issuer::start(&[&key]).await?;
        let server = anonymous_allowed(&issuer).await?;
        let unscoped = key.sign(&server.claims(&issuer, "alice", ""))?;
        let mut answers = Vec::new();
        for name in ["secret", "no-such-tool"] {
            let response = server
                .modern(
                    Some(&unscoped),
                    "tools/call",
                    json!({ "name": name, "arguments": {} }),
                )
                .await?;
            let status = response.status();
            let body: Value = response.json().await?;
            let error = body["error"].to_string().replace(name, "NAME");
            answers.push((status, error));
        }
        assert_eq!(answers[0], answers[1], "no oracle: {answers:?}");
        assert!(answers[0].1.contains("-32602"), "{answers:?}");
        let scoped = key.sign(&server.claims(&issuer, "alice", "tools:secret"))?;
        let body: Value = server
            .modern(
                Some(&scoped),
                "tools/call",
                json!({ "name": "secret", "arguments": {} }),
            )
            .await?
            .json()
            .await?;
        assert_eq!(
            body["result"]["content"][0]["text"],
            json!("secret for alice")
        );
        Ok(())
    }

    #[tokio::test]
    async fn an_audience_alias_is_accepted_besides_the_resource_not_instead()
    -> Result<(), TestError> {
        let key = SigningKey::rsa("rsa-1")?;
        let issuer = Issuer::start(&[&key]).await?;
        let server = protect_jwt(
            &issuer,
            |validator| validator.also_audience("api://alias"),
            |guard| Ok(guard.audience("api://alias")),
        )
        .await?;
        let list = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {
            "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                       "io.modelcontextprotocol/clientCapabilities": {} } } });
        let headers = [
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/list"),
        ];
        let mut claims = server.claims(&issuer, "alice", "");
        for (aud, accepted) in [
            (json!(server.resource()), true),
            (json!("api://alias"), true),
            (json!("api://other"), false),
        ] {
            claims["aud"] = aud.clone();
            let token = key.sign(&claims)?;
            let status = server
                .post_to("/mcp", Some(&token), &headers, &list)
                .await?
                .status();
            assert_eq!(status == 200, accepted, "aud {aud}: {status}");
        }
        Ok(())
    }

    #[tokio::test]
    async fn a_token_swapped_mid_session_changes_what_the_next_request_sees()
    -> Result<(), TestError> {
        let key = SigningKey::rsa("rsa-1")?;
        let (issuer, server) = guarded(&key).await?;
        let plain = key.sign(&server.claims(&issuer, "alice", ""))?;
        let elevated = key.sign(&server.claims(&issuer, "alice", "tools:secret"))?;
        let session = server.open_session(&elevated).await?;
        let list = |id: i64| json!({ "jsonrpc": "2.0", "id": id, "method": "tools/list" });
        let headers = legacy_session(&session);
        let mut seen = Vec::new();
        for (id, token) in [(1, &plain), (2, &elevated), (3, &plain)] {
            let body: Value = server
                .post_to("/mcp", Some(token), &headers, &list(id))
                .await?
                .json()
                .await?;
            seen.push(body["result"]["tools"].as_array().map_or(0, Vec::len));
        }
        assert_eq!(
            seen,
            [2, 3, 2],
            "the session opened with the elevated token does not keep it"
        );
        // A call answered under the elevated token, retried under the plain
        // one, is not replayed: the tool is unknown to that caller now.
        let secret = json!({ "jsonrpc": "2.0", "id": 10, "method": "tools/call",
            "params": { "name": "secret", "arguments": {} } });
        let mut answers = Vec::new();
        for token in [&elevated, &plain] {
            let body: Value = server
                .post_to("/mcp", Some(token), &headers, &secret)
                .await?
                .json()
                .await?;
            answers.push(body);
        }
        assert_eq!(
            answers[0]["result"]["content"][0]["text"],
            json!("secret for alice"),
            "{answers:?}"
        );
        assert_eq!(answers[1]["error"]["code"], json!(-32602), "{answers:?}");
        let withdrawn = server.post_to("/mcp", None, &headers, &list(4)).await?;
        assert_eq!(
            withdrawn.status(),
            401,
            "a withdrawn token ends access at once"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_session_is_answered_only_to_the_subject_that_opened_it() -> Result<(), TestError> {
        let key = SigningKey::rsa("rsa-1")?;
        let (issuer, server) = guarded(&key).await?;
        let alice = key.sign(&server.claims(&issuer, "alice", ""))?;
        let mallory = key.sign(&server.claims(&issuer, "mallory", ""))?;
        let session = server.open_session(&alice).await?;
        let headers = legacy_session(&session);
        let list = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" });
        // Another valid caller who learned the id meets an unknown session.
        let stolen = server
            .post_to("/mcp", Some(&mallory), &headers, &list)
            .await?;
        assert_eq!(stolen.status(), 404);
        let own = server
            .post_to("/mcp", Some(&alice), &headers, &list)
            .await?;
        assert_eq!(own.status(), 200);
        Ok(())
    }

    #[tokio::test]
    async fn callers_whose_names_share_their_characters_are_two_callers() -> Result<(), TestError> {
        let key = SigningKey::rsa("rsa-1")?;
        let (issuer, server) = guarded(&key).await?;
        let named = |sub: &str, client: &str| {
            let mut claims = server.claims(&issuer, sub, "");
            claims["client_id"] = json!(client);
            key.sign(&claims)
        };
        // The same characters split differently between subject and client,
        // the separator a naive key would put between them included.
        let first = named("a\u{1f}b", "c")?;
        let second = named("a", "b\u{1f}c")?;
        let session = server.open_session(&first).await?;
        let headers = legacy_session(&session);
        let list = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" });
        let other = server
            .post_to("/mcp", Some(&second), &headers, &list)
            .await?;
        assert_eq!(other.status(), 404);
        let own = server
            .post_to("/mcp", Some(&first), &headers, &list)
            .await?;
        assert_eq!(own.status(), 200);
        Ok(())
    }

    #[tokio::test]
    async fn a_persisted_session_carries_no_principal() -> Result<(), TestError> {
        let server = mcp_server()?;
        let connection = server.connect(
            TransportKind::StreamableHttp,
            Arc::new(NoExchange),
            Arc::new(NullSink),
        );
        let alice = AuthContext::principal(AuthClaims {
            sub: Some("alice".to_owned()),
            scopes: vec!["tools:secret".to_owned()],
            ..AuthClaims::default()
        });
        let request = |id: i64, method: &str, params: Value| Request {
            id: RequestId::Number(id),
            method: method.to_owned(),
            params: Some(params),
        };
        let opened = connection
            .handle(
                request(
                    0,
                    "initialize",
                    json!({ "protocolVersion": LEGACY, "capabilities": {} }),
                ),
                RequestContext {
                    auth: alice.clone(),
                    ..RequestContext::default()
                },
            )
            .await;
        assert!(opened.is_ok(), "{opened:?}");
        let count = |listed: Result<Value, _>| {
            listed.map(|v: Value| v["tools"].as_array().map_or(0, Vec::len))
        };
        let served_as_alice = connection
            .handle(
                request(1, "tools/list", json!({})),
                RequestContext {
                    auth: alice,
                    ..RequestContext::default()
                },
            )
            .await;
        assert_eq!(count(served_as_alice), Ok(3));
        // A request that brings no principal of its own is served as nobody,
        // whoever opened the session.
        let served_as_nobody = connection
            .handle(
                request(2, "tools/list", json!({})),
                RequestContext::default(),
            )
            .await;
        assert_eq!(count(served_as_nobody), Ok(2));
        Ok(())
    }

    #[tokio::test]
    async fn a_request_state_minted_for_one_subject_is_refused_for_another() -> Result<(), TestError>
    {
        let key = SigningKey::ec("ec-1")?;
        let (issuer, server) = guarded(&key).await?;
        let alice = key.sign(&server.claims(&issuer, "alice", ""))?;
        let bob = key.sign(&server.claims(&issuer, "bob", ""))?;
        let call = json!({ "name": "stateful", "arguments": {} });
        let first = server.answer(&alice, "tools/call", call.clone()).await?;
        assert_eq!(
            first["result"]["resultType"],
            json!("input_required"),
            "{first}"
        );
        let state = first["result"]["requestState"].clone();
        assert!(state.is_string(), "{first}");
        let mut retry = call;
        retry["requestState"] = state;
        retry["inputResponses"] = json!({ "who": { "action": "accept", "content": {} } });
        let as_bob = server.answer(&bob, "tools/call", retry.clone()).await?;
        assert!(
            as_bob["error"].is_object(),
            "bob cannot resume alice's round: {as_bob}"
        );
        let as_alice = server.answer(&alice, "tools/call", retry).await?;
        assert_eq!(
            as_alice["result"]["content"][0]["text"],
            json!("resumed"),
            "{as_alice}"
        );
        Ok(())
    }
}

/// A bearer token kept in a file and rotated there is taken up at the
/// server's first refusal of the old one: the client reads the file again
/// and carries the refused call with the new token, no restart needed.
/// Over Streamable HTTP, and over HTTP+SSE, whose every message is a POST.
async fn a_rotated_token_file_is_taken_up(legacy: bool) -> Result<(), TestError> {
    use protocol_droid::adapters::secondary::authorizer::{Authorizer, TokenFile};
    use protocol_droid::adapters::secondary::connect::{ConnectOptions, Target, connect};
    use protocol_droid::adapters::secondary::http::LegacySse;
    use protocol_droid::application::client::{
        Client, ClientOptions, RequestOptions, inbound_queue,
    };
    use protocol_droid::domain::ProtocolVersion;

    let key = SigningKey::ec("ec-1")?;
    let issuer = Issuer::start(&[&key]).await?;
    // No leeway: a token past its `exp` is refused at once.
    let server = protect_jwt(&issuer, |v| v.leeway(Duration::ZERO), Ok).await?;
    let mut lapsing = server.claims(&issuer, "alice", "");
    let lapses_at = now() + 4;
    lapsing["exp"] = json!(lapses_at);
    let path = std::env::temp_dir().join(format!(
        "droid-rotated-token-{}-{legacy}",
        std::process::id()
    ));
    std::fs::write(&path, format!("{}\n", key.sign(&lapsing)?))?;
    let tokens: Arc<dyn Authorizer> = Arc::new(TokenFile::open(&path)?);
    let client = if legacy {
        let (tx, rx) = inbound_queue();
        let url = format!("{}/sse", server.base).parse()?;
        let http = protocol_droid::adapters::secondary::http::HttpOptions::default();
        let link = LegacySse::connect(url, tx, Some(tokens), &http).await?;
        let options = ClientOptions {
            revisions: vec![ProtocolVersion::V2024_11_05],
            ..ClientOptions::default()
        };
        Client::connect(Arc::new(link), rx, options).await?
    } else {
        let options = ConnectOptions {
            authorizer: Some(tokens),
            ..ConnectOptions::default()
        };
        connect(&Target::Url(server.resource().parse()?), options).await?
    };
    let plain = RequestOptions::default();
    let call = || client.call_tool("public", None, &plain);
    let first = call().await;
    // The first token lapses, and the file is rotated in place.
    while now() <= lapses_at {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    std::fs::write(&path, key.sign(&server.claims(&issuer, "alice", ""))?)?;
    let second = call().await;
    std::fs::remove_file(&path)?;
    first?;
    second?;
    Ok(())
}

#[tokio::test]
async fn a_token_file_rotated_in_place_is_taken_up_at_the_first_refusal() -> Result<(), TestError> {
    a_rotated_token_file_is_taken_up(false).await
}

#[tokio::test]
async fn a_token_file_rotated_in_place_is_taken_up_over_http_sse() -> Result<(), TestError> {
    a_rotated_token_file_is_taken_up(true).await
}

/// A validator a user plugs in: the port is all a resource server needs.
#[derive(Debug)]
struct Fixed;

impl TokenValidator for Fixed {
    fn validate<'a>(
        &'a self,
        token: &'a str,
    ) -> protocol_droid::application::server::BoxFuture<'a, Result<AuthClaims, TokenError>> {
        Box::pin(async move {
            match token {
                "letmein" => Ok(AuthClaims {
                    sub: Some("plugged".to_owned()),
                    aud: Some(json!("http://127.0.0.1:9/elsewhere")),
                    ..AuthClaims::default()
                }),
                _ => Err(TokenError::Invalid("unknown".to_owned())),
            }
        })
    }
}

#[tokio::test]
async fn a_plugged_in_validator_cannot_admit_a_token_for_another_audience() -> Result<(), TestError>
{
    let server = protect(|resource| Ok(ResourceServer::new(resource, Arc::new(Fixed))?)).await?;
    assert_invalid_token(
        &server,
        "letmein",
        "audience checked by the resource server",
    )
    .await
}

mod rate_limits {
    use super::*;

    /// Alice's burst past her limit is refused with the documented error,
    /// as 429 with `Retry-After`; Bob, signed by the same issuer and calling
    /// the same tool at the same time, is served throughout.
    #[tokio::test]
    async fn a_burst_over_the_limit_is_refused_while_another_principal_is_served()
    -> Result<(), TestError> {
        let key = SigningKey::ec("ec-1")?;
        let issuer = Issuer::start(&[&key]).await?;
        let server = protect_limited(
            jwt_guard(&issuer, Duration::from_secs(60)),
            RateLimits {
                per_tool: Some("3/h".parse::<Rate>()?),
                ..RateLimits::default()
            },
        )
        .await?;
        let alice = key.sign(&server.claims(&issuer, "alice", ""))?;
        let bob = key.sign(&server.claims(&issuer, "bob", ""))?;
        let call = || json!({ "name": "public", "arguments": {} });
        for n in 0..3 {
            let response = server.modern(Some(&alice), "tools/call", call()).await?;
            assert_eq!(response.status(), 200, "alice's call {n}");
            let response = server.modern(Some(&bob), "tools/call", call()).await?;
            assert_eq!(response.status(), 200, "bob's call {n}");
        }
        let refused = server.modern(Some(&alice), "tools/call", call()).await?;
        assert_eq!(refused.status(), 429);
        let retry_after: u64 = refused
            .headers()
            .get("retry-after")
            .ok_or("no Retry-After")?
            .to_str()?
            .parse()?;
        // Three an hour: the next is allowed in about twenty minutes.
        assert!((1000..=1200).contains(&retry_after), "{retry_after}");
        let body: Value = refused.json().await?;
        assert_eq!(body["error"]["code"], json!(-31429), "{body}");
        assert_eq!(body["error"]["data"]["limit"], json!("tool"), "{body}");
        let wait_ms = body["error"]["data"]["retryAfterMs"]
            .as_u64()
            .ok_or("no retryAfterMs")?;
        assert_eq!(wait_ms.div_ceil(1000), retry_after);
        // Another tool is counted apart, and Bob is not affected.
        let other = json!({ "name": "stateful", "arguments": {} });
        let response = server.modern(Some(&alice), "tools/call", other).await?;
        assert_eq!(response.status(), 200);
        let response = server.modern(Some(&bob), "tools/call", call()).await?;
        assert_eq!(response.status(), 429, "bob's fourth is his own");
        Ok(())
    }

    /// A limit on every request counts a principal's lists as well as its
    /// calls.
    #[tokio::test]
    async fn a_limit_on_every_request_counts_each_method() -> Result<(), TestError> {
        let key = SigningKey::ec("ec-1")?;
        let issuer = Issuer::start(&[&key]).await?;
        let server = protect_limited(
            jwt_guard(&issuer, Duration::from_secs(60)),
            RateLimits {
                per_caller: Some("2/h".parse::<Rate>()?),
                ..RateLimits::default()
            },
        )
        .await?;
        let carol = key.sign(&server.claims(&issuer, "carol", ""))?;
        assert_eq!(server.list_status(&carol).await?, 200);
        let call = json!({ "name": "public", "arguments": {} });
        let response = server
            .modern(Some(&carol), "tools/call", call.clone())
            .await?;
        assert_eq!(response.status(), 200);
        let response = server.modern(Some(&carol), "tools/call", call).await?;
        assert_eq!(response.status(), 429);
        let body: Value = response.json().await?;
        assert_eq!(body["error"]["data"]["limit"], json!("principal"), "{body}");
        Ok(())
    }
}

mod tasks {
    use super::*;

    /// A 2026-07-28 request of `token`'s declaring the tasks extension,
    /// routed by `name`.
    async fn with_tasks(
        server: &Protected,
        token: &str,
        method: &str,
        mut params: Value,
        name: &str,
    ) -> Result<Value, TestError> {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {
                "extensions": { "io.modelcontextprotocol/tasks": {} } },
        });
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
        let extra = [
            ("mcp-protocol-version", MODERN),
            ("mcp-method", method),
            ("mcp-name", name),
        ];
        Ok(server
            .post_to("/mcp", Some(token), &extra, &body)
            .await?
            .json()
            .await?)
    }

    /// A task is its creator's: to another principal (real JWTs from one
    /// issuer, told apart by subject) every task method answers exactly as
    /// for an id that never existed, and nothing it sends touches the task.
    #[tokio::test]
    async fn a_task_is_invisible_to_another_principal() -> Result<(), TestError> {
        let key = SigningKey::ec("ec-1")?;
        let issuer = Issuer::start(&[&key]).await?;
        let served = limited_server(RateLimits::default())?;
        served.add_tool(
            ToolSpec::new("long", "Runs as a task when the client takes tasks.")
                .task_support(TaskSupport::Optional),
            |_call: Call| async move {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(ToolResult::text("long done"))
            },
        );
        let server = protect_server(jwt_guard(&issuer, Duration::from_secs(60)), served).await?;
        let alice = key.sign(&server.claims(&issuer, "alice", ""))?;
        let bob = key.sign(&server.claims(&issuer, "bob", ""))?;
        let created = with_tasks(
            &server,
            &alice,
            "tools/call",
            json!({ "name": "long", "arguments": {} }),
            "long",
        )
        .await?;
        assert_eq!(created["result"]["resultType"], "task", "{created}");
        let id = created["result"]["taskId"]
            .as_str()
            .ok_or("no taskId")?
            .to_owned();
        let nowhere = "000000000000ffffffffffffffffffffffffffffffff";
        for (method, extra) in [
            ("tasks/get", json!({})),
            ("tasks/update", json!({ "inputResponses": { "k": {} } })),
            ("tasks/cancel", json!({})),
        ] {
            let mut params = extra.clone();
            params["taskId"] = json!(id);
            let theirs = with_tasks(&server, &bob, method, params, &id).await?;
            let mut params = extra;
            params["taskId"] = json!(nowhere);
            let none = with_tasks(&server, &bob, method, params, nowhere).await?;
            assert_eq!(theirs["error"]["code"], -32602, "{method}: {theirs}");
            assert_eq!(
                theirs["error"]["message"]
                    .as_str()
                    .map(|m| m.replace(&id, "ID")),
                none["error"]["message"]
                    .as_str()
                    .map(|m| m.replace(nowhere, "ID")),
                "{method}: the same words as for no task"
            );
        }
        let still = with_tasks(&server, &alice, "tasks/get", json!({ "taskId": id }), &id).await?;
        assert_eq!(still["result"]["status"], "working", "{still}");
        let ack = with_tasks(
            &server,
            &alice,
            "tasks/cancel",
            json!({ "taskId": id }),
            &id,
        )
        .await?;
        assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
        Ok(())
    }
}

mod admin_page {
    use super::*;
    use protocol_droid::adapters::primary::http::AdminPage;
    use protocol_droid::application::gateway::{Disclosure, Gateway, Pins};

    /// The page's data and its approvals need a token naming a principal,
    /// from the same issuer as `/mcp`'s, with the page's own scope, even
    /// where `/mcp` admits the anonymous caller; the page itself holds no
    /// data and is served to anyone the host check admits.
    #[tokio::test]
    async fn the_admin_api_needs_a_principal_with_its_scope_even_where_mcp_admits_anyone()
    -> Result<(), TestError> {
        let key = SigningKey::ec("ec-1")?;
        let issuer = Issuer::start(&[&key]).await?;
        let (listener, base) = loopback().await?;
        let resource = format!("{base}/mcp");
        // The page is a resource of its own, at its own address, that also
        // takes the MCP endpoint's tokens.
        let page_resource = format!("{base}/");
        let validator = JwtValidator::new(
            issuer.issuer(),
            &resource,
            issuer.jwks(Duration::from_secs(60))?,
        )
        .also_audience(&page_resource);
        let guard = ResourceServer::new(&resource, Arc::new(validator))?
            .authorization_server(issuer.issuer())
            .allow_anonymous()
            .served_at(&page_resource)?;
        let gateway = Gateway::build(
            Server::builder("gateway", "1.0.0"),
            Disclosure::Default,
            Pins::default(),
        )?;
        let page = AdminPage::new(
            gateway,
            HttpOptions {
                auth: Some(guard),
                metrics: Some(Metrics::new()),
                ..HttpOptions::default()
            },
        )
        .require_scope("droid:admin");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(page.serve(listener, async {
            let _ = stopped.await;
        }));
        let client = reqwest::Client::new();
        let shell = client.get(format!("{base}/")).send().await?;
        assert_eq!(shell.status(), 200);
        assert!(shell.headers().contains_key("content-security-policy"));
        let token = |scope: &str| {
            key.sign(&json!({
                "iss": issuer.issuer(), "sub": "operator", "aud": resource,
                "scope": scope, "exp": now() + 300, "iat": now(),
            }))
        };
        let (user, operator) = (token("mcp")?, token("mcp droid:admin")?);
        // Its document names the page, where a client reaching the page
        // looks, and a token issued for the page is taken too.
        let document: Value = client
            .get(format!("{base}/.well-known/oauth-protected-resource"))
            .send()
            .await?
            .json()
            .await?;
        assert_eq!(document["resource"], json!(page_resource), "{document}");
        let for_the_page = key.sign(&json!({
            "iss": issuer.issuer(), "sub": "operator", "aud": page_resource,
            "scope": "droid:admin", "exp": now() + 300, "iat": now(),
        }))?;
        let overview = client
            .get(format!("{base}/api/overview"))
            .bearer_auth(&for_the_page)
            .send()
            .await?;
        assert_eq!(overview.status(), 200);
        for path in ["/api/overview", "/api/primitives", "/metrics"] {
            let get = |token: Option<&String>| {
                let request = client.get(format!("{base}{path}"));
                match token {
                    Some(token) => request.bearer_auth(token),
                    None => request,
                }
                .send()
            };
            // Each refusal's challenge names the page's scope, and where
            // its metadata is.
            let anonymous = get(None).await?;
            assert_eq!(anonymous.status(), 401, "{path}");
            let asked = challenge(&anonymous);
            assert!(
                asked.contains(r#"scope="droid:admin""#) && asked.contains("resource_metadata="),
                "{path}: {asked}"
            );
            let unscoped = get(Some(&user)).await?;
            assert_eq!(unscoped.status(), 403, "{path}");
            let asked = challenge(&unscoped);
            assert!(
                asked.contains(r#"error="insufficient_scope""#)
                    && asked.contains(r#"scope="droid:admin""#),
                "{path}: {asked}"
            );
            assert_eq!(get(Some(&operator)).await?.status(), 200, "{path}");
        }
        let approve = |token: Option<&String>, ids: String| {
            let request = client
                .post(format!("{base}/api/approve"))
                .header("content-type", "application/json")
                .body(ids);
            match token {
                Some(token) => request.bearer_auth(token),
                None => request,
            }
            .send()
        };
        let named = format!(r#"{{"ids":["a/b@{}"]}}"#, "0".repeat(64));
        assert_eq!(approve(None, named.clone()).await?.status(), 401);
        assert_eq!(approve(Some(&user), named.clone()).await?.status(), 403);
        // A bare id would approve whatever the tool is by then.
        let bare = r#"{"ids":["a/b"]}"#.to_owned();
        assert_eq!(approve(Some(&operator), bare).await?.status(), 400);
        // Authorized, and refused for what it names: no such tool.
        let refused = approve(Some(&operator), named).await?;
        assert_eq!(refused.status(), 409);
        let reply: Value = refused.json().await?;
        assert_eq!(reply["ok"], json!(false), "{reply}");
        // Two types: which one the body is read by is unsure.
        let mut typed = reqwest::header::HeaderMap::new();
        typed.append("content-type", "application/json".parse()?);
        typed.append("content-type", "text/plain".parse()?);
        let doubled = client
            .post(format!("{base}/api/approve"))
            .headers(typed)
            .bearer_auth(&operator)
            .body(format!(r#"{{"ids":["a/b@{}"]}}"#, "0".repeat(64)))
            .send()
            .await?;
        assert_eq!(doubled.status(), 415);
        drop(stop);
        Ok(())
    }
}
