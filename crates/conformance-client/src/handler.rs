//! What the conformance client answers when a server asks: accept every
//! elicitation with the form's defaults (and `true` for a yes/no without
//! one), sample with a fixed reply, list no roots.

use futures_util::future::BoxFuture;
use protocol_droid::application::client::ClientHandler;
use protocol_droid::application::client::form_defaults;
use protocol_droid::domain::jsonrpc::ErrorObject;
use protocol_droid::wire::{
    ClientCapabilities, ClientElicitationCapability, CreateMessageRequestParams,
    CreateMessageResult, ElicitAction, ElicitRequestParams, ElicitResult, ElicitValue,
    ListRootsResult, RootsCapability,
};
use serde_json::{Map, Value, json};

/// The conformance client's answers.
#[derive(Debug)]
pub(crate) struct Conformance;

impl ClientHandler for Conformance {
    fn capabilities(&self) -> ClientCapabilities {
        ClientCapabilities {
            elicitation: Some(ClientElicitationCapability::default()),
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
                "content": { "type": "text", "text": "A sampled answer." },
                "model": "conformance-client",
                "stopReason": "endTurn",
            });
            serde_json::from_value(reply).map_err(|e| {
                ErrorObject::new(
                    protocol_droid::domain::jsonrpc::ErrorCode::INTERNAL_ERROR,
                    e.to_string(),
                )
            })
        })
    }

    fn elicit(
        &self,
        params: ElicitRequestParams,
    ) -> BoxFuture<'_, Result<ElicitResult, ErrorObject>> {
        Box::pin(async move {
            let content = match params {
                ElicitRequestParams::Form(form) => {
                    let schema =
                        serde_json::to_value(&form.requested_schema).unwrap_or(Value::Null);
                    let mut content = form_defaults(&schema);
                    // A yes/no without a default is answered yes, so a
                    // confirmation goes ahead.
                    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                        for (name, property) in properties {
                            if property.get("type").and_then(Value::as_str) == Some("boolean") {
                                content
                                    .entry(name.clone())
                                    .or_insert(ElicitValue::Boolean(true));
                            }
                        }
                    }
                    Some(content)
                }
                ElicitRequestParams::Url(_) => None,
            };
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
            Ok(ListRootsResult {
                roots: Vec::new(),
                meta: None,
                extra: Map::new(),
            })
        })
    }
}
