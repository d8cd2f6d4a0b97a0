#!/usr/bin/env bash
# Builds the third-party Kubernetes tools that the operator's tests need, from
# their published Go modules, into a cache directory that survives between runs:
#   kube-apiserver  (k8s.io/kubernetes/cmd/kube-apiserver)
#   etcd            (go.etcd.io/etcd/server/v3/etcdmain, the version Kubernetes pins)
#   helm            (helm.sh/helm/v3/cmd/helm)
# and, with --cluster, the rest of a node for the end-to-end cluster (e2e/cluster):
#   kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl
#                   (k8s.io/kubernetes/cmd/..., the same version as kube-apiserver)
# Go is used here only to build these tools, never for the product.
#
# Usage: operator/tools/build-k8s-tools.sh [--cluster]   # prints the bin directory last
# Env:   AGENTCOMPUTER_K8S_TOOLS  cache root (default ~/.cache/agentcomputer/k8s-tools)
#
# k8s.io/kubernetes is not meant to be a dependency: its go.mod requires every
# staging module (k8s.io/api, k8s.io/apiserver, ...) at v0.0.0 and replaces them
# with ./staging/src/... paths, which do not exist in the published module. A
# small wrapper module replaces each of them with its published v0.<minor>.<patch>.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.36.3}"
HELM_VERSION="${HELM_VERSION:-v3.19.0}"
STAGING_VERSION="v0.${KUBE_VERSION#v1.}"

root="${AGENTCOMPUTER_K8S_TOOLS:-$HOME/.cache/agentcomputer/k8s-tools}"
bin="$root/$KUBE_VERSION-helm-$HELM_VERSION/bin"
mkdir -p "$bin"

# Commands of k8s.io/kubernetes built here (kube-apiserver always).
kube_cmds=(kube-apiserver)
case "${1:-}" in
    "") ;;
    --cluster) kube_cmds+=(kube-controller-manager kube-scheduler kubelet kube-proxy kubectl) ;;
    *) echo "usage: $0 [--cluster]" >&2; exit 2 ;;
esac

log() { echo "build-k8s-tools: $*" >&2; }

command -v go >/dev/null || { [ -x /usr/local/go/bin/go ] && export PATH="/usr/local/go/bin:$PATH"; }
command -v go >/dev/null || { log "go not found (needed to build kube-apiserver, etcd, helm)"; exit 1; }
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
export CGO_ENABLED=0

missing_kube=()
for c in "${kube_cmds[@]}"; do [ -x "$bin/$c" ] || missing_kube+=("$c"); done
if [ ${#missing_kube[@]} -eq 0 ] && [ -x "$bin/etcd" ] && [ -x "$bin/helm" ]; then
    log "cached in $bin"
    echo "$bin"
    exit 0
fi

work="$root/src-$KUBE_VERSION"
mkdir -p "$work"
cd "$work"

if [ ${#missing_kube[@]} -gt 0 ] || [ ! -x "$bin/etcd" ]; then
    # The upstream go.mod tells which staging modules to replace and which etcd
    # version Kubernetes is tested with.
    modjson="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION")"
    upstream_mod="$(printf '%s' "$modjson" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
    [ -f "$upstream_mod" ] || { log "could not download k8s.io/kubernetes@$KUBE_VERSION"; exit 1; }
    go_line="$(grep -m1 '^go ' "$upstream_mod")"
    etcd_version="$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2; exit}' "$upstream_mod")"
    [ -n "$etcd_version" ] || { log "no etcd server version in $upstream_mod"; exit 1; }

    {
        echo "module agentcomputer.dev/k8s-tools"
        echo
        echo "$go_line"
        echo
        echo "require ("
        echo "	k8s.io/kubernetes $KUBE_VERSION"
        echo "	go.etcd.io/etcd/server/v3 $etcd_version"
        echo ")"
        echo
        echo "replace ("
        grep -E '^[[:space:]]*k8s\.io/[^ ]+ => \./staging/' "$upstream_mod" \
            | awk -v v="$STAGING_VERSION" '{print "\t" $1 " => " $1 " " v}'
        echo ")"
    } > go.mod
    mkdir -p cmd/etcd
    cat > cmd/etcd/main.go <<'GO'
// Command etcd runs the etcd server, exactly like upstream's main package.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
    {
        echo "//go:build tools"
        echo
        echo "package tools"
        echo
        for c in "${kube_cmds[@]}"; do echo "import _ \"k8s.io/kubernetes/cmd/$c\""; done
    } > tools.go
    log "resolving modules for kubernetes $KUBE_VERSION (staging $STAGING_VERSION, etcd $etcd_version)"
    go mod tidy >&2
    # The version variables are what upstream's build stamps in (hack/lib/version.sh).
    minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
    vpkg=k8s.io/component-base/version
    for c in "${missing_kube[@]}"; do
        log "building $c"
        go build -trimpath -ldflags="-s -w -X $vpkg.gitVersion=$KUBE_VERSION -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean" \
            -o "$bin/$c.tmp" "k8s.io/kubernetes/cmd/$c" >&2
        mv "$bin/$c.tmp" "$bin/$c"
    done
    if [ ! -x "$bin/etcd" ]; then
        log "building etcd"
        go build -trimpath -ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$etcd_version" -o "$bin/etcd.tmp" ./cmd/etcd >&2
        mv "$bin/etcd.tmp" "$bin/etcd"
    fi
fi

if [ ! -x "$bin/helm" ]; then
    log "building helm $HELM_VERSION"
    # Stamped like upstream's Makefile does; without the Kubernetes version
    # helm assumes v1.20 for `helm template` and chart kubeVersion checks.
    k8s_minor="$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' | xargs awk '$1=="k8s.io/client-go"{split($2,v,"."); print v[2]; exit}')"
    [ -n "$k8s_minor" ] || { log "cannot tell which Kubernetes version helm $HELM_VERSION uses"; exit 1; }
    hl="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
    for p in chartutil lint/rules; do
        hl="$hl -X helm.sh/helm/v3/pkg/$p.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/$p.k8sVersionMinor=$k8s_minor"
    done
    GOBIN="$root/helm-gobin" go install -trimpath -ldflags="$hl" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
    mv "$root/helm-gobin/helm" "$bin/helm"
fi

log "built into $bin"
echo "$bin"
