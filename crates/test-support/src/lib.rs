//! What the tests of more than one crate in the workspace share: the error
//! type a test returns, a client for a peer that speaks line-delimited JSON
//! over a pair of pipes, a process's resident memory, a redis-server of a
//! test's own ([`redis`]), and a TCP proxy whose connections can be frozen
//! ([`proxy`]).
//!
//! A dev-dependency only: nothing here is part of the library's surface, and
//! the crate is never published.

use std::time::Duration;

pub mod proxy;
pub mod redis;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};

/// What a test returns; `Send` and `Sync` so it crosses tasks.
pub type TestError = Box<dyn std::error::Error + Send + Sync>;

/// How long a [`LineClient`] waits for a line it expects: a deadline that
/// stops a broken test from hanging, never a measure.
pub const LINE_PATIENCE: Duration = Duration::from_secs(20);

/// A client's end of a peer that reads and writes one JSON-RPC message per
/// line (stdio MCP, ACP): what the client writes to the peer's input and
/// what it reads from the peer's output.
///
/// It frames lines and nothing more; what a test expects of the messages is
/// the test's to check.
#[derive(Debug)]
pub struct LineClient<W, R> {
    /// The peer's input; `None` once closed.
    input: Option<W>,
    /// The peer's output.
    output: BufReader<R>,
}

impl<W, R> LineClient<W, R>
where
    W: AsyncWrite + Unpin,
    R: AsyncRead + Unpin,
{
    /// A client writing to `input` and reading from `output`.
    pub fn new(input: W, output: R) -> Self {
        Self {
            input: Some(input),
            output: BufReader::new(output),
        }
    }

    /// Writes `bytes` as they are, with no newline added, and flushes them.
    ///
    /// # Errors
    ///
    /// When the input was closed or the write fails.
    pub async fn send_raw(&mut self, bytes: &[u8]) -> Result<(), TestError> {
        let input = self.input.as_mut().ok_or("the peer's input is closed")?;
        input.write_all(bytes).await?;
        input.flush().await?;
        Ok(())
    }

    /// Writes one line; the `\n` is added.
    ///
    /// # Errors
    ///
    /// As [`Self::send_raw`].
    pub async fn send(&mut self, line: &str) -> Result<(), TestError> {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        self.send_raw(&bytes).await
    }

    /// Writes `message` as one line.
    ///
    /// # Errors
    ///
    /// As [`Self::send_raw`].
    pub async fn send_json(&mut self, message: &Value) -> Result<(), TestError> {
        self.send(&message.to_string()).await
    }

    /// Closes the peer's input, as a client that goes away would.
    pub fn close(&mut self) {
        self.input = None;
    }

    /// The next line the peer writes, without its `\n`.
    ///
    /// # Errors
    ///
    /// When no line comes within [`LINE_PATIENCE`], the output ends first, or
    /// the output ends inside a line.
    ///
    /// # Panics
    ///
    /// When the line holds a second message, which a line-delimited peer
    /// must never write.
    pub async fn recv_line(&mut self) -> Result<String, TestError> {
        let mut line = String::new();
        let read = tokio::time::timeout(LINE_PATIENCE, self.output.read_line(&mut line))
            .await
            .map_err(|_| "no line from the peer in time")??;
        if read == 0 {
            return Err("the peer's output ended".into());
        }
        let body = line
            .strip_suffix('\n')
            .ok_or("a line without its newline")?;
        assert!(!body.contains('\n'), "a message spanning lines");
        Ok(body.to_owned())
    }

    /// The next line, read as JSON.
    ///
    /// # Errors
    ///
    /// As [`Self::recv_line`], and when the line is not JSON.
    pub async fn recv_json(&mut self) -> Result<Value, TestError> {
        Ok(serde_json::from_str(&self.recv_line().await?)?)
    }

    /// Whether the peer writes nothing for `ms` milliseconds.
    pub async fn silent_for(&mut self, ms: u64) -> bool {
        let mut line = String::new();
        tokio::time::timeout(Duration::from_millis(ms), self.output.read_line(&mut line))
            .await
            .is_err()
    }

    /// Whether the peer's output ends before its next line.
    ///
    /// # Errors
    ///
    /// When the output neither ends nor gives a line within
    /// [`LINE_PATIENCE`].
    pub async fn at_eof(&mut self) -> Result<bool, TestError> {
        let mut line = String::new();
        let read = tokio::time::timeout(LINE_PATIENCE, self.output.read_line(&mut line))
            .await
            .map_err(|_| "the peer's output neither ended nor gave a line in time")??;
        Ok(read == 0)
    }
}

/// Whether a process runs whose command line is `words` exactly, read from
/// procfs (never, where there is none).
#[must_use]
pub fn running(words: &[&str]) -> bool {
    let wanted: Vec<u8> = words
        .iter()
        .flat_map(|w| [w.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc").is_ok_and(|entries| {
        entries.filter_map(Result::ok).any(|entry| {
            std::fs::read(entry.path().join("cmdline")).is_ok_and(|line| line == wanted)
        })
    })
}

/// The resident set of process `pid` in KiB, read from procfs; 0 where
/// there is none to read (not Linux, or the process is gone).
#[must_use]
pub fn resident_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::{LineClient, TestError, resident_kib};

    #[tokio::test]
    async fn lines_are_framed_both_ways_and_the_end_is_seen() -> Result<(), TestError> {
        let (input, peer_input) = tokio::io::duplex(1024);
        let (peer_output, output) = tokio::io::duplex(1024);
        let mut client = LineClient::new(input, output);
        let mut peer = LineClient::new(peer_output, peer_input);

        client.send_json(&serde_json::json!({ "id": 1 })).await?;
        assert_eq!(peer.recv_line().await?, r#"{"id":1}"#);
        peer.send(r#"{"id":2}"#).await?;
        assert_eq!(client.recv_json().await?, serde_json::json!({ "id": 2 }));
        assert!(client.silent_for(10).await, "nothing more was written");
        drop(peer);
        assert!(client.at_eof().await?);
        Ok(())
    }

    #[tokio::test]
    async fn a_closed_input_refuses_to_send() {
        let (input, _peer_input) = tokio::io::duplex(64);
        let (_peer_output, output) = tokio::io::duplex(64);
        let mut client = LineClient::new(input, output);
        client.close();
        assert!(client.send("{}").await.is_err());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_running_process_has_a_resident_set() {
        assert!(resident_kib(std::process::id()) > 0);
    }
}
