//! The 2026-07-28 path: one request per POST, no session, and headers that
//! must agree with the body.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::Value;

use super::App;
use super::headers::{VERSION_HEADER, accepts, context, header, takes};
use super::respond::{self, CURRENT, Plan, refusal};
use crate::application::server::Connection;
use crate::application::server::{AuthContext, NoExchange};
use crate::domain::TransportKind;
use crate::domain::ir::JsonObject;
use crate::domain::jsonrpc::{ErrorCode, Incoming, Message, Request};

/// The sentinel wrapping a base64 header value: `=?base64?...?=`.
const B64_PREFIX: &str = "=?base64?";
const B64_SUFFIX: &str = "?=";

/// POST `/mcp` at 2026-07-28.
pub(super) async fn post(
    app: &App,
    headers: &HeaderMap,
    caller: &AuthContext,
    peer: Option<SocketAddr>,
    incoming: Incoming,
) -> Response {
    let request = match incoming {
        Incoming::Single(Message::Request(request)) => request,
        // No core client notification exists on HTTP; an accepted one is
        // acknowledged and nothing more.
        Incoming::Single(Message::Notification(_)) => return StatusCode::ACCEPTED.into_response(),
        Incoming::Single(Message::Response(_)) => {
            return refusal(
                StatusCode::BAD_REQUEST,
                None,
                ErrorCode::INVALID_REQUEST,
                "2026-07-28 clients never send responses",
            );
        }
        Incoming::Batch(_) => {
            return refusal(
                StatusCode::BAD_REQUEST,
                None,
                ErrorCode::INVALID_REQUEST,
                "2026-07-28 has no batches",
            );
        }
    };
    // A connection per request: nothing survives it, as the revision asks.
    let connection = app
        .server
        .connect(
            TransportKind::StreamableHttp,
            Arc::new(NoExchange),
            Arc::new(CurrentSink),
        )
        .stopping_on(app.sessions.stop.clone());
    if let Err(message) = check_headers(headers, &request, &connection, caller) {
        return refusal(
            StatusCode::BAD_REQUEST,
            Some(&request.id),
            ErrorCode::HEADER_MISMATCH,
            &message,
        );
    }
    // A listen is answered by its stream alone (as JSON it would never
    // end), so a client that names no Accept at all gets one.
    let listen = request.method == "subscriptions/listen";
    let streams =
        accepts(headers, "text/event-stream") || (listen && takes(headers, "text/event-stream"));
    if listen && !streams {
        return refusal(
            StatusCode::NOT_ACCEPTABLE,
            Some(&request.id),
            ErrorCode::INVALID_REQUEST,
            "subscriptions/listen is answered with an event stream: Accept must include text/event-stream",
        );
    }
    let (channel, rx) = respond::channel(streams);
    let release = Arc::clone(&channel.release);
    let ctx = context(headers, caller, peer);
    let id = request.id.clone();
    let work = tokio::spawn(CURRENT.scope(channel, async move {
        connection.answer_stateless(request, ctx).await
    }));
    let plan = Plan {
        modern: true,
        streams,
        json: accepts(headers, "application/json"),
        record: None,
        retry: app.options.sse_retry,
    };
    respond::respond(id, work, rx, release, &plan).await
}

/// Sends to the stream of the request being served; there is no other.
struct CurrentSink;

impl crate::application::server::DynFrameSink for CurrentSink {
    fn send(&self, message: Message) -> bool {
        CURRENT
            .try_with(|c| c.tx.try_send(message.into_value()).is_ok())
            .unwrap_or(false)
    }
}

/// A header value, with the base64 sentinel decoded.
fn decoded(value: &str) -> Option<String> {
    let value = value.trim();
    match value
        .strip_prefix(B64_PREFIX)
        .and_then(|v| v.strip_suffix(B64_SUFFIX))
    {
        Some(encoded) => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok()),
        None => Some(value.to_owned()),
    }
}

/// The refusal of a header `name` whose value `sent` is in the base64
/// sentinel form but does not decode to UTF-8 text.
fn undecodable(name: &str, sent: &str) -> String {
    format!("{name} {sent} is not base64 of UTF-8 text inside {B64_PREFIX}…{B64_SUFFIX}")
}

/// The header `name` (`shown` as the revision spells it): `None` when it
/// was not sent, an error saying so when it was but is not text, rather
/// than calling it missing.
fn sent_header<'a>(
    headers: &'a HeaderMap,
    name: &str,
    shown: &str,
) -> Result<Option<&'a str>, String> {
    match header(headers, name) {
        Some(value) => Ok(Some(value)),
        None if headers.contains_key(name) => Err(format!(
            "{shown} is not visible ASCII text (a value outside ASCII is sent base64-encoded)"
        )),
        None => Ok(None),
    }
}

/// Checks the routing headers against the body, as the revision requires.
fn check_headers(
    headers: &HeaderMap,
    request: &Request,
    connection: &Connection,
    caller: &AuthContext,
) -> Result<(), String> {
    let params = request.params.as_ref().and_then(Value::as_object);
    let meta_version = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
        .and_then(Value::as_str);
    match (
        sent_header(headers, VERSION_HEADER, "MCP-Protocol-Version")?,
        meta_version,
    ) {
        (None, _) => return Err("MCP-Protocol-Version is required".to_owned()),
        (Some(h), Some(m)) if h != m => {
            return Err(format!("MCP-Protocol-Version {h} does not match _meta {m}"));
        }
        _ => {}
    }
    match sent_header(headers, "mcp-method", "Mcp-Method")? {
        None => return Err("Mcp-Method is required".to_owned()),
        Some(method) if method != request.method => {
            return Err(format!(
                "Mcp-Method {method} does not match {}",
                request.method
            ));
        }
        Some(_) => {}
    }
    let named = match request.method.as_str() {
        "tools/call" | "prompts/get" => params.and_then(|p| p.get("name")),
        "resources/read" => params.and_then(|p| p.get("uri")),
        // The tasks extension routes its methods by task.
        "tasks/get" | "tasks/update" | "tasks/cancel" => params.and_then(|p| p.get("taskId")),
        _ => None,
    };
    if let Some(name) = named.and_then(Value::as_str) {
        match sent_header(headers, "mcp-name", "Mcp-Name")?.map(|h| (h, decoded(h))) {
            None => return Err("Mcp-Name is required".to_owned()),
            Some((sent, None)) => return Err(undecodable("Mcp-Name", sent)),
            Some((_, Some(h))) if h != name => {
                return Err(format!("Mcp-Name {h} does not match {name}"));
            }
            Some(_) => {}
        }
    }
    if request.method == "tools/call" {
        if let (Some(name), Some(params)) = (named.and_then(Value::as_str), params) {
            check_param_headers(headers, connection, caller, name, params)?;
        }
    }
    Ok(())
}

/// `Mcp-Param-*`: every argument a tool annotates with `x-mcp-header` must be
/// mirrored in its header, value for value.
fn check_param_headers(
    headers: &HeaderMap,
    connection: &Connection,
    caller: &AuthContext,
    tool: &str,
    params: &JsonObject,
) -> Result<(), String> {
    let arguments = params.get("arguments").and_then(Value::as_object);
    // A tool the caller cannot see is checked like one that does not exist,
    // so a header mismatch cannot reveal it.
    let Some(annotated) = connection.param_headers(tool, caller, params) else {
        return Ok(());
    };
    for (property, name) in &annotated {
        let header_name = format!("mcp-param-{}", name.to_ascii_lowercase());
        let sent = match sent_header(headers, &header_name, &format!("Mcp-Param-{name}"))? {
            Some(raw) => match decoded(raw) {
                Some(value) => Some(value),
                None => return Err(undecodable(&format!("Mcp-Param-{name}"), raw)),
            },
            None => None,
        };
        let value = arguments
            .and_then(|a| a.get(property.as_str()))
            .filter(|v| !v.is_null());
        match (value, sent) {
            (None, None) => {}
            (None, Some(_)) => return Err(format!("Mcp-Param-{name} sent without `{property}`")),
            (Some(_), None) => return Err(format!("Mcp-Param-{name} is required")),
            (Some(value), Some(sent)) => {
                let agrees = match value {
                    Value::String(s) => *s == sent,
                    Value::Bool(b) => sent == b.to_string(),
                    Value::Number(n) => sent
                        .parse::<i64>()
                        .ok()
                        .zip(n.as_i64())
                        .is_some_and(|(a, b)| a == b),
                    _ => false,
                };
                if !agrees {
                    return Err(format!("Mcp-Param-{name} does not match `{property}`"));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base64_sentinel_is_decoded_and_plain_values_are_trimmed() {
        assert_eq!(decoded("=?base64?w6l0w6k=?="), Some("été".to_owned()));
        assert_eq!(decoded("  plain "), Some("plain".to_owned()));
        assert_eq!(decoded("=?base64?not base64?="), None);
    }
}
