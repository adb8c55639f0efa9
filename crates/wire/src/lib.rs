//! The MCP wire model and the per-revision codecs: one set of serde types for
//! every published revision, and [`codec`], which says what each revision
//! defines. Sans-IO like the domain it builds on: nothing here reads a socket,
//! so the application layer of `protocol-droid` may use it freely.
//!
//! Each type is the union of what the revisions from 2024-11-05 to
//! 2026-07-28 put in that place on the wire. A member one revision lacks is an
//! `Option`; a type only an old revision has (`initialize`, the 2025-11-25
//! tasks, `logging/setLevel`) is here too, so a bridge can read both sides
//! with the same code. Which revision may say what is not decided here: that
//! is the domain's feature profile. These types only promise to read what a
//! peer sent and write it back unchanged.
//!
//! Three rules hold throughout, because MCP objects are open-ended in every
//! revision and a bridge must not be the thing that loses data:
//!
//! - every struct keeps the members it does not model in a flattened
//!   `extra` map, so they survive a round trip;
//! - numbers the spec types as `number` are [`serde_json::Number`], so an
//!   integer `1` is written back as `1`, not `1.0`;
//! - unions are read by their discriminating member (`type`, `mode`,
//!   `method`, `resultType`), never by trying each alternative in turn, so a
//!   message is never quietly read as the wrong kind. A fallback that keeps
//!   the raw object exists only where the spec itself is open.
//!
//! Content blocks, resource contents, icons, annotations and the tool result
//! are the domain's revision-neutral types ([`protocol_droid_domain::ir`]), used here
//! as they are.
//!
//! Where to look:
//!
//! | area | module |
//! |---|---|
//! | whole messages by `$defs` name (`CallToolRequest`, ...) | [`envelopes`] |
//! | JSON-RPC envelopes, ids, result kinds | [`jsonrpc_meta`] |
//! | the typed views of `_meta` | [`meta`] |
//! | a result, an input request or a task | [`outcome`] |
//! | method names and other fixed strings | [`literals`] |
//! | `initialize`, `server/discover`, capabilities | [`lifecycle`] |
//! | tool definitions and lists | [`tools`] |
//! | `tools/call` | [`call_tool`] |
//! | resources | [`resources`] |
//! | prompts | [`prompts`] |
//! | sampling | [`sampling`] |
//! | elicitation | [`elicitation`] |
//! | roots | [`roots`] |
//! | logging | [`logging`] |
//! | completion | [`completion`] |
//! | 2025-11-25 tasks | [`tasks`] |
//! | `subscriptions/listen` | [`subscriptions`] |
//! | multi round-trip requests (2026-07-28) | [`input`] |
//! | progress and cancellation | [`utilities`] |
//! | error codes and error data | [`errors`] |
//! | dispatch by method | [`message`] |
//! | what each revision defines ([`codec::for_version`]) | [`codec`] |

/// Declares a unit type that reads and writes exactly one fixed string.
///
/// The spec pins many members to one value (`"jsonrpc": "2.0"`,
/// `"type": "ref/prompt"`, `"method": "tools/call"`). A marker type makes the
/// check part of decoding, so a struct cannot be read from an object whose
/// fixed member says it is something else.
macro_rules! wire_literal {
    ($(#[$doc:meta])* $name:ident = $value:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub struct $name;

        impl $name {
            /// The string this marker stands for on the wire.
            pub const VALUE: &'static str = $value;
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str($value)
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let found = String::deserialize(deserializer)?;
                if found == $value {
                    Ok(Self)
                } else {
                    Err(<D::Error as ::serde::de::Error>::invalid_value(
                        ::serde::de::Unexpected::Str(&found),
                        &$value,
                    ))
                }
            }
        }
    };
}

pub mod call_tool;
pub mod codec;
pub mod completion;
pub mod elicitation;
pub mod envelopes;
pub mod errors;
pub mod input;
pub mod jsonrpc_meta;
pub mod lifecycle;
pub mod literals;
pub mod logging;
pub mod message;
pub mod meta;
pub mod outcome;
pub mod prompts;
pub mod resources;
pub mod roots;
pub mod sampling;
pub mod subscriptions;
pub mod tasks;
pub mod tools;
pub mod utilities;

pub use call_tool::{CallToolRequestParams, CallToolResult};
pub use completion::{
    CompleteRequestParams, CompleteResult, Completion, CompletionArgument, CompletionContext,
    CompletionReference, PromptReference, ResourceReference, ResourceTemplateReference,
};
pub use elicitation::{
    BooleanSchema, ElicitAction, ElicitRequestFormParams, ElicitRequestParams,
    ElicitRequestUrlParams, ElicitResult, ElicitValue, ElicitationCompleteNotificationParams,
    EnumOption, EnumSchema, LegacyTitledEnumSchema, NumberSchema, NumberType,
    PrimitiveSchemaDefinition, RequestedSchema, StringFormat, StringSchema, TitledEnumItems,
    TitledMultiSelectEnumSchema, TitledSingleSelectEnumSchema, UntitledEnumItems,
    UntitledMultiSelectEnumSchema, UntitledSingleSelectEnumSchema,
};
pub use envelopes::{
    CallToolRequest, CallToolResultResponse, CancelTaskRequest, CancelledNotification,
    CompleteRequest, CompleteResultResponse, DiscoverRequest, DiscoverResultResponse,
    ElicitationCompleteNotification, GetPromptRequest, GetPromptResultResponse,
    GetTaskPayloadRequest, GetTaskRequest, InitializeRequest, InitializeResultResponse,
    InitializedNotification, JsonRpcCreateMessageRequest, JsonRpcElicitRequest,
    JsonRpcListRootsRequest, ListPromptsRequest, ListPromptsResultResponse,
    ListResourceTemplatesRequest, ListResourceTemplatesResultResponse, ListResourcesRequest,
    ListResourcesResultResponse, ListTasksRequest, ListToolsRequest, ListToolsResultResponse,
    LoggingMessageNotification, PingRequest, ProgressNotification, PromptListChangedNotification,
    ReadResourceRequest, ReadResourceResultResponse, ResourceListChangedNotification,
    ResourceUpdatedNotification, RootsListChangedNotification, SetLevelRequest, SubscribeRequest,
    SubscriptionsAcknowledgedNotification, SubscriptionsListenRequest,
    SubscriptionsListenResultResponse, TaskStatusNotification, ToolListChangedNotification,
    UnsubscribeRequest,
};
pub use errors::{
    ErrorCode, HeaderMismatchError, InternalError, InvalidParamsError, InvalidRequestError,
    MethodNotFoundError, MissingRequiredClientCapabilityData, MissingRequiredClientCapabilityError,
    ParseError, UnsupportedProtocolVersionData, UnsupportedProtocolVersionError,
    UrlElicitationRequiredData, UrlElicitationRequiredError,
};
pub use input::{
    CreateMessageRequest, ElicitRequest, InputRequest, InputRequests, InputRequiredResult,
    InputResponse, InputResponseRequestParams, InputResponses, ListRootsRequest,
};
pub use jsonrpc_meta::{
    CacheScope, CacheableResult, EmptyResult, ErrorObject, ErrorResponse, Notification,
    NotificationParams, PaginatedRequestParams, ProgressToken, Request, RequestId, RequestParams,
    ResultResponse, ResultType,
};
pub use lifecycle::{
    ClientCapabilities, ClientElicitationCapability, ClientSamplingCapability,
    ClientTaskRequestsCapability, ClientTasksCapability, DiscoverRequestParams, DiscoverResult,
    ElicitationTaskCapability, Implementation, InitializeRequestParams, InitializeResult,
    PingRequestParams, PromptsCapability, ResourcesCapability, RootsCapability,
    SamplingTaskCapability, ServerCapabilities, ServerTaskRequestsCapability,
    ServerTasksCapability, ToolsCapability, ToolsTaskCapability,
};
pub use logging::{LoggingLevel, LoggingMessageNotificationParams, SetLevelRequestParams};
pub use message::{
    ClientNotification, ClientRequest, ClientResult, ServerNotification, ServerRequest,
    ServerResult,
};
pub use meta::{NotificationMeta, RequestMeta, ResultMeta};
pub use outcome::Outcome;
pub use prompts::{
    GetPromptRequestParams, GetPromptResult, ListPromptsResult, Prompt, PromptArgument,
    PromptMessage,
};
pub use resources::{
    ListResourceTemplatesResult, ListResourcesResult, ReadResourceRequestParams,
    ReadResourceResult, Resource, ResourceRequestParams, ResourceTemplate,
    ResourceUpdatedNotificationParams, SubscribeRequestParams, UnsubscribeRequestParams,
};
pub use roots::{ListRootsRequestParams, ListRootsResult, Root};
pub use sampling::{
    CreateMessageRequestParams, CreateMessageResult, IncludeContext, ModelHint, ModelPreferences,
    SamplingContent, SamplingMessage, ToolChoice, ToolChoiceMode,
};
pub use subscriptions::{
    SubscriptionFilter, SubscriptionsAcknowledgedNotificationParams,
    SubscriptionsListenRequestParams, SubscriptionsListenResult,
};
pub use tasks::{
    CancelTaskRequestParams, CancelTaskResult, CreateTaskResult, GetTaskPayloadRequestParams,
    GetTaskPayloadResult, GetTaskRequestParams, GetTaskResult, ListTasksResult,
    RelatedTaskMetadata, Task, TaskIdParams, TaskMetadata, TaskStatus,
    TaskStatusNotificationParams,
};
pub use tools::{ListToolsResult, TaskSupport, Tool, ToolAnnotations, ToolExecution};
pub use utilities::{CancelledNotificationParams, ProgressNotificationParams};
