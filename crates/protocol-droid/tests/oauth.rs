//! The OAuth client against a scripted authorization server and protected
//! resource on loopback: discovery order, PKCE, the token request per
//! authentication method, RFC 9207 `iss`, issuer and resource checks, the
//! attempt budget and re-registration when the authorization server changes.

// Indexing a `serde_json::Value` reads `Null` for a missing member, and the
// documents written to by index are all objects, so neither panics.
#![allow(clippy::indexing_slicing)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use futures_util::future::BoxFuture;
use protocol_droid::adapters::secondary::authorizer::{AuthError, Authorizer, Challenge};
use protocol_droid::adapters::secondary::oauth::{
    AuthorizationPrompt, AuthorizationResponse, OAuthClient, OAuthClientBuilder,
};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use url::Url;

#[allow(dead_code)] // Each test binary uses its own part of it.
mod support;

use support::TestError;
type TestResult = Result<(), TestError>;

const REDIRECT_URI: &str = "http://localhost:1/callback";

/// What the authorization response carries as `iss`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Iss {
    Correct,
    Wrong,
    Omitted,
    TrailingSlash,
}

/// How the scripted servers behave.
#[derive(Clone, Debug)]
struct Script {
    /// Serve protected resource metadata at the root well-known URL rather
    /// than the path-aware one.
    prm_at_root: bool,
    /// The `resource` the metadata names, if not the endpoint.
    prm_resource: Option<String>,
    /// The issuer's path ("" or "/tenant1").
    issuer_path: &'static str,
    /// The `issuer` the metadata names, if not the real one.
    metadata_issuer: Option<String>,
    iss_supported: Option<bool>,
    iss: Iss,
    auth_methods: Vec<&'static str>,
    /// The method the registration response names, if any.
    registered_method: Option<&'static str>,
    issue_secret: bool,
    as_scopes: Option<Vec<&'static str>>,
    prm_scopes: Option<Vec<&'static str>>,
    cimd: bool,
}

impl Default for Script {
    fn default() -> Self {
        Self {
            prm_at_root: false,
            prm_resource: None,
            issuer_path: "",
            metadata_issuer: None,
            iss_supported: Some(true),
            iss: Iss::Correct,
            auth_methods: vec!["none"],
            registered_method: None,
            issue_secret: false,
            as_scopes: None,
            prm_scopes: None,
            cimd: false,
        }
    }
}

/// One request the scripted servers saw.
#[derive(Clone, Debug)]
struct Seen {
    path: String,
    params: HashMap<String, String>,
    authorization: Option<String>,
    body: Value,
}

struct Mock {
    script: Script,
    base: String,
    /// The authorization server the protected resource names, if not this one.
    named_issuer: Mutex<Option<String>>,
    seen: Mutex<Vec<Seen>>,
    challenges: Mutex<HashMap<String, String>>,
}

impl Mock {
    fn issuer(&self) -> String {
        format!("{}{}", self.base, self.script.issuer_path)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn paths(&self) -> Vec<String> {
        self.seen().into_iter().map(|seen| seen.path).collect()
    }

    /// How many requests reached `path`.
    fn count(&self, path: &str) -> usize {
        self.paths().iter().filter(|seen| *seen == path).count()
    }

    /// The `name` parameter of each request to `path` that had one, in
    /// order.
    fn params(&self, path: &str, name: &str) -> Vec<String> {
        self.seen()
            .into_iter()
            .filter(|seen| seen.path == path)
            .filter_map(|seen| seen.params.get(name).cloned())
            .collect()
    }

    fn find(&self, path_end: &str) -> Option<Seen> {
        self.seen()
            .into_iter()
            .find(|seen| seen.path.ends_with(path_end))
    }

    fn endpoint(&self) -> String {
        format!("{}/mcp", self.base)
    }
}

async fn serve(script: Script) -> Result<Arc<Mock>, TestError> {
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let base = format!("http://127.0.0.1:{}", listener.local_addr()?.port());
    let mock = Arc::new(Mock {
        script,
        base,
        named_issuer: Mutex::new(None),
        seen: Mutex::new(Vec::new()),
        challenges: Mutex::new(HashMap::new()),
    });
    let app = axum::Router::new()
        .fallback(handle)
        .with_state(Arc::clone(&mock));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(mock)
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn handle(
    State(mock): State<Arc<Mock>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let mut params: HashMap<String, String> = uri
        .query()
        .map(|query| {
            url::form_urlencoded::parse(query.as_bytes())
                .into_owned()
                .collect()
        })
        .unwrap_or_default();
    let json_body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if method == Method::POST && json_body.is_null() {
        params.extend(url::form_urlencoded::parse(&body).into_owned());
    }
    mock.seen
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Seen {
            path: path.clone(),
            params: params.clone(),
            authorization: headers
                .get(header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned),
            body: json_body,
        });
    let script = &mock.script;
    let issuer = mock.issuer();
    let prefix = script.issuer_path;
    let prm_path = if script.prm_at_root {
        "/.well-known/oauth-protected-resource"
    } else {
        "/.well-known/oauth-protected-resource/mcp"
    };
    if path == prm_path {
        let named = mock
            .named_issuer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| issuer.clone());
        let resource = script.prm_resource.clone().unwrap_or_else(|| {
            if script.prm_at_root {
                mock.base.clone()
            } else {
                mock.endpoint()
            }
        });
        let mut document = json!({"resource": resource, "authorization_servers": [named]});
        if let Some(scopes) = &script.prm_scopes {
            document["scopes_supported"] = json!(scopes);
        }
        return json_response(StatusCode::OK, &document);
    }
    if path == format!("/.well-known/oauth-authorization-server{prefix}") {
        let mut document = json!({
            "issuer": script.metadata_issuer.clone().unwrap_or_else(|| issuer.clone()),
            "authorization_endpoint": format!("{issuer}/authorize"),
            "token_endpoint": format!("{issuer}/token"),
            "registration_endpoint": format!("{issuer}/register"),
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": script.auth_methods,
        });
        if let Some(supported) = script.iss_supported {
            document["authorization_response_iss_parameter_supported"] = json!(supported);
        }
        if let Some(scopes) = &script.as_scopes {
            document["scopes_supported"] = json!(scopes);
        }
        if script.cimd {
            document["client_id_metadata_document_supported"] = json!(true);
        }
        return json_response(StatusCode::OK, &document);
    }
    if path == format!("{prefix}/authorize") {
        let (Some(redirect), Some(challenge)) =
            (params.get("redirect_uri"), params.get("code_challenge"))
        else {
            return StatusCode::BAD_REQUEST.into_response();
        };
        let Ok(mut location) = Url::parse(redirect) else {
            return StatusCode::BAD_REQUEST.into_response();
        };
        let code = format!("code-{}", mock.seen().len());
        mock.challenges
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(code.clone(), challenge.clone());
        {
            let mut query = location.query_pairs_mut();
            query.append_pair("code", &code);
            if let Some(state) = params.get("state") {
                query.append_pair("state", state);
            }
            match script.iss {
                Iss::Correct => {
                    query.append_pair("iss", &issuer);
                }
                Iss::Wrong => {
                    query.append_pair("iss", "https://evil.example.com");
                }
                Iss::TrailingSlash => {
                    query.append_pair("iss", &format!("{issuer}/"));
                }
                Iss::Omitted => {}
            }
        }
        return (
            StatusCode::FOUND,
            [(header::LOCATION, location.to_string())],
        )
            .into_response();
    }
    if path == format!("{prefix}/token") {
        let scope = mock
            .find("/authorize")
            .and_then(|seen| seen.params.get("scope").cloned());
        let mut document = json!({
            "access_token": format!("token-{}", mock.seen().len()),
            "token_type": "Bearer",
            "expires_in": 3600,
            "refresh_token": "refresh-1",
        });
        if let Some(scope) = scope {
            document["scope"] = json!(scope);
        }
        return json_response(StatusCode::OK, &document);
    }
    if path == format!("{prefix}/register") {
        let mut document = json!({"client_id": format!("client-of-{}", mock.base)});
        if script.issue_secret {
            document["client_secret"] = json!("s3cret");
        }
        if let Some(method) = script.registered_method {
            document["token_endpoint_auth_method"] = json!(method);
        }
        return json_response(StatusCode::CREATED, &document);
    }
    StatusCode::NOT_FOUND.into_response()
}

/// Visits the authorization URL and reads the redirect, as a browser would.
#[derive(Debug)]
struct Headless(reqwest::Client);

impl Headless {
    fn new() -> Result<Arc<Self>, TestError> {
        Ok(Arc::new(Self(
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()?,
        )))
    }
}

impl AuthorizationPrompt for Headless {
    fn authorize<'a>(
        &'a self,
        url: &'a Url,
    ) -> BoxFuture<'a, Result<AuthorizationResponse, AuthError>> {
        Box::pin(async move {
            let response = self
                .0
                .get(url.clone())
                .send()
                .await
                .map_err(|error| AuthError::Server(error.to_string()))?;
            let location = response
                .headers()
                .get(header::LOCATION)
                .and_then(|value| value.to_str().ok())
                .ok_or_else(|| AuthError::Server("no redirect".to_owned()))?;
            let redirect =
                Url::parse(location).map_err(|error| AuthError::Server(error.to_string()))?;
            Ok(AuthorizationResponse::from_redirect(&redirect))
        })
    }
}

/// A client of `mock`'s endpoint, still to be configured.
fn builder(mock: &Mock) -> Result<OAuthClientBuilder, TestError> {
    Ok(OAuthClient::builder(
        mock.endpoint(),
        REDIRECT_URI,
        Headless::new()?,
    ))
}

fn client(mock: &Mock) -> Result<OAuthClient, TestError> {
    Ok(builder(mock)?.build()?)
}

fn unauthorized(mock: &Mock, www_authenticate: Option<String>) -> Challenge {
    Challenge {
        status: 401,
        resource: mock.endpoint(),
        www_authenticate,
    }
}

fn resource_metadata_header(mock: &Mock) -> String {
    format!(
        r#"Bearer resource_metadata="{}/.well-known/oauth-protected-resource/mcp""#,
        mock.base
    )
}

#[tokio::test]
async fn discovery_falls_back_to_the_root_metadata_and_the_path_aware_issuer_location() -> TestResult
{
    let mock = serve(Script {
        prm_at_root: true,
        issuer_path: "/tenant1",
        ..Script::default()
    })
    .await?;
    let client = client(&mock)?;
    client.challenged(&unauthorized(&mock, None)).await?;

    let paths = mock.paths();
    assert_eq!(
        paths.get(..3),
        Some(
            &[
                "/.well-known/oauth-protected-resource/mcp".to_owned(),
                "/.well-known/oauth-protected-resource".to_owned(),
                "/.well-known/oauth-authorization-server/tenant1".to_owned(),
            ][..]
        )
    );
    assert!(!paths.contains(&"/.well-known/oauth-authorization-server".to_owned()));
    // The resource indicator is the metadata's value verbatim: no "/" added.
    let authorize = mock.find("/authorize").ok_or("no authorization request")?;
    assert_eq!(authorize.params.get("resource"), Some(&mock.base));
    let token = mock.find("/token").ok_or("no token request")?;
    assert_eq!(token.params.get("resource"), Some(&mock.base));
    assert!(
        client
            .authorization()
            .await?
            .is_some_and(|header| header.starts_with("Bearer token-"))
    );
    Ok(())
}

#[tokio::test]
async fn the_code_verifier_matches_the_s256_challenge() -> TestResult {
    let mock = serve(Script::default()).await?;
    client(&mock)?
        .challenged(&unauthorized(&mock, Some(resource_metadata_header(&mock))))
        .await?;
    let authorize = mock.find("/authorize").ok_or("no authorization request")?;
    let token = mock.find("/token").ok_or("no token request")?;
    assert_eq!(
        authorize
            .params
            .get("code_challenge_method")
            .map(String::as_str),
        Some("S256")
    );
    let verifier = token.params.get("code_verifier").ok_or("no verifier")?;
    assert_eq!(
        authorize.params.get("code_challenge"),
        Some(&URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes())))
    );
    assert_eq!(
        token.params.get("grant_type").map(String::as_str),
        Some("authorization_code")
    );
    Ok(())
}

async fn token_request_with(
    methods: Vec<&'static str>,
    registered: &'static str,
) -> Result<Seen, TestError> {
    let mock = serve(Script {
        auth_methods: methods,
        registered_method: Some(registered),
        issue_secret: registered != "none",
        ..Script::default()
    })
    .await?;
    client(&mock)?
        .challenged(&unauthorized(&mock, None))
        .await?;
    Ok(mock.find("/token").ok_or("no token request")?)
}

#[tokio::test]
async fn client_secret_basic_puts_the_credentials_in_the_header_only() -> TestResult {
    let token = token_request_with(vec!["client_secret_basic"], "client_secret_basic").await?;
    let header = token.authorization.ok_or("no Authorization header")?;
    let encoded = header.strip_prefix("Basic ").ok_or("not Basic")?;
    let decoded = String::from_utf8(STANDARD.decode(encoded)?)?;
    assert!(decoded.ends_with(":s3cret"));
    assert!(!token.params.contains_key("client_secret"));
    Ok(())
}

#[tokio::test]
async fn client_secret_post_puts_the_credentials_in_the_form() -> TestResult {
    let token = token_request_with(vec!["client_secret_post"], "client_secret_post").await?;
    assert_eq!(token.authorization, None);
    assert_eq!(
        token.params.get("client_secret").map(String::as_str),
        Some("s3cret")
    );
    assert!(token.params.contains_key("client_id"));
    Ok(())
}

#[tokio::test]
async fn a_public_client_sends_its_id_and_no_secret() -> TestResult {
    let token = token_request_with(vec!["none"], "none").await?;
    assert_eq!(token.authorization, None);
    assert!(!token.params.contains_key("client_secret"));
    assert!(token.params.contains_key("client_id"));
    Ok(())
}

#[tokio::test]
async fn a_dynamic_registration_asks_for_refresh_tokens_as_a_native_client() -> TestResult {
    let mock = serve(Script::default()).await?;
    client(&mock)?
        .challenged(&unauthorized(&mock, None))
        .await?;
    let register = mock.find("/register").ok_or("no registration")?;
    assert_eq!(register.body["application_type"], "native");
    assert_eq!(
        register.body["grant_types"],
        json!(["authorization_code", "refresh_token"])
    );
    assert_eq!(register.body["redirect_uris"], json!([REDIRECT_URI]));
    Ok(())
}

async fn outcome_for(script: Script) -> Result<(Result<(), AuthError>, Arc<Mock>), TestError> {
    let mock = serve(script).await?;
    let outcome = client(&mock)?.challenged(&unauthorized(&mock, None)).await;
    Ok((outcome, mock))
}

/// The mock serving `script`, once a challenge from it was rejected.
async fn rejected(script: Script) -> Result<Arc<Mock>, TestError> {
    let (outcome, mock) = outcome_for(script).await?;
    assert!(
        matches!(outcome, Err(AuthError::Rejected(_))),
        "{outcome:?}"
    );
    Ok(mock)
}

#[tokio::test]
async fn a_wrong_iss_is_rejected_before_the_code_is_redeemed() -> TestResult {
    for (supported, iss) in [
        (Some(true), Iss::Wrong),
        (None, Iss::Wrong),
        (Some(true), Iss::TrailingSlash),
        (Some(true), Iss::Omitted),
    ] {
        let (outcome, mock) = outcome_for(Script {
            iss_supported: supported,
            iss,
            ..Script::default()
        })
        .await?;
        assert!(
            matches!(outcome, Err(AuthError::Rejected(_))),
            "{supported:?} {iss:?}: {outcome:?}"
        );
        assert!(mock.find("/authorize").is_some());
        assert!(mock.find("/token").is_none(), "{supported:?} {iss:?}");
    }
    Ok(())
}

#[tokio::test]
async fn a_missing_iss_is_accepted_from_a_server_that_did_not_promise_one() -> TestResult {
    let (outcome, mock) = outcome_for(Script {
        iss_supported: None,
        iss: Iss::Omitted,
        ..Script::default()
    })
    .await?;
    outcome?;
    assert!(mock.find("/token").is_some());
    Ok(())
}

#[tokio::test]
async fn metadata_naming_another_issuer_is_never_used() -> TestResult {
    let mock = rejected(Script {
        metadata_issuer: Some("https://attacker.example.com".to_owned()),
        ..Script::default()
    })
    .await?;
    assert!(mock.find("/register").is_none());
    assert!(mock.find("/authorize").is_none());
    Ok(())
}

#[tokio::test]
async fn a_resource_that_does_not_cover_the_endpoint_stops_the_flow() -> TestResult {
    let mock = rejected(Script {
        prm_resource: Some("https://evil.example.com/mcp".to_owned()),
        ..Script::default()
    })
    .await?;
    assert!(
        mock.find("/.well-known/oauth-authorization-server")
            .is_none()
    );
    assert!(mock.find("/authorize").is_none());
    Ok(())
}

#[tokio::test]
async fn scopes_come_from_the_challenge_then_the_metadata_with_offline_access_if_listed()
-> TestResult {
    let script = Script {
        prm_scopes: Some(vec!["mcp:basic", "mcp:read"]),
        as_scopes: Some(vec!["mcp:basic", "offline_access"]),
        ..Script::default()
    };
    let (outcome, mock) = outcome_for(script.clone()).await?;
    outcome?;
    let authorize = mock.find("/authorize").ok_or("no authorization request")?;
    assert_eq!(
        authorize.params.get("scope").map(String::as_str),
        Some("mcp:basic mcp:read offline_access")
    );

    let mock = serve(Script {
        as_scopes: Some(vec!["mcp:basic"]),
        ..script
    })
    .await?;
    let header = format!(
        r#"Bearer scope="mcp:write", {}"#,
        resource_metadata_header(&mock).trim_start_matches("Bearer ")
    );
    client(&mock)?
        .challenged(&unauthorized(&mock, Some(header)))
        .await?;
    let authorize = mock.find("/authorize").ok_or("no authorization request")?;
    assert_eq!(
        authorize.params.get("scope").map(String::as_str),
        Some("mcp:write")
    );

    let (outcome, mock) = outcome_for(Script::default()).await?;
    outcome?;
    let authorize = mock.find("/authorize").ok_or("no authorization request")?;
    assert_eq!(authorize.params.get("scope"), None);
    Ok(())
}

#[tokio::test]
async fn a_step_up_asks_for_the_union_and_the_attempts_are_bounded() -> TestResult {
    let mock = serve(Script::default()).await?;
    let client = client(&mock)?;
    let header = |scope: &str| {
        Some(format!(
            r#"Bearer error="insufficient_scope", scope="{scope}", resource_metadata="{}/.well-known/oauth-protected-resource/mcp""#,
            mock.base
        ))
    };
    client
        .challenged(&Challenge {
            status: 401,
            resource: mock.endpoint(),
            www_authenticate: header("mcp:basic")
                .map(|h| h.replace(r#"error="insufficient_scope", "#, "")),
        })
        .await?;
    let forbidden = Challenge {
        status: 403,
        resource: mock.endpoint(),
        www_authenticate: header("mcp:write"),
    };
    client.challenged(&forbidden).await?;
    let scopes = mock.params("/authorize", "scope");
    assert_eq!(scopes, ["mcp:basic", "mcp:basic mcp:write"]);

    client.challenged(&forbidden).await?;
    let refused = client.challenged(&forbidden).await;
    assert!(matches!(refused, Err(AuthError::Refused(_))), "{refused:?}");
    assert_eq!(mock.count("/authorize"), 3);
    Ok(())
}

#[tokio::test]
async fn a_forbidden_without_insufficient_scope_is_not_answered() -> TestResult {
    let mock = serve(Script::default()).await?;
    let outcome = client(&mock)?
        .challenged(&Challenge {
            status: 403,
            resource: mock.endpoint(),
            www_authenticate: Some(r#"Bearer error="invalid_token""#.to_owned()),
        })
        .await;
    assert!(matches!(outcome, Err(AuthError::Refused(_))), "{outcome:?}");
    assert!(mock.seen().is_empty());
    Ok(())
}

#[tokio::test]
async fn a_new_authorization_server_gets_a_new_registration_and_never_the_old_credentials()
-> TestResult {
    let first = serve(Script::default()).await?;
    let second = serve(Script::default()).await?;
    let client = client(&first)?;
    client.challenged(&unauthorized(&first, None)).await?;
    let old = client.authorization().await?.ok_or("no token")?;

    *first
        .named_issuer
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = Some(second.issuer());
    client.challenged(&unauthorized(&first, None)).await?;

    assert!(second.find("/register").is_some());
    let old_client_id = format!("client-of-{}", first.base);
    for seen in second.seen() {
        assert_ne!(
            seen.params.get("client_id"),
            Some(&old_client_id),
            "{}",
            seen.path
        );
        assert_ne!(
            seen.params.get("refresh_token").map(String::as_str),
            Some("refresh-1")
        );
    }
    let new = client.authorization().await?.ok_or("no token")?;
    assert_ne!(new, old);
    Ok(())
}

#[tokio::test]
async fn a_second_unauthorized_is_answered_with_the_refresh_token_first() -> TestResult {
    let mock = serve(Script::default()).await?;
    let client = client(&mock)?;
    client.challenged(&unauthorized(&mock, None)).await?;
    client.challenged(&unauthorized(&mock, None)).await?;
    let grants = mock.params("/token", "grant_type");
    assert_eq!(grants, ["authorization_code", "refresh_token"]);
    // A refreshed token that is refused again leads to a new authorization.
    client.challenged(&unauthorized(&mock, None)).await?;
    assert_eq!(mock.count("/authorize"), 2);
    Ok(())
}

#[tokio::test]
async fn a_metadata_document_url_is_the_client_id_where_the_server_accepts_one() -> TestResult {
    let mock = serve(Script {
        cimd: true,
        ..Script::default()
    })
    .await?;
    let document = "https://client.example.com/metadata.json";
    builder(&mock)?
        .client_metadata_document(document)
        .build()?
        .challenged(&unauthorized(&mock, None))
        .await?;
    assert!(mock.find("/register").is_none());
    let authorize = mock.find("/authorize").ok_or("no authorization request")?;
    assert_eq!(
        authorize.params.get("client_id").map(String::as_str),
        Some(document)
    );
    Ok(())
}

#[tokio::test]
async fn pre_registered_credentials_are_used_without_registering() -> TestResult {
    let mock = serve(Script {
        auth_methods: vec!["client_secret_basic"],
        ..Script::default()
    })
    .await?;
    builder(&mock)?
        .pre_registered("pre", Some("secret".to_owned()), Some(mock.issuer()))
        .build()?
        .challenged(&unauthorized(&mock, None))
        .await?;
    assert!(mock.find("/register").is_none());
    let token = mock.find("/token").ok_or("no token request")?;
    assert_eq!(
        token.authorization.as_deref(),
        Some(format!("Basic {}", STANDARD.encode("pre:secret")).as_str())
    );
    Ok(())
}

#[tokio::test]
async fn concurrent_challenges_share_one_authorization() -> TestResult {
    let mock = serve(Script::default()).await?;
    let client = client(&mock)?;
    let challenge = unauthorized(&mock, None);
    let (first, second) =
        tokio::join!(client.challenged(&challenge), client.challenged(&challenge));
    first?;
    second?;
    // One authorization and one token request: the second challenge neither
    // authorized again nor refreshed the token the first had just obtained.
    assert_eq!(mock.count("/authorize"), 1);
    assert_eq!(mock.count("/token"), 1);
    Ok(())
}
