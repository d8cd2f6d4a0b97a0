# shellcheck shell=bash
# shellcheck disable=SC2034  # settings used by the scripts that source lib.sh
# The nodes of the end-to-end cluster (sourced by lib.sh).
#
# Node 1 ($E2E_NODE) holds the control plane and the only link to the host
# (E2E_HOST_IF <-> E2E_NODE_IF). Node I (2..E2E_NODES), named $E2E_NODE-I,
# has network and mount namespaces of its own under $S/nodeI and one veth
# link to node 1:
#
#   node 1: ace2e-nI  10.87.(I-1).1/30  <->  node I: ace2e0  10.87.(I-1).2/30
#
# Its default route goes to node 1 (which holds the guard's rules as well),
# node 1 routes node I's pod range 10.88.(I-1).0/24 to it, and every node
# routes the other nodes' pod ranges through node 1: pods reach pods and
# Services on any node, and nothing reaches the host but through node 1's
# guarded link. Its kubelet puts its pods under the cgroup $(node_cgroup_root)
# so that two kubelets never share `kubepods`; its components are named
# `nodeI-containerd`, `nodeI-kubelet`, `nodeI-kube-proxy`, `nodeI-kube-router`
# (pid files and logs under those names).

# node_use I: selects node I for in_net, in_ns and the NODE_* settings:
#   NODE_NAME NODE_IP NODE_POD_CIDR NODE_DIR (its state: ns/, host/)
#   NODE_PFX (prefix of its component names) NODE_CGROUP_ROOT
#   NODE_PEER_IF NODE_PEER_IP (node 1's end of the link; I >= 2)
node_use() {
    local i="$1"
    [[ "$i" =~ ^[1-4]$ ]] || die "no node $i"
    NODE_INDEX="$i"
    if [ "$i" = 1 ]; then
        NODE_NAME="$E2E_NODE"
        NODE_IP="$E2E_NODE_IP"
        NODE_POD_CIDR="$E2E_NODE_POD_CIDR"
        NODE_DIR="$S"
        NODE_PFX=""
        NODE_CGROUP_ROOT=/
        NODE_PEER_IF="" NODE_PEER_IP=""
    else
        NODE_NAME="$E2E_NODE-$i"
        NODE_IP="10.87.$((i - 1)).2"
        NODE_POD_CIDR="10.88.$((i - 1)).0/24"
        NODE_DIR="$S/node$i"
        NODE_PFX="node$i-"
        NODE_CGROUP_ROOT="/ace2e-node-$i"
        NODE_PEER_IF="ace2e-n$i"
        NODE_PEER_IP="10.87.$((i - 1)).1"
    fi
    NETNS="$NODE_DIR/ns/net"
    MNTNS="$NODE_DIR/ns/mnt"
}

# node_index NAME: the index of the node called NAME (1 when NAME is empty).
node_index() {
    local i
    [ -n "${1:-}" ] || { echo 1; return 0; }
    for i in $(seq 1 4); do
        if [ "$1" = "$E2E_NODE" ] && [ "$i" = 1 ] || [ "$1" = "$E2E_NODE-$i" ]; then echo "$i"; return 0; fi
    done
    die "no node named $1 (nodes: $(node_names))"
}

# The names of the configured nodes, space-separated.
node_names() {
    local i out="$E2E_NODE"
    for i in $(seq 2 "$E2E_NODES"); do out="$out $E2E_NODE-$i"; done
    echo "$out"
}

# Every address of the nodes (for the guard's allowed destinations): node
# 1's, and both ends of every link between nodes (node 1's end of a link is
# its own address too, and the source of what it sends over the link).
node_ips() {
    local i
    echo "$E2E_NODE_IP"
    for i in $(seq 2 4); do echo "10.87.$((i - 1)).1"; echo "10.87.$((i - 1)).2"; done
}

# The mount namespace file of a component by its name (nodeI-NAME or NAME).
component_mntns() {
    case "$1" in
        node[2-4]-*) local i="${1#node}"; echo "$S/node${i%%-*}/ns/mnt" ;;
        *) echo "$S/ns/mnt" ;;
    esac
}

# The node components, in the order they start.
NODE_COMPONENTS=(containerd kubelet kube-proxy kube-router)

# node_cgroup_dirs: the kubelet's cgroup root of the selected node in every
# cgroup v1 hierarchy (and the unified one), for `up` to make and `down` to
# remove; node 1's root is `/`, so it has none of its own.
node_cgroup_dirs() {
    [ "$NODE_CGROUP_ROOT" != / ] || return 0
    local h
    for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
        if [ -f "$h/cgroup.procs" ]; then echo "${h%/}$NODE_CGROUP_ROOT"; fi
    done | sort -u
}

# node_kubepods: the selected node's `kubepods` cgroup in the pids hierarchy
# (any v1 hierarchy lists every pod process).
node_kubepods() {
    local h
    for h in /sys/fs/cgroup/pids /sys/fs/cgroup/memory /sys/fs/cgroup/cpu; do
        if [ -d "$h" ]; then echo "$h${NODE_CGROUP_ROOT%/}/kubepods"; return 0; fi
    done
}

# node_start_containerd: starts the selected node's containerd (E2E_BIN) and
# waits for its socket.
node_start_containerd() {
    start_component "${NODE_PFX}containerd" "$E2E_BIN/containerd" --config "$S/etc/containerd.toml"
    wait_for "node $NODE_NAME: containerd socket" in_ns "$E2E_BIN/ctr" version || { alive "${NODE_PFX}containerd"; return 1; }
}

# node_start_kubelet: starts the selected node's kubelet and waits until its
# Node object exists and has been given its pod range.
node_start_kubelet() {
    start_component "${NODE_PFX}kubelet" "$E2E_BIN/kubelet" --config "$S/etc/${NODE_PFX}kubelet.yaml" \
        --kubeconfig "$S/etc/${NODE_PFX}kubelet.kubeconfig" --hostname-override "$NODE_NAME" \
        --node-ip "$NODE_IP" -v 2
    wait_for "node $NODE_NAME registered with a pod range" node_has_pod_cidr || { alive "${NODE_PFX}kubelet"; return 1; }
}
node_has_pod_cidr() { [ -n "$(kubectl_e2e get node "$NODE_NAME" -o jsonpath='{.spec.podCIDR}')" ]; }

# node_start_network_agents: kube-proxy and kube-router of the selected node
# (they look their node up when they start).
node_start_network_agents() {
    start_component "${NODE_PFX}kube-proxy" "$E2E_BIN/kube-proxy" --config "$S/etc/${NODE_PFX}kube-proxy.yaml"
    start_component "${NODE_PFX}kube-router" "$E2E_BIN/kube-router" --kubeconfig "$S/etc/kube-router.kubeconfig" \
        --hostname-override "$NODE_NAME" --run-firewall=true --run-router=false --run-service-proxy=false \
        --enable-cni=false --enable-ipv4=true --enable-ipv6=false --metrics-port 0 \
        --health-port 20244 --service-cluster-ip-range "$E2E_SERVICE_CIDR"
}

# node_ready [SINCE]: the selected node is Ready (as its kubelet reported at
# SINCE, seconds since the epoch, or later) and its kube-proxy answers.
node_ready() {
    local since="${1:-0}"
    wait_for "node $NODE_NAME Ready" node_reported_ready "$since" || return 1
    wait_for "node $NODE_NAME: kube-proxy healthz" in_net timeout 3 busybox wget -q -O /dev/null http://127.0.0.1:10256/healthz
}

# How many nodes the running cluster has (what `up` made), else E2E_NODES.
cluster_nodes() { cat "$S/run/nodes" 2>/dev/null || echo "$E2E_NODES"; }

# node_reported_ready SINCE: the Node's Ready condition is True, from a
# heartbeat of its kubelet at SINCE (seconds since the epoch) or later.
node_reported_ready() {
    local r
    r="$(kubectl_e2e get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}')" || return 1
    [ "${r%% *}" = True ] && [ "$(date -d "${r#* }" +%s)" -ge "$1" ]
}
