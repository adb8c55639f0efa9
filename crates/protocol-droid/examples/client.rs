//! A client: connects to a server (a command line, or an `http(s)://` URL),
//! settles a revision, lists the tools and calls one.
//!
//! `cargo run --example client -- <server command or URL>`; with no
//! argument it starts the `stdio_server` example beside it (build it first
//! with `cargo build --example stdio_server`).

// An example talks to whoever runs it.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use protocol_droid::adapters::secondary::connect::{ConnectOptions, Target, connect};
use protocol_droid::application::client::RequestOptions;
use protocol_droid::domain::ir::ContentBlock;
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let target = match args.first() {
        Some(url) if url.starts_with("http://") || url.starts_with("https://") => Target::url(url)?,
        Some(_) => Target::command(&args)?,
        None => {
            let beside = std::env::current_exe()?.with_file_name("stdio_server");
            Target::command([beside])?
        }
    };

    let client = connect(&target, ConnectOptions::default()).await?;
    let version = client.version().ok_or("no revision was settled")?;
    println!("connected to {target} at {version}");

    let tools = client.list_all_tools().await?;
    for tool in &tools {
        let about = tool.description.as_deref().unwrap_or_default();
        println!("tool {}: {about}", tool.name);
    }
    // `add`, or a gateway's `upstream/add`.
    let Some(add) = tools
        .iter()
        .find(|t| t.name == "add" || t.name.ends_with("/add"))
    else {
        return Ok(());
    };
    let arguments = json!({ "a": 2, "b": 40 });
    let reply = client
        .call_tool(
            &add.name,
            arguments.as_object().cloned(),
            &RequestOptions::default(),
        )
        .await?;
    for block in reply.value.content {
        if let ContentBlock::Text(text) = block {
            println!("{}(2, 40) = {}", add.name, text.text);
        }
    }
    client.close().await;
    Ok(())
}
