//! The load harness: drives `droid serve`, the rmcp echo server and the floor
//! server on loopback, and prints a markdown table of throughput, latency and
//! memory, each figure the median of several runs with its least and
//! greatest value, and `droid`'s figure as a ratio to rmcp's.
//!
//! ```text
//! load [--runs 3] [--seconds 5] [--warmup 1] [--sessions 1000] [--instructions 20000]
//!      [--bin-dir DIR] [--only TEXT]
//! ```
//!
//! `--instructions` is how many calls each stdio server is counted for under
//! callgrind, when valgrind is installed (0 skips it; see `instructions`).
//!
//! `--only` keeps the scenarios whose title contains `TEXT` (`--only "stdio, 64"`,
//! `--only "idle sessions"`), for profiling one under `perf record -g`,
//! which follows the servers the harness starts.
//!
//! The programs are looked for next to this one (`target/release/`). Every
//! server is started afresh for each scenario of each run, so a peak resident
//! set belongs to one scenario. The generator runs on one thread and reads
//! only what it must of each reply, so that on a small machine most of the
//! time goes to the server measured. It binds and connects to 127.0.0.1 only.

mod cpu;
mod http;
mod instructions;
mod scaled;
mod servers;
mod stats;
mod stdio;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use protocol_droid_bench::{floor_reply, write_stateless_echo_call};
use serde_json::Value;

use crate::http::Era;
use crate::servers::{Binaries, Target};
use crate::stats::{Sample, Spread, float};

/// What one invocation measures, and for how long.
#[derive(Debug)]
struct Options {
    runs: usize,
    warmup: Duration,
    measured: Duration,
    sessions: u64,
    binaries: Binaries,
    /// Only scenarios whose title contains this (for profiling one).
    only: Option<String>,
    /// Calls counted under callgrind per server; 0 skips the count.
    instructions: u64,
}

/// A workload, measured for some of the servers.
#[derive(Clone, Copy, Debug)]
enum Scenario {
    /// Pipelined calls on stdio with this many in flight.
    Stdio(usize),
    /// Calls on HTTP in `Era` over this many connections.
    Http(Era, u64),
}

impl Scenario {
    const ALL: [Self; 5] = [
        Self::Stdio(1),
        Self::Stdio(64),
        Self::Http(Era::Stateless, 1),
        Self::Http(Era::Stateless, 32),
        Self::Http(Era::Sessions, 32),
    ];

    fn title(self) -> String {
        match self {
            Self::Stdio(n) => format!("stdio, {n} in flight"),
            Self::Http(Era::Stateless, n) => format!("HTTP 2026-07-28 stateless, {n} concurrent"),
            Self::Http(Era::Sessions, n) => format!("HTTP 2025-11-25 sessions, {n} concurrent"),
        }
    }

    /// The servers this workload runs against: stdio has no floor server
    /// (the `serde_json` loop is its floor).
    const fn targets(self) -> &'static [Target] {
        match self {
            Self::Stdio(_) => &[
                Target::Droid,
                Target::Rmcp,
                Target::Gateway,
                Target::Bridge,
                Target::RelayBytes,
                Target::RelayJson,
            ],
            Self::Http(..) => &[
                Target::Droid,
                Target::Rmcp,
                Target::Floor,
                Target::Gateway,
                Target::Bridge,
            ],
        }
    }
}

/// Every figure of every run.
#[derive(Debug, Default)]
struct Results {
    /// `(scenario index, target, sample)`.
    samples: Vec<(usize, Target, Sample)>,
    /// `(target, KiB per idle session)`.
    sessions: Vec<(Target, f64)>,
    /// `serde_json` floor, request/reply pairs per second.
    floor_pairs: Vec<f64>,
    /// `(target, instructions per stdio call)`, counted once.
    instructions: Vec<(Target, f64)>,
    /// `(era, deployment, sample)` behind the balancer.
    scaled: Vec<(Era, scaled::Deployment, Sample)>,
}

impl Results {
    /// The spread of `figure` over the runs of scenario `index` against
    /// `target`.
    fn spread(&self, index: usize, target: Target, figure: fn(&Sample) -> f64) -> Option<Spread> {
        let values: Vec<f64> = self
            .samples
            .iter()
            .filter(|(i, t, _)| *i == index && *t == target)
            .map(|(_, _, s)| figure(s))
            // A figure not read in a run (NaN) is not a value.
            .filter(|value| !value.is_nan())
            .collect();
        Spread::of(&values)
    }
}

fn main() -> anyhow::Result<()> {
    let options = options()?;
    options.binaries.check()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let load_before = load_average();
    let started = Instant::now();
    let mut results = Results::default();
    for run in 1..=options.runs {
        // Progress goes to stderr so that stdout is the table alone.
        log(&format!("run {run} of {}", options.runs));
        results.floor_pairs.push(serde_json_floor(options.measured));
        for (index, scenario) in Scenario::ALL.into_iter().enumerate() {
            if options
                .only
                .as_ref()
                .is_some_and(|only| !scenario.title().contains(only.as_str()))
            {
                continue;
            }
            for &target in scenario.targets() {
                let sample = runtime
                    .block_on(measure(&options, scenario, target))
                    .with_context(|| format!("{} against {}", scenario.title(), target.name()))?;
                let cpu = sample.cpu.map_or_else(String::new, |cpu| {
                    format!(
                        " cpu/call {:.1} + upstream {:.1} + generator {:.1} µs",
                        cpu.own_us, cpu.upstream_us, cpu.generator_us
                    )
                });
                log(&format!(
                    "  {:<42} {:<11} {:>9.0}/s p50 {:>7.0} µs p99 {:>7.0} µs peak {:>6.1} MiB{cpu}",
                    scenario.title(),
                    target.name(),
                    sample.per_second,
                    sample.p50_us,
                    sample.p99_us,
                    sample.peak_mib
                ));
                results.samples.push((index, target, sample));
            }
        }
        let sessions_wanted = options
            .only
            .as_ref()
            .is_none_or(|only| "idle sessions".contains(only.as_str()));
        for target in [Target::Droid, Target::Rmcp, Target::Gateway]
            .into_iter()
            .filter(|_| sessions_wanted)
        {
            let per_session = runtime
                .block_on(http::memory_per_session(
                    &options.binaries,
                    target,
                    options.sessions,
                ))
                .with_context(|| format!("idle sessions against {}", target.name()))?;
            log(&format!(
                "  idle legacy session    {:<5} {per_session:.2} KiB",
                target.name()
            ));
            results.sessions.push((target, per_session));
        }
    }
    let scaling = options
        .only
        .as_ref()
        .is_none_or(|only| "instances".contains(only.as_str()));
    if scaling && !scaled::available() {
        log(
            "redis-server or haproxy is missing (scripts/services.sh): several instances are not measured",
        );
    } else if scaling {
        for run in 1..=options.runs {
            log(&format!("instances, run {run} of {}", options.runs));
            for era in [Era::Stateless, Era::Sessions] {
                for deployment in scaled::Deployment::ALL {
                    let sample = runtime
                        .block_on(scaled::measure(
                            &options.binaries,
                            deployment,
                            era,
                            32,
                            options.warmup,
                            options.measured,
                        ))
                        .with_context(|| format!("{} behind haproxy", deployment.title()))?;
                    log(&format!(
                        "  {:<10} {:<20} {:>9.0}/s p50 {:>7.0} µs p99 {:>7.0} µs",
                        era_title(era),
                        deployment.title(),
                        sample.per_second,
                        sample.p50_us,
                        sample.p99_us,
                    ));
                    results.scaled.push((era, deployment, sample));
                }
            }
        }
    }
    let counting = options.instructions > 0
        && options
            .only
            .as_ref()
            .is_none_or(|only| "instructions".contains(only.as_str()));
    if counting && !instructions::available() {
        log("valgrind is not installed: instructions per call are not counted");
    } else if counting {
        // The gateway and the bridge are counted alone, their upstream not:
        // what each adds to a call in its own process.
        for target in [
            Target::Droid,
            Target::Rmcp,
            Target::Gateway,
            Target::Bridge,
            Target::RelayJson,
        ] {
            let per_call = runtime
                .block_on(instructions::per_call(
                    &options.binaries,
                    target,
                    options.instructions,
                ))
                .with_context(|| format!("counting instructions of {}", target.name()))?;
            log(&format!(
                "  instructions per call  {:<7} {per_call:.0}",
                target.name()
            ));
            results.instructions.push((target, per_call));
        }
    }
    let report = table(&results, &options, &load_before, started.elapsed());
    // The table is the program's output.
    #[expect(clippy::print_stdout, reason = "the table is what the harness prints")]
    {
        print!("{report}");
    }
    Ok(())
}

async fn measure(options: &Options, scenario: Scenario, target: Target) -> anyhow::Result<Sample> {
    match scenario {
        Scenario::Stdio(in_flight) => {
            stdio::measure(
                &options.binaries,
                target,
                in_flight,
                options.warmup,
                options.measured,
            )
            .await
        }
        Scenario::Http(era, concurrency) => {
            http::measure(
                &options.binaries,
                target,
                era,
                concurrency,
                options.warmup,
                options.measured,
            )
            .await
        }
    }
}

#[expect(
    clippy::print_stderr,
    reason = "progress is shown on stderr, apart from the table"
)]
fn log(line: &str) {
    eprintln!("{line}");
}

fn options() -> anyhow::Result<Options> {
    let mut runs = 3;
    let mut seconds = 5.0;
    let mut warmup = 1.0;
    let mut sessions = 1_000;
    let mut only = None;
    let mut instructions = 20_000;
    let mut dir = std::env::current_exe()?
        .parent()
        .context("the harness has no directory")?
        .to_path_buf();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--runs" => runs = value()?.parse()?,
            "--seconds" => seconds = value()?.parse()?,
            "--warmup" => warmup = value()?.parse()?,
            "--sessions" => sessions = value()?.parse()?,
            "--bin-dir" => dir = PathBuf::from(value()?),
            "--only" => only = Some(value()?),
            "--instructions" => instructions = value()?.parse()?,
            other => bail!(
                "unknown argument {other}; usage: load [--runs N] [--seconds S] [--warmup S] [--sessions N] [--instructions CALLS] [--bin-dir DIR] [--only TEXT]"
            ),
        }
    }
    if runs == 0 {
        bail!("--runs must be at least 1");
    }
    Ok(Options {
        runs,
        warmup: Duration::try_from_secs_f64(warmup)?,
        measured: Duration::try_from_secs_f64(seconds)?,
        sessions,
        binaries: Binaries { dir },
        only,
        instructions,
    })
}

/// `serde_json` alone, on this thread: parse the stateless `echo` request,
/// build the reply and write it, for `duration`. Pairs per second.
fn serde_json_floor(duration: Duration) -> f64 {
    let mut request = Vec::new();
    write_stateless_echo_call(1, &mut request);
    let mut reply = Vec::with_capacity(256);
    let started = Instant::now();
    let mut pairs = 0_u64;
    while started.elapsed() < duration {
        // A batch between clock reads, so the clock is not what is measured.
        for _ in 0..1_000 {
            let Ok(parsed) = serde_json::from_slice::<Value>(&request) else {
                return f64::NAN;
            };
            reply.clear();
            if serde_json::to_writer(&mut reply, &floor_reply(&parsed)).is_err() {
                return f64::NAN;
            }
            pairs += 1;
        }
    }
    float(pairs) / started.elapsed().as_secs_f64()
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// The markdown report.
fn table(results: &Results, options: &Options, load_before: &str, took: Duration) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Medians of {} runs (least–greatest in brackets); {} s measured after {} s warm-up per scenario; \
         load average {load_before} before and {} after; {:.0} s in all.\n",
        options.runs,
        options.measured.as_secs_f64(),
        options.warmup.as_secs_f64(),
        load_average(),
        took.as_secs_f64(),
    );
    out.push_str("| scenario | figure | droid | rmcp | floor | droid ÷ rmcp |\n");
    out.push_str("|---|---|---:|---:|---:|---:|\n");
    type Figure = (&'static str, fn(&Sample) -> f64, usize);
    let figures: [Figure; 4] = [
        ("calls/s", |s| s.per_second, 0),
        ("p50 µs", |s| s.p50_us, 0),
        ("p99 µs", |s| s.p99_us, 0),
        ("peak RSS MiB", |s| s.peak_mib, 1),
    ];
    for (index, scenario) in Scenario::ALL.into_iter().enumerate() {
        for (row, (name, figure, decimals)) in figures.iter().enumerate() {
            let spread = |target: Target| results.spread(index, target, *figure);
            let title = if row == 0 {
                scenario.title()
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "| {title} | {name} | {} | {} | {} | {} |",
                cell(spread(Target::Droid), *decimals),
                cell(spread(Target::Rmcp), *decimals),
                cell(spread(Target::Floor), *decimals),
                ratio(spread(Target::Droid), spread(Target::Rmcp)),
            );
        }
    }
    let per_session = |target: Target| {
        let values: Vec<f64> = results
            .sessions
            .iter()
            .filter(|(t, _)| *t == target)
            .map(|(_, v)| *v)
            .collect();
        Spread::of(&values)
    };
    let _ = writeln!(
        out,
        "| {} idle 2025-11-25 sessions | KiB per session | {} | {} | — | {} |",
        options.sessions,
        cell(per_session(Target::Droid), 2),
        cell(per_session(Target::Rmcp), 2),
        ratio(per_session(Target::Droid), per_session(Target::Rmcp)),
    );
    if let Some(gateway) = per_session(Target::Gateway) {
        let _ = writeln!(
            out,
            "\nAn idle 2025-11-25 session of `droid gateway` (its embedded default) costs {} KiB.",
            cell(Some(gateway), 2)
        );
    }
    let _ = writeln!(
        out,
        "| serde_json alone, one thread | request/reply pairs per s | — | — | {} | — |",
        cell(Spread::of(&results.floor_pairs), 0),
    );
    let counted = |target: Target| {
        results
            .instructions
            .iter()
            .find(|(t, _)| *t == target)
            .map(|(_, n)| *n)
    };
    if let (Some(droid), Some(rmcp)) = (counted(Target::Droid), counted(Target::Rmcp)) {
        let _ = writeln!(
            out,
            "| stdio, 64 in flight, under callgrind (counted once) | instructions per call | {} | {} | — | {:.2} |",
            number(droid, 0),
            number(rmcp, 0),
            droid / rmcp,
        );
    }
    for (via, program) in [
        (Target::Gateway, "`droid gateway`"),
        (Target::Bridge, "`droid bridge`"),
        (Target::RelayJson, "`relay-echo json`"),
    ] {
        if let (Some(droid), Some(through)) = (counted(Target::Droid), counted(via)) {
            let _ = writeln!(
                out,
                "| stdio, 64 in flight, under callgrind, {program} alone (its upstream not counted) | instructions per call | {} | — | — | {:.2} × `droid serve` |",
                number(through, 0),
                through / droid,
            );
        }
    }
    overhead_table(results, Target::Gateway, "`droid gateway`", &mut out);
    overhead_table(results, Target::Bridge, "`droid bridge`", &mut out);
    overhead_table(results, Target::RelayBytes, "`relay-echo bytes`", &mut out);
    overhead_table(results, Target::RelayJson, "`relay-echo json`", &mut out);
    scaled_table(results, &mut out);
    out
}

fn era_title(era: Era) -> &'static str {
    match era {
        Era::Stateless => "2026-07-28",
        Era::Sessions => "2025-11-25",
    }
}

/// `droid serve` behind haproxy, 32 clients: one instance in memory against
/// one, two and three sharing Redis.
fn scaled_table(results: &Results, out: &mut String) {
    if results.scaled.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "
| behind haproxy, 32 concurrent | deployment | calls/s | p50 µs | p99 µs | peak RSS MiB, instances | calls/s ÷ 1 in memory |"
    );
    out.push_str(
        "|---|---|---:|---:|---:|---:|---:|
",
    );
    for era in [Era::Stateless, Era::Sessions] {
        let spread = |deployment: scaled::Deployment, figure: fn(&Sample) -> f64| {
            let values: Vec<f64> = results
                .scaled
                .iter()
                .filter(|(e, d, _)| *e == era && *d == deployment)
                .map(|(_, _, s)| figure(s))
                .collect();
            Spread::of(&values)
        };
        let baseline = spread(scaled::Deployment::ALL[0], |s| s.per_second);
        for (row, deployment) in scaled::Deployment::ALL.into_iter().enumerate() {
            let title = if row == 0 { era_title(era) } else { "" };
            let _ = writeln!(
                out,
                "| {title} | {} | {} | {} | {} | {} | {} |",
                deployment.title(),
                cell(spread(deployment, |s| s.per_second), 0),
                cell(spread(deployment, |s| s.p50_us), 0),
                cell(spread(deployment, |s| s.p99_us), 0),
                cell(spread(deployment, |s| s.peak_mib), 1),
                ratio(spread(deployment, |s| s.per_second), baseline),
            );
        }
    }
}

/// The cost per call of `via` (the gateway or the bridge) in front of
/// `droid serve`, against `droid serve` alone, on the same workloads.
fn overhead_table(results: &Results, via: Target, program: &str, out: &mut String) {
    let name = via.name();
    let _ = writeln!(
        out,
        "\n| {name} overhead | figure | direct (`droid serve`) | via {program} | {name} ÷ direct |"
    );
    out.push_str("|---|---|---:|---:|---:|\n");
    type Figure = (&'static str, fn(&Sample) -> f64, usize);
    // Processor time is read on stdio only; where it was not, its rows are
    // left out.
    let figures: [Figure; 6] = [
        ("calls/s", |s| s.per_second, 0),
        ("p50 µs", |s| s.p50_us, 0),
        ("p99 µs", |s| s.p99_us, 0),
        (
            "CPU µs per call, the server or intermediary",
            |s| s.cpu.map_or(f64::NAN, |c| c.own_us),
            1,
        ),
        (
            "CPU µs per call, its upstream",
            |s| s.cpu.map_or(f64::NAN, |c| c.upstream_us),
            1,
        ),
        (
            "CPU µs per call, the generator",
            |s| s.cpu.map_or(f64::NAN, |c| c.generator_us),
            1,
        ),
    ];
    for (index, scenario) in Scenario::ALL.into_iter().enumerate() {
        if !scenario.targets().contains(&via) {
            continue;
        }
        for (row, (name, figure, decimals)) in figures.iter().enumerate() {
            let title = if row == 0 {
                scenario.title()
            } else {
                String::new()
            };
            let direct = results.spread(index, Target::Droid, *figure);
            let through = results.spread(index, via, *figure);
            if direct.is_none() && through.is_none() && row > 0 {
                continue;
            }
            let _ = writeln!(
                out,
                "| {title} | {name} | {} | {} | {} |",
                cell(direct, *decimals),
                cell(through, *decimals),
                ratio(through, direct),
            );
        }
    }
}

fn cell(spread: Option<Spread>, decimals: usize) -> String {
    spread.map_or_else(
        || "—".to_owned(),
        |s| {
            format!(
                "{} ({}–{})",
                number(s.median, decimals),
                number(s.min, decimals),
                number(s.max, decimals)
            )
        },
    )
}

fn ratio(droid: Option<Spread>, rmcp: Option<Spread>) -> String {
    match (droid, rmcp) {
        (Some(d), Some(r)) if r.median > 0.0 => format!("{:.2}", d.median / r.median),
        _ => "—".to_owned(),
    }
}

/// `value` with `decimals` places and thousands separated, for reading.
fn number(value: f64, decimals: usize) -> String {
    let text = format!("{value:.decimals$}");
    let (whole, fraction) = text
        .split_once('.')
        .map_or((text.as_str(), None), |(w, f)| (w, Some(f)));
    let mut grouped = String::new();
    for (i, digit) in whole.chars().enumerate() {
        if i > 0 && (whole.len() - i) % 3 == 0 && digit.is_ascii_digit() {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    match fraction {
        Some(f) => format!("{grouped}.{f}"),
        None => grouped,
    }
}
