//! What the client sends the agent, read into the ACP v1 method set.
//!
//! The schema calls client→agent requests `ClientRequest` and agent→client
//! ones `AgentRequest`; the types here are named by direction instead
//! ([`Inbound`], [`InboundRequest`]) so neither schema name is reused with
//! the opposite meaning.
//!
//! The typed params are deliberately light: the fields an agent reads, with
//! everything else kept in `extra` (including `_meta`), so nothing a client
//! sends is lost and new optional fields never cause -32602.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::wire::is_id;
use crate::domain::ir::ContentBlock;

/// Method names the agent handles, from the v1 `meta.json` (`agentMethods`
/// and `protocolMethods`).
pub mod methods {
    /// `initialize`.
    pub const INITIALIZE: &str = "initialize";
    /// `authenticate`.
    pub const AUTHENTICATE: &str = "authenticate";
    /// `logout`.
    pub const LOGOUT: &str = "logout";
    /// `session/new`.
    pub const SESSION_NEW: &str = "session/new";
    /// `session/load`.
    pub const SESSION_LOAD: &str = "session/load";
    /// `session/resume`.
    pub const SESSION_RESUME: &str = "session/resume";
    /// `session/list`.
    pub const SESSION_LIST: &str = "session/list";
    /// `session/delete`.
    pub const SESSION_DELETE: &str = "session/delete";
    /// `session/close`.
    pub const SESSION_CLOSE: &str = "session/close";
    /// `session/prompt`.
    pub const SESSION_PROMPT: &str = "session/prompt";
    /// `session/set_mode`.
    pub const SESSION_SET_MODE: &str = "session/set_mode";
    /// `session/set_config_option`.
    pub const SESSION_SET_CONFIG_OPTION: &str = "session/set_config_option";
    /// `session/cancel` (a notification).
    pub const SESSION_CANCEL: &str = "session/cancel";
    /// `$/cancel_request` (a protocol-level notification).
    pub const CANCEL_REQUEST: &str = "$/cancel_request";
}

/// One message from the client that the application must see.
#[derive(Clone, Debug, PartialEq)]
pub enum Inbound {
    /// A request: it must be answered exactly once, with its `id`. Boxed
    /// because typed params are several hundred bytes, and notifications
    /// (frequent during a turn) should not pay for them.
    Request(Box<InboundRequest>),
    /// A notification: it must never be answered.
    Notification(InboundNotification),
}

/// A request from the client.
#[derive(Clone, Debug, PartialEq)]
pub struct InboundRequest {
    /// The id as sent, type included; `null` is a valid id here.
    pub id: Value,
    /// The method name as sent.
    pub method: String,
    /// The params read for the method, or why they do not fit it.
    ///
    /// Bad params are delivered rather than answered by the peer: whether a
    /// method is served at all (a gated `session/load`, say) is the
    /// application's decision, and -32601 must win over -32602 there.
    /// Answer an `Err` with [`AcpSender::reply_invalid_params`](super::AcpSender::reply_invalid_params).
    pub params: Result<RequestParams, InvalidParams>,
}

/// A notification from the client.
#[derive(Clone, Debug, PartialEq)]
pub struct InboundNotification {
    /// The method name as sent.
    pub method: String,
    /// The params read for the method, or why they do not fit it. A
    /// notification with bad params is never answered; it is delivered so
    /// the application can log it.
    pub params: Result<NotificationParams, InvalidParams>,
}

/// Params that do not fit their method: answer -32602.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("Invalid params: {message}")]
pub struct InvalidParams {
    /// What was wrong, for the error's message.
    pub message: String,
}

impl InvalidParams {
    fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

/// The params of each client→agent request in ACP v1.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum RequestParams {
    /// `initialize`.
    Initialize(InitializeParams),
    /// `authenticate`.
    Authenticate(AuthenticateParams),
    /// `logout`.
    Logout(EmptyParams),
    /// `session/new`.
    NewSession(NewSessionParams),
    /// `session/load`.
    LoadSession(LoadSessionParams),
    /// `session/resume`.
    ResumeSession(ResumeSessionParams),
    /// `session/list`.
    ListSessions(ListSessionsParams),
    /// `session/delete`.
    DeleteSession(SessionParams),
    /// `session/close`.
    CloseSession(SessionParams),
    /// `session/prompt`.
    Prompt(PromptParams),
    /// `session/set_mode`.
    SetMode(SetModeParams),
    /// `session/set_config_option`.
    SetConfigOption(SetConfigOptionParams),
    /// A method whose name starts with `_`: an extension. Raw params.
    Extension(Option<Value>),
    /// A method v1 does not define (or an unstable one such as
    /// `session/fork`). Raw params; usually answered -32601 with
    /// [`AcpSender::reply_method_not_found`](super::AcpSender::reply_method_not_found).
    Unknown(Option<Value>),
}

/// The params of each client→agent notification in ACP v1.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum NotificationParams {
    /// `session/cancel`: stop the session's prompt turn.
    Cancel(SessionParams),
    /// `$/cancel_request`: the client gave up on one of its requests.
    CancelRequest(CancelRequestParams),
    /// A `_`-prefixed extension notification. Raw params.
    Extension(Option<Value>),
    /// A notification v1 does not define. Raw params; ACP says to ignore it.
    Unknown(Option<Value>),
}

/// Params with nothing the agent needs (`logout`): only `_meta` and friends.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct EmptyParams {
    /// Everything sent, `_meta` included.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `initialize` params.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    /// The newest major version the client speaks. An integer: the string
    /// versions of protocol 0 are refused (-32602), as the current SDK does.
    pub protocol_version: u16,
    /// What the client can do; absent means nothing.
    #[serde(default)]
    pub client_capabilities: ClientCapabilities,
    /// Who the client is, when it says so and says it readably.
    #[serde(default, deserialize_with = "lenient")]
    pub client_info: Option<Implementation>,
    /// Everything else, `_meta` included.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The client capabilities an agent must check before calling the client.
///
/// Read leniently, as the schema asks (`x-deserialize-default-on-error`): a
/// capability of the wrong type counts as not advertised rather than failing
/// `initialize`, and unknown capabilities are kept in `raw`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClientCapabilities {
    /// `fs.readTextFile`: `fs/read_text_file` may be called.
    pub read_text_file: bool,
    /// `fs.writeTextFile`: `fs/write_text_file` may be called.
    pub write_text_file: bool,
    /// `terminal`: every `terminal/*` method may be called.
    pub terminal: bool,
    /// The capabilities object as sent.
    pub raw: Value,
}

impl ClientCapabilities {
    /// Reads the capabilities object, never failing.
    #[must_use]
    pub fn from_json(raw: Value) -> Self {
        let flag = |path: &[&str]| {
            let mut at = &raw;
            for key in path {
                match at.get(key) {
                    Some(next) => at = next,
                    None => return false,
                }
            }
            at.as_bool().unwrap_or(false)
        };
        Self {
            read_text_file: flag(&["fs", "readTextFile"]),
            write_text_file: flag(&["fs", "writeTextFile"]),
            terminal: flag(&["terminal"]),
            raw,
        }
    }
}

impl<'de> Deserialize<'de> for ClientCapabilities {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(Self::from_json)
    }
}

/// `Implementation`: a client's or agent's name and version.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Implementation {
    /// The programmatic name.
    pub name: String,
    /// The display name.
    #[serde(default)]
    pub title: Option<String>,
    /// The version.
    pub version: String,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `authenticate` params.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthenticateParams {
    /// The advertised auth method chosen.
    pub method_id: String,
    /// Everything else, `_meta` included.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `session/new` params.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSessionParams {
    /// The session's working directory; checked to be absolute.
    pub cwd: String,
    /// The MCP servers to connect to; required, possibly empty.
    pub mcp_servers: Vec<McpServer>,
    /// Further workspace roots.
    #[serde(default)]
    pub additional_directories: Vec<String>,
    /// Everything else, `_meta` included.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `session/load` params.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadSessionParams {
    /// The session to load.
    pub session_id: String,
    /// The working directory; checked to be absolute.
    pub cwd: String,
    /// The MCP servers to connect to; required, possibly empty.
    pub mcp_servers: Vec<McpServer>,
    /// Further workspace roots.
    #[serde(default)]
    pub additional_directories: Vec<String>,
    /// Everything else, `_meta` included.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `session/resume` params.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResumeSessionParams {
    /// The session to resume.
    pub session_id: String,
    /// The working directory; checked to be absolute.
    pub cwd: String,
    /// The MCP servers to connect to; optional here, unlike new and load.
    #[serde(default)]
    pub mcp_servers: Vec<McpServer>,
    /// Further workspace roots.
    #[serde(default)]
    pub additional_directories: Vec<String>,
    /// Everything else, `_meta` included.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `session/list` params.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListSessionsParams {
    /// Only sessions in this directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Where the previous page ended.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Everything else, `_meta` included.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Params naming one session (`session/delete`, `session/close`,
/// `session/cancel`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionParams {
    /// The session.
    pub session_id: String,
    /// Everything else, `_meta` included.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `session/prompt` params.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptParams {
    /// The session.
    pub session_id: String,
    /// The content blocks, raw; each is checked to be an object with a
    /// string `type`. ACP's `ContentBlock` is MCP's, so an agent can read
    /// them with the MCP wire types when it needs more.
    pub prompt: Vec<Value>,
    /// Everything else, `_meta` included.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `session/set_mode` params.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetModeParams {
    /// The session.
    pub session_id: String,
    /// The mode to switch to.
    pub mode_id: String,
    /// Everything else, `_meta` included.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `session/set_config_option` params.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", try_from = "RawSetConfigOption")]
pub struct SetConfigOptionParams {
    /// The session.
    pub session_id: String,
    /// The option to set.
    pub config_id: String,
    /// The new value. Whether it is among the option's values is for the
    /// application to check (-32602 if not): only it knows the options.
    pub value: ConfigValue,
    /// Everything else, `_meta` included.
    pub extra: Map<String, Value>,
}

/// A config option's new value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigValue {
    /// The id of one of a `select` option's values (no `type`, or a `type`
    /// this build does not know with a string value, as the schema says).
    Id(String),
    /// A `type: "boolean"` option's value.
    Boolean(bool),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawSetConfigOption {
    session_id: String,
    config_id: String,
    #[serde(rename = "type", default)]
    kind: Option<String>,
    value: Value,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

impl TryFrom<RawSetConfigOption> for SetConfigOptionParams {
    type Error = String;

    fn try_from(raw: RawSetConfigOption) -> Result<Self, Self::Error> {
        let value = match (raw.kind.as_deref(), raw.value) {
            (Some("boolean"), Value::Bool(b)) => ConfigValue::Boolean(b),
            (Some("boolean"), _) => return Err("a boolean option needs a boolean `value`".into()),
            (_, Value::String(id)) => ConfigValue::Id(id),
            _ => return Err("`value` must be a value id (a string)".into()),
        };
        Ok(Self {
            session_id: raw.session_id,
            config_id: raw.config_id,
            value,
            extra: raw.extra,
        })
    }
}

/// One `McpServer` entry of `session/new`, `load` or `resume`.
#[derive(Clone, Debug, PartialEq)]
pub enum McpServer {
    /// No `type` member: stdio, which every agent must support.
    Stdio(McpServerStdio),
    /// `"type": "http"`.
    Http(McpServerHttp),
    /// `"type": "sse"` (deprecated in MCP).
    Sse(McpServerHttp),
    /// Any other `type` (`acp` is unstable). Kept rather than refused so the
    /// application applies its own documented rule (skip or -32602).
    Other {
        /// The `type` as sent.
        transport: String,
        /// The entry as sent.
        raw: Value,
    },
    /// An entry that does not read as a server of its `type` (a member
    /// missing or of the wrong type). Kept rather than refusing the whole
    /// request: the schema marks the list's invalid items to be skipped, and
    /// the application can say which one was and why.
    Invalid {
        /// What did not read.
        why: String,
        /// The entry as sent.
        raw: Value,
    },
}

impl<'de> Deserialize<'de> for McpServer {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Value::deserialize(deserializer)?;
        let invalid = |why: String, raw: Value| Self::Invalid { why, raw };
        // Told apart by the `type` key: stdio is the one without it.
        let transport = match raw.get("type") {
            None => None,
            Some(Value::String(kind)) => Some(kind.clone()),
            Some(_) => {
                return Ok(invalid(
                    "an MCP server's `type` must be a string".to_owned(),
                    raw,
                ));
            }
        };
        let read = match transport.as_deref() {
            None => serde_json::from_value(raw.clone()).map(Self::Stdio),
            Some("http") => serde_json::from_value(raw.clone()).map(Self::Http),
            Some("sse") => serde_json::from_value(raw.clone()).map(Self::Sse),
            Some(other) => {
                return Ok(Self::Other {
                    transport: other.to_owned(),
                    raw,
                });
            }
        };
        Ok(read.unwrap_or_else(|error| invalid(error.to_string(), raw)))
    }
}

/// An MCP server the agent starts itself.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct McpServerStdio {
    /// A name for the server.
    pub name: String,
    /// The executable, as an absolute path.
    pub command: String,
    /// Its arguments; required even when empty.
    pub args: Vec<String>,
    /// Its environment: an array of name/value pairs, not a map.
    pub env: Vec<NameValue>,
    /// Everything else, `_meta` included.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// An MCP server reached over HTTP or SSE.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct McpServerHttp {
    /// A name for the server.
    pub name: String,
    /// Its URL.
    pub url: String,
    /// Headers to send; required even when empty.
    pub headers: Vec<NameValue>,
    /// Everything else (`type`, `_meta`).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// An environment variable or an HTTP header.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct NameValue {
    /// The name.
    pub name: String,
    /// The value.
    pub value: String,
}

/// `$/cancel_request` params.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelRequestParams {
    /// The id of the client's request to cancel, as sent.
    pub request_id: Value,
    /// Everything else, `_meta` included.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A field the schema marks as "default on error": unreadable means absent.
fn lenient<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    let raw = Value::deserialize(deserializer)?;
    Ok(serde_json::from_value(raw).ok())
}

/// Reads a request's params for its method.
pub(super) fn request_params(
    method: &str,
    params: Option<Value>,
) -> Result<RequestParams, InvalidParams> {
    use RequestParams as P;
    use methods as m;
    Ok(match method {
        m::INITIALIZE => P::Initialize(typed(params)?),
        m::AUTHENTICATE => P::Authenticate(typed(params)?),
        m::LOGOUT => P::Logout(typed(params)?),
        m::SESSION_NEW => {
            let p: NewSessionParams = typed(params)?;
            absolute(&p.cwd)?;
            P::NewSession(p)
        }
        m::SESSION_LOAD => {
            let p: LoadSessionParams = typed(params)?;
            absolute(&p.cwd)?;
            P::LoadSession(p)
        }
        m::SESSION_RESUME => {
            let p: ResumeSessionParams = typed(params)?;
            absolute(&p.cwd)?;
            P::ResumeSession(p)
        }
        m::SESSION_LIST => P::ListSessions(typed(params)?),
        m::SESSION_DELETE => P::DeleteSession(typed(params)?),
        m::SESSION_CLOSE => P::CloseSession(typed(params)?),
        m::SESSION_PROMPT => {
            let p: PromptParams = typed(params)?;
            if let Some(why) = p.prompt.iter().find_map(unfit_block) {
                return Err(InvalidParams::new(why));
            }
            P::Prompt(p)
        }
        m::SESSION_SET_MODE => P::SetMode(typed(params)?),
        m::SESSION_SET_CONFIG_OPTION => P::SetConfigOption(typed(params)?),
        other if other.starts_with('_') => P::Extension(params),
        _ => P::Unknown(params),
    })
}

/// Why `block` is not one of the content blocks a prompt may hold (ACP's
/// `ContentBlock`: MCP's text, image, audio, resource link and embedded
/// resource), if it is not. Refused rather than kept, a block would be
/// replayed by `session/load` as an update no client can read.
fn unfit_block(block: &Value) -> Option<String> {
    let Some(kind) = block.get("type").and_then(Value::as_str) else {
        return Some("every prompt block must be an object with a string `type`".to_owned());
    };
    match ContentBlock::deserialize(block) {
        Ok(
            ContentBlock::Text(_)
            | ContentBlock::Image(_)
            | ContentBlock::Audio(_)
            | ContentBlock::ResourceLink(_)
            | ContentBlock::Resource(_),
        ) => None,
        Ok(_) => Some(format!("a prompt holds no `{kind}` block")),
        Err(e) => Some(format!("a `{kind}` prompt block does not read: {e}")),
    }
}

/// Reads a notification's params for its method.
pub(super) fn notification_params(
    method: &str,
    params: Option<Value>,
) -> Result<NotificationParams, InvalidParams> {
    Ok(match method {
        methods::SESSION_CANCEL => NotificationParams::Cancel(typed(params)?),
        methods::CANCEL_REQUEST => {
            let p: CancelRequestParams = typed(params)?;
            if !is_id(&p.request_id) {
                return Err(InvalidParams::new(
                    "`requestId` must be a string, an integer or null",
                ));
            }
            NotificationParams::CancelRequest(p)
        }
        other if other.starts_with('_') => NotificationParams::Extension(params),
        _ => NotificationParams::Unknown(params),
    })
}

/// Missing params read as `{}`: methods whose fields are all optional
/// (`logout`, `session/list`) then succeed, and the others fail on their
/// first required field, which names what is missing.
fn typed<T: DeserializeOwned>(params: Option<Value>) -> Result<T, InvalidParams> {
    let params = params.unwrap_or_else(|| Value::Object(Map::new()));
    if !params.is_object() {
        return Err(InvalidParams::new("params must be an object"));
    }
    serde_json::from_value(params).map_err(|e| InvalidParams::new(e.to_string()))
}

fn absolute(cwd: &str) -> Result<(), InvalidParams> {
    // The platform's own rule: the client runs on the same machine as the
    // agent it spawned, so its paths are this platform's paths.
    if Path::new(cwd).is_absolute() {
        Ok(())
    } else {
        Err(InvalidParams::new(format!(
            "`cwd` must be absolute: {cwd:?}"
        )))
    }
}
