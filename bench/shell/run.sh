#!/usr/bin/env bash
# The shell speed benchmark in one command: installs just-bash into
# target/shell-spec if it is missing, builds the node agent and the
# benchmark in release mode, and runs every script through the four
# targets. Arguments go to the benchmark (--reps N, --only tree,jq,
# --targets ours,just-bash; see --help). Prints the table and writes
# target/shell-bench.json. Needs node/npm, and jq for the bash target.
set -euo pipefail
cd "$(dirname "$0")/../.."
for tool in node npm jq; do
    command -v "$tool" >/dev/null || { echo "shell-bench: $tool is required" >&2; exit 1; }
done
if [ ! -f target/shell-spec/node_modules/just-bash/package.json ]; then
    mkdir -p target/shell-spec
    npm install --prefix target/shell-spec just-bash@3.4.2
fi
cargo build --release -q -p agentcomputer-node-agent --bin node-agent -p shell-bench
exec ./target/release/shell-bench "$@"
