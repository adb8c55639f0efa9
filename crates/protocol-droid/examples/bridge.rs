//! A bridge: any MCP client in front of any MCP server, translating only
//! where their revisions differ, under an explicit degrade policy.
//!
//! `cargo run --example bridge -- <server command line>` serves, on stdio,
//! the server that command starts; every downgrade made for the client is
//! reported in the bridge's log.

// An example talks to whoever runs it.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use protocol_droid::adapters::primary::stdio::{StdioOptions, serve_process};
use protocol_droid::adapters::secondary::connect::{ConnectOptions, Target, connector};
use protocol_droid::application::bridge::{Bridge, BridgeOptions};
use protocol_droid::domain::DegradePolicy;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let upstream = Target::command(&argv)?;
    let options = BridgeOptions {
        // Allow every downgrade, and say so in each reply's `_meta`.
        policy: DegradePolicy::permissive(),
        report_meta: true,
        ..BridgeOptions::default()
    };
    let bridge = Bridge::connect(connector(upstream, ConnectOptions::default()), options).await?;
    eprintln!("bridging to an upstream at {}", bridge.upstream().version);
    let server = bridge.server(|builder| builder)?;
    serve_process(server, StdioOptions::default()).await?;
    Ok(())
}
