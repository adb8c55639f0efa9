//! `droid gateway` as an operator runs it: configurations in the forms users
//! keep, upstreams that fail or die, and trust that outlives a restart.
//! The upstreams are `droid serve`, started by the gateway as a user's
//! configuration says.

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod support;

use protocol_droid_test_support::running;
use support::{Files, TestError, droid_command, listening, raw_post, session_id};

/// How long anything here may take before the test gives up: a bound on a
/// hang, not a measurement.
const PATIENCE: Duration = Duration::from_secs(60);

const DROID: &str = env!("CARGO_BIN_EXE_droid");

/// Runs `droid ARGS` to the end, keeping any state it writes in `state`.
fn droid(args: &[&str], state: &Path) -> Result<Output, TestError> {
    Ok(droid_command()
        .args(args)
        .env("XDG_STATE_HOME", state)
        .output()?)
}

/// An upstream called `name` that is `droid serve`, trusted on first use,
/// in the gateway's TOML.
fn served(name: &str) -> String {
    format!(
        "[[upstream]]\nname = {name:?}\ncommand = [{DROID:?}, \"serve\"]\ntrust = \"on-first-use\"\n"
    )
}

/// `--print-digests` of the gateway configured by `config`: each tool id
/// with its provenance, and the whole output for messages.
fn digests(config: &str, state: &Path) -> Result<(Vec<(String, String)>, Output), TestError> {
    let out = droid(&["gateway", "--config", config, "--print-digests"], state)?;
    let tools = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let id = words.next()?.to_owned();
            let provenance = words.nth(1)?.to_owned();
            Some((id, provenance))
        })
        .collect();
    Ok((tools, out))
}

/// `--print-digests` of a configuration whose every upstream must list.
fn listed(config: &str, state: &Path) -> Result<Vec<(String, String)>, TestError> {
    let (tools, out) = digests(config, state)?;
    if !out.status.success() {
        return Err(format!("listing failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(tools)
}

/// Asserts that `id` is listed in `tools` with `provenance`.
fn assert_provenance(tools: &[(String, String)], id: &str, provenance: &str) {
    assert_eq!(
        provenance_of(tools, id),
        Some(provenance),
        "{id} in {tools:?}"
    );
}

fn provenance_of<'a>(tools: &'a [(String, String)], id: &str) -> Option<&'a str> {
    tools
        .iter()
        .find(|(tool, _)| tool == id)
        .map(|(_, provenance)| provenance.as_str())
}

/// Calls `tool` with `arguments` through the gateway at `address`, with
/// the project's own client: its stdout, or its stderr on failure.
fn call(address: &str, tool: &str, arguments: &str) -> Result<Result<String, String>, TestError> {
    let params = format!(r#"{{"name": "{tool}", "arguments": {arguments}}}"#);
    request(address, "tools/call", &params)
}

/// Sends `method` with `params` to the gateway at `address`, with the
/// project's own client: its stdout, or its stderr on failure.
fn request(address: &str, method: &str, params: &str) -> Result<Result<String, String>, TestError> {
    let out = Command::new(DROID)
        .args(["call", &format!("http://{address}/mcp"), method, params])
        .env("RUST_BACKTRACE", "0")
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(Ok(stdout))
    } else {
        Ok(Err(format!(
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

/// An upstream that cannot start is reported by name; the others serve.
#[test]
fn an_upstream_that_cannot_start_does_not_stop_the_others() -> Result<(), TestError> {
    let scratch = Files::fresh("droid-gateway-broken")?;
    let config = scratch.write(
        "gateway.toml",
        &format!(
            "{}\n[[upstream]]\nname = \"broken\"\ncommand = [\"/nonexistent/mcp-server\"]\n\
             trust = \"on-first-use\"\n\
             [[upstream]]\nname = \"unfound\"\ncommand = [\"npx-not-installed\", \"-y\", \"x\"]\n",
            served("fixture")
        ),
    )?;
    // Listing: the healthy upstream's tools, and a failure naming the other.
    let (tools, out) = digests(&config, scratch.dir())?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an incomplete list passed for whole");
    assert!(
        stderr.contains("upstream \"broken\"")
            && stderr.contains("/nonexistent/mcp-server does not exist (No such file"),
        "{stderr}"
    );
    // A bare name is looked for on the PATH: said, with the name.
    assert!(
        stderr.contains("npx-not-installed is not found on the PATH the server is given"),
        "{stderr}"
    );
    assert_provenance(&tools, "fixture/echo", "pinned");
    assert!(!tools.iter().any(|(id, _)| id.starts_with("broken/")));

    // Serving: the gateway listens and the healthy upstream answers.
    let (_gateway, address) = listening(
        &["gateway", "--config", &config, "--listen", "127.0.0.1:0"],
        "http",
    )?;
    let answer = call(&address, "fixture/echo", r#"{"text": "still here"}"#)?;
    assert!(
        answer.as_ref().is_ok_and(|out| out.contains("still here")),
        "{answer:?}"
    );
    // A name under the upstream that never came up is told of the outage,
    // as a tool of one that went down is, not answered as unknown; a name
    // under no upstream is unknown.
    let down = call(&address, "broken/anything", "{}")?;
    assert!(
        down.as_ref()
            .is_err_and(|e| e.contains("upstream broken is unavailable")),
        "{down:?}"
    );
    let nobody = call(&address, "nobody/anything", "{}")?;
    assert!(
        nobody.as_ref().is_err_and(|e| e.contains("unknown tool")),
        "{nobody:?}"
    );
    Ok(())
}

/// Opens a legacy session at `version` on the gateway at `address`: the
/// headers its requests carry.
fn open_session(address: &str, version: &str) -> Result<Vec<String>, TestError> {
    let hello = format!(
        r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{version}","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
    );
    let session = session_id(&raw_post(address, &[], &hello)?).ok_or("no session id")?;
    let headers = vec![
        format!("Mcp-Session-Id: {session}"),
        format!("MCP-Protocol-Version: {version}"),
    ];
    raw_post(
        address,
        &headers,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )?;
    Ok(headers)
}

/// An upstream's `timeout` counts its silence: a call longer than the
/// timeout whose upstream reports progress all along is answered, on a
/// 2026-07-28 upstream and on a legacy one, while the same call with no
/// progress asked for is cut off at the timeout.
#[test]
fn progress_keeps_a_call_longer_than_the_timeout_alive() -> Result<(), TestError> {
    let scratch = Files::fresh("droid-gateway-progress")?;
    let config = scratch.write(
        "gateway.toml",
        &format!(
            "state = {:?}\n\n{}timeout = 1\n\n[[upstream]]\nname = \"legacy\"\n\
             command = [{DROID:?}, \"serve\", \"--revisions\", \"2025-11-25\"]\n\
             trust = \"on-first-use\"\ntimeout = 1\n",
            scratch.path("state.json"),
            served("modern")
        ),
    )?;
    let (_gateway, address) = listening(
        &["gateway", "--config", &config, "--listen", "127.0.0.1:0"],
        "http",
    )?;
    let session = open_session(&address, "2025-11-25")?;
    for (upstream, first_id) in [("modern", 1), ("legacy", 3)] {
        // Up first: its tools listed within the gateway's first moments.
        let deadline = Instant::now() + PATIENCE;
        while call(&address, &format!("{upstream}/echo"), r#"{"text": "up"}"#)?.is_err() {
            assert!(Instant::now() < deadline, "{upstream} never came up");
            std::thread::sleep(Duration::from_millis(200));
        }
        let sleep = |id: u32, meta: &str| {
            raw_post(
                &address,
                &session,
                &format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{upstream}/sleep","arguments":{{"ms":2500}}{meta}}}}}"#
                ),
            )
        };
        let reported = sleep(first_id, r#","_meta":{"progressToken":"p1"}"#)?;
        assert!(
            reported.contains("Slept 2500 ms.") && reported.contains("notifications/progress"),
            "{upstream}: {reported}"
        );
        let silent = sleep(first_id + 1, "")?;
        assert!(
            silent.contains("within 1000 ms") && !silent.contains("Slept"),
            "{upstream}: {silent}"
        );
    }
    Ok(())
}

/// One session's slow calls cannot fill the connection every session
/// shares to a 2026-07-28 upstream: with as many of its calls outstanding
/// as the upstream runs at once (`droid serve` runs 256 at a time on
/// stdio), another session's call is answered while they still wait.
/// Before, it queued behind them.
#[test]
fn one_sessions_slow_calls_leave_the_shared_upstream_to_the_others() -> Result<(), TestError> {
    let (_gateway, address) = listening(&["gateway", "--listen", "127.0.0.1:0"], "http")?;
    let hog = open_session(&address, "2025-03-26")?;
    let calls: Vec<String> = (0..256)
        .map(|id| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"fixture/sleep","arguments":{{"ms":60000}}}}}}"#
            )
        })
        .collect();
    let batch = format!("[{}]", calls.join(","));
    let hogging = {
        let address = address.clone();
        std::thread::spawn(move || raw_post(&address, &hog, &batch))
    };
    // Time for the batch to reach the upstream; a bound, not a measurement.
    std::thread::sleep(Duration::from_secs(2));
    let other = open_session(&address, "2025-11-25")?;
    let reply = raw_post(
        &address,
        &other,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fixture/echo","arguments":{"text":"not kept waiting"}}}"#,
    )?;
    assert!(reply.contains("not kept waiting"), "{reply}");
    assert!(!hogging.is_finished(), "the slow calls are still out");
    Ok(())
}

/// A method nobody serves is refused saying so, in the client's revision.
#[test]
fn an_unknown_method_is_refused_by_name() -> Result<(), TestError> {
    let (_gateway, address) = listening(&["gateway", "--listen", "127.0.0.1:0"], "http")?;
    let session = open_session(&address, "2025-11-25")?;
    let reply = raw_post(
        &address,
        &session,
        r#"{"jsonrpc":"2.0","id":1,"method":"nosuch/thing"}"#,
    )?;
    assert!(reply.contains("-32601"), "{reply}");
    assert!(
        reply.contains("nosuch/thing is not a method of 2025-11-25 that this gateway can route"),
        "{reply}"
    );
    Ok(())
}

/// A 2025-11-25 client's handshake, written to `stdin`.
fn handshake(stdin: &mut impl std::io::Write) -> Result<(), TestError> {
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
    )?;
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )?;
    Ok(())
}

/// `droid gateway --config CONFIG` spoken to over its stdin and stdout, its
/// state kept in `state`, its stderr `stderr`.
fn stdio_gateway(
    config: &str,
    state: &Path,
    stderr: std::process::Stdio,
) -> Result<std::process::Child, TestError> {
    Ok(droid_command()
        .args(["gateway", "--config", config])
        .env("XDG_STATE_HOME", state)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .spawn()?)
}

/// A gateway over stdio whose config is `served("fixture")` beside an
/// upstream `stuck` running `command` (its `timeout` ten minutes), spoken
/// to a line at a time; its lines arrive on the receiver.
struct Stuck {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
    _scratch: Files,
}

impl Stuck {
    fn start(command: &str) -> Result<Self, TestError> {
        use std::io::BufRead as _;
        let scratch = Files::fresh("droid-gateway-stuck")?;
        let config = scratch.write(
            "gateway.toml",
            &format!(
                "{}\n[[upstream]]\nname = \"stuck\"\ncommand = {command}\n\
                 timeout = 600\ntrust = \"on-first-use\"\n",
                served("fixture")
            ),
        )?;
        let mut child = stdio_gateway(&config, scratch.dir(), std::process::Stdio::null())?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Self {
            child,
            stdin,
            lines,
            _scratch: scratch,
        })
    }

    /// Initializes, then answers the tools the gateway lists.
    fn tools(&mut self) -> Result<String, TestError> {
        use std::io::Write as _;
        let stdin = self.stdin.as_mut().ok_or("stdin closed")?;
        handshake(stdin)?;
        writeln!(stdin, r#"{{"jsonrpc":"2.0","id":2,"method":"tools/list"}}"#)?;
        loop {
            // Patience for a busy machine: the stuck upstream gives up only
            // after ten minutes.
            let line = self
                .lines
                .recv_timeout(PATIENCE)
                .map_err(|_| "no answer while an upstream hangs")?;
            if line.contains(r#""id":2"#) {
                return Ok(line);
            }
        }
    }
}

impl Drop for Stuck {
    fn drop(&mut self) {
        // Ended as a client ends it, so that it ends its upstreams; killed
        // only if it will not.
        drop(self.stdin.take());
        let deadline = Instant::now() + PATIENCE;
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _killed = self.child.kill();
        let _reaped = self.child.wait();
    }
}

/// An upstream that never answers (a process that does not read its
/// stdin, its `timeout` ten minutes) holds back neither the gateway's start
/// nor the others: a client is answered, the healthy upstream's tools
/// listed, while it still hangs.
#[test]
fn an_upstream_that_never_answers_holds_back_no_other() -> Result<(), TestError> {
    let mut gateway = Stuck::start(r#"["sleep", "600"]"#)?;
    let listed = gateway.tools()?;
    assert!(listed.contains("fixture/echo"), "{listed}");
    assert!(!listed.contains("stuck/"), "{listed}");
    Ok(())
}

/// What an upstream started of its own (through a wrapper, say) ends with
/// it when the gateway ends, as `end` ends it: none of its process group is
/// left.
fn children_end_with_the_gateway(
    tag: u32,
    end: impl FnOnce(&mut Stuck) -> Result<(), TestError>,
) -> Result<(), TestError> {
    // The shell starts a helper in the background, then becomes the server;
    // neither ever answers. The durations only make them recognisable, each
    // test's its own (`tag`), as tests run side by side.
    let (helper, server) = (format!("613.{tag}"), format!("614.{tag}"));
    let command = format!(r#"["sh", "-c", "sleep {helper} & exec sleep {server}"]"#);
    let (helper, server) = (["sleep", helper.as_str()], ["sleep", server.as_str()]);
    let mut gateway = Stuck::start(&command)?;
    gateway.tools()?;
    assert!(running(&helper) && running(&server), "the upstream started");
    end(&mut gateway)?;
    let deadline = Instant::now() + PATIENCE;
    while gateway.child.try_wait()?.is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        gateway.child.try_wait()?.is_some(),
        "the gateway did not end"
    );
    while (running(&helper) || running(&server)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!running(&server), "the upstream outlived the gateway");
    assert!(
        !running(&helper),
        "the upstream's own child outlived the gateway"
    );
    Ok(())
}

#[test]
fn an_upstreams_own_children_end_with_the_gateway_when_its_client_goes() -> Result<(), TestError> {
    children_end_with_the_gateway(1, |gateway| {
        drop(gateway.stdin.take());
        Ok(())
    })
}

#[test]
fn an_upstreams_own_children_end_with_the_gateway_when_it_is_told_to_stop() -> Result<(), TestError>
{
    // Its client still there, reading nothing: SIGTERM alone ends it.
    children_end_with_the_gateway(2, |gateway| {
        let stopped = Command::new("kill")
            .args(["-TERM", &gateway.child.id().to_string()])
            .status()?;
        assert!(stopped.success());
        Ok(())
    })
}

/// `--print-digests` of a gateway in front of `hostile.py FLAG`, trusted on
/// first use: each tool id with its provenance, and the whole output.
fn hostile_digests(flag: &str) -> Result<(Vec<(String, String)>, Output), TestError> {
    let hostile = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/hostile.py");
    let scratch = Files::fresh(&format!("droid-gateway-hostile{flag}"))?;
    let config = scratch.write(
        "gateway.toml",
        &format!(
            "[[upstream]]\nname = \"hostile\"\ncommand = [\"python3\", {hostile:?}, {flag:?}]\n\
             trust = \"on-first-use\"\n"
        ),
    )?;
    digests(&config, scratch.dir())
}

/// The gateway lists an upstream's tools once when it connects, not once
/// for itself and once more for the bridge it calls through.
#[test]
fn an_upstreams_tools_are_listed_once_at_start() -> Result<(), TestError> {
    let hostile = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/hostile.py");
    let scratch = Files::fresh("droid-gateway-listed-once")?;
    let record = scratch.path("listings");
    let config = scratch.write(
        "gateway.toml",
        &format!(
            "[[upstream]]\nname = \"hostile\"\ncommand = [\"python3\", {hostile:?}]\n\
             trust = \"on-first-use\"\nenv = {{ HOSTILE_RECORD = {record:?} }}\n"
        ),
    )?;
    let tools = listed(&config, scratch.dir())?;
    assert!(tools.iter().any(|(id, _)| id == "hostile/ok"), "{tools:?}");
    let listings = std::fs::read_to_string(&record)?;
    assert_eq!(listings.lines().count(), 1, "{listings}");
    Ok(())
}

/// A tool whose name carries terminal escapes and a direction override is
/// not offered (it could show in a client as another tool), and the log
/// that says so writes none of them as they are.
#[test]
fn a_tool_whose_name_shows_as_another_is_not_offered() -> Result<(), TestError> {
    let (tools, out) = hostile_digests("--spoof-names")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(tools.iter().any(|(id, _)| id == "hostile/ok"), "{stdout}");
    assert!(
        !tools
            .iter()
            .any(|(id, _)| id.starts_with("hostile/ok\u{1b}")),
        "{stdout}"
    );
    for written in [&stdout, &stderr] {
        assert!(
            !written.contains(['\u{1b}', '\u{7}', '\u{202e}']),
            "raw control characters reached the terminal: {written:?}"
        );
    }
    assert!(
        stderr.contains(r"ok\u{1b}]0;pwned\u{7}\u{1b}[2J\u{202e}evil"),
        "{stderr}"
    );
    Ok(())
}

/// A description cannot write a line of `search_tools`' answer: one that
/// holds a line break and text shaped as another tool's entry (a tool
/// that does not exist, marked pinned and active) stays inside its own,
/// quoted.
#[test]
fn a_description_cannot_pass_for_another_tools_search_entry() -> Result<(), TestError> {
    use std::io::{BufRead as _, Write as _};
    let mut gateway = Hostile::start_in(
        "--spoof-names",
        "droid-gateway-search-injection",
        "progressive",
    )?;
    writeln!(
        gateway.stdin,
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"search_tools","arguments":{{"query":"harmless"}}}}}}"#
    )?;
    let mut line = String::new();
    while !line.contains(r#""id":2,"#) {
        line.clear();
        if gateway.stdout.read_line(&mut line)? == 0 {
            return Err("the gateway ended before answering".into());
        }
    }
    let answer: serde_json::Value = serde_json::from_str(&line)?;
    let text = answer
        .pointer("/result/content/0/text")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| format!("no text: {answer}"))?;
    let entries: Vec<&str> = text.lines().collect();
    assert!(
        entries
            .iter()
            .any(|entry| entry.starts_with("hostile/injector ")),
        "{text}"
    );
    assert!(
        entries
            .iter()
            .all(|entry| entry.starts_with("hostile/injector ") || !entry.contains("hostile/evil")),
        "{text}"
    );
    assert!(
        entries
            .iter()
            .all(|entry| !entry.starts_with("hostile/evil")),
        "{text}"
    );
    // Nor by a separator some readers take for a line break.
    assert!(
        !text.contains(['\u{85}', '\u{2028}', '\u{2029}']),
        "{text:?}"
    );
    drop(gateway.stdin);
    let _status = gateway.child.wait()?;
    Ok(())
}

/// An upstream's `degrade` says what its answers may lose for an older
/// client: by default nothing (audio refused to a 2024-11-05 session,
/// naming the feature), with `permissive` whatever can be downgraded (the
/// audio described in text).
#[test]
fn an_upstreams_degrade_policy_says_what_an_older_clients_answers_may_lose() -> Result<(), TestError>
{
    use std::io::BufRead as _;
    for (degrade, expected) in [("strict", "AudioContent"), ("permissive", "audio/wav")] {
        let scratch = Files::fresh(&format!("droid-gateway-degrade-{degrade}"))?;
        let config = scratch.write(
            "gateway.toml",
            &format!(
                "[[upstream]]\nname = \"fixture\"\ncommand = [{:?}, \"serve\"]\n\
                 trust = \"on-first-use\"\ndegrade = {degrade:?}\n",
                env!("CARGO_BIN_EXE_droid")
            ),
        )?;
        let mut child = stdio_gateway(&config, scratch.dir(), std::process::Stdio::null())?;
        let mut stdin = child.stdin.take().ok_or("no stdin")?;
        let mut stdout = std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?);
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fixture/test_audio_content","arguments":{}}}"#,
        ] {
            writeln!(stdin, "{line}")?;
        }
        let mut line = String::new();
        while !line.contains(r#""id":2,"#) {
            line.clear();
            if stdout.read_line(&mut line)? == 0 {
                return Err(format!("{degrade}: the gateway ended before answering").into());
            }
        }
        assert!(line.contains(expected), "{degrade}: {line}");
        drop(stdin);
        let _status = child.wait()?;
    }
    Ok(())
}

/// Tools an upstream lists wrong (no input schema, a number for a name,
/// a string for an input) are left out, and only they: the upstream's other
/// tools are offered.
#[test]
fn an_upstreams_bad_tools_cost_it_only_those_tools() -> Result<(), TestError> {
    let (tools, out) = hostile_digests("--bad-tools")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(tools.iter().any(|(id, _)| id == "hostile/ok"), "{tools:?}");
    for bad in ["hostile/schemaless", "hostile/7", "hostile/stringly"] {
        assert!(!tools.iter().any(|(id, _)| id == bad), "{bad}: {tools:?}");
    }
    // Each of 201 that reach the gateway is refused, a few named in the
    // log, the rest counted in a line.
    let named = stderr.matches("it is not offered").count();
    assert!((1..=16).contains(&named), "{named} lines name a tool");
    assert!(
        stderr.contains("more of the upstream's tools are not offered")
            && stderr.contains("more=185"),
        "{stderr}"
    );
    Ok(())
}

/// A gateway over stdio in front of `hostile.py FLAG` (trusted on first
/// use), its handshake made, its log read on a thread of its own.
struct Hostile {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    log: std::thread::JoinHandle<String>,
    _scratch: Files,
}

impl Hostile {
    fn start(flag: &str, scratch: &str) -> Result<Self, TestError> {
        Self::start_in(flag, scratch, "default")
    }

    /// [`Hostile::start`], the gateway in `mode`.
    fn start_in(flag: &str, scratch: &str, mode: &str) -> Result<Self, TestError> {
        use std::io::Read as _;
        let hostile = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/hostile.py");
        let scratch = Files::fresh(scratch)?;
        let flags = if flag.is_empty() {
            String::new()
        } else {
            format!(", {flag:?}")
        };
        let config = scratch.write(
            "gateway.toml",
            &format!(
                "mode = {mode:?}\n[[upstream]]\nname = \"hostile\"\n\
                 command = [\"python3\", {hostile:?}{flags}]\ntrust = \"on-first-use\"\n"
            ),
        )?;
        let mut child = stdio_gateway(&config, scratch.dir(), std::process::Stdio::piped())?;
        let mut stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut stderr = child.stderr.take().ok_or("no stderr")?;
        let log = std::thread::spawn(move || {
            let mut text = String::new();
            let _read = stderr.read_to_string(&mut text);
            text
        });
        handshake(&mut stdin)?;
        Ok(Self {
            child,
            stdin,
            stdout,
            log,
            _scratch: scratch,
        })
    }
}

/// An upstream whose every listing renames its tools costs the log a few
/// lines for each listing, not one for each tool that changed.
#[test]
fn a_listing_that_changes_many_tools_is_logged_in_a_few_lines() -> Result<(), TestError> {
    use std::io::{BufRead as _, Write as _};
    let mut gateway = Hostile::start("--churn", "droid-gateway-churn-log")?;
    let mut id = 1;
    let mut line = String::new();
    // Sends a request of `method` (the id given) and reads up to its answer.
    let mut ask = |method: &str, line: &mut String| -> Result<(), TestError> {
        id += 1;
        writeln!(
            gateway.stdin,
            r#"{{"jsonrpc":"2.0","id":{id},"method":{method}}}"#
        )?;
        let answer = format!(r#""id":{id},"#);
        loop {
            line.clear();
            if gateway.stdout.read_line(line)? == 0 {
                return Err("the gateway ended before answering".into());
            }
            if line.contains(&answer) {
                return Ok(());
            }
        }
    };
    // The tools of the first listing the gateway applies were trusted.
    ask(r#""tools/list""#, &mut line)?;
    assert!(line.contains("hostile/churn-"), "{line}");
    // The next renames them all, so each is gone and its new name
    // unverified: listed until the old names have left the catalog.
    ask(
        r#""tools/call","params":{"name":"hostile/changed","arguments":{}}"#,
        &mut line,
    )?;
    let deadline = Instant::now() + PATIENCE;
    loop {
        ask(r#""tools/list""#, &mut line)?;
        if !line.contains("hostile/churn-") {
            break;
        }
        assert!(Instant::now() < deadline, "the tools never changed: {line}");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(gateway.stdin);
    let _ended = gateway.child.wait()?;
    let log = gateway.log.join().map_err(|_| "the log reader failed")?;
    let named = log
        .matches("an upstream changed a tool's definition")
        .count();
    assert!(
        (1..=16).contains(&named),
        "{named} lines name a tool:\n{log}"
    );
    assert!(
        log.contains("more of the upstream's tools changed") && log.contains("more=184"),
        "{log}"
    );
    Ok(())
}

/// A tool an upstream lists twice is neither trusted nor offered, in
/// either of its forms; the upstream's other tools are.
#[test]
fn a_tool_listed_twice_is_not_offered() -> Result<(), TestError> {
    let (tools, out) = hostile_digests("--repeat-names")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!tools.iter().any(|(id, _)| id == "hostile/ok"), "{tools:?}");
    assert!(
        tools.iter().any(|(id, _)| id == "hostile/hang"),
        "{tools:?}"
    );
    assert!(stderr.contains("more than once"), "{stderr}");
    Ok(())
}

/// A flood an upstream sends to a client that reads slowly costs that
/// client the notifications its queue cannot hold, and the operator a few
/// log lines, not one per notification dropped.
#[test]
fn a_flood_to_a_slow_reader_is_logged_in_a_few_lines() -> Result<(), TestError> {
    use std::io::{BufRead as _, Write as _};
    let mut gateway = Hostile::start("", "droid-gateway-flood-log")?;
    writeln!(
        gateway.stdin,
        r#"{{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{{"level":"debug"}}}}"#
    )?;
    writeln!(
        gateway.stdin,
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"hostile/flood","arguments":{{}}}}}}"#
    )?;
    // Nothing read for a while: the pipe and the queue behind it fill, and
    // most of the 20,000 log lines are dropped.
    std::thread::sleep(Duration::from_secs(3));
    let mut line = String::new();
    loop {
        line.clear();
        if gateway.stdout.read_line(&mut line)? == 0 {
            return Err("the gateway ended before answering".into());
        }
        if line.contains(r#""id":3"#) {
            break;
        }
    }
    assert!(line.contains("flooded"), "{line}");
    drop(gateway.stdin);
    let _ended = gateway.child.wait()?;
    let log = gateway.log.join().map_err(|_| "the log reader failed")?;
    let dropped = log.matches("a notification was dropped").count();
    assert!(
        dropped >= 1,
        "nothing was dropped, so nothing was tested:\n{log}"
    );
    assert!(dropped <= 5, "{dropped} lines for the drops");
    Ok(())
}

/// A stdio upstream that dies is started again; while it is down a call
/// is refused saying so, never left to hang.
#[test]
fn a_dead_stdio_upstream_is_started_again() -> Result<(), TestError> {
    let scratch = Files::fresh("droid-gateway-restart")?;
    let pids = scratch.dir().join("pids");
    // The shell writes its pid, then becomes the server: the pid is the
    // server's.
    let script = format!("echo $$ >> {}; exec {DROID} serve", pids.display());
    let config = scratch.write(
        "gateway.toml",
        &format!(
            "state = {:?}\n[[upstream]]\nname = \"fixture\"\ncommand = [\"sh\", \"-c\", {script:?}]\n\
             trust = \"on-first-use\"\ntimeout = 20\n",
            scratch.path("state.json")
        ),
    )?;
    let (_gateway, address) = listening(
        &["gateway", "--config", &config, "--listen", "127.0.0.1:0"],
        "http",
    )?;
    let first = call(&address, "fixture/echo", r#"{"text": "one"}"#)?;
    assert!(
        first.as_ref().is_ok_and(|out| out.contains("one")),
        "{first:?}"
    );
    let started = std::fs::read_to_string(&pids)?;
    let pid = started
        .lines()
        .next()
        .ok_or("no pid written")?
        .trim()
        .to_owned();
    let killed = Command::new("kill").args(["-9", &pid]).status()?;
    assert!(killed.success(), "kill {pid} failed");

    let deadline = Instant::now() + PATIENCE;
    let mut refusals = Vec::new();
    // What names its prompts and resources is refused alike meanwhile:
    // the upstream is unavailable, not the item unknown.
    let others = [
        ("prompts/get", r#"{"name": "fixture/test_simple_prompt"}"#),
        ("resources/read", r#"{"uri": "fixture+test://static-text"}"#),
    ];
    let mut others_refused = 0;
    loop {
        match call(&address, "fixture/echo", r#"{"text": "two"}"#)? {
            Ok(out) if out.contains("two") => break,
            Ok(out) => refusals.push(out),
            Err(refused) => refusals.push(refused),
        }
        for (method, params) in others {
            if let Err(refused) = request(&address, method, params)? {
                others_refused += 1;
                refusals.push(refused);
            }
        }
        assert!(
            Instant::now() < deadline,
            "the upstream never came back after {} refusals; the last: {:?}",
            refusals.len(),
            refusals.last()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The first call went out at once after the kill, and a reopening
    // waits at least the first backoff (0.5 s): it was refused.
    assert!(
        !refusals.is_empty(),
        "no call was refused between the kill and the restart"
    );
    // The first round's prompt and resource went out as soon as its call
    // was refused, well within that backoff.
    assert!(others_refused >= 2, "{refusals:?}");
    // Every refusal in between named the upstream (why is the operator's).
    for refusal in &refusals {
        assert!(
            refusal.contains("upstream fixture"),
            "a refusal that does not say which upstream: {refusal}"
        );
    }
    let restarted = std::fs::read_to_string(&pids)?;
    assert_eq!(restarted.lines().count(), 2, "{restarted}");
    Ok(())
}

/// An upstream that comes up after a session listed the prompts and
/// resources, and one whose connection ends, change those lists: the
/// session hears so, as it does of the tools.
#[test]
fn an_upstream_coming_and_going_is_announced_in_every_list() -> Result<(), TestError> {
    use std::io::Write as _;
    let scratch = Files::fresh("droid-gateway-lists-announced")?;
    let (go, pids) = (scratch.dir().join("go"), scratch.dir().join("pids"));
    // Held back until the session has listed; the pid is the server's.
    let script = format!(
        "while [ ! -e {} ]; do sleep 0.1; done; echo $$ >> {}; exec '{DROID}' serve",
        go.display(),
        pids.display()
    );
    let config = scratch.write(
        "gateway.toml",
        &format!(
            "state = {:?}\n[[upstream]]\nname = \"late\"\ncommand = [\"sh\", \"-c\", {script:?}]\n\
             trust = \"on-first-use\"\n",
            scratch.path("state.json")
        ),
    )?;
    let mut child = stdio_gateway(&config, scratch.dir(), std::process::Stdio::null())?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let lines = lines_of(child.stdout.take().ok_or("no stdout")?);
    handshake(&mut stdin)?;
    let list = |stdin: &mut std::process::ChildStdin, id: u32| -> Result<String, TestError> {
        writeln!(
            stdin,
            r#"{{"jsonrpc":"2.0","id":{id},"method":"prompts/list"}}"#
        )?;
        Ok(wait_for(&lines, |l| l.contains(&format!(r#""id":{id},"#)))?.0)
    };
    let before = list(&mut stdin, 2)?;
    assert!(!before.contains("late/"), "{before}");
    // Both lists' changes, in either order, each said once.
    let announced = |what: &str| -> Result<(), TestError> {
        let mut heard = Vec::new();
        while !["prompts", "resources"].iter().all(|list| {
            heard
                .iter()
                .any(|l: &String| l.contains(&format!("{list}/list_changed")))
        }) {
            let (line, _) = wait_for(&lines, |l| {
                l.contains("prompts/list_changed") || l.contains("resources/list_changed")
            })?;
            heard.push(line);
        }
        assert_eq!(heard.len(), 2, "{what}: {heard:?}");
        Ok(())
    };
    std::fs::write(&go, "")?;
    announced("up")?;
    let after = list(&mut stdin, 3)?;
    assert!(after.contains("late/test_simple_prompt"), "{after}");

    // Gone, and held back from coming again: what is heard is its going.
    std::fs::remove_file(&go)?;
    let pid = std::fs::read_to_string(&pids)?.trim().to_owned();
    let killed = Command::new("kill").args(["-9", &pid]).status()?;
    assert!(killed.success(), "kill {pid} failed");
    announced("down")?;
    let gone = list(&mut stdin, 4)?;
    assert!(!gone.contains("late/"), "{gone}");
    drop(stdin);
    let _ended = child.wait();
    Ok(())
}

/// What was trusted on first use holds after a restart: a tool whose
/// definition changed in between is unverified, not trusted anew.
#[test]
fn trust_on_first_use_outlives_a_restart() -> Result<(), TestError> {
    let scratch = Files::fresh("droid-gateway-tofu")?;
    let upstream = served("fixture");
    let config = scratch.write("gateway.toml", &upstream)?;
    let first = listed(&config, scratch.dir())?;
    assert_provenance(&first, "fixture/echo", "pinned");
    // Looking at the tools trusted none of them: nothing was kept.
    let state = scratch.dir().join("droid").join("gateway");
    assert!(!state.exists(), "--print-digests wrote {}", state.display());

    // Serving uses them first: the pins are kept in the state directory,
    // named after the file, before the gateway listens.
    let mut serving = droid_command();
    serving
        .args(["gateway", "--config", &config, "--listen", "127.0.0.1:0"])
        .env("XDG_STATE_HOME", scratch.dir())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    drop(support::listening_with(serving, "http")?);
    // Beside the admin socket, which is named the same way, and the lock
    // its writers take.
    let kept = std::fs::read_dir(&state)?
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .path()
                .extension()
                .is_none_or(|e| e != "sock" && e != "lock")
        })
        .count();
    assert_eq!(kept, 1);

    // The same configuration, but what a model reads of `echo` differs.
    let changed = format!(
        "{upstream}tools = {{ descriptions = {{ echo = \"Sends your text somewhere else.\" }} }}\n"
    );
    std::fs::write(&config, &changed)?;
    let second = listed(&config, scratch.dir())?;
    assert_provenance(&second, "fixture/echo", "unverified");
    assert_provenance(&second, "fixture/add", "pinned");

    // Without the kept state the change would have been trusted: the state
    // is what made the difference.
    std::fs::remove_dir_all(scratch.dir().join("droid"))?;
    let fresh = listed(&config, scratch.dir())?;
    assert_provenance(&fresh, "fixture/echo", "pinned");
    Ok(())
}

/// An `mcpServers` file as Claude Desktop and Cursor keep it is served as it
/// is: variables expanded, disabled servers left out, the tool policy of
/// the TOML form not needed.
#[test]
fn an_mcp_servers_file_is_served_as_it_is() -> Result<(), TestError> {
    let scratch = Files::fresh("droid-gateway-json")?;
    let config = scratch.write(
        "mcp.json",
        &format!(
            r#"{{
              "mcpServers": {{
                "fixture": {{ "command": {DROID:?}, "args": ["serve"], "env": {{ "FROM_HOME": "${{env:HOME}}" }}, "disable": true, "autoApprove": ["echo"] }},
                "off": {{ "command": "/nonexistent/mcp-server", "disabled": true }}
              }},
              "globalShortcut": "Ctrl+Space"
            }}"#
        ),
    )?;
    let (tools, out) = digests(&config, scratch.dir())?;
    assert_provenance(&tools, "fixture/echo", "pinned");
    assert!(
        !tools.iter().any(|(id, _)| id.starts_with("off/")),
        "{tools:?}"
    );
    // A setting not read here (a misspelt `disabled`) is said, not passed
    // over in silence.
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains(r#"server "fixture": "disable" is not a setting read here"#),
        "{said}"
    );
    // What another client keeps there for itself is passed over in silence.
    assert!(!said.contains("autoApprove"), "{said}");

    // A variable that is not set stops it, naming the variable.
    let unset = scratch.write(
        "unset.json",
        r#"{ "servers": { "a": { "command": "x", "env": { "K": "${env:DROID_TEST_NOT_SET}" } } } }"#,
    )?;
    let out = droid(
        &["gateway", "--config", &unset, "--print-digests"],
        scratch.dir(),
    )?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("DROID_TEST_NOT_SET is not set") && stderr.contains("server \"a\""),
        "{stderr}"
    );
    Ok(())
}

/// `droid ARGS` given at most `PATIENCE` to end (then killed): what it
/// wrote to stderr, and whether it succeeded; `None` if it never ended.
fn ended_within(args: &[&str], state: &Path) -> Result<Option<(bool, String)>, TestError> {
    let mut child = droid_command()
        .args(args)
        .env("XDG_STATE_HOME", state)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait()? {
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                pipe.read_to_string(&mut stderr)?;
            }
            return Ok(Some((status.success(), stderr)));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _killed = child.kill();
    let _reaped = child.wait();
    Ok(None)
}

/// Files an operator names that are not what they should be are refused
/// at once, saying so: a FIFO (which would block the reader for good), a
/// pipe (read once, and empty when read again), a token that cannot be
/// sent as one; and a syntax error is placed without quoting its line,
/// which may hold a secret.
#[test]
fn files_that_cannot_be_a_configuration_or_a_token_are_refused_plainly() -> Result<(), TestError> {
    let scratch = Files::fresh("droid-gateway-files")?;
    let fifo = scratch.path("fifo.toml");
    let made = Command::new("mkfifo").arg(&fifo).status()?;
    assert!(made.success());
    let print = |config: &str| {
        ended_within(
            &["gateway", "--config", config, "--print-digests"],
            scratch.dir(),
        )
    };
    let said = print(&fifo)?.ok_or("a FIFO as the configuration hung the gateway")?;
    assert!(
        !said.0 && said.1.contains("is not a regular file"),
        "{}",
        said.1
    );

    // A token file that is a FIFO, and one whose token breaks a header.
    for (name, token_file) in [
        ("fifo", scratch.path("token.fifo")),
        ("broken", scratch.write("token", "abc\ndef\n")?),
    ] {
        if name == "fifo" {
            assert!(Command::new("mkfifo").arg(&token_file).status()?.success());
        }
        let config = scratch.write(
            &format!("token-{name}.toml"),
            &format!(
                "[[upstream]]\nname = \"web\"\nurl = \"http://127.0.0.1:9/mcp\"\nbearer_token_file = {token_file:?}\n"
            ),
        )?;
        let said =
            print(&config)?.ok_or_else(|| format!("the {name} token file hung the gateway"))?;
        let why = if name == "fifo" {
            "is not a regular file"
        } else {
            "a bearer token cannot carry"
        };
        assert!(!said.0 && said.1.contains(why), "{name}: {}", said.1);
    }

    let broken = scratch.write(
        "broken.toml",
        "[[upstream]]\nname = \"web\"\nurl = \"http://127.0.0.1:9/mcp\"\n\
         headers = { \"X-Api-Key\" = \"sk-live-SECRET\", }\n",
    )?;
    let said = print(&broken)?.ok_or("a broken file hung the gateway")?;
    assert!(
        !said.0 && said.1.contains("at line 4, column"),
        "{}",
        said.1
    );
    assert!(!said.1.contains("sk-live-SECRET"), "{}", said.1);
    Ok(())
}

/// SIGHUP asks for a reload: a gateway with no file to read again (its
/// embedded default) goes on serving, rather than ending as the signal's
/// default action would.
#[test]
fn a_hangup_never_ends_the_gateway() -> Result<(), TestError> {
    let scratch = Files::fresh("droid-gateway-hangup")?;
    let mut command = droid_command();
    command
        .args(["gateway", "--listen", "127.0.0.1:0"])
        .env("XDG_STATE_HOME", scratch.dir())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let (mut gateway, address) = support::listening_with(command, "http")?;
    let pid = gateway.0.id().to_string();
    for _ in 0..3 {
        assert!(
            Command::new("kill")
                .args(["-HUP", &pid])
                .status()?
                .success()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(gateway.0.try_wait()?.is_none(), "SIGHUP ended the gateway");
    let answer = call(&address, "fixture/echo", r#"{"text": "still here"}"#)?;
    assert!(
        answer.as_ref().is_ok_and(|out| out.contains("still here")),
        "{answer:?}"
    );
    Ok(())
}

/// Runs `droid gateway ACTION` against the running gateway of `config`.
fn ask(config: &str, action: &[&str], state: &Path) -> Result<Output, TestError> {
    let mut args = vec!["gateway", "--config", config];
    args.extend_from_slice(action);
    droid(&args, state)
}

/// A configuration in `scratch` of the fixture upstream trusted on first
/// use, its state file and admin socket beside it: its text and its path.
fn with_state_and_socket(scratch: &Files) -> Result<(String, String), TestError> {
    let upstream = format!(
        "state = {:?}\nadmin_socket = {:?}\n\n{}",
        scratch.path("state.json"),
        scratch.path("admin.sock"),
        served("fixture"),
    );
    let config = scratch.write("gateway.toml", &upstream)?;
    Ok((upstream, config))
}

/// An operator sees a drifted tool in `status`, approves it on the running
/// gateway, and it is callable at once; after a restart the approval holds.
#[test]
fn a_drifted_tool_is_approved_on_the_running_gateway_and_stays_approved() -> Result<(), TestError> {
    let scratch = Files::fresh("droid-gateway-approve")?;
    let (upstream, config) = with_state_and_socket(&scratch)?;
    let (_gateway, address) = listening(
        &["gateway", "--config", &config, "--listen", "127.0.0.1:0"],
        "http",
    )?;
    let status = ask(&config, &["status"], scratch.dir())?;
    let shown = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("fixture") && l.contains(" up ")),
        "{shown}"
    );
    assert!(!shown.contains("awaiting approval"), "{shown}");

    // A line that is not UTF-8 is answered, not dropped.
    let mut socket = std::os::unix::net::UnixStream::connect(scratch.path("admin.sock"))?;
    socket.write_all(b"{\"status\xff\": true}\n")?;
    let mut reply = String::new();
    socket.read_to_string(&mut reply)?;
    assert!(
        reply.contains(r#""error":"not a request: "#) && reply.contains(r#""ok":false"#),
        "{reply}"
    );

    // Connections that say nothing hold only their own places: an
    // operator's `status` is answered meanwhile.
    let idle: Vec<std::os::unix::net::UnixStream> = (0..4)
        .map(|_| std::os::unix::net::UnixStream::connect(scratch.path("admin.sock")))
        .collect::<Result<_, _>>()?;
    let status = ask(&config, &["status"], scratch.dir())?;
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    // Past sixteen at once, a connection is told why it is closed.
    let more: Vec<std::os::unix::net::UnixStream> = (0..12)
        .map(|_| std::os::unix::net::UnixStream::connect(scratch.path("admin.sock")))
        .collect::<Result<_, _>>()?;
    std::thread::sleep(Duration::from_millis(200));
    let mut past = std::os::unix::net::UnixStream::connect(scratch.path("admin.sock"))?;
    past.set_read_timeout(Some(PATIENCE))?;
    let mut told = String::new();
    past.read_to_string(&mut told)?;
    assert!(
        told.contains("as many admin connections as it may"),
        "{told:?}"
    );
    drop((idle, more));

    // The configuration changes what a model reads of `echo`: the running
    // gateway reads it again, and `echo` no longer matches what was trusted.
    std::fs::write(
        &config,
        format!(
            "{upstream}tools = {{ descriptions = {{ echo = \"Sends your text somewhere else.\" }} }}\n"
        ),
    )?;
    let deadline = Instant::now() + PATIENCE;
    let awaiting = loop {
        let status = ask(&config, &["status"], scratch.dir())?;
        let shown = String::from_utf8_lossy(&status.stdout).into_owned();
        if shown.contains("awaiting approval") {
            break shown;
        }
        assert!(
            Instant::now() < deadline,
            "the change was never seen: {shown}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let shown = awaiting
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("fixture/echo@"))
        .ok_or_else(|| format!("fixture/echo is not awaiting approval: {awaiting}"))?
        .to_owned();
    // Held back, and the call says why: not an unknown tool, which a model
    // would take for the tool gone.
    let hidden = call(&address, "fixture/echo", r#"{"text": "one"}"#)?;
    assert!(
        hidden
            .as_ref()
            .is_err_and(|e| e.contains("fixture/echo changed since it was trusted")
                && e.contains("held back until an operator approves it")),
        "{hidden:?}"
    );

    // Approved on the running gateway: callable at once.
    // A digest other than the one shown is refused: approving is of what
    // was looked at.
    let stale = format!("fixture/echo@{}", "0".repeat(64));
    let refused = ask(&config, &["approve", &stale], scratch.dir())?;
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("fixture/echo changed since it was seen"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    // A digest cut short, as a narrow line shows it, is refused as a
    // digest, not taken for a tool of another name.
    let cut = shown.get(..shown.len() - 60).ok_or("a short digest")?;
    let refused = ask(&config, &["approve", cut], scratch.dir())?;
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("is not a digest"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    // The digest in capitals is the same digest.
    let (tool, digest) = shown.split_once('@').ok_or("no digest shown")?;
    let shouted = format!("{tool}@{}", digest.to_ascii_uppercase());
    let approved = ask(&config, &["approve", &shouted], scratch.dir())?;
    let said = String::from_utf8_lossy(&approved.stdout);
    assert!(
        approved.status.success(),
        "{}",
        String::from_utf8_lossy(&approved.stderr)
    );
    assert!(said.starts_with("approved fixture/echo"), "{said}");
    let answer = call(&address, "fixture/echo", r#"{"text": "two"}"#)?;
    assert!(
        answer.as_ref().is_ok_and(|out| out.contains("two")),
        "{answer:?}"
    );

    // A tool that does not exist is refused, and nothing is approved.
    let refused = ask(&config, &["approve", "fixture/nothing"], scratch.dir())?;
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("fixture/nothing is no upstream tool"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    // A file broken mid-edit leaves the gateway running as it was, and
    // `status` still finds it (the socket named after the path).
    let kept = std::fs::read_to_string(&config)?;
    std::fs::write(&config, format!("{kept}[[upstream]\n"))?;
    let status = ask(&config, &["status"], scratch.dir())?;
    assert!(
        status.status.success() && String::from_utf8_lossy(&status.stdout).contains("fixture"),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    std::fs::write(&config, kept)?;
    drop(_gateway);

    // After a restart the approval holds.
    let tools = listed(&config, scratch.dir())?;
    assert_provenance(&tools, "fixture/echo", "pinned");
    Ok(())
}

/// Calls `tool` on the gateway at `address` until `done` holds of the
/// outcome, for at most [`PATIENCE`]; the last outcome.
fn call_until(
    address: &str,
    tool: &str,
    done: impl Fn(&Result<String, String>) -> bool,
) -> Result<Result<String, String>, TestError> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let outcome = call(address, tool, r#"{"text": "x"}"#)?;
        if done(&outcome) || Instant::now() >= deadline {
            return Ok(outcome);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Two gateways started on one configuration (each client on a machine
/// starting its own) keep one state file: an approval made through the
/// first reaches the second at its next reload, and the second's first use
/// of a new upstream, written after, keeps the approval.
#[test]
fn two_gateways_on_one_configuration_keep_each_others_approvals() -> Result<(), TestError> {
    let scratch = Files::fresh("droid-gateway-two")?;
    let (upstream, config) = with_state_and_socket(&scratch)?;
    let start = || {
        listening(
            &["gateway", "--config", &config, "--listen", "127.0.0.1:0"],
            "http",
        )
    };
    let (first, at_first) = start()?;
    let up = call_until(&at_first, "fixture/echo", Result::is_ok)?;
    assert!(up.is_ok(), "{up:?}");
    let (second, at_second) = start()?;
    let up = call_until(&at_second, "fixture/echo", Result::is_ok)?;
    assert!(up.is_ok(), "{up:?}");

    // `echo` drifts on both; it is approved through the first, whose
    // socket is the one `approve` finds.
    let drifted = format!(
        "{upstream}tools = {{ descriptions = {{ echo = \"Sends your text elsewhere.\" }} }}\n"
    );
    std::fs::write(&config, &drifted)?;
    // Drifted is held back, saying so. (While the reload replaces the
    // upstream, a call is answered with the outage instead, which is not
    // the sign.)
    let drifted_away = |r: &Result<String, String>| {
        r.as_ref()
            .is_err_and(|e| e.contains("changed since it was trusted"))
    };
    for address in [&at_first, &at_second] {
        let hidden = call_until(address, "fixture/echo", drifted_away)?;
        assert!(drifted_away(&hidden), "{hidden:?}");
    }
    let approved = ask(&config, &["approve", "fixture/echo"], scratch.dir())?;
    assert!(
        approved.status.success(),
        "{}",
        String::from_utf8_lossy(&approved.stderr)
    );

    // A new upstream: both reload, the second reads the approval and
    // records the new upstream's first use.
    std::fs::write(&config, format!("{drifted}\n{}", served("second")))?;
    let answer = call_until(&at_second, "fixture/echo", Result::is_ok)?;
    assert!(
        answer.is_ok(),
        "the second gateway never read the approval: {answer:?}"
    );
    let second_up = call_until(&at_second, "second/echo", Result::is_ok)?;
    assert!(second_up.is_ok(), "{second_up:?}");

    // Again, with the second already holding the first approval: the newer
    // one, made through the first, replaces it at the second's next reload.
    let again = format!(
        "{upstream}tools = {{ descriptions = {{ echo = \"Sends it elsewhere again.\" }} }}\n\n{}",
        served("second")
    );
    std::fs::write(&config, &again)?;
    for address in [&at_first, &at_second] {
        let hidden = call_until(address, "fixture/echo", drifted_away)?;
        assert!(drifted_away(&hidden), "{hidden:?}");
    }
    let approved = ask(&config, &["approve", "fixture/echo"], scratch.dir())?;
    assert!(approved.status.success());
    std::fs::write(&config, format!("{again}# read again\n"))?;
    let answer = call_until(&at_second, "fixture/echo", Result::is_ok)?;
    assert!(
        answer.is_ok(),
        "the second gateway kept the older approval: {answer:?}"
    );
    drop((first, second));

    // The approval outlived the second gateway's write.
    let tools = listed(&config, scratch.dir())?;
    assert_provenance(&tools, "fixture/echo", "pinned");
    assert_provenance(&tools, "second/echo", "pinned");
    Ok(())
}

/// Upstreams added to and removed from the file are started and stopped on
/// the running gateway.
#[test]
fn upstreams_added_and_removed_from_the_file_follow_without_a_restart() -> Result<(), TestError> {
    let scratch = Files::fresh("droid-gateway-reload")?;
    let one = served("one");
    let two = served("two");
    let config = scratch.write(
        "gateway.toml",
        &format!("state = {:?}\n{one}", scratch.path("state.json")),
    )?;
    let (_gateway, address) = listening(
        &["gateway", "--config", &config, "--listen", "127.0.0.1:0"],
        "http",
    )?;
    let first = call(&address, "one/echo", r#"{"text": "a"}"#)?;
    assert!(
        first.as_ref().is_ok_and(|out| out.contains('a')),
        "{first:?}"
    );

    std::fs::write(
        &config,
        format!("state = {:?}\n{two}", scratch.path("state.json")),
    )?;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let added = call(&address, "two/echo", r#"{"text": "b"}"#)?;
        let removed = call(&address, "one/echo", r#"{"text": "c"}"#)?;
        if added.as_ref().is_ok_and(|out| out.contains('b'))
            && removed.as_ref().is_err_and(|e| e.contains("unknown tool"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the reload never took: two/echo {added:?}, one/echo {removed:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

/// A reload that replaces an upstream (here, a new `timeout`) lets the
/// calls already on it end there; new calls go to its replacement.
#[test]
fn a_call_in_flight_ends_on_the_upstream_a_reload_replaces() -> Result<(), TestError> {
    let scratch = Files::fresh("droid-gateway-replace")?;
    let state = format!("state = {:?}\n", scratch.path("state.json"));
    let config = scratch.write("gateway.toml", &format!("{state}{}", served("one")))?;
    let (gateway, address) = listening(
        &["gateway", "--config", &config, "--listen", "127.0.0.1:0"],
        "http",
    )?;
    let up = call(&address, "one/echo", r#"{"text": "up"}"#)?;
    assert!(up.as_ref().is_ok_and(|out| out.contains("up")), "{up:?}");
    let slow = {
        let address = address.clone();
        std::thread::spawn(move || call(&address, "one/sleep", r#"{"ms": 6000}"#))
    };
    // Time for the call to reach the upstream; a bound, not a measurement.
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::write(&config, format!("{state}{}timeout = 30\n", served("one")))?;
    let told = Command::new("kill")
        .args(["-HUP", &gateway.0.id().to_string()])
        .status()?;
    assert!(told.success());
    let answer = slow.join().map_err(|_| "the call's thread panicked")??;
    assert!(answer.is_ok(), "the call in flight failed: {answer:?}");
    // And the replacement serves.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let again = call(&address, "one/echo", r#"{"text": "again"}"#)?;
        if again.as_ref().is_ok_and(|out| out.contains("again")) {
            break;
        }
        assert!(Instant::now() < deadline, "never served again: {again:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

/// Each line `from` writes, on a channel, read on a thread of its own.
fn lines_of(from: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead as _;
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(from).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

/// The first of `lines` that `wanted` takes, and every line before it.
fn wait_for(
    lines: &std::sync::mpsc::Receiver<String>,
    wanted: impl Fn(&str) -> bool,
) -> Result<(String, Vec<String>), TestError> {
    let mut before = Vec::new();
    loop {
        let line = lines
            .recv_timeout(PATIENCE)
            .map_err(|_| format!("not seen; seen: {before:?}"))?;
        if wanted(&line) {
            return Ok((line, before));
        }
        before.push(line);
    }
}

/// The processes `pid` started that are still there (not yet reaped).
fn children_of(pid: u32) -> Result<Vec<String>, TestError> {
    let mut children = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let listed = std::fs::read_to_string(task?.path().join("children")).unwrap_or_default();
        children.extend(listed.split_whitespace().map(str::to_owned));
    }
    Ok(children)
}

/// A reload that changes an upstream's settings replaces it before the
/// break. While the replacement starts (here a command that waits two
/// seconds first), every call is served by the connection it replaces,
/// and a scope rule the new configuration drops stays in force; after, a
/// session still has its activation of a tool the replacement lists, was
/// told of no change, and the process replaced has ended. A tool the new
/// settings deny leaves at once, and a rule on it that the configuration
/// drops does not hold the replacement down. A replacement that cannot
/// start retires the old connection all the same.
#[test]
fn a_replaced_upstream_serves_on_until_its_replacement_is_up() -> Result<(), TestError> {
    use std::io::Write as _;
    let scratch = Files::fresh("droid-gateway-replace-activations")?;
    let head = format!(
        "mode = \"progressive\"\nstate = {:?}\n",
        scratch.path("state.json")
    );
    let upstream = |command: &str, settings: &str| {
        format!(
            "[[upstream]]\nname = \"one\"\ncommand = {command}\ntrust = \"on-first-use\"\n{settings}"
        )
    };
    let quick = format!("[{DROID:?}, \"serve\"]");
    let slow = format!("[\"sh\", \"-c\", \"sleep 2; exec '{DROID}' serve\"]");
    let rules = |tools: &[&str]| {
        let mut rules = String::from("[scopes]\n");
        for tool in tools {
            rules.push_str(&format!("\"one/{tool}\" = \"tools:{tool}\"\n"));
        }
        rules
    };
    let config = scratch.write(
        "gateway.toml",
        &format!("{head}{}{}", upstream(&quick, ""), rules(&["add", "sleep"])),
    )?;
    // At `info`, which says when a reload is done.
    let mut child = droid_command()
        .args(["gateway", "--config", &config])
        .env("XDG_STATE_HOME", scratch.dir())
        .env("DROID_LOG", "info")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let pid = child.id();
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let lines = lines_of(child.stdout.take().ok_or("no stdout")?);
    let log = lines_of(child.stderr.take().ok_or("no stderr")?);
    handshake(&mut stdin)?;
    let next_id = std::cell::Cell::new(1);
    let call = |stdin: &mut std::process::ChildStdin,
                tool: &str,
                arguments: &str|
     -> Result<(String, Vec<String>), TestError> {
        next_id.set(next_id.get() + 1);
        let id = next_id.get();
        writeln!(
            stdin,
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{arguments}}}}}"#
        )?;
        let answered = format!(r#""id":{id},"#);
        wait_for(&lines, |l| l.contains(&answered))
    };
    // `add` called by its exact id, as any client can without keeping an
    // activation: hidden while a rule needs a scope this caller lacks.
    const ADD: &str = r#"{"id":"one/add","arguments":{"a":1,"b":2}}"#;
    let served = |answer: &str, text: &str| {
        answer.contains(text) && !answer.contains(r#""error""#) && !answer.contains("isError")
    };
    let (activated, _) = call(&mut stdin, "activate_tools", r#"{"ids":["one/echo"]}"#)?;
    assert!(!activated.contains(r#""isError":true"#), "{activated}");
    let (first, _) = call(&mut stdin, "one/echo", r#"{"text":"before"}"#)?;
    assert!(served(&first, "before"), "{first}");
    let processes = |count: usize| -> Result<(), TestError> {
        let deadline = Instant::now() + PATIENCE;
        while children_of(pid)?.len() != count {
            assert!(
                Instant::now() < deadline,
                "upstream processes: {:?}, not {count}",
                children_of(pid)?
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    };
    processes(1)?;
    let reload = |body: String| -> Result<(), TestError> {
        std::fs::write(&config, format!("{head}{body}"))?;
        let told = Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()?;
        assert!(told.success());
        Ok(())
    };
    let reloaded = |line: &str| line.contains("configuration reloaded");

    // Calls `echo` (which must be served) and `add` (which must be
    // hidden) over and over until the reload is done; the line saying so,
    // how many rounds were made, and whatever else the session was told.
    let through_the_reload =
        |stdin: &mut std::process::ChildStdin| -> Result<(String, usize, Vec<String>), TestError> {
            let mut told = Vec::new();
            let mut rounds = 0;
            loop {
                if let Ok(line) = log.try_recv() {
                    if reloaded(&line) {
                        return Ok((line, rounds, told));
                    }
                    continue;
                }
                rounds += 1;
                let text = format!("round {rounds}");
                let (echoed, before) = call(stdin, "one/echo", &format!(r#"{{"text":"{text}"}}"#))?;
                assert!(
                    served(&echoed, &text),
                    "a call while the upstream was replaced: {echoed}"
                );
                told.extend(before);
                let (added, before) = call(stdin, "call_tool", ADD)?;
                told.extend(before);
                if !added.contains(r#""isError":true"#) {
                    // The rule dropped: the reload's last step, just before
                    // it says it is done. Not before the replacement was
                    // up: the old connection answered several rounds first
                    // (it takes two seconds to start).
                    assert!(
                        rounds >= 5,
                        "a rule was not in force meanwhile (round {rounds}): {added}"
                    );
                    let (line, _) = wait_for(&log, reloaded)?;
                    return Ok((line, rounds, told));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        };

    // A slow replacement: until it is up, `echo` is served by the old
    // connection; after, the activation holds, and the session was told
    // of no change.
    reload(format!(
        "{}{}",
        upstream(&slow, ""),
        rules(&["add", "sleep"])
    ))?;
    let (done, rounds, mut told) = through_the_reload(&mut stdin)?;
    assert!(done.contains("1 replaced"), "{done}");
    assert!(
        rounds >= 5,
        "only {rounds} rounds while the replacement started"
    );
    let (after, before) = call(&mut stdin, "one/echo", r#"{"text":"after"}"#)?;
    told.extend(before);
    assert!(
        served(&after, "after"),
        "the activation did not outlive the replacement: {after}"
    );
    // (Its prompts and resources may be said to have changed: its new
    // settings may offer others.)
    assert!(
        told.iter().all(|l| !l.contains("tools/list_changed")),
        "the session was told its tools changed: {told:?}"
    );
    processes(1)?;

    // Slow again, and the rule on `add` dropped: it holds until the
    // replacement is up, and not after. And `greet` denied: it leaves at
    // once, while the old connection still serves the rest.
    const GREET: &str = r#"{"id":"one/greet","arguments":{"name":"ada"}}"#;
    let (greeted, _) = call(&mut stdin, "call_tool", GREET)?;
    assert!(served(&greeted, "ada"), "{greeted}");
    reload(format!(
        "{}{}",
        upstream(&slow, "timeout = 30\ntools = { deny = [\"greet\"] }\n"),
        rules(&["sleep"])
    ))?;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (greeted, _) = call(&mut stdin, "call_tool", GREET)?;
        if greeted.contains(r#""isError":true"#) {
            break;
        }
        assert!(served(&greeted, "ada"), "{greeted}");
        assert!(Instant::now() < deadline, "greet was never withdrawn");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (done, rounds, _) = through_the_reload(&mut stdin)?;
    assert!(
        done.contains("1 replaced") && rounds >= 5,
        "{done}, {rounds} rounds"
    );
    let (added, _) = call(&mut stdin, "call_tool", ADD)?;
    assert!(served(&added, "3"), "the rule was not dropped: {added}");
    processes(1)?;

    // `sleep` denied, and its rule dropped: it leaves at once, and the
    // rule, naming a tool the replacement no longer lists, is no typo to
    // keep the replacement down for.
    reload(upstream(&quick, "tools = { deny = [\"sleep\"] }\n"))?;
    wait_for(&log, reloaded)?;
    let (echoed, _) = call(&mut stdin, "one/echo", r#"{"text":"denied"}"#)?;
    assert!(served(&echoed, "denied"), "{echoed}");
    processes(1)?;

    // A replacement that cannot start leaves nothing serving on the
    // settings it replaced: the old process ends, and calls are told of
    // the outage.
    reload(upstream("[\"/nonexistent/mcp-server\"]", ""))?;
    wait_for(&log, reloaded)?;
    let (refused, _) = call(&mut stdin, "one/echo", r#"{"text":"x"}"#)?;
    assert!(refused.contains("upstream one is unavailable"), "{refused}");
    processes(0)?;
    drop(stdin);
    let _status = child.wait()?;
    Ok(())
}

/// An upstream whose error page repeats the credentials it was sent (as
/// servers' and proxies' pages do) is quoted without them: the token and
/// the configured header's value are taken out of what the log and the
/// error say.
#[test]
fn credentials_an_upstream_echoes_are_not_repeated() -> Result<(), TestError> {
    use std::io::BufRead as _;
    let scratch = Files::fresh("droid-gateway-echoed-credentials")?;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/upstreams/faulty_http.py"
    );
    let mut server = Command::new("python3")
        .args([script, "echo-500"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let stdout = server.stdout.take().ok_or("no stdout")?;
    let _server = support::Running(server);
    let mut port = String::new();
    std::io::BufReader::new(stdout).read_line(&mut port)?;
    let config = scratch.write(
        "gateway.toml",
        &format!(
            "[[upstream]]\nname = \"echo\"\nurl = \"http://127.0.0.1:{}/mcp\"\n\
             bearer_token_env = \"DROID_TEST_ECHOED_TOKEN\"\n\
             headers = {{ \"X-Api-Key\" = \"key-kept-out-of-logs\" }}\n",
            port.trim()
        ),
    )?;
    let out = droid_command()
        .args(["gateway", "--config", &config, "--print-digests"])
        .env("XDG_STATE_HOME", scratch.dir())
        .env("DROID_TEST_ECHOED_TOKEN", "token-kept-out-of-logs")
        .env("DROID_LOG", "debug")
        .output()?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("Internal error. You sent: [redacted] key=[redacted]"),
        "{said}"
    );
    assert!(
        !said.contains("token-kept-out-of-logs") && !said.contains("key-kept-out-of-logs"),
        "{said}"
    );
    Ok(())
}

/// A configuration every user may change (it names the commands the
/// gateway runs) and a token file every user may read are said at start.
#[test]
fn files_others_may_change_or_read_are_said() -> Result<(), TestError> {
    use std::os::unix::fs::PermissionsExt as _;
    let scratch = Files::fresh("droid-gateway-open-files")?;
    let token = scratch.write("token", "token-in-an-open-file\n")?;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644))?;
    let config = scratch.write(
        "gateway.toml",
        &format!(
            "{}\n[[upstream]]\nname = \"web\"\nurl = \"http://127.0.0.1:9/mcp\"\n\
             bearer_token_file = {token:?}\ntimeout = 1\n",
            served("fixture")
        ),
    )?;
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o666))?;
    let (_, out) = digests(&config, scratch.dir())?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("writable by every user"), "{stderr}");
    assert!(stderr.contains("readable by every user"), "{stderr}");
    // Closed, neither is said.
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600))?;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600))?;
    let (_, out) = digests(&config, scratch.dir())?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("by every user"), "{stderr}");
    Ok(())
}

/// The resident set of process `pid`, in KiB.
fn rss_kib(pid: u32) -> Result<u64, TestError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .ok_or("no VmRSS")?;
    Ok(line.split_whitespace().nth(1).ok_or("no figure")?.parse()?)
}

/// An upstream that hangs, writes garbage, answers 100 MiB, floods
/// notifications or crashes: each call to it gets a clear error (or its
/// answer) within the upstream's timeout, the other upstream answers
/// throughout, and the gateway's memory stays bounded.
#[test]
fn a_hostile_upstream_takes_nothing_from_the_others() -> Result<(), TestError> {
    let scratch = Files::fresh("droid-gateway-hostile")?;
    let hostile = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upstreams/hostile.py");
    let config = scratch.write(
        "gateway.toml",
        &format!(
            "state = {:?}\n\n[[upstream]]\nname = \"hostile\"\ncommand = [\"python3\", {hostile:?}]\n\
             trust = \"on-first-use\"\ntimeout = 3\n\n{}",
            scratch.path("state.json"),
            served("fixture")
        ),
    )?;
    let (gateway, address) = listening(
        &["gateway", "--config", &config, "--listen", "127.0.0.1:0"],
        "http",
    )?;
    let pid = gateway.0.id();
    let ok = call(&address, "hostile/ok", "{}")?;
    assert!(ok.as_ref().is_ok_and(|out| out.contains("ok")), "{ok:?}");
    let started = rss_kib(pid)?;

    for (fault, said) in [
        ("hang", "no answer to tools/call within 3000 ms"),
        ("garbage", "no answer to tools/call within 3000 ms"),
        // The line past the reader's limit is dropped whole, and its
        // request ends at once rather than at its timeout.
        ("huge", "ran past the 16777216-byte limit"),
        // What the server said as it died is the operator's, in the log.
        (
            "crash",
            "upstream hostile: the upstream failed; the log says why",
        ),
    ] {
        // The upstream is up before each fault, so the error is the
        // fault's, not a restart's.
        let deadline = Instant::now() + PATIENCE;
        while call(&address, "hostile/ok", "{}")?.is_err() {
            assert!(
                Instant::now() < deadline,
                "hostile never came back before {fault}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let answer = call(&address, &format!("hostile/{fault}"), "{}")?;
        assert!(
            answer.as_ref().is_err_and(|e| e.contains(said)),
            "{fault}: {answer:?}"
        );
        // The other upstream is untouched.
        let fixture = call(&address, "fixture/echo", r#"{"text": "unaffected"}"#)?;
        assert!(
            fixture.as_ref().is_ok_and(|out| out.contains("unaffected")),
            "after {fault}: {fixture:?}"
        );
    }
    // A flood is read and passed over; the call still gets its answer, and
    // the hostile upstream (restarted after its crash) serves again.
    let deadline = Instant::now() + PATIENCE;
    let flooded = loop {
        let answer = call(&address, "hostile/flood", "{}")?;
        if answer.is_ok() || Instant::now() > deadline {
            break answer;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        flooded.as_ref().is_ok_and(|out| out.contains("flooded")),
        "{flooded:?}"
    );
    // 100 MiB went past the gateway in one line; it never held that line.
    // What it held was at most the line limit's worth (16 MiB, read before
    // the line is known to be too long), whose pages the allocator may
    // keep for later: about 53 MiB more than at the start here, where the
    // whole line held would be more than 100 MiB.
    let resident = rss_kib(pid)?;
    assert!(
        resident < started + 80 * 1024,
        "the gateway holds {resident} KiB, from {started} KiB"
    );
    Ok(())
}
