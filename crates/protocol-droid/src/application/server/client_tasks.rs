//! Asking a 2025-11-25 client a question it runs as a task of its own.
//!
//! A client that declares `tasks.requests.elicitation.create` (or
//! `tasks.requests.sampling.createMessage`) can take that request as a task:
//! it answers at once with the task, and the server polls it with
//! `tasks/get` until it ends, then fetches the answer with `tasks/result`.
//! Each of those is a short round trip, so a person's slow answer is bounded
//! by the task's TTL rather than by how long one request may wait, and no
//! request stays open meanwhile. A client that answers the question
//! directly anyway is taken at its word; one that declares nothing is asked
//! as before.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::ports::{DynExchange, ExchangeError};
use super::tasks::wire::without_related_task;
use crate::domain::ir::JsonObject;
use crate::domain::jsonrpc::{ErrorCode, ErrorObject};

/// How long the client is asked to keep a question's task: as long as a
/// task of this server's own lives by default.
const TTL: Duration = Duration::from_secs(10 * 60);

/// The shortest time a client's task is waited for, whatever TTL it
/// gives: a TTL of nothing would time out before the first poll.
const MIN_TTL: Duration = Duration::from_secs(1);

/// The poll interval when the client suggests none.
const DEFAULT_POLL: Duration = Duration::from_millis(500);

/// The shortest poll interval kept to, whatever the client suggests: no
/// faster than would flood it.
const POLL_FLOOR: Duration = Duration::from_millis(50);

/// Whether the client declared (in `capabilities`) that it runs `method`
/// as a task when asked to.
pub(crate) fn runs_as_task(capabilities: &JsonObject, method: &str) -> bool {
    let path: &[&str] = match method {
        "elicitation/create" => &["elicitation", "create"],
        "sampling/createMessage" => &["sampling", "createMessage"],
        _ => return false,
    };
    let requests = capabilities
        .get("tasks")
        .and_then(|tasks| tasks.get("requests"));
    path.iter()
        .try_fold(requests, |at, step| at.map(|at| at.get(step)))
        .flatten()
        .is_some_and(Value::is_object)
}

/// Whether the client declared that it takes `tasks/cancel`.
pub(crate) fn cancels(capabilities: &JsonObject) -> bool {
    capabilities
        .get("tasks")
        .and_then(|tasks| tasks.get("cancel"))
        .is_some_and(Value::is_object)
}

/// Where and how a question goes to the client as a task.
pub(crate) struct Asking<'a> {
    /// The connection's way to the client.
    pub(crate) exchange: &'a Arc<dyn DynExchange>,
    /// The server's own task asking, if the question comes from one: the
    /// polls travel where that task's messages do.
    pub(crate) on_behalf_of: Option<&'a str>,
    /// Whether the client declared that it takes `tasks/cancel`.
    pub(crate) cancel: bool,
}

impl Asking<'_> {
    /// Asks `method` with `params` of the client as a task, polls the task
    /// to its end, and resolves to its result, as the plain request would
    /// have.
    ///
    /// Dropped before the end (the handler asking was stopped), or past the
    /// task's TTL, the client's task is cancelled when the client takes
    /// `tasks/cancel`.
    ///
    /// # Errors
    ///
    /// As the plain request's; besides, [`ExchangeError::TimedOut`] once
    /// the task's TTL has passed without an end, and
    /// [`ExchangeError::Peer`] when the client's task failed, was cancelled
    /// or answered in a form the revision does not have.
    pub(crate) async fn ask(&self, method: &str, params: Value) -> Result<Value, ExchangeError> {
        let created = self.send(method, with_task(params)).await?;
        let Some(task) = created.get("task") else {
            return Ok(created);
        };
        let id = task
            .get("taskId")
            .and_then(Value::as_str)
            .ok_or_else(|| malformed("the client's task has no taskId"))?
            .to_owned();
        let mut guard = CancelOnDrop {
            exchange: self.cancel.then(|| Arc::clone(self.exchange)),
            on_behalf_of: self.on_behalf_of.map(str::to_owned),
            id: id.clone(),
        };
        let lifetime = task
            .get("ttl")
            .and_then(Value::as_u64)
            .map_or(TTL, Duration::from_millis)
            .clamp(MIN_TTL, TTL);
        let deadline = tokio::time::Instant::now() + lifetime;
        let mut seen = task.clone();
        loop {
            match seen.get("status").and_then(Value::as_str) {
                // `input_required` ends the polling too: the client's task
                // waits on this server, and `tasks/result` is where the
                // client asks it.
                // Ended: nothing left to cancel, whatever its result says.
                Some("completed" | "failed") => {
                    guard.exchange = None;
                    break;
                }
                Some("input_required") => break,
                Some("cancelled") => {
                    guard.exchange = None;
                    return Err(ExchangeError::Peer(ErrorObject::new(
                        ErrorCode::INTERNAL_ERROR,
                        "the client cancelled the task it ran this request as",
                    )));
                }
                Some(_) => {}
                None => return Err(malformed("the client's task has no status")),
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(ExchangeError::TimedOut);
            }
            // The client's interval is kept to, but the last poll is at the
            // deadline, not past it.
            tokio::time::sleep(poll_interval(&seen).min(deadline - now)).await;
            seen = self.send("tasks/get", json!({ "taskId": id })).await?;
        }
        let result = self.send("tasks/result", json!({ "taskId": id })).await?;
        guard.exchange = None;
        Ok(without_related_task(result))
    }

    async fn send(&self, method: &str, params: Value) -> Result<Value, ExchangeError> {
        match self.on_behalf_of {
            Some(task) => {
                self.exchange
                    .exchange_for_task_dyn(task, method, params)
                    .await
            }
            None => self.exchange.exchange_dyn(method, params).await,
        }
    }
}

/// `params` with a `task` asking the client to keep it for [`TTL`].
fn with_task(params: Value) -> Value {
    let Value::Object(mut params) = params else {
        return params;
    };
    let ttl = u64::try_from(TTL.as_millis()).unwrap_or(u64::MAX);
    params.insert("task".to_owned(), json!({ "ttl": ttl }));
    Value::Object(params)
}

fn poll_interval(task: &Value) -> Duration {
    task.get("pollInterval")
        .and_then(Value::as_u64)
        .map_or(DEFAULT_POLL, Duration::from_millis)
        .max(POLL_FLOOR)
}

fn malformed(message: &str) -> ExchangeError {
    ExchangeError::Peer(ErrorObject::new(ErrorCode::INVALID_PARAMS, message))
}

/// Cancels the client's task if the wait for it ends early.
struct CancelOnDrop {
    /// Where to send `tasks/cancel`; `None` once there is nothing to cancel
    /// (the task ended) or the client takes no cancellation.
    exchange: Option<Arc<dyn DynExchange>>,
    /// The server's task the question came from, if any.
    on_behalf_of: Option<String>,
    id: String,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(exchange) = self.exchange.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let id = std::mem::take(&mut self.id);
        let on_behalf_of = self.on_behalf_of.take();
        // Not awaited by anyone: the asking handler is gone. An error (the
        // task ended meanwhile, the connection closed) changes nothing.
        drop(runtime.spawn(async move {
            let params = json!({ "taskId": id });
            let _ = match on_behalf_of {
                Some(task) => {
                    exchange
                        .exchange_for_task_dyn(&task, "tasks/cancel", params)
                        .await
                }
                None => exchange.exchange_dyn("tasks/cancel", params).await,
            };
        }));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::application::server::ports::BoxFuture;
    use crate::application::server::tasks::wire::RELATED_TASK_META;

    fn capabilities(value: Value) -> JsonObject {
        match value {
            Value::Object(object) => object,
            _ => JsonObject::new(),
        }
    }

    #[test]
    fn only_what_the_client_declared_runs_as_a_task() {
        let both = capabilities(json!({ "tasks": { "cancel": {}, "requests": {
            "elicitation": { "create": {} }, "sampling": { "createMessage": {} } } } }));
        assert!(runs_as_task(&both, "elicitation/create"));
        assert!(runs_as_task(&both, "sampling/createMessage"));
        assert!(!runs_as_task(&both, "roots/list"));
        assert!(cancels(&both));
        let elicitation = capabilities(json!({ "tasks": { "requests": {
            "elicitation": { "create": {} } } } }));
        assert!(!runs_as_task(&elicitation, "sampling/createMessage"));
        assert!(!cancels(&elicitation));
        let wrong =
            capabilities(json!({ "tasks": { "requests": { "elicitation": { "create": true } } } }));
        assert!(!runs_as_task(&wrong, "elicitation/create"));
        assert!(!runs_as_task(&JsonObject::new(), "elicitation/create"));
    }

    /// A client that answers each request from a script, recording them.
    struct Scripted {
        answers: Mutex<Vec<Result<Value, ExchangeError>>>,
        asked: Mutex<Vec<(String, Value)>>,
    }

    impl DynExchange for Scripted {
        fn exchange_dyn(
            &self,
            method: &str,
            params: Value,
        ) -> BoxFuture<'_, Result<Value, ExchangeError>> {
            if let Ok(mut asked) = self.asked.lock() {
                asked.push((method.to_owned(), params));
            }
            let answer = self
                .answers
                .lock()
                .ok()
                .and_then(|mut answers| (!answers.is_empty()).then(|| answers.remove(0)))
                .unwrap_or(Err(ExchangeError::Closed));
            Box::pin(async move { answer })
        }
    }

    fn scripted(answers: Vec<Result<Value, ExchangeError>>) -> Arc<Scripted> {
        Arc::new(Scripted {
            answers: Mutex::new(answers),
            asked: Mutex::default(),
        })
    }

    fn asking(exchange: &Arc<dyn DynExchange>) -> Asking<'_> {
        Asking {
            exchange,
            on_behalf_of: None,
            cancel: true,
        }
    }

    fn methods(client: &Scripted) -> Vec<String> {
        client
            .asked
            .lock()
            .map(|asked| asked.iter().map(|(m, _)| m.clone()).collect())
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn a_task_is_polled_to_its_end_and_its_result_fetched() {
        let client = scripted(vec![
            Ok(json!({ "task": { "taskId": "t1", "status": "working", "pollInterval": 50 } })),
            Ok(json!({ "taskId": "t1", "status": "working" })),
            Ok(json!({ "taskId": "t1", "status": "completed" })),
            Ok(json!({ "action": "accept", "content": { "ok": true },
                "_meta": { RELATED_TASK_META: { "taskId": "t1" } } })),
        ]);
        let exchange: Arc<dyn DynExchange> = client.clone();
        let answer = asking(&exchange)
            .ask("elicitation/create", json!({ "message": "?" }))
            .await;
        assert_eq!(
            answer,
            Ok(json!({ "action": "accept", "content": { "ok": true } }))
        );
        assert_eq!(
            methods(&client),
            [
                "elicitation/create",
                "tasks/get",
                "tasks/get",
                "tasks/result"
            ]
        );
        let first = client.asked.lock().ok().and_then(|a| a.first().cloned());
        assert_eq!(
            first.map(|(_, params)| params),
            Some(json!({ "message": "?", "task": { "ttl": 600_000 } }))
        );
    }

    #[tokio::test]
    async fn a_direct_answer_is_taken_and_a_task_past_its_ttl_is_cancelled() {
        let direct = scripted(vec![Ok(json!({ "action": "decline" }))]);
        let exchange: Arc<dyn DynExchange> = direct.clone();
        let answer = asking(&exchange).ask("elicitation/create", json!({})).await;
        assert_eq!(answer, Ok(json!({ "action": "decline" })));

        let working = || Ok(json!({ "taskId": "t2", "status": "working" }));
        let slow = scripted(vec![
            Ok(
                json!({ "task": { "taskId": "t2", "status": "working", "ttl": 200,
                "pollInterval": 100 } }),
            ),
            working(),
            working(),
            working(),
            working(),
            Ok(json!({})),
        ]);
        let exchange: Arc<dyn DynExchange> = slow.clone();
        // Past its TTL the wait ends, and the task is cancelled.
        let answer = asking(&exchange).ask("elicitation/create", json!({})).await;
        assert_eq!(answer, Err(ExchangeError::TimedOut));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while methods(&slow).last().map(String::as_str) != Some("tasks/cancel")
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let asked = methods(&slow);
        assert_eq!(
            asked.first().map(String::as_str),
            Some("elicitation/create")
        );
        assert_eq!(asked.last().map(String::as_str), Some("tasks/cancel"));
        let polls = asked
            .get(1..asked.len().saturating_sub(1))
            .unwrap_or_default();
        assert!(
            !polls.is_empty() && polls.iter().all(|m| m == "tasks/get"),
            "{asked:?}"
        );
    }

    /// Waits (boundedly) until `client` was last asked `method`.
    async fn last_asked(client: &Scripted, method: &str) -> bool {
        for _ in 0..200 {
            if methods(client).last().map(String::as_str) == Some(method) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        false
    }

    #[tokio::test]
    async fn a_wait_dropped_cancels_the_task_and_an_ended_one_is_not_cancelled() {
        let working = || Ok(json!({ "taskId": "t3", "status": "working" }));
        let dropped = scripted(vec![
            Ok(json!({ "task": { "taskId": "t3", "status": "working", "pollInterval": 50 } })),
            working(),
            working(),
            working(),
            working(),
            Ok(json!({})),
        ]);
        let exchange: Arc<dyn DynExchange> = dropped.clone();
        let asked = asking(&exchange);
        let gave_up = tokio::time::timeout(
            Duration::from_millis(120),
            asked.ask("elicitation/create", json!({})),
        )
        .await;
        assert!(gave_up.is_err());
        assert!(
            last_asked(&dropped, "tasks/cancel").await,
            "{:?}",
            methods(&dropped)
        );

        let failed = scripted(vec![
            Ok(json!({ "task": { "taskId": "t4", "status": "working", "pollInterval": 50 } })),
            Ok(json!({ "taskId": "t4", "status": "failed" })),
            Err(ExchangeError::Peer(ErrorObject::new(
                ErrorCode::INTERNAL_ERROR,
                "no",
            ))),
        ]);
        let exchange: Arc<dyn DynExchange> = failed.clone();
        let answer = asking(&exchange).ask("elicitation/create", json!({})).await;
        assert!(matches!(answer, Err(ExchangeError::Peer(_))));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            methods(&failed),
            ["elicitation/create", "tasks/get", "tasks/result"],
            "an ended task is not cancelled"
        );
    }
}
