//! The intermediary's floor: a process between a stdio client and a stdio
//! server that forwards every line and does nothing else.
//!
//! `relay-echo bytes|json SERVER [ARGS…]` starts `SERVER ARGS…` and copies
//! its own stdin to the server's and the server's stdout to its own, one
//! thread each way. In `bytes` mode the bytes go through untouched; in
//! `json` mode each line is parsed into a `serde_json` value and written
//! again, the least any intermediary that reads its messages does. No
//! gateway or bridge in front of a stdio server can forward faster than
//! this on the same machine, which is what makes it a floor.

use std::io::{BufRead as _, BufReader, BufWriter, Read, Write};
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};
use serde_json::Value;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: relay-echo bytes|json SERVER [ARGS…]";
    let parse = match args.next().as_deref() {
        Some("bytes") => false,
        Some("json") => true,
        _ => bail!(usage),
    };
    let program = args.next().context(usage)?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the server")?;
    let to_server = child.stdin.take().context("the server's stdin")?;
    let from_server = child.stdout.take().context("the server's stdout")?;
    let up = std::thread::spawn(move || pump(std::io::stdin(), to_server, parse));
    pump(from_server, std::io::stdout(), parse)?;
    // The server has closed its stdout; the other direction ends with our stdin.
    let _ = up.join();
    child.wait().context("waiting for the server")?;
    Ok(())
}

/// Copies `from` to `to`, line by line when `parse`, flushing whenever
/// nothing more is waiting to be read, so batches pass as batches.
fn pump(from: impl Read, to: impl Write, parse: bool) -> anyhow::Result<()> {
    let mut from = BufReader::with_capacity(64 * 1024, from);
    let mut to = BufWriter::with_capacity(64 * 1024, to);
    let mut line = Vec::new();
    loop {
        if parse {
            line.clear();
            if from.read_until(b'\n', &mut line)? == 0 {
                break;
            }
            if line.trim_ascii().is_empty() {
                // Nothing to parse; passed on as it came.
                to.write_all(&line)?;
            } else {
                let value: Value = serde_json::from_slice(&line)?;
                serde_json::to_writer(&mut to, &value)?;
                to.write_all(b"\n")?;
            }
        } else {
            let chunk = from.fill_buf()?;
            if chunk.is_empty() {
                break;
            }
            let taken = chunk.len();
            to.write_all(chunk)?;
            from.consume(taken);
        }
        if from.buffer().is_empty() {
            to.flush()?;
        }
    }
    to.flush()?;
    Ok(())
}
