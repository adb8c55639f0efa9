#!/usr/bin/env bash
# The layers import inward only, and the tree and the build say so:
#
# - the domain (`crates/domain`) and the wire model with its codecs
#   (`crates/wire`) are sans-IO crates: their dependencies are limited to the
#   list below (serialization, hashing, byte search, errors; proptest for
#   tests), so neither can take on an async runtime, an HTTP stack or a TLS
#   library;
# - `application/` in `crates/protocol-droid` may name the domain, the wire
#   model and its own ports, never `adapters/` (which implement those ports).
#
#   scripts/check-layers.sh
#
# Ends with one line saying what was checked; any breach is printed with its
# file and line, and the script fails.
set -euo pipefail
cd "$(dirname "$0")/.."

status=0

# What a sans-IO crate may depend on. Anything else (tokio, reqwest, hyper,
# std networking wrappers) belongs in an adapter.
sans_io_allowed='^(protocol-droid-domain|serde|serde_json|thiserror|memchr|sha2|proptest)$'
for manifest in crates/domain/Cargo.toml crates/wire/Cargo.toml; do
    # Every dependency table: [dependencies], [dev-dependencies],
    # [build-dependencies], their [target.….…] forms, and the
    # [dependencies.NAME] form.
    deps=$(awk '
        /^\[/ { on = 0 }
        /^\[(target\..*\.)?(dev-|build-)?dependencies\.[A-Za-z0-9_-]+\]/ {
            name = $0; sub(/^.*dependencies\./, "", name); sub(/\].*$/, "", name); print name; next
        }
        /^\[(target\..*\.)?(dev-|build-)?dependencies\]/ { on = 1; next }
        on && /^[a-zA-Z0-9_-]+[ .=]/ { sub(/[ .=].*/, ""); print }
    ' "$manifest")
    for dep in $deps; do
        if ! [[ "$dep" =~ $sans_io_allowed ]]; then
            echo "!! $manifest depends on $dep, which a sans-IO crate may not"
            status=1
        fi
    done
done

# Any path into the adapters from the application, in a `use` or written out
# in code. Comments are not imports: a doc link may point a reader at the
# transport that serves a type.
if grep -rnE '(crate|super)(::super)*::adapters\b' crates/protocol-droid/src/application \
    | grep -vE '^[^:]+:[0-9]+:\s*//'; then
    echo "!! application/ imports adapters/ (the lines above); depend on a port instead"
    status=1
fi

if [ "$status" -eq 0 ]; then
    echo "layers: the domain and wire crates are sans-IO, and application/ imports no adapter"
fi
exit "$status"
