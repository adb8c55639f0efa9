#!/usr/bin/env bash
# `droid bridge` in front of the fixture, each leg on the other transport, for the SDK drivers:
#
#   bridged.sh                        the client speaks stdio to the bridge; the bridge speaks
#                                     Streamable HTTP to `droid serve --listen 127.0.0.1:0`
#   bridged.sh --listen HOST:PORT     the client speaks Streamable HTTP to the bridge; the bridge
#                                     runs `droid serve` as a stdio child
#
#   BRIDGE_SCALE_OUT=1         with --listen: three bridges sharing a Redis behind haproxy
#                              (scaled.sh), each in front of its own stdio fixture
#   BRIDGE_UPSTREAM_REVISION   the revision the bridge speaks to the fixture (default: probed)
#   DROID_BIN                  the droid binary (default <repo>/target/debug/droid)
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DROID_BIN="${DROID_BIN:-$REPO/target/debug/droid}"
pin=()
[ -n "${BRIDGE_UPSTREAM_REVISION:-}" ] && pin=(--upstream-revision "$BRIDGE_UPSTREAM_REVISION")

if [ "${1:-}" = --listen ] && [ "${BRIDGE_SCALE_OUT:-}" = 1 ]; then
    SCALED_AS=bridge exec bash "$REPO/tests/interop/scaled.sh" "$@"
fi
if [ "${1:-}" = --listen ]; then
    exec "$DROID_BIN" bridge --listen "$2" "${pin[@]}" -- "$DROID_BIN" serve
fi

# stdio downstream: the fixture on HTTP first, on a port it picks and names on stderr.
log="$(mktemp)"
"$DROID_BIN" serve --listen 127.0.0.1:0 </dev/null 2>"$log" >/dev/null &
fixture=$!
trap 'kill "$fixture" 2>/dev/null; rm -f "$log"' EXIT
url=""
for _ in $(seq 200); do
    url=$(sed -n 's/.*listening on \(http:\/\/127\.0\.0\.1:[0-9][0-9]*\/mcp\).*/\1/p' "$log" | head -n1)
    [ -n "$url" ] && break
    kill -0 "$fixture" 2>/dev/null || break
    sleep 0.05
done
[ -n "$url" ] || { echo "bridged.sh: the fixture did not start" >&2; cat "$log" >&2; exit 1; }
# Not exec: the trap must stop the fixture when the bridge ends.
"$DROID_BIN" bridge --upstream "$url" "${pin[@]}"
