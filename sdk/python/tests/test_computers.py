"""Computers: create, get, list, delete, quota and egress settings."""

from __future__ import annotations

import errno

import pytest

import agentcomputer
from agentcomputer import Egress, EgressCidr

from conftest import unique_name


def test_create_get_list_delete(client: agentcomputer.Client) -> None:
    name = unique_name("life")
    comp = client.create_computer(name, max_bytes=64 << 20, max_inodes=5000)
    assert comp.name == name
    info = client.get_computer(name)
    assert info.name == name
    assert info.max_bytes == 64 << 20
    assert info.max_inodes == 5000
    assert info.used_inodes >= 1  # the root directory
    assert info.created.year >= 2024
    assert info.egress.mode == "deny_all"
    names = [c.name for c in client.list_computers()]
    assert name in names
    assert names == sorted(names)

    comp.write("f.txt", "x" * 1000)
    assert comp.info().used_bytes >= 1000

    comp.delete()
    assert name not in [c.name for c in client.list_computers()]
    with pytest.raises(agentcomputer.ComputerNotFoundError) as e:
        client.get_computer(name)
    assert e.value.code == "NOT_FOUND"
    assert name in str(e.value)
    with pytest.raises(agentcomputer.ComputerNotFoundError):
        client.delete_computer(name)


def test_create_is_not_idempotent(client: agentcomputer.Client, computer: agentcomputer.Computer) -> None:
    with pytest.raises(agentcomputer.ComputerExistsError) as e:
        client.create_computer(computer.name)
    assert e.value.code == "ALREADY_EXISTS"


def test_bad_name_is_invalid_argument(client: agentcomputer.Client) -> None:
    with pytest.raises(agentcomputer.AgentComputerError) as e:
        client.create_computer("Not_A_Label")
    assert e.value.code == "INVALID_ARGUMENT"


def test_egress_round_trip(client: agentcomputer.Client) -> None:
    policy = Egress(
        mode="allow_list",
        cidrs=(EgressCidr("10.0.0.0/8", ((443, 443), (8000, 8080))),),
        hosts=("pypi.org", "*.example.com"),
    )
    comp = client.create_computer(unique_name("egress"), egress=policy)
    try:
        got = comp.info().egress
        assert got.mode == "allow_list"
        assert got.hosts == ("pypi.org", "*.example.com")
        assert got.cidrs[0].cidr == "10.0.0.0/8"
        assert got.cidrs[0].ports == ((443, 443), (8000, 8080))
    finally:
        comp.delete()
    with pytest.raises(ValueError):
        Egress(mode="sometimes").to_proto()


def test_quota_is_enospc(client: agentcomputer.Client) -> None:
    comp = client.create_computer(unique_name("quota"), max_bytes=1 << 20)
    try:
        comp.write("small", b"a" * 1000)
        with pytest.raises(agentcomputer.RemoteOSError) as e:
            comp.write("big", b"b" * (2 << 20))
        assert e.value.errno_name == "ENOSPC"
        assert e.value.errno == errno.ENOSPC
        assert e.value.filename == "big"
        assert e.value.code == "RESOURCE_EXHAUSTED"
        # Earlier data is intact; the failed upload left no file.
        assert comp.read_bytes("small") == b"a" * 1000
        assert not comp.exists("big")
    finally:
        comp.delete()
