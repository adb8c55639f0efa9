//! Each MCP revision's message decode
//! (`protocol_droid::wire::codec::for_version`).
//!
//! Input: byte 0 picks the revision (2024-11-05, 2025-03-26, 2025-06-18,
//! 2025-11-25, 2026-07-28), byte 1 picks the request method a response is
//! read as the answer to, the rest is one JSON-RPC frame, read with
//! `jsonrpc::parse` as the transports do. A request or notification is read
//! by the revision's codec in both directions (client and server sender); a
//! successful response as a `ServerResult` and a `ClientResult` of the
//! chosen method, and as a `CallToolResult` (`lift_tool_result`, then
//! `lower_tool_result` toward the revision and `finish_result`).
//!
//! Invariants:
//! - a codec reads a method exactly when the revision's table defines it;
//!   `UnknownMethod` otherwise, never for a defined one;
//! - a decoded message names the method it was read from;
//! - writing a decoded message back and decoding again gives the same
//!   message (idempotence, compared as JSON);
//! - writing a decoded message back gives the params or result that were
//!   read, members and all (the wire model's "read what a peer sent and
//!   write it back unchanged"), `null` members aside;
//! - `finish_result` leaves a 2026-07-28 result with a `resultType` and a
//!   legacy one without `resultType`, `ttlMs` or `cacheScope`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use protocol_droid::wire::message::{
    ClientNotification, ClientRequest, ClientResult, ServerNotification, ServerRequest,
    ServerResult,
};
use protocol_droid::wire::codec::{ReadError, RevisionCodec, Sender, for_version};
use protocol_droid::domain::ir::lower::TranslationReport;
use protocol_droid::domain::jsonrpc::{Incoming, Message, parse};
use protocol_droid::domain::{DegradePolicy, Era, ProtocolVersion};
use protocol_droid_fuzz::same_json;
use serde_json::{Map, Value};

const REVISIONS: [ProtocolVersion; 5] = [
    ProtocolVersion::V2024_11_05,
    ProtocolVersion::V2025_03_26,
    ProtocolVersion::V2025_06_18,
    ProtocolVersion::V2025_11_25,
    ProtocolVersion::V2026_07_28,
];

/// Every request method of every revision, and one no revision has.
const METHODS: [&str; 24] = [
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "subscriptions/listen",
    "logging/setLevel",
    "completion/complete",
    "tasks/get",
    "tasks/result",
    "tasks/list",
    "tasks/cancel",
    "sampling/createMessage",
    "roots/list",
    "elicitation/create",
    "x.example/unknown",
    "tools/call",
];

/// `value` without object members that are `null`, anywhere.
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// Writing back what was read gives what was read.
fn faithful(what: &str, read: Option<&Value>, written: Option<&Value>) {
    let read = read.map(without_nulls);
    let written = written.map(without_nulls);
    let same = match (&read, &written) {
        (None, None) => true,
        (Some(a), Some(b)) => same_json(a, b),
        // Absent and empty params are the same request.
        (None, Some(Value::Object(m))) | (Some(Value::Object(m)), None) => m.is_empty(),
        _ => false,
    };
    assert!(
        same,
        "{what} was not written back as read:\n read    {read:?}\n written {written:?}"
    );
}

/// One decode through the codec, checked against the revision's tables.
macro_rules! check_read {
    ($codec:expr, $defined:expr, $read:ident, $ty:ty, $method:expr, $params:expr) => {{
        let codec: &RevisionCodec = $codec;
        match codec.$read($method, $params.clone()) {
            Ok(decoded) => {
                assert!($defined, "{} read {} which it does not define", codec.version, $method);
                assert_eq!(decoded.method(), $method);
                let written = decoded.params().expect("decoded params serialise");
                faithful($method, $params.as_ref(), written.as_ref());
                let again = <$ty>::decode($method, written.clone())
                    .expect("written params decode again");
                let rewritten = again.params().expect("decoded params serialise");
                assert!(
                    match (&written, &rewritten) {
                        (Some(a), Some(b)) => same_json(a, b),
                        (a, b) => a == b,
                    },
                    "{} is not idempotent",
                    $method
                );
            }
            Err(ReadError::UnknownMethod { method, version }) => {
                assert!(!$defined, "{version} refused {method}, which it defines");
                assert_eq!(method, $method);
                assert_eq!(version, codec.version);
            }
            Err(ReadError::InvalidParams { method, .. }) => {
                assert!($defined);
                assert_eq!(method, $method);
            }
            // The error is `#[non_exhaustive]`; a refusal this model does not
            // know is a finding, not something to pass over.
            Err(other) => panic!("a refusal the model does not know: {other:?}"),
        }
    }};
}

fn check_result(codec: &RevisionCodec, method: &str, result: &Value) {
    if let Ok(read) = ServerResult::decode(method, result.clone()) {
        let written = read.encode().expect("a result serialises");
        faithful(method, Some(result), Some(&written));
        let again = ServerResult::decode(method, written.clone()).expect("written result decodes");
        assert!(same_json(&again.encode().expect("serialises"), &written));
    }
    if let Ok(read) = ClientResult::decode(method, result.clone()) {
        let written = read.encode().expect("a result serialises");
        faithful(method, Some(result), Some(&written));
        let again = ClientResult::decode(method, written.clone()).expect("written result decodes");
        assert!(same_json(&again.encode().expect("serialises"), &written));
    }
    if let Some(tool_result) = codec.lift_tool_result(result) {
        let mut report = TranslationReport::new(codec.version);
        let _ = codec.lower_tool_result(tool_result, DegradePolicy::permissive(), &mut report);
    }
    if let Value::Object(map) = result {
        let mut finished: Map<String, Value> = map.clone();
        codec.finish_result(Some(method), &mut finished);
        match codec.version.era() {
            Era::Modern => assert!(finished.contains_key("resultType")),
            Era::Legacy => {
                for member in ["resultType", "ttlMs", "cacheScope"] {
                    assert!(!finished.contains_key(member));
                }
            }
        }
    }
}

fn check_message(codec: &RevisionCodec, method_pick: u8, message: Message) {
    match message {
        Message::Request(request) => {
            let (method, params) = (request.method.as_str(), request.params);
            let client = codec.defines_request(Sender::Client, method);
            let server = codec.defines_request(Sender::Server, method);
            check_read!(codec, client, read_client_request, ClientRequest, method, params);
            check_read!(codec, server, read_server_request, ServerRequest, method, params);
        }
        Message::Notification(notification) => {
            let (method, params) = (notification.method.as_str(), notification.params);
            let client = codec.defines_notification(Sender::Client, method);
            let server = codec.defines_notification(Sender::Server, method);
            check_read!(codec, client, read_client_notification, ClientNotification, method, params);
            check_read!(codec, server, read_server_notification, ServerNotification, method, params);
        }
        Message::Response(response) => {
            if let Ok(result) = &response.outcome {
                let method = METHODS[usize::from(method_pick) % METHODS.len()];
                check_result(codec, method, result);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let [revision, method_pick, frame @ ..] = data else {
        return;
    };
    let codec = for_version(REVISIONS[usize::from(*revision) % REVISIONS.len()]);
    match parse(frame) {
        Ok(Incoming::Single(message)) => check_message(codec, *method_pick, message),
        Ok(Incoming::Batch(items)) => {
            for message in items.into_iter().flatten() {
                check_message(codec, *method_pick, message);
            }
        }
        Err(_) => {}
    }
});
