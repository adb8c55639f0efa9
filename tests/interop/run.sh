#!/usr/bin/env bash
# Runs every SDK client driver against an MCP server (over stdio, or over HTTP: see below) and ends with
#   N passed, N failed
# (summed over all drivers; skips are reported separately). Exit status 1 if anything failed.
#
#   DROID_SERVER_CMD   server command, split on whitespace (default: <repo>/target/debug/droid serve)
#   INTEROP_DRIVERS    subset to run, space separated (default: all of the names below)
#   INTEROP_TIMEOUT    per-driver wall-clock limit in seconds (default 300)
#
# The *-http / *-sse drivers start `$DROID_SERVER_CMD --listen 127.0.0.1:0` once per driver, read the port
# from the `listening on http://HOST:PORT/mcp` line on its stderr, pass INTEROP_HTTP_URL and
# INTEROP_TRANSPORT=http|sse to the driver, and kill the server afterwards (and on exit or interrupt).
# The *-scale-out drivers do the same with scaled.sh: three instances sharing a Redis behind
# haproxy, round-robin, so each request of a session (and each poll of a task) lands on another
# instance (three `droid bridge` instances, each in front of its own fixture, for
# ts-sdk1-bridge-scale-out; three `droid gateway` instances, each in front of its own
# server-everything, for ts-gateway-scale-out).
set -uo pipefail
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/env.sh"
REPO="$(cd "$INTEROP_DIR/../.." && pwd)"

"$INTEROP_DIR/setup.sh" || { echo "setup.sh failed"; echo "0 passed, 1 failed"; exit 1; }
. "$INTEROP_DIR/env.sh"   # setup may have installed a local Node

export DROID_SERVER_CMD="${DROID_SERVER_CMD:-$REPO/target/debug/droid serve}"
export PYTHONDONTWRITEBYTECODE=1
ALL_DRIVERS="ts-sdk1-2025-11-25 ts-sdk1-2025-03-26 ts-sdk2-2026-07-28 python-sdk ts-sdk1-http-2025-11-25 ts-sdk2-http-2026-07-28 python-sdk-http droid-client ts-sdk1-bridge-stdio-http ts-sdk2-bridge-http-stdio ts-gateway python-sdk-scale-out ts-sdk1-scale-out ts-sdk2-scale-out ts-sdk1-bridge-scale-out ts-gateway-scale-out"
OPTIONAL_DRIVERS="ts-sdk1-2024-11-05 ts-sdk1-http-2025-03-26 ts-sdk1-sse-2024-11-05"
DRIVERS="${INTEROP_DRIVERS:-$ALL_DRIVERS}"
LIMIT="${INTEROP_TIMEOUT:-300}"

cd "$REPO"   # relative server paths in DROID_SERVER_CMD are resolved from the repository root
server_bin="${DROID_SERVER_CMD%% *}"
if ! command -v "$server_bin" >/dev/null 2>&1; then
    echo "run.sh: server command not found or not executable: $server_bin (DROID_SERVER_CMD=$DROID_SERVER_CMD)"
    echo "0 passed, 1 failed"
    exit 1
fi

work="$(mktemp -d)"
http_pid=""; driver_pid=""
cleanup() {
    [ -n "$driver_pid" ] && kill -TERM "$driver_pid" 2>/dev/null   # `timeout` passes it on to the driver
    stop_http_server; rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
total_pass=0; total_fail=0; total_skip=0
summary=()

banner() { printf '\n==================== %s ====================\n' "$*"; }

# Runs a driver command as a waited-for background job, so an INT/TERM trap fires at once (bash defers traps
# while a foreground command runs) and cleanup() can stop the driver and the HTTP server.
in_background() {
    "$@" &
    driver_pid=$!
    wait "$driver_pid"
    local rc=$?
    driver_pid=""
    return $rc
}

# node --test with a human reporter on stdout and TAP into a file for counting.
run_node() {  # name file [env assignments...]
    local name=$1 file=$2; shift 2
    in_background env "$@" timeout "$LIMIT" node --test --test-timeout=60000 \
        --test-reporter=spec --test-reporter-destination=stdout \
        --test-reporter=tap --test-reporter-destination="$work/$name.tap" \
        "$INTEROP_DIR/ts/$file"
    local rc=$?
    local tap="$work/$name.tap"
    local p f c s
    p=$(awk '/^# pass /{v=$3} END{print v+0}' "$tap" 2>/dev/null || echo 0)
    f=$(awk '/^# fail /{v=$3} END{print v+0}' "$tap" 2>/dev/null || echo 0)
    c=$(awk '/^# cancelled /{v=$3} END{print v+0}' "$tap" 2>/dev/null || echo 0)
    s=$(awk '/^# skipped /{v=$3} END{print v+0}' "$tap" 2>/dev/null || echo 0)
    record "$name" "$p" "$((f + c))" "$s" "$rc"
}

run_pytest() {  # name [test folder, default py]
    local name=$1 folder=${2:-py}
    INTEROP_TRANSPORT="${INTEROP_TRANSPORT:-stdio}" in_background timeout "$LIMIT" "$INTEROP_DIR/.venv/bin/python" -m pytest -c "$INTEROP_DIR/pytest.ini" \
        --rootdir "$INTEROP_DIR" -p no:cacheprovider -v --tb=short --color=no \
        --junitxml="$work/$name.xml" "$INTEROP_DIR/$folder"
    local rc=$?
    local counts
    counts=$("$INTEROP_DIR/.venv/bin/python" - "$work/$name.xml" <<'PY' 2>/dev/null || echo "0 0 0"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
t = sum(int(s.get("tests", 0)) for s in suites)
f = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
k = sum(int(s.get("skipped", 0)) for s in suites)
print(t - f - k, f, k)
PY
)
    # shellcheck disable=SC2086
    record "$name" $counts "$rc"
}

# Starts `$DROID_SERVER_CMD --listen 127.0.0.1:0` in its own process group and exports INTEROP_HTTP_URL.
start_http_server() {  # name
    local name=$1 log="$work/$1.server.log" port="" i
    # shellcheck disable=SC2086
    setsid $DROID_SERVER_CMD --listen 127.0.0.1:0 </dev/null >"$log" 2>&1 &
    http_pid=$!
    for ((i = 0; i < 200; i++)); do   # up to 10 s
        port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9][0-9]*\)\/mcp.*/\1/p' "$log" | head -n1)
        [ -n "$port" ] && break
        kill -0 "$http_pid" 2>/dev/null || break
        sleep 0.05
    done
    if [ -z "$port" ]; then
        echo "run.sh: $name: no 'listening on http://127.0.0.1:PORT/mcp' line from: $DROID_SERVER_CMD --listen 127.0.0.1:0"
        sed 's/^/  server: /' "$log"
        stop_http_server
        return 1
    fi
    export INTEROP_HTTP_URL="http://127.0.0.1:$port/mcp"
    echo "# server: $DROID_SERVER_CMD --listen 127.0.0.1:0 -> $INTEROP_HTTP_URL (pid $http_pid)"
}

# Kills the HTTP server started above (its whole process group), SIGKILL after 2 s.
stop_http_server() {
    [ -n "$http_pid" ] || return 0
    local i
    kill -TERM -- "-$http_pid" 2>/dev/null || kill -TERM "$http_pid" 2>/dev/null
    for ((i = 0; i < 40; i++)); do
        kill -0 "$http_pid" 2>/dev/null || break
        sleep 0.05
    done
    kill -KILL -- "-$http_pid" 2>/dev/null || true
    wait "$http_pid" 2>/dev/null
    http_pid=""
    unset INTEROP_HTTP_URL
}

# Runs one driver against a fresh HTTP server: with_http name transport runner args...
with_http() {
    local name=$1 transport=$2; shift 2
    if ! start_http_server "$name"; then
        record "$name" 0 1 0 1
        return
    fi
    INTEROP_TRANSPORT=$transport "$@"
    local log="$work/$name.server.log"
    if grep -q -E 'ERROR|panicked' "$log"; then
        echo "# server stderr ($name):"; sed 's/^/  server: /' "$log" | tail -n 40
    fi
    stop_http_server
}

record() {  # name pass fail skip rc
    local name=$1 p=$2 f=$3 s=$4 rc=$5
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1   # crashed, timed out or produced no results: count the driver itself as a failure
        echo "run.sh: $name exited with status $rc without reporting a failed check"
    fi
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f)); total_skip=$((total_skip + s))
    summary+=("$(printf '%-24s %3d passed, %3d failed, %3d skipped' "$name" "$p" "$f" "$s")")
}

for d in $DRIVERS; do
    case "$d" in
        ts-sdk1-2025-11-25) banner "TS SDK 1.x (@modelcontextprotocol/sdk) @ 2025-11-25"
            run_node "$d" sdk1.test.mjs INTEROP_REVISION=2025-11-25 ;;
        ts-sdk1-2025-03-26) banner "TS SDK 1.x (@modelcontextprotocol/sdk) @ 2025-03-26"
            run_node "$d" sdk1.test.mjs INTEROP_REVISION=2025-03-26 ;;
        ts-sdk1-2024-11-05) banner "TS SDK 1.x (@modelcontextprotocol/sdk) @ 2024-11-05"
            run_node "$d" sdk1.test.mjs INTEROP_REVISION=2024-11-05 ;;
        ts-sdk2-2026-07-28) banner "TS SDK 2.x (@modelcontextprotocol/client) pinned 2026-07-28"
            run_node "$d" sdk2.test.mjs ;;
        python-sdk) banner "Python SDK (mcp) mode=legacy, mode=2026-07-28, mode=auto"
            run_pytest "$d" ;;
        ts-sdk1-http-2025-11-25) banner "TS SDK 1.x (@modelcontextprotocol/sdk) @ 2025-11-25 over Streamable HTTP"
            with_http "$d" http run_node "$d" sdk1.test.mjs INTEROP_REVISION=2025-11-25 INTEROP_TRANSPORT=http ;;
        ts-sdk1-http-2025-03-26) banner "TS SDK 1.x (@modelcontextprotocol/sdk) @ 2025-03-26 over Streamable HTTP"
            with_http "$d" http run_node "$d" sdk1.test.mjs INTEROP_REVISION=2025-03-26 INTEROP_TRANSPORT=http ;;
        ts-sdk1-sse-2024-11-05) banner "TS SDK 1.x (@modelcontextprotocol/sdk) @ 2024-11-05 over HTTP+SSE (/sse)"
            with_http "$d" sse run_node "$d" sdk1.test.mjs INTEROP_REVISION=2024-11-05 INTEROP_TRANSPORT=sse ;;
        ts-sdk2-http-2026-07-28) banner "TS SDK 2.x (@modelcontextprotocol/client) pinned 2026-07-28 over Streamable HTTP"
            with_http "$d" http run_node "$d" sdk2.test.mjs INTEROP_TRANSPORT=http ;;
        python-sdk-http) banner "Python SDK (mcp) over Streamable HTTP: mode=legacy (2025-11-25), mode=2026-07-28, mode=auto"
            with_http "$d" http run_pytest "$d" ;;
        droid-client) banner "droid call (the project's client) against Python and TypeScript SDK servers: stdio, Streamable HTTP, HTTP+SSE; droid gateway and droid bridge with the Python SDK client"
            run_pytest "$d" client ;;
        ts-sdk1-bridge-stdio-http) banner "TS SDK 1.x @ 2025-11-25 over stdio -> droid bridge -> Streamable HTTP fixture (2026-07-28)"
            run_node "$d" sdk1.test.mjs INTEROP_REVISION=2025-11-25 \
                DROID_SERVER_CMD="$INTEROP_DIR/bridged.sh" ;;
        ts-sdk2-bridge-http-stdio) banner "TS SDK 2.x @ 2026-07-28 over Streamable HTTP -> droid bridge -> stdio fixture (2025-11-25)"
            DROID_SERVER_CMD="$INTEROP_DIR/bridged.sh" BRIDGE_UPSTREAM_REVISION=2025-11-25 \
                with_http "$d" http run_node "$d" sdk2.test.mjs INTEROP_TRANSPORT=http ;;
        ts-gateway) banner "TS SDK 1.x (2025-11-25) and 2.x (2026-07-28) over Streamable HTTP -> droid gateway -> server-everything (stdio)"
            run_node "$d" gateway.test.mjs ;;
        python-sdk-scale-out) banner "Python SDK (mcp) over Streamable HTTP through haproxy to three droid serve instances sharing Redis"
            DROID_SERVER_CMD="$INTEROP_DIR/scaled.sh" with_http "$d" http run_pytest "$d" ;;
        ts-sdk1-scale-out) banner "TS SDK 1.x @ 2025-11-25 over Streamable HTTP through haproxy to three droid serve instances sharing Redis"
            DROID_SERVER_CMD="$INTEROP_DIR/scaled.sh" \
                with_http "$d" http run_node "$d" sdk1.test.mjs INTEROP_REVISION=2025-11-25 INTEROP_TRANSPORT=http ;;
        ts-sdk2-scale-out) banner "TS SDK 2.x pinned 2026-07-28 over Streamable HTTP through haproxy to three droid serve instances sharing Redis"
            DROID_SERVER_CMD="$INTEROP_DIR/scaled.sh" \
                with_http "$d" http run_node "$d" sdk2.test.mjs INTEROP_TRANSPORT=http ;;
        ts-gateway-scale-out) banner "TS SDK 1.x (2025-11-25) and 2.x (2026-07-28) over Streamable HTTP through haproxy to three droid gateway instances sharing Redis, each in front of server-everything (stdio)"
            INTEROP_GATEWAY_SCALED=1 run_node "$d" gateway.test.mjs ;;
        ts-sdk1-bridge-scale-out) banner "TS SDK 1.x @ 2025-11-25 over Streamable HTTP through haproxy to three droid bridge instances sharing Redis, each in front of its own stdio fixture"
            DROID_SERVER_CMD="$INTEROP_DIR/bridged.sh" BRIDGE_SCALE_OUT=1 BRIDGE_UPSTREAM_REVISION=2025-11-25 \
                with_http "$d" http run_node "$d" sdk1.test.mjs INTEROP_REVISION=2025-11-25 INTEROP_TRANSPORT=http ;;
        *) echo "run.sh: unknown driver $d (known: $ALL_DRIVERS $OPTIONAL_DRIVERS)"
           record "$d" 0 1 0 1 ;;
    esac
done

banner "summary (server: $DROID_SERVER_CMD)"
printf '%s\n' "${summary[@]}"
[ "$total_skip" -gt 0 ] && echo "($total_skip skipped: checks that do not apply to the driver's era)"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
