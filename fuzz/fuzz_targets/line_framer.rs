//! The stdio line framer (`protocol_droid_domain::jsonrpc::framing`), as the
//! stdio transport and the ACP peer drive it: bytes in arbitrary reads, each
//! line checked for depth and then parsed.
//!
//! Input: byte 0 picks the line limit (1..=64, small so that oversized
//! lines are common), byte 1 seeds how the stream is cut into reads, the
//! rest is the stream.
//!
//! Invariants:
//! - the events do not depend on how the stream is cut into reads;
//! - they equal a direct model of the documented behaviour (split on `\n`,
//!   one trailing `\r` dropped, blank lines skipped, a line over the limit
//!   reported once as `LineTooLong` when it ends, a last line without `\n`
//!   kept by `finish`, or reported by it if it overflowed; the `id` and
//!   `method` read from an over-long line are left out of this comparison,
//!   and the unit tests pin them);
//! - every delivered line is within the limit, holds no `\n` and is not blank;
//! - `deeper_than` agrees with `nesting_depth` on every line.
//!
//! Fault found and fixed (fuzz/regressions/line_framer): a line of exactly
//! the limit ended by `\r\n` was refused when a read ended between its `\r`
//! and `\n`. `PD_FUZZ_KNOWN_ISSUES` containing `crlf-split` still makes the
//! target accept such a difference, for bisecting.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use protocol_droid_domain::jsonrpc::framing::{FrameError, LineFramer, deeper_than, nesting_depth};
use protocol_droid_domain::jsonrpc::parse;
use protocol_droid_fuzz::Rng;

type Event = Result<Vec<u8>, FrameError>;

/// An over-long line as the model reports it: what it said is not modelled.
const fn too_long(limit: usize) -> FrameError {
    FrameError::LineTooLong {
        limit,
        id: None,
        method: false,
        answer: false,
    }
}

/// `event` as the model reports it.
fn modelled(event: &Event) -> Event {
    match event {
        Err(FrameError::LineTooLong { limit, .. }) => Err(too_long(*limit)),
        other => other.clone(),
    }
}

/// The documented behaviour, written directly.
fn model(stream: &[u8], max_line: usize) -> (Vec<Event>, Option<Event>) {
    let mut events = Vec::new();
    let mut segments: Vec<&[u8]> = stream.split(|b| *b == b'\n').collect();
    // `split` yields the text after the last `\n` (possibly empty) last.
    let tail = segments.pop().unwrap_or_default();
    for segment in segments {
        let line = segment.strip_suffix(b"\r").unwrap_or(segment);
        if line.len() > max_line {
            events.push(Err(too_long(max_line)));
        } else if !line.iter().all(u8::is_ascii_whitespace) {
            events.push(Ok(line.to_vec()));
        }
    }
    // A last line over the limit only by a trailing `\r` may still have been
    // a line at the limit ended by `\r\n` until the stream ended: it is
    // reported when the stream ends, by `finish`, unless it is blank.
    let last = if tail.len() == max_line + 1 && tail.last() == Some(&b'\r') {
        if tail.iter().all(u8::is_ascii_whitespace) {
            None
        } else {
            Some(Err(too_long(max_line)))
        }
    } else if tail.len() > max_line {
        Some(Err(too_long(max_line)))
    } else if tail.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        Some(Ok(tail.to_vec()))
    };
    (events, last)
}

static TOLERATE_CRLF_SPLIT: LazyLock<bool> = LazyLock::new(|| {
    std::env::var("PD_FUZZ_KNOWN_ISSUES").is_ok_and(|v| v.split(',').any(|i| i == "crlf-split"))
});

/// The events of `stream` fed in reads of the sizes `seed` draws; with
/// `keep_crlf`, a read that would end between `\r` and `\n` takes the `\n`.
fn cut(stream: &[u8], max_line: usize, seed: u8, keep_crlf: bool) -> (Vec<Event>, Option<Event>) {
    let mut rng = Rng::new(u32::from(seed));
    let mut pieces = LineFramer::new(max_line);
    let mut events = Vec::new();
    let mut rest = stream;
    while !rest.is_empty() {
        let mut at = rng.between_one_and(8).min(rest.len());
        if keep_crlf && rest[at - 1] == b'\r' && rest.get(at) == Some(&b'\n') {
            at += 1;
        }
        let (head, tail) = rest.split_at(at);
        events.extend(pieces.push(head));
        rest = tail;
    }
    (events, pieces.finish())
}

fuzz_target!(|data: &[u8]| {
    let [limit, seed, stream @ ..] = data else {
        return;
    };
    let max_line = usize::from(limit % 64) + 1;

    let mut whole = LineFramer::new(max_line);
    let events = whole.push(stream);
    let last = whole.finish();

    let (mut cut_events, mut cut_last) = cut(stream, max_line, *seed, false);
    if *TOLERATE_CRLF_SPLIT && (&cut_events, &cut_last) != (&events, &last) {
        (cut_events, cut_last) = cut(stream, max_line, *seed, true);
    }

    assert_eq!(
        (&events, &last),
        (&cut_events, &cut_last),
        "the events depend on how the stream was cut into reads"
    );
    let (expected, expected_last) = model(stream, max_line);
    assert_eq!(
        (
            &events.iter().map(modelled).collect::<Vec<_>>(),
            &last.as_ref().map(modelled)
        ),
        (&expected, &expected_last),
        "the framer disagrees with its documented behaviour"
    );

    for line in events.iter().chain(last.iter()).filter_map(|e| e.as_ref().ok()) {
        assert!(line.len() <= max_line);
        assert!(!line.contains(&b'\n'));
        assert!(!line.iter().all(u8::is_ascii_whitespace));
        for depth in [0, 1, 2, 3, 8] {
            assert_eq!(deeper_than(line, depth), nesting_depth(line, depth) > depth);
        }
        // What the stdio reader does next with a line.
        if !deeper_than(line, 64) {
            let _ = parse(line);
        }
    }
});
