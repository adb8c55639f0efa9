//! The fifteen scenarios of `spec/acp/ACP.md` §12, in order.

use serde_json::{Value, json};

use super::agent::{self, Config};
use super::support::{Client, TestResult, connect};

async fn started(config: Config) -> Client {
    let (peer, client) = connect();
    let _agent = agent::spawn(peer, config);
    client
}

/// A client of the reference agent configured as `tune` sets.
async fn started_with(tune: impl FnOnce(&mut Config)) -> Client {
    let mut config = Config::default();
    tune(&mut config);
    started(config).await
}

async fn new_session(client: &mut Client) -> Result<String, super::support::TestError> {
    let reply = client
        .call(&json!({"jsonrpc":"2.0","id":"new","method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}}))
        .await?;
    Ok(reply["result"]["sessionId"]
        .as_str()
        .ok_or("no sessionId")?
        .to_owned())
}

fn prompt(id: i64, session: &str, text: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"session/prompt",
        "params":{"sessionId":session,"prompt":[{"type":"text","text":text}]}})
}

/// `session/cancel` for `session`.
fn cancel(session: &str) -> Value {
    json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":session}})
}

/// Sends prompt `id` asking for `permission`, sees the tool call announced,
/// and reads the permission request that follows.
async fn permission_asked(
    client: &mut Client,
    id: i64,
    session: &str,
) -> Result<Value, super::support::TestError> {
    client.send_json(&prompt(id, session, "permission")).await?;
    assert_eq!(
        client.recv().await?["params"]["update"]["sessionUpdate"],
        "tool_call"
    );
    let ask = client.recv().await?;
    assert_eq!(ask["method"], "session/request_permission");
    Ok(ask)
}

#[tokio::test]
async fn s01_initialize_answers_version_1_to_any_numeric_request() -> TestResult {
    let mut client = started(Config::default()).await;
    for version in [json!(1), json!(2), json!(99), json!(0)] {
        let reply = client
            .call(&json!({"jsonrpc":"2.0","id":0,"method":"initialize",
                "params":{"protocolVersion":version,"clientCapabilities":{"foo":{},"_meta":{"x":1}}}}))
            .await?;
        assert_eq!(reply["id"], 0);
        assert_eq!(reply["result"]["protocolVersion"], 1, "{reply}");
        assert!(reply["result"]["agentCapabilities"].is_object());
        assert_eq!(reply["result"]["authMethods"], json!([]));
    }
    for params in [
        json!({"protocolVersion":"1.0.0"}),
        json!({"clientCapabilities":{}}),
    ] {
        let reply = client
            .call(&json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":params}))
            .await?;
        assert_eq!(reply["error"]["code"], -32602, "{reply}");
        assert_eq!(reply["id"], 1);
    }
    client.probe().await
}

#[tokio::test]
async fn s02_ids_of_every_json_type_come_back_unchanged() -> TestResult {
    let mut client = started(Config::default()).await;
    for id in [
        "0",
        "-1",
        "9007199254740993",
        r#""abc""#,
        r#""""#,
        r#""1""#,
        "1",
        "null",
    ] {
        client
            .send(&format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"_test/ping"}}"#
            ))
            .await?;
        let line = client.recv_line().await?;
        assert!(
            line.contains(&format!(r#""id":{id},"#)),
            "{id} came back as {line}"
        );
        let reply: Value = serde_json::from_str(&line)?;
        assert_eq!(reply["error"]["code"], -32601);
    }
    // A fraction is refused, never rounded.
    client
        .send(r#"{"jsonrpc":"2.0","id":1.5,"method":"_test/ping"}"#)
        .await?;
    let reply = client.recv().await?;
    assert_eq!(reply["error"]["code"], -32600);
    assert_eq!(reply["id"], Value::Null);
    client.probe().await
}

#[tokio::test]
async fn s03_notifications_are_never_answered() -> TestResult {
    let mut client = started(Config::default()).await;
    for line in [
        r#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"nope"}}"#,
        r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":42}}"#,
        r#"{"jsonrpc":"2.0","method":"_vendor/x","params":{}}"#,
        r#"{"jsonrpc":"2.0","method":"unknown/thing"}"#,
        r#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":5}}"#,
    ] {
        client.send(line).await?;
    }
    // The probe's answer must be the very next line: nothing came before it.
    client.probe().await
}

#[tokio::test]
async fn s04_malformed_lines_are_refused_and_the_reader_goes_on() -> TestResult {
    let mut client = started(Config::default()).await;
    client.send(r#"{"jsonrpc":"2.0","id":1,INVALID}"#).await?;
    let reply = client.recv().await?;
    assert_eq!(
        (reply["id"].clone(), reply["error"]["code"].clone()),
        (Value::Null, json!(-32700))
    );
    for (line, id) in [
        ("17", Value::Null),
        (r#""str""#, Value::Null),
        (r#"{"foo":1}"#, Value::Null),
        (r#"{"jsonrpc":"1.0","id":2,"method":"x"}"#, json!(2)),
        (r#"{"jsonrpc":"2.0","id":3,"method":7}"#, json!(3)),
        ("[]", Value::Null),
    ] {
        client.send(line).await?;
        let reply = client.recv().await?;
        assert_eq!(reply["error"]["code"], -32600, "{line}: {reply}");
        assert_eq!(reply["id"], id, "{line}");
    }
    // Ignored: a response to nothing, a blank line.
    client
        .send(r#"{"jsonrpc":"2.0","id":99,"result":{}}"#)
        .await?;
    client.send("").await?;
    client.send("   ").await?;
    client.probe().await?;
    // CRLF endings are read; invalid UTF-8 is a parse error.
    client
        .send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":\"crlf\",\"method\":\"_test/ping\"}\r\n")
        .await?;
    assert_eq!(client.recv().await?["id"], "crlf");
    client
        .send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"\xff\xfe\"}\n")
        .await?;
    assert_eq!(client.recv().await?["error"]["code"], -32700);
    client.probe().await
}

#[tokio::test]
async fn s05_stdin_closed_mid_message_ends_cleanly_without_dispatch() -> TestResult {
    let (mut peer, mut client) = connect();
    client
        .send_raw(br#"{"jsonrpc":"2.0","id":5,"method":"session/pro"#)
        .await?;
    client.close();
    let next = tokio::time::timeout(std::time::Duration::from_secs(5), peer.recv_request()).await?;
    assert_eq!(next, None);
    let sent = peer.send_reply(json!(5), json!({})).await;
    assert!(matches!(sent, Err(ref e) if e.is_closed()), "{sent:?}");
    drop(peer);
    assert!(client.at_eof().await?, "a reply was written");
    Ok(())
}

#[tokio::test]
async fn s06_a_20_mib_prompt_is_read_and_a_10_mib_update_goes_out_as_one_line() -> TestResult {
    let mut client = started(Config::default()).await;
    let session = new_session(&mut client).await?;
    let text = "x".repeat(20 * 1024 * 1024);
    let request = json!({"jsonrpc":"2.0","id":6,"method":"session/prompt","params":{
        "sessionId":session,
        "prompt":[{"type":"resource","resource":{"uri":"file:///big","text":text}}]}});
    let update = client.call(&request).await?;
    assert_eq!(
        update["params"]["update"]["content"]["text"],
        format!("received {} bytes", 20 * 1024 * 1024)
    );
    assert_eq!(client.recv().await?["result"]["stopReason"], "end_turn");

    client.send_json(&prompt(7, &session, "big")).await?;
    let line = client.recv_line().await?;
    assert!(line.len() > 10 * 1024 * 1024 - 64);
    let update: Value = serde_json::from_str(&line)?;
    let body = update["params"]["update"]["content"][0]["content"]["text"]
        .as_str()
        .ok_or("no text")?;
    assert_eq!(
        body,
        "line one\nline two\u{2028}".repeat(10 * 1024 * 1024 / 18)
    );
    assert_eq!(client.recv().await?["id"], 7);
    client.probe().await
}

#[tokio::test]
async fn s07_concurrent_requests_are_answered_out_of_order_by_id() -> TestResult {
    let mut client = started(Config::default()).await;
    let session = new_session(&mut client).await?;
    client.send_json(&prompt(10, &session, "slow")).await?;
    client
        .send_json(
            &json!({"jsonrpc":"2.0","id":11,"method":"session/set_config_option",
            "params":{"sessionId":session,"configId":"model","value":"smart"}}),
        )
        .await?;
    client
        .send(r#"{"jsonrpc":"2.0","id":12,"method":"_acme/stats"}"#)
        .await?;
    let mut answered = Vec::new();
    while answered.len() < 2 {
        let line = client.recv().await?;
        if line.get("method").is_none() {
            answered.push(line["id"].clone());
        }
    }
    answered.sort_by_key(Value::to_string);
    assert_eq!(answered, [json!(11), json!(12)]);
    client
        .send_json(
            &json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":session}}),
        )
        .await?;
    loop {
        let line = client.recv().await?;
        if line["id"] == 10 {
            assert_eq!(line["result"]["stopReason"], "cancelled");
            break;
        }
    }
    // The same id twice in a row: both answered.
    for _ in 0..2 {
        client
            .send(r#"{"jsonrpc":"2.0","id":"dup","method":"_acme/x"}"#)
            .await?;
        assert_eq!(client.recv().await?["id"], "dup");
    }
    Ok(())
}

/// Reads until the reply to `id`, returning every line before it.
async fn until_reply(
    client: &mut Client,
    id: &Value,
) -> Result<(Vec<Value>, Value), super::support::TestError> {
    let mut before = Vec::new();
    loop {
        let line = client.recv().await?;
        if line.get("method").is_none() && &line["id"] == id {
            return Ok((before, line));
        }
        before.push(line);
    }
}

#[tokio::test]
async fn s08_a_cancelled_prompt_ends_cancelled_with_no_update_after_it() -> TestResult {
    let mut client = started(Config::default()).await;
    let session = new_session(&mut client).await?;
    client.send_json(&prompt(20, &session, "slow")).await?;
    assert_eq!(
        client.recv().await?["params"]["update"]["sessionUpdate"],
        "agent_message_chunk"
    );
    assert_eq!(
        client.recv().await?["params"]["update"]["sessionUpdate"],
        "tool_call"
    );
    client.send_json(&cancel(&session)).await?;
    let (before, reply) = until_reply(&mut client, &json!(20)).await?;
    assert!(before.iter().all(|l| l["method"] == "session/update"));
    assert_eq!(reply["result"]["stopReason"], "cancelled");
    assert!(reply.get("error").is_none());
    assert!(
        client.silent_for(200).await,
        "an update after the turn ended"
    );

    // Variant: the client answers an outstanding permission request with
    // `cancelled`.
    let ask = permission_asked(&mut client, 21, &session).await?;
    client.send_json(&cancel(&session)).await?;
    client
        .send_json(
            &json!({"jsonrpc":"2.0","id":ask["id"],"result":{"outcome":{"outcome":"cancelled"}}}),
        )
        .await?;
    let (_, reply) = until_reply(&mut client, &json!(21)).await?;
    assert_eq!(reply["result"]["stopReason"], "cancelled");

    // Variant: `$/cancel_request` still gets exactly one reply.
    client.send_json(&prompt(22, &session, "slow")).await?;
    client.recv().await?;
    client.recv().await?;
    client
        .send(r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":22}}"#)
        .await?;
    let (_, reply) = until_reply(&mut client, &json!(22)).await?;
    assert_eq!(reply["result"]["stopReason"], "cancelled");
    assert!(client.silent_for(200).await);
    Ok(())
}

#[tokio::test]
async fn s09_unknown_unstable_and_gated_methods_are_not_found() -> TestResult {
    let mut client = started(Config::default()).await;
    for (id, method, params) in [
        (
            3,
            "session/set_model",
            json!({"sessionId":"s","modelId":"m"}),
        ),
        (4, "_acme/foo", json!({})),
        (5, "session/fork", json!({"sessionId":"s"})),
        (
            6,
            "session/load",
            json!({"sessionId":"s","cwd":"/","mcpServers":[]}),
        ),
        (7, "session/load", json!({"bad":true})),
    ] {
        let reply = client
            .call(&json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}))
            .await?;
        assert_eq!(reply["id"], id);
        assert_eq!(reply["error"]["code"], -32601, "{method}: {reply}");
        assert_eq!(reply["error"]["message"], "Method not found");
    }
    Ok(())
}

#[tokio::test]
async fn s10_invalid_params_get_32602_with_the_request_id() -> TestResult {
    let mut client = started_with(|c| c.logout = true).await;
    let session = new_session(&mut client).await?;
    let bad = [
        json!({"jsonrpc":"2.0","id":"a","method":"session/new","params":{"cwd":"/tmp"}}),
        json!({"jsonrpc":"2.0","id":"b","method":"session/new","params":{"cwd":"rel/dir","mcpServers":[]}}),
        json!({"jsonrpc":"2.0","id":"c","method":"session/prompt","params":{"sessionId":session,"prompt":"hello"}}),
        json!({"jsonrpc":"2.0","id":"d","method":"session/prompt","params":5}),
        json!({"jsonrpc":"2.0","id":"e","method":"session/prompt"}),
        json!({"jsonrpc":"2.0","id":"f","method":"session/set_config_option",
            "params":{"sessionId":session,"configId":"model","value":"huge"}}),
    ];
    for request in bad {
        let reply = client.call(&request).await?;
        assert_eq!(reply["id"], request["id"]);
        assert_eq!(reply["error"]["code"], -32602, "{request}: {reply}");
    }
    let good = [
        json!({"jsonrpc":"2.0","id":"g","method":"session/new",
            "params":{"cwd":"/tmp","mcpServers":[],"extra":1,"_meta":{"k":{}}}}),
        json!({"jsonrpc":"2.0","id":"h","method":"session/prompt",
            "params":{"sessionId":session,"prompt":[{"type":"text","text":"hi","_meta":{}}],"_meta":{}}}),
        json!({"jsonrpc":"2.0","id":"i","method":"logout","params":{}}),
    ];
    for request in good {
        client.send_json(&request).await?;
        let (_, reply) = until_reply(&mut client, &request["id"]).await?;
        assert!(reply.get("result").is_some(), "{request}: {reply}");
    }
    Ok(())
}

#[tokio::test]
async fn s11_session_new_reads_mixed_mcp_transports_by_documented_rule() -> TestResult {
    let mut client = started(Config::default()).await;
    let stdio =
        json!({"name":"fs","command":"/bin/mcp","args":[],"env":[{"name":"K","value":"V"}]});
    let http = json!({"type":"http","name":"api","url":"http://127.0.0.1:9/mcp","headers":[]});
    let sse = json!({"type":"sse","name":"old","url":"http://127.0.0.1:9/sse","headers":[]});
    let acp = json!({"type":"acp","name":"x","id":"1"});
    let mut ids = Vec::new();
    for (n, servers) in [json!([stdio, http]), json!([]), json!([stdio])]
        .into_iter()
        .enumerate()
    {
        let reply = client
            .call(&json!({"jsonrpc":"2.0","id":n,"method":"session/new","params":{"cwd":"/w","mcpServers":servers}}))
            .await?;
        let id = reply["result"]["sessionId"]
            .as_str()
            .ok_or("no session")?
            .to_owned();
        assert!(!id.is_empty());
        ids.push(id);
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "session ids repeat");
    // Not advertised (sse) or unknown (acp): refused with -32602.
    for servers in [json!([stdio, http, sse]), json!([acp])] {
        let reply = client
            .call(&json!({"jsonrpc":"2.0","id":"x","method":"session/new","params":{"cwd":"/w","mcpServers":servers}}))
            .await?;
        assert_eq!(reply["error"]["code"], -32602, "{reply}");
    }
    // env as a map is not ACP: -32602, not a crash.
    let reply = client
        .call(
            &json!({"jsonrpc":"2.0","id":"m","method":"session/new","params":{"cwd":"/w",
            "mcpServers":[{"name":"fs","command":"/bin/mcp","args":[],"env":{"K":"V"}}]}}),
        )
        .await?;
    assert_eq!(reply["error"]["code"], -32602);
    client.probe().await
}

#[tokio::test]
async fn s12_a_full_turn_routes_the_permission_answer_to_the_agent() -> TestResult {
    let mut client = started(Config::default()).await;
    let session = new_session(&mut client).await?;
    let ask = permission_asked(&mut client, 30, &session).await?;
    assert!(ask["id"].is_i64(), "{ask}");
    assert_eq!(ask["params"]["sessionId"], session.as_str());
    client
        .send_json(&json!({"jsonrpc":"2.0","id":ask["id"],"result":{"outcome":{"outcome":"selected","optionId":"allow-once"}}}))
        .await?;
    let (before, reply) = until_reply(&mut client, &json!(30)).await?;
    let kinds: Vec<_> = before
        .iter()
        .map(|l| {
            (
                l["params"]["update"]["sessionUpdate"].clone(),
                l["params"]["update"]["status"].clone(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (json!("tool_call_update"), json!("in_progress")),
            (json!("tool_call_update"), json!("completed")),
            (json!("agent_message_chunk"), Value::Null),
        ]
    );
    assert_eq!(reply["result"]["stopReason"], "end_turn");
    Ok(())
}

#[tokio::test]
async fn s13_every_output_line_has_the_json_rpc_envelope_shape() -> TestResult {
    let (peer, mut client) = connect();
    peer.send_reply(json!(1), Value::Null).await?;
    assert_eq!(
        client.recv_line().await?,
        r#"{"jsonrpc":"2.0","id":1,"result":null}"#
    );
    peer.send_reply(json!("a"), json!({})).await?;
    assert_eq!(
        client.recv_line().await?,
        r#"{"jsonrpc":"2.0","id":"a","result":{}}"#
    );
    peer.send_error(Value::Null, -32000, "no").await?;
    assert_eq!(
        client.recv_line().await?,
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"no"}}"#
    );
    peer.send_notification("session/update", json!({"sessionId":"s","update":{}}))
        .await?;
    let line = client.recv_line().await?;
    assert_eq!(
        line,
        r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{}}}"#
    );
    // A string with newlines stays one line.
    peer.send_reply(json!(2), json!({"text":"a\nb\r\nc"}))
        .await?;
    let value = client.recv().await?;
    assert_eq!(value["result"]["text"], "a\nb\r\nc");
    // Ids no client could send are refused rather than written.
    assert!(peer.send_reply(json!({"x":1}), json!({})).await.is_err());
    assert!(client.silent_for(100).await);
    Ok(())
}

#[tokio::test]
async fn s14_sessions_wait_for_authentication() -> TestResult {
    let mut client = started_with(|c| c.auth = true).await;
    let init = client
        .call(&json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}))
        .await?;
    assert_eq!(
        init["result"]["authMethods"],
        json!([{"id":"key","name":"API key"}])
    );
    let new =
        json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/","mcpServers":[]}});
    assert_eq!(client.call(&new).await?["error"]["code"], -32000);
    let wrong = client
        .call(&json!({"jsonrpc":"2.0","id":2,"method":"authenticate","params":{"methodId":"nope"}}))
        .await?;
    assert_eq!(wrong["error"]["code"], -32602);
    let right = client
        .call(&json!({"jsonrpc":"2.0","id":3,"method":"authenticate","params":{"methodId":"key"}}))
        .await?;
    assert_eq!(right["result"], json!({}));
    assert!(client.call(&new).await?["result"]["sessionId"].is_string());
    let logout = client
        .call(&json!({"jsonrpc":"2.0","id":4,"method":"logout","params":{}}))
        .await?;
    assert_eq!(logout["error"]["code"], -32601);
    Ok(())
}

#[tokio::test]
async fn s15_session_load_replays_before_answering() -> TestResult {
    let mut client = started_with(|c| c.load_session = true).await;
    client
        .send_json(&json!({"jsonrpc":"2.0","id":40,"method":"session/load",
            "params":{"sessionId":"stored","cwd":"/w","mcpServers":[]}}))
        .await?;
    let (before, reply) = until_reply(&mut client, &json!(40)).await?;
    let kinds: Vec<_> = before
        .iter()
        .map(|l| l["params"]["update"]["sessionUpdate"].clone())
        .collect();
    assert_eq!(
        kinds,
        [
            json!("user_message_chunk"),
            json!("agent_message_chunk"),
            json!("user_message_chunk"),
            json!("agent_message_chunk")
        ]
    );
    assert!(reply.get("result").is_some());
    let unknown = client
        .call(&json!({"jsonrpc":"2.0","id":41,"method":"session/load",
            "params":{"sessionId":"missing","cwd":"/w","mcpServers":[]}}))
        .await?;
    assert_eq!(unknown["id"], 41, "an update came before the error");
    assert_eq!(unknown["error"]["code"], -32002);
    Ok(())
}
