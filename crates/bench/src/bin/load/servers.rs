//! Starting the measured servers, and reading their memory.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tokio::process::{Child, Command};

/// Which program answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// `droid serve`, the built-in fixture server.
    Droid,
    /// The rmcp echo server (`rmcp-echo`).
    Rmcp,
    /// hyper and `serde_json` with no MCP logic (`floor-echo`).
    Floor,
    /// `droid gateway` on its embedded default: the same `droid serve` behind
    /// the gateway, so the difference to [`Self::Droid`] is the gateway's
    /// cost per call.
    Gateway,
    /// `droid bridge` in front of `droid serve` over stdio, both legs at the
    /// client's revision: the difference to [`Self::Droid`] is the bridge's
    /// cost per call when there is nothing to translate.
    Bridge,
    /// `relay-echo bytes` in front of `droid serve`: a process that passes
    /// the bytes on untouched, the floor of any stdio intermediary.
    RelayBytes,
    /// `relay-echo json` in front of `droid serve`: a process that parses
    /// every line and writes it again, the floor of an intermediary that
    /// reads what it forwards.
    RelayJson,
}

impl Target {
    /// What the echo tool is called where this target offers it: the
    /// gateway names it after its upstream.
    pub(crate) const fn echo_tool(self) -> &'static str {
        match self {
            Self::Gateway => "fixture/echo",
            _ => "echo",
        }
    }

    /// The column heading.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Self::Droid => "droid",
            Self::Rmcp => "rmcp",
            Self::Floor => "floor",
            Self::Gateway => "gateway",
            Self::Bridge => "bridge",
            Self::RelayBytes => "relay bytes",
            Self::RelayJson => "relay json",
        }
    }
}

/// Where the measured programs are.
#[derive(Debug)]
pub(crate) struct Binaries {
    /// The directory holding `droid`, `rmcp-echo`, `floor-echo` and
    /// `relay-echo`.
    pub(crate) dir: PathBuf,
}

impl Binaries {
    /// Checks that every program is there, so a missing build fails before
    /// any measurement rather than halfway through.
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        for name in ["droid", "rmcp-echo", "floor-echo", "relay-echo"] {
            let path = self.dir.join(name);
            if !path.is_file() {
                bail!(
                    "{} is missing: build it first (`cargo build --release -p droid -p protocol-droid-bench`)",
                    path.display()
                );
            }
        }
        Ok(())
    }

    /// `name` from the programs' directory, quiet and killed when dropped.
    pub(crate) fn command(&self, name: &str) -> Command {
        quiet(self.dir.join(name))
    }

    /// Starts `target` on stdio, its pipes ours.
    pub(crate) fn stdio(&self, target: Target) -> anyhow::Result<Child> {
        let mut command = self.stdio_command(target)?;
        command.stdin(Stdio::piped()).stdout(Stdio::piped());
        command.spawn().context("starting a stdio server")
    }

    /// The command that serves `target` on stdio, not yet started.
    pub(crate) fn stdio_command(&self, target: Target) -> anyhow::Result<Command> {
        let command = match target {
            Target::Droid => {
                let mut command = self.command("droid");
                command.arg("serve");
                command
            }
            Target::Rmcp => {
                let mut command = self.command("rmcp-echo");
                command.arg("stdio");
                command
            }
            Target::Floor => bail!("the floor has no stdio server; the serde_json loop stands in"),
            Target::Gateway => {
                let mut command = self.command("droid");
                command.arg("gateway");
                command
            }
            Target::Bridge => {
                let mut command = self.command("droid");
                command
                    .args(["bridge", "--"])
                    .arg(self.dir.join("droid"))
                    .arg("serve");
                command
            }
            Target::RelayBytes | Target::RelayJson => {
                let mut command = self.command("relay-echo");
                command
                    .arg(if target == Target::RelayBytes {
                        "bytes"
                    } else {
                        "json"
                    })
                    .arg(self.dir.join("droid"))
                    .arg("serve");
                command
            }
        };
        Ok(command)
    }

    /// Starts `target` on HTTP at `127.0.0.1:port`; `sessions` picks rmcp's
    /// session mode, which the other two decide per request.
    pub(crate) async fn http(
        &self,
        target: Target,
        port: u16,
        sessions: bool,
    ) -> anyhow::Result<Child> {
        let mut command = match target {
            Target::Droid => {
                let mut command = self.command("droid");
                command
                    .args(["serve", "--listen"])
                    .arg(format!("127.0.0.1:{port}"));
                command
            }
            Target::Rmcp => {
                let mut command = self.command("rmcp-echo");
                command
                    .arg(if sessions { "http-sessions" } else { "http" })
                    .arg(port.to_string());
                command
            }
            Target::Floor => {
                let mut command = self.command("floor-echo");
                command.arg(port.to_string());
                command
            }
            Target::Gateway => {
                let mut command = self.command("droid");
                command
                    .args(["gateway", "--listen"])
                    .arg(format!("127.0.0.1:{port}"));
                command
            }
            Target::Bridge => {
                let mut command = self.command("droid");
                command
                    .args(["bridge", "--listen"])
                    .arg(format!("127.0.0.1:{port}"))
                    .arg("--")
                    .arg(self.dir.join("droid"))
                    .arg("serve");
                command
            }
            Target::RelayBytes | Target::RelayJson => {
                bail!("the relays are stdio only")
            }
        };
        let child = command.spawn().context("starting an HTTP server")?;
        wait_for_port(port).await?;
        Ok(child)
    }
}

/// `program`, its standard streams closed, killed when dropped: a harness
/// that fails midway leaves no server behind.
pub(crate) fn quiet(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(program);
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    command
}

/// A port free on 127.0.0.1 a moment ago.
pub(crate) fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// Waits until something listens on `127.0.0.1:port`, for at most 20 s.
pub(crate) async fn wait_for_port(port: u16) -> anyhow::Result<()> {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(20) {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bail!("no server listening on 127.0.0.1:{port} after 20 s")
}

/// The resident set of a process, now and at its peak, in KiB.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Memory {
    /// `VmRSS`.
    pub(crate) resident_kib: u64,
    /// `VmHWM`: the most the process has held resident.
    pub(crate) peak_kib: u64,
}

/// Reads `/proc/PID/status`.
pub(crate) fn memory(child: &Child) -> anyhow::Result<Memory> {
    let pid = child.id().context("the server has exited")?;
    let status = std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("status"))
        .context("reading /proc/PID/status")?;
    let field = |name: &str| -> anyhow::Result<u64> {
        let line = status
            .lines()
            .find(|line| line.starts_with(name))
            .with_context(|| format!("{name} missing from /proc/PID/status"))?;
        let kib = line
            .split_whitespace()
            .nth(1)
            .with_context(|| format!("{name} has no value"))?;
        Ok(kib.parse()?)
    };
    Ok(Memory {
        resident_kib: field("VmRSS:")?,
        peak_kib: field("VmHWM:")?,
    })
}
