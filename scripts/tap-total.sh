#!/usr/bin/env bash
# The closing line of a runner built on Node's test runner: from the TAP file it wrote ($1) and the
# runner's exit status ($2), prints
#   N passed, N failed
# counting a cancelled test as failed, and a run that died without reporting a failure as one
# failure. Exits 0 only if nothing failed and something passed.
set -u
tap=$1
rc=$2
passed=$(awk '/^# pass /{v=$3} END{print v+0}' "$tap")
failed=$(awk '/^# fail /{v=$3} END{print v+0}' "$tap")
cancelled=$(awk '/^# cancelled /{v=$3} END{print v+0}' "$tap")
failed=$((failed + cancelled))
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
    failed=1
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
