//! `droid`: the protocol-droid command line.
//!
//! This is the only place in the project that uses `anyhow` and prints to the
//! terminal; everything it does is a call into the `protocol-droid` library.

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use protocol_droid::domain::{
    CapabilitySet, Feature, Negotiation, ProtocolVersion, TransportKind, resolve,
};

/// MCP for every published revision: serve, bridge, aggregate, call.
#[derive(Debug, Parser)]
#[command(name = "droid", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Describe the built-in fixture server this build will serve.
    ///
    /// The server runtime is not part of this build yet; this prints what
    /// `droid serve` is going to do and exits successfully.
    Serve {
        /// Serve Streamable HTTP at http://HOST:PORT/mcp instead of stdio.
        #[arg(long, value_name = "HOST:PORT")]
        listen: Option<String>,
        /// Restrict the revisions offered, e.g. `2025-11-25,2026-07-28`.
        #[arg(long, value_delimiter = ',', value_name = "R,R,...")]
        revisions: Vec<String>,
    },
    /// Print which features each MCP revision allows, as this build resolves them.
    Revisions {
        /// Resolve as if over this transport.
        #[arg(long, value_enum, default_value = "stdio")]
        transport: Transport,
    },
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Transport {
    Stdio,
    StreamableHttp,
    HttpSse,
}

impl From<Transport> for TransportKind {
    fn from(transport: Transport) -> Self {
        match transport {
            Transport::Stdio => Self::Stdio,
            Transport::StreamableHttp => Self::StreamableHttp,
            Transport::HttpSse => Self::HttpSse,
        }
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let mut out = std::io::stdout().lock();
    match cli.command {
        Command::Serve { listen, revisions } => serve_plan(&mut out, listen, &revisions),
        Command::Revisions { transport } => revision_table(&mut out, transport.into()),
    }
}

fn offered(revisions: &[String]) -> anyhow::Result<Vec<ProtocolVersion>> {
    if revisions.is_empty() {
        return Ok(ProtocolVersion::ALL.to_vec());
    }
    revisions
        .iter()
        .map(|r| r.parse::<ProtocolVersion>().context("--revisions"))
        .collect()
}

fn serve_plan(
    out: &mut impl std::io::Write,
    listen: Option<String>,
    revisions: &[String],
) -> anyhow::Result<()> {
    let offered = offered(revisions)?;
    let names: Vec<&str> = offered.iter().map(|v| v.as_str()).collect();
    let transport = listen.map_or_else(
        || "stdio".to_owned(),
        |addr| format!("Streamable HTTP at http://{addr}/mcp and HTTP+SSE at /sse"),
    );
    writeln!(out, "droid serve: the built-in MCP fixture server")?;
    writeln!(out, "  transport: {transport}")?;
    writeln!(out, "  revisions: {}", names.join(", "))?;
    writeln!(
        out,
        "This build carries the protocol core (revisions, negotiation, codecs, translation);"
    )?;
    writeln!(
        out,
        "the server runtime that answers on this transport is not part of it yet."
    )?;
    writeln!(
        out,
        "Run `droid revisions` to see what each revision allows."
    )?;
    Ok(())
}

fn revision_table(out: &mut impl std::io::Write, transport: TransportKind) -> anyhow::Result<()> {
    write!(out, "{:<28}", "feature")?;
    for version in ProtocolVersion::ALL {
        write!(out, " {version}")?;
    }
    writeln!(out)?;
    let profiles: Vec<_> = ProtocolVersion::ALL
        .into_iter()
        .map(|version| {
            let caps = CapabilitySet::all_for(version);
            resolve(Negotiation {
                version,
                client_caps: caps,
                server_caps: caps,
                transport,
            })
        })
        .collect();
    for feature in Feature::ALL {
        write!(out, "{:<28}", format!("{feature:?}"))?;
        for profile in &profiles {
            let mark = if profile.allows(feature) { "yes" } else { "-" };
            write!(out, " {mark:^10}")?;
        }
        writeln!(out)?;
    }
    Ok(())
}
