#!/usr/bin/env bash
# The dependency policy of deny.toml, checked with cargo-deny: licences,
# duplicate versions (refused unless listed with a reason), sources, and the
# RustSec advisories.
#
#   scripts/deny.sh
#
# Installs cargo-deny (a pinned version, from crates.io) into
# target/tools when it is not on PATH. The advisory database is fetched from
# GitHub; where that cannot be reached the advisories are reported as not
# checked, which counts as neither a pass nor a failure. Ends with
# "N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."

version=0.20.2
tools="$PWD/target/tools"
export PATH="$tools/bin:$PATH"
if ! cargo deny --version 2>/dev/null | grep -qE " $version( |$)"; then
    echo "installing cargo-deny $version"
    cargo install --locked --quiet --root "$tools" "cargo-deny@$version" || {
        echo "0 passed, 1 failed"
        exit 1
    }
fi

passed=0
failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# One check; a skip entry that no longer matches is a failure too, so the
# duplicate list only shrinks.
check() {
    local what=$1
    if cargo deny --locked check "$what" >"$log" 2>&1 \
        && ! grep -qE 'warning\[(unmatched-skip|unnecessary-skip)\]' "$log"; then
        echo "ok   $what"
        passed=$((passed + 1))
    else
        echo "FAIL $what"
        grep -E '^(error|warning)\[' -A 12 "$log" | sed 's/^/     /'
        failed=$((failed + 1))
    fi
}

check licenses
check bans
check sources

if timeout 30 git ls-remote https://github.com/rustsec/advisory-db HEAD >/dev/null 2>&1; then
    check advisories
else
    echo "--   advisories not checked: the advisory database (github.com/rustsec/advisory-db) cannot be reached from here"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
