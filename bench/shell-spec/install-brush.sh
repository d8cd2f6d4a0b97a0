#!/usr/bin/env bash
# Builds the brush shell (`brush-shell` from crates.io, a debug build) into a
# cache directory so the conformance harness can run it as a fourth column
# (`--brush-bin`). Not part of CI: a cold build takes several minutes on two
# cores. Prints the path of the `brush` binary; a second run answers from the
# cache.
#
# Usage: bash bench/shell-spec/install-brush.sh    -> .../brush-shell-0.4.0/bin/brush
# Env:   BRUSH_VERSION (default: the version fetch-brush.sh pins, whose
#        tests/cases the brush suite reads), BRUSH_ROOT (install root; default
#        ${CARGO_TARGET_DIR:-target}/brush-shell-VERSION).
set -euo pipefail
cd "$(dirname "$0")/../.."

version="${BRUSH_VERSION:-0.4.0}"
root="${BRUSH_ROOT:-${CARGO_TARGET_DIR:-target}/brush-shell-$version}"
bin="$root/bin/brush"

if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "$version"; then
    echo "$(cd "$(dirname "$bin")" && pwd)/brush"
    exit 0
fi

# --locked: the dependency versions brush-shell was published with.
# --debug: the build the harness compares (no release builds on this machine).
nice cargo install --quiet --locked --debug --root "$root" brush-shell --version "=$version" >&2
"$bin" --version >&2
echo "$(cd "$(dirname "$bin")" && pwd)/brush"
