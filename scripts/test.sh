#!/usr/bin/env bash
# Runs every test of the workspace: unit, property-based, crash, FUSE and
# end-to-end tests of the local node agent, the operator against a real
# kube-apiserver, the Python client library (sdk/python) against a real
# local agent, then pjdfstest against a FUSE mount (compared with the
# local disk), and the examples (examples/). The MCP server's tests use the Python `mcp` client from PyPI,
# installed once into a cached virtual environment (scripts/mcp-python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# Formatting first: it takes a second and fails before a long build.
cargo fmt --all -- --check
cargo build --workspace --all-targets
# Lints: clippy's defaults, every warning an error.
cargo clippy --workspace --all-targets -- -D warnings
# The Python MCP client the MCP server's tests drive (cached; made once).
bash scripts/mcp-python.sh >/dev/null
# The brush shell's YAML cases for bench/shell-spec/tests/brush.rs: the
# pinned brush-shell crate's source, fetched (not built) into Cargo's
# registry cache; one small download, then cached.
SHELL_SPEC_BRUSH="$(bash bench/shell-spec/fetch-brush.sh)"
export SHELL_SPEC_BRUSH
cargo test --workspace --no-fail-fast -- --test-threads=2
# The node agent the workspace build above made (a build of the package
# alone would unify features differently and compile it again).
AGENTCOMPUTER_NODE_AGENT="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/debug/node-agent" \
    bash scripts/test-python-sdk.sh
# The examples, each as a user runs it, with the debug build above.
AGENTCOMPUTER_BIN_DIR="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/debug" bash examples/test.sh
if [ "$(id -u)" = 0 ]; then
    bash bench/pjdfstest.sh
else
    echo "SKIPPED: pjdfstest needs root (it switches users and makes device nodes)" >&2
fi
