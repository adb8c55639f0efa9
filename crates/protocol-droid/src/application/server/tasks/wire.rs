//! A [`TaskRecord`] in each era's shape.
//!
//! 2025-11-25 nests the task in `CreateTaskResult.task` and names its
//! durations `ttl` and `pollInterval`; the 2026-07-28 extension writes the
//! task's members into the result itself (`resultType: "task"`), names them
//! `ttlMs` and `pollIntervalMs`, and inlines the result, error or pending
//! questions on `tasks/get` (`DetailedTask`).

use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::{TaskOutcome, TaskRecord};
use crate::domain::ir::JsonObject;
use crate::wire::tasks::{RelatedTaskMetadata, Task};

/// The `_meta` key tying a 2025-11-25 message to its task.
pub(crate) const RELATED_TASK_META: &str = "io.modelcontextprotocol/related-task";

/// `result` without the `_meta` mark tying it to a task (and without
/// `_meta` when nothing else is left in it): for a reader to whom that
/// task means nothing.
pub(crate) fn without_related_task(mut result: Value) -> Value {
    let emptied = result
        .get_mut("_meta")
        .and_then(Value::as_object_mut)
        .is_some_and(|meta| {
            meta.remove(RELATED_TASK_META);
            meta.is_empty()
        });
    if emptied {
        if let Some(result) = result.as_object_mut() {
            result.remove("_meta");
        }
    }
    result
}

/// `ms` since the Unix epoch as an RFC 3339 (ISO 8601) UTC time.
pub(crate) fn timestamp(ms: u64) -> String {
    let nanos = i128::from(ms).saturating_mul(1_000_000);
    OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|at| at.format(&Rfc3339).ok())
        // Only a time past the year 9999 fails; said as the epoch's end.
        .unwrap_or_else(|| "9999-12-31T23:59:59Z".to_owned())
}

/// The task as 2025-11-25 writes it (`Task`).
pub(crate) fn legacy_task(record: &TaskRecord) -> Task {
    Task {
        task_id: record.id.clone(),
        status: record.status,
        status_message: record.status_message.clone(),
        created_at: timestamp(record.created_ms),
        last_updated_at: timestamp(record.updated_ms),
        ttl: Some(record.ttl_ms),
        poll_interval: Some(record.poll_interval_ms),
        meta: None,
        extra: JsonObject::new(),
    }
}

/// `_meta` naming the task a 2025-11-25 message belongs to.
pub(crate) fn related_meta(id: &str) -> Value {
    let related = RelatedTaskMetadata {
        task_id: id.to_owned(),
        extra: JsonObject::new(),
    };
    json!({ RELATED_TASK_META: related })
}

/// The id of the task a message (request or notification) is tagged with
/// in its params' `_meta`, if it is.
pub(crate) fn related_task(message: &Value) -> Option<&str> {
    message
        .get("params")?
        .get("_meta")?
        .get(RELATED_TASK_META)?
        .get("taskId")?
        .as_str()
}

/// The task's own members as the 2026-07-28 extension writes them.
pub(crate) fn modern_task(record: &TaskRecord) -> JsonObject {
    let mut task = JsonObject::new();
    task.insert("taskId".to_owned(), json!(record.id));
    task.insert("status".to_owned(), json!(record.status));
    if let Some(message) = &record.status_message {
        task.insert("statusMessage".to_owned(), json!(message));
    }
    task.insert("createdAt".to_owned(), json!(timestamp(record.created_ms)));
    task.insert(
        "lastUpdatedAt".to_owned(),
        json!(timestamp(record.updated_ms)),
    );
    task.insert("ttlMs".to_owned(), json!(record.ttl_ms));
    task.insert("pollIntervalMs".to_owned(), json!(record.poll_interval_ms));
    task
}

/// `CreateTaskResult` for a request of the 2026-07-28 extension: the task,
/// flattened, as `resultType: "task"`.
pub(crate) fn modern_created(record: &TaskRecord) -> Value {
    let mut result = modern_task(record);
    result.insert("resultType".to_owned(), json!("task"));
    Value::Object(result)
}

/// `CreateTaskResult` for a 2025-11-25 request: the task, nested.
pub(crate) fn legacy_created(record: &TaskRecord) -> Value {
    json!({ "task": legacy_task(record) })
}

/// `tasks/get` under the 2026-07-28 extension (`DetailedTask`): the task,
/// and by its status the result, the error or the questions it waits on.
pub(crate) fn detailed(record: &TaskRecord) -> Value {
    let mut task = modern_task(record);
    match &record.outcome {
        Some(TaskOutcome::Result(result)) => {
            task.insert("result".to_owned(), result.clone());
        }
        Some(TaskOutcome::Error(error)) => {
            task.insert("error".to_owned(), error.to_json());
        }
        None if !record.input_requests.is_empty() => {
            task.insert(
                "inputRequests".to_owned(),
                Value::Object(record.input_requests.clone()),
            );
        }
        None => {}
    }
    Value::Object(task)
}

#[cfg(test)]
mod tests {
    // Indexing a `serde_json::Value` yields `Null` for a missing member.
    #![allow(clippy::indexing_slicing)]

    use super::*;
    use crate::wire::tasks::TaskStatus;

    fn record() -> TaskRecord {
        TaskRecord {
            created_ms: 1_764_028_800_000,
            ..TaskRecord::working("local", "t1", 1_764_028_800_500)
        }
    }

    #[test]
    fn times_are_rfc_3339_in_utc() {
        assert_eq!(timestamp(1_764_028_800_000), "2025-11-25T00:00:00Z");
        assert_eq!(timestamp(1_764_028_800_500), "2025-11-25T00:00:00.5Z");
    }

    #[test]
    fn each_era_names_the_durations_its_own_way() -> Result<(), serde_json::Error> {
        let legacy = legacy_created(&record());
        assert_eq!(legacy["task"]["ttl"], 60_000);
        assert_eq!(legacy["task"]["pollInterval"], 500);
        assert_eq!(legacy.get("resultType"), None);
        let modern = modern_created(&record());
        assert_eq!(modern["resultType"], "task");
        assert_eq!(modern["ttlMs"], 60_000);
        assert_eq!(modern["pollIntervalMs"], 500);
        assert_eq!(modern.get("task"), None);
        assert_eq!(modern.get("ttl"), None);
        let _typed: Task = serde_json::from_value(legacy["task"].clone())?;
        Ok(())
    }

    #[test]
    fn a_detailed_task_carries_what_its_status_has() {
        let mut waiting = record();
        waiting.status = TaskStatus::InputRequired;
        waiting
            .input_requests
            .insert("k".to_owned(), json!({ "method": "elicitation/create" }));
        assert_eq!(
            detailed(&waiting)["inputRequests"]["k"]["method"],
            "elicitation/create"
        );
        let mut done = record();
        done.status = TaskStatus::Completed;
        done.outcome = Some(TaskOutcome::Result(json!({ "content": [] })));
        let done = detailed(&done);
        assert_eq!(done["result"], json!({ "content": [] }));
        assert_eq!(done.get("error"), None);
        assert_eq!(done.get("inputRequests"), None);
    }
}
