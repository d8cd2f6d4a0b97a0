#!/usr/bin/env bash
# Installs the S3-compatible object store the backup tests run against:
# versitygw (Versity S3 Gateway, Apache-2.0, github.com/versity/versitygw)
# with its POSIX backend, built from its Go module into a cache that survives
# between runs. It implements conditional PutObject (`If-None-Match: *` and
# `If-Match: <etag>`), which the backup's fencing relies on
# (node-agent/backup/tests/object_store_races.rs checks it under concurrency).
# Go builds this test tool only, never the product.
#
# Usage: scripts/install-object-store.sh     # prints the binary's path last
# Env:   AGENTCOMPUTER_OBJECT_STORE_CACHE  cache root
#                                          (default ~/.cache/agentcomputer/object-store)
#        VERSITYGW_VERSION                 pinned below
# Run:   versitygw --access KEY --secret SECRET --port 127.0.0.1:PORT posix DATA_DIR
#        (every directory under DATA_DIR is a bucket)
# Cold install (module download and build) took 272 s on a 2-core machine
# shared with other builds; a cached run returns at once.
set -euo pipefail

VERSITYGW_VERSION="${VERSITYGW_VERSION:-v1.8.0}"
root="${AGENTCOMPUTER_OBJECT_STORE_CACHE:-$HOME/.cache/agentcomputer/object-store}"
bin="$root/versitygw-$VERSITYGW_VERSION/bin"

log() { echo "install-object-store: $*" >&2; }

if [ -x "$bin/versitygw" ]; then
    log "cached: $bin/versitygw"
    echo "$bin/versitygw"
    exit 0
fi

command -v go >/dev/null || { [ -x /usr/local/go/bin/go ] && export PATH="/usr/local/go/bin:$PATH"; }
command -v go >/dev/null || { log "go not found (needed to build versitygw)"; exit 1; }
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
export CGO_ENABLED=0

mkdir -p "$bin"
gobin="$root/gobin-$$"
rm -rf "$gobin"
trap 'rm -rf "$gobin"' EXIT
log "building versitygw $VERSITYGW_VERSION"
GOBIN="$gobin" nice go install -trimpath \
    -ldflags="-s -w -X main.Version=$VERSITYGW_VERSION" \
    "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION" >&2
mv "$gobin/versitygw" "$bin/versitygw"
log "installed: $bin/versitygw"
echo "$bin/versitygw"
