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

/// `value` read as `T`.
fn decode<T: DeserializeOwned>(value: &Value) -> Result<T, String> {
    serde_json::from_value(value.clone()).map_err(|e| format!("decode: {e}"))
}

/// `typed` written back as JSON.
fn encode<T: Serialize>(typed: &T) -> Result<Value, String> {
    serde_json::to_value(typed).map_err(|e| format!("encode: {e}"))
}

/// Reads `value` as `T` and writes it back.
fn as_type<T: DeserializeOwned + Serialize>(value: &Value) -> Result<Value, String> {
    encode(&decode::<T>(value)?)
}

/// Reads `value` as a content block, which must be of `kind`, and as the
/// block's own struct `T`; writes the block back.
fn as_block<T: DeserializeOwned + Serialize>(value: &Value, kind: &str) -> Result<Value, String> {
    as_type::<T>(value)?;
    let block: ContentBlock = decode(value)?;
    if matches!(block, ContentBlock::Unknown(_)) || block.kind() != kind {
        return Err(format!("read as a `{}` block, not `{kind}`", block.kind()));
    }
    encode(&block)
}

/// Reads `value` as resource contents, which must be text (or not).
fn as_contents(value: &Value, text: bool) -> Result<Value, String> {
    let contents: ResourceContents = decode(value)?;
    if matches!(contents, ResourceContents::Text { .. }) != text {
        return Err("read as the wrong kind of resource contents".to_owned());
    }
    encode(&contents)
}

/// Reads `value` as a form field, which `is_kind` must accept, and as `T`.
fn as_field<T: DeserializeOwned + Serialize>(
    value: &Value,
    is_kind: fn(&PrimitiveSchemaDefinition) -> bool,
) -> Result<Value, String> {
    let field: PrimitiveSchemaDefinition = decode(value)?;
    if !is_kind(&field) {
        return Err(format!("read as the wrong kind of field: {field:?}"));
    }
    as_type::<T>(value)
}

/// Reads `value` as elicitation params, which must be of the expected mode.
fn as_elicit<T: DeserializeOwned + Serialize>(value: &Value, url: bool) -> Result<Value, String> {
    let params: ElicitRequestParams = decode(value)?;
    if matches!(params, ElicitRequestParams::Url(_)) != url {
        return Err("read in the wrong elicitation mode".to_owned());
    }
    as_type::<T>(value)
}

/// Reads `value` as the error type `T` and as `E`, whose code (`code_of`)
/// must be `code`; writes `E` back.
fn as_coded<T, E>(
    value: &Value,
    code: ErrorCode,
    code_of: fn(&E) -> ErrorCode,
) -> Result<Value, String>
where
    T: DeserializeOwned + Serialize,
    E: DeserializeOwned + Serialize,
{
    as_type::<T>(value)?;
    let read: E = decode(value)?;
    let found = code_of(&read);
    if found != code {
        return Err(format!("code {found:?}, expected {code:?}"));
    }
    encode(&read)
}

/// Reads `value` as the error type `T` and as an error object, whose code
/// must be `code`.
fn as_error<T: DeserializeOwned + Serialize>(
    value: &Value,
    code: ErrorCode,
) -> Result<Value, String> {
    as_coded::<T, ErrorObject<Value>>(value, code, |error| error.code)
}

/// Reads `value` as the error type `T` and as an error response, whose code
/// must be `code`.
fn as_error_response<T: DeserializeOwned + Serialize>(
    value: &Value,
    code: ErrorCode,
) -> Result<Value, String> {
    as_coded::<T, ErrorResponse<Value>>(value, code, |response| response.error.code)
}

/// Reads `value` as an enum field, which `is_kind` must accept, and as `T`.
fn as_enum_field<T: DeserializeOwned + Serialize>(
    value: &Value,
    is_kind: fn(&EnumSchema) -> bool,
) -> Result<Value, String> {
    let field: PrimitiveSchemaDefinition = decode(value)?;
    if !matches!(&field, PrimitiveSchemaDefinition::Enum(schema) if is_kind(schema)) {
        return Err(format!("read as the wrong kind of field: {field:?}"));
    }
    as_type::<T>(value)
}

/// Returns from the calling function the outcome of [`as_type`] when `def`
/// is the name of one of the types listed.
macro_rules! plain_types {
    ($def:expr, $value:expr, $($ty:ident),* $(,)?) => {
        $(
            if $def == stringify!($ty) {
                return as_type::<$ty>($value);
            }
        )*
    };
}

/// Reads an example as the type its directory names and writes it back.
fn round_trip(def: &str, value: &Value) -> Result<Value, String> {
    // Most directories name a Rust type of the same name, read and written
    // as it is; the rest are checked for their kind as well.
    plain_types!(
        def,
        value,
        CallToolRequest,
        CallToolRequestParams,
        CallToolResult,
        CallToolResultResponse,
        CancelledNotification,
        CancelledNotificationParams,
        ClientCapabilities,
        CompleteRequest,
        CompleteRequestParams,
        CompleteResult,
        CompleteResultResponse,
        CreateMessageRequest,
        CreateMessageRequestParams,
        CreateMessageResult,
        DiscoverRequest,
        DiscoverResult,
        DiscoverResultResponse,
        ElicitRequest,
        ElicitResult,
        GetPromptRequest,
        GetPromptRequestParams,
        GetPromptResult,
        GetPromptResultResponse,
        InputRequests,
        InputRequiredResult,
        InputResponses,
        ListPromptsRequest,
        ListPromptsResult,
        ListPromptsResultResponse,
        ListResourceTemplatesRequest,
        ListResourceTemplatesResult,
        ListResourcesRequest,
        ListResourcesResult,
        ListResourcesResultResponse,
        ListRootsRequest,
        ListRootsResult,
        ListToolsRequest,
        ListToolsResult,
        ListToolsResultResponse,
        LoggingMessageNotification,
        LoggingMessageNotificationParams,
        ModelPreferences,
        PaginatedRequestParams,
        ProgressNotification,
        ProgressNotificationParams,
        PromptListChangedNotification,
        ReadResourceRequest,
        ReadResourceResult,
        ReadResourceResultResponse,
        Resource,
        ResourceListChangedNotification,
        ResourceUpdatedNotification,
        ResourceUpdatedNotificationParams,
        Root,
        SamplingMessage,
        ServerCapabilities,
        SubscriptionsListenRequest,
        SubscriptionsListenResult,
        SubscriptionsListenResultResponse,
        Tool,
        ToolListChangedNotification,
        ListResourceTemplatesResultResponse,
        SubscriptionsAcknowledgedNotification
    );
    match def {
        "AudioContent" => as_block::<protocol_droid::domain::ir::AudioContent>(value, "audio"),
        "BlobResourceContents" => as_contents(value, false),
        "BooleanSchema" => as_field::<BooleanSchema>(value, |f| {
            matches!(f, PrimitiveSchemaDefinition::Boolean(_))
        }),
        "ElicitRequestFormParams" => as_elicit::<ElicitRequestFormParams>(value, false),
        "ElicitRequestURLParams" => as_elicit::<ElicitRequestUrlParams>(value, true),
        "EmbeddedResource" => {
            as_block::<protocol_droid::domain::ir::EmbeddedResource>(value, "resource")
        }
        "HeaderMismatchError" => {
            as_error_response::<HeaderMismatchError>(value, ErrorCode::HEADER_MISMATCH)
        }
        "ImageContent" => as_block::<protocol_droid::domain::ir::ImageContent>(value, "image"),
        "InternalError" => as_error::<InternalError>(value, ErrorCode::INTERNAL_ERROR),
        "InvalidParamsError" => as_error::<InvalidParamsError>(value, ErrorCode::INVALID_PARAMS),
        "MethodNotFoundError" => {
            as_error::<MethodNotFoundError>(value, ErrorCode::METHOD_NOT_FOUND)
        }
        "MissingRequiredClientCapabilityError" => {
            as_error_response::<MissingRequiredClientCapabilityError>(
                value,
                ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
            )
        }
        "NumberSchema" => {
            as_field::<NumberSchema>(value, |f| matches!(f, PrimitiveSchemaDefinition::Number(_)))
        }
        "ParseError" => as_error::<ParseError>(value, ErrorCode::PARSE_ERROR),
        "ResourceLink" => {
            as_block::<protocol_droid::domain::ir::ResourceLink>(value, "resource_link")
        }
        "StringSchema" => {
            as_field::<StringSchema>(value, |f| matches!(f, PrimitiveSchemaDefinition::String(_)))
        }
        "TextContent" => as_block::<protocol_droid::domain::ir::TextContent>(value, "text"),
        "TextResourceContents" => as_contents(value, true),
        "TitledMultiSelectEnumSchema" => as_enum_field::<TitledMultiSelectEnumSchema>(value, |e| {
            matches!(e, EnumSchema::TitledMultiSelect(_))
        }),
        "TitledSingleSelectEnumSchema" => {
            as_enum_field::<TitledSingleSelectEnumSchema>(value, |e| {
                matches!(e, EnumSchema::TitledSingleSelect(_))
            })
        }
        "ToolResultContent" => {
            as_block::<protocol_droid::domain::ir::ToolResultContent>(value, "tool_result")
        }
        "ToolUseContent" => {
            as_block::<protocol_droid::domain::ir::ToolUseContent>(value, "tool_use")
        }
        "UnsupportedProtocolVersionError" => as_error_response::<UnsupportedProtocolVersionError>(
            value,
            ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
        ),
        "UntitledMultiSelectEnumSchema" => {
            as_enum_field::<UntitledMultiSelectEnumSchema>(value, |e| {
                matches!(e, EnumSchema::UntitledMultiSelect(_))
            })
        }
        "UntitledSingleSelectEnumSchema" => {
            as_enum_field::<UntitledSingleSelectEnumSchema>(value, |e| {
                matches!(e, EnumSchema::UntitledSingleSelect(_))
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
