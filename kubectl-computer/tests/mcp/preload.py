"""Calls the `exec` tool of `kubectl-computer mcp` over stdio with the
official Python MCP client, as an MCP host would, in the container runtime
with LD_PRELOAD naming a library. Run by kubectl-computer/tests/mcp_container_env.rs.

    preload.py KUBECTL_COMPUTER NAME LD_PRELOAD_VALUE

Prints the tool's text result (the script's output) and exits 0 when the
call answered without a tool error.
"""

import asyncio
import os
import sys

from mcp import ClientSession, StdioServerParameters, stdio_client


async def main(binary, name, preload):
    env = {k: v for k, v in os.environ.items() if k.startswith("AGENTCOMPUTER_")}
    params = StdioServerParameters(command=binary, args=["mcp", name], env=env)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool(
                "exec",
                {
                    "script": "/bin/true; cat preload-record",
                    "runtime": "container",
                    "env": {"LD_PRELOAD": preload},
                    "timeout_seconds": 60,
                },
            )
            text = "".join(c.text for c in result.content if getattr(c, "type", "") == "text")
            print(text)
            if result.is_error:
                raise SystemExit(f"exec answered with a tool error: {text}")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
