# shellcheck shell=bash
# Shared by the examples' run.sh: the binaries, a local node agent on free
# ports in a temporary data directory (removed at the end), `kc`, which
# echoes each CLI command before running it, `at_exit` for an example's
# own clean-up, and `server_netns` for servers at an address of their own.
# Source it; it sets `set -euo pipefail`.
#
#   AGENTCOMPUTER_BIN_DIR  directory with node-agent and kubectl-computer
#                          already built (the test suite gives its debug
#                          build); default: a release build made here
set -euo pipefail
EXAMPLES_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$EXAMPLES_DIR/.." && pwd)

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
fail() { echo "FAILED: $*" >&2; exit 1; }

if [ -n "${AGENTCOMPUTER_BIN_DIR:-}" ]; then
    BIN=$(cd "$AGENTCOMPUTER_BIN_DIR" && pwd)
else
    step "building node-agent and kubectl-computer (release; the first build takes minutes)"
    (cd "$REPO" && cargo build --release -p agentcomputer-node-agent -p kubectl-computer)
    TARGET=${CARGO_TARGET_DIR:-target}
    case $TARGET in /*) ;; *) TARGET=$REPO/$TARGET ;; esac
    BIN=$TARGET/release
fi

WORK=$(mktemp -d -t agentcomputer-example.XXXXXX)
DATA_DIR=$WORK/data
export AGENTCOMPUTER_DATA_DIR=$DATA_DIR
AGENT_PID=
AGENT_ARGS=()

# Starts `node-agent local` with AGENT_ARGS and the given extra arguments
# on a free port; exports AGENTCOMPUTER_ENDPOINT.
start_agent() {
    mkdir -p "$DATA_DIR"
    : >"$WORK/agent.out"
    "$BIN/node-agent" local --data-dir "$DATA_DIR" --listen 127.0.0.1:0 "${AGENT_ARGS[@]}" "$@" \
        >"$WORK/agent.out" 2>"$WORK/agent.log" &
    AGENT_PID=$!
    local addr=""
    for _ in $(seq 300); do
        addr=$(sed -n 's/^listening on //p' "$WORK/agent.out" | head -1)
        [ -n "$addr" ] && break
        kill -0 "$AGENT_PID" 2>/dev/null || { cat "$WORK/agent.log" >&2; fail "the node agent exited"; }
        sleep 0.1
    done
    [ -n "$addr" ] || { cat "$WORK/agent.log" >&2; fail "the node agent did not start within 30 s"; }
    export AGENTCOMPUTER_ENDPOINT="http://$addr"
}

stop_agent() {
    if [ -n "$AGENT_PID" ]; then
        kill "$AGENT_PID" 2>/dev/null || true
        wait "$AGENT_PID" 2>/dev/null || true
        AGENT_PID=
    fi
}

# The address the agent's log gives for a listener ("share links serving
# addr=...").
served_at() { sed -n "s/.*$1 serving addr=\([^ ]*\).*/\1/p" "$WORK/agent.log" | tail -1; }

# `at_exit COMMAND`: run COMMAND (with eval) when the example ends, however
# it ends; the last registered runs first, then the agent stops and the
# temporary directory goes.
AT_EXIT=()
at_exit() { AT_EXIT+=("$1"); }
finish() {
    local i
    for ((i = ${#AT_EXIT[@]} - 1; i >= 0; i--)); do eval "${AT_EXIT[i]}" || true; done
    AT_EXIT=()
    stop_agent
    rm -rf "$WORK"
}
trap finish EXIT

# The CLI, each command echoed first as it could be pasted.
kc() {
    local shown="" arg
    for arg in "$@"; do
        case $arg in
            *[!A-Za-z0-9_./:=,+-]*|"") shown+=" '${arg//\'/\'\\\'\'}'" ;;
            *) shown+=" $arg" ;;
        esac
    done
    echo "\$ kubectl-computer${shown}" >&2
    "$BIN/kubectl-computer" "$@"
}

# Whether this machine can run the container runtime (root and bubblewrap).
container_possible() { [ "$(id -u)" = 0 ] && command -v bwrap >/dev/null; }

# `expect WHAT GOT WANT`: fails naming WHAT unless GOT is WANT.
expect() { [ "$2" = "$3" ] || fail "$1: got $(printf %q "$2"), want $(printf %q "$3")"; echo "ok: $1"; }

# `server_netns N`: a network namespace for the example's own servers,
# reached from the host over a veth pair, so that a computer's egress
# policy can name an address of them without any real host behind it. The
# pair is a /30 of 198.18.0.0/15 (benchmarking addresses, RFC 2544):
# 198.18.7.(4N+1) on the host side, 198.18.7.(4N+2) in the namespace,
# with no route beyond; N (0..63) keeps examples that run at once apart.
# Sets NETNS (run a server there with `ip netns exec "$NETNS" ...`, and
# register its end with at_exit) and NETNS_ADDR; the namespace and the
# pair are removed when the example ends. Needs root and iproute2.
server_netns() {
    local n=$1
    [ "$(id -u)" = 0 ] || fail "a network namespace for the example's servers needs root"
    command -v ip >/dev/null || fail "ip (iproute2) is missing"
    NETNS=acex$$ NETNS_ADDR=198.18.7.$((4 * n + 2))
    local host_if=acexh$$ ns_if=acexn$$
    at_exit "ip netns del $NETNS 2>/dev/null; ip link del $host_if 2>/dev/null"
    ip netns add "$NETNS"
    ip link add "$host_if" type veth peer name "$ns_if"
    ip link set "$ns_if" netns "$NETNS"
    ip addr add "198.18.7.$((4 * n + 1))/30" dev "$host_if"
    ip link set "$host_if" up
    ip netns exec "$NETNS" ip addr add "$NETNS_ADDR/30" dev "$ns_if"
    ip netns exec "$NETNS" ip link set "$ns_if" up
    ip netns exec "$NETNS" ip link set lo up
}
