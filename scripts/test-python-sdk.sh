#!/usr/bin/env bash
# Tests the Python client library (sdk/python) against the node agent of
# this checkout: the package installed from source as a user installs it
# (scripts/sdk-python.sh), then its pytest suite, which
# starts `node-agent local` on a temporary data directory and a loopback
# port.
set -euo pipefail
cd "$(dirname "$0")/.."

target=${CARGO_TARGET_DIR:-target}

# The agent under test: $AGENTCOMPUTER_NODE_AGENT, else this checkout's.
if [ -z "${AGENTCOMPUTER_NODE_AGENT:-}" ]; then
    cargo build -p agentcomputer-node-agent --bin node-agent
    AGENTCOMPUTER_NODE_AGENT="$(cd "$target" && pwd)/debug/node-agent"
fi
export AGENTCOMPUTER_NODE_AGENT
python=$(bash scripts/sdk-python.sh)
"$python" -m pytest -q -p no:cacheprovider sdk/python/tests
