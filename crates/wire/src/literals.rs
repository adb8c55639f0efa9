//! Fixed strings of the wire: the JSON-RPC version, every method name of
//! every revision, and the `type` tags of the schema objects.
//!
//! Each is a marker type (see the module docs of [`super`] for why) whose
//! string is also available as `Marker::VALUE`, which `match` arms use.

wire_literal! {
    /// `"jsonrpc": "2.0"`, the only JSON-RPC version MCP speaks.
    JsonRpcVersion = "2.0"
}

// Client → server requests.
wire_literal! {
    /// `initialize` (2024-11-05 to 2025-11-25).
    Initialize = "initialize"
}
wire_literal! {
    /// `ping` (2024-11-05 to 2025-11-25, both directions).
    Ping = "ping"
}
wire_literal! {
    /// `server/discover` (2026-07-28).
    ServerDiscover = "server/discover"
}
wire_literal! {
    /// `tools/list`.
    ToolsList = "tools/list"
}
wire_literal! {
    /// `tools/call`.
    ToolsCall = "tools/call"
}
wire_literal! {
    /// `prompts/list`.
    PromptsList = "prompts/list"
}
wire_literal! {
    /// `prompts/get`.
    PromptsGet = "prompts/get"
}
wire_literal! {
    /// `resources/list`.
    ResourcesList = "resources/list"
}
wire_literal! {
    /// `resources/templates/list`.
    ResourcesTemplatesList = "resources/templates/list"
}
wire_literal! {
    /// `resources/read`.
    ResourcesRead = "resources/read"
}
wire_literal! {
    /// `resources/subscribe` (2024-11-05 to 2025-11-25).
    ResourcesSubscribe = "resources/subscribe"
}
wire_literal! {
    /// `resources/unsubscribe` (2024-11-05 to 2025-11-25).
    ResourcesUnsubscribe = "resources/unsubscribe"
}
wire_literal! {
    /// `subscriptions/listen` (2026-07-28).
    SubscriptionsListen = "subscriptions/listen"
}
wire_literal! {
    /// `logging/setLevel` (2024-11-05 to 2025-11-25).
    LoggingSetLevel = "logging/setLevel"
}
wire_literal! {
    /// `completion/complete`.
    CompletionComplete = "completion/complete"
}
wire_literal! {
    /// `tasks/get` (2025-11-25, both directions).
    TasksGet = "tasks/get"
}
wire_literal! {
    /// `tasks/result` (2025-11-25, both directions).
    TasksResult = "tasks/result"
}
wire_literal! {
    /// `tasks/list` (2025-11-25, both directions).
    TasksList = "tasks/list"
}
wire_literal! {
    /// `tasks/cancel` (2025-11-25, both directions).
    TasksCancel = "tasks/cancel"
}

// Server → client requests (legacy) and input requests (2026-07-28).
wire_literal! {
    /// `sampling/createMessage`.
    SamplingCreateMessage = "sampling/createMessage"
}
wire_literal! {
    /// `roots/list`.
    RootsList = "roots/list"
}
wire_literal! {
    /// `elicitation/create` (2025-06-18).
    ElicitationCreate = "elicitation/create"
}

// Notifications.
wire_literal! {
    /// `notifications/initialized` (2024-11-05 to 2025-11-25).
    NotificationsInitialized = "notifications/initialized"
}
wire_literal! {
    /// `notifications/cancelled`.
    NotificationsCancelled = "notifications/cancelled"
}
wire_literal! {
    /// `notifications/progress`.
    NotificationsProgress = "notifications/progress"
}
wire_literal! {
    /// `notifications/message`.
    NotificationsMessage = "notifications/message"
}
wire_literal! {
    /// `notifications/tools/list_changed`.
    NotificationsToolsListChanged = "notifications/tools/list_changed"
}
wire_literal! {
    /// `notifications/prompts/list_changed`.
    NotificationsPromptsListChanged = "notifications/prompts/list_changed"
}
wire_literal! {
    /// `notifications/resources/list_changed`.
    NotificationsResourcesListChanged = "notifications/resources/list_changed"
}
wire_literal! {
    /// `notifications/resources/updated`.
    NotificationsResourcesUpdated = "notifications/resources/updated"
}
wire_literal! {
    /// `notifications/roots/list_changed` (2024-11-05 to 2025-11-25).
    NotificationsRootsListChanged = "notifications/roots/list_changed"
}
wire_literal! {
    /// `notifications/elicitation/complete` (2025-11-25).
    NotificationsElicitationComplete = "notifications/elicitation/complete"
}
wire_literal! {
    /// `notifications/tasks/status` (2025-11-25).
    NotificationsTasksStatus = "notifications/tasks/status"
}
wire_literal! {
    /// `notifications/subscriptions/acknowledged` (2026-07-28).
    NotificationsSubscriptionsAcknowledged = "notifications/subscriptions/acknowledged"
}

// `type` tags of schema objects.
wire_literal! {
    /// `"type": "object"`.
    TypeObject = "object"
}
wire_literal! {
    /// `"type": "string"`.
    TypeString = "string"
}
wire_literal! {
    /// `"type": "boolean"`.
    TypeBoolean = "boolean"
}
wire_literal! {
    /// `"type": "array"`.
    TypeArray = "array"
}
wire_literal! {
    /// `"type": "ref/prompt"`.
    RefPrompt = "ref/prompt"
}
wire_literal! {
    /// `"type": "ref/resource"`.
    RefResource = "ref/resource"
}
wire_literal! {
    /// `"mode": "form"` of an elicitation (2025-11-25).
    ModeForm = "form"
}
wire_literal! {
    /// `"mode": "url"` of an elicitation (2025-11-25).
    ModeUrl = "url"
}
wire_literal! {
    /// `"resultType": "input_required"` (2026-07-28).
    InputRequired = "input_required"
}
