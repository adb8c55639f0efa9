//! The OAuth 2.1 resource server in front of the MCP endpoints: a bearer
//! token on every request, its Protected Resource Metadata (RFC 9728), and
//! the `401`/`403` challenges that tell a client what to fetch next.

use core::fmt;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::respond::error_body;
use crate::application::server::AuthContext;
use crate::application::server::auth::{TokenError, TokenValidator, audience_includes};
use crate::application::squelch::Squelch;
use crate::domain::jsonrpc::ErrorCode;

/// The well-known path prefix of Protected Resource Metadata (RFC 9728 §3).
pub const METADATA_PREFIX: &str = "/.well-known/oauth-protected-resource";

/// Why a [`ResourceServer`] could not be configured.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResourceServerError {
    /// The resource identifier is not an absolute `http`/`https` URI
    /// without a fragment (RFC 8707 §2).
    #[error("the resource {0:?} is not an absolute http(s) URI without a fragment")]
    Resource(String),
    /// A scope contains a character RFC 6749 §3.3 does not allow (space,
    /// `"` or `\`), which would break the challenge it is quoted in.
    #[error("the scope {0:?} is not a valid scope token")]
    Scope(String),
}

/// What an HTTP server demands of its callers when authorization is on.
///
/// Every request to an MCP endpoint must carry `Authorization: Bearer`; the
/// token is checked by the [`TokenValidator`], its audience must be this
/// resource, and it must hold every scope of [`Self::require_scopes`]. A
/// token passed in the query string is refused outright (OAuth 2.1 §5.2.1).
/// What the token may then *see* is decided per primitive, by the scopes the
/// registry records: see the crate's authorization guide.
#[derive(Clone)]
pub struct ResourceServer {
    resource: url::Url,
    audiences: Vec<String>,
    authorization_servers: Vec<String>,
    scopes_supported: SupportedScopes,
    required_scopes: Vec<String>,
    allow_anonymous: bool,
    /// How far past its `exp` a token's subscriptions may run.
    leeway: Duration,
    validator: Arc<dyn TokenValidator>,
    refusals: Arc<Mutex<Refusals>>,
}

/// How far past its `exp` a token's subscriptions run unless told
/// otherwise: the JWT validator's own default leeway.
const DEFAULT_LEEWAY: Duration = Duration::from_secs(30);

/// How many refused tokens one client address may present in
/// [`REFUSAL_WINDOW`] before it is told to wait for the rest of it.
const MAX_REFUSALS: u32 = 20;

/// The `Retry-After` of a request whose token could not be checked (the
/// issuer's key set or introspection out of reach), in seconds: a key set
/// never fetched is tried again after as long (`JwksOptions::retry_interval`).
const UNCHECKED_RETRY_SECS: u32 = 5;

/// The window refused tokens are counted over.
const REFUSAL_WINDOW: Duration = Duration::from_secs(10);

/// How many addresses are counted at once; past that the oldest window
/// goes to make room. Never a new address left uncounted: with the table
/// full, one that is not counted would never be held back.
const REFUSAL_ADDRESSES: usize = 4096;

/// Refused tokens per client address: an address presenting made-up tokens
/// by the dozen is held back before its tokens reach the validator, so its
/// flood does not spend the validator's budget (an introspection endpoint's,
/// say) that every other caller's new tokens need.
#[derive(Debug, Default)]
struct Refusals {
    by_address: HashMap<IpAddr, (Instant, u32)>,
    /// Tokens found valid lately, by a keyed hash, with when: one of them
    /// is not held back with its address, so a flood of made-up tokens
    /// from an address (every local process shares loopback's) does not
    /// lock out a caller there whose token was already accepted. Checked
    /// all the same: this only spares it the wait.
    accepted: HashMap<u64, Instant>,
    keyed: foldhash::fast::RandomState,
}

/// How long a token found valid is not held back with its address.
const ACCEPTED_FOR: Duration = Duration::from_secs(3600);

/// How many tokens found valid are remembered for [`ACCEPTED_FOR`].
const ACCEPTED_TOKENS: usize = 1024;

impl Refusals {
    fn key(&self, token: &str) -> u64 {
        use core::hash::BuildHasher as _;
        self.keyed.hash_one(token)
    }

    /// Whether `token` was found valid lately.
    fn vouched(&self, token: &str, now: Instant) -> bool {
        self.accepted
            .get(&self.key(token))
            .is_some_and(|since| now < *since + ACCEPTED_FOR)
    }

    /// Remembers that `token` was found valid.
    fn accept(&mut self, token: &str, now: Instant) {
        let key = self.key(token);
        if self.accepted.len() >= ACCEPTED_TOKENS && !self.accepted.contains_key(&key) {
            self.accepted.retain(|_, since| now < *since + ACCEPTED_FOR);
            if self.accepted.len() >= ACCEPTED_TOKENS {
                let oldest = self
                    .accepted
                    .iter()
                    .min_by_key(|(_, since)| **since)
                    .map(|(key, _)| *key);
                if let Some(oldest) = oldest {
                    self.accepted.remove(&oldest);
                }
            }
        }
        self.accepted.insert(key, now);
    }

    /// How long `peer` must wait, if it is held back.
    fn held_back(&mut self, peer: IpAddr, now: Instant) -> Option<Duration> {
        let (since, count) = *self.by_address.get(&peer)?;
        let ends = since + REFUSAL_WINDOW;
        if now >= ends {
            self.by_address.remove(&peer);
            return None;
        }
        (count >= MAX_REFUSALS).then(|| ends - now)
    }

    fn note(&mut self, peer: IpAddr, now: Instant) {
        if self.by_address.len() >= REFUSAL_ADDRESSES && !self.by_address.contains_key(&peer) {
            self.by_address
                .retain(|_, (since, _)| now < *since + REFUSAL_WINDOW);
            if self.by_address.len() >= REFUSAL_ADDRESSES {
                // Every window is live: the one that ends first goes. An
                // address it held may start over, but only after thousands
                // of other addresses' refusals, each spent on the validator
                // as its own would have been.
                let oldest = self
                    .by_address
                    .iter()
                    .min_by_key(|(_, (since, _))| *since)
                    .map(|(address, _)| *address);
                if let Some(oldest) = oldest {
                    self.by_address.remove(&oldest);
                }
            }
        }
        let entry = self.by_address.entry(peer).or_insert((now, 0));
        if now >= entry.0 + REFUSAL_WINDOW {
            *entry = (now, 0);
        }
        entry.1 = entry.1.saturating_add(1);
    }
}

impl fmt::Debug for ResourceServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResourceServer")
            .field("resource", &self.resource.as_str())
            .field("authorization_servers", &self.authorization_servers)
            .field("required_scopes", &self.required_scopes)
            .field("allow_anonymous", &self.allow_anonymous)
            .field("validator", &self.validator)
            .finish_non_exhaustive()
    }
}

/// The scopes a [`ResourceServer`] lists as `scopes_supported` and asks for
/// in a challenge when no scope is required of every request. Shared: a
/// server whose scope rules change while it serves (a gateway reloading
/// its configuration) keeps a handle and says what they are now, so a
/// client that follows the challenge asks for scopes that exist.
#[derive(Clone, Debug, Default)]
pub struct SupportedScopes(Arc<std::sync::RwLock<Vec<String>>>);

impl SupportedScopes {
    /// Makes `scopes` the list, in order, each once.
    ///
    /// # Errors
    ///
    /// [`ResourceServerError::Scope`] for a scope that is not a scope token;
    /// the list is then unchanged.
    pub fn set(
        &self,
        scopes: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Result<(), ResourceServerError> {
        let mut listed: Vec<String> = Vec::new();
        for scope in scopes {
            let scope = valid_scope(scope.as_ref())?;
            if !listed.contains(&scope) {
                listed.push(scope);
            }
        }
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = listed;
        Ok(())
    }

    /// The list as it is now.
    #[must_use]
    pub fn get(&self) -> Vec<String> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

fn valid_scope(scope: &str) -> Result<String, ResourceServerError> {
    let ok = !scope.is_empty()
        && scope
            .chars()
            .all(|c| matches!(c, '\x21' | '\x23'..='\x5b' | '\x5d'..='\x7e'));
    if ok {
        Ok(scope.to_owned())
    } else {
        Err(ResourceServerError::Scope(scope.to_owned()))
    }
}

/// `resource` read as a protected resource's URI: absolute, `http` or
/// `https`, with a host and no fragment.
fn resource_uri(resource: &str) -> Result<url::Url, ResourceServerError> {
    url::Url::parse(resource)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .filter(|u| u.fragment().is_none() && u.host().is_some())
        .ok_or_else(|| ResourceServerError::Resource(resource.to_owned()))
}

impl ResourceServer {
    /// Protects the resource whose canonical URI is `resource` (the MCP
    /// endpoint as clients name it, `https://mcp.example.com/mcp`), checking
    /// tokens with `validator`. Anonymous callers are refused.
    ///
    /// # Errors
    ///
    /// [`ResourceServerError::Resource`] when `resource` is not an absolute
    /// `http`/`https` URI without a fragment.
    pub fn new(
        resource: &str,
        validator: Arc<dyn TokenValidator>,
    ) -> Result<Self, ResourceServerError> {
        let parsed = resource_uri(resource)?;
        // The URI as written is the audience a token must name.
        let canonical = parsed.as_str().to_owned();
        Ok(Self {
            resource: parsed,
            audiences: vec![canonical],
            authorization_servers: Vec::new(),
            scopes_supported: SupportedScopes::default(),
            required_scopes: Vec::new(),
            allow_anonymous: false,
            leeway: DEFAULT_LEEWAY,
            validator,
            refusals: Arc::default(),
        })
    }

    /// Names an authorization server (its issuer URL) in the metadata.
    #[must_use]
    pub fn authorization_server(mut self, issuer: impl Into<String>) -> Self {
        self.authorization_servers.push(issuer.into());
        self
    }

    /// Also accepts tokens whose `aud` is `audience` (an issuer that names
    /// APIs by an identifier of its own). The canonical URI is always
    /// accepted.
    #[must_use]
    pub fn audience(mut self, audience: impl Into<String>) -> Self {
        let audience = audience.into();
        if !self.audiences.contains(&audience) {
            self.audiences.push(audience);
        }
        self
    }

    /// Lists `scopes` as `scopes_supported` in the metadata.
    ///
    /// # Errors
    ///
    /// [`ResourceServerError::Scope`] for a scope that is not a scope token.
    pub fn scopes_supported(
        self,
        scopes: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Result<Self, ResourceServerError> {
        let listed = self.scopes_supported.get();
        let added: Vec<String> = scopes.into_iter().map(|s| s.as_ref().to_owned()).collect();
        self.scopes_supported.set(listed.iter().chain(&added))?;
        Ok(self)
    }

    /// Lists as `scopes_supported` what `shared` holds, from now on and as
    /// it changes; the scopes listed so far are added to it.
    ///
    /// # Errors
    ///
    /// None in practice: the scopes listed so far were checked already.
    pub fn supported_scopes(
        mut self,
        shared: SupportedScopes,
    ) -> Result<Self, ResourceServerError> {
        let listed = self.scopes_supported.get();
        let held = shared.get();
        shared.set(listed.iter().chain(&held))?;
        self.scopes_supported = shared;
        Ok(self)
    }

    /// Requires every request's token to hold all of `scopes`; a token
    /// without them is answered `403 insufficient_scope` naming them all.
    ///
    /// # Errors
    ///
    /// [`ResourceServerError::Scope`] for a scope that is not a scope token.
    pub fn require_scopes(
        mut self,
        scopes: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Result<Self, ResourceServerError> {
        for scope in scopes {
            let scope = valid_scope(scope.as_ref())?;
            if !self.required_scopes.contains(&scope) {
                self.required_scopes.push(scope);
            }
        }
        Ok(self)
    }

    /// Serves a request without a token as the anonymous caller, who sees
    /// only what requires no scope. Off by default: with authorization on, a
    /// request without a token is refused. With [`Self::require_scopes`],
    /// which the anonymous caller cannot hold, it is refused all the same.
    #[must_use]
    pub const fn allow_anonymous(mut self) -> Self {
        self.allow_anonymous = true;
        self
    }

    /// How far past its `exp` a token's subscriptions (a `GET` stream, a
    /// 2024-11-05 session's stream, a `subscriptions/listen`) may run before
    /// they end, as its validator tolerates clocks that far apart: 30 s by
    /// default, as [`JwtValidator`](crate::adapters::secondary::bearer::JwtValidator)'s.
    /// A request's own answer is delivered whenever it comes: the request
    /// was allowed when it was made.
    #[must_use]
    pub const fn token_leeway(mut self, leeway: Duration) -> Self {
        self.leeway = leeway;
        self
    }

    /// The canonical URI of the protected resource.
    #[must_use]
    pub fn resource(&self) -> &str {
        self.resource.as_str()
    }

    /// The resource's host name, without its port: what the `Host` guard
    /// must admit when the resource is named by a public name.
    #[must_use]
    pub fn host(&self) -> Option<&str> {
        self.resource.host_str()
    }

    /// The path the metadata is served at: the well-known prefix followed by
    /// the resource's path (`/.well-known/oauth-protected-resource/mcp`).
    /// Only the slash that follows the host alone is dropped (RFC 9728
    /// §3.1): a resource `…/mcp/` has its metadata at `…/mcp/`, where a
    /// client derives it.
    #[must_use]
    pub fn metadata_path(&self) -> String {
        match self.resource.path() {
            "/" => METADATA_PREFIX.to_owned(),
            path => format!("{METADATA_PREFIX}{path}"),
        }
    }

    /// The same checks guarding another resource, at an address of its own
    /// (the gateway's admin page, `http://127.0.0.1:9090/`): `resource` is
    /// then what the metadata names and where its document is, since a
    /// client takes a document reached through a challenge only when it
    /// names the resource the client was reaching (RFC 9728 §3.3); tokens
    /// issued for it are taken, and so are those for the resource guarded
    /// until now. The validator checks the audience too, and must be told
    /// to take `resource` as well (`JwtValidator::also_audience`,
    /// `IntrospectionValidator::also_audience`).
    ///
    /// # Errors
    ///
    /// [`ResourceServerError::Resource`] when `resource` is not an absolute
    /// `http`/`https` URI without a fragment.
    pub fn served_at(mut self, resource: &str) -> Result<Self, ResourceServerError> {
        let parsed = resource_uri(resource)?;
        let canonical = parsed.as_str().to_owned();
        self.resource = parsed;
        Ok(self.audience(canonical))
    }

    /// The metadata's absolute URL, as a challenge names it.
    #[must_use]
    pub fn metadata_url(&self) -> String {
        let origin = self.resource.origin().ascii_serialization();
        format!("{origin}{}", self.metadata_path())
    }

    /// The Protected Resource Metadata document (RFC 9728 §2).
    #[must_use]
    pub fn metadata(&self) -> Value {
        let mut document = serde_json::Map::new();
        document.insert("resource".to_owned(), json!(self.resource.as_str()));
        document.insert(
            "authorization_servers".to_owned(),
            json!(self.authorization_servers),
        );
        document.insert("bearer_methods_supported".to_owned(), json!(["header"]));
        // What every request needs is supported too, whatever the shared
        // list says now.
        let mut supported = self.required_scopes.clone();
        for scope in self.scopes_supported.get() {
            if !supported.contains(&scope) {
                supported.push(scope);
            }
        }
        if !supported.is_empty() {
            document.insert("scopes_supported".to_owned(), json!(supported));
        }
        Value::Object(document)
    }

    /// The scopes a challenge asks for: what every request needs, or what
    /// the resource supports when nothing is required.
    fn challenge_scopes(&self) -> Vec<String> {
        if self.required_scopes.is_empty() {
            self.scopes_supported.get()
        } else {
            self.required_scopes.clone()
        }
    }

    /// The scopes every request needs.
    pub(super) fn required_scopes(&self) -> &[String] {
        &self.required_scopes
    }

    /// A `WWW-Authenticate` value: `Bearer` with `error` (if any), the
    /// metadata URL and the scopes.
    pub(super) fn challenge(&self, error: Option<(&str, &str)>, scopes: &[String]) -> String {
        let mut params = Vec::new();
        if let Some((code, description)) = error {
            params.push(format!("error=\"{code}\""));
            params.push(format!("error_description=\"{description}\""));
        }
        params.push(format!("resource_metadata=\"{}\"", self.metadata_url()));
        if !scopes.is_empty() {
            params.push(format!("scope=\"{}\"", scopes.join(" ")));
        }
        format!("Bearer {}", params.join(", "))
    }

    /// The 401 a request without a token gets, for a route that asks for
    /// a principal where the anonymous caller may use `/mcp`.
    pub(super) fn unauthorized(&self) -> Response {
        self.refuse(StatusCode::UNAUTHORIZED, None, &self.challenge_scopes())
    }

    fn refuse(
        &self,
        status: StatusCode,
        error: Option<(&str, &str)>,
        scopes: &[String],
    ) -> Response {
        let message = error.map_or("authorization required", |(_, d)| d);
        let mut response = (
            status,
            error_body(None, ErrorCode::INVALID_REQUEST, message),
        )
            .into_response();
        if let Ok(value) = HeaderValue::from_str(&self.challenge(error, scopes)) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }

    /// Decides who is calling, or answers the refusal.
    async fn caller(&self, presented: Presented) -> Result<AuthContext, Response> {
        if presented.token_in_query {
            return Err(self.refuse(
                StatusCode::BAD_REQUEST,
                Some((
                    "invalid_request",
                    "access tokens are accepted only in the Authorization header",
                )),
                &self.challenge_scopes(),
            ));
        }
        let mut values = presented.authorization.iter();
        let first = values.next();
        if values.next().is_some() {
            return Err(self.refuse(
                StatusCode::BAD_REQUEST,
                Some(("invalid_request", "more than one Authorization header")),
                &self.challenge_scopes(),
            ));
        }
        let Some(value) = first else {
            // The anonymous caller holds no scope: where every request needs
            // some, it is refused as any request without a token is.
            if self.allow_anonymous && self.required_scopes.is_empty() {
                return Ok(AuthContext::anonymous());
            }
            return Err(self.refuse(StatusCode::UNAUTHORIZED, None, &self.challenge_scopes()));
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .filter(|token| !token.is_empty());
        let Some(token) = token else {
            // Another scheme, or a bearer without a token: the challenge says
            // which scheme this resource takes.
            return Err(self.refuse(StatusCode::UNAUTHORIZED, None, &self.challenge_scopes()));
        };
        let now = Instant::now();
        let wait = presented.peer.and_then(|peer| {
            let mut refusals = self.refusals.lock().unwrap_or_else(PoisonError::into_inner);
            refusals
                .held_back(peer, now)
                .filter(|_| !refusals.vouched(token, now))
        });
        if let Some(wait) = wait {
            let mut response = (
                StatusCode::TOO_MANY_REQUESTS,
                error_body(
                    None,
                    ErrorCode::INVALID_REQUEST,
                    "too many invalid access tokens from this address; try again later",
                ),
            )
                .into_response();
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(wait.as_secs().max(1)),
            );
            return Err(response);
        }
        let validated = self.validator.validate(token).await;
        // Only a token found invalid counts: one that could not be checked
        // (the issuer down) is no fault of the caller's, and counted it
        // would hold back good tokens for the issuer's outage.
        if let (Err(TokenError::Invalid(_)), Some(peer)) = (&validated, presented.peer) {
            self.refusals
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .note(peer, now);
        }
        let claims = match validated {
            Ok(claims) => {
                self.refusals
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .accept(token, now);
                claims
            }
            Err(TokenError::Invalid(reason)) => {
                tracing::debug!("bearer token refused: {reason}");
                return Err(self.refuse(
                    StatusCode::UNAUTHORIZED,
                    Some(("invalid_token", "the access token is not valid")),
                    &self.challenge_scopes(),
                ));
            }
            Err(TokenError::Unavailable(reason)) => {
                // Said once in a while: every request says it while the
                // issuer is down, and a caller can make it say it.
                static UNCHECKED: Squelch = Squelch::new(Duration::from_secs(10));
                if let Some(passed) = UNCHECKED.admit() {
                    tracing::warn!(
                        passed_over = passed,
                        "bearer token could not be checked: {reason}"
                    );
                }
                let mut response = (
                    StatusCode::SERVICE_UNAVAILABLE,
                    error_body(
                        None,
                        ErrorCode::INTERNAL_ERROR,
                        "the access token could not be checked; try again later",
                    ),
                )
                    .into_response();
                // Said so that a client waits rather than asks again at
                // once, which would meet the same answer.
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(UNCHECKED_RETRY_SECS));
                return Err(response);
            }
        };
        // Checked here as well as by the validator: a validator plugged in
        // by a user that forgets the audience must still not let a token
        // minted for another resource through (RFC 8707, and MCP forbids
        // passing tokens on).
        if !self
            .audiences
            .iter()
            .any(|a| audience_includes(claims.aud.as_ref(), a))
        {
            tracing::debug!("bearer token refused: it is for another audience");
            return Err(self.refuse(
                StatusCode::UNAUTHORIZED,
                Some(("invalid_token", "the access token is not valid")),
                &self.challenge_scopes(),
            ));
        }
        // Sessions, tasks and `requestState`s are bound to who the caller
        // is; a token naming neither a subject nor a client would make
        // every such caller one (RFC 9068 requires both).
        if claims.sub.is_none() && claims.client_id.is_none() {
            tracing::debug!("bearer token refused: it names no subject and no client");
            return Err(self.refuse(
                StatusCode::UNAUTHORIZED,
                Some(("invalid_token", "the access token is not valid")),
                &self.challenge_scopes(),
            ));
        }
        let missing = self
            .required_scopes
            .iter()
            .any(|s| !claims.scopes.contains(s));
        if missing {
            return Err(self.refuse(
                StatusCode::FORBIDDEN,
                Some((
                    "insufficient_scope",
                    "the access token lacks a scope this resource requires",
                )),
                &self.required_scopes,
            ));
        }
        Ok(AuthContext::principal(claims))
    }
}

/// What a request presented as credentials, read before anything is awaited
/// (a request body is not shareable across an await).
struct Presented {
    token_in_query: bool,
    authorization: Vec<HeaderValue>,
    /// Whose share of the refusal budget the request counts against.
    peer: Option<IpAddr>,
}

impl Presented {
    fn of(request: &Request) -> Self {
        // A token in a URL lands in logs and `Referer` headers; it is refused
        // even next to a good header, so the habit cannot take root.
        let token_in_query = request.uri().query().is_some_and(|q| {
            url::form_urlencoded::parse(q.as_bytes()).any(|(name, _)| name == "access_token")
        });
        Self {
            token_in_query,
            peer: request
                .extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(addr)| crate::application::server::rate::network_of(addr.ip())),
            authorization: request
                .headers()
                .get_all(header::AUTHORIZATION)
                .iter()
                .cloned()
                .collect(),
        }
    }
}

/// The middleware on every MCP route: resolves the caller and records it in
/// the request's extensions, where the handlers read it. Without a resource
/// server every caller is anonymous.
pub(super) async fn authenticate(
    State(guard): State<Option<Arc<ResourceServer>>>,
    mut request: Request,
    next: Next,
) -> Response {
    let caller = match &guard {
        None => AuthContext::anonymous(),
        Some(guard) => match guard.caller(Presented::of(&request)).await {
            Ok(caller) => caller,
            Err(refused) => return refused,
        },
    };
    let mut lasts = None;
    if let (Some(guard), Some(exp)) = (&guard, caller.claims().and_then(|c| c.exp)) {
        if subscribes(&request) {
            match left(exp, guard.leeway) {
                // Past it already (its validator tolerating more than this
                // leeway, or at the edge of the second the validator counts
                // whole): an empty stream would only be opened again.
                Some(Duration::ZERO) => {
                    return guard.refuse(
                        StatusCode::UNAUTHORIZED,
                        Some(("invalid_token", "the access token has expired")),
                        &guard.challenge_scopes(),
                    );
                }
                Some(left) => lasts = tokio::time::Instant::now().checked_add(left),
                None => {}
            }
        }
    }
    request.extensions_mut().insert(caller);
    let response = next.run(request).await;
    match lasts {
        Some(deadline) if is_event_stream(&response) => end_at(response, deadline),
        _ => response,
    }
}

/// Whether `request` opens a subscription, which hears what happens from
/// now on and so lasts only as long as the token that opened it: a stream
/// opened with a token that has since expired would otherwise go on
/// telling its client things a new request with that token would be
/// refused. A GET of `/mcp` resuming a stream (`Last-Event-ID`) brings a
/// request's answer, which is not one; `/sse` resumes nothing.
fn subscribes(request: &Request) -> bool {
    let route = request.uri().path();
    let headers = request.headers();
    let get = request.method() == axum::http::Method::GET;
    if route.ends_with("/sse") {
        get
    } else if route.ends_with("/mcp") {
        (get && !headers.contains_key("last-event-id"))
            || super::headers::header(headers, "mcp-method") == Some("subscriptions/listen")
    } else {
        false
    }
}

/// How long until a token expiring at `exp` (seconds since the epoch) is
/// past `leeway`: zero when it is already; `None` when the system clock is
/// before the epoch and nothing can be said.
fn left(exp: u64, leeway: Duration) -> Option<Duration> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some(
        Duration::from_secs(exp)
            .saturating_add(leeway)
            .saturating_sub(now),
    )
}

fn is_event_stream(response: &Response) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"))
}

/// `response`, its body ended at `deadline` if it has not ended by then.
fn end_at(response: Response, deadline: tokio::time::Instant) -> Response {
    use futures_util::StreamExt as _;
    let (parts, body) = response.into_parts();
    let events = body
        .into_data_stream()
        .take_until(tokio::time::sleep_until(deadline));
    Response::from_parts(parts, axum::body::Body::from_stream(events))
}

/// The answer to a GET on the metadata path.
pub(super) fn metadata(document: &Value) -> Response {
    let mut response = super::respond::json(StatusCode::OK, document);
    // Public and rarely changed: a client may keep it a while.
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::application::server::{AuthClaims, BoxFuture};

    #[derive(Debug)]
    struct Refuse;

    impl TokenValidator for Refuse {
        fn validate<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<AuthClaims, TokenError>> {
            Box::pin(async { Err(TokenError::Invalid("no".to_owned())) })
        }
    }

    #[test]
    fn the_metadata_lives_under_the_well_known_prefix_plus_the_resource_path() {
        let rs = ResourceServer::new("https://mcp.example.com:8443/mcp", Arc::new(Refuse));
        let rs = rs.ok();
        assert_eq!(
            rs.as_ref().map(ResourceServer::metadata_url).as_deref(),
            Some("https://mcp.example.com:8443/.well-known/oauth-protected-resource/mcp")
        );
        // RFC 9728 §3.1: only the slash after the host alone goes.
        for (resource, path) in [
            (
                "https://h.example/mcp/",
                "/.well-known/oauth-protected-resource/mcp/",
            ),
            (
                "https://h.example/",
                "/.well-known/oauth-protected-resource",
            ),
            ("https://h.example", "/.well-known/oauth-protected-resource"),
        ] {
            let rs = ResourceServer::new(resource, Arc::new(Refuse)).ok();
            assert_eq!(
                rs.as_ref().map(ResourceServer::metadata_path).as_deref(),
                Some(path),
                "{resource}"
            );
        }
    }

    #[test]
    fn a_resource_must_be_an_absolute_http_uri_without_fragment() {
        for bad in ["/mcp", "ftp://x/mcp", "https://x/mcp#a", "not a uri"] {
            assert!(ResourceServer::new(bad, Arc::new(Refuse)).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_scope_that_would_break_the_challenge_is_refused() {
        let rs = ResourceServer::new("http://127.0.0.1/mcp", Arc::new(Refuse));
        let rs = rs.map_err(|e| e.to_string());
        assert!(matches!(
            rs.map(|r| r.require_scopes(["a\"b"])),
            Ok(Err(ResourceServerError::Scope(_)))
        ));
    }

    #[test]
    fn a_challenge_names_the_metadata_and_every_scope() {
        let rs = ResourceServer::new("http://127.0.0.1:1/mcp", Arc::new(Refuse))
            .ok()
            .and_then(|r| r.require_scopes(["mcp:use", "tools:read"]).ok());
        let challenge =
            rs.map(|r| r.challenge(Some(("insufficient_scope", "x")), &r.required_scopes));
        assert_eq!(
            challenge.as_deref(),
            Some(
                "Bearer error=\"insufficient_scope\", error_description=\"x\", \
                 resource_metadata=\"http://127.0.0.1:1/.well-known/oauth-protected-resource/mcp\", \
                 scope=\"mcp:use tools:read\""
            )
        );
    }

    /// With every slot holding a live window, a new address is still
    /// counted (the oldest window makes room), so it is held back in turn.
    #[test]
    fn a_full_table_of_addresses_still_holds_a_new_one_back() {
        let mut refusals = Refusals::default();
        let start = Instant::now();
        for n in 0..REFUSAL_ADDRESSES {
            let address = IpAddr::from(u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes());
            refusals.note(address, start);
        }
        let newcomer = IpAddr::from([10, 9, 9, 9]);
        let now = start + Duration::from_secs(1);
        for _ in 0..MAX_REFUSALS {
            assert_eq!(refusals.held_back(newcomer, now), None);
            refusals.note(newcomer, now);
        }
        assert!(refusals.held_back(newcomer, now).is_some());
        // A token found valid before is not held back with its address.
        refusals.accept("the-operators-token", now);
        assert!(refusals.vouched("the-operators-token", now));
        assert!(!refusals.vouched("a-made-up-token", now));
        assert!(!refusals.vouched("the-operators-token", now + ACCEPTED_FOR));
        assert!(refusals.by_address.len() <= REFUSAL_ADDRESSES);
    }
}
