//! `droid acp` run as an editor runs it, with `droid serve` started by the
//! agent as the session's stdio MCP server.

// `value["key"]` yields `null` for a missing member, which the assertions
// then catch; it cannot panic.
#![allow(clippy::indexing_slicing)]

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

mod support;

use support::{TestError, certificates, serve_https, spawn_droid};

const PATIENCE: Duration = Duration::from_secs(30);

/// A running `droid acp` and the lines it writes.
struct Agent {
    child: Child,
    /// `None` once closed.
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    next_id: i64,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _already_gone = self.child.kill();
        let _reaped = self.child.wait();
    }
}

impl Agent {
    fn start() -> Result<Self, TestError> {
        Self::start_with(&[])
    }

    /// `droid acp ARGS`.
    fn start_with(args: &[&str]) -> Result<Self, TestError> {
        let mut argv = vec!["acp"];
        argv.extend_from_slice(args);
        let mut child = spawn_droid(&argv, Stdio::piped(), Stdio::piped(), Stdio::inherit())?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Self {
            child,
            stdin: Some(stdin),
            lines,
            next_id: 0,
        })
    }

    fn send(&mut self, message: &Value) -> Result<(), TestError> {
        let stdin = self.stdin.as_mut().ok_or("stdin is closed")?;
        writeln!(stdin, "{message}")?;
        stdin.flush()?;
        Ok(())
    }

    fn request(&mut self, method: &str, params: &Value) -> Result<i64, TestError> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))?;
        Ok(id)
    }

    /// Reads until a message `matches`; returns it and the updates before.
    fn until(&self, matches: impl Fn(&Value) -> bool) -> Result<(Value, Vec<Value>), TestError> {
        let mut updates = Vec::new();
        loop {
            let line = self.lines.recv_timeout(PATIENCE)?;
            let message: Value = serde_json::from_str(&line)?;
            if matches(&message) {
                return Ok((message, updates));
            }
            if message["method"] == "session/update" {
                updates.push(message["params"]["update"].clone());
            }
        }
    }

    fn answer(&self, id: i64) -> Result<(Value, Vec<Value>), TestError> {
        self.until(|m| m["id"] == id && m.get("method").is_none())
    }

    /// `initialize`, answered at protocol version 1.
    fn initialize(&mut self) -> Result<(), TestError> {
        let id = self.request(
            "initialize",
            &json!({ "protocolVersion": 1, "clientCapabilities": {} }),
        )?;
        let (reply, _) = self.answer(id)?;
        assert_eq!(reply["result"]["protocolVersion"], 1, "{reply}");
        Ok(())
    }

    /// `session/new` with `server` as its one MCP server; the session's id.
    fn new_session(&mut self, server: &Value) -> Result<String, TestError> {
        let id = self.request(
            "session/new",
            &json!({ "cwd": "/", "mcpServers": [server] }),
        )?;
        let (reply, _) = self.answer(id)?;
        Ok(reply["result"]["sessionId"]
            .as_str()
            .ok_or("no sessionId")?
            .to_owned())
    }

    fn prompt(&mut self, session: &str, text: &str) -> Result<i64, TestError> {
        self.request(
            "session/prompt",
            &json!({ "sessionId": session, "prompt": [{ "type": "text", "text": text }] }),
        )
    }
}

/// A prompt holding a lone surrogate (half of an emoji, as
/// `JSON.stringify` writes it) is JSON: it is served with U+FFFD in the
/// surrogate's place and answered by its id, not refused as unreadable.
#[test]
fn a_prompt_holding_a_lone_surrogate_is_answered() -> Result<(), TestError> {
    let mut agent = Agent::start()?;
    agent.initialize()?;
    let session = agent.new_session(&droid_serve_entry())?;
    let prompt = json!({ "jsonrpc": "2.0", "id": "lone", "method": "session/prompt",
        "params": { "sessionId": session,
            "prompt": [{ "type": "text", "text": r#"call echo {"text": "a@b"}"# }] } });
    let line = prompt.to_string().replace('@', r"\ud800");
    let stdin = agent.stdin.as_mut().ok_or("stdin is closed")?;
    writeln!(stdin, "{line}")?;
    stdin.flush()?;
    let (reply, updates) = agent.until(|m| m["id"] == "lone")?;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    let completed = updates.iter().find(|u| u["status"] == "completed");
    let echoed = completed.map(|u| u["content"][0]["content"]["text"].clone());
    assert_eq!(echoed, Some(json!("a\u{fffd}b")), "{updates:?}");
    Ok(())
}

fn statuses(updates: &[Value]) -> Vec<&str> {
    updates
        .iter()
        .filter_map(|u| u["status"].as_str())
        .collect()
}

fn said(updates: &[Value]) -> String {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect()
}

/// The `mcpServers` entry that starts `droid serve` over stdio, quiet.
fn droid_serve_entry() -> Value {
    json!({ "name": "droid", "command": env!("CARGO_BIN_EXE_droid"),
        "args": ["serve"], "env": [{ "name": "DROID_LOG", "value": "error" }] })
}

#[test]
fn droid_acp_drives_droid_serve_over_stdio_through_a_whole_session() -> Result<(), TestError> {
    let mut agent = Agent::start()?;
    agent.initialize()?;
    let server = droid_serve_entry();
    let session = agent.new_session(&server)?;

    let id = agent.prompt(&session, "tools")?;
    let (_, updates) = agent.answer(id)?;
    assert!(said(&updates).contains("droid/delete_note"), "{updates:?}");

    let id = agent.prompt(&session, "call droid/test_simple_text")?;
    let (reply, updates) = agent.answer(id)?;
    assert_eq!(reply["result"]["stopReason"], "end_turn");
    assert_eq!(statuses(&updates), ["pending", "in_progress", "completed"]);

    // Permission: allowed for the session, so the second call asks nothing.
    let id = agent.prompt(&session, r#"call delete_note {"id": "1"}"#)?;
    let (ask, _) = agent.until(|m| m["method"] == "session/request_permission")?;
    agent.send(&json!({ "jsonrpc": "2.0", "id": ask["id"],
        "result": { "outcome": { "outcome": "selected", "optionId": "allow-always" } } }))?;
    let (_, updates) = agent.answer(id)?;
    assert_eq!(statuses(&updates), ["in_progress", "completed"]);
    let id = agent.prompt(&session, r#"call delete_note {"id": "2"}"#)?;
    let (_, updates) =
        agent.until(|m| m["id"] == id || m["method"] == "session/request_permission")?;
    assert_eq!(
        statuses(&updates),
        ["pending", "in_progress", "completed"],
        "asked again after allow_always"
    );

    // Cancel: the turn ends cancelled well before the tool would.
    let id = agent.prompt(&session, r#"call sleep {"ms": 20000}"#)?;
    agent.until(|m| m["params"]["update"]["status"] == "in_progress")?;
    agent.send(&json!({ "jsonrpc": "2.0", "method": "session/cancel",
        "params": { "sessionId": session } }))?;
    let (reply, updates) = agent.answer(id)?;
    assert_eq!(reply["result"]["stopReason"], "cancelled", "{reply}");
    assert_eq!(statuses(&updates), ["failed"]);
    assert!(
        agent
            .lines
            .recv_timeout(Duration::from_millis(500))
            .is_err(),
        "a line followed the cancelled turn's reply"
    );
    Ok(())
}

#[test]
fn a_bare_name_two_servers_have_is_ambiguous_and_a_qualified_one_is_not() -> Result<(), TestError> {
    let mut agent = Agent::start()?;
    agent.initialize()?;
    let server = |name: &str| {
        json!({ "name": name, "command": env!("CARGO_BIN_EXE_droid"), "args": ["serve"],
            "env": [{ "name": "DROID_LOG", "value": "error" }] })
    };
    let id = agent.request(
        "session/new",
        &json!({ "cwd": "/", "mcpServers": [server("one"), server("two")] }),
    )?;
    let (reply, _) = agent.answer(id)?;
    let session = reply["result"]["sessionId"]
        .as_str()
        .ok_or("no sessionId")?
        .to_owned();

    let id = agent.prompt(&session, "call test_simple_text")?;
    let (_, updates) = agent.answer(id)?;
    let words = said(&updates);
    assert!(
        words.contains("More than one server has `test_simple_text`")
            && words.contains("one/test_simple_text")
            && words.contains("two/test_simple_text"),
        "{words}"
    );
    let id = agent.prompt(&session, "call two/test_simple_text")?;
    let (_, updates) = agent.answer(id)?;
    assert_eq!(statuses(&updates), ["pending", "in_progress", "completed"]);

    let id = agent.prompt(&session, "prompt test_simple_prompt")?;
    let (_, updates) = agent.answer(id)?;
    let words = said(&updates);
    assert!(
        words.contains("More than one server has the prompt `test_simple_prompt`"),
        "{words}"
    );
    Ok(())
}

/// The ids of the replies read until the one to `last`, in order, and
/// whether a `session/update` came after any reply.
fn replies_until(agent: &Agent, last: i64) -> Result<(Vec<Value>, bool), TestError> {
    let mut replies = Vec::new();
    let mut update_after_reply = false;
    loop {
        let line = agent.lines.recv_timeout(PATIENCE)?;
        let message: Value = serde_json::from_str(&line)?;
        if message["method"] == "session/update" {
            update_after_reply |= !replies.is_empty();
        } else if message.get("method").is_none() {
            replies.push(message["id"].clone());
            if message["id"] == last {
                return Ok((replies, update_after_reply));
            }
        }
    }
}

#[test]
fn a_session_closed_mid_turn_is_answered_after_the_turn() -> Result<(), TestError> {
    let mut agent = Agent::start()?;
    agent.initialize()?;
    let server = droid_serve_entry();
    let session = agent.new_session(&server)?;
    let turn = agent.prompt(&session, r#"call sleep {"ms": 20000}"#)?;
    agent.until(|m| m["params"]["update"]["status"] == "in_progress")?;
    let close = agent.request("session/close", &json!({ "sessionId": session }))?;
    let (replies, update_after_reply) = replies_until(&agent, close)?;
    assert_eq!(replies, [json!(turn), json!(close)]);
    assert!(!update_after_reply, "an update followed a reply");
    Ok(())
}

#[test]
fn a_session_closed_while_it_loads_fails_the_load() -> Result<(), TestError> {
    let mut agent = Agent::start_with(&["--connect-timeout", "2"])?;
    agent.initialize()?;
    let server = droid_serve_entry();
    let session = agent.new_session(&server)?;
    // What session/new sends after its answer, read before the load.
    agent.until(|m| m["params"]["update"]["sessionUpdate"] == "available_commands_update")?;
    // A turn, so that the session has a history a load would replay.
    let turn = agent.prompt(&session, "tools")?;
    agent.answer(turn)?;
    // A server that never answers keeps the load connecting.
    let load = agent.request(
        "session/load",
        &json!({ "sessionId": session, "cwd": "/",
            "mcpServers": [{ "name": "mute", "command": "/bin/sleep", "args": ["100"], "env": [] }] }),
    )?;
    let close = agent.request("session/close", &json!({ "sessionId": session }))?;
    agent.answer(close)?;
    let (reply, updates) = agent.answer(load)?;
    assert_eq!(reply["error"]["code"], -32002, "{reply}");
    // Nothing about the closed session follows the close's answer: no
    // replayed history, no command list.
    assert!(updates.is_empty(), "{updates:?}");
    Ok(())
}

#[test]
fn an_unreadable_server_entry_is_reported_not_a_refused_session() -> Result<(), TestError> {
    let mut agent = Agent::start()?;
    agent.initialize()?;
    let good = droid_serve_entry();
    // No `args` and no `env`; a `type` that is no string.
    let broken = json!({ "name": "broken", "command": "/bin/true" });
    let id = agent.request(
        "session/new",
        &json!({ "cwd": "/", "mcpServers": [good, broken, { "type": 5 }] }),
    )?;
    let (reply, _) = agent.answer(id)?;
    let session = reply["result"]["sessionId"]
        .as_str()
        .ok_or(format!("refused: {reply}"))?
        .to_owned();
    let id = agent.prompt(&session, "servers")?;
    let (_, updates) = agent.answer(id)?;
    let words = said(&updates);
    assert!(
        words.contains("broken") && words.contains("could not be read"),
        "{words}"
    );
    let id = agent.prompt(&session, "call droid/test_simple_text")?;
    let (_, updates) = agent.answer(id)?;
    assert_eq!(statuses(&updates), ["pending", "in_progress", "completed"]);
    Ok(())
}

#[test]
fn droid_acp_exits_when_its_client_closes_stdin() -> Result<(), TestError> {
    let mut agent = Agent::start()?;
    let server = json!({ "name": "droid", "command": env!("CARGO_BIN_EXE_droid"),
        "args": ["serve"], "env": [] });
    let id = agent.request(
        "session/new",
        &json!({ "cwd": "/", "mcpServers": [server] }),
    )?;
    agent.answer(id)?;
    // Closing stdin is how an ACP client ends the agent; it must then close
    // its servers and exit by itself.
    agent.stdin = None;
    let deadline = std::time::Instant::now() + PATIENCE;
    while std::time::Instant::now() < deadline {
        if let Some(status) = agent.child.try_wait()? {
            assert!(status.success(), "{status}");
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err("droid acp did not exit after its stdin closed".into())
}

/// SIGTERM ends the agent as its client closing stdin does: its sessions'
/// servers are stopped, not left running once it is gone. The server here
/// leaves a helper behind in its process group when its stdin ends, as a
/// server that ignores end of input would stay itself.
#[test]
fn sigterm_stops_the_sessions_servers_too() -> Result<(), TestError> {
    use protocol_droid_test_support::running;
    let lingering = ["sleep", "617.3"];
    let script = format!("sleep 617.3 & exec {} serve", env!("CARGO_BIN_EXE_droid"));
    let mut agent = Agent::start()?;
    let server = json!({ "name": "lingering", "command": "sh", "args": ["-c", script], "env": [] });
    let id = agent.request(
        "session/new",
        &json!({ "cwd": "/", "mcpServers": [server] }),
    )?;
    let (reply, _) = agent.answer(id)?;
    assert!(reply["result"]["sessionId"].is_string(), "{reply}");
    let deadline = std::time::Instant::now() + PATIENCE;
    while !running(&lingering) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(running(&lingering), "the helper never started");
    let signalled = std::process::Command::new("kill")
        .args(["-TERM", &agent.child.id().to_string()])
        .status()?;
    assert!(signalled.success());
    let deadline = std::time::Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = agent.child.try_wait()? {
            break status;
        }
        if std::time::Instant::now() > deadline {
            return Err("droid acp did not exit after SIGTERM".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    // The server's group is stopped before the agent exits; a moment is
    // allowed for the helper to be reaped.
    while running(&lingering) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !running(&lingering),
        "the session's server outlived the agent"
    );
    Ok(())
}

/// A session's HTTPS server is checked against `--ca-file`: reached with it,
/// refused without it, and the refusal says why.
#[test]
fn droid_acp_reaches_an_https_server_through_the_ca_file() -> Result<(), TestError> {
    let files = certificates()?;
    let (_server, address) = serve_https(&files)?;
    let server = json!({ "type": "http", "name": "secure",
        "url": format!("https://{address}/mcp"), "headers": [] });
    let tools = |args: &[&str]| -> Result<String, TestError> {
        let mut agent = Agent::start_with(args)?;
        agent.initialize()?;
        let session = agent.new_session(&server)?;
        let id = agent.prompt(&session, "tools")?;
        let (_, updates) = agent.answer(id)?;
        Ok(said(&updates))
    };
    let ca = files.path("ca.pem");
    let trusted = tools(&["--ca-file", &ca])?;
    assert!(trusted.contains("secure/test_simple_text"), "{trusted}");
    let untrusted = tools(&[])?;
    assert!(
        !untrusted.contains("secure/test_simple_text"),
        "{untrusted}"
    );
    assert!(untrusted.contains("unknown issuer"), "{untrusted}");
    Ok(())
}
