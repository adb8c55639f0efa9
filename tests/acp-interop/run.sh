#!/usr/bin/env bash
# The official ACP TypeScript SDK (pinned in package-lock.json) as the client
# of `droid acp`, with `droid serve` as the sessions' MCP server. Installs the
# SDK into node_modules/ here (npm ci, skipped when up to date), runs the
# tests with Node's test runner, and ends with one line
#   N passed, N failed
# Exit status 0 only if every test passed.
#
#   DROID_BIN   the droid binary (default: <repo>/target/debug/droid, or
#               $CARGO_TARGET_DIR/debug/droid when that is set)
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export DROID_BIN="${DROID_BIN:-${CARGO_TARGET_DIR:-$repo/target}/debug/droid}"

fail() { echo "acp-interop: $*"; echo "0 passed, 1 failed"; exit 1; }

command -v node >/dev/null && command -v npm >/dev/null || fail "node and npm are required"
[ "$(node -p 'process.versions.node.split(".")[0]')" -ge 20 ] || fail "Node 20 or newer is required"
[ -x "$DROID_BIN" ] || fail "no droid binary at $DROID_BIN (cargo build -p droid, or set DROID_BIN)"

cd "$here"
want="$(cat package.json package-lock.json | sha256sum | cut -c1-64)"
if [ "$(cat node_modules/.acp-interop-stamp 2>/dev/null)" != "$want" ]; then
    npm ci --no-audit --no-fund --loglevel=error >&2 || fail "npm ci failed"
    echo "$want" > node_modules/.acp-interop-stamp
fi

tap="$(mktemp)"
trap 'rm -f "$tap"' EXIT
timeout "${ACP_INTEROP_TIMEOUT:-300}" node --test --test-timeout=60000 \
    --test-reporter=spec --test-reporter-destination=stdout \
    --test-reporter=tap --test-reporter-destination="$tap" \
    acp.test.mjs
rc=$?
bash "$repo/scripts/tap-total.sh" "$tap" "$rc"
