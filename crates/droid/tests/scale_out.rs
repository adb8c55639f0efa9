//! Several `droid serve` instances behind a real load balancer (Debian's
//! haproxy, round-robin, no stickiness), sharing their state through a real
//! Redis (Debian's redis-server), each started here on loopback ports of
//! the test's own. `scripts/services.sh` installs both.

mod support;

use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use protocol_droid_test_support::redis::{RedisServer as Redis, free_port};
use serde_json::{Value, json};
use support::{Files, Running, TestError, listening, raw_get, raw_post};

/// The tool that seals a `requestState` in its first round and reads it back
/// in the second.
const STATEFUL: &str = "test_input_required_result_request_state";

/// Waits until `ready` holds, for at most 20 seconds.
fn wait_for(what: &str, mut ready: impl FnMut() -> bool) -> Result<(), TestError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if ready() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("{what} was not ready within 20 s").into())
}

/// haproxy in front of `backends`, round-robin, naming the instance that
/// served each answer in `X-Served-By`.
struct Balancer {
    _process: Running,
    _files: Files,
    address: String,
}

impl Balancer {
    fn start(backends: &[String]) -> Result<Self, TestError> {
        let port = free_port()?;
        let servers: String = backends
            .iter()
            .enumerate()
            .map(|(i, address)| format!("  server droid{i} {address}\n"))
            .collect();
        let config = format!(
            "global\n  maxconn 256\n\
             defaults\n  mode http\n  timeout connect 2s\n  timeout client 30s\n  timeout server 30s\n\
             frontend mcp\n  bind 127.0.0.1:{port}\n  default_backend droids\n\
             backend droids\n  balance roundrobin\n  http-response set-header X-Served-By %[srv_name]\n\
             {servers}"
        );
        let files = Files::fresh("droid-haproxy")?;
        let path = files.write("haproxy.cfg", &config)?;
        let process = Command::new("haproxy")
            .args(["-db", "-f", &path])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting haproxy (scripts/services.sh installs it): {e}"))?;
        let balancer = Self {
            _process: Running(process),
            _files: files,
            address: format!("127.0.0.1:{port}"),
        };
        wait_for("haproxy", || TcpStream::connect(&balancer.address).is_ok())?;
        Ok(balancer)
    }
}

/// `count` instances of `droid serve`, sharing through `store` if given.
fn instances(count: usize, store: Option<&str>) -> Result<Vec<(Running, String)>, TestError> {
    (0..count)
        .map(|_| {
            let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
            if let Some(url) = store {
                args.extend(["--store", url]);
            }
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

/// A raw HTTP reply: its status, its `X-Served-By`, and its body as JSON.
struct Reply {
    status: u16,
    served_by: Option<String>,
    body: Value,
    raw: String,
}

fn parse(raw: String) -> Reply {
    let status = raw
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let served_by = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("x-served-by")
            .then(|| value.trim().to_owned())
    });
    let body = serde_json::from_str(body).unwrap_or(Value::Null);
    Reply {
        status,
        served_by,
        body,
        raw,
    }
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
    Ok(parse(raw_post(address, &headers, &body.to_string())?))
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
/// `Retry-After`, what needs nothing shared is served, and `/readyz` says
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
    drop(redis);

    let refused = call(b, Some((&before, accept())))?;
    assert_eq!(refused.status, 503, "{}", refused.raw);
    assert!(
        refused.raw.to_ascii_lowercase().contains("retry-after: 1"),
        "{}",
        refused.raw
    );
    assert_eq!(
        refused.body.pointer("/error/code"),
        Some(&json!(-32030)),
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
