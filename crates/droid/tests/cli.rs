//! The command line, run as a user runs it.

// Indexing a `serde_json::Value` yields `Null` for a missing member and never
// panics, which is what reading replies wants.
#![allow(clippy::indexing_slicing)]

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

mod support;

use support::{
    Running, TestError, droid_command, listening, raw_get, raw_post, session_id, spawn_droid,
};

fn droid(args: &[&str]) -> Result<Output, TestError> {
    Ok(droid_command().args(args).output()?)
}

/// Runs `droid ARGS`, which must fail to start (`why` says what it would
/// mean if it did not); what it wrote to stderr.
fn refused(args: &[&str], why: &str) -> Result<String, TestError> {
    let out = droid(args)?;
    assert!(!out.status.success(), "{why}");
    Ok(String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Runs `droid ARGS`, which must succeed; what it wrote to stdout.
fn succeeded(args: &[&str]) -> Result<String, TestError> {
    let out = droid(args)?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(stdout)
}

/// A command line's words, as a user types them.
fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// What `out` wrote to stdout, then to stderr.
fn output_text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A path no other test of this process uses, `droid-STEM-PID-N.EXTENSION`,
/// in the folder cargo gives integration tests (under `target/`), so the
/// files a running `droid` must find stay out of the machine's temp folder.
fn temp_path(stem: &str, extension: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "droid-{stem}-{}-{n}.{extension}",
        std::process::id()
    ))
}

/// Writes a gateway configuration in `mode` with `droid serve` as its one
/// upstream, `fixture`, whose tools are trusted as `trust` says; its path.
/// Its state is kept beside it, named in the file: a gateway started by
/// `droid call` is given no `XDG_STATE_HOME`, and would keep it in the
/// user's home.
fn fixture_gateway(stem: &str, mode: &str, trust: &str) -> Result<PathBuf, TestError> {
    let config = temp_path(stem, "toml");
    std::fs::write(
        &config,
        format!(
            "mode = \"{mode}\"\nstate = {:?}\n[[upstream]]\nname = \"fixture\"\n\
             command = [{:?}, \"serve\"]\ntrust = \"{trust}\"\n",
            config.with_extension("state.json"),
            env!("CARGO_BIN_EXE_droid")
        ),
    )?;
    Ok(config)
}

/// `droid gateway --config CONFIG` listening on loopback, the configuration
/// removed once it has been read; the gateway and its address.
fn listening_gateway(config: &std::path::Path) -> Result<(Running, String), TestError> {
    let listened = listening(
        &[
            "gateway",
            "--config",
            &config.to_string_lossy(),
            "--listen",
            "127.0.0.1:0",
        ],
        "http",
    );
    let _removed = std::fs::remove_file(config);
    listened
}

/// An `initialize` line at `version`, with id 1.
fn initialize(version: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"{version}","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
    )
}

/// `messages`, one a line, as a client writes them to a stdio server.
fn lines(messages: &[&str]) -> String {
    messages.iter().map(|m| format!("{m}\n")).collect()
}

/// The lines a stdio server wrote, each read as JSON, and the whole text.
fn replies(out: &Output) -> Result<(Vec<serde_json::Value>, String), TestError> {
    let text = String::from_utf8(out.stdout.clone())?;
    let replies = text
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    Ok((replies, text))
}

/// A `tools/call` of the fixture's `test_simple_text`, with id 2.
const SIMPLE_TEXT: &str =
    r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"test_simple_text"}}"#;

/// Runs `droid` with `input` on stdin, which then closes.
fn droid_with_input(args: &[&str], input: &str) -> Result<Output, TestError> {
    let mut child = spawn_droid(args, Stdio::piped(), Stdio::piped(), Stdio::piped())?;
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(input.as_bytes())?;
    Ok(child.wait_with_output()?)
}

#[test]
fn serve_answers_on_stdio_and_exits_cleanly_when_input_ends() -> Result<(), TestError> {
    let input = lines(&[&initialize("2025-11-25"), SIMPLE_TEXT]);
    let out = droid_with_input(&["serve"], &input)?;
    assert!(out.status.success(), "{out:?}");
    let (replies, text) = replies(&out)?;
    assert_eq!(replies.len(), 2, "{text}");
    assert!(
        text.contains("This is a simple text response for testing."),
        "{text}"
    );
    Ok(())
}

/// `"\ud800"` is JSON (half of an emoji, as `JSON.stringify` writes it): the
/// request is served with U+FFFD in its place, not refused as a parse error
/// its client cannot match to it.
#[test]
fn a_lone_surrogate_is_read_as_the_replacement_character() -> Result<(), TestError> {
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a\ud800b\ud83d\ude00"}}}"#;
    let input = lines(&[&initialize("2025-11-25"), call]);
    let out = droid_with_input(&["serve"], &input)?;
    let (replies, text) = replies(&out)?;
    let answer = replies
        .iter()
        .find(|r| r["id"] == 2)
        .ok_or_else(|| format!("the call was not answered: {text}"))?;
    assert_eq!(
        answer["result"]["content"][0]["text"], "a\u{fffd}b\u{1f600}",
        "{text}"
    );
    Ok(())
}

/// A call still running when the input ends and the drain is over is
/// answered with an error saying the server stopped, not dropped.
#[test]
fn a_call_outlasting_the_stdio_drain_is_told_the_server_stopped() -> Result<(), TestError> {
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":60000}}}"#;
    let input = lines(&[&initialize("2025-11-25"), call]);
    let out = droid_with_input(&["serve"], &input)?;
    assert!(out.status.success(), "{out:?}");
    let (replies, text) = replies(&out)?;
    let answer = replies
        .iter()
        .find(|r| r["id"] == 2)
        .ok_or_else(|| format!("the call was not answered: {text}"))?;
    assert_eq!(
        answer["error"]["message"], "the server stopped before this request was answered",
        "{text}"
    );
    Ok(())
}

#[test]
fn arguments_that_do_not_fit_are_the_tools_error_not_a_protocol_error() -> Result<(), TestError> {
    // 2025-11-25 asks that input validation failures be tool execution
    // errors, which a model can read and correct.
    let input = lines(&[
        &initialize("2025-11-25"),
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"add","arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":7}}}"#,
    ]);
    let out = droid_with_input(&["serve"], &input)?;
    let (replies, text) = replies(&out)?;
    for id in [2, 3] {
        let reply = replies
            .iter()
            .find(|r| r["id"] == id)
            .ok_or_else(|| format!("no reply to {id}: {text}"))?;
        assert_eq!(reply["result"]["isError"], true, "{reply}");
        assert!(reply.get("error").is_none(), "{reply}");
    }
    Ok(())
}

#[test]
fn serve_restricted_to_one_revision_offers_only_that_one() -> Result<(), TestError> {
    let input = lines(&[&initialize("2025-11-25")]);
    let out = droid_with_input(&["serve", "--revisions", "2025-06-18"], &input)?;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout)?;
    assert!(text.contains(r#""protocolVersion":"2025-06-18""#), "{text}");
    Ok(())
}

#[test]
fn a_modern_only_server_refuses_initialize_and_names_what_it_speaks() -> Result<(), TestError> {
    let input = lines(&[&initialize("2025-11-25")]);
    let out = droid_with_input(&["serve", "--revisions", "2026-07-28"], &input)?;
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(
        reply.pointer("/error/code"),
        Some(&serde_json::json!(-32602)),
        "{reply}"
    );
    assert_eq!(
        reply.pointer("/error/data/supported"),
        Some(&serde_json::json!(["2026-07-28"]))
    );
    Ok(())
}

#[test]
fn a_legacy_only_server_answers_a_modern_probe_as_a_legacy_server_would() -> Result<(), TestError> {
    let out = droid_with_input(
        &["serve", "--revisions", "2025-11-25"],
        concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#,
            "\n"
        ),
    )?;
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let code = reply
        .pointer("/error/code")
        .and_then(serde_json::Value::as_i64);
    // Not one of the modern codes, so a dual-era client falls back to
    // `initialize` instead of retrying the modern way.
    assert!(
        code.is_some_and(|c| !(-32022..=-32020).contains(&c)),
        "{reply}"
    );
    Ok(())
}

#[test]
fn serve_listen_answers_streamable_http_on_the_port_it_names() -> Result<(), TestError> {
    let (_server, address) = listening(&["serve", "--listen", "127.0.0.1:0"], "http")?;
    let reply = raw_post(&address, &[], &initialize("2025-11-25"))?;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(
        reply.to_ascii_lowercase().contains("mcp-session-id:"),
        "{reply}"
    );
    assert!(
        reply.contains(r#""protocolVersion":"2025-11-25""#),
        "{reply}"
    );
    Ok(())
}

/// A server listening on a loopback address other than 127.0.0.1 is
/// reached by that address: its own address passes the host check that
/// keeps other names out.
#[test]
fn a_server_is_reached_by_the_loopback_address_it_listens_on() -> Result<(), TestError> {
    let (_server, address) = listening(&["serve", "--listen", "127.0.0.2:0"], "http")?;
    assert!(address.starts_with("127.0.0.2:"), "{address}");
    let reply = raw_post(&address, &[], &initialize("2025-11-25"))?;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    Ok(())
}

#[test]
fn an_unknown_revision_is_refused_by_name() -> Result<(), TestError> {
    let text = refused(
        &["serve", "--revisions", "2024-10-07"],
        "an unknown revision was served",
    )?;
    assert!(text.contains("2024-10-07"), "{text}");
    Ok(())
}

#[test]
fn the_revision_table_shows_structured_output_arriving_in_2025_06_18() -> Result<(), TestError> {
    let text = succeeded(&["revisions"])?;
    let row = text
        .lines()
        .find(|l| l.starts_with("ToolStructuredOutput "))
        .ok_or("no ToolStructuredOutput row")?;
    let marks: Vec<&str> = row.split_whitespace().skip(1).collect();
    assert_eq!(marks, ["-", "-", "yes", "yes", "yes"]);
    Ok(())
}

#[test]
fn an_answer_to_a_call_that_is_not_a_tool_result_fails_the_command() -> Result<(), TestError> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../protocol-droid/tests/fixtures/bad_server.py");
    for json in [false, true] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_droid"));
        command.arg("call");
        if json {
            command.arg("--json");
        }
        let out = command
            .args(["tools/call", r#"{"name":"any"}"#, "--", "python3"])
            .arg(&script)
            .arg("contentless-result")
            .env("DROID_LOG", "warn")
            .output()?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        // Shown as it came, and failed as an error (1), not as a tool
        // that reported failure (2), nor as a success.
        assert_eq!(
            out.status.code(),
            Some(1),
            "--json {json}: {stdout} {stderr}"
        );
        assert!(
            stdout.contains(r#""content": "done""#),
            "--json {json}: {stdout}"
        );
        assert!(
            stderr.contains("not a tool result"),
            "--json {json}: {stderr}"
        );
    }
    Ok(())
}

/// A task asked for by hand (without `--task`) is a valid answer to
/// `tools/call`: shown, and the command succeeds.
#[test]
fn a_task_asked_for_by_hand_is_shown_and_succeeds() -> Result<(), TestError> {
    let out = Command::new(env!("CARGO_BIN_EXE_droid"))
        .args([
            "call",
            "--revision",
            "2025-11-25",
            "tools/call",
            r#"{"name":"slow_compute","arguments":{"seconds":0.1},"task":{"ttl":60000}}"#,
            "--",
            env!("CARGO_BIN_EXE_droid"),
            "serve",
        ])
        .env("DROID_LOG", "warn")
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("taskId"), "{stdout}");
    Ok(())
}

#[test]
fn the_token_for_http_servers_never_reaches_a_stdio_server() -> Result<(), TestError> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../protocol-droid/tests/fixtures/bad_server.py");
    let out = Command::new(env!("CARGO_BIN_EXE_droid"))
        .args([
            "call",
            "--json",
            "tools/call",
            r#"{"name":"any"}"#,
            "--",
            "python3",
        ])
        .arg(&script)
        .arg("env")
        .env("DROID_TOKEN", "secret-token")
        .env("DROID_AUTH_CLIENT_SECRET", "secret-client")
        .env("DROID_LOG", "warn")
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Nothing of this program's own environment reaches a child unnamed:
    // not the credentials, not even the log level.
    assert!(stdout.contains(r#""text": """#), "{stdout}");
    Ok(())
}

#[test]
fn auth_flags_without_an_issuer_refuse_to_start_rather_than_serve_openly() -> Result<(), TestError>
{
    let args = words(
        "serve --listen 127.0.0.1:0 --auth-jwks-url http://127.0.0.1:9/jwks --auth-required-scope mcp",
    );
    let stderr = refused(&args, "served with no issuer to check tokens against")?;
    assert!(stderr.contains("without --auth-issuer"), "{stderr}");
    Ok(())
}

/// An empty issuer, resource or audience (an unset shell variable) would
/// accept tokens naming the empty string; a leeway of years would accept
/// tokens long expired: each refuses to start.
#[test]
fn an_empty_name_or_a_leeway_past_minutes_refuses_to_start() -> Result<(), TestError> {
    let jwks = "--auth-jwks-url=http://127.0.0.1:9/jwks";
    let issuer = "--auth-issuer=http://127.0.0.1:9";
    for (flag, why) in [
        ("--auth-issuer=", "an empty issuer"),
        ("--auth-resource=", "an empty resource"),
        ("--auth-audience=", "an empty audience"),
        ("--auth-leeway=301", "a leeway past five minutes"),
        ("--auth-leeway=1000000000", "a leeway of decades"),
    ] {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0", jwks];
        if !flag.starts_with("--auth-issuer") {
            args.push(issuer);
        }
        args.push(flag);
        let stderr = refused(&args, why)?;
        let name = flag.trim_end_matches(|c: char| c == '=' || c.is_ascii_digit());
        assert!(stderr.contains(name), "{why}: {stderr}");
        let reason = if name == "--auth-leeway" {
            "0..=300"
        } else {
            "a value is required"
        };
        assert!(stderr.contains(reason), "{why}: {stderr}");
    }
    Ok(())
}

/// Tokens checked by introspection still come from an authorization
/// server, which the resource metadata must name: without `--auth-issuer`
/// the server does not start; with it, the metadata names it.
#[test]
fn introspection_names_its_authorization_server_or_refuses_to_start() -> Result<(), TestError> {
    let args = words(
        "serve --listen 127.0.0.1:0 --auth-introspection-url http://127.0.0.1:9/introspect \
         --auth-client-id rs",
    );
    let stderr = refused(&args, "served metadata naming no authorization server")?;
    assert!(
        stderr.contains("--auth-introspection-url needs --auth-issuer"),
        "{stderr}"
    );

    let secret = temp_path("introspection", "secret");
    std::fs::write(&secret, "rs-secret\n")?;
    let secret = secret.to_string_lossy().into_owned();
    let (_server, address) = listening(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--auth-issuer",
            "https://issuer.example",
            "--auth-introspection-url",
            "http://127.0.0.1:9/introspect",
            "--auth-client-id",
            "rs",
            "--auth-client-secret-file",
            &secret,
        ],
        "http",
    )?;
    let metadata = raw_get(&address, "/.well-known/oauth-protected-resource/mcp")?;
    assert!(
        metadata.contains(r#""authorization_servers":["https://issuer.example"]"#),
        "{metadata}"
    );
    Ok(())
}

#[test]
fn anonymous_callers_and_a_scope_every_request_needs_refuse_to_start() -> Result<(), TestError> {
    let args = words(
        "serve --listen 127.0.0.1:0 --auth-issuer https://issuer.example \
         --auth-jwks-url http://127.0.0.1:9/jwks --auth-required-scope mcp --auth-allow-anonymous",
    );
    let stderr = refused(&args, "served anonymous callers a scope they cannot hold")?;
    assert!(stderr.contains("contradict each other"), "{stderr}");
    // Refused before the port is bound or announced: a script reading the
    // listening line must not take the server for up.
    assert!(!stderr.contains("listening on"), "{stderr}");
    // On a port already taken, the flags are what is refused: they are
    // checked before anything is bound.
    let taken = std::net::TcpListener::bind("127.0.0.1:0")?;
    let listen = taken.local_addr()?.to_string();
    let stray = [
        "serve",
        "--listen",
        &listen,
        "--auth-jwks-url",
        "http://127.0.0.1:9/jwks",
    ];
    let stderr = refused(&stray, "served with authorization flags and no issuer")?;
    assert!(
        stderr.contains("authorization would be off") && !stderr.contains("listening on"),
        "{stderr}"
    );
    Ok(())
}

#[test]
fn a_public_listener_with_auth_must_name_its_resource() -> Result<(), TestError> {
    let args = words(
        "serve --listen 0.0.0.0:0 --auth-issuer http://127.0.0.1:9 --auth-jwks-url http://127.0.0.1:9/jwks",
    );
    let stderr = refused(&args, "served publicly with no resource named")?;
    assert!(stderr.contains("--auth-resource is required"), "{stderr}");
    Ok(())
}

#[test]
fn bridge_gives_a_legacy_stdio_client_a_2026_only_server() -> Result<(), TestError> {
    let droid = env!("CARGO_BIN_EXE_droid");
    let input = lines(&[
        &initialize("2025-03-26"),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        SIMPLE_TEXT,
    ]);
    let out = droid_with_input(
        &["bridge", "--", droid, "serve", "--revisions", "2026-07-28"],
        &input,
    )?;
    assert!(out.status.success(), "{out:?}");
    let (replies, text) = replies(&out)?;
    assert_eq!(replies.len(), 2, "{text}");
    // The handshake was the bridge's, at the client's revision, naming the
    // server behind it.
    let init = replies.first().ok_or("no reply")?;
    assert_eq!(init["result"]["protocolVersion"], "2025-03-26", "{text}");
    assert_eq!(
        init["result"]["serverInfo"]["name"], "mcp-conformance-test-server",
        "{text}"
    );
    let call = replies.get(1).ok_or("no second reply")?;
    assert!(
        text.contains("This is a simple text response for testing."),
        "{text}"
    );
    // 2026-07-28 members do not reach a 2025-03-26 client, nor the server's
    // name in each result (the client had it from the handshake).
    assert!(call["result"].get("resultType").is_none(), "{text}");
    assert!(call["result"].get("_meta").is_none(), "{text}");
    Ok(())
}

/// A stdio peer driven a line at a time.
struct Lines {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl Lines {
    fn spawn(args: &[&str]) -> Result<Self, TestError> {
        let mut child = spawn_droid(args, Stdio::piped(), Stdio::piped(), Stdio::null())?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?);
        Ok(Self {
            child,
            stdin,
            stdout,
        })
    }

    /// Sends `message`; for a request, answers its reply (what else comes
    /// first, notifications, is passed over).
    fn send(&mut self, message: &serde_json::Value) -> Result<serde_json::Value, TestError> {
        use std::io::BufRead as _;
        writeln!(self.stdin, "{message}")?;
        let Some(id) = message.get("id") else {
            return Ok(serde_json::Value::Null);
        };
        loop {
            let mut line = String::new();
            if self.stdout.read_line(&mut line)? == 0 {
                return Err("the peer closed its output".into());
            }
            let reply: serde_json::Value = serde_json::from_str(&line)?;
            if reply.get("id") == Some(id) && reply.get("method").is_none() {
                return Ok(reply);
            }
        }
    }
}

impl Lines {
    /// The next notification of `method`, passing over anything else.
    fn notification(&mut self, method: &str) -> Result<serde_json::Value, TestError> {
        use std::io::BufRead as _;
        loop {
            let mut line = String::new();
            if self.stdout.read_line(&mut line)? == 0 {
                return Err("the peer closed its output".into());
            }
            let message: serde_json::Value = serde_json::from_str(&line)?;
            if message.get("method").and_then(serde_json::Value::as_str) == Some(method)
                && message.get("id").is_none()
            {
                return Ok(message);
            }
        }
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        let _killed = self.child.kill();
        let _reaped = self.child.wait();
    }
}

/// Through the bridge a 2025-11-25 client's task is the bridge's own, in
/// front of a 2025-11-25 server whose tools say they run as tasks: the
/// bridge declares tasks, shows each tool's `taskSupport`, runs the call in
/// the background, tells the session when it ends
/// (`notifications/tasks/status`) and answers `tasks/result` with its
/// result.
#[test]
fn a_legacy_clients_task_runs_through_the_bridge() -> Result<(), TestError> {
    use serde_json::json;
    let droid = env!("CARGO_BIN_EXE_droid");
    let mut peer = Lines::spawn(&["bridge", "--", droid, "serve", "--revisions", "2025-11-25"])?;
    let init = peer.send(&serde_json::from_str(&initialize("2025-11-25"))?)?;
    assert!(
        init["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"].is_object(),
        "{init}"
    );
    peer.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))?;
    let listed = peer.send(&json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" }))?;
    let support = |name: &str| {
        listed["result"]["tools"]
            .as_array()
            .and_then(|tools| tools.iter().find(|t| t["name"] == name))
            .map(|t| t["execution"]["taskSupport"].clone())
    };
    assert_eq!(support("slow_compute"), Some(json!("optional")), "{listed}");
    // The server only runs it as a task; the bridge runs it either way.
    assert_eq!(support("failing_job"), Some(json!("optional")));
    let created = peer.send(&json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": { "name": "slow_compute", "arguments": { "seconds": 0.1, "label": "bridged" },
            "task": { "ttl": 60000 } } }))?;
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .ok_or("no task")?
        .to_owned();
    // The session that made the task is told when it ends.
    let status = peer.notification("notifications/tasks/status")?;
    assert_eq!(status["params"]["taskId"], json!(id), "{status}");
    assert_eq!(status["params"]["status"], "completed", "{status}");
    let result = peer.send(
        &json!({ "jsonrpc": "2.0", "id": 4, "method": "tasks/result",
        "params": { "taskId": id } }),
    )?;
    assert_eq!(
        result["result"]["content"][0]["text"], "bridged: done after 0.1 s",
        "{result}"
    );
    assert_eq!(
        result["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        json!(id)
    );
    let got = peer.send(&json!({ "jsonrpc": "2.0", "id": 5, "method": "tasks/get",
        "params": { "taskId": id } }))?;
    assert_eq!(got["result"]["status"], "completed", "{got}");
    // Called without `task`, the bridge waits for the server's task itself.
    let waited = peer.send(&json!({ "jsonrpc": "2.0", "id": 6, "method": "tools/call",
        "params": { "name": "failing_job" } }))?;
    assert_eq!(waited["result"]["isError"], true, "{waited}");
    assert_eq!(
        waited["result"]["content"][0]["text"], "the job failed",
        "{waited}"
    );
    Ok(())
}

/// A stdio client of the bridge is asked for its roots when the upstream
/// asks between requests, and its word that they changed reaches the
/// upstream, which asks again: the stdio session carries both, as the HTTP
/// ones do.
#[test]
fn a_stdio_clients_roots_reach_the_upstream_through_the_bridge() -> Result<(), TestError> {
    use serde_json::json;
    let mut peer = bridged_bad_server(&[], "roots-between")?;
    peer.write(
        &json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "clientInfo": { "name": "t", "version": "1" },
        "capabilities": { "roots": { "listChanged": true } } } }),
    )?;
    peer.until(Some(1), "file:///first", 0)?;
    peer.write(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))?;
    // Answered, and then the upstream asks, outside any request.
    peer.write(&json!({ "jsonrpc": "2.0", "id": 2, "method": "resources/list" }))?;
    peer.until(Some(2), "file:///first", 1)?;
    let call = |id: i64| {
        json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": { "name": "roots" } })
    };
    peer.write(&call(3))?;
    let heard = peer.until(Some(3), "file:///first", 0)?;
    let text = heard["result"]["content"][0]["text"].as_str();
    assert!(
        text.unwrap_or_default().contains("file:///first"),
        "{heard}"
    );
    peer.write(&json!({ "jsonrpc": "2.0", "method": "notifications/roots/list_changed" }))?;
    peer.until(None, "file:///second", 1)?;
    peer.write(&call(4))?;
    let heard = peer.until(Some(4), "file:///second", 0)?;
    let text = heard["result"]["content"][0]["text"].as_str();
    assert!(
        text.unwrap_or_default().contains("file:///second"),
        "{heard}"
    );
    Ok(())
}

/// `--timeout` bounds how long the bridge waits for its upstream's answer:
/// past it the client is answered, saying how long was waited, rather than
/// left waiting the default five minutes on an upstream that never answers.
#[test]
fn the_bridges_timeout_is_the_one_it_is_given() -> Result<(), TestError> {
    use serde_json::json;
    let mut peer = bridged_bad_server(&["--timeout", "1"], "silent")?;
    peer.write(
        &json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "clientInfo": { "name": "t", "version": "1" },
        "capabilities": {} } }),
    )?;
    peer.until(Some(1), "", 0)?;
    peer.write(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))?;
    peer.write(&json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "any", "arguments": {} } }))?;
    let refused = peer.until(Some(2), "", 0)?;
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("1000 ms"), "{refused}");
    Ok(())
}

/// `--timeout` bounds the upstream's handshake at start as well: a server
/// that never answers `initialize` is given up on, and the bridge exits
/// saying so, well within the client's default of a minute.
#[test]
fn the_bridges_timeout_bounds_the_upstreams_handshake() -> Result<(), TestError> {
    let mut child = spawn_droid(
        &[
            "bridge",
            "--timeout",
            "1",
            "--",
            "python3",
            "-c",
            "import time; time.sleep(120)",
        ],
        Stdio::piped(),
        Stdio::null(),
        Stdio::piped(),
    )?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _killed = child.kill();
            let _reaped = child.wait();
            return Err("the bridge still waited for its upstream after 30 s".into());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().ok_or("no stderr")?, &mut stderr)?;
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("connecting to the upstream"), "{stderr}");
    Ok(())
}

/// `droid bridge FLAGS` on stdio, speaking 2025-11-25 to the test server
/// `bad_server.py` in `mode`.
fn bridged_bad_server(flags: &[&str], mode: &str) -> Result<Conversation, TestError> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../protocol-droid/tests/fixtures/bad_server.py");
    let script = script.to_string_lossy();
    let mut args = vec!["bridge"];
    args.extend_from_slice(flags);
    args.extend([
        "--upstream-revision",
        "2025-11-25",
        "--",
        "python3",
        &script,
        mode,
    ]);
    Conversation::spawn(&args)
}

/// A stdio peer whose output is read on a thread of its own, so that a
/// message that never comes fails a test rather than hanging it; the
/// child is killed when this is dropped.
struct Conversation {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    output: std::sync::mpsc::Receiver<serde_json::Value>,
}

impl Conversation {
    fn spawn(args: &[&str]) -> Result<Self, TestError> {
        use std::io::BufRead as _;
        let mut child = spawn_droid(args, Stdio::piped(), Stdio::piped(), Stdio::null())?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let (tx, output) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if tx
                    .send(serde_json::from_str(&line).unwrap_or_default())
                    .is_err()
                {
                    break;
                }
            }
        });
        Ok(Self {
            child,
            stdin,
            output,
        })
    }

    fn write(&mut self, message: &serde_json::Value) -> Result<(), TestError> {
        Ok(writeln!(self.stdin, "{message}")?)
    }

    /// Reads until the reply to `id` (if any) has come and `questions`
    /// `roots/list` requests have been answered with the one root `roots`;
    /// the reply.
    fn until(
        &mut self,
        id: Option<i64>,
        roots: &str,
        questions: usize,
    ) -> Result<serde_json::Value, TestError> {
        let patience = std::time::Duration::from_secs(30);
        let (mut reply, mut asked) = (serde_json::Value::Null, 0);
        while (id.is_some() && reply.is_null()) || asked < questions {
            let message = self.output.recv_timeout(patience).map_err(|_| {
                format!("no reply to {id:?}, or {asked} of {questions} roots questions")
            })?;
            if message["method"] == "roots/list" {
                asked += 1;
                self.write(&serde_json::json!({ "jsonrpc": "2.0", "id": message["id"],
                    "result": { "roots": [{ "uri": roots }] } }))?;
            } else if id.is_some_and(|id| message["id"] == id) && message.get("method").is_none() {
                reply = message;
            }
        }
        Ok(reply)
    }
}

impl Drop for Conversation {
    fn drop(&mut self) {
        let _killed = self.child.kill();
        let _reaped = self.child.wait();
    }
}

/// `droid call --task` runs a tool as a task in the form the server speaks,
/// telling its status on stderr and printing its result.
#[test]
fn droid_call_runs_a_tool_as_a_task_in_either_form() -> Result<(), TestError> {
    let bin = env!("CARGO_BIN_EXE_droid");
    let direct = r#"{"name":"slow_compute","arguments":{"seconds":0.2,"label":"called"}}"#;
    // Through the gateway too, whose embedded upstream speaks 2026-07-28:
    // its tools' definitions cannot say they run as tasks, and any may.
    let gatewayed =
        r#"{"name":"fixture/slow_compute","arguments":{"seconds":0.2,"label":"called"}}"#;
    for (revision, call, server) in [
        ("2025-11-25", direct, "serve"),
        ("2026-07-28", direct, "serve"),
        ("2025-11-25", gatewayed, "gateway"),
        ("2026-07-28", gatewayed, "gateway"),
    ] {
        let out = droid(&[
            "call",
            "--task",
            "--revision",
            revision,
            "tools/call",
            call,
            "--",
            bin,
            server,
        ])?;
        let stdout = String::from_utf8(out.stdout.clone())?;
        let stderr = String::from_utf8(out.stderr.clone())?;
        assert!(
            out.status.success(),
            "{server} {revision}: {stdout}{stderr}"
        );
        assert!(
            stdout.contains("called: done after 0.2 s"),
            "{server} {revision}: {stdout}"
        );
        let statuses: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("task "))
            .filter_map(|l| l.rsplit(": ").next())
            .collect();
        assert_eq!(
            statuses.first(),
            Some(&"working"),
            "{server} {revision}: {stderr}"
        );
        assert_eq!(
            statuses.last(),
            Some(&"completed"),
            "{server} {revision}: {stderr}"
        );
    }
    Ok(())
}

#[test]
fn bridge_refuses_an_unknown_feature_name_and_a_missing_upstream() -> Result<(), TestError> {
    let stderr = refused(
        &["bridge", "--allow", "nonsense", "--", "true"],
        "a bridge allowing no known feature started",
    )?;
    assert!(
        stderr.contains("--allow \"nonsense\" names no feature"),
        "the error must name the flag"
    );
    let stderr = refused(&["bridge"], "a bridge with no upstream started")?;
    assert!(stderr.contains("name the upstream"));
    Ok(())
}

/// HTTPS end to end with the binary: `droid serve` terminates TLS with a
/// chain from a CA made here, `droid call` and a gateway upstream reach it
/// with `--ca-file` (or `ca_file`), and without it the refusal says why.
mod https {
    use super::support::{certificates, serve_https};
    use super::*;

    #[test]
    fn droid_call_reaches_droid_serve_over_https_with_the_ca_file() -> Result<(), TestError> {
        let files = certificates()?;
        let (_server, address) = serve_https(&files)?;
        let url = format!("https://{address}/mcp");
        let ca = files.path("ca.pem");
        let stdout = succeeded(&["call", &url, "tools/list", "--ca-file", &ca])?;
        assert!(stdout.contains("echo"), "{stdout}");
        // The same server without the CA: refused, and the message says why.
        let stderr = refused(
            &["call", &url, "tools/list"],
            "a server was trusted without its CA",
        )?;
        assert!(stderr.contains("unknown issuer"), "{stderr}");
        Ok(())
    }

    #[test]
    fn a_gateway_upstream_is_reached_over_https_with_its_ca_file() -> Result<(), TestError> {
        let files = certificates()?;
        let (_server, address) = serve_https(&files)?;
        let config = files.path("gateway.toml");
        let ca = files.path("ca.pem");
        let write = |ca_line: &str| {
            std::fs::write(
                &config,
                format!(
                    "[[upstream]]\nname = \"secure\"\nurl = \"https://{address}/mcp\"\n\
                     trust = \"on-first-use\"\n{ca_line}\n"
                ),
            )
        };
        write(&format!("ca_file = {ca:?}"))?;
        let digests = ["gateway", "--config", &config, "--print-digests"];
        let stdout = succeeded(&digests)?;
        assert!(stdout.contains("secure/echo"), "{stdout}");
        write("")?;
        let stderr = refused(&digests, "an untrusted upstream was served")?;
        assert!(stderr.contains("unknown issuer"), "{stderr}");
        Ok(())
    }
}

/// Scope rules hold for every primitive in every mode, and a rule that
/// names nothing stops the server from starting.
mod scopes {
    use super::*;

    /// RFC 7517 A.1's public P-256 key: a key set no token here is signed
    /// with, so every caller is the anonymous one.
    const JWKS: &str = r#"{"keys":[{"kty":"EC","crv":"P-256","use":"sig","kid":"1",
        "x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4",
        "y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM"}]}"#;

    fn jwks_file() -> Result<PathBuf, TestError> {
        let path = temp_path("scopes", "jwks");
        std::fs::write(&path, JWKS)?;
        Ok(path)
    }

    /// `droid MODE --listen … --auth-allow-anonymous RULES… [-- UPSTREAM]`.
    fn protected(mode: &str, rules: &[&str], upstream: bool) -> Result<Vec<String>, TestError> {
        let jwks = jwks_file()?.to_string_lossy().into_owned();
        let mut args: Vec<String> = [
            mode,
            "--listen",
            "127.0.0.1:0",
            "--auth-issuer",
            "https://issuer.example",
            "--auth-jwks-file",
            &jwks,
            "--auth-allow-anonymous",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        for rule in rules {
            args.push("--auth-scope".to_owned());
            args.push((*rule).to_owned());
        }
        if upstream {
            args.extend([
                "--".to_owned(),
                env!("CARGO_BIN_EXE_droid").to_owned(),
                "serve".to_owned(),
            ]);
        }
        Ok(args)
    }

    fn call(address: &str, method: &str, params: &str) -> Result<(bool, String), TestError> {
        let url = format!("http://{address}/mcp");
        let out = droid(&["call", &url, method, params, "--json"])?;
        Ok((out.status.success(), output_text(&out)))
    }

    /// What an anonymous caller of `args` sees and may use.
    fn anonymous_is_kept_out(args: &[String]) -> Result<(), TestError> {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (_server, address) = listening(&args, "http")?;
        let (listed, tools) = call(&address, "tools/list", "{}")?;
        assert!(listed, "{tools}");
        assert!(
            !tools.contains("\"echo\""),
            "a scoped tool was listed: {tools}"
        );
        assert!(
            tools.contains("\"add\""),
            "an open tool was not listed: {tools}"
        );
        let (called, answer) = call(
            &address,
            "tools/call",
            r#"{"name":"echo","arguments":{"text":"hi"}}"#,
        )?;
        assert!(!called && answer.contains("unknown tool echo"), "{answer}");
        let (_, prompts) = call(&address, "prompts/list", "{}")?;
        assert!(!prompts.contains("test_simple_prompt"), "{prompts}");
        let (got, answer) = call(&address, "prompts/get", r#"{"name":"test_simple_prompt"}"#)?;
        assert!(!got, "a scoped prompt was served: {answer}");
        let (_, resources) = call(&address, "resources/list", "{}")?;
        assert!(!resources.contains("test://static-text"), "{resources}");
        assert!(resources.contains("test://static-binary"), "{resources}");
        let (read, answer) = call(
            &address,
            "resources/read",
            r#"{"uri":"test://static-text"}"#,
        )?;
        assert!(!read && answer.contains("not found"), "{answer}");
        let (completed, answer) = call(
            &address,
            "completion/complete",
            r#"{"ref":{"type":"ref/prompt","name":"test_simple_prompt"},"argument":{"name":"x","value":""}}"#,
        )?;
        assert!(
            !completed,
            "a scoped prompt's argument was completed: {answer}"
        );
        Ok(())
    }

    const RULES: [&str; 3] = [
        "echo=tools:echo",
        "prompt:test_simple_prompt=prompts:simple",
        "resource:test://static-text=files:text",
    ];

    #[test]
    fn scopes_hold_for_every_primitive_when_serving() -> Result<(), TestError> {
        anonymous_is_kept_out(&protected("serve", &RULES, false)?)
    }

    #[test]
    fn scopes_hold_for_every_forwarded_primitive_through_the_bridge() -> Result<(), TestError> {
        anonymous_is_kept_out(&protected("bridge", &RULES, true)?)
    }

    /// The gateway in front of `droid serve`, one of its prompts scoped,
    /// open to anonymous callers.
    fn protected_gateway() -> Result<(Running, String), TestError> {
        protected_gateway_on(&fixture_gateway("scoped", "default", "on-first-use")?)
    }

    /// As [`protected_gateway`], serving `config`.
    fn protected_gateway_on(config: &std::path::Path) -> Result<(Running, String), TestError> {
        let config = config.to_string_lossy().into_owned();
        let mut args = protected(
            "gateway",
            &["prompt:fixture/test_simple_prompt=prompts:simple"],
            false,
        )?;
        args.extend(["--config".to_owned(), config]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        listening(&args, "http")
    }

    /// Each answer of the gateway at `address` to `method` naming the prompt
    /// `name`, with the name taken out: what is left must not tell the
    /// prompt the caller may not see from the one that is not there.
    fn refused_prompt(address: &str, method: &str, name: &str) -> Result<String, TestError> {
        let params = if method == "prompts/get" {
            serde_json::json!({ "name": name })
        } else {
            serde_json::json!({ "ref": { "type": "ref/prompt", "name": name },
                                "argument": { "name": "x", "value": "" } })
        };
        let (answered, text) = call(address, method, &params.to_string())?;
        assert!(!answered, "{method} {name}: {text}");
        Ok(text.replace(name, "NAME"))
    }

    /// While the upstream is down, a prompt the caller may not see is
    /// answered as any other of that upstream's names is: with the outage,
    /// not as unknown where a name that is not there is told of the outage.
    #[test]
    fn during_an_outage_a_hidden_prompt_is_answered_as_a_missing_one() -> Result<(), TestError> {
        let config = temp_path("outage", "toml");
        let (stop, pids) = (config.with_extension("stop"), config.with_extension("pids"));
        // Once `stop` is there the server does not start again: the
        // upstream stays down.
        let script = format!(
            "test -e {stop} && exit 1; echo $$ >> {pids}; exec {droid} serve",
            stop = stop.display(),
            pids = pids.display(),
            droid = env!("CARGO_BIN_EXE_droid"),
        );
        std::fs::write(
            &config,
            format!(
                "state = {:?}\n[[upstream]]\nname = \"fixture\"\ncommand = [\"sh\", \"-c\", {script:?}]\n\
                 trust = \"on-first-use\"\n",
                config.with_extension("state.json")
            ),
        )?;
        let outcome = (|| {
            let (_gateway, address) = protected_gateway_on(&config)?;
            let pid = std::fs::read_to_string(&pids)?;
            std::fs::write(&stop, "")?;
            let killed = Command::new("kill").args(["-9", pid.trim()]).status()?;
            assert!(killed.success(), "kill {pid} failed");
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while !refused_prompt(&address, "prompts/get", "fixture/no_such_prompt")?
                .contains("unavailable")
            {
                assert!(std::time::Instant::now() < deadline, "never seen down");
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            for method in ["prompts/get", "completion/complete"] {
                let hidden = refused_prompt(&address, method, "fixture/test_simple_prompt")?;
                let missing = refused_prompt(&address, method, "fixture/no_such_prompt")?;
                assert_eq!(hidden, missing, "{method}");
                assert!(hidden.contains("unavailable"), "{method}: {hidden}");
            }
            Ok(())
        })();
        for path in [&config, &stop, &pids, &config.with_extension("state.json")] {
            let _removed = std::fs::remove_file(path);
        }
        outcome
    }

    #[test]
    fn through_the_gateway_a_hidden_prompt_is_answered_as_a_missing_one() -> Result<(), TestError> {
        let (_gateway, address) = protected_gateway()?;
        let answer = |method: &str, name: &str| refused_prompt(&address, method, name);
        for method in ["prompts/get", "completion/complete"] {
            let hidden = answer(method, "fixture/test_simple_prompt")?;
            let missing = answer(method, "fixture/no_such_prompt")?;
            assert_eq!(hidden, missing, "{method}");
        }
        // A prompt that is there and open is still served.
        let (got, text) = call(
            &address,
            "prompts/get",
            r#"{"name":"fixture/test_prompt_with_arguments","arguments":{"arg1":"a","arg2":"b"}}"#,
        )?;
        assert!(got, "{text}");
        Ok(())
    }

    /// A gateway lists the scopes its configuration's `[scopes]` names, as
    /// those of `--auth-scope`, in its challenge and its metadata, so a
    /// client that follows them asks for scopes that open something; and a
    /// rule added by a reload is listed once it is in force.
    #[test]
    fn a_gateway_lists_the_scopes_its_configuration_names() -> Result<(), TestError> {
        let config = fixture_gateway("listed-scopes", "default", "on-first-use")?;
        let base = std::fs::read_to_string(&config)?;
        std::fs::write(
            &config,
            format!("{base}[scopes]\n\"fixture/echo\" = \"tools:echo\"\n"),
        )?;
        let jwks = jwks_file()?.to_string_lossy().into_owned();
        let path = config.to_string_lossy().into_owned();
        let listened = listening(
            &[
                "gateway",
                "--config",
                &path,
                "--listen",
                "127.0.0.1:0",
                "--auth-issuer",
                "https://issuer.example",
                "--auth-jwks-file",
                &jwks,
                "--auth-scope",
                "fixture/add=tools:add",
            ],
            "http",
        );
        let outcome = (|| {
            let (_gateway, address) = listened?;
            let listed = || raw_get(&address, "/.well-known/oauth-protected-resource/mcp");
            let refused = raw_post(&address, &[], &initialize("2025-11-25"))?;
            let challenge = refused
                .lines()
                .find(|line| line.to_ascii_lowercase().starts_with("www-authenticate:"))
                .ok_or_else(|| format!("no challenge: {refused}"))?;
            assert!(
                challenge.contains("tools:echo") && challenge.contains("tools:add"),
                "{challenge}"
            );
            let metadata = listed()?;
            assert!(
                metadata.contains("tools:echo") && metadata.contains("tools:add"),
                "{metadata}"
            );
            std::fs::write(
                &config,
                format!(
                    "{base}[scopes]\n\"fixture/echo\" = \"tools:echo\"\n\
                     \"prompt:fixture/test_simple_prompt\" = \"prompts:simple\"\n"
                ),
            )?;
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            let mut metadata = listed()?;
            while !metadata.contains("prompts:simple") && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(200));
                metadata = listed()?;
            }
            assert!(
                metadata.contains("prompts:simple") && metadata.contains("tools:add"),
                "the reloaded rule is not listed: {metadata}"
            );
            // And a rule taken out is no longer listed.
            std::fs::write(&config, &base)?;
            while metadata.contains("tools:echo") && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(200));
                metadata = listed()?;
            }
            assert!(
                !metadata.contains("tools:echo") && metadata.contains("tools:add"),
                "a rule taken out is still listed: {metadata}"
            );
            Ok(())
        })();
        let _removed = std::fs::remove_file(&config);
        let _removed = std::fs::remove_file(config.with_extension("state.json"));
        outcome
    }

    /// The admin page asks for its own scope, not the tools': its metadata
    /// and its challenges name `--admin-scope`, so a client that follows
    /// them gets a token the page takes, and they do not advertise the
    /// gateway's tool scopes where those open nothing.
    #[test]
    fn the_admin_page_lists_its_own_scope_and_not_the_tools() -> Result<(), TestError> {
        let config = fixture_gateway("admin-scope", "default", "on-first-use")?;
        let jwks = jwks_file()?.to_string_lossy().into_owned();
        let path = config.to_string_lossy().into_owned();
        let mut command = droid_command();
        command
            .args([
                "gateway",
                "--config",
                &path,
                "--listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
                "--admin-scope",
                "ops:approve",
                "--auth-issuer",
                "https://issuer.example",
                "--auth-jwks-file",
                &jwks,
                "--auth-resource",
                "http://gateway.example/mcp",
                "--auth-allow-anonymous",
                "--auth-scope",
                "fixture/add=tools:add",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let outcome = (|| {
            let (_gateway, addresses) =
                support::announced(command, &["admin page on http://", "listening on http://"])?;
            let (page, mcp) = (&addresses[0], &addresses[1]);
            // The page's own metadata, at its own address, naming the page
            // as the resource (RFC 9728 §3.3: a client reaching the page
            // takes no document naming another resource).
            let metadata = raw_get(page, "/.well-known/oauth-protected-resource")?;
            assert!(
                metadata.contains("ops:approve") && !metadata.contains("tools:add"),
                "{metadata}"
            );
            assert!(
                metadata.contains(&format!("\"resource\":\"http://{page}/\"")),
                "{metadata}"
            );
            let refused = raw_get(page, "/api/overview")?;
            assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
            let challenge = refused
                .lines()
                .find(|line| line.to_ascii_lowercase().starts_with("www-authenticate:"))
                .ok_or_else(|| format!("no challenge: {refused}"))?;
            // And says where the page's own document is.
            assert!(
                challenge.contains("scope=\"ops:approve\"")
                    && challenge.contains(&format!(
                        "resource_metadata=\"http://{page}/.well-known/oauth-protected-resource\""
                    ))
                    && !challenge.contains("tools:add"),
                "{challenge}"
            );
            // The MCP endpoint still lists the tools' scopes.
            let listed = raw_get(mcp, "/.well-known/oauth-protected-resource/mcp")?;
            assert!(
                listed.contains("tools:add") && !listed.contains("ops:approve"),
                "{listed}"
            );
            Ok(())
        })();
        let _removed = std::fs::remove_file(&config);
        let _removed = std::fs::remove_file(config.with_extension("state.json"));
        outcome
    }

    #[test]
    fn a_scope_rule_naming_nothing_stops_every_mode() -> Result<(), TestError> {
        for (mode, upstream) in [("serve", false), ("bridge", true)] {
            let args = protected(mode, &["ehco=tools:echo"], upstream)?;
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let why = format!("{mode} started with a rule naming nothing");
            let stderr = refused(&args, &why)?;
            assert!(stderr.contains("ehco"), "{mode}: {stderr}");
        }
        let args = words("gateway --print-digests --auth-scope fixture/ehco=tools:echo");
        let stderr = refused(&args, "the gateway accepted a rule naming nothing")?;
        assert!(stderr.contains("fixture/ehco"), "{stderr}");
        Ok(())
    }
}

/// `search_tools` in progressive mode, through the binary over stdio.
mod gateway_search {
    use super::*;

    /// Searches a progressive gateway in front of `droid serve`, its tools
    /// trusted as `trust` says; the raw result.
    fn search(trust: &str, query: &str) -> Result<String, TestError> {
        let config = fixture_gateway("search", "progressive", trust)?;
        let params = serde_json::json!({ "name": "search_tools", "arguments": { "query": query } });
        let config = config.to_string_lossy().into_owned();
        let out = droid(&[
            "call",
            "tools/call",
            &params.to_string(),
            "--json",
            "--",
            env!("CARGO_BIN_EXE_droid"),
            "gateway",
            "--config",
            &config,
        ])?;
        let _removed = std::fs::remove_file(&config);
        Ok(output_text(&out))
    }

    #[test]
    fn a_search_finds_verified_tools_and_never_an_unverified_one() -> Result<(), TestError> {
        let trusted = search("on-first-use", "echo text")?;
        assert!(trusted.contains("fixture/echo"), "{trusted}");
        // Pinned trust and no pins: every upstream tool is unverified, so
        // none is found, named or described.
        let unverified = search("pinned", "echo text")?;
        assert!(!unverified.contains("fixture/echo"), "{unverified}");
        assert!(!unverified.contains("as one text block"), "{unverified}");
        assert!(unverified.contains("No tool matches"), "{unverified}");
        Ok(())
    }

    #[test]
    fn an_oversized_query_is_refused_without_being_ranked() -> Result<(), TestError> {
        let answer = search("on-first-use", &"echo ".repeat(20_000))?;
        assert!(
            answer.contains("longer than 1024 bytes"),
            "{}",
            &answer[..answer.len().min(500)]
        );
        Ok(())
    }
}

/// Calls `tool` on a gateway in `mode` in front of `droid serve` the
/// 2026-07-28 way, its `region` argument `eu` and its `Mcp-Param-Region`
/// header `us`; the raw HTTP reply.
fn call_with_wrong_header(mode: &str, tool: &str) -> Result<String, TestError> {
    let config = fixture_gateway("header", mode, "on-first-use")?;
    let (_gateway, address) = listening_gateway(&config)?;
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": { "name": tool, "arguments": { "region": "eu" }, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        } },
    })
    .to_string();
    let headers = [
        "MCP-Protocol-Version: 2026-07-28".to_owned(),
        "Mcp-Method: tools/call".to_owned(),
        format!("Mcp-Name: {tool}"),
        "Mcp-Param-Region: us".to_owned(),
    ];
    raw_post(&address, &headers, &body)
}

/// The server a session talks to through the gateway is the gateway: a
/// 2026-07-28 result names it in `_meta`, whatever the upstream put there,
/// and a legacy client is told no server's name in a result at all.
#[test]
fn a_result_through_the_gateway_names_the_gateway_not_its_upstream() -> Result<(), TestError> {
    const MODERN_META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;
    let config = fixture_gateway("server-info", "default", "on-first-use")?;
    let config = config.to_string_lossy().into_owned();
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"fixture/test_simple_text",{MODERN_META}}}}}"#
    );
    let prompt = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{{"name":"fixture/test_simple_prompt",{MODERN_META}}}}}"#
    );
    let modern_out = droid_with_input(&["gateway", "--config", &config], &lines(&[&call, &prompt]));
    let legacy_call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fixture/test_simple_text"}}"#;
    let legacy_prompt = r#"{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{"name":"fixture/test_simple_prompt"}}"#;
    let input = lines(&[
        &initialize("2025-11-25"),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        legacy_call,
        legacy_prompt,
    ]);
    let legacy_out = droid_with_input(&["gateway", "--config", &config], &input);
    let _removed = std::fs::remove_file(&config);
    let (modern, text) = replies(&modern_out?)?;
    assert_eq!(modern.len(), 2, "{text}");
    for reply in &modern {
        assert!(reply["result"].is_object(), "{text}");
        assert_eq!(
            reply["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "droid-gateway",
            "{text}"
        );
    }
    let (legacy, text) = replies(&legacy_out?)?;
    assert_eq!(legacy.len(), 3, "{text}");
    for reply in legacy.iter().skip(1) {
        assert!(reply["result"].is_object(), "{text}");
        assert!(
            reply["result"]["_meta"]
                .get("io.modelcontextprotocol/serverInfo")
                .is_none(),
            "{text}"
        );
    }
    Ok(())
}

/// A 2026-07-28 call's `Mcp-Param-*` headers are checked only against tools
/// its caller can see: a deferred gateway tool answers a wrong header as a
/// missing tool does, so the header check cannot reveal it.
#[test]
fn a_header_check_never_reveals_a_tool_the_gateway_hides() -> Result<(), TestError> {
    // Served: the wrong header is refused as such.
    let served = call_with_wrong_header("default", "fixture/test_x_mcp_header")?;
    assert!(
        served.contains("Mcp-Param-Region does not match"),
        "{served}"
    );
    // Deferred in progressive mode: as if it did not exist.
    let hidden = call_with_wrong_header("progressive", "fixture/test_x_mcp_header")?;
    let missing = call_with_wrong_header("progressive", "fixture/no_such_tool")?;
    assert!(!hidden.contains("Mcp-Param"), "{hidden}");
    let status = |reply: &str| reply.lines().next().unwrap_or_default().to_owned();
    assert_eq!(status(&hidden), status(&missing), "{hidden}\n{missing}");
    let code = |reply: &str| {
        reply
            .split("\"code\":")
            .nth(1)
            .and_then(|rest| rest.split([',', '}']).next())
            .map(str::to_owned)
    };
    assert!(code(&hidden).is_some(), "{hidden}");
    assert_eq!(code(&hidden), code(&missing), "{hidden}\n{missing}");
    Ok(())
}

/// A command upstream starts from a minimal environment: this process's
/// secrets reach it only when named.
#[test]
fn an_upstream_command_gets_a_minimal_environment_and_what_is_named() -> Result<(), TestError> {
    let dump = std::env::temp_dir().join(format!("droid-env-{}.txt", std::process::id()));
    let script = format!(
        "env > {}; exec {} serve",
        dump.display(),
        env!("CARGO_BIN_EXE_droid")
    );
    let out = Command::new(env!("CARGO_BIN_EXE_droid"))
        .args([
            "bridge",
            "--upstream-env",
            "UPSTREAM_SETTING=on",
            "--pass-env",
            "GITHUB_TOKEN",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .env("AWS_SECRET_ACCESS_KEY", "do-not-leak")
        .env("GITHUB_TOKEN", "named-so-passed")
        .env("DROID_TOKEN", "never")
        .stdin(Stdio::null())
        .output()?;
    let seen = std::fs::read_to_string(&dump)?;
    let _removed = std::fs::remove_file(&dump);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!seen.contains("do-not-leak"), "{seen}");
    assert!(!seen.contains("DROID_TOKEN"), "{seen}");
    assert!(seen.contains("GITHUB_TOKEN=named-so-passed"), "{seen}");
    assert!(seen.contains("UPSTREAM_SETTING=on"), "{seen}");
    assert!(seen.lines().any(|line| line.starts_with("PATH=")), "{seen}");
    Ok(())
}

#[test]
fn a_public_listener_without_authorization_is_refused_before_binding() -> Result<(), TestError> {
    for mode in [&["serve"][..], &["gateway"][..]] {
        let mut args = mode.to_vec();
        args.extend(["--listen", "0.0.0.0:0"]);
        let stderr = refused(&args, &format!("{mode:?} served a public address openly"))?;
        assert!(stderr.contains("without authorization"), "{stderr}");
        assert!(stderr.contains("--allow-public-without-auth"), "{stderr}");
    }
    Ok(())
}

#[test]
fn secrets_are_not_taken_from_argv() -> Result<(), TestError> {
    for args in [
        &[
            "call",
            "http://127.0.0.1:9/mcp",
            "tools/list",
            "--token",
            "s3cret",
        ][..],
        &[
            "bridge",
            "--upstream",
            "http://127.0.0.1:9/mcp",
            "--upstream-token",
            "s3cret",
        ][..],
        &["serve", "--auth-client-secret", "s3cret"][..],
    ] {
        let stderr = refused(args, &format!("{args:?} was accepted"))?;
        assert!(stderr.contains("unexpected argument"), "{args:?}: {stderr}");
    }
    Ok(())
}

/// One client floods `droid serve --listen` every way it can at once while
/// another client's calls keep being answered, and the server's memory stays
/// bounded. Each flood comes from a loopback address of its own, so each
/// defence is met at full strength rather than the first one taking all.
mod flood {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Duration;

    use futures_util::StreamExt as _;
    use protocol_droid_test_support::resident_kib;
    use serde_json::{Value, json};

    use super::{TestError, fixture_gateway, listening, listening_gateway};

    const MODERN: &str = "2026-07-28";
    const BATCHING: &str = "2025-03-26";

    fn client(from: &str) -> Result<reqwest::Client, TestError> {
        Ok(reqwest::Client::builder()
            .local_address(Some(from.parse()?))
            // A hang guard, not a measurement.
            .timeout(Duration::from_secs(30))
            .build()?)
    }

    struct Post {
        status: u16,
        session: Option<String>,
        body: String,
    }

    async fn post(
        client: &reqwest::Client,
        url: &str,
        session: Option<&str>,
        version: &str,
        body: &Value,
    ) -> Result<Post, TestError> {
        let mut request = client
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", version)
            .body(body.to_string());
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        if version == MODERN {
            let method = body["method"].as_str().unwrap_or_default().to_owned();
            request = request.header("mcp-method", method);
            if let Some(name) = body["params"]["name"].as_str() {
                request = request.header("mcp-name", name.to_owned());
            }
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        Ok(Post {
            status,
            session,
            body: response.text().await?,
        })
    }

    fn initialize(version: &str) -> Value {
        json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {},
            "clientInfo": { "name": "flood", "version": "1" } } })
    }

    fn call(id: usize, name: &str, arguments: &Value) -> Value {
        json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": { "name": name, "arguments": arguments } })
    }

    /// The well-behaved client: a legacy session and a stateless call, over
    /// and over, each of which must be answered.
    async fn victim(url: String, stop: Arc<AtomicBool>) -> Result<usize, TestError> {
        let client = client("127.0.0.2")?;
        let mut answered = 0;
        while !stop.load(Ordering::SeqCst) {
            let opened = post(&client, &url, None, "2025-11-25", &initialize("2025-11-25")).await?;
            let session = opened
                .session
                .ok_or_else(|| format!("no session: {}", opened.status))?;
            let echo = call(1, "echo", &json!({ "text": "still served" }));
            let reply = post(&client, &url, Some(&session), "2025-11-25", &echo).await?;
            if !reply.body.contains("still served") {
                return Err(
                    format!("a legacy call failed: {} {}", reply.status, reply.body).into(),
                );
            }
            let mut modern = call(2, "echo", &json!({ "text": "still served" }));
            modern["params"]["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {} });
            let reply = post(&client, &url, None, MODERN, &modern).await?;
            if !reply.body.contains("still served") {
                return Err(
                    format!("a stateless call failed: {} {}", reply.status, reply.body).into(),
                );
            }
            let _ended = client
                .delete(&url)
                .header("mcp-session-id", &session)
                .header("mcp-protocol-version", "2025-11-25")
                .send()
                .await?;
            answered += 2;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(answered)
    }

    /// 4,000 connections, each with half a request head, held open.
    async fn half_open(
        address: std::net::SocketAddr,
    ) -> Result<Vec<tokio::net::TcpStream>, TestError> {
        use tokio::io::AsyncWriteExt as _;
        let mut held = Vec::new();
        for _ in 0..4000 {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind("127.0.0.3:0".parse()?)?;
            let Ok(mut stream) = socket.connect(address).await else {
                continue;
            };
            let _partial = stream
                .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                .await;
            held.push(stream);
        }
        Ok(held)
    }

    /// 16,384 sessions asked for; what was granted and what refused.
    async fn sessions(url: &str) -> Result<(usize, usize), TestError> {
        let client = client("127.0.0.1")?;
        let statuses: Vec<u16> = futures_util::stream::iter(0..16_384)
            .map(|_| {
                let client = client.clone();
                async move {
                    post(&client, url, None, "2025-11-25", &initialize("2025-11-25"))
                        .await
                        .map_or(0, |p| p.status)
                }
            })
            .buffer_unordered(32)
            .collect()
            .await;
        let granted = statuses.iter().filter(|s| **s == 200).count();
        let refused = statuses.iter().filter(|s| **s == 429).count();
        Ok((granted, refused))
    }

    /// A batch of 4,096 slow calls, then 16 sessions with 256 each.
    async fn slow_calls(url: &str) -> Result<(u16, Vec<tokio::task::JoinHandle<u16>>), TestError> {
        let client = client("127.0.0.4")?;
        let sleep = json!({ "ms": 3000 });
        let opened = post(&client, url, None, BATCHING, &initialize(BATCHING)).await?;
        let session = opened.session.ok_or("no session for the batch")?;
        let whole: Vec<Value> = (0..4096).map(|id| call(id, "sleep", &sleep)).collect();
        let refused = post(&client, url, Some(&session), BATCHING, &Value::Array(whole))
            .await?
            .status;
        let mut running = Vec::new();
        for _ in 0..16 {
            let opened = post(&client, url, None, BATCHING, &initialize(BATCHING)).await?;
            let session = opened.session.ok_or("no session for a share")?;
            let batch: Vec<Value> = (0..256).map(|id| call(id, "sleep", &sleep)).collect();
            let (client, url) = (client.clone(), url.to_owned());
            running.push(tokio::spawn(async move {
                post(
                    &client,
                    &url,
                    Some(&session),
                    BATCHING,
                    &Value::Array(batch),
                )
                .await
                .map_or(0, |p| p.status)
            }));
        }
        Ok((refused, running))
    }

    /// A 2024-11-05 stream that is never read, its session sent answers
    /// until the server gives up on it; whether it did.
    async fn unread_stream(base: &str) -> Result<bool, TestError> {
        let client = client("127.0.0.5")?;
        let mut stream = client
            .get(format!("{base}/sse"))
            .header("accept", "text/event-stream")
            .send()
            .await?;
        let mut head = String::new();
        while !head.contains("\n\n") {
            let chunk = stream.chunk().await?.ok_or("the stream ended")?;
            head.push_str(std::str::from_utf8(&chunk)?);
        }
        let endpoint = head
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .ok_or("no endpoint")?
            .to_owned();
        let url = format!("{base}{endpoint}");
        let send = |body: Value| {
            let (client, url) = (client.clone(), url.clone());
            async move {
                client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .send()
                    .await
                    .map_or(0, |r| r.status().as_u16())
            }
        };
        send(initialize("2024-11-05")).await;
        send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })).await;
        let text = "z".repeat(32 * 1024);
        // Until the session ends: the server's stall bound (30 s by default)
        // runs from the first answer that found no room.
        for round in 0..400 {
            let statuses: Vec<u16> = futures_util::future::join_all(
                (0..32).map(|n| send(call(round * 32 + n, "echo", &json!({ "text": text })))),
            )
            .await;
            if statuses.contains(&404) {
                drop(stream);
                return Ok(true);
            }
            // Its in-flight share fills with answers waiting for room; what
            // comes past it is refused on the same unread stream.
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok(false)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn two_megabyte_search_queries_stall_nobody_elses_search() -> Result<(), TestError> {
        let config = fixture_gateway("flood", "progressive", "on-first-use")?;
        let (_gateway, address) = listening_gateway(&config)?;
        let url = format!("http://{address}/mcp");
        let search = |query: String| {
            let mut body = call(1, "search_tools", &json!({ "query": query }));
            body["params"]["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {} });
            body
        };
        let huge = "read ".repeat(2 * 1024 * 1024 / 5);
        let attacker = client("127.0.0.6")?;
        let flood = {
            let (url, body) = (url.clone(), search(huge));
            tokio::spawn(async move {
                let mut refused = 0;
                for _ in 0..4 {
                    let answers = futures_util::future::join_all(
                        (0..8).map(|_| post(&attacker, &url, None, MODERN, &body)),
                    )
                    .await;
                    refused += answers
                        .iter()
                        .filter(|a| a.as_ref().is_ok_and(|p| p.body.contains("longer than")))
                        .count();
                }
                refused
            })
        };
        let other = client("127.0.0.2")?;
        let mut found = 0;
        while !flood.is_finished() {
            let answer = post(&other, &url, None, MODERN, &search("echo text".to_owned())).await?;
            assert!(answer.body.contains("fixture/echo"), "{}", answer.body);
            found += 1;
        }
        let refused = flood.await?;
        assert_eq!(refused, 32, "every oversized query is refused");
        assert!(found > 0, "the other client's search was never answered");
        Ok(())
    }

    /// The gateway's `[limits]` and the rate flags together: a tool limited
    /// by name in the configuration, every other tool by the flag. One
    /// anonymous caller's burst is refused with 429, `Retry-After` and the
    /// documented error while a caller from another address is served, and
    /// `/metrics` counts the refusals.
    #[tokio::test]
    async fn a_callers_burst_is_refused_and_another_caller_is_not() -> Result<(), TestError> {
        let config = super::temp_path("limits", "toml");
        std::fs::write(
            &config,
            format!(
                "[[upstream]]\nname = \"fixture\"\ncommand = [{:?}, \"serve\"]\n\
                 trust = \"on-first-use\"\n\
                 [limits]\ntools = {{ \"fixture/test_error_handling\" = \"1/h\" }}\n",
                env!("CARGO_BIN_EXE_droid")
            ),
        )?;
        let path = config.to_string_lossy().into_owned();
        let listened = listening(
            &[
                "gateway",
                "--config",
                &path,
                "--listen",
                "127.0.0.1:0",
                "--tool-rate-limit",
                "2/h",
            ],
            "http",
        );
        let _removed = std::fs::remove_file(&config);
        let (_gateway, address) = listened.map_err(|e| e.to_string())?;
        let url = format!("http://{address}/mcp");
        let (flooder, other) = (client("127.0.0.2")?, client("127.0.0.3")?);
        let stateless = |id, tool| {
            let mut request = call(id, tool, &json!({}));
            request["params"]["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {} });
            request
        };
        let simple = |id| stateless(id, "fixture/test_simple_text");
        for id in 1..=2 {
            let answer = post(&flooder, &url, None, MODERN, &simple(id)).await?;
            assert_eq!(answer.status, 200, "{}", answer.body);
        }
        let refused = post(&flooder, &url, None, MODERN, &simple(3)).await?;
        assert_eq!(refused.status, 429, "{}", refused.body);
        let body: Value = serde_json::from_str(&refused.body)?;
        assert_eq!(body["error"]["code"], json!(-31429), "{body}");
        assert_eq!(body["error"]["data"]["limit"], json!("tool"), "{body}");
        let answer = post(&other, &url, None, MODERN, &simple(4)).await?;
        assert_eq!(answer.status, 200, "{}", answer.body);
        // The tool the configuration names has its own, smaller allowance.
        let failing = |id| stateless(id, "fixture/test_error_handling");
        let answer = post(&flooder, &url, None, MODERN, &failing(5)).await?;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let refused = post(&flooder, &url, None, MODERN, &failing(6)).await?;
        assert_eq!(refused.status, 429, "{}", refused.body);
        let metrics = super::scrape(&address)?;
        assert_eq!(
            metrics.get("droid_rate_limited_total{limit=\"tool\"}"),
            Some(&2.0)
        );
        Ok(())
    }

    /// A stateless `tools/call` of `tool` with `arguments`.
    fn stateless_call(id: usize, tool: &str, arguments: &Value) -> Value {
        let mut request = call(id, tool, arguments);
        request["params"]["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {} });
        request
    }

    /// A tool's limit holds whichever way it is called: through a bridge,
    /// whose tools are its upstream's, and through a progressive gateway's
    /// `call_tool`, which names the tool it calls.
    #[tokio::test]
    async fn a_tool_limit_holds_through_a_bridge_and_a_gateways_call_tool() -> Result<(), TestError>
    {
        let droid = env!("CARGO_BIN_EXE_droid");
        let (_bridge, bridged) = listening(
            &[
                "bridge",
                "--listen",
                "127.0.0.1:0",
                "--tool-rate-limit",
                "echo=1/h",
                "--",
                droid,
                "serve",
            ],
            "http",
        )
        .map_err(|e| e.to_string())?;
        let config = super::temp_path("call-tool-limit", "toml");
        std::fs::write(
            &config,
            format!(
                "mode = \"progressive\"\n[[upstream]]\nname = \"fixture\"\n\
                 command = [{droid:?}, \"serve\"]\ntrust = \"on-first-use\"\n\
                 [limits]\ntools = {{ \"fixture/echo\" = \"1/h\" }}\n"
            ),
        )?;
        let (_gateway, gateway) = listening_gateway(&config).map_err(|e| e.to_string())?;
        let client = client("127.0.0.4")?;
        let echo = json!({ "text": "once" });
        let bridge_url = format!("http://{bridged}/mcp");
        let first = post(
            &client,
            &bridge_url,
            None,
            MODERN,
            &stateless_call(1, "echo", &echo),
        )
        .await?;
        assert_eq!(first.status, 200, "{}", first.body);
        let second = post(
            &client,
            &bridge_url,
            None,
            MODERN,
            &stateless_call(2, "echo", &echo),
        )
        .await?;
        assert_eq!(second.status, 429, "{}", second.body);
        let gateway_url = format!("http://{gateway}/mcp");
        let by_id = |id| {
            stateless_call(
                id,
                "call_tool",
                &json!({ "id": "fixture/echo", "arguments": { "text": "once" } }),
            )
        };
        let first = post(&client, &gateway_url, None, MODERN, &by_id(3)).await?;
        assert_eq!(first.status, 200, "{}", first.body);
        assert!(first.body.contains("once"), "{}", first.body);
        let second = post(&client, &gateway_url, None, MODERN, &by_id(4)).await?;
        assert_eq!(second.status, 429, "{}", second.body);
        let body: Value = serde_json::from_str(&second.body)?;
        assert_eq!(body["error"]["code"], json!(-31429), "{body}");
        Ok(())
    }

    #[allow(clippy::print_stderr)] // The figures are this test's report.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn one_client_flooding_every_way_takes_nothing_from_another() -> Result<(), TestError> {
        let (server, address) =
            listening(&["serve", "--listen", "127.0.0.1:0"], "http").map_err(|e| e.to_string())?;
        let pid = server.0.id();
        let base = format!("http://{address}");
        let url = format!("{base}/mcp");
        let idle_rss = resident_kib(pid);
        let peak = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = {
            let (peak, stop) = (Arc::clone(&peak), Arc::clone(&stop));
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let rss = usize::try_from(resident_kib(pid)).unwrap_or(usize::MAX);
                    peak.fetch_max(rss, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        let victim = tokio::spawn(victim(url.clone(), Arc::clone(&stop)));
        let held = half_open(address.parse()?).await?;
        let (whole_batch, running) = slow_calls(&url).await?;
        let (granted, refused) = sessions(&url).await?;
        let stream_ended = unread_stream(&base).await?;
        stop.store(true, Ordering::SeqCst);
        let answered = victim.await??;
        sampler.await?;
        let mut shares = Vec::new();
        for batch in running {
            shares.push(batch.await?);
        }
        let peak_rss = peak.load(Ordering::SeqCst);
        eprintln!(
            "flood: {} half-open connections held; a 4,096-call batch answered {whole_batch}; \
             16 x 256 slow calls answered {shares:?}; sessions granted {granted}, refused \
             {refused} of 16,384; unread stream ended its session: {stream_ended}; the other \
             client had {answered} calls answered; RSS {idle_rss} KiB idle, {peak_rss} KiB at \
             the peak",
            held.len()
        );
        assert_eq!(
            whole_batch, 413,
            "a batch past the in-flight share must be refused whole"
        );
        assert!(shares.iter().all(|s| *s == 200), "{shares:?}");
        assert!(granted <= 1024, "one address held {granted} sessions");
        assert!(refused >= 16_384 - 1024, "{refused} refused");
        assert!(stream_ended, "the unread stream's session lived on");
        assert!(
            answered >= 10,
            "the other client was served only {answered} times"
        );
        // Bounded: a few hundred MiB at most, whatever the flood.
        assert!(peak_rss < 512 * 1024, "the server grew to {peak_rss} KiB");
        drop(held);
        Ok(())
    }
}

/// POSTs `body` to `/mcp` at `address` with `headers`, says on `started`
/// when the reply's first progress notification arrives, and reads the
/// whole raw reply.
fn post_telling_progress(
    address: &str,
    headers: &[String],
    body: &str,
    started: &std::sync::mpsc::Sender<()>,
) -> Result<String, TestError> {
    use std::io::Read as _;

    let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    let mut stream = std::net::TcpStream::connect(address)?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n{extra}\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut reply = Vec::new();
    let mut told = false;
    let mut chunk = [0_u8; 4096];
    loop {
        let read = stream.read(&mut chunk)?;
        if read == 0 {
            break;
        }
        reply.extend_from_slice(chunk.get(..read).unwrap_or_default());
        if !told && String::from_utf8_lossy(&reply).contains("notifications/progress") {
            told = true;
            started.send(())?;
        }
    }
    Ok(String::from_utf8(reply)?)
}

/// SIGTERM while calls run (one in a 2025-11-25 session, one 2026-07-28
/// stateless): each still gets its answer, and then the server exits 0.
/// Before, SIGTERM ended the process at once and neither call was
/// answered. The signal is sent once both calls have said they started.
#[test]
fn sigterm_lets_the_calls_in_flight_finish_then_exits_cleanly() -> Result<(), TestError> {
    for (era, reply) in sleeping_through_sigterm(2000)? {
        assert!(reply.starts_with("HTTP/1.1 200"), "{era}: {reply}");
        assert!(reply.contains("Slept 2000 ms."), "{era}: {reply}");
        assert!(!reply.contains(r#""error""#), "{era}: {reply}");
    }
    Ok(())
}

/// A call still running when the shutdown's grace is over is answered
/// with an error saying the server stopped, not left to a closed
/// connection; and the server still exits 0.
#[test]
fn a_call_outlasting_the_shutdown_grace_is_told_the_server_stopped() -> Result<(), TestError> {
    for (era, reply) in sleeping_through_sigterm(60_000)? {
        assert!(reply.starts_with("HTTP/1.1 200"), "{era}: {reply}");
        assert!(
            reply.contains("the server stopped before this request was answered"),
            "{era}: {reply}"
        );
        assert!(!reply.contains("Slept"), "{era}: {reply}");
    }
    Ok(())
}

/// `droid serve --listen` given SIGTERM while two calls of the `sleep`
/// tool for `ms` run (one in a 2025-11-25 session, one 2026-07-28
/// stateless), once both said they started; each call's whole reply, by
/// era, once the server exited 0.
fn sleeping_through_sigterm(ms: u32) -> Result<Vec<(&'static str, String)>, TestError> {
    let (mut server, address) = listening(&["serve", "--listen", "127.0.0.1:0"], "http")?;
    let opened = raw_post(&address, &[], &initialize("2025-11-25"))?;
    let session = session_id(&opened).ok_or("no session id")?;
    let legacy_headers = vec![
        format!("Mcp-Session-Id: {session}"),
        "MCP-Protocol-Version: 2025-11-25".to_owned(),
    ];
    raw_post(
        &address,
        &legacy_headers,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )?;
    let sleep = |id: u32, meta: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"sleep","arguments":{{"ms":{ms}}},"_meta":{{"progressToken":"p{id}"{meta}}}}}}}"#
        )
    };
    let (started, starts) = std::sync::mpsc::channel();
    let legacy = {
        let (address, body, started) = (address.clone(), sleep(2, ""), started.clone());
        std::thread::spawn(move || {
            post_telling_progress(&address, &legacy_headers, &body, &started)
        })
    };
    let modern = {
        let body = sleep(
            3,
            r#","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}"#,
        );
        let headers = vec![
            "MCP-Protocol-Version: 2026-07-28".to_owned(),
            "Mcp-Method: tools/call".to_owned(),
            "Mcp-Name: sleep".to_owned(),
        ];
        std::thread::spawn(move || post_telling_progress(&address, &headers, &body, &started))
    };
    for _ in 0..2 {
        starts
            .recv_timeout(std::time::Duration::from_secs(30))
            .map_err(|_| "a call did not say it started")?;
    }
    let signalled = Command::new("kill")
        .args(["-TERM", &server.0.id().to_string()])
        .status()?;
    assert!(signalled.success());
    let mut replies = Vec::new();
    for (era, call) in [("2025-11-25", legacy), ("2026-07-28", modern)] {
        replies.push((era, call.join().map_err(|_| "the caller panicked")??));
    }
    let mut status = None;
    for _ in 0..400 {
        status = server.0.try_wait()?;
        if status.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let status = status.ok_or("the server did not exit after SIGTERM")?;
    assert_eq!(status.code(), Some(0), "{status:?}");
    Ok(replies)
}

/// `GET path` on `address` without a token; the status and the body.
fn probe(address: &str, path: &str) -> Result<(u16, serde_json::Value), TestError> {
    let reply = raw_get(address, path)?;
    let status = reply
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or("no status")?;
    let body = reply.split("\r\n\r\n").nth(1).ok_or("no body")?;
    Ok((status, serde_json::from_str(body)?))
}

/// A gateway with an upstream that cannot start is alive but not ready, and
/// says how many upstreams are down without naming them (the probe needs no
/// token); the healthy upstream's tools are served all the same.
#[test]
fn a_gateway_with_an_upstream_down_is_alive_but_not_ready() -> Result<(), TestError> {
    let config = temp_path("ready", "toml");
    std::fs::write(
        &config,
        format!(
            "[[upstream]]\nname = \"fixture\"\ncommand = [{:?}, \"serve\"]\ntrust = \"on-first-use\"\n\
             [[upstream]]\nname = \"secretive\"\ncommand = [\"/nonexistent/droid-upstream\"]\n",
            env!("CARGO_BIN_EXE_droid")
        ),
    )?;
    let (_gateway, address) = listening_gateway(&config)?;
    assert_eq!(
        probe(&address, "/healthz")?,
        (200, serde_json::json!({ "status": "alive" }))
    );
    // The broken upstream may still be on its first attempt: wait for it
    // to be counted down.
    let mut readiness = probe(&address, "/readyz")?;
    for _ in 0..200 {
        if readiness.1["reason"]
            .as_str()
            .is_some_and(|r| r.ends_with("1 down"))
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        readiness = probe(&address, "/readyz")?;
    }
    let (status, body) = readiness;
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        body,
        serde_json::json!({
            "status": "not ready",
            "reason": "1 of 2 upstreams up, 0 connecting, 1 down",
        })
    );
    assert!(!body.to_string().contains("secretive"), "{body}");
    Ok(())
}

/// `GET /metrics` on `address`: each series' value by its name and labels.
fn scrape(address: &str) -> Result<std::collections::BTreeMap<String, f64>, TestError> {
    use std::io::Read as _;

    let mut stream = std::net::TcpStream::connect(address)?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(20)))?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    let (head, body) = reply.split_once("\r\n\r\n").ok_or("no body")?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    let mut series = std::collections::BTreeMap::new();
    for line in body.lines().filter(|line| !line.starts_with('#')) {
        let (name, value) = line.rsplit_once(' ').ok_or("a line without a value")?;
        series.insert(name.to_owned(), value.parse()?);
    }
    Ok(series)
}

/// A series' value, zero when it has not been created yet.
fn value(series: &std::collections::BTreeMap<String, f64>, name: &str) -> f64 {
    series.get(name).copied().unwrap_or(0.0)
}

/// Calls a gateway's tool over HTTP at `revision`; whether it succeeded.
fn call_tool(address: &str, revision: &str, tool: &str) -> Result<bool, TestError> {
    let url = format!("http://{address}/mcp");
    let params = format!(r#"{{"name":"{tool}","arguments":{{}}}}"#);
    let out = droid(&[
        "call",
        &url,
        "tools/call",
        &params,
        "--revision",
        revision,
        "--json",
    ])?;
    Ok(out.status.success())
}

/// `/metrics` moves with the calls it counts: each call answered is
/// counted by method, era and outcome (a refused one with its code), the
/// upstream it was forwarded to counts it too, nothing is left in flight,
/// and each upstream's state is read as it is now.
#[test]
fn metrics_count_the_calls_made_and_read_upstream_state_when_scraped() -> Result<(), TestError> {
    let config = temp_path("metrics", "toml");
    std::fs::write(
        &config,
        format!(
            "[[upstream]]\nname = \"fixture\"\ncommand = [{:?}, \"serve\"]\ntrust = \"on-first-use\"\n\
             [[upstream]]\nname = \"broken\"\ncommand = [\"/nonexistent/droid-upstream\"]\n",
            env!("CARGO_BIN_EXE_droid")
        ),
    )?;
    let (_gateway, address) = listening_gateway(&config)?;
    let ok = |era: &str, transport: &str| {
        format!(
            "droid_requests_total{{method=\"tools/call\",era=\"{era}\",transport=\"{transport}\",outcome=\"ok\",code=\"\"}}"
        )
    };
    let legacy_ok = ok("legacy", "streamable_http");
    let modern_ok = ok("modern", "streamable_http");
    let refused = "droid_requests_total{method=\"tools/call\",era=\"modern\",transport=\"streamable_http\",outcome=\"error\",code=\"-32602\"}";
    let forwarded =
        "droid_upstream_calls_total{upstream=\"fixture\",method=\"tools/call\",outcome=\"ok\"}";
    let before = scrape(&address)?;
    assert!(call_tool(
        &address,
        "2025-11-25",
        "fixture/test_simple_text"
    )?);
    assert!(call_tool(
        &address,
        "2026-07-28",
        "fixture/test_simple_text"
    )?);
    assert!(call_tool(
        &address,
        "2026-07-28",
        "fixture/test_simple_text"
    )?);
    assert!(!call_tool(&address, "2026-07-28", "fixture/no_such_tool")?);
    let after = scrape(&address)?;
    assert_eq!(value(&after, &legacy_ok) - value(&before, &legacy_ok), 1.0);
    assert_eq!(value(&after, &modern_ok) - value(&before, &modern_ok), 2.0);
    assert_eq!(value(&after, refused) - value(&before, refused), 1.0);
    assert_eq!(value(&after, forwarded) - value(&before, forwarded), 3.0);
    assert_eq!(
        value(
            &after,
            "droid_upstream_call_duration_seconds_count{upstream=\"fixture\"}"
        ) - value(
            &before,
            "droid_upstream_call_duration_seconds_count{upstream=\"fixture\"}"
        ),
        3.0
    );
    assert_eq!(
        value(
            &after,
            "droid_requests_in_flight{transport=\"streamable_http\"}"
        ),
        0.0
    );
    assert_eq!(
        value(&after, "droid_upstream_up{upstream=\"fixture\"}"),
        1.0
    );
    assert_eq!(
        after.get("droid_upstream_up{upstream=\"broken\"}"),
        Some(&0.0)
    );
    // The legacy call's client ended its session when done.
    assert_eq!(after.get("droid_sessions"), Some(&0.0));
    Ok(())
}

mod traces {
    use std::sync::{Arc, Mutex};

    use serde_json::Value;

    use super::*;

    /// An OTLP/HTTP collector on loopback: every body posted to it, kept.
    struct Collector {
        address: String,
        bodies: Arc<Mutex<Vec<String>>>,
    }

    impl Collector {
        fn start() -> Result<Self, TestError> {
            use std::io::{BufRead as _, BufReader, Read as _};

            let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
            let address = listener.local_addr()?.to_string();
            let bodies = Arc::new(Mutex::new(Vec::new()));
            let kept = Arc::clone(&bodies);
            std::thread::spawn(move || {
                for stream in listener.incoming().flatten() {
                    let mut reader = BufReader::new(stream);
                    let mut length = 0;
                    let mut line = String::new();
                    while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                        if line == "\r\n" {
                            break;
                        }
                        if let Some((name, value)) = line.split_once(':') {
                            if name.eq_ignore_ascii_case("content-length") {
                                length = value.trim().parse().unwrap_or(0);
                            }
                        }
                        line.clear();
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_ok() {
                        if let Ok(mut bodies) = kept.lock() {
                            bodies.push(String::from_utf8_lossy(&body).into_owned());
                        }
                    }
                    let _answered = reader.get_mut().write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                          Content-Length: 2\r\nConnection: close\r\n\r\n{}",
                    );
                }
            });
            Ok(Self { address, bodies })
        }

        /// Every span received: its service's name and the span.
        fn spans(&self) -> Vec<(String, Value)> {
            let bodies = self.bodies.lock().map(|b| b.clone()).unwrap_or_default();
            let mut spans = Vec::new();
            for body in bodies {
                let Ok(export) = serde_json::from_str::<Value>(&body) else {
                    continue;
                };
                for resource in export["resourceSpans"].as_array().into_iter().flatten() {
                    let service = resource["resource"]["attributes"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .find(|a| a["key"] == "service.name")
                        .and_then(|a| a["value"]["stringValue"].as_str())
                        .unwrap_or_default()
                        .to_owned();
                    for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                        for span in scope["spans"].as_array().into_iter().flatten() {
                            spans.push((service.clone(), span.clone()));
                        }
                    }
                }
            }
            spans
        }
    }

    /// A string attribute of an exported span.
    fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a str> {
        span["attributes"]
            .as_array()?
            .iter()
            .find(|a| a["key"] == key)?["value"]["stringValue"]
            .as_str()
    }

    /// A client's `traceparent` continues through the gateway: the
    /// gateway's span for the call is in the client's trace with the
    /// client's span as its parent, and the upstream's span for the request
    /// the gateway made is in the same trace with the gateway's span as
    /// its parent, so the gateway handed on its own context, not the
    /// client's. Neither span carries the call's arguments.
    #[test]
    fn a_trace_sent_in_meta_reaches_the_upstream_through_the_gateway() -> Result<(), TestError> {
        let collector = Collector::start()?;
        let endpoint = format!("http://{}", collector.address);
        let config = temp_path("traces", "toml");
        std::fs::write(
            &config,
            format!(
                "[[upstream]]\nname = \"fixture\"\n\
                 command = [{:?}, \"serve\", \"--otlp-endpoint\", \"{endpoint}\"]\n\
                 env = {{ OTEL_BSP_SCHEDULE_DELAY = \"100\" }}\n\
                 trust = \"on-first-use\"\n",
                env!("CARGO_BIN_EXE_droid")
            ),
        )?;
        let mut command = droid_command();
        command
            .args(["gateway", "--config"])
            .arg(&config)
            .args(["--listen", "127.0.0.1:0", "--otlp-endpoint", &endpoint])
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let (_gateway, address) = support::listening_with(command, "http")?;
        let _removed = std::fs::remove_file(&config);
        let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
        let client_span = "00f067aa0ba902b7";
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"fixture/test_simple_text","arguments":{{"secret":"hunter2"}},"_meta":{{"traceparent":"00-{trace_id}-{client_span}-01","tracestate":"vendor=1","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
        );
        let headers = [
            "MCP-Protocol-Version: 2026-07-28".to_owned(),
            "Mcp-Method: tools/call".to_owned(),
            "Mcp-Name: fixture/test_simple_text".to_owned(),
        ];
        let answer = raw_post(&address, &headers, &body)?;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        // Spans are sent in batches a tenth of a second apart.
        let mut spans = Vec::new();
        for _ in 0..300 {
            spans = collector.spans();
            let in_trace = spans
                .iter()
                .filter(|(_, s)| s["traceId"] == trace_id && s["name"] == "mcp.request")
                .count();
            if in_trace >= 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let requests: Vec<&Value> = spans
            .iter()
            .filter(|(service, s)| service == "droid" && s["traceId"] == trace_id)
            .map(|(_, span)| span)
            .collect();
        let gateway = requests
            .iter()
            .find(|s| s["parentSpanId"] == client_span)
            .ok_or_else(|| format!("no gateway span under the client's: {spans:?}"))?;
        assert_eq!(attribute(gateway, "method"), Some("tools/call"));
        assert_eq!(
            attribute(gateway, "primitive"),
            Some("fixture/test_simple_text")
        );
        assert_eq!(attribute(gateway, "outcome"), Some("ok"));
        let gateway_span = gateway["spanId"].as_str().ok_or("no span id")?;
        let upstream = requests
            .iter()
            .find(|s| s["parentSpanId"] == gateway_span)
            .ok_or_else(|| format!("no upstream span under the gateway's: {spans:?}"))?;
        assert_eq!(attribute(upstream, "primitive"), Some("test_simple_text"));
        let exported = format!("{spans:?}");
        assert!(!exported.contains("hunter2"), "{exported}");
        Ok(())
    }
}

/// `--log-format json` writes each log line as one JSON object, its message
/// and level at the top level, so a log collector reads it as it is.
#[test]
fn json_logs_are_one_object_a_line() -> Result<(), TestError> {
    use std::io::{BufRead as _, BufReader};

    let mut child = spawn_droid(
        &["--log-format", "json", "serve", "--listen", "127.0.0.1:0"],
        Stdio::null(),
        Stdio::null(),
        Stdio::piped(),
    )?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let _running = Running(child);
    let line = BufReader::new(stderr)
        .lines()
        .next()
        .ok_or("the server wrote no log line")??;
    let logged: serde_json::Value = serde_json::from_str(&line)?;
    assert_eq!(logged["level"], "WARN", "{line}");
    assert_eq!(logged["target"], "droid", "{line}");
    assert!(
        logged["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("listening on http://127.0.0.1:")),
        "{line}"
    );
    assert!(logged["timestamp"].is_string(), "{line}");
    Ok(())
}

/// Completions and the manual page are made from the command line's own
/// definition: every command and a global flag appear in both.
#[test]
fn completions_and_the_manual_page_cover_every_command() -> Result<(), TestError> {
    let commands = [
        "serve",
        "bridge",
        "call",
        "gateway",
        "acp",
        "revisions",
        "completions",
        "man",
    ];
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = succeeded(&["completions", shell])?;
        for word in commands.iter().chain(&["log-format"]) {
            assert!(script.contains(word), "{shell} completions lack {word}");
        }
    }
    let page = succeeded(&["man"])?;
    assert!(page.contains(".TH droid 1"), "{page}");
    assert!(
        page.contains("2026\\-07\\-28"),
        "the version line names the revisions"
    );
    for word in commands.iter().chain(&["\\-\\-log\\-format"]) {
        assert!(page.contains(word), "the manual page lacks {word}");
    }
    let refusal = refused(&["completions", "tcsh"], "a shell without completions")?;
    assert!(refusal.contains("invalid value 'tcsh'"), "{refusal}");
    Ok(())
}

#[test]
fn log_lines_written_to_a_file_or_pipe_carry_no_colour_codes() -> Result<(), TestError> {
    // An MCP client keeps a server's stderr in a log file: escape codes
    // there are noise.
    let config = temp_path("unstartable", "json");
    std::fs::write(
        &config,
        r#"{"mcpServers":{"broken":{"command":"/nonexistent/droid-test-server"}}}"#,
    )?;
    let config_arg = config.to_string_lossy().into_owned();
    let out = droid(&["gateway", "--config", &config_arg, "--print-digests"])?;
    let _removed = std::fs::remove_file(&config);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("WARN"), "a warning was logged: {stderr}");
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
    Ok(())
}
