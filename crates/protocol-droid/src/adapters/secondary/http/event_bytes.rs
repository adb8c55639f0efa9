//! A server's event-stream bytes, made safe for the event parser.
//!
//! `eventsource-stream` trusts its input in three ways a hostile or broken
//! server can abuse, so every stream passes through [`bounded_events`]
//! first:
//!
//! - it buffers an event until its blank line, however long it grows;
//! - it slices a leading byte order mark off as if it were one byte wide,
//!   and panics: whether the stream starts with one or, once the first is
//!   removed, with a second;
//! - past an invalid UTF-8 byte it decodes nothing more, and keeps every
//!   later byte buffered waiting for the sequence to complete, so a stream
//!   that goes on after one bad byte grows without limit.
//!
//! The stream is decoded as the event-stream rules (WHATWG HTML,
//! "Interpreting an event stream") say: UTF-8, each invalid sequence
//! replaced by U+FFFD. The parser then only ever sees valid UTF-8.

use axum::body::Bytes;
use futures_util::StreamExt as _;
use reqwest::Response;

use super::streamable::MAX_BODY;

/// The UTF-8 byte order mark.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The replacement character's UTF-8 encoding.
const REPLACEMENT: &str = "\u{FFFD}";

/// A response's bytes as valid UTF-8 without a leading byte order mark,
/// failing once more than [`MAX_BODY`] of them arrive without an event
/// ending.
pub(super) fn bounded_events(
    response: Response,
) -> impl futures_util::Stream<Item = Result<impl AsRef<[u8]>, std::io::Error>> {
    let mut guard = Guard::default();
    response
        .bytes_stream()
        .map(move |chunk| guard.next(chunk.map_err(std::io::Error::other)?))
}

/// What one stream's reading carries from chunk to chunk.
#[derive(Debug)]
struct Guard {
    /// The stream's first bytes, until they are known not to be (or to have
    /// been) a byte order mark; `None` after.
    head: Option<Vec<u8>>,
    /// The start of a UTF-8 sequence the last chunk ended inside: at most
    /// three bytes.
    partial: Vec<u8>,
    /// Bytes since the last event ended.
    unterminated: usize,
    /// Whether the parser has been handed its first character.
    started: bool,
}

impl Default for Guard {
    fn default() -> Self {
        Self {
            head: Some(Vec::new()),
            partial: Vec::new(),
            unterminated: 0,
            started: false,
        }
    }
}

impl Guard {
    /// The bytes to hand the parser for `chunk`.
    fn next(&mut self, chunk: Bytes) -> Result<Bytes, std::io::Error> {
        let chunk = match self.head.as_mut() {
            None => chunk,
            Some(pending) => {
                pending.extend_from_slice(&chunk);
                if pending.len() < BOM.len() && BOM.starts_with(pending) {
                    // An empty chunk is skipped by the parser.
                    return Ok(Bytes::new());
                }
                let mut bytes = core::mem::take(pending);
                self.head = None;
                if bytes.starts_with(BOM) {
                    bytes.drain(..BOM.len());
                }
                Bytes::from(bytes)
            }
        };
        let mut chunk = self.decode(chunk);
        if !self.started && !chunk.is_empty() {
            self.started = true;
            if chunk.starts_with(BOM) {
                // A second mark is data (the first line's field name starts
                // with it), but the parser would take it for the first and
                // panic. A comment line before it changes nothing the rules
                // read and keeps the parser from looking.
                chunk = Bytes::from([&b":\n"[..], chunk.as_ref()].concat());
            }
        }
        let end = [&b"\n\n"[..], b"\r\r", b"\r\n\r\n"]
            .iter()
            .filter_map(|sep| {
                chunk
                    .windows(sep.len())
                    .rposition(|w| w == *sep)
                    .map(|at| at + sep.len())
            })
            .max();
        self.unterminated = match end {
            Some(end) => chunk.len() - end,
            None => self.unterminated.saturating_add(chunk.len()),
        };
        if self.unterminated > MAX_BODY {
            return Err(std::io::Error::other(format!(
                "an event longer than {MAX_BODY} bytes"
            )));
        }
        Ok(chunk)
    }

    /// `chunk` as valid UTF-8: invalid sequences replaced, a sequence cut
    /// at the chunk's end kept for the next one. A chunk that is valid by
    /// itself, the usual case, is passed on without a copy.
    fn decode(&mut self, chunk: Bytes) -> Bytes {
        if self.partial.is_empty() && core::str::from_utf8(&chunk).is_ok() {
            return chunk;
        }
        let mut bytes = core::mem::take(&mut self.partial);
        bytes.extend_from_slice(&chunk);
        let mut text = String::with_capacity(bytes.len());
        let mut rest = bytes.as_slice();
        loop {
            match core::str::from_utf8(rest) {
                Ok(valid) => {
                    text.push_str(valid);
                    break;
                }
                Err(error) => {
                    let (valid, after) = rest.split_at(error.valid_up_to());
                    text.push_str(&String::from_utf8_lossy(valid));
                    match error.error_len() {
                        Some(invalid) => {
                            text.push_str(REPLACEMENT);
                            rest = after.get(invalid..).unwrap_or_default();
                        }
                        None => {
                            // Cut short by the chunk's end, not invalid.
                            self.partial = after.to_vec();
                            break;
                        }
                    }
                }
            }
        }
        Bytes::from(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the parser is handed for a stream cut into `chunks`.
    fn through(chunks: &[&[u8]]) -> Vec<u8> {
        let mut guard = Guard::default();
        chunks
            .iter()
            .flat_map(|c| {
                guard
                    .next(Bytes::copy_from_slice(c))
                    .map(|b| b.to_vec())
                    .unwrap_or_default()
            })
            .collect()
    }

    #[test]
    fn invalid_bytes_are_replaced_and_what_follows_is_still_read() {
        let out = through(&[b"data: a\xFFb\n\n", b"data: \xC3\x28\n\n"]);
        assert_eq!(
            String::from_utf8(out).ok().as_deref(),
            Some("data: a\u{FFFD}b\n\ndata: \u{FFFD}(\n\n")
        );
    }

    #[test]
    fn a_sequence_split_across_chunks_is_joined_not_replaced() {
        let euro = "€".as_bytes();
        for cut in 1..euro.len() {
            let (first, second) = euro.split_at(cut);
            let out = through(&[b"data: ", first, second, b"\n\n"]);
            assert_eq!(String::from_utf8(out).ok().as_deref(), Some("data: €\n\n"));
        }
    }

    #[test]
    fn a_byte_order_mark_split_across_chunks_is_removed() {
        let out = through(&[b"\xEF", b"\xBB", b"\xBFdata: x\n\n"]);
        assert_eq!(out, b"data: x\n\n");
    }

    #[test]
    fn a_second_mark_stays_data_behind_a_comment() {
        for chunks in [
            &[&b"\xEF\xBB\xBF\xEF\xBB\xBFid: 1\n\n"[..]][..],
            &[b"\xEF\xBB\xBF\xEF", b"\xBB", b"\xBFid: 1\n\n"],
        ] {
            assert_eq!(through(chunks), b":\n\xEF\xBB\xBFid: 1\n\n");
        }
    }

    #[test]
    fn whatever_the_bytes_the_parser_gets_valid_utf8() {
        // Every byte value, cut at every length, alone and after a partial
        // sequence.
        let all: Vec<u8> = (0..=255).collect();
        for size in 1..8 {
            let chunks: Vec<&[u8]> = all.chunks(size).collect();
            assert!(
                String::from_utf8(through(&chunks)).is_ok(),
                "chunks of {size}"
            );
        }
    }

    #[test]
    fn an_event_that_never_ends_is_refused_past_the_limit() {
        let mut guard = Guard::default();
        let block = Bytes::from(vec![b'x'; 1024 * 1024]);
        let refused = (0..=MAX_BODY / block.len()).any(|_| guard.next(block.clone()).is_err());
        assert!(refused);
    }
}
