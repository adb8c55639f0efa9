//! The calculator of `stdio_server`, on Streamable HTTP (both eras on
//! `/mcp`) and the 2024-11-05 HTTP+SSE transport, on loopback.
//!
//! `cargo run --example http_server [ADDRESS]`, then connect a client to
//! `http://127.0.0.1:8000/mcp` (or the address given). Ctrl-C stops it, letting calls in flight
//! finish.

// An example talks to whoever runs it.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use protocol_droid::prelude::*;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
struct Pair {
    /// The first number.
    a: f64,
    /// The second number.
    b: f64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = Server::builder("calculator", "1.0.0").build()?;
    server.add_typed_tool(
        ToolSpec::new("add", "Adds two numbers"),
        |Pair { a, b }, _| async move { Ok(format!("{}", a + b)) },
    );
    let address = std::env::args().nth(1);
    let address = address.as_deref().unwrap_or("127.0.0.1:8000");
    let listener = tokio::net::TcpListener::bind(address).await?;
    eprintln!("serving on http://{}/mcp", listener.local_addr()?);
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    HttpServer::new(server, HttpOptions::default())
        .serve(listener, shutdown)
        .await?;
    Ok(())
}
