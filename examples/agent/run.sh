#!/usr/bin/env bash
# A minimal agent loop over a computer, twice: once with the computer's
# tools from its MCP server (`kubectl-computer mcp`), once with tools made
# with the Python library. The model is an OpenAI-compatible endpoint;
# by default a local one replaying a recorded conversation (fake_llm.py),
# so the example runs offline and the files the agent made can be
# checked. With AGENT_LIVE=1 it uses OPENAI_BASE_URL, OPENAI_API_KEY and
# OPENAI_MODEL instead (the checks then only print).
. "$(dirname "$0")/../lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
TASK="Make squares.txt with the squares of 1 to 10, one per line, write a short summary to notes/summary.md, and tell me their sum."

step "a local node agent and a computer for the agent"
start_agent
kc create helper --quota 100Mi
export KUBECTL_COMPUTER=$BIN/kubectl-computer

if [ "${AGENT_LIVE:-}" != 1 ]; then
    step "a local chat endpoint replaying recording.json"
    python3 -u "$here/fake_llm.py" "$here/recording.json" >"$WORK/llm.out" 2>&1 &
    llm_pid=$!
    trap 'kill "$llm_pid" 2>/dev/null; finish' EXIT
    for _ in $(seq 100); do grep -q '^listening on' "$WORK/llm.out" && break; sleep 0.1; done
    export OPENAI_BASE_URL=$(sed -n 's/^listening on //p' "$WORK/llm.out")
    [ -n "$OPENAI_BASE_URL" ] || { cat "$WORK/llm.out"; fail "the fake endpoint did not start"; }
    export OPENAI_API_KEY=recorded OPENAI_MODEL=recorded
fi

check_files() {
    local squares summary
    squares=$(kc cat helper squares.txt | tr '\n' ' ')
    summary=$(kc cat helper notes/summary.md)
    echo "squares.txt: $squares"
    echo "notes/summary.md: $summary"
    if [ "${AGENT_LIVE:-}" != 1 ]; then
        expect "squares.txt" "$squares" "1 4 9 16 25 36 49 64 81 100 "
        case $summary in *385*) echo "ok: the summary names the sum" ;; *) fail "the summary: $summary" ;; esac
    fi
}

step "the agent with the computer's MCP tools"
mcp_python=$(bash "$REPO/scripts/mcp-python.sh")
"$mcp_python" "$here/agent.py" --via mcp helper "$TASK" | tee "$WORK/mcp.out"
grep -q '^answer: .*385' "$WORK/mcp.out" || [ "${AGENT_LIVE:-}" = 1 ] || fail "no answer with the sum"
check_files

step "again, with tools made with the Python library"
kc exec helper -- 'rm -rf squares.txt notes'
sdk_python=$(bash "$REPO/scripts/sdk-python.sh")
"$sdk_python" "$here/agent.py" --via sdk helper "$TASK" | tee "$WORK/sdk.out"
grep -q '^answer: .*385' "$WORK/sdk.out" || [ "${AGENT_LIVE:-}" = 1 ] || fail "no answer with the sum"
check_files
