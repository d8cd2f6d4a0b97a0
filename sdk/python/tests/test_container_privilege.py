"""The container runtime's privilege boundary through the library: a
caller's ``LD_PRELOAD`` reaches the script's processes as the sandbox user
and no program running as root (the sandbox is built by root ``bwrap`` and
``setpriv``). Needs the agent to run as root with bubblewrap and a C
compiler, as the container runtime and the preload library do."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import agentcomputer

REPO = Path(__file__).resolve().parents[3]
SOURCE = REPO / "node-agent" / "tests" / "fixtures" / "preload_record.c"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("bwrap") is None or shutil.which("cc") is None,
    reason="the local container sandbox needs root, bubblewrap and a C compiler",
)


def test_a_preload_library_never_runs_as_root(computer: agentcomputer.Computer, tmp_path: Path) -> None:
    record = tmp_path / "record"
    lib = tmp_path / "preload.so"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-O1", "-o", str(lib), f'-DRECORD="{record}"', str(SOURCE)],
        check=True,
    )
    # The library works: a host program loads it and records uid 0.
    subprocess.run(["/bin/true"], env={"LD_PRELOAD": str(lib)}, check=True)
    assert record.read_text().startswith("uid=0 ")
    record.unlink()

    computer.upload(lib, "preload.so")
    r = computer.exec(
        "/bin/true; cat preload-record",
        runtime="container",
        env={"LD_PRELOAD": f"{lib} /workspace/preload.so", "LD_LIBRARY_PATH": str(tmp_path)},
        timeout=60,
    )
    assert r.exit_code == 0, r
    assert not record.exists(), f"a program outside the sandbox loaded it: {record.read_text()}"
    assert "uid=1000 euid=1000" in r.stdout
    assert "uid=0 " not in r.stdout


def test_a_name_the_sandboxs_shell_cannot_set_is_refused(computer: agentcomputer.Computer) -> None:
    with pytest.raises(agentcomputer.AgentComputerError) as err:
        computer.exec("true", runtime="container", env={"a-b": "v"})
    assert "a-b" in str(err.value)
