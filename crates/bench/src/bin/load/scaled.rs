//! Several `droid serve` instances behind haproxy (round-robin, no
//! stickiness), sharing a Redis of their own, against one instance keeping
//! everything in memory behind the same balancer: what sharing costs per
//! request. Debian's `redis-server` and `haproxy` (`scripts/services.sh`)
//! must be on the `PATH`; without them the harness says so and skips this.

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use tokio::process::Child;

use crate::http::{self, Era};
use crate::servers::{Binaries, Target, free_port, memory, quiet, wait_for_port};
use crate::stats::Sample;

/// One deployment measured: how many instances, and whether they share
/// Redis (one instance without it keeps everything in memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Deployment {
    pub(crate) instances: usize,
    pub(crate) shared: bool,
}

impl Deployment {
    /// The deployments measured, the baseline first.
    pub(crate) const ALL: [Self; 4] = [
        Self {
            instances: 1,
            shared: false,
        },
        Self {
            instances: 1,
            shared: true,
        },
        Self {
            instances: 2,
            shared: true,
        },
        Self {
            instances: 3,
            shared: true,
        },
    ];

    /// The row heading.
    pub(crate) fn title(self) -> String {
        match (self.instances, self.shared) {
            (1, false) => "1 instance, memory".to_owned(),
            (1, true) => "1 instance, Redis".to_owned(),
            (n, _) => format!("{n} instances, Redis"),
        }
    }
}

/// Whether `redis-server` and `haproxy` can be started.
pub(crate) fn available() -> bool {
    ["redis-server", "haproxy"].iter().all(|program| {
        std::process::Command::new(program)
            .arg("-v")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    })
}

/// Measures `deployment` with `concurrency` clients calling `echo` in
/// `era` through the balancer; the peak resident set is the instances'
/// together.
pub(crate) async fn measure(
    binaries: &Binaries,
    deployment: Deployment,
    era: Era,
    concurrency: u64,
    warmup: Duration,
    measured: Duration,
) -> anyhow::Result<Sample> {
    let mut redis = None;
    let mut store = None;
    if deployment.shared {
        let port = free_port()?;
        redis = Some(
            quiet("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .spawn()
                .context("starting redis-server")?,
        );
        wait_for_port(port).await?;
        store = Some(format!("redis://127.0.0.1:{port}/"));
    }
    let mut instances: Vec<Child> = Vec::new();
    let mut backends = String::new();
    for n in 0..deployment.instances {
        let port = free_port()?;
        let mut command = binaries.command("droid");
        command
            .args(["serve", "--listen"])
            .arg(format!("127.0.0.1:{port}"));
        if let Some(url) = &store {
            command
                .args(["--store", url, "--instance-id"])
                .arg(format!("bench{n}"));
        }
        instances.push(command.spawn().context("starting droid serve")?);
        wait_for_port(port).await?;
        backends.push_str(&format!("  server droid{n} 127.0.0.1:{port}\n"));
    }
    let port = free_port()?;
    let config = format!(
        "global\n  maxconn 4096\n\
         defaults\n  mode http\n  timeout connect 2s\n  timeout client 30s\n  timeout server 30s\n\
         frontend mcp\n  bind 127.0.0.1:{port}\n  default_backend droids\n\
         backend droids\n  balance roundrobin\n{backends}"
    );
    let path = std::env::temp_dir().join(format!("droid-bench-haproxy-{port}.cfg"));
    std::fs::write(&path, config).context("writing haproxy's configuration")?;
    let balancer = quiet("haproxy")
        .arg("-db")
        .arg("-f")
        .arg(&path)
        .spawn()
        .context("starting haproxy");
    let listening = match &balancer {
        Ok(_) => wait_for_port(port).await,
        Err(_) => Ok(()),
    };
    let _removed = std::fs::remove_file(&path).ok();
    let balancer = balancer?;
    listening?;
    let (calls, latencies, elapsed) =
        http::drive(port, Target::Droid, era, concurrency, warmup, measured).await?;
    let mut peak = 0;
    for instance in &instances {
        peak += memory(instance)?.peak_kib;
    }
    drop((balancer, instances, redis));
    Ok(Sample::new(calls, latencies, elapsed, peak))
}
