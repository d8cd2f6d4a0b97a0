"""Snapshots, restore and copies through the Python library, on an agent
whose continuous backup goes to a directory: an agent checkpoints a
computer, breaks it, restores it, undoes the restore, forks it and makes a
computer from a backup file."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import agentcomputer
from conftest import start_agent, stop_agent


def test_snapshot_restore_undo_fork_and_import(agent_binary: Path, tmp_path: Path) -> None:
    a = start_agent(agent_binary, tmp_path, "--backup", f"file://{tmp_path / 'log'}")
    try:
        with agentcomputer.Client(a.endpoint, data_dir=a.data_dir) as c:
            comp = c.create_computer("work")
            comp.exec("mkdir -p src && echo 'print(1)' > src/app.py && chmod 750 src/app.py", check=True)
            snap = comp.snapshot("before-refactor")
            assert isinstance(snap, agentcomputer.Snapshot)
            assert (snap.name, snap.computer) == ("before-refactor", "work")
            assert snap.position > 0 and snap.database_bytes > 0

            comp.exec("rm -rf ./* && echo broken > broken.txt", check=True)
            done = comp.restore("before-refactor")
            assert isinstance(done, agentcomputer.Restored)
            assert done.restored.name == "before-refactor"
            assert done.before.name.startswith("before-restore-")
            assert comp.read_text("src/app.py") == "print(1)\n"
            assert comp.stat("src/app.py").perm == 0o750
            assert [s.name for s in comp.snapshots()] == ["before-refactor", done.before.name]

            comp.restore(done.before.name)
            assert comp.exec("ls", check=True).stdout == "broken.txt\n"
            comp.restore("before-refactor")

            fork = comp.fork("work-fork")
            fork.write("only-in-fork", b"x")
            assert fork.read_text("src/app.py") == "print(1)\n"
            assert not comp.exists("only-in-fork")
            copy = c.create_computer_from("work-copy", snapshot="before-refactor")
            assert copy.read_text("src/app.py") == "print(1)\n"

            copied = tmp_path / "work.db"
            comp.backup(copied)
            imported = c.import_computer("work-imported", copied)
            assert imported.read_text("src/app.py") == "print(1)\n"

            # A point in time, within what the log keeps.
            at = time.time()
            time.sleep(0.05)
            comp.write("later.txt", b"later")
            comp.restore(at=at)
            assert not comp.exists("later.txt")

            with pytest.raises(agentcomputer.AgentComputerError) as e:
                comp.restore("no-such-snapshot")
            assert e.value.code == "NOT_FOUND"
            with pytest.raises(agentcomputer.ComputerExistsError):
                c.create_computer_from("work-copy", snapshot="before-refactor")
            with pytest.raises(ValueError):
                comp.restore()
            assert comp.delete_snapshot("before-refactor") >= 0
    finally:
        stop_agent(a)


def test_snapshots_without_a_backup_store_say_how_to_get_one(computer: agentcomputer.Computer) -> None:
    with pytest.raises(agentcomputer.AgentComputerError) as e:
        computer.snapshot()
    assert e.value.code == "FAILED_PRECONDITION"
    assert "--backup" in str(e.value)
