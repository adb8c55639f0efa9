//! The 2026-07-28 wire: stateless, with per-request `_meta`.
//!
//! No handshake, no `ping`, no server-initiated requests: what a server needs
//! from the client travels inside an `InputRequiredResult`, and change
//! notifications arrive on a `subscriptions/listen` stream.

use super::revision::RevisionCodec;
use protocol_droid_domain::ProtocolVersion;

/// The 2026-07-28 revision.
pub static CODEC: RevisionCodec = RevisionCodec {
    version: ProtocolVersion::V2026_07_28,
    client_requests: &[
        "server/discover",
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "subscriptions/listen",
        "completion/complete",
    ],
    client_notifications: &["notifications/cancelled"],
    server_requests: &[],
    server_notifications: &[
        "notifications/cancelled",
        "notifications/progress",
        "notifications/message",
        "notifications/resources/updated",
        "notifications/resources/list_changed",
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/subscriptions/acknowledged",
    ],
};
