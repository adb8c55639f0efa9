#!/usr/bin/env bash
# Runs the library's examples against one another, so they are shown to work
# and not only to build: the client example calls `add` on the stdio server,
# on the HTTP server, through the bridge and through the gateway.
#
#   scripts/examples.sh     (after `cargo build -p protocol-droid --examples`)
#
# Ends with "N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."

bin="${CARGO_TARGET_DIR:-target}/debug/examples"
passed=0
failed=0

# expect NAME PATTERN COMMAND...: the command's output must hold PATTERN.
expect() {
    local name=$1 pattern=$2
    shift 2
    local out
    out=$(timeout 60 "$@" 2>&1)
    if grep -qF -- "$pattern" <<<"$out"; then
        echo "ok   $name"
        passed=$((passed + 1))
    else
        echo "FAIL $name"
        sed 's/^/     /' <<<"$out"
        failed=$((failed + 1))
    fi
}

expect "client -> stdio_server" 'add(2, 40) = {"sum":42.0}' \
    "$bin/client" "$bin/stdio_server"
expect "client -> bridge -> stdio_server" 'add(2, 40) = {"sum":42.0}' \
    "$bin/client" "$bin/bridge" "$bin/stdio_server"
expect "client -> gateway -> stdio_server" 'calc/add(2, 40) = {"sum":42.0}' \
    "$bin/client" "$bin/gateway" "calc=$PWD/$bin/stdio_server"

# The HTTP example on a loopback port the system picks; it says which.
said=$(mktemp)
"$bin/http_server" 127.0.0.1:0 2>"$said" &
server=$!
url=
for _ in $(seq 100); do
    url=$(sed -n 's/^serving on //p' "$said")
    [ -n "$url" ] && break
    sleep 0.1
done
expect "client -> http_server" 'add(2, 40) = 42' "$bin/client" "${url:-http://127.0.0.1:0/mcp}"
kill "$server" 2>/dev/null
wait "$server" 2>/dev/null
rm -f "$said"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
