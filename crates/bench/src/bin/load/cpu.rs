//! Processor time per call, read from `/proc`, for each process in a chain.
//!
//! A rate on a shared two-core machine moves with whatever else runs; the
//! processor time each process spends per call moves much less, and it says
//! where a chain's time goes: in the program measured, in the upstream it
//! starts, or in the generator. `/proc/PID/stat` counts user and system
//! time, every thread included, in clock ticks.

use std::path::Path;

use anyhow::Context as _;

use crate::stats::{PerCall, float};

/// Clock ticks per second in `/proc`: `USER_HZ`, which Linux fixes at 100
/// in what it shows user space, whatever the kernel's own tick.
const TICKS_PER_SECOND: u64 = 100;

/// Processor time so far, in ticks, of a process, of its descendants, and
/// of this generator.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    own: u64,
    descendants: u64,
    generator: u64,
}

impl Clock {
    /// Reads the clocks of `pid`, of every process descended from it, and
    /// of this process.
    pub(crate) fn read(pid: u32) -> anyhow::Result<Self> {
        let descendants = descendants(pid)?
            .into_iter()
            // One may exit between the listing and the read.
            .filter_map(|child| ticks(child).ok())
            .sum();
        Ok(Self {
            own: ticks(pid)?,
            descendants,
            generator: ticks(std::process::id())?,
        })
    }

    /// Microseconds per call between `self` and `later` over `calls` calls.
    pub(crate) fn per_call(self, later: Self, calls: u64) -> PerCall {
        let per_call = |before: u64, after: u64| {
            float(after.saturating_sub(before)) * 1e6
                / float(TICKS_PER_SECOND)
                / float(calls.max(1))
        };
        PerCall {
            own_us: per_call(self.own, later.own),
            upstream_us: per_call(self.descendants, later.descendants),
            generator_us: per_call(self.generator, later.generator),
        }
    }
}

/// User and system ticks of `pid`, all its threads.
fn ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat"))
        .context("reading /proc/PID/stat")?;
    let fields = after_name(&stat)?;
    // utime and stime are the 14th and 15th fields, the 12th and 13th
    // after the name.
    let field = |n: usize| -> anyhow::Result<u64> {
        fields
            .get(n)
            .context("a short /proc/PID/stat")?
            .parse()
            .context("a tick count")
    };
    Ok(field(11)? + field(12)?)
}

/// The fields of a `/proc/PID/stat` line after the process's name, which
/// is in parentheses and may hold spaces and parentheses of its own.
fn after_name(stat: &str) -> anyhow::Result<Vec<&str>> {
    let (_, rest) = stat.rsplit_once(')').context("no name in /proc/PID/stat")?;
    Ok(rest.split_whitespace().collect())
}

/// Every process descended from `root`, found by each one's parent.
fn descendants(root: u32) -> anyhow::Result<Vec<u32>> {
    let mut parents = Vec::new();
    for entry in std::fs::read_dir("/proc").context("listing /proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The parent is the second field after the name.
        if let Some(parent) = after_name(&stat)
            .ok()
            .and_then(|fields| fields.get(1)?.parse::<u32>().ok())
        {
            parents.push((pid, parent));
        }
    }
    let mut found = vec![root];
    let mut next = 0;
    while let Some(&parent) = found.get(next) {
        found.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(pid, _)| *pid),
        );
        next += 1;
    }
    found.remove(0);
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::{after_name, descendants, ticks};

    #[test]
    fn a_name_with_spaces_and_parentheses_is_skipped_whole() -> anyhow::Result<()> {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0 20 0";
        let fields = after_name(stat)?;
        assert_eq!(fields.first(), Some(&"S"));
        assert_eq!(fields.get(1), Some(&"1"));
        assert_eq!(fields.get(11), Some(&"7"));
        assert_eq!(fields.get(12), Some(&"3"));
        Ok(())
    }

    #[test]
    fn this_process_has_a_clock_and_a_child_is_its_descendant() -> anyhow::Result<()> {
        ticks(std::process::id())?;
        let mut child = std::process::Command::new("sleep").arg("5").spawn()?;
        let found = descendants(std::process::id())?;
        child.kill()?;
        child.wait()?;
        assert!(found.contains(&child.id()), "{found:?}");
        Ok(())
    }
}
