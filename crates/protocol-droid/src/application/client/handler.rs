//! What the application answers when a server asks the client something.
//!
//! The same handler serves both eras: a legacy server sends
//! `sampling/createMessage`, `elicitation/create` or `roots/list` as requests
//! of its own, and a 2026-07-28 server puts them in an `InputRequiredResult`
//! that the client answers in its retry. The handler never sees the
//! difference.

use std::collections::BTreeMap;
use std::fmt;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value};

use crate::domain::Refusal;
use crate::domain::jsonrpc::ErrorObject;
use crate::wire::{
    ClientCapabilities, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, ElicitValue, InputRequest, ListRootsResult,
};

/// A notification from the server, as the application sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    /// The method, e.g. `notifications/message`.
    pub method: String,
    /// The params as sent.
    pub params: Option<Value>,
}

/// Answers the server's questions. Every method has a default that declines,
/// so an application implements only what it supports, and declares it in
/// [`Self::capabilities`].
pub trait ClientHandler: Send + Sync + fmt::Debug {
    /// The capabilities this handler backs, sent to the server at
    /// `initialize` (legacy) or in every request's `_meta` (2026-07-28).
    fn capabilities(&self) -> ClientCapabilities {
        ClientCapabilities::default()
    }

    /// Samples the client's model.
    ///
    /// # Errors
    ///
    /// The JSON-RPC error the server receives; by default `-32601`.
    fn create_message(
        &self,
        _params: CreateMessageRequestParams,
    ) -> BoxFuture<'_, Result<CreateMessageResult, ErrorObject>> {
        Box::pin(async { Err(unsupported("sampling/createMessage")) })
    }

    /// Asks the user, through a form or a URL.
    ///
    /// # Errors
    ///
    /// The JSON-RPC error the server receives; by default `-32601`.
    fn elicit(
        &self,
        _params: ElicitRequestParams,
    ) -> BoxFuture<'_, Result<ElicitResult, ErrorObject>> {
        Box::pin(async { Err(unsupported("elicitation/create")) })
    }

    /// Lists the client's roots.
    ///
    /// # Errors
    ///
    /// The JSON-RPC error the server receives; by default `-32601`.
    fn list_roots(&self) -> BoxFuture<'_, Result<ListRootsResult, ErrorObject>> {
        Box::pin(async { Err(unsupported("roots/list")) })
    }

    /// Lists the client's roots, seeing the request's params (in every
    /// revision only `_meta`); by default [`Self::list_roots`]. For a handler
    /// that passes the question on, as a bridge does.
    ///
    /// # Errors
    ///
    /// As [`Self::list_roots`].
    fn list_roots_for(
        &self,
        _params: Option<Value>,
    ) -> BoxFuture<'_, Result<ListRootsResult, ErrorObject>> {
        self.list_roots()
    }

    /// Answers a request this build does not model (an extension's).
    ///
    /// # Errors
    ///
    /// The JSON-RPC error the server receives; by default `-32601`.
    fn other(
        &self,
        method: &str,
        _params: Option<Value>,
    ) -> BoxFuture<'_, Result<Value, ErrorObject>> {
        let error = unsupported(method);
        Box::pin(async move { Err(error) })
    }

    /// Told of every notification the server sends, after the client has
    /// done its own bookkeeping (progress routing, cache invalidation).
    fn notification(&self, _notice: &Notice) {}

    /// Told once when the connection ends, for whatever reason (the server
    /// exited, the transport failed, or the client was closed), after every
    /// request still waiting has been failed. A supervisor reconnects here.
    fn closed(&self, _reason: &str) {}
}

/// The answer to a request the client does not handle.
#[must_use]
pub fn unsupported(method: &str) -> ErrorObject {
    Refusal::method_not_found(format!("this client does not handle {method}")).into()
}

/// The values a form would hold if the user accepted every default: each
/// property of `requested_schema` that declares a `default` of a type a form
/// can return.
#[must_use]
pub fn form_defaults(requested_schema: &Value) -> BTreeMap<String, ElicitValue> {
    let Some(properties) = requested_schema
        .get("properties")
        .and_then(Value::as_object)
    else {
        return BTreeMap::new();
    };
    properties
        .iter()
        .filter_map(|(name, schema)| {
            let value = serde_json::from_value(schema.get("default")?.clone()).ok()?;
            Some((name.clone(), value))
        })
        .collect()
}

/// A handler that supports nothing: every question is declined.
#[derive(Clone, Copy, Debug, Default)]
pub struct Declining;

impl ClientHandler for Declining {}

/// An error object for an answer the handler could not give.
pub(crate) fn invalid_params(detail: impl fmt::Display) -> ErrorObject {
    Refusal::invalid_params(detail.to_string()).into()
}

/// Answers one question with the handler.
pub(super) async fn answer(
    handler: &dyn ClientHandler,
    method: &str,
    params: Option<Value>,
) -> Result<Value, ErrorObject> {
    let request = {
        let mut map = Map::new();
        map.insert("method".to_owned(), Value::from(method));
        if let Some(params) = params.clone() {
            map.insert("params".to_owned(), params);
        }
        serde_json::from_value::<InputRequest>(Value::Object(map)).map_err(invalid_params)?
    };
    let answer = match request {
        InputRequest::CreateMessage(request) => {
            serde_json::to_value(handler.create_message(request.params).await?)
        }
        InputRequest::Elicit(request) => {
            serde_json::to_value(handler.elicit(request.params).await?)
        }
        InputRequest::ListRoots(_) => {
            serde_json::to_value(handler.list_roots_for(params.clone()).await?)
        }
        InputRequest::Other(_) => return handler.other(method, params).await,
    };
    answer.map_err(invalid_params)
}
