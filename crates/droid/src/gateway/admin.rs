//! `droid gateway status` and `droid gateway approve`: a running gateway
//! asked through its admin socket, and where that socket is.

// Indexing a `serde_json::Value` yields `Null` for a missing member and never
// panics, which is what reading the gateway's reply wants.
#![allow(clippy::indexing_slicing)]

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use protocol_droid::adapters::primary::admin::{AdminRequest, admin_request};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::config::{Config, state_base};
use super::load::load;

/// What to ask a running gateway.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Action {
    /// Show each upstream's health, the tools awaiting approval, and recent
    /// drift.
    Status {
        /// Print the gateway's answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Approve tools as they are now: each one's current digest becomes
    /// its pin, kept across restarts, and it is callable again at once.
    Approve {
        /// Tool ids, as `status` or `--print-digests` show them.
        #[arg(required = true, value_name = "ID")]
        ids: Vec<String>,
    },
}

/// The admin socket of the gateway run with `config`: `explicit` if given,
/// else the configuration's `admin_socket`, else one under the user's state
/// directory named after the configuration's path (short: a socket's path
/// is limited to about a hundred bytes).
pub(crate) fn socket(
    config_path: Option<&Path>,
    config: &Config,
    explicit: Option<&Path>,
) -> Option<PathBuf> {
    if let Some(path) = explicit.or(config.admin_socket.as_deref()) {
        return Some(path.to_path_buf());
    }
    let name = match config_path {
        Some(path) => std::fs::canonicalize(path)
            .unwrap_or_else(|_| path.to_path_buf())
            .to_string_lossy()
            .into_owned(),
        None => "the embedded default".to_owned(),
    };
    let digest = Sha256::digest(name.as_bytes());
    let short: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    Some(
        state_base()?
            .join("droid")
            .join("gateway")
            .join(format!("{short}.sock")),
    )
}

/// `droid gateway status|approve`.
pub(crate) fn ask(
    config_path: Option<&Path>,
    explicit: Option<&Path>,
    action: &Action,
) -> anyhow::Result<()> {
    let config = load(config_path)?;
    let path = socket(config_path, &config, explicit)
        .context("no admin socket: set --admin-socket (or HOME, or XDG_STATE_HOME)")?;
    let request = match action {
        Action::Status { .. } => AdminRequest::Status,
        Action::Approve { ids } => AdminRequest::Approve { ids: ids.clone() },
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let reply = runtime
        .block_on(admin_request(&path, &request))
        .with_context(|| format!("asking the gateway at {}", path.display()))?;
    let mut out = std::io::stdout().lock();
    use std::io::Write as _;
    match action {
        Action::Status { json: true } => {
            writeln!(out, "{}", serde_json::to_string_pretty(&reply["status"])?)?;
        }
        Action::Status { json: false } => print_status(&mut out, &reply["status"])?,
        Action::Approve { .. } => {
            for approved in reply["approved"].as_array().into_iter().flatten() {
                writeln!(
                    out,
                    "approved {:<40} {}",
                    text(&approved["id"]),
                    text(&approved["digest"])
                )?;
            }
            if let Some(why) = reply["notKept"].as_str() {
                anyhow::bail!(
                    "the approvals hold until the gateway stops, but were not kept: {why}"
                );
            }
        }
    }
    Ok(())
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or("-")
}

fn print_status(out: &mut impl std::io::Write, status: &Value) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<24} {:<10} {:>5}  health",
        "upstream", "state", "tools"
    )?;
    for upstream in status["upstreams"].as_array().into_iter().flatten() {
        writeln!(
            out,
            "{:<24} {:<10} {:>5}  {}",
            text(&upstream["name"]),
            text(&upstream["state"]),
            upstream["tools"].as_u64().unwrap_or(0),
            text(&upstream["health"])
        )?;
    }
    let unverified = status["unverified"].as_array().cloned().unwrap_or_default();
    if !unverified.is_empty() {
        writeln!(out, "\nawaiting approval (droid gateway approve ID…):")?;
        for tool in &unverified {
            writeln!(out, "  {:<40} {}", text(&tool["id"]), text(&tool["digest"]))?;
        }
    }
    let drift = status["drift"].as_array().cloned().unwrap_or_default();
    if !drift.is_empty() {
        writeln!(out, "\nrecent changes:")?;
        for change in &drift {
            writeln!(
                out,
                "  {:<40} {} -> {} ({} activation(s) dropped)",
                text(&change["id"]),
                text(&change["old"]),
                text(&change["new"]),
                change["droppedActivations"].as_u64().unwrap_or(0)
            )?;
        }
    }
    Ok(())
}
