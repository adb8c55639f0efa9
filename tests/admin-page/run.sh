#!/usr/bin/env bash
# The gateway's admin page in a real browser: Debian's Chromium (installed
# here with apt-get when missing), driven by playwright-core, against
# `droid gateway --admin-listen`, with the official MCP TypeScript SDK as a
# live session (both pinned in package-lock.json, installed into
# node_modules/ here by npm ci, skipped when up to date). Screenshots go to
# screenshots/. Ends with one line
#   N passed, N failed
# Exit status 0 only if every test passed.
#
#   DROID_BIN   the droid binary (default: <repo>/target/debug/droid, or
#               $CARGO_TARGET_DIR/debug/droid when that is set)
#   CHROMIUM    the browser (default: /usr/bin/chromium)
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export DROID_BIN="${DROID_BIN:-${CARGO_TARGET_DIR:-$repo/target}/debug/droid}"
export CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"

fail() { echo "admin-page: $*"; echo "0 passed, 1 failed"; exit 1; }

command -v node >/dev/null && command -v npm >/dev/null || fail "node and npm are required"
[ "$(node -p 'process.versions.node.split(".")[0]')" -ge 20 ] || fail "Node 20 or newer is required"
[ -x "$DROID_BIN" ] || fail "no droid binary at $DROID_BIN (cargo build -p droid, or set DROID_BIN)"

if [ ! -x "$CHROMIUM" ]; then
    command -v apt-get >/dev/null || fail "no browser at $CHROMIUM, and no apt-get to install Debian's chromium"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo -n"
    echo "installing Debian's chromium" >&2
    { $sudo apt-get install -y --no-install-recommends chromium >&2 \
        || { $sudo apt-get update >&2 && $sudo apt-get install -y --no-install-recommends chromium >&2; }; } \
        || fail "apt-get could not install chromium"
    [ -x "$CHROMIUM" ] || fail "chromium was installed, but not at $CHROMIUM"
fi

cd "$here"
want="$(cat package.json package-lock.json | sha256sum | cut -c1-64)"
if [ "$(cat node_modules/.admin-page-stamp 2>/dev/null)" != "$want" ]; then
    npm ci --no-audit --no-fund --loglevel=error >&2 || fail "npm ci failed"
    echo "$want" > node_modules/.admin-page-stamp
fi

tap="$(mktemp)"
trap 'rm -f "$tap"' EXIT
timeout "${ADMIN_PAGE_TIMEOUT:-300}" node --test --test-concurrency=1 --test-timeout=120000 \
    --test-reporter=spec --test-reporter-destination=stdout \
    --test-reporter=tap --test-reporter-destination="$tap" \
    admin.test.mjs
rc=$?
bash "$repo/scripts/tap-total.sh" "$tap" "$rc"
