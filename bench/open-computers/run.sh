#!/usr/bin/env bash
# What an open computer costs the node agent in resident memory, release
# build, local mode: the agent's RSS with N computers open (each made and
# given one shell exec, which opens it) minus its RSS with none, divided by
# N; without and with continuous backup to a directory store, and again
# after every computer hibernated (idle timeout).
#
#   bash bench/open-computers/run.sh [N]     (default N=200)
#
# Prints one line per mode; recorded in docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-200}
IDLE=${IDLE:-40s}
cargo build --release -q -p agentcomputer-node-agent -p kubectl-computer
BIN=${CARGO_TARGET_DIR:-$PWD/target}/release

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }

measure() { # mode [extra agent args...]
    local mode=$1; shift
    local dir port agent
    dir=$(mktemp -d -t open-computers.XXXXXX)
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$BIN/node-agent" local --data-dir "$dir/data" --listen "127.0.0.1:$port" \
        --share-listen off --proxy-listen off --keep-mounts off --idle-timeout "$IDLE" "$@" \
        >"$dir/agent.log" 2>&1 &
    agent=$!
    # A failed step still stops the agent and removes its directory.
    trap "kill $agent 2>/dev/null; rm -rf '$dir'" EXIT
    export AGENTCOMPUTER_ENDPOINT=http://127.0.0.1:$port AGENTCOMPUTER_DATA_DIR=$dir/data
    for _ in $(seq 100); do "$BIN/kubectl-computer" list >/dev/null 2>&1 && break; sleep 0.1; done
    # One computer made, used and hibernated first, so what every agent
    # loads once (runtimes, pools) is in the baseline, not in the per-computer cost.
    "$BIN/kubectl-computer" create warmup >/dev/null
    "$BIN/kubectl-computer" exec warmup -- true
    "$BIN/kubectl-computer" exec warmup --runtime js -- 'export default () => 1' >/dev/null
    local base
    base=$(rss_kib "$agent")
    local start=$SECONDS
    for i in $(seq "$N"); do
        "$BIN/kubectl-computer" create "c$i" >/dev/null
        "$BIN/kubectl-computer" exec "c$i" -- 'echo hello > f' >/dev/null
    done
    local open
    open=$(rss_kib "$agent")
    # Wait for every computer to hibernate (the idle timeout, then a sweep).
    local secs=${IDLE%s}
    sleep $((secs + 15))
    local closed
    closed=$(rss_kib "$agent")
    printf '%-16s %d open (made in %d s): %s MiB before, %s MiB open, %s MiB each; %s MiB after they hibernated\n' \
        "$mode" "$N" $((SECONDS - start)) "$(mib "$base")" "$(mib "$open")" \
        "$(awk -v o="$open" -v b="$base" -v n="$N" 'BEGIN {printf "%.2f", (o - b) / 1024 / n}')" "$(mib "$closed")"
    kill "$agent"; wait "$agent" 2>/dev/null || true
    rm -rf "$dir"
}

measure "without backup"
store=$(mktemp -d -t open-computers-store.XXXXXX)
measure "with backup" --backup "file://$store"
rm -rf "$store"
