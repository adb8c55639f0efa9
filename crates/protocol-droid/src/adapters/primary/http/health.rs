//! `/healthz` and `/readyz`: what a supervisor or a load balancer probes.
//!
//! Both answer without a token, as probes carry none, and so say only
//! whether: `/healthz` that the process serves HTTP at all, `/readyz`
//! whether it can do its work now, with a short reason when not (counts,
//! never names, addresses or errors of what it depends on). Both still
//! pass the host check, as every route does.

use std::fmt;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

use super::App;
use super::respond::json as respond;

/// What `/readyz` asks: `Ok` when the server can do its work now, else a
/// short reason for the operator (it is shown to anyone who asks, so it
/// holds no names, addresses or errors).
#[derive(Clone)]
pub struct Readiness(Arc<dyn Fn() -> Result<(), String> + Send + Sync>);

impl Readiness {
    /// A check that runs `check` on every probe; it should be cheap.
    pub fn new(check: impl Fn() -> Result<(), String> + Send + Sync + 'static) -> Self {
        Self(Arc::new(check))
    }

    fn check(&self) -> Result<(), String> {
        (self.0)()
    }
}

impl fmt::Debug for Readiness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Readiness(..)")
    }
}

/// `GET /healthz`: alive. Answered by the same stack as every request, so
/// an answer means connections are accepted and served.
pub(super) async fn alive() -> Response {
    respond(StatusCode::OK, &json!({ "status": "alive" }))
}

/// `GET /readyz`: 200 when the server's [`Readiness`] (none: always) says
/// ready, else 503 with its reason; `store` says whether the store shared
/// with other instances answered when last read, where there is one.
///
/// A store out of reach does not make the instance unready: every instance
/// shares that store, so a balancer would take them all out, while requests
/// that need nothing shared (every 2026-07-28 request without a
/// `requestState`) are still served.
pub(super) async fn ready(State(app): State<App>) -> Response {
    let (status, mut body) = match app
        .options
        .readiness
        .as_ref()
        .map_or(Ok(()), Readiness::check)
    {
        Ok(()) => (StatusCode::OK, json!({ "status": "ready" })),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "status": "not ready", "reason": reason }),
        ),
    };
    if let (Some(reachable), Some(body)) = (app.server.store_reachable(), body.as_object_mut()) {
        let store = if reachable {
            "reachable"
        } else {
            "unavailable"
        };
        body.insert("store".to_owned(), json!(store));
    }
    respond(status, &body)
}
