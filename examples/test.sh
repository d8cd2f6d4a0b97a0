#!/usr/bin/env bash
# Runs every example's run.sh (or those named: `bash examples/test.sh
# project undo`), as a user would, and fails if one fails.
# scripts/test.sh calls it with the debug build it made:
#   AGENTCOMPUTER_BIN_DIR=target/debug bash examples/test.sh
set -euo pipefail
# A relative directory is the caller's.
[ -z "${AGENTCOMPUTER_BIN_DIR:-}" ] || AGENTCOMPUTER_BIN_DIR=$(cd "$AGENTCOMPUTER_BIN_DIR" && pwd)
export AGENTCOMPUTER_BIN_DIR
cd "$(dirname "$0")"
for name in "$@"; do
    [ -f "$name/run.sh" ] || { echo "no example $name (examples: $(ls -d */ | tr -d / | tr '\n' ' '))" >&2; exit 2; }
done
failed=()
for run in */run.sh; do
    name=${run%/run.sh}
    if [ $# -gt 0 ]; then
        [[ " $* " == *" $name "* ]] || continue
    elif [ "$name" = kubernetes ]; then
        # The end-to-end suite runs it on its cluster.
        continue
    fi
    case $name in egress | document)
        if [ "$(id -u)" != 0 ]; then
            echo "SKIPPED example $name: it needs root"
            continue
        fi ;;
    esac
    start=$SECONDS
    if bash "$run" >"/tmp/example-$name.log" 2>&1; then
        echo "ok      example $name ($((SECONDS - start)) s)"
    else
        echo "FAILED  example $name; its output:"
        sed 's/^/    /' "/tmp/example-$name.log"
        failed+=("$name")
    fi
    rm -f "/tmp/example-$name.log"
done
[ ${#failed[@]} -eq 0 ] || { echo "failed examples: ${failed[*]}" >&2; exit 1; }
