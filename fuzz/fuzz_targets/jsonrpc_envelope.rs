//! `protocol_droid_domain::jsonrpc::parse`: one frame from a peer.
//!
//! Invariants:
//! - every refusal is `-32700` (not JSON) or `-32600` (not a message), and
//!   `-32700` exactly when `serde_json` cannot read the bytes as a value;
//! - reading the bytes directly equals reading them into a `Value` first
//!   and then through `Message::from_value` (the envelope's streaming
//!   reader must not change what a frame means), except for a message
//!   that repeats a member of its envelope: the bytes are refused
//!   (`-32600`), where a `Value` keeps the last copy;
//! - every message read writes back (`to_value`) to a value that reads as
//!   the same message, both as a value and re-serialised as bytes;
//! - every refusal's `to_response` is itself a valid response carrying the
//!   same code and the id that was readable.
#![no_main]

use libfuzzer_sys::fuzz_target;
use protocol_droid_domain::jsonrpc::{
    EnvelopeError, ErrorCode, Incoming, Message, Response, ResponseId, parse,
};
use protocol_droid_fuzz::same_json;
use serde_json::Value;

fn check_message(message: &Message) {
    let written = message.to_value();
    assert_eq!(
        Message::from_value(written.clone()).as_ref(),
        Ok(message),
        "a message does not read back from its own value"
    );
    let bytes = serde_json::to_vec(&written).expect("a Value always serialises");
    match parse(&bytes) {
        Ok(Incoming::Single(again)) => assert!(
            same_json(&again.to_value(), &written),
            "a message does not read back from its own bytes"
        ),
        other => panic!("a written message reads as {other:?}"),
    }
}

fn check_refusal(error: &EnvelopeError) {
    assert!(
        error.code == ErrorCode::PARSE_ERROR || error.code == ErrorCode::INVALID_REQUEST,
        "unexpected code {:?}",
        error.code
    );
    let response = error.to_response();
    assert_ne!(response.id, ResponseId::Absent, "an error response needs an id");
    let bytes = serde_json::to_vec(&Message::Response(response.clone()).into_value())
        .expect("a Value always serialises");
    match parse(&bytes) {
        Ok(Incoming::Single(Message::Response(Response { id, outcome: Err(e) }))) => {
            assert_eq!(id, response.id);
            assert_eq!(e.code, error.code);
        }
        other => panic!("an error response reads as {other:?}"),
    }
}

/// Whether `error` refuses a message for repeating a member of its
/// envelope, which a `Value` cannot show (it keeps the last copy).
fn repeats_member(error: &EnvelopeError) -> bool {
    let repeats = error.message.starts_with("a message may not repeat its member");
    assert!(!repeats || error.code == ErrorCode::INVALID_REQUEST);
    repeats
}

fn repeats(item: &Result<Message, EnvelopeError>) -> bool {
    item.as_ref().err().is_some_and(repeats_member)
}

fuzz_target!(|data: &[u8]| {
    let read = parse(data);
    let value = serde_json::from_slice::<Value>(data);

    match (&read, value) {
        (Err(e), Err(_)) => assert_eq!(e.code, ErrorCode::PARSE_ERROR),
        (_, Err(_)) => panic!("bytes serde_json refuses were read: {read:?}"),
        (_, Ok(value)) => {
            let expected = match value {
                Value::Array(items) if items.is_empty() => parse(b"[]"),
                Value::Array(items) => Ok(Incoming::Batch(
                    items.into_iter().map(Message::from_value).collect(),
                )),
                other => Message::from_value(other).map(Incoming::Single),
            };
            match (&read, &expected) {
                (Ok(Incoming::Batch(read)), Ok(Incoming::Batch(expected))) => {
                    assert_eq!(read.len(), expected.len());
                    for (read, expected) in read.iter().zip(expected) {
                        if !repeats(read) {
                            assert_eq!(read, expected, "reading bytes and reading a value disagree");
                        }
                    }
                }
                (Err(e), _) if repeats_member(e) => {}
                _ => assert_eq!(read, expected, "reading bytes and reading a value disagree"),
            }
        }
    }

    match &read {
        Ok(Incoming::Single(message)) => check_message(message),
        Ok(Incoming::Batch(items)) => {
            assert!(!items.is_empty());
            for item in items {
                match item {
                    Ok(message) => check_message(message),
                    Err(error) => check_refusal(error),
                }
            }
        }
        Err(error) => check_refusal(error),
    }
});
