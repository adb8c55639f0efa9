//! `conformance-client URL`: the client the official conformance suite runs
//! in client mode, one scenario per process, chosen by
//! `MCP_CONFORMANCE_SCENARIO`.
//!
//! Every scenario goes through the library's own client: the era probe, the
//! transports, the handler and the authorizer are the ones users get. What
//! differs per scenario is only which requests are made once connected.

mod auth;
mod handler;

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use protocol_droid::adapters::secondary::connect::{ConnectOptions, Target, connect};
use protocol_droid::application::client::{Client, ClientOptions, RequestOptions};
use protocol_droid::domain::ProtocolVersion;
use protocol_droid::domain::ir::JsonObject;
use protocol_droid::wire::Tool;
use serde_json::{Value, json};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DROID_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<()> {
    let url = std::env::args()
        .nth(1)
        .context("usage: conformance-client URL")?;
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let context = std::env::var("MCP_CONFORMANCE_CONTEXT").ok();
    let revisions = match std::env::var("MCP_CONFORMANCE_PROTOCOL_VERSION") {
        Ok(wire) => vec![
            ProtocolVersion::from_wire(&wire)
                .with_context(|| format!("unknown protocol version {wire}"))?,
        ],
        Err(_) => ProtocolVersion::ALL.to_vec(),
    };
    let authorizer = auth::authorizer(&scenario, context.as_deref(), &url)?;
    let mut client = ClientOptions {
        revisions,
        handler: Arc::new(handler::Conformance),
        ..ClientOptions::default()
    };
    client.client_info.name = "protocol-droid-conformance-client".to_owned();
    let options = ConnectOptions {
        client,
        authorizer,
        ..ConnectOptions::default()
    };
    let client = connect(&Target::url(&url)?, options)
        .await
        .with_context(|| format!("connecting to {url}"))?;
    let outcome = exercise(&client, &scenario, context.as_deref()).await;
    client.close().await;
    outcome
}

/// The requests each scenario needs once connected.
async fn exercise(client: &Client, scenario: &str, context: Option<&str>) -> anyhow::Result<()> {
    let tools = client.list_all_tools().await?;
    let context: Value = context
        .map(serde_json::from_str)
        .transpose()?
        .unwrap_or(Value::Null);
    if let Some(calls) = context.get("toolCalls").and_then(Value::as_array) {
        for call in calls {
            let name = call.get("name").and_then(Value::as_str).unwrap_or_default();
            let arguments = call.get("arguments").and_then(Value::as_object).cloned();
            call_tool(client, name, arguments).await?;
        }
        return Ok(());
    }
    match scenario {
        "initialize" | "json-schema-ref-no-deref" | "request-metadata" => Ok(()),
        "tools_call" => {
            let arguments = json!({ "a": 5, "b": 3 });
            call_tool(client, "add_numbers", arguments.as_object().cloned()).await
        }
        "json-schema-2020-12-preservation" => {
            let focal = tools
                .iter()
                .find(|t| t.name == "json_schema_2020_12_tool")
                .context("the focal tool is not listed")?;
            let arguments = json!({ "schema": focal.input_schema });
            call_tool(client, "json_schema_echo", arguments.as_object().cloned()).await
        }
        "http-standard-headers" => every_primitive(client, &tools).await,
        // Every tool in list order: the MRTR scenario relies on the order,
        // the invalid-header one on only valid tools being left.
        _ => {
            for tool in &tools {
                call_tool(client, &tool.name, Some(arguments_for(tool))).await?;
            }
            Ok(())
        }
    }
}

async fn call_tool(
    client: &Client,
    name: &str,
    arguments: Option<JsonObject>,
) -> anyhow::Result<()> {
    let reply = client
        .call_tool(name, arguments, &RequestOptions::default())
        .await
        .with_context(|| format!("calling {name}"))?;
    tracing::info!(tool = name, result = %reply.raw, "called");
    Ok(())
}

/// One request of each kind the server offers.
async fn every_primitive(client: &Client, tools: &[Tool]) -> anyhow::Result<()> {
    if let Some(tool) = tools.first() {
        call_tool(client, &tool.name, Some(arguments_for(tool))).await?;
    }
    if let Ok(resources) = client.list_all_resources().await {
        if let Some(resource) = resources.first() {
            client.read_resource(&resource.uri).await?;
        }
    }
    if let Ok(prompts) = client.list_all_prompts().await {
        if let Some(prompt) = prompts.first() {
            client.get_prompt(&prompt.name, None).await?;
        }
    }
    Ok(())
}

/// Plausible arguments for a tool: a value of the right type for each
/// required property.
fn arguments_for(tool: &Tool) -> JsonObject {
    let schema = &tool.input_schema;
    let properties = schema.get("properties").and_then(Value::as_object);
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut arguments = JsonObject::new();
    for name in required.iter().filter_map(Value::as_str) {
        let kind = properties
            .and_then(|p| p.get(name))
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str);
        let value = match kind {
            Some("integer") => json!(1),
            Some("number") => json!(1.5),
            Some("boolean") => json!(true),
            Some("object") => json!({}),
            Some("array") => json!([]),
            _ => json!("test"),
        };
        arguments.insert(name.to_owned(), value);
    }
    arguments
}
