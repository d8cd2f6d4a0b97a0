#!/usr/bin/env bash
# Runs every test of the workspace: unit, property-based, crash, FUSE and
# end-to-end tests of the local node agent, the operator against a real
# kube-apiserver, then pjdfstest against a FUSE mount (compared with the
# local disk).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --all-targets
cargo test --workspace --no-fail-fast -- --test-threads=2
if [ "$(id -u)" = 0 ]; then
    bash bench/pjdfstest.sh
else
    echo "SKIPPED: pjdfstest needs root (it switches users and makes device nodes)" >&2
fi
