"""The client does not trust the server: against a hostile AgentComputer
service (tests/hostile.py) every flood is capped, every stall ends at a
deadline, and every broken promise of the API (offsets, sizes, JSON, names)
raises the library's own error rather than a bare Python one, for the
blocking and the asyncio client alike."""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Iterator

import pytest

import agentcomputer
from agentcomputer import (
    AsyncClient,
    Client,
    DeadlineExceededError,
    OutputLimitError,
    ProtocolError,
    RemoteOSError,
)

from hostile import MiB, HostileServer

#: What a compliant agent may send for a run asked for no cap: its
#: documented default cap (16 MiB) and the library's allowance.
DEFAULT_CAP = agentcomputer.DEFAULT_MAX_OUTPUT_BYTES + agentcomputer.OUTPUT_ALLOWANCE_BYTES


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileServer]:
    server = HostileServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture()
def client(hostile: HostileServer) -> Iterator[Client]:
    with Client(hostile.endpoint, token="t", idle_timeout=0.5, exec_grace=1.0) as c:
        yield c


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_deadlines_must_be_positive(hostile: HostileServer) -> None:
    for bad in (0, -1, float("nan"), True, "5"):
        with pytest.raises(ValueError) as e:
            Client(hostile.endpoint, token="t", idle_timeout=bad)  # type: ignore[arg-type]
        assert "idle_timeout must be a positive number" in str(e.value)
        with pytest.raises(ValueError):
            Client(hostile.endpoint, token="t", exec_grace=bad)  # type: ignore[arg-type]
    with Client(hostile.endpoint, token="t", idle_timeout=None, exec_grace=None) as c:
        assert c.computer("c").read_bytes("f", length=3) == b"012"
        assert c.computer("fine").exec("x").stdout == "hi\n"


# ------------------------------------------------------------------ exec


@pytest.mark.parametrize("case", ["flood", "flood-stderr"])
def test_exec_gathers_no_more_than_the_runs_cap(client: Client, case: str) -> None:
    start = time.monotonic()
    with pytest.raises(OutputLimitError) as e:
        client.computer(case).exec("yes")
    assert isinstance(e.value, ProtocolError)
    assert e.value.limit == DEFAULT_CAP
    assert DEFAULT_CAP < e.value.received <= DEFAULT_CAP + MiB
    assert "16777216" in str(e.value) and "max_output_bytes" in str(e.value)
    # The run's own cap, when asked for, is what counts.
    with pytest.raises(OutputLimitError) as small:
        client.computer(case).exec("yes", max_output_bytes=1000)
    assert small.value.limit == 1000 + agentcomputer.OUTPUT_ALLOWANCE_BYTES
    assert small.value.received <= MiB
    assert time.monotonic() - start < 10


def test_exec_stream_gathers_nothing_so_has_no_cap(client: Client) -> None:
    seen = 0
    with client.computer("flood").exec_stream("yes") as stream:
        for event in stream:
            if isinstance(event, agentcomputer.ExecStdout):
                seen += len(event.data)
    assert seen == 64 * MiB and stream.exit is not None


def test_exec_that_never_ends_hits_its_deadline(client: Client) -> None:
    start = time.monotonic()
    with pytest.raises(DeadlineExceededError) as e:
        client.computer("hang").exec("sleep 1000", timeout=1)
    assert isinstance(e.value, TimeoutError)
    assert "1 s" in str(e.value) and "grace" in str(e.value)
    elapsed = time.monotonic() - start
    assert 1.5 < elapsed < 6
    # Streamed, the same deadline ends the iteration.
    got = []
    with pytest.raises(DeadlineExceededError):
        for event in client.computer("hang").exec_stream("sleep 1000", timeout=1):
            got.append(event)
    assert got == [agentcomputer.ExecStdout(b"started\n")]


def test_exec_result_json_is_checked(client: Client) -> None:
    r = client.computer("fine").exec("x", runtime="javascript")
    assert r.result == {"ok": True} and r.stdout == "hi\n"

    bad = client.computer("bad-json").exec("x", runtime="javascript")
    with pytest.raises(ProtocolError) as e:
        bad.result
    assert '{"answer": 42, oops' in str(e.value)
    assert not isinstance(e.value, ValueError)

    deep = client.computer("deep-json").exec("x", runtime="javascript")
    with pytest.raises(ProtocolError) as d:
        deep.result
    assert "[[[[" in str(d.value) and len(str(d.value)) < 1000

    with pytest.raises(ProtocolError) as h:
        client.computer("huge-json").exec("x", runtime="javascript")
    assert "result_json" in str(h.value)


@pytest.mark.parametrize(
    "case, says",
    [
        ("no-exit", "without an exit"),
        ("empty-event", "empty exec event"),
        ("after-exit", "after the exit"),
    ],
)
def test_exec_stream_breaking_the_protocol(client: Client, case: str, says: str) -> None:
    with pytest.raises(ProtocolError) as e:
        client.computer(case).exec("x")
    assert says in str(e.value)


# ------------------------------------------------------------------ read


def test_read_of_a_well_behaved_server(client: Client) -> None:
    comp = client.computer("c")
    assert comp.read_bytes("f", offset=995, length=10) == b"5678901234"
    assert len(comp.read_bytes("f")) == 3000


@pytest.mark.parametrize(
    "path, says",
    [
        ("gap", "at offset 20, expected 10"),
        ("wrong-start", "at offset 5, expected 0"),
        ("overlap", "at offset 5, expected 10"),
        ("big-chunk", "2097152 bytes"),
        ("empty-chunks", "empty"),
    ],
)
def test_read_chunks_must_continue_each_other(client: Client, path: str, says: str) -> None:
    with pytest.raises(ProtocolError) as e:
        client.computer("c").read_bytes(path)
    assert says in str(e.value)


def test_read_never_passes_the_asked_length(client: Client) -> None:
    start = time.monotonic()
    with pytest.raises(ProtocolError) as e:
        client.computer("c").read_bytes("endless", length=3 * MiB + 5)
    assert f"more than the {3 * MiB + 5} bytes asked" in str(e.value)
    assert time.monotonic() - start < 10


def test_read_that_stalls_hits_the_idle_deadline(client: Client) -> None:
    start = time.monotonic()
    got = []
    with pytest.raises(DeadlineExceededError) as e:
        for piece in client.computer("c").iter_read("stall"):
            got.append(piece)
    assert got == [b"s" * 10]
    assert "0.5 s" in str(e.value)
    assert time.monotonic() - start < 5


def test_a_slow_reader_is_not_a_stalled_server(client: Client) -> None:
    """The idle deadline counts the wait for the agent, not the caller's
    own time between pieces."""
    pieces = []
    for piece in client.computer("c").iter_read("f"):
        time.sleep(0.7)
        pieces.append(piece)
    assert len(b"".join(pieces)) == 3000


@pytest.mark.parametrize(
    "case, says",
    [
        ("backup-short", "ended at 100 of 300 bytes"),
        ("backup-over", "past its total of 300 bytes"),
        ("backup-total-changes", "total changed"),
    ],
)
def test_backup_chunks_are_checked(client: Client, case: str, says: str) -> None:
    import io

    assert client.computer("fine").backup(io.BytesIO()) == 300
    with pytest.raises(ProtocolError) as e:
        client.computer(case).backup(io.BytesIO())
    assert says in str(e.value)


def slow_source(pieces: int, pause: float) -> Iterator[bytes]:
    for _ in range(pieces):
        time.sleep(pause)
        yield b"p" * 1000


@pytest.mark.parametrize("case", ["write-no-answer", "write-no-read"])
def test_write_to_an_agent_that_stalls_hits_the_idle_deadline(client: Client, case: str) -> None:
    # A slow data source is not a stalled agent.
    assert client.computer("fine").write("a.txt", slow_source(3, 0.7)).size == 3000
    start = time.monotonic()
    with pytest.raises(DeadlineExceededError) as e:
        # 16 MiB: more than gRPC buffers for an agent that reads nothing.
        client.computer(case).write("a.txt", b"w" * (16 * MiB))
    assert "Write stream of 'a.txt'" in str(e.value)
    assert time.monotonic() - start < 5


# ------------------------------------------------------------------ search, listing, links


def test_grep_is_checked(client: Client) -> None:
    with pytest.raises(ProtocolError) as many:
        client.computer("grep-many").grep("x", max_matches=10)
    assert "sent 11 matches, more than the 10 asked" in str(many.value)
    with pytest.raises(ProtocolError) as escape:
        client.computer("grep-escape").grep("x")
    assert "../../home/user/.bashrc" in str(escape.value)
    with pytest.raises(DeadlineExceededError):
        client.computer("grep-stall").grep("x")


@pytest.mark.parametrize(
    "case, says",
    [
        ("dir-escape", "'..'"),
        ("dir-slash", "'a/b'"),
        ("dir-loop", "same page token"),
        ("dir-cycle", "page token it had sent before"),
        ("dir-big-page", "1001 entries"),
    ],
)
def test_listing_is_checked(client: Client, case: str, says: str) -> None:
    assert client.computer("fine").listdir() == ["a.txt", "sub"]
    with pytest.raises(ProtocolError) as e:
        client.computer(case).ls()
    assert says in str(e.value)


@pytest.mark.parametrize(
    "case, says",
    [
        ("glob-escape", "src/../../etc/passwd"),
        ("glob-absolute", "/etc/passwd"),
        ("glob-many", "10001 paths"),
    ],
)
def test_glob_is_checked(client: Client, case: str, says: str) -> None:
    assert client.computer("fine").glob("*") == ["a.txt", "src/b.txt"]
    with pytest.raises(ProtocolError) as e:
        client.computer(case).glob("*")
    assert says in str(e.value)


@pytest.mark.parametrize(
    "case, says",
    [
        ("share-file", "file:///etc/passwd"),
        ("share-path", "../../etc/passwd"),
        ("share-expiry", "expires"),
    ],
)
def test_share_links_are_checked(client: Client, case: str, says: str) -> None:
    link = client.computer("fine").share("a.txt")
    assert link.url.startswith("http://127.0.0.1:1/share/v1/fine/a.txt?") and link.path == "a.txt"
    with pytest.raises(ProtocolError) as e:
        client.computer(case).share("a.txt")
    assert says in str(e.value)


def test_errno_metadata_naming_no_errno_is_ignored(client: Client) -> None:
    with pytest.raises(agentcomputer.AgentComputerError) as e:
        client.computer("c").stat("bad-errno")
    assert not isinstance(e.value, RemoteOSError)
    assert e.value.errno_name is None and e.value.code == "NOT_FOUND"
    assert str(e.value) == "no such thing"


# ------------------------------------------------------------------ asyncio


def aclient(hostile: HostileServer) -> AsyncClient:
    return AsyncClient(hostile.endpoint, token="t", idle_timeout=0.5, exec_grace=1.0)


def test_async_exec_cap_deadline_and_json(hostile: HostileServer) -> None:
    async def main() -> None:
        async with aclient(hostile) as client:
            with pytest.raises(OutputLimitError) as e:
                await client.computer("flood").exec("yes")
            assert e.value.limit == DEFAULT_CAP and e.value.received <= DEFAULT_CAP + MiB

            start = time.monotonic()
            with pytest.raises(DeadlineExceededError):
                await client.computer("hang").exec("sleep 1000", timeout=1)
            assert time.monotonic() - start < 6

            bad = await client.computer("bad-json").exec("x", runtime="javascript")
            with pytest.raises(ProtocolError):
                bad.result
            with pytest.raises(ProtocolError):
                await client.computer("after-exit").exec("x")

    run(main())


def test_async_reads_and_search(hostile: HostileServer) -> None:
    async def main() -> None:
        async with aclient(hostile) as client:
            comp = client.computer("c")
            assert await comp.read_bytes("f", offset=995, length=10) == b"5678901234"
            with pytest.raises(ProtocolError) as gap:
                await comp.read_bytes("gap")
            assert "at offset 20, expected 10" in str(gap.value)
            with pytest.raises(ProtocolError):
                await comp.read_bytes("endless", length=MiB)

            start = time.monotonic()
            with pytest.raises(DeadlineExceededError):
                await comp.read_bytes("stall")
            assert time.monotonic() - start < 5

            # A slow reader is not a stalled server.
            pieces = []
            async for piece in comp.iter_read("f"):
                await asyncio.sleep(0.7)
                pieces.append(piece)
            assert len(b"".join(pieces)) == 3000

            async def slow() -> AsyncIterator[bytes]:
                for _ in range(3):
                    await asyncio.sleep(0.7)
                    yield b"p" * 1000

            assert (await client.computer("fine").write("a.txt", slow())).size == 3000
            for case in ("write-no-answer", "write-no-read"):
                start = time.monotonic()
                with pytest.raises(DeadlineExceededError):
                    await client.computer(case).write("a.txt", b"w" * (16 * MiB))
                assert time.monotonic() - start < 5

            import io

            with pytest.raises(ProtocolError):
                await client.computer("backup-short").backup(io.BytesIO())
            with pytest.raises(ProtocolError):
                await client.computer("grep-many").grep("x", max_matches=10)
            with pytest.raises(DeadlineExceededError):
                await client.computer("grep-stall").grep("x")
            with pytest.raises(ProtocolError):
                await client.computer("dir-escape").ls()
            with pytest.raises(ProtocolError):
                await client.computer("glob-escape").glob("*")
            with pytest.raises(ProtocolError):
                await client.computer("share-file").share("a.txt")

    run(main())
