//! One ACP session: its MCP servers, what it has said (for `session/load`),
//! and what its user allowed for good.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use protocol_droid::adapters::primary::acp::{AcpPeerError, AcpSender};
use serde_json::{Value, json};

use super::mcp::{Connected, Failed};

/// How much of a session's conversation is kept for `session/load`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HistoryLimits {
    /// The most updates kept; the oldest go first.
    pub(crate) updates: usize,
    /// The most bytes kept, counted as serialised JSON.
    pub(crate) bytes: usize,
}

impl Default for HistoryLimits {
    fn default() -> Self {
        Self {
            updates: 1000,
            bytes: 8 * 1024 * 1024,
        }
    }
}

/// The updates sent so far, oldest first, within [`HistoryLimits`].
#[derive(Debug, Default)]
pub(crate) struct History {
    updates: VecDeque<(Value, usize)>,
    bytes: usize,
}

impl History {
    /// Keeps `update`, dropping the oldest until the limits hold. An update
    /// larger than the byte limit by itself is kept as a note saying so,
    /// so a replay shows that something was there.
    fn record(&mut self, update: &Value, limits: HistoryLimits) {
        let size = serde_json::to_string(update).map_or(0, |s| s.len());
        let (update, size) = if size > limits.bytes {
            // A message chunk keeps its kind, so that a user's prompt is not
            // replayed as the agent's words; anything else is the agent's.
            let kind = update
                .get("sessionUpdate")
                .and_then(Value::as_str)
                .filter(|kind| kind.ends_with("_chunk"))
                .unwrap_or("agent_message_chunk");
            let note = json!({
                "sessionUpdate": kind,
                "content": { "type": "text",
                    "text": format!("[{size} bytes, too large to keep for replay]") },
            });
            (note, 128)
        } else {
            (update.clone(), size)
        };
        self.updates.push_back((update, size));
        self.bytes = self.bytes.saturating_add(size);
        while self.updates.len() > limits.updates || self.bytes > limits.bytes {
            match self.updates.pop_front() {
                Some((_, dropped)) => self.bytes = self.bytes.saturating_sub(dropped),
                None => break,
            }
        }
    }

    /// The kept updates, oldest first.
    pub(crate) fn updates(&self) -> Vec<Value> {
        self.updates
            .iter()
            .map(|(update, _)| update.clone())
            .collect()
    }

    /// How many updates are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.updates.len()
    }
}

/// A session.
#[derive(Debug)]
pub(crate) struct Session {
    /// The `sessionId`.
    pub(crate) id: String,
    /// The connected servers, in the order the client listed them.
    pub(crate) servers: Vec<Arc<Connected>>,
    /// The entries that gave no connection.
    pub(crate) failed: Vec<Failed>,
    sender: AcpSender,
    history: Arc<Mutex<History>>,
    limits: HistoryLimits,
    next_tool_call: Arc<AtomicU64>,
}

impl Session {
    /// A new session with nothing said yet.
    pub(crate) fn new(
        id: String,
        sender: AcpSender,
        (servers, failed): (Vec<Arc<Connected>>, Vec<Failed>),
        limits: HistoryLimits,
    ) -> Self {
        Self {
            id,
            servers,
            failed,
            sender,
            history: Arc::default(),
            limits,
            next_tool_call: Arc::default(),
        }
    }

    /// The same conversation over newly connected servers (`session/load`);
    /// what the user allowed carries over to a server connected from the
    /// same entry as before, and to no other.
    pub(crate) fn reconnected(
        &self,
        sender: AcpSender,
        (servers, failed): (Vec<Arc<Connected>>, Vec<Failed>),
    ) -> Self {
        for server in &servers {
            for before in self.servers.iter().filter(|b| b.name == server.name) {
                server.inherit_grants(before);
            }
        }
        Self {
            id: self.id.clone(),
            servers,
            failed,
            sender,
            history: Arc::clone(&self.history),
            limits: self.limits,
            next_tool_call: Arc::clone(&self.next_tool_call),
        }
    }

    /// The sender, for requests to the client.
    pub(crate) fn sender(&self) -> &AcpSender {
        &self.sender
    }

    /// Sends a `session/update` and keeps it for replay.
    pub(crate) async fn emit(&self, update: Value) -> Result<(), AcpPeerError> {
        self.record(&update);
        self.sender.session_update(&self.id, update).await
    }

    /// Keeps an update for replay without sending it: the user's own
    /// prompt, which the client already shows.
    pub(crate) fn record(&self, update: &Value) {
        self.history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(update, self.limits);
    }

    /// Sends every kept update again, oldest first (`session/load`).
    pub(crate) async fn replay(&self) -> Result<(), AcpPeerError> {
        let updates = self
            .history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .updates();
        for update in updates {
            self.sender.session_update(&self.id, update).await?;
        }
        Ok(())
    }

    /// Sends text as an `agent_message_chunk`.
    pub(crate) async fn say(&self, text: impl Into<String>) -> Result<(), AcpPeerError> {
        self.emit(json!({
            "sessionUpdate": "agent_message_chunk",
            "content": { "type": "text", "text": text.into() },
        }))
        .await
    }

    /// Tells the user which servers gave no connection, if any did.
    pub(crate) async fn report_failures(&self) -> Result<(), AcpPeerError> {
        if self.failed.is_empty() {
            return Ok(());
        }
        let mut text = String::from("Some MCP servers are not available in this session:\n");
        for failed in &self.failed {
            text.push_str(&format!("  {}: {}\n", failed.name, failed.reason));
        }
        self.say(text).await
    }

    /// A fresh `toolCallId`.
    pub(crate) fn tool_call_id(&self) -> String {
        format!(
            "call-{}",
            self.next_tool_call.fetch_add(1, Ordering::Relaxed)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(text: &str) -> Value {
        json!({ "sessionUpdate": "agent_message_chunk", "content": { "type": "text", "text": text } })
    }

    #[test]
    fn history_drops_the_oldest_updates_beyond_its_count() {
        let mut history = History::default();
        let limits = HistoryLimits {
            updates: 3,
            bytes: 1 << 20,
        };
        for i in 0..5 {
            history.record(&chunk(&i.to_string()), limits);
        }
        let kept = history.updates();
        assert_eq!(kept, vec![chunk("2"), chunk("3"), chunk("4")]);
    }

    #[test]
    fn history_stays_within_its_bytes_and_notes_what_was_too_large() {
        let mut history = History::default();
        let limits = HistoryLimits {
            updates: 100,
            bytes: 1000,
        };
        history.record(&chunk(&"a".repeat(600)), limits);
        history.record(&chunk(&"b".repeat(600)), limits);
        assert_eq!(history.len(), 1, "the first update must have been dropped");
        assert!(history.bytes <= 1000);
        history.record(&chunk(&"c".repeat(5000)), limits);
        let last = history.updates().pop().unwrap_or_default();
        let text = last
            .pointer("/content/text")
            .and_then(Value::as_str)
            .unwrap_or_default();
        assert!(text.contains("too large to keep"), "{text}");
        let kind = |update: &Value| update.get("sessionUpdate").cloned();
        assert_eq!(kind(&last), Some(json!("agent_message_chunk")));
        // A user's prompt too large to keep is still the user's.
        let prompt = json!({ "sessionUpdate": "user_message_chunk",
            "content": { "type": "text", "text": "d".repeat(5000) } });
        history.record(&prompt, limits);
        let last = history.updates().pop().unwrap_or_default();
        assert_eq!(kind(&last), Some(json!("user_message_chunk")));
    }
}
