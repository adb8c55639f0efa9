//! Measuring protocol-droid: the messages every measured program exchanges.
//!
//! The crate holds three programs and one benchmark suite, none of which the
//! library depends on:
//!
//! - `benches/hot_paths.rs`: criterion micro-benchmarks of framing, the
//!   codecs, `resolve`, the bridge's `translate`, the request digest and
//!   `requestState` sealing;
//! - `load`: drives `droid serve`, the rmcp echo server and the floor server
//!   on loopback and prints a markdown table (`docs/benchmarks.md`);
//! - `rmcp-echo`: the same two tools (`echo`, `add`) on rmcp, in its fastest
//!   configuration;
//! - `floor-echo`: hyper and `serde_json` answering the same bytes with no
//!   MCP logic, which bounds what any server on this stack can reach.
//!
//! This library is what they share: the request and reply bytes, so that
//! every server is asked exactly the same thing.

use serde_json::{Map, Value, json};

/// The revision of the sessions era the harness speaks.
pub const LEGACY_VERSION: &str = "2025-11-25";

/// The stateless revision the harness speaks.
pub const STATELESS_VERSION: &str = "2026-07-28";

/// The text every `echo` call sends and expects back.
pub const ECHO_TEXT: &str = "hello from the load harness";

/// The `initialize` request opening a legacy session, with id 0.
#[must_use]
pub fn initialize_request() -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY_VERSION,
            "capabilities": {},
            "clientInfo": { "name": "protocol-droid-load", "version": env!("CARGO_PKG_VERSION") },
        },
    })
}

/// The notification that completes a legacy handshake.
#[must_use]
pub fn initialized_notification() -> Value {
    json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })
}

/// Appends a legacy `tools/call` of `echo` with `id` to `out`, without the
/// trailing newline.
///
/// Written by hand rather than through `serde_json`, so that making the
/// request costs the load generator next to nothing.
pub fn write_echo_call(id: u64, out: &mut Vec<u8>) {
    write_named_echo_call(id, "echo", out);
}

/// As [`write_echo_call`], for an echo tool called `tool` (a gateway names
/// it `fixture/echo`).
pub fn write_named_echo_call(id: u64, tool: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(id.to_string().as_bytes());
    out.extend_from_slice(br#","method":"tools/call","params":{"name":""#);
    out.extend_from_slice(tool.as_bytes());
    out.extend_from_slice(br#"","arguments":{"text":""#);
    out.extend_from_slice(ECHO_TEXT.as_bytes());
    out.extend_from_slice(br#""}}}"#);
}

/// Appends a 2026-07-28 `tools/call` of `echo` with `id` to `out`: the same
/// call, with the `_meta` a stateless request carries in place of a session.
pub fn write_stateless_echo_call(id: u64, out: &mut Vec<u8>) {
    write_named_stateless_echo_call(id, "echo", out);
}

/// As [`write_stateless_echo_call`], for an echo tool called `tool`.
pub fn write_named_stateless_echo_call(id: u64, tool: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(id.to_string().as_bytes());
    out.extend_from_slice(br#","method":"tools/call","params":{"name":""#);
    out.extend_from_slice(tool.as_bytes());
    out.extend_from_slice(br#"","arguments":{"text":""#);
    out.extend_from_slice(ECHO_TEXT.as_bytes());
    out.extend_from_slice(br#""},"_meta":{"io.modelcontextprotocol/protocolVersion":""#);
    out.extend_from_slice(STATELESS_VERSION.as_bytes());
    out.extend_from_slice(br#"","io.modelcontextprotocol/clientCapabilities":{}}}}"#);
}

/// The reply an MCP server gives `request`, built with `serde_json` alone:
/// what the floor server writes, and what the `serde_json` floor measures.
///
/// An `echo` call gets its text back as one text block; anything else gets
/// an empty result.
#[must_use]
pub fn floor_reply(request: &Value) -> Value {
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let text = request
        .get("params")
        .and_then(|p| p.get("arguments"))
        .and_then(|a| a.get("text"))
        .cloned();
    let result = match text {
        Some(text) => json!({ "content": [{ "type": "text", "text": text }], "isError": false }),
        None => Value::Object(Map::new()),
    };
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

#[cfg(test)]
mod tests {
    use super::{ECHO_TEXT, floor_reply, write_echo_call, write_stateless_echo_call};
    use serde_json::{Value, json};

    #[test]
    fn the_hand_written_calls_are_the_json_they_claim_to_be() -> Result<(), serde_json::Error> {
        let mut legacy = Vec::new();
        write_echo_call(7, &mut legacy);
        let legacy: Value = serde_json::from_slice(&legacy)?;
        assert_eq!(legacy.pointer("/id"), Some(&json!(7)));
        assert_eq!(
            legacy.pointer("/params/arguments/text"),
            Some(&json!(ECHO_TEXT))
        );

        let mut stateless = Vec::new();
        write_stateless_echo_call(8, &mut stateless);
        let stateless: Value = serde_json::from_slice(&stateless)?;
        assert_eq!(
            stateless.pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion"),
            Some(&json!("2026-07-28"))
        );
        assert_eq!(
            floor_reply(&stateless).pointer("/result/content/0/text"),
            Some(&json!(ECHO_TEXT))
        );
        Ok(())
    }
}
