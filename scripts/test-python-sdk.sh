#!/usr/bin/env bash
# Tests the Python client library (sdk/python) against the node agent of
# this checkout: a virtual environment under the cargo target directory,
# the package installed from source as a user installs it (pip builds it,
# generating the gRPC stubs from proto/), then its pytest suite, which
# starts `node-agent local` on a temporary data directory and a loopback
# port.
set -euo pipefail
cd "$(dirname "$0")/.."

target=${CARGO_TARGET_DIR:-target}
mkdir -p "$target"
target=$(cd "$target" && pwd)
venv="$target/python-sdk-venv"

# The agent under test: $AGENTCOMPUTER_NODE_AGENT, else this checkout's.
if [ -z "${AGENTCOMPUTER_NODE_AGENT:-}" ]; then
    cargo build -p agentcomputer-node-agent --bin node-agent
    AGENTCOMPUTER_NODE_AGENT="$target/debug/node-agent"
fi
export AGENTCOMPUTER_NODE_AGENT
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# The build backend, protoc and tools the packaging tests build with
# (offline, --no-isolation), and the test runner.
"$venv/bin/python" -m pip install -q --disable-pip-version-check \
    build hatchling grpcio-tools mypy pytest
# As a user does: an isolated build of the source tree (a path is always
# rebuilt and reinstalled).
"$venv/bin/python" -m pip install -q --disable-pip-version-check ./sdk/python

"$venv/bin/python" -m pytest -q -p no:cacheprovider sdk/python/tests
