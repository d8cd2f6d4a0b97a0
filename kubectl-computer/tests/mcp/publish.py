"""Drives the `publish` tool of `kubectl-computer mcp` with the official
Python MCP client. Run by kubectl-computer/tests/mcp_publish.rs.

    publish.py stdio KUBECTL_COMPUTER NAME REMOTE DENIED_REMOTE [FLAG...]
    publish.py http URL TOKEN REMOTE

stdio: starts `KUBECTL_COMPUTER mcp NAME FLAG...` (the test passes
`--allow-credentials-env PUBLISH_TOKEN`) with this process's AGENTCOMPUTER_*
variables and PUBLISH_TOKEN and OTHER_SECRET; publishes to REMOTE, which
wants the credentials in PUBLISH_TOKEN, and is refused DENIED_REMOTE by the
computer's egress policy. http: a server started without an allow-list,
as the API gateway's remote MCP is: credentials_env is refused.

Every check that fails raises; the last lines printed on success are
`commit: SHA` (stdio) and `ok: <mode> <number of checks>`.
"""

import asyncio
import os
import re
import sys

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

CHECKS = 0


def check(cond, what):
    global CHECKS
    if not cond:
        raise AssertionError(what)
    CHECKS += 1


def text_of(result):
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def secrets():
    """The secret parts of the variables the server may hold."""
    return [os.environ["PUBLISH_TOKEN"].split(":", 1)[1], os.environ["OTHER_SECRET"]]


async def call(session, args, *, error):
    result = await session.call_tool("publish", args)
    text = text_of(result)
    check(bool(result.is_error) == error, f"publish {args}: expected is_error={error}: {text}")
    for s in secrets():
        check(s not in text and s not in str(result.structured_content), f"publish {args}: a secret is shown: {text}")
    return result, text


async def schema(session):
    tools = {t.name: t for t in (await session.list_tools()).tools}
    check("publish" in tools, f"tools: {sorted(tools)}")
    tool = tools["publish"]
    props = tool.input_schema["properties"]
    check(sorted(tool.input_schema.get("required", [])) == ["dir", "remote"], f"required {tool.input_schema}")
    check({"dir", "remote", "branch", "message", "credentials_env"} == set(props), f"properties {sorted(props)}")
    check("never see" in tool.description, f"description: {tool.description}")
    check("NAME" in props["credentials_env"]["description"], "credentials_env names a variable")


async def stdio(binary, name, remote, denied, flags):
    env = {k: v for k, v in os.environ.items() if k.startswith("AGENTCOMPUTER_")}
    env["PUBLISH_TOKEN"] = os.environ["PUBLISH_TOKEN"]
    env["OTHER_SECRET"] = os.environ["OTHER_SECRET"]
    params = StdioServerParameters(command=binary, args=["mcp", name, *flags], env=env)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await schema(session)
            r = await session.call_tool("write", {"path": "site/index.html", "content": "hello\n"})
            check(not r.is_error, text_of(r))

            # No credentials: the server's refusal, as git tells it.
            r, text = await call(session, {"dir": "site", "remote": remote, "message": "from mcp"}, error=True)
            check("could not read Username" in text, text)
            check(r.structured_content["errno"] == "EIO", f"{r.structured_content}")
            check("unreachable or went away" not in text, f"taken for a lost agent: {text}")

            # A variable the server was not told it may read.
            r, text = await call(session, {"dir": "site", "remote": remote, "credentials_env": "OTHER_SECRET"}, error=True)
            check("refused" in text and "PUBLISH_TOKEN" in text, text)
            check(r.structured_content["errno"] == "EACCES", f"{r.structured_content}")

            # Credentials in the URL.
            bad = re.sub(r"^http://", "http://ada:" + secrets()[0] + "@", remote)
            r, text = await call(session, {"dir": "site", "remote": bad}, error=True)
            check("credentials do not belong in the URL" in text and "***@" in text, text)

            # The remote the egress policy does not allow.
            r, text = await call(session, {"dir": "site", "remote": denied, "credentials_env": "PUBLISH_TOKEN"}, error=True)
            check("egress" in text, text)

            # The allowed variable: pushed (the commit the refused push made).
            r, text = await call(
                session, {"dir": "/workspace/site", "remote": remote, "credentials_env": "PUBLISH_TOKEN"}, error=False
            )
            done = r.structured_content
            check(re.fullmatch(r"[0-9a-f]{40}", done["commit"]) is not None, f"{done}")
            check(done["branch"] == "main" and done["committed"] is False, f"{done}")
            check(done["commit"] in text and "main" in text, text)

            # A change: a new commit, on another branch.
            r = await session.call_tool("write", {"path": "site/more.html", "content": "more\n"})
            check(not r.is_error, text_of(r))
            r, text = await call(
                session,
                {"dir": "site", "remote": remote, "branch": "next", "message": "more", "credentials_env": "PUBLISH_TOKEN"},
                error=False,
            )
            check(r.structured_content["committed"] is True and r.structured_content["branch"] == "next", text)
            print(f"commit: {done['commit']}")
            print(f"next: {r.structured_content['commit']}")


async def http(url, token, remote):
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await schema(session)
                r = await session.call_tool("write", {"path": "web/index.html", "content": "hi\n"})
                check(not r.is_error, text_of(r))
                # PUBLISH_TOKEN is in the server's environment, but it was
                # given no allow-list: refused, saying why and what to do.
                r, text = await call(
                    session, {"dir": "web", "remote": remote, "credentials_env": "PUBLISH_TOKEN"}, error=True
                )
                check("--allow-credentials-env" in text and "gateway" in text, text)
                check(r.structured_content["errno"] == "EACCES", f"{r.structured_content}")
                # Without credentials the tool works; this server wants them.
                r, text = await call(session, {"dir": "web", "remote": remote}, error=True)
                check("could not read Username" in text, text)


def main():
    mode = sys.argv[1]
    if mode == "stdio":
        asyncio.run(stdio(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]))
    elif mode == "http":
        asyncio.run(http(sys.argv[2], sys.argv[3], sys.argv[4]))
    else:
        raise SystemExit(f"unknown mode {mode}")
    print(f"ok: {mode} {CHECKS}")


if __name__ == "__main__":
    main()
