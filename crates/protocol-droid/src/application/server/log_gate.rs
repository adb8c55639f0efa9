//! The threshold a handler's log records are filtered against, opened by
//! the client in whichever way its era has.

use crate::domain::LoggingLevel;
use crate::domain::ir::JsonObject;

/// The threshold log records are filtered against.
///
/// Closed (nothing passes) until a client opts in: in the legacy era with
/// `logging/setLevel`, for the whole session; in 2026-07-28 with
/// `_meta["io.modelcontextprotocol/logLevel"]`, for one request only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogGate {
    threshold: Option<LoggingLevel>,
}

impl LogGate {
    /// A gate letting nothing through.
    #[must_use]
    pub const fn closed() -> Self {
        Self { threshold: None }
    }

    /// A gate letting `level` and everything more severe through.
    #[must_use]
    pub const fn at(level: LoggingLevel) -> Self {
        Self {
            threshold: Some(level),
        }
    }

    /// The gate a 2026-07-28 request's `_meta` asks for: open at its
    /// `logLevel`, closed without one. Never inherited from another request.
    #[must_use]
    pub fn for_request(meta: &JsonObject) -> Self {
        meta.get(LOG_LEVEL_META)
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .map_or_else(Self::closed, Self::at)
    }

    /// The threshold, when the gate is open.
    #[must_use]
    pub const fn threshold(self) -> Option<LoggingLevel> {
        self.threshold
    }

    /// Whether a record at `level` passes.
    #[must_use]
    pub fn allows(self, level: LoggingLevel) -> bool {
        self.threshold.is_some_and(|t| level >= t)
    }

    /// Whether a record at `level` that another server wrote (carried by a
    /// bridge or gateway) passes: as [`Self::allows`], except that a
    /// `legacy` session that never chose a level gets what that server
    /// chose to send, as it would connected to the server itself (before
    /// `logging/setLevel` the server decides). A 2026-07-28 request without
    /// a `logLevel` asked for none.
    #[must_use]
    pub fn allows_forwarded(self, level: LoggingLevel, legacy: bool) -> bool {
        self.threshold.map_or(legacy, |t| level >= t)
    }
}

/// The `_meta` key a 2026-07-28 request opts into logging with.
pub const LOG_LEVEL_META: &str = "io.modelcontextprotocol/logLevel";
