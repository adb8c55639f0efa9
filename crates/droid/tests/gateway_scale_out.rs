//! Several `droid gateway` instances sharing their trust and their
//! principals' activations through a real Redis (Debian's redis-server),
//! behind a real load balancer (haproxy, round-robin, no stickiness), each
//! in front of its own `droid serve` upstream. `scripts/services.sh`
//! installs both.

mod support;

use std::process::Output;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::elliptic_curve::sec1::ToEncodedPoint as _;
use p256::pkcs8::EncodePrivateKey as _;
use protocol_droid_test_support::redis::RedisServer as Redis;
use serde_json::{Value, json};
use support::balancer::{Balancer, Reply, hello, legacy, wait_for};
use support::{Files, Running, TestError, droid_command, listening, raw_post};

const DROID: &str = env!("CARGO_BIN_EXE_droid");

/// The resource every instance serves, as tokens name it: one for all of
/// them, since a client cannot tell them apart.
const RESOURCE: &str = "https://mcp.example/mcp";
const ISSUER: &str = "https://issuer.example";

/// The gateway's TOML: an admin socket and a state file in `files`, named
/// after `name`, and `droid serve` as the upstream `fixture`, trusted on
/// first use; `echo` described as `echo` says, when it says.
fn config(files: &Files, name: &str, mode: &str, echo: Option<&str>) -> Result<String, TestError> {
    let mut text = format!(
        "mode = {mode:?}\nadmin_socket = {:?}\nstate = {:?}\n\n\
         [[upstream]]\nname = \"fixture\"\ncommand = [{DROID:?}, \"serve\"]\ntrust = \"on-first-use\"\n",
        files.path(&format!("{name}.sock")),
        files.path(&format!("{name}.json")),
    );
    if let Some(description) = echo {
        text.push_str(&format!(
            "tools = {{ descriptions = {{ echo = {description:?} }} }}\n"
        ));
    }
    files.write(&format!("{name}.toml"), &text)
}

/// `droid gateway --config CONFIG --listen … [--store URL --instance-id NAME] EXTRA…`.
fn gateway(
    config: &str,
    store: Option<(&str, &str)>,
    extra: &[&str],
) -> Result<(Running, String), TestError> {
    let mut args = vec!["gateway", "--config", config, "--listen", "127.0.0.1:0"];
    if let Some((url, name)) = store {
        args.extend(["--store", url, "--instance-id", name]);
    }
    args.extend_from_slice(extra);
    listening(&args, "http")
}

/// The tool `id` awaiting approval on the gateway of `config`, as its
/// `status` shows it (`ID@DIGEST`).
fn awaiting(config: &str, id: &str) -> Result<String, TestError> {
    let status = admin(config, &["status"])?;
    let shown = String::from_utf8_lossy(&status.stdout).into_owned();
    shown
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with(&format!("{id}@")))
        .map(str::to_owned)
        .ok_or_else(|| format!("{id} is not awaiting approval: {shown}").into())
}

/// `droid gateway --config CONFIG ACTION…`: the admin endpoint of the
/// instance `config` names.
fn admin(config: &str, action: &[&str]) -> Result<Output, TestError> {
    let mut args = vec!["gateway", "--config", config];
    args.extend_from_slice(action);
    Ok(droid_command().args(&args).output()?)
}

/// A 2026-07-28 `tools/call` of `tool` at `address`, with `token` if given:
/// the reply's text or error message, and the instance that served it
/// (behind the balancer).
fn call(
    address: &str,
    tool: &str,
    arguments: &Value,
    token: Option<&str>,
) -> Result<(Result<String, String>, Option<String>), TestError> {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {
            "name": tool,
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    });
    let mut headers = vec![
        "MCP-Protocol-Version: 2026-07-28".to_owned(),
        "Mcp-Method: tools/call".to_owned(),
        format!("Mcp-Name: {tool}"),
    ];
    if let Some(token) = token {
        headers.push(format!("Authorization: Bearer {token}"));
    }
    let reply = Reply::parse(raw_post(address, &headers, &body.to_string())?);
    let said = |pointer: &str| reply.body.pointer(pointer).and_then(Value::as_str);
    let outcome = match (said("/result/content/0/text"), said("/error/message")) {
        (Some(text), _) if reply.body.pointer("/result/isError") != Some(&json!(true)) => {
            Ok(text.to_owned())
        }
        (Some(text), _) => Err(text.to_owned()),
        (None, Some(message)) => Err(message.to_owned()),
        (None, None) => Err(reply.raw.clone()),
    };
    Ok((outcome, reply.served_by))
}

fn echo(address: &str, text: &str) -> Result<Result<String, String>, TestError> {
    Ok(call(address, "fixture/echo", &json!({ "text": text }), None)?.0)
}

/// A 2026-07-28 `tools/list` at `address`: each tool's name and
/// description.
fn listed(address: &str) -> Result<Vec<(String, String)>, TestError> {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/list",
        "params": { "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        } },
    });
    let headers = [
        "MCP-Protocol-Version: 2026-07-28".to_owned(),
        "Mcp-Method: tools/list".to_owned(),
    ];
    let raw = raw_post(address, &headers, &body.to_string())?;
    let (_, text) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let reply: Value = serde_json::from_str(text)?;
    let tools = reply
        .pointer("/result/tools")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("no tools in {raw}"))?;
    Ok(tools
        .iter()
        .map(|tool| {
            let field = |name: &str| {
                tool.get(name)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            (field("name"), field("description"))
        })
        .collect())
}

/// The first use of an upstream is taken once for every instance, and an
/// approval made on one instance's admin endpoint holds on every other.
#[test]
fn trust_taken_or_given_on_one_instance_holds_on_every_other() -> Result<(), TestError> {
    let redis = Redis::start()?;
    let url = redis.url();
    let files = Files::fresh("droid-gateway-trust")?;
    // Instance one sees the upstream first: `echo` as the upstream
    // describes it is trusted from then on.
    let one_config = config(&files, "one", "default", None)?;
    let (_one, one) = gateway(&one_config, Some((&url, "one")), &[])?;
    assert!(echo(&one, "first")?.is_ok_and(|text| text.contains("first")));

    // Instance two's upstream shows `echo` otherwise (a changed
    // description): held to the first use, it is not offered there...
    let changed = "Sends your text somewhere else.";
    // (Its store named in its configuration rather than by flags.)
    let two_config = config(&files, "two", "default", Some(changed))?;
    let with_store = std::fs::read_to_string(&two_config)?
        + &format!("\n[store]\nurl = {url:?}\ninstance_id = \"two\"\n");
    std::fs::write(&two_config, with_store)?;
    let (_two, two) = gateway(&two_config, None, &[])?;
    let refused = echo(&two, "second")?;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.contains("held back until an operator approves it")),
        "{refused:?}"
    );
    // ...where a gateway that shares nothing trusts it on its own first use.
    let alone_config = config(&files, "alone", "default", Some(changed))?;
    let (_alone, alone) = gateway(&alone_config, None, &[])?;
    assert!(echo(&alone, "alone")?.is_ok());

    // The operator approves `echo` as instance two shows it, there.
    let awaiting = awaiting(&two_config, "fixture/echo")?;
    let approved = admin(&two_config, &["approve", &awaiting])?;
    let said = String::from_utf8_lossy(&approved.stdout).into_owned();
    assert!(approved.status.success(), "{said}");
    assert!(said.starts_with("approved fixture/echo"), "{said}");
    assert!(echo(&two, "third")?.is_ok_and(|text| text.contains("third")));

    // Instance one's upstream changes the same way: the approval made on
    // instance two already vouches for it, so `echo` stays callable there
    // without a word to instance one.
    config(&files, "one", "default", Some(changed))?;
    let mut last = Vec::new();
    wait_for("instance one to offer echo as changed", || {
        last = listed(&one).unwrap_or_default();
        last.iter()
            .any(|(name, description)| name == "fixture/echo" && description == changed)
    })
    .map_err(|e| format!("{e}: {last:?}"))?;
    assert!(echo(&one, "fourth")?.is_ok_and(|text| text.contains("fourth")));

    // Behind the balancer, both instances answer.
    let balancer = Balancer::start(&[one, two])?;
    let mut served = Vec::new();
    for n in 0..4 {
        let (outcome, by) = call(
            &balancer.address,
            "fixture/echo",
            &json!({ "text": format!("through {n}") }),
            None,
        )?;
        assert!(outcome.is_ok(), "{outcome:?}");
        served.extend(by);
    }
    served.sort();
    served.dedup();
    assert_eq!(served.len(), 2, "{served:?}");
    Ok(())
}

/// An approval made while the shared store is away holds on the instance
/// that made it and is kept in its state file; `approve` says just that,
/// not that it was kept nowhere.
#[test]
fn an_approval_made_with_the_store_away_says_it_was_kept_but_not_shared() -> Result<(), TestError> {
    let redis = Redis::start()?;
    let url = redis.url();
    let files = Files::fresh("droid-gateway-away")?;
    let one_config = config(&files, "one", "default", None)?;
    let (_one, one) = gateway(&one_config, Some((&url, "one")), &[])?;
    assert!(echo(&one, "first")?.is_ok());
    let changed = "Sends your text somewhere else.";
    let two_config = config(&files, "two", "default", Some(changed))?;
    let (_two, two) = gateway(&two_config, Some((&url, "two")), &[])?;
    assert!(echo(&two, "second")?.is_err());
    let awaiting = awaiting(&two_config, "fixture/echo")?;
    drop(redis);
    let approved = admin(&two_config, &["approve", &awaiting])?;
    let said = String::from_utf8_lossy(&approved.stderr).into_owned();
    assert!(!approved.status.success());
    assert!(
        said.contains("kept in its state") && said.contains("other instances do not hold them"),
        "{said}"
    );
    assert!(!said.contains("were not kept"), "{said}");
    let state = std::fs::read_to_string(files.path("two.json"))?;
    assert!(state.contains("fixture/echo"), "{state}");
    assert!(echo(&two, "third")?.is_ok());
    Ok(())
}

/// A Redis that lost everything (emptied, or another in its place) gets
/// the first uses back from the instances still running, as it gets the
/// key ring back: an instance started after holds its upstream to them,
/// rather than trusting anew what its upstream shows by then.
#[test]
fn a_first_use_the_store_lost_is_written_back_by_the_instances_holding_it() -> Result<(), TestError>
{
    use std::io::BufRead as _;
    let redis = Redis::start()?;
    let url = redis.url();
    let files = Files::fresh("droid-gateway-lost")?;
    let one_config = config(&files, "one", "default", None)?;
    let (_one, one) = gateway(&one_config, Some((&url, "one")), &[])?;
    assert!(echo(&one, "first")?.is_ok_and(|text| text.contains("first")));
    let mut flushed = String::new();
    redis
        .command(&["FLUSHALL"], std::time::Duration::from_secs(5))?
        .read_line(&mut flushed)?;
    assert_eq!(flushed.trim(), "+OK");
    // Written back at instance one's next reading of the store.
    wait_for("the first use to be written back", || {
        let mut answer = String::new();
        redis
            .command(
                &["HEXISTS", "droid:gateway:first-use", "fixture"],
                std::time::Duration::from_secs(5),
            )
            .and_then(|mut reader| Ok(reader.read_line(&mut answer)?))
            .is_ok_and(|_| answer.trim() == ":1")
    })?;
    // An instance started now, whose upstream shows `echo` otherwise, is
    // held to the first use instance one kept.
    let two_config = config(&files, "two", "default", Some("Sends your text elsewhere."))?;
    let (_two, two) = gateway(&two_config, Some((&url, "two")), &[])?;
    let refused = echo(&two, "second")?;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.contains("held back until an operator approves it")),
        "{refused:?}"
    );
    Ok(())
}

/// The test issuer: a P-256 key, its public half in a JWKS file the
/// instances read, and tokens it signs for a subject.
struct Issuer {
    key: EncodingKey,
    jwks: String,
}

impl Issuer {
    fn new(files: &Files) -> Result<Self, TestError> {
        let secret = p256::SecretKey::random(&mut rand::rngs::OsRng);
        let der = secret.to_pkcs8_der()?;
        let point = secret.public_key().to_encoded_point(false);
        let (Some(x), Some(y)) = (point.x(), point.y()) else {
            return Err("an uncompressed point has coordinates".into());
        };
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        let jwks = json!({ "keys": [{
            "kty": "EC", "kid": "1", "crv": "P-256", "use": "sig", "alg": "ES256",
            "x": b64(x), "y": b64(y),
        }] });
        Ok(Self {
            key: EncodingKey::from_ec_der(der.as_bytes()),
            jwks: files.write("jwks.json", &jwks.to_string())?,
        })
    }

    fn token(&self, subject: &str) -> Result<String, TestError> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some("1".to_owned());
        let claims = json!({
            "iss": ISSUER, "aud": RESOURCE, "sub": subject,
            "iat": now, "exp": now + 600,
        });
        Ok(jsonwebtoken::encode(&header, &claims, &self.key)?)
    }
}

/// A principal's activations, made through whichever instance the
/// balancer picks, hold on every instance; its deactivations too; and
/// another principal sees none of them.
#[test]
fn a_principals_activations_hold_on_every_instance() -> Result<(), TestError> {
    let redis = Redis::start()?;
    let url = redis.url();
    let files = Files::fresh("droid-gateway-activations")?;
    let issuer = Issuer::new(&files)?;
    let auth = [
        "--auth-issuer",
        ISSUER,
        "--auth-jwks-file",
        &issuer.jwks,
        "--auth-resource",
        RESOURCE,
    ];
    let mut instances = Vec::new();
    for name in ["one", "two", "three"] {
        let config = config(&files, name, "progressive", None)?;
        instances.push(gateway(&config, Some((&url, name)), &auth)?);
    }
    let backends: Vec<String> = instances.iter().map(|(_, a)| a.clone()).collect();
    let balancer = Balancer::start(&backends)?;
    let through = balancer.address.as_str();
    let (alice, bob) = (issuer.token("alice")?, issuer.token("bob")?);
    let echo_as = |token: &str, text: &str| {
        call(
            through,
            "fixture/echo",
            &json!({ "text": text }),
            Some(token),
        )
    };

    // Deferred: nobody may call it before activating it.
    let (hidden, _) = echo_as(&alice, "early")?;
    assert!(
        hidden.as_ref().is_err_and(|e| e.contains("unknown tool")),
        "{hidden:?}"
    );
    let (activated, by) = call(
        through,
        "activate_tools",
        &json!({ "ids": ["fixture/echo"] }),
        Some(&alice),
    )?;
    assert!(
        activated
            .as_ref()
            .is_ok_and(|t| t.starts_with("Activated 1")),
        "{activated:?}"
    );
    // Every instance, the two that did not see the activation among them,
    // answers alice's calls at once.
    let mut served = Vec::new();
    for n in 0..6 {
        let (outcome, by) = echo_as(&alice, &format!("call {n}"))?;
        assert!(
            outcome
                .as_ref()
                .is_ok_and(|text| text.contains(&format!("call {n}"))),
            "call {n} on {by:?}: {outcome:?}"
        );
        served.extend(by);
    }
    served.sort();
    served.dedup();
    assert_eq!(served.len(), 3, "{served:?}");
    assert!(by.is_some(), "the balancer names the instance");
    // Not bob's: on no instance.
    for _ in 0..3 {
        let (outcome, by) = echo_as(&bob, "bob")?;
        assert!(
            outcome.as_ref().is_err_and(|e| e.contains("unknown tool")),
            "{by:?}: {outcome:?}"
        );
    }
    // Deactivated on one instance: refused on all.
    let (deactivated, _) = call(
        through,
        "deactivate_tools",
        &json!({ "ids": ["fixture/echo"] }),
        Some(&alice),
    )?;
    assert!(deactivated.is_ok(), "{deactivated:?}");
    // Told to the others before it was answered, and taken by each as it
    // hears it, moments later: then refused on all three in a row.
    let mut refused_in_a_row = 0;
    wait_for("the deactivation to hold on every instance", || {
        let refused = echo_as(&alice, "after")
            .is_ok_and(|(outcome, _)| outcome.is_err_and(|e| e.contains("unknown tool")));
        refused_in_a_row = if refused { refused_in_a_row + 1 } else { 0 };
        refused_in_a_row >= 3
    })?;

    // An instance started later takes what is kept.
    let late_config = config(&files, "late", "progressive", None)?;
    call(
        through,
        "activate_tools",
        &json!({ "ids": ["fixture/echo"] }),
        Some(&alice),
    )?
    .0?;
    let (_late, late) = gateway(&late_config, Some((&url, "late")), &auth)?;
    let (outcome, _) = call(
        &late,
        "fixture/echo",
        &json!({ "text": "late" }),
        Some(&alice),
    )?;
    assert!(
        outcome.as_ref().is_ok_and(|t| t.contains("late")),
        "{outcome:?}"
    );
    Ok(())
}

/// A legacy session opened through `address`: its id.
fn legacy_session(address: &str) -> Result<String, TestError> {
    let (opened, session) = legacy(address, None, "initialize", &hello())?;
    let session = session.ok_or_else(|| format!("no Mcp-Session-Id: {}", opened.raw))?;
    Ok(session)
}

/// A legacy session's activations, made through whichever instance the
/// balancer picks, hold on every instance that serves a request of the
/// session; its deactivations too; and another session sees none of them.
#[test]
fn a_legacy_sessions_activations_hold_on_every_instance() -> Result<(), TestError> {
    let redis = Redis::start()?;
    let url = redis.url();
    let files = Files::fresh("droid-gateway-legacy-activations")?;
    let mut instances = Vec::new();
    for name in ["one", "two", "three"] {
        let config = config(&files, name, "progressive", None)?;
        instances.push(gateway(&config, Some((&url, name)), &[])?);
    }
    let backends: Vec<String> = instances.iter().map(|(_, a)| a.clone()).collect();
    let balancer = Balancer::start(&backends)?;
    let through = balancer.address.as_str();
    let session = legacy_session(through)?;
    let other = legacy_session(through)?;
    let echo_in = |session: &str, text: &str| {
        legacy(
            through,
            Some(session),
            "tools/call",
            &json!({ "name": "fixture/echo", "arguments": { "text": text } }),
        )
        .map(|(reply, _)| reply)
    };

    let hidden = echo_in(&session, "early")?;
    assert!(hidden.raw.contains("unknown tool"), "{}", hidden.raw);
    let (activated, _) = legacy(
        through,
        Some(&session),
        "tools/call",
        &json!({ "name": "activate_tools", "arguments": { "ids": ["fixture/echo"] } }),
    )?;
    assert!(activated.raw.contains("Activated 1"), "{}", activated.raw);
    // Every instance answers the session's calls, the two that did not
    // see the activation among them.
    let mut served = Vec::new();
    for n in 0..6 {
        let reply = echo_in(&session, &format!("call {n}"))?;
        assert!(
            reply.raw.contains(&format!("call {n}")) && !reply.raw.contains("unknown tool"),
            "call {n} on {:?}: {}",
            reply.served_by,
            reply.raw
        );
        served.extend(reply.served_by);
    }
    served.sort();
    served.dedup();
    assert_eq!(served.len(), 3, "{served:?}");
    // Not the other session's: on no instance.
    for _ in 0..3 {
        let reply = echo_in(&other, "other")?;
        assert!(reply.raw.contains("unknown tool"), "{}", reply.raw);
    }
    // Deactivated through one instance: refused on all three in a row.
    let (deactivated, _) = legacy(
        through,
        Some(&session),
        "tools/call",
        &json!({ "name": "deactivate_tools", "arguments": { "ids": ["fixture/echo"] } }),
    )?;
    assert_eq!(deactivated.status, 200, "{}", deactivated.raw);
    let mut refused_in_a_row = 0;
    wait_for("the deactivation to hold on every instance", || {
        let refused =
            echo_in(&session, "after").is_ok_and(|reply| reply.raw.contains("unknown tool"));
        refused_in_a_row = if refused { refused_in_a_row + 1 } else { 0 };
        refused_in_a_row >= 3
    })?;
    Ok(())
}

/// A 2026-07-28 `tools/call` of the legacy upstream's `test_elicitation`
/// at `address`: the first round without `retry`, else the retry with its
/// `requestState` and the answer given to every question.
fn elicit(address: &str, retry: Option<(&str, &[String], &str)>) -> Result<Value, TestError> {
    const TOOL: &str = "fixture/test_elicitation";
    let mut params = json!({
        "name": TOOL,
        "arguments": { "message": "Who are you?" },
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": { "elicitation": {} },
        },
    });
    if let (Some((state, keys, name)), Some(params)) = (retry, params.as_object_mut()) {
        let answer = json!({ "action": "accept", "content": { "username": name } });
        let answers: serde_json::Map<String, Value> =
            keys.iter().map(|k| (k.clone(), answer.clone())).collect();
        params.insert("requestState".to_owned(), json!(state));
        params.insert("inputResponses".to_owned(), Value::Object(answers));
    }
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params });
    let headers = [
        "MCP-Protocol-Version: 2026-07-28".to_owned(),
        "Mcp-Method: tools/call".to_owned(),
        format!("Mcp-Name: {TOOL}"),
    ];
    let raw = raw_post(address, &headers, &body.to_string())?;
    let (_, text) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    Ok(serde_json::from_str(text).map_err(|e| format!("{e}: {raw}"))?)
}

/// A call a legacy upstream holds open for its client's answer is parked
/// on the instance that holds it; the client's retry, sent to another
/// instance, is carried there and answered with what the person said.
#[test]
fn a_call_parked_on_one_instance_is_resumed_through_another() -> Result<(), TestError> {
    let redis = Redis::start()?;
    let url = redis.url();
    let files = Files::fresh("droid-gateway-parked")?;
    let legacy = |name: &str| -> Result<String, TestError> {
        let path = config(&files, name, "default", None)?;
        // The upstream held to a legacy revision: it asks while the call is
        // open, rather than in rounds of its own.
        let text = std::fs::read_to_string(&path)? + "revision = \"2025-11-25\"\n";
        std::fs::write(&path, text)?;
        Ok(path)
    };
    let (_one, one) = gateway(&legacy("one")?, Some((&url, "one")), &[])?;
    let (_two, two) = gateway(&legacy("two")?, Some((&url, "two")), &[])?;
    for (first, retry) in [(&one, &two), (&two, &one)] {
        let asked = elicit(first, None)?;
        let state = asked
            .pointer("/result/requestState")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("no requestState in {asked}"))?;
        let keys: Vec<String> = asked
            .pointer("/result/inputRequests")
            .and_then(Value::as_object)
            .map(|questions| questions.keys().cloned().collect())
            .unwrap_or_default();
        assert_eq!(keys.len(), 1, "{asked}");
        let answered = elicit(retry, Some((state, &keys, "ada")))?;
        let text = answered
            .pointer("/result/content/0/text")
            .and_then(Value::as_str)
            .unwrap_or_default();
        assert!(
            text.starts_with("User response: action=accept") && text.contains("ada"),
            "{answered}"
        );
    }
    Ok(())
}
