"""Continuous backup through the Python library: ``sync`` returns once the
computer's calls are in the agent's backup store (a directory here), a new
agent on an empty data directory restores the computer from it, and
``verify_backup`` checks the store's copy; an agent without a store says
how to configure one."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

import agentcomputer
from conftest import start_agent, stop_agent


def test_sync_then_a_new_agent_restores_and_verifies(agent_binary: Path, tmp_path: Path) -> None:
    target = f"file://{tmp_path / 'bucket'}"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = start_agent(agent_binary, tmp_path / "a", "--backup", target)
    try:
        with agentcomputer.Client(first.endpoint, data_dir=first.data_dir) as c:
            comp = c.create_computer("kept")
            comp.exec("seq 300 > numbers", check=True)
            assert comp.sync() >= 1
    finally:
        # As a crash would: no clean close, only what sync confirmed.
        first.process.send_signal(signal.SIGKILL)
        first.process.wait()
    second = start_agent(agent_binary, tmp_path / "b", "--backup", target)
    try:
        with agentcomputer.Client(second.endpoint, data_dir=second.data_dir) as c:
            comp = c.computer("kept")
            assert comp.exec("wc -l < numbers", check=True).stdout == "300\n"
            check = comp.verify_backup()
            assert isinstance(check, agentcomputer.BackupCheck)
            assert check.position >= check.snapshot_position >= 1
            assert check.database_bytes > 0
    finally:
        stop_agent(second)


def test_sync_without_a_backup_store_says_how_to_get_one(computer: agentcomputer.Computer) -> None:
    with pytest.raises(agentcomputer.AgentComputerError) as e:
        computer.sync()
    assert e.value.code == "FAILED_PRECONDITION"
    assert "--backup" in str(e.value)
