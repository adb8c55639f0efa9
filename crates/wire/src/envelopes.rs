//! Whole messages: the envelopes of [`super::jsonrpc_meta`] filled in with
//! each method's marker and params or result type.
//!
//! The names are the spec's `$defs` names. The three server→client requests
//! that 2026-07-28 turned into input requests (`CreateMessageRequest`,
//! `ElicitRequest`, `ListRootsRequest`) keep those names for their new,
//! envelope-less shape in [`super::input`]; their legacy JSON-RPC form is
//! here with a `JsonRpc` prefix.

use super::call_tool::{CallToolRequestParams, CallToolResult};
use super::completion::{CompleteRequestParams, CompleteResult};
use super::elicitation::{ElicitRequestParams, ElicitationCompleteNotificationParams};
use super::jsonrpc_meta::{
    Notification, NotificationParams, PaginatedRequestParams, Request, RequestParams,
    ResultResponse,
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
use super::outcome::Outcome;
use super::prompts::{GetPromptRequestParams, GetPromptResult, ListPromptsResult};
use super::resources::{
    ListResourceTemplatesResult, ListResourcesResult, ReadResourceRequestParams,
    ReadResourceResult, ResourceUpdatedNotificationParams, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use super::roots::ListRootsRequestParams;
use super::sampling::CreateMessageRequestParams;
use super::subscriptions::{
    SubscriptionsAcknowledgedNotificationParams, SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
};
use super::tasks::{TaskIdParams, TaskStatusNotificationParams};
use super::tools::ListToolsResult;
use super::utilities::{CancelledNotificationParams, ProgressNotificationParams};

/// `initialize` (2024-11-05 to 2025-11-25).
pub type InitializeRequest = Request<Initialize, InitializeRequestParams>;
/// `ping` (2024-11-05 to 2025-11-25).
pub type PingRequest = Request<Ping, RequestParams>;
/// `server/discover` (2026-07-28).
pub type DiscoverRequest = Request<ServerDiscover, RequestParams>;
/// `tools/list`.
pub type ListToolsRequest = Request<ToolsList, PaginatedRequestParams>;
/// `tools/call`.
pub type CallToolRequest = Request<ToolsCall, CallToolRequestParams>;
/// `prompts/list`.
pub type ListPromptsRequest = Request<PromptsList, PaginatedRequestParams>;
/// `prompts/get`.
pub type GetPromptRequest = Request<PromptsGet, GetPromptRequestParams>;
/// `resources/list`.
pub type ListResourcesRequest = Request<ResourcesList, PaginatedRequestParams>;
/// `resources/templates/list`.
pub type ListResourceTemplatesRequest = Request<ResourcesTemplatesList, PaginatedRequestParams>;
/// `resources/read`.
pub type ReadResourceRequest = Request<ResourcesRead, ReadResourceRequestParams>;
/// `resources/subscribe` (2024-11-05 to 2025-11-25).
pub type SubscribeRequest = Request<ResourcesSubscribe, SubscribeRequestParams>;
/// `resources/unsubscribe` (2024-11-05 to 2025-11-25).
pub type UnsubscribeRequest = Request<ResourcesUnsubscribe, UnsubscribeRequestParams>;
/// `subscriptions/listen` (2026-07-28).
pub type SubscriptionsListenRequest =
    Request<SubscriptionsListen, SubscriptionsListenRequestParams>;
/// `logging/setLevel` (2024-11-05 to 2025-11-25).
pub type SetLevelRequest = Request<LoggingSetLevel, SetLevelRequestParams>;
/// `completion/complete`.
pub type CompleteRequest = Request<CompletionComplete, CompleteRequestParams>;
/// `tasks/get` (2025-11-25).
pub type GetTaskRequest = Request<TasksGet, TaskIdParams>;
/// `tasks/result` (2025-11-25).
pub type GetTaskPayloadRequest = Request<TasksResult, TaskIdParams>;
/// `tasks/list` (2025-11-25).
pub type ListTasksRequest = Request<TasksList, PaginatedRequestParams>;
/// `tasks/cancel` (2025-11-25).
pub type CancelTaskRequest = Request<TasksCancel, TaskIdParams>;
/// `sampling/createMessage` as a JSON-RPC request (up to 2025-11-25).
pub type JsonRpcCreateMessageRequest = Request<SamplingCreateMessage, CreateMessageRequestParams>;
/// `elicitation/create` as a JSON-RPC request (2025-06-18 to 2025-11-25).
pub type JsonRpcElicitRequest = Request<ElicitationCreate, ElicitRequestParams>;
/// `roots/list` as a JSON-RPC request (up to 2025-11-25).
pub type JsonRpcListRootsRequest = Request<RootsList, ListRootsRequestParams>;

/// `notifications/cancelled`.
pub type CancelledNotification = Notification<NotificationsCancelled, CancelledNotificationParams>;
/// `notifications/progress`.
pub type ProgressNotification = Notification<NotificationsProgress, ProgressNotificationParams>;
/// `notifications/initialized` (2024-11-05 to 2025-11-25).
pub type InitializedNotification = Notification<NotificationsInitialized, NotificationParams>;
/// `notifications/roots/list_changed` (2024-11-05 to 2025-11-25).
pub type RootsListChangedNotification =
    Notification<NotificationsRootsListChanged, NotificationParams>;
/// `notifications/message`.
pub type LoggingMessageNotification =
    Notification<NotificationsMessage, LoggingMessageNotificationParams>;
/// `notifications/tools/list_changed`.
pub type ToolListChangedNotification =
    Notification<NotificationsToolsListChanged, NotificationParams>;
/// `notifications/prompts/list_changed`.
pub type PromptListChangedNotification =
    Notification<NotificationsPromptsListChanged, NotificationParams>;
/// `notifications/resources/list_changed`.
pub type ResourceListChangedNotification =
    Notification<NotificationsResourcesListChanged, NotificationParams>;
/// `notifications/resources/updated`.
pub type ResourceUpdatedNotification =
    Notification<NotificationsResourcesUpdated, ResourceUpdatedNotificationParams>;
/// `notifications/elicitation/complete` (2025-11-25).
pub type ElicitationCompleteNotification =
    Notification<NotificationsElicitationComplete, ElicitationCompleteNotificationParams>;
/// `notifications/tasks/status` (2025-11-25).
pub type TaskStatusNotification =
    Notification<NotificationsTasksStatus, TaskStatusNotificationParams>;
/// `notifications/subscriptions/acknowledged` (2026-07-28).
pub type SubscriptionsAcknowledgedNotification = Notification<
    NotificationsSubscriptionsAcknowledged,
    SubscriptionsAcknowledgedNotificationParams,
>;

/// The response to `server/discover` (2026-07-28).
pub type DiscoverResultResponse = ResultResponse<DiscoverResult>;
/// The response to `initialize` (2024-11-05 to 2025-11-25).
pub type InitializeResultResponse = ResultResponse<InitializeResult>;
/// The response to `tools/list`.
pub type ListToolsResultResponse = ResultResponse<ListToolsResult>;
/// The response to `tools/call`: a result, or a request for input.
pub type CallToolResultResponse = ResultResponse<Outcome<CallToolResult>>;
/// The response to `prompts/list`.
pub type ListPromptsResultResponse = ResultResponse<ListPromptsResult>;
/// The response to `prompts/get`: a result, or a request for input.
pub type GetPromptResultResponse = ResultResponse<Outcome<GetPromptResult>>;
/// The response to `resources/list`.
pub type ListResourcesResultResponse = ResultResponse<ListResourcesResult>;
/// The response to `resources/templates/list`.
pub type ListResourceTemplatesResultResponse = ResultResponse<ListResourceTemplatesResult>;
/// The response to `resources/read`: a result, or a request for input.
pub type ReadResourceResultResponse = ResultResponse<Outcome<ReadResourceResult>>;
/// The response to `completion/complete`.
pub type CompleteResultResponse = ResultResponse<CompleteResult>;
/// The response that closes a `subscriptions/listen` stream.
pub type SubscriptionsListenResultResponse = ResultResponse<SubscriptionsListenResult>;
