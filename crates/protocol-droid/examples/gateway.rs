//! A gateway: several upstream servers behind one catalog, each tool named
//! `upstream/tool` and pinned to the digest of its definition.
//!
//! `cargo run --example gateway -- 'everything=npx -y @modelcontextprotocol/server-everything'
//! 'calc=target/debug/examples/stdio_server'` serves both on stdio.

#![allow(clippy::print_stderr)]

use protocol_droid::adapters::primary::stdio::{StdioOptions, serve_process};
use protocol_droid::adapters::secondary::connect::{ConnectOptions, Target, connector};
use protocol_droid::application::gateway::{Disclosure, Gateway, Pins, Trust, UpstreamOptions};
use protocol_droid::application::server::Server;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let builder = Server::builder("example-gateway", "1.0.0");
    let gateway = Gateway::build(builder, Disclosure::Default, Pins::default())?;
    for spec in std::env::args().skip(1) {
        let (name, command) = spec.split_once('=').ok_or("upstreams are name=command")?;
        let target = Target::command(command.split_whitespace())?;
        // Trust on first use: today's definitions are pinned; a change later
        // is held back until approved.
        let mut options = UpstreamOptions::default();
        options.trust = Trust::OnFirstUse;
        // The gateway opens the upstream through the connector, and opens it
        // again whenever it dies; an upstream that fails here is retried in
        // the background while the others serve.
        if let Err(error) = gateway
            .add_upstream(name, connector(target, ConnectOptions::default()), options)
            .await
        {
            eprintln!("{error}");
        }
    }
    serve_process(gateway.server().clone(), StdioOptions::default()).await?;
    Ok(())
}
