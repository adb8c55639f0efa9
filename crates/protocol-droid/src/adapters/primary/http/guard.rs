//! DNS-rebinding protection: the `Host` and `Origin` a request may carry.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::respond::error_body;
use crate::domain::jsonrpc::ErrorCode;

/// Which hosts a request may name.
///
/// A browser page on `evil.example` that resolves its own name to 127.0.0.1
/// still sends `Host: evil.example`; refusing every name but the loopback
/// ones is what keeps such a page from reaching a local server.
#[derive(Clone, Debug)]
pub struct HostPolicy {
    names: Vec<String>,
}

impl HostPolicy {
    /// `localhost`, `127.0.0.1` and `[::1]`, on any port.
    #[must_use]
    pub fn loopback() -> Self {
        Self {
            names: vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()],
        }
    }

    /// The loopback names plus `name` (a host name without its port).
    #[must_use]
    pub fn allowing(mut self, name: impl Into<String>) -> Self {
        self.names.push(name.into().to_ascii_lowercase());
        self
    }

    /// The loopback names plus the address a server is bound to (an IPv6
    /// one in brackets, as a `Host` names it): a server on 127.0.0.2 is
    /// reached by that address. An unspecified one (`0.0.0.0`, `::`)
    /// names no host, and adds nothing.
    #[must_use]
    pub fn allowing_address(self, address: std::net::IpAddr) -> Self {
        match address {
            address if address.is_unspecified() => self,
            std::net::IpAddr::V4(v4) => self.allowing(v4.to_string()),
            std::net::IpAddr::V6(v6) => self.allowing(format!("[{v6}]")),
        }
    }

    /// Whether `authority` (a `Host`, or an origin's host and port) names
    /// an allowed host. It is read as the URI grammar reads it, and only a
    /// host with at most a port passes: user information (`a@b`) makes the
    /// host the part after `@`, and no client sends it in a `Host`.
    fn admits(&self, authority: &str) -> bool {
        let Ok(authority) = authority
            .trim()
            .to_ascii_lowercase()
            .parse::<axum::http::uri::Authority>()
        else {
            return false;
        };
        let host = authority.host();
        // What follows the host is nothing or a port of digits.
        let port = authority
            .as_str()
            .strip_prefix(host)
            .map(|rest| rest.strip_prefix(':').unwrap_or(rest));
        let only_a_port = port.is_some_and(|port| port.bytes().all(|b| b.is_ascii_digit()));
        only_a_port && self.names.iter().any(|n| n == host)
    }

    fn admits_origin(&self, origin: &str) -> bool {
        // `null` is what a sandboxed or file page sends; no site vouches for it.
        let Some((scheme, rest)) = origin.split_once("://") else {
            return false;
        };
        matches!(scheme, "http" | "https") && self.admits(rest.trim_end_matches('/'))
    }
}

fn refused(status: StatusCode, message: &str) -> Response {
    (
        status,
        error_body(None, ErrorCode::INVALID_REQUEST, message),
    )
        .into_response()
}

/// The middleware: 403 for a foreign `Origin`, 403 for a foreign `Host`
/// (or a foreign authority in an absolute-form target, which stands in for
/// `Host`), 400 for no `Host` at all or for two of either header, which
/// would leave the check to whichever one a reader takes.
pub(super) async fn check(
    State(policy): State<HostPolicy>,
    request: Request,
    next: Next,
) -> Response {
    let headers: &HeaderMap = request.headers();
    for name in [header::HOST, header::ORIGIN] {
        if headers.get_all(&name).iter().nth(1).is_some() {
            return refused(
                StatusCode::BAD_REQUEST,
                &format!("more than one {name} header"),
            );
        }
    }
    let host = request
        .uri()
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| {
            headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_owned)
        });
    match host {
        None => {
            return refused(StatusCode::BAD_REQUEST, "a Host header is required");
        }
        Some(host) if !policy.admits(&host) => {
            return refused(StatusCode::FORBIDDEN, &format!("Invalid Host: {host}"));
        }
        Some(_) => {}
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let text = origin.to_str().unwrap_or_default();
        if !policy.admits_origin(text) {
            // Shown as sent, bytes that are not text included, and not at
            // any length.
            let shown: String = String::from_utf8_lossy(origin.as_bytes())
                .chars()
                .take(200)
                .collect();
            return refused(StatusCode::FORBIDDEN, &format!("Invalid Origin: {shown}"));
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_pass_on_any_port_and_others_do_not() {
        let policy = HostPolicy::loopback();
        for ok in [
            "localhost",
            "localhost:3000",
            "127.0.0.1:8080",
            "[::1]:1",
            "LOCALHOST",
        ] {
            assert!(policy.admits(ok), "{ok}");
        }
        for bad in [
            "evil.example.com",
            "evil.example.com:3000",
            "127.0.0.1.evil.com",
            "[::2]:1",
            "127.0.0.1:80@evil.com",
            "evil.com@127.0.0.1",
            "localhost:http",
            "localhost/x",
            "",
        ] {
            assert!(!policy.admits(bad), "{bad}");
        }
    }

    #[test]
    fn the_address_a_server_is_bound_to_is_a_host_it_is_reached_by() {
        let policy = HostPolicy::loopback()
            .allowing_address(std::net::IpAddr::from([127, 0, 0, 2]))
            .allowing_address(std::net::IpAddr::from([0_u16; 8]));
        assert!(policy.admits("127.0.0.2:8080"));
        assert!(!policy.admits("127.0.0.3:8080"));
        assert!(!policy.admits("[::]:8080"));
        let v6 = HostPolicy::loopback()
            .allowing_address(std::net::IpAddr::from([0xfd00, 0, 0, 0, 0, 0, 0, 1]));
        assert!(v6.admits("[fd00::1]:8080"));
    }

    #[test]
    fn an_origin_must_be_a_web_origin_on_an_allowed_host() {
        let policy = HostPolicy::loopback();
        assert!(policy.admits_origin("http://localhost:5173"));
        assert!(policy.admits_origin("https://127.0.0.1"));
        assert!(!policy.admits_origin("http://evil.example.com"));
        assert!(!policy.admits_origin("null"));
        assert!(!policy.admits_origin("file://localhost"));
    }

    #[test]
    fn an_added_name_is_allowed() {
        assert!(
            HostPolicy::loopback()
                .allowing("mcp.internal")
                .admits("mcp.internal:443")
        );
    }
}
