//! What the peer guarantees by itself, without an application's help.

use std::time::Duration;

use protocol_droid::adapters::primary::acp::{
    AcpAgentPeer, AcpPeerError, AcpPeerOptions, ConfigValue, Inbound, InboundRequest,
    NotificationParams, PermissionOutcome, ReadTextFileResult, RequestParams,
};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::support::{Client, TestError, TestResult, connect, connect_with};

async fn next(peer: &mut AcpAgentPeer) -> Result<Inbound, TestError> {
    tokio::time::timeout(Duration::from_secs(20), peer.recv_request())
        .await?
        .ok_or_else(|| "the peer closed".into())
}

async fn next_request(peer: &mut AcpAgentPeer) -> Result<InboundRequest, TestError> {
    match next(peer).await? {
        Inbound::Request(request) => Ok(*request),
        Inbound::Notification(n) => Err(format!("a notification: {n:?}").into()),
    }
}

async fn initialize(peer: &mut AcpAgentPeer, client: &mut Client, caps: Value) -> TestResult {
    client
        .send_json(&json!({"jsonrpc":"2.0","id":0,"method":"initialize",
            "params":{"protocolVersion":1,"clientCapabilities":caps}}))
        .await?;
    let request = next_request(peer).await?;
    peer.send_reply(request.id, json!({"protocolVersion":1}))
        .await?;
    client.recv().await?;
    Ok(())
}

/// Has the peer ask the client, from a task of its own, to read `path`: the
/// task, and the `fs/read_text_file` request the client receives.
async fn read_asked(
    peer: &AcpAgentPeer,
    client: &mut Client,
    path: &str,
) -> Result<(JoinHandle<Result<ReadTextFileResult, AcpPeerError>>, Value), TestError> {
    let sender = peer.sender();
    let params = json!({"sessionId":"s","path":path});
    let reading = tokio::spawn(async move { sender.read_text_file(params).await });
    let ask = client.recv().await?;
    assert_eq!(ask["method"], "fs/read_text_file");
    Ok((reading, ask))
}

#[tokio::test]
async fn an_oversized_line_is_refused_and_the_next_line_is_served() -> TestResult {
    let options = AcpPeerOptions {
        max_line: 1024,
        ..AcpPeerOptions::default()
    };
    let (mut peer, mut client) = connect_with(options, 64 * 1024);
    let long = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"_x","params":{{"p":"{}"}}}}"#,
        "y".repeat(4000)
    );
    client.send(&long).await?;
    client
        .send(r#"{"jsonrpc":"2.0","id":2,"method":"_x"}"#)
        .await?;
    let refusal = client.recv().await?;
    assert_eq!(refusal["error"]["code"], -32600);
    // Refused under its own id, so the client stops waiting for it.
    assert_eq!(refusal["id"], json!(1));
    let request = next_request(&mut peer).await?;
    assert_eq!(request.id, json!(2), "the oversized line was delivered");
    Ok(())
}

#[test]
fn the_default_line_limit_is_64_mib() {
    assert_eq!(AcpPeerOptions::default().max_line, 64 * 1024 * 1024);
}

#[tokio::test]
async fn a_message_nested_too_deep_is_refused() -> TestResult {
    let (mut peer, mut client) = connect();
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"_x","params":{{"a":{}1{}}}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    client.send(&deep).await?;
    let refusal = client.recv().await?;
    assert_eq!(refusal["error"]["code"], -32600);
    // Under its own id, so the client stops waiting for it.
    assert_eq!(refusal["id"], json!(1));
    client
        .send(r#"{"jsonrpc":"2.0","id":2,"method":"_x"}"#)
        .await?;
    assert_eq!(next_request(&mut peer).await?.id, json!(2));
    Ok(())
}

#[tokio::test]
async fn an_answer_too_long_or_too_deep_fails_the_request_at_once() -> TestResult {
    let too_long = |id: &Value| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":"{}"}}}}"#,
            "y".repeat(4000)
        )
    };
    let too_deep = |id: &Value| {
        format!(
            r#"{{"jsonrpc":"2.0","result":{{"content":"",">":{}1{}}},"id":{id}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        )
    };
    let cases: [&dyn Fn(&Value) -> String; 2] = [&too_long, &too_deep];
    for unreadable in cases {
        let options = AcpPeerOptions {
            max_line: 1024,
            ..AcpPeerOptions::default()
        };
        let (mut peer, mut client) = connect_with(options, 64 * 1024);
        initialize(&mut peer, &mut client, json!({"fs":{"readTextFile":true}})).await?;
        let (reading, ask) = read_asked(&peer, &mut client, "/big").await?;
        client.send(&unreadable(&ask["id"])).await?;
        // The client is told its line could not be read, as before...
        let refusal = client.recv().await?;
        assert_eq!(refusal["error"]["code"], -32600);
        // ...and the agent's request fails now, not after its ten minutes.
        let outcome = tokio::time::timeout(Duration::from_secs(20), reading).await??;
        assert!(
            matches!(&outcome, Err(AcpPeerError::Rejected { error, .. })
                if error.message.contains("could not be read")),
            "{outcome:?}"
        );
    }
    Ok(())
}

/// A request under the id of one still being answered is refused, since
/// the client could not tell the two answers apart; once the first is
/// answered, the id may be used again.
#[tokio::test]
async fn a_request_reusing_an_id_in_flight_is_refused() -> TestResult {
    let (mut peer, mut client) = connect();
    client
        .send(r#"{"jsonrpc":"2.0","id":"same","method":"_x/a"}"#)
        .await?;
    client
        .send(r#"{"jsonrpc":"2.0","id":"same","method":"_x/b"}"#)
        .await?;
    client
        .send(r#"{"jsonrpc":"2.0","id":"other","method":"_x/c"}"#)
        .await?;
    let first = next_request(&mut peer).await?;
    assert_eq!(first.method, "_x/a");
    // The second is passed over, refused, while the first is unanswered.
    let third = next_request(&mut peer).await?;
    assert_eq!(third.method, "_x/c");
    let refusal = client.recv().await?;
    assert_eq!(refusal["id"], json!("same"), "{refusal}");
    assert_eq!(refusal["error"]["code"], -32600, "{refusal}");
    peer.send_reply(first.id, json!({})).await?;
    let answer = client.recv().await?;
    assert_eq!(answer["result"], json!({}), "{answer}");
    client
        .send(r#"{"jsonrpc":"2.0","id":"same","method":"_x/d"}"#)
        .await?;
    let again = next_request(&mut peer).await?;
    assert_eq!(again.method, "_x/d");
    Ok(())
}

#[tokio::test]
async fn a_null_id_is_a_request_and_a_missing_id_a_notification() -> TestResult {
    let (mut peer, mut client) = connect();
    client
        .send(r#"{"jsonrpc":"2.0","id":null,"method":"_x/y","params":{"a":1}}"#)
        .await?;
    client
        .send(r#"{"jsonrpc":"2.0","method":"_x/y","params":{"a":1}}"#)
        .await?;
    let request = next_request(&mut peer).await?;
    assert_eq!(request.id, Value::Null);
    assert_eq!(
        request.params,
        Ok(RequestParams::Extension(Some(json!({"a":1}))))
    );
    let Inbound::Notification(note) = next(&mut peer).await? else {
        return Err("the id-less message was delivered as a request".into());
    };
    assert_eq!(
        note.params,
        Ok(NotificationParams::Extension(Some(json!({"a":1}))))
    );
    Ok(())
}

#[tokio::test]
async fn known_methods_arrive_typed_with_unknown_fields_kept() -> TestResult {
    let (mut peer, mut client) = connect();
    client
        .send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true},"terminal":"yes"},"clientInfo":{"name":"zed","version":"1"},"_meta":{"t":1}}}"#)
        .await?;
    let Ok(RequestParams::Initialize(init)) = next_request(&mut peer).await?.params else {
        return Err("initialize not typed".into());
    };
    assert!(init.client_capabilities.read_text_file);
    assert!(!init.client_capabilities.write_text_file);
    // A capability of the wrong type counts as absent rather than failing.
    assert!(!init.client_capabilities.terminal);
    assert_eq!(init.client_info.map(|i| i.name), Some("zed".to_owned()));
    assert_eq!(init.extra.get("_meta"), Some(&json!({"t":1})));
    client
        .send(r#"{"jsonrpc":"2.0","id":2,"method":"session/set_config_option","params":{"sessionId":"s","configId":"c","type":"boolean","value":true}}"#)
        .await?;
    let Ok(RequestParams::SetConfigOption(set)) = next_request(&mut peer).await?.params else {
        return Err("set_config_option not typed".into());
    };
    assert_eq!(set.value, ConfigValue::Boolean(true));
    client
        .send(r#"{"jsonrpc":"2.0","id":3,"method":"session/fork","params":{}}"#)
        .await?;
    assert_eq!(
        next_request(&mut peer).await?.params,
        Ok(RequestParams::Unknown(Some(json!({}))))
    );
    Ok(())
}

#[tokio::test]
async fn stdin_closing_flushes_queued_replies_and_refuses_later_sends() -> TestResult {
    // A pipe too small for the reply, so it is still queued when stdin ends.
    let (mut peer, mut client) = connect_with(AcpPeerOptions::default(), 64);
    let sender = peer.sender();
    let queued = tokio::spawn(async move {
        sender
            .send_reply(json!(1), json!({"pad":"z".repeat(4096)}))
            .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    client.close();
    assert!(
        tokio::time::timeout(Duration::from_secs(5), peer.recv_request())
            .await?
            .is_none()
    );
    let reply = client.recv().await?;
    assert_eq!(reply["id"], 1);
    assert!(queued.await?.is_ok());
    assert!(matches!(
        peer.send_notification("session/update", json!({})).await,
        Err(AcpPeerError::Closed)
    ));
    assert!(peer.is_closed());
    Ok(())
}

#[tokio::test]
async fn a_closed_stdout_fails_the_send_without_panicking() -> TestResult {
    // The client's stdin stays open; only the end it reads from goes.
    let (_stdin, agent_in) = tokio::io::duplex(1024 * 1024);
    let (agent_out, stdout) = tokio::io::duplex(1024 * 1024);
    let peer = AcpAgentPeer::with_options(agent_in, agent_out, AcpPeerOptions::default());
    drop(stdout);
    let sent = peer.send_reply(json!(1), json!({})).await;
    assert!(matches!(sent, Err(AcpPeerError::Write(_))), "{sent:?}");
    let again = peer.send_reply(json!(2), json!({})).await;
    assert!(matches!(again, Err(AcpPeerError::Closed)), "{again:?}");
    Ok(())
}

#[tokio::test]
async fn dropping_the_peer_closes_both_pipes_promptly() -> TestResult {
    let (peer, mut client) = connect();
    let sender = peer.sender();
    assert!(format!("{peer:?}").contains("AcpAgentPeer"));
    drop(peer);
    assert!(client.at_eof().await?);
    // The reader's end is gone too: writes to stdin fail.
    let mut failed = false;
    for _ in 0..100 {
        if client.send("{}").await.is_err() {
            failed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(failed, "stdin still open after the peer was dropped");
    assert!(matches!(
        sender.send_reply(json!(1), json!({})).await,
        Err(AcpPeerError::Closed)
    ));
    Ok(())
}

#[tokio::test]
async fn a_response_reaches_its_caller_even_when_the_client_reuses_the_number() -> TestResult {
    let (mut peer, mut client) = connect();
    let sender = peer.sender();
    let asking = tokio::spawn(async move {
        sender
            .request_permission(json!({"sessionId":"s","toolCall":{"toolCallId":"t"},"options":[]}))
            .await
    });
    let ask = client.recv().await?;
    assert_eq!(ask["method"], "session/request_permission");
    // The client's own request with the same id is a request, not an answer.
    client
        .send_json(&json!({"jsonrpc":"2.0","id":ask["id"],"method":"_client/thing"}))
        .await?;
    let request = next_request(&mut peer).await?;
    assert_eq!(request.id, ask["id"]);
    // An answer with the id as a string is not the answer.
    client
        .send_json(&json!({"jsonrpc":"2.0","id":ask["id"].to_string(),"result":{"outcome":{"outcome":"cancelled"}}}))
        .await?;
    client
        .send_json(&json!({"jsonrpc":"2.0","id":ask["id"],"result":{"outcome":{"outcome":"selected","optionId":"ok"}}}))
        .await?;
    let outcome = asking.await??;
    assert_eq!(
        outcome,
        PermissionOutcome::Selected {
            option_id: "ok".to_owned()
        }
    );
    // Nothing of the answer surfaced as a request.
    assert!(
        tokio::time::timeout(Duration::from_millis(100), peer.recv_request())
            .await
            .is_err()
    );
    Ok(())
}

#[tokio::test]
async fn a_client_error_reaches_the_caller() -> TestResult {
    let (mut peer, mut client) = connect();
    initialize(&mut peer, &mut client, json!({"fs":{"readTextFile":true}})).await?;
    let (reading, ask) = read_asked(&peer, &mut client, "/nope").await?;
    client
        .send_json(&json!({"jsonrpc":"2.0","id":ask["id"],"error":{"code":-32002,"message":"Resource not found"}}))
        .await?;
    let outcome = reading.await?;
    assert!(
        matches!(&outcome, Err(AcpPeerError::Rejected { error, .. }) if error.code == -32002),
        "{outcome:?}"
    );
    Ok(())
}

#[tokio::test]
async fn an_unanswered_request_times_out_and_the_client_is_told() -> TestResult {
    let (peer, mut client) = connect();
    let sender = peer.sender();
    let asking = tokio::spawn(async move {
        sender
            .send_request_within("_x/slow", json!({}), Duration::from_millis(100))
            .await
    });
    let ask = client.recv().await?;
    let outcome = asking.await?;
    assert!(
        matches!(outcome, Err(AcpPeerError::TimedOut { .. })),
        "{outcome:?}"
    );
    let cancel = client.recv().await?;
    assert_eq!(cancel["method"], "$/cancel_request");
    assert_eq!(cancel["params"]["requestId"], ask["id"]);
    // A late answer is ignored, and the peer still serves.
    client
        .send_json(&json!({"jsonrpc":"2.0","id":ask["id"],"result":{}}))
        .await?;
    peer.send_reply(json!("after"), json!({})).await?;
    assert_eq!(client.recv().await?["id"], "after");
    Ok(())
}

#[tokio::test]
async fn dropping_the_wait_cancels_the_request() -> TestResult {
    let (peer, mut client) = connect();
    let sender = peer.sender();
    let asking = tokio::spawn(async move { sender.send_request("_x/slow", json!({})).await });
    let ask = client.recv().await?;
    asking.abort();
    let cancel = client.recv().await?;
    assert_eq!(cancel["method"], "$/cancel_request");
    assert_eq!(cancel["params"]["requestId"], ask["id"]);
    assert!(
        format!("{peer:?}").contains("outstanding_requests: 0"),
        "{peer:?}"
    );
    Ok(())
}

#[tokio::test]
async fn waiting_requests_fail_when_stdin_closes() -> TestResult {
    let (peer, mut client) = connect();
    let sender = peer.sender();
    let asking = tokio::spawn(async move { sender.send_request("_x/slow", json!({})).await });
    client.recv().await?;
    client.close();
    let outcome = tokio::time::timeout(Duration::from_secs(5), asking).await??;
    assert!(matches!(outcome, Err(AcpPeerError::Closed)), "{outcome:?}");
    Ok(())
}

#[tokio::test]
async fn fs_and_terminal_calls_need_the_advertised_capability() -> TestResult {
    let (mut peer, mut client) = connect();
    // Before initialize nothing is advertised.
    let early = peer
        .read_text_file(json!({"sessionId":"s","path":"/a"}))
        .await;
    assert!(
        matches!(early, Err(AcpPeerError::NotAdvertised { .. })),
        "{early:?}"
    );
    initialize(
        &mut peer,
        &mut client,
        json!({"fs":{"readTextFile":true,"writeTextFile":false}}),
    )
    .await?;
    let write = peer
        .write_text_file(json!({"sessionId":"s","path":"/a","content":""}))
        .await;
    assert!(matches!(
        write,
        Err(AcpPeerError::NotAdvertised {
            capability: "fs.writeTextFile",
            ..
        })
    ));
    let term = peer
        .create_terminal(json!({"sessionId":"s","command":"ls"}))
        .await;
    assert!(matches!(
        term,
        Err(AcpPeerError::NotAdvertised {
            capability: "terminal",
            ..
        })
    ));
    assert!(client.silent_for(100).await, "a gated request went out");
    // The advertised one goes out.
    let (reading, ask) = read_asked(&peer, &mut client, "/a").await?;
    client
        .send_json(&json!({"jsonrpc":"2.0","id":ask["id"],"result":{"content":"hi"}}))
        .await?;
    assert_eq!(reading.await??.content, "hi");
    Ok(())
}

#[tokio::test]
async fn terminal_calls_round_trip_once_advertised() -> TestResult {
    let (mut peer, mut client) = connect();
    initialize(&mut peer, &mut client, json!({"terminal":true})).await?;
    let sender = peer.sender();
    let running = tokio::spawn(async move {
        let created = sender
            .create_terminal(json!({"sessionId":"s","command":"ls"}))
            .await?;
        let params = json!({"sessionId":"s","terminalId":created.terminal_id});
        let output = sender.terminal_output(&params).await?;
        let exit = sender
            .wait_for_terminal_exit(&params, Duration::from_secs(5))
            .await?;
        sender.kill_terminal(&params).await?;
        sender.release_terminal(&params).await?;
        Ok::<_, AcpPeerError>((output.output, exit.exit_code))
    });
    for (method, result) in [
        ("terminal/create", json!({"terminalId":"T"})),
        (
            "terminal/output",
            json!({"output":"ok\n","truncated":false}),
        ),
        (
            "terminal/wait_for_exit",
            json!({"exitCode":0,"signal":null}),
        ),
        ("terminal/kill", json!({})),
        ("terminal/release", json!({})),
    ] {
        let ask = client.recv().await?;
        assert_eq!(ask["method"], method);
        client
            .send_json(&json!({"jsonrpc":"2.0","id":ask["id"],"result":result}))
            .await?;
    }
    assert_eq!(running.await??, ("ok\n".to_owned(), Some(0)));
    Ok(())
}

#[tokio::test]
async fn a_request_read_before_stdin_closed_is_still_answered() -> TestResult {
    let (mut peer, mut client) = connect();
    client
        .send(r#"{"jsonrpc":"2.0","id":7,"method":"_x/last","params":{}}"#)
        .await?;
    client.close();
    let request = tokio::time::timeout(Duration::from_secs(5), peer.recv_request()).await?;
    assert!(request.is_some(), "the complete request was lost");
    // The client half-closed but still reads: the answer goes out.
    assert!(peer.send_reply(json!(7), json!({})).await.is_ok());
    assert_eq!(client.recv().await?["id"], 7);
    // Once the end has been handed over, sends are refused.
    assert!(
        tokio::time::timeout(Duration::from_secs(5), peer.recv_request())
            .await?
            .is_none()
    );
    assert!(matches!(
        peer.send_reply(json!(8), json!({})).await,
        Err(AcpPeerError::Closed)
    ));
    Ok(())
}
