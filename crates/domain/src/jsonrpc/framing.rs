//! Newline-delimited framing with a bound on every line.
//!
//! The stdio transport of every MCP revision is one JSON-RPC message per line.
//! [`LineFramer`] cuts a byte stream into those lines without ever holding
//! more than its limit: a line that runs past it is dropped as it arrives and
//! reported once, and the framer goes on with the next line, so an oversized
//! message costs the peer that message and not the connection. What the
//! discarded line said at its top level (its `id`, and whether it named a
//! `method`) is read as it goes by, so that the request it carried can be
//! refused, or the request it answered failed, rather than left waiting.

use super::id::RequestId;

/// The default longest line: 16 MiB, well past any real message and well
/// short of what would let one peer exhaust a server's memory.
pub const DEFAULT_MAX_LINE: usize = 16 * 1024 * 1024;

/// The default deepest nesting of arrays and objects in one message.
pub const DEFAULT_MAX_DEPTH: usize = 64;

/// A frame that could not be delivered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// A line longer than the limit; its bytes were discarded. Reported
    /// when it ends, or, for one that runs on 1 MiB past the limit
    /// without ending, then, with what it had said so far (the rest is
    /// discarded as it comes, and its end reports nothing more).
    #[error("a line exceeded the {limit}-byte limit and was discarded")]
    LineTooLong {
        /// The limit in force.
        limit: usize,
        /// The `id` member of the object the line held, when one was read.
        id: Option<RequestId>,
        /// Whether that object named a `method`: a request or notification
        /// rather than a response.
        method: bool,
        /// Whether that object had a `result` or an `error`: with no
        /// `method`, an answer to a request.
        answer: bool,
    },
}

/// Cuts a byte stream into lines, holding at most `max_line` bytes.
#[derive(Debug)]
pub struct LineFramer {
    max_line: usize,
    buffer: Vec<u8>,
    /// Set while the rest of an oversized line is being thrown away: what
    /// it has said so far.
    discarding: Option<Outline>,
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
            discarding: None,
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
            if let Some(outline) = self.discarding.as_mut() {
                outline.read(chunk);
                if ends_line {
                    out.extend(
                        self.discarding
                            .take()
                            .filter(|o| !o.told)
                            .map(|o| o.too_long(self.max_line))
                            .map(Err),
                    );
                } else {
                    out.extend(outline.tell_early(self.max_line).map(Err));
                }
                continue;
            }
            // One spare byte for a `\r` that is about to be trimmed, or may
            // be: a read can end between a line's `\r` and its `\n`.
            let spare = ends_line || chunk.last() == Some(&b'\r');
            if self.buffer.len() + chunk.len() > self.max_line + usize::from(spare) {
                let mut outline = Outline::default();
                outline.read(&self.buffer);
                outline.read(chunk);
                // Dropped rather than cleared: the memory a line at the limit
                // took is not held for lines that need a small part of it.
                self.buffer = Vec::new();
                if ends_line {
                    out.push(Err(outline.too_long(self.max_line)));
                } else {
                    out.extend(outline.tell_early(self.max_line).map(Err));
                    self.discarding = Some(outline);
                }
                continue;
            }
            self.buffer.extend_from_slice(chunk);
            if ends_line {
                let mut line = core::mem::take(&mut self.buffer);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                if line.len() > self.max_line {
                    out.push(Err(Outline::of(&line).too_long(self.max_line)));
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
        if let Some(outline) = self.discarding {
            return (!outline.told).then(|| Err(outline.too_long(self.max_line)));
        }
        let line = self.buffer;
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        // Only the spare byte a `\r` was let in on can put it over.
        if line.len() > self.max_line {
            return Some(Err(Outline::of(&line).too_long(self.max_line)));
        }
        Some(Ok(line))
    }
}

/// The `id` of the request `line` holds, read without parsing it, for
/// refusing under its own id a request that will not be parsed (one nested
/// too deep): `None` when the line names no `method` or has no usable id.
#[must_use]
pub fn request_id(line: &[u8]) -> Option<RequestId> {
    let outline = Outline::of(line);
    outline.id.filter(|_| outline.method)
}

/// The `id` of the response `line` holds, read without parsing it, for
/// failing at once the request of ours that a response nested too deep
/// answers: `None` when the line names a `method`, has neither a `result`
/// nor an `error`, or has no usable id.
#[must_use]
pub fn response_id(line: &[u8]) -> Option<RequestId> {
    let outline = Outline::of(line);
    outline.id.filter(|_| !outline.method && outline.answer)
}

/// The most of a member's name or of an `id` kept while a line is
/// discarded; a longer one is neither `id`, `method` nor an id worth reading.
const KEPT_MAX: usize = 256;

/// What an oversized line says at its top level, read as it is thrown away.
///
/// A small lexer that follows strings and nesting only, so that it costs one
/// pass and holds at most [`KEPT_MAX`] bytes whatever the line's length;
/// string contents it need not keep are skipped with one search. Bytes that
/// are not JSON leave it with nothing to report, never with an error.
#[derive(Debug, Default)]
struct Outline {
    depth: usize,
    in_string: bool,
    escaped: bool,
    at: Place,
    /// A member's name with its quotes, or the `id`'s value as written.
    kept: Vec<u8>,
    /// `kept` ran past [`KEPT_MAX`].
    overflowed: bool,
    id: Option<RequestId>,
    method: bool,
    /// A `result` or an `error` member was seen.
    answer: bool,
    /// The line was reported before it ended (see [`Outline::tell_early`]).
    told: bool,
    /// How many of the line's bytes have been read.
    length: usize,
}

/// How far past the limit a line runs before it is reported without having
/// ended: far enough that a line a little too long is reported at its end,
/// with the `id` a parser would keep, and soon enough that one that never
/// ends fails what it answers long before that request's timeout.
const TELL_AFTER: usize = 1024 * 1024;

/// Where the lexer is in the top-level object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Place {
    /// Before the object opens.
    #[default]
    Start,
    /// Where a member's name comes next.
    Name,
    /// Inside a member's name.
    InName,
    /// After a name, before its `:`.
    Colon,
    /// After `"id":`, before the value.
    Id,
    /// Inside an `id` written as a string.
    IdString,
    /// Inside an `id` written as a number (or a literal).
    IdBare,
    /// Inside any other member's value.
    Value,
}

impl Outline {
    /// The outline of a whole line.
    fn of(line: &[u8]) -> Self {
        let mut outline = Self::default();
        outline.read(line);
        outline
    }

    /// The error reporting the line, with what it said.
    fn too_long(&self, limit: usize) -> FrameError {
        FrameError::LineTooLong {
            limit,
            id: self.id.clone(),
            method: self.method,
            answer: self.answer,
        }
    }

    /// The report of a line still being thrown away, once it has run
    /// [`TELL_AFTER`] past the limit and said enough to act on (its `id`,
    /// and a `method` or an answer): the request it carries is refused, or
    /// the request it answers failed, now rather than when it ends, which a
    /// peer writing without end never lets happen. Told once; the line's
    /// end then says nothing more.
    fn tell_early(&mut self, limit: usize) -> Option<FrameError> {
        let ready = !self.told
            && self.length > limit.saturating_add(TELL_AFTER)
            && self.id.is_some()
            && (self.method || self.answer);
        self.told |= ready;
        ready.then(|| self.too_long(limit))
    }

    fn read(&mut self, mut bytes: &[u8]) {
        self.length = self.length.saturating_add(bytes.len());
        loop {
            if self.in_string && !self.escaped && !self.keeping() {
                // Nothing in this string matters but where it ends.
                match memchr::memchr2(b'"', b'\\', bytes) {
                    Some(at) => bytes = bytes.get(at..).unwrap_or_default(),
                    None => return,
                }
            }
            let Some((&byte, rest)) = bytes.split_first() else {
                return;
            };
            bytes = rest;
            if self.in_string {
                self.string_byte(byte);
            } else {
                self.structural(byte);
            }
        }
    }

    const fn keeping(&self) -> bool {
        self.depth == 1 && matches!(self.at, Place::InName | Place::IdString | Place::IdBare)
    }

    fn keep(&mut self, byte: u8) {
        if self.kept.len() < KEPT_MAX {
            self.kept.push(byte);
        } else {
            self.overflowed = true;
        }
    }

    fn string_byte(&mut self, byte: u8) {
        let keeping = self.keeping();
        if keeping {
            self.keep(byte);
        }
        match (self.escaped, byte) {
            (true, _) => self.escaped = false,
            (false, b'\\') => self.escaped = true,
            (false, b'"') => {
                self.in_string = false;
                if keeping {
                    self.string_ended();
                }
            }
            _ => {}
        }
    }

    fn string_ended(&mut self) {
        match self.at {
            Place::InName => self.at = Place::Colon,
            Place::IdString => self.id_ended(),
            _ => {}
        }
    }

    fn structural(&mut self, byte: u8) {
        let top = self.depth == 1;
        match byte {
            b'"' => {
                self.in_string = true;
                if top && matches!(self.at, Place::Name | Place::Id) {
                    self.at = if self.at == Place::Name {
                        Place::InName
                    } else {
                        Place::IdString
                    };
                    self.kept.clear();
                    self.overflowed = false;
                    self.keep(byte);
                }
            }
            b'{' | b'[' => {
                if top {
                    // An object or array is no id.
                    self.at = Place::Value;
                }
                self.depth += 1;
                if self.depth == 1 {
                    self.at = if byte == b'{' {
                        Place::Name
                    } else {
                        Place::Value
                    };
                }
            }
            b'}' | b']' => {
                if top && self.at == Place::IdBare {
                    self.id_ended();
                }
                self.depth = self.depth.saturating_sub(1);
            }
            b':' if top && self.at == Place::Colon => {
                let name = core::mem::take(&mut self.kept);
                self.at = Place::Value;
                if !self.overflowed {
                    match name.as_slice() {
                        // The last `id` is the one a parser keeps.
                        b"\"id\"" => {
                            self.id = None;
                            self.at = Place::Id;
                        }
                        b"\"method\"" => self.method = true,
                        b"\"result\"" | b"\"error\"" => self.answer = true,
                        _ => {}
                    }
                }
            }
            b',' if top => {
                if self.at == Place::IdBare {
                    self.id_ended();
                }
                self.at = Place::Name;
            }
            _ if byte.is_ascii_whitespace() => {}
            _ if top && matches!(self.at, Place::Id | Place::IdBare) => {
                if self.at == Place::Id {
                    self.kept.clear();
                    self.overflowed = false;
                    self.at = Place::IdBare;
                }
                self.keep(byte);
            }
            _ => {}
        }
    }

    fn id_ended(&mut self) {
        if !self.overflowed {
            self.id = serde_json::from_slice(&self.kept).ok();
        }
        self.kept.clear();
        self.at = Place::Value;
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
            [
                Err(FrameError::LineTooLong {
                    limit: 8,
                    id: None,
                    method: false,
                    answer: false,
                }),
                Ok("{}".into())
            ]
        );
    }

    /// What each oversized line says, however the reads fall; `None` for
    /// a cut that did not give one error alone.
    fn outline_of(line: &str) -> Vec<Option<(Option<RequestId>, bool)>> {
        (1..line.len())
            .map(|cut| {
                let (first, second) = line.as_bytes().split_at(cut);
                let mut framer = LineFramer::new(4);
                let mut events = framer.push(first);
                events.extend(framer.push(second));
                events.extend(framer.push(b"\n"));
                match events.as_slice() {
                    [Err(FrameError::LineTooLong { id, method, .. })] => {
                        Some((id.clone(), *method))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    #[test]
    fn an_oversized_lines_id_and_method_are_read_as_it_is_discarded() {
        let cases = [
            // The id first, as most write it, or last, as JSON.stringify
            // of the TypeScript SDK's responses does.
            (
                r#"{"jsonrpc":"2.0","id":7,"result":{"text":"xxxx"}}"#,
                Some(7.into()),
                false,
            ),
            (
                r#"{"result":{"id":1,"text":"x\"}"},"id":2}"#,
                Some(2.into()),
                false,
            ),
            (
                r#"{ "id" : "a\"b" , "method":"tools/call","params":{}}"#,
                Some("a\"b".into()),
                true,
            ),
            (r#"{"method":"x","params":{"id":3}}"#, None, true),
            // Names and strings that only look like the members.
            (r#"{"ids":1,"x":"\"id\":4","methods":[]}"#, None, false),
            // Ids MCP does not allow, and lines that are not objects.
            (r#"{"id":{"n":1},"result":{}}"#, None, false),
            (r#"{"id":1.5,"result":{}}"#, None, false),
            (r#"{"id":null,"error":{}}"#, None, false),
            // The last id is the one a parser keeps.
            (r#"{"id":1,"method":"m","id":{"n":2}}"#, None, true),
            (
                r#"{"id":{"n":1},"method":"m","id":2}"#,
                Some(2.into()),
                true,
            ),
            (r#"[{"id":1,"method":"m"}]"#, None, false),
            ("not JSON at all", None, false),
        ];
        for (line, id, method) in cases {
            for (cut, said) in outline_of(line).into_iter().enumerate() {
                assert_eq!(
                    said,
                    Some((id.clone(), method)),
                    "{line} cut at {}",
                    cut + 1
                );
            }
        }
    }

    #[test]
    fn a_requests_id_is_read_however_deep_it_nests() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","params":{{"a":{}{}}},"id":"deep","method":"m"}}"#,
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        assert_eq!(request_id(deep.as_bytes()), Some("deep".into()));
        assert_eq!(
            request_id(br#"{"jsonrpc":"2.0","id":3,"result":[[[]]]}"#),
            None
        );
    }

    #[test]
    fn a_responses_id_is_read_however_deep_it_nests() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","result":{{"a":{}{}}},"id":7}}"#,
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        assert_eq!(response_id(deep.as_bytes()), Some(RequestId::Number(7)));
        assert_eq!(
            response_id(br#"{"id":3,"method":"m","params":[[[]]]}"#),
            None
        );
        assert_eq!(response_id(br#"{"result":[[[]]]}"#), None);
        assert_eq!(
            response_id(br#"{"id":2,"error":{"code":1,"message":"m","data":[[]]}}"#),
            Some(RequestId::Number(2))
        );
        // Neither a result nor an error at the top: no answer.
        assert_eq!(response_id(br#"{"id":4,"params":[[[]]]}"#), None);
        assert_eq!(response_id(br#"{"id":5,"x":{"result":[[]]}}"#), None);
    }

    #[test]
    fn an_id_too_long_to_keep_is_not_read() {
        let long = "x".repeat(KEPT_MAX);
        let line = format!(r#"{{"id":"{long}","method":"m"}}"#);
        assert_eq!(outline_of(&line).first(), Some(&Some((None, true))));
    }

    #[test]
    fn a_line_still_open_when_the_stream_ends_is_reported_with_its_id() {
        let mut framer = LineFramer::new(8);
        assert!(framer.push(br#"{"id":9,"method":"m","params":"#).is_empty());
        assert_eq!(
            framer.finish(),
            Some(Err(FrameError::LineTooLong {
                limit: 8,
                id: Some(9.into()),
                method: true,
                answer: false,
            }))
        );
    }

    /// A line that runs on without end is reported once it has run far
    /// enough past the limit, not when it ends (which may be never), and
    /// once only: its end, if it comes, says nothing more.
    #[test]
    fn a_line_that_runs_on_is_reported_before_it_ends() {
        let mut framer = LineFramer::new(8);
        assert!(
            framer
                .push(br#"{"jsonrpc":"2.0","id":7,"result":{"text":""#)
                .is_empty()
        );
        let chunk = vec![b'x'; 64 * 1024];
        let mut told = Vec::new();
        let mut pushed = 0;
        while told.is_empty() && pushed <= TELL_AFTER + 8 + chunk.len() {
            told = framer.push(&chunk);
            pushed += chunk.len();
        }
        assert_eq!(
            told,
            [Err(FrameError::LineTooLong {
                limit: 8,
                id: Some(7.into()),
                method: false,
                answer: true,
            })]
        );
        assert!(pushed >= TELL_AFTER, "told after {pushed} bytes");
        assert_eq!(lines(framer.push(b"\"}}\n{}\n")), [Ok("{}".into())]);
        // Nor when the stream ends inside such a line.
        let mut framer = LineFramer::new(8);
        assert!(
            framer
                .push(br#"{"id":1,"method":"m","params":""#)
                .is_empty()
        );
        assert_eq!(framer.push(&vec![b'x'; TELL_AFTER + 16]).len(), 1);
        assert_eq!(framer.finish(), None);
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
