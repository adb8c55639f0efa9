//! The gateway's admin page: what it serves, what drifted, who is
//! connected, and the main metrics, in a browser, on a listener of its own.
//!
//! The page itself (`/`, `/admin.js`, `/admin.css`) is static and holds no
//! data, so it is served to anyone the host check admits; everything it
//! shows comes from `/api/overview`, `/api/primitives` and `/metrics`, and
//! `/api/approve` changes what the gateway trusts. Those four are behind
//! the same authorization as `/mcp`, and with authorization on they refuse
//! the anonymous caller even where `/mcp` admits it, and (with
//! [`AdminPage::require_scope`]) a caller without the page's own scope. A
//! browser cannot be made to send a token for another site, and a foreign
//! `Origin` is refused by the host check, so a page elsewhere cannot
//! approve anything; an approval must also say it is JSON, which a
//! cross-site form cannot, and name the digest the page showed.
//!
//! The page draws only with text nodes, never markup from the data (tool
//! definitions are the upstreams' to write), and is served with a content
//! security policy that allows only its own script and style.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use super::respond::json as respond;
use super::{HttpOptions, METADATA_PREFIX, accept, auth, body, guard};
use crate::adapters::primary::admin;
use crate::adapters::secondary::metrics::{CONTENT_TYPE, Metrics};
use crate::application::gateway::Gateway;
use crate::application::server::AuthContext;

const INDEX: &str = include_str!("admin_page/index.html");
const SCRIPT: &str = include_str!("admin_page/admin.js");
const STYLE: &str = include_str!("admin_page/admin.css");

/// The largest body the page takes: an approval names a few tools.
const MAX_BODY: usize = 64 * 1024;

/// The most tool ids one approval may name.
const MAX_APPROVALS: usize = 256;

/// How long each upstream may take to list its prompts and resources for
/// the page.
const LISTING_TIMEOUT: Duration = Duration::from_secs(5);

/// The admin page of one gateway.
#[derive(Clone)]
pub struct AdminPage {
    page: Arc<Page>,
}

#[derive(Clone)]
struct Page {
    gateway: Gateway,
    options: HttpOptions,
    scope: Option<String>,
}

impl std::fmt::Debug for AdminPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminPage")
            .field("options", &self.page.options)
            .finish_non_exhaustive()
    }
}

impl AdminPage {
    /// The page of `gateway`, served with `options`: its host policy, its
    /// authorization (the same resource server as `/mcp`'s), its
    /// connection limits and TLS, and the [`Metrics`] its charts read.
    #[must_use]
    pub fn new(gateway: Gateway, options: HttpOptions) -> Self {
        Self {
            page: Arc::new(Page {
                gateway,
                options,
                scope: None,
            }),
        }
    }

    /// With authorization on, asks every caller of the page's data and
    /// approvals for `scope` besides what `/mcp` asks: a token good for
    /// calling tools is not thereby good for approving them.
    #[must_use]
    pub fn require_scope(self, scope: impl Into<String>) -> Self {
        let Page {
            gateway, options, ..
        } = Arc::unwrap_or_clone(self.page);
        Self {
            page: Arc::new(Page {
                gateway,
                options,
                scope: Some(scope.into()),
            }),
        }
    }

    /// The routes, for serving or for embedding.
    pub fn router(&self) -> Router {
        let options = &self.page.options;
        let resource_server = options.auth.clone().map(Arc::new);
        let mut router = Router::new()
            .route("/api/overview", get(overview))
            .route("/api/primitives", get(primitives))
            .route("/api/approve", post(approve))
            .route("/metrics", get(metrics))
            // As on /mcp: a body is read whole within its deadline, inside
            // the token check.
            .route_layer(axum::middleware::from_fn_with_state(
                body::BodyLimits {
                    max_bytes: MAX_BODY,
                    timeout: options.body_timeout,
                    budget: Arc::new(body::BodyBudget::new(
                        options.body_bytes_in_flight.max(MAX_BODY),
                        options.body_bytes_in_flight_per_address.max(MAX_BODY),
                    )),
                },
                body::read_whole,
            ))
            .route_layer(axum::middleware::from_fn_with_state(
                resource_server.clone(),
                auth::authenticate,
            ))
            .route_layer(axum::middleware::from_fn(own_pages_only))
            .route(
                "/",
                get(|| async { asset(INDEX, "text/html; charset=utf-8") }),
            )
            .route(
                "/admin.js",
                get(|| async { asset(SCRIPT, "text/javascript; charset=utf-8") }),
            )
            .route(
                "/admin.css",
                get(|| async { asset(STYLE, "text/css; charset=utf-8") }),
            );
        if let Some(resource_server) = resource_server {
            // Made for each request: the scopes it lists may change.
            let described = resource_server;
            router = router.route(
                METADATA_PREFIX,
                get(move || {
                    let document = described.metadata();
                    async move { auth::metadata(&document) }
                }),
            );
        }
        router
            .layer(axum::middleware::from_fn_with_state(
                options.hosts.clone(),
                guard::check,
            ))
            .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
            .with_state(Arc::clone(&self.page))
    }

    /// Serves on `listener` until `shutdown` resolves.
    ///
    /// # Errors
    ///
    /// An I/O error from the listener.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let admission = accept::Admission::new(&self.page.options);
        accept::run(listener, self.router(), admission, shutdown).await
    }
}

/// The page's data and approvals, asked for by the page itself (or by a
/// client that is no browser): a request another site's page made the
/// browser send, which carries no `Origin` to check when it is an image or
/// a `no-cors` fetch, is refused before anything is asked of the
/// gateway's upstreams. Nothing answered here is sniffed for another type.
async fn own_pages_only(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let foreign = request
        .headers()
        .get("sec-fetch-site")
        .is_some_and(|site| site != "same-origin" && site != "none");
    let mut response = if foreign {
        respond(
            StatusCode::FORBIDDEN,
            &json!({ "ok": false, "error": "a request from another site's page" }),
        )
    } else {
        next.run(request).await
    };
    response.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// A static part of the page, with the headers that keep it to itself.
fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = (
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        body,
    )
        .into_response();
    secure(response.headers_mut());
    response
}

/// Only the page's own script and style, never framed, never cached, no
/// referrer sent on.
fn secure(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// With authorization on, a 401 for the anonymous caller and a 403 for one
/// without the page's scope: looking at and changing what the gateway
/// trusts is not for anyone who may call its tools.
fn unnamed(page: &Page, caller: &AuthContext) -> Option<Response> {
    let resource_server = page.options.auth.as_ref()?;
    let (status, error) = if caller.is_anonymous() {
        (
            StatusCode::UNAUTHORIZED,
            "the admin page needs a token naming a principal".to_owned(),
        )
    } else {
        match &page.scope {
            Some(scope) if !caller.has_scope(scope) => (
                StatusCode::FORBIDDEN,
                format!("the admin page needs the scope {scope}"),
            ),
            _ => return None,
        }
    };
    let mut refused = respond(status, &json!({ "error": error }));
    // The challenge names what `/mcp` requires of every token and the
    // page's own scope, not the tools' scopes: a client that follows it
    // asks for a token this page takes.
    let mut scopes = resource_server.required_scopes().to_vec();
    if let Some(scope) = page.scope.as_ref().filter(|s| !scopes.contains(s)) {
        scopes.push(scope.clone());
    }
    let code = (status == StatusCode::FORBIDDEN).then_some(("insufficient_scope", error.as_str()));
    if let Ok(challenge) = HeaderValue::from_str(&resource_server.challenge(code, &scopes)) {
        refused
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, challenge);
    }
    Some(refused)
}

/// A JSON answer, never cached.
fn data(value: &Value) -> Response {
    let mut response = respond(StatusCode::OK, value);
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `GET /api/overview`: everything the page shows but the metrics.
async fn overview(
    State(page): State<Arc<Page>>,
    Extension(caller): Extension<AuthContext>,
) -> Response {
    if let Some(refused) = unnamed(&page, &caller) {
        return refused;
    }
    let gateway = &page.gateway;
    let catalog: Vec<Value> = gateway
        .catalog()
        .into_iter()
        .map(|(id, digest, provenance)| {
            json!({
                "id": id.as_str(),
                "upstream": id.as_str().split_once('/').map_or("", |(u, _)| u),
                "digest": digest.to_string(),
                "provenance": provenance.to_string(),
                "verified": provenance.is_verified(),
            })
        })
        .collect();
    let sessions: Vec<Value> = gateway
        .sessions()
        .into_iter()
        .map(|s| {
            json!({
                "session": s.session.to_string(),
                "core": s.core.iter().map(|id| id.as_str()).collect::<Vec<_>>(),
                "activated": s.activated.iter().map(|id| id.as_str()).collect::<Vec<_>>(),
            })
        })
        .collect();
    let reports: Vec<Value> = gateway
        .reports()
        .into_iter()
        .map(|r| {
            json!({
                "upstream": r.upstream,
                "method": r.report.method,
                "revision": r.report.report.target().as_str(),
                "downgrades": r.report.report.downgrades().iter().map(|d| json!({
                    "feature": format!("{:?}", d.feature),
                    "detail": d.detail,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    data(&json!({
        "status": admin::status(gateway, true),
        "catalog": catalog,
        "sessions": sessions,
        "reports": reports,
    }))
}

/// `GET /api/primitives`: each upstream's prompts, resources and
/// templates, asked of it now (the page asks seldom: it costs every
/// upstream a listing).
async fn primitives(
    State(page): State<Arc<Page>>,
    Extension(caller): Extension<AuthContext>,
) -> Response {
    if let Some(refused) = unnamed(&page, &caller) {
        return refused;
    }
    let listed: Vec<Value> = page
        .gateway
        .primitives(LISTING_TIMEOUT)
        .await
        .into_iter()
        .map(|p| {
            json!({
                "upstream": p.upstream,
                "prompts": p.prompts,
                "resources": p.resources,
                "templates": p.templates,
                "unlisted": p.unlisted,
            })
        })
        .collect();
    data(&json!({ "upstreams": listed }))
}

/// What `POST /api/approve` takes: the tools as the page showed them.
#[derive(serde::Deserialize)]
struct Approve {
    ids: Vec<String>,
}

/// `POST /api/approve`: approves the tools named, all or none.
async fn approve(
    State(page): State<Arc<Page>>,
    Extension(caller): Extension<AuthContext>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if let Some(refused) = unnamed(&page, &caller) {
        return refused;
    }
    // One type alone: with two, which one the body is read by is unsure.
    let mut types = headers.get_all(header::CONTENT_TYPE).iter();
    let is_json = types
        .next()
        .filter(|_| types.next().is_none())
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return respond(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            &json!({ "ok": false, "error": "an approval is sent as application/json" }),
        );
    }
    let Ok(Approve { ids }) = serde_json::from_slice::<Approve>(&body) else {
        return respond(
            StatusCode::BAD_REQUEST,
            &json!({ "ok": false, "error": "expected {\"ids\": [\"ID@DIGEST\", …]}" }),
        );
    };
    if ids.is_empty() || ids.len() > MAX_APPROVALS {
        return respond(
            StatusCode::BAD_REQUEST,
            &json!({ "ok": false, "error": format!("name 1 to {MAX_APPROVALS} tools") }),
        );
    }
    // What the page showed, digest and all: a tool approved from a page
    // must be the definition that page put in front of the operator.
    if let Some(bare) = ids.iter().find(|id| admin::seen(id).1.is_none()) {
        return respond(
            StatusCode::BAD_REQUEST,
            &json!({ "ok": false, "error": format!("{bare} names no digest: send ID@DIGEST as shown") }),
        );
    }
    // And the definition itself: a change too large to keep, or not among
    // the changes kept, was never on the page, so it is approved where it
    // can be read (`droid gateway approve`, with the upstream's own word).
    let drift = page.gateway.drift();
    if let Some(unseen) = ids.iter().find(|id| {
        let (tool, digest) = admin::seen(id);
        !drift.iter().any(|d| {
            d.id == tool && d.new == digest && d.old.is_some() && d.new_definition.is_some()
        })
    }) {
        return respond(
            StatusCode::CONFLICT,
            &json!({ "ok": false, "error": format!(
                "{unseen} is not a change this page shows in full; read the upstream's \
                 definition and approve it with `droid gateway approve`"
            ) }),
        );
    }
    let reply = admin::approve(&page.gateway, &ids).await;
    let status = if reply.get("ok") == Some(&Value::Bool(true)) {
        tracing::warn!(
            target: "droid",
            subject = caller.subject(),
            tools = ?ids,
            "approved on the admin page"
        );
        StatusCode::OK
    } else {
        StatusCode::CONFLICT
    };
    respond(status, &reply)
}

/// `GET /metrics`: what the charts plot.
async fn metrics(
    State(page): State<Arc<Page>>,
    Extension(caller): Extension<AuthContext>,
) -> Response {
    if let Some(refused) = unnamed(&page, &caller) {
        return refused;
    }
    let text = page
        .options
        .metrics
        .as_ref()
        .map(Metrics::render)
        .unwrap_or_default();
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE)),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        text,
    )
        .into_response()
}
