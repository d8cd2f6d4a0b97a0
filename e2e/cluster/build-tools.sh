#!/usr/bin/env bash
# Builds every third-party program of the end-to-end cluster from its Go module
# into a cache that survives between runs, and prints that bin directory last.
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy,
#   kubectl, etcd, helm    operator/tools/build-k8s-tools.sh --cluster
#   containerd, ctr, containerd-shim-runc-v2
#                          github.com/containerd/containerd/v2/cmd/...
#   coredns                github.com/coredns/coredns
#   kube-router            github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
#                          (run as the NetworkPolicy enforcer only; a test tool)
# Go builds these tools only, never the product. Builds run one at a time under
# `nice`; a second run with everything cached returns at once.
#
# Env: AGENTCOMPUTER_K8S_TOOLS  cache root (default ~/.cache/agentcomputer/k8s-tools)
#      CONTAINERD_VERSION, COREDNS_VERSION, KUBE_ROUTER_VERSION  pinned below
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.4.2}"
COREDNS_VERSION="${COREDNS_VERSION:-v1.15.0}"
KUBE_ROUTER_VERSION="${KUBE_ROUTER_VERSION:-v2.1.0}"

log() { echo "e2e build-tools: $*" >&2; }

kube_bin="$(nice bash "$here/../../operator/tools/build-k8s-tools.sh" --cluster | tail -n1)"
root="${AGENTCOMPUTER_K8S_TOOLS:-$HOME/.cache/agentcomputer/k8s-tools}"
bin="$root/e2e-containerd-$CONTAINERD_VERSION-coredns-$COREDNS_VERSION-kube-router-$KUBE_ROUTER_VERSION/bin"
mkdir -p "$bin"

command -v go >/dev/null || { [ -x /usr/local/go/bin/go ] && export PATH="/usr/local/go/bin:$PATH"; }
command -v go >/dev/null || { log "go not found"; exit 1; }
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
export CGO_ENABLED=0

# go install PKG@VERSION into a scratch GOBIN, then move the named programs in.
install_mod() { # ldflags, packages...
    local ldflags="$1"; shift
    local gobin="$root/e2e-gobin"
    rm -rf "$gobin"; mkdir -p "$gobin"
    GOBIN="$gobin" nice go install -trimpath -ldflags="-s -w $ldflags" "$@" >&2
    mv "$gobin"/* "$bin/"
}

if [ ! -x "$bin/containerd" ] || [ ! -x "$bin/ctr" ] || [ ! -x "$bin/containerd-shim-runc-v2" ]; then
    log "building containerd $CONTAINERD_VERSION"
    m=github.com/containerd/containerd/v2
    install_mod "-X $m/version.Version=$CONTAINERD_VERSION -X $m/version.Package=$m" \
        "$m/cmd/containerd@$CONTAINERD_VERSION" "$m/cmd/ctr@$CONTAINERD_VERSION" \
        "$m/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION"
fi
if [ ! -x "$bin/coredns" ]; then
    log "building coredns $COREDNS_VERSION"
    install_mod "" "github.com/coredns/coredns@$COREDNS_VERSION"
fi
if [ ! -x "$bin/kube-router" ]; then
    log "building kube-router $KUBE_ROUTER_VERSION"
    m=github.com/cloudnativelabs/kube-router/v2
    install_mod "-X $m/pkg/version.Version=$KUBE_ROUTER_VERSION" "$m/cmd/kube-router@$KUBE_ROUTER_VERSION"
fi
# One directory with every program: the Kubernetes ones are hard links.
for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl etcd helm; do
    [ "$bin/$c" -ef "$kube_bin/$c" ] || ln -f "$kube_bin/$c" "$bin/$c"
done
log "ready in $bin"
echo "$bin"
