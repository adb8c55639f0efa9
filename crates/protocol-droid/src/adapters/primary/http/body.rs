//! Reading a request body whole, within a size and a deadline.
//!
//! hyper bounds how long a request head may take, but not its body: a
//! client that sends a `Content-Length` of a megabyte and then a byte a
//! minute would hold its handler, and the memory read so far, for as long as
//! it likes. Every body is read here, before any handler sees it, and a body
//! that does not arrive in time is answered with 408.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};

use super::respond::error_body;
use crate::domain::jsonrpc::ErrorCode;

/// The limits the middleware applies.
#[derive(Clone, Copy, Debug)]
pub(super) struct BodyLimits {
    pub(super) max_bytes: usize,
    pub(super) timeout: Duration,
}

/// The middleware: 413 for a body over the size, 408 for one that is not
/// all there in time, 400 for one cut short.
pub(super) async fn read_whole(
    State(limits): State<BodyLimits>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    // A length announced past the limit is refused before a byte of the
    // body is read or waited for.
    let announced = parts
        .headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    if announced.is_some_and(|length| {
        usize::try_from(length).map_or(true, |length| length > limits.max_bytes)
    }) {
        return refused(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("the body is larger than {} bytes", limits.max_bytes),
        );
    }
    let read = tokio::time::timeout(limits.timeout, axum::body::to_bytes(body, limits.max_bytes));
    let bytes = match read.await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(error)) => {
            // `to_bytes` reports an exceeded limit as an error whose source
            // is the limit; anything else is the connection failing.
            let too_large = std::error::Error::source(&error)
                .is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
            let (status, message) = if too_large {
                (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("the body is larger than {} bytes", limits.max_bytes),
                )
            } else {
                (StatusCode::BAD_REQUEST, "the body was cut short".to_owned())
            };
            return refused(status, &message);
        }
        Err(_) => {
            return refused(
                StatusCode::REQUEST_TIMEOUT,
                &format!("the body did not arrive within {:?}", limits.timeout),
            );
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

fn refused(status: StatusCode, message: &str) -> Response {
    let mut response = error_body(None, ErrorCode::INVALID_REQUEST, message);
    *response.status_mut() = status;
    // The rest of the body may still be on its way; the connection cannot
    // carry another request after it.
    response.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    response.into_response()
}
