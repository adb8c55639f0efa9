//! The credentials a transport sends, kept out of what it says of a
//! server's answers.
//!
//! A refusal's body is quoted in the transport's error (the start of it),
//! and from there reaches logs, a gateway's `status` and its admin page.
//! Servers, and the proxies and firewalls in front of them, often echo the
//! request's headers in an error page: the token, an API key in a
//! configured header, the Basic credentials of a URL's userinfo. The
//! transport knows every one of them, so it takes them out of the text
//! before quoting it.

use std::sync::{Mutex, PoisonError};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use percent_encoding::percent_decode_str;
use reqwest::header::{self, HeaderMap, HeaderName};
use serde_json::Value;
use url::Url;

/// What stands in for a credential in quoted text.
const REDACTED: &str = "[redacted]";

/// The shortest text taken for a credential where it is one by its place
/// (an `Authorization` value, a token, the URL's userinfo): shorter values
/// would take ordinary words out of the text.
const SHORTEST: usize = 6;

/// The shortest text taken for a credential where it may as well be an
/// ordinary word (any other configured header's value, a query's value:
/// `X-Tenant: production`, `?transport=streamable`). Keys are longer.
const SHORTEST_ELSEWHERE: usize = 12;

/// How many of the `Authorization` values an authorizer gave are kept: an
/// answer to a request sent with a token since rotated may come after.
const GIVEN_KEPT: usize = 4;

/// The values a transport's requests carry that a quoted answer must not
/// repeat.
#[derive(Debug, Default)]
pub(super) struct Credentials {
    /// Those fixed for the transport's life: its configured headers' and
    /// its URL's.
    fixed: Vec<String>,
    /// Those of the last few `Authorization` values an authorizer gave,
    /// which change (a token refreshed, a file rotated), the newest last.
    given: Mutex<Vec<Vec<String>>>,
}

impl Credentials {
    /// The credentials in `headers` (every value marked sensitive, and
    /// those of the headers that carry credentials) and in `url` (its
    /// userinfo, and its query's values, where keys are often passed).
    pub(super) fn new(headers: &HeaderMap, url: &Url) -> Self {
        let mut fixed = Vec::new();
        for (name, value) in headers {
            if let Ok(text) = value.to_str() {
                if carries_credentials(name) {
                    add_value(&mut fixed, text, SHORTEST);
                } else if value.is_sensitive() {
                    add_value(&mut fixed, text, SHORTEST_ELSEWHERE);
                }
            }
        }
        // A user name alone is sent too (as Basic `user:`), and is often
        // the key itself.
        if !url.username().is_empty() || url.password().is_some() {
            let user = percent_decode_str(url.username()).decode_utf8_lossy();
            let password = url.password().unwrap_or_default();
            let decoded = percent_decode_str(password).decode_utf8_lossy();
            let pair = format!("{user}:{decoded}");
            for value in [
                STANDARD.encode(pair.as_bytes()),
                pair,
                user.into_owned(),
                url.username().to_owned(),
                decoded.into_owned(),
                password.to_owned(),
            ] {
                add_long(&mut fixed, value, SHORTEST);
            }
        }
        // Decoded, and as written (an error page often repeats the request
        // line, encoded as it was sent).
        for (_, value) in url.query_pairs() {
            add_long(&mut fixed, value.into_owned(), SHORTEST_ELSEWHERE);
        }
        for pair in url.query().unwrap_or_default().split('&') {
            let value = pair.split_once('=').map_or(pair, |(_, value)| value);
            add_long(&mut fixed, value.to_owned(), SHORTEST_ELSEWHERE);
        }
        Self {
            fixed: tidy(fixed),
            given: Mutex::default(),
        }
    }

    /// Notes the `Authorization` an authorizer gave for a request.
    pub(super) fn given(&self, authorization: &str) {
        let mut values = Vec::new();
        add_value(&mut values, authorization, SHORTEST);
        let values = tidy(values);
        let mut given = self.given.lock().unwrap_or_else(PoisonError::into_inner);
        if given.last() == Some(&values) {
            return;
        }
        given.retain(|kept| *kept != values);
        given.push(values);
        if given.len() > GIVEN_KEPT {
            given.remove(0);
        }
    }

    /// `text` with every credential the transport sends replaced.
    pub(super) fn redact(&self, text: &str) -> String {
        let given = self.given.lock().unwrap_or_else(PoisonError::into_inner);
        let mut all: Vec<&String> = self.fixed.iter().chain(given.iter().flatten()).collect();
        // The longest first: a token inside a longer value goes with it.
        all.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
        let mut text = text.to_owned();
        for secret in all {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), REDACTED);
            }
        }
        text
    }
}

impl Credentials {
    /// `message` (or each message of a batch) with the credentials taken
    /// out of its error, if it is one: a server that refuses a key often
    /// names it (`invalid API key: …`), and an error goes on to clients
    /// the credentials are not theirs to see. Results are the server's
    /// content and are left as they are.
    pub(super) fn redact_errors(&self, message: &mut Value) {
        match message {
            Value::Array(batch) => batch.iter_mut().for_each(|m| self.redact_errors(m)),
            Value::Object(object) => {
                if let Some(error) = object.get_mut("error") {
                    self.redact_strings(error);
                }
            }
            _ => {}
        }
    }

    /// Every string in `value`, redacted.
    fn redact_strings(&self, value: &mut Value) {
        match value {
            Value::String(text) => {
                let redacted = self.redact(text);
                if redacted != *text {
                    *text = redacted;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_strings(v)),
            Value::Object(members) => members.values_mut().for_each(|v| self.redact_strings(v)),
            _ => {}
        }
    }
}

/// Whether `name` is a header that carries credentials whatever it is
/// marked.
fn carries_credentials(name: &HeaderName) -> bool {
    name == header::AUTHORIZATION || name == header::PROXY_AUTHORIZATION || name == header::COOKIE
}

/// A header's value, and each of its words after the first when it has
/// several (the token of `Bearer TOKEN` echoed alone, but not the scheme's
/// name, an ordinary word), each if at least `shortest` bytes long.
fn add_value(into: &mut Vec<String>, value: &str, shortest: usize) {
    add_long(into, value.to_owned(), shortest);
    let words: Vec<&str> = value.split_whitespace().collect();
    let skip = usize::from(words.len() > 1);
    for word in words.iter().skip(skip) {
        add_long(into, (*word).to_owned(), shortest);
    }
}

/// `value`, if it is at least `shortest` bytes long.
fn add_long(into: &mut Vec<String>, value: String, shortest: usize) {
    if value.len() >= shortest {
        into.push(value);
    }
}

/// Each once.
fn tidy(mut values: Vec<String>) -> Vec<String> {
    values.sort_unstable();
    values.dedup();
    values
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            let mut value = HeaderValue::from_str(value).unwrap_or(HeaderValue::from_static(""));
            value.set_sensitive(*name != "x-plain");
            headers.insert(*name, value);
        }
        headers
    }

    #[test]
    fn an_echoed_header_token_or_userinfo_is_taken_out() -> Result<(), url::ParseError> {
        let url = Url::parse("http://ada:pa%24%24word1@example.com/mcp?key=query%2Fsecret-1")?;
        let credentials = Credentials::new(
            &headers(&[
                ("x-api-key", "key-1234567890"),
                ("x-tenant", "production"),
                ("x-plain", "visible-value"),
            ]),
            &url,
        );
        credentials.given("Bearer token-abcdef");
        let basic = STANDARD.encode("ada:pa$$word1");
        let page = format!(
            "500: you sent Bearer token-abcdef, token-abcdef alone, x-api-key=key-1234567890, \
             Basic {basic}, pa$$word1, query/secret-1, POST /mcp?key=query%2Fsecret-1, \
             and x-plain=visible-value on production"
        );
        let shown = credentials.redact(&page);
        for secret in [
            "token-abcdef",
            "key-1234567890",
            &basic,
            "pa$$word1",
            "query/secret-1",
            "query%2Fsecret-1",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        // What is not a credential stays, a short ordinary header value
        // included.
        assert!(
            shown.contains("visible-value")
                && shown.contains("Basic [redacted]")
                && shown.contains("on production"),
            "{shown}"
        );
        Ok(())
    }

    #[test]
    fn an_error_naming_the_key_is_passed_on_without_it() -> Result<(), url::ParseError> {
        let credentials = Credentials::new(
            &headers(&[("x-api-key", "sk-live-123456")]),
            &Url::parse("http://h/mcp")?,
        );
        let mut refused = serde_json::json!([
            { "jsonrpc": "2.0", "id": 1,
              "error": { "code": -32001, "message": "invalid API key: sk-live-123456",
                         "data": { "sent": ["sk-live-123456"] } } },
            { "jsonrpc": "2.0", "id": 2, "result": { "echo": "sk-live-123456" } }
        ]);
        credentials.redact_errors(&mut refused);
        let at = |pointer: &str| refused.pointer(pointer).and_then(Value::as_str);
        assert_eq!(at("/0/error/message"), Some("invalid API key: [redacted]"));
        assert_eq!(at("/0/error/data/sent/0"), Some("[redacted]"));
        // A result is the server's content.
        assert_eq!(at("/1/result/echo"), Some("sk-live-123456"));
        Ok(())
    }

    #[test]
    fn a_user_name_alone_is_a_credential() -> Result<(), url::ParseError> {
        let url = Url::parse("https://sk_live_abcdef@example.com/mcp")?;
        let credentials = Credentials::new(&HeaderMap::new(), &url);
        let basic = STANDARD.encode("sk_live_abcdef:");
        let shown = credentials.redact(&format!("sent sk_live_abcdef as Basic {basic}"));
        assert_eq!(shown, "sent [redacted] as Basic [redacted]");
        Ok(())
    }

    #[test]
    fn a_rotated_token_is_still_taken_out_for_a_while() -> Result<(), url::ParseError> {
        let credentials = Credentials::new(&HeaderMap::new(), &Url::parse("http://h/mcp")?);
        credentials.given("Bearer first-token");
        credentials.given("Bearer second-token");
        // An answer to a request sent before the rotation may come after.
        assert_eq!(
            credentials.redact("second-token first-token"),
            "[redacted] [redacted]"
        );
        for n in 0..GIVEN_KEPT {
            credentials.given(&format!("Bearer later-token-{n}"));
        }
        assert_eq!(credentials.redact("first-token"), "first-token");
        // Short values are no credentials: `abc` alone stays.
        credentials.given("Bearer abc");
        assert_eq!(
            credentials.redact("Bearer abc, and abc"),
            "[redacted], and abc"
        );
        Ok(())
    }
}
