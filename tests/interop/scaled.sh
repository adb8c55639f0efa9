#!/usr/bin/env bash
# Three `droid serve` instances sharing their state through a Redis of their own, behind
# haproxy (round-robin, no stickiness), for the SDK drivers: every request of a session
# lands on the next instance. Debian's redis-server and haproxy (scripts/services.sh
# installs them), each on a loopback port this script picks.
#
#   scaled.sh --listen 127.0.0.1:0    prints `listening on http://127.0.0.1:PORT/mcp` (the
#                                     balancer) on stderr once everything answers, and
#                                     stops it all when it is terminated
#
#   DROID_BIN   the droid binary (default <repo>/target/debug/droid)
#   SCALED_AS   `bridge`: each instance is `droid bridge` in front of its own `droid serve`
#               (a stdio child), in place of `droid serve` (the default); the bridges speak
#               BRIDGE_UPSTREAM_REVISION to it if set; `gateway`: each is
#               `droid gateway --config "$SCALED_GATEWAY_CONFIG"`, with a state directory of its own
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DROID_BIN="${DROID_BIN:-$REPO/target/debug/droid}"
bash "$REPO/scripts/services.sh" >&2 || { echo "scaled.sh: redis-server and haproxy are needed" >&2; exit 1; }

dir="$(mktemp -d)"
pids=()
stop() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$dir"
}
trap stop EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >"$dir/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do
    [ "$(redis-cli -p "$redis_port" ping 2>/dev/null)" = PONG ] && break
    sleep 0.05
done

backends=""
for n in 1 2 3; do
    log="$dir/droid$n.log"
    if [ "${SCALED_AS:-serve}" = gateway ]; then
        XDG_STATE_HOME="$dir/state$n" "$DROID_BIN" gateway --config "$SCALED_GATEWAY_CONFIG" \
            --listen 127.0.0.1:0 --store "redis://127.0.0.1:$redis_port" \
            --instance-id "droid$n" </dev/null >/dev/null 2>"$log" &
    elif [ "${SCALED_AS:-serve}" = bridge ]; then
        pin=()
        [ -n "${BRIDGE_UPSTREAM_REVISION:-}" ] && pin=(--upstream-revision "$BRIDGE_UPSTREAM_REVISION")
        "$DROID_BIN" bridge --listen 127.0.0.1:0 --store "redis://127.0.0.1:$redis_port" \
            --instance-id "droid$n" "${pin[@]}" -- "$DROID_BIN" serve </dev/null >/dev/null 2>"$log" &
    else
        "$DROID_BIN" serve --listen 127.0.0.1:0 --store "redis://127.0.0.1:$redis_port" \
            --instance-id "droid$n" </dev/null >/dev/null 2>"$log" &
    fi
    pids+=($!)
    address=""
    for _ in $(seq 200); do
        address=$(sed -n 's/.*listening on http:\/\/\(127\.0\.0\.1:[0-9][0-9]*\)\/mcp.*/\1/p' "$log" | head -n1)
        [ -n "$address" ] && break
        sleep 0.05
    done
    [ -n "$address" ] || { echo "scaled.sh: instance $n did not start" >&2; cat "$log" >&2; exit 1; }
    backends+="  server droid$n $address"$'\n'
done

port=$(free_port)
cat >"$dir/haproxy.cfg" <<CFG
global
  maxconn 512
defaults
  mode http
  timeout connect 2s
  timeout client 120s
  timeout server 120s
frontend mcp
  bind 127.0.0.1:$port
  default_backend droids
backend droids
  balance roundrobin
$backends
CFG
haproxy -db -f "$dir/haproxy.cfg" >"$dir/haproxy.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.05
done
echo "scaled.sh: three ${SCALED_AS:-serve} instances behind haproxy, sharing redis://127.0.0.1:$redis_port" >&2
echo "listening on http://127.0.0.1:$port/mcp" >&2
# Until terminated; the instances' own errors go to the driver's server log.
tail -q -f "$dir"/droid*.log >&2 &
pids+=($!)
wait
