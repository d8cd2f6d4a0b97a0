#!/usr/bin/env bash
# Builds Agent Computer, starts a local node agent (no Kubernetes), creates a
# computer, runs scripts in it, restarts the agent and shows the files survived.
#
#   DATA_DIR   where computers live   (default: a fresh temporary directory,
#              removed when the script ends)
#   LISTEN     the agent's address    (default: 127.0.0.1:7433)
#   SHARE_LISTEN  where share links are served (default: the agent's,
#              127.0.0.1:7434, or a free port when that one is taken)
#   PROXY_LISTEN  the egress proxy's host-side address (default: the
#              agent's, 127.0.0.1:3128, or a free port when taken)
# An address given in SHARE_LISTEN or PROXY_LISTEN must be free.
set -euo pipefail
cd "$(dirname "$0")/.."

LISTEN=${LISTEN:-127.0.0.1:7433}
MADE_DATA_DIR=
if [ -z "${DATA_DIR:-}" ]; then
    DATA_DIR=$(mktemp -d -t agentcomputer-demo.XXXXXX)
    MADE_DATA_DIR=$DATA_DIR
fi
export AGENTCOMPUTER_ENDPOINT="http://$LISTEN"
# The CLI reads the agent token from the agent's data directory.
export AGENTCOMPUTER_DATA_DIR=$DATA_DIR

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# The same command as the README's, so one release build serves both.
step "building (release)"
echo "The first build compiles every dependency: about 10 minutes on 2 cores (later runs take seconds)."
echo "cargo's progress follows; it waits for the lock while another build runs in this directory."
cargo build --release -p agentcomputer-node-agent -p kubectl-computer
# Where cargo put it: CARGO_TARGET_DIR (relative to here) if set.
TARGET=${CARGO_TARGET_DIR:-target}
case $TARGET in /*) ;; *) TARGET=$PWD/$TARGET ;; esac
BIN=$TARGET/release
AGENT_PID=

AGENT_ARGS=()
[ -z "${SHARE_LISTEN:-}" ] || AGENT_ARGS+=(--share-listen "$SHARE_LISTEN")
[ -z "${PROXY_LISTEN:-}" ] || AGENT_ARGS+=(--proxy-listen "$PROXY_LISTEN")

start_agent() {
    "$BIN/node-agent" local --data-dir "$DATA_DIR" --listen "$LISTEN" "${AGENT_ARGS[@]}" >"$DATA_DIR/agent.log" 2>&1 &
    AGENT_PID=$!
    for _ in $(seq 100); do
        "$BIN/kubectl-computer" list >/dev/null 2>&1 && return 0
        kill -0 "$AGENT_PID" 2>/dev/null || { cat "$DATA_DIR/agent.log"; exit 1; }
        sleep 0.1
    done
    echo "node agent did not come up; log:" >&2; cat "$DATA_DIR/agent.log" >&2; exit 1
}
stop_agent() { [ -n "$AGENT_PID" ] && kill "$AGENT_PID" 2>/dev/null && wait "$AGENT_PID" 2>/dev/null || true; AGENT_PID=; }
# The temporary data directory this script made goes with it.
finish() { stop_agent; [ -z "$MADE_DATA_DIR" ] || rm -rf "$MADE_DATA_DIR"; }
trap finish EXIT

# Echoes the command, every argument quoted for the shell so that it can
# be pasted as printed, before running it.
kc() {
    local shown="" arg
    for arg in "$@"; do
        case $arg in
            *[!A-Za-z0-9_./:=,+-]*|"") shown+=" '${arg//\'/\'\\\'\'}'" ;;
            *) shown+=" $arg" ;;
        esac
    done
    echo "\$ kubectl-computer${shown}"
    "$BIN/kubectl-computer" "$@"
}

# The address the agent's log gives for one of its listeners ("share links
# serving addr=..."), or "off".
served_at() {
    sed -n "s/.*$1 serving addr=\([^ ]*\).*/\1/p" "$DATA_DIR/agent.log" | tail -1 | grep . || echo off
}

step "starting node-agent local (data dir $DATA_DIR)"
start_agent
echo "API on $LISTEN, share links on $(served_at 'share links'), egress proxy on $(served_at 'egress proxy')"
grep 'is taken' "$DATA_DIR/agent.log" || true

step "a computer, a few shell scripts and a JavaScript module"
kc create demo --quota 1GiB
kc exec demo -- 'mkdir -p src && printf "a\nb\n" > src/x.txt && wc -l < src/x.txt'
kc exec demo -- 'for i in 1 2 3; do echo "line $i" >> src/log.txt; done; grep -c line src/log.txt; ls -l src'
kc exec demo -- 'echo "{\"x\": 42}" > out.json && jq .x out.json'
kc exec demo --runtime js --input '{"file":"src/x.txt"}' -- 'import {readFile} from "node:fs/promises"; export default async ({file}) => ({file, lines: (await readFile(file, "utf8")).split("\n").length - 1})'
set +e
kc exec demo -- 'echo oops >&2; exit 3'; echo "(exit code $?)"
set -e

step "restarting the node agent: the files are still there"
stop_agent
start_agent
kc cat demo src/x.txt
kc ls demo src
echo
echo "Everything lives in one SQLite file: $(ls "$DATA_DIR"/computers/demo/*.db)"
if [ -n "$MADE_DATA_DIR" ]; then
    echo "(a temporary data directory, removed now; set DATA_DIR=... to keep one)"
fi
