#!/usr/bin/env bash
# Prints the path of a Python interpreter that has the official MCP client
# library (`mcp` from PyPI), for the MCP server's tests
# (kubectl-computer/tests/mcp.rs). The virtual environment lives in a cache
# and is made once: reruns only check it. Override with
# AGENTCOMPUTER_MCP_PYTHON (an interpreter that can `import mcp`) or
# AGENTCOMPUTER_MCP_VENV (where to keep the environment).
set -euo pipefail

MCP_VERSION=2.3.0

if [ -n "${AGENTCOMPUTER_MCP_PYTHON:-}" ]; then
    echo "$AGENTCOMPUTER_MCP_PYTHON"
    exit 0
fi
venv=${AGENTCOMPUTER_MCP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/agentcomputer/mcp-venv}
python=$venv/bin/python
stamp=$venv/.mcp-$MCP_VERSION

if [ ! -f "$stamp" ]; then
    command -v python3 >/dev/null || {
        echo "error: python3 is missing; install it (Debian/Ubuntu: apt-get install python3 python3-venv)" >&2
        exit 1
    }
    mkdir -p "$(dirname "$venv")"
    # One installer at a time (tests run in parallel).
    exec 9>"$venv.lock"
    flock 9
    if [ ! -f "$stamp" ]; then
        if [ ! -x "$python" ]; then
            python3 -m venv "$venv" >&2 || {
                rm -rf "$venv"
                echo "error: python3 cannot make a virtual environment; install its venv module (Debian/Ubuntu: apt-get install python3-venv)" >&2
                exit 1
            }
        fi
        "$python" -m pip install --quiet --disable-pip-version-check "mcp==$MCP_VERSION" >&2 || {
            echo "error: pip could not install mcp==$MCP_VERSION from PyPI into $venv" >&2
            exit 1
        }
        touch "$stamp"
    fi
fi
echo "$python"
