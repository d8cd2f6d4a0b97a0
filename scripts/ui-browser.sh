#!/usr/bin/env bash
# Prints the node_modules directory holding playwright-core, pinned by
# kubectl-computer/tests/ui/package-lock.json, for the browser test of
# `kubectl computer ui` (kubectl-computer/tests/ui.rs). Installed once
# into a cache with `npm ci` (no install scripts: the browser is Debian's
# chromium, never a download); reruns only check it. Override the cache
# with AGENTCOMPUTER_UI_NODE_MODULES_CACHE.
set -euo pipefail
cd "$(dirname "$0")/.."

src=kubectl-computer/tests/ui
cache=${AGENTCOMPUTER_UI_NODE_MODULES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentcomputer/ui-browser}
stamp="$cache/.lock-$(sha256sum "$src/package-lock.json" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
    command -v npm >/dev/null || {
        echo "error: npm is missing; install it (Debian/Ubuntu: apt-get install nodejs npm)" >&2
        exit 1
    }
    mkdir -p "$cache"
    # One installer at a time (tests run in parallel).
    exec 9>"$cache.lock"
    flock 9
    if [ ! -f "$stamp" ]; then
        cp "$src/package.json" "$src/package-lock.json" "$cache/"
        (cd "$cache" && npm ci --ignore-scripts --no-audit --no-fund >&2)
        touch "$stamp"
    fi
fi
echo "$cache/node_modules"
