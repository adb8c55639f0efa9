//! Lone UTF-16 surrogates in JSON string escapes, mended.
//!
//! `"\ud800"` is JSON (RFC 8259 §8.2 allows it; the text is then not
//! Unicode), and peers write it: JavaScript's `JSON.stringify` does for half
//! of a pasted emoji, Python's `json.dumps` for a string read with
//! `surrogateescape`. A Rust string cannot hold it, so `serde_json` refuses
//! the whole message, and the request would be answered as a parse error
//! with no id: its caller never hears of it. Each lone surrogate is
//! replaced by U+FFFD instead, as a lossy UTF-8 decoder replaces a bad byte,
//! and the message read again.

/// `text` with every escape of a lone surrogate (`\uD800`–`\uDFFF` not in a
/// high-then-low pair) written `\uFFFD`; `None` when it has none. The
/// escapes are rewritten in place, six bytes for six, so positions in the
/// text (a parse error's column) still hold.
#[must_use]
pub fn mend_lone_surrogates(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut mended: Option<Vec<u8>> = None;
    let mut in_string = false;
    let mut at = 0;
    while let Some(&byte) = bytes.get(at) {
        match byte {
            b'"' => in_string = !in_string,
            b'\\' if in_string => {
                let Some(unit) = escaped_unit(bytes, at) else {
                    // Any other escape is two bytes; `\\` and `\"` among
                    // them, which must not be read as the end of a string.
                    at += 2;
                    continue;
                };
                let paired = (0xD800..0xDC00).contains(&unit)
                    && escaped_unit(bytes, at + 6)
                        .is_some_and(|next| (0xDC00..0xE000).contains(&next));
                if paired {
                    at += 12;
                    continue;
                }
                if (0xD800..0xE000).contains(&unit) {
                    let out = mended.get_or_insert_with(|| bytes.to_vec());
                    if let Some(escape) = out.get_mut(at..at + 6) {
                        escape.copy_from_slice(b"\\ufffd");
                    }
                }
                at += 6;
                continue;
            }
            _ => {}
        }
        at += 1;
    }
    // Only ASCII was written over ASCII: still UTF-8.
    mended.and_then(|out| String::from_utf8(out).ok())
}

/// Reads `text` as JSON, each lone surrogate as U+FFFD.
///
/// # Errors
///
/// `serde_json`'s, for text that is not JSON even so.
pub fn value_from_str(text: &str) -> serde_json::Result<serde_json::Value> {
    serde_json::from_str(text).or_else(|e| match mend_lone_surrogates(text) {
        Some(mended) => serde_json::from_str(&mended),
        None => Err(e),
    })
}

/// Reads `bytes` as JSON, each lone surrogate as U+FFFD.
///
/// # Errors
///
/// `serde_json`'s, for bytes that are not JSON even so.
pub fn value_from_slice(bytes: &[u8]) -> serde_json::Result<serde_json::Value> {
    serde_json::from_slice(bytes).or_else(|e| {
        match core::str::from_utf8(bytes)
            .ok()
            .and_then(mend_lone_surrogates)
        {
            Some(mended) => serde_json::from_str(&mended),
            None => Err(e),
        }
    })
}

/// The code unit of the `\uXXXX` escape at `at`, if one is there.
fn escaped_unit(bytes: &[u8], at: usize) -> Option<u32> {
    let escape = bytes.get(at..at + 6)?;
    let (marker, hex) = escape.split_at(2);
    if marker != b"\\u" {
        return None;
    }
    let hex = core::str::from_utf8(hex).ok()?;
    u32::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_surrogate_becomes_the_replacement_character() {
        let mended = mend_lone_surrogates(r#"{"a":"x\ud800y","b":"\uDC00"}"#);
        assert_eq!(mended.as_deref(), Some(r#"{"a":"x\ufffdy","b":"\ufffd"}"#));
        let value: Option<serde_json::Value> =
            mended.and_then(|text| serde_json::from_str(&text).ok());
        assert_eq!(
            value,
            Some(serde_json::json!({ "a": "x\u{fffd}y", "b": "\u{fffd}" }))
        );
    }

    #[test]
    fn a_pair_and_what_only_looks_like_an_escape_are_left_alone() {
        for text in [
            r#"{"emoji":"\ud83d\ude00"}"#,
            r#"{"text":"\\ud800"}"#,
            r#"{"quote":"\"\ud83d\ude00\""}"#,
            r#"{"plain":"é"}"#,
        ] {
            assert_eq!(mend_lone_surrogates(text), None, "{text}");
        }
        // A high surrogate before a second high one: both are lone.
        assert_eq!(
            mend_lone_surrogates(r#"["\ud800\ud800\udc00"]"#).as_deref(),
            Some(r#"["\ufffd\ud800\udc00"]"#)
        );
        // Outside a string there is nothing to mend.
        assert_eq!(mend_lone_surrogates(r"\ud800"), None);
    }

    #[test]
    fn a_cut_escape_is_left_for_the_parser_to_refuse() {
        assert_eq!(mend_lone_surrogates(r#"{"a":"\ud8"#), None);
        assert_eq!(mend_lone_surrogates(r#"{"a":"\"#), None);
    }
}
