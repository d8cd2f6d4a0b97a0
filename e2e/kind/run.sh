#!/usr/bin/env bash
# The end-to-end product suite (e2e/suite) on a kind cluster, for machines
# with Docker: creates the cluster, builds the product images with Docker
# (operator/docker/*.Dockerfile, e2e/kind/sandbox.Dockerfile), loads them
# with `kind load`, runs the suite (which installs the chart with helm) and
# deletes the cluster whatever happened. Exit status 0 when every step passed.
#
# Needs on PATH: docker, kind (v0.24.0 or later: NetworkPolicy), kubectl,
# helm, cargo (for kubectl-computer and e2e-suite).
#
# Env: E2E_KIND_CLUSTER  cluster name (default agentcomputer-e2e)
#      E2E_KEEP=1        leave the cluster up afterwards
#      E2E_BIN_DIR       directory with kubectl-computer and e2e-suite
#                        already built (default: cargo build --release)
#      E2E_ONLY          suite steps to run (see e2e/suite/src/main.rs)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

cluster="${E2E_KIND_CLUSTER:-agentcomputer-e2e}"
registry=localhost/agentcomputer-e2e
tag=e2e
web_image=docker.io/library/busybox:1.36

for tool in docker kind kubectl helm cargo; do
    command -v "$tool" >/dev/null || { echo "e2e/kind: $tool is not on PATH" >&2; exit 2; }
done

step() { # NAME CMD...
    local start=$SECONDS
    echo "e2e/kind: $1" >&2
    if "${@:2}"; then
        echo "e2e/kind: $1 passed in $((SECONDS - start))s" >&2
    else
        echo "e2e/kind: $1 FAILED after $((SECONDS - start))s" >&2
        return 1
    fi
}
teardown() {
    if [ "${E2E_KEEP:-0}" = 1 ]; then
        echo "e2e/kind: cluster $cluster left up (kubectl config use-context kind-$cluster)" >&2
    else
        kind delete cluster --name "$cluster" >&2 || true
    fi
}

create() {
    kind get clusters 2>/dev/null | grep -qx "$cluster" ||
        kind create cluster --name "$cluster" --config e2e/kind/cluster.yaml --wait 300s
}
images() {
    docker build -f operator/docker/operator.Dockerfile -t "$registry/operator:$tag" . &&
        docker build -f operator/docker/node-agent.Dockerfile -t "$registry/node-agent:$tag" . &&
        docker build -f e2e/kind/sandbox.Dockerfile -t "$registry/sandbox:$tag" e2e/kind &&
        docker pull "$web_image" &&
        kind load docker-image --name "$cluster" \
            "$registry/operator:$tag" "$registry/node-agent:$tag" "$registry/sandbox:$tag" "$web_image"
}
client_bins() {
    if [ -z "${E2E_BIN_DIR:-}" ]; then
        cargo build --release --locked --bin kubectl-computer --bin e2e-suite || return 1
        E2E_BIN_DIR="${CARGO_TARGET_DIR:-target}/release"
    fi
}
suite() {
    local kubeconfig
    kubeconfig="$(mktemp)" || return 1
    kind get kubeconfig --name "$cluster" > "$kubeconfig" || return 1
    # E2E_NODE_DATA_DIR stays unset: the node's data directory is inside
    # the kind node's container, so the checks on database files are
    # skipped (the suite says so).
    KUBECONFIG="$kubeconfig" E2E_KUBECTL="$(command -v kubectl)" E2E_HELM="$(command -v helm)" \
        E2E_CLI="$E2E_BIN_DIR/kubectl-computer" E2E_REPO="$PWD" \
        E2E_IMAGE_REGISTRY="$registry" E2E_IMAGE_TAG="$tag" E2E_WEB_IMAGE="$web_image" \
        "$E2E_BIN_DIR/e2e-suite"
    local rc=$?
    rm -f "$kubeconfig"
    return $rc
}

trap teardown EXIT
step "kind cluster" create || exit 1
step "product images, loaded into kind" images || exit 1
step "kubectl-computer and e2e-suite" client_bins || exit 1
step "product suite" suite
