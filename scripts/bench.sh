#!/usr/bin/env bash
# Rebuilds droid and the benchmark programs in release mode, runs the
# micro-benchmarks (briefly) and then the load harness, which measures
# `droid serve`, rmcp and the floor server side by side and prints a markdown
# table (docs/benchmarks.md). Arguments go to the load harness, for example
# `--runs 5 --seconds 10`; `--load-only` skips the micro-benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."

micro=1
args=()
for arg in "$@"; do
    if [ "$arg" = "--load-only" ]; then micro=0; else args+=("$arg"); fi
done

target="${CARGO_TARGET_DIR:-target}"
cargo build --release --locked -p droid -p protocol-droid-bench --bins

if [ "$micro" = 1 ]; then
    # Short windows: enough to rank the hot paths; `cargo bench -p
    # protocol-droid-bench` alone gives criterion's full defaults.
    cargo bench --locked -p protocol-droid-bench --bench hot_paths -- \
        --warm-up-time 0.5 --measurement-time 1 --noplot >&2
fi

{
    echo "machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p'), $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
    echo "load average before the harness: $(cut -d ' ' -f 1-3 /proc/loadavg)"
} >&2
"$target/release/load" "${args[@]}"
