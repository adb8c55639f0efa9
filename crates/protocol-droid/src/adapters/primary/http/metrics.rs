//! `/metrics`: the server's [`Metrics`] for a Prometheus scraper.
//!
//! Behind the same token check as the MCP endpoints: the series say what
//! runs here and how busy it is, which is the operator's to read (a
//! Prometheus scrape config carries a bearer token or an OAuth client).
//! With authorization on, a scrape names a principal even where the
//! anonymous caller may use `/mcp`: a gateway's series name its upstreams,
//! down ones too, which its probes keep to themselves.

use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::App;
use crate::adapters::secondary::metrics::{CONTENT_TYPE, Metrics};
use crate::application::server::AuthContext;

/// `GET /metrics`: every series, read now.
pub(super) async fn scrape(
    State(app): State<App>,
    Extension(caller): Extension<AuthContext>,
) -> Response {
    // Answered as a request without a token is, challenge and all.
    if let Some(refused) = app.options.auth.as_ref().filter(|_| caller.is_anonymous()) {
        return refused.unauthorized();
    }
    match app.options.metrics.as_ref().map(Metrics::render) {
        Some(text) => (
            [(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE))],
            text,
        )
            .into_response(),
        // The route exists only with metrics set.
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
