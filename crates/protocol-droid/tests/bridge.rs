//! The bridge between real peers: an upstream server over HTTP, the bridge
//! serving HTTP, and a client pinned to an older revision, all on loopback.
//!
//! The upstream says things only newer revisions can express (audio, resource
//! links, structured output, titles, icons, enum forms, sampling arrays). For
//! each row of the expressibility matrix the tests show both outcomes: a policy
//! that refuses the feature refuses the request and names the feature, and a
//! policy that allows it downgrades the reply and records the feature in the
//! report.
//!
//! The fault tests put the bridge in front of `tests/fixtures/bad_server.py`,
//! a real child process that crashes, hangs or writes garbage on `tools/call`.

// Indexing a `serde_json::Value` yields `Null` for a missing member and never
// panics, which is what reading replies wants.
#![allow(clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use protocol_droid::adapters::primary::http::{HttpOptions, HttpServer};
use protocol_droid::adapters::secondary::child::ChildOptions;
use protocol_droid::adapters::secondary::connect::{
    ConnectOptions, Target, connect, connector as connector_to,
};
use protocol_droid::application::bridge::{Bridge, BridgeOptions, Connector, REPORT_META};
use protocol_droid::application::client::{
    Client, ClientError, ClientHandler, ClientOptions, Notice, RequestOptions,
};
use protocol_droid::application::server::{Call, CallError, Server};
use protocol_droid::domain::ir::JsonObject;
use protocol_droid::domain::jsonrpc::{ErrorCode, ErrorObject};
use protocol_droid::domain::{DegradePolicy, Feature, ProtocolVersion};
use protocol_droid::wire::{
    ClientCapabilities, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, Implementation, ListRootsResult,
};
use serde_json::{Value, json};

#[allow(dead_code)] // Each test binary uses its own part of it.
mod support;

use support::{TestError, loopback};

/// A guard against a test that would otherwise hang; not a measurement.
const GUARD: Duration = Duration::from_secs(60);

const WAV: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

/// The upstream servers of this test binary, so a tool can announce a
/// change on the one it runs in.
static UPSTREAMS: Mutex<Vec<Server>> = Mutex::new(Vec::new());

/// Whether `regional` mirrors its argument in `Mcp-Param-Area` rather than
/// `Mcp-Param-Region` (after `rename_header`).
static RENAMED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// How often `needs_url` was called.
static URL_VISITS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// What the upstream answers, per method and tool: things only the newest
/// revisions can express.
fn upstream_answer<'a>(
    method: &'a str,
    params: JsonObject,
    call: Call,
) -> BoxFuture<'a, Result<Value, CallError>> {
    Box::pin(async move {
        let name = params.get("name").and_then(Value::as_str).unwrap_or("");
        match (method, name) {
            // Two pages: what the bridge learns of the tools on its own
            // (`regional`'s header) is on the second.
            ("tools/list", _) if params.get("cursor").is_none() => Ok(json!({ "tools": [{
                "name": "rich",
                "title": "Rich",
                "icons": [{ "src": "https://example.com/rich.png" }],
                "inputSchema": { "type": "object" },
                "outputSchema": { "type": "object" },
                "annotations": { "readOnlyHint": true },
                "_meta": { "example.com/owner": "tests" },
            }, {
                "name": "shaped",
                "inputSchema": {
                    "type": "object",
                    "$defs": { "point": { "type": "object" } },
                    "properties": { "at": { "$ref": "#/$defs/point" } },
                },
            }], "nextCursor": "second" })),
            ("tools/list", _) => Ok(json!({ "tools": [{
                "name": "regional",
                "inputSchema": { "type": "object", "properties": {
                    "region": { "type": "string", "x-mcp-header":
                        if RENAMED.load(std::sync::atomic::Ordering::SeqCst) { "Area" } else { "Region" } },
                } },
            }] })),
            ("tools/call", "logs") => {
                call.log_named(
                    protocol_droid::domain::LoggingLevel::Warning,
                    "upstream-logger",
                    json!("careful"),
                );
                Ok(json!({ "content": [] }))
            }
            ("tools/call", "declared") => {
                // What this server read of its caller: in front of it, the
                // bridge speaks for the client it serves.
                let declared = json!({
                    "capabilities": Value::Object(JsonObject::clone(&call.ctx.client_capabilities)),
                    "clientInfo": call.ctx.client_info.as_deref().cloned().map(Value::Object),
                });
                Ok(json!({ "content": [{ "type": "text", "text": declared.to_string() }] }))
            }
            ("tools/call", "rename_header") => {
                RENAMED.store(true, std::sync::atomic::Ordering::SeqCst);
                let servers = UPSTREAMS
                    .lock()
                    .map_err(|_| CallError::internal("poisoned"))?
                    .clone();
                for server in &servers {
                    server.tools_changed();
                }
                Ok(json!({ "content": [] }))
            }
            ("completion/complete", _) => {
                let context = if params.contains_key("context") {
                    "with context"
                } else {
                    "without"
                };
                Ok(json!({ "completion": { "values": [context] } }))
            }
            ("resources/list", _) => Ok(json!({ "resources": [{
                "uri": "test://dated", "name": "dated",
                "annotations": { "lastModified": "2025-01-01T00:00:00Z" },
            }] })),
            ("resources/read", _) => Err(CallError::Protocol(
                ErrorObject::new(ErrorCode::RESOURCE_NOT_FOUND, "no such resource")
                    .with_data(json!({ "uri": params.get("uri") })),
            )),
            ("prompts/list", _) => Ok(json!({ "prompts": [{
                "name": "greet",
                "arguments": [{ "name": "who", "title": "Who", "required": true }],
            }] })),
            ("prompts/get", _) => Ok(json!({ "messages": [{
                "role": "user",
                "content": { "type": "audio", "data": WAV, "mimeType": "audio/wav" },
            }] })),
            // A code of the tool's own that happens to be -32002.
            ("tools/call", "own_code") => Err(CallError::Protocol(ErrorObject::new(
                ErrorCode::RESOURCE_NOT_FOUND,
                "the tool's own",
            ))),
            ("tools/call", "audio") => Ok(json!({ "content": [
                { "type": "audio", "data": WAV, "mimeType": "audio/wav" },
            ] })),
            ("tools/call", "link") => Ok(json!({ "content": [
                { "type": "resource_link", "uri": "test://linked", "name": "linked" },
            ] })),
            ("tools/call", "structured") => Ok(json!({
                "content": [{ "type": "text", "text": "done" }],
                "structuredContent": { "a": 1 },
            })),
            ("tools/call", "structured_in_text") => Ok(json!({
                "content": [{ "type": "text", "text": "{\"a\":1}" }],
                "structuredContent": { "a": 1 },
            })),
            ("tools/call", "ask_enum") => {
                let answer = call
                    .elicit(
                        "pick",
                        json!({ "message": "Pick a colour", "requestedSchema": {
                            "type": "object",
                            "properties": { "colour": {
                                "type": "string",
                                "oneOf": [{ "const": "r", "title": "Red" },
                                          { "const": "g", "title": "Green" }],
                                "default": "r",
                            } },
                        } }),
                    )
                    .await?;
                Ok(text_content(&answer["action"]))
            }
            ("tools/call", "ask_multi") => {
                call.elicit(
                    "many",
                    json!({ "message": "Pick several", "requestedSchema": {
                        "type": "object",
                        "properties": { "colours": {
                            "type": "array",
                            "items": { "type": "string", "enum": ["r", "g"] },
                        } },
                    } }),
                )
                .await?;
                Ok(json!({ "content": [] }))
            }
            ("tools/call", "sample_array") => {
                let asked = json!({ "maxTokens": 5, "messages": [{ "role": "user",
                    "content": [{ "type": "text", "text": "hi" }] }] });
                let answer = call.sample("s", asked).await?;
                Ok(text_content(&answer["content"]["text"]))
            }
            ("tools/call", "touch") => {
                // Every upstream of this binary hears it; only the one with a
                // subscriber sends anything.
                for server in UPSTREAMS
                    .lock()
                    .map_err(|_| CallError::internal("poisoned"))?
                    .iter()
                {
                    server.resource_updated("test://dated");
                }
                Ok(json!({ "content": [] }))
            }
            ("tools/call", "list_of_numbers") => Ok(json!({
                "content": [{ "type": "text", "text": "[1,2]" }],
                "structuredContent": [1, 2],
            })),
            ("tools/call", "ask_url") => {
                let answer = call.elicit(
                    "link",
                    json!({ "mode": "url", "message": "Sign in", "url": "https://example.com/login",
                            "elicitationId": "e1" }),
                )
                .await?;
                // The user's answer, as the server heard it.
                let action = answer.get("action").cloned().unwrap_or_default();
                Ok(json!({ "content": [{ "type": "text", "text": action }] }))
            }
            ("tools/call", "ask_form") => {
                let answer = call
                    .elicit(
                        "form",
                        json!({ "message": "Name?", "requestedSchema": { "type": "object",
                        "properties": { "name": { "type": "string" } } } }),
                    )
                    .await?;
                // The user's answer, as the server heard it.
                let action = answer.get("action").cloned().unwrap_or_default();
                Ok(json!({ "content": [{ "type": "text", "text": action }] }))
            }
            ("tools/call", "sample_refused") => {
                // A server that takes a refusal in its stride, and says so.
                let asked = json!({ "maxTokens": 5, "messages": [{ "role": "user",
                    "content": { "type": "text", "text": REFUSE } }] });
                let text = match call.sample("s", asked).await {
                    Ok(_) => "the client sampled".to_owned(),
                    Err(refused) => format!("the client refused: {refused}"),
                };
                Ok(json!({ "content": [{ "type": "text", "text": text }] }))
            }
            ("tools/call", "sample_tools") => {
                call.sample(
                    "s",
                    json!({ "maxTokens": 5, "messages": [{ "role": "user",
                        "content": { "type": "text", "text": "hi" } }],
                        "tools": [{ "name": "t", "inputSchema": { "type": "object" } }] }),
                )
                .await?;
                Ok(json!({ "content": [] }))
            }
            ("tools/call", "sample_context") => {
                let asked = json!({ "maxTokens": 5, "includeContext": "thisServer",
                    "messages": [{ "role": "user", "content": { "type": "text", "text": "hi" } }] });
                let answer = call.sample("s", asked).await?;
                Ok(text_content(&answer["content"]["text"]))
            }
            ("tools/call", "confirm_twice") => {
                // The same question twice, as a legacy handler may ask it: the
                // second is a new question, not the first one's answer.
                let first = call.elicit("confirm", empty_form("Sure?")).await?;
                let second = call.elicit("confirm", empty_form("Really sure?")).await?;
                Ok(json!({ "content": [{ "type": "text",
                    "text": format!("{} {}", first["action"], second["action"]) }] }))
            }
            ("tools/call", "ask_then_progress") => {
                call.elicit("go", empty_form("Go?")).await?;
                call.progress(1.0, Some(1.0), None);
                Ok(json!({ "content": [] }))
            }
            ("tools/call", "progress") => {
                call.progress(1.0, Some(2.0), Some("half way"));
                Ok(json!({ "content": [] }))
            }
            ("tools/call", "needs_url") => {
                // The first call needs the user to visit a URL; after that,
                // the server has what it needed.
                if URL_VISITS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                    return Err(CallError::Protocol(
                        ErrorObject::new(ErrorCode::URL_ELICITATION_REQUIRED, "sign in first")
                            .with_data(json!({ "elicitations": [{
                                "mode": "url", "message": "Sign in",
                                "url": "https://example.com/login", "elicitationId": "e1",
                            }] })),
                    ));
                }
                Ok(json!({ "content": [{ "type": "text", "text": "signed in" }] }))
            }
            // A method no revision defines: the upstream's own extension.
            ("example/echo", _) => Ok(json!({ "echoed": params.get("word") })),
            _ => Ok(json!({ "content": [{ "type": "text", "text": "plain" }] })),
        }
    })
}

/// A form asking `message` and nothing more.
fn empty_form(message: &str) -> Value {
    json!({ "message": message, "requestedSchema": { "type": "object", "properties": {} } })
}

/// A tool result holding `text` as its one text block.
fn text_content(text: &Value) -> Value {
    json!({ "content": [{ "type": "text", "text": text }] })
}

/// Serves `server` on a loopback port; the URL of its endpoint.
async fn serve(server: Server) -> Result<String, TestError> {
    let (listener, base) = loopback().await?;
    tokio::spawn(
        HttpServer::new(server, HttpOptions::default()).serve(listener, std::future::pending()),
    );
    Ok(format!("{base}/mcp"))
}

/// The client's side of the questions: records what it was asked.
#[derive(Debug, Default)]
struct Recording {
    asked: Mutex<Vec<Value>>,
    notices: Mutex<Vec<String>>,
    /// The params of each `notifications/message`.
    logs: Mutex<Vec<Value>>,
}

impl Recording {
    /// Notes the question `params` and gives the fixed `answer`.
    fn answer<T: serde::de::DeserializeOwned>(
        &self,
        params: &impl serde::Serialize,
        answer: Value,
    ) -> Result<T, ErrorObject> {
        let params = serde_json::to_value(params).unwrap_or_default();
        self.asked.lock().map_err(|_| poisoned())?.push(params);
        serde_json::from_value(answer).map_err(|_| poisoned())
    }
}

impl ClientHandler for Recording {
    fn capabilities(&self) -> ClientCapabilities {
        serde_json::from_value(json!({ "elicitation": { "form": {}, "url": {} }, "sampling": {} }))
            .unwrap_or_default()
    }

    fn elicit(
        &self,
        params: ElicitRequestParams,
    ) -> BoxFuture<'_, Result<ElicitResult, ErrorObject>> {
        let reply = json!({ "action": "accept", "content": { "colour": "r" } });
        Box::pin(async move { self.answer(&params, reply) })
    }

    fn notification(&self, notice: &Notice) {
        if let Ok(mut notices) = self.notices.lock() {
            notices.push(notice.method.clone());
        }
        if notice.method == "notifications/message" {
            if let Ok(mut logs) = self.logs.lock() {
                logs.push(notice.params.clone().unwrap_or_default());
            }
        }
    }

    fn create_message(
        &self,
        params: CreateMessageRequestParams,
    ) -> BoxFuture<'_, Result<CreateMessageResult, ErrorObject>> {
        let reply = json!({ "role": "assistant", "model": "m",
            "content": { "type": "text", "text": "sampled" } });
        let refuse = serde_json::to_string(&params).is_ok_and(|p| p.contains(REFUSE));
        Box::pin(async move {
            if refuse {
                return Err(ErrorObject::new(
                    ErrorCode(-1),
                    "User rejected sampling request",
                ));
            }
            self.answer(&params, reply)
        })
    }
}

/// A sampling message the test client refuses to sample.
const REFUSE: &str = "please refuse this";

fn poisoned() -> ErrorObject {
    ErrorObject::new(ErrorCode::INTERNAL_ERROR, "test bookkeeping failed")
}

/// A connector to `target`, as `droid bridge` builds one.
fn connector(target: Target, revisions: Vec<ProtocolVersion>) -> Connector {
    let options = ConnectOptions {
        client: ClientOptions {
            revisions,
            ..ClientOptions::default()
        },
        ..ConnectOptions::default()
    };
    connector_to(target, options)
}

/// The name the rig's client gives itself.
const RIG_CLIENT: &str = "bridge-test-client";

/// Everything a test talks to.
struct Rig {
    bridge: Bridge,
    client: Client,
    handler: Arc<Recording>,
}

/// The bridge under `options` in front of the rich upstream at `upstream`,
/// both served over HTTP: the bridge's URL, and the bridge.
async fn front_at(
    upstream: ProtocolVersion,
    options: BridgeOptions,
) -> Result<(String, Bridge), TestError> {
    let origin = Server::builder("rich-upstream", "1")
        .revisions([upstream])
        .forward(Arc::new(upstream_answer))
        .build()?;
    UPSTREAMS
        .lock()
        .map_err(|_| "poisoned")?
        .push(origin.clone());
    let origin = serve(origin).await?;
    let bridge = Bridge::connect(
        connector(Target::Url(origin.parse()?), vec![upstream]),
        options,
    )
    .await?;
    let url = serve(bridge.server(|b| b)?).await?;
    Ok((url, bridge))
}

/// The rich upstream at `upstream`, the bridge under `options`, and a
/// client speaking only `client`.
async fn rig(
    upstream: ProtocolVersion,
    client: ProtocolVersion,
    options: BridgeOptions,
) -> Result<Rig, TestError> {
    let (front, bridge) = front_at(upstream, options).await?;
    Rig::connect(bridge, &front, client).await
}

/// [`rig`] under a policy that downgrades whatever it can.
async fn permissive(upstream: ProtocolVersion, client: ProtocolVersion) -> Result<Rig, TestError> {
    rig(upstream, client, policy(DegradePolicy::permissive())).await
}

/// [`rig`] under the default, strict policy.
async fn strict(upstream: ProtocolVersion, client: ProtocolVersion) -> Result<Rig, TestError> {
    rig(upstream, client, BridgeOptions::default()).await
}

/// [`rig`] under a policy that downgrades all but `feature`.
async fn refusing(
    upstream: ProtocolVersion,
    client: ProtocolVersion,
    feature: Feature,
) -> Result<Rig, TestError> {
    let refusing = DegradePolicy::permissive().refusing(feature);
    rig(upstream, client, policy(refusing)).await
}

impl Rig {
    /// A recording client speaking only `client`, connected to `bridge`
    /// served at `front`.
    async fn connect(
        bridge: Bridge,
        front: &str,
        client: ProtocolVersion,
    ) -> Result<Self, TestError> {
        let (client, handler) = Self::connect_client(front, client).await?;
        Ok(Self {
            bridge,
            client,
            handler,
        })
    }

    /// The rig's recording client alone, speaking only `client` to the
    /// server at `front`.
    async fn connect_client(
        front: &str,
        client: ProtocolVersion,
    ) -> Result<(Client, Arc<Recording>), TestError> {
        let handler = Arc::new(Recording::default());
        let shared: Arc<dyn ClientHandler> = handler.clone();
        let defaults = ClientOptions::default();
        let options = ConnectOptions {
            client: ClientOptions {
                handler: shared,
                revisions: vec![client],
                // A name of its own, so that an upstream can tell it from
                // the bridge's own client.
                client_info: Implementation {
                    name: RIG_CLIENT.to_owned(),
                    ..defaults.client_info.clone()
                },
                ..defaults
            },
            ..ConnectOptions::default()
        };
        let client =
            tokio::time::timeout(GUARD, connect(&Target::Url(front.parse()?), options)).await??;
        Ok((client, handler))
    }

    /// What the client was asked so far.
    fn asked(&self) -> Result<Vec<Value>, TestError> {
        Ok(self.handler.asked.lock().map_err(|_| "poisoned")?.clone())
    }
}

/// The default options, but giving up on an upstream's answer after 300 ms.
fn quick_timeout() -> BridgeOptions {
    BridgeOptions {
        request_timeout: Duration::from_millis(300),
        ..BridgeOptions::default()
    }
}

fn policy(policy: DegradePolicy) -> BridgeOptions {
    BridgeOptions {
        policy,
        ..BridgeOptions::default()
    }
}

/// Calls the tool `name`: its reply, and what the client was asked
/// meanwhile.
async fn call_tool(rig: &Rig, name: &str) -> Result<(Value, Vec<Value>), TestError> {
    let reply = ask(rig, "tools/call", json!({ "name": name })).await?;
    Ok((reply, rig.asked()?))
}

async fn ask(rig: &Rig, method: &str, params: Value) -> Result<Value, ClientError> {
    match tokio::time::timeout(
        GUARD,
        rig.client
            .request(method, Some(params), &RequestOptions::default()),
    )
    .await
    {
        Ok(answer) => answer,
        Err(_) => Err(ClientError::Unsupported(format!("{method} hung"))),
    }
}

/// The refusal names `feature`, whichever policy produced it.
fn assert_refused(outcome: Result<Value, ClientError>, feature: Feature) -> Result<(), TestError> {
    match outcome {
        Err(ClientError::Server(error)) => {
            let named = error.data.as_ref().map(|d| d["feature"].clone());
            assert_eq!(
                named,
                Some(json!(format!("{feature:?}"))),
                "the refusal must name {feature:?}: {error:?}"
            );
            Ok(())
        }
        other => Err(format!("expected a refusal naming {feature:?}, got {other:?}").into()),
    }
}

/// The bridge's latest report records `feature`.
fn assert_reported(rig: &Rig, feature: Feature) {
    let reports = rig.bridge.reports();
    let last = reports.last().map(|r| r.report.features());
    assert!(
        last.is_some_and(|f| f.contains(feature)),
        "the report must record {feature:?}: {reports:?}"
    );
}

/// One row of the matrix, from an `upstream` upstream to a `client`
/// client: refused when the policy refuses `feature` alone, downgraded and
/// reported when it allows it.
async fn row(
    upstream: ProtocolVersion,
    feature: Feature,
    client: ProtocolVersion,
    method: &str,
    params: Value,
    check: impl Fn(&Value),
) -> Result<(), TestError> {
    let refusing = refusing(upstream, client, feature).await?;
    assert_refused(ask(&refusing, method, params.clone()).await, feature)?;

    let allowing = permissive(upstream, client).await?;
    let reply = ask(&allowing, method, params).await?;
    check(&reply);
    assert_reported(&allowing, feature);
    Ok(())
}

/// A row's check: the first content block became text mentioning `needle`.
fn text_mentioning(needle: &'static str) -> impl Fn(&Value) {
    move |reply| {
        assert_eq!(reply["content"][0]["type"], "text");
        assert!(
            reply["content"][0]["text"]
                .as_str()
                .is_some_and(|t| t.contains(needle)),
            "{reply}"
        );
    }
}

/// A row's check: the first listed tool has no `member`.
fn first_tool_lacks(member: &'static str) -> impl Fn(&Value) {
    move |reply| assert!(reply["tools"][0].get(member).is_none(), "{reply}")
}

/// Structured content whose serialisation is already a text block (as the
/// revisions that added it ask servers to write it) is dropped for a client
/// that cannot read it without loss, so even the strict policy passes it.
#[tokio::test]
async fn structured_content_already_in_text_passes_the_strict_policy() -> Result<(), TestError> {
    let rig = strict(ProtocolVersion::V2025_11_25, ProtocolVersion::V2025_03_26).await?;
    let reply = ask(&rig, "tools/call", json!({ "name": "structured_in_text" })).await?;
    assert!(reply.get("structuredContent").is_none(), "{reply}");
    assert_eq!(reply["content"][0]["text"], "{\"a\":1}");
    assert_eq!(
        reply["content"].as_array().map(Vec::len),
        Some(1),
        "{reply}"
    );
    Ok(())
}

#[tokio::test]
async fn the_default_policy_is_strict_and_names_what_it_refused() -> Result<(), TestError> {
    let rig = strict(ProtocolVersion::V2025_11_25, ProtocolVersion::V2024_11_05).await?;
    let outcome = ask(&rig, "tools/call", json!({ "name": "audio" })).await;
    assert_refused(outcome, Feature::AudioContent)?;
    Ok(())
}

/// One test per row of the matrix from a 2025-11-25 upstream, each named
/// for what it protects: the feature, the client's revision, the method and
/// its params, and the check of the downgraded reply (see [`row`]).
macro_rules! matrix {
    ($(
        $name:ident:
        $feature:ident, $client:ident, $method:literal, $params:tt, $check:expr;
    )*) => {$(
        #[tokio::test]
        async fn $name() -> Result<(), TestError> {
            let (feature, client) = (Feature::$feature, ProtocolVersion::$client);
            let params = json!($params);
            row(ProtocolVersion::V2025_11_25, feature, client, $method, params, $check).await
        }
    )*};
}

matrix! {
    audio_becomes_a_description_for_2024_11_05:
        AudioContent, V2024_11_05, "tools/call", { "name": "audio" },
        text_mentioning("[audio: audio/wav, 44 bytes]");
    a_resource_link_becomes_text_for_2025_03_26:
        ResourceLinkContent, V2025_03_26, "tools/call", { "name": "link" },
        text_mentioning("test://linked");
    structured_content_is_dropped_for_2025_03_26:
        ToolStructuredOutput, V2025_03_26, "tools/call", { "name": "structured" },
        |reply| {
            assert!(reply.get("structuredContent").is_none(), "{reply}");
            assert_eq!(reply["content"][0]["text"], "done");
            assert_eq!(reply["content"][1]["text"], "{\"a\":1}");
        };
    an_output_schema_is_dropped_for_2025_03_26:
        ToolOutputSchema, V2025_03_26, "tools/list", {},
        first_tool_lacks("outputSchema");
    tool_annotations_are_dropped_for_2024_11_05:
        ToolAnnotations, V2024_11_05, "tools/list", {},
        first_tool_lacks("annotations");
    a_title_moves_into_the_annotations_for_2025_03_26:
        Titles, V2025_03_26, "tools/list", {},
        |reply| {
            assert!(reply["tools"][0].get("title").is_none(), "{reply}");
            assert_eq!(reply["tools"][0]["annotations"]["title"], "Rich");
        };
    icons_are_dropped_for_2025_06_18:
        Icons, V2025_06_18, "tools/list", {},
        first_tool_lacks("icons");
    entity_meta_is_dropped_for_2025_03_26:
        EntityMeta, V2025_03_26, "tools/list", {},
        first_tool_lacks("_meta");
    last_modified_is_dropped_for_2025_03_26:
        AnnotationsLastModified, V2025_03_26, "resources/list", {},
        |reply| {
            let annotations = &reply["resources"][0]["annotations"];
            assert!(annotations.get("lastModified").is_none(), "{reply}");
        };
    a_prompt_arguments_title_is_dropped_for_2025_03_26:
        Titles, V2025_03_26, "prompts/list", {},
        |reply| {
            let argument = &reply["prompts"][0]["arguments"][0];
            assert_eq!(argument["name"], "who", "{reply}");
            assert!(argument.get("title").is_none(), "{reply}");
        };
    audio_in_a_prompt_becomes_a_description_for_2024_11_05:
        AudioContent, V2024_11_05, "prompts/get", { "name": "any" },
        |reply| {
            let content = &reply["messages"][0]["content"];
            assert_eq!(content["type"], "text");
            // Counted as the tool result's are: the bytes the data decodes to.
            assert_eq!(content["text"], "[audio: audio/wav, 44 bytes]", "{reply}");
        };
}

#[tokio::test]
async fn titled_enums_become_enum_names_for_2025_06_18() -> Result<(), TestError> {
    let refusing = refusing(
        ProtocolVersion::V2025_11_25,
        ProtocolVersion::V2025_06_18,
        Feature::ElicitationEnumVariants,
    )
    .await?;
    let refused = ask(&refusing, "tools/call", json!({ "name": "ask_enum" })).await;
    assert_refused(refused, Feature::ElicitationEnumVariants)?;
    // The question was never put to the client.
    assert!(refusing.asked()?.is_empty());

    let allowing = permissive(ProtocolVersion::V2025_11_25, ProtocolVersion::V2025_06_18).await?;
    let reply = ask(&allowing, "tools/call", json!({ "name": "ask_enum" })).await?;
    assert_eq!(reply["content"][0]["text"], "accept", "{reply}");
    let asked = allowing.asked()?;
    let colour = &asked[0]["requestedSchema"]["properties"]["colour"];
    assert_eq!(colour["enum"], json!(["r", "g"]));
    assert_eq!(colour["enumNames"], json!(["Red", "Green"]));
    assert!(colour.get("oneOf").is_none() && colour.get("default").is_none());
    Ok(())
}

#[tokio::test]
async fn multi_select_is_never_put_to_a_2025_06_18_client() -> Result<(), TestError> {
    // Multi-select has no 2025-06-18 form, so even a permissive policy
    // refuses, naming the feature, and the client is never asked.
    refused_unasked(
        ProtocolVersion::V2025_06_18,
        "ask_multi",
        Feature::ElicitationEnumVariants,
    )
    .await
}

#[tokio::test]
async fn a_one_block_sampling_array_is_unwrapped_for_2025_06_18() -> Result<(), TestError> {
    let rig = permissive(ProtocolVersion::V2025_11_25, ProtocolVersion::V2025_06_18).await?;
    let (reply, asked) = call_tool(&rig, "sample_array").await?;
    assert_eq!(reply["content"][0]["text"], "sampled", "{reply}");
    assert_eq!(asked[0]["messages"][0]["content"]["type"], "text");
    Ok(())
}

#[tokio::test]
async fn a_missing_resource_is_invalid_params_for_2026_07_28() -> Result<(), TestError> {
    let rig = strict(ProtocolVersion::V2025_11_25, ProtocolVersion::V2026_07_28).await?;
    match ask(&rig, "resources/read", json!({ "uri": "test://gone" })).await {
        Err(ClientError::Server(error)) => assert_eq!(error.code, ErrorCode::INVALID_PARAMS),
        other => return Err(format!("expected -32602, got {other:?}").into()),
    }
    // Only a missing resource's -32002 means that: on another method the
    // code is the server's own, passed on as it is.
    match ask(&rig, "tools/call", json!({ "name": "own_code" })).await {
        Err(ClientError::Server(error)) => assert_eq!(error.code, ErrorCode::RESOURCE_NOT_FOUND),
        other => return Err(format!("expected -32002, got {other:?}").into()),
    }
    Ok(())
}

#[tokio::test]
async fn the_report_travels_in_meta_when_asked_for() -> Result<(), TestError> {
    let rig = rig(
        ProtocolVersion::V2025_11_25,
        ProtocolVersion::V2025_03_26,
        BridgeOptions {
            report_meta: true,
            ..policy(DegradePolicy::permissive())
        },
    )
    .await?;
    let reply = ask(&rig, "tools/call", json!({ "name": "structured" })).await?;
    let report = &reply["_meta"][REPORT_META];
    assert_eq!(report["revision"], "2025-03-26");
    assert_eq!(report["downgrades"][0]["feature"], "ToolStructuredOutput");
    Ok(())
}

#[tokio::test]
async fn a_reply_the_client_reads_passes_unchanged_and_unreported() -> Result<(), TestError> {
    let rig = strict(ProtocolVersion::V2025_11_25, ProtocolVersion::V2025_11_25).await?;
    let listed = ask(&rig, "tools/list", json!({})).await?;
    assert_eq!(listed["tools"][0]["title"], "Rich");
    assert_eq!(
        listed["tools"][0]["icons"][0]["src"],
        "https://example.com/rich.png"
    );
    assert_eq!(listed["tools"][0]["_meta"]["example.com/owner"], "tests");
    assert!(rig.bridge.reports().is_empty());
    Ok(())
}

// ----------------------------------------------------------------------- faults

/// A call the upstream never answers fails with a timeout, and the upstream
/// is told: its `record` of what it was sent holds the cancellation.
async fn times_out_and_is_cancelled_upstream(rig: &Rig, record: &Path) -> Result<(), TestError> {
    match ask(rig, "tools/call", json!({ "name": "anything" })).await {
        Err(ClientError::Server(error)) => {
            assert!(error.message.contains("no answer"), "{error:?}");
        }
        other => return Err(format!("expected a timeout error, got {other:?}").into()),
    }
    for _ in 0..50 {
        if std::fs::read_to_string(record).is_ok_and(|r| r.contains("requestId")) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err("the upstream never heard notifications/cancelled".into())
}

/// The bridge in front of `bad_server.py` in `mode`, and a 2025-11-25 client.
async fn in_front_of_bad(
    mode: &str,
    options: BridgeOptions,
) -> Result<(Rig, tempfile::TempPath), TestError> {
    in_front_of_bad_at(mode, options, None, ProtocolVersion::V2025_11_25).await
}

/// The same, the bridge speaking `upstream` (probed when `None`) and the
/// client `client`.
async fn in_front_of_bad_at(
    mode: &str,
    options: BridgeOptions,
    upstream: Option<ProtocolVersion>,
    client: ProtocolVersion,
) -> Result<(Rig, tempfile::TempPath), TestError> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bad_server.py");
    // Removed when the caller drops it.
    let record = tempfile::Builder::new()
        .prefix(&format!("droid-bridge-bad-{mode}-"))
        .suffix(".log")
        .tempfile()?
        .into_temp_path();
    let mut child = ChildOptions::new("python3", [script.into_os_string(), mode.into()]);
    child
        .env
        .push(("BAD_SERVER_RECORD".into(), record.as_os_str().to_owned()));
    let revisions = upstream.map_or_else(|| ProtocolVersion::ALL.to_vec(), |v| vec![v]);
    let bridge = Bridge::connect(connector(Target::Command(child), revisions), options).await?;
    let front = serve(bridge.server(|b| b)?).await?;
    Ok((Rig::connect(bridge, &front, client).await?, record))
}

/// The bridge, speaking 2025-11-25, in front of `bad_server.py` in `mode`
/// (recording to `record`, if given), served; and a 2025-11-25 client of
/// it answering with `handler`. The bridge is returned to be kept: the
/// server serving it holds it only weakly.
async fn asked_through_bridge(
    mode: &str,
    record: Option<&Path>,
    handler: Arc<dyn ClientHandler>,
) -> Result<(Bridge, Client), TestError> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bad_server.py");
    let mut child = ChildOptions::new("python3", [script.into_os_string(), mode.into()]);
    if let Some(record) = record {
        child
            .env
            .push(("BAD_SERVER_RECORD".into(), record.as_os_str().to_owned()));
    }
    let upstream = connector(Target::Command(child), vec![ProtocolVersion::V2025_11_25]);
    let bridge = Bridge::connect(upstream, BridgeOptions::default()).await?;
    let front = serve(bridge.server(|b| b)?).await?;
    let options = ConnectOptions {
        client: ClientOptions {
            handler,
            revisions: vec![ProtocolVersion::V2025_11_25],
            ..ClientOptions::default()
        },
        ..ConnectOptions::default()
    };
    let client =
        tokio::time::timeout(GUARD, connect(&Target::Url(front.parse()?), options)).await??;
    Ok((bridge, client))
}

/// A client that declares roots and never gives them, noting what it is
/// told.
#[derive(Debug, Default)]
struct Unanswering(Mutex<Vec<String>>);

impl ClientHandler for Unanswering {
    fn capabilities(&self) -> ClientCapabilities {
        serde_json::from_value(json!({ "roots": {} })).unwrap_or_default()
    }

    fn list_roots(&self) -> BoxFuture<'_, Result<ListRootsResult, ErrorObject>> {
        Box::pin(std::future::pending())
    }

    fn notification(&self, notice: &Notice) {
        if let Ok(mut told) = self.0.lock() {
            told.push(notice.method.clone());
        }
    }
}

/// A server that withdraws its question and answers the call without it
/// is heard at once: the client's question is withdrawn in turn, and the
/// call's answer is not held until the client answers (or the question
/// times out).
#[tokio::test]
async fn a_question_the_server_withdraws_holds_up_nothing() -> Result<(), TestError> {
    let handler = Arc::new(Unanswering::default());
    let (_bridge, client) = asked_through_bridge("withdraws", None, handler.clone()).await?;
    // Well within the question's own timeout: the answer is not held.
    let answered = tokio::time::timeout(
        Duration::from_secs(10),
        client.request(
            "tools/call",
            Some(json!({ "name": "anything" })),
            &RequestOptions::default(),
        ),
    )
    .await;
    assert!(matches!(answered, Ok(Ok(_))), "{answered:?}");
    // The withdrawal travels on the session's stream, not the call's: it
    // may come a moment after the answer.
    let withdrawn = || {
        handler
            .0
            .lock()
            .map(|told| told.iter().any(|m| m == "notifications/cancelled"))
            .unwrap_or_default()
    };
    for _ in 0..100 {
        if withdrawn() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(withdrawn(), "the client's question was never withdrawn");
    Ok(())
}

/// A client that declares sampling (and not roots), and samples `hi`.
#[derive(Debug, Default)]
struct SamplesOnly;

impl ClientHandler for SamplesOnly {
    fn capabilities(&self) -> ClientCapabilities {
        serde_json::from_value(json!({ "sampling": {} })).unwrap_or_default()
    }

    fn create_message(
        &self,
        _params: CreateMessageRequestParams,
    ) -> BoxFuture<'_, Result<CreateMessageResult, ErrorObject>> {
        Box::pin(async {
            serde_json::from_value(json!({ "role": "assistant", "model": "m",
                "content": { "type": "text", "text": "hi" } }))
            .map_err(|e| ErrorObject::new(ErrorCode::INTERNAL_ERROR, e.to_string()))
        })
    }
}

/// Two questions a server asks at once, one the client declared and one
/// it did not: each hears its own answer. The sampling is answered by the
/// client; the roots question is refused as undeclared, and its refusal is
/// not what the sampling hears (nor is the sampling withdrawn with it).
#[tokio::test]
async fn questions_asked_at_once_each_hear_their_own_answer() -> Result<(), TestError> {
    let record = tempfile::Builder::new()
        .prefix("droid-bridge-bad-asks-mixed-")
        .tempfile()?
        .into_temp_path();
    let (_bridge, client) =
        asked_through_bridge("asks-mixed", Some(&record), Arc::new(SamplesOnly)).await?;
    let answered = tokio::time::timeout(
        GUARD,
        client.request(
            "tools/call",
            Some(json!({ "name": "anything" })),
            &RequestOptions::default(),
        ),
    )
    .await;
    assert!(matches!(answered, Ok(Ok(_))), "{answered:?}");
    let heard = std::fs::read_to_string(&record)?;
    let sample = heard
        .lines()
        .find_map(|line| line.strip_prefix("sample "))
        .ok_or_else(|| format!("the sampling was not answered: {heard}"))?;
    let sample: Value = serde_json::from_str(sample)?;
    assert_eq!(sample["content"]["text"], "hi", "{heard}");
    let roots = heard
        .lines()
        .find_map(|line| line.strip_prefix("roots "))
        .ok_or_else(|| format!("the roots question was not answered: {heard}"))?;
    let roots: Value = serde_json::from_str(roots)?;
    assert!(
        roots["message"]
            .as_str()
            .is_some_and(|m| m.contains("Roots")),
        "the roots question heard another's answer: {heard}"
    );
    Ok(())
}

/// An upstream answering a call with a result that is no result (`1`):
/// the client is told so, not handed it.
#[tokio::test]
async fn a_result_that_is_not_one_is_not_passed_on() -> Result<(), TestError> {
    let (rig, _record) = in_front_of_bad("scalar-result", BridgeOptions::default()).await?;
    let answered = tokio::time::timeout(
        GUARD,
        rig.client.request(
            "tools/call",
            Some(json!({ "name": "anything" })),
            &RequestOptions::default(),
        ),
    )
    .await?;
    let Err(ClientError::Server(error)) = answered else {
        return Err(format!("a non-result was passed on: {answered:?}").into());
    };
    assert!(error.message.contains("not a result"), "{error:?}");
    Ok(())
}

/// A client that declares roots, and gives `file:///rooted-N` the Nth
/// time it is asked.
#[derive(Debug, Default)]
struct Rooted(std::sync::atomic::AtomicUsize);

impl ClientHandler for Rooted {
    fn capabilities(&self) -> ClientCapabilities {
        serde_json::from_value(json!({ "roots": { "listChanged": true } })).unwrap_or_default()
    }

    fn list_roots(&self) -> BoxFuture<'_, Result<ListRootsResult, ErrorObject>> {
        let asked = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        Box::pin(async move {
            serde_json::from_value(
                json!({ "roots": [{ "uri": format!("file:///rooted-{asked}") }] }),
            )
            .map_err(|_| poisoned())
        })
    }
}

/// The roots the test server last heard, as its tool `roots` answers them.
async fn roots_heard(client: &Client) -> Result<String, TestError> {
    let asked = tokio::time::timeout(
        GUARD,
        client.request(
            "tools/call",
            Some(json!({ "name": "roots" })),
            &RequestOptions::default(),
        ),
    )
    .await??;
    Ok(asked["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

/// A client that declares roots and gives the one root `uri`.
#[derive(Debug)]
struct RootedAt(&'static str);

impl ClientHandler for RootedAt {
    fn capabilities(&self) -> ClientCapabilities {
        serde_json::from_value(json!({ "roots": {} })).unwrap_or_default()
    }

    fn list_roots(&self) -> BoxFuture<'_, Result<ListRootsResult, ErrorObject>> {
        let uri = self.0;
        Box::pin(async move {
            serde_json::from_value(json!({ "roots": [{ "uri": uri }] })).map_err(|_| poisoned())
        })
    }
}

/// Two 2026-07-28 clients that the bridge cannot tell apart (anonymous,
/// from one address) share the connections it keeps to a legacy server;
/// one that keeps the roots it was given for its connection (as
/// server-filesystem does) must not serve the second client's call under
/// the first client's roots: the second is asked for its own.
#[tokio::test]
async fn one_clients_roots_are_never_another_clients() -> Result<(), TestError> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bad_server.py");
    let child = ChildOptions::new("python3", [script.into_os_string(), "roots-once".into()]);
    let upstream = connector(Target::Command(child), vec![ProtocolVersion::V2025_11_25]);
    let bridge = Bridge::connect(upstream, BridgeOptions::default()).await?;
    let front = serve(bridge.server(|b| b)?).await?;
    let mut heard = Vec::new();
    for (uri, times) in [("file:///first", 2), ("file:///second", 1)] {
        let options = ConnectOptions {
            client: ClientOptions {
                handler: Arc::new(RootedAt(uri)),
                revisions: vec![ProtocolVersion::V2026_07_28],
                ..ClientOptions::default()
            },
            ..ConnectOptions::default()
        };
        let client =
            tokio::time::timeout(GUARD, connect(&Target::Url(front.parse()?), options)).await??;
        for _ in 0..times {
            heard.push(roots_heard(&client).await?);
        }
    }
    assert!(heard[0].contains("file:///first"), "{heard:?}");
    assert!(heard[1].contains("file:///first"), "{heard:?}");
    assert!(
        heard[2].contains("file:///second") && !heard[2].contains("file:///first"),
        "{heard:?}"
    );
    Ok(())
}

/// A `roots/list` a server asks between requests (as servers do right
/// after the handshake) is put to the session's client on its stream, not
/// answered with no roots; and the client's word that its roots changed
/// reaches the server, which asks again.
#[tokio::test]
async fn a_roots_question_between_requests_reaches_the_sessions_client() -> Result<(), TestError> {
    let (_bridge, client) =
        asked_through_bridge("roots-between", None, Arc::new(Rooted::default())).await?;
    // Answered, then the server asks: no request is in flight.
    client
        .request("resources/list", None, &RequestOptions::default())
        .await?;
    let heard = async || roots_heard(&client).await;
    let roots = heard().await?;
    assert!(roots.contains("file:///rooted-1"), "{roots}");
    client
        .notify("notifications/roots/list_changed", None)
        .await?;
    // The word goes up on its own, so a call may still meet the roots of
    // before: asked until the new ones arrive, within the guard.
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let roots = heard().await?;
        if roots.contains("file:///rooted-2") {
            return Ok(());
        }
        assert!(roots.contains("file:///rooted-1"), "{roots}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server never heard the roots changed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A `roots/list` between requests from a server whose client did not
/// declare roots is refused, never put to that client.
#[tokio::test]
async fn a_roots_question_between_requests_is_not_put_to_a_client_without_roots()
-> Result<(), TestError> {
    let handler = Arc::new(UndeclaredRoots::default());
    let (_bridge, client) = asked_through_bridge("roots-between", None, handler.clone()).await?;
    client
        .request("resources/list", None, &RequestOptions::default())
        .await?;
    // Time for the question to arrive between requests, as meant, before
    // the call that reads what the server heard could carry it instead.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let heard: Value = serde_json::from_str(&roots_heard(&client).await?)?;
    // Refused between requests (`-32601`), or by the call it met if the
    // server's question crossed the call on its way (`-32603`, the call's
    // own check): either way an error, and the client never asked.
    assert!(
        [json!(-32601), json!(-32603)].contains(&heard["code"]),
        "{heard}"
    );
    assert_eq!(
        handler.0.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the client was asked for roots it did not declare"
    );
    Ok(())
}

/// A client that declares nothing, and gives roots when asked all the
/// same, counting each time.
#[derive(Debug, Default)]
struct UndeclaredRoots(std::sync::atomic::AtomicUsize);

impl ClientHandler for UndeclaredRoots {
    fn list_roots(&self) -> BoxFuture<'_, Result<ListRootsResult, ErrorObject>> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async {
            serde_json::from_value(json!({ "roots": [{ "uri": "file:///undeclared" }] }))
                .map_err(|e| ErrorObject::new(ErrorCode::INTERNAL_ERROR, e.to_string()))
        })
    }
}

/// A call whose server asks past the bridge's bound of rounds fails, and
/// the server's questions stop there: its connection serves no later call
/// and is closed, where before what it asked next went on to the session's
/// client (or its next call) without end.
#[tokio::test]
async fn a_call_past_its_bound_of_rounds_leaves_the_next_call_alone() -> Result<(), TestError> {
    let (rig, record) = in_front_of_bad_at(
        "asks-forever",
        BridgeOptions::default(),
        Some(ProtocolVersion::V2025_11_25),
        ProtocolVersion::V2025_11_25,
    )
    .await?;
    match ask(&rig, "tools/call", json!({ "name": "ask" })).await {
        Err(ClientError::Server(error)) => {
            assert!(
                error.message.contains("asked for input more than"),
                "{error:?}"
            );
        }
        other => return Err(format!("expected a refusal, got {other:?}").into()),
    }
    for _ in 0..3 {
        let answered = ask(&rig, "tools/call", json!({ "name": "fine" })).await?;
        assert_eq!(answered["content"][0]["text"], "done", "{answered}");
    }
    // The server asks no more: what it recorded stays as it is.
    let asked = || std::fs::read_to_string(&record).map(|r| r.lines().count());
    let before = asked()?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(asked()?, before, "the server went on asking");
    Ok(())
}

/// A server asking a thousand questions in one round is flooding its
/// client: the bridge refuses the round, for a client of either era,
/// rather than putting them all (or building a round of them).
#[tokio::test]
async fn a_round_of_a_thousand_questions_is_refused() -> Result<(), TestError> {
    for client in [ProtocolVersion::V2025_11_25, ProtocolVersion::V2026_07_28] {
        let (rig, _) = in_front_of_bad_at(
            "many-questions",
            BridgeOptions::default(),
            Some(ProtocolVersion::V2026_07_28),
            client,
        )
        .await?;
        match ask(&rig, "tools/call", json!({ "name": "anything" })).await {
            Err(ClientError::Server(error)) => {
                assert_eq!(error.code, ErrorCode::INTERNAL_ERROR, "{client}: {error:?}");
                assert!(
                    error.message.contains("more than 64 questions"),
                    "{client}: {error:?}"
                );
            }
            other => return Err(format!("{client}: expected a refusal, got {other:?}").into()),
        }
    }
    Ok(())
}

#[tokio::test]
async fn the_upstreams_refusal_of_the_bridges_own_request_is_the_bridges_failure()
-> Result<(), TestError> {
    // -32022 from the server is about the revision the bridge spoke, not
    // the client's: to either era's client it is a failure on this side,
    // never a code that would send the client to change its own request.
    for client in [ProtocolVersion::V2025_11_25, ProtocolVersion::V2026_07_28] {
        let (rig, _) = in_front_of_bad_at(
            "refuses-its-caller",
            BridgeOptions::default(),
            Some(ProtocolVersion::V2026_07_28),
            client,
        )
        .await?;
        match ask(&rig, "tools/call", json!({ "name": "anything" })).await {
            Err(ClientError::Server(error)) => {
                assert_eq!(error.code, ErrorCode::INTERNAL_ERROR, "{client}: {error:?}");
                assert!(error.data.is_none(), "{client}: {error:?}");
            }
            other => return Err(format!("{client}: expected a refusal, got {other:?}").into()),
        }
    }
    Ok(())
}

#[tokio::test]
async fn an_upstream_that_dies_mid_call_fails_the_call_and_is_started_again()
-> Result<(), TestError> {
    let (rig, _) = in_front_of_bad("close-mid-response", BridgeOptions::default()).await?;
    match ask(&rig, "tools/call", json!({ "name": "anything" })).await {
        Err(ClientError::Server(error)) => {
            assert_eq!(error.code, ErrorCode::INTERNAL_ERROR);
            assert!(error.message.contains("upstream"), "{}", error.message);
        }
        other => return Err(format!("expected a clear error, got {other:?}").into()),
    }
    // The next request is served by a new upstream process: the answer is
    // that server's own (it serves no `tools/list`), not a dead connection.
    match ask(&rig, "tools/list", json!({})).await {
        Err(ClientError::Server(error)) => {
            assert_eq!(error.code, ErrorCode::METHOD_NOT_FOUND, "{error:?}");
        }
        other => {
            return Err(format!("expected the new upstream's own answer, got {other:?}").into());
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_tool_listing_that_fails_part_way_is_not_repeated_for_every_call() -> Result<(), TestError>
{
    // A 2025-11-25 upstream that runs tools as tasks: the bridge lists its
    // tools to learn which run only as tasks, and the second page fails.
    let (rig, record) = in_front_of_bad_at(
        "tasks-page-two-fails",
        BridgeOptions::default(),
        Some(ProtocolVersion::V2025_11_25),
        ProtocolVersion::V2025_11_25,
    )
    .await?;
    // Each call is carried (as a plain call: how the tool runs is not
    // known), and none of them lists the tools again so soon after.
    for _ in 0..3 {
        let result = ask(
            &rig,
            "tools/call",
            json!({ "name": "first", "arguments": {} }),
        )
        .await?;
        assert_eq!(result["content"][0]["text"], "done", "{result}");
    }
    let pages = std::fs::read_to_string(&record)?;
    let first_pages = pages.lines().filter(|line| *line == "page one").count();
    assert_eq!(first_pages, 1, "listed again: {pages}");
    assert_eq!(
        pages.lines().filter(|line| *line == "page two").count(),
        1,
        "{pages}"
    );
    Ok(())
}

/// However often an upstream says its tools changed, at most one relisting
/// waits behind the one under way (here one the upstream never answers): a
/// flood of the announcement costs no task, nor memory, per announcement.
#[tokio::test]
async fn a_flood_of_tool_list_changes_waits_as_one_relisting() -> Result<(), TestError> {
    let (rig, record) = in_front_of_bad("tools-flood", BridgeOptions::default()).await?;
    let tasks = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let before = tasks();
    // The 10,000 announcements come before the answer, on the same stream.
    let result = ask(&rig, "tools/call", json!({ "name": "anything" })).await?;
    assert_eq!(result["content"][0]["text"], "done", "{result}");
    let after = tasks();
    assert!(
        after < before.saturating_add(100),
        "{before} tasks before the flood, {after} after"
    );
    let listed = std::fs::read_to_string(&record)?.lines().count();
    assert!(listed <= 2, "listed {listed} times");
    Ok(())
}

/// A stateless caller's connections to a legacy upstream are its own: what
/// the server says on one outside the request it serves (a log line or a
/// question after its answer) can only reach whoever holds it next, so
/// anonymous callers from two networks never share one.
#[tokio::test]
async fn anonymous_stateless_callers_from_two_networks_never_share_a_legacy_connection()
-> Result<(), TestError> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bad_server.py");
    let child = ChildOptions::new("python3", [script.into_os_string(), "pid".into()]);
    let revisions = vec![ProtocolVersion::V2025_11_25];
    let bridge = Bridge::connect(
        connector(Target::Command(child), revisions),
        BridgeOptions::default(),
    )
    .await?;
    let url = serve(bridge.server(|b| b)?).await?;
    let from = |ip: &str| -> Result<reqwest::Client, TestError> {
        Ok(reqwest::Client::builder()
            .local_address(Some(ip.parse()?))
            .build()?)
    };
    let (a, b) = (from("127.0.0.1")?, from("127.0.0.2")?);
    let mut ids = 0;
    let mut served_by = async |client: &reqwest::Client| -> Result<String, TestError> {
        ids += 1;
        let call = json!({ "name": "anything", "arguments": {} });
        let request = modern_request_via(client, &url, ids, "tools/call", call, &json!({}));
        let reply: Value = request.send().await?.json().await?;
        let pid = reply["result"]["content"][0]["text"].as_str();
        Ok(pid.ok_or(format!("no answer: {reply}"))?.to_owned())
    };
    let first = served_by(&a).await?;
    assert_eq!(
        served_by(&a).await?,
        first,
        "a caller's connection is kept for it"
    );
    assert_ne!(served_by(&b).await?, first, "another caller was given it");
    bridge.close().await;
    Ok(())
}

#[tokio::test]
async fn an_upstream_that_hangs_is_cancelled_at_the_timeout() -> Result<(), TestError> {
    let (rig, record) = in_front_of_bad("silent", quick_timeout()).await?;
    times_out_and_is_cancelled_upstream(&rig, &record).await
}

#[tokio::test]
async fn garbage_from_the_upstream_does_not_lose_the_answer() -> Result<(), TestError> {
    let (rig, _) = in_front_of_bad("invalid-json", BridgeOptions::default()).await?;
    let reply = ask(&rig, "tools/call", json!({ "name": "anything" })).await?;
    assert_eq!(reply["content"][0]["text"], "done", "{reply}");
    Ok(())
}

// ----------------------------------------------------------------- sessions

#[tokio::test]
async fn each_legacy_session_gets_its_own_upstream_session_until_it_ends() -> Result<(), TestError>
{
    let first = strict(ProtocolVersion::V2025_11_25, ProtocolVersion::V2025_11_25).await?;
    // The connection that learned what the upstream is stays for stateless
    // callers; the session's own is opened by its first request.
    let before = first.bridge.connections();
    ask(&first, "tools/list", json!({})).await?;
    assert_eq!(first.bridge.connections(), before + 1);
    ask(&first, "tools/list", json!({})).await?;
    assert_eq!(
        first.bridge.connections(),
        before + 1,
        "a session reuses its own upstream session"
    );
    // Ending the downstream session ends its upstream session.
    first.client.close().await;
    let mut closed = false;
    for _ in 0..50 {
        if first.bridge.connections() == before {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(closed, "the session's upstream connection outlived it");
    Ok(())
}

// ------------------------------------------------------------ subscriptions

/// Waits until the client has heard `method`.
async fn heard(rig: &Rig, method: &str) -> Result<bool, TestError> {
    for _ in 0..100 {
        if rig
            .handler
            .notices
            .lock()
            .map_err(|_| "poisoned")?
            .iter()
            .any(|m| m == method)
        {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(false)
}

/// A legacy client's subscription reaches the upstream however it speaks,
/// and the upstream's update comes back.
async fn subscription_through(upstream: ProtocolVersion) -> Result<(), TestError> {
    let rig = strict(upstream, ProtocolVersion::V2025_11_25).await?;
    rig.client.subscribe("test://dated").await?;
    // The upstream hears of it asynchronously: touch until the update comes.
    for _ in 0..20 {
        ask(&rig, "tools/call", json!({ "name": "touch" })).await?;
        if heard(&rig, "notifications/resources/updated").await? {
            return Ok(());
        }
    }
    Err("the subscribed resource's update never reached the client".into())
}

#[tokio::test]
async fn a_subscription_reaches_a_2026_upstream_through_its_listen() -> Result<(), TestError> {
    subscription_through(ProtocolVersion::V2026_07_28).await
}

#[tokio::test]
async fn a_subscription_reaches_a_legacy_upstream() -> Result<(), TestError> {
    subscription_through(ProtocolVersion::V2025_11_25).await
}

/// A log record reaches a legacy client as the upstream wrote it, the name
/// of its logger included, whichever era the upstream speaks.
#[tokio::test]
async fn a_log_record_keeps_its_logger() -> Result<(), TestError> {
    for upstream in [ProtocolVersion::V2025_11_25, ProtocolVersion::V2026_07_28] {
        let rig = strict(upstream, ProtocolVersion::V2025_11_25).await?;
        rig.client
            .set_logging_level(protocol_droid::domain::LoggingLevel::Debug)
            .await?;
        call_tool(&rig, "logs").await?;
        // The record travels ahead of the answer, on the same stream.
        let logs = rig.handler.logs.lock().map_err(|_| "poisoned")?.clone();
        assert_eq!(
            logs,
            [json!({ "level": "warning", "logger": "upstream-logger", "data": "careful" })],
            "{upstream}"
        );
    }
    Ok(())
}

/// Before a legacy client chooses a level, the log records its server
/// chooses to send reach it, as they would connected to that server itself.
#[tokio::test]
async fn a_legacy_client_that_chose_no_level_hears_what_the_server_sends() -> Result<(), TestError>
{
    let (rig, _record) = in_front_of_bad("flood", BridgeOptions::default()).await?;
    call_tool(&rig, "anything").await?;
    let logs = rig.handler.logs.lock().map_err(|_| "poisoned")?.len();
    assert!(logs > 0, "no log record reached the client");
    Ok(())
}

/// How many `notifications/resources/updated` a recording client heard.
fn updates_heard(handler: &Recording) -> Result<usize, TestError> {
    let notices = handler.notices.lock().map_err(|_| "poisoned")?;
    Ok(notices
        .iter()
        .filter(|m| *m == "notifications/resources/updated")
        .count())
}

/// A legacy upstream holding the one resource `uri`, served over HTTP:
/// the server, to tell of updates, and its URL.
async fn watched_upstream(uri: &'static str) -> Result<(Server, String), TestError> {
    let origin = Server::builder("watched", "1")
        .revisions([ProtocolVersion::V2025_11_25])
        .build()?;
    let resource = serde_json::from_value(json!({ "uri": uri, "name": "watched" }))?;
    origin.add_resource(resource, None, move |_| async move {
        serde_json::from_value(json!([{ "uri": uri, "text": "now" }]))
            .map_err(|e| CallError::internal(e.to_string()))
    });
    let url = serve(origin.clone()).await?;
    Ok((origin, url))
}

/// Subscribes a legacy session (`client`, recorded by `handler`) of the
/// intermediary at `front` to `shown` (the upstream's `uri` as the front
/// names it) and watches it with a `subscriptions/listen` besides; then
/// checks that each update `origin` tells reaches the session once.
async fn each_update_heard_once(
    origin: &Server,
    uri: &str,
    front: &str,
    shown: &str,
    client: &Client,
    handler: &Recording,
) -> Result<(), TestError> {
    use futures_util::StreamExt as _;
    client.subscribe(shown).await?;
    let watch = json!({ "notifications": { "resourceSubscriptions": [shown] } });
    let listen = modern_request(front, 7, "subscriptions/listen", watch, &json!({}))
        .send()
        .await?;
    let mut events = listen.bytes_stream();
    // Both subscriptions reach the upstream on their own time: updated
    // until the listen and the session have each heard.
    let mut seen = String::new();
    for _ in 0..50 {
        origin.resource_updated(uri);
        if let Ok(Some(chunk)) =
            tokio::time::timeout(Duration::from_millis(100), events.next()).await
        {
            seen.push_str(&String::from_utf8_lossy(&chunk?));
        }
        if seen.contains("notifications/resources/updated") && updates_heard(handler)? > 0 {
            break;
        }
    }
    assert!(seen.contains("notifications/resources/updated"), "{seen}");
    // What the last of those updates still has on its way arrives.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = updates_heard(handler)?;
    assert!(before > 0, "the session never heard an update");
    for told in 1..=3 {
        origin.resource_updated(uri);
        for _ in 0..100 {
            if updates_heard(handler)? >= before + told {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // A second copy would come with the update it repeats: given as long.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(updates_heard(handler)?, before + 3);
    Ok(())
}

/// A legacy session subscribed to a legacy upstream's resource hears each
/// update once while a listen watches the resource too: the session's
/// subscription is on its own upstream connection, the listen's on the one
/// the bridge shares, and the upstream tells both.
#[tokio::test]
async fn a_subscription_beside_a_listen_hears_each_update_once() -> Result<(), TestError> {
    let uri = "test://watched-twice";
    let (origin, upstream) = watched_upstream(uri).await?;
    let bridge = Bridge::connect(
        connector(
            Target::Url(upstream.parse()?),
            vec![ProtocolVersion::V2025_11_25],
        ),
        BridgeOptions::default(),
    )
    .await?;
    let front = serve(bridge.server(|b| b)?).await?;
    let rig = Rig::connect(bridge, &front, ProtocolVersion::V2025_11_25).await?;
    each_update_heard_once(&origin, uri, &front, uri, &rig.client, &rig.handler).await
}

/// The same through the gateway, which asks the upstream's bridge whether
/// the session watches the resource under the name the upstream gives it.
#[tokio::test]
async fn a_gateway_subscription_beside_a_listen_hears_each_update_once() -> Result<(), TestError> {
    use protocol_droid::application::gateway::{Disclosure, Gateway, Pins, UpstreamOptions};
    let uri = "test://watched-twice";
    let (origin, upstream) = watched_upstream(uri).await?;
    let gateway = Gateway::build(
        Server::builder("gateway", "1"),
        Disclosure::Default,
        Pins::default(),
    )?;
    gateway
        .add_upstream(
            "watched",
            connector(
                Target::Url(upstream.parse()?),
                vec![ProtocolVersion::V2025_11_25],
            ),
            UpstreamOptions::default(),
        )
        .await?;
    let front = serve(gateway.server().clone()).await?;
    let (client, handler) = Rig::connect_client(&front, ProtocolVersion::V2025_11_25).await?;
    let listed = client.list_resources(None).await?.value;
    let shown = listed
        .resources
        .first()
        .map(|resource| resource.uri.clone())
        .ok_or("the gateway lists no resource")?;
    assert_ne!(
        shown, uri,
        "the gateway names an upstream's resource its own way"
    );
    each_update_heard_once(&origin, uri, &front, &shown, &client, &handler).await
}

/// A resource the caller's scopes hide is acknowledged by a forwarder's
/// `subscriptions/listen` exactly as one the upstream does not have (a
/// forwarder cannot tell those from one it has), so the answer does not
/// tell that it exists.
#[tokio::test]
async fn a_hidden_resource_is_watched_as_a_missing_one_is() -> Result<(), TestError> {
    use futures_util::StreamExt as _;
    use protocol_droid::application::server::{Primitive, ScopeRules};
    let hidden = "test://watched-secret";
    let (_origin, upstream) = watched_upstream(hidden).await?;
    let bridge = Bridge::connect(
        connector(
            Target::Url(upstream.parse()?),
            vec![ProtocolVersion::V2025_11_25],
        ),
        BridgeOptions::default(),
    )
    .await?;
    let server = bridge.server(|b| b)?;
    let mut rules = ScopeRules::default();
    rules.require(Primitive::Resource, hidden, "files:secret");
    server.set_forwarded_scopes(rules);
    let front = serve(server).await?;
    let missing = "test://not-there";
    let watch = json!({ "notifications": { "resourceSubscriptions": [hidden, missing] } });
    let listen = modern_request(&front, 7, "subscriptions/listen", watch, &json!({}))
        .send()
        .await?;
    let mut events = listen.bytes_stream();
    let mut seen = String::new();
    while !seen.contains("acknowledged") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await?
            .ok_or("the listen ended before its acknowledgement")??;
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let acknowledged = seen
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|m| m["method"] == "notifications/subscriptions/acknowledged")
        .ok_or("no acknowledgement")?;
    assert_eq!(
        acknowledged["params"]["notifications"]["resourceSubscriptions"],
        json!([missing, hidden]),
        "{acknowledged}"
    );
    Ok(())
}

// ---------------------------------------------------------------- unmodelled

#[tokio::test]
async fn a_method_no_revision_defines_is_forwarded_as_it_is() -> Result<(), TestError> {
    for (upstream, client) in [
        (ProtocolVersion::V2025_11_25, ProtocolVersion::V2025_06_18),
        (ProtocolVersion::V2026_07_28, ProtocolVersion::V2026_07_28),
    ] {
        let rig = strict(upstream, client).await?;
        let reply = ask(&rig, "example/echo", json!({ "word": "hello" })).await?;
        assert_eq!(reply["echoed"], "hello", "{upstream} -> {client}: {reply}");
    }
    Ok(())
}

// ------------------------------------------------------------- more rows

#[tokio::test]
async fn a_non_object_structured_result_is_not_sent_to_2025_11_25() -> Result<(), TestError> {
    row(
        ProtocolVersion::V2026_07_28,
        Feature::StructuredContentAnyJson,
        ProtocolVersion::V2025_11_25,
        "tools/call",
        json!({ "name": "list_of_numbers" }),
        |reply| {
            assert!(
                reply.get("structuredContent").is_none_or(Value::is_object),
                "{reply}"
            );
        },
    )
    .await
}

/// Even a permissive bridge refuses the tool `tool` for a `client` client,
/// naming `feature`, and the client is never asked.
async fn refused_unasked(
    client: ProtocolVersion,
    tool: &str,
    feature: Feature,
) -> Result<(), TestError> {
    let rig = permissive(ProtocolVersion::V2025_11_25, client).await?;
    let outcome = ask(&rig, "tools/call", json!({ "name": tool })).await;
    assert_refused(outcome, feature)?;
    assert!(rig.asked()?.is_empty());
    Ok(())
}

/// What a client's revision cannot answer is never put to it: the server
/// hears the question cancelled, as a user dismissing it, and the call ends
/// as the server ends it.
async fn not_put_to(client: ProtocolVersion, tool: &str) -> Result<(), TestError> {
    let rig = permissive(ProtocolVersion::V2025_11_25, client).await?;
    let called = ask(&rig, "tools/call", json!({ "name": tool })).await?;
    assert_eq!(
        called["content"][0]["text"],
        json!("cancel"),
        "{tool} for {client}: {called}"
    );
    assert!(rig.asked()?.is_empty());
    Ok(())
}

#[tokio::test]
async fn elicitation_is_never_put_to_2025_03_26() -> Result<(), TestError> {
    not_put_to(ProtocolVersion::V2025_03_26, "ask_form").await
}

#[tokio::test]
async fn url_elicitation_is_never_put_to_2025_06_18() -> Result<(), TestError> {
    not_put_to(ProtocolVersion::V2025_06_18, "ask_url").await
}

#[tokio::test]
async fn a_question_the_client_refuses_is_the_servers_to_handle() -> Result<(), TestError> {
    // The refusal goes up as the question's answer, and the call ends as
    // the server ends it, here with a result that says what it heard.
    let rig = permissive(ProtocolVersion::V2025_11_25, ProtocolVersion::V2025_11_25).await?;
    let called = ask(&rig, "tools/call", json!({ "name": "sample_refused" })).await?;
    let text = called["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("the client refused") && text.contains("User rejected"),
        "{called}"
    );
    Ok(())
}

#[tokio::test]
async fn sampling_with_tools_is_refused_for_2025_06_18_by_name() -> Result<(), TestError> {
    refused_unasked(
        ProtocolVersion::V2025_06_18,
        "sample_tools",
        Feature::SamplingTools,
    )
    .await
}

#[tokio::test]
async fn result_type_and_caching_hints_do_not_reach_a_legacy_client() -> Result<(), TestError> {
    let rig = strict(ProtocolVersion::V2026_07_28, ProtocolVersion::V2025_11_25).await?;
    // Not a loss: the strict default lets it through.
    let listed = ask(&rig, "tools/list", json!({})).await?;
    for member in ["resultType", "ttlMs", "cacheScope"] {
        assert!(listed.get(member).is_none(), "{member}: {listed}");
    }
    let called = ask(&rig, "tools/call", json!({ "name": "plain" })).await?;
    assert!(called.get("resultType").is_none(), "{called}");
    // Nor the upstream's name in every result: the client had it from
    // `initialize`.
    for result in [&listed, &called] {
        assert!(
            result
                .pointer("/_meta/io.modelcontextprotocol~1serverInfo")
                .is_none(),
            "{result}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_progress_message_does_not_reach_2024_11_05() -> Result<(), TestError> {
    for (client, keeps) in [
        (ProtocolVersion::V2024_11_05, false),
        (ProtocolVersion::V2025_03_26, true),
    ] {
        let rig = strict(ProtocolVersion::V2025_11_25, client).await?;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        let options = RequestOptions {
            on_progress: Some(Arc::new(move |p| {
                if let Ok(mut seen) = sink.lock() {
                    seen.push(p.message);
                }
            })),
            ..RequestOptions::default()
        };
        rig.client
            .request("tools/call", Some(json!({ "name": "progress" })), &options)
            .await?;
        let seen = seen.lock().map_err(|_| "poisoned")?.clone();
        assert_eq!(seen.len(), 1, "{client}: one progress notification");
        assert_eq!(
            seen.first().cloned().flatten().is_some(),
            keeps,
            "{client}: {seen:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_2025_03_26_batch_is_split_and_answered_as_a_batch() -> Result<(), TestError> {
    let (front, _bridge) = front_at(ProtocolVersion::V2026_07_28, BridgeOptions::default()).await?;
    let http = reqwest::Client::new();
    let post = |body: Value, session: Option<String>| {
        let mut request = http
            .post(&front)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(session) = session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-03-26");
        }
        request.send()
    };
    let init = post(
        json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {},
            "clientInfo": { "name": "batcher", "version": "1" } } }),
        None,
    )
    .await?;
    let session = init
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .ok_or("no session id")?;
    post(
        json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
        Some(session.clone()),
    )
    .await?;
    let reply: Value = post(
        json!([
            { "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": { "name": "plain" } },
            { "jsonrpc": "2.0", "id": 3, "method": "tools/list" },
        ]),
        Some(session),
    )
    .await?
    .json()
    .await?;
    let replies = reply.as_array().ok_or("not a batch")?;
    assert_eq!(replies.len(), 2, "{reply}");
    let ids: Vec<&Value> = replies.iter().map(|r| &r["id"]).collect();
    assert!(
        ids.contains(&&json!(2)) && ids.contains(&&json!(3)),
        "{reply}"
    );
    Ok(())
}

#[tokio::test]
async fn a_2026_upstream_reads_each_request_as_the_legacy_client_declared_it()
-> Result<(), TestError> {
    let rig = strict(ProtocolVersion::V2026_07_28, ProtocolVersion::V2025_11_25).await?;
    // Twice: every request carries the envelope, not only the first.
    for _ in 0..2 {
        let (reply, _) = call_tool(&rig, "declared").await?;
        let text = reply["content"][0]["text"].as_str().unwrap_or_default();
        let declared: Value = serde_json::from_str(text)?;
        assert_eq!(
            declared["capabilities"],
            json!({ "elicitation": { "form": {}, "url": {} }, "sampling": {} }),
            "{declared}"
        );
        assert_eq!(declared["clientInfo"]["name"], RIG_CLIENT, "{declared}");
    }
    Ok(())
}

#[tokio::test]
async fn url_elicitation_required_becomes_an_input_round_for_2026_07_28() -> Result<(), TestError> {
    let rig = strict(ProtocolVersion::V2025_11_25, ProtocolVersion::V2026_07_28).await?;
    let (reply, asked) = call_tool(&rig, "needs_url").await?;
    assert_eq!(reply["content"][0]["text"], "signed in", "{reply}");
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["mode"], "url");
    assert_eq!(asked[0]["url"], "https://example.com/login");
    assert!(asked[0].get("elicitationId").is_none(), "{asked:?}");
    Ok(())
}

// ------------------------------------------------------ rounds synthesized

#[tokio::test]
async fn a_2026_client_answers_a_legacy_servers_question_in_an_input_round() -> Result<(), TestError>
{
    let rig = permissive(ProtocolVersion::V2025_11_25, ProtocolVersion::V2026_07_28).await?;
    // The legacy server asks inline; the bridge parks its call, the client
    // retries with the answer, and the parked call finishes.
    let reply = ask(&rig, "tools/call", json!({ "name": "ask_enum" })).await?;
    assert_eq!(reply["content"][0]["text"], "accept", "{reply}");
    let asked = rig.asked()?;
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(rig.bridge.parked(), 0, "nothing stays parked");
    // Sampling, the other question a server asks.
    let reply = ask(&rig, "tools/call", json!({ "name": "sample_array" })).await?;
    assert_eq!(reply["content"][0]["text"], "sampled", "{reply}");
    Ok(())
}

/// A raw 2026-07-28 request to `url`: `method` with `params`, from a client
/// declaring `capabilities`, with the headers the revision asks for (the
/// tool's name in `Mcp-Name` when `params` names one).
fn modern_request(
    url: &str,
    id: u64,
    method: &str,
    params: Value,
    capabilities: &Value,
) -> reqwest::RequestBuilder {
    modern_request_via(
        &reqwest::Client::new(),
        url,
        id,
        method,
        params,
        capabilities,
    )
}

/// [`modern_request`], sent by `client`.
fn modern_request_via(
    client: &reqwest::Client,
    url: &str,
    id: u64,
    method: &str,
    params: Value,
    capabilities: &Value,
) -> reqwest::RequestBuilder {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = params["name"].as_str() {
        request = request.header("mcp-name", name.to_owned());
    }
    request.json(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
}

/// A raw 2026-07-28 `tools/call` to `url` from a client that can be asked;
/// the answer.
async fn raw(url: &str, id: u64, params: Value) -> Result<Value, TestError> {
    let asked = json!({ "elicitation": {} });
    let request = modern_request(url, id, "tools/call", params, &asked);
    Ok(request.send().await?.json().await?)
}

/// Asserts `reply` refuses the `requestState` it was sent (-32602), for
/// `why`.
fn assert_state_refused(reply: &Value, why: &str) {
    assert_eq!(reply["error"]["code"], json!(-32602), "{reply}");
    assert_eq!(
        reply["error"]["message"],
        json!(format!("requestState refused: {why}")),
        "{reply}"
    );
}

#[tokio::test]
async fn a_parked_call_is_resumed_only_by_its_own_untampered_unexpired_retry()
-> Result<(), TestError> {
    let (url, bridge) = front_at(
        ProtocolVersion::V2025_11_25,
        BridgeOptions {
            park_for: Duration::from_millis(300),
            ..BridgeOptions::default()
        },
    )
    .await?;
    let form = json!({ "name": "ask_form", "arguments": {} });
    let first = raw(&url, 1, form).await?;
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let state = first["result"]["requestState"]
        .as_str()
        .ok_or("no state")?
        .to_owned();
    assert_eq!(bridge.parked(), 1);
    // A retry of `tool` answering the question, carrying `state`.
    let retry = |tool: &str, state: &str| {
        json!({ "name": tool, "arguments": {}, "requestState": state,
                "inputResponses": { "form": { "action": "accept", "content": { "name": "Ada" } } } })
    };

    // A tampered state is refused, and the parked call stays parked.
    let refused = raw(&url, 2, retry("ask_form", &format!("{state}x"))).await?;
    assert_state_refused(&refused, "requestState is malformed");
    // The state is bound to the request: another tool cannot use it.
    let refused = raw(&url, 3, retry("ask_enum", &state)).await?;
    assert_state_refused(&refused, "requestState failed verification");
    assert_eq!(bridge.parked(), 1);

    // Too late: the parked call expired and was cancelled upstream.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let refused = raw(&url, 4, retry("ask_form", &state)).await?;
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no longer waiting")),
        "{refused}"
    );
    assert_eq!(bridge.parked(), 0);
    Ok(())
}

/// Anonymous callers are told apart by their address: one cannot resume
/// (and answer) another's parked call, and each has its own room in the
/// lot rather than one room for all of them.
#[tokio::test]
async fn anonymous_callers_at_other_addresses_neither_resume_nor_crowd_each_others_calls()
-> Result<(), TestError> {
    let (url, bridge) = front_at(ProtocolVersion::V2025_11_25, BridgeOptions::default()).await?;
    let asked = json!({ "elicitation": {} });
    let from = |address: &str| support::client_from(address);
    let (alice, mallory) = (from("127.0.0.1")?, from("127.0.0.2")?);
    let form = json!({ "name": "ask_form", "arguments": {} });
    let first: Value = modern_request_via(&alice, &url, 1, "tools/call", form, &asked)
        .send()
        .await?
        .json()
        .await?;
    let state = first["result"]["requestState"]
        .as_str()
        .ok_or_else(|| format!("no state: {first}"))?
        .to_owned();
    let retry = |who: &str| {
        json!({ "name": "ask_form", "arguments": {}, "requestState": state,
                "inputResponses": { "form": { "action": "accept", "content": { "name": who } } } })
    };
    let hijacked: Value =
        modern_request_via(&mallory, &url, 2, "tools/call", retry("Mallory"), &asked)
            .send()
            .await?
            .json()
            .await?;
    assert_state_refused(&hijacked, "requestState failed verification");
    let answered: Value = modern_request_via(&alice, &url, 3, "tools/call", retry("Ada"), &asked)
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(answered["result"]["resultType"], "complete", "{answered}");

    // Two addresses take 32 places each; a third still parks its call.
    for (n, client) in [&alice, &mallory].into_iter().cycle().take(64).enumerate() {
        let form = json!({ "name": "ask_form", "arguments": {} });
        let id = 10 + u64::try_from(n)?;
        let parked: Value = modern_request_via(client, &url, id, "tools/call", form, &asked)
            .send()
            .await?
            .json()
            .await?;
        assert_eq!(parked["result"]["resultType"], "input_required", "{parked}");
    }
    assert_eq!(bridge.parked(), 64);
    let third = from("127.0.0.3")?;
    let form = json!({ "name": "ask_form", "arguments": {} });
    let parked: Value = modern_request_via(&third, &url, 99, "tools/call", form, &asked)
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(parked["result"]["resultType"], "input_required", "{parked}");
    Ok(())
}

/// A stateless caller at its share of upstream connections, all idle and
/// declaring other capabilities, has one of them give way to a request
/// declaring something else, rather than being refused until they are
/// reaped.
#[tokio::test]
async fn a_callers_idle_connections_give_way_to_its_other_capabilities() -> Result<(), TestError> {
    let (url, bridge) = front_at(
        ProtocolVersion::V2025_11_25,
        BridgeOptions {
            max_upstreams_per_caller: 2,
            ..BridgeOptions::default()
        },
    )
    .await?;
    let client = support::client_from("127.0.0.1")?;
    let declared = json!({ "name": "declared", "arguments": {} });
    for (id, capabilities) in [
        json!({}),
        json!({ "sampling": {} }),
        json!({ "elicitation": {} }),
        json!({ "roots": {} }),
    ]
    .into_iter()
    .enumerate()
    {
        let answer: Value = modern_request_via(
            &client,
            &url,
            u64::try_from(id)?,
            "tools/call",
            declared.clone(),
            &capabilities,
        )
        .send()
        .await?
        .json()
        .await?;
        assert_eq!(
            answer["result"]["resultType"], "complete",
            "{capabilities}: {answer}"
        );
    }
    assert!(
        bridge.connections() <= 3,
        "{} connections",
        bridge.connections()
    );
    Ok(())
}

#[tokio::test]
async fn two_legacy_sessions_get_two_upstream_sessions() -> Result<(), TestError> {
    let (url, bridge) = front_at(ProtocolVersion::V2025_11_25, BridgeOptions::default()).await?;
    let before = bridge.connections();
    let mut clients = Vec::new();
    for _ in 0..2 {
        let options = ConnectOptions {
            client: ClientOptions {
                revisions: vec![ProtocolVersion::V2025_11_25],
                ..ClientOptions::default()
            },
            ..ConnectOptions::default()
        };
        let client = connect(&Target::Url(url.parse()?), options).await?;
        client
            .request("tools/list", None, &RequestOptions::default())
            .await?;
        clients.push(client);
    }
    assert_eq!(bridge.connections(), before + 2);
    Ok(())
}

#[tokio::test]
async fn a_listen_watching_a_resource_subscribes_a_legacy_upstream() -> Result<(), TestError> {
    use futures_util::StreamExt as _;
    let (url, _bridge) = front_at(ProtocolVersion::V2025_11_25, BridgeOptions::default()).await?;
    let watch = json!({ "notifications": { "resourceSubscriptions": ["test://dated"] } });
    let listen = modern_request(&url, 7, "subscriptions/listen", watch, &json!({}))
        .send()
        .await?;
    let mut events = listen.bytes_stream();
    let mut seen = String::new();
    for _ in 0..40 {
        // The upstream hears of the watch asynchronously: touch until the
        // update arrives on the listen stream.
        raw(&url, 8, json!({ "name": "touch", "arguments": {} })).await?;
        if let Ok(Some(chunk)) =
            tokio::time::timeout(Duration::from_millis(100), events.next()).await
        {
            seen.push_str(&String::from_utf8_lossy(&chunk?));
        }
        if seen.contains("notifications/resources/updated") {
            return Ok(());
        }
    }
    Err(format!("no update on the listen stream: {seen}").into())
}

#[tokio::test]
async fn a_2020_12_schema_names_its_dialect_for_older_clients() -> Result<(), TestError> {
    let dialect = "https://json-schema.org/draft/2020-12/schema";
    let older = permissive(ProtocolVersion::V2025_11_25, ProtocolVersion::V2025_06_18).await?;
    let listed = ask(&older, "tools/list", json!({})).await?;
    assert_eq!(
        listed["tools"][1]["inputSchema"]["$schema"], dialect,
        "{listed}"
    );
    // Not a loss: nothing was reported for it.
    assert!(older.bridge.reports().iter().all(|r| {
        r.report
            .downgrades()
            .iter()
            .all(|d| !d.detail.contains("$schema"))
    }),);
    let current = strict(ProtocolVersion::V2025_11_25, ProtocolVersion::V2025_11_25).await?;
    let listed = ask(&current, "tools/list", json!({})).await?;
    assert!(
        listed["tools"][1]["inputSchema"].get("$schema").is_none(),
        "{listed}"
    );
    Ok(())
}

#[tokio::test]
async fn a_completion_context_does_not_reach_a_server_older_than_2025_06_18()
-> Result<(), TestError> {
    let request = json!({ "ref": { "type": "ref/prompt", "name": "p" },
        "argument": { "name": "a", "value": "x" },
        "context": { "arguments": { "b": "y" } } });
    for (upstream, expected) in [
        (ProtocolVersion::V2025_03_26, "without"),
        (ProtocolVersion::V2025_11_25, "with context"),
    ] {
        let rig = strict(upstream, ProtocolVersion::V2025_11_25).await?;
        let reply = ask(&rig, "completion/complete", request.clone()).await?;
        assert_eq!(
            reply["completion"]["values"][0], expected,
            "{upstream}: {reply}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn the_bridge_checks_param_headers_against_the_upstreams_definitions() -> Result<(), TestError>
{
    let (url, _bridge) = front_at(ProtocolVersion::V2026_07_28, BridgeOptions::default()).await?;
    let call = |region_header: Option<&'static str>| {
        let regional = json!({ "name": "regional", "arguments": { "region": "eu" } });
        let mut request = modern_request(&url, 1, "tools/call", regional, &json!({}));
        if let Some(value) = region_header {
            request = request.header("mcp-param-region", value);
        }
        request.send()
    };
    // Never listed by a client: the bridge knew the definition, from the
    // second page of the upstream's list, from the start.
    let missing = call(None).await?;
    assert_eq!(missing.status(), reqwest::StatusCode::BAD_REQUEST);
    let body: Value = missing.json().await?;
    assert_eq!(
        body["error"]["code"],
        ErrorCode::HEADER_MISMATCH.0,
        "{body}"
    );
    let wrong = call(Some("us")).await?;
    assert_eq!(wrong.status(), reqwest::StatusCode::BAD_REQUEST);
    let right = call(Some("eu")).await?;
    assert!(right.status().is_success(), "{}", right.status());

    // The upstream changes the header's name and says so: the bridge lists
    // again, and the old header no longer passes.
    let rename_header = json!({ "name": "rename_header", "arguments": {} });
    let rename = modern_request(&url, 2, "tools/call", rename_header, &json!({}))
        .send()
        .await?;
    assert!(rename.status().is_success(), "{}", rename.status());
    for _ in 0..100 {
        if call(Some("eu")).await?.status() == reqwest::StatusCode::BAD_REQUEST {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err("the renamed header was never required".into())
}

#[tokio::test]
async fn a_legacy_upstream_that_dies_or_hangs_mid_call_fails_only_that_call()
-> Result<(), TestError> {
    // A stateless client in front of a legacy upstream: the call runs on a
    // connection leased to it alone.
    let (rig, _) = in_front_of_bad_at(
        "close-mid-response",
        BridgeOptions::default(),
        Some(ProtocolVersion::V2025_11_25),
        ProtocolVersion::V2026_07_28,
    )
    .await?;
    match ask(&rig, "tools/call", json!({ "name": "anything" })).await {
        Err(ClientError::Server(error)) => assert!(error.message.contains("upstream"), "{error:?}"),
        other => return Err(format!("expected a clear error, got {other:?}").into()),
    }
    match ask(&rig, "tools/list", json!({})).await {
        Err(ClientError::Server(error)) => assert_eq!(error.code, ErrorCode::METHOD_NOT_FOUND),
        other => {
            return Err(format!("expected the new upstream's own answer, got {other:?}").into());
        }
    }

    let (rig, record) = in_front_of_bad_at(
        "silent",
        quick_timeout(),
        Some(ProtocolVersion::V2025_11_25),
        ProtocolVersion::V2026_07_28,
    )
    .await?;
    times_out_and_is_cancelled_upstream(&rig, &record).await
}

#[tokio::test]
async fn include_context_becomes_none_for_a_client_without_sampling_context()
-> Result<(), TestError> {
    for (policy, allowed) in [
        (
            DegradePolicy::permissive().refusing(Feature::SamplingIncludeContext),
            false,
        ),
        (DegradePolicy::permissive(), true),
    ] {
        let rig = rig(
            ProtocolVersion::V2025_11_25,
            ProtocolVersion::V2025_11_25,
            BridgeOptions {
                policy,
                ..BridgeOptions::default()
            },
        )
        .await?;
        let outcome = ask(&rig, "tools/call", json!({ "name": "sample_context" })).await;
        if allowed {
            let reply = outcome?;
            assert_eq!(reply["content"][0]["text"], "sampled", "{reply}");
            let asked = rig.asked()?;
            assert_eq!(asked[0]["includeContext"], "none", "{asked:?}");
            assert_reported(&rig, Feature::SamplingIncludeContext);
        } else {
            assert_refused(outcome, Feature::SamplingIncludeContext)?;
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_question_asked_again_goes_to_the_client_again() -> Result<(), TestError> {
    let rig = permissive(ProtocolVersion::V2025_11_25, ProtocolVersion::V2026_07_28).await?;
    let (reply, asked) = call_tool(&rig, "confirm_twice").await?;
    assert_eq!(
        reply["content"][0]["text"], "\"accept\" \"accept\"",
        "{reply}"
    );
    let messages: Vec<&Value> = asked.iter().map(|a| &a["message"]).collect();
    assert_eq!(
        messages,
        [&json!("Sure?"), &json!("Really sure?")],
        "{asked:?}"
    );
    Ok(())
}

#[tokio::test]
async fn progress_after_a_resumed_round_reaches_the_retry() -> Result<(), TestError> {
    let rig = permissive(ProtocolVersion::V2025_11_25, ProtocolVersion::V2026_07_28).await?;
    let seen = Arc::new(Mutex::new(0_usize));
    let sink = Arc::clone(&seen);
    let options = RequestOptions {
        on_progress: Some(Arc::new(move |_| {
            if let Ok(mut seen) = sink.lock() {
                *seen += 1;
            }
        })),
        ..RequestOptions::default()
    };
    rig.client
        .request(
            "tools/call",
            Some(json!({ "name": "ask_then_progress" })),
            &options,
        )
        .await?;
    assert_eq!(*seen.lock().map_err(|_| "poisoned")?, 1);
    Ok(())
}

/// An upstream that ends as soon as it is used is not started again for
/// every request: after each failed start the next waits longer (0.5 s,
/// then doubling); a request sits out a wait of a second at most, and past
/// that is refused at once, saying when the next start is, rather than
/// each request starting a process.
#[tokio::test]
async fn an_upstream_that_keeps_failing_to_start_is_started_again_only_after_a_wait()
-> Result<(), TestError> {
    let (rig, record) = in_front_of_bad("close-mid-response", BridgeOptions::default()).await?;
    let mut waited = 0;
    let calls = 12;
    for _ in 0..calls {
        if let Err(ClientError::Server(error)) =
            ask(&rig, "tools/call", json!({ "name": "anything" })).await
        {
            if error.message.contains("it is started again in") {
                waited += 1;
            }
        }
    }
    let started = std::fs::read_to_string(&record)?.lines().count();
    assert!(waited > 0, "no call was refused for the wait");
    // The discovering connection, which the first call uses, then one
    // more start for each later call that was not refused.
    assert_eq!(
        started,
        2 + calls - 1 - waited,
        "{started} starts, {waited} waited"
    );
    Ok(())
}

#[tokio::test]
async fn without_restarts_an_ended_upstream_refuses_every_later_request() -> Result<(), TestError> {
    let (rig, _) = in_front_of_bad(
        "close-mid-response",
        BridgeOptions {
            restart: false,
            ..BridgeOptions::default()
        },
    )
    .await?;
    let _ = ask(&rig, "tools/call", json!({ "name": "anything" })).await;
    for _ in 0..2 {
        match ask(&rig, "tools/list", json!({})).await {
            Err(ClientError::Server(error)) => {
                assert!(error.message.contains("does not restart"), "{error:?}");
            }
            other => return Err(format!("expected a refusal, got {other:?}").into()),
        }
    }
    Ok(())
}
