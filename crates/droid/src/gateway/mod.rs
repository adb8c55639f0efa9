//! `droid gateway`: many upstream MCP servers behind one.
//!
//! - `config`: the configuration's model and the rules it must keep;
//!   `json`: the JSON forms other MCP clients keep, read into it; `load`:
//!   which form a file is, or the embedded default.
//! - `build`: from a configuration to the gateway's upstreams and scope
//!   rules, at start and for what a reload changed.
//! - `reload`: the configuration read again on SIGHUP and on change;
//!   `admin`: `droid gateway status` and `approve`, and where the admin
//!   socket is; `page`: the admin page in a browser (`--admin-listen`).
//!
//! Without `--config` the embedded default runs: the built-in fixture server
//! (`droid serve`) as the one upstream, trusted on first use, so a fresh
//! checkout serves at once. Upstreams connect in parallel; one that cannot
//! be reached is reported and retried in the background while the others
//! serve. `--print-digests` lists every tool's id, digest and provenance and
//! exits.

pub(crate) mod admin;
mod build;
mod config;
mod json;
mod load;
mod page;
mod reload;
mod unquoted;

use std::path::Path;

use protocol_droid::adapters::primary::admin::serve_admin;
use protocol_droid::adapters::primary::http::Readiness;
use protocol_droid::adapters::secondary::metrics::{Metrics, UpstreamLevel};
use protocol_droid::application::gateway::{Gateway, UpstreamCounts, UpstreamHealth};
use tokio::signal::unix::SignalKind;

/// `droid gateway`.
pub(crate) fn run(
    config: Option<&Path>,
    admin_socket: Option<&Path>,
    admin_listen: Option<(&str, &str)>,
    print_digests: bool,
    mut listening: crate::Listening<'_>,
) -> anyhow::Result<()> {
    let config_path = config;
    // Taken before the file is read: a change in between is then seen as
    // one, and read again, rather than missed.
    let read = config_path.and_then(reload::contents);
    let config = load::load(config_path)?;
    listening.listen = listening.listen.or_else(|| config.listen.clone());
    crate::listen::ListenArgs::check_instance(config.store.instance_id.as_deref())?;
    let served = listening.served.with_store(
        config.store.url.as_deref(),
        config.store.prefix.as_deref(),
        config.store.instance_id.as_deref(),
    );
    let mut listening = crate::Listening {
        served: &served,
        ..listening
    };
    // `--print-digests` serves nobody: it connects to every upstream at
    // once, which the pool does in parallel.
    let runtime = crate::runtime_for(listening.listen.is_none() && !print_digests)?;
    if admin_listen.is_some() {
        // The page's charts read the metrics, whether or not /mcp is on HTTP.
        listening.metrics.get_or_insert_with(Metrics::new);
    }
    let setup = listening.setup(config.limits.rate_limits()?)?;
    let stdio = listening.listen.is_none();
    crate::run_to_end(runtime, stdio, async {
        // SIGHUP asks for a reload. Its default action ends the process,
        // leaving the upstreams started so far behind, so it is taken from
        // the start: before the watcher listens it is passed over, and with
        // no file to read again it is only said.
        let hangups = tokio::signal::unix::signal(SignalKind::hangup()).ok();
        let (gateway, failures) = build::start(
            &config,
            config_path,
            &listening,
            setup,
            if print_digests {
                build::Purpose::Viewing
            } else {
                build::Purpose::Serving
            },
        )
        .await?;
        if print_digests {
            if served.names_store() {
                tracing::warn!(
                    target: "droid",
                    "--print-digests reads the state file only, not the shared store: \
                     first uses and approvals made through other instances are not shown"
                );
            }
            let mut out = std::io::stdout().lock();
            for (id, digest, provenance) in gateway.catalog() {
                use std::io::Write as _;
                writeln!(
                    out,
                    "{:<48} {digest} {provenance}",
                    crate::terminal::shown(id.as_str())
                )?;
            }
            // A list missing an upstream's tools must not pass for whole.
            anyhow::ensure!(
                failures.is_empty(),
                "the list is incomplete: {}",
                failures.join("; ")
            );
            return Ok(());
        }
        let unverified = gateway
            .catalog()
            .iter()
            .filter(|(_, _, p)| !p.is_verified())
            .count();
        if unverified > 0 {
            tracing::warn!(
                target: "droid",
                "{unverified} tool(s) are unverified and hidden until approved (see --print-digests)"
            );
        }
        // The operator's way in without a restart: status and approvals on
        // the admin socket, reloads on SIGHUP and when the file changes.
        // Neither is needed to serve, so a failure is said and passed over.
        let _admin = match admin::socket(config_path, config.admin_socket.as_deref(), admin_socket)
        {
            Some(path) => match serve_admin(gateway.clone(), &path).await {
                Ok(endpoint) => {
                    tracing::info!(target: "droid", "admin socket at {}", endpoint.path().display());
                    Some(endpoint)
                }
                Err(error) => {
                    tracing::warn!(target: "droid", "no admin socket at {}: {error}", path.display());
                    None
                }
            },
            None => None,
        };
        if config_path.is_none() {
            if let Some(mut hangups) = hangups {
                tokio::spawn(async move {
                    while hangups.recv().await.is_some() {
                        tracing::info!(
                            target: "droid",
                            "SIGHUP: the embedded configuration has no file to read again"
                        );
                    }
                });
            }
        }
        let _reload = config_path.map(|path| {
            reload::watch(
                gateway.clone(),
                path.to_path_buf(),
                config.clone(),
                read,
                build::cli_scopes(listening.auth).unwrap_or_default(),
                listening.scopes.clone(),
                listening.trust.clone(),
            )
        });
        if let Some((addr, scope)) = admin_listen {
            page::serve(&gateway, addr, scope, &listening).await?;
        }
        listening.ready = Some(readiness(&gateway));
        if let Some(metrics) = &listening.metrics {
            // Weak: the metrics are the gateway's server's observer, so a
            // strong handle here would keep the gateway alive for ever.
            let gateway = gateway.downgrade();
            metrics.upstreams_from(move || {
                gateway
                    .upgrade()
                    .map(|gateway| gateway.upstreams())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|status| UpstreamLevel {
                        up: matches!(status.health, UpstreamHealth::Up { .. }),
                        name: status.name,
                    })
                    .collect()
            });
        }
        crate::serve_on(gateway.server().clone(), listening).await
    })
}

/// `/readyz` for a gateway: ready when every upstream is up. A gateway with
/// an upstream down still serves the others' tools; a balancer that should
/// go on sending it calls then probes `/healthz`. The reason counts, and
/// names nothing: the probe needs no token.
fn readiness(gateway: &Gateway) -> Readiness {
    let gateway = gateway.clone();
    Readiness::new(move || {
        let UpstreamCounts {
            up,
            connecting,
            down,
        } = gateway.upstream_counts();
        if connecting + down == 0 {
            return Ok(());
        }
        Err(format!(
            "{up} of {} upstreams up, {connecting} connecting, {down} down",
            up + connecting + down
        ))
    })
}
