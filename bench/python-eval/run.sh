#!/usr/bin/env bash
# Builds bench/python-eval once per interpreter (bashkit's `python`, monty,
# and `cpython`, CPython on wasmtime) and runs each twice: as is, and under
# a 4 GiB address-space limit as the node agent's isolation tests run the
# agent. Usage: bench/python-eval/run.sh [RUNS] [SECTIONS]
# (SECTIONS: comma-separated, default all; see src/main.rs).
# Numbers and the decision: docs/shell-runtime.md, section "python3".
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-100}
only=${2:-startup,script,modules,limits,network}
target=${CARGO_TARGET_DIR:-target}
# The interpreters' hot crates optimised inside the debug build.
source bench/python-eval/opt.sh
out=$(mktemp -d)
for feature in python cpython; do
  start=$(date +%s)
  cargo build -q "${OPT_FLAGS[@]}" -p python-eval --features "$feature"
  echo "build of python-eval --features $feature: $(( $(date +%s) - start )) s (incremental)"
  cp "$target/debug/python-eval" "$out/python-eval-$feature"
done
for feature in python cpython; do
  "$out/python-eval-$feature" --runs "$runs" --only "$only"
  echo
  echo "## under prlimit --as=4GiB"
  prlimit --as=$((4 << 30)) -- "$out/python-eval-$feature" --runs "$runs" --only "$only"
  echo
done
rm -rf "$out"
