//! The 2025-06-18 wire: structured output, elicitation, resource links.

use super::revision::RevisionCodec;
use protocol_droid_domain::ProtocolVersion;

/// The 2025-06-18 revision.
pub static CODEC: RevisionCodec = RevisionCodec {
    version: ProtocolVersion::V2025_06_18,
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
    ],
    client_notifications: &[
        "notifications/initialized",
        "notifications/cancelled",
        "notifications/progress",
        "notifications/roots/list_changed",
    ],
    server_requests: &[
        "ping",
        "sampling/createMessage",
        "roots/list",
        "elicitation/create",
    ],
    server_notifications: &[
        "notifications/cancelled",
        "notifications/progress",
        "notifications/message",
        "notifications/resources/updated",
        "notifications/resources/list_changed",
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
    ],
};
