//! The configuration read again on SIGHUP and whenever its file changes,
//! applied to the running gateway without dropping its sessions.
//!
//! What changed is applied, nothing else: an upstream added is connected,
//! one removed is closed (its tools leave the sessions that had them), one
//! whose settings changed is replaced; pins and scope rules take effect at
//! once. `listen`, `mode`, `state` and `admin_socket` are read at start
//! only, and a change to them is said in the log. A file that no longer
//! reads leaves the running configuration as it is.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use protocol_droid::adapters::secondary::tls::Trust as TlsTrust;
use protocol_droid::application::gateway::Gateway;
use tokio::signal::unix::{SignalKind, signal};
use tokio::task::JoinHandle;

use super::build::{add_upstreams, set_scopes};
use super::config::{Config, UpstreamConfig};
use super::load::load;

/// How often the file is looked at for a change.
const POLL: Duration = Duration::from_secs(1);

/// Watches `path` for as long as the returned task runs.
pub(crate) fn watch(
    gateway: Gateway,
    path: PathBuf,
    mut current: Config,
    cli_scopes: Vec<(String, String)>,
    tls_trust: TlsTrust,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut hangups = signal(SignalKind::hangup()).ok();
        let mut seen = stamp(&path);
        let mut tick = tokio::time::interval(POLL);
        loop {
            let hangup = async {
                match hangups.as_mut() {
                    Some(signal) => signal.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = hangup => {}
                _ = tick.tick() => {
                    if stamp(&path) == seen {
                        continue;
                    }
                }
            }
            seen = stamp(&path);
            match load(Some(&path)) {
                Ok(next) => {
                    apply(&gateway, &current, &next, &cli_scopes, &tls_trust).await;
                    current = next;
                }
                Err(error) => tracing::error!(
                    target: "droid",
                    "reloading {}: {error:#}; the running configuration stays",
                    path.display()
                ),
            }
        }
    })
}

/// What tells one version of the file from another.
fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

async fn apply(
    gateway: &Gateway,
    old: &Config,
    new: &Config,
    cli_scopes: &[(String, String)],
    tls_trust: &TlsTrust,
) {
    if old.listen != new.listen
        || old.mode != new.mode
        || old.state != new.state
        || old.admin_socket != new.admin_socket
    {
        tracing::warn!(
            target: "droid",
            "listen, mode, state and admin_socket take effect at the next start"
        );
    }
    let before: BTreeMap<&str, &UpstreamConfig> =
        old.enabled().map(|u| (u.name.as_str(), u)).collect();
    let after: BTreeMap<&str, &UpstreamConfig> =
        new.enabled().map(|u| (u.name.as_str(), u)).collect();
    let mut stopped = 0;
    for (name, upstream) in &before {
        if after.get(name) != Some(upstream) {
            gateway.remove_upstream(name).await;
            stopped += 1;
        }
    }
    let started: Vec<&UpstreamConfig> = after
        .iter()
        .filter(|(name, upstream)| before.get(*name) != Some(*upstream))
        .map(|(_, upstream)| *upstream)
        .collect();
    let count = started.len();
    if let Err(error) = add_upstreams(gateway, started, tls_trust).await {
        tracing::error!(target: "droid", "reloading: {error:#}");
    }
    if old.pins != new.pins {
        match new.pins() {
            Ok(pins) => gateway.set_pins(pins),
            Err(error) => tracing::error!(target: "droid", "reloading the pins: {error:#}"),
        }
    }
    if let Err(error) = set_scopes(new, cli_scopes, gateway) {
        tracing::error!(
            target: "droid",
            "reloading the scope rules: {error:#}; the running rules stay"
        );
    }
    tracing::info!(
        target: "droid",
        "configuration reloaded: {count} upstream(s) started, {stopped} stopped"
    );
}
