"""The asyncio flavour against the same agent."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import time
from typing import AsyncIterator

import pytest

import agentcomputer
from agentcomputer import AsyncClient, ExecExit, ExecStdout

from conftest import Agent, unique_name


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_async_computers_and_files(agent: Agent) -> None:
    async def main() -> None:
        async with AsyncClient(agent.endpoint, data_dir=agent.data_dir) as client:
            name = unique_name("aio")
            comp = await client.create_computer(name)
            try:
                assert name in [c.name for c in await client.list_computers()]
                assert (await comp.info()).name == name
                await comp.mkdir("src/pkg", parents=True)
                await comp.write_text("src/pkg/a.py", "x = 1\n# TODO\n")
                await comp.write("src/b.py", io.BytesIO(b"y = 2\n"))

                async def gen() -> AsyncIterator[bytes]:
                    for i in range(3):
                        yield f"part{i}\n".encode()

                await comp.write("gen.txt", gen())
                assert await comp.read_text("gen.txt") == "part0\npart1\npart2\n"
                await comp.append("gen.txt", "more\n")
                assert (await comp.stat("gen.txt")).size == len("part0\npart1\npart2\nmore\n")
                assert sorted(await comp.listdir("src")) == ["b.py", "pkg"]
                assert [e.name for e in await comp.ls("src/pkg", with_info=True)] == ["a.py"]
                assert list(await comp.glob("src/**/*.py")) == ["src/b.py", "src/pkg/a.py"]
                hits = await comp.grep("TODO")
                assert [(m.path, m.line_number) for m in hits] == [("src/pkg/a.py", 2)]
                await comp.rename("src/b.py", "src/c.py")
                await comp.symlink("link", "src/c.py")
                assert await comp.readlink("link") == "src/c.py"
                assert (await comp.chmod("src/c.py", 0o700)).perm == 0o700
                await comp.rm("src", recursive=True)
                assert not await comp.exists("src")
                assert (await comp.statfs()).used_inodes >= 1
                with pytest.raises(FileNotFoundError) as e:
                    await comp.read_bytes("src/c.py")
                assert e.value.errno_name == "ENOENT"  # type: ignore[attr-defined]
                with pytest.raises(FileExistsError):
                    await comp.write("gen.txt", "x", mode="exclusive")
                with pytest.raises(TypeError):
                    await comp.write("bad", [1])  # type: ignore[list-item]
                assert not await comp.exists("bad")
            finally:
                await comp.delete()
            with pytest.raises(agentcomputer.ComputerNotFoundError):
                await client.get_computer(name)

    run(main())


def test_async_large_file(agent: Agent) -> None:
    data = os.urandom(5 * 1024 * 1024 + 7)

    async def main() -> None:
        async with AsyncClient(agent.endpoint, data_dir=agent.data_dir) as client:
            comp = await client.create_computer(unique_name("aiobig"))
            try:
                info = await comp.write("big", data)
                assert info.size == len(data)
                chunks = [c async for c in comp.iter_read("big")]
                assert len(chunks) >= 6 and max(map(len, chunks)) <= 1024 * 1024
                assert hashlib.sha256(b"".join(chunks)).digest() == hashlib.sha256(data).digest()
                buf = io.BytesIO()
                assert await comp.download("big", buf) == len(data)
                assert buf.getvalue() == data
            finally:
                await comp.delete()

    run(main())


def test_async_exec(agent: Agent) -> None:
    async def main() -> None:
        async with AsyncClient(agent.endpoint, data_dir=agent.data_dir) as client:
            comp = await client.create_computer(unique_name("aioexec"))
            try:
                await comp.write("notes.txt", "hello\n")
                r = await comp.exec("wc -c notes.txt")
                assert (r.stdout, r.exit_code) == ("6 notes.txt\n", 0)
                r = await comp.exec("cat; echo $X; exit 2", stdin="in\n", env={"X": "y"})
                assert (r.stdout, r.exit_code) == ("in\ny\n", 2)
                r = await comp.exec("sleep 30", timeout=0.3)
                assert r.error and not r.ok
                js = await comp.exec("export default (n) => n * 2", runtime="javascript", input=21)
                assert js.result == 42

                start = time.monotonic()
                times: list[float] = []
                events = []
                async for ev in comp.exec_stream("echo one; sleep 1; echo two"):
                    times.append(time.monotonic() - start)
                    events.append(ev)
                assert isinstance(events[0], ExecStdout) and events[0].data == b"one\n"
                assert isinstance(events[-1], ExecExit) and events[-1].code == 0
                assert times[-1] - times[0] >= 0.7

                # cancel() inside the loop: the iteration just ends.
                seen = []
                stream = comp.exec_stream("echo a; sleep 30; echo never > never.txt")
                try:
                    async for ev in stream:
                        seen.append(ev)
                        stream.cancel()
                except Exception as e:  # noqa: BLE001 - the failure under test
                    raise AssertionError(f"cancel() raised {e!r}") from e
                assert [type(e).__name__ for e in seen] == ["ExecStdout"] and stream.exit is None
                # Past one message, stdin is streamed (ExecStream).
                big = b"x" * (5 * 1024 * 1024)
                r = await comp.exec("wc -c", stdin=big)
                assert r.stdout.strip() == str(len(big))
                r = await comp.exec("wc -c", stdin=iter([b"ab", b"c"]))
                assert r.stdout.strip() == "3"
                with pytest.raises(ValueError, match="E2BIG"):
                    await comp.exec("true", env={"BIG": "y" * (4 * 1024 * 1024)})
                for bad in (0, -5, 604_801):
                    with pytest.raises(ValueError, match="1 to 604800"):
                        await comp.share("notes.txt", expires_in=bad)

                # Several runs at once on one connection.
                rs = await asyncio.gather(*(comp.exec(f"echo {i}") for i in range(8)))
                assert [r.stdout for r in rs] == [f"{i}\n" for i in range(8)]
            finally:
                await comp.delete()

    run(main())


def test_async_errors(agent: Agent) -> None:
    async def main() -> None:
        async with AsyncClient(agent.endpoint, token="wrong") as bad:
            with pytest.raises(agentcomputer.AuthenticationError):
                await bad.list_computers()
        async with AsyncClient(agent.endpoint, data_dir=agent.data_dir) as client:
            with pytest.raises(agentcomputer.ComputerNotFoundError):
                await client.computer("ghost").stat("x")

    run(main())


def test_async_share(agent: Agent) -> None:
    import urllib.request

    async def main() -> None:
        async with AsyncClient(agent.endpoint, data_dir=agent.data_dir) as client:
            comp = await client.create_computer(unique_name("aioshare"))
            try:
                await comp.write_text("s.txt", "async shared\n")
                link = await comp.share("s.txt", expires_in=30)
                body = await asyncio.to_thread(lambda: urllib.request.urlopen(link.url, timeout=10).read())
                assert body == b"async shared\n"
            finally:
                await comp.delete()

    run(main())



def test_async_export_then_import(agent: Agent) -> None:
    async def main() -> None:
        async with AsyncClient(agent.endpoint, data_dir=agent.data_dir) as client:
            comp = await client.create_computer(unique_name("aiotar"))
            try:
                await comp.mkdir("d")
                await comp.write_text("d/f.txt", "hello\n")
                archive = b"".join([p async for p in comp.export_tar("d")])
                await comp.mkdir("out")

                async def gen() -> AsyncIterator[bytes]:
                    yield archive[:1000]
                    yield archive[1000:]

                entries, data = await comp.import_tar("out", gen())
                assert entries >= 2 and data == 6
            finally:
                await client.delete_computer(comp.name)

    asyncio.run(main())
