//! A scripted client on the far end of a pair of duplex pipes.

use std::ops::{Deref, DerefMut};

use protocol_droid::adapters::primary::acp::{AcpAgentPeer, AcpPeerOptions};
use protocol_droid_test_support::LineClient;
pub(crate) use protocol_droid_test_support::TestError;
use serde_json::Value;
use tokio::io::DuplexStream;

pub(crate) type TestResult = Result<(), TestError>;

/// The client's ends: what it writes to the agent's stdin, what it reads
/// from the agent's stdout. Framing is the shared line client's (reached
/// through `Deref`); what is added here are the ACP checks every test makes.
pub(crate) struct Client(LineClient<DuplexStream, DuplexStream>);

impl Deref for Client {
    type Target = LineClient<DuplexStream, DuplexStream>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for Client {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

pub(crate) fn connect() -> (AcpAgentPeer, Client) {
    connect_with(AcpPeerOptions::default(), 1024 * 1024)
}

pub(crate) fn connect_with(options: AcpPeerOptions, capacity: usize) -> (AcpAgentPeer, Client) {
    let (client_in, agent_in) = tokio::io::duplex(capacity);
    let (agent_out, client_out) = tokio::io::duplex(capacity);
    let peer = AcpAgentPeer::with_options(agent_in, agent_out, options);
    (peer, Client(LineClient::new(client_in, client_out)))
}

impl Client {
    /// The next line as JSON, checked against the envelope rules every line
    /// must follow (scenario 13).
    pub(crate) async fn recv(&mut self) -> Result<Value, TestError> {
        let value = self.recv_json().await?;
        check_envelope(&value);
        Ok(value)
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
