//! A result finished for the revision of the request it answers: lowered
//! (a tool's, typed, for the transport to write), its 2026-07-28 members
//! added or a legacy client's removed, and the server named in a
//! 2026-07-28 result's `_meta`. What the request methods and the tasks that
//! run them both end with.

use serde_json::Value;

use super::SERVER_INFO_META;
use crate::application::server::call::CallError;
use crate::application::server::host::Server;
use crate::application::server::reply::Reply;
use crate::domain::ir::{JsonObject, ToolResult, TranslationReport};
use crate::domain::{DegradePolicy, Era, ProtocolVersion};
use crate::wire::codec::for_version;

/// A tool's result lowered for `version` and finished as [`finish`]
/// would finish it, left for the transport to write.
pub(super) fn write_tool_result(
    server: &Server,
    value: ToolResult,
    version: ProtocolVersion,
) -> Result<Reply, CallError> {
    let mut report = TranslationReport::new(version);
    // The server wrote the result, so lowering it for an older client is
    // its own decision, not a bridge's: permissive.
    //
    // Written typed, a result repeating a field among its unmodelled
    // members would name it twice; it goes the JSON-object way, where
    // the unmodelled member wins, as it always did.
    if value.extra_repeats_a_field() {
        let lowered = for_version(version)
            .lower_tool_result(value, DegradePolicy::permissive(), &mut report)
            .map_err(|e| CallError::internal(e.to_string()))?;
        return Ok(finish(Reply::Value(lowered), "tools/call", version, server));
    }
    // Boxed at once and lowered where it lies: moved by value through
    // each step, the result was copied several times over.
    let mut result = Box::new(value);
    for_version(version)
        .lower_tool_result_in_place(&mut result, DegradePolicy::permissive(), &mut report)
        .map_err(|e| CallError::internal(e.to_string()))?;
    if version.era() == Era::Modern {
        stamp_server_info(result.meta.get_or_insert_with(JsonObject::new), server);
    }
    Ok(Reply::Tool(result))
}

/// A result finished for `method` at `version`.
pub(super) fn finish(
    reply: Reply,
    method: &str,
    version: ProtocolVersion,
    server: &Server,
) -> Reply {
    // A tool's result was finished as it was lowered.
    let Reply::Value(Value::Object(mut map)) = reply else {
        return reply;
    };
    let codec = for_version(version);
    codec.finish_result(Some(method), &mut map);
    if version.era() == Era::Modern {
        let meta = map
            .entry("_meta")
            .or_insert_with(|| Value::Object(JsonObject::new()));
        if let Value::Object(meta) = meta {
            stamp_server_info(meta, server);
        }
    }
    Reply::Value(Value::Object(map))
}

/// Names the server in a 2026-07-28 result's `_meta`, unless the handler
/// already did.
fn stamp_server_info(meta: &mut JsonObject, server: &Server) {
    meta.entry(SERVER_INFO_META)
        .or_insert_with(|| server.server_info());
}
