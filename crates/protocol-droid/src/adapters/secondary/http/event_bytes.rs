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
//! replaced by U+FFFD, a sequence the stream ends inside too. The parser
//! then only ever sees valid UTF-8.
//!
//! And the parser holds a CR that is the last thing it was given, waiting
//! to see whether an LF follows, so a stream that ends right after one
//! would leave the blank line it ends unread, and its event undelivered:
//! such a stream is given the LF, which only completes that line end.
//!
//! The parser is also handed whole lines, one at a time ([`Lines`]): it
//! scans an unfinished line again for every chunk that extends it, and
//! copies what follows a line for every line it takes off, so a long line
//! arriving in many chunks, or many lines in one, would cost it time
//! quadratic in their length (a 15 MB event took half a minute).

use axum::body::Bytes;
use futures_util::StreamExt as _;
use reqwest::Response;

/// The UTF-8 byte order mark.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The replacement character's UTF-8 encoding.
const REPLACEMENT: &str = "\u{FFFD}";

/// How the error of an event past the bound begins: an event that would
/// only come again on a resumed stream.
pub(super) const TOO_LONG: &str = "an event longer than";

/// A response's bytes as valid UTF-8 without a leading byte order mark,
/// failing once more than `max_event` of them arrive without an event
/// ending.
pub(super) fn bounded_events(
    response: Response,
    max_event: usize,
) -> impl futures_util::Stream<Item = Result<impl AsRef<[u8]>, std::io::Error>> {
    guarded(response.bytes_stream(), max_event)
}

/// `bytes` through a [`Guard`], and at their end what the guard still
/// holds ([`Guard::finish`]).
fn guarded<S, E>(bytes: S, max_event: usize) -> GuardedBytes
where
    S: futures_util::Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
{
    let bytes = Box::pin(bytes);
    let start = Some((bytes, Guard::new(max_event), Lines::default()));
    let lines = futures_util::stream::unfold(start, |state| async move {
        let (mut bytes, mut guard, mut lines) = state?;
        match bytes.next().await {
            Some(chunk) => {
                let next = chunk
                    .map_err(std::io::Error::other)
                    .and_then(|chunk| guard.next(chunk))
                    .map(|chunk| lines.push(&chunk));
                Some((next, Some((bytes, guard, lines))))
            }
            None => {
                let mut last = lines.push(&guard.finish());
                last.extend(lines.finish());
                Some((Ok(last), None))
            }
        }
    });
    Box::pin(lines.flat_map(|next| {
        futures_util::stream::iter(match next {
            Ok(lines) => lines.into_iter().map(Ok).collect(),
            Err(error) => vec![Err(error)],
        })
    }))
}

/// Cuts the guarded bytes into lines, each with its line end, and holds an
/// unfinished one until it ends. A CR that ends a chunk ends its line: the
/// parser itself waits to see whether an LF follows.
#[derive(Debug, Default)]
struct Lines {
    /// The unfinished line, which has no line end.
    held: Vec<u8>,
}

impl Lines {
    /// The lines `chunk` completes, in order.
    fn push(&mut self, chunk: &Bytes) -> Vec<Bytes> {
        let mut lines = Vec::new();
        let mut start = 0;
        while let Some(end) = line_end(chunk.get(start..).unwrap_or_default()) {
            let end = start.saturating_add(end);
            let line = chunk.slice(start..end);
            if self.held.is_empty() {
                lines.push(line);
            } else {
                self.held.extend_from_slice(&line);
                lines.push(Bytes::from(core::mem::take(&mut self.held)));
            }
            start = end;
        }
        self.held
            .extend_from_slice(chunk.get(start..).unwrap_or_default());
        lines
    }

    /// The unfinished line the stream ended in, if any.
    fn finish(&mut self) -> Option<Bytes> {
        (!self.held.is_empty()).then(|| Bytes::from(core::mem::take(&mut self.held)))
    }
}

/// How long the first line of `bytes` is with its line end (LF, CR or
/// CRLF), if it has one.
fn line_end(bytes: &[u8]) -> Option<usize> {
    let at = bytes.iter().position(|&b| b == b'\n' || b == b'\r')?;
    let crlf = bytes.get(at) == Some(&b'\r') && bytes.get(at.saturating_add(1)) == Some(&b'\n');
    Some(at.saturating_add(if crlf { 2 } else { 1 }))
}

/// A guarded stream of a response's bytes.
type GuardedBytes =
    core::pin::Pin<Box<dyn futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send>>;

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
    /// The most `unterminated` may reach.
    max_event: usize,
    /// Where the last chunk left the line it was in: what ending an event
    /// takes, when its blank line is cut across chunks.
    line: LineState,
    /// Whether the parser has been handed its first character.
    started: bool,
    /// Whether this guard has refused the stream: nothing is handed on
    /// after that, even to a caller that goes on polling.
    failed: bool,
}

/// Where a stream stands in its line, as far as ending an event goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LineState {
    /// At the start of a line: a line end here is a blank line.
    Start,
    /// At the start of a line just ended by a CR, so an LF here only
    /// completes that CRLF.
    StartAfterCr,
    /// Inside a line.
    Inside,
}

impl Guard {
    /// A guard for a fresh stream whose events may be `max_event` long.
    const fn new(max_event: usize) -> Self {
        Self {
            head: Some(Vec::new()),
            partial: Vec::new(),
            unterminated: 0,
            max_event,
            line: LineState::Start,
            started: false,
            failed: false,
        }
    }

    /// The bytes to hand the parser for `chunk`.
    fn next(&mut self, chunk: Bytes) -> Result<Bytes, std::io::Error> {
        if self.failed {
            return Err(std::io::Error::other("the stream was already refused"));
        }
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
        self.measure(&chunk);
        if self.unterminated > self.max_event {
            self.failed = true;
            return Err(std::io::Error::other(format!(
                "{TOO_LONG} {} bytes",
                self.max_event
            )));
        }
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
        Ok(chunk)
    }

    /// The bytes to hand the parser once the stream has ended: a sequence
    /// it ended inside (or the start of a byte order mark, all it held) as
    /// U+FFFD, and an LF after a CR it ended with.
    fn finish(&mut self) -> Bytes {
        if self.failed {
            return Bytes::new();
        }
        let mut tail = Vec::new();
        if let Some(head) = self.head.take() {
            tail.extend_from_slice(&self.decode(Bytes::from(head)));
        }
        if !core::mem::take(&mut self.partial).is_empty() {
            tail.extend_from_slice(REPLACEMENT.as_bytes());
        }
        self.measure(&tail);
        if self.line == LineState::StartAfterCr {
            tail.push(b'\n');
            self.measure(b"\n");
        }
        Bytes::from(tail)
    }

    /// Counts `chunk`'s bytes into the event they belong to: the count
    /// starts again after every blank line (CR, LF or CRLF at the start of
    /// a line), wherever the chunks were cut.
    fn measure(&mut self, chunk: &[u8]) {
        for &byte in chunk {
            self.line = match (self.line, byte) {
                // The LF of a CRLF: the line already ended at its CR.
                (LineState::StartAfterCr, b'\n') => LineState::Start,
                (LineState::Start | LineState::StartAfterCr, b'\r' | b'\n') => {
                    self.unterminated = 0;
                    if byte == b'\r' {
                        LineState::StartAfterCr
                    } else {
                        LineState::Start
                    }
                }
                (LineState::Inside, b'\r') => LineState::StartAfterCr,
                (LineState::Inside, b'\n') => LineState::Start,
                (_, _) => LineState::Inside,
            };
            self.unterminated = self.unterminated.saturating_add(1);
        }
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
    use eventsource_stream::Eventsource as _;

    use super::*;

    /// A limit as large as the transports use.
    const MAX_BODY: usize = 16 * 1024 * 1024;

    /// What the parser is handed for a stream cut into `chunks`, or the
    /// guard's refusal.
    fn through(chunks: &[&[u8]]) -> Result<Vec<u8>, std::io::Error> {
        let mut guard = Guard::new(MAX_BODY);
        let mut out = Vec::new();
        for chunk in chunks {
            out.extend_from_slice(&guard.next(Bytes::copy_from_slice(chunk))?);
        }
        Ok(out)
    }

    fn text(chunks: &[&[u8]]) -> Option<String> {
        through(chunks)
            .ok()
            .and_then(|out| String::from_utf8(out).ok())
    }

    /// What the parser is handed for a whole stream cut into `chunks`,
    /// its end included.
    fn to_the_end(chunks: &[&'static [u8]]) -> Vec<u8> {
        through_the_stream(chunks).concat()
    }

    #[test]
    fn the_parser_is_handed_whole_lines_one_at_a_time() {
        let mut lines = Lines::default();
        assert!(lines.push(&Bytes::from_static(b"data: ab")).is_empty());
        assert!(lines.push(&Bytes::from_static(b"cd")).is_empty());
        assert_eq!(
            lines.push(&Bytes::from_static(b"ef\n\ndata: x\r\ny\r")),
            [&b"data: abcdef\n"[..], b"\n", b"data: x\r\n", b"y\r"]
        );
        assert_eq!(lines.push(&Bytes::from_static(b"\nz")), [&b"\n"[..]]);
        assert_eq!(lines.finish().as_deref(), Some(&b"z"[..]));
        assert_eq!(lines.finish(), None);
        // A line of a megabyte in a thousand chunks is one item.
        let chunks: Vec<&'static [u8]> = core::iter::repeat_n(&[b'x'; 1024][..], 1024)
            .chain([&b"\n\n"[..]])
            .collect();
        let items = through_the_stream(&chunks);
        assert_eq!(
            items.len(),
            2,
            "{:?}",
            items.iter().map(Bytes::len).collect::<Vec<_>>()
        );
    }

    /// What the parser is handed, item by item, for a stream cut into
    /// `chunks`.
    fn through_the_stream(chunks: &[&'static [u8]]) -> Vec<Bytes> {
        let chunks: Vec<Result<Bytes, std::io::Error>> = chunks
            .iter()
            .map(|chunk| Ok(Bytes::from_static(chunk)))
            .collect();
        let bytes = futures_util::stream::iter(chunks);
        tokio::runtime::Builder::new_current_thread()
            .build()
            .map(|rt| {
                rt.block_on(
                    guarded(bytes, MAX_BODY)
                        .filter_map(|b| async move { b.ok() })
                        .collect::<Vec<Bytes>>(),
                )
            })
            .unwrap_or_default()
    }

    #[test]
    fn a_stream_ending_inside_a_sequence_ends_with_a_replacement() {
        // The blank line is a lone CR; what follows it never completes.
        let out = to_the_end(&[b"data: x\n\r\xCE"]);
        assert_eq!(out, "data: x\n\r\u{FFFD}".as_bytes());
        assert_eq!(parsed(out), [(String::new(), "x".to_owned())]);
    }

    #[test]
    fn a_stream_ending_on_a_cr_gets_the_lf_that_completes_it() {
        for chunks in [&[&b"data: x\n\r"[..]][..], &[b"data: x\n", b"\r"]] {
            let out = to_the_end(chunks);
            assert_eq!(out, b"data: x\n\r\n");
            assert_eq!(parsed(out), [(String::new(), "x".to_owned())]);
        }
        // A CR that only ends a line ends no event.
        assert_eq!(parsed(to_the_end(&[b"data: x\r"])), []);
        // A stream cut inside what could have been a byte order mark.
        assert_eq!(to_the_end(&[b"\xEF\xBB"]), "\u{FFFD}".as_bytes());
    }

    #[test]
    fn invalid_bytes_are_replaced_and_what_follows_is_still_read() {
        assert_eq!(
            text(&[b"data: a\xFFb\n\n", b"data: \xC3\x28\n\n"]).as_deref(),
            Some("data: a\u{FFFD}b\n\ndata: \u{FFFD}(\n\n")
        );
    }

    #[test]
    fn a_sequence_split_across_chunks_is_joined_not_replaced() {
        let euro = "€".as_bytes();
        for cut in 1..euro.len() {
            let (first, second) = euro.split_at(cut);
            let out = text(&[b"data: ", first, second, b"\n\n"]);
            assert_eq!(out.as_deref(), Some("data: €\n\n"));
        }
    }

    #[test]
    fn a_byte_order_mark_split_across_chunks_is_removed() {
        let out = through(&[b"\xEF", b"\xBB", b"\xBFdata: x\n\n"]).ok();
        assert_eq!(out.as_deref(), Some(&b"data: x\n\n"[..]));
    }

    #[test]
    fn a_second_mark_stays_data_behind_a_comment() -> Result<(), std::io::Error> {
        for chunks in [
            &[&b"\xEF\xBB\xBF\xEF\xBB\xBFid: 1\ndata: x\n\n"[..]][..],
            &[b"\xEF\xBB\xBF\xEF", b"\xBB", b"\xBFid: 1\ndata: x\n\n"],
        ] {
            let out = through(chunks)?;
            assert_eq!(out, b":\n\xEF\xBB\xBFid: 1\ndata: x\n\n");
            // The parser reads it without panicking, and as the rules say:
            // `\u{FEFF}id` is a field nobody knows, so no id is set.
            let events: Vec<_> = parsed(out);
            assert_eq!(events, [(String::new(), "x".to_owned())]);
        }
        Ok(())
    }

    /// Every event the parser reads from `bytes`: its id and data.
    fn parsed(bytes: Vec<u8>) -> Vec<(String, String)> {
        let stream = futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from(bytes))]);
        let runtime = tokio::runtime::Builder::new_current_thread().build();
        runtime
            .map(|rt| {
                rt.block_on(async {
                    stream
                        .eventsource()
                        .filter_map(|e| async move { e.ok().map(|e| (e.id, e.data)) })
                        .collect()
                        .await
                })
            })
            .unwrap_or_default()
    }

    #[test]
    fn whatever_the_bytes_and_cuts_the_parser_gets_their_lossy_decoding() {
        // Every byte value, cut at every length: the same text as decoding
        // the whole at once, invalid sequences replaced (after a leading
        // mark, which this stream does not have, is removed).
        let all: Vec<u8> = (0..=255).collect();
        let whole = String::from_utf8_lossy(&all).into_owned();
        for size in 1..8 {
            let chunks: Vec<&[u8]> = all.chunks(size).collect();
            assert_eq!(
                text(&chunks).as_deref(),
                Some(whole.as_str()),
                "chunks of {size}"
            );
        }
    }

    #[test]
    fn an_event_that_never_ends_is_refused_past_the_limit_and_only_then() {
        let block = Bytes::from(vec![b'x'; 1024 * 1024]);
        let mut guard = Guard::new(MAX_BODY);
        for _ in 0..MAX_BODY / block.len() {
            assert!(guard.next(block.clone()).is_ok());
        }
        assert!(guard.next(block).is_err());
        // Refused once, refused for good.
        assert!(guard.next(Bytes::from_static(b"\n\n")).is_err());
    }

    #[test]
    fn a_blank_line_cut_across_chunks_still_ends_the_event() {
        // As a server writing line by line sends them: `data: ...\n`, then
        // `\n`, with every line ending the rules allow.
        let line = Bytes::from([&b"data: "[..], &vec![b'x'; 1024 * 1024], b"\n"].concat());
        for blank in [&b"\n"[..], b"\r", b"\r\n"] {
            let mut guard = Guard::new(MAX_BODY);
            for _ in 0..2 * MAX_BODY / line.len() {
                assert!(guard.next(line.clone()).is_ok());
                assert!(guard.next(Bytes::copy_from_slice(blank)).is_ok());
            }
        }
        // A CR ends a line too, and its LF may come in the next chunk.
        let mut guard = Guard::new(MAX_BODY);
        let cr_line = Bytes::from([&b"data: "[..], &vec![b'x'; 1024 * 1024], b"\r"].concat());
        for _ in 0..2 * MAX_BODY / cr_line.len() {
            assert!(guard.next(cr_line.clone()).is_ok());
            assert!(guard.next(Bytes::from_static(b"\n\r\n")).is_ok());
        }
    }
}
