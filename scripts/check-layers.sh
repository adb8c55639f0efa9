#!/usr/bin/env bash
# The library's layers import inward only: `application/` may name the
# domain and its own ports, never `adapters/` (which implement those ports).
#
#   scripts/check-layers.sh
#
# Files that still break the rule are listed in scripts/layers-baseline.txt
# while they are moved. The check fails when a file outside the baseline
# imports `adapters/`, and when a file in it no longer does (so the baseline
# only ever shrinks: take the line out). Ends with one line saying which.
set -euo pipefail
cd "$(dirname "$0")/.."

baseline=scripts/layers-baseline.txt
# Any path into the adapters, in a `use` or written out in code.
found=$(grep -rlE '(crate|super)(::super)*::adapters\b' crates/protocol-droid/src/application \
    | sort)
expected=$(grep -vE '^\s*(#|$)' "$baseline" | sort)

new=$(comm -23 <(printf '%s\n' "$found") <(printf '%s\n' "$expected") | sed '/^$/d')
fixed=$(comm -13 <(printf '%s\n' "$found") <(printf '%s\n' "$expected") | sed '/^$/d')

status=0
if [ -n "$new" ]; then
    echo "!! application/ imports adapters/ in files the baseline does not list:"
    printf '   %s\n' $new
    grep -nE '(crate|super)(::super)*::adapters\b' $new | sed 's/^/     /'
    status=1
fi
if [ -n "$fixed" ]; then
    echo "!! these files no longer import adapters/; take them out of $baseline:"
    printf '   %s\n' $fixed
    status=1
fi
count=$(printf '%s\n' "$found" | sed '/^$/d' | wc -l)
if [ "$status" -eq 0 ]; then
    echo "layers: application/ imports adapters/ in $count files, all in the baseline"
fi
exit "$status"
