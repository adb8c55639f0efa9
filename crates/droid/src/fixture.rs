//! The built-in fixture server: every tool, resource and prompt the official
//! MCP conformance suite calls by name, built with the public library API
//! only.

use std::time::Duration;

use protocol_droid::application::server::KeyError;

use crate::Setup;
use protocol_droid::application::server::{Call, CallError, Question, Server, ToolSpec};
use protocol_droid::domain::ir::{JsonObject, ResourceContents, ToolResult};
use protocol_droid::domain::{LoggingLevel, ProtocolVersion};
use protocol_droid::wire::prompts::{GetPromptResult, Prompt, PromptArgument};
use protocol_droid::wire::resources::{Resource, ResourceTemplate};
use protocol_droid::wire::tools::{TaskSupport, ToolAnnotations};
use serde_json::{Value, json};

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// A silent WAV.
const WAV: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

/// Builds the fixture server offering `revisions`, given `setup`.
pub(crate) fn server(revisions: &[ProtocolVersion], setup: Setup) -> Result<Server, KeyError> {
    let builder = Server::builder("mcp-conformance-test-server", env!("CARGO_PKG_VERSION"));
    let server = setup
        .apply(builder)
        .revisions(revisions.iter().copied())
        .instructions("The protocol-droid conformance fixture.")
        .build()?;
    content_tools(&server);
    interactive_tools(&server);
    stateless_tools(&server);
    input_required_tools(&server);
    task_tools(&server);
    agent_tools(&server);
    benchmark_tools(&server);
    resources(&server);
    prompts(&server);
    server.set_completer(complete);
    Ok(server)
}

/// A result read from its wire form; the fixtures are literals, so a failure
/// is a bug in this file and reported as an internal error.
fn result(value: Value) -> Result<ToolResult, CallError> {
    serde_json::from_value(value).map_err(|e| CallError::internal(e.to_string()))
}

fn text(text: impl Into<String>) -> Result<ToolResult, CallError> {
    Ok(ToolResult::text(text))
}

fn content_tools(server: &Server) {
    let simple = "This is a simple text response for testing.";
    server.add_tool(
        ToolSpec::new("test_simple_text", "Returns simple text."),
        move |_| async move { text(simple) },
    );
    server.add_tool(
        ToolSpec::new("test_image_content", "Returns an image."),
        |_| async {
            result(
                json!({ "content": [{ "type": "image", "data": PNG, "mimeType": "image/png" }] }),
            )
        },
    );
    server.add_tool(
        ToolSpec::new("test_audio_content", "Returns audio."),
        |_| async {
            result(
                json!({ "content": [{ "type": "audio", "data": WAV, "mimeType": "audio/wav" }] }),
            )
        },
    );
    server.add_tool(
        ToolSpec::new("test_embedded_resource", "Returns an embedded resource."),
        |_| async {
            result(json!({ "content": [{ "type": "resource", "resource": {
                "uri": "test://embedded-resource", "mimeType": "text/plain",
                "text": "This is an embedded resource content.",
            } }] }))
        },
    );
    server.add_tool(
        ToolSpec::new(
            "test_multiple_content_types",
            "Returns text, an image and a resource.",
        ),
        |_| async {
            result(json!({ "content": [
                { "type": "text", "text": "Multiple content types test:" },
                { "type": "image", "data": PNG, "mimeType": "image/png" },
                { "type": "resource", "resource": {
                    "uri": "test://mixed-content-resource", "mimeType": "application/json",
                    "text": "{\"test\":\"data\",\"value\":123}",
                } },
            ] }))
        },
    );
    server.add_tool(
        ToolSpec::new("test_error_handling", "Always fails, as a tool error."),
        |_| async {
            result(json!({ "isError": true, "content": [{ "type": "text",
                "text": "This tool intentionally returns an error for testing" }] }))
        },
    );
    server.add_tool(
        ToolSpec::new(
            "test_tool_with_logging",
            "Logs three messages while it runs.",
        ),
        |call: Call| async move {
            for (i, message) in [
                "Tool execution started",
                "Tool processing data",
                "Tool execution completed",
            ]
            .into_iter()
            .enumerate()
            {
                if i > 0 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                call.log(LoggingLevel::Info, json!(message));
            }
            text("Tool with logging executed successfully")
        },
    );
    server.add_tool(
        ToolSpec::new("test_tool_with_progress", "Reports progress while it runs."),
        |call: Call| async move {
            for (i, step) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                if i > 0 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                call.progress(step, Some(100.0), None);
            }
            text("Tool with progress executed successfully")
        },
    );
    server.add_tool(
        ToolSpec::new(
            "json_schema_2020_12_tool",
            "Takes arguments described in JSON Schema 2020-12.",
        )
        .input_schema(json_schema_2020_12()),
        |call: Call| async move { text(format!("Received: {}", Value::Object(call.arguments))) },
    );
    server.add_tool(
        ToolSpec::new("test_x_mcp_header", "Takes a region mirrored in a header.").input_schema(
            json!({
                "type": "object",
                "properties": {
                    "region": { "type": "string", "description": "Where", "x-mcp-header": "Region" },
                    "query": { "type": "string", "description": "What" },
                },
                "required": ["region"],
            }),
        ),
        |call: Call| async move {
            text(format!("Region: {}", call.arg_str("region").unwrap_or_default()))
        },
    );
    server.add_tool(
        ToolSpec::new(
            "test_reconnection",
            "Closes its stream, then answers on the resumed one (HTTP).",
        ),
        |call: Call| async move {
            // On Streamable HTTP at 2025-11-25 the client gets a primed,
            // closed stream and resumes with Last-Event-ID; elsewhere this
            // is a pause.
            call.release_stream();
            tokio::time::sleep(Duration::from_millis(100)).await;
            text("Reconnection test completed")
        },
    );
}

fn string_arg(name: &str, description: &str) -> Value {
    json!({
        "type": "object",
        "properties": { name: { "type": "string", "description": description } },
        "required": [name],
    })
}

/// The text a sampling answer carries, whether one block or an array.
fn sampled_text(answer: &Value) -> String {
    let content = answer.get("content");
    let block = match content {
        Some(Value::Array(blocks)) => blocks.first(),
        other => other,
    };
    block
        .and_then(|b| b.get("text"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn elicited(answer: &Value) -> (String, Value) {
    let action = answer
        .get("action")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_owned();
    (
        action,
        answer.get("content").cloned().unwrap_or(Value::Null),
    )
}

fn interactive_tools(server: &Server) {
    server.add_tool(
        ToolSpec::new("test_sampling", "Asks the client's model a question.")
            .input_schema(string_arg("prompt", "What to ask")),
        |call: Call| async move {
            let prompt = call.arg_str("prompt").unwrap_or_default().to_owned();
            let answer = call
                .sample(
                    "sampling",
                    json!({
                        "messages": [{ "role": "user", "content": { "type": "text", "text": prompt } }],
                        "maxTokens": 100,
                    }),
                )
                .await?;
            text(format!("LLM response: {}", sampled_text(&answer)))
        },
    );
    server.add_tool(
        ToolSpec::new("test_elicitation", "Asks the user to fill in a form.")
            .input_schema(string_arg("message", "What to ask")),
        |call: Call| async move {
            let message = call.arg_str("message").unwrap_or_default().to_owned();
            let answer = call
                .elicit(
                    "elicitation",
                    json!({
                        "message": message,
                        "requestedSchema": { "type": "object", "properties": {
                            "username": { "type": "string", "description": "Your name" },
                            "email": { "type": "string", "description": "Your email" },
                        } },
                    }),
                )
                .await?;
            let (action, content) = elicited(&answer);
            text(format!("User response: action={action}, content={content}"))
        },
    );
    server.add_tool(
        ToolSpec::new("test_elicitation_sep1034_defaults", "Asks with default values."),
        |call: Call| async move {
            let answer = call
                .elicit(
                    "defaults",
                    json!({
                        "message": "Please review and update the form fields with defaults",
                        "requestedSchema": { "type": "object", "properties": {
                            "name": { "type": "string", "description": "User name", "default": "John Doe" },
                            "age": { "type": "integer", "description": "User age", "default": 30 },
                            "score": { "type": "number", "description": "User score", "default": 95.5 },
                            "status": { "type": "string", "description": "User status",
                                        "enum": ["active", "inactive", "pending"], "default": "active" },
                            "verified": { "type": "boolean", "description": "Verified", "default": true },
                        } },
                    }),
                )
                .await?;
            let (action, content) = elicited(&answer);
            text(format!("Elicitation completed: action={action}, content={content}"))
        },
    );
    server.add_tool(
        ToolSpec::new("test_elicitation_sep1330_enums", "Asks with every enum form."),
        |call: Call| async move {
            let answer = call
                .elicit(
                    "enums",
                    json!({
                        "message": "Please select options from the enum fields",
                        "requestedSchema": { "type": "object", "properties": {
                            "untitledSingle": { "type": "string", "description": "Pick one",
                                "enum": ["option1", "option2", "option3"] },
                            "titledSingle": { "type": "string", "description": "Pick one", "oneOf": [
                                { "const": "value1", "title": "First Option" },
                                { "const": "value2", "title": "Second Option" },
                                { "const": "value3", "title": "Third Option" },
                            ] },
                            "legacyEnum": { "type": "string", "description": "Pick one",
                                "enum": ["opt1", "opt2", "opt3"],
                                "enumNames": ["Option One", "Option Two", "Option Three"] },
                            "untitledMulti": { "type": "array", "description": "Pick some",
                                "items": { "type": "string", "enum": ["option1", "option2", "option3"] } },
                            "titledMulti": { "type": "array", "description": "Pick some",
                                "items": { "anyOf": [
                                    { "const": "value1", "title": "First Choice" },
                                    { "const": "value2", "title": "Second Choice" },
                                    { "const": "value3", "title": "Third Choice" },
                                ] } },
                        } },
                    }),
                )
                .await?;
            let (action, content) = elicited(&answer);
            text(format!("Elicitation completed: action={action}, content={content}"))
        },
    );
    server.add_tool(
        ToolSpec::new(
            "interview",
            "Asks the user two questions in turn, reporting progress before, between and after.",
        ),
        |call: Call| async move {
            // At 2026-07-28 each round runs the handler again: the first
            // answer is kept in the state, so the round asking the second
            // question need not carry it again.
            let kept = call
                .state()
                .and_then(|s| s.get("who").and_then(Value::as_str).map(str::to_owned));
            let who = match kept {
                Some(who) => who,
                None => {
                    call.keep_state(json!({ "step": 1 }));
                    call.progress(0.0, Some(2.0), Some("asking who"));
                    let answer = call
                        .elicit("who", name_form("Who are you?", "name"))
                        .await?;
                    let who = answer_field(&answer, "name");
                    call.keep_state(json!({ "step": 2, "who": who }));
                    who
                }
            };
            call.progress(1.0, Some(2.0), Some("asking what"));
            call.log(LoggingLevel::Info, json!("asked one of two"));
            let what = call
                .elicit("what", name_form("What do you do?", "role"))
                .await?;
            call.progress(2.0, Some(2.0), Some("done"));
            text(format!(
                "Interviewed {who}, {}",
                answer_field(&what, "role")
            ))
        },
    );
}

fn stateless_tools(server: &Server) {
    server.add_tool(
        ToolSpec::new(
            "test_missing_capability",
            "Needs the client's sampling capability.",
        ),
        |call: Call| async move {
            if !call.ctx.client_capabilities.contains_key("sampling") {
                let mut required = JsonObject::new();
                required.insert("sampling".to_owned(), json!({}));
                return Err(CallError::MissingCapability { required });
            }
            text("The client declared sampling.")
        },
    );
    server.add_tool(
        ToolSpec::new(
            "test_streaming_elicitation",
            "Streams notifications, then answers.",
        ),
        |call: Call| async move {
            for step in [0.0, 50.0, 100.0] {
                call.progress(step, Some(100.0), Some("streaming"));
                call.log(LoggingLevel::Info, json!(format!("step {step}")));
            }
            text("Streaming completed")
        },
    );
    server.add_tool(
        ToolSpec::new(
            "test_logging_tool",
            "Logs only when the request asks for it.",
        ),
        |call: Call| async move {
            call.log(LoggingLevel::Info, json!("Logging tool executed"));
            text("Logging tool completed")
        },
    );
    let tools = server.clone();
    server.add_tool(
        ToolSpec::new(
            "test_trigger_tool_change",
            "Announces that the tool list changed.",
        ),
        move |_| {
            let server = tools.clone();
            async move {
                server.tools_changed();
                text("Tool list change triggered")
            }
        },
    );
    let prompts = server.clone();
    server.add_tool(
        ToolSpec::new(
            "test_trigger_prompt_change",
            "Announces that the prompt list changed.",
        ),
        move |_| {
            let server = prompts.clone();
            async move {
                server.prompts_changed();
                text("Prompt list change triggered")
            }
        },
    );
}

/// The longest wait `sleep` agrees to.
const MAX_SLEEP_MS: u64 = 60_000;

/// How often `sleep` reports its progress while it waits.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// Tools for clients that act on annotations or cancel calls (an ACP agent
/// asks before a destructive call and drops a call its user cancelled).
fn agent_tools(server: &Server) {
    server.add_tool(
        ToolSpec::new(
            "delete_note",
            "Deletes a note by its id. Nothing is stored, so nothing is lost; \
             the annotations are what matter.",
        )
        .input_schema(string_arg("id", "The note to delete"))
        .annotations(ToolAnnotations {
            read_only_hint: Some(false),
            destructive_hint: Some(true),
            idempotent_hint: Some(true),
            open_world_hint: Some(false),
            ..ToolAnnotations::default()
        }),
        |call: Call| async move {
            text(format!(
                "Deleted note {}.",
                call.arg_str("id").unwrap_or_default()
            ))
        },
    );
    server.add_tool(
        ToolSpec::new(
            "sleep",
            "Waits `ms` milliseconds (at most 60000), then answers: a call slow enough to cancel.",
        )
        .input_schema(json!({
            "type": "object",
            "properties": { "ms": { "type": "integer", "minimum": 0, "maximum": MAX_SLEEP_MS } },
            "required": ["ms"],
        }))
        .annotations(ToolAnnotations {
            read_only_hint: Some(true),
            destructive_hint: Some(false),
            ..ToolAnnotations::default()
        }),
        |call: Call| async move {
            let ms = call
                .arguments
                .get("ms")
                .and_then(Value::as_u64)
                .unwrap_or(0)
                .min(MAX_SLEEP_MS);
            // Said at once (to a caller that asked for progress), so a
            // caller knows the call has started before it ends, and again
            // every quarter of a second while it waits: a long call that
            // reports how far it is.
            let total = f64::from(u32::try_from(ms).unwrap_or(u32::MAX));
            call.progress(0.0, Some(total), Some("sleeping"));
            let started = tokio::time::Instant::now();
            let done = started + Duration::from_millis(ms);
            loop {
                let beat = tokio::time::Instant::now() + PROGRESS_EVERY;
                if beat >= done {
                    tokio::time::sleep_until(done).await;
                    break;
                }
                tokio::time::sleep_until(beat).await;
                let slept = started.elapsed().as_millis();
                call.progress(
                    f64::from(u32::try_from(slept).unwrap_or(u32::MAX)),
                    Some(total),
                    Some("sleeping"),
                );
            }
            text(format!("Slept {ms} ms."))
        },
    );
}

/// The two tools the load harness calls (`crates/bench`): as little work as
/// a tool can do, so a measurement is of the server around them.
fn benchmark_tools(server: &Server) {
    server.add_tool(
        ToolSpec::new("echo", "Returns `text` as one text block.")
            .input_schema(string_arg("text", "What to return")),
        |call: Call| async move {
            // Arguments that do not fit are the tool's error, for the
            // model to correct, not a protocol error (2025-11-25 on).
            let Some(echoed) = call.arg_str("text") else {
                return Ok(ToolResult::text("echo needs a string `text`").as_error());
            };
            text(echoed)
        },
    );
    server.add_tool(
        ToolSpec::new(
            "add",
            "Returns the sum of the numbers `a` and `b`, as text.",
        )
        .input_schema(json!({
            "type": "object",
            "properties": { "a": { "type": "number" }, "b": { "type": "number" } },
            "required": ["a", "b"],
        })),
        |call: Call| async move {
            let number = |name: &str| call.arguments.get(name).and_then(Value::as_number).cloned();
            let (Some(a), Some(b)) = (number("a"), number("b")) else {
                return Ok(ToolResult::text("add needs numbers `a` and `b`").as_error());
            };
            // Integers stay exact; anything else, or an overflow, is summed
            // as floating point, as JSON numbers are.
            let exact = a
                .as_i64()
                .zip(b.as_i64())
                .and_then(|(a, b)| a.checked_add(b));
            match exact {
                Some(sum) => text(sum.to_string()),
                None => text(
                    (a.as_f64().unwrap_or(f64::NAN) + b.as_f64().unwrap_or(f64::NAN)).to_string(),
                ),
            }
        },
    );
}

/// The tools the tasks scenarios call: one that never runs as a task, and
/// task-capable ones that work, fail, ask and ask first. Each is an
/// ordinary handler; whether a call runs as a task is the runtime's.
fn task_tools(server: &Server) {
    server.add_tool(
        ToolSpec::new("greet", "Greets `name`; never runs as a task.")
            .input_schema(string_arg("name", "Who to greet")),
        |call: Call| async move {
            text(format!(
                "Hello, {}!",
                call.arg_str("name").unwrap_or("World")
            ))
        },
    );
    server.add_tool(
        ToolSpec::new(
            "slow_compute",
            "Works for `seconds` seconds (at most 600), then answers with `label`.",
        )
        .input_schema(json!({
            "type": "object",
            "properties": {
                "seconds": { "type": "number", "minimum": 0, "maximum": 600 },
                "label": { "type": "string" },
            },
        }))
        .task_support(TaskSupport::Optional),
        |call: Call| async move {
            let seconds = call
                .arguments
                .get("seconds")
                .and_then(Value::as_f64)
                .unwrap_or(1.0)
                .clamp(0.0, 600.0);
            let label = call.arg_str("label").unwrap_or("compute").to_owned();
            tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
            text(format!("{label}: done after {seconds} s"))
        },
    );
    server.add_tool(
        ToolSpec::new(
            "failing_job",
            "Runs only as a task and ends, after a second, with a tool error.",
        )
        .task_support(TaskSupport::Required),
        |_call: Call| async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(ToolResult::text("the job failed").as_error())
        },
    );
    server.add_tool(
        ToolSpec::new(
            "protocol_error_job",
            "Ends, after a moment, with a JSON-RPC error rather than a result.",
        )
        .task_support(TaskSupport::Optional),
        |_call: Call| async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Err::<ToolResult, _>(CallError::internal("the job broke down"))
        },
    );
    server.add_tool(
        ToolSpec::new(
            "confirm_delete",
            "Asks the user to confirm deleting `filename`, then says what it did.",
        )
        .input_schema(string_arg("filename", "The file to delete"))
        .task_support(TaskSupport::Optional),
        |call: Call| async move {
            let filename = call.arg_str("filename").unwrap_or("the file").to_owned();
            let answer = call
                .elicit(
                    "confirm",
                    json!({
                        "message": format!("Delete {filename}?"),
                        "requestedSchema": { "type": "object",
                            "properties": { "confirm": { "type": "boolean" } },
                            "required": ["confirm"] },
                    }),
                )
                .await?;
            let confirmed = answer.get("action").and_then(Value::as_str) == Some("accept")
                && answer
                    .get("content")
                    .and_then(|c| c.get("confirm"))
                    .and_then(Value::as_bool)
                    == Some(true);
            text(if confirmed {
                format!("Deleted {filename}.")
            } else {
                format!("Kept {filename}.")
            })
        },
    );
    server.add_tool(
        ToolSpec::new(
            "multi_input",
            "Asks two questions at once and answers with both replies.",
        )
        .task_support(TaskSupport::Optional),
        |call: Call| async move {
            let question = |key: &str, message: &str| Question::Elicit {
                key: key.to_owned(),
                params: name_form(message, "name"),
            };
            let answers = call
                .ask_all(vec![
                    question("first", "First name?"),
                    question("second", "Second name?"),
                ])
                .await?;
            let names: Vec<String> = answers.iter().map(|a| answer_field(a, "name")).collect();
            text(format!("Got {}.", names.join(" and ")))
        },
    );
    server.add_tool(
        ToolSpec::new(
            "test_tool_with_task",
            "Asks for the user's name in the request, then greets them from a task.",
        )
        .task_support(TaskSupport::Required)
        .task_after_input(),
        |call: Call| async move {
            let answer = call
                .elicit("user_name", name_form("What is your name?", "name"))
                .await?;
            let name = answer_field(&answer, "name");
            call.continue_as_task().await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            text(format!("Hello, {name}, from a task."))
        },
    );
}

fn name_form(message: &str, field: &str) -> Value {
    json!({
        "message": message,
        "requestedSchema": { "type": "object",
            "properties": { field: { "type": "string" } }, "required": [field] },
    })
}

fn answer_field(answer: &Value, field: &str) -> String {
    answer
        .get("content")
        .and_then(|c| c.get(field))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn capital_question(max_tokens: u64) -> Value {
    json!({
        "messages": [{ "role": "user", "content": { "type": "text",
            "text": "What is the capital of France?" } }],
        "maxTokens": max_tokens,
    })
}

fn input_required_tools(server: &Server) {
    server.add_tool(
        ToolSpec::new(
            "test_input_required_result_elicitation",
            "Asks for the user's name.",
        ),
        |call: Call| async move {
            let answer = call
                .elicit("user_name", name_form("What is your name?", "name"))
                .await?;
            text(format!("Hello, {}!", answer_field(&answer, "name")))
        },
    );
    server.add_tool(
        ToolSpec::new(
            "test_input_required_result_sampling",
            "Asks the client's model.",
        ),
        |call: Call| async move {
            let answer = call
                .sample("capital_question", capital_question(100))
                .await?;
            text(format!("The model answered: {}", sampled_text(&answer)))
        },
    );
    server.add_tool(
        ToolSpec::new(
            "test_input_required_result_list_roots",
            "Asks for the client's roots.",
        ),
        |call: Call| async move {
            let answer = call.list_roots("client_roots").await?;
            let roots = answer.get("roots").cloned().unwrap_or(json!([]));
            text(format!("Client roots: {roots}"))
        },
    );
    server.add_tool(
        ToolSpec::new(
            "test_input_required_result_request_state",
            "Keeps state across rounds.",
        ),
        |call: Call| async move {
            if call.state().is_none() {
                call.keep_state(json!({ "step": "confirm" }));
            }
            let answer = call
                .elicit(
                    "confirm",
                    json!({ "message": "Please confirm", "requestedSchema": { "type": "object",
                        "properties": { "ok": { "type": "boolean" } }, "required": ["ok"] } }),
                )
                .await?;
            let kept = call
                .state()
                .is_some_and(|s| s.get("step") == Some(&json!("confirm")));
            let verdict = if kept { "state-ok" } else { "state-missing" };
            text(format!(
                "{verdict}: confirmed={}",
                answer.get("content").cloned().unwrap_or(Value::Null)
            ))
        },
    );
    server.add_tool(
        ToolSpec::new(
            "test_input_required_result_multiple_inputs",
            "Asks three things at once.",
        ),
        |call: Call| async move {
            if call.state().is_none() {
                call.keep_state(json!({ "round": 1 }));
            }
            let answers = call
                .ask_all(vec![
                    Question::Elicit {
                        key: "user_name".to_owned(),
                        params: name_form("What is your name?", "name"),
                    },
                    Question::Sample {
                        key: "greeting".to_owned(),
                        params: capital_question(50),
                    },
                    Question::ListRoots {
                        key: "client_roots".to_owned(),
                    },
                ])
                .await?;
            let name = answers
                .first()
                .map(|a| answer_field(a, "name"))
                .unwrap_or_default();
            let sampled = answers.get(1).map(sampled_text).unwrap_or_default();
            text(format!("Hello, {name}! Model: {sampled}. Roots received."))
        },
    );
    server.add_tool(
        ToolSpec::new(
            "test_input_required_result_multi_round",
            "Asks in two rounds.",
        ),
        |call: Call| async move {
            // The first answer is kept in the state, so the round that asks
            // the second question need not carry the first one again.
            let kept = call
                .state()
                .and_then(|s| s.get("name").and_then(Value::as_str).map(str::to_owned));
            let name = match kept {
                Some(name) => name,
                None => {
                    // Every round carries a state, the first one included.
                    call.keep_state(json!({ "step": 1 }));
                    let answer = call
                        .elicit("step1", name_form("Step 1: What is your name?", "name"))
                        .await?;
                    let name = answer_field(&answer, "name");
                    call.keep_state(json!({ "step": 2, "name": name }));
                    name
                }
            };
            let answer = call
                .elicit(
                    "step2",
                    name_form("Step 2: What is your favorite color?", "color"),
                )
                .await?;
            text(format!(
                "Hello, {name}! Your favorite color is {}.",
                answer_field(&answer, "color")
            ))
        },
    );
    server.add_tool(
        ToolSpec::new(
            "test_input_required_result_tampered_state",
            "Refuses a forged state.",
        ),
        |call: Call| async move {
            if call.state().is_none() {
                call.keep_state(json!({ "authorised": true }));
            }
            let answer = call
                .elicit("confirm", name_form("Confirm your name", "name"))
                .await?;
            text(format!(
                "Verified state; hello, {}!",
                answer_field(&answer, "name")
            ))
        },
    );
    server.add_tool(
        ToolSpec::new(
            "test_input_required_result_capabilities",
            "Asks only what was declared.",
        ),
        |call: Call| async move {
            let caps = &call.ctx.client_capabilities;
            if caps.contains_key("elicitation") {
                let answer = call
                    .elicit("user_name", name_form("What is your name?", "name"))
                    .await?;
                return text(format!("Hello, {}!", answer_field(&answer, "name")));
            }
            if caps.contains_key("sampling") {
                let answer = call
                    .sample("capital_question", capital_question(100))
                    .await?;
                return text(format!("The model answered: {}", sampled_text(&answer)));
            }
            text("No input capability declared; nothing to ask.")
        },
    );
}

fn resource(uri: &str, name: &str, description: &str, mime: &str) -> Resource {
    Resource {
        uri: uri.to_owned(),
        name: name.to_owned(),
        title: None,
        description: Some(description.to_owned()),
        mime_type: Some(mime.to_owned()),
        annotations: None,
        size: None,
        icons: None,
        meta: None,
        extra: JsonObject::new(),
    }
}

fn contents(value: Value) -> Result<Vec<ResourceContents>, CallError> {
    serde_json::from_value(value).map_err(|e| CallError::internal(e.to_string()))
}

fn resources(server: &Server) {
    server.add_resource(
        resource(
            "test://static-text",
            "static-text",
            "A static text resource",
            "text/plain",
        ),
        None,
        |_| async {
            contents(
                json!([{ "uri": "test://static-text", "mimeType": "text/plain",
                "text": "This is the content of the static text resource." }]),
            )
        },
    );
    server.add_resource(
        resource(
            "test://static-binary",
            "static-binary",
            "A static binary resource",
            "image/png",
        ),
        None,
        |_| async {
            contents(
                json!([{ "uri": "test://static-binary", "mimeType": "image/png", "blob": PNG }]),
            )
        },
    );
    server.add_resource(
        resource(
            "test://watched-resource",
            "watched-resource",
            "A resource to subscribe to",
            "text/plain",
        ),
        None,
        |_| async {
            contents(
                json!([{ "uri": "test://watched-resource", "mimeType": "text/plain",
                "text": "Watched resource content." }]),
            )
        },
    );
    let template: Result<ResourceTemplate, _> = serde_json::from_value(json!({
        "uriTemplate": "test://template/{id}/data",
        "name": "template",
        "description": "A resource template with an id",
        "mimeType": "application/json",
    }));
    if let Ok(template) = template {
        server.add_template(template, None, |call: Call| async move {
            let uri = call.arg_str("uri").unwrap_or_default().to_owned();
            let id = call.arg_str("id").unwrap_or_default().to_owned();
            let body =
                json!({ "id": id, "templateTest": true, "data": format!("Data for ID: {id}") });
            contents(
                json!([{ "uri": uri, "mimeType": "application/json", "text": body.to_string() }]),
            )
        });
    }
}

fn prompt(name: &str, description: &str, arguments: &[&str]) -> Prompt {
    Prompt {
        name: name.to_owned(),
        title: None,
        description: Some(description.to_owned()),
        arguments: (!arguments.is_empty()).then(|| {
            arguments
                .iter()
                .map(|a| PromptArgument {
                    name: (*a).to_owned(),
                    title: None,
                    description: Some(format!("The {a} argument")),
                    required: Some(true),
                    extra: JsonObject::new(),
                })
                .collect()
        }),
        icons: None,
        meta: None,
        extra: JsonObject::new(),
    }
}

fn messages(value: Value) -> Result<GetPromptResult, CallError> {
    let mut result = JsonObject::new();
    result.insert("messages".to_owned(), value);
    serde_json::from_value(Value::Object(result)).map_err(|e| CallError::internal(e.to_string()))
}

fn prompts(server: &Server) {
    server.add_prompt(
        prompt("test_simple_prompt", "A prompt with no arguments", &[]),
        None,
        |_| async {
            messages(json!([{ "role": "user", "content": { "type": "text",
            "text": "This is a simple prompt for testing." } }]))
        },
    );
    server.add_prompt(
        prompt(
            "test_prompt_with_arguments",
            "A prompt with two arguments",
            &["arg1", "arg2"],
        ),
        None,
        |call: Call| async move {
            let arg1 = call.arg_str("arg1").unwrap_or_default().to_owned();
            let arg2 = call.arg_str("arg2").unwrap_or_default().to_owned();
            messages(json!([{ "role": "user", "content": { "type": "text",
                "text": format!("Prompt with arguments: arg1='{arg1}', arg2='{arg2}'") } }]))
        },
    );
    server.add_prompt(
        prompt("test_prompt_with_embedded_resource", "A prompt embedding a resource", &["resourceUri"]),
        None,
        |call: Call| async move {
            let uri = call.arg_str("resourceUri").unwrap_or_default().to_owned();
            messages(json!([
                { "role": "user", "content": { "type": "resource", "resource": {
                    "uri": uri, "mimeType": "text/plain", "text": "Embedded resource content for testing." } } },
                { "role": "user", "content": { "type": "text", "text": "Please process the embedded resource above." } },
            ]))
        },
    );
    server.add_prompt(prompt("test_prompt_with_image", "A prompt with an image", &[]), None, |_| async {
        messages(json!([
            { "role": "user", "content": { "type": "image", "data": PNG, "mimeType": "image/png" } },
            { "role": "user", "content": { "type": "text", "text": "Please analyze the image above." } },
        ]))
    });
    server.add_prompt(
        prompt(
            "test_input_required_result_prompt",
            "A prompt that asks for context first",
            &[],
        ),
        None,
        |call: Call| async move {
            let answer = call
                .elicit(
                    "user_context",
                    name_form("What context should the prompt use?", "context"),
                )
                .await?;
            let context = answer_field(&answer, "context");
            messages(json!([{ "role": "user", "content": { "type": "text",
                "text": format!("Prompt with user context: {context}") } }]))
        },
    );
}

fn complete(params: &JsonObject) -> Vec<String> {
    let prefix = params
        .get("argument")
        .and_then(|a| a.get("value"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    ["paris", "park", "parade", "test", "testValue1"]
        .into_iter()
        .filter(|v| v.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

fn json_schema_2020_12() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "$anchor": "addressDef",
                "type": "object",
                "properties": { "street": { "type": "string" }, "city": { "type": "string" } },
            },
        },
        "properties": {
            "name": { "type": "string" },
            "address": { "$ref": "#/$defs/address" },
            "contactMethod": { "type": "string", "enum": ["phone", "email"] },
            "phone": { "type": "string" },
            "email": { "type": "string" },
        },
        "allOf": [{ "anyOf": [{ "required": ["phone"] }, { "required": ["email"] }] }],
        "if": { "properties": { "contactMethod": { "const": "phone" } } },
        "then": { "required": ["phone"] },
        "else": { "required": ["email"] },
        "additionalProperties": false,
    })
}
