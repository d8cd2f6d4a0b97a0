"""Fixtures: a real ``node-agent local`` on a temporary data directory and a
loopback port, shared by the whole session, and a fresh computer per test.

The binary is ``$AGENTCOMPUTER_NODE_AGENT`` when set, else built with
``cargo build -p agentcomputer-node-agent`` from the repository this
package lives in (honouring ``CARGO_TARGET_DIR``).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

import agentcomputer

REPO = Path(__file__).resolve().parents[3]


def _build_agent() -> Path:
    """Builds the node agent with cargo and returns its executable."""
    out = subprocess.run(
        ["cargo", "build", "-p", "agentcomputer-node-agent", "--bin", "node-agent", "--message-format=json"],
        cwd=REPO,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
            if msg["target"]["name"] == "node-agent":
                return Path(msg["executable"])
    raise RuntimeError("cargo built no node-agent executable")


@dataclass
class Agent:
    """A running ``node-agent local``."""

    endpoint: str
    data_dir: Path
    process: subprocess.Popen  # type: ignore[type-arg]
    log: Path

    @property
    def token(self) -> str:
        return (self.data_dir / "token").read_text().strip()


@pytest.fixture(scope="session")
def agent_binary() -> Path:
    given = os.environ.get("AGENTCOMPUTER_NODE_AGENT")
    if given:
        path = Path(given)
        if not os.access(path, os.X_OK):
            raise RuntimeError(f"AGENTCOMPUTER_NODE_AGENT={given} is not an executable")
        return path
    return _build_agent()


def start_agent(binary: Path, root: Path, *extra: str) -> Agent:
    """Starts ``node-agent local --listen 127.0.0.1:0`` on data directory
    ``root/data`` (plus ``extra`` flags); its address is read from the
    ``listening on ADDR`` line it prints, its log goes to ``root/agent.log``."""
    data = root / "data"
    log = root / "agent.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTCOMPUTER_")}
    env.setdefault("RUST_LOG", "warn")
    tls = "--tls-cert" in extra
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(
            [
                str(binary),
                "local",
                "--data-dir",
                str(data),
                "--listen",
                "127.0.0.1:0",
                "--proxy-listen",
                "off",
                # Share links on a free port: several agents run at once.
                "--share-listen",
                "127.0.0.1:0",
                "--idle-timeout",
                "2s",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=log_file,
            env=env,
            text=True,
        )
    found: list[str] = []
    ready = threading.Event()

    def pump() -> None:  # read the address, then keep draining stdout
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("listening on ") and not found:
                found.append(line.split()[-1])
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(60) or not found:
        proc.kill()
        raise RuntimeError(f"node-agent did not start; its log:\n{log.read_text()}")
    scheme = "https" if tls else "http"
    a = Agent(endpoint=f"{scheme}://{found[0]}", data_dir=data, process=proc, log=log)
    deadline = time.time() + 10
    while not (data / "token").exists():
        if time.time() > deadline:
            stop_agent(a)
            raise RuntimeError("node-agent wrote no token")
        time.sleep(0.05)
    return a


def stop_agent(a: Agent) -> None:
    a.process.terminate()
    try:
        a.process.wait(30)
    except subprocess.TimeoutExpired:
        a.process.kill()
        a.process.wait()


@pytest.fixture(scope="session")
def agent(agent_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    """A plain-HTTP local agent shared by the session."""
    a = start_agent(agent_binary, tmp_path_factory.mktemp("agent"))
    try:
        yield a
    finally:
        stop_agent(a)


@pytest.fixture()
def client(agent: Agent) -> Iterator[agentcomputer.Client]:
    """A client that finds the token in the agent's data directory, as for a
    local agent."""
    with agentcomputer.Client(agent.endpoint, data_dir=agent.data_dir) as c:
        yield c


def unique_name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture()
def computer(client: agentcomputer.Client) -> Iterator[agentcomputer.Computer]:
    """A fresh computer, deleted after the test."""
    comp = client.create_computer(unique_name())
    try:
        yield comp
    finally:
        try:
            comp.delete()
        except agentcomputer.ComputerNotFoundError:
            pass
