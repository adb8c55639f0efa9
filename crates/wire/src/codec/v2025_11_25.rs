//! The 2025-11-25 wire: icons, URL elicitation, sampling with tools, tasks.

use super::revision::RevisionCodec;
use protocol_droid_domain::ProtocolVersion;

/// The 2025-11-25 revision.
pub static CODEC: RevisionCodec = RevisionCodec {
    version: ProtocolVersion::V2025_11_25,
    client_requests: &[
        "initialize",
        "ping",
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "logging/setLevel",
        "completion/complete",
        "tasks/get",
        "tasks/result",
        "tasks/list",
        "tasks/cancel",
    ],
    client_notifications: &[
        "notifications/initialized",
        "notifications/cancelled",
        "notifications/progress",
        "notifications/roots/list_changed",
        "notifications/tasks/status",
    ],
    server_requests: &[
        "ping",
        "sampling/createMessage",
        "roots/list",
        "elicitation/create",
        "tasks/get",
        "tasks/result",
        "tasks/list",
        "tasks/cancel",
    ],
    server_notifications: &[
        "notifications/cancelled",
        "notifications/progress",
        "notifications/message",
        "notifications/resources/updated",
        "notifications/resources/list_changed",
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/elicitation/complete",
        "notifications/tasks/status",
    ],
};
