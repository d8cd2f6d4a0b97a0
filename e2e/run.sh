#!/usr/bin/env bash
# The end-to-end run on this machine: brings the local cluster up
# (e2e/cluster/up), checks the cluster itself (e2e/cluster/smoke), runs the
# product suite, and tears the cluster down (e2e/cluster/down) whatever
# happened. Exit status 0 only when every step passed.
#
# Env: E2E_KEEP=1      leave the cluster up afterwards (KUBECONFIG is printed)
#      E2E_STATE       state directory (default /var/tmp/agentcomputer-e2e)
#      E2E_BIN_DIR     directory of already built operator and node-agent binaries;
#                      without it they are built with `cargo build --release`
# Needs root. Logs of every component stay in $E2E_STATE/log after `down`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

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
        step "cluster down" bash e2e/cluster/down || true
    fi
}
trap teardown EXIT

step "cluster up" bash e2e/cluster/up || exit 1
step "cluster smoke test" bash e2e/cluster/smoke || exit 1

product_bins() {
    if [ -z "${E2E_BIN_DIR:-}" ]; then
        local bins=(--bin operator --bin node-agent)
        # The mounter's binary, once the workspace has it (like the Dockerfile).
        if grep -rqs --include=Cargo.toml --exclude-dir=target 'name = "agentcomputer-mounter"' .; then
            bins+=(--bin agentcomputer-mounter)
        fi
        cargo build --release --locked "${bins[@]}" || return 1
        E2E_BIN_DIR="${CARGO_TARGET_DIR:-target}/release"
    fi
}
step "product binaries" product_bins || exit 1
step "product images" bash e2e/images/build.sh --bin-dir "$E2E_BIN_DIR" || exit 1
step "product images start on the cluster" bash e2e/images/smoke || exit 1
# The product suite (helm install of charts/agent-computer, computers, runtimes,
# egress, persistence, deletion, bad input, upgrade, scale) runs here once it
# exists; it needs the cluster mode of the node agent and the mounter.
echo "e2e: product suite not written yet: only the cluster was checked" >&2
exit $status
