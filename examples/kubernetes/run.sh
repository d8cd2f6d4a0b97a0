#!/usr/bin/env bash
# From `helm install` to a computer whose sandbox pod builds something, on
# the cluster of your kubeconfig: the chart, a computer with the container
# runtime (computer.yaml), the app's sources put in with `kubectl
# computer`, a build in the sandbox pod (a Python zipapp), the artifact run
# there and seen from the in-process shell runtime. Cleans up after itself
# (KEEP=1 keeps the computer and its namespace).
#
#   KUBECTL, HELM, KUBECTL_COMPUTER   the tools (default: on PATH)
#   HELM_ARGS       extra arguments of `helm upgrade --install` (e.g. the
#                   product images: --set image.registry=R --set image.tag=T)
#   SKIP_INSTALL=1  the chart is installed already
#   SANDBOX_IMAGE   the sandbox pod's image (default: computer.yaml's)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
KUBECTL=${KUBECTL:-kubectl} HELM=${HELM:-helm} KC=${KUBECTL_COMPUTER:-kubectl-computer}
NS=examples
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
fail() { echo "FAILED: $*" >&2; exit 1; }

if [ "${SKIP_INSTALL:-}" != 1 ]; then
    step "helm install"
    # shellcheck disable=SC2086
    "$HELM" upgrade --install ac "$repo/charts/agent-computer" -n agentcomputer-system --create-namespace \
        --wait --timeout 5m ${HELM_ARGS:-}
fi

cleanup() {
    if [ "${KEEP:-}" != 1 ]; then
        "$KUBECTL" delete namespace "$NS" --ignore-not-found --wait=true --timeout=180s >/dev/null || true
    fi
}
trap cleanup EXIT

step "a computer with the container runtime"
"$KUBECTL" create namespace "$NS" --dry-run=client -o yaml | "$KUBECTL" apply -f - >/dev/null
manifest=$(cat "$here/computer.yaml")
if [ -n "${SANDBOX_IMAGE:-}" ]; then
    manifest=$(sed "s|^    image: .*|    image: $SANDBOX_IMAGE|" <<<"$manifest")
fi
"$KUBECTL" apply -n "$NS" -f - <<<"$manifest"
"$KUBECTL" wait -n "$NS" agentcomputer/builder --for=condition=Ready --timeout=180s
"$KUBECTL" get -n "$NS" agentcomputer builder

step "the app's sources, put in with kubectl computer"
"$KC" -n "$NS" mkdir builder app
for f in "$here"/app/*.py; do "$KC" -n "$NS" put builder "$f" "app/$(basename "$f")"; done
"$KC" -n "$NS" ls builder app

step "the build, in the sandbox pod (real python3 over the same files)"
out=$("$KC" -n "$NS" exec builder --runtime container --timeout 300 -- \
    'python3 -m zipapp app -o greet.pyz && python3 greet.pyz kubernetes')
echo "$out"
[ "$out" = "hello, kubernetes, from a zipapp built in a sandbox pod" ] || fail "the built app printed $out"

step "the artifact, seen from the in-process shell runtime"
listing=$("$KC" -n "$NS" exec builder -- 'ls -l greet.pyz && head -c 2 greet.pyz && echo')
echo "$listing"
grep -q 'greet.pyz' <<<"$listing" || fail "greet.pyz is not in the computer"
grep -qx 'PK' <<<"$listing" || fail "greet.pyz is not a zip archive (it starts with no PK)"
echo
echo "ok: built in the sandbox pod, stored in the computer"
