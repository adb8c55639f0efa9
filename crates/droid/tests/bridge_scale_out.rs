//! Several `droid bridge` instances behind a real load balancer (Debian's
//! haproxy, round-robin, no stickiness), sharing their keys through a real
//! Redis (Debian's redis-server), each in front of its own legacy server
//! (`droid serve`, held to 2025-11-25 over stdio). A 2026-07-28 client's
//! call that the legacy server answers with a question is parked on the
//! instance whose upstream request is open; its retry, wherever it lands,
//! is carried there. `scripts/services.sh` installs both.

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use protocol_droid::adapters::secondary::connect::{ConnectOptions, Target, connect};
use protocol_droid::application::client::ClientOptions;
use protocol_droid::domain::ProtocolVersion;
use protocol_droid_test_support::redis::RedisServer as Redis;
use serde_json::{Value, json};
use support::answers::{self, Answers};
use support::balancer::{Balancer, Reply, wait_for};
use support::{Running, TestError, listening, raw_post};

const DROID: &str = env!("CARGO_BIN_EXE_droid");

/// The legacy server's tool that asks its client to fill in a form while
/// the call is open.
const ASKS: &str = "test_elicitation";

/// `count` bridges, named `bridge0`…, sharing through `store` if given.
fn bridges(count: usize, store: Option<&str>) -> Result<Vec<(Running, String)>, TestError> {
    (0..count)
        .map(|i| {
            let name = format!("bridge{i}");
            let mut args = vec!["bridge", "--listen", "127.0.0.1:0"];
            if let Some(url) = store {
                args.extend(["--store", url, "--instance-id", &name]);
            }
            args.extend(["--upstream-revision", "2025-11-25", "--", DROID, "serve"]);
            listening(&args, "http")
        })
        .collect()
}

/// A 2026-07-28 `tools/call` of [`ASKS`] at `address`: the first round
/// without `retry`, else the retry with its `requestState` and answers.
fn call(address: &str, retry: Option<(&str, Value)>) -> Result<Reply, TestError> {
    let mut params = json!({
        "name": ASKS,
        "arguments": { "message": "Who are you?" },
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": { "elicitation": {} },
        },
    });
    if let (Some((state, answers)), Some(params)) = (retry, params.as_object_mut()) {
        params.insert("requestState".to_owned(), json!(state));
        params.insert("inputResponses".to_owned(), answers);
    }
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params });
    let headers = [
        "MCP-Protocol-Version: 2026-07-28".to_owned(),
        "Mcp-Method: tools/call".to_owned(),
        format!("Mcp-Name: {ASKS}"),
    ];
    Ok(Reply::parse(raw_post(
        address,
        &headers,
        &body.to_string(),
    )?))
}

/// The first round at `address`: its `requestState`, the key of the
/// question it asks, and the instance that served it.
fn first_round(address: &str) -> Result<(String, String, Option<String>), TestError> {
    let reply = call(address, None)?;
    let state = reply
        .body
        .pointer("/result/requestState")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("no requestState in {}", reply.raw))?
        .to_owned();
    let asked = reply
        .body
        .pointer("/result/inputRequests")
        .and_then(Value::as_object)
        .ok_or_else(|| format!("no inputRequests in {}", reply.raw))?;
    let key = match asked.iter().next() {
        Some((key, question)) if asked.len() == 1 => {
            assert_eq!(
                question.get("method"),
                Some(&json!("elicitation/create")),
                "{}",
                reply.raw
            );
            key.clone()
        }
        _ => return Err(format!("not one question in {}", reply.raw).into()),
    };
    Ok((state, key, reply.served_by))
}

/// How many listen on `channel` of `redis` (`PUBSUB NUMSUB`), if it says.
fn listeners(redis: &Redis, channel: &str) -> Option<u64> {
    use std::io::BufRead as _;

    let mut stream = redis
        .command(
            &["PUBSUB", "NUMSUB", channel],
            std::time::Duration::from_secs(2),
        )
        .ok()?;
    // `*2`, `$LENGTH`, the channel, `:COUNT`: four lines.
    let mut text = String::new();
    for _ in 0..4 {
        stream.read_line(&mut text).ok()?;
    }
    text.lines().last()?.strip_prefix(':')?.trim().parse().ok()
}

/// The answer a person gives under `key`.
fn answers(key: &str, name: &str) -> Value {
    json!({ key: { "action": "accept", "content": { "username": name } } })
}

fn text_of(reply: &Reply) -> &str {
    reply
        .body
        .pointer("/result/content/0/text")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Round-robin puts every retry on another instance than its first round:
/// the retry is carried to the instance whose upstream request waits for
/// the answer, and the answer it gives is the one the person gave.
#[test]
fn a_retry_of_a_parked_call_is_carried_to_the_instance_holding_it() -> Result<(), TestError> {
    let redis = Redis::start()?;
    let droids = bridges(3, Some(&redis.url()))?;
    let addresses: Vec<String> = droids.iter().map(|(_, address)| address.clone()).collect();
    let balancer = Balancer::start(&addresses)?;
    let mut served = std::collections::BTreeSet::new();
    for person in ["ada", "grace", "edsger"] {
        let (state, key, parked_by) = first_round(&balancer.address)?;
        let reply = call(&balancer.address, Some((&state, answers(&key, person))))?;
        assert!(
            reply.served_by.is_some() && reply.served_by != parked_by,
            "the retry reached another instance: {}",
            reply.raw
        );
        let text = text_of(&reply);
        assert!(
            text.starts_with("User response: action=accept") && text.contains(person),
            "{}",
            reply.raw
        );
        served.extend(parked_by);
        served.extend(reply.served_by);
    }
    assert_eq!(served.len(), 3, "every instance served: {served:?}");
    Ok(())
}

/// A retry whose call was parked on an instance that has since died is
/// refused at once, as a call that expired would be, and the same request
/// sent afresh is served.
#[test]
fn a_retry_whose_holder_is_gone_is_refused_and_starts_afresh() -> Result<(), TestError> {
    let redis = Redis::start()?;
    let mut droids = bridges(2, Some(&redis.url()))?.into_iter();
    let (holding, holder) = droids.next().ok_or("no first bridge")?;
    let (_surviving, survivor) = droids.next().ok_or("no second bridge")?;
    let (state, key, _) = first_round(&holder)?;
    // Killed, and its upstream request with it; Redis has seen it go once
    // nobody listens on its channel.
    drop(holding);
    wait_for("bridge0's channel to lose its listener", || {
        listeners(&redis, "droid:instance:bridge0*parked") == Some(0)
    })?;
    let reply = call(&survivor, Some((&state, answers(&key, "ada"))))?;
    assert_eq!(
        reply.body.pointer("/error/code"),
        Some(&json!(-32602)),
        "{}",
        reply.raw
    );
    let message = reply
        .body
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    assert!(message.contains("no longer waiting"), "{}", reply.raw);
    let (state, key, _) = first_round(&survivor)?;
    let reply = call(&survivor, Some((&state, answers(&key, "ada"))))?;
    assert!(text_of(&reply).contains("ada"), "{}", reply.raw);
    Ok(())
}

/// This crate's client at 2026-07-28, through the balancer: a call whose
/// legacy server asks two questions in turn takes three requests, each on
/// the next instance; the second and third are carried to the first, and
/// the progress the server reports on the way (once before each question,
/// once at the end) reaches the client from whichever instance serves it.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_asking_twice_is_carried_round_after_round_with_its_progress()
-> Result<(), TestError> {
    let redis = Redis::start()?;
    let droids = bridges(3, Some(&redis.url()))?;
    let addresses: Vec<String> = droids.iter().map(|(_, address)| address.clone()).collect();
    let balancer = Balancer::start(&addresses)?;
    let target = Target::url(&format!("http://{}/mcp", balancer.address))?;
    let options = ConnectOptions {
        client: ClientOptions {
            revisions: vec![ProtocolVersion::V2026_07_28],
            handler: Arc::new(Answers),
            ..ClientOptions::default()
        },
        ..ConnectOptions::default()
    };
    let client = connect(&target, options).await?;
    for _ in 0..3 {
        let (progress, seen) = answers::counting_progress();
        let reply = client.call_tool("interview", None, &progress).await?;
        assert_eq!(
            answers::text_of(&reply.value),
            "Interviewed name-answer, role-answer",
            "{}",
            reply.raw
        );
        assert_eq!(
            seen.load(Ordering::SeqCst),
            3,
            "every progress report arrived"
        );
    }
    client.close().await;
    Ok(())
}
