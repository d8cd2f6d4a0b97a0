"""Failures become Python exceptions that carry the errno name."""

from __future__ import annotations

import errno
import socket

import pytest

import agentcomputer
from agentcomputer.errors import RemoteOSError, from_status

from conftest import Agent


def test_errno_exceptions(computer: agentcomputer.Computer) -> None:
    with pytest.raises(FileNotFoundError) as nf:
        computer.read_bytes("missing/file.txt")
    e = nf.value
    assert isinstance(e, RemoteOSError) and isinstance(e, agentcomputer.AgentComputerError)
    assert e.errno == errno.ENOENT and e.errno_name == "ENOENT"
    assert e.filename == "missing/file.txt"
    assert e.code == "NOT_FOUND"
    assert str(e).startswith("ENOENT: ")

    computer.mkdir("d")
    computer.write("f", "x")
    with pytest.raises(IsADirectoryError) as isdir:
        computer.read_bytes("d")
    assert isdir.value.errno == errno.EISDIR
    with pytest.raises(NotADirectoryError) as notdir:
        computer.stat("f/inside")
    assert notdir.value.errno == errno.ENOTDIR
    assert notdir.value.code == "FAILED_PRECONDITION"  # type: ignore[attr-defined]
    with pytest.raises(FileExistsError):
        computer.mkdir("d")
    with pytest.raises(OSError) as busy:
        computer.rm("/workspace", recursive=True)
    assert busy.value.errno == errno.EBUSY
    with pytest.raises(OSError) as inval:
        computer.rm("d/..")
    assert inval.value.errno == errno.EINVAL
    # A path outside /workspace is refused before anything is touched.
    with pytest.raises(agentcomputer.AgentComputerError) as outside:
        computer.stat("/etc/passwd")
    assert outside.value.code == "INVALID_ARGUMENT"


def test_unknown_computer(client: agentcomputer.Client) -> None:
    ghost = client.computer("no-such-computer")
    with pytest.raises(agentcomputer.ComputerNotFoundError) as e:
        ghost.stat("x")
    assert e.value.errno_name is None
    assert isinstance(e.value, LookupError)
    with pytest.raises(agentcomputer.ComputerNotFoundError):
        ghost.exec("true")


def test_wrong_and_missing_token(agent: Agent, computer: agentcomputer.Computer) -> None:
    with agentcomputer.Client(agent.endpoint, token="not-the-token") as bad:
        with pytest.raises(agentcomputer.AuthenticationError) as e:
            bad.list_computers()
        assert e.value.code == "UNAUTHENTICATED"
        with pytest.raises(agentcomputer.AuthenticationError):
            bad.computer(computer.name).read_bytes("x")
    # No token at all: an empty data directory holds none.
    with agentcomputer.Client(agent.endpoint, data_dir=agent.data_dir / "nowhere") as none:
        assert none.target.token is None
        with pytest.raises(agentcomputer.AuthenticationError) as e:
            none.list_computers()
        assert "no token was sent" in str(e.value)


def test_unreachable_agent() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with agentcomputer.Client(f"127.0.0.1:{port}", token="t", timeout=10) as c:
        with pytest.raises(agentcomputer.AgentUnavailableError) as e:
            c.list_computers()
    assert isinstance(e.value, ConnectionError)
    assert f"127.0.0.1:{port}" in str(e.value)
    assert "node-agent local" in str(e.value)


def test_from_status_mapping() -> None:
    cases = {
        "ENOENT": FileNotFoundError,
        "EEXIST": FileExistsError,
        "ENOTDIR": NotADirectoryError,
        "EISDIR": IsADirectoryError,
        "EACCES": PermissionError,
        "EPERM": PermissionError,
        "ETIMEDOUT": TimeoutError,
    }
    for name, cls in cases.items():
        e = from_status("X", f"{name}: something: p", {"errno": name}, path="p")
        assert isinstance(e, cls) and isinstance(e, RemoteOSError), name
        assert e.errno == getattr(errno, name) and e.filename == "p"
    # The message prefix is enough without metadata.
    e = from_status("RESOURCE_EXHAUSTED", "ENOSPC: no space left on device: f")
    assert type(e) is RemoteOSError and e.errno == errno.ENOSPC
    assert type(from_status("PERMISSION_DENIED", "token of another computer")) is agentcomputer.PermissionDeniedError
    assert type(from_status("INTERNAL", "boom")) is agentcomputer.AgentComputerError


def test_a_computer_that_moved_says_where() -> None:
    # As a node agent answers a call for a computer handed over to n2: the
    # call did not run, and the new node is in the metadata.
    e = from_status(
        "UNAVAILABLE",
        'EAGAIN: computer "u" moved to node n2; call that node\'s agent',
        {"errno": "EAGAIN", "agentcomputer-moved-to": "n2"},
    )
    assert type(e) is agentcomputer.ComputerMovedError
    assert isinstance(e, agentcomputer.AgentUnavailableError)
    assert e.node == "n2" and e.code == "UNAVAILABLE"
