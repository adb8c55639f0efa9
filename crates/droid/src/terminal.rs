//! What a terminal is shown of text a peer wrote: a tool's name, its
//! output, a server's error. A peer's escape sequence could otherwise
//! retitle the window, clear the screen, write the clipboard or reorder the
//! line a person reads and acts on.

use std::borrow::Cow;

use protocol_droid::application::gateway::invisible;

/// `text` as a terminal may be shown it: as it is when every character
/// prints as itself, with each one that does not escaped (`\u{1b}`,
/// `\u{202e}`) otherwise; a tab prints as itself. A tool's name is the
/// upstream's, and an escape sequence in one could retitle the window,
/// clear the screen or reorder the line an operator approves from.
pub(crate) fn shown(text: &str) -> Cow<'_, str> {
    // The joiners too: a terminal line is not a script that needs them.
    let plain = |c: char| {
        c == '\t' || (!c.is_control() && !invisible(c) && !matches!(c, '\u{200c}' | '\u{200d}'))
    };
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

#[cfg(test)]
mod tests {
    use super::*;

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
