//! Two servers sharing their `requestState` keys through a real Redis
//! (`RedisStore`), rotating fast enough to watch a key come and go: a state
//! sealed by one opens on the other until its key is retired, and is
//! refused as sealed by an unknown key after.

use std::time::{Duration, Instant};

use protocol_droid::adapters::primary::stdio::{self, StdioOptions};
use protocol_droid::adapters::secondary::redis::{RedisOptions, RedisStore};
use protocol_droid::application::server::{
    Call, KeyRing, KeyRingStore as _, RotationPolicy, Server, ToolSpec,
};
use protocol_droid::domain::ir::ToolResult;
use protocol_droid_test_support::redis::RedisServer;
use protocol_droid_test_support::{LineClient, TestError};
use serde_json::{Value, json};
use tokio::io::{DuplexStream, ReadHalf, WriteHalf};

type Lines = LineClient<WriteHalf<DuplexStream>, ReadHalf<DuplexStream>>;

/// Keys that rotate every 300 ms, published 100 ms ahead, read every 20 ms.
/// A replaced key would open for a state's lifetime more (10 minutes), but
/// a ring holds five keys at most: at this pace each is gone in under two
/// seconds.
const FAST: RotationPolicy = RotationPolicy {
    rotate_every_ms: 300,
    lead_ms: 100,
    keep_ms: 400,
    refresh_ms: 20,
};

/// A server with the one tool that seals a state, sharing through `store`.
async fn instance(store: &RedisStore) -> Result<Lines, TestError> {
    let server = Server::builder("shared", "1").build()?;
    server.add_tool(
        ToolSpec::new("stateful", "Keeps state across rounds."),
        |call: Call| async move {
            if call.state().is_none() {
                call.keep_state(json!({ "step": 1 }));
            }
            let form = json!({ "message": "Go?",
                "requestedSchema": { "type": "object", "properties": {} } });
            let _answer = call.elicit("go", form).await?;
            Ok(ToolResult::text(format!(
                "state {}",
                call.state().unwrap_or_default()
            )))
        },
    );
    server.share(store.shared(FAST)).await?;
    let (client_end, server_end) = tokio::io::duplex(1 << 16);
    let (read, write) = tokio::io::split(server_end);
    tokio::spawn(stdio::serve(server, read, write, StdioOptions::default()));
    let (read, write) = tokio::io::split(client_end);
    Ok(LineClient::new(write, read))
}

fn params(state: Option<&str>) -> Value {
    let mut params = json!({ "name": "stateful", "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": { "elicitation": {} },
    } });
    if let (Some(state), Some(object)) = (state, params.as_object_mut()) {
        object.insert("requestState".to_owned(), json!(state));
        object.insert(
            "inputResponses".to_owned(),
            json!({ "go": { "action": "accept", "content": {} } }),
        );
    }
    params
}

async fn call(lines: &mut Lines, id: u64, state: Option<&str>) -> Result<Value, TestError> {
    lines
        .send_json(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
                            "params": params(state) }))
        .await?;
    lines.recv_json().await
}

async fn seal(lines: &mut Lines, id: u64) -> Result<String, TestError> {
    let first = call(lines, id, None).await?;
    first
        .pointer("/result/requestState")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("no requestState in {first}").into())
}

async fn ring(store: &RedisStore) -> Result<Vec<String>, TestError> {
    let kept = store.load().await?.ok_or("no ring kept")?;
    Ok(KeyRing::decode(&kept)?.ids().map(str::to_owned).collect())
}

#[tokio::test]
async fn a_state_opens_on_the_other_server_until_its_key_is_retired() -> Result<(), TestError> {
    let redis = RedisServer::start()?;
    let store = RedisStore::connect(&redis.url(), RedisOptions::default()).await?;
    let mut a = instance(&store).await?;
    let mut b = instance(&store).await?;

    let opened = seal(&mut a, 1).await?;
    let answered = call(&mut b, 2, Some(&opened)).await?;
    assert_eq!(
        answered.pointer("/result/content/0/text"),
        Some(&json!("state {\"step\":1}")),
        "{answered}"
    );

    // Keys rotate while the servers run; one sealed now is retired once
    // every key of the ring as it stands has been replaced and kept its
    // while.
    let kept = seal(&mut a, 3).await?;
    let sealed_with = ring(&store).await?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = ring(&store).await?;
        if !now.iter().any(|id| sealed_with.contains(id)) {
            break;
        }
        assert!(Instant::now() < deadline, "keys never rotated: {now:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Long enough for b to have read the ring without that key.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let refused = call(&mut b, 4, Some(&kept)).await?;
    assert_eq!(
        refused.pointer("/error/code"),
        Some(&json!(-32602)),
        "{refused}"
    );
    let message = refused.pointer("/error/message").and_then(Value::as_str);
    assert!(
        message.is_some_and(|m| m.contains("unknown key")),
        "{refused}"
    );

    // What either seals now opens on the other: the rotation left no gap.
    let fresh = seal(&mut b, 5).await?;
    let answered = call(&mut a, 6, Some(&fresh)).await?;
    assert!(answered.pointer("/result/content").is_some(), "{answered}");
    Ok(())
}
