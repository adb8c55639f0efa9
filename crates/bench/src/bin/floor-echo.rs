//! The floor: hyper and `serde_json` answering an `echo` call with the bytes
//! an MCP server would, and doing nothing else.
//!
//! `floor-echo PORT` serves `http://127.0.0.1:PORT/mcp`. Every POST is
//! parsed, answered with [`floor_reply`] as JSON, and that is all: no
//! routing, no sessions, no header checks, no schema. A legacy `initialize`
//! gets a fixed `Mcp-Session-Id` and a notification gets `202`, so the
//! harness's session scenario runs unchanged. No MCP server on hyper and
//! `serde_json` can be faster than this, which is what makes it a floor.

use std::convert::Infallible;

use anyhow::Context as _;
use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use protocol_droid_bench::floor_reply;
use serde_json::Value;

fn main() -> anyhow::Result<()> {
    let port: u16 = std::env::args()
        .nth(1)
        .context("usage: floor-echo PORT")?
        .parse()
        .context("PORT is a number")?;
    let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
    runtime.block_on(serve(port))
}

async fn serve(port: u16) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .context("binding 127.0.0.1")?;
    loop {
        let (stream, _) = listener.accept().await.context("accepting")?;
        // Small requests and replies: Nagle would only add latency.
        stream.set_nodelay(true).context("setting TCP_NODELAY")?;
        tokio::spawn(async move {
            // A connection that fails ends; the harness reports the requests
            // it lost.
            let _closed = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service_fn(answer))
                .await;
        });
    }
}

async fn answer(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let Ok(body) = request.into_body().collect().await else {
        return Ok(status(StatusCode::BAD_REQUEST));
    };
    let Ok(message) = serde_json::from_slice::<Value>(&body.to_bytes()) else {
        return Ok(status(StatusCode::BAD_REQUEST));
    };
    if message.get("id").is_none() {
        return Ok(status(StatusCode::ACCEPTED));
    }
    let is_initialize = message.get("method").and_then(Value::as_str) == Some("initialize");
    let Ok(bytes) = serde_json::to_vec(&floor_reply(&message)) else {
        return Ok(status(StatusCode::INTERNAL_SERVER_ERROR));
    };
    let mut response = Response::new(Full::new(Bytes::from(bytes)));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if is_initialize {
        response
            .headers_mut()
            .insert("mcp-session-id", HeaderValue::from_static("floor"));
    }
    Ok(response)
}

fn status(code: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = code;
    response
}
