//! What the agent asks of the client: the v1 `clientMethods`, and the
//! results an agent reads from them.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::inbound::ClientCapabilities;

/// Method names the client handles, from the v1 `meta.json`
/// (`clientMethods`).
pub mod methods {
    /// `session/request_permission`: baseline, every client implements it.
    pub const SESSION_REQUEST_PERMISSION: &str = "session/request_permission";
    /// `session/update` (a notification).
    pub const SESSION_UPDATE: &str = "session/update";
    /// `fs/read_text_file`, gated by `fs.readTextFile`.
    pub const FS_READ_TEXT_FILE: &str = "fs/read_text_file";
    /// `fs/write_text_file`, gated by `fs.writeTextFile`.
    pub const FS_WRITE_TEXT_FILE: &str = "fs/write_text_file";
    /// `terminal/create`, gated by `terminal`.
    pub const TERMINAL_CREATE: &str = "terminal/create";
    /// `terminal/output`, gated by `terminal`.
    pub const TERMINAL_OUTPUT: &str = "terminal/output";
    /// `terminal/wait_for_exit`, gated by `terminal`.
    pub const TERMINAL_WAIT_FOR_EXIT: &str = "terminal/wait_for_exit";
    /// `terminal/kill`, gated by `terminal`.
    pub const TERMINAL_KILL: &str = "terminal/kill";
    /// `terminal/release`, gated by `terminal`.
    pub const TERMINAL_RELEASE: &str = "terminal/release";
    /// `$/cancel_request`: the agent stopped waiting for one of its requests.
    pub const CANCEL_REQUEST: &str = "$/cancel_request";
}

/// The capability a client method needs, if the peer knows of one.
///
/// Methods not listed (`session/request_permission`, extensions,
/// `elicitation/create`, whose gate depends on its mode) pass unchecked.
pub(super) fn required_capability(method: &str, caps: &ClientCapabilities) -> Option<&'static str> {
    let (name, granted) = match method {
        methods::FS_READ_TEXT_FILE => ("fs.readTextFile", caps.read_text_file),
        methods::FS_WRITE_TEXT_FILE => ("fs.writeTextFile", caps.write_text_file),
        m if m.starts_with("terminal/") => ("terminal", caps.terminal),
        _ => return None,
    };
    (!granted).then_some(name)
}

/// The user's answer to `session/request_permission`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PermissionOutcome {
    /// The user picked one of the offered options.
    Selected {
        /// The `optionId` chosen.
        option_id: String,
    },
    /// The turn was cancelled before the user chose.
    Cancelled,
}

impl PermissionOutcome {
    /// Reads `{"outcome": {"outcome": "selected", "optionId": ..}}` or
    /// `{"outcome": {"outcome": "cancelled"}}`.
    ///
    /// # Errors
    ///
    /// What did not fit, when the result has neither shape.
    pub fn from_result(result: &Value) -> Result<Self, String> {
        let outcome = result
            .get("outcome")
            .ok_or_else(|| "missing `outcome`".to_owned())?;
        match outcome.get("outcome").and_then(Value::as_str) {
            Some("cancelled") => Ok(Self::Cancelled),
            Some("selected") => outcome
                .get("optionId")
                .and_then(Value::as_str)
                .map(|id| Self::Selected {
                    option_id: id.to_owned(),
                })
                .ok_or_else(|| "a selected outcome needs a string `optionId`".to_owned()),
            _ => Err("`outcome.outcome` must be \"selected\" or \"cancelled\"".to_owned()),
        }
    }
}

/// `fs/read_text_file`'s result.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ReadTextFileResult {
    /// The file's text (or the requested lines).
    pub content: String,
    /// Everything else, `_meta` included.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `terminal/create`'s result.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateTerminalResult {
    /// The terminal, for the other `terminal/*` calls and for embedding in
    /// a tool call's content.
    pub terminal_id: String,
    /// Everything else, `_meta` included.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `terminal/output`'s result.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TerminalOutputResult {
    /// The output captured so far.
    pub output: String,
    /// Whether the client cut it to `outputByteLimit`.
    pub truncated: bool,
    /// Set once the command has exited.
    #[serde(default)]
    pub exit_status: Option<TerminalExitStatus>,
    /// Everything else, `_meta` included.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// How a terminal's command ended (`terminal/wait_for_exit`'s result).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TerminalExitStatus {
    /// The exit code, when the command exited by itself.
    #[serde(default)]
    pub exit_code: Option<u32>,
    /// The signal, when one ended it.
    #[serde(default)]
    pub signal: Option<String>,
    /// Everything else, `_meta` included.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
