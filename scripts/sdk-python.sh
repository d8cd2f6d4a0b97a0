#!/usr/bin/env bash
# Prints the path of a Python interpreter with this checkout's client
# library (sdk/python) installed as a user installs it: a virtual
# environment under the cargo target directory, and an isolated pip build
# of the source tree (pip generates the gRPC stubs from proto/; a path is
# always rebuilt and reinstalled). Used by scripts/test-python-sdk.sh and
# the end-to-end suite. Progress goes to standard error.
set -euo pipefail
cd "$(dirname "$0")/.."

target=${CARGO_TARGET_DIR:-target}
mkdir -p "$target"
target=$(cd "$target" && pwd)
venv="$target/python-sdk-venv"

{
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    # The build backend, protoc and tools the packaging tests build with
    # (offline, --no-isolation), and the test runner.
    "$venv/bin/python" -m pip install -q --disable-pip-version-check \
        build hatchling grpcio-tools mypy pytest
    "$venv/bin/python" -m pip install -q --disable-pip-version-check ./sdk/python
} >&2
echo "$venv/bin/python"
