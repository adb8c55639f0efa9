//! The configuration read again on SIGHUP and whenever its file changes,
//! applied to the running gateway without a restart.
//!
//! A new configuration is checked whole before anything changes: it must
//! read, its pins must be digests, every upstream to start must be
//! reachable as configured (its token variable set, its CA file readable),
//! and every scope rule must name one of its upstreams (and one of the
//! tools of an upstream that stays as it is). Only then is it applied, in
//! the order that never opens what a rule or a pin closes: the new scope
//! rules and pins first, then the upstreams stopped, replaced and started,
//! and last the rules no longer wanted are dropped, once every rule names a
//! tool; until then the old rules stay in force beside the new. An upstream
//! whose settings changed is replaced before the break: its old connection
//! serves on until the new one has listed its tools, so sessions keep the
//! activations of the tools it still lists, and trust on first use holds it
//! to what it showed first.
//! `listen`, `mode`, `state`, `admin_socket`, `[limits]` and `[store]` are
//! read at start only.
//!
//! A file is applied once it has read the same on two looks a second apart,
//! so an editor caught halfway through writing it is not taken at its word.
//! A file that fails the check is said in the log and the running
//! configuration stays, until the file changes again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use protocol_droid::adapters::primary::http::SupportedScopes;
use protocol_droid::adapters::secondary::tls::Trust as TlsTrust;
use protocol_droid::application::gateway::{Gateway, uri_prefix};
use protocol_droid::application::server::Primitive;
use sha2::{Digest as _, Sha256};
use tokio::signal::unix::{SignalKind, signal};
use tokio::task::JoinHandle;

use super::build::{
    Install, add_prepared, add_scopes, check_scopes, prepare_all, primitive_rules, rule_scopes,
    scope_rules, set_scopes,
};
use super::config::{Config, UpstreamConfig};
use super::load::load;

/// How often the file is looked at.
const POLL: Duration = Duration::from_secs(1);

/// Watches `path` for as long as the returned task runs.
/// `current` is the configuration running, read from contents whose digest
/// is `applied` (see [`contents`], taken before it was read).
pub(crate) fn watch(
    gateway: Gateway,
    path: PathBuf,
    mut current: Config,
    mut applied: Option<[u8; 32]>,
    cli_scopes: Vec<(String, String)>,
    advertised: SupportedScopes,
    tls_trust: TlsTrust,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut hangups = signal(SignalKind::hangup()).ok();
        let mut settling = None;
        let mut tick = tokio::time::interval(POLL);
        // Two looks are a second apart even after a long reload.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let hangup = async {
                match hangups.as_mut() {
                    Some(signal) => signal.recv().await,
                    None => std::future::pending().await,
                }
            };
            let seen = tokio::select! {
                _ = hangup => off_thread(&path, contents).await.flatten(),
                _ = tick.tick() => {
                    let seen = off_thread(&path, contents).await.flatten();
                    if seen == applied {
                        settling = None;
                        continue;
                    }
                    // Changed: taken once it reads the same a second later.
                    if settling != Some(seen) {
                        settling = Some(seen);
                        continue;
                    }
                    seen
                }
            };
            settling = None;
            applied = seen;
            let next = match off_thread(&path, |path| load(Some(path))).await {
                Some(Ok(next)) => next,
                None => {
                    tracing::error!(
                        target: "droid",
                        "reloading {}: reading the file failed; the running configuration stays",
                        path.display()
                    );
                    continue;
                }
                Some(Err(error)) => {
                    tracing::error!(
                        target: "droid",
                        "reloading {}: {error:#}; the running configuration stays",
                        path.display()
                    );
                    continue;
                }
            };
            match apply(&gateway, &current, &next, &cli_scopes, &tls_trust).await {
                Ok(()) => {
                    // What a challenge asks for follows the rules in force.
                    if let Err(error) = advertised.set(rule_scopes(&next, &cli_scopes)) {
                        tracing::error!(target: "droid", "listing the reloaded scopes: {error}");
                    }
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

/// `read` of `path`, run off the serving thread: a gateway on stdio serves
/// on one thread, and a slow file system must not stall its sessions and
/// upstreams once a second. `None` only if `read` panicked.
async fn off_thread<T: Send + 'static>(
    path: &Path,
    read: impl FnOnce(&Path) -> T + Send + 'static,
) -> Option<T> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || read(&path)).await.ok()
}

/// The file's contents, as a digest; `None` when it cannot be read as a
/// configuration is ([`super::load::config_text`]).
pub(crate) fn contents(path: &Path) -> Option<[u8; 32]> {
    let text = super::load::config_text(path).ok()?;
    Some(Sha256::digest(text.as_bytes()).into())
}

/// Applies `new` over `old`, after checking it whole; nothing changes when
/// the check fails.
async fn apply(
    gateway: &Gateway,
    old: &Config,
    new: &Config,
    cli_scopes: &[(String, String)],
    tls_trust: &TlsTrust,
) -> anyhow::Result<()> {
    let before: BTreeMap<&str, &UpstreamConfig> =
        old.enabled().map(|u| (u.name.as_str(), u)).collect();
    let after: BTreeMap<&str, &UpstreamConfig> =
        new.enabled().map(|u| (u.name.as_str(), u)).collect();
    let started = after
        .iter()
        .filter(|(name, upstream)| before.get(*name) != Some(*upstream))
        .map(|(_, upstream)| *upstream);
    let stopped: Vec<&str> = before
        .keys()
        .filter(|name| !after.contains_key(*name))
        .copied()
        .collect();
    let replaced: Vec<&str> = before
        .iter()
        .filter(|(name, upstream)| after.get(*name).is_some_and(|new| new != *upstream))
        .map(|(name, _)| *name)
        .collect();
    // The check, before anything changes.
    let pins = new.pins()?;
    let prepared = prepare_all(started, tls_trust)?;
    let rules = scope_rules(new, cli_scopes);
    // Each scope a rule names must be one a token can hold, as at start:
    // checked here, so that what the challenge lists never lags behind
    // the rules in force.
    SupportedScopes::default()
        .set(rule_scopes(new, cli_scopes))
        .context("a scope rule")?;
    let mut staying = BTreeMap::new();
    for (id, scope) in &rules {
        let upstream = id.as_str().split_once('/').map(|(upstream, _)| upstream);
        anyhow::ensure!(
            upstream.is_some_and(|name| after.contains_key(name)),
            "the scope rule for {:?} names no upstream of the configuration",
            id.as_str()
        );
        if upstream.is_some_and(|name| before.get(name) == after.get(name)) {
            staying.insert(id.clone(), scope.clone());
        }
    }
    // A rule for an upstream that stays as it is can be checked against
    // its tools now: a typo there is refused before anything changes.
    check_scopes(&staying, gateway)?;
    let primitive = primitive_rules(new, cli_scopes);
    for (kind, name, _) in primitive.iter() {
        let owned = match kind {
            Primitive::Prompt => name
                .split_once('/')
                .is_some_and(|(upstream, _)| after.contains_key(upstream)),
            _ => name.split_once('+').is_some_and(|(prefix, _)| {
                after.keys().any(|upstream| uri_prefix(upstream) == prefix)
            }),
        };
        anyhow::ensure!(
            owned,
            "the {} scope rule for {name:?} names no upstream of the configuration",
            kind.word()
        );
    }
    if old.listen != new.listen
        || old.mode != new.mode
        || old.state != new.state
        || old.admin_socket != new.admin_socket
        || old.limits != new.limits
        || old.store != new.store
    {
        tracing::warn!(
            target: "droid",
            "listen, mode, state, admin_socket, limits and store take effect at the next start"
        );
    }
    add_scopes(&rules, gateway);
    // The same for prompts and resources: the old rules and the new, while
    // the new upstreams come up, so none shows what a rule hides first.
    let mut both = primitive_rules(old, cli_scopes);
    for (kind, name, scope) in primitive.iter() {
        both.require(kind, name, scope);
    }
    gateway.server().set_forwarded_scopes(both);
    // Pins before upstreams: one removed stops verifying at once, and an
    // upstream started or replaced is listed against the new ones. Set
    // even when unchanged: the approvals in the state file are read again
    // with them (another gateway on this configuration may have made some).
    gateway.set_pins(pins);
    for name in &stopped {
        gateway.remove_upstream(name).await;
    }
    // The old rules of an upstream stopped go with its tools. Those of one
    // replaced stay in force while the old connection serves on, but on
    // their way out: one naming a tool the replacement no longer lists is
    // no typo to hold it down for.
    for id in gateway.scopes().keys() {
        let upstream = id.as_str().split_once('/').map(|(upstream, _)| upstream);
        if rules.contains_key(id) {
            continue;
        }
        if upstream.is_some_and(|name| stopped.contains(&name)) {
            gateway.drop_scope(id);
        } else if upstream.is_some_and(|name| replaced.contains(&name)) {
            gateway.retire_scope(id);
        }
    }
    let count = prepared.len();
    // Waited for: the rules are checked against what they list. Those
    // replaced are made before the break, so their sessions keep the
    // activations of what they still list.
    add_prepared(gateway, prepared, None, Install::Replace).await;
    // Checked above against the configuration: only an upstream a
    // concurrent change removed could refuse it.
    if let Err(error) = gateway.set_primitive_scopes(primitive) {
        tracing::error!(target: "droid", "reloading the scope rules: {error}; the earlier prompt and resource rules stay in force beside these");
    }
    match check_scopes(&rules, gateway) {
        Ok(()) => set_scopes(&rules, gateway),
        // The old rules stay in force beside the new: dropping one for a
        // rule that names nothing would open what it closed.
        Err(error) => tracing::error!(
            target: "droid",
            "reloading the scope rules: {error:#}; the earlier rules stay in force beside these"
        ),
    }
    tracing::info!(
        target: "droid",
        "configuration reloaded: {} upstream(s) started, {} replaced, {} stopped",
        count.saturating_sub(replaced.len()),
        replaced.len(),
        stopped.len()
    );
    Ok(())
}
