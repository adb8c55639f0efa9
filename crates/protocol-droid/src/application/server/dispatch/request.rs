//! Each client request decoded once, before anything serves it.
//!
//! Dispatch reads what a request asks for from a [`ClientRequest`]: the
//! method, checked against the revision's method table, and the members that
//! decide how it is served (a tool's name, a resource's URI, a log level),
//! with their types checked. A member of the wrong type is refused here, with
//! `-32602` naming it, so no later step reads raw JSON or guesses a default.
//!
//! The params map stays beside the decoded request for what takes the params
//! whole: a forwarder passes them on unchanged, a request's digest covers
//! every member, and a handler's arguments are moved out of it, not copied.

use serde::Deserialize as _;
use serde_json::Value;

use crate::domain::ir::{JsonObject, member};
use crate::domain::{LoggingLevel, ProtocolVersion, Refusal, Unknown};
use crate::wire::codec::{Sender, for_version};

use super::{CLIENT_CAPABILITIES_META, CLIENT_INFO_META, PROTOCOL_VERSION_META};
use crate::application::server::LOG_LEVEL_META;
use crate::application::server::scopes::Named;

/// What a client request asks for, decoded at its revision's shape.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum ClientRequest {
    /// `ping`.
    Ping,
    /// One of the four list requests.
    List(Listing),
    /// `tools/call`.
    CallTool {
        /// The tool called.
        name: String,
    },
    /// `prompts/get`.
    GetPrompt {
        /// The prompt asked for.
        name: String,
    },
    /// `resources/read`.
    ReadResource {
        /// The resource read.
        uri: String,
    },
    /// `completion/complete`.
    Complete(CompletionTarget),
    /// `logging/setLevel` (legacy).
    SetLevel(LoggingLevel),
    /// `resources/subscribe` (legacy).
    Subscribe {
        /// The resource watched.
        uri: String,
    },
    /// `resources/unsubscribe` (legacy).
    Unsubscribe {
        /// The resource no longer watched.
        uri: String,
    },
    /// `server/discover` (2026-07-28).
    Discover,
    /// `subscriptions/listen` (2026-07-28).
    Listen,
    /// A task method: 2025-11-25's core ones, or the 2026-07-28
    /// extension's (decoded by [`TaskRequest::decode_extension`]).
    Task(TaskRequest),
    /// A method no revision models, only ever served by a forwarder.
    Unmodelled,
}

/// A request about tasks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum TaskRequest {
    /// `tasks/get` of this task.
    Get(String),
    /// `tasks/result` of this task (2025-11-25).
    Result(String),
    /// `tasks/list` after this cursor (2025-11-25).
    List(Option<String>),
    /// `tasks/cancel` of this task.
    Cancel(String),
    /// `tasks/update` of this task (2026-07-28 extension).
    Update(String),
}

impl TaskRequest {
    /// The methods the 2026-07-28 tasks extension adds; `tasks/result` and
    /// `tasks/list` are not among them, so they stay unknown there.
    pub(super) const EXTENSION_METHODS: [&'static str; 3] =
        ["tasks/get", "tasks/update", "tasks/cancel"];

    /// Decodes one of [`Self::EXTENSION_METHODS`].
    ///
    /// # Errors
    ///
    /// `-32602` when `taskId` (or `tasks/update`'s `inputResponses`) is
    /// missing or of the wrong type.
    pub(super) fn decode_extension(method: &str, params: &JsonObject) -> Result<Self, Refusal> {
        let id = required_str(params, "taskId")?.to_owned();
        match method {
            "tasks/get" => Ok(Self::Get(id)),
            "tasks/cancel" => Ok(Self::Cancel(id)),
            _ => match member(params, "inputResponses") {
                Some(Value::Object(_)) => Ok(Self::Update(id)),
                _ => Err(Refusal::invalid_params(
                    "`inputResponses` must be an object",
                )),
            },
        }
    }
}

/// Which list a list request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Listing {
    /// `tools/list`.
    Tools,
    /// `prompts/list`.
    Prompts,
    /// `resources/list`.
    Resources,
    /// `resources/templates/list`.
    ResourceTemplates,
}

/// What a `completion/complete` request completes an argument of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum CompletionTarget {
    /// A prompt, by name (`ref/prompt`).
    Prompt(String),
    /// A resource template or resource, by URI (`ref/resource`).
    Resource(String),
}

impl CompletionTarget {
    /// The name or URI completed for.
    pub(super) fn name(&self) -> &str {
        match self {
            Self::Prompt(name) | Self::Resource(name) => name,
        }
    }
}

impl ClientRequest {
    /// Decodes the request `method` with `params` as `version` shapes it.
    ///
    /// `forwarding` says whether a method no revision models may still be
    /// served (a forwarder is there to pass it on).
    ///
    /// # Errors
    ///
    /// `-32601` for a method `version` does not define, `-32602` for a
    /// member missing or of the wrong type.
    pub(super) fn decode(
        method: &str,
        params: &JsonObject,
        version: ProtocolVersion,
        forwarding: bool,
    ) -> Result<Self, Refusal> {
        if !for_version(version).defines_request(Sender::Client, method) {
            if forwarding && super::super::forward::is_unmodelled(method) {
                return Ok(Self::Unmodelled);
            }
            return Err(Refusal::method_not_found(format!(
                "{method} is not a method of {version}"
            )));
        }
        progress_token(params)?;
        let list = |listing| {
            optional_str(params, "cursor")?;
            Ok(Self::List(listing))
        };
        match method {
            "ping" => Ok(Self::Ping),
            "tools/list" => list(Listing::Tools),
            "prompts/list" => list(Listing::Prompts),
            "resources/list" => list(Listing::Resources),
            "resources/templates/list" => list(Listing::ResourceTemplates),
            "tools/call" => {
                optional_object(params, "arguments")?;
                Ok(Self::CallTool {
                    name: required_str(params, "name")?.to_owned(),
                })
            }
            "prompts/get" => {
                optional_strings(params, "arguments")?;
                Ok(Self::GetPrompt {
                    name: required_str(params, "name")?.to_owned(),
                })
            }
            "resources/read" => Ok(Self::ReadResource {
                uri: required_str(params, "uri")?.to_owned(),
            }),
            "resources/subscribe" => Ok(Self::Subscribe {
                uri: required_str(params, "uri")?.to_owned(),
            }),
            "resources/unsubscribe" => Ok(Self::Unsubscribe {
                uri: required_str(params, "uri")?.to_owned(),
            }),
            "logging/setLevel" => member(params, "level")
                .and_then(|level| LoggingLevel::deserialize(level).ok())
                .map(Self::SetLevel)
                .ok_or_else(|| Refusal::invalid_params("`level` must be a logging level")),
            "completion/complete" => completion_target(params).map(Self::Complete),
            "tasks/get" => Ok(Self::Task(TaskRequest::Get(
                required_str(params, "taskId")?.to_owned(),
            ))),
            "tasks/result" => Ok(Self::Task(TaskRequest::Result(
                required_str(params, "taskId")?.to_owned(),
            ))),
            "tasks/cancel" => Ok(Self::Task(TaskRequest::Cancel(
                required_str(params, "taskId")?.to_owned(),
            ))),
            "tasks/list" => Ok(Self::Task(TaskRequest::List(
                optional_str(params, "cursor")?.map(str::to_owned),
            ))),
            "server/discover" => Ok(Self::Discover),
            "subscriptions/listen" => Ok(Self::Listen),
            // A method the table defines that this server has no case for
            // (a task method, say) is not served.
            other => Err(Refusal::method_not_found(format!(
                "{other} is not served here"
            ))),
        }
    }

    /// The primitive this request names, as scope rules look it up.
    pub(super) fn named(&self) -> Option<Named<'_>> {
        Some(match self {
            Self::CallTool { name } => Named::Tool(name),
            Self::GetPrompt { name } => Named::Prompt(name),
            Self::ReadResource { uri } | Self::Subscribe { uri } | Self::Unsubscribe { uri } => {
                Named::Resource(uri)
            }
            Self::Complete(CompletionTarget::Prompt(name)) => Named::CompletionOfPrompt(name),
            Self::Complete(CompletionTarget::Resource(uri)) => Named::CompletionOfResource(uri),
            _ => return None,
        })
    }

    /// The refusal for a request naming a primitive that is not there, and
    /// so also for one naming a primitive the caller may not see: one
    /// wording for both, so a refusal never tells them apart.
    pub(super) fn unknown(&self, version: ProtocolVersion) -> Refusal {
        match self {
            Self::CallTool { name } => Unknown::Tool(name.clone()).into(),
            Self::GetPrompt { name } => Unknown::Prompt(name.clone()).into(),
            Self::ReadResource { uri } => Unknown::Resource {
                uri: uri.clone(),
                at: version,
            }
            .into(),
            Self::Subscribe { uri } | Self::Unsubscribe { uri } => {
                Unknown::Subscription(uri.clone()).into()
            }
            Self::Complete(target) => Unknown::CompletionTarget(target.name().to_owned()).into(),
            _ => Refusal::internal("a request that names nothing was refused as unknown"),
        }
    }
}

/// What a 2026-07-28 request's `_meta` declares about its sender, read once.
#[derive(Debug)]
pub(super) struct Declared<'p> {
    /// The whole `_meta`.
    pub(super) meta: &'p JsonObject,
    /// The revision it names.
    pub(super) requested: &'p str,
    /// The client capabilities it declares.
    pub(super) client_capabilities: &'p JsonObject,
    /// The client's info, if given.
    pub(super) client_info: Option<&'p JsonObject>,
    /// The log level it opts into, if any.
    pub(super) log_level: Option<LoggingLevel>,
}

impl<'p> Declared<'p> {
    /// Reads the `_meta` every 2026-07-28 request carries.
    ///
    /// # Errors
    ///
    /// `-32602` when the revision or the client capabilities are missing,
    /// or a log level is not one.
    pub(super) fn decode(params: &'p JsonObject) -> Result<Self, Refusal> {
        let missing = || {
            Refusal::invalid_params(format!(
                "2026-07-28 requests carry `_meta` with `{PROTOCOL_VERSION_META}` \
                 and `{CLIENT_CAPABILITIES_META}`"
            ))
        };
        let meta = member(params, "_meta")
            .and_then(Value::as_object)
            .ok_or_else(missing)?;
        // By name, not by hash: `_meta` holds a few members, with long names.
        let requested = member(meta, PROTOCOL_VERSION_META)
            .and_then(Value::as_str)
            .ok_or_else(missing)?;
        let client_capabilities = member(meta, CLIENT_CAPABILITIES_META)
            .and_then(Value::as_object)
            .ok_or_else(missing)?;
        let log_level = match member(meta, LOG_LEVEL_META) {
            None => None,
            Some(level) => Some(
                LoggingLevel::deserialize(level)
                    .map_err(|_| Refusal::invalid_params(format!("unknown log level {level}")))?,
            ),
        };
        Ok(Self {
            meta,
            requested,
            client_capabilities,
            client_info: member(meta, CLIENT_INFO_META).and_then(Value::as_object),
            log_level,
        })
    }
}

/// The params of `initialize`, read once.
#[derive(Debug)]
pub(super) struct Hello<'p> {
    /// The revision the client asks for.
    pub(super) requested: &'p str,
    /// The capabilities it declares.
    pub(super) capabilities: &'p JsonObject,
    /// Its info, if given.
    pub(super) client_info: Option<&'p JsonObject>,
    /// The request's `_meta`, if any.
    pub(super) meta: Option<&'p JsonObject>,
}

impl<'p> Hello<'p> {
    /// Reads `initialize`'s params.
    ///
    /// # Errors
    ///
    /// `-32602` when `protocolVersion` or `capabilities` is missing.
    pub(super) fn decode(params: &'p JsonObject) -> Result<Self, Refusal> {
        let requested = member(params, "protocolVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| Refusal::invalid_params("initialize needs `protocolVersion`"))?;
        let capabilities = member(params, "capabilities")
            .and_then(Value::as_object)
            .ok_or_else(|| Refusal::invalid_params("initialize needs `capabilities`"))?;
        Ok(Self {
            requested,
            capabilities,
            client_info: member(params, "clientInfo").and_then(Value::as_object),
            meta: member(params, "_meta").and_then(Value::as_object),
        })
    }
}

/// The `ref` of a `completion/complete` request.
fn completion_target(params: &JsonObject) -> Result<CompletionTarget, Refusal> {
    let malformed =
        || Refusal::invalid_params("`ref` must be a `ref/prompt` or `ref/resource` reference");
    let reference = member(params, "ref")
        .and_then(Value::as_object)
        .ok_or_else(malformed)?;
    let text = |key: &str| reference.get(key).and_then(Value::as_str);
    let target = match text("type") {
        Some("ref/prompt") => {
            CompletionTarget::Prompt(text("name").ok_or_else(malformed)?.to_owned())
        }
        Some("ref/resource") => {
            CompletionTarget::Resource(text("uri").ok_or_else(malformed)?.to_owned())
        }
        _ => return Err(malformed()),
    };
    // What is being completed: every revision's schema has the argument's
    // name and value as strings, and what else has been filled in as a map
    // of strings; an upstream handed anything else answers in its own way.
    let argument = member(params, "argument").and_then(Value::as_object);
    let filled = |key| {
        argument
            .and_then(|a| member(a, key))
            .is_some_and(Value::is_string)
    };
    if !(filled("name") && filled("value")) {
        return Err(Refusal::invalid_params(
            "`argument` must hold a string `name` and a string `value`",
        ));
    }
    match member(params, "context") {
        None | Some(Value::Null) => {}
        Some(Value::Object(context)) => optional_strings(context, "arguments")?,
        Some(_) => return Err(Refusal::invalid_params("`context` must be an object")),
    }
    Ok(target)
}

/// The string member `key` of `params`, which must be there.
fn required_str<'a>(params: &'a JsonObject, key: &str) -> Result<&'a str, Refusal> {
    member(params, key)
        .and_then(Value::as_str)
        .ok_or_else(|| Refusal::invalid_params(format!("`{key}` must be a string")))
}

/// The string member `key` of `params`, if it is there (`null` counts as
/// absent, as clients send it for "no cursor").
fn optional_str<'a>(params: &'a JsonObject, key: &str) -> Result<Option<&'a str>, Refusal> {
    match member(params, key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(Refusal::invalid_params(format!("`{key}` must be a string"))),
    }
}

/// Checks that the member `key` of `params`, if it is there, is an object
/// whose every member is a string: prompt arguments, in every revision.
fn optional_strings(params: &JsonObject, key: &str) -> Result<(), Refusal> {
    match member(params, key) {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(map)) if map.values().all(Value::is_string) => Ok(()),
        Some(_) => Err(Refusal::invalid_params(format!(
            "`{key}` must map names to strings"
        ))),
    }
}

/// Checks that a progress token, if the request asks for progress, is a
/// string or an integer, as every revision has it: notifications carry it
/// back, and a client matches them on it.
fn progress_token(params: &JsonObject) -> Result<(), Refusal> {
    let token = member(params, "_meta")
        .and_then(Value::as_object)
        .and_then(|meta| member(meta, "progressToken"));
    match token {
        None | Some(Value::Null | Value::String(_)) => Ok(()),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Ok(()),
        Some(_) => Err(Refusal::invalid_params(
            "`_meta.progressToken` must be a string or an integer",
        )),
    }
}

/// Checks that the member `key` of `params`, if it is there, is an object.
fn optional_object(params: &JsonObject, key: &str) -> Result<(), Refusal> {
    match member(params, key) {
        None | Some(Value::Null | Value::Object(_)) => Ok(()),
        Some(_) => Err(Refusal::invalid_params(format!(
            "`{key}` must be an object"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::jsonrpc::{ErrorCode, ErrorObject};

    /// The request decoded, or the code and message it was refused with.
    fn decode(
        method: &str,
        params: Value,
        version: ProtocolVersion,
    ) -> Result<ClientRequest, (ErrorCode, String)> {
        let params = match params {
            Value::Object(params) => params,
            _ => JsonObject::new(),
        };
        ClientRequest::decode(method, &params, version, false).map_err(|refusal| {
            let object = ErrorObject::from(refusal);
            (object.code, object.message)
        })
    }

    #[test]
    fn a_call_is_decoded_to_the_tool_it_names() {
        let request = decode(
            "tools/call",
            json!({ "name": "add", "arguments": { "a": 1 } }),
            ProtocolVersion::V2025_06_18,
        );
        assert_eq!(request, Ok(ClientRequest::CallTool { name: "add".into() }));
    }

    #[test]
    fn a_member_of_the_wrong_type_is_refused_by_name() {
        let cases = [
            (
                "tools/call",
                json!({ "name": 7 }),
                "`name` must be a string",
            ),
            (
                "tools/call",
                json!({ "name": "add", "arguments": [1, 2] }),
                "`arguments` must be an object",
            ),
            ("resources/read", json!({}), "`uri` must be a string"),
            (
                "tools/list",
                json!({ "cursor": 3 }),
                "`cursor` must be a string",
            ),
            (
                "logging/setLevel",
                json!({ "level": "loud" }),
                "`level` must be a logging level",
            ),
            (
                "completion/complete",
                json!({ "ref": { "type": "ref/prompt" } }),
                "`ref` must be a `ref/prompt` or `ref/resource` reference",
            ),
            (
                "completion/complete",
                json!({ "ref": { "type": "ref/prompt", "name": "p" },
                        "argument": { "name": 5, "value": "" } }),
                "`argument` must hold a string `name` and a string `value`",
            ),
            (
                "completion/complete",
                json!({ "ref": { "type": "ref/prompt", "name": "p" },
                        "argument": { "name": "a", "value": "" },
                        "context": { "arguments": { "b": null } } }),
                "`arguments` must map names to strings",
            ),
            (
                "prompts/get",
                json!({ "name": "p", "arguments": { "city": 5 } }),
                "`arguments` must map names to strings",
            ),
            (
                "tools/call",
                json!({ "name": "add", "_meta": { "progressToken": { "a": 1 } } }),
                "`_meta.progressToken` must be a string or an integer",
            ),
            (
                "ping",
                json!({ "_meta": { "progressToken": 1.5 } }),
                "`_meta.progressToken` must be a string or an integer",
            ),
        ];
        for (method, params, message) in cases {
            assert_eq!(
                decode(method, params, ProtocolVersion::V2025_06_18),
                Err((ErrorCode::INVALID_PARAMS, message.to_owned())),
                "{method}"
            );
        }
    }

    #[test]
    fn a_method_is_decoded_only_at_a_revision_that_has_it() {
        let level = json!({ "level": "info" });
        assert_eq!(
            decode(
                "logging/setLevel",
                level.clone(),
                ProtocolVersion::V2026_07_28
            ),
            Err((
                ErrorCode::METHOD_NOT_FOUND,
                "logging/setLevel is not a method of 2026-07-28".to_owned()
            ))
        );
        assert_eq!(
            decode("logging/setLevel", level, ProtocolVersion::V2025_03_26),
            Ok(ClientRequest::SetLevel(LoggingLevel::Info))
        );
    }

    #[test]
    fn an_unmodelled_method_passes_only_to_a_forwarder() {
        let params = JsonObject::new();
        let version = ProtocolVersion::V2025_06_18;
        assert_eq!(
            ClientRequest::decode("x-acme/thing", &params, version, true),
            Ok(ClientRequest::Unmodelled)
        );
        assert_eq!(
            ClientRequest::decode("x-acme/thing", &params, version, false).map_err(|r| r.code()),
            Err(ErrorCode::METHOD_NOT_FOUND)
        );
    }

    #[test]
    fn a_2026_request_names_its_revision_and_capabilities_in_meta() {
        let params = |meta: Value| match json!({ "_meta": meta }) {
            Value::Object(map) => map,
            _ => JsonObject::new(),
        };
        let full = params(json!({
            PROTOCOL_VERSION_META: "2026-07-28",
            CLIENT_CAPABILITIES_META: {},
            LOG_LEVEL_META: "debug",
        }));
        let declared = Declared::decode(&full).map_err(|r| r.to_string());
        assert_eq!(declared.as_ref().map(|d| d.requested), Ok("2026-07-28"));
        assert_eq!(declared.map(|d| d.log_level), Ok(Some(LoggingLevel::Debug)));
        let no_capabilities = params(json!({ PROTOCOL_VERSION_META: "2026-07-28" }));
        assert_eq!(
            Declared::decode(&no_capabilities)
                .map_err(|r| r.code())
                .map(|_| ()),
            Err(ErrorCode::INVALID_PARAMS)
        );
        let loud = params(json!({
            PROTOCOL_VERSION_META: "2026-07-28",
            CLIENT_CAPABILITIES_META: {},
            LOG_LEVEL_META: "loud",
        }));
        assert_eq!(
            Declared::decode(&loud)
                .map_err(|r| r.to_string())
                .map(|_| ()),
            Err("unknown log level \"loud\"".to_owned())
        );
    }
}
