"""A minimal agent loop on an Agent Computer: a chat model that calls tools,
and a computer that runs them.

    python agent.py --via mcp COMPUTER "TASK"   # tools from `kubectl-computer mcp COMPUTER`
    python agent.py --via sdk COMPUTER "TASK"   # tools made with the Python library

The model is any OpenAI-compatible chat completions endpoint:
OPENAI_BASE_URL (default https://api.openai.com/v1), OPENAI_API_KEY and
OPENAI_MODEL (default gpt-4o-mini). The computer is reached as the CLI
reaches it (AGENTCOMPUTER_ENDPOINT and its token, or a kubeconfig);
KUBECTL_COMPUTER names the CLI for --via mcp (default: kubectl-computer
on PATH). Prints each tool call and the model's last answer.
"""

import argparse
import asyncio
import json
import os
import sys
import urllib.request

MAX_TURNS = 20


def chat(messages, tools):
    """One chat completion: the assistant's message."""
    base = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1").rstrip("/")
    body = json.dumps({
        "model": os.environ.get("OPENAI_MODEL", "gpt-4o-mini"),
        "messages": messages,
        "tools": tools,
    }).encode()
    req = urllib.request.Request(
        base + "/chat/completions",
        data=body,
        headers={
            "content-type": "application/json",
            "authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", ""),
        },
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)["choices"][0]["message"]


async def loop(task, tools, call_tool):
    """Asks the model, runs the tools it calls, until it answers in words."""
    messages = [
        {"role": "system", "content": "You work in a persistent Linux computer through tools. Be brief."},
        {"role": "user", "content": task},
    ]
    for _ in range(MAX_TURNS):
        msg = chat(messages, tools)
        messages.append(msg)
        calls = msg.get("tool_calls") or []
        if not calls:
            return msg.get("content") or ""
        for c in calls:
            name, args = c["function"]["name"], json.loads(c["function"]["arguments"] or "{}")
            print(f"tool {name} {json.dumps(args)}", flush=True)
            result = await call_tool(name, args)
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": result})
    raise RuntimeError(f"no answer after {MAX_TURNS} turns")


async def via_mcp(computer, task):
    """The computer's tools as the MCP server offers them."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    server = StdioServerParameters(
        command=os.environ.get("KUBECTL_COMPUTER", "kubectl-computer"),
        args=["mcp", computer],
        env=dict(os.environ),
    )
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = (await session.list_tools()).tools
        tools = [
            {"type": "function", "function": {"name": t.name, "description": t.description or "", "parameters": t.input_schema}}
            for t in listed
        ]

        async def call_tool(name, args):
            r = await session.call_tool(name, args)
            text = "".join(c.text for c in r.content if getattr(c, "type", "") == "text")
            return ("error: " if r.is_error else "") + text

        return await loop(task, tools, call_tool)


async def via_sdk(computer, task):
    """Three tools made with the Python library."""
    from agentcomputer import Client

    c = Client().computer(computer)
    schema = lambda props, required: {"type": "object", "properties": props, "required": required}
    tools = [
        {"type": "function", "function": {
            "name": "exec", "description": "Run a bash script in the computer's shell runtime; stdout, stderr and the exit code",
            "parameters": schema({"script": {"type": "string"}}, ["script"])}},
        {"type": "function", "function": {
            "name": "write", "description": "Write a file (parent directories made)",
            "parameters": schema({"path": {"type": "string"}, "content": {"type": "string"}}, ["path", "content"])}},
        {"type": "function", "function": {
            "name": "read", "description": "Read a text file",
            "parameters": schema({"path": {"type": "string"}}, ["path"])}},
    ]

    async def call_tool(name, args):
        try:
            if name == "exec":
                r = c.exec(args["script"])
                return f"{r.stdout_bytes.decode()}{r.stderr_bytes.decode()}exit code {r.exit_code}"
            if name == "write":
                parent = os.path.dirname(args["path"])
                if parent:
                    c.exec(f"mkdir -p '{parent}'")
                c.write_text(args["path"], args["content"])
                return f"wrote {len(args['content'].encode())} bytes to {args['path']}"
            if name == "read":
                return c.read_text(args["path"])
            return f"error: no tool {name}"
        except Exception as e:  # the model sees the error and may try again
            return f"error: {e}"

    return await loop(task, tools, call_tool)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--via", choices=["mcp", "sdk"], required=True)
    p.add_argument("computer")
    p.add_argument("task")
    a = p.parse_args()
    run = via_mcp if a.via == "mcp" else via_sdk
    answer = asyncio.run(run(a.computer, a.task))
    print("answer: " + answer)


if __name__ == "__main__":
    sys.exit(main())
