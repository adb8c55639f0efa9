//! Pipelined `tools/call` over a child's pipes.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use protocol_droid_bench::{initialize_request, initialized_notification, write_named_echo_call};
use serde::Deserialize;
use serde::de::IgnoredAny;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::Semaphore;

use crate::cpu::Clock;
use crate::servers::{Binaries, Target, memory};
use crate::stats::Sample;

/// What the harness reads of a reply: enough to match it and to notice a
/// refusal, and no more, so reading costs the generator little.
#[derive(Deserialize)]
struct Reply {
    id: Option<u64>,
    result: Option<IgnoredAny>,
}

/// A stdio server after its handshake.
struct Peer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
    /// The echo tool's name at this server.
    tool: &'static str,
}

/// Measures `target` with `in_flight` calls outstanding at all times.
pub(crate) async fn measure(
    binaries: &Binaries,
    target: Target,
    in_flight: usize,
    warmup: Duration,
    measured: Duration,
) -> anyhow::Result<Sample> {
    let mut peer = start(binaries, target).await?;
    phase(&mut peer, in_flight, warmup).await?;
    let pid = peer.child.id().context("the server has exited")?;
    let before = Clock::read(pid)?;
    let (calls, latencies, elapsed) = phase(&mut peer, in_flight, measured).await?;
    let cpu = before.per_call(Clock::read(pid)?, calls);
    let peak = memory(&peer.child)?.peak_kib;
    drop(peer.stdin);
    // Closing stdin is how a stdio server is asked to exit.
    let _exited = tokio::time::timeout(Duration::from_secs(5), peer.child.wait()).await;
    Ok(Sample::new(calls, latencies, elapsed, peak).with_cpu(cpu))
}

async fn start(binaries: &Binaries, target: Target) -> anyhow::Result<Peer> {
    handshake(binaries.stdio(target)?, target).await
}

/// Sends exactly `calls` calls to the server `child` runs as `target`,
/// keeping `in_flight` outstanding, then closes its stdin and waits for it
/// to exit, for its exit status. For a count of work rather than a rate (an instruction count
/// under valgrind), so it has no deadline of its own.
pub(crate) async fn drive(
    child: Child,
    target: Target,
    in_flight: u64,
    calls: u64,
) -> anyhow::Result<std::process::ExitStatus> {
    let mut peer = handshake(child, target).await?;
    let mut buffer = Vec::with_capacity(256);
    let mut sent = 0;
    let mut line = Vec::new();
    let mut answered = 0;
    while answered < calls {
        while sent < calls && sent - answered < in_flight {
            write_named_echo_call(peer.next_id, peer.tool, &mut buffer);
            buffer.push(b'\n');
            peer.next_id += 1;
            sent += 1;
        }
        peer.stdin.write_all(&buffer).await?;
        buffer.clear();
        line.clear();
        if peer.stdout.read_until(b'\n', &mut line).await? == 0 {
            bail!("the server closed stdout");
        }
        let reply: Reply = serde_json::from_slice(&line).context("reading a reply")?;
        if reply.id.is_some() {
            if reply.result.is_none() {
                bail!("a call was refused: {}", String::from_utf8_lossy(&line));
            }
            answered += 1;
        }
    }
    drop(peer.stdin);
    // Closing stdin asks the server to exit; valgrind then writes its
    // summary, which takes a moment, and a server that never exits is an
    // error rather than a hang.
    tokio::time::timeout(Duration::from_secs(120), peer.child.wait())
        .await
        .context("the server did not exit after its stdin closed")?
        .context("waiting for the server to exit")
}

async fn handshake(mut child: Child, target: Target) -> anyhow::Result<Peer> {
    let mut stdin = child.stdin.take().context("the server's stdin")?;
    let mut stdout = BufReader::new(child.stdout.take().context("the server's stdout")?);
    let mut line = serde_json::to_vec(&initialize_request())?;
    line.push(b'\n');
    stdin.write_all(&line).await?;
    let mut reply = Vec::new();
    loop {
        reply.clear();
        if stdout.read_until(b'\n', &mut reply).await? == 0 {
            bail!("{} closed stdio during initialize", target.name());
        }
        let read: Reply = serde_json::from_slice(&reply).context("reading the initialize reply")?;
        if read.id == Some(0) {
            if read.result.is_none() {
                bail!(
                    "{} refused initialize: {}",
                    target.name(),
                    String::from_utf8_lossy(&reply)
                );
            }
            break;
        }
    }
    let mut line = serde_json::to_vec(&initialized_notification())?;
    line.push(b'\n');
    stdin.write_all(&line).await?;
    Ok(Peer {
        child,
        stdin,
        stdout,
        next_id: 1,
        tool: target.echo_tool(),
    })
}

/// Keeps `in_flight` calls outstanding for `duration`, then waits for the
/// last replies: the calls answered, each one's latency in nanoseconds, and
/// the time from the first call to the last reply.
async fn phase(
    peer: &mut Peer,
    in_flight: usize,
    duration: Duration,
) -> anyhow::Result<(u64, Vec<u64>, Duration)> {
    let permits = Semaphore::new(in_flight);
    let pending: RefCell<HashMap<u64, Instant>> = RefCell::new(HashMap::new());
    let stop = Cell::new(false);
    let started = Instant::now();
    let deadline = started + duration;
    let first_id = peer.next_id;
    let tool = peer.tool;

    // Writer and reader run in this one task (`join!`), so they share state
    // through cells without locks; the only points where either waits are
    // pipe I/O and the permit, and the writer writes whatever it has
    // buffered before it waits.
    let writer = async {
        let mut id = first_id;
        let mut buffer = Vec::with_capacity(256 * in_flight);
        loop {
            let permit = match permits.try_acquire() {
                Ok(permit) => permit,
                Err(_) => {
                    peer.stdin.write_all(&buffer).await?;
                    buffer.clear();
                    permits.acquire().await?
                }
            };
            permit.forget();
            if stop.get() {
                break;
            }
            write_named_echo_call(id, tool, &mut buffer);
            buffer.push(b'\n');
            pending.borrow_mut().insert(id, Instant::now());
            id += 1;
        }
        peer.stdin.write_all(&buffer).await?;
        anyhow::Ok(id)
    };
    let reader = async {
        let mut latencies = Vec::new();
        let mut line = Vec::new();
        let mut last;
        loop {
            line.clear();
            if peer.stdout.read_until(b'\n', &mut line).await? == 0 {
                bail!("the server closed stdout");
            }
            let reply: Reply = serde_json::from_slice(&line).context("reading a reply")?;
            let Some(id) = reply.id else {
                // A notification; the echo tool sends none, but a server may.
                continue;
            };
            let sent = pending
                .borrow_mut()
                .remove(&id)
                .with_context(|| format!("a reply to {id}, which was not asked"))?;
            if reply.result.is_none() {
                bail!("call {id} was refused: {}", String::from_utf8_lossy(&line));
            }
            last = Instant::now();
            latencies.push(u64::try_from((last - sent).as_nanos()).unwrap_or(u64::MAX));
            // Stop is set before the permit is returned, so a writer woken
            // by that permit sees it and sends nothing more.
            if last >= deadline {
                stop.set(true);
            }
            permits.add_permits(1);
            if stop.get() && pending.borrow().is_empty() {
                break;
            }
        }
        anyhow::Ok((latencies, last - started))
    };
    let limit = duration + Duration::from_secs(30);
    let (next_id, (latencies, elapsed)) =
        tokio::time::timeout(limit, async { tokio::try_join!(writer, reader) })
            .await
            .context("the server stopped answering")??;
    peer.next_id = next_id;
    let calls = u64::try_from(latencies.len())?;
    Ok((calls, latencies, elapsed))
}
