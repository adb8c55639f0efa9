//! What a request's headers say: the MCP header names, content
//! negotiation, and the request context handed to the application (with
//! every credential left behind).

use std::net::SocketAddr;

use axum::http::{HeaderMap, header};

use crate::application::server::{AuthContext, RequestContext};

/// The session header, as the spec spells it (names are case-insensitive).
pub(super) const SESSION_HEADER: &str = "mcp-session-id";
/// The revision header.
pub(super) const VERSION_HEADER: &str = "mcp-protocol-version";

pub(super) fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

pub(super) fn accepts(headers: &HeaderMap, kind: &str) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.split(';').next().unwrap_or_default().trim())
        .any(|v| v == kind || v == "*/*" || (kind.starts_with("text/") && v == "text/*"))
}

/// The request context a transport builds: lowercased headers, and the
/// caller this request's own token named (never the session's).
pub(super) fn context(
    headers: &HeaderMap,
    caller: &AuthContext,
    peer: Option<SocketAddr>,
) -> RequestContext {
    let mut ctx = RequestContext {
        auth: caller.clone(),
        remote_addr: peer,
        ..RequestContext::default()
    };
    for (name, value) in headers {
        // Credentials stay with the transport: handlers have the caller in
        // `ctx.auth`, and a token handed on would be token passthrough.
        if CREDENTIAL_HEADERS.contains(&name.as_str()) {
            continue;
        }
        if let Ok(value) = value.to_str() {
            ctx.headers
                .insert(name.as_str().to_owned(), value.to_owned());
        }
    }
    ctx
}

/// Headers that carry credentials, never copied into a request's context.
const CREDENTIAL_HEADERS: [&str; 3] = ["authorization", "proxy-authorization", "cookie"];
