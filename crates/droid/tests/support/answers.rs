//! What the tests that run the project's client against `droid serve`
//! share: a handler that answers every question the fixture asks, and a
//! call read as its text.

use futures_util::future::BoxFuture;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use protocol_droid::application::client::{Client, ClientHandler, ProgressFn, RequestOptions};
use protocol_droid::domain::ir::{ContentBlock, ToolResult};
use protocol_droid::domain::jsonrpc::{ErrorCode, ErrorObject};
use protocol_droid::wire::{
    ClientCapabilities, ClientElicitationCapability, ClientSamplingCapability,
    CreateMessageRequestParams, CreateMessageResult, ElicitAction, ElicitRequestParams,
    ElicitResult, ElicitValue, ListRootsResult, RootsCapability,
};
use serde_json::{Map, Value, json};

/// Answers every question the fixture asks, so each round can be checked.
#[derive(Debug)]
pub(crate) struct Answers;

impl ClientHandler for Answers {
    fn capabilities(&self) -> ClientCapabilities {
        ClientCapabilities {
            elicitation: Some(ClientElicitationCapability::default()),
            sampling: Some(ClientSamplingCapability::default()),
            roots: Some(RootsCapability::default()),
            ..ClientCapabilities::default()
        }
    }

    fn create_message(
        &self,
        _params: CreateMessageRequestParams,
    ) -> BoxFuture<'_, Result<CreateMessageResult, ErrorObject>> {
        Box::pin(async {
            let reply = json!({
                "role": "assistant",
                "content": { "type": "text", "text": "sampled-by-droid" },
                "model": "matrix",
            });
            serde_json::from_value(reply).map_err(|e| internal(&e))
        })
    }

    fn elicit(
        &self,
        params: ElicitRequestParams,
    ) -> BoxFuture<'_, Result<ElicitResult, ErrorObject>> {
        Box::pin(async move {
            let ElicitRequestParams::Form(form) = params else {
                return Err(internal(&"the fixture asks through forms"));
            };
            let schema = serde_json::to_value(&form.requested_schema).unwrap_or_default();
            let content = schema
                .get("properties")
                .and_then(Value::as_object)
                .map(|properties| {
                    properties
                        .keys()
                        .map(|k| (k.clone(), ElicitValue::String(format!("{k}-answer"))))
                        .collect()
                });
            Ok(ElicitResult {
                action: ElicitAction::Accept,
                content,
                meta: None,
                extra: Map::new(),
            })
        })
    }

    fn list_roots(&self) -> BoxFuture<'_, Result<ListRootsResult, ErrorObject>> {
        Box::pin(async {
            serde_json::from_value(json!({ "roots": [{ "uri": "file:///matrix" }] }))
                .map_err(|e| internal(&e))
        })
    }
}

/// An answer the fixture will turn into a failed call, and so a failed test.
fn internal(why: &dyn std::fmt::Display) -> ErrorObject {
    ErrorObject::new(ErrorCode::INTERNAL_ERROR, why.to_string())
}

/// The text blocks of `result`, one a line.
pub(crate) fn text_of(result: &ToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.clone()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Calls `name` with `arguments`, which must not fail; its text.
pub(crate) async fn call(
    client: &Client,
    name: &str,
    arguments: Value,
) -> Result<String, super::TestError> {
    let arguments = arguments.as_object().cloned();
    let reply = client
        .call_tool(name, arguments, &RequestOptions::default())
        .await?;
    assert_ne!(reply.value.is_error, Some(true), "{name}: {}", reply.raw);
    Ok(text_of(&reply.value))
}

/// Request options that count the progress notifications heard, and the
/// count.
pub(crate) fn counting_progress() -> (RequestOptions, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&seen);
    let on_progress: ProgressFn = Arc::new(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
    });
    let options = RequestOptions {
        on_progress: Some(on_progress),
        ..RequestOptions::default()
    };
    (options, seen)
}
