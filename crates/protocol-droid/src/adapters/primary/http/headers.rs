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

/// The first MCP header (`MCP-Protocol-Version`, `Mcp-Session-Id`,
/// `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`, any `Mcp-…`) sent more than
/// once. Each is read as one value and routes or is checked against the
/// body; with two, a proxy may read the copy this server does not (or both,
/// joined), and route or allow by a name other than the one served.
pub(super) fn repeated_mcp_header(headers: &HeaderMap) -> Option<&header::HeaderName> {
    headers.keys().find(|name| {
        name.as_str().starts_with("mcp-") && headers.get_all(*name).iter().nth(1).is_some()
    })
}

/// Whether the `Accept` headers take the media type `kind`: named, or in a
/// range that covers it, and not with `q=0`, which refuses it.
pub(super) fn accepts(headers: &HeaderMap, kind: &str) -> bool {
    let family = kind.split('/').next().unwrap_or_default();
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|range| {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or_default().trim();
            let covers = media.eq_ignore_ascii_case(kind)
                || media == "*/*"
                || media
                    .strip_suffix("/*")
                    .is_some_and(|f| f.eq_ignore_ascii_case(family));
            covers && !parts.any(refuses)
        })
}

/// Whether the request takes `kind`: as [`accepts`], or because it has no
/// `Accept` at all, which accepts anything (RFC 9110 §12.5.1).
pub(super) fn takes(headers: &HeaderMap, kind: &str) -> bool {
    !headers.contains_key(header::ACCEPT) || accepts(headers, kind)
}

/// Whether a media range's parameter is a quality of zero.
fn refuses(parameter: &str) -> bool {
    parameter.split_once('=').is_some_and(|(name, value)| {
        name.trim().eq_ignore_ascii_case("q") && value.trim().parse::<f32>().is_ok_and(|q| q <= 0.0)
    })
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
