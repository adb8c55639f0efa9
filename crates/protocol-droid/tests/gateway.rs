//! The gateway in process, in front of a real upstream process: what its
//! server is told when an upstream's tools arrive.

use std::path::PathBuf;

use protocol_droid::adapters::secondary::child::ChildOptions;
use protocol_droid::adapters::secondary::connect::{ConnectOptions, Target, connector};
use protocol_droid::application::gateway::{Disclosure, Gateway, Pins, UpstreamOptions};
use protocol_droid::application::server::{Change, Server};
use protocol_droid_test_support::TestError;
use tokio::sync::broadcast::error::TryRecvError;

/// A gateway with no upstream yet, in its default mode, pinning nothing.
fn gateway() -> Result<Gateway, TestError> {
    Ok(Gateway::build(
        Server::builder("gateway", "1.0.0"),
        Disclosure::Default,
        Pins::default(),
    )?)
}

/// `tests/fixtures/bad_server.py` in `mode`, listing `tools` tools where
/// the mode lists many.
fn bad_server(mode: &str, tools: usize) -> ChildOptions {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bad_server.py");
    let mut child = ChildOptions::new("python3", [script.into_os_string(), mode.into()]);
    child
        .env
        .push(("BAD_SERVER_TOOLS".into(), tools.to_string().into()));
    child
}

/// An upstream listing thousands of tools is registered as one change of
/// the gateway's tools, told once. Registered one tool at a time, each
/// registration copied the tool table a request was reading and looked at
/// every tool in it, and was told to every listener: an upstream of 100,000
/// tools kept the gateway from serving anything for minutes.
#[tokio::test]
async fn an_upstreams_many_tools_are_registered_as_one_change() -> Result<(), TestError> {
    const TOOLS: usize = 3000;
    let gateway = gateway()?;
    let mut changes = gateway.server().changes();
    let child = bad_server("many-tools", TOOLS);
    gateway
        .add_upstream(
            "many",
            connector(Target::Command(child), ConnectOptions::default()),
            UpstreamOptions::default(),
        )
        .await?;
    for name in ["many/tool-0", &format!("many/tool-{}", TOOLS - 1)] {
        assert!(
            gateway.server().tool(name).is_some(),
            "{name} is not registered"
        );
    }
    // Everything told since the receiver was made, however many were
    // missed when it fell behind.
    let mut tools_changed = 0_u64;
    loop {
        match changes.try_recv() {
            Ok(Change::Tools) => tools_changed += 1,
            Ok(_) => {}
            Err(TryRecvError::Lagged(missed)) => tools_changed += missed,
            Err(TryRecvError::Empty | TryRecvError::Closed) => break,
        }
    }
    assert_eq!(tools_changed, 1);
    Ok(())
}

/// A scope rule naming a tool its upstream does not list (a typo, met when
/// the upstream comes up after the rules were set) keeps the upstream from
/// being served, where it left the tool the rule meant open to everyone.
#[tokio::test]
async fn a_scope_rule_naming_no_tool_keeps_its_upstream_down() -> Result<(), TestError> {
    use protocol_droid::application::gateway::{UpstreamError, UpstreamHealth};
    use protocol_droid::domain::catalog::ToolId;
    let upstream = || {
        connector(
            Target::Command(bad_server("many-tools", 3)),
            ConnectOptions::default(),
        )
    };
    for (rule, served) in [("many/tool-1", true), ("many/tool-9", false)] {
        let gateway = gateway()?;
        gateway.require_scope(ToolId::new(rule), "admin".to_owned());
        let added = gateway
            .add_upstream("many", upstream(), UpstreamOptions::default())
            .await;
        assert_eq!(added.is_ok(), served, "{rule}: {added:?}");
        if !served {
            assert!(
                matches!(added, Err(UpstreamError::ScopeRule { .. })),
                "{added:?}"
            );
            let status = gateway.upstreams();
            let health = status.first().map(|upstream| &upstream.health);
            assert!(
                matches!(health, Some(UpstreamHealth::Down { reason, .. }) if reason.contains(rule)),
                "{health:?}"
            );
        }
    }
    Ok(())
}

/// An upstream listing more tools than the gateway takes from one is
/// refused whole, before each tool costs a digest, a place in the catalog
/// and a look from every session: it is down, saying why, and lists
/// nothing.
#[tokio::test]
async fn an_upstream_listing_past_the_bound_is_refused_whole() -> Result<(), TestError> {
    use protocol_droid::application::gateway::{MAX_UPSTREAM_TOOLS, UpstreamHealth};
    let gateway = gateway()?;
    let child = bad_server("many-tools", MAX_UPSTREAM_TOOLS + 1);
    let added = gateway
        .add_upstream(
            "many",
            connector(Target::Command(child), ConnectOptions::default()),
            UpstreamOptions::default(),
        )
        .await;
    assert!(added.is_err(), "{added:?}");
    let status = gateway.upstreams();
    let health = status.first().map(|upstream| &upstream.health);
    assert!(
        matches!(health, Some(UpstreamHealth::Down { reason, .. })
            if reason.contains(&format!("more than the {MAX_UPSTREAM_TOOLS}"))),
        "{health:?}"
    );
    assert!(gateway.server().tool("many/tool-0").is_none());
    Ok(())
}

/// An upstream serving already whose list grows past the bound is taken
/// down, not held to the list it served before (its calls would reach
/// tools nobody looked at).
#[tokio::test]
async fn an_upstream_whose_list_grows_past_the_bound_is_taken_down() -> Result<(), TestError> {
    use protocol_droid::application::client::ClientOptions;
    use protocol_droid::application::gateway::{MAX_UPSTREAM_TOOLS, UpstreamHealth};
    use protocol_droid::domain::ProtocolVersion;
    let gateway = gateway()?;
    let child = bad_server("grows", MAX_UPSTREAM_TOOLS + 1);
    let options = ConnectOptions {
        client: ClientOptions {
            revisions: vec![ProtocolVersion::V2025_11_25],
            ..ClientOptions::default()
        },
        ..ConnectOptions::default()
    };
    gateway
        .add_upstream(
            "grows",
            connector(Target::Command(child), options),
            UpstreamOptions::default(),
        )
        .await?;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let status = gateway.upstreams();
        let health = status.first().map(|upstream| &upstream.health);
        if matches!(health, Some(UpstreamHealth::Down { reason, .. })
            if reason.contains(&format!("more than the {MAX_UPSTREAM_TOOLS}")))
        {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("never taken down: {health:?}").into());
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
