#!/usr/bin/env bash
# The end-to-end run on this machine: brings the local cluster up
# (e2e/cluster/up), checks the cluster itself (e2e/cluster/smoke), builds and
# starts the product images, runs the product suite (e2e/suite), and tears
# the cluster down (e2e/cluster/down) whatever happened. Exit status 0 only when every step passed.
#
# Env: E2E_KEEP=1      leave the cluster up afterwards (KUBECONFIG is printed)
#      E2E_NODES       nodes of the cluster, 1 to 4 (default 2)
#      E2E_STATE       state directory (default /var/tmp/agentcomputer-e2e)
#      E2E_BIN_DIR     directory of already built operator, node-agent,
#                      agentcomputer-mounter, kubectl-computer and e2e-suite
#                      binaries; without it they are built with `cargo build --release`
# Needs root. Logs of every component stay in $E2E_STATE/log after `down`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

# One run at a time: two runs would share the state directory, the
# cluster's interfaces and its network guard.
run_lock="${E2E_STATE:-/var/tmp/agentcomputer-e2e}.run.lock"
exec 8>"$run_lock"
flock -n 8 || { echo "e2e: another e2e/run.sh is running (it holds $run_lock); wait for it to end" >&2; exit 1; }

status=0
step() { # NAME CMD...
    local start=$SECONDS
    echo "e2e: $1" >&2
    if "${@:2}"; then
        echo "e2e: $1 passed in $((SECONDS - start))s" >&2
    else
        echo "e2e: $1 FAILED after $((SECONDS - start))s" >&2
        status=1
        return 1
    fi
}
teardown() {
    if [ "${E2E_KEEP:-0}" = 1 ]; then
        echo "e2e: cluster left up; KUBECONFIG=${E2E_STATE:-/var/tmp/agentcomputer-e2e}/kubeconfig" >&2
    else
        # down proves that nothing of any node is left behind; when it
        # cannot, the run fails.
        step "cluster down" bash e2e/cluster/down || exit 1
    fi
}
trap teardown EXIT

step "cluster up" bash e2e/cluster/up || exit 1
step "cluster smoke test" bash e2e/cluster/smoke || exit 1

product_bins() {
    if [ -z "${E2E_BIN_DIR:-}" ]; then
        cargo build --release --locked --bin operator --bin agentcomputer-share-gateway --bin agentcomputer-gateway \
            --bin node-agent --bin agentcomputer-mounter --bin kubectl-computer --bin e2e-suite || return 1
        E2E_BIN_DIR="${CARGO_TARGET_DIR:-target}/release"
    fi
}
step "product binaries" product_bins || exit 1
# The sandbox runner is built static for any sandbox image (musl).
musl_target() {
    rustup target list --installed | grep -qx x86_64-unknown-linux-musl ||
        rustup target add x86_64-unknown-linux-musl || return 1
    # ring (TLS to the node agent) compiles C and assembly: musl-gcc.
    command -v musl-gcc >/dev/null ||
        { apt-get update -qq && apt-get install -y -qq musl-tools >/dev/null; }
}
step "musl target for the sandbox runner" musl_target || exit 1
step "product images" bash e2e/images/build.sh --bin-dir "$E2E_BIN_DIR" || exit 1
step "product images start on the cluster" bash e2e/images/smoke || exit 1

# The S3-compatible object store (e2e/object-store), reached from a pod on
# every node. Its server comes from scripts/install-object-store.sh. The
# product backs every computer up to it: chart-values puts the store's keys
# into the release namespace and writes the chart values (backup.url,
# endpoint, Secret, the agents' egress to the store) that the suite gives
# to every helm upgrade.
helm_values=""
object_store() {
    if [ ! -f scripts/install-object-store.sh ]; then
        echo "e2e: !!! SKIPPED: scripts/install-object-store.sh is not in this tree, so no object store and no backups !!!" >&2
        return 0
    fi
    bash e2e/object-store/up && bash e2e/object-store/check || return 1
    helm_values="$(bash e2e/object-store/chart-values)" || return 1
}
step "object store reached from every node" object_store

# The product suite (e2e/suite), as a user drives the product: helm, kubectl
# and kubectl computer from this host against the cluster's API server.
suite() {
    local state="${E2E_STATE:-/var/tmp/agentcomputer-e2e}" tools data i
    tools="$(cat "$state/bin-dir")" || return 1
    # Every node's agent directory, as this host sees it.
    data="$state/host/var/lib/agentcomputer"
    for i in $(seq 2 "$(cat "$state/run/nodes")"); do data="$data:$state/node$i/host/var/lib/agentcomputer"; done
    KUBECONFIG="$state/kubeconfig" \
        E2E_KUBECTL="$tools/kubectl" E2E_HELM="$tools/helm" \
        E2E_CLI="$E2E_BIN_DIR/kubectl-computer" E2E_REPO="$PWD" \
        E2E_NODE_DATA_DIR="$data" E2E_NODE_CTL="$PWD/e2e/cluster/node" \
        E2E_HELM_VALUES="$helm_values" \
        "$E2E_BIN_DIR/e2e-suite"
}
step "product suite" suite
exit $status
