//! `droid gateway status` and `droid gateway approve`: a running gateway
//! asked through its admin socket, and where that socket is.

// Indexing a `serde_json::Value` yields `Null` for a missing member and never
// panics, which is what reading the gateway's reply wants.
#![allow(clippy::indexing_slicing)]

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use protocol_droid::adapters::primary::admin::{AdminRequest, admin_request};
use serde_json::Value;

use super::config::{path_digest, state_base};
use crate::terminal::shown_json;

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
        /// Tool ids; `ID@DIGEST`, as `status` shows them, refuses a tool
        /// that changed since it was shown.
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
    configured: Option<&Path>,
    explicit: Option<&Path>,
) -> Option<PathBuf> {
    if let Some(path) = explicit.or(configured) {
        return Some(path.to_path_buf());
    }
    Some(
        state_base()?
            .join("droid")
            .join("gateway")
            .join(format!("{}.sock", path_digest(config_path))),
    )
}

/// The `admin_socket` a TOML configuration names, read without the rest:
/// asking a running gateway needs no secret of its configuration (no
/// variable expanded, no token read). The JSON forms name none.
fn configured_socket(config_path: Option<&Path>) -> anyhow::Result<Option<PathBuf>> {
    #[derive(serde::Deserialize)]
    struct Only {
        admin_socket: Option<PathBuf>,
    }
    let Some(path) = config_path else {
        return Ok(None);
    };
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
    {
        return Ok(None);
    }
    let text = super::load::config_text(path)?;
    match super::load::from_toml::<Only>(&text) {
        Ok(only) => Ok(only.admin_socket),
        // Broken elsewhere (mid-edit, say): the key is a top-level one, so
        // it is before the first table, on a line of its own.
        Err(error) => {
            let line = text
                .lines()
                .take_while(|line| !line.trim_start().starts_with('['))
                .find(|line| line.trim_start().starts_with("admin_socket"));
            match line.map(super::load::from_toml::<Only>) {
                Some(Ok(only)) => Ok(only.admin_socket),
                _ => Err(error).with_context(|| format!("reading {} as TOML", path.display())),
            }
        }
    }
}

/// [`configured_socket`], or none when the file cannot be read now: a
/// broken file is when an operator most needs to ask whether its reload
/// failed, so the socket named after the path is asked instead.
fn configured_socket_or_default(config_path: Option<&Path>) -> Option<PathBuf> {
    match configured_socket(config_path) {
        Ok(socket) => socket,
        Err(error) => {
            tracing::warn!(
                target: "droid",
                "{error:#}; asking the gateway at the socket named after the configuration's path"
            );
            None
        }
    }
}

/// `droid gateway status|approve`.
pub(crate) fn ask(
    config_path: Option<&Path>,
    explicit: Option<&Path>,
    action: &Action,
) -> anyhow::Result<()> {
    let path = socket(
        config_path,
        configured_socket_or_default(config_path).as_deref(),
        explicit,
    )
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
    // The status piped into a reader that stopped early (`| head`) was
    // read as far as it wanted: not a failure worth a message.
    let quiet = |written: std::io::Result<()>| match written {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    };
    match action {
        Action::Status { json: true } => {
            let written = serde_json::to_string_pretty(&reply["status"])?;
            quiet(writeln!(out, "{}", shown_json(&written)))?;
        }
        Action::Status { json: false } => quiet(print_status(&mut out, &reply["status"]))?,
        Action::Approve { .. } => {
            for approved in reply["approved"].as_array().into_iter().flatten() {
                writeln!(
                    out,
                    "approved {:<40} {}",
                    text(&approved["id"]),
                    text(&approved["digest"])
                )?;
            }
            let (not_kept, not_shared) = (reply["notKept"].as_str(), reply["notShared"].as_str());
            match (not_kept, not_shared) {
                (None, None) => {}
                (Some(why), None) => anyhow::bail!(
                    "the approvals hold until the gateway stops, but were not kept: {why}"
                ),
                (None, Some(why)) => anyhow::bail!(
                    "the approvals hold on this instance and are kept in its state, but the \
                     other instances do not hold them (the shared store failed): {why}"
                ),
                (Some(kept), Some(shared)) => anyhow::bail!(
                    "the approvals hold on this instance until it stops, but were not kept \
                     ({kept}), and the other instances do not hold them (the shared store \
                     failed: {shared})"
                ),
            }
        }
    }
    Ok(())
}

/// A string of the status as the terminal may show it ([`crate::terminal::shown`]):
/// names and messages come from upstreams, which are not trusted.
fn text(value: &Value) -> std::borrow::Cow<'_, str> {
    crate::terminal::shown(value.as_str().unwrap_or("-"))
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
        // Each line is what `approve` takes: the id with the digest seen,
        // so what is approved is what was looked at.
        writeln!(
            out,
            "\nawaiting approval (droid gateway approve ID@DIGEST…):"
        )?;
        for tool in &unverified {
            writeln!(out, "  {}@{}", text(&tool["id"]), text(&tool["digest"]))?;
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
