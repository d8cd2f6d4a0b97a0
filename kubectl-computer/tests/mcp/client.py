"""Drives `kubectl-computer mcp` with the official Python MCP client (the `mcp`
package from PyPI), as an MCP host would. Run by kubectl-computer/tests/mcp.rs.

    client.py stdio KUBECTL_COMPUTER NAME [FLAG...]  # starts the server over stdio
    client.py http URL TOKEN                         # a server started with --listen

The stdio server gets this process's AGENTCOMPUTER_* variables and
KUBECONFIG (the Rust test sets the endpoint and data directory; the
cluster suite, e2e/suite, sets KUBECONFIG and passes `-n NAMESPACE` as a
FLAG, which goes before `mcp`). Every check that fails raises; the last
line printed on success is `ok: <transport> <number of checks>`.
"""

import asyncio
import os
import sys
import time

import httpx2
import jsonschema
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

CHECKS = 0

TOOLS = {"read", "write", "edit", "ls", "find", "grep", "delete", "exec", "share", "snapshot", "restore", "publish"}

# Required arguments and some optional ones each tool must offer.
SCHEMAS = {
    "read": (["path"], ["start_line", "end_line", "max_bytes"]),
    "write": (["path", "content"], []),
    "edit": (["path", "old_string", "new_string"], ["replace_all"]),
    "ls": ([], ["path", "max_entries"]),
    "find": (["pattern"], ["max_results"]),
    "grep": (["pattern"], ["path", "include", "exclude", "ignore_case", "context_lines", "max_matches"]),
    "delete": (["path"], ["recursive"]),
    "exec": (["script"], ["runtime", "cwd", "env", "stdin", "input", "timeout_seconds", "max_output_bytes"]),
    "share": (["path"], ["expires_in_seconds"]),
    "snapshot": ([], ["name"]),
    "restore": (["snapshot"], []),
    "publish": (["dir", "remote"], ["branch", "message", "credentials_env"]),
}

NOTES = "# Notes\nstatus: draft\nowner: ada\nnext: ship it\nstatus line two: draft\n"


def check(cond, what):
    global CHECKS
    if not cond:
        raise AssertionError(what)
    CHECKS += 1


def text_of(result):
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def call(session, name, args, *, error=False):
    result = await session.call_tool(name, args)
    check(
        bool(result.is_error) == error,
        f"{name} {args}: expected is_error={error}, got {result.is_error}: {text_of(result)}",
    )
    return result


async def checkpoints(session, notes):
    """snapshot and restore: with a backup store a checkpoint brings a file
    back; without one, the error says how to get one."""
    r = await session.call_tool("snapshot", {})
    if r.is_error:
        check("--backup" in text_of(r), f"snapshot without a store: {text_of(r)}")
        r = await call(session, "restore", {"snapshot": "none-taken"}, error=True)
        return
    name = r.structured_content["snapshot"]
    check(name and name in text_of(r), f"snapshot: {text_of(r)}")
    before = (await call(session, "read", {"path": notes})).content[0].text
    await call(session, "write", {"path": notes, "content": "overwritten\n"})
    r = await call(session, "restore", {"snapshot": name})
    check(r.structured_content["undo_snapshot"].startswith("before-restore-"), f"restore: {text_of(r)}")
    after = (await call(session, "read", {"path": notes})).content[0].text
    check(after == before, f"restored file: {after!r}")
    r = await call(session, "restore", {"snapshot": "never-taken"}, error=True)
    check("not found" in text_of(r), f"restore unknown: {text_of(r)}")


async def check_tools(session):
    listed = await session.list_tools()
    tools = {t.name: t for t in listed.tools}
    check(set(tools) == TOOLS, f"tools listed: {sorted(tools)}")
    for name, tool in tools.items():
        check(tool.description and len(tool.description) > 60, f"{name}: description too short")
        schema = tool.input_schema
        jsonschema.Draft202012Validator.check_schema(schema)
        check(schema.get("type") == "object", f"{name}: schema type {schema.get('type')}")
        check(schema.get("additionalProperties") is False, f"{name}: unknown arguments must be refused")
        props = schema.get("properties", {})
        required, optional = SCHEMAS[name]
        check(sorted(schema.get("required", [])) == sorted(required), f"{name}: required {schema.get('required')}")
        for prop in required + optional:
            check(prop in props, f"{name}: no property {prop}")
        for prop, spec in props.items():
            check(len(spec.get("description", "")) > 15, f"{name}.{prop}: no description")
    runtime = tools["exec"].input_schema["properties"]["runtime"]
    check(
        runtime.get("enum") and {"auto", "shell", "javascript"} <= set(runtime["enum"]),
        f"exec.runtime enum: {runtime}",
    )
    check(runtime.get("default") == "auto", f"exec.runtime default: {runtime}")
    validator = jsonschema.Draft202012Validator(tools["grep"].input_schema)
    check(validator.is_valid({"pattern": "x", "include": ["*.md"], "context_lines": 1}), "grep args valid")
    check(not validator.is_valid({"pattern": "x", "bogus": 1}), "grep refuses unknown args")
    check(not validator.is_valid({"path": "x"}), "grep needs a pattern")


async def exercise(session, transport):
    init = await session.initialize()
    check(init.server_info.name == "kubectl-computer", f"server name {init.server_info.name}")
    check(init.capabilities.tools is not None, "tools capability")
    await check_tools(session)

    prefix = f"mcp-{transport}"
    notes = f"{prefix}/notes.md"
    # write creates the missing parent directory.
    r = await call(session, "write", {"path": notes, "content": NOTES})
    check(r.structured_content["bytes_written"] == len(NOTES.encode()), f"write: {text_of(r)}")

    # edit: ambiguous text is refused and changes nothing...
    r = await call(session, "edit", {"path": notes, "old_string": "draft", "new_string": "final"}, error=True)
    check("occurs 2 times" in text_of(r) and r.structured_content["errno"] == "EINVAL", f"ambiguous edit: {text_of(r)}")
    # ...text that is not there too...
    r = await call(session, "edit", {"path": notes, "old_string": "status: gone", "new_string": "x"}, error=True)
    check("not found" in text_of(r), f"missing edit: {text_of(r)}")
    # ...and one exact line is replaced.
    r = await call(session, "edit", {"path": notes, "old_string": "status: draft\n", "new_string": "status: final\n"})
    check(r.structured_content["replacements"] == 1, f"edit: {text_of(r)}")

    # read a range: lines 2-3, with a note saying where it stopped.
    r = await call(session, "read", {"path": notes, "start_line": 2, "end_line": 3})
    check(r.content[0].text == "status: final\nowner: ada\n", f"read range: {r.content[0].text!r}")
    check("lines 2-3 of 5" in text_of(r), f"read note: {text_of(r)}")
    r = await call(session, "read", {"path": notes})
    check(text_of(r) == NOTES.replace("status: draft\n", "status: final\n"), f"read all: {text_of(r)!r}")
    # the byte cap keeps whole lines
    r = await call(session, "read", {"path": notes, "max_bytes": 20})
    check(r.content[0].text == "# Notes\n", f"capped read: {r.content[0].text!r}")
    check("continue with start_line=2" in text_of(r), f"capped note: {text_of(r)}")

    # a binary file is reported, not dumped
    await call(session, "exec", {"script": f"printf 'a\\000b\\001' > {prefix}/blob.bin"})
    r = await call(session, "read", {"path": f"{prefix}/blob.bin"})
    check(r.structured_content.get("binary") is True and "binary file (4 bytes)" in text_of(r), f"binary: {text_of(r)}")

    # grep, with include/exclude and context
    r = await call(session, "grep", {"pattern": "status: f", "path": prefix})
    check(text_of(r).startswith(f"{notes}:2:status: final"), f"grep: {text_of(r)}")
    check(r.structured_content["matches"] == [{"path": notes, "line": 2, "text": "status: final"}], f"grep hits: {r.structured_content}")
    await call(session, "write", {"path": f"{prefix}/other.txt", "content": "status: final too\n"})
    r = await call(session, "grep", {"pattern": "^status:", "path": prefix, "include": ["*.md", "*.txt"], "exclude": ["other.*"], "context_lines": 1})
    check(
        text_of(r) == f"{notes}-1-# Notes\n{notes}:2:status: final\n{notes}-3-owner: ada\n",
        f"grep with context: {text_of(r)!r}",
    )
    r = await call(session, "grep", {"pattern": "status", "path": prefix, "max_matches": 1})
    check(r.structured_content["truncated"] is True and len(r.structured_content["matches"]) == 1, "grep cap")

    # find and ls
    r = await call(session, "find", {"pattern": f"{prefix}/**/*.md"})
    check(r.structured_content["paths"] == [notes], f"find: {text_of(r)}")
    r = await call(session, "ls", {"path": prefix})
    names = [e["name"] for e in r.structured_content["entries"]]
    check(names == ["blob.bin", "notes.md", "other.txt"], f"ls: {names}")

    # exec in the shell runtime: ls -l
    r = await call(session, "exec", {"script": "ls -l", "cwd": prefix})
    out = r.structured_content
    check(out["exit_code"] == 0 and "notes.md" in out["stdout"] and "other.txt" in out["stdout"], f"ls -l: {out}")
    # runtime auto (the default) ran it in-process and says so
    check(out["runtime"] == "shell" and out["runtime_reason"] == "every command is built into the shell runtime", f"auto: {out}")
    r = await call(session, "exec", {"runtime": "shell", "script": "python3 -V"})
    out = r.structured_content
    check(out["exit_code"] == 127 and "python3: command not found" in out["stderr"] and "--runtime auto" in out["stderr"], f"shell python3: {out}")
    check(out["runtime"] == "shell" and "runtime_reason" not in out, f"shell: {out}")
    # exit status, stdin, env, stderr
    r = await call(session, "exec", {"script": 'read x; echo "$x-$GREETING"; echo oops >&2; exit 3', "stdin": "hi\n", "env": {"GREETING": "hello"}})
    out = r.structured_content
    check((out["exit_code"], out["stdout"], out["stderr"]) == (3, "hi-hello\n", "oops\n"), f"shell exec: {out}")
    # output cap: the middle is left out and marked
    r = await call(session, "exec", {"script": "seq 1 20000", "max_output_bytes": 1000})
    out = r.structured_content
    check(out["truncated"]["stdout_bytes_omitted"] > 100000 and "bytes omitted" in out["stdout"], "output cap")
    check(out["stdout"].startswith("1\n2\n") and out["stdout"].endswith("19999\n20000\n"), "output head and tail")

    # exec in the JavaScript runtime: reads the file the tools wrote
    module = (
        "import { readFileSync } from 'node:fs';\n"
        f"const text = readFileSync('{notes}', 'utf8');\n"
        "console.log('lines', text.split('\\n').length - 1);\n"
        "export default (input) => ({ owner: /owner: (\\w+)/.exec(text)[1], sum: input.a + input.b });\n"
    )
    r = await call(session, "exec", {"runtime": "javascript", "script": module, "input": {"a": 2, "b": 3}})
    out = r.structured_content
    check(out["exit_code"] == 0 and out["stdout"] == "lines 5\n", f"js stdout: {out}")
    check(out["result"] == {"owner": "ada", "sum": 5}, f"js result: {out}")
    r = await call(session, "exec", {"runtime": "javascript", "script": "throw new TypeError('bad');"}, error=True)
    check("TypeError" in r.structured_content["error"], f"js error: {r.structured_content}")
    r = await call(session, "exec", {"runtime": "cobol", "script": "x"}, error=True)
    check(r.structured_content["errno"] == "EINVAL" and "shell" in text_of(r), f"bad runtime: {text_of(r)}")

    # refused and missing paths: tool errors with the errno name and the path
    r = await call(session, "read", {"path": "/etc/passwd"}, error=True)
    check(r.structured_content["errno"] == "EINVAL" and "/etc/passwd" in text_of(r), f"refused path: {text_of(r)}")
    r = await call(session, "write", {"path": "/etc/evil", "content": "x"}, error=True)
    check(r.structured_content["errno"] == "EINVAL" and "/etc/evil" in text_of(r), f"refused write: {text_of(r)}")
    r = await call(session, "read", {"path": f"{prefix}/missing.md"}, error=True)
    check(text_of(r).startswith("ENOENT") and "missing.md" in text_of(r), f"missing: {text_of(r)}")
    r = await call(session, "delete", {"path": prefix}, error=True)
    check(r.structured_content["errno"] == "ENOTEMPTY" and prefix in text_of(r), f"non-empty delete: {text_of(r)}")
    r = await call(session, "read", {"path": notes, "bogus": 1}, error=True)
    check("bogus" in text_of(r), f"unknown argument: {text_of(r)}")

    # a runaway run ends at its timeout, and the server answers afterwards
    started = time.monotonic()
    r = await call(session, "exec", {"script": "while true; do :; done", "timeout_seconds": 1.5}, error=True)
    took = time.monotonic() - started
    check("tim" in r.structured_content["error"].lower(), f"timeout error: {r.structured_content}")
    check(took < 15, f"timeout took {took:.1f} s")
    r = await call(session, "read", {"path": notes, "start_line": 4, "end_line": 4})
    check(r.content[0].text == "next: ship it\n", "server answers after a timeout")

    # share: a link that downloads the file without a credential
    r = await call(session, "share", {"path": notes, "expires_in_seconds": 600})
    link = r.structured_content
    check(link["url"] in text_of(r) and link["path"] == notes, f"share: {text_of(r)}")
    check(0 < link["expires_unix_seconds"] - time.time() <= 601, f"share expiry: {link}")
    async with httpx2.AsyncClient() as raw:
        resp = await raw.get(link["url"])
        check(resp.status_code == 200, f"download: {resp.status_code} {resp.text}")
        check(resp.text == NOTES.replace("status: draft\n", "status: final\n"), f"downloaded: {resp.text!r}")
        check(resp.headers["content-type"].startswith("text/markdown"), f"type: {resp.headers['content-type']}")
        check('filename="notes.md"' in resp.headers["content-disposition"], "disposition")
        resp = await raw.get(link["url"].replace("sig=", "sig=A"))
        check(resp.status_code == 403, f"tampered link: {resp.status_code}")
    r = await call(session, "share", {"path": prefix}, error=True)
    check(r.structured_content["errno"] == "EISDIR", f"share a directory: {text_of(r)}")
    r = await call(session, "share", {"path": notes, "expires_in_seconds": 10**7}, error=True)
    check(r.structured_content["errno"] == "EINVAL", f"share too long: {text_of(r)}")

    await checkpoints(session, notes)

    await limits_and_names(session, prefix, notes)

    # delete: a file, then the directory recursively
    await call(session, "delete", {"path": f"{prefix}/blob.bin"})
    r = await call(session, "find", {"pattern": f"{prefix}/*.bin"})
    check(r.structured_content["paths"] == [], "deleted file gone")
    # Leave notes.md for the test to look at through the CLI.
    await call(session, "delete", {"path": f"{prefix}/other.txt"})


async def limits_and_names(session, prefix, notes):
    """Input past the agent's limits, hostile file names, ordering and
    parallel calls."""
    # exec input over the agent's 4 MiB message limit goes up in chunks
    # (ExecStream) and reaches the script whole.
    big = "x" * (5 * 1024 * 1024)
    r = await call(session, "exec", {"script": "wc -c", "stdin": big})
    check(r.structured_content["stdout"].strip() == str(len(big)), f"big stdin: {text_of(r)[:300]}")
    # A script past the limit is still refused before anything is sent.
    r = await call(session, "exec", {"script": "#" + big}, error=True)
    check(r.structured_content["errno"] == "E2BIG", f"big script: {text_of(r)[:300]}")
    check("4194304" in text_of(r) and "write tool" in text_of(r), f"big script advice: {text_of(r)[:300]}")
    r = await call(session, "exec", {"script": "echo still here"})
    check(r.structured_content["stdout"] == "still here\n", "exec after a refused one")
    # Data in a file, then redirected.
    await call(session, "write", {"path": f"{prefix}/big.txt", "content": big})
    r = await call(session, "exec", {"script": f"wc -c < {prefix}/big.txt"})
    check(r.structured_content["stdout"].strip() == str(len(big)), f"redirected: {r.structured_content}")
    await call(session, "delete", {"path": f"{prefix}/big.txt"})

    # A newline in a file name cannot forge lines of find or grep.
    forged = f"{prefix}/names/fake\nsecret.txt:1:FORGED"
    await call(session, "write", {"path": forged, "content": "needle\n"})
    escaped = f"{prefix}/names/fake\\nsecret.txt:1:FORGED"
    r = await call(session, "grep", {"pattern": "needle", "path": f"{prefix}/names"})
    check(text_of(r) == f"{escaped}:1:needle\n", f"grep names: {text_of(r)!r}")
    check(r.structured_content["matches"][0]["path"] == forged, "grep structured path is raw")
    r = await call(session, "grep", {"pattern": "needle", "path": f"{prefix}/names", "context_lines": 1})
    check(text_of(r) == f"{escaped}:1:needle\n", f"grep -C names: {text_of(r)!r}")
    r = await call(session, "find", {"pattern": f"{prefix}/names/*"})
    check(text_of(r) == f"{escaped}\n", f"find names: {text_of(r)!r}")
    check(r.structured_content["paths"] == [forged], "find structured path is raw")
    r = await call(session, "ls", {"path": f"{prefix}/names"})
    check(text_of(r).count("\n") == 1 and "fake\\nsecret" in text_of(r), f"ls names: {text_of(r)!r}")
    await call(session, "delete", {"path": f"{prefix}/names", "recursive": True})

    # find: the first paths in sorted order, not the first the walk meets
    # ("d-e.txt" sorts before "d/x.txt", which is written first).
    await call(session, "write", {"path": f"{prefix}/order/d/x.txt", "content": "1"})
    await call(session, "write", {"path": f"{prefix}/order/d-e.txt", "content": "2"})
    await call(session, "write", {"path": f"{prefix}/order/c/y.txt", "content": "3"})
    r = await call(session, "find", {"pattern": f"{prefix}/order/**/*.txt", "max_results": 2})
    check(
        r.structured_content == {"paths": [f"{prefix}/order/c/y.txt", f"{prefix}/order/d-e.txt"], "truncated": True},
        f"find order: {r.structured_content}",
    )
    r = await call(session, "find", {"pattern": f"{prefix}/order/**/*.txt", "max_results": 3})
    check(r.structured_content["truncated"] is False and len(r.structured_content["paths"]) == 3, "find all")
    r = await call(session, "find", {"pattern": f"{prefix}/order/**", "max_results": 0}, error=True)
    check(r.structured_content["errno"] == "EINVAL", f"find max_results 0: {text_of(r)}")
    await call(session, "delete", {"path": f"{prefix}/order", "recursive": True})

    # 200 calls at once: more file streams than the agent lets one
    # connection open; they wait for each other instead of failing.
    text = (await call(session, "read", {"path": notes})).content[0].text
    reads = [session.call_tool("read", {"path": notes}) for _ in range(160)]
    writes = [session.call_tool("write", {"path": f"{prefix}/par/{i}.txt", "content": f"{i}\n" * 1000}) for i in range(40)]
    results = await asyncio.gather(*reads, *writes)
    failed = [text_of(r) for r in results if r.is_error]
    check(not failed, f"{len(failed)} of 200 parallel calls failed, e.g. {failed[:1]}")
    check(all(r.content[0].text == text for r in results[:160]), "parallel reads")
    r = await call(session, "find", {"pattern": f"{prefix}/par/*.txt"})
    check(len(r.structured_content["paths"]) == 40, "parallel writes")
    await call(session, "delete", {"path": f"{prefix}/par", "recursive": True})


async def over_stdio(binary, name, flags):
    # MCP hosts start servers with a minimal environment plus what their
    # configuration names: pass the agent's endpoint and data directory (or
    # the cluster's kubeconfig) so.
    env = {k: v for k, v in os.environ.items() if k.startswith("AGENTCOMPUTER_") or k == "KUBECONFIG"}
    params = StdioServerParameters(command=binary, args=[*flags, "mcp", name], env=env)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await exercise(session, "stdio")


async def over_http(url, token):
    # Without a token, and with a wrong one: 401 before any MCP.
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient() as raw:
        for auth in (None, "Bearer wrong-token", f"Basic {token}"):
            h = dict(headers)
            if auth:
                h["Authorization"] = auth
            resp = await raw.post(url, json=body, headers=h)
            check(resp.status_code == 401, f"auth {auth!r}: status {resp.status_code}")
            check(resp.headers.get("www-authenticate", "").lower().startswith("bearer"), "WWW-Authenticate")
    # The MCP client without the token cannot initialize either.
    refused = False
    try:
        async with create_mcp_http_client() as bare:
            async with streamable_http_client(url, http_client=bare) as (read, write):
                async with ClientSession(read, write, read_timeout_seconds=10) as session:
                    await session.initialize()
    except Exception:  # noqa: BLE001 - any failure is the point
        refused = True
    check(refused, "an MCP client without the token was served")

    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                await exercise(session, "http")


def main():
    mode = sys.argv[1]
    if mode == "stdio":
        asyncio.run(over_stdio(sys.argv[2], sys.argv[3], sys.argv[4:]))
    elif mode == "http":
        asyncio.run(over_http(sys.argv[2], sys.argv[3]))
    else:
        raise SystemExit(f"unknown mode {mode}")
    print(f"ok: {mode} {CHECKS}")


if __name__ == "__main__":
    main()
