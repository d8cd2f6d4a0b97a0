#!/usr/bin/env bash
# Exec latency of shell, JavaScript and container runs through one local
# node agent (as root, so the container sandbox exists), p50/p99 over
# RUNS runs each after a warm-up, beside the same commands run directly on
# the host. Usage: bench/exec-latency/run.sh [RUNS] [PROFILE]   (PROFILE:
# release (default) or debug). Numbers go to docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-200}
profile=${2:-release}
flag=$([ "$profile" = release ] && echo --release || true)
cargo build $flag -q -p agentcomputer-node-agent -p exec-latency
target=${CARGO_TARGET_DIR:-target}/$profile
data=$(mktemp -d)
trap 'kill "$agent" 2>/dev/null; wait "$agent" 2>/dev/null; rm -rf "$data"' EXIT
RUST_LOG=warn "$target/node-agent" local --data-dir "$data" --listen 127.0.0.1:0 --proxy-listen off > "$data/out" &
agent=$!
for _ in $(seq 100); do grep -q listening "$data/out" 2>/dev/null && break; sleep 0.05; done
endpoint="http://$(sed -n 's/^listening on //p' "$data/out")"
"$target/exec-latency" --endpoint "$endpoint" --runs "$runs"
