//! `droid call` against servers that fail it: each run ends, says what
//! happened, and leaves nothing running, whatever the server does.

use std::io::{BufRead as _, BufReader, Read as _};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use protocol_droid_test_support::running;

mod support;

use support::{Running, TestError, droid_command};

/// Far past what any case here takes, short of a hung test run: a call
/// still running then is a call that hangs.
const HANG: Duration = Duration::from_secs(90);

/// `tests/upstreams/faulty_http.py MODE`, listening; its address.
fn faulty(mode: &str) -> Result<(Running, String), TestError> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/upstreams/faulty_http.py"
    );
    let mut child = Command::new("python3")
        .args([script, mode])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let server = Running(child);
    let mut port = String::new();
    BufReader::new(stdout).read_line(&mut port)?;
    Ok((server, format!("http://127.0.0.1:{}/mcp", port.trim())))
}

/// Waits for `child` to end, at most [`HANG`]; its output.
fn ended(mut child: Child) -> Result<Output, TestError> {
    let deadline = Instant::now() + HANG;
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            let _killed = child.kill();
            let _reaped = child.wait();
            return Err("droid call hung".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_end(&mut stdout)?;
    }
    if let Some(mut err) = child.stderr.take() {
        err.read_to_end(&mut stderr)?;
    }
    Ok(Output {
        status: child.wait()?,
        stdout,
        stderr,
    })
}

/// The figure the server tells after `word` (`peak N gets N`).
fn figure(url: &str, word: &str) -> Result<usize, TestError> {
    let out = ended(call(&[url, "tools/call", r#"{"name": "figures"}"#])?)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut words = stdout.split_whitespace().skip_while(|w| *w != word);
    Ok(words.nth(1).ok_or("no figure")?.parse()?)
}

/// `droid call ARGS`, started.
fn call(args: &[&str]) -> Result<Child, TestError> {
    Ok(droid_command()
        .arg("call")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("RUST_BACKTRACE", "0")
        .spawn()?)
}

#[test]
fn what_a_server_writes_is_shown_escaped_and_a_delete_never_answered_holds_no_one()
-> Result<(), TestError> {
    let (_server, url) = faulty("stalled-delete")?;
    let out = ended(call(&[&url, "tools/list"])?)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    // The answer is printed, its escapes shown rather than obeyed.
    assert!(
        stdout.contains(r"evil\u{1b}]0;pwned\u{7}\u{1b}[2J\u{202e}eman"),
        "{stdout}"
    );
    assert!(
        !stdout.contains('\u{1b}'),
        "an escape reached the terminal: {stdout:?}"
    );
    // As JSON too: escaped as JSON escapes, the same text to a program.
    let out = ended(call(&[&url, "tools/list", "--json"])?)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains(r"evil\u001b]0;pwned\u0007\u001b[2J\u202eeman"),
        "{stdout}"
    );
    assert!(
        !stdout.contains(['\u{1b}', '\u{202e}']),
        "a direction mark reached the terminal: {stdout:?}"
    );
    Ok(())
}

/// `droid call URL tools/list` against `faulty_http.py MODE` fails, saying
/// `words`.
fn fails_saying(mode: &str, words: &str) -> Result<(), TestError> {
    let (_server, url) = faulty(mode)?;
    let out = ended(call(&[&url, "tools/list"])?)?;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(words), "{stderr}");
    Ok(())
}

/// A server's JSON-RPC error that names the key it was sent reaches the
/// caller without it: the error goes on to whoever called (through a
/// gateway, a client the key is not for).
#[test]
fn an_error_naming_the_key_it_was_sent_is_shown_without_it() -> Result<(), TestError> {
    let (_server, url) = faulty("error-naming-key")?;
    let out = ended(
        droid_command()
            .args(["call", &url, "tools/list"])
            .env("DROID_TOKEN", "token-kept-from-callers")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?,
    )?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("invalid API key: [redacted]"), "{said}");
    assert!(!said.contains("token-kept-from-callers"), "{said}");
    Ok(())
}

#[test]
fn a_refusal_whose_body_never_ends_fails_the_call() -> Result<(), TestError> {
    fails_saying("stalled-refusal", "no acknowledgement")
}

#[test]
fn a_flood_of_server_requests_is_answered_a_bounded_number_at_a_time() -> Result<(), TestError> {
    let (_server, url) = faulty("ping-flood")?;
    // 300 pings, each answer held 0.2 s by the server, before the listing.
    let out = ended(call(&[&url, "tools/list"])?)?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let peak = figure(&url, "peak")?;
    // 64 answered at once, and as many refused; not one connection each.
    assert!(peak <= 2 * 64, "{peak} answers were being sent at once");
    Ok(())
}

#[test]
fn an_interrupted_call_ends_its_stdio_server_and_what_that_started() -> Result<(), TestError> {
    // A server that never answers, with a helper of its own; the durations
    // only make them recognisable.
    let (helper, server) = ("615.5", "616.5");
    let command = format!("sleep {helper} & exec sleep {server}");
    let child = call(&["tools/list", "--", "sh", "-c", &command])?;
    let (helper, server) = (["sleep", helper], ["sleep", server]);
    let deadline = Instant::now() + HANG;
    while !(running(&helper) && running(&server)) {
        assert!(Instant::now() < deadline, "the server never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let signalled = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()?;
    assert!(signalled.success());
    let out = ended(child)?;
    assert!(!out.status.success());
    while (running(&helper) || running(&server)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!running(&server), "the server outlived the call");
    assert!(
        !running(&helper),
        "the server's own child outlived the call"
    );
    Ok(())
}

#[test]
fn an_answer_holding_no_response_fails_the_request_at_once() -> Result<(), TestError> {
    // Said now, not after the request's timeout as no answer.
    fails_saying("html200", "no response to this request")
}

#[test]
fn a_stream_ended_at_once_with_retry_0_is_not_reopened_at_once() -> Result<(), TestError> {
    let (_server, url) = faulty("get-retry0")?;
    // Two seconds of a call during which the client listens on its GET.
    let out = ended(call(&[&url, "tools/call", r#"{"name": "slow"}"#])?)?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gets = figure(&url, "gets")?;
    // A quarter of a second apart at the most often: a handful, not
    // as many as the server could end.
    assert!(gets <= 20, "{gets} GETs in about two seconds");
    Ok(())
}
