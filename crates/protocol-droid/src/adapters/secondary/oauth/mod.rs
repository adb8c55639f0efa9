//! An OAuth 2.1 client for MCP servers that require authorization, as the
//! MCP authorization spec (revisions 2025-11-25 and 2026-07-28) describes it.
//!
//! [`OAuthClient`] is an [`Authorizer`]: the HTTP client transport asks it for
//! an `Authorization` header before each request and tells it about each
//! `401`, or `403` with `error="insufficient_scope"`. On such a challenge it
//!
//! 1. finds the protected resource metadata (RFC 9728): the challenge's
//!    `resource_metadata`, else the path-aware well-known URL, else the root
//!    one, and refuses a document whose `resource` does not cover the
//!    endpoint;
//! 2. fetches the metadata of the first authorization server listed there
//!    (RFC 8414 and OIDC Discovery locations, in the spec's order)
//!    and refuses one whose `issuer` is not the one it was looked up for;
//! 3. forgets client credentials and tokens that belong to another
//!    authorization server (SEP-2352);
//! 4. chooses scopes: the challenge's, else the resource's `scopes_supported`,
//!    else none, plus `offline_access` when the server lists it (SEP-2207),
//!    plus, when stepping up, everything asked for or granted before
//!    (SEP-2350);
//! 5. identifies itself with pre-registered credentials, a Client ID Metadata
//!    Document, or Dynamic Client Registration (RFC 7591), in that order;
//! 6. sends the user through the authorization endpoint with PKCE (`S256`),
//!    `state` and RFC 8707's `resource` (the metadata's value, verbatim),
//!    through an [`AuthorizationPrompt`], and checks the response's `state`
//!    and RFC 9207 `iss`;
//! 7. redeems the code at the token endpoint, authenticated as the client is
//!    registered or as the server allows (`client_secret_basic`,
//!    `client_secret_post`, `none`).
//!
//! A `401` is first answered with the refresh token, if one is held. Every
//! answer counts against a budget ([`OAuthClientBuilder::max_attempts`] per
//! [`OAuthClientBuilder::attempt_window`]), so a server that refuses every
//! token cannot keep the client authorizing forever.
//!
//! What this module does not do: open a browser or listen for the redirect
//! (that is the [`AuthorizationPrompt`]'s), persist anything (that is the
//! [`TokenStore`]'s), or speak TLS itself (that is the `reqwest` build's).
//! Tokens, secrets and codes never appear in `Debug` output or logs.

mod challenge;
mod discovery;
mod http;
mod pkce;
mod prompt;
mod registration;
mod scope;
mod store;
mod token;

pub(crate) use token::form_encode;

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use futures_util::future::BoxFuture;
use tokio::sync::Mutex;
use tracing::debug;
use url::Url;

pub use self::prompt::{AuthorizationPrompt, AuthorizationResponse};
pub use self::store::{
    ClientRegistration, MemoryTokenStore, RegistrationKind, TokenSet, TokenStore,
};
use super::authorizer::{AuthError, Authorizer, Challenge};
use super::tls::Trust;

use self::challenge::BearerChallenge;
use self::discovery::{ResourceMetadata, ServerMetadata};
use self::pkce::Pkce;
use self::registration::ClientProfile;
use self::token::Grant;

/// How long one request to an authorization server may take by default.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// How many challenges are answered within [`DEFAULT_WINDOW`] by default.
const DEFAULT_MAX_ATTEMPTS: usize = 3;
/// The window the attempt budget is counted over by default.
const DEFAULT_WINDOW: Duration = Duration::from_secs(60);

/// An [`OAuthClient`] could not be built from what it was given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The MCP endpoint is not an absolute `http` or `https` URL.
    #[error("the MCP endpoint {0:?} is not an http(s) URL")]
    Endpoint(String),
    /// The redirect URI is not an absolute URL.
    #[error("the redirect URI {0:?} is not an absolute URL")]
    RedirectUri(String),
    /// A Client ID Metadata Document URL must be `https` with a path.
    #[error("the client metadata document URL {0:?} is not an https URL with a path")]
    MetadataDocument(String),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Http(String),
}

/// Builds an [`OAuthClient`]; see [`OAuthClient::builder`].
pub struct OAuthClientBuilder {
    endpoint: String,
    redirect_uri: String,
    prompt: Arc<dyn AuthorizationPrompt>,
    client_name: String,
    metadata_document: Option<String>,
    pre_registered: Option<ClientRegistration>,
    store: Option<Arc<dyn TokenStore>>,
    timeout: Duration,
    trust: Trust,
    max_attempts: usize,
    attempt_window: Duration,
}

impl fmt::Debug for OAuthClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthClientBuilder")
            .field("endpoint", &self.endpoint)
            .field("redirect_uri", &self.redirect_uri)
            .field("client_name", &self.client_name)
            .field("metadata_document", &self.metadata_document)
            .field("pre_registered", &self.pre_registered)
            .finish_non_exhaustive()
    }
}

impl OAuthClientBuilder {
    /// The `client_name` sent in a dynamic registration.
    #[must_use]
    pub fn client_name(mut self, name: impl Into<String>) -> Self {
        self.client_name = name.into();
        self
    }

    /// The `https` URL of this client's Client ID Metadata Document, used as
    /// `client_id` at servers that advertise
    /// `client_id_metadata_document_supported`.
    #[must_use]
    pub fn client_metadata_document(mut self, url: impl Into<String>) -> Self {
        self.metadata_document = Some(url.into());
        self
    }

    /// Credentials registered out of band. With an `issuer` they are used only
    /// at that authorization server; without one, at any.
    #[must_use]
    pub fn pre_registered(
        mut self,
        client_id: impl Into<String>,
        client_secret: Option<String>,
        issuer: Option<String>,
    ) -> Self {
        self.pre_registered = Some(ClientRegistration {
            client_id: client_id.into(),
            client_secret,
            token_endpoint_auth_method: None,
            issuer,
            kind: RegistrationKind::PreRegistered,
        });
        self
    }

    /// Where tokens and the registration are kept; a [`MemoryTokenStore`]
    /// unless given.
    #[must_use]
    pub fn token_store(mut self, store: Arc<dyn TokenStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// How long one request to an authorization server may take.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The certificate authorities authorization servers are checked
    /// against; the platform's and the webpki roots unless given.
    #[must_use]
    pub fn trust(mut self, trust: Trust) -> Self {
        self.trust = trust;
        self
    }

    /// How many challenges are answered within [`Self::attempt_window`];
    /// the next one is refused.
    #[must_use]
    pub fn max_attempts(mut self, attempts: usize) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// The window [`Self::max_attempts`] is counted over.
    #[must_use]
    pub fn attempt_window(mut self, window: Duration) -> Self {
        self.attempt_window = window;
        self
    }

    /// The client.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] when the endpoint, redirect URI or metadata document
    /// URL is not a usable URL, or the HTTP client cannot be built.
    pub fn build(self) -> Result<OAuthClient, ConfigError> {
        let endpoint = Url::parse(&self.endpoint)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https") && url.has_host())
            .ok_or_else(|| ConfigError::Endpoint(self.endpoint.clone()))?;
        if Url::parse(&self.redirect_uri).is_err() {
            return Err(ConfigError::RedirectUri(self.redirect_uri));
        }
        let metadata_document = self
            .metadata_document
            .map(|text| {
                Url::parse(&text)
                    .ok()
                    .filter(|url| url.scheme() == "https" && url.path() != "/")
                    .ok_or(ConfigError::MetadataDocument(text))
            })
            .transpose()?;
        let http = http::client(self.timeout, &self.trust)
            .map_err(|error| ConfigError::Http(error.to_string()))?;
        Ok(OAuthClient {
            endpoint,
            profile: ClientProfile {
                client_name: self.client_name,
                redirect_uri: self.redirect_uri,
                metadata_document,
                pre_registered: self.pre_registered,
            },
            prompt: self.prompt,
            store: self
                .store
                .unwrap_or_else(|| Arc::new(MemoryTokenStore::new())),
            http,
            max_attempts: self.max_attempts,
            attempt_window: self.attempt_window,
            state: Mutex::new(FlowState::default()),
            answered: AtomicU64::new(0),
        })
    }
}

/// The OAuth 2.1 authorization-code client for one MCP endpoint; see the
/// [module documentation](self).
pub struct OAuthClient {
    endpoint: Url,
    profile: ClientProfile,
    prompt: Arc<dyn AuthorizationPrompt>,
    store: Arc<dyn TokenStore>,
    http: reqwest::Client,
    max_attempts: usize,
    attempt_window: Duration,
    /// Held for the whole of an answer to a challenge, so concurrent
    /// requests wait for its tokens instead of starting flows of their own.
    state: Mutex<FlowState>,
    /// Counts answered challenges, so a challenge that waited for the lock
    /// while another was answered is retried with those new credentials
    /// rather than answered again.
    answered: AtomicU64,
}

/// What one challenge leaves for the next.
#[derive(Default)]
struct FlowState {
    resource: Option<ResourceMetadata>,
    server: Option<ServerMetadata>,
    /// The scope of the last authorization request, for SEP-2350's union.
    requested_scope: Option<String>,
    /// Whether the tokens held came from a refresh: a `401` for such a token
    /// goes straight to a new authorization, so refreshing cannot loop.
    refreshed: bool,
    /// When each recent challenge was answered.
    attempts: VecDeque<Instant>,
}

impl fmt::Debug for OAuthClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthClient")
            .field("endpoint", &self.endpoint.as_str())
            .field("profile", &self.profile)
            .field("prompt", &self.prompt)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl OAuthClient {
    /// A builder for the client of the MCP endpoint at `endpoint`, whose
    /// authorization step goes through `prompt` and ends at `redirect_uri`.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    ///
    /// use futures_util::future::BoxFuture;
    /// use protocol_droid::adapters::secondary::authorizer::AuthError;
    /// use protocol_droid::adapters::secondary::oauth::{
    ///     AuthorizationPrompt, AuthorizationResponse, OAuthClient,
    /// };
    /// use url::Url;
    ///
    /// /// Opens the authorization URL in a browser and waits for the
    /// /// redirect on a loopback listener.
    /// #[derive(Debug)]
    /// struct Browser;
    ///
    /// impl AuthorizationPrompt for Browser {
    ///     fn authorize<'a>(
    ///         &'a self,
    ///         url: &'a Url,
    ///     ) -> BoxFuture<'a, Result<AuthorizationResponse, AuthError>> {
    ///         Box::pin(async move {
    ///             let redirect = open_and_wait(url).await?;
    ///             Ok(AuthorizationResponse::from_redirect(&redirect))
    ///         })
    ///     }
    /// }
    /// # // Stands in for opening a browser and waiting for its redirect.
    /// # async fn open_and_wait(url: &Url) -> Result<Url, AuthError> {
    /// #     Err(AuthError::Refused(format!("no browser to open {url}")))
    /// # }
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = OAuthClient::builder(
    ///     "https://mcp.example.com/mcp",
    ///     "http://127.0.0.1:8765/callback",
    ///     Arc::new(Browser),
    /// )
    /// .client_metadata_document("https://app.example.com/oauth/client.json")
    /// .build()?;
    /// // `Arc::new(client)` is the HTTP client transport's authorizer.
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn builder(
        endpoint: impl Into<String>,
        redirect_uri: impl Into<String>,
        prompt: Arc<dyn AuthorizationPrompt>,
    ) -> OAuthClientBuilder {
        OAuthClientBuilder {
            endpoint: endpoint.into(),
            redirect_uri: redirect_uri.into(),
            prompt,
            client_name: "protocol-droid".to_owned(),
            metadata_document: None,
            pre_registered: None,
            store: None,
            timeout: DEFAULT_TIMEOUT,
            trust: Trust::default(),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            attempt_window: DEFAULT_WINDOW,
        }
    }

    /// The MCP endpoint this client authorizes for.
    #[must_use]
    pub fn endpoint(&self) -> &Url {
        &self.endpoint
    }

    async fn header(&self) -> Result<Option<String>, AuthError> {
        let mut state = self.state.lock().await;
        let Some(tokens) = self.store.tokens().await? else {
            return Ok(None);
        };
        if !tokens.is_expired(SystemTime::now()) {
            return Ok(Some(bearer(&tokens)));
        }
        // An expired token is refreshed here when the server that issued it
        // is known; otherwise the request goes without one, and the `401`
        // that follows leads through discovery to a refresh or a new grant.
        match self.refresh(&mut state, &tokens).await {
            Ok(Some(fresh)) => Ok(Some(bearer(&fresh))),
            Ok(None) => Ok(None),
            Err(error) => {
                debug!(%error, "refreshing an expired token failed");
                self.store.set_tokens(None).await?;
                Ok(None)
            }
        }
    }

    async fn answer(&self, challenge: &Challenge) -> Result<(), AuthError> {
        let seen = self.answered.load(Ordering::Acquire);
        let mut state = self.state.lock().await;
        if self.answered.load(Ordering::Acquire) != seen {
            // Another request's challenge was answered while this one waited;
            // its retry carries the new credentials, and a challenge that
            // still stands after that comes back here.
            return Ok(());
        }
        let outcome = self.answer_locked(&mut state, challenge).await;
        if outcome.is_ok() {
            self.answered.fetch_add(1, Ordering::AcqRel);
        }
        outcome
    }

    async fn answer_locked(
        &self,
        state: &mut FlowState,
        challenge: &Challenge,
    ) -> Result<(), AuthError> {
        let refused = Url::parse(&challenge.resource)
            .map(|resource| !same_endpoint(&resource, &self.endpoint))
            .unwrap_or(true);
        if refused {
            return Err(AuthError::Refused(format!(
                "this client authorizes for {}, not {}",
                self.endpoint, challenge.resource
            )));
        }
        let bearer = challenge
            .www_authenticate
            .as_deref()
            .map(BearerChallenge::parse)
            .unwrap_or_default();
        let step_up = match challenge.status {
            401 => false,
            403 if bearer.is_insufficient_scope() => true,
            status => {
                return Err(AuthError::Refused(format!(
                    "HTTP {status} without an insufficient_scope challenge cannot be answered with credentials"
                )));
            }
        };
        self.spend_attempt(state)?;
        if !step_up || state.server.is_none() {
            self.discover(state, bearer.resource_metadata.as_deref())
                .await?;
        }
        let Some(server) = state.server.clone() else {
            return Err(AuthError::Refused(
                "no authorization server found".to_owned(),
            ));
        };
        let held = self.store.tokens().await?;
        if !step_up && !state.refreshed {
            if let Some(tokens) = &held {
                match self.refresh(state, tokens).await {
                    Ok(Some(_)) => return Ok(()),
                    Ok(None) => {}
                    Err(error) => debug!(%error, "refresh failed; authorizing anew"),
                }
            }
        }

        let challenged = scope::select(
            bearer.scope.as_deref(),
            state
                .resource
                .as_ref()
                .and_then(|resource| resource.scopes_supported.as_deref()),
        );
        let wanted = if step_up {
            let granted = held.as_ref().and_then(|tokens| tokens.scope.as_deref());
            scope::union([
                state.requested_scope.as_deref(),
                granted,
                challenged.as_deref(),
            ])
        } else {
            challenged
        };
        let wanted = scope::with_offline_access(wanted, server.scopes_supported.as_deref());

        let registration = self.registration(&server).await?;
        let tokens = self
            .authorize(
                &server,
                state.resource.as_ref(),
                &registration,
                wanted.as_deref(),
            )
            .await?;
        self.store.set_tokens(Some(tokens)).await?;
        state.requested_scope = wanted;
        state.refreshed = false;
        Ok(())
    }

    /// Refuses once [`OAuthClientBuilder::max_attempts`] challenges have been
    /// answered within the window.
    fn spend_attempt(&self, state: &mut FlowState) -> Result<(), AuthError> {
        let now = Instant::now();
        while state
            .attempts
            .front()
            .is_some_and(|&at| now.duration_since(at) >= self.attempt_window)
        {
            state.attempts.pop_front();
        }
        if state.attempts.len() >= self.max_attempts {
            return Err(AuthError::Refused(format!(
                "gave up after {} authorization attempts within {:?}",
                state.attempts.len(),
                self.attempt_window
            )));
        }
        state.attempts.push_back(now);
        Ok(())
    }

    /// Steps 1 to 3 of the module documentation.
    async fn discover(
        &self,
        state: &mut FlowState,
        challenge_url: Option<&str>,
    ) -> Result<(), AuthError> {
        let resource =
            discovery::resource_metadata(&self.http, challenge_url, &self.endpoint).await?;
        let server = match &resource {
            Some(resource) => {
                let Some(issuer) = resource.authorization_servers.first() else {
                    return Err(AuthError::Refused(format!(
                        "protected resource {} names no authorization server",
                        resource.resource
                    )));
                };
                discovery::server_metadata(&self.http, issuer).await?
            }
            None => discovery::origin_server_metadata(&self.http, &self.endpoint).await?,
        };
        let pkce = server
            .code_challenge_methods_supported
            .as_ref()
            .is_some_and(|methods| methods.iter().any(|m| m == pkce::S256));
        if !pkce {
            // The MCP spec: without advertised S256 support the client must
            // not proceed, as the code would be unprotected.
            return Err(AuthError::Refused(format!(
                "{} does not advertise PKCE with S256",
                server.issuer
            )));
        }
        // SEP-2352: nothing from one authorization server is presented to another.
        if let Some(registration) = self.store.registration().await? {
            if !registration.belongs_to(&server.issuer) {
                debug!(issuer = %server.issuer, "the authorization server changed; dropping the registration");
                self.store.set_registration(None).await?;
            }
        }
        if let Some(tokens) = self.store.tokens().await? {
            if tokens.issuer != server.issuer {
                debug!(issuer = %server.issuer, "the authorization server changed; dropping the tokens");
                self.store.set_tokens(None).await?;
                state.requested_scope = None;
            }
        }
        state.resource = resource;
        state.server = Some(server);
        Ok(())
    }

    /// The identity to use at `server`, registering if none is at hand.
    async fn registration(&self, server: &ServerMetadata) -> Result<ClientRegistration, AuthError> {
        let held = self.store.registration().await?;
        if let Some(registration) = registration::existing(held.as_ref(), &self.profile, server) {
            if held.as_ref() != Some(&registration) {
                self.store
                    .set_registration(Some(registration.clone()))
                    .await?;
            }
            return Ok(registration);
        }
        let registration = registration::register(&self.http, &self.profile, server).await?;
        self.store
            .set_registration(Some(registration.clone()))
            .await?;
        Ok(registration)
    }

    /// The `resource` parameter: the metadata's value exactly as written, or
    /// the endpoint itself when the server publishes no metadata.
    fn resource_indicator<'a>(&'a self, resource: Option<&'a ResourceMetadata>) -> String {
        match resource {
            Some(resource) => resource.resource.clone(),
            None => {
                let mut endpoint = self.endpoint.clone();
                endpoint.set_fragment(None);
                endpoint.into()
            }
        }
    }

    /// Steps 6 and 7 of the module documentation.
    async fn authorize(
        &self,
        server: &ServerMetadata,
        resource: Option<&ResourceMetadata>,
        registration: &ClientRegistration,
        wanted: Option<&str>,
    ) -> Result<TokenSet, AuthError> {
        let Some(endpoint) = server.authorization_endpoint.as_deref() else {
            return Err(AuthError::Refused(format!(
                "{} publishes no authorization endpoint",
                server.issuer
            )));
        };
        let mut url = Url::parse(endpoint).map_err(|error| {
            AuthError::Server(format!("authorization endpoint {endpoint}: {error}"))
        })?;
        let pkce = Pkce::generate()?;
        let state = pkce::random_token()?;
        let resource_indicator = self.resource_indicator(resource);
        {
            let mut query = url.query_pairs_mut();
            query
                .append_pair("response_type", "code")
                .append_pair("client_id", &registration.client_id)
                .append_pair("redirect_uri", &self.profile.redirect_uri)
                .append_pair("state", &state)
                .append_pair("code_challenge", pkce.challenge())
                .append_pair("code_challenge_method", pkce::S256)
                .append_pair("resource", &resource_indicator);
            if let Some(scope) = wanted {
                query.append_pair("scope", scope);
                // OIDC Core §11: offline access needs explicit consent.
                if scope::contains(scope, scope::OFFLINE_ACCESS) {
                    query.append_pair("prompt", "consent");
                }
            }
        }
        debug!(issuer = %server.issuer, scope = ?wanted, "sending the user to authorize");
        let response = self.prompt.authorize(&url).await?;
        let code = check_response(response, &state, server)?;

        let params = vec![
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", self.profile.redirect_uri.as_str()),
            ("code_verifier", pkce.verifier()),
            ("resource", resource_indicator.as_str()),
        ];
        let grant = Grant {
            params,
            requested_scope: wanted,
        };
        token::request(&self.http, server, registration, grant).await
    }

    /// Refreshes `tokens` at the server that issued them, if it is the one
    /// discovered and a refresh token is held; `Ok(None)` when not possible.
    async fn refresh(
        &self,
        state: &mut FlowState,
        tokens: &TokenSet,
    ) -> Result<Option<TokenSet>, AuthError> {
        let (Some(refresh_token), Some(server)) =
            (tokens.refresh_token.as_deref(), state.server.as_ref())
        else {
            return Ok(None);
        };
        if server.issuer != tokens.issuer {
            return Ok(None);
        }
        let Some(registration) = self
            .store
            .registration()
            .await?
            .filter(|registration| registration.belongs_to(&server.issuer))
        else {
            return Ok(None);
        };
        let resource_indicator = self.resource_indicator(state.resource.as_ref());
        let grant = Grant {
            params: vec![
                ("grant_type", "refresh_token"),
                ("refresh_token", refresh_token),
                ("resource", resource_indicator.as_str()),
            ],
            requested_scope: tokens.scope.as_deref(),
        };
        let mut fresh = token::request(&self.http, server, &registration, grant).await?;
        // RFC 6749 §6: a server that does not rotate refresh tokens omits it.
        if fresh.refresh_token.is_none() {
            fresh.refresh_token = Some(refresh_token.to_owned());
        }
        self.store.set_tokens(Some(fresh.clone())).await?;
        state.refreshed = true;
        Ok(Some(fresh))
    }
}

impl Authorizer for OAuthClient {
    fn authorization(&self) -> BoxFuture<'_, Result<Option<String>, AuthError>> {
        Box::pin(self.header())
    }

    fn challenged<'a>(&'a self, challenge: &'a Challenge) -> BoxFuture<'a, Result<(), AuthError>> {
        Box::pin(self.answer(challenge))
    }
}

/// Checks the authorization response against the request and the server
/// (RFC 6749 §4.1.2, RFC 9207 §2.4) and returns its code.
fn check_response(
    response: AuthorizationResponse,
    state: &str,
    server: &ServerMetadata,
) -> Result<String, AuthError> {
    if response.state.as_deref() != Some(state) {
        return Err(AuthError::Rejected(
            "the authorization response's state is not the one sent".to_owned(),
        ));
    }
    // RFC 9207: a present `iss` is compared whether or not the server
    // advertised it, as a simple string (no normalization: a trailing slash
    // is a different issuer); a missing one is refused only from a server
    // that promised to send it.
    match response.iss.as_deref() {
        Some(iss) if iss != server.issuer => {
            return Err(AuthError::Rejected(format!(
                "the authorization response came from issuer {iss}, not {}",
                server.issuer
            )));
        }
        Some(_) => {}
        None if server.authorization_response_iss_parameter_supported => {
            return Err(AuthError::Rejected(format!(
                "{} promised an iss parameter in its authorization response and sent none",
                server.issuer
            )));
        }
        None => {}
    }
    if let Some(error) = response.error {
        return Err(AuthError::Refused(format!(
            "the authorization server answered {error}"
        )));
    }
    response
        .code
        .ok_or_else(|| AuthError::Server("the authorization response carries no code".to_owned()))
}

fn bearer(tokens: &TokenSet) -> String {
    format!("Bearer {}", tokens.access_token)
}

fn same_endpoint(a: &Url, b: &Url) -> bool {
    let strip = |url: &Url| {
        let mut url = url.clone();
        url.set_fragment(None);
        url
    };
    strip(a) == strip(b)
}
