//! The command line, run as a user runs it.

// Indexing a `serde_json::Value` yields `Null` for a missing member and never
// panics, which is what reading replies wants.
#![allow(clippy::indexing_slicing)]

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

type TestError = Box<dyn std::error::Error>;

fn droid(args: &[&str]) -> Result<Output, TestError> {
    Ok(Command::new(env!("CARGO_BIN_EXE_droid"))
        .args(args)
        .output()?)
}

/// Runs `droid` with `input` on stdin, which then closes.
fn droid_with_input(args: &[&str], input: &str) -> Result<Output, TestError> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_droid"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(input.as_bytes())?;
    Ok(child.wait_with_output()?)
}

#[test]
fn serve_answers_on_stdio_and_exits_cleanly_when_input_ends() -> Result<(), TestError> {
    let out = droid_with_input(
        &["serve"],
        concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"test_simple_text"}}"#,
            "\n"
        ),
    )?;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout)?;
    let replies: Vec<serde_json::Value> = text
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(replies.len(), 2, "{text}");
    assert!(
        text.contains("This is a simple text response for testing."),
        "{text}"
    );
    Ok(())
}

#[test]
fn serve_restricted_to_one_revision_offers_only_that_one() -> Result<(), TestError> {
    let out = droid_with_input(
        &["serve", "--revisions", "2025-06-18"],
        concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
            "\n"
        ),
    )?;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout)?;
    assert!(text.contains(r#""protocolVersion":"2025-06-18""#), "{text}");
    Ok(())
}

#[test]
fn a_modern_only_server_refuses_initialize_and_names_what_it_speaks() -> Result<(), TestError> {
    let out = droid_with_input(
        &["serve", "--revisions", "2026-07-28"],
        concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
            "\n"
        ),
    )?;
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert!(reply.get("error").is_some(), "{reply}");
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

/// Kills the server when the test ends, however it ends.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _killed = self.0.kill();
        let _reaped = self.0.wait();
    }
}

/// Starts `droid ARGS` and waits for the line naming where it listens;
/// the address (`HOST:PORT`) after `scheme://`.
fn listening(args: &[&str], scheme: &str) -> Result<(Running, String), TestError> {
    use std::io::{BufRead as _, BufReader};

    let mut child = Command::new(env!("CARGO_BIN_EXE_droid"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let running = Running(child);
    let mut lines = BufReader::new(stderr).lines();
    let marker = format!("listening on {scheme}://");
    let address = loop {
        let line = lines.next().ok_or("the server exited before listening")??;
        if let Some(rest) = line.split(marker.as_str()).nth(1) {
            break rest.split('/').next().unwrap_or_default().to_owned();
        }
    };
    // The rest of stderr is drained so the server never blocks on it.
    std::thread::spawn(move || lines.for_each(drop));
    Ok((running, address))
}

#[test]
fn serve_listen_answers_streamable_http_on_the_port_it_names() -> Result<(), TestError> {
    use std::io::Read as _;

    let (_server, address) = listening(&["serve", "--listen", "127.0.0.1:0"], "http")?;
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = std::net::TcpStream::connect(&address)?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    stream.write_all(request.as_bytes())?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
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

#[test]
fn an_unknown_revision_is_refused_by_name() -> Result<(), TestError> {
    let out = droid(&["serve", "--revisions", "2024-10-07"])?;
    assert!(!out.status.success());
    let text = String::from_utf8(out.stderr)?;
    assert!(text.contains("2024-10-07"), "{text}");
    Ok(())
}

#[test]
fn the_revision_table_shows_structured_output_arriving_in_2025_06_18() -> Result<(), TestError> {
    let out = droid(&["revisions"])?;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout)?;
    let row = text
        .lines()
        .find(|l| l.starts_with("ToolStructuredOutput "))
        .ok_or("no ToolStructuredOutput row")?;
    let marks: Vec<&str> = row.split_whitespace().skip(1).collect();
    assert_eq!(marks, ["-", "-", "yes", "yes", "yes"]);
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
    // The log level passes through; the credentials do not.
    assert!(stdout.contains(r#""text": "DROID_LOG""#), "{stdout}");
    Ok(())
}

#[test]
fn auth_flags_without_an_issuer_refuse_to_start_rather_than_serve_openly() -> Result<(), TestError>
{
    let out = droid(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--auth-jwks-url",
        "http://127.0.0.1:9/jwks",
        "--auth-required-scope",
        "mcp",
    ])?;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("without --auth-issuer"), "{stderr}");
    Ok(())
}

#[test]
fn a_public_listener_with_auth_must_name_its_resource() -> Result<(), TestError> {
    let out = droid(&[
        "serve",
        "--listen",
        "0.0.0.0:0",
        "--auth-issuer",
        "http://127.0.0.1:9",
        "--auth-jwks-url",
        "http://127.0.0.1:9/jwks",
    ])?;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--auth-resource is required"), "{stderr}");
    Ok(())
}

#[test]
fn bridge_gives_a_legacy_stdio_client_a_2026_only_server() -> Result<(), TestError> {
    let droid = env!("CARGO_BIN_EXE_droid");
    let out = droid_with_input(
        &["bridge", "--", droid, "serve", "--revisions", "2026-07-28"],
        concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"test_simple_text"}}"#,
            "\n"
        ),
    )?;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout)?;
    let replies: Vec<serde_json::Value> = text
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
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
    // 2026-07-28 members do not reach a 2025-03-26 client.
    assert!(call["result"].get("resultType").is_none(), "{text}");
    Ok(())
}

#[test]
fn bridge_refuses_an_unknown_feature_name_and_a_missing_upstream() -> Result<(), TestError> {
    let out = droid(&["bridge", "--allow", "nonsense", "--", "true"])?;
    assert!(!out.status.success());
    assert!(
        String::from_utf8(out.stderr)?.contains("--allow \"nonsense\" names no feature"),
        "the error must name the flag"
    );
    let out = droid(&["bridge"])?;
    assert!(!out.status.success());
    assert!(String::from_utf8(out.stderr)?.contains("name the upstream"));
    Ok(())
}

/// HTTPS end to end with the binary: `droid serve` terminates TLS with a
/// chain from a CA made here, `droid call` and a gateway upstream reach it
/// with `--ca-file` (or `ca_file`), and without it the refusal says why.
mod https {
    use super::*;

    struct Files {
        dir: std::path::PathBuf,
    }

    impl Drop for Files {
        fn drop(&mut self) {
            let _removed = std::fs::remove_dir_all(&self.dir);
        }
    }

    impl Files {
        fn path(&self, name: &str) -> String {
            self.dir.join(name).to_string_lossy().into_owned()
        }
    }

    /// `ca.pem`, `cert.pem` and `key.pem` for 127.0.0.1, in a fresh folder.
    fn certificates() -> Result<Files, TestError> {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let dir = std::env::temp_dir().join(format!(
            "droid-https-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir)?;
        let files = Files { dir };
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        std::fs::write(files.path("ca.pem"), ca.self_signed(&ca_key)?.pem())?;
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate()?;
        let leaf =
            CertificateParams::new(vec!["127.0.0.1".to_owned()])?.signed_by(&key, &issuer)?;
        std::fs::write(files.path("cert.pem"), leaf.pem())?;
        std::fs::write(files.path("key.pem"), key.serialize_pem())?;
        Ok(files)
    }

    fn serve_https(files: &Files) -> Result<(Running, String), TestError> {
        let (cert, key) = (files.path("cert.pem"), files.path("key.pem"));
        let args = [
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
        ];
        listening(&args, "https")
    }

    #[test]
    fn droid_call_reaches_droid_serve_over_https_with_the_ca_file() -> Result<(), TestError> {
        let files = certificates()?;
        let (_server, address) = serve_https(&files)?;
        let url = format!("https://{address}/mcp");
        let ca = files.path("ca.pem");
        let out = droid(&["call", &url, "tools/list", "--ca-file", &ca])?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("echo"), "{stdout}");
        // The same server without the CA: refused, and the message says why.
        let out = droid(&["call", &url, "tools/list"])?;
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
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
        let out = droid(&["gateway", "--config", &config, "--print-digests"])?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("secure/echo"), "{stdout}");
        write("")?;
        let out = droid(&["gateway", "--config", &config, "--print-digests"])?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "an untrusted upstream was served");
        assert!(stderr.contains("unknown issuer"), "{stderr}");
        Ok(())
    }
}
