//! What a server announces to the sessions listening: a list that
//! changed, a resource updated, a log line for one session.

use serde_json::Value;

use crate::domain::{LoggingLevel, SessionId};

/// Something offered changed; listeners and legacy sessions are told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The tool list changed.
    Tools,
    /// The prompt list changed.
    Prompts,
    /// The resource list changed.
    Resources,
    /// One resource's contents changed.
    ResourceUpdated(String),
    /// One resource's contents changed, as told on the connection a
    /// forwarder keeps upstream for one legacy session alone: that
    /// session's own subscription. Only ever in that session's own queue.
    SessionResourceUpdated {
        /// The session.
        session: SessionId,
        /// The resource.
        uri: String,
    },
    /// The tool list changed for one session only (a gateway session's
    /// activations).
    ToolsFor(SessionId),
    /// A log record for one legacy session, from outside its requests (an
    /// upstream server's, carried by a bridge); sent when the session's
    /// log level lets it through. Only ever in that session's own queue
    /// ([`Server::session_changes`](super::Server::session_changes)).
    Log {
        /// The session.
        session: SessionId,
        /// The record's level.
        level: LoggingLevel,
        /// The name of the logger that wrote it, if given.
        logger: Option<String>,
        /// The record.
        data: Value,
    },
    /// A task a legacy session made changed status: its
    /// `notifications/tasks/status` params (2025-11-25). Only ever in that
    /// session's own queue.
    TaskStatus {
        /// The session.
        session: SessionId,
        /// The task, as the notification carries it.
        params: Value,
    },
}
