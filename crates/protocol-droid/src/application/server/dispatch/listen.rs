//! `subscriptions/listen`: the one long-lived 2026-07-28 request.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::application::server::host::Change;
use crate::application::server::tasks::{TaskEvent, TaskEvents, TaskRecord, wire};
use crate::application::server::{PeerSession, RequestContext};
use crate::domain::Refusal;
use crate::domain::feature::Feature;
use crate::domain::ir::JsonObject;
use crate::domain::jsonrpc::{ErrorObject, Message, Notification, RequestId};
use crate::wire::tasks::TaskStatus;

use super::{Connection, MAX_SUBSCRIBED_BYTES, MAX_SUBSCRIPTIONS, SUBSCRIPTION_ID_META};

/// The `notifications` filter of a listen, checked: required, an object,
/// its flags booleans and its lists lists of strings (`-32602` otherwise,
/// rather than a filter read as asking for less than was written). A
/// member this revision does not name is passed over, as a later one may.
fn filter_of(params: &JsonObject) -> Result<&JsonObject, ErrorObject> {
    let invalid = |why: &str| -> ErrorObject { Refusal::invalid_params(why.to_owned()).into() };
    let filter = match params.get("notifications") {
        Some(Value::Object(filter)) => filter,
        Some(_) => return Err(invalid("`notifications` must be an object")),
        None => {
            return Err(invalid(
                "`notifications` is required: what the stream is to carry",
            ));
        }
    };
    for flag in [
        "toolsListChanged",
        "promptsListChanged",
        "resourcesListChanged",
    ] {
        if filter.get(flag).is_some_and(|v| !v.is_boolean()) {
            return Err(invalid(&format!(
                "`notifications.{flag}` must be a boolean"
            )));
        }
    }
    for list in ["resourceSubscriptions", "taskIds"] {
        let strings = |v: &Value| v.as_array().is_some_and(|a| a.iter().all(Value::is_string));
        if filter.get(list).is_some_and(|v| !strings(v)) {
            return Err(invalid(&format!(
                "`notifications.{list}` must be an array of strings"
            )));
        }
    }
    Ok(filter)
}

impl Connection {
    /// `subscriptions/listen`: acknowledge, then forward the opted-in changes
    /// tagged with this request's id, until the caller stops or the server
    /// goes away.
    pub(super) async fn listen(
        &self,
        id: &RequestId,
        params: &JsonObject,
        peer: &PeerSession,
        ctx: &RequestContext,
    ) -> Result<Value, ErrorObject> {
        let filter = filter_of(params)?;
        let wants = |key: &str| filter.get(key).and_then(Value::as_bool).unwrap_or(false);
        // Only what the server announces changes of: a server whose list
        // never changes (a bridge's upstream, say) does not promise to.
        let caps = self.server.capabilities(peer.negotiated());
        let announces = |capability: &str| {
            caps.get(capability)
                .and_then(|c| c.get("listChanged"))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        let mut honoured = JsonObject::new();
        for (key, capability) in [
            ("toolsListChanged", "tools"),
            ("promptsListChanged", "prompts"),
            ("resourcesListChanged", "resources"),
        ] {
            if wants(key) && announces(capability) {
                honoured.insert(key.to_owned(), json!(true));
            }
        }
        let lists: Vec<String> = honoured.keys().cloned().collect();
        let wants = |key: &str| lists.iter().any(|k| k == key);
        // Only resources the caller may read can be watched, and only so
        // many, of so many bytes: the honoured subset goes back in the
        // acknowledgement. A forwarder cannot tell a resource its upstream
        // lacks from one it has, and acknowledges both; one the caller's
        // scopes hide is acknowledged as such an unknown one is, so the
        // answer does not tell that it exists, and never watched.
        let forwarder = self.server.forwarder().is_some();
        let mut bytes = 0_usize;
        let acknowledged: BTreeSet<String> = filter
            .get("resourceSubscriptions")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .collect::<BTreeSet<&str>>()
                    .into_iter()
                    .filter(|uri| forwarder || self.can_read(uri, peer.auth()))
                    .take(MAX_SUBSCRIPTIONS)
                    .take_while(|uri| {
                        bytes = bytes.saturating_add(uri.len());
                        bytes <= MAX_SUBSCRIBED_BYTES
                    })
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        if !acknowledged.is_empty() {
            honoured.insert("resourceSubscriptions".to_owned(), json!(acknowledged));
        }
        let uris: BTreeSet<String> = if forwarder {
            acknowledged
                .into_iter()
                .filter(|uri| self.can_read(uri, peer.auth()))
                .collect()
        } else {
            acknowledged
        };
        // Tasks of the caller's own, for a listen that declared the tasks
        // extension: their changes come as `notifications/tasks`. An id
        // that is not the caller's is left out of the acknowledgement, as
        // an unknown one is.
        let owner = self.task_owner(ctx);
        let asked = filter
            .get("taskIds")
            .and_then(Value::as_array)
            .filter(|_| peer.allows(Feature::TasksExtension));
        // Listening before looking: a change between the two is heard.
        let mut task_events = asked.is_some().then(|| self.server.tasks().events(&owner));
        // Each watched task's status as last told (or read), so a listener
        // that missed changes tells only what moved when it reads again.
        let mut task_ids = BTreeMap::new();
        let mut ended = Vec::new();
        for id in asked
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .take(MAX_SUBSCRIPTIONS)
        {
            if let Ok(Some(record)) = self.server.tasks().get(&owner, id).await {
                task_ids.insert(id.to_owned(), (record.status, record.updated_ms));
                if record.is_terminal() {
                    ended.push(record);
                }
            }
        }
        if task_ids.is_empty() {
            task_events = None;
        } else {
            honoured.insert(
                "taskIds".to_owned(),
                json!(task_ids.keys().collect::<Vec<_>>()),
            );
        }
        // Watching through a forwarder means watching upstream too, for as
        // long as this listen lasts, however it ends.
        let _watching = Watching::start(self, &uris);
        let tag = json!({ SUBSCRIPTION_ID_META: id.to_json() });
        let mut changes = self.server.changes();
        let _sent = peer.sink().send(Message::Notification(Notification {
            method: "notifications/subscriptions/acknowledged".to_owned(),
            params: Some(json!({ "notifications": honoured, "_meta": tag })),
        }));
        // A task that had already ended changes no more: its end is told now.
        for record in &ended {
            task_notification(peer, record, &tag);
        }
        loop {
            let received = tokio::select! {
                change = changes.recv() => change,
                event = next_event(&mut task_events) => {
                    match event {
                        Some(event) => {
                            let record = &event.record;
                            if let Some(told) = task_ids.get_mut(&record.id) {
                                if worth_telling(record, *told) {
                                    *told = (record.status, record.updated_ms);
                                    task_notification(peer, record, &tag);
                                }
                            }
                        }
                        None => task_events = None,
                    }
                    if task_events.as_mut().is_some_and(TaskEvents::missed) {
                        // Changes were dropped for this listener's queue
                        // being full: what it watches is read again.
                        self.tell_moved(&owner, &mut task_ids, peer, &tag).await;
                    }
                    continue;
                }
            };
            let change = match received {
                Ok(change) => change,
                // A listener that fell behind has lost notifications; list
                // changes are idempotent, so carry on from the newest.
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => break,
            };
            // Changes already waiting are told with this one, each at most
            // once: a burst of edits (an upstream announcing its list in a
            // loop) is one notification per list, not one per edit. At
            // most the three lists and the watched resources.
            let mut notices = Vec::new();
            let mut next = Some(change);
            let mut closed = false;
            // At most a backlog's worth at once: `try_recv` never yields,
            // and a flood that never stops must not keep this task from
            // sending, nor the worker from its other tasks.
            for _ in 0..DRAINED_AT_ONCE {
                gather(&mut notices, next.take(), &wants, &uris, peer);
                match changes.try_recv() {
                    Ok(change) => next = Some(change),
                    Err(broadcast::error::TryRecvError::Lagged(_)) => {}
                    Err(broadcast::error::TryRecvError::Empty) => break,
                    Err(broadcast::error::TryRecvError::Closed) => {
                        closed = true;
                        break;
                    }
                }
            }
            // The last change taken, when the gathering stopped at its bound.
            gather(&mut notices, next.take(), &wants, &uris, peer);
            for (method, uri) in notices {
                let mut params = JsonObject::new();
                if let Some(uri) = uri {
                    params.insert("uri".to_owned(), json!(uri));
                }
                params.insert("_meta".to_owned(), tag.clone());
                let _sent = peer.sink().send(Message::Notification(Notification {
                    method: method.to_owned(),
                    params: Some(Value::Object(params)),
                }));
            }
            if closed {
                break;
            }
        }
        Ok(json!({ "resultType": "complete", "_meta": tag }))
    }
}

/// How many waiting changes a listen gathers before it sends what they say.
const DRAINED_AT_ONCE: usize = 256;

/// Adds what a listener is told of `change` to `notices`, once.
fn gather(
    notices: &mut Vec<(&'static str, Option<String>)>,
    change: Option<Change>,
    wants: &impl Fn(&str) -> bool,
    uris: &BTreeSet<String>,
    peer: &PeerSession,
) {
    if let Some(told) = change.and_then(|change| notice(change, wants, uris, peer)) {
        if !notices.contains(&told) {
            notices.push(told);
        }
    }
}

/// What a listener is told of `change`, if it is told at all: the
/// notification's method and, for a watched resource, its URI.
fn notice(
    change: Change,
    wants: &impl Fn(&str) -> bool,
    uris: &BTreeSet<String>,
    peer: &PeerSession,
) -> Option<(&'static str, Option<String>)> {
    match change {
        Change::Tools if wants("toolsListChanged") => {
            Some(("notifications/tools/list_changed", None))
        }
        Change::ToolsFor(session) if session == peer.session() && wants("toolsListChanged") => {
            Some(("notifications/tools/list_changed", None))
        }
        Change::Prompts if wants("promptsListChanged") => {
            Some(("notifications/prompts/list_changed", None))
        }
        Change::Resources if wants("resourcesListChanged") => {
            Some(("notifications/resources/list_changed", None))
        }
        Change::ResourceUpdated(uri) if uris.contains(&uri) => {
            Some(("notifications/resources/updated", Some(uri)))
        }
        _ => None,
    }
}

/// Tells a listener that `record` changed: `notifications/tasks`, with the
/// task as `tasks/get` shows it.
fn task_notification(peer: &PeerSession, record: &TaskRecord, tag: &Value) {
    let mut params = match wire::detailed(record) {
        Value::Object(params) => params,
        _ => JsonObject::new(),
    };
    params.insert("_meta".to_owned(), tag.clone());
    let _sent = peer.sink().send(Message::Notification(Notification {
        method: "notifications/tasks".to_owned(),
        params: Some(Value::Object(params)),
    }));
}

impl Connection {
    /// Reads `watched` tasks of `owner`'s again and tells the listener of
    /// each whose status moved since it was last told.
    async fn tell_moved(
        &self,
        owner: &str,
        watched: &mut BTreeMap<String, (TaskStatus, u64)>,
        peer: &PeerSession,
        tag: &Value,
    ) {
        for (id, told) in watched.iter_mut() {
            let Ok(Some(record)) = self.server.tasks().get(owner, id).await else {
                continue;
            };
            let now = (record.status, record.updated_ms);
            if now != *told {
                *told = now;
                task_notification(peer, &record, tag);
            }
        }
    }
}

/// Whether a change of a watched task is news, against the status and time
/// last told: one no newer (heard twice, or read since) is not told again,
/// but an end not yet told always is, whatever the clock of the instance
/// that wrote it says.
fn worth_telling(record: &TaskRecord, told: (TaskStatus, u64)) -> bool {
    let (status, at) = told;
    if record.status == status && record.updated_ms <= at {
        return false;
    }
    record.updated_ms >= at || record.is_terminal()
}

/// The next task change, or never when the listen watches no task.
async fn next_event(events: &mut Option<TaskEvents>) -> Option<Arc<TaskEvent>> {
    match events {
        Some(events) => events.recv().await,
        None => std::future::pending().await,
    }
}

/// The resources a listen watches through the server's forwarder, dropped
/// (and told to the forwarder) when the listen ends.
struct Watching {
    forward: Option<Arc<dyn crate::application::server::Forward>>,
    session: crate::domain::SessionId,
    uris: Vec<String>,
}

impl Watching {
    fn start(connection: &Connection, uris: &BTreeSet<String>) -> Self {
        let forward = connection.server.forwarder().cloned();
        if let Some(forward) = &forward {
            for uri in uris {
                forward.subscription(connection.session(), uri, true);
            }
        }
        Self {
            forward,
            session: connection.session(),
            uris: uris.iter().cloned().collect(),
        }
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        if let Some(forward) = &self.forward {
            for uri in &self.uris {
                forward.subscription(self.session, uri, false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(status: TaskStatus, updated_ms: u64) -> TaskRecord {
        TaskRecord {
            status,
            ..TaskRecord::working("o", "t", updated_ms)
        }
    }

    #[test]
    fn a_change_is_told_once_and_never_behind_what_was_told() {
        let told = (TaskStatus::Working, 100);
        assert!(
            !worth_telling(&at(TaskStatus::Working, 100), told),
            "the same, again"
        );
        assert!(!worth_telling(&at(TaskStatus::Working, 90), told), "older");
        assert!(
            !worth_telling(&at(TaskStatus::InputRequired, 90), told),
            "an older step"
        );
        assert!(
            worth_telling(&at(TaskStatus::Working, 110), told),
            "newer, same status"
        );
        assert!(
            worth_telling(&at(TaskStatus::InputRequired, 100), told),
            "another status, same moment"
        );
        assert!(worth_telling(&at(TaskStatus::Completed, 120), told));
        // Written by an instance whose clock is behind: an end is still an end.
        assert!(worth_telling(&at(TaskStatus::Cancelled, 50), told));
        assert!(!worth_telling(
            &at(TaskStatus::Cancelled, 50),
            (TaskStatus::Cancelled, 50)
        ));
    }
}
