#!/usr/bin/env bash
# Every check the project runs: formatting, the layering rule
# (scripts/check-layers.sh), the dependency policy (scripts/deny.sh, which
# installs cargo-deny), lints, tests (unit, integration, property, doc, and
# the Rust in README.md and docs/; the scale-out tests start Debian's
# redis-server and haproxy, which scripts/services.sh installs), the
# library's examples run against one another (scripts/examples.sh), the
# official SDK clients against `droid serve` (which tests/interop/setup.sh
# installs: npm packages and a Python venv), the official ACP TypeScript
# SDK against `droid acp` (tests/acp-interop), the MCP Inspector's command
# line against `droid serve`, `droid gateway` and `droid bridge`
# (tests/inspector, which installs it and the Node 22 it needs), the
# gateway's admin page in
# Debian's Chromium driven by playwright-core (tests/admin-page, which
# installs chromium with apt-get when it is missing), the official
# conformance suite against `droid serve --listen` and, in client mode,
# against `conformance-client` (which tests/conformance/run.sh installs,
# with Node 22), a short run of
# every fuzz target (scripts/fuzz-smoke.sh, which installs cargo-fuzz and
# needs the nightly toolchain), and the documentation build. CI runs exactly
# this.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# Incremental state only speeds up the next build of the same code; on a
# fresh checkout (CI) it would be written once (about 2.5 GB over the steps
# below) and never read, and a run can fail on a small disk for it. Locally,
# the workspace's own crates build again once when switching between this and
# a plain `cargo test`.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# Warnings are errors here and only here, so a local build stays usable while
# a change is in progress.
export RUSTDOCFLAGS="-D warnings"

# Each heading tells the free space, so a run that fills its disk shows where.
step() { printf '\n==> %s (%s free)\n' "$*" "$( (df -h --output=avail . 2>/dev/null || echo '?') | tail -n 1 | tr -d ' ')"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "layers: sans-IO crates stay sans-IO, application/ imports no adapter"
bash scripts/check-layers.sh

step "dependencies: licences, duplicate versions, sources and advisories (cargo-deny)"
deny_log=$(mktemp)
trap 'rm -f "$deny_log"' EXIT
bash scripts/deny.sh 2>&1 | tee "$deny_log" || true

step "cargo clippy (all targets, warnings denied)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "services: Debian's redis-server and haproxy, for the scale-out tests (scripts/services.sh)"
bash scripts/services.sh

step "cargo test (unit, integration, property and doc tests)"
log=$(mktemp)
trap 'rm -f "$deny_log" "$log"' EXIT
cargo test --workspace --locked 2>&1 | tee "$log"

step "examples: the client example against the server, bridge and gateway examples"
examples_log=$(mktemp)
trap 'rm -f "$deny_log" "$log" "$examples_log"' EXIT
cargo build --locked -p protocol-droid --examples
bash scripts/examples.sh 2>&1 | tee "$examples_log" || true

step "interoperability: the official SDK clients against droid serve"
interop_log=$(mktemp)
trap 'rm -f "$deny_log" "$log" "$examples_log" "$interop_log"' EXIT
cargo build --locked -p droid -p conformance-client
bash tests/interop/run.sh 2>&1 | tee "$interop_log" || true

step "interoperability: the official ACP TypeScript SDK client against droid acp"
acp_log=$(mktemp)
trap 'rm -f "$deny_log" "$log" "$examples_log" "$interop_log" "$acp_log"' EXIT
bash tests/acp-interop/run.sh 2>&1 | tee "$acp_log" || true

step "interoperability: the MCP Inspector's command line against droid serve, gateway and bridge"
inspector_log=$(mktemp)
trap 'rm -f "$deny_log" "$log" "$examples_log" "$interop_log" "$acp_log" "$inspector_log"' EXIT
bash tests/inspector/run.sh 2>&1 | tee "$inspector_log" || true

step "admin page: the gateway's page in headless Chromium (playwright-core), against a live session and a drifting upstream"
admin_log=$(mktemp)
trap 'rm -f "$deny_log" "$log" "$examples_log" "$interop_log" "$acp_log" "$inspector_log" "$admin_log"' EXIT
bash tests/admin-page/run.sh 2>&1 | tee "$admin_log" || true

step "conformance: the official MCP suite against droid serve --listen and conformance-client"
conformance_log=$(mktemp)
trap 'rm -f "$deny_log" "$log" "$examples_log" "$interop_log" "$acp_log" "$inspector_log" "$admin_log" "$conformance_log"' EXIT
bash tests/conformance/run.sh 2>&1 | tee "$conformance_log" || true

step "fuzzing: every target briefly, and every fault found so far stays fixed"
fuzz_log=$(mktemp)
trap 'rm -f "$deny_log" "$log" "$examples_log" "$interop_log" "$acp_log" "$inspector_log" "$admin_log" "$conformance_log" "$fuzz_log"' EXIT
bash scripts/fuzz-smoke.sh 20 2>&1 | tee "$fuzz_log" || true

step "cargo doc (warnings denied)"
cargo doc --workspace --no-deps --locked

step "benchmarks compile (cargo bench --no-run), so they cannot rot"
cargo bench --no-run --locked -p protocol-droid-bench

# One closing line summing every test binary, so a reader (or CI) sees the
# whole run at a glance.
passed=$(grep -Eo '[0-9]+ passed' "$log" | awk '{s+=$1} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' "$log" | awk '{s+=$1} END {print s+0}')
# The dependency, examples, interop, ACP, Inspector, admin page, conformance and fuzzing runners
# each end with their own total (conformance: scored scenarios); a run that printed none
# failed.
for runner_log in "$deny_log" "$examples_log" "$interop_log" "$acp_log" "$inspector_log" "$admin_log" "$conformance_log" "$fuzz_log"; do
    total=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$runner_log" | tail -n 1 || true)
    if [ -z "$total" ]; then
        total="0 passed, 1 failed"
    fi
    passed=$((passed + $(echo "$total" | awk '{print $1}')))
    failed=$((failed + $(echo "$total" | awk '{print $3}')))
done
printf '\n%s passed, %s failed\n' "$passed" "$failed"
[ "$failed" -eq 0 ]
