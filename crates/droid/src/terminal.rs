//! What a terminal is shown of text a peer wrote: a tool's name, its
//! output, a server's error. A peer's escape sequence could otherwise
//! retitle the window, clear the screen, write the clipboard or reorder the
//! line a person reads and acts on.

use std::borrow::Cow;
use std::fmt::Write as _;

use protocol_droid::application::gateway::invisible;

/// Whether `c` prints as itself: a tab does; a control, a direction mark or
/// another invisible character does not. The joiners neither: a terminal
/// line is not a script that needs them.
fn plain(c: char) -> bool {
    c == '\t' || (!c.is_control() && !invisible(c) && !matches!(c, '\u{200c}' | '\u{200d}'))
}

/// `text` as a terminal may be shown it: as it is when every character
/// prints as itself, with each one that does not escaped (`\u{1b}`,
/// `\u{202e}`) otherwise; a tab prints as itself. A tool's name is the
/// upstream's, and an escape sequence in one could retitle the window,
/// clear the screen or reorder the line an operator approves from.
pub(crate) fn shown(text: &str) -> Cow<'_, str> {
    if text.chars().all(plain) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        if plain(c) {
            shown.push(c);
        } else {
            shown.extend(c.escape_debug());
        }
    }
    Cow::Owned(shown)
}

/// `text` of several lines as a terminal may be shown it: each line as
/// [`shown`] shows it, the line breaks kept.
pub(crate) fn shown_lines(text: &str) -> String {
    text.split('\n')
        .map(|line| shown(line.strip_suffix('\r').unwrap_or(line)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// JSON `text` (as `serde_json` writes it) as a terminal may be shown it,
/// and still the same JSON: each character [`shown`] would escape is
/// written as a JSON escape (`\u009b`, `\u202e`), which a program reads
/// back as the very character. `serde_json` escapes the C0 controls itself,
/// not DEL, the C1 controls or the direction marks. Outside strings JSON
/// text is ASCII, so only a string's characters change; the line breaks of
/// pretty printing are kept.
pub(crate) fn shown_json(text: &str) -> Cow<'_, str> {
    let kept = |c: char| c == '\n' || plain(c);
    if text.chars().all(kept) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        if kept(c) {
            shown.push(c);
        } else {
            for unit in c.encode_utf16(&mut [0; 2]) {
                // Writing to a `String` cannot fail.
                let _ = write!(shown, "\\u{unit:04x}");
            }
        }
    }
    Cow::Owned(shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// JSON shown on a terminal is escaped where a terminal would obey it,
    /// and reads back as the same value.
    #[test]
    fn json_is_shown_escaped_and_reads_back_the_same() -> serde_json::Result<()> {
        let value = serde_json::json!({
            "text": "csi\u{9b}2J del\u{7f} rlo\u{202e} tag\u{e0041} esc\u{1b} ok é",
            "n": 1,
        });
        let written = serde_json::to_string_pretty(&value)?;
        let shown = shown_json(&written);
        assert!(shown.chars().all(|c| c == '\n' || plain(c)), "{shown:?}");
        assert!(
            shown.contains(r"csi\u009b2J del\u007f rlo\u202e tag\udb40\udc41 esc\u001b ok é"),
            "{shown}"
        );
        assert_eq!(serde_json::from_str::<serde_json::Value>(&shown)?, value);
        assert!(matches!(shown_json("{\n  \"a\": 1\n}"), Cow::Borrowed(_)));
        Ok(())
    }

    #[test]
    fn escapes_are_shown_not_obeyed_and_lines_are_kept() {
        assert_eq!(shown("plain name"), "plain name");
        // Only what a terminal would obey is escaped: tabs and quotes stay.
        assert_eq!(
            shown("\tfmt.Println(\"hi\")\u{1b}"),
            "\tfmt.Println(\"hi\")\\u{1b}"
        );
        assert_eq!(shown("evil\u{1b}[2J\u{202e}"), "evil\\u{1b}[2J\\u{202e}");
        assert_eq!(
            shown_lines("one\r\ntwo\u{7}\nthree"),
            "one\ntwo\\u{7}\nthree"
        );
    }
}
