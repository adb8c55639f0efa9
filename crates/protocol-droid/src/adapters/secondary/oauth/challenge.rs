//! Reading the `Bearer` challenge of a `WWW-Authenticate` header (RFC 9110
//! §11.6.1, RFC 6750 §3, RFC 9728 §5.1).

/// What a resource server said in its `Bearer` challenge.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct BearerChallenge {
    /// `resource_metadata`: where the protected resource metadata is.
    pub(crate) resource_metadata: Option<String>,
    /// `scope`: the scopes the request needs, space-separated.
    pub(crate) scope: Option<String>,
    /// `error`, for example `insufficient_scope` or `invalid_token`.
    pub(crate) error: Option<String>,
}

impl BearerChallenge {
    /// The `Bearer` challenge in `header`, or an empty one when the header
    /// has none (a server may send only `Basic`, or nothing parseable).
    pub(crate) fn parse(header: &str) -> Self {
        let mut found = Self::default();
        let mut in_bearer = false;
        let mut scanner = Scanner::new(header);
        loop {
            scanner.skip_separators();
            let Some(token) = scanner.token() else {
                // Not a token where one must be: skip one character so a
                // malformed header cannot stall the loop.
                if !scanner.bump() {
                    break;
                }
                continue;
            };
            scanner.skip_spaces();
            if scanner.eat('=') {
                if scanner.peek().is_none_or(|c| c == '=' || c == ',') {
                    // The tail of a token68 (`Basic abc==`), not a parameter.
                    while scanner.eat('=') {}
                    continue;
                }
                scanner.skip_spaces();
                let value = scanner.value();
                if in_bearer {
                    found.set(&token, value);
                }
            } else {
                // A token not followed by `=` opens a new challenge.
                in_bearer = token.eq_ignore_ascii_case("bearer");
            }
        }
        found
    }

    fn set(&mut self, name: &str, value: String) {
        let slot = match name.to_ascii_lowercase().as_str() {
            "resource_metadata" => &mut self.resource_metadata,
            "scope" => &mut self.scope,
            "error" => &mut self.error,
            _ => return,
        };
        // RFC 9110: a parameter name appears at most once; keep the first.
        if slot.is_none() {
            *slot = Some(value);
        }
    }

    /// Whether this is RFC 6750's "the token lacks a scope" refusal.
    pub(crate) fn is_insufficient_scope(&self) -> bool {
        self.error.as_deref() == Some("insufficient_scope")
    }
}

struct Scanner<'a> {
    rest: &'a str,
}

impl<'a> Scanner<'a> {
    fn new(text: &'a str) -> Self {
        Self { rest: text }
    }

    fn peek(&self) -> Option<char> {
        self.rest.chars().next()
    }

    fn bump(&mut self) -> bool {
        let mut chars = self.rest.chars();
        let moved = chars.next().is_some();
        self.rest = chars.as_str();
        moved
    }

    fn eat(&mut self, wanted: char) -> bool {
        if self.peek() == Some(wanted) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn skip_spaces(&mut self) {
        self.rest = self.rest.trim_start_matches([' ', '\t']);
    }

    fn skip_separators(&mut self) {
        self.rest = self.rest.trim_start_matches([' ', '\t', ',']);
    }

    /// An RFC 9110 `token`.
    fn token(&mut self) -> Option<String> {
        let end = self
            .rest
            .find(|c: char| !is_tchar(c))
            .unwrap_or(self.rest.len());
        if end == 0 {
            return None;
        }
        let (token, rest) = self.rest.split_at(end);
        self.rest = rest;
        Some(token.to_owned())
    }

    /// A `token` or a `quoted-string` with its escapes undone.
    fn value(&mut self) -> String {
        if !self.eat('"') {
            return self.token().unwrap_or_default();
        }
        let mut value = String::new();
        let mut chars = self.rest.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => {
                    if let Some(escaped) = chars.next() {
                        value.push(escaped);
                    }
                }
                other => value.push(other),
            }
        }
        self.rest = chars.as_str();
        value
    }
}

fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_parameters_keep_their_commas_and_spaces() {
        let parsed = BearerChallenge::parse(
            r#"Bearer error="insufficient_scope", error_description="a, b", scope="mcp:basic mcp:write", resource_metadata="http://localhost:1/.well-known/oauth-protected-resource/mcp""#,
        );
        assert_eq!(parsed.scope.as_deref(), Some("mcp:basic mcp:write"));
        assert!(parsed.is_insufficient_scope());
        assert_eq!(
            parsed.resource_metadata.as_deref(),
            Some("http://localhost:1/.well-known/oauth-protected-resource/mcp")
        );
    }

    #[test]
    fn parameters_of_another_scheme_are_not_taken_for_bearer_ones() {
        let parsed = BearerChallenge::parse(
            r#"Basic realm="x", scope="wrong", Bearer scope=right, DPoP scope="other""#,
        );
        assert_eq!(parsed.scope.as_deref(), Some("right"));
    }

    #[test]
    fn a_token68_before_the_bearer_challenge_is_skipped() {
        let parsed = BearerChallenge::parse(r#"Negotiate abc==, bearer error=invalid_token"#);
        assert_eq!(parsed.error.as_deref(), Some("invalid_token"));
    }

    #[test]
    fn escapes_in_quoted_strings_are_undone() {
        let parsed = BearerChallenge::parse(r#"Bearer scope="a\"b""#);
        assert_eq!(parsed.scope.as_deref(), Some("a\"b"));
    }

    #[test]
    fn garbage_yields_an_empty_challenge() {
        assert_eq!(
            BearerChallenge::parse("=== ,,, \"unterminated"),
            BearerChallenge::default()
        );
    }
}
