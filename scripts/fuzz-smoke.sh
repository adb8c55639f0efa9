#!/usr/bin/env bash
# Builds every fuzz target and runs each one briefly from its committed seeds.
#
#   scripts/fuzz-smoke.sh [seconds per target, default 20]
#
# Needs a nightly toolchain (`cargo +nightly`); installs cargo-fuzz from
# crates.io when it is missing. Builds on one job and fuzzes on one worker,
# at the lowest priority. Exits non-zero when any target fails (a panic, a
# broken invariant, a sanitizer report or a timeout) and ends with one line:
# "N passed, M failed".
#
# The reproducers of every fault fuzzing has found (fuzz/regressions/) run
# first; one that fails again fails the run. PD_FUZZ_KNOWN_ISSUES can name
# issues a target should tolerate while one is being fixed; none is named by
# default.
set -euo pipefail

seconds="${1:-20}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fuzz="$root/fuzz"
export PD_FUZZ_KNOWN_ISSUES="${PD_FUZZ_KNOWN_ISSUES-}"

if ! cargo fuzz --version >/dev/null 2>&1; then
    nice -n 19 cargo install cargo-fuzz --locked -j 1
fi

CARGO_BUILD_JOBS=1 nice -n 19 cargo +nightly fuzz build --fuzz-dir "$fuzz"
host="$(rustc +nightly -vV | sed -n 's/^host: //p')"
bin="$fuzz/target/$host/release"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# libFuzzer's -jobs mode writes fuzz-<n>.log into the working directory.
cd "$work"

passed=0
failed=0
for reproducer in "$fuzz"/regressions/*/*; do
    [ -f "$reproducer" ] || continue
    target="$(basename "$(dirname "$reproducer")")"
    if PD_FUZZ_KNOWN_ISSUES="" "$bin/$target" "$reproducer" >"$work/regression.out" 2>&1; then
        echo "-- fixed, stays fixed: ${reproducer#"$fuzz"/}"
    else
        failed=$((failed + 1))
        echo "!! a fault fuzzing found is back: ${reproducer#"$fuzz"/}"
        tail -n 20 "$work/regression.out" || true
    fi
done
echo "-- tolerated known issues: ${PD_FUZZ_KNOWN_ISSUES:-none}"
for target in $(cargo +nightly fuzz list --fuzz-dir "$fuzz"); do
    corpus="$work/corpus/$target"
    artifacts="$work/artifacts/$target/"
    mkdir -p "$corpus" "$artifacts"
    if [ -d "$fuzz/seeds/$target" ]; then
        cp "$fuzz/seeds/$target"/* "$corpus"/
    fi
    echo "== $target (${seconds}s)"
    rm -f fuzz-*.log
    if nice -n 19 "$bin/$target" "$corpus" \
        -max_total_time="$seconds" -jobs=1 -workers=1 -timeout=60 \
        -artifact_prefix="$artifacts" -print_final_stats=1 \
        >"$work/$target.out" 2>&1; then
        passed=$((passed + 1))
        grep -hE '^stat::(number_of_executed_units|average_exec_per_sec)' fuzz-*.log || true
    else
        failed=$((failed + 1))
        echo "!! $target failed; the end of its log:"
        tail -n 40 fuzz-*.log "$work/$target.out" 2>/dev/null || true
        for artifact in "$artifacts"*; do
            [ -e "$artifact" ] || continue
            mkdir -p "$fuzz/artifacts/$target"
            cp "$artifact" "$fuzz/artifacts/$target/"
            echo "!! reproducer kept: fuzz/artifacts/$target/$(basename "$artifact")"
        done
    fi
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
