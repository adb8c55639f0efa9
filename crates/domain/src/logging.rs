//! Log severities, as MCP's logging utility names them.

use serde::{Deserialize, Serialize};

/// A syslog severity (RFC 5424), least to most severe: `LoggingLevel`.
///
/// Closed: the spec answers an unknown level with invalid params. Ordered so
/// that `level >= threshold` is the whole filtering rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoggingLevel {
    /// Debugging detail.
    Debug,
    /// Informational.
    Info,
    /// Normal but significant.
    Notice,
    /// A warning.
    Warning,
    /// An error.
    Error,
    /// A critical condition.
    Critical,
    /// Action must be taken immediately.
    Alert,
    /// The system is unusable.
    Emergency,
}
