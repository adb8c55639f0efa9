//! Newline-delimited framing with a bound on every line.
//!
//! The stdio transport of every MCP revision is one JSON-RPC message per line.
//! [`LineFramer`] cuts a byte stream into those lines without ever holding
//! more than its limit: a line that runs past it is dropped as it arrives and
//! reported once, and the framer goes on with the next line, so an oversized
//! message costs the peer that message and not the connection.

/// The default longest line: 16 MiB, well past any real message and well
/// short of what would let one peer exhaust a server's memory.
pub const DEFAULT_MAX_LINE: usize = 16 * 1024 * 1024;

/// The default deepest nesting of arrays and objects in one message.
pub const DEFAULT_MAX_DEPTH: usize = 64;

/// A frame that could not be delivered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// A line longer than the limit; its bytes were discarded.
    #[error("a line exceeded the {limit}-byte limit and was discarded")]
    LineTooLong {
        /// The limit in force.
        limit: usize,
    },
}

/// Cuts a byte stream into lines, holding at most `max_line` bytes.
#[derive(Debug)]
pub struct LineFramer {
    max_line: usize,
    buffer: Vec<u8>,
    /// Set while the rest of an oversized line is being thrown away.
    discarding: bool,
}

impl Default for LineFramer {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_LINE)
    }
}

impl LineFramer {
    /// A framer refusing lines longer than `max_line` bytes.
    #[must_use]
    pub const fn new(max_line: usize) -> Self {
        Self {
            max_line,
            buffer: Vec::new(),
            discarding: false,
        }
    }

    /// The longest line this framer delivers.
    #[must_use]
    pub const fn max_line(&self) -> usize {
        self.max_line
    }

    /// Feeds bytes read from the stream and returns every event they complete,
    /// in order: each line (without its `\n` or `\r\n`), or an error for a
    /// line that was too long. Empty lines are skipped.
    pub fn push(&mut self, mut bytes: &[u8]) -> Vec<Result<Vec<u8>, FrameError>> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let (chunk, rest, ends_line) = match memchr::memchr(b'\n', bytes) {
                Some(at) => {
                    let (line, rest) = bytes.split_at(at);
                    (line, rest.get(1..).unwrap_or_default(), true)
                }
                None => (bytes, &[][..], false),
            };
            bytes = rest;
            if self.discarding {
                if ends_line {
                    self.discarding = false;
                }
                continue;
            }
            // One spare byte for a `\r` that is about to be trimmed, or may
            // be: a read can end between a line's `\r` and its `\n`.
            let spare = ends_line || chunk.last() == Some(&b'\r');
            if self.buffer.len() + chunk.len() > self.max_line + usize::from(spare) {
                self.buffer.clear();
                self.discarding = !ends_line;
                out.push(Err(FrameError::LineTooLong {
                    limit: self.max_line,
                }));
                continue;
            }
            self.buffer.extend_from_slice(chunk);
            if ends_line {
                let mut line = core::mem::take(&mut self.buffer);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                if line.len() > self.max_line {
                    out.push(Err(FrameError::LineTooLong {
                        limit: self.max_line,
                    }));
                } else if !line.iter().all(u8::is_ascii_whitespace) {
                    out.push(Ok(line));
                }
            }
        }
        out
    }

    /// What is left when the stream ends: a final line without a newline.
    #[must_use]
    pub fn finish(self) -> Option<Result<Vec<u8>, FrameError>> {
        if self.discarding {
            return None;
        }
        let line = self.buffer;
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        // Only the spare byte a `\r` was let in on can put it over.
        if line.len() > self.max_line {
            return Some(Err(FrameError::LineTooLong {
                limit: self.max_line,
            }));
        }
        Some(Ok(line))
    }
}

/// Whether `json` nests arrays and objects more than `limit` deep.
///
/// No value nests deeper than the number of brackets that open in it, and
/// counting those is one vectorised search, several times cheaper than
/// [`nesting_depth`]'s walk through strings and escapes. Only a frame with
/// more than `limit` opening brackets, inside strings or not, is walked.
#[must_use]
pub fn deeper_than(json: &[u8], limit: usize) -> bool {
    let opening = memchr::memchr2_iter(b'[', b'{', json).count();
    opening > limit && nesting_depth(json, limit) > limit
}

/// The deepest nesting of arrays and objects in `json`, stopping at `limit + 1`.
///
/// A cheap scan before parsing, so that a message nested ten thousand levels
/// deep is refused by size rather than by whatever the parser's recursion
/// limit happens to be. Brackets inside strings are skipped.
#[must_use]
pub fn nesting_depth(json: &[u8], limit: usize) -> usize {
    let mut depth = 0usize;
    let mut deepest = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for byte in json {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
                if deepest > limit {
                    return deepest;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_line_at_the_limit_ended_by_crlf_passes_however_the_reads_fall() {
        for cut in 1..7 {
            let stream = b"abcd\r\n{}\n";
            let (first, second) = stream.split_at(cut);
            let mut framer = LineFramer::new(4);
            let mut events = framer.push(first);
            events.extend(framer.push(second));
            assert_eq!(
                lines(events),
                [Ok("abcd".into()), Ok("{}".into())],
                "cut at {cut}"
            );
        }
        // A spare byte let in for a `\r` that no `\n` follows is no licence.
        let mut framer = LineFramer::new(4);
        assert!(framer.push(b"abcd\r").is_empty());
        assert!(matches!(
            framer.finish(),
            Some(Err(FrameError::LineTooLong { .. }))
        ));
    }

    use super::*;

    fn lines(events: Vec<Result<Vec<u8>, FrameError>>) -> Vec<Result<String, FrameError>> {
        events
            .into_iter()
            .map(|e| e.map(|l| String::from_utf8_lossy(&l).into_owned()))
            .collect()
    }

    #[test]
    fn a_line_split_across_reads_is_delivered_once_whole() {
        let mut framer = LineFramer::new(64);
        assert!(framer.push(b"{\"a\":").is_empty());
        assert_eq!(
            lines(framer.push(b"1}\r\n{}\n")),
            [Ok("{\"a\":1}".into()), Ok("{}".into())]
        );
    }

    #[test]
    fn an_oversized_line_is_reported_once_and_the_next_line_survives() {
        let mut framer = LineFramer::new(8);
        let mut events = framer.push(b"0123456789");
        events.extend(framer.push(b"abcdef"));
        events.extend(framer.push(b"\n{}\n"));
        assert_eq!(
            lines(events),
            [Err(FrameError::LineTooLong { limit: 8 }), Ok("{}".into())]
        );
    }

    #[test]
    fn a_line_exactly_at_the_limit_is_delivered() {
        let mut framer = LineFramer::new(4);
        assert_eq!(lines(framer.push(b"abcd\r\n")), [Ok("abcd".into())]);
    }

    #[test]
    fn blank_lines_are_skipped() {
        let mut framer = LineFramer::new(16);
        assert_eq!(lines(framer.push(b"\n  \n{}\n")), [Ok("{}".into())]);
    }

    #[test]
    fn the_last_line_without_a_newline_is_kept_at_the_end() {
        let mut framer = LineFramer::new(16);
        assert!(framer.push(b"{}").is_empty());
        assert_eq!(framer.finish(), Some(Ok(b"{}".to_vec())));
    }

    #[test]
    fn deeper_than_agrees_with_the_full_scan() {
        let frames: [&[u8]; 5] = [
            b"[[[]]]",
            b"{\"a\":[[1]],\"b\":\"[[[[\"}",
            b"[[[[",
            b"\"[[[[[[\"",
            b"[{\"x\":[{}]},[]]",
        ];
        for frame in frames {
            for limit in 0..6 {
                assert_eq!(
                    deeper_than(frame, limit),
                    nesting_depth(frame, limit) > limit,
                    "{} at {limit}",
                    String::from_utf8_lossy(frame)
                );
            }
        }
    }

    #[test]
    fn brackets_inside_strings_do_not_count_as_nesting() {
        assert_eq!(nesting_depth(br#"{"a":"[[[[\"{{"}"#, 64), 1);
        assert_eq!(nesting_depth(b"[[[[]]]]", 64), 4);
        assert_eq!(nesting_depth(&[b'['; 1000], 10), 11);
    }
}
