//! Several `droid serve` instances behind a real load balancer (Debian's
//! haproxy, round-robin, no stickiness), sharing their state through a real
//! Redis (Debian's redis-server), each started here on loopback ports of
//! the test's own. `scripts/services.sh` installs both.

mod support;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use protocol_droid::adapters::secondary::connect::{ConnectOptions, Target, connect};
use protocol_droid::application::client::ClientOptions;
use protocol_droid::domain::ProtocolVersion;
use protocol_droid_test_support::redis::{RedisServer as Redis, free_port};
use serde_json::{Value, json};
use support::answers::{self, Answers};
use support::balancer::{Balancer, Reply, hello, legacy, legacy_as, wait_for};
use support::{Running, TestError, listening, raw_get, raw_post};

/// The tool that seals a `requestState` in its first round and reads it back
/// in the second.
const STATEFUL: &str = "test_input_required_result_request_state";

/// `count` instances of `droid serve`, sharing through `store` if given.
fn instances(count: usize, store: Option<&str>) -> Result<Vec<(Running, String)>, TestError> {
    instances_with(count, store, &[])
}

/// As [`instances`], each given the flags `extra` too.
fn instances_with(
    count: usize,
    store: Option<&str>,
    extra: &[&str],
) -> Result<Vec<(Running, String)>, TestError> {
    (0..count)
        .map(|_| {
            let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
            if let Some(url) = store {
                args.extend(["--store", url]);
            }
            args.extend(extra);
            listening(&args, "http")
        })
        .collect()
}

/// The instances' addresses, as many as asked for.
fn addresses<const N: usize>(droids: &[(Running, String)]) -> Result<[&str; N], TestError> {
    let all: Vec<&str> = droids.iter().map(|(_, address)| address.as_str()).collect();
    all.try_into()
        .map_err(|all: Vec<&str>| format!("{} instances, not {N}", all.len()).into())
}

/// A 2026-07-28 `tools/call` of the stateful tool: the first round without
/// `retry`, else the retry carrying its `requestState` and answer.
fn call(address: &str, retry: Option<(&str, Value)>) -> Result<Reply, TestError> {
    let mut params = json!({
        "name": STATEFUL,
        "arguments": {},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": { "elicitation": {} },
        },
    });
    if let (Some((state, answer)), Some(params)) = (retry, params.as_object_mut()) {
        params.insert("requestState".to_owned(), json!(state));
        params.insert("inputResponses".to_owned(), json!({ "confirm": answer }));
    }
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params });
    let headers = [
        "MCP-Protocol-Version: 2026-07-28".to_owned(),
        "Mcp-Method: tools/call".to_owned(),
        format!("Mcp-Name: {STATEFUL}"),
    ];
    Ok(Reply::parse(raw_post(
        address,
        &headers,
        &body.to_string(),
    )?))
}

fn accept() -> Value {
    json!({ "action": "accept", "content": { "ok": true } })
}

/// The first round's `requestState`.
fn first_round(address: &str) -> Result<(String, Option<String>), TestError> {
    let reply = call(address, None)?;
    let state = reply
        .body
        .pointer("/result/requestState")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("no requestState in {}", reply.raw))?
        .to_owned();
    Ok((state, reply.served_by))
}

fn text_of(reply: &Reply) -> String {
    reply
        .body
        .pointer("/result/content/0/text")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Through the balancer every retry lands on another instance than its
/// first round did, and each opens the state the other sealed.
#[test]
fn a_request_state_opens_on_whichever_instance_the_balancer_picks() -> Result<(), TestError> {
    let redis = Redis::start()?;
    let droids = instances(3, Some(&redis.url()))?;
    let addresses: Vec<String> = droids.iter().map(|(_, address)| address.clone()).collect();
    let balancer = Balancer::start(&addresses)?;
    let mut served = std::collections::BTreeSet::new();
    for _ in 0..3 {
        let (state, sealed_by) = first_round(&balancer.address)?;
        let reply = call(&balancer.address, Some((&state, accept())))?;
        assert_eq!(reply.status, 200, "{}", reply.raw);
        assert!(
            reply.served_by.is_some() && reply.served_by != sealed_by,
            "{}",
            reply.raw
        );
        assert!(text_of(&reply).starts_with("state-ok"), "{}", reply.raw);
        served.extend(sealed_by);
        served.extend(reply.served_by);
    }
    assert_eq!(served.len(), 3, "every instance served: {served:?}");
    Ok(())
}

/// The control: instances that share nothing each seal with a key of their
/// own, and the same retry on another instance is refused.
#[test]
fn without_a_shared_store_another_instance_refuses_the_state() -> Result<(), TestError> {
    let droids = instances(2, None)?;
    let [a, b] = addresses(&droids)?;
    let (state, _) = first_round(a)?;
    let reply = call(b, Some((&state, accept())))?;
    assert_eq!(
        reply.body.pointer("/error/code"),
        Some(&json!(-32602)),
        "{}",
        reply.raw
    );
    Ok(())
}

/// A round answered on one instance cannot be answered otherwise on
/// another; the same answer again (a retry after a lost reply) is served.
#[test]
fn a_round_answered_on_one_instance_is_answered_the_same_way_everywhere() -> Result<(), TestError> {
    let redis = Redis::start()?;
    let droids = instances(3, Some(&redis.url()))?;
    let [a, b, c] = addresses(&droids)?;
    let (state, _) = first_round(a)?;
    let first = call(b, Some((&state, accept())))?;
    assert!(text_of(&first).starts_with("state-ok"), "{}", first.raw);
    let other = call(c, Some((&state, json!({ "action": "decline" }))))?;
    assert_eq!(
        other.body.pointer("/error/code"),
        Some(&json!(-32602)),
        "{}",
        other.raw
    );
    assert!(other.raw.contains("already answered"), "{}", other.raw);
    let again = call(a, Some((&state, accept())))?;
    assert!(text_of(&again).starts_with("state-ok"), "{}", again.raw);
    Ok(())
}

/// Redis stopped: a retry that needs it is refused with 503 and
/// `Retry-After`, as are a new legacy session and a request for one this
/// instance does not hold; what needs nothing shared is served, and `/readyz` says
/// the store is unavailable while staying ready. Redis back (empty, as a
/// restart without persistence leaves it): a state sealed before the outage
/// opens on another instance, since the instances give the ring back.
#[test]
fn with_the_store_away_only_what_needs_it_fails_and_it_comes_back() -> Result<(), TestError> {
    let redis = Redis::start()?;
    let port = redis.port();
    let droids = instances(2, Some(&redis.url()))?;
    let [a, b] = addresses(&droids)?;
    let (before, _) = first_round(a)?;
    let (_, session) = legacy(a, None, "initialize", &hello())?;
    let session = session.ok_or("no Mcp-Session-Id")?;
    drop(redis);

    // A legacy session goes on where it is held; another instance cannot
    // learn of it, and no new one can be shared.
    let (held, _) = legacy(a, Some(&session), "tools/list", &json!({}))?;
    assert_eq!(held.status, 200, "{}", held.raw);
    let (elsewhere, _) = legacy(b, Some(&session), "tools/list", &json!({}))?;
    assert_eq!(elsewhere.status, 503, "{}", elsewhere.raw);
    let (opened, _) = legacy(b, None, "initialize", &hello())?;
    assert_eq!(opened.status, 503, "{}", opened.raw);
    assert_eq!(
        opened.body.pointer("/error/code"),
        Some(&json!(-31503)),
        "{}",
        opened.raw
    );

    let refused = call(b, Some((&before, accept())))?;
    assert_eq!(refused.status, 503, "{}", refused.raw);
    assert!(
        refused.raw.to_ascii_lowercase().contains("retry-after: 1"),
        "{}",
        refused.raw
    );
    assert_eq!(
        refused.body.pointer("/error/code"),
        Some(&json!(-31503)),
        "{}",
        refused.raw
    );
    assert!(
        !refused.raw.contains("127.0.0.1:"),
        "no address in {}",
        refused.raw
    );
    // Sealing needs nothing shared: a first round is served.
    let (during, _) = first_round(a)?;
    wait_for("/readyz naming the store unavailable", || {
        raw_get(b, "/readyz")
            .is_ok_and(|r| r.contains("\"store\":\"unavailable\"") && r.contains("200 OK"))
    })?;

    let _redis = Redis::on(port)?;
    for state in [&before, &during] {
        let mut reply = call(b, Some((state, accept())))?;
        // The first command after Redis returns may find the old
        // connection broken; the instance reconnects and the client, told
        // 503 and Retry-After, tries again.
        let deadline = Instant::now() + Duration::from_secs(20);
        while reply.status == 503 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
            reply = call(b, Some((state, accept())))?;
        }
        assert!(text_of(&reply).starts_with("state-ok"), "{}", reply.raw);
    }
    wait_for("/readyz naming the store reachable", || {
        raw_get(a, "/readyz").is_ok_and(|r| r.contains("\"store\":\"reachable\""))
    })?;
    Ok(())
}

/// A store reached over TLS (`rediss://`), its certificate signed by a
/// private authority named with `--ca-file`: two instances share through
/// it (a state one seals opens on the other). Without `--ca-file` the
/// store's certificate is refused, and the instance does not start.
#[test]
fn a_store_over_tls_is_shared_and_its_certificate_checked() -> Result<(), TestError> {
    let files = support::certificates()?;
    let (cert, key, ca) = (
        files.path("cert.pem"),
        files.path("key.pem"),
        files.path("ca.pem"),
    );
    let path = std::path::Path::new;
    let redis = Redis::start_tls(path(&cert), path(&key), path(&ca))?;
    let url = redis.url();
    assert!(url.starts_with("rediss://"), "{url}");
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--store",
        &url,
        "--ca-file",
        &ca,
    ];
    let droids = vec![listening(&args, "http")?, listening(&args, "http")?];
    let [a, b] = addresses(&droids)?;
    let (state, _) = first_round(a)?;
    let reply = call(b, Some((&state, accept())))?;
    assert!(text_of(&reply).starts_with("state-ok"), "{}", reply.raw);

    let output = support::droid_command()
        .args(["serve", "--listen", "127.0.0.1:0", "--store", &url])
        .stdin(Stdio::null())
        .output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("--store")
            && stderr.contains("unknown issuer")
            && stderr.contains("--ca-file"),
        "{stderr}"
    );
    Ok(())
}

/// `--store` names Redis for a listening server only, and one that cannot
/// be reached stops the start with a message naming no password.
#[test]
fn a_store_out_of_reach_stops_the_start_without_showing_its_password() -> Result<(), TestError> {
    let port = free_port()?;
    let output = support::droid_command()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env(
            "DROID_STORE",
            format!("redis://app:s3cret@127.0.0.1:{port}"),
        )
        .stdin(Stdio::null())
        .output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("--store"), "{stderr}");
    assert!(!stderr.contains("s3cret"), "{stderr}");
    let stdio = support::droid_command()
        .args(["serve", "--store", "redis://127.0.0.1:1"])
        .stdin(Stdio::null())
        .output()?;
    assert!(String::from_utf8_lossy(&stdio.stderr).contains("--store needs --listen"));
    Ok(())
}

/// A legacy session through the balancer, every request on the next
/// instance: the handshake on one, its notification, its `GET` stream and
/// its calls on the others. A question the server asks during a call is
/// answered by a POST that lands on another instance than the call, and
/// is relayed to it.
#[tokio::test]
async fn a_legacy_session_is_served_by_whichever_instance_a_request_reaches()
-> Result<(), TestError> {
    let redis = Redis::start()?;
    let droids = instances(3, Some(&redis.url()))?;
    let addresses: Vec<String> = droids.iter().map(|(_, address)| address.clone()).collect();
    let balancer = Balancer::start(&addresses)?;
    let target = Target::url(&format!("http://{}/mcp", balancer.address))?;
    for version in [
        ProtocolVersion::V2025_11_25,
        ProtocolVersion::V2025_06_18,
        ProtocolVersion::V2025_03_26,
    ] {
        let options = ConnectOptions {
            client: ClientOptions {
                revisions: vec![version],
                handler: std::sync::Arc::new(Answers),
                ..ClientOptions::default()
            },
            ..ConnectOptions::default()
        };
        let client = connect(&target, options).await?;
        assert_eq!(client.version(), Some(version));
        // Each more times than there are instances, so every instance
        // serves each kind of request, and each question's answer lands on
        // another instance than the call that asked it.
        for _ in 0..4 {
            let tools = client.list_all_tools().await?;
            assert!(tools.iter().any(|t| t.name == "test_sampling"));
            let sampled =
                answers::call(&client, "test_sampling", json!({ "prompt": "hi" })).await?;
            assert_eq!(sampled, "LLM response: sampled-by-droid");
            let elicited =
                answers::call(&client, "test_elicitation", json!({ "message": "who?" })).await;
            if version >= ProtocolVersion::V2025_06_18 {
                let elicited = elicited?;
                assert!(elicited.contains("username-answer"), "{elicited}");
            }
        }
        let (progress, seen) = answers::counting_progress();
        let reply = client
            .call_tool("test_tool_with_progress", None, &progress)
            .await?;
        assert!(answers::text_of(&reply.value).contains("successfully"));
        assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 3);
        client.close().await;
    }
    Ok(())
}

/// Starts the task `call` (a task-augmented `tools/call`) in `session`
/// through `address`: its id.
fn legacy_task(address: &str, session: &str, call: &Value) -> Result<String, TestError> {
    let (created, _) = legacy(address, Some(session), "tools/call", call)?;
    Ok(created
        .body
        .pointer("/result/task/taskId")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("no task: {}", created.raw))?
        .to_owned())
}

/// What a session settles after its handshake holds on every instance:
/// the log level set on one filters a tool's log lines on another, and a
/// session ended on one is unknown to all. Another caller's token is not
/// needed here: the record names its owner, and an anonymous session is
/// anonymous everywhere.
#[test]
fn what_a_session_settles_on_one_instance_holds_on_every_other() -> Result<(), TestError> {
    let redis = Redis::start()?;
    let droids = instances(3, Some(&redis.url()))?;
    let [a, b, c] = addresses(&droids)?;
    let (_, session) = legacy(a, None, "initialize", &hello())?;
    let session = session.ok_or("no Mcp-Session-Id")?;
    let logged = |address: &str| lines_logged(address, &session);
    let (set, _) = legacy(
        b,
        Some(&session),
        "logging/setLevel",
        &json!({ "level": "error" }),
    )?;
    assert_eq!(set.status, 200, "{}", set.raw);
    assert_eq!(logged(c)?, 0, "the level set on b filters c's log lines");
    let (set, _) = legacy(
        c,
        Some(&session),
        "logging/setLevel",
        &json!({ "level": "debug" }),
    )?;
    assert_eq!(set.status, 200, "{}", set.raw);
    assert_eq!(logged(a)?, 3, "the level set on c opens a's log lines");

    let mut stream = TcpStream::connect(b)?;
    write!(
        stream,
        "DELETE /mcp HTTP/1.1\r\nHost: {b}\r\nMcp-Session-Id: {session}\r\n\
         MCP-Protocol-Version: 2025-11-25\r\nConnection: close\r\n\r\n"
    )?;
    let mut deleted = String::new();
    stream.read_to_string(&mut deleted)?;
    assert!(deleted.starts_with("HTTP/1.1 200"), "{deleted}");
    for address in [a, b, c] {
        let (gone, _) = legacy(address, Some(&session), "tools/list", &json!({}))?;
        assert_eq!(gone.status, 404, "{address}: {}", gone.raw);
    }
    Ok(())
}

/// The log lines `test_tool_with_logging` sends in `session` through
/// `address`.
fn lines_logged(address: &str, session: &str) -> Result<usize, TestError> {
    let (reply, _) = legacy(
        address,
        Some(session),
        "tools/call",
        &json!({ "name": "test_tool_with_logging", "arguments": {} }),
    )?;
    assert!(reply.raw.contains("executed successfully"), "{}", reply.raw);
    Ok(reply.raw.matches("notifications/message").count())
}

/// How long `key` in `redis` has to live, in milliseconds (`PTTL`: negative
/// when there is no such key, or it does not expire).
fn pttl(redis: &Redis, key: &str) -> Result<i64, TestError> {
    use std::io::BufRead as _;
    let mut line = String::new();
    redis
        .command(&["PTTL", key], Duration::from_secs(5))?
        .read_line(&mut line)?;
    line.trim()
        .strip_prefix(':')
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("PTTL answered {line:?}").into())
}

/// The fields of the hash `key` in `redis` (`HKEYS`).
fn hash_fields(redis: &Redis, key: &str) -> Result<Vec<String>, TestError> {
    use std::io::BufRead as _;
    let mut reader = redis.command(&["HKEYS", key], Duration::from_secs(5))?;
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let count: usize = line
        .strip_prefix('*')
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| format!("HKEYS answered {line:?}"))?;
    let mut fields = Vec::with_capacity(count);
    for _ in 0..count {
        // A bulk string: its length on one line, then itself.
        let mut length = String::new();
        reader.read_line(&mut length)?;
        let mut field = String::new();
        reader.read_line(&mut field)?;
        fields.push(field.trim_end().to_owned());
    }
    Ok(fields)
}

/// Changes made to one session at the same moment through two instances
/// all hold: each is made in the store on its own, not by writing back the
/// whole session as the instance saw it (which kept the last writer's view
/// and lost what the other had just changed).
#[test]
fn changes_made_at_once_through_two_instances_all_hold() -> Result<(), TestError> {
    let redis = Redis::start()?;
    let droids = instances(3, Some(&redis.url()))?;
    let [a, b, c] = addresses(&droids)?;
    let (_, session) = legacy(a, None, "initialize", &hello())?;
    let session = session.ok_or("no Mcp-Session-Id")?;
    // Both instances hold the session before the changes start.
    let (seen, _) = legacy(b, Some(&session), "ping", &json!({}))?;
    assert_eq!(seen.status, 200, "{}", seen.raw);
    let uris: Vec<String> = (0..24)
        .map(|i| format!("test://template/{i}/data"))
        .collect();
    let replies = std::thread::scope(|scope| {
        let session = session.as_str();
        let mut running = vec![scope.spawn(move || {
            legacy(
                b,
                Some(session),
                "logging/setLevel",
                &json!({ "level": "error" }),
            )
        })];
        for (i, uri) in uris.iter().enumerate() {
            let address = if i % 2 == 0 { a } else { b };
            running.push(scope.spawn(move || {
                legacy(
                    address,
                    Some(session),
                    "resources/subscribe",
                    &json!({ "uri": uri }),
                )
            }));
        }
        running
            .into_iter()
            .map(|thread| {
                thread
                    .join()
                    .map_err(|_| TestError::from("a request panicked"))
            })
            .collect::<Vec<_>>()
    });
    for reply in replies {
        let (reply, _) = reply??;
        assert_eq!(reply.status, 200, "{}", reply.raw);
        assert!(reply.body.get("result").is_some(), "{}", reply.raw);
    }
    assert_eq!(
        lines_logged(c, &session)?,
        0,
        "the level set on b while a took subscriptions holds on c"
    );
    let kept = hash_fields(&redis, &format!("droid:session:{session}"))?;
    let missing: Vec<&String> = uris
        .iter()
        .filter(|uri| !kept.contains(&format!("s:{uri}")))
        .collect();
    assert!(missing.is_empty(), "subscriptions lost: {missing:?}");

    // A change an instance made itself is part of what it last read: put
    // back as it was by another instance, that is a change it takes too.
    for (address, level) in [(a, "debug"), (b, "error")] {
        let (set, _) = legacy(
            address,
            Some(&session),
            "logging/setLevel",
            &json!({ "level": level }),
        )?;
        assert_eq!(set.status, 200, "{}", set.raw);
    }
    assert_eq!(
        lines_logged(a, &session)?,
        0,
        "a set debug, b set error again after: a logs at error"
    );
    Ok(())
}

/// A session ended on one instance ends at once on another that holds a
/// copy of it: its stream there closes, rather than stay open (a stream
/// makes a copy busy, so it is not reaped) until a request of the session
/// reaches that instance.
#[test]
fn a_session_ended_on_one_instance_closes_its_stream_on_another() -> Result<(), TestError> {
    let redis = Redis::start()?;
    let droids = instances(2, Some(&redis.url()))?;
    let [a, b] = addresses(&droids)?;
    let (_, session) = legacy(a, None, "initialize", &hello())?;
    let session = session.ok_or("no Mcp-Session-Id")?;
    let mut lines = standing(b, &session)?;

    let mut stream = TcpStream::connect(a)?;
    write!(
        stream,
        "DELETE /mcp HTTP/1.1\r\nHost: {a}\r\nMcp-Session-Id: {session}\r\n\
         MCP-Protocol-Version: 2025-11-25\r\nConnection: close\r\n\r\n"
    )?;
    let mut deleted = String::new();
    stream.read_to_string(&mut deleted)?;
    assert!(deleted.starts_with("HTTP/1.1 200"), "{deleted}");

    // Keep-alive comments come every 15 s on an open stream, and a read
    // waits 20 s: only the stream's end stops this before the deadline.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            Instant::now() < deadline,
            "the stream on b outlived its session by 30 s"
        );
        match lines.next() {
            None => break,
            Some(Ok(_)) => {}
            Some(Err(e)) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Some(Err(e)) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Some(Err(_)) => break,
        }
    }
    let (gone, _) = legacy(b, Some(&session), "tools/list", &json!({}))?;
    assert_eq!(gone.status, 404, "{}", gone.raw);
    Ok(())
}

/// An instance killed during a call: the call is lost with it, but not the
/// session. The client's retry (the same request, the same id) reaches
/// another instance, which runs it once the dead instance's lease on it has
/// lapsed (until then it is refused as in progress), and the session goes
/// on there.
#[test]
fn a_call_whose_instance_dies_is_answered_on_retry_and_the_session_lives() -> Result<(), TestError>
{
    let redis = Redis::start()?;
    let mut droids = instances(2, Some(&redis.url()))?;
    let [a, b] = addresses(&droids)?;
    let (a, b) = (a.to_owned(), b.to_owned());
    let (_, session) = legacy(&a, None, "initialize", &hello())?;
    let session = session.ok_or("no Mcp-Session-Id")?;
    let slow = json!({ "name": "slow_compute", "arguments": { "seconds": 2, "label": "retried" } });
    let calling = {
        let (session, slow) = (session.clone(), slow.clone());
        std::thread::spawn(move || legacy_as(&a, Some(&session), 41, "tools/call", &slow))
    };
    // Half a second into its two: killing a ends the call's reply early.
    std::thread::sleep(Duration::from_millis(500));
    let (running_a, _) = droids.swap_remove(0);
    drop(running_a);
    let cut = calling.join().map_err(|_| "the calling thread panicked")?;
    assert!(
        cut.map_or(true, |(reply, _)| !reply.raw.contains("retried: done")),
        "the call on the killed instance must not have been answered"
    );
    // The lease is 15 s; patience a little longer.
    let deadline = Instant::now() + Duration::from_secs(40);
    let answered = loop {
        let (reply, _) = legacy_as(&b, Some(&session), 41, "tools/call", &slow)?;
        if !reply.raw.contains("already in progress") || Instant::now() > deadline {
            break reply;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(answered.raw.contains("retried: done"), "{}", answered.raw);
    let (listed, _) = legacy(&b, Some(&session), "tools/list", &json!({}))?;
    assert_eq!(listed.status, 200, "{}", listed.raw);
    Ok(())
}

/// A client's cancellation reaches its call on whichever instance runs it:
/// the balancer sent it elsewhere, and before, it was dropped there while
/// the call ran on.
#[test]
fn a_cancellation_reaching_another_instance_stops_the_call() -> Result<(), TestError> {
    let redis = Redis::start()?;
    let droids = instances(2, Some(&redis.url()))?;
    let [a, b] = addresses(&droids)?;
    let (a, b) = (a.to_owned(), b.to_owned());
    let (_, session) = legacy(&a, None, "initialize", &hello())?;
    let session = session.ok_or("no Mcp-Session-Id")?;
    let long = json!({ "name": "sleep", "arguments": { "ms": 60_000 } });
    let (ended, ending) = std::sync::mpsc::channel();
    {
        let session = session.clone();
        std::thread::spawn(move || {
            let _sent = ended.send(legacy_as(&a, Some(&session), 51, "tools/call", &long));
        });
    }
    // Told again until the call, once it runs, stops.
    let headers = vec![
        "MCP-Protocol-Version: 2025-11-25".to_owned(),
        format!("Mcp-Session-Id: {session}"),
    ];
    let cancel =
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":51}}"#;
    let deadline = Instant::now() + Duration::from_secs(30);
    let reply = loop {
        raw_post(&b, &headers, cancel)?;
        match ending.recv_timeout(Duration::from_millis(500)) {
            Ok(reply) => break reply?,
            Err(_) if Instant::now() < deadline => {}
            Err(_) => return Err("the call ran on after its cancellation".into()),
        }
    };
    assert!(!reply.0.raw.contains("Slept"), "{}", reply.0.raw);
    Ok(())
}

/// A legacy session's tasks are its own on every instance, and only its
/// own: a task created through one instance is read and cancelled through
/// another, while a second session, opened on that other instance first
/// (so each process has counted one session when the two meet), sees none
/// of it.
#[test]
fn a_legacy_sessions_tasks_are_its_own_on_every_instance() -> Result<(), TestError> {
    let redis = Redis::start()?;
    let droids = instances(2, Some(&redis.url()))?;
    let [a, b] = addresses(&droids)?;
    let (_, mine) = legacy(a, None, "initialize", &hello())?;
    let mine = mine.ok_or("no Mcp-Session-Id")?;
    let (_, theirs) = legacy(b, None, "initialize", &hello())?;
    let theirs = theirs.ok_or("no Mcp-Session-Id")?;
    let call = json!({ "name": "slow_compute", "task": { "ttl": 60_000 },
                       "arguments": { "seconds": 600, "label": "mine" } });
    let id = legacy_task(a, &mine, &call)?;
    let get = json!({ "taskId": id });

    let (read, _) = legacy(b, Some(&mine), "tasks/get", &get)?;
    assert_eq!(
        read.body.pointer("/result/status"),
        Some(&json!("working")),
        "its own session reads it on b: {}",
        read.raw
    );
    let (foreign, _) = legacy(b, Some(&theirs), "tasks/get", &get)?;
    assert_eq!(
        foreign.body.pointer("/error/code"),
        Some(&json!(-32602)),
        "another session's task is unknown: {}",
        foreign.raw
    );
    let (listed, _) = legacy(b, Some(&theirs), "tasks/list", &json!({}))?;
    assert_eq!(
        listed.body.pointer("/result/tasks"),
        Some(&json!([])),
        "{}",
        listed.raw
    );
    let (refused, _) = legacy(b, Some(&theirs), "tasks/cancel", &get)?;
    assert_eq!(refused.body.pointer("/error/code"), Some(&json!(-32602)));

    let (cancelled, _) = legacy(b, Some(&mine), "tasks/cancel", &get)?;
    assert_eq!(
        cancelled.body.pointer("/result/status"),
        Some(&json!("cancelled")),
        "{}",
        cancelled.raw
    );
    let (listed, _) = legacy(a, Some(&mine), "tasks/list", &json!({}))?;
    assert_eq!(
        listed.body.pointer("/result/tasks/0/status"),
        Some(&json!("cancelled")),
        "{}",
        listed.raw
    );
    Ok(())
}

/// The next message on an event stream, read as `lines`, that `wanted`
/// picks, within half a minute (a stream kept alive by pings never times
/// out a read).
fn next_on(
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
    wanted: impl Fn(&Value) -> bool,
) -> Result<Value, TestError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if Instant::now() > deadline {
            return Err("nothing wanted came on the stream within 30 s".into());
        }
        let line = lines.next().ok_or("the stream ended first")??;
        // A priming event carries no data.
        let Some(data) = line.strip_prefix("data:").map(str::trim) else {
            continue;
        };
        if data.is_empty() {
            continue;
        }
        let message: Value = serde_json::from_str(data)?;
        if wanted(&message) {
            return Ok(message);
        }
    }
}

/// A 2025-11-25 task's question reaches its client where the client waits:
/// the task runs on a, its `tasks/result` waits on b, and the question comes
/// on b's stream, tagged with the task; the answer, posted to c, reaches a's
/// handler, and the result comes on b's stream.
#[test]
fn a_tasks_question_reaches_a_tasks_result_waiting_on_another_instance() -> Result<(), TestError> {
    use std::io::BufRead as _;

    let redis = Redis::start()?;
    let droids = instances(3, Some(&redis.url()))?;
    let [a, b, c] = addresses(&droids)?;
    let asking = json!({ "protocolVersion": "2025-11-25", "capabilities": { "elicitation": {} },
                         "clientInfo": { "name": "scale-out", "version": "1" } });
    let (_, session) = legacy(a, None, "initialize", &asking)?;
    let session = session.ok_or("no Mcp-Session-Id")?;
    let call = json!({ "name": "confirm_delete", "task": { "ttl": 60_000 },
                       "arguments": { "filename": "far.txt" } });
    let task = legacy_task(a, &session, &call)?;

    let body = json!({ "jsonrpc": "2.0", "id": "waiting", "method": "tasks/result",
                       "params": { "taskId": task } })
    .to_string();
    let mut stream = TcpStream::connect(b)?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: {b}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMcp-Session-Id: {session}\r\n\
         MCP-Protocol-Version: 2025-11-25\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut lines = std::io::BufReader::new(stream).lines();
    let question = next_on(&mut lines, |m| {
        m.get("method") == Some(&json!("elicitation/create"))
    })?;
    assert_eq!(
        question.pointer("/params/_meta/io.modelcontextprotocol~1related-task/taskId"),
        Some(&json!(task)),
        "{question}"
    );
    let answer = json!({ "jsonrpc": "2.0", "id": question.get("id"),
                         "result": { "action": "accept", "content": { "confirm": true } } });
    let posted = raw_post(
        c,
        &[
            format!("Mcp-Session-Id: {session}"),
            "MCP-Protocol-Version: 2025-11-25".to_owned(),
        ],
        &answer.to_string(),
    )?;
    assert!(posted.starts_with("HTTP/1.1 202"), "{posted}");
    let result = next_on(&mut lines, |m| m.get("id") == Some(&json!("waiting")))?;
    assert_eq!(
        result.pointer("/result/content/0/text"),
        Some(&json!("Deleted far.txt.")),
        "{result}"
    );
    Ok(())
}

/// The standing stream of `session` on `address`, its headers read: the
/// stream is held there once they are sent.
fn standing(
    address: &str,
    session: &str,
) -> Result<std::io::Lines<std::io::BufReader<TcpStream>>, TestError> {
    use std::io::BufRead as _;

    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(
        stream,
        "GET /mcp HTTP/1.1\r\nHost: {address}\r\nAccept: text/event-stream\r\n\
         Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\n\
         Connection: close\r\n\r\n"
    )?;
    let mut lines = std::io::BufReader::new(stream).lines();
    let status = lines.next().ok_or("no answer to the GET")??;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    while !lines
        .next()
        .ok_or("the GET ended in its headers")??
        .is_empty()
    {}
    Ok(lines)
}

/// A 2025-11-25 task's status reaches its session's standing stream where
/// that is held: the task runs on a, whose stream the client closed, the
/// client's `GET` stream is now on b, and the task cancelled on a is told
/// on b's stream.
#[test]
fn a_tasks_status_reaches_the_stream_another_instance_holds() -> Result<(), TestError> {
    let redis = Redis::start()?;
    let droids = instances(2, Some(&redis.url()))?;
    let [a, b] = addresses(&droids)?;
    let (_, session) = legacy(a, None, "initialize", &hello())?;
    let session = session.ok_or("no Mcp-Session-Id")?;

    // Held on a, then dropped by the client: a holds none after.
    drop(standing(a, &session)?);
    // Time for a to see the connection closed (at once, but in its own
    // time); without the pump's change it would not look until a message.
    std::thread::sleep(Duration::from_millis(200));
    let mut lines = standing(b, &session)?;

    let call = json!({ "name": "slow_compute", "task": { "ttl": 60_000 },
                       "arguments": { "seconds": 600, "label": "watched" } });
    let task = legacy_task(a, &session, &call)?;
    let (cancelled, _) = legacy(
        a,
        Some(&session),
        "tasks/cancel",
        &json!({ "taskId": task }),
    )?;
    assert_eq!(
        cancelled.body.pointer("/result/status"),
        Some(&json!("cancelled")),
        "{}",
        cancelled.raw
    );
    let told = next_on(&mut lines, |m| {
        m.get("method") == Some(&json!("notifications/tasks/status"))
            && m.pointer("/params/status") == Some(&json!("cancelled"))
    })?;
    assert_eq!(told.pointer("/params/taskId"), Some(&json!(task)), "{told}");
    Ok(())
}

/// The instance running a task keeps its copy of the session while the
/// task runs, though no request of the session reaches it: the task's last
/// status, told long after the idle timeout passed there, still reaches the
/// stream another instance holds. Before, that copy was let go as idle,
/// and what the task told it after went nowhere.
#[test]
fn a_session_whose_task_runs_here_is_kept_past_its_idle_time() -> Result<(), TestError> {
    let redis = Redis::start()?;
    let droids = instances_with(2, Some(&redis.url()), &["--session-idle", "1"])?;
    let [a, b] = addresses(&droids)?;
    let (_, session) = legacy(a, None, "initialize", &hello())?;
    let session = session.ok_or("no Mcp-Session-Id")?;
    let mut lines = standing(b, &session)?;
    // Four idle timeouts long, with nothing of the session sent to a.
    let call = json!({ "name": "slow_compute", "task": { "ttl": 60_000 },
                       "arguments": { "seconds": 4, "label": "kept" } });
    let task = legacy_task(a, &session, &call)?;
    let told = next_on(&mut lines, |m| {
        m.get("method") == Some(&json!("notifications/tasks/status"))
            && m.pointer("/params/status") == Some(&json!("completed"))
    })?;
    assert_eq!(told.pointer("/params/taskId"), Some(&json!(task)), "{told}");
    Ok(())
}

/// A 2026-07-28 request declaring the tasks extension (unless `params`
/// carry their own `_meta`), `name` its routing header.
fn with_tasks(address: &str, method: &str, params: &Value, name: &str) -> Result<Reply, TestError> {
    let mut params = params.clone();
    if let Some(params) = params.as_object_mut().filter(|p| !p.contains_key("_meta")) {
        params.insert(
            "_meta".to_owned(),
            json!({ "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {
                    "extensions": { "io.modelcontextprotocol/tasks": {} } } }),
        );
    }
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    let headers = [
        "MCP-Protocol-Version: 2026-07-28".to_owned(),
        format!("Mcp-Method: {method}"),
        format!("Mcp-Name: {name}"),
    ];
    Ok(Reply::parse(raw_post(
        address,
        &headers,
        &body.to_string(),
    )?))
}

/// Starts a task of ten minutes' work on the instance at `address`.
fn long_task(address: &str) -> Result<String, TestError> {
    let call = json!({ "name": "slow_compute", "arguments": { "seconds": 600, "label": "long" } });
    let created = with_tasks(address, "tools/call", &call, "slow_compute")?;
    Ok(created
        .body
        .pointer("/result/taskId")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("no task: {}", created.raw))?
        .to_owned())
}

/// The task `id` as the instance at `address` shows it.
fn task(address: &str, id: &str) -> Result<Value, TestError> {
    let got = with_tasks(address, "tasks/get", &json!({ "taskId": id }), id)?;
    got.body
        .get("result")
        .cloned()
        .ok_or_else(|| format!("no task: {}", got.raw).into())
}

/// A 2026-07-28 `tasks/update` is acknowledged once the instance running
/// the task took its answers: the task runs on a, the answer is sent to b,
/// and a `tasks/get` on c right after the acknowledgement no longer shows
/// the question. Sixteen tasks, since the window this closes is short
/// (eight found it in two runs of three without the wait).
#[test]
fn an_answered_question_is_gone_everywhere_once_the_update_is_acknowledged() -> Result<(), TestError>
{
    let redis = Redis::start()?;
    let droids = instances(3, Some(&redis.url()))?;
    let [a, b, c] = addresses(&droids)?;
    for n in 0..16 {
        let call = json!({ "name": "confirm_delete", "arguments": { "filename": format!("{n}.txt") },
            "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": { "elicitation": {},
                    "extensions": { "io.modelcontextprotocol/tasks": {} } } } });
        let created = with_tasks(a, "tools/call", &call, "confirm_delete")?;
        let id = created
            .body
            .pointer("/result/taskId")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("no task: {}", created.raw))?
            .to_owned();
        let deadline = Instant::now() + Duration::from_secs(20);
        while task(b, &id)?.get("status") != Some(&json!("input_required")) {
            assert!(Instant::now() < deadline, "{id} never asked");
            std::thread::sleep(Duration::from_millis(20));
        }
        let answer = json!({ "taskId": id, "inputResponses": {
            "confirm": { "action": "accept", "content": { "confirm": true } } } });
        let updated = with_tasks(b, "tasks/update", &answer, &id)?;
        assert!(updated.body.get("result").is_some(), "{}", updated.raw);
        let read = task(c, &id)?;
        assert!(
            read.pointer("/inputRequests/confirm").is_none()
                && read.get("status") != Some(&json!("input_required")),
            "asked again after the update was acknowledged: {read}"
        );
    }
    Ok(())
}

/// An instance killed while its task runs: once its word in the store that
/// it is alive lapses, another shows the task failed, saying why, rather
/// than working until its TTL. A task of a third instance, which lives,
/// read on the same other instance, works on past that moment: each runner
/// is judged on its own word.
#[test]
fn a_task_whose_instance_dies_fails_and_one_whose_instance_lives_works_on() -> Result<(), TestError>
{
    let redis = Redis::start()?;
    let mut droids = instances(3, Some(&redis.url()))?;
    let [a, b, c] = addresses(&droids)?;
    let (a, b, c) = (a.to_owned(), b.to_owned(), c.to_owned());
    let orphan = long_task(&a)?;
    let kept = long_task(&c)?;
    assert_eq!(task(&b, &orphan)?.get("status"), Some(&json!("working")));
    let (running_a, _) = droids.swap_remove(0);
    drop(running_a);
    // The lease is 15 s; patience a good deal longer.
    let deadline = Instant::now() + Duration::from_secs(60);
    let failed = loop {
        let seen = task(&b, &orphan)?;
        if seen.get("status") != Some(&json!("working")) || Instant::now() > deadline {
            break seen;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(failed.get("status"), Some(&json!("failed")), "{failed}");
    let why = failed.pointer("/error/message").and_then(Value::as_str);
    assert!(why.is_some_and(|w| w.contains("stopped")), "{failed}");
    // Read again and again for longer than an absence takes to be proven
    // (11 s): a live runner's task is never taken for an orphan.
    let until = Instant::now() + Duration::from_secs(13);
    while Instant::now() < until {
        let living = task(&b, &kept)?;
        assert_eq!(living.get("status"), Some(&json!("working")), "{living}");
        std::thread::sleep(Duration::from_millis(250));
    }
    Ok(())
}

/// A `tools/call` answered on one instance is replayed, not run, by
/// another that the same request reaches; the same id with other params is
/// refused there; and a duplicate of a call still running on one instance
/// is refused on another.
#[test]
fn a_retried_call_replays_across_instances_and_a_duplicate_is_refused() -> Result<(), TestError> {
    let redis = Redis::start()?;
    let droids = instances(2, Some(&redis.url()))?;
    let [a, b] = addresses(&droids)?;
    let (_, session) = legacy(a, None, "initialize", &hello())?;
    let session = session.ok_or("no Mcp-Session-Id")?;
    let call = |address: &str, id: u64, arguments: Value| {
        legacy_as(
            address,
            Some(&session),
            id,
            "tools/call",
            &json!({ "name": "slow_compute", "arguments": arguments }),
        )
        .map(|(reply, _)| reply)
    };
    let first = call(a, 7, json!({ "seconds": 0, "label": "once" }))?;
    assert!(first.raw.contains("once: done"), "{}", first.raw);
    let again = call(b, 7, json!({ "seconds": 0, "label": "once" }))?;
    assert_eq!(
        again.body.pointer("/result"),
        first.body.pointer("/result"),
        "{}",
        again.raw
    );
    let other = call(b, 7, json!({ "seconds": 0, "label": "other" }))?;
    assert!(
        other.raw.contains("already used for a different call"),
        "{}",
        other.raw
    );

    let slow = std::thread::spawn({
        let (a, session) = (a.to_owned(), session.clone());
        move || {
            legacy_as(
                &a,
                Some(&session),
                8,
                "tools/call",
                &json!({ "name": "slow_compute", "arguments": { "seconds": 3, "label": "slow" } }),
            )
        }
    });
    // The first is running on a (a second into its three) when its
    // duplicate reaches b.
    std::thread::sleep(Duration::from_secs(1));
    let duplicate = call(b, 8, json!({ "seconds": 3, "label": "slow" }))?;
    assert!(
        duplicate.raw.contains("already in progress"),
        "{}",
        duplicate.raw
    );
    let (finished, _) = slow.join().map_err(|_| "the calling thread panicked")??;
    assert!(finished.raw.contains("slow: done"), "{}", finished.raw);
    Ok(())
}

/// A call refused because the store did not answer in time, though the
/// store took its mark (it was only slow), runs when retried as the refusal
/// asks: the mark is given back once the store answers, not left to be
/// refused as in progress until its lease lapses.
#[test]
fn a_call_refused_while_the_store_was_slow_runs_when_retried() -> Result<(), TestError> {
    let redis = Redis::start()?;
    let droids = instances(1, Some(&redis.url()))?;
    let [a] = addresses(&droids)?;
    let (_, session) = legacy(a, None, "initialize", &hello())?;
    let session = session.ok_or("no Mcp-Session-Id")?;
    let call = |id: u64| {
        legacy_as(
            a,
            Some(&session),
            id,
            "tools/call",
            &json!({ "name": "slow_compute", "arguments": { "seconds": 0, "label": "kept" } }),
        )
        .map(|(reply, _)| reply)
    };
    let warm = call(8)?;
    assert!(warm.raw.contains("kept: done"), "{}", warm.raw);
    // The store busy for longer than the instance waits for two answers
    // (its session, then the call's mark): both time out, and the store
    // takes the mark once it is free again.
    let mut busy = redis.command(&["DEBUG", "SLEEP", "8"], Duration::from_secs(60))?;
    // Under way once a command sent after it waits (the server reads one
    // connection's commands at a time).
    std::thread::sleep(Duration::from_millis(200));
    let refused = call(9)?;
    assert_eq!(refused.status, 503, "{}", refused.raw);
    // Retried as asked, once the store is itself again, until answered:
    // meanwhile the call may be in progress for a moment (the mark taken
    // late, and forgotten at the next try), but its mark is never seen
    // near the end of its lease, which is how long it would stay
    // otherwise.
    let mut busy_said = [0_u8; 5];
    busy.read_exact(&mut busy_said)?;
    let mark = format!("droid:call:{session}:9");
    let mut retried = call(9)?;
    for _ in 0..240 {
        if retried.status != 503 && !retried.raw.contains("already in progress") {
            break;
        }
        let left = pttl(&redis, &mark)?;
        assert!(
            !(0..=3_000).contains(&left),
            "the mark stays until its lease lapses ({left} ms left): {}",
            retried.raw
        );
        std::thread::sleep(Duration::from_millis(250));
        retried = call(9)?;
    }
    assert!(retried.raw.contains("kept: done"), "{}", retried.raw);
    Ok(())
}

/// A stream the server closes for polling (2025-11-25), resumed with
/// `Last-Event-ID` on another instance than the one running the call: the
/// answer arrives there, read from what the first instance copied out.
#[test]
fn a_stream_closed_on_one_instance_is_resumed_on_another() -> Result<(), TestError> {
    let redis = Redis::start()?;
    let droids = instances(2, Some(&redis.url()))?;
    let [a, b] = addresses(&droids)?;
    let (_, session) = legacy(a, None, "initialize", &hello())?;
    let session = session.ok_or("no Mcp-Session-Id")?;
    let (primed, _) = legacy(
        a,
        Some(&session),
        "tools/call",
        &json!({ "name": "test_reconnection", "arguments": {} }),
    )?;
    assert!(
        !primed.raw.contains("Reconnection test completed"),
        "{}",
        primed.raw
    );
    let last = primed
        .raw
        .lines()
        .find_map(|line| line.strip_prefix("id:"))
        .map(str::trim)
        .ok_or_else(|| format!("no event id on the primed stream: {}", primed.raw))?
        .to_owned();
    let mut stream = TcpStream::connect(b)?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(
        stream,
        "GET /mcp HTTP/1.1\r\nHost: {b}\r\nAccept: text/event-stream\r\n\
         Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\n\
         Last-Event-ID: {last}\r\nConnection: close\r\n\r\n"
    )?;
    let mut resumed = String::new();
    stream.read_to_string(&mut resumed)?;
    assert!(resumed.contains("Reconnection test completed"), "{resumed}");
    Ok(())
}

/// Watches every command Redis runs (`MONITOR`) and counts those a client
/// sent about a request's state (a session, a round, a call, a stream),
/// leaving out what scripts run inside and the instances' own background
/// work (heartbeats, the key ring).
struct Monitor {
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    _reader: std::thread::JoinHandle<()>,
}

impl Monitor {
    fn start(redis: &Redis) -> Result<Self, TestError> {
        use std::io::BufRead as _;
        let mut stream = TcpStream::connect(("127.0.0.1", redis.port()))?;
        stream.write_all(b"MONITOR\r\n")?;
        let mut reader = std::io::BufReader::new(stream);
        let mut ok = String::new();
        reader.read_line(&mut ok)?;
        assert!(ok.starts_with("+OK"), "{ok}");
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = std::sync::Arc::clone(&lines);
        let reader = std::thread::spawn(move || {
            for line in reader.lines().map_while(Result::ok) {
                if let Ok(mut kept) = kept.lock() {
                    kept.push(line);
                }
            }
        });
        Ok(Self {
            lines,
            _reader: reader,
        })
    }

    /// The commands about requests' state seen since the last call.
    fn take(&self) -> Vec<String> {
        // What was sent is seen a moment later.
        std::thread::sleep(Duration::from_millis(200));
        let lines = self
            .lines
            .lock()
            .map(|mut lines| std::mem::take(&mut *lines))
            .unwrap_or_default();
        lines
            .into_iter()
            .filter(|line| !line.contains(" lua]"))
            .filter(|line| {
                ["session:", "round:", "call:", "events:"]
                    .iter()
                    .any(|kind| line.contains(&format!("\"droid:{kind}")))
            })
            .collect()
    }
}

/// How many times a request goes to Redis, counted by Redis itself: none
/// for a 2026-07-28 request without a `requestState`, one for a retry
/// with one; one for a legacy request, two for one that changes the
/// session, three for a `tools/call`, once Redis has each script (its first
/// use loads it). docs/benchmarks.md gives these figures.
#[test]
fn the_round_trips_to_redis_per_request_are_as_documented() -> Result<(), TestError> {
    let redis = Redis::start()?;
    let droids = instances(1, Some(&redis.url()))?;
    let [a] = addresses(&droids)?;
    // Each script's first use loads it into Redis (a refused EVALSHA, a
    // SCRIPT LOAD, the EVALSHA again); counted after, as it runs ever after.
    let (state, _) = first_round(a)?;
    let _warm = call(a, Some((&state, accept())))?;
    let (_, warm) = legacy(a, None, "initialize", &hello())?;
    let warm = warm.ok_or("no Mcp-Session-Id")?;
    let _warm = legacy(
        a,
        Some(&warm),
        "logging/setLevel",
        &json!({ "level": "info" }),
    )?;
    let _warm = legacy(
        a,
        Some(&warm),
        "tools/call",
        &json!({ "name": "slow_compute", "arguments": { "seconds": 0 } }),
    )?;
    let monitor = Monitor::start(&redis)?;

    let (state, _) = first_round(a)?;
    let seen = monitor.take();
    assert_eq!(
        seen.len(),
        0,
        "a first round needs nothing shared: {seen:#?}"
    );
    let answered = call(a, Some((&state, accept())))?;
    assert!(
        text_of(&answered).starts_with("state-ok"),
        "{}",
        answered.raw
    );
    let seen = monitor.take();
    assert_eq!(
        seen.len(),
        1,
        "a retry with a requestState: its round: {seen:#?}"
    );

    let (_, session) = legacy(a, None, "initialize", &hello())?;
    let session = session.ok_or("no Mcp-Session-Id")?;
    let seen = monitor.take();
    assert_eq!(seen.len(), 1, "initialize: the record: {seen:#?}");
    let (_, _) = legacy(a, Some(&session), "tools/list", &json!({}))?;
    let seen = monitor.take();
    assert_eq!(
        seen.len(),
        1,
        "a legacy request: the record read: {seen:#?}"
    );
    let (_, _) = legacy(
        a,
        Some(&session),
        "logging/setLevel",
        &json!({ "level": "info" }),
    )?;
    let seen = monitor.take();
    assert_eq!(seen.len(), 2, "setLevel: read and write: {seen:#?}");
    let (_, _) = legacy(
        a,
        Some(&session),
        "tools/call",
        &json!({ "name": "slow_compute", "arguments": { "seconds": 0 } }),
    )?;
    let seen = monitor.take();
    assert_eq!(
        seen.len(),
        3,
        "a tools/call: the record, its admission, its answer: {seen:#?}"
    );
    Ok(())
}

/// A session's shared call records are bounded (256 calls), but by what
/// runs: answered calls recorded longest ago make room, so a session
/// making calls one after another is never refused for having made many.
#[test]
fn a_session_making_many_calls_is_never_refused_for_its_answered_ones() -> Result<(), TestError> {
    let redis = Redis::start()?;
    let droids = instances(1, Some(&redis.url()))?;
    let [a] = addresses(&droids)?;
    let (_, session) = legacy(a, None, "initialize", &hello())?;
    let session = session.ok_or("no Mcp-Session-Id")?;
    for n in 0..300 {
        let (reply, _) = legacy(
            a,
            Some(&session),
            "tools/call",
            &json!({ "name": "slow_compute", "arguments": { "seconds": 0, "label": format!("n{n}") } }),
        )?;
        assert!(
            reply.raw.contains(&format!("n{n}: done")),
            "call {n}: {}",
            reply.raw
        );
    }
    Ok(())
}
