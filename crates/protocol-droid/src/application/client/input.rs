//! Answering what a server asks for, in either era.
//!
//! A legacy server asks with requests of its own; a 2026-07-28 server answers
//! `tools/call`, `prompts/get` or `resources/read` with an
//! `InputRequiredResult`, and the client retries the same request with the
//! answers and the server's `requestState`, echoed byte for byte, under a new
//! id, until a complete result arrives or the round limit is reached.

use serde_json::{Map, Value};

use super::connection::{Client, RequestOptions};
use super::error::ClientError;
use super::handler::answer;
use crate::wire::InputRequiredResult;

/// The `resultType` of a result that needs input first.
const INPUT_REQUIRED: &str = "input_required";

/// The `resultType` of a finished result.
const RESULT_COMPLETE: &str = "complete";

/// The `resultType` of a task (the 2026-07-28 tasks extension).
const RESULT_TASK: &str = "task";

/// Whether a request's own `_meta` declares the tasks extension.
fn declares_tasks(params: Option<&Value>) -> bool {
    params
        .and_then(|p| p.pointer("/_meta"))
        .and_then(|m| m.get(super::connection::meta::CLIENT_CAPABILITIES))
        .and_then(|c| c.get("extensions"))
        .and_then(|e| e.get(crate::domain::capability::TASKS_EXTENSION))
        .is_some()
}

/// Sends `method` and drives its input rounds to a complete result.
pub(super) async fn drive(
    client: &Client,
    method: &str,
    params: Option<Value>,
    options: &RequestOptions,
) -> Result<(Value, usize), ClientError> {
    let mut params = params;
    let mut rounds = 0;
    loop {
        let result = client.request_once(method, params.clone(), options).await?;
        match result.get("resultType") {
            // Absent means complete, as the revision says.
            None => return Ok((result, rounds)),
            Some(Value::String(kind)) if kind == RESULT_COMPLETE => return Ok((result, rounds)),
            Some(Value::String(kind)) if kind == INPUT_REQUIRED => {}
            // A task, for a request that declared the tasks extension: the
            // caller polls it (`Client::call_tool_as_task`).
            Some(Value::String(kind)) if kind == RESULT_TASK && declares_tasks(params.as_ref()) => {
                return Ok((result, rounds));
            }
            // A kind this client never asked for (`task` needs the tasks
            // extension declared) is not a result it can read as complete.
            Some(other) => {
                return Err(ClientError::InvalidResult {
                    method: method.to_owned(),
                    detail: format!("unexpected resultType {other}"),
                });
            }
        }
        if rounds >= client.options().max_input_rounds {
            return Err(ClientError::TooManyRounds {
                method: method.to_owned(),
                rounds,
            });
        }
        rounds += 1;
        let asked: InputRequiredResult =
            serde_json::from_value(result).map_err(|e| ClientError::InvalidResult {
                method: method.to_owned(),
                detail: e.to_string(),
            })?;
        let handler = client.options().handler.as_ref();
        let mut responses = Map::new();
        for (key, request) in asked.input_requests.unwrap_or_default() {
            let method = request.method().to_owned();
            let request = serde_json::to_value(&request).unwrap_or(Value::Null);
            let answer = answer(handler, &method, request.get("params").cloned()).await;
            // A question the handler cannot answer fails the whole request:
            // the server has no way to receive an error for one entry.
            let answer = answer.map_err(ClientError::Server)?;
            responses.insert(key, answer);
        }
        params = Some(retry_params(params, responses, asked.request_state));
    }
}

/// The original params with this round's answers and state; the previous
/// round's members are replaced, and `requestState` is left out when the
/// server sent none.
fn retry_params(
    params: Option<Value>,
    responses: Map<String, Value>,
    state: Option<String>,
) -> Value {
    let mut params = match params {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    };
    params.remove("inputResponses");
    params.remove("requestState");
    if !responses.is_empty() {
        params.insert("inputResponses".to_owned(), Value::Object(responses));
    }
    if let Some(state) = state {
        params.insert("requestState".to_owned(), Value::String(state));
    }
    Value::Object(params)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_retry_replaces_the_previous_round_and_omits_absent_state() {
        let first = retry_params(
            Some(json!({"name": "t", "requestState": "old", "inputResponses": {"x": {}}})),
            Map::new(),
            None,
        );
        assert_eq!(first, json!({"name": "t"}));
        let mut answers = Map::new();
        answers.insert("a".to_owned(), json!({"action": "accept"}));
        let second = retry_params(Some(first), answers, Some("s2".to_owned()));
        assert_eq!(
            second,
            json!({"name": "t", "inputResponses": {"a": {"action": "accept"}}, "requestState": "s2"})
        );
    }
}
