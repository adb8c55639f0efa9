//! How upstreams' prompts and resources are named to the gateway's
//! sessions, so that two upstreams' names never collide and every name
//! leads back to its upstream.
//!
//! - A prompt is named as a tool is: `upstream/name` (an upstream's name
//!   holds no `/`, so the first one splits it).
//! - A resource URI, and a resource template, is prefixed with the
//!   upstream's *prefix* and a `+`: `test://static/1` of `everything`
//!   becomes `everything+test://static/1`. The prefix joins the URI's
//!   scheme, so the result is still a URI of the same shape (clients parse
//!   and validate them), and a template still expands to the URIs it
//!   names. A scheme is lowercase letters, digits, `-` and `.`, starting
//!   with a letter; an upstream whose name is not one gets a prefix made of
//!   it with a digest of the name added, so distinct names never share one.

use sha2::{Digest, Sha256};

/// The most characters of an upstream's name.
pub const MAX_UPSTREAM_NAME: usize = 64;

/// The most characters of a tool's name, as an upstream lists it: what the
/// revisions ask of a tool's name.
pub const MAX_TOOL_NAME: usize = 128;

/// Whether `name` reads as it is: not empty, at most `max` characters, not
/// starting or ending with white space, and with no control character (a
/// newline, an escape), no line or paragraph separator and no invisible
/// character (a direction override or isolate, a zero-width space, a soft
/// hyphen, a filler, a blank, a tag), any of which lets a name show in a
/// client or a terminal as another one. The zero-width joiner and
/// non-joiner, which some scripts and emoji need, are allowed between two
/// characters beyond ASCII, and a variation selector after one: beside
/// ASCII they only hide in a name that reads as another.
#[must_use]
pub fn readable_name(name: &str, max: usize) -> bool {
    if name.is_empty() || name.trim() != name || name.chars().count() > max {
        return false;
    }
    let joiner = |c: char| matches!(c, '\u{200C}' | '\u{200D}');
    let selector = |c: char| matches!(c, '\u{180B}'..='\u{180D}' | '\u{180F}' | '\u{FE00}'..='\u{FE0F}' | '\u{E0100}'..='\u{E01EF}');
    let mut before: Option<char> = None;
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        let fits = if joiner(c) {
            // Between two characters beyond ASCII: after one (or its
            // selector), before one, never in a run.
            before.is_some_and(|b| !b.is_ascii() && !joiner(b))
                && chars
                    .peek()
                    .is_some_and(|n| !n.is_ascii() && !joiner(*n) && !selector(*n))
        } else if selector(c) {
            // Right after the character beyond ASCII it selects a form of.
            before.is_some_and(|b| !b.is_ascii() && !joiner(b) && !selector(b))
        } else {
            !c.is_control() && !invisible(c)
        };
        if !fits {
            return false;
        }
        before = Some(c);
    }
    true
}

/// Whether `c` shows as nothing, or changes how the text around it shows:
/// the bidirectional controls, the zero-width space, the word joiner and
/// invisible operators, the line and paragraph separators, the soft hyphen,
/// the combining grapheme joiner, the Hangul fillers, the braille blank,
/// the byte-order mark, the interlinear annotation marks and the tags. The zero-width joiner and non-joiner are not among them: in the
/// scripts that need them they are part of the text.
#[must_use]
pub const fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{AD}'
            | '\u{34F}'
            | '\u{61C}'
            | '\u{115F}'
            | '\u{1160}'
            | '\u{180E}'
            | '\u{200B}'
            | '\u{200E}'
            | '\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{2800}'
            | '\u{3164}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{E0000}'..='\u{E007F}'
    )
}

/// The URI prefix of the upstream called `name`: what its resource URIs
/// and templates start with, joined by a `+`, as sessions see them.
#[must_use]
pub fn prefix_for(name: &str) -> String {
    let fits = name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    if fits {
        return name.to_owned();
    }
    let mut prefix: String = name
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '.') => c,
            _ => '-',
        })
        .collect();
    if !prefix.starts_with(|c: char| c.is_ascii_lowercase()) {
        prefix.insert(0, 'u');
    }
    let digest = Sha256::digest(name.as_bytes());
    prefix.push('-');
    for byte in digest.iter().take(4) {
        prefix.push_str(&format!("{byte:02x}"));
    }
    prefix
}

/// A URI of the upstream with `prefix`, as sessions see it.
pub(super) fn outer_uri(prefix: &str, uri: &str) -> String {
    format!("{prefix}+{uri}")
}

/// The prefix and the upstream's own URI of a URI sessions saw, if it has
/// the gateway's shape.
pub(super) fn split_uri(uri: &str) -> Option<(&str, &str)> {
    uri.split_once('+')
        .filter(|(prefix, inner)| !prefix.is_empty() && !inner.is_empty())
}

/// A prompt of `upstream`, as sessions see it.
pub(super) fn outer_name(upstream: &str, name: &str) -> String {
    format!("{upstream}/{name}")
}

/// The upstream and its own name of a prompt name sessions saw.
pub(super) fn split_name(name: &str) -> Option<(&str, &str)> {
    name.split_once('/')
        .filter(|(upstream, inner)| !upstream.is_empty() && !inner.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_that_shows_as_another_is_not_readable() {
        assert!(readable_name("files", MAX_UPSTREAM_NAME));
        assert!(readable_name("fïchiers-été", MAX_UPSTREAM_NAME));
        assert!(readable_name("Brave Search", MAX_UPSTREAM_NAME));
        // Persian's zero-width non-joiner is part of how the word is written.
        assert!(readable_name("می\u{200c}خواهم", MAX_UPSTREAM_NAME));
        assert!(readable_name("heart-\u{2764}\u{fe0f}", MAX_UPSTREAM_NAME));
        // A ZWJ sequence: the rainbow flag, its white flag's selector first.
        assert!(readable_name(
            "\u{1f3f3}\u{fe0f}\u{200d}\u{1f308}",
            MAX_UPSTREAM_NAME
        ));
        for name in [
            "",
            "a\nb",
            "ok\u{1b}[2J",
            "evil\u{202e}txt.exe",
            "zero\u{200b}width",
            "tag\u{E0041}",
            "line\u{2028}break",
            "soft\u{ad}hyphen",
            "files ",
            " files",
            "fi\u{200c}les",
            "files\u{fe0f}",
            "blank\u{2800}",
            "é\u{200d}\u{200d}é",
            "café\u{fe0f}\u{fe0f}",
            "end\u{e9}\u{200d}",
        ] {
            assert!(!readable_name(name, MAX_UPSTREAM_NAME), "{name:?}");
        }
        assert!(readable_name(&"x".repeat(64), MAX_UPSTREAM_NAME));
        assert!(!readable_name(&"x".repeat(65), MAX_UPSTREAM_NAME));
    }

    #[test]
    fn a_name_that_is_a_scheme_is_its_own_prefix() {
        assert_eq!(prefix_for("everything"), "everything");
        assert_eq!(prefix_for("fs-2.local"), "fs-2.local");
    }

    #[test]
    fn other_names_get_a_scheme_and_a_digest() {
        let upper = prefix_for("GitHub");
        let lower = prefix_for("github");
        assert!(upper.starts_with("github-"), "{upper}");
        assert_ne!(upper, lower);
        assert_ne!(prefix_for("my_server"), prefix_for("my-server"));
        assert!(prefix_for("1password").starts_with("u1password-"));
        for name in ["GitHub", "my_server", "1password", "a b", "ü"] {
            let prefix = prefix_for(name);
            assert!(
                prefix.starts_with(|c: char| c.is_ascii_lowercase()),
                "{prefix}"
            );
            assert!(
                prefix
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'),
                "{prefix}"
            );
        }
    }

    #[test]
    fn uris_and_names_round_trip() {
        let outer = outer_uri("everything", "test://static/resource/1?x=a+b");
        assert_eq!(outer, "everything+test://static/resource/1?x=a+b");
        assert_eq!(
            split_uri(&outer),
            Some(("everything", "test://static/resource/1?x=a+b"))
        );
        assert_eq!(split_uri("file:///x"), None);
        assert_eq!(split_uri("+x"), None);
        let name = outer_name("fs", "review/code");
        assert_eq!(split_name(&name), Some(("fs", "review/code")));
        assert_eq!(split_name("plain"), None);
    }
}
