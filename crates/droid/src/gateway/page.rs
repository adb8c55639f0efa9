//! `--admin-listen`: the gateway's admin page on a listener of its own.
//!
//! The page shows what the gateway trusts and lets its operator approve a
//! changed tool, so it gets what `/mcp` gets and a little more: the same
//! host check, TLS and authorization, a loopback address unless
//! authorization is on, and with authorization on an explicit
//! `--auth-resource`, so the tokens it accepts are those issued for the
//! gateway's MCP endpoint rather than for the page's own address, and a
//! scope of its own (`--admin-scope`), so a token that may call tools may
//! not thereby approve them.

use anyhow::Context as _;
use protocol_droid::adapters::primary::http::{AdminPage, HttpOptions};
use protocol_droid::application::gateway::Gateway;

use crate::Listening;

/// Binds `addr` and serves the admin page of `gateway` there, in the
/// background, for as long as the process runs.
pub(crate) async fn serve(
    gateway: &Gateway,
    addr: &str,
    scope: &str,
    listening: &Listening<'_>,
) -> anyhow::Result<()> {
    let auth = listening.auth;
    crate::auth::check_listen(auth, addr)?;
    listening
        .served
        .check_exposure(addr, auth.enabled())
        .await
        .context("--admin-listen")?;
    anyhow::ensure!(
        !auth.enabled() || auth.names_resource(),
        "with authorization on, --admin-listen needs --auth-resource: the page accepts the \
         tokens issued for the gateway's MCP endpoint, which it must be told"
    );
    let tls = listening.served.server_tls()?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding --admin-listen {addr}"))?;
    let bound = listener
        .local_addr()
        .context("reading the admin page's address")?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut options = listening.served.http_options(HttpOptions {
        tls,
        metrics: listening.metrics.clone(),
        ..HttpOptions::default()
    });
    // Reached by the address it listens on, whatever loopback one that is.
    options.hosts = options.hosts.allowing_address(bound.ip());
    let page = format!("{scheme}://{bound}/");
    if let Some(resource_server) = crate::auth::resource_server(
        auth,
        bound,
        scheme,
        listening.trust,
        &crate::auth::Listed::Page { scope, at: &page },
    )? {
        if let Some(host) = resource_server.host() {
            options.hosts = options.hosts.allowing(host);
        }
        // The page is a resource of its own, at its own address: its
        // document names it and lists the page's scope (the one the MCP
        // endpoint's URI leads to lists the tools'), and the tokens issued
        // for the MCP endpoint are taken besides its own.
        options.auth = Some(
            resource_server
                .served_at(&page)
                .context("the admin page's address as a resource")?,
        );
    }
    // Scripts read this line to learn the port when `:0` picked one.
    tracing::warn!(target: "droid", "admin page on {scheme}://{bound}/");
    if !auth.enabled() {
        // Loopback is not this user alone, as the admin socket is.
        tracing::warn!(
            target: "droid",
            "the admin page has no authorization: every user and process of this machine \
             can read it and approve tools through it (the admin socket answers this user \
             alone); on a shared machine, turn authorization on"
        );
    }
    let page = AdminPage::new(gateway.clone(), options).require_scope(scope);
    tokio::spawn(async move {
        if let Err(error) = page.serve(listener, std::future::pending()).await {
            tracing::error!(target: "droid", "the admin page stopped: {error}");
        }
    });
    Ok(())
}
