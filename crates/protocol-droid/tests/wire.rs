//! The wire model, checked against the specification's own example messages.
//!
//! Every file under `tests/vectors/2026-07-28/examples/<Def>/` instantiates
//! the `$defs` entry `<Def>`. Each is read into the Rust type for that entry
//! and written back, and the result must be the same JSON value. A directory
//! this test does not map to a type fails the test: a new example must not
//! slip through unchecked.

use std::path::{Path, PathBuf};

use protocol_droid::domain::ir::{ContentBlock, ResourceContents};
use protocol_droid::wire::{
    BooleanSchema, CallToolRequest, CallToolRequestParams, CallToolResult, CallToolResultResponse,
    CancelledNotification, CancelledNotificationParams, ClientCapabilities, ClientNotification,
    ClientRequest, CompleteRequest, CompleteRequestParams, CompleteResult, CompleteResultResponse,
    CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult, DiscoverRequest,
    DiscoverResult, DiscoverResultResponse, ElicitRequest, ElicitRequestFormParams,
    ElicitRequestParams, ElicitRequestUrlParams, ElicitResult, EnumSchema, ErrorCode, ErrorObject,
    ErrorResponse, GetPromptRequest, GetPromptRequestParams, GetPromptResult,
    GetPromptResultResponse, HeaderMismatchError, InputRequests, InputRequiredResult,
    InputResponses, InternalError, InvalidParamsError, ListPromptsRequest, ListPromptsResult,
    ListPromptsResultResponse, ListResourceTemplatesRequest, ListResourceTemplatesResult,
    ListResourceTemplatesResultResponse, ListResourcesRequest, ListResourcesResult,
    ListResourcesResultResponse, ListRootsRequest, ListRootsResult, ListToolsRequest,
    ListToolsResult, ListToolsResultResponse, LoggingMessageNotification,
    LoggingMessageNotificationParams, MethodNotFoundError, MissingRequiredClientCapabilityError,
    ModelPreferences, NumberSchema, PaginatedRequestParams, ParseError, PrimitiveSchemaDefinition,
    ProgressNotification, ProgressNotificationParams, PromptListChangedNotification,
    ReadResourceRequest, ReadResourceResult, ReadResourceResultResponse, Resource,
    ResourceListChangedNotification, ResourceUpdatedNotification,
    ResourceUpdatedNotificationParams, Root, SamplingMessage, ServerCapabilities,
    ServerNotification, ServerResult, StringSchema, SubscriptionsAcknowledgedNotification,
    SubscriptionsListenRequest, SubscriptionsListenResult, SubscriptionsListenResultResponse,
    TitledMultiSelectEnumSchema, TitledSingleSelectEnumSchema, Tool, ToolListChangedNotification,
    UnsupportedProtocolVersionError, UntitledMultiSelectEnumSchema, UntitledSingleSelectEnumSchema,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

type TestError = Box<dyn std::error::Error>;

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/2026-07-28/examples")
}

/// Every example file, as (directory name, path), in a stable order.
fn examples() -> Result<Vec<(String, PathBuf)>, TestError> {
    let mut found = Vec::new();
    for dir in std::fs::read_dir(examples_dir())? {
        let dir = dir?;
        if !dir.file_type()?.is_dir() {
            continue;
        }
        let name = dir.file_name().to_string_lossy().into_owned();
        for file in std::fs::read_dir(dir.path())? {
            let path = file?.path();
            if path.extension().is_some_and(|ext| ext == "json") {
                found.push((name.clone(), path));
            }
        }
    }
    found.sort();
    Ok(found)
}

fn read(path: &Path) -> Result<Value, TestError> {
    Ok(serde_json::from_str(&std::fs::read_to_string(path)?)?)
}

/// Reads `value` as `T` and writes it back.
fn as_type<T: DeserializeOwned + Serialize>(value: &Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(value.clone()).map_err(|e| format!("decode: {e}"))?;
    serde_json::to_value(&typed).map_err(|e| format!("encode: {e}"))
}

/// Reads `value` as a content block, which must be of `kind`, and as the
/// block's own struct `T`; writes the block back.
fn as_block<T: DeserializeOwned + Serialize>(value: &Value, kind: &str) -> Result<Value, String> {
    as_type::<T>(value)?;
    let block: ContentBlock =
        serde_json::from_value(value.clone()).map_err(|e| format!("decode: {e}"))?;
    if matches!(block, ContentBlock::Unknown(_)) || block.kind() != kind {
        return Err(format!("read as a `{}` block, not `{kind}`", block.kind()));
    }
    serde_json::to_value(&block).map_err(|e| format!("encode: {e}"))
}

/// Reads `value` as resource contents, which must be text (or not).
fn as_contents(value: &Value, text: bool) -> Result<Value, String> {
    let contents: ResourceContents =
        serde_json::from_value(value.clone()).map_err(|e| format!("decode: {e}"))?;
    if matches!(contents, ResourceContents::Text { .. }) != text {
        return Err("read as the wrong kind of resource contents".to_owned());
    }
    serde_json::to_value(&contents).map_err(|e| format!("encode: {e}"))
}

/// Reads `value` as a form field, which `is_kind` must accept, and as `T`.
fn as_field<T: DeserializeOwned + Serialize>(
    value: &Value,
    is_kind: fn(&PrimitiveSchemaDefinition) -> bool,
) -> Result<Value, String> {
    let field: PrimitiveSchemaDefinition =
        serde_json::from_value(value.clone()).map_err(|e| format!("decode: {e}"))?;
    if !is_kind(&field) {
        return Err(format!("read as the wrong kind of field: {field:?}"));
    }
    as_type::<T>(value)
}

/// Reads `value` as elicitation params, which must be of the expected mode.
fn as_elicit<T: DeserializeOwned + Serialize>(value: &Value, url: bool) -> Result<Value, String> {
    let params: ElicitRequestParams =
        serde_json::from_value(value.clone()).map_err(|e| format!("decode: {e}"))?;
    if matches!(params, ElicitRequestParams::Url(_)) != url {
        return Err("read in the wrong elicitation mode".to_owned());
    }
    as_type::<T>(value)
}

/// Reads `value` as an error object, whose code must be `code`.
fn as_error<D: DeserializeOwned + Serialize>(
    value: &Value,
    code: ErrorCode,
) -> Result<Value, String> {
    let error: ErrorObject<D> =
        serde_json::from_value(value.clone()).map_err(|e| format!("decode: {e}"))?;
    if error.code != code {
        return Err(format!("code {:?}, expected {code:?}", error.code));
    }
    serde_json::to_value(&error).map_err(|e| format!("encode: {e}"))
}

/// Reads `value` as an error response, whose code must be `code`.
fn as_error_response<D: DeserializeOwned + Serialize>(
    value: &Value,
    code: ErrorCode,
) -> Result<Value, String> {
    let response: ErrorResponse<D> =
        serde_json::from_value(value.clone()).map_err(|e| format!("decode: {e}"))?;
    if response.error.code != code {
        return Err(format!("code {:?}, expected {code:?}", response.error.code));
    }
    serde_json::to_value(&response).map_err(|e| format!("encode: {e}"))
}

/// Reads an example as the type its directory names and writes it back.
fn round_trip(def: &str, value: &Value) -> Result<Value, String> {
    match def {
        "AudioContent" => as_block::<protocol_droid::domain::ir::AudioContent>(value, "audio"),
        "BlobResourceContents" => as_contents(value, false),
        "BooleanSchema" => as_field::<BooleanSchema>(value, |f| {
            matches!(f, PrimitiveSchemaDefinition::Boolean(_))
        }),
        "CallToolRequest" => as_type::<CallToolRequest>(value),
        "CallToolRequestParams" => as_type::<CallToolRequestParams>(value),
        "CallToolResult" => as_type::<CallToolResult>(value),
        "CallToolResultResponse" => as_type::<CallToolResultResponse>(value),
        "CancelledNotification" => as_type::<CancelledNotification>(value),
        "CancelledNotificationParams" => as_type::<CancelledNotificationParams>(value),
        "ClientCapabilities" => as_type::<ClientCapabilities>(value),
        "CompleteRequest" => as_type::<CompleteRequest>(value),
        "CompleteRequestParams" => as_type::<CompleteRequestParams>(value),
        "CompleteResult" => as_type::<CompleteResult>(value),
        "CompleteResultResponse" => as_type::<CompleteResultResponse>(value),
        "CreateMessageRequest" => as_type::<CreateMessageRequest>(value),
        "CreateMessageRequestParams" => as_type::<CreateMessageRequestParams>(value),
        "CreateMessageResult" => as_type::<CreateMessageResult>(value),
        "DiscoverRequest" => as_type::<DiscoverRequest>(value),
        "DiscoverResult" => as_type::<DiscoverResult>(value),
        "DiscoverResultResponse" => as_type::<DiscoverResultResponse>(value),
        "ElicitRequest" => as_type::<ElicitRequest>(value),
        "ElicitRequestFormParams" => as_elicit::<ElicitRequestFormParams>(value, false),
        "ElicitRequestURLParams" => as_elicit::<ElicitRequestUrlParams>(value, true),
        "ElicitResult" => as_type::<ElicitResult>(value),
        "EmbeddedResource" => {
            as_block::<protocol_droid::domain::ir::EmbeddedResource>(value, "resource")
        }
        "GetPromptRequest" => as_type::<GetPromptRequest>(value),
        "GetPromptRequestParams" => as_type::<GetPromptRequestParams>(value),
        "GetPromptResult" => as_type::<GetPromptResult>(value),
        "GetPromptResultResponse" => as_type::<GetPromptResultResponse>(value),
        "HeaderMismatchError" => {
            as_type::<HeaderMismatchError>(value)?;
            as_error_response::<Value>(value, ErrorCode::HEADER_MISMATCH)
        }
        "ImageContent" => as_block::<protocol_droid::domain::ir::ImageContent>(value, "image"),
        "InputRequests" => as_type::<InputRequests>(value),
        "InputRequiredResult" => as_type::<InputRequiredResult>(value),
        "InputResponses" => as_type::<InputResponses>(value),
        "InternalError" => {
            as_type::<InternalError>(value)?;
            as_error::<Value>(value, ErrorCode::INTERNAL_ERROR)
        }
        "InvalidParamsError" => {
            as_type::<InvalidParamsError>(value)?;
            as_error::<Value>(value, ErrorCode::INVALID_PARAMS)
        }
        "ListPromptsRequest" => as_type::<ListPromptsRequest>(value),
        "ListPromptsResult" => as_type::<ListPromptsResult>(value),
        "ListPromptsResultResponse" => as_type::<ListPromptsResultResponse>(value),
        "ListResourceTemplatesRequest" => as_type::<ListResourceTemplatesRequest>(value),
        "ListResourceTemplatesResult" => as_type::<ListResourceTemplatesResult>(value),
        "ListResourceTemplatesResultResponse" => {
            as_type::<ListResourceTemplatesResultResponse>(value)
        }
        "ListResourcesRequest" => as_type::<ListResourcesRequest>(value),
        "ListResourcesResult" => as_type::<ListResourcesResult>(value),
        "ListResourcesResultResponse" => as_type::<ListResourcesResultResponse>(value),
        "ListRootsRequest" => as_type::<ListRootsRequest>(value),
        "ListRootsResult" => as_type::<ListRootsResult>(value),
        "ListToolsRequest" => as_type::<ListToolsRequest>(value),
        "ListToolsResult" => as_type::<ListToolsResult>(value),
        "ListToolsResultResponse" => as_type::<ListToolsResultResponse>(value),
        "LoggingMessageNotification" => as_type::<LoggingMessageNotification>(value),
        "LoggingMessageNotificationParams" => as_type::<LoggingMessageNotificationParams>(value),
        "MethodNotFoundError" => {
            as_type::<MethodNotFoundError>(value)?;
            as_error::<Value>(value, ErrorCode::METHOD_NOT_FOUND)
        }
        "MissingRequiredClientCapabilityError" => {
            as_type::<MissingRequiredClientCapabilityError>(value)?;
            as_error_response::<Value>(value, ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY)
        }
        "ModelPreferences" => as_type::<ModelPreferences>(value),
        "NumberSchema" => {
            as_field::<NumberSchema>(value, |f| matches!(f, PrimitiveSchemaDefinition::Number(_)))
        }
        "PaginatedRequestParams" => as_type::<PaginatedRequestParams>(value),
        "ParseError" => {
            as_type::<ParseError>(value)?;
            as_error::<Value>(value, ErrorCode::PARSE_ERROR)
        }
        "ProgressNotification" => as_type::<ProgressNotification>(value),
        "ProgressNotificationParams" => as_type::<ProgressNotificationParams>(value),
        "PromptListChangedNotification" => as_type::<PromptListChangedNotification>(value),
        "ReadResourceRequest" => as_type::<ReadResourceRequest>(value),
        "ReadResourceResult" => as_type::<ReadResourceResult>(value),
        "ReadResourceResultResponse" => as_type::<ReadResourceResultResponse>(value),
        "Resource" => as_type::<Resource>(value),
        "ResourceLink" => {
            as_block::<protocol_droid::domain::ir::ResourceLink>(value, "resource_link")
        }
        "ResourceListChangedNotification" => as_type::<ResourceListChangedNotification>(value),
        "ResourceUpdatedNotification" => as_type::<ResourceUpdatedNotification>(value),
        "ResourceUpdatedNotificationParams" => as_type::<ResourceUpdatedNotificationParams>(value),
        "Root" => as_type::<Root>(value),
        "SamplingMessage" => as_type::<SamplingMessage>(value),
        "ServerCapabilities" => as_type::<ServerCapabilities>(value),
        "StringSchema" => {
            as_field::<StringSchema>(value, |f| matches!(f, PrimitiveSchemaDefinition::String(_)))
        }
        "SubscriptionsAcknowledgedNotification" => {
            as_type::<SubscriptionsAcknowledgedNotification>(value)
        }
        "SubscriptionsListenRequest" => as_type::<SubscriptionsListenRequest>(value),
        "SubscriptionsListenResult" => as_type::<SubscriptionsListenResult>(value),
        "SubscriptionsListenResultResponse" => as_type::<SubscriptionsListenResultResponse>(value),
        "TextContent" => as_block::<protocol_droid::domain::ir::TextContent>(value, "text"),
        "TextResourceContents" => as_contents(value, true),
        "TitledMultiSelectEnumSchema" => as_field::<TitledMultiSelectEnumSchema>(value, |f| {
            matches!(
                f,
                PrimitiveSchemaDefinition::Enum(EnumSchema::TitledMultiSelect(_))
            )
        }),
        "TitledSingleSelectEnumSchema" => as_field::<TitledSingleSelectEnumSchema>(value, |f| {
            matches!(
                f,
                PrimitiveSchemaDefinition::Enum(EnumSchema::TitledSingleSelect(_))
            )
        }),
        "Tool" => as_type::<Tool>(value),
        "ToolListChangedNotification" => as_type::<ToolListChangedNotification>(value),
        "ToolResultContent" => {
            as_block::<protocol_droid::domain::ir::ToolResultContent>(value, "tool_result")
        }
        "ToolUseContent" => {
            as_block::<protocol_droid::domain::ir::ToolUseContent>(value, "tool_use")
        }
        "UnsupportedProtocolVersionError" => {
            as_type::<UnsupportedProtocolVersionError>(value)?;
            as_error_response::<Value>(value, ErrorCode::UNSUPPORTED_PROTOCOL_VERSION)
        }
        "UntitledMultiSelectEnumSchema" => as_field::<UntitledMultiSelectEnumSchema>(value, |f| {
            matches!(
                f,
                PrimitiveSchemaDefinition::Enum(EnumSchema::UntitledMultiSelect(_))
            )
        }),
        "UntitledSingleSelectEnumSchema" => {
            as_field::<UntitledSingleSelectEnumSchema>(value, |f| {
                matches!(
                    f,
                    PrimitiveSchemaDefinition::Enum(EnumSchema::UntitledSingleSelect(_))
                )
            })
        }
        other => Err(format!("no Rust type is mapped to the `{other}` directory")),
    }
}

#[test]
fn every_official_example_round_trips_through_the_type_its_directory_names() -> Result<(), TestError>
{
    let examples = examples()?;
    assert!(
        examples.len() >= 129,
        "only {} example files found",
        examples.len()
    );
    let mut failures = Vec::new();
    for (def, path) in &examples {
        let value = read(path)?;
        let shown = path.strip_prefix(examples_dir()).unwrap_or(path).display();
        match round_trip(def, &value) {
            Ok(written) if written == value => {}
            Ok(written) => failures.push(format!("{shown}: wrote {written}, read {value}")),
            Err(e) => failures.push(format!("{shown}: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} examples failed:\n{}",
        failures.len(),
        examples.len(),
        failures.join("\n")
    );
    Ok(())
}

/// Method names of the example whole messages, for the dispatch test: the
/// directory of a `*ResultResponse` names the request it answers.
fn answered_method(def: &str) -> Option<&'static str> {
    Some(match def {
        "CallToolResultResponse" => "tools/call",
        "CompleteResultResponse" => "completion/complete",
        "DiscoverResultResponse" => "server/discover",
        "GetPromptResultResponse" => "prompts/get",
        "ListPromptsResultResponse" => "prompts/list",
        "ListResourceTemplatesResultResponse" => "resources/templates/list",
        "ListResourcesResultResponse" => "resources/list",
        "ListToolsResultResponse" => "tools/list",
        "ReadResourceResultResponse" => "resources/read",
        "SubscriptionsListenResultResponse" => "subscriptions/listen",
        _ => return None,
    })
}

#[test]
fn every_example_message_dispatches_to_a_typed_variant_and_back() -> Result<(), TestError> {
    let mut failures = Vec::new();
    let mut checked = 0_usize;
    for (def, path) in examples()? {
        let value = read(&path)?;
        let shown = format!(
            "{def}/{}",
            path.file_name().unwrap_or_default().to_string_lossy()
        );
        let params = value.get("params").cloned();
        let outcome = match (
            value.get("jsonrpc"),
            value.get("id"),
            value.get("method").and_then(Value::as_str),
        ) {
            (Some(_), Some(_), Some(method)) => ClientRequest::decode(method, params.clone())
                .and_then(|r| Ok((!matches!(r, ClientRequest::Other { .. }), r.params()?))),
            (Some(_), None, Some(method)) => ServerNotification::decode(method, params.clone())
                .and_then(|n| Ok((!matches!(n, ServerNotification::Other { .. }), n.params()?)))
                .or_else(|_| {
                    ClientNotification::decode(method, params.clone()).and_then(|n| {
                        Ok((!matches!(n, ClientNotification::Other { .. }), n.params()?))
                    })
                }),
            (Some(_), Some(_), None) => match (answered_method(&def), value.get("result")) {
                (Some(method), Some(result)) => ServerResult::decode(method, result.clone())
                    .and_then(|r| Ok((!matches!(r, ServerResult::Other(_)), Some(r.encode()?)))),
                _ => continue,
            },
            _ => continue,
        };
        checked += 1;
        let expected = if value.get("result").is_some() {
            value.get("result").cloned()
        } else {
            params
        };
        match outcome {
            Ok((true, written)) if written == expected => {}
            Ok((false, _)) => failures.push(format!("{shown}: fell back to Other")),
            Ok((true, written)) => failures.push(format!("{shown}: wrote {written:?}")),
            Err(e) => failures.push(format!("{shown}: {e}")),
        }
    }
    // 10 requests, 8 notifications and 11 result responses at the source commit.
    assert!(checked >= 29, "only {checked} whole messages found");
    assert!(
        failures.is_empty(),
        "{} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    Ok(())
}
