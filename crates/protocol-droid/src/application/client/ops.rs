//! The typed operations: tools, resources, prompts, completion, logging.
//!
//! Each returns the revision-independent reading of the answer and keeps the
//! raw reply at hand for a caller that wants what this build does not model.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::connection::{Client, RequestOptions};
use super::error::ClientError;
use super::headers;
use crate::application::squelch::PerBatch;
use crate::domain::Era;
use crate::domain::ir::{JsonObject, ToolResult};
use crate::wire::{
    CompleteResult, GetPromptResult, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, Prompt, ReadResourceResult, Resource, ResourceTemplate,
    Tool,
};

/// At most this many pages are followed by the `*_all` helpers, so a server
/// that hands out cursors forever cannot keep a client busy forever.
pub const MAX_PAGES: usize = 1000;

/// At most this many items are gathered by the `*_all` helpers, so a server
/// handing out full pages cannot fill a client's memory (a thousand pages
/// of a thousand tools with large schemas held gigabytes), while a server
/// listing a large tree of resources is still read whole.
pub const MAX_ITEMS: usize = 100_000;

/// A typed answer and the reply it was read from.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply<T> {
    /// The answer, read.
    pub value: T,
    /// The `result` member as the server sent it.
    pub raw: Value,
}

/// A `tools/list` page, each tool read on its own: one the server wrote
/// wrong (no `inputSchema`, a name that is not a string) is dropped with a
/// warning rather than costing every other tool of the page.
fn read_tools(raw: Value) -> Result<Reply<ListToolsResult>, ClientError> {
    let mut rest = raw.clone();
    let listed = match rest.as_object_mut().and_then(|page| page.get_mut("tools")) {
        Some(Value::Array(tools)) => std::mem::take(tools),
        // Not a list at all: the page itself is wrong, as read says.
        _ => return read("tools/list", raw),
    };
    let mut page: Reply<ListToolsResult> = read("tools/list", rest)?;
    page.raw = raw;
    let mut dropped = PerBatch::default();
    page.value.tools = listed
        .into_iter()
        .filter_map(|tool| {
            let name = tool.get("name").map(ToString::to_string);
            serde_json::from_value(tool)
                .map_err(|error| {
                    if dropped.admit() {
                        tracing::warn!(
                            tool = name.as_deref().unwrap_or("(none)"),
                            %error,
                            "tool dropped: not a valid tool definition"
                        );
                    }
                })
                .ok()
        })
        .collect();
    if let Some(more) = dropped.passed_over() {
        tracing::warn!(
            more,
            "more tools of the page dropped as not valid than are logged one by one"
        );
    }
    Ok(page)
}

fn read<T: DeserializeOwned>(method: &str, raw: Value) -> Result<Reply<T>, ClientError> {
    match serde_json::from_value(raw.clone()) {
        Ok(value) => Ok(Reply { value, raw }),
        Err(e) => Err(ClientError::InvalidResult {
            method: method.to_owned(),
            detail: e.to_string(),
        }),
    }
}

/// The params of a `tools/call` of `name` with `arguments`.
pub(super) fn tool_call_params(name: &str, arguments: Option<JsonObject>) -> Map<String, Value> {
    let mut params = Map::new();
    params.insert("name".to_owned(), Value::from(name));
    if let Some(arguments) = arguments {
        params.insert("arguments".to_owned(), Value::Object(arguments));
    }
    params
}

fn cursor_params(cursor: Option<&str>) -> Option<Value> {
    cursor.map(|c| json!({ "cursor": c }))
}

impl Client {
    async fn call_typed<T: DeserializeOwned>(
        &self,
        method: &str,
        params: Option<Value>,
        options: &RequestOptions,
    ) -> Result<Reply<T>, ClientError> {
        let raw = self.request(method, params, options).await?;
        read(method, raw)
    }

    /// `ping`; at 2026-07-28, which has no ping, `server/discover` serves as
    /// the liveness check.
    ///
    /// # Errors
    ///
    /// [`ClientError`] when the server does not answer.
    pub async fn ping(&self) -> Result<(), ClientError> {
        let modern = self.version().is_some_and(|v| v.era() == Era::Modern);
        let method = if modern { "server/discover" } else { "ping" };
        let options = RequestOptions {
            fresh: true,
            ..RequestOptions::default()
        };
        self.request(method, None, &options).await.map(|_| ())
    }

    /// One page of `tools/list`. On Streamable HTTP at 2026-07-28, tools whose
    /// `x-mcp-header` annotations break the rules are dropped with a warning,
    /// and the rest remember their headers for [`Self::call_tool`].
    ///
    /// # Errors
    ///
    /// [`ClientError`] as for any request.
    pub async fn list_tools(
        &self,
        cursor: Option<&str>,
    ) -> Result<Reply<ListToolsResult>, ClientError> {
        self.list_tools_with(cursor, &RequestOptions::default())
            .await
    }

    async fn list_tools_with(
        &self,
        cursor: Option<&str>,
        options: &RequestOptions,
    ) -> Result<Reply<ListToolsResult>, ClientError> {
        let raw = self
            .request("tools/list", cursor_params(cursor), options)
            .await?;
        let mut reply = read_tools(raw)?;
        let checks_headers =
            !self.inner.link.is_stream() && self.version().is_some_and(|v| v.era() == Era::Modern);
        let mut dropped = PerBatch::default();
        reply
            .value
            .tools
            .retain(|tool| match headers::param_headers(&tool.input_schema) {
                Ok(found) => {
                    self.remember_tool_headers(&tool.name, found);
                    true
                }
                Err(error) if checks_headers => {
                    if dropped.admit() {
                        tracing::warn!(tool = %tool.name, %error, "tool dropped: invalid x-mcp-header");
                    }
                    false
                }
                Err(_) => true,
            });
        if let Some(more) = dropped.passed_over() {
            tracing::warn!(
                more,
                "more tools of the page dropped for their x-mcp-header than are logged one by one"
            );
        }
        Ok(reply)
    }

    /// Remembers the `x-mcp-header` annotations of a `tools/list` result
    /// that was read as it came (a bridge forwarding it), so later calls
    /// carry their `Mcp-Param-*` headers as after [`Self::list_tools`].
    pub fn remember_tools(&self, result: &Value) {
        let Some(tools) = result.get("tools").and_then(Value::as_array) else {
            return;
        };
        for tool in tools {
            let (Some(name), Some(schema)) = (
                tool.get("name").and_then(Value::as_str),
                tool.get("inputSchema").and_then(Value::as_object),
            ) else {
                continue;
            };
            if let Ok(found) = headers::param_headers(schema) {
                self.remember_tool_headers(name, found);
            }
        }
    }

    /// Lists every tool again, bypassing the cache, so the `x-mcp-header`
    /// annotations the client mirrors are the server's current ones; returns
    /// the tools as the server lists them now.
    ///
    /// # Errors
    ///
    /// As [`Self::list_all_tools`].
    pub async fn refresh_tools(&self) -> Result<Vec<Tool>, ClientError> {
        let fresh = RequestOptions {
            fresh: true,
            ..RequestOptions::default()
        };
        let fresh = &fresh;
        all_pages("tools/list", |cursor| async move {
            let page = self.list_tools_with(cursor.as_deref(), fresh).await?.value;
            Ok((page.tools, page.next_cursor))
        })
        .await
    }

    /// Every tool, following cursors.
    ///
    /// # Errors
    ///
    /// [`ClientError`] as for any request, or when the pages never end.
    pub async fn list_all_tools(&self) -> Result<Vec<Tool>, ClientError> {
        all_pages("tools/list", |cursor| async move {
            let page = self.list_tools(cursor.as_deref()).await?.value;
            Ok((page.tools, page.next_cursor))
        })
        .await
    }

    /// Calls a tool, driving any input rounds through the handler.
    ///
    /// # Errors
    ///
    /// [`ClientError`] as for any request; a tool that failed is an `Ok`
    /// result with `is_error` set.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
        options: &RequestOptions,
    ) -> Result<Reply<ToolResult>, ClientError> {
        let params = tool_call_params(name, arguments);
        self.call_typed("tools/call", Some(Value::Object(params)), options)
            .await
    }

    /// One page of `resources/list`.
    ///
    /// # Errors
    ///
    /// [`ClientError`] as for any request.
    pub async fn list_resources(
        &self,
        cursor: Option<&str>,
    ) -> Result<Reply<ListResourcesResult>, ClientError> {
        self.call_typed(
            "resources/list",
            cursor_params(cursor),
            &RequestOptions::default(),
        )
        .await
    }

    /// Every resource, following cursors.
    ///
    /// # Errors
    ///
    /// As [`Self::list_all_tools`].
    pub async fn list_all_resources(&self) -> Result<Vec<Resource>, ClientError> {
        all_pages("resources/list", |cursor| async move {
            let page = self.list_resources(cursor.as_deref()).await?.value;
            Ok((page.resources, page.next_cursor))
        })
        .await
    }

    /// One page of `resources/templates/list`.
    ///
    /// # Errors
    ///
    /// [`ClientError`] as for any request.
    pub async fn list_resource_templates(
        &self,
        cursor: Option<&str>,
    ) -> Result<Reply<ListResourceTemplatesResult>, ClientError> {
        self.call_typed(
            "resources/templates/list",
            cursor_params(cursor),
            &RequestOptions::default(),
        )
        .await
    }

    /// Every resource template, following cursors.
    ///
    /// # Errors
    ///
    /// As [`Self::list_all_tools`].
    pub async fn list_all_resource_templates(&self) -> Result<Vec<ResourceTemplate>, ClientError> {
        all_pages("resources/templates/list", |cursor| async move {
            let page = self.list_resource_templates(cursor.as_deref()).await?.value;
            Ok((page.resource_templates, page.next_cursor))
        })
        .await
    }

    /// Reads a resource.
    ///
    /// # Errors
    ///
    /// [`ClientError`] as for any request (`-32002` for an unknown one).
    pub async fn read_resource(&self, uri: &str) -> Result<Reply<ReadResourceResult>, ClientError> {
        self.call_typed(
            "resources/read",
            Some(json!({ "uri": uri })),
            &RequestOptions::default(),
        )
        .await
    }

    /// Subscribes to a resource's updates (legacy era; 2026-07-28 uses
    /// `subscriptions/listen`).
    ///
    /// # Errors
    ///
    /// [`ClientError`] as for any request.
    pub async fn subscribe(&self, uri: &str) -> Result<(), ClientError> {
        self.request(
            "resources/subscribe",
            Some(json!({ "uri": uri })),
            &RequestOptions::default(),
        )
        .await
        .map(|_| ())
    }

    /// Ends a subscription made with [`Self::subscribe`].
    ///
    /// # Errors
    ///
    /// [`ClientError`] as for any request.
    pub async fn unsubscribe(&self, uri: &str) -> Result<(), ClientError> {
        self.request(
            "resources/unsubscribe",
            Some(json!({ "uri": uri })),
            &RequestOptions::default(),
        )
        .await
        .map(|_| ())
    }

    /// One page of `prompts/list`.
    ///
    /// # Errors
    ///
    /// [`ClientError`] as for any request.
    pub async fn list_prompts(
        &self,
        cursor: Option<&str>,
    ) -> Result<Reply<ListPromptsResult>, ClientError> {
        self.call_typed(
            "prompts/list",
            cursor_params(cursor),
            &RequestOptions::default(),
        )
        .await
    }

    /// Every prompt, following cursors.
    ///
    /// # Errors
    ///
    /// As [`Self::list_all_tools`].
    pub async fn list_all_prompts(&self) -> Result<Vec<Prompt>, ClientError> {
        all_pages("prompts/list", |cursor| async move {
            let page = self.list_prompts(cursor.as_deref()).await?.value;
            Ok((page.prompts, page.next_cursor))
        })
        .await
    }

    /// Gets a prompt with its arguments.
    ///
    /// # Errors
    ///
    /// [`ClientError`] as for any request.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<Reply<GetPromptResult>, ClientError> {
        let mut params = Map::new();
        params.insert("name".to_owned(), Value::from(name));
        if let Some(arguments) = arguments {
            params.insert("arguments".to_owned(), Value::Object(arguments));
        }
        self.call_typed(
            "prompts/get",
            Some(Value::Object(params)),
            &RequestOptions::default(),
        )
        .await
    }

    /// Asks for completions of one argument (`completion/complete`); `reference`
    /// is a `ref/prompt` or `ref/resource` object.
    ///
    /// # Errors
    ///
    /// [`ClientError`] as for any request.
    pub async fn complete(
        &self,
        reference: Value,
        argument: &str,
        value: &str,
    ) -> Result<Reply<CompleteResult>, ClientError> {
        let params = json!({
            "ref": reference,
            "argument": { "name": argument, "value": value },
        });
        self.call_typed(
            "completion/complete",
            Some(params),
            &RequestOptions::default(),
        )
        .await
    }

    /// Sets the session's log level (legacy era; at 2026-07-28 the level is
    /// sent with every request from [`super::ClientOptions::log_level`]).
    ///
    /// # Errors
    ///
    /// [`ClientError::Unsupported`] at 2026-07-28; otherwise as for any
    /// request.
    pub async fn set_logging_level(
        &self,
        level: crate::domain::LoggingLevel,
    ) -> Result<(), ClientError> {
        if self.version().is_some_and(|v| v.era() == Era::Modern) {
            return Err(ClientError::Unsupported("logging/setLevel".to_owned()));
        }
        self.request(
            "logging/setLevel",
            Some(json!({ "level": level })),
            &RequestOptions::default(),
        )
        .await
        .map(|_| ())
    }
}

/// Every item of a paginated list: pages are fetched from the first until
/// one names no further cursor (or names the one it was fetched with), at
/// most [`MAX_PAGES`] of them, holding at most [`MAX_ITEMS`] items.
async fn all_pages<T, F, Fut>(method: &str, mut page: F) -> Result<Vec<T>, ClientError>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Option<String>), ClientError>>,
{
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let (items, next) = page(cursor.clone()).await?;
        if all.len().saturating_add(items.len()) > MAX_ITEMS {
            return Err(ClientError::InvalidResult {
                method: method.to_owned(),
                detail: format!("more than {MAX_ITEMS} items"),
            });
        }
        all.extend(items);
        match next {
            Some(next) if Some(&next) != cursor.as_ref() => cursor = Some(next),
            _ => return Ok(all),
        }
    }
    Err(too_many_pages(method))
}

fn too_many_pages(method: &str) -> ClientError {
    ClientError::InvalidResult {
        method: method.to_owned(),
        detail: format!("more than {MAX_PAGES} pages"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages of `size` items that never end.
    async fn endless(size: usize) -> Result<Vec<usize>, ClientError> {
        let mut served = 0_usize;
        all_pages("tools/list", |_| {
            served = served.saturating_add(1);
            let next = Some(format!("page-{served}"));
            async move { Ok((vec![0; size], next)) }
        })
        .await
    }

    #[tokio::test]
    async fn pages_without_end_are_refused_by_count_and_by_items() {
        let by_pages = endless(1).await;
        assert!(
            matches!(&by_pages, Err(ClientError::InvalidResult { detail, .. }) if detail.contains("pages")),
            "{by_pages:?}"
        );
        let by_items = endless(10_000).await;
        assert!(
            matches!(&by_items, Err(ClientError::InvalidResult { detail, .. }) if detail.contains("items")),
            "{by_items:?}"
        );
    }
}
