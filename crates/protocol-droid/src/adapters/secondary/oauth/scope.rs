//! Which scopes to ask for (the MCP spec's scope selection strategy, SEP-2207
//! for `offline_access`, SEP-2350 for step-up).

/// RFC 6749 scope values that mean "issue a refresh token" to servers that
/// gate refresh tokens on it (OIDC Core §11).
pub(crate) const OFFLINE_ACCESS: &str = "offline_access";

/// The scopes to request: the challenge's `scope`, else every scope in the
/// protected resource metadata's `scopes_supported`, else none at all (the
/// parameter is then omitted and the server applies its default).
pub(crate) fn select(
    challenge: Option<&str>,
    resource_supported: Option<&[String]>,
) -> Option<String> {
    let selected = match challenge {
        Some(scope) => scope.to_owned(),
        None => resource_supported?.join(" "),
    };
    normalize(&selected)
}

/// Adds `offline_access` when the authorization server lists it among its
/// `scopes_supported` (SEP-2207), and only then: a server that does not know
/// it may refuse the whole request. Nothing is added to an omitted scope,
/// which would narrow the server's default to `offline_access` alone.
pub(crate) fn with_offline_access(
    scope: Option<String>,
    server_supported: Option<&[String]>,
) -> Option<String> {
    let scope = scope?;
    let supported = server_supported.is_some_and(|list| list.iter().any(|s| s == OFFLINE_ACCESS));
    if supported && !contains(&scope, OFFLINE_ACCESS) {
        Some(format!("{scope} {OFFLINE_ACCESS}"))
    } else {
        Some(scope)
    }
}

/// The union of scope strings, first occurrences first (SEP-2350: stepping
/// up for one operation must not drop what another was granted).
pub(crate) fn union<'a>(scopes: impl IntoIterator<Item = Option<&'a str>>) -> Option<String> {
    let mut merged: Vec<&str> = Vec::new();
    for value in scopes.into_iter().flatten().flat_map(words) {
        if !merged.contains(&value) {
            merged.push(value);
        }
    }
    (!merged.is_empty()).then(|| merged.join(" "))
}

/// Whether the space-separated `scope` contains `value`.
pub(crate) fn contains(scope: &str, value: &str) -> bool {
    words(scope).any(|s| s == value)
}

/// The scopes in `scope`, separated by the space character alone (RFC 6749
/// §3.3), as the resource server reads a token's.
fn words(scope: &str) -> impl Iterator<Item = &str> {
    scope.split(' ').filter(|word| !word.is_empty())
}

fn normalize(scope: &str) -> Option<String> {
    union([Some(scope)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(values: &[&str]) -> Vec<String> {
        values.iter().map(|&s| s.to_owned()).collect()
    }

    #[test]
    fn the_challenge_scope_wins_over_scopes_supported() {
        let supported = list(&["a", "b"]);
        assert_eq!(select(Some("c"), Some(&supported)).as_deref(), Some("c"));
        assert_eq!(select(None, Some(&supported)).as_deref(), Some("a b"));
        assert_eq!(select(None, None), None);
        assert_eq!(select(None, Some(&[])), None);
    }

    #[test]
    fn offline_access_is_added_only_when_the_server_lists_it() {
        let with = list(&["mcp:basic", OFFLINE_ACCESS]);
        let without = list(&["mcp:basic"]);
        assert_eq!(
            with_offline_access(Some("mcp:basic".to_owned()), Some(&with)).as_deref(),
            Some("mcp:basic offline_access")
        );
        assert_eq!(
            with_offline_access(Some("mcp:basic".to_owned()), Some(&without)).as_deref(),
            Some("mcp:basic")
        );
        assert_eq!(with_offline_access(None, Some(&with)), None);
        assert_eq!(
            with_offline_access(Some("offline_access x".to_owned()), Some(&with)).as_deref(),
            Some("offline_access x")
        );
    }

    #[test]
    fn the_union_keeps_order_and_drops_repeats() {
        assert_eq!(
            union([Some("a b"), None, Some("b c"), Some(" a  d ")]).as_deref(),
            Some("a b c d")
        );
        assert_eq!(union([None, Some("  ")]), None);
    }
}
