"""An agent serving TLS with a private CA, reached as through
``kubectl computer port-forward``: a local address whose certificate names
the agent, so the client checks it against ``tls_server_name``.

The certificates are made with the ``openssl`` command.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

import agentcomputer

from conftest import Agent, start_agent, stop_agent, unique_name

SERVER_NAME = "agent.agentcomputer-system.test"


@dataclass
class Pki:
    ca: Path
    cert: Path
    key: Path


def make_pki(d: Path, name: str) -> Pki:
    """A CA, and a server certificate for DNS name ``name`` only (no IP)."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=agentcomputer test CA",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", f"/CN={name}")
    (d / "ext.cnf").write_text(
        f"subjectAltName=DNS:{name}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
    )
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf")
    return Pki(ca=d / "ca.pem", cert=d / "server.pem", key=d / "server.key")


@pytest.fixture(scope="module")
def tls_agent(agent_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Agent, Pki]]:
    root = tmp_path_factory.mktemp("tls-agent")
    pki = make_pki(root, SERVER_NAME)
    a = start_agent(agent_binary, root, "--tls-cert", str(pki.cert), "--tls-key", str(pki.key))
    try:
        yield a, pki
    finally:
        stop_agent(a)


def test_ca_and_server_name(tls_agent: tuple[Agent, Pki]) -> None:
    agent, pki = tls_agent
    assert agent.endpoint.startswith("https://127.0.0.1:")
    with agentcomputer.Client(
        agent.endpoint, agent.token, ca_cert=pki.ca, tls_server_name=SERVER_NAME
    ) as c:
        comp = c.create_computer(unique_name("tls"))
        comp.write("over-tls.txt", "secret")
        assert comp.exec("cat over-tls.txt").stdout == "secret"
        comp.delete()
    # A bare HOST:PORT with a CA means https://; the PEM may be given as bytes.
    bare = agent.endpoint.removeprefix("https://")
    with agentcomputer.Client(bare, agent.token, ca_cert=pki.ca.read_bytes(), tls_server_name=SERVER_NAME) as c:
        assert c.endpoint == agent.endpoint
        c.list_computers()


def test_untrusted_or_misnamed_certificates_are_refused(tls_agent: tuple[Agent, Pki], tmp_path: Path) -> None:
    agent, pki = tls_agent
    # The certificate names the agent, not 127.0.0.1.
    with agentcomputer.Client(agent.endpoint, agent.token, ca_cert=pki.ca, timeout=10) as c:
        with pytest.raises(agentcomputer.AgentUnavailableError):
            c.list_computers()
    # Another CA.
    other = make_pki(tmp_path, SERVER_NAME)
    with agentcomputer.Client(
        agent.endpoint, agent.token, ca_cert=other.ca, tls_server_name=SERVER_NAME, timeout=10
    ) as c:
        with pytest.raises(agentcomputer.AgentUnavailableError):
            c.list_computers()
    # Plain HTTP/2 to the TLS port.
    plain = agent.endpoint.replace("https://", "http://")
    with agentcomputer.Client(plain, agent.token, timeout=10) as c:
        with pytest.raises(agentcomputer.AgentUnavailableError):
            c.list_computers()


def test_port_forward_output_with_tls(tls_agent: tuple[Agent, Pki]) -> None:
    """The lines `kubectl computer port-forward` prints for an agent serving
    TLS are enough for the client."""
    agent, pki = tls_agent
    with agentcomputer.Client(agent.endpoint, agent.token, ca_cert=pki.ca, tls_server_name=SERVER_NAME) as admin:
        name = unique_name("pf")
        admin.create_computer(name)
        try:
            text = (
                f"endpoint {agent.endpoint}\n"
                f"token {agent.token}\n"
                f"ca-cert {pki.ca}\n"
                f"tls-server-name {SERVER_NAME}\n"
                f"computer {name}\n"
            )
            comp = agentcomputer.Client.port_forward_computer(text)
            try:
                assert comp.client.target.tls
                comp.write("f", "through the forward")
                assert comp.read_text("f") == "through the forward"
            finally:
                comp.client.close()
        finally:
            admin.delete_computer(name)
