#!/usr/bin/env bash
# Runs every test of the workspace: unit, property-based, crash and end-to-end
# tests of the local node agent.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --all-targets
cargo test --workspace --no-fail-fast -- --test-threads=2
