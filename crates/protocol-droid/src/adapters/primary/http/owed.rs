//! What a session's full `GET` stream could not take but still owes its
//! client: list changes and resource updates.
//!
//! Each of these only tells the client to look again, so one of a kind
//! stands for any number: a client told once, late, lists afresh and sees
//! every change it missed. Dropping one instead can leave a client with a
//! stale list for good, when no later change comes to repeat it. Log records
//! and task statuses are not owed: each says something of its own, and
//! keeping them would be the unbounded queue the stream's bound prevents.

use serde_json::Value;
use tokio::sync::mpsc;

use crate::application::server::Change;

/// Notifications owed to one session's stream, each at most once, in the
/// order they were first owed.
#[derive(Debug, Default)]
pub(super) struct Owed {
    messages: Vec<Value>,
}

impl Owed {
    /// How many distinct notifications may be owed at once: the three lists
    /// and the updates of this many resources less three. Past it, what
    /// would be owed is dropped, as it was by the full stream.
    pub(super) const MAX: usize = 64;

    /// Whether a notification of `change` is one a full stream may owe
    /// rather than drop.
    pub(super) const fn can_owe(change: &Change) -> bool {
        matches!(
            change,
            Change::Tools
                | Change::ToolsFor(_)
                | Change::Prompts
                | Change::Resources
                | Change::ResourceUpdated(_)
                | Change::SessionResourceUpdated { .. }
        )
    }

    /// Owes `message` unless it is owed already; `false` when it could not
    /// be, the bound being reached.
    pub(super) fn owe(&mut self, message: Value) -> bool {
        if self.messages.contains(&message) {
            return true;
        }
        if self.messages.len() >= Self::MAX {
            return false;
        }
        self.messages.push(message);
        true
    }

    /// Whether nothing is owed.
    pub(super) fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Forgets what is owed: the stream it was owed to is gone, and what
    /// has no stream is said nowhere, as any change is then.
    pub(super) fn forgive(&mut self) {
        self.messages.clear();
    }

    /// Sends the oldest debt into `stream` once it has room; `false` when
    /// the stream closed first. Cancel-safe: until there is room nothing is
    /// taken from the debts.
    pub(super) async fn pay(&mut self, stream: &mpsc::Sender<Value>) -> bool {
        let Ok(permit) = stream.reserve().await else {
            return false;
        };
        if !self.messages.is_empty() {
            permit.send(self.messages.remove(0));
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn changed(list: &str) -> Value {
        json!({ "jsonrpc": "2.0", "method": format!("notifications/{list}/list_changed") })
    }

    #[tokio::test]
    async fn one_of_a_kind_is_owed_once_and_paid_when_there_is_room() {
        let (tx, mut rx) = mpsc::channel(1);
        tx.try_send(json!("filler")).ok();
        let mut owed = Owed::default();
        assert!(owed.owe(changed("tools")));
        assert!(owed.owe(changed("prompts")));
        assert!(owed.owe(changed("tools")));
        // Full: nothing is paid until the reader takes what the stream holds.
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(20), owed.pay(&tx));
        assert!(waiting.await.is_err());
        assert_eq!(rx.recv().await, Some(json!("filler")));
        assert!(owed.pay(&tx).await);
        assert_eq!(rx.recv().await, Some(changed("tools")));
        assert!(owed.pay(&tx).await);
        assert_eq!(rx.recv().await, Some(changed("prompts")));
        assert!(owed.is_empty(), "the repeat was owed once");
    }

    #[tokio::test]
    async fn a_closed_stream_is_told_and_the_bound_holds() {
        let (tx, rx) = mpsc::channel(1);
        drop(rx);
        let mut owed = Owed::default();
        for n in 0..Owed::MAX {
            assert!(owed.owe(json!({ "uri": n })));
        }
        assert!(!owed.owe(json!({ "uri": "one more" })));
        assert!(owed.owe(json!({ "uri": 0 })), "already owed");
        assert!(!owed.pay(&tx).await);
        owed.forgive();
        assert!(owed.is_empty());
    }

    #[test]
    fn only_what_says_look_again_is_owed() {
        assert!(Owed::can_owe(&Change::Tools));
        assert!(Owed::can_owe(&Change::ResourceUpdated("file:///a".into())));
        let log = Change::Log {
            session: crate::domain::SessionId::new(1),
            level: crate::domain::LoggingLevel::Info,
            logger: None,
            data: json!("x"),
        };
        assert!(!Owed::can_owe(&log));
    }
}
