//! A scripted client on the far end of a pair of duplex pipes.

use std::time::Duration;

use protocol_droid::adapters::primary::acp::{AcpAgentPeer, AcpPeerOptions};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};

pub(crate) type TestError = Box<dyn std::error::Error + Send + Sync>;
pub(crate) type TestResult = Result<(), TestError>;

/// How long a test waits for a line it expects.
const PATIENCE: Duration = Duration::from_secs(20);

/// The client's ends: what it writes to the agent's stdin, what it reads
/// from the agent's stdout.
pub(crate) struct Client {
    pub(crate) stdin: Option<DuplexStream>,
    pub(crate) stdout: BufReader<DuplexStream>,
}

pub(crate) fn connect() -> (AcpAgentPeer, Client) {
    connect_with(AcpPeerOptions::default(), 1024 * 1024)
}

pub(crate) fn connect_with(options: AcpPeerOptions, capacity: usize) -> (AcpAgentPeer, Client) {
    let (client_in, agent_in) = tokio::io::duplex(capacity);
    let (agent_out, client_out) = tokio::io::duplex(capacity);
    let peer = AcpAgentPeer::with_options(agent_in, agent_out, options);
    let client = Client {
        stdin: Some(client_in),
        stdout: BufReader::new(client_out),
    };
    (peer, client)
}

impl Client {
    /// Writes one line (the `\n` is added).
    pub(crate) async fn send(&mut self, line: &str) -> TestResult {
        let mut bytes = line.as_bytes().to_vec();
        bytes.push(b'\n');
        self.send_raw(&bytes).await
    }

    pub(crate) async fn send_json(&mut self, value: &Value) -> TestResult {
        self.send(&serde_json::to_string(value)?).await
    }

    pub(crate) async fn send_raw(&mut self, bytes: &[u8]) -> TestResult {
        let stdin = self.stdin.as_mut().ok_or("stdin already closed")?;
        stdin.write_all(bytes).await?;
        stdin.flush().await?;
        Ok(())
    }

    /// Closes the agent's stdin.
    pub(crate) fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The next raw line, without its `\n`.
    pub(crate) async fn recv_line(&mut self) -> Result<String, TestError> {
        let mut line = String::new();
        let read = tokio::time::timeout(PATIENCE, self.stdout.read_line(&mut line))
            .await
            .map_err(|_| "no line from the agent in time")??;
        if read == 0 {
            return Err("the agent's stdout ended".into());
        }
        let body = line
            .strip_suffix('\n')
            .ok_or("a line without its newline")?;
        assert!(!body.contains('\n'), "a message spanning lines");
        Ok(body.to_owned())
    }

    /// The next line as JSON, checked against the envelope rules every line
    /// must follow (scenario 13).
    pub(crate) async fn recv(&mut self) -> Result<Value, TestError> {
        let line = self.recv_line().await?;
        let value: Value = serde_json::from_str(&line)?;
        check_envelope(&value);
        Ok(value)
    }

    /// Whether no line arrives for `ms` milliseconds.
    pub(crate) async fn silent_for(&mut self, ms: u64) -> bool {
        let mut line = String::new();
        tokio::time::timeout(Duration::from_millis(ms), self.stdout.read_line(&mut line))
            .await
            .is_err()
    }

    /// Whether the agent's stdout has ended.
    pub(crate) async fn at_eof(&mut self) -> Result<bool, TestError> {
        let mut line = String::new();
        let read = tokio::time::timeout(PATIENCE, self.stdout.read_line(&mut line))
            .await
            .map_err(|_| "stdout neither ended nor produced a line")??;
        Ok(read == 0)
    }

    /// Sends a request and returns the next line.
    pub(crate) async fn call(&mut self, request: &Value) -> Result<Value, TestError> {
        self.send_json(request).await?;
        self.recv().await
    }

    /// Checks the peer still serves: `_test/ping` is answered -32601 with
    /// the probe's id.
    pub(crate) async fn probe(&mut self) -> TestResult {
        self.send(r#"{"jsonrpc":"2.0","id":"probe","method":"_test/ping"}"#)
            .await?;
        let reply = self.recv().await?;
        assert_eq!(reply["id"], "probe", "{reply}");
        assert_eq!(reply["error"]["code"], -32601, "{reply}");
        Ok(())
    }
}

/// Scenario 13's rules, checked on every line a test reads.
pub(crate) fn check_envelope(value: &Value) {
    let object = value.as_object();
    assert!(object.is_some(), "not an object: {value}");
    assert_eq!(value["jsonrpc"], "2.0", "{value}");
    let has = |key: &str| object.is_some_and(|o| o.contains_key(key));
    assert!(
        !(has("result") && has("error")),
        "both result and error: {value}"
    );
    if has("method") {
        if !has("id") {
            assert!(!has("result") && !has("error"), "{value}");
        }
    } else {
        assert!(has("id"), "a response without an id: {value}");
        assert!(has("result") || has("error"), "{value}");
    }
    if has("error") {
        assert!(value["error"]["code"].is_i64(), "{value}");
        assert!(value["error"]["message"].is_string(), "{value}");
    }
}
