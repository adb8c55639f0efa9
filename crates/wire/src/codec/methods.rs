//! Every method of every revision, as one table: who sends it, whether it is
//! a request or a notification, the revision that introduced it and the one
//! that removed it. What a revision defines is read from here, the way the
//! domain's feature table says what a revision can express, so adding a
//! revision is adding a column of facts, not copying a list.
//!
//! What each revision brought, for a reader:
//!
//! - 2024-11-05 wire: the first public revision.
//! - 2025-03-26 wire: Streamable HTTP, batching, audio, annotations.
//! - 2025-06-18 wire: structured output, elicitation, resource links.
//! - 2025-11-25 wire: icons, URL elicitation, sampling with tools, tasks.
//! - 2026-07-28 wire: stateless, with per-request `_meta`.

use protocol_droid_domain::ProtocolVersion;
use protocol_droid_domain::ProtocolVersion::{V2024_11_05, V2025_06_18, V2025_11_25, V2026_07_28};

/// Which side sends a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sender {
    /// The client.
    Client,
    /// The server.
    Server,
}

use Sender::{Client, Server};

/// Whether a method expects an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A request: it has an id and is answered.
    Request,
    /// A notification: no id, no answer.
    Notification,
}

use Kind::{Notification, Request};

/// One method in one direction, and the revisions that define it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MethodRow {
    /// The method name.
    pub method: &'static str,
    /// Who sends it.
    pub sender: Sender,
    /// Request or notification.
    pub kind: Kind,
    /// The first revision that defines it.
    pub introduced: ProtocolVersion,
    /// The first revision that no longer does, if any.
    pub removed: Option<ProtocolVersion>,
}

impl MethodRow {
    /// Whether `version` defines this method.
    #[must_use]
    pub fn defined_at(&self, version: ProtocolVersion) -> bool {
        version >= self.introduced && self.removed.is_none_or(|removed| version < removed)
    }
}

const fn row(
    method: &'static str,
    sender: Sender,
    kind: Kind,
    introduced: ProtocolVersion,
    removed: Option<ProtocolVersion>,
) -> MethodRow {
    MethodRow {
        method,
        sender,
        kind,
        introduced,
        removed,
    }
}

/// Every method of every published revision.
pub const METHODS: &[MethodRow] = &[
    // Requests a client sends.
    row(
        "initialize",
        Client,
        Request,
        V2024_11_05,
        Some(V2026_07_28),
    ),
    row("ping", Client, Request, V2024_11_05, Some(V2026_07_28)),
    row("tools/list", Client, Request, V2024_11_05, None),
    row("tools/call", Client, Request, V2024_11_05, None),
    row("prompts/list", Client, Request, V2024_11_05, None),
    row("prompts/get", Client, Request, V2024_11_05, None),
    row("resources/list", Client, Request, V2024_11_05, None),
    row(
        "resources/templates/list",
        Client,
        Request,
        V2024_11_05,
        None,
    ),
    row("resources/read", Client, Request, V2024_11_05, None),
    row(
        "resources/subscribe",
        Client,
        Request,
        V2024_11_05,
        Some(V2026_07_28),
    ),
    row(
        "resources/unsubscribe",
        Client,
        Request,
        V2024_11_05,
        Some(V2026_07_28),
    ),
    row(
        "logging/setLevel",
        Client,
        Request,
        V2024_11_05,
        Some(V2026_07_28),
    ),
    row("completion/complete", Client, Request, V2024_11_05, None),
    row("tasks/get", Client, Request, V2025_11_25, Some(V2026_07_28)),
    row(
        "tasks/result",
        Client,
        Request,
        V2025_11_25,
        Some(V2026_07_28),
    ),
    row(
        "tasks/list",
        Client,
        Request,
        V2025_11_25,
        Some(V2026_07_28),
    ),
    row(
        "tasks/cancel",
        Client,
        Request,
        V2025_11_25,
        Some(V2026_07_28),
    ),
    row("server/discover", Client, Request, V2026_07_28, None),
    row("subscriptions/listen", Client, Request, V2026_07_28, None),
    // Notifications a client sends.
    row(
        "notifications/initialized",
        Client,
        Notification,
        V2024_11_05,
        Some(V2026_07_28),
    ),
    row(
        "notifications/cancelled",
        Client,
        Notification,
        V2024_11_05,
        None,
    ),
    row(
        "notifications/progress",
        Client,
        Notification,
        V2024_11_05,
        Some(V2026_07_28),
    ),
    row(
        "notifications/roots/list_changed",
        Client,
        Notification,
        V2024_11_05,
        Some(V2026_07_28),
    ),
    row(
        "notifications/tasks/status",
        Client,
        Notification,
        V2025_11_25,
        Some(V2026_07_28),
    ),
    // Requests a server sends.
    row("ping", Server, Request, V2024_11_05, Some(V2026_07_28)),
    row(
        "sampling/createMessage",
        Server,
        Request,
        V2024_11_05,
        Some(V2026_07_28),
    ),
    row(
        "roots/list",
        Server,
        Request,
        V2024_11_05,
        Some(V2026_07_28),
    ),
    row(
        "elicitation/create",
        Server,
        Request,
        V2025_06_18,
        Some(V2026_07_28),
    ),
    row("tasks/get", Server, Request, V2025_11_25, Some(V2026_07_28)),
    row(
        "tasks/result",
        Server,
        Request,
        V2025_11_25,
        Some(V2026_07_28),
    ),
    row(
        "tasks/list",
        Server,
        Request,
        V2025_11_25,
        Some(V2026_07_28),
    ),
    row(
        "tasks/cancel",
        Server,
        Request,
        V2025_11_25,
        Some(V2026_07_28),
    ),
    // Notifications a server sends.
    row(
        "notifications/cancelled",
        Server,
        Notification,
        V2024_11_05,
        None,
    ),
    row(
        "notifications/progress",
        Server,
        Notification,
        V2024_11_05,
        None,
    ),
    row(
        "notifications/message",
        Server,
        Notification,
        V2024_11_05,
        None,
    ),
    row(
        "notifications/resources/updated",
        Server,
        Notification,
        V2024_11_05,
        None,
    ),
    row(
        "notifications/resources/list_changed",
        Server,
        Notification,
        V2024_11_05,
        None,
    ),
    row(
        "notifications/tools/list_changed",
        Server,
        Notification,
        V2024_11_05,
        None,
    ),
    row(
        "notifications/prompts/list_changed",
        Server,
        Notification,
        V2024_11_05,
        None,
    ),
    row(
        "notifications/elicitation/complete",
        Server,
        Notification,
        V2025_11_25,
        Some(V2026_07_28),
    ),
    row(
        "notifications/tasks/status",
        Server,
        Notification,
        V2025_11_25,
        Some(V2026_07_28),
    ),
    row(
        "notifications/subscriptions/acknowledged",
        Server,
        Notification,
        V2026_07_28,
        None,
    ),
];

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::METHODS;

    #[test]
    fn each_method_has_one_row_per_direction_and_kind() {
        let mut seen = BTreeSet::new();
        for row in METHODS {
            let key = (
                row.method,
                format!("{:?}", row.sender),
                format!("{:?}", row.kind),
            );
            assert!(seen.insert(key), "{} is listed twice", row.method);
        }
    }

    #[test]
    fn a_method_is_removed_only_after_it_was_introduced() {
        for row in METHODS {
            if let Some(removed) = row.removed {
                assert!(removed > row.introduced, "{}", row.method);
            }
        }
    }
}
