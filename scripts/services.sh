#!/usr/bin/env bash
# The servers the scale-out tests run beside droid: Debian's redis-server
# (the shared store) and haproxy (the load balancer in front of several
# instances). Installed with apt-get when missing; each test starts its own
# on loopback ports of its own and stops them, so nothing here runs a
# service. Idempotent: a machine that has both does nothing.
set -euo pipefail

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v haproxy >/dev/null || missing+=(haproxy)
[ "${#missing[@]}" -eq 0 ] && exit 0

command -v apt-get >/dev/null || {
    echo "services: ${missing[*]} missing, and no apt-get to install them" >&2
    exit 1
}
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo -n"
echo "services: installing ${missing[*]} from Debian's packages" >&2
export DEBIAN_FRONTEND=noninteractive
{ $sudo apt-get install -y --no-install-recommends "${missing[@]}" >&2 \
    || { $sudo apt-get update >&2 && $sudo apt-get install -y --no-install-recommends "${missing[@]}" >&2; }; }
# The packages' own services are not wanted: the tests start their own.
for service in redis-server haproxy; do
    $sudo service "$service" stop >/dev/null 2>&1 || true
done
command -v redis-server >/dev/null && command -v haproxy >/dev/null
