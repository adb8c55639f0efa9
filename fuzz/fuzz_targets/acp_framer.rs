//! The ACP agent peer's reader
//! (`protocol_droid::adapters::primary::acp::AcpAgentPeer`): stdin bytes
//! are framed into lines and read as ACP JSON-RPC, requests and
//! notifications are delivered, everything else is refused on stdout.
//!
//! Input: byte 0 picks the line limit (48 << 0..=7 bytes), byte 1 the depth
//! limit (1..=72), byte 2 seeds how stdin is cut into writes, the rest is
//! what the client writes. The target appends `\n` and a last request (so it
//! knows when every line before it has been read), answers each request it
//! is handed (`send_reply`, or `reply_invalid_params` for params that do not
//! fit the method), then closes stdin.
//!
//! Invariants, against a direct model of the rules in the module's docs
//! (`wire.rs`): the requests and notifications delivered are exactly those
//! of the model, in order, with their ids as sent; stdout holds, as
//! complete JSON lines, exactly one answer per request and one refusal per
//! line the model refuses, each refusal with the model's code and echoed
//! id; nothing else is written.
#![no_main]

use std::sync::LazyLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use protocol_droid::adapters::primary::acp::{AcpAgentPeer, AcpPeerOptions, Inbound};
use protocol_droid::domain::jsonrpc::framing::{FrameError, LineFramer, deeper_than, request_id};
use protocol_droid_fuzz::Rng;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime")
});

const LAST: &[u8] = br#"{"jsonrpc":"2.0","id":"@","method":"@"}"#;

/// What the peer must do with one line.
#[derive(Debug, Clone, PartialEq)]
enum Expect {
    Request { id: Value, method: String },
    Notification { method: String },
    /// Read and dropped: a response, or response-shaped but malformed.
    Silent,
    Refused { code: i64, id: Value },
}

fn is_id(value: &Value) -> bool {
    match value {
        Value::Null | Value::String(_) => true,
        Value::Number(n) => n.is_i64() || n.is_u64(),
        _ => false,
    }
}

/// The rules of `wire.rs`, written directly.
fn classify(line: &[u8], max_depth: usize) -> Expect {
    const PARSE: i64 = -32700;
    const INVALID: i64 = -32600;
    let refused = |code, id| Expect::Refused { code, id };
    // Refused unparsed, under the id read without parsing (the framing
    // module's tests pin how).
    if deeper_than(line, max_depth) {
        return refused(INVALID, request_id(line).map_or(Value::Null, |id| id.to_json()));
    }
    let Ok(value) = serde_json::from_slice::<Value>(line) else {
        return refused(PARSE, Value::Null);
    };
    let Value::Object(map) = value else {
        return refused(INVALID, Value::Null);
    };
    let id = map.get("id").cloned();
    if id.as_ref().is_some_and(|id| !is_id(id)) {
        return refused(INVALID, Value::Null);
    }
    let echo = id.clone().unwrap_or(Value::Null);
    if map.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return refused(INVALID, echo);
    }
    match map.get("method") {
        Some(Value::String(method)) => match id {
            Some(id) => Expect::Request {
                id,
                method: method.clone(),
            },
            None => Expect::Notification {
                method: method.clone(),
            },
        },
        Some(_) => refused(INVALID, echo),
        None => {
            let (result, error) = (map.contains_key("result"), map.contains_key("error"));
            match (id, result || error) {
                (_, true) => Expect::Silent,
                (None, false) => refused(INVALID, Value::Null),
                (Some(id), false) => refused(INVALID, id),
            }
        }
    }
}

async fn run(max_line: usize, max_depth: usize, seed: u8, stream: Vec<u8>) {
    let mut framer = LineFramer::new(max_line);
    let expected: Vec<Expect> = framer
        .push(&stream)
        .into_iter()
        .map(|event| match event {
            Ok(line) => classify(&line, max_depth),
            Err(FrameError::LineTooLong {
                id: Some(id),
                method: true,
                ..
            }) => Expect::Refused {
                code: -32600,
                id: id.to_json(),
            },
            Err(_) => Expect::Refused {
                code: -32600,
                id: Value::Null,
            },
        })
        .collect();
    let requests = expected
        .iter()
        .filter(|e| matches!(e, Expect::Request { .. }))
        .count();
    assert!(
        matches!(expected.last(), Some(Expect::Request { method, .. }) if method == "@"),
        "the closing request was not read as one: {expected:?}"
    );

    let (mut client_in, agent_in) = tokio::io::duplex(4096);
    let (agent_out, mut client_out) = tokio::io::duplex(64 * 1024);
    let options = AcpPeerOptions {
        max_line,
        max_depth,
        queue: 8,
        ..AcpPeerOptions::default()
    };
    let mut peer = AcpAgentPeer::with_options(agent_in, agent_out, options);
    let output = tokio::spawn(async move {
        let mut out = Vec::new();
        let _ = client_out.read_to_end(&mut out).await;
        out
    });
    let writer = tokio::spawn(async move {
        let mut rng = Rng::new(u32::from(seed));
        let mut rest = stream.as_slice();
        while !rest.is_empty() {
            let (head, tail) = rest.split_at(rng.between_one_and(512).min(rest.len()));
            if client_in.write_all(head).await.is_err() {
                return None;
            }
            rest = tail;
            tokio::task::yield_now().await;
        }
        Some(client_in)
    });

    let mut delivered = Vec::new();
    let mut answered = Vec::new();
    while answered.len() < requests {
        let next = tokio::time::timeout(Duration::from_secs(20), peer.recv_request())
            .await
            .expect("the peer delivered fewer requests than the input holds");
        match next.expect("the peer closed before the input ended") {
            Inbound::Request(request) => {
                delivered.push(Expect::Request {
                    id: request.id.clone(),
                    method: request.method.clone(),
                });
                let sent = match &request.params {
                    Ok(_) => peer.send_reply(request.id.clone(), json!({"ok": true})).await,
                    Err(invalid) => peer.reply_invalid_params(request.id.clone(), invalid).await,
                };
                sent.expect("an answer to a delivered request is written");
                answered.push(request.id.clone());
            }
            Inbound::Notification(notification) => delivered.push(Expect::Notification {
                method: notification.method,
            }),
        }
    }
    // Every line has been read, and every refusal queued before the last
    // answer has been written; closing stdin ends the peer.
    drop(writer.await.ok().flatten());
    let rest = tokio::time::timeout(Duration::from_secs(20), peer.recv_request())
        .await
        .expect("the peer did not end with its input");
    assert!(rest.is_none(), "a message arrived after the last one: {rest:?}");
    drop(peer);
    let out = output.await.expect("the output reader");

    let wanted: Vec<Expect> = expected
        .iter()
        .filter(|e| matches!(e, Expect::Request { .. } | Expect::Notification { .. }))
        .cloned()
        .collect();
    assert_eq!(delivered, wanted, "delivered messages differ from the model");

    // Stdout: complete lines of JSON only.
    assert!(out.is_empty() || out.ends_with(b"\n"), "a partial line was written");
    let mut refusals = Vec::new();
    let mut replies = Vec::new();
    for line in out.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let value: Value = serde_json::from_slice(line).expect("the peer writes JSON lines");
        let Value::Object(map) = value else {
            panic!("the peer wrote a non-object");
        };
        assert_eq!(map.get("jsonrpc"), Some(&json!("2.0")));
        let id = map.get("id").expect("every answer carries an id").clone();
        match (map.get("result"), map.get("error")) {
            (Some(_), None) => replies.push(id),
            (None, Some(error)) => {
                let code = error["code"].as_i64().expect("an integer code");
                assert!(error["message"].is_string());
                if code == -32602 {
                    replies.push(id);
                } else {
                    refusals.push(Expect::Refused { code, id });
                }
            }
            _ => panic!("an answer needs exactly one of result and error"),
        }
    }
    assert_eq!(replies, answered, "the answers written differ from those sent");
    let refused: Vec<Expect> = expected
        .into_iter()
        .filter(|e| matches!(e, Expect::Refused { .. }))
        .collect();
    assert_eq!(refusals, refused, "the refusals written differ from the model");
}

fuzz_target!(|data: &[u8]| {
    let [limit, depth, seed, input @ ..] = data else {
        return;
    };
    let max_line = 48 << (limit % 8);
    let max_depth = usize::from(depth % 72) + 1;
    let mut stream = input.to_vec();
    stream.push(b'\n');
    stream.extend_from_slice(LAST);
    stream.push(b'\n');
    RUNTIME.block_on(run(max_line, max_depth, *seed, stream));
});
