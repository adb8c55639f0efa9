//! A gateway: several upstream servers behind one catalog, each tool named
//! `upstream/tool` and pinned to the digest of its definition.
//!
//! `cargo run --example gateway -- 'everything=npx -y @modelcontextprotocol/server-everything'
//! 'calc=target/debug/examples/stdio_server'` serves both on stdio.

use protocol_droid::adapters::primary::stdio::{StdioOptions, serve_process};
use protocol_droid::adapters::secondary::connect::{ConnectOptions, Target, connect};
use protocol_droid::application::client::ClientOptions;
use protocol_droid::application::gateway::{Disclosure, Gateway, Pins, Trust};
use protocol_droid::application::server::Server;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let builder = Server::builder("example-gateway", "1.0.0");
    let gateway = Gateway::build(builder, Disclosure::Default, Pins::default())?;
    for spec in std::env::args().skip(1) {
        let (name, command) = spec.split_once('=').ok_or("upstreams are name=command")?;
        let target = Target::command(command.split_whitespace())?;
        let options = ConnectOptions {
            client: ClientOptions {
                // Change notices from this upstream refresh its part of the catalog.
                handler: gateway.notices_for(name),
                ..ClientOptions::default()
            },
            ..ConnectOptions::default()
        };
        let client = connect(&target, options).await?;
        // Trust on first use: today's definitions are pinned; a change later
        // is held back until approved.
        gateway
            .add_upstream(name, client, Trust::OnFirstUse)
            .await?;
    }
    serve_process(gateway.server().clone(), StdioOptions::default()).await?;
    Ok(())
}
