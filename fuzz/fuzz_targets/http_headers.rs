//! The 2026-07-28 HTTP header checks: `MCP-Protocol-Version`, `Mcp-Method`,
//! `Mcp-Name` and `Mcp-Param-*` against the body (`check_headers` in
//! `adapters/primary/http/stateless.rs`), reached through the public
//! `HttpServer::router()` in process, with the client's side of the same
//! contract (`application::client::headers::{param_headers, values,
//! encode}`).
//!
//! The server offers one tool, `t`, whose schema annotates `region`
//! (string), `n` (integer), `flag` (boolean) and the nested `opts.zone`
//! (string) with `x-mcp-header`.
//!
//! Input, by byte 0:
//! - even: the rest is the `params` of a `tools/call`. The target sends it
//!   with the headers a client computes for it. Invariants: a request whose
//!   annotated arguments are strings, booleans, integers or absent is never
//!   refused with `-32020` (header mismatch); the same request with one
//!   mirrored value changed, or with `Mcp-Name` changed, always is.
//! - odd: the rest is `name: value` header lines, an empty line, then the
//!   body, POSTed to `/mcp` as given (after defaults a client would send).
//!   Invariants: no panic, no `500`, and every `application/json` answer is a
//!   JSON-RPC response.
#![no_main]

use std::sync::LazyLock;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Request, StatusCode};
use libfuzzer_sys::fuzz_target;
use protocol_droid::adapters::primary::http::{HttpOptions, HttpServer};
use protocol_droid::application::client::headers::{encode, param_headers, values};
use protocol_droid::application::server::{Server, ToolSpec};
use protocol_droid::domain::ir::{JsonObject, ToolResult};
use protocol_droid::domain::jsonrpc::{Incoming, Message, parse};
use serde_json::{Value, json};
use tower_service::Service;

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
});

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": "integer", "x-mcp-header": "N"},
            "flag": {"type": "boolean", "x-mcp-header": "Flag"},
            "opts": {"type": "object", "properties": {
                "zone": {"type": "string", "x-mcp-header": "Zone"}
            }}
        }
    })
}

static ROUTER: LazyLock<axum::Router> = LazyLock::new(|| {
    RUNTIME.block_on(async {
        let server = Server::builder("fuzz", "1.0.0").build().expect("a server");
        server.add_tool(
            ToolSpec::new("t", "Mirrors arguments into headers.").input_schema(schema()),
            |_call| async move { Ok(ToolResult::text("ok")) },
        );
        HttpServer::new(server, HttpOptions::default()).router()
    })
});

const VERSION: &str = "2026-07-28";

async fn send(request: Request<Body>) -> (StatusCode, Option<String>, Vec<u8>) {
    let mut router = ROUTER.clone();
    std::future::poll_fn(|cx| <axum::Router as Service<Request<Body>>>::poll_ready(&mut router, cx))
        .await
        .expect("a router is always ready");
    let response = <axum::Router as Service<Request<Body>>>::call(&mut router, request).await.expect("routers are infallible");
    let status = response.status();
    let kind = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = tokio::time::timeout(
        Duration::from_secs(10),
        axum::body::to_bytes(response.into_body(), 16 << 20),
    )
    .await
    .expect("the answer to one request ends")
    .map(|b| b.to_vec())
    .unwrap_or_default();
    (status, kind, body)
}

/// The JSON-RPC error code of an answer, if it is an error.
fn error_code(kind: Option<&str>, body: &[u8]) -> Option<i64> {
    if !kind.is_some_and(|k| k.starts_with("application/json")) {
        return None;
    }
    let value: Value = serde_json::from_slice(body).ok()?;
    value.get("error")?.get("code")?.as_i64()
}

fn base() -> axum::http::request::Builder {
    Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("mcp-protocol-version", VERSION)
        .header("mcp-method", "tools/call")
}

/// Whether the client can mirror `value` so that the server agrees.
fn mirrorable(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null | Value::String(_) | Value::Bool(_)) => true,
        Some(Value::Number(n)) => n.is_i64(),
        Some(_) => false,
    }
}

async fn agreed(params: JsonObject) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let bytes = serde_json::to_vec(&body).expect("a Value serialises");
    let name = params.get("name").and_then(Value::as_str).map(str::to_owned);
    let arguments = params.get("arguments").and_then(Value::as_object);
    let mirrored = match (name.as_deref(), &schema()) {
        (Some("t"), Value::Object(schema)) => {
            values(&param_headers(schema).expect("the schema's annotations are valid"), arguments)
        }
        _ => Vec::new(),
    };
    let version_agrees = params
        .get("_meta")
        .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
        .and_then(Value::as_str)
        .is_none_or(|v| v == VERSION);
    let expect_agreement = version_agrees
        && (name.as_deref() != Some("t")
            || ["region", "n", "flag"]
                .iter()
                .all(|p| mirrorable(arguments.and_then(|a| a.get(*p)))));

    let build = |mirrored: &[(String, String)], mcp_name: Option<String>| {
        let mut request = base();
        if let Some(mcp_name) = mcp_name {
            request = request.header("mcp-name", mcp_name);
        }
        for (header, value) in mirrored {
            request = request.header(header.as_str(), value.as_str());
        }
        request
            .body(Body::from(bytes.clone()))
            .expect("client-computed headers are valid")
    };

    let mcp_name = name.as_deref().map(encode);
    let (status, kind, answer) = send(build(&mirrored, mcp_name.clone())).await;
    assert_ne!(status, StatusCode::INTERNAL_SERVER_ERROR);
    let code = error_code(kind.as_deref(), &answer);
    if expect_agreement {
        assert_ne!(
            code,
            Some(-32020),
            "headers computed by the client were refused: {mirrored:?} name {mcp_name:?}\n{}",
            String::from_utf8_lossy(&answer)
        );
    }
    if code == Some(-32020) || !version_agrees {
        return;
    }

    // One mirrored top-level value changed: the server must notice.
    if name.as_deref() == Some("t") {
        let changed = mirrored.iter().enumerate().find_map(|(at, (header, value))| {
            let property = match header.as_str() {
                "Mcp-Param-Region" => "region",
                "Mcp-Param-N" => "n",
                "Mcp-Param-Flag" => "flag",
                _ => return None,
            };
            let other = match arguments?.get(property)? {
                Value::String(s) => encode(&format!("{s}x")),
                Value::Bool(b) => (!b).to_string(),
                Value::Number(n) => n.as_i64()?.wrapping_add(1).to_string(),
                _ => return None,
            };
            (other != *value).then(|| {
                let mut headers = mirrored.clone();
                headers[at].1 = other;
                headers
            })
        });
        if let Some(changed) = changed {
            let (_, kind, answer) = send(build(&changed, mcp_name.clone())).await;
            assert_eq!(
                error_code(kind.as_deref(), &answer),
                Some(-32020),
                "a changed Mcp-Param header was accepted: {changed:?}"
            );
        }
    }
    // Another Mcp-Name: refused.
    if let Some(name) = &name {
        let other = encode(&format!("{name}x"));
        let (_, kind, answer) = send(build(&mirrored, Some(other.clone()))).await;
        assert_eq!(
            error_code(kind.as_deref(), &answer),
            Some(-32020),
            "Mcp-Name {other} was accepted for {name:?}"
        );
    }
}

async fn raw(input: &[u8]) {
    let (head, body) = match input.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&input[..at], &input[at + 2..]),
        None => (input, &[][..]),
    };
    // A listen stream stays open by design; it is not a header check.
    if let Ok(Incoming::Single(Message::Request(r))) = parse(body) {
        if r.method == "subscriptions/listen" {
            return;
        }
    }
    let mut request = Request::builder().method("POST").uri("/mcp");
    let headers = request.headers_mut().expect("a fresh builder");
    for (name, value) in [
        ("host", "localhost"),
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", VERSION),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    for line in head.split(|b| *b == b'\n') {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let value = value.strip_prefix(b" ").unwrap_or(value);
        if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        {
            headers.append(name, value);
        }
    }
    let request = request.body(Body::from(body.to_vec())).expect("a request");
    let (status, kind, answer) = send(request).await;
    assert_ne!(status, StatusCode::INTERNAL_SERVER_ERROR);
    if kind.as_deref().is_some_and(|k| k.starts_with("application/json")) && !answer.is_empty() {
        match parse(&answer) {
            Ok(Incoming::Single(Message::Response(_))) => {}
            Ok(Incoming::Batch(items)) => assert!(
                items
                    .iter()
                    .all(|i| matches!(i, Ok(Message::Response(_)))),
                "a batch answer holds a non-response"
            ),
            other => panic!(
                "a JSON answer that is not a response: {other:?}\n{}",
                String::from_utf8_lossy(&answer)
            ),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let [mode, rest @ ..] = data else {
        return;
    };
    LazyLock::force(&ROUTER);
    if mode % 2 == 0 {
        let Ok(Value::Object(params)) = serde_json::from_slice::<Value>(rest) else {
            return;
        };
        RUNTIME.block_on(agreed(params));
    } else {
        RUNTIME.block_on(raw(rest));
    }
});
