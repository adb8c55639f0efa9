//! Instructions per stdio `tools/call`, counted by valgrind's callgrind.
//!
//! A count of instructions does not depend on what else the machine is
//! doing, so unlike a rate it repeats from run to run on a shared host. The
//! program (a server, or the gateway or the bridge, whose upstream runs as
//! its child and is not traced: valgrind follows no child process unless
//! told to) runs under `valgrind --tool=callgrind` twice, once for a short
//! series of calls and once for a longer one, each with 64 calls
//! outstanding as in the throughput scenario; the difference divided by the
//! difference in calls takes start-up, the handshake and shutdown out.
//! Each call is answered before the series ends, so none is refused for
//! being one too many in flight and every call counted did the whole work.
//!
//! Valgrind runs code on a simulated CPU that reports no SHA extensions, so
//! any SHA-256 a server computes is counted in its portable form, which
//! costs several times the instructions the hardware form does.

use std::process::Stdio;

use anyhow::{Context as _, bail};
use tokio::io::AsyncReadExt as _;
use tokio::process::Command;

use crate::servers::{Binaries, Target};
use crate::stats::float;

/// Calls in the short series.
const SHORT: u64 = 1_000;

/// Calls outstanding at once.
const IN_FLIGHT: u64 = 64;

/// Whether valgrind can be run here.
pub(crate) fn available() -> bool {
    std::process::Command::new("valgrind")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Instructions `target` executes per call, over `calls` calls beyond the
/// short series.
pub(crate) async fn per_call(
    binaries: &Binaries,
    target: Target,
    calls: u64,
) -> anyhow::Result<f64> {
    let short = count(binaries, target, SHORT).await?;
    let long = count(binaries, target, SHORT + calls).await?;
    let extra = long
        .checked_sub(short)
        .context("the longer series counted fewer instructions")?;
    Ok(float(extra) / float(calls))
}

/// Every instruction `target` executes serving `calls` calls.
async fn count(binaries: &Binaries, target: Target, calls: u64) -> anyhow::Result<u64> {
    let plain = binaries.stdio_command(target)?;
    let plain = plain.as_std();
    let mut command = Command::new("valgrind");
    command
        .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
        .arg(plain.get_program())
        .args(plain.get_args())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().context("starting valgrind")?;
    let mut stderr = child.stderr.take().context("valgrind's stderr")?;
    // Read while the calls run, so a chatty server never blocks on a full pipe.
    let log = tokio::spawn(async move {
        let mut log = String::new();
        stderr.read_to_string(&mut log).await.map(|_| log)
    });
    let status = crate::stdio::drive(child, target, IN_FLIGHT, calls).await?;
    if !status.success() {
        bail!("{} under valgrind exited with {status}", target.name());
    }
    let log = log.await??;
    collected(&log).with_context(|| format!("no instruction count in valgrind's output: {log}"))
}

/// The total from callgrind's closing `Collected : N` line.
fn collected(log: &str) -> Option<u64> {
    log.lines()
        .find_map(|line| line.split_once("Collected :"))
        .and_then(|(_, count)| count.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::collected;

    #[test]
    fn the_total_is_read_from_callgrinds_summary() {
        let log = "==7== Events    : Ir\n==7== Collected : 902446269\n==7==\n==7== I   refs:      902,446,269\n";
        assert_eq!(collected(log), Some(902_446_269));
        assert_eq!(collected("==7== nothing\n"), None);
    }
}
