# shellcheck shell=bash
# shellcheck disable=SC2034  # settings used by the scripts that source this file
# Settings and helpers shared by e2e/cluster/{up,down,guard,images,smoke}.
#
# The cluster lives in a network namespace and a mount namespace of its own,
# both kept alive by bind mounts of their nsfs files under the state directory:
#   - network: loopback, a bridge for the pods, and one veth link to the host
#     (host side E2E_HOST_IF = E2E_LINK_HOST, node side E2E_NODE_IF = E2E_NODE_IP,
#     the node's only address). The guard (guard.sh) filters both sides.
#   - mount: `/` is made rshared inside it (the host's `/` stays private), so
#     mounts made under the kubelet's directory (CSI FUSE mounts) propagate into
#     pods; the runtime and kubelet directories (/var/lib/kubelet, /run/containerd,
#     ...) are bind mounts of directories under the state directory.
# Every addresses below is only ever used inside those namespaces and on the
# veth link; none is routed off this machine.

E2E_STATE="${E2E_STATE:-/var/tmp/agentcomputer-e2e}"
# How many nodes: the first runs the control plane as well; every other one
# has network and mount namespaces of its own, linked to the first (nodes.sh).
E2E_NODES="${E2E_NODES:-2}"
case "$E2E_NODES" in
    [1-4]) ;;
    *) echo "e2e-cluster: error: E2E_NODES must be 1 to 4 (got $E2E_NODES)" >&2; exit 1 ;;
esac
E2E_NODE="${E2E_NODE:-e2e-node}"
E2E_POD_CIDR="${E2E_POD_CIDR:-10.88.0.0/16}"
E2E_NODE_POD_CIDR="${E2E_NODE_POD_CIDR:-10.88.0.0/24}"   # the first /24 the node IPAM hands out
E2E_SERVICE_CIDR="${E2E_SERVICE_CIDR:-10.96.0.0/16}"
E2E_APISERVER_SVC_IP="${E2E_APISERVER_SVC_IP:-10.96.0.1}"
E2E_DNS_IP="${E2E_DNS_IP:-10.96.0.10}"
E2E_LINK_HOST="${E2E_LINK_HOST:-10.87.0.1}"
E2E_NODE_IP="${E2E_NODE_IP:-10.87.0.2}"
E2E_LINK_PREFIX=30
E2E_HOST_IF="${E2E_HOST_IF:-ace2e-host}"
E2E_NODE_IF=ace2e0
E2E_BRIDGE=ace2e-br0
E2E_PAUSE_IMAGE="localhost/agentcomputer-e2e/pause:catatonit"
E2E_READY_TIMEOUT="${E2E_READY_TIMEOUT:-300}"

S="$E2E_STATE"
NETNS="$S/ns/net"
MNTNS="$S/ns/mnt"
E2E_KUBECONFIG="$S/kubeconfig"
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
E2E_REPO="$(cd "$E2E_DIR/../.." && pwd)"

# Host directories that are mount points inside the cluster's mount namespace,
# each backed by a directory under $S/host (created empty on the host when
# missing and removed again by `down`).
E2E_HOST_DIRS=(/var/lib/kubelet /var/lib/containerd /run/containerd /var/lib/cni
    /var/log/pods /var/log/containers /var/lib/agentcomputer /etc/cni/net.d)

# Kernel settings the kubelet changes (its "kernel tunables"); `up` records
# them and `down` puts them back.
E2E_SYSCTLS=(kernel.panic kernel.panic_on_oops vm.overcommit_memory vm.panic_on_oom
    kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

log() { echo "e2e-cluster: $*" >&2; }
die() { log "error: $*"; exit 1; }
need_root() { [ "$(id -u)" = 0 ] || die "must run as root (network and mount namespaces, iptables)"; }

# Holds a lock on the state directory for the rest of the script, so that two
# `up`/`down` never run at once.
lock_state() {
    # up and down delete things under $S: only in a directory made for it.
    case "$S" in
        /*) ;;
        *) die "E2E_STATE must be an absolute path (got $S)" ;;
    esac
    [ "$(readlink -m "$S")" != / ] || die "E2E_STATE must not be /"
    if [ -d "$S" ] && [ ! -f "$S/.agentcomputer-e2e" ] && [ -n "$(ls -A "$S")" ]; then
        die "$S is not empty and was not made by e2e/cluster/up; choose another E2E_STATE"
    fi
    mkdir -p "$S"
    touch "$S/.agentcomputer-e2e"
    exec 9<"$S"
    flock -n 9 || die "another e2e/cluster up or down is running on $S"
}

# ensure_packages COMMAND:PACKAGE...: installs the Debian packages whose
# command (a name on PATH or an absolute path) is missing.
ensure_packages() {
    local need=() pair cmd
    for pair in "$@"; do
        cmd="${pair%%:*}"
        if [[ "$cmd" == /* ]]; then [ -x "$cmd" ] && continue; else command -v "$cmd" >/dev/null && continue; fi
        need+=("${pair#*:}")
    done
    [ ${#need[@]} -gt 0 ] || return 0
    log "installing Debian packages: ${need[*]}"
    apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >&2
}

. "$E2E_DIR/nodes.sh"

# Runs a command inside the cluster's network (and mount) namespace: the
# selected node's (node_use), the first node's unless told otherwise.
in_net() { nsenter --net="$NETNS" -- "$@"; }
in_ns() { nsenter --net="$NETNS" --mount="$MNTNS" -- "$@"; }

# Inode of the namespace a bind-mounted nsfs file refers to, empty when the
# file is not (or no longer) a namespace.
ns_id() { [ -e "$1" ] && findmnt -n -o FSTYPE --target "$1" 2>/dev/null | grep -qx nsfs && stat -L -c %i "$1"; }
ns_mounted() { findmnt -n --mountpoint "$1" >/dev/null 2>&1; }

# The pid recorded for a component, only while that process still lives in
# the cluster's mount namespace (a reused pid is never taken for it).
component_pid() {
    local f="$S/run/pids/$1" pid mnt
    [ -f "$f" ] || return 1
    pid="$(cat "$f")"
    mnt="$(ns_id "$(component_mntns "$1")")" || return 1
    [ -n "$mnt" ] && [ "$(stat -L -c %i "/proc/$pid/ns/mnt" 2>/dev/null)" = "$mnt" ] || return 1
    echo "$pid"
}

# start NAME CMD...: starts CMD in the cluster's namespaces, in its own
# session, logging to $S/log/NAME.log; does nothing when it already runs.
start_component() {
    local name="$1"; shift
    if component_pid "$name" >/dev/null; then return 0; fi
    log "starting $name"
    # fd 9 (the state lock) and fd 8 (e2e/run.sh's run lock) stay with the
    # scripts, not the daemons.
    local mntns; mntns="$(component_mntns "$name")"
    nsenter --net="${mntns%/mnt}/net" --mount="$mntns" -- setsid "$@" >>"$S/log/$name.log" 2>&1 </dev/null 9<&- 8<&- &
    echo $! >"$S/run/pids/$name"
}

# wait_for WHAT CMD...: retries CMD until it succeeds or the time is up.
wait_for() {
    local what="$1"; shift
    local deadline=$((SECONDS + E2E_READY_TIMEOUT))
    until "$@" >/dev/null 2>&1; do
        if [ $SECONDS -ge $deadline ]; then
            log "not ready after ${E2E_READY_TIMEOUT}s: $what (logs in $S/log)"
            return 1
        fi
        sleep 1
    done
}

alive() { # NAME: the component still runs
    component_pid "$1" >/dev/null || { log "$1 exited; last lines of $S/log/$1.log:"; tail -n 20 "$S/log/$1.log" >&2; return 1; }
}

kubectl_e2e() { "$E2E_BIN/kubectl" --kubeconfig="$E2E_KUBECONFIG" "$@"; }

# Finds the tool directory without building (build-tools.sh builds).
find_bin() {
    if [ -n "${E2E_BIN:-}" ]; then return 0; fi
    [ -f "$S/bin-dir" ] && E2E_BIN="$(cat "$S/bin-dir")" && [ -x "$E2E_BIN/kubectl" ] && return 0
    E2E_BIN=""
    return 1
}
