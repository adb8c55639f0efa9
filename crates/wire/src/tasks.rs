//! Tasks as 2025-11-25 defines them: experimental, in the core protocol,
//! both directions.
//!
//! 2026-07-28 removed these from the core and moved tasks into the
//! `io.modelcontextprotocol/tasks` extension, whose only core trace is
//! `resultType: "task"`; such a result is read as [`CreateTaskResult`] with
//! the extension's flattened task members kept in `extra`.

use serde::{Deserialize, Serialize};

use super::jsonrpc_meta::{EmptyResult, ResultType};
use protocol_droid_domain::ir::JsonObject;

/// Where a task is: `TaskStatus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Being processed.
    Working,
    /// Waiting for input from the requestor.
    InputRequired,
    /// Finished; the result is ready (terminal).
    Completed,
    /// Did not finish (terminal).
    Failed,
    /// Cancelled before it finished (terminal).
    Cancelled,
}

/// A request's `task` param, asking for a task: `TaskMetadata`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskMetadata {
    /// How long to keep the task after creation, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u64>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// `_meta["io.modelcontextprotocol/related-task"]`: `RelatedTaskMetadata`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RelatedTaskMetadata {
    /// The task the message belongs to.
    pub task_id: String,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// A task: `Task`.
///
/// Also the shape of `GetTaskResult`, `CancelTaskResult` and
/// `TaskStatusNotificationParams`, which are a task plus `_meta`; hence the
/// `meta` member, which a task nested in [`CreateTaskResult`] leaves out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// The task's id.
    pub task_id: String,
    /// Where it is.
    pub status: TaskStatus,
    /// A human-readable status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// ISO 8601 creation time.
    pub created_at: String,
    /// ISO 8601 time of the last status change.
    pub last_updated_at: String,
    /// Retention from creation, in milliseconds; `null` is unlimited.
    /// Required, so always written, as `null` when `None`.
    pub ttl: Option<u64>,
    /// Suggested polling interval, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval: Option<u64>,
    /// Metadata, when the task is a result or notification's params.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The answer to a task-augmented request: `CreateTaskResult`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateTaskResult {
    /// The task created (2025-11-25). The 2026-07-28 extension writes the
    /// task's members into the result itself instead; they stay in `extra`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<Task>,
    /// `task` under the 2026-07-28 extension; absent in 2025-11-25.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_type: Option<ResultType>,
    /// Result metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// Params naming one task: those of `tasks/get`, `tasks/result` and
/// `tasks/cancel`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskIdParams {
    /// The task.
    pub task_id: String,
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// Params of `tasks/get`.
pub type GetTaskRequestParams = TaskIdParams;
/// Params of `tasks/result`.
pub type GetTaskPayloadRequestParams = TaskIdParams;
/// Params of `tasks/cancel`.
pub type CancelTaskRequestParams = TaskIdParams;

/// The answer to `tasks/get`: the task.
pub type GetTaskResult = Task;
/// The answer to `tasks/cancel`: the task, now cancelled.
pub type CancelTaskResult = Task;
/// Params of `notifications/tasks/status`: the task.
pub type TaskStatusNotificationParams = Task;

/// The answer to `tasks/result`: whatever the original request's result
/// was, so any result object.
pub type GetTaskPayloadResult = EmptyResult;

/// The answer to `tasks/list`: `ListTasksResult`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksResult {
    /// This page of tasks.
    pub tasks: Vec<Task>,
    /// The cursor for the next page, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// Result metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_unlimited_ttl_is_written_as_null() -> Result<(), serde_json::Error> {
        let wire = json!({
            "taskId": "t", "status": "input_required",
            "createdAt": "2025-11-25T00:00:00Z", "lastUpdatedAt": "2025-11-25T00:00:00Z",
            "ttl": null,
        });
        let task: Task = serde_json::from_value(wire.clone())?;
        assert_eq!(task.status, TaskStatus::InputRequired);
        assert_eq!(serde_json::to_value(&task)?, wire);
        Ok(())
    }
}
