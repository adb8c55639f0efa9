//! Configuration errors without the values they quote: serde says
//! `invalid type: string "…", expected a map` of a value of the wrong type,
//! and such a value is often a header's or a token's, written where a table
//! belongs. Used by every form the configuration is read in.

/// A configuration error's message without the values it quotes: its
/// strings, and a value read as an enum's variant.
pub(super) fn without_values(message: &str) -> String {
    let message = without_quoted(message, "string \"", '"');
    without_quoted(&message, "unknown variant `", '`')
}

/// `message` with what follows each `opening`, up to `closing` (past
/// escaped ones), replaced by `…`.
fn without_quoted(message: &str, opening: &str, closing: char) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(opening) {
        let (before, quoted) = rest.split_at(at + opening.len());
        out.push_str(before);
        out.push('…');
        let mut escaped = false;
        let end = quoted.char_indices().find_map(|(i, c)| {
            let closes = c == closing && !escaped;
            escaped = c == '\\' && !escaped;
            closes.then_some(i)
        });
        let Some(end) = end else {
            return out;
        };
        rest = quoted.get(end..).unwrap_or_default();
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_quoted_values_go() {
        assert_eq!(
            without_values(r#"invalid type: string "a \"b\" c", expected a map at line 4"#),
            r#"invalid type: string "…", expected a map at line 4"#
        );
        assert_eq!(
            without_values(r#"invalid value: string "x", and string "y"#),
            r#"invalid value: string "…", and string "…"#
        );
        assert_eq!(
            without_values("unknown field `hedaers`"),
            "unknown field `hedaers`"
        );
        assert_eq!(
            without_values("unknown variant `sk-live-1`, expected `pinned` or `on-first-use`"),
            "unknown variant `…`, expected `pinned` or `on-first-use`"
        );
    }
}
