//! Dispatch by method: every request and notification of every revision, by
//! who sends it, and the results keyed by the method they answer.
//!
//! A known method is always decoded into its typed params, and a failure is
//! an error: it is never demoted to `Other`, which is kept for methods this
//! build does not know (extensions, later revisions) and carries the params
//! untouched.

use serde::de::{DeserializeOwned, Error as _};
use serde_json::Value;

use super::call_tool::{CallToolRequestParams, CallToolResult};
use super::completion::{CompleteRequestParams, CompleteResult};
use super::elicitation::{
    ElicitRequestParams, ElicitResult, ElicitationCompleteNotificationParams,
};
use super::input::InputRequiredResult;
use super::jsonrpc_meta::{
    EmptyResult, NotificationParams, PaginatedRequestParams, RequestParams, ResultType,
    result_type_of,
};
use super::lifecycle::{DiscoverResult, InitializeRequestParams, InitializeResult};
use super::literals::{
    CompletionComplete, ElicitationCreate, Initialize, LoggingSetLevel, NotificationsCancelled,
    NotificationsElicitationComplete, NotificationsInitialized, NotificationsMessage,
    NotificationsProgress, NotificationsPromptsListChanged, NotificationsResourcesListChanged,
    NotificationsResourcesUpdated, NotificationsRootsListChanged,
    NotificationsSubscriptionsAcknowledged, NotificationsTasksStatus,
    NotificationsToolsListChanged, Ping, PromptsGet, PromptsList, ResourcesList, ResourcesRead,
    ResourcesSubscribe, ResourcesTemplatesList, ResourcesUnsubscribe, RootsList,
    SamplingCreateMessage, ServerDiscover, SubscriptionsListen, TasksCancel, TasksGet, TasksList,
    TasksResult, ToolsCall, ToolsList,
};
use super::logging::{LoggingMessageNotificationParams, SetLevelRequestParams};
use super::prompts::{GetPromptRequestParams, GetPromptResult, ListPromptsResult};
use super::resources::{
    ListResourceTemplatesResult, ListResourcesResult, ReadResourceRequestParams,
    ReadResourceResult, ResourceUpdatedNotificationParams, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use super::roots::{ListRootsRequestParams, ListRootsResult};
use super::sampling::{CreateMessageRequestParams, CreateMessageResult};
use super::subscriptions::{
    SubscriptionsAcknowledgedNotificationParams, SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
};
use super::tasks::{
    CancelTaskResult, CreateTaskResult, GetTaskPayloadResult, GetTaskResult, ListTasksResult,
    TaskIdParams, TaskStatusNotificationParams,
};
use super::tools::ListToolsResult;
use super::utilities::{CancelledNotificationParams, ProgressNotificationParams};

/// Writes one of the four method enums: the enum, `method`, `decode` and
/// `params`, from one table, so the three cannot disagree.
///
/// Each row is `Variant(Marker, required Type)` for methods whose params
/// every revision requires, or `Variant(Marker, optional Type)` for those
/// where some revision lets them be absent.
macro_rules! method_enum {
    (
        $(#[$doc:meta])*
        $name:ident {
            $( $(#[$vdoc:meta])* $variant:ident($marker:ident, $kind:ident $ty:ty) ),* $(,)?
        }
    ) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub enum $name {
            $( $(#[$vdoc])* $variant(method_enum!(@payload $kind $ty)), )*
            /// A method this build does not know, with its params untouched.
            Other {
                /// The method.
                method: String,
                /// The params, as sent.
                params: Option<Value>,
            },
        }

        impl $name {
            /// The method on the wire.
            #[must_use]
            pub fn method(&self) -> &str {
                match self {
                    $( Self::$variant(_) => $marker::VALUE, )*
                    Self::Other { method, .. } => method,
                }
            }

            /// Reads a message's params by its method: typed for a known
            /// method, [`Self::Other`] for an unknown one.
            ///
            /// # Errors
            ///
            /// When the method is known and its params are missing or wrong.
            pub fn decode(method: &str, params: Option<Value>) -> Result<Self, serde_json::Error> {
                Ok(match method {
                    $( $marker::VALUE => Self::$variant(method_enum!(@decode $kind params)?), )*
                    _ => Self::Other { method: method.to_owned(), params },
                })
            }

            /// The params as JSON, absent when the message has none.
            ///
            /// # Errors
            ///
            /// When the params cannot be serialised (a map with non-string
            /// keys in an `extra`; not expected in practice).
            pub fn params(&self) -> Result<Option<Value>, serde_json::Error> {
                match self {
                    $( Self::$variant(p) => method_enum!(@encode $kind p), )*
                    Self::Other { params, .. } => Ok(params.clone()),
                }
            }
        }
    };
    (@payload required $ty:ty) => { $ty };
    (@payload optional $ty:ty) => { Option<$ty> };
    (@decode required $params:ident) => { required($params) };
    (@decode optional $params:ident) => { optional($params) };
    (@encode required $p:ident) => { serde_json::to_value($p).map(Some) };
    (@encode optional $p:ident) => { $p.as_ref().map(serde_json::to_value).transpose() };
}

method_enum! {
    /// A request a client sends, in any revision.
    ClientRequest {
        /// `initialize` (2024-11-05 to 2025-11-25).
        Initialize(Initialize, required Box<InitializeRequestParams>),
        /// `ping` (2024-11-05 to 2025-11-25).
        Ping(Ping, optional RequestParams),
        /// `server/discover` (2026-07-28).
        Discover(ServerDiscover, required RequestParams),
        /// `tools/list`.
        ListTools(ToolsList, optional PaginatedRequestParams),
        /// `tools/call`.
        CallTool(ToolsCall, required Box<CallToolRequestParams>),
        /// `prompts/list`.
        ListPrompts(PromptsList, optional PaginatedRequestParams),
        /// `prompts/get`.
        GetPrompt(PromptsGet, required Box<GetPromptRequestParams>),
        /// `resources/list`.
        ListResources(ResourcesList, optional PaginatedRequestParams),
        /// `resources/templates/list`.
        ListResourceTemplates(ResourcesTemplatesList, optional PaginatedRequestParams),
        /// `resources/read`.
        ReadResource(ResourcesRead, required Box<ReadResourceRequestParams>),
        /// `resources/subscribe` (2024-11-05 to 2025-11-25).
        Subscribe(ResourcesSubscribe, required SubscribeRequestParams),
        /// `resources/unsubscribe` (2024-11-05 to 2025-11-25).
        Unsubscribe(ResourcesUnsubscribe, required UnsubscribeRequestParams),
        /// `subscriptions/listen` (2026-07-28).
        SubscriptionsListen(SubscriptionsListen, required Box<SubscriptionsListenRequestParams>),
        /// `logging/setLevel` (2024-11-05 to 2025-11-25).
        SetLevel(LoggingSetLevel, required SetLevelRequestParams),
        /// `completion/complete`.
        Complete(CompletionComplete, required Box<CompleteRequestParams>),
        /// `tasks/get` (2025-11-25).
        GetTask(TasksGet, required TaskIdParams),
        /// `tasks/result` (2025-11-25).
        GetTaskPayload(TasksResult, required TaskIdParams),
        /// `tasks/list` (2025-11-25).
        ListTasks(TasksList, optional PaginatedRequestParams),
        /// `tasks/cancel` (2025-11-25).
        CancelTask(TasksCancel, required TaskIdParams),
    }
}

method_enum! {
    /// A notification a client sends, in any revision.
    ClientNotification {
        /// `notifications/cancelled`.
        Cancelled(NotificationsCancelled, required CancelledNotificationParams),
        /// `notifications/progress` (client to server up to 2025-11-25).
        Progress(NotificationsProgress, required ProgressNotificationParams),
        /// `notifications/initialized` (2024-11-05 to 2025-11-25).
        Initialized(NotificationsInitialized, optional NotificationParams),
        /// `notifications/roots/list_changed` (2024-11-05 to 2025-11-25).
        RootsListChanged(NotificationsRootsListChanged, optional NotificationParams),
        /// `notifications/tasks/status` (2025-11-25).
        TaskStatus(NotificationsTasksStatus, required Box<TaskStatusNotificationParams>),
    }
}

method_enum! {
    /// A request a server sends (2024-11-05 to 2025-11-25; 2026-07-28
    /// servers send none, and ask through input requests instead).
    ServerRequest {
        /// `ping`.
        Ping(Ping, optional RequestParams),
        /// `sampling/createMessage`.
        CreateMessage(SamplingCreateMessage, required Box<CreateMessageRequestParams>),
        /// `roots/list`.
        ListRoots(RootsList, optional ListRootsRequestParams),
        /// `elicitation/create` (2025-06-18).
        Elicit(ElicitationCreate, required Box<ElicitRequestParams>),
        /// `tasks/get` (2025-11-25).
        GetTask(TasksGet, required TaskIdParams),
        /// `tasks/result` (2025-11-25).
        GetTaskPayload(TasksResult, required TaskIdParams),
        /// `tasks/list` (2025-11-25).
        ListTasks(TasksList, optional PaginatedRequestParams),
        /// `tasks/cancel` (2025-11-25).
        CancelTask(TasksCancel, required TaskIdParams),
    }
}

method_enum! {
    /// A notification a server sends, in any revision.
    ServerNotification {
        /// `notifications/cancelled`.
        Cancelled(NotificationsCancelled, required CancelledNotificationParams),
        /// `notifications/progress`.
        Progress(NotificationsProgress, required ProgressNotificationParams),
        /// `notifications/message`.
        LoggingMessage(NotificationsMessage, required LoggingMessageNotificationParams),
        /// `notifications/resources/updated`.
        ResourceUpdated(NotificationsResourcesUpdated, required ResourceUpdatedNotificationParams),
        /// `notifications/resources/list_changed`.
        ResourceListChanged(NotificationsResourcesListChanged, optional NotificationParams),
        /// `notifications/tools/list_changed`.
        ToolListChanged(NotificationsToolsListChanged, optional NotificationParams),
        /// `notifications/prompts/list_changed`.
        PromptListChanged(NotificationsPromptsListChanged, optional NotificationParams),
        /// `notifications/elicitation/complete` (2025-11-25).
        ElicitationComplete(NotificationsElicitationComplete, required ElicitationCompleteNotificationParams),
        /// `notifications/tasks/status` (2025-11-25).
        TaskStatus(NotificationsTasksStatus, required Box<TaskStatusNotificationParams>),
        /// `notifications/subscriptions/acknowledged` (2026-07-28).
        SubscriptionsAcknowledged(NotificationsSubscriptionsAcknowledged, required SubscriptionsAcknowledgedNotificationParams),
    }
}

/// A result a server sends, read by the method of the request it answers.
#[derive(Clone, Debug, PartialEq)]
pub enum ServerResult {
    /// A result with nothing in it: `ping`, `logging/setLevel`,
    /// `resources/subscribe`, `resources/unsubscribe`.
    Empty(EmptyResult),
    /// `initialize`.
    Initialize(Box<InitializeResult>),
    /// `server/discover`.
    Discover(Box<DiscoverResult>),
    /// `tools/list`.
    ListTools(ListToolsResult),
    /// `tools/call`.
    CallTool(CallToolResult),
    /// `prompts/list`.
    ListPrompts(ListPromptsResult),
    /// `prompts/get`.
    GetPrompt(GetPromptResult),
    /// `resources/list`.
    ListResources(ListResourcesResult),
    /// `resources/templates/list`.
    ListResourceTemplates(ListResourceTemplatesResult),
    /// `resources/read`.
    ReadResource(ReadResourceResult),
    /// `subscriptions/listen`, closing the stream.
    SubscriptionsListen(SubscriptionsListenResult),
    /// `completion/complete`.
    Complete(CompleteResult),
    /// `tasks/get`.
    GetTask(Box<GetTaskResult>),
    /// `tasks/result`.
    GetTaskPayload(GetTaskPayloadResult),
    /// `tasks/list`.
    ListTasks(ListTasksResult),
    /// `tasks/cancel`.
    CancelTask(Box<CancelTaskResult>),
    /// `resultType: "input_required"` (2026-07-28).
    InputRequired(InputRequiredResult),
    /// A task instead of a result (2025-11-25 task augmentation, or the
    /// 2026-07-28 tasks extension's `resultType: "task"`).
    Task(Box<CreateTaskResult>),
    /// The answer to a method this build does not know, untouched.
    Other(Value),
}

impl ServerResult {
    /// Reads the result of a request with `method`.
    ///
    /// `resultType` is read first: absent or `complete` means the method's
    /// own result; `input_required` is accepted only where the spec allows it
    /// (`tools/call`, `prompts/get`, `resources/read`) and `task` only on
    /// `tools/call`, each also for unknown methods, which extensions may
    /// add. Any other value is refused, as the spec tells clients to.
    ///
    /// # Errors
    ///
    /// When the result does not fit the method or its `resultType`.
    pub fn decode(method: &str, result: Value) -> Result<Self, serde_json::Error> {
        let known = SERVER_RESULT_METHODS.contains(&method);
        match result_type_of(&result)? {
            Some(ResultType::InputRequired) => {
                let allowed = matches!(
                    method,
                    ToolsCall::VALUE | PromptsGet::VALUE | ResourcesRead::VALUE
                );
                if known && !allowed {
                    return Err(serde_json::Error::custom(format_args!(
                        "`{method}` cannot answer with input_required"
                    )));
                }
                serde_json::from_value(result).map(Self::InputRequired)
            }
            Some(ResultType::Task) => {
                if known && method != ToolsCall::VALUE {
                    return Err(serde_json::Error::custom(format_args!(
                        "`{method}` cannot answer with a task"
                    )));
                }
                serde_json::from_value(result).map(|t| Self::Task(Box::new(t)))
            }
            Some(ResultType::Other(kind)) if known => Err(serde_json::Error::custom(format_args!(
                "unrecognised resultType `{kind}` for `{method}`"
            ))),
            Some(ResultType::Other(_)) => Ok(Self::Other(result)),
            None if method == ToolsCall::VALUE && is_legacy_task(&result, "content") => {
                serde_json::from_value(result).map(|t| Self::Task(Box::new(t)))
            }
            None | Some(ResultType::Complete) => Self::decode_complete(method, result),
        }
    }

    fn decode_complete(method: &str, result: Value) -> Result<Self, serde_json::Error> {
        Ok(match method {
            Initialize::VALUE => Self::Initialize(from(result)?),
            Ping::VALUE
            | LoggingSetLevel::VALUE
            | ResourcesSubscribe::VALUE
            | ResourcesUnsubscribe::VALUE => Self::Empty(from(result)?),
            ServerDiscover::VALUE => Self::Discover(from(result)?),
            ToolsList::VALUE => Self::ListTools(from(result)?),
            ToolsCall::VALUE => Self::CallTool(from(result)?),
            PromptsList::VALUE => Self::ListPrompts(from(result)?),
            PromptsGet::VALUE => Self::GetPrompt(from(result)?),
            ResourcesList::VALUE => Self::ListResources(from(result)?),
            ResourcesTemplatesList::VALUE => Self::ListResourceTemplates(from(result)?),
            ResourcesRead::VALUE => Self::ReadResource(from(result)?),
            SubscriptionsListen::VALUE => Self::SubscriptionsListen(from(result)?),
            CompletionComplete::VALUE => Self::Complete(from(result)?),
            TasksGet::VALUE => Self::GetTask(from(result)?),
            TasksResult::VALUE => Self::GetTaskPayload(from(result)?),
            TasksList::VALUE => Self::ListTasks(from(result)?),
            TasksCancel::VALUE => Self::CancelTask(from(result)?),
            _ => Self::Other(result),
        })
    }

    /// The result as JSON.
    ///
    /// # Errors
    ///
    /// When the result cannot be serialised (not expected in practice).
    pub fn encode(&self) -> Result<Value, serde_json::Error> {
        match self {
            Self::Empty(r) | Self::GetTaskPayload(r) => serde_json::to_value(r),
            Self::Initialize(r) => serde_json::to_value(r),
            Self::Discover(r) => serde_json::to_value(r),
            Self::ListTools(r) => serde_json::to_value(r),
            Self::CallTool(r) => serde_json::to_value(r),
            Self::ListPrompts(r) => serde_json::to_value(r),
            Self::GetPrompt(r) => serde_json::to_value(r),
            Self::ListResources(r) => serde_json::to_value(r),
            Self::ListResourceTemplates(r) => serde_json::to_value(r),
            Self::ReadResource(r) => serde_json::to_value(r),
            Self::SubscriptionsListen(r) => serde_json::to_value(r),
            Self::Complete(r) => serde_json::to_value(r),
            Self::GetTask(r) | Self::CancelTask(r) => serde_json::to_value(r),
            Self::ListTasks(r) => serde_json::to_value(r),
            Self::InputRequired(r) => serde_json::to_value(r),
            Self::Task(r) => serde_json::to_value(r),
            Self::Other(v) => Ok(v.clone()),
        }
    }
}

/// A result a client sends (2024-11-05 to 2025-11-25), read by the method of
/// the server's request it answers.
///
/// There is no input-required variant: servers never ask clients for input
/// that way, so such a result is refused.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientResult {
    /// `ping`.
    Empty(EmptyResult),
    /// `sampling/createMessage`.
    CreateMessage(Box<CreateMessageResult>),
    /// `roots/list`.
    ListRoots(ListRootsResult),
    /// `elicitation/create`.
    Elicit(ElicitResult),
    /// `tasks/get`.
    GetTask(Box<GetTaskResult>),
    /// `tasks/result`.
    GetTaskPayload(GetTaskPayloadResult),
    /// `tasks/list`.
    ListTasks(ListTasksResult),
    /// `tasks/cancel`.
    CancelTask(Box<CancelTaskResult>),
    /// A task instead of a result (2025-11-25 task augmentation of sampling
    /// or elicitation).
    Task(Box<CreateTaskResult>),
    /// The answer to a method this build does not know, untouched.
    Other(Value),
}

impl ClientResult {
    /// Reads the result of a server request with `method`, `resultType`
    /// first (see [`ServerResult::decode`]).
    ///
    /// # Errors
    ///
    /// When the result does not fit the method or its `resultType`.
    pub fn decode(method: &str, result: Value) -> Result<Self, serde_json::Error> {
        let augmentable = matches!(
            method,
            SamplingCreateMessage::VALUE | ElicitationCreate::VALUE
        );
        match result_type_of(&result)? {
            Some(ResultType::Task) => {
                serde_json::from_value(result).map(|t| Self::Task(Box::new(t)))
            }
            Some(ResultType::InputRequired) => Err(serde_json::Error::custom(
                "a client's result cannot ask for input",
            )),
            Some(ResultType::Other(kind)) => Err(serde_json::Error::custom(format_args!(
                "unrecognised resultType `{kind}` for `{method}`"
            ))),
            None if augmentable
                && is_legacy_task(&result, "model")
                && is_legacy_task(&result, "action") =>
            {
                serde_json::from_value(result).map(|t| Self::Task(Box::new(t)))
            }
            None | Some(ResultType::Complete) => Ok(match method {
                Ping::VALUE => Self::Empty(from(result)?),
                SamplingCreateMessage::VALUE => Self::CreateMessage(from(result)?),
                RootsList::VALUE => Self::ListRoots(from(result)?),
                ElicitationCreate::VALUE => Self::Elicit(from(result)?),
                TasksGet::VALUE => Self::GetTask(from(result)?),
                TasksResult::VALUE => Self::GetTaskPayload(from(result)?),
                TasksList::VALUE => Self::ListTasks(from(result)?),
                TasksCancel::VALUE => Self::CancelTask(from(result)?),
                _ => Self::Other(result),
            }),
        }
    }

    /// The result as JSON.
    ///
    /// # Errors
    ///
    /// When the result cannot be serialised (not expected in practice).
    pub fn encode(&self) -> Result<Value, serde_json::Error> {
        match self {
            Self::Empty(r) | Self::GetTaskPayload(r) => serde_json::to_value(r),
            Self::CreateMessage(r) => serde_json::to_value(r),
            Self::ListRoots(r) => serde_json::to_value(r),
            Self::Elicit(r) => serde_json::to_value(r),
            Self::GetTask(r) | Self::CancelTask(r) => serde_json::to_value(r),
            Self::ListTasks(r) => serde_json::to_value(r),
            Self::Task(r) => serde_json::to_value(r),
            Self::Other(v) => Ok(v.clone()),
        }
    }
}

/// The methods whose results [`ServerResult`] types.
const SERVER_RESULT_METHODS: [&str; 19] = [
    Initialize::VALUE,
    Ping::VALUE,
    LoggingSetLevel::VALUE,
    ResourcesSubscribe::VALUE,
    ResourcesUnsubscribe::VALUE,
    ServerDiscover::VALUE,
    ToolsList::VALUE,
    ToolsCall::VALUE,
    PromptsList::VALUE,
    PromptsGet::VALUE,
    ResourcesList::VALUE,
    ResourcesTemplatesList::VALUE,
    ResourcesRead::VALUE,
    SubscriptionsListen::VALUE,
    CompletionComplete::VALUE,
    TasksGet::VALUE,
    TasksResult::VALUE,
    TasksList::VALUE,
    TasksCancel::VALUE,
];

/// Whether a result without `resultType` is a 2025-11-25 `CreateTaskResult`:
/// it has a `task` object and lacks `member`, which the method's own result
/// requires. 2025-11-25 has no other way to tell them apart.
fn is_legacy_task(result: &Value, member: &str) -> bool {
    result.get("task").is_some_and(Value::is_object) && result.get(member).is_none()
}

fn required<T: DeserializeOwned>(params: Option<Value>) -> Result<T, serde_json::Error> {
    match params {
        Some(value) => serde_json::from_value(value),
        None => Err(serde_json::Error::missing_field("params")),
    }
}

fn optional<T: DeserializeOwned>(params: Option<Value>) -> Result<Option<T>, serde_json::Error> {
    params.map(serde_json::from_value).transpose()
}

fn from<T: DeserializeOwned>(result: Value) -> Result<T, serde_json::Error> {
    serde_json::from_value(result)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_known_method_with_bad_params_is_an_error_not_other() {
        let read = ClientRequest::decode("tools/call", Some(json!({ "arguments": {} })));
        assert!(read.is_err());
        assert!(ClientRequest::decode("tools/call", None).is_err());
    }

    #[test]
    fn an_unknown_method_keeps_its_params() -> Result<(), serde_json::Error> {
        let params = Some(json!({ "x": [1, 2.5] }));
        let read = ClientRequest::decode("x.example/do", params.clone())?;
        assert_eq!(read.method(), "x.example/do");
        assert_eq!(read.params()?, params);
        Ok(())
    }

    #[test]
    fn optional_params_stay_absent() -> Result<(), serde_json::Error> {
        let read = ClientRequest::decode("tools/list", None)?;
        assert_eq!(read, ClientRequest::ListTools(None));
        assert_eq!(read.params()?, None);
        Ok(())
    }

    #[test]
    fn every_known_method_names_itself() -> Result<(), serde_json::Error> {
        let read = ServerNotification::decode(
            "notifications/resources/updated",
            Some(json!({ "uri": "u" })),
        )?;
        assert_eq!(read.method(), "notifications/resources/updated");
        assert!(matches!(read, ServerNotification::ResourceUpdated(_)));
        Ok(())
    }

    #[test]
    fn a_result_is_read_by_result_type_first() -> Result<(), serde_json::Error> {
        let asking = json!({ "resultType": "input_required", "requestState": "s" });
        let read = ServerResult::decode("tools/call", asking.clone())?;
        assert!(matches!(read, ServerResult::InputRequired(_)));
        assert_eq!(read.encode()?, asking);
        // Not every method may ask for input.
        assert!(ServerResult::decode("tools/list", asking).is_err());

        let legacy = json!({ "content": [] });
        assert!(matches!(
            ServerResult::decode("tools/call", legacy)?,
            ServerResult::CallTool(_)
        ));

        let strange = json!({ "resultType": "later", "tools": [] });
        assert!(ServerResult::decode("tools/list", strange).is_err());
        Ok(())
    }

    #[test]
    fn a_2025_11_25_task_answer_is_read_as_a_task() -> Result<(), serde_json::Error> {
        let wire = json!({ "task": {
            "taskId": "t", "status": "working", "createdAt": "a", "lastUpdatedAt": "b", "ttl": 1000 } });
        let read = ServerResult::decode("tools/call", wire.clone())?;
        assert!(matches!(read, ServerResult::Task(_)));
        assert_eq!(read.encode()?, wire);
        let read = ClientResult::decode("elicitation/create", wire.clone())?;
        assert!(matches!(read, ClientResult::Task(_)));
        assert_eq!(read.encode()?, wire);
        Ok(())
    }

    #[test]
    fn a_client_result_cannot_ask_for_input() {
        let asking = json!({ "resultType": "input_required", "requestState": "s" });
        assert!(ClientResult::decode("roots/list", asking).is_err());
    }
}
