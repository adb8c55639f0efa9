//! `droid acp` over in-memory pipes, with the fixture server reached over
//! loopback HTTP as the session's MCP server.

// `value["key"]` yields `null` for a missing member, which the assertions
// then catch; it cannot panic.
#![allow(clippy::indexing_slicing)]

use std::time::Duration;

use protocol_droid::adapters::primary::http::{HttpOptions, HttpServer};
use protocol_droid::application::observe::SharedObserver;
use protocol_droid::application::server::RateLimits;
use protocol_droid::domain::ProtocolVersion;
use protocol_droid_test_support::{LineClient, TestError};
use serde_json::{Value, json};
use tokio::io::DuplexStream;

use super::{AcpOptions, serve};

type TestResult = Result<(), TestError>;

/// The client's end of a running agent.
struct Client {
    lines: LineClient<DuplexStream, DuplexStream>,
    next_id: i64,
}

fn start(options: AcpOptions) -> Client {
    let (client_in, agent_in) = tokio::io::duplex(1 << 20);
    let (agent_out, client_out) = tokio::io::duplex(1 << 20);
    tokio::spawn(serve(agent_in, agent_out, options, std::future::pending()));
    Client {
        lines: LineClient::new(client_in, client_out),
        next_id: 0,
    }
}

/// An agent with the default options and a session whose one MCP server
/// is the fixture: the client and the session's id.
async fn fixture_session() -> Result<(Client, String), TestError> {
    let mut client = start(AcpOptions::default());
    let session = client.new_session(json!([fixture().await?])).await?;
    Ok((client, session))
}

/// The fixture server on an ephemeral loopback port, as an `http` entry.
async fn fixture() -> Result<Value, TestError> {
    let server = crate::fixture::server(
        &ProtocolVersion::ALL,
        crate::Setup {
            observer: SharedObserver::default(),
            limits: RateLimits::default(),
        },
    )?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/mcp", listener.local_addr()?);
    tokio::spawn(
        HttpServer::new(server, HttpOptions::default()).serve(listener, std::future::pending()),
    );
    Ok(json!({ "type": "http", "name": "fixture", "url": url, "headers": [] }))
}

impl Client {
    async fn send(&mut self, message: &Value) -> TestResult {
        self.lines.send_json(message).await
    }

    async fn recv(&mut self) -> Result<Value, TestError> {
        self.lines.recv_json().await
    }

    async fn request(&mut self, method: &str, params: Value) -> Result<i64, TestError> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await?;
        Ok(id)
    }

    /// Reads until the answer to `id`, returning it and the `update`s of
    /// the `session/update`s before it. A request from the agent fails the
    /// test: callers that expect one use [`Self::until`].
    async fn answer(&mut self, id: i64) -> Result<(Value, Vec<Value>), TestError> {
        let mut updates = Vec::new();
        loop {
            let message = self.recv().await?;
            if message["method"] == "session/update" {
                updates.push(message["params"]["update"].clone());
            } else if message["id"] == id && message.get("method").is_none() {
                return Ok((message, updates));
            } else {
                return Err(format!("unexpected before the answer: {message}").into());
            }
        }
    }

    /// Reads until a message `matches`, returning it and the updates before.
    async fn until(
        &mut self,
        matches: impl Fn(&Value) -> bool,
    ) -> Result<(Value, Vec<Value>), TestError> {
        let mut updates = Vec::new();
        loop {
            let message = self.recv().await?;
            if matches(&message) {
                return Ok((message, updates));
            }
            if message["method"] == "session/update" {
                updates.push(message["params"]["update"].clone());
            } else {
                return Err(format!("unexpected: {message}").into());
            }
        }
    }

    /// Answers the permission request `request` by selecting `option`.
    async fn select(&mut self, request: &Value, option: &str) -> TestResult {
        let outcome = json!({ "outcome": { "outcome": "selected", "optionId": option } });
        self.send(&json!({ "jsonrpc": "2.0", "id": request["id"], "result": outcome }))
            .await
    }

    async fn call(
        &mut self,
        method: &str,
        params: Value,
    ) -> Result<(Value, Vec<Value>), TestError> {
        let id = self.request(method, params).await?;
        self.answer(id).await
    }

    async fn new_session(&mut self, servers: Value) -> Result<String, TestError> {
        let (reply, _) = self
            .call("session/new", json!({ "cwd": "/", "mcpServers": servers }))
            .await?;
        let id = reply["result"]["sessionId"]
            .as_str()
            .ok_or_else(|| format!("no sessionId: {reply}"))?
            .to_owned();
        // The slash commands follow the answer, and any connection failures.
        let (update, _) = self
            .until(|m| m["params"]["update"]["sessionUpdate"] == "available_commands_update")
            .await?;
        assert_eq!(update["params"]["sessionId"], id.as_str());
        Ok(id)
    }

    async fn prompt(&mut self, session: &str, text: &str) -> Result<i64, TestError> {
        self.request(
            "session/prompt",
            json!({ "sessionId": session, "prompt": [{ "type": "text", "text": text }] }),
        )
        .await
    }

    /// Runs a turn that asks nothing of the client.
    async fn turn(&mut self, session: &str, text: &str) -> Result<(Value, Vec<Value>), TestError> {
        let id = self.prompt(session, text).await?;
        self.answer(id).await
    }
}

/// Every agent message's text, joined.
fn said(updates: &[Value]) -> String {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect::<Vec<_>>()
        .join("")
}

fn statuses(updates: &[Value]) -> Vec<String> {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call" || u["sessionUpdate"] == "tool_call_update")
        .filter_map(|u| u["status"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn initialize_answers_version_1_and_advertises_load_and_both_http_transports() -> TestResult {
    let mut client = start(AcpOptions::default());
    let (reply, _) = client
        .call(
            "initialize",
            json!({ "protocolVersion": 7, "clientCapabilities": {} }),
        )
        .await?;
    let result = &reply["result"];
    assert_eq!(result["protocolVersion"], 1, "{reply}");
    assert_eq!(result["agentCapabilities"]["loadSession"], true);
    assert_eq!(
        result["agentCapabilities"]["mcpCapabilities"],
        json!({ "http": true, "sse": true })
    );
    assert_eq!(result["authMethods"], json!([]));
    Ok(())
}

#[tokio::test]
async fn help_answers_in_the_turn_and_an_unknown_command_is_explained() -> TestResult {
    let mut client = start(AcpOptions::default());
    let session = client.new_session(json!([])).await?;
    let (reply, updates) = client.turn(&session, "help").await?;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert!(said(&updates).contains("call TOOL [JSON]"), "{updates:?}");
    let (reply, updates) = client.turn(&session, "/frobnicate now").await?;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert!(
        said(&updates).contains("Unknown command `frobnicate`"),
        "{updates:?}"
    );
    Ok(())
}

#[tokio::test]
async fn tools_are_listed_as_server_slash_tool_and_destructive_ones_are_marked() -> TestResult {
    let (mut client, session) = fixture_session().await?;
    let (_, updates) = client.turn(&session, "tools").await?;
    let text = said(&updates);
    assert!(text.contains("fixture/test_simple_text - "), "{text}");
    let delete = text
        .lines()
        .find(|line| line.starts_with("fixture/delete_note"))
        .unwrap_or_default();
    assert!(delete.ends_with("[asks first]"), "{text}");
    let sleep = text
        .lines()
        .find(|line| line.starts_with("fixture/sleep"))
        .unwrap_or_default();
    assert!(!sleep.contains("[asks first]"), "{text}");
    Ok(())
}

#[tokio::test]
async fn a_call_is_a_tool_call_from_pending_to_completed_carrying_the_result() -> TestResult {
    let (mut client, session) = fixture_session().await?;
    let (reply, updates) = client.turn(&session, "call test_simple_text").await?;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert_eq!(
        statuses(&updates),
        ["pending", "in_progress", "completed"],
        "{updates:?}"
    );
    let call = &updates[0];
    assert_eq!(call["sessionUpdate"], "tool_call");
    assert_eq!(call["title"], "fixture/test_simple_text");
    let done = updates
        .iter()
        .find(|u| u["status"] == "completed")
        .cloned()
        .unwrap_or_default();
    assert_eq!(done["toolCallId"], call["toolCallId"]);
    assert_eq!(
        done["content"],
        json!([{ "type": "content", "content": { "type": "text",
            "text": "This is a simple text response for testing." } }])
    );
    Ok(())
}

#[tokio::test]
async fn a_tool_reporting_an_error_ends_its_tool_call_failed() -> TestResult {
    let (mut client, session) = fixture_session().await?;
    let (_, updates) = client
        .turn(&session, "call fixture/test_error_handling")
        .await?;
    assert_eq!(statuses(&updates), ["pending", "in_progress", "failed"]);
    Ok(())
}

#[tokio::test]
async fn malformed_call_arguments_are_a_message_in_the_turn_and_the_session_goes_on() -> TestResult
{
    let (mut client, session) = fixture_session().await?;
    let (reply, updates) = client
        .turn(&session, r#"call test_simple_text {"a": "#)
        .await?;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert!(said(&updates).contains("not JSON"), "{updates:?}");
    assert!(statuses(&updates).is_empty(), "no tool call was made");
    let (_, updates) = client.turn(&session, "call nope/nothing").await?;
    assert!(
        said(&updates).contains("No tool `nope/nothing`"),
        "{updates:?}"
    );
    let (_, updates) = client.turn(&session, "call test_simple_text").await?;
    assert_eq!(statuses(&updates), ["pending", "in_progress", "completed"]);
    Ok(())
}

#[tokio::test]
async fn read_and_prompt_show_what_the_server_returns() -> TestResult {
    let (mut client, session) = fixture_session().await?;
    let (_, updates) = client.turn(&session, "read test://static-text").await?;
    assert!(
        said(&updates).contains("This is the content of the static text resource."),
        "{updates:?}"
    );
    let (_, updates) = client
        .turn(
            &session,
            r#"prompt test_prompt_with_arguments {"arg1": "first", "arg2": "second"}"#,
        )
        .await?;
    let text = said(&updates);
    assert!(text.starts_with("user: "), "{text}");
    assert!(text.contains("first") && text.contains("second"), "{text}");
    Ok(())
}

/// Starts `call delete_note` and returns the permission request.
async fn ask_to_delete(client: &mut Client, session: &str) -> Result<(i64, Value), TestError> {
    let prompt = client
        .prompt(session, r#"call delete_note {"id": "7"}"#)
        .await?;
    let (request, updates) = client
        .until(|m| m["method"] == "session/request_permission")
        .await?;
    assert_eq!(statuses(&updates), ["pending"], "asked before running");
    Ok((prompt, request))
}

/// "Allow for this session" holds for the server it was given for: after
/// `session/load` with the same entry it still holds; with another server
/// under the same name, that server's tool asks again.
#[tokio::test]
async fn a_grant_carries_over_a_load_only_to_the_same_server() -> TestResult {
    let (mut client, session) = fixture_session().await?;
    let first = fixture().await?;
    let (reply, _) = client
        .call(
            "session/load",
            json!({ "sessionId": session, "cwd": "/", "mcpServers": [first] }),
        )
        .await?;
    assert_eq!(reply["result"], json!({}), "{reply}");
    let (prompt, request) = ask_to_delete(&mut client, &session).await?;
    client.select(&request, "allow-always").await?;
    client.answer(prompt).await?;
    // The same entry again: allowed without asking.
    client
        .call(
            "session/load",
            json!({ "sessionId": session, "cwd": "/", "mcpServers": [first] }),
        )
        .await?;
    let (_, updates) = client
        .turn(&session, r#"call delete_note {"id": "8"}"#)
        .await?;
    assert_eq!(statuses(&updates), ["pending", "in_progress", "completed"]);
    // Another server named alike: asked again.
    client
        .call(
            "session/load",
            json!({ "sessionId": session, "cwd": "/", "mcpServers": [fixture().await?] }),
        )
        .await?;
    let (prompt, request) = ask_to_delete(&mut client, &session).await?;
    client.select(&request, "reject-once").await?;
    client.answer(prompt).await?;
    Ok(())
}

/// `SERVER/TOOL` splits at the first `/`: a server named with one is
/// refused, so that no two servers' tools share a name (nor a grant).
#[tokio::test]
async fn a_server_named_with_a_slash_is_refused() -> TestResult {
    let mut client = start(AcpOptions::default());
    let mut entry = fixture().await?;
    entry["name"] = json!("a/b");
    client.new_session(json!([entry])).await?;
    let (update, _) = client.until(|m| m["method"] == "session/update").await?;
    let text = update["params"]["update"]["content"]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("a/b: a server's name cannot hold `/`"),
        "{text}"
    );
    Ok(())
}

/// An empty name would make the tools `/TOOL`, and control characters or
/// direction marks would reach the user's terminal in every tool's title:
/// each refused, the name told with them escaped.
#[tokio::test]
async fn a_server_named_with_nothing_or_with_controls_is_refused() -> TestResult {
    for (name, said) in [
        ("", ": a server needs a name"),
        (
            "x\u{1b}[31m",
            "x\\u{1b}[31m: a server's name cannot hold control characters",
        ),
        (
            "evil\u{202e}txt",
            "cannot hold control characters or direction marks",
        ),
    ] {
        let mut client = start(AcpOptions::default());
        let mut entry = fixture().await?;
        entry["name"] = json!(name);
        client.new_session(json!([entry])).await?;
        let (update, _) = client.until(|m| m["method"] == "session/update").await?;
        let text = update["params"]["update"]["content"]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(text.contains(said), "{name:?}: {text}");
        assert!(!text.contains(['\u{1b}', '\u{202e}']), "{text:?}");
    }
    Ok(())
}

#[tokio::test]
async fn a_destructive_tool_runs_only_after_the_user_allows_it() -> TestResult {
    let (mut client, session) = fixture_session().await?;
    let (prompt, request) = ask_to_delete(&mut client, &session).await?;
    let params = &request["params"];
    assert_eq!(params["sessionId"], session.as_str());
    assert_eq!(params["toolCall"]["title"], "fixture/delete_note");
    let kinds: Vec<&str> = params["options"]
        .as_array()
        .map(|o| o.iter().filter_map(|o| o["kind"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        kinds.contains(&"allow_once") && kinds.contains(&"reject_once"),
        "{request}"
    );
    client.select(&request, "allow-once").await?;
    let (reply, updates) = client.answer(prompt).await?;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert_eq!(statuses(&updates), ["in_progress", "completed"]);
    assert!(
        updates
            .iter()
            .any(|u| u["content"][0]["content"]["text"] == "Deleted note 7."),
        "{updates:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_rejected_destructive_call_is_never_made_and_its_tool_call_fails() -> TestResult {
    let (mut client, session) = fixture_session().await?;
    let (prompt, request) = ask_to_delete(&mut client, &session).await?;
    client.select(&request, "reject-once").await?;
    let (reply, updates) = client.answer(prompt).await?;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert_eq!(
        statuses(&updates),
        ["failed"],
        "no in_progress: never called"
    );
    assert!(said(&updates).contains("was not called"), "{updates:?}");
    Ok(())
}

#[tokio::test]
async fn cancel_ends_a_running_call_as_cancelled_and_nothing_follows_the_reply() -> TestResult {
    let (mut client, session) = fixture_session().await?;
    let prompt = client
        .prompt(&session, r#"call sleep {"ms": 30000}"#)
        .await?;
    client
        .until(|m| m["params"]["update"]["status"] == "in_progress")
        .await?;
    client
        .send(&json!({ "jsonrpc": "2.0", "method": "session/cancel",
            "params": { "sessionId": session } }))
        .await?;
    let (reply, updates) = client.answer(prompt).await?;
    assert_eq!(reply["result"]["stopReason"], "cancelled", "{reply}");
    assert_eq!(statuses(&updates), ["failed"], "the open call is closed");
    assert!(
        client.lines.silent_for(500).await,
        "a line followed the reply"
    );
    // The session is free for the next turn, well before the sleep ends.
    let (reply, updates) = tokio::time::timeout(
        Duration::from_secs(10),
        client.turn(&session, r#"call sleep {"ms": 1}"#),
    )
    .await??;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert_eq!(statuses(&updates), ["pending", "in_progress", "completed"]);
    Ok(())
}

#[tokio::test]
async fn cancel_while_permission_is_pending_ends_the_turn_cancelled_without_calling() -> TestResult
{
    let (mut client, session) = fixture_session().await?;
    let (prompt, request) = ask_to_delete(&mut client, &session).await?;
    client
        .send(&json!({ "jsonrpc": "2.0", "method": "session/cancel",
            "params": { "sessionId": session } }))
        .await?;
    // What ACP asks of the client: the pending permission ends cancelled.
    client
        .send(&json!({ "jsonrpc": "2.0", "id": request["id"],
            "result": { "outcome": { "outcome": "cancelled" } } }))
        .await?;
    // The agent stops waiting at once and says so with `$/cancel_request`,
    // which may come before or after the client's own answer.
    let (mut message, mut updates) = client
        .until(|m| m["method"] == "$/cancel_request" || m["id"] == prompt)
        .await?;
    if message["method"] == "$/cancel_request" {
        assert_eq!(message["params"]["requestId"], request["id"]);
        let more;
        (message, more) = client.answer(prompt).await?;
        updates.extend(more);
    }
    assert_eq!(message["result"]["stopReason"], "cancelled", "{message}");
    assert_eq!(statuses(&updates), ["failed"], "{updates:?}");
    Ok(())
}

/// What a server chose (a tool's name, a description) is shown with what a
/// terminal or renderer would obey escaped: a tool named with an escape
/// sequence and a right-to-left override shows them as escapes, and lists
/// on one line.
#[tokio::test]
async fn a_servers_names_are_listed_with_their_controls_escaped() -> TestResult {
    let hostile = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/hostile.py");
    let mut client = start(AcpOptions::default());
    let session = client
        .new_session(json!([
            { "name": "hostile", "command": "python3", "args": [hostile, "--spoof-names"],
              "env": [] },
        ]))
        .await?;
    let (_, updates) = client.turn(&session, "tools").await?;
    let text = said(&updates);
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{202e}'),
        "{text:?}"
    );
    assert!(
        text.contains(r"hostile/ok\u{1b}]0;pwned\u{7}\u{1b}[2J\u{202e}evil - "),
        "{text}"
    );
    assert!(!text.contains('\u{2028}'), "{text:?}");
    Ok(())
}

/// A prompt block that is not a content block (no text, a text that is a
/// number, an unknown type, an image without its type of data) is refused
/// as invalid params, and not kept: `session/load` would replay it as an
/// update no client can read.
#[tokio::test]
async fn a_prompt_block_that_is_no_content_block_is_refused_and_not_replayed() -> TestResult {
    let (mut client, session) = fixture_session().await?;
    for block in [
        json!({ "type": "text" }),
        json!({ "type": "text", "text": 5 }),
        json!({ "type": "bogus" }),
        json!({ "type": "image", "data": "x" }),
        json!({ "type": "tool_use", "id": "t", "name": "n", "input": {} }),
    ] {
        let (reply, updates) = client
            .call(
                "session/prompt",
                json!({ "sessionId": session, "prompt": [{ "type": "text", "text": "help" }, block] }),
            )
            .await?;
        assert_eq!(reply["error"]["code"], -32602, "{block}: {reply}");
        assert!(updates.is_empty(), "{block}: {updates:?}");
    }
    let (reply, replayed) = client
        .call(
            "session/load",
            json!({ "sessionId": session, "cwd": "/", "mcpServers": [fixture().await?] }),
        )
        .await?;
    assert_eq!(reply["result"], json!({}), "{reply}");
    assert!(replayed.is_empty(), "{replayed:?}");
    Ok(())
}

#[tokio::test]
async fn load_replays_the_conversation_before_its_answer() -> TestResult {
    let (mut client, session) = fixture_session().await?;
    let (_, first) = client.turn(&session, "call test_simple_text").await?;
    let (reply, replayed) = client
        .call(
            "session/load",
            json!({ "sessionId": session, "cwd": "/", "mcpServers": [fixture().await?] }),
        )
        .await?;
    assert_eq!(reply["result"], json!({}), "{reply}");
    let prompt = json!({ "sessionUpdate": "user_message_chunk",
        "content": { "type": "text", "text": "call test_simple_text" } });
    let mut expected = vec![prompt];
    expected.extend(first);
    assert_eq!(replayed, expected);
    // The loaded session works over its new connection.
    let (_, updates) = client.turn(&session, "call test_simple_text").await?;
    assert_eq!(statuses(&updates), ["pending", "in_progress", "completed"]);
    Ok(())
}

#[tokio::test]
async fn an_unknown_session_is_an_error_with_no_updates() -> TestResult {
    let mut client = start(AcpOptions::default());
    let id = client.prompt("nope", "help").await?;
    let (reply, updates) = client.answer(id).await?;
    assert_eq!(reply["error"]["code"], -32002, "{reply}");
    assert!(updates.is_empty());
    let (reply, updates) = client
        .call(
            "session/load",
            json!({ "sessionId": "nope", "cwd": "/", "mcpServers": [] }),
        )
        .await?;
    assert_eq!(reply["error"]["code"], -32002, "{reply}");
    assert!(updates.is_empty());
    Ok(())
}

/// A call naming its server waits for no other server: one that never
/// answers `tools/list` is not even asked, and the call completes. Before,
/// every call waited for every server's listing, a silent one's until its
/// timeout, twice.
#[tokio::test]
async fn a_call_naming_its_server_asks_no_other_server_for_its_tools() -> TestResult {
    let hostile = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/hostile.py");
    let record = tempfile::NamedTempFile::new()?;
    let mut client = start(AcpOptions::default());
    let session = client
        .new_session(json!([
            fixture().await?,
            { "name": "silent", "command": "python3", "args": [hostile, "--silent-listing"],
              "env": [{ "name": "HOSTILE_RECORD", "value": record.path() }] },
        ]))
        .await?;
    let (reply, updates) = client
        .turn(&session, "call fixture/test_simple_text")
        .await?;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert_eq!(
        statuses(&updates),
        ["pending", "in_progress", "completed"],
        "{updates:?}"
    );
    let asked = std::fs::read_to_string(record.path())?;
    assert!(asked.is_empty(), "the silent server was asked: {asked}");
    // It was there to be asked.
    let (_, updates) = client.turn(&session, "servers").await?;
    assert!(said(&updates).contains("silent: connected"), "{updates:?}");
    Ok(())
}

#[tokio::test]
async fn a_server_that_does_not_connect_is_reported_and_the_session_still_opens() -> TestResult {
    let mut client = start(AcpOptions::default());
    let session = client
        .new_session(json!([
            { "name": "ghost", "command": "/nonexistent/mcp-server", "args": [], "env": [] },
            { "type": "acp", "name": "inline", "id": "x" },
        ]))
        .await?;
    let (update, _) = client.until(|m| m["method"] == "session/update").await?;
    let text = update["params"]["update"]["content"]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("ghost: could not start"), "{text}");
    assert!(
        text.contains("inline: `acp` servers are not supported"),
        "{text}"
    );
    let (_, updates) = client.turn(&session, "servers").await?;
    assert!(
        said(&updates).contains("ghost: not connected"),
        "{updates:?}"
    );
    Ok(())
}

#[tokio::test]
async fn sessions_are_bounded_and_close_frees_one() -> TestResult {
    let mut client = start(AcpOptions {
        max_sessions: 1,
        ..AcpOptions::default()
    });
    let first = client.new_session(json!([])).await?;
    let (reply, _) = client
        .call("session/new", json!({ "cwd": "/", "mcpServers": [] }))
        .await?;
    assert_eq!(reply["error"]["code"], -32603, "{reply}");
    let (reply, _) = client
        .call("session/close", json!({ "sessionId": first }))
        .await?;
    assert_eq!(reply["result"], json!({}), "{reply}");
    let second = client.new_session(json!([])).await?;
    assert_ne!(first, second);
    Ok(())
}

#[tokio::test]
async fn a_second_prompt_while_a_turn_runs_is_refused_and_the_first_goes_on() -> TestResult {
    let (mut client, session) = fixture_session().await?;
    let first = client.prompt(&session, r#"call sleep {"ms": 300}"#).await?;
    client
        .until(|m| m["params"]["update"]["status"] == "in_progress")
        .await?;
    let second = client.prompt(&session, "help").await?;
    let (reply, _) = client.until(|m| m["id"] == second).await?;
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    let (reply, _) = client.answer(first).await?;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    Ok(())
}

#[tokio::test]
async fn methods_this_agent_does_not_serve_are_not_found() -> TestResult {
    let mut client = start(AcpOptions::default());
    for method in ["session/set_mode", "session/list", "logout", "_acme/x"] {
        let (reply, _) = client.call(method, json!({})).await?;
        assert_eq!(reply["error"]["code"], -32601, "{method}: {reply}");
    }
    Ok(())
}
