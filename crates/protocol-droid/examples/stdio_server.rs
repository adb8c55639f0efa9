//! A calculator MCP server on stdio, with one typed tool: its input schema
//! comes from `Add`, its output schema from `Sum`, and the handler receives
//! an `Add` already read from the call's arguments.
//!
//! `cargo run --example stdio_server`, then point any MCP client at it.

use protocol_droid::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Deserialize, JsonSchema)]
struct Add {
    a: f64,
    b: f64,
}

#[derive(Serialize, JsonSchema)]
struct Sum {
    sum: f64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = Server::builder("calculator", "1.0.0").build()?;
    let add = ToolSpec::new("add", "Adds two numbers");
    server.add_typed_tool(add, |Add { a, b }, _| async move {
        Ok(Structured(Sum { sum: a + b }))
    });
    Ok(serve_process(server, StdioOptions::default()).await?)
}
