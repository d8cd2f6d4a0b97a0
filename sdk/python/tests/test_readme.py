"""The README's examples run as written, in a fresh interpreter that finds
the agent only through the environment (AGENTCOMPUTER_ENDPOINT and the
data directory holding its token), as a user's would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

import agentcomputer

from conftest import Agent

README = Path(__file__).resolve().parents[1] / "README.md"


def block_after(heading: str) -> str:
    """The first ```python block under ``heading``."""
    text = README.read_text()
    section = text[text.index(heading) :]
    m = re.search(r"```python\n(.*?)```", section, re.S)
    assert m, heading
    return m.group(1)


@pytest.fixture()
def demo(client: agentcomputer.Client) -> Iterator[None]:
    try:
        client.delete_computer("demo")
    except agentcomputer.ComputerNotFoundError:
        pass
    yield
    client.delete_computer("demo")


def run_python(agent: Agent, code: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTCOMPUTER_")}
    env["AGENTCOMPUTER_ENDPOINT"] = agent.endpoint
    env["AGENTCOMPUTER_DATA_DIR"] = str(agent.data_dir)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_five_lines_then_tool_loop(agent: Agent, demo: None) -> None:
    five = block_after("## Five lines")
    assert len(five.strip().splitlines()) == 5
    assert run_python(agent, five) == "16 notes.txt\n"
    loop = run_python(agent, block_after("## An agent's tool loop"))
    assert loop == "wrote 21 bytes to words.txt\nexit 0\n\nAGENT\nCOMPUTER\nFILES\n\n"
