#!/usr/bin/env bash
# Runs the foundation benchmarks in release mode and prints their tables:
# engine throughput against ext4, shell exec latency against bash, and
# JavaScript cold-exec latency against node. Numbers go to docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p agentcomputer-fs -p agentcomputer-shell -p agentcomputer-js --examples
echo "== engine (agentcomputer-fs examples/engine_bench)"
cargo run --release -q -p agentcomputer-fs --example engine_bench
echo
echo "== shell exec latency (agentcomputer-shell examples/shell_latency)"
cargo run --release -q -p agentcomputer-shell --example shell_latency
echo
echo "== javascript cold exec (agentcomputer-js examples/js_bench)"
cargo run --release -q -p agentcomputer-js --example js_bench 1000
