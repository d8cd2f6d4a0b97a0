"""Finding the agent, its token and TLS trust, as the CLI does."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import agentcomputer
from agentcomputer import ConfigurationError, parse_port_forward, resolve_target
from agentcomputer.connection import default_data_dir

from conftest import Agent

PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_defaults_find_the_local_agent(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "token").write_text("local-token\n")
    t = resolve_target(env={"AGENTCOMPUTER_DATA_DIR": str(data)})
    assert t.endpoint == "http://127.0.0.1:7433" and t.address == "127.0.0.1:7433"
    assert t.token == "local-token" and t.token_source == str(data / "token")
    assert not t.tls and t.ca_cert is None
    assert "local-token" not in repr(t)
    # XDG_DATA_HOME, then ~/.local/share, as node-agent picks its data dir.
    assert default_data_dir({"XDG_DATA_HOME": "/x"}) == Path("/x/agentcomputer")
    assert default_data_dir({"XDG_DATA_HOME": "rel", "HOME": "/h"}) == Path("/h/.local/share/agentcomputer")
    # No token file yet: nothing is sent.
    assert resolve_target(env={"AGENTCOMPUTER_DATA_DIR": str(tmp_path / "none")}).token is None


def test_token_order(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "token").write_text("from-data-dir")
    f = tmp_path / "tok"
    f.write_text(" from-file \n")
    env = {"AGENTCOMPUTER_DATA_DIR": str(data)}
    assert resolve_target(token="arg", token_file=f, env=env).token == "arg"
    assert resolve_target(env={**env, "AGENTCOMPUTER_TOKEN": "envtok"}).token == "envtok"
    assert resolve_target(token_file=f, env=env).token == "from-file"
    assert resolve_target(env={**env, "AGENTCOMPUTER_TOKEN_FILE": str(f)}).token == "from-file"
    # A remote endpoint never gets the local agent's token.
    assert resolve_target("http://10.1.2.3:7433", env=env).token is None
    assert resolve_target("http://localhost:7433", env=env).token == "from-data-dir"
    assert resolve_target("http://[::1]:7433", env=env).token == "from-data-dir"
    with pytest.raises(ConfigurationError, match="cannot read token file"):
        resolve_target(token_file=tmp_path / "missing", env=env)
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigurationError, match="the file is empty"):
        resolve_target(token_file=tmp_path / "empty", env=env)
    with pytest.raises(ConfigurationError, match="not a valid token"):
        resolve_target(token="a\nb", env=env)


def test_endpoints_and_tls(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(PEM)
    t = resolve_target("10.0.0.5:7433", token="t", ca_cert=ca, env={})
    assert t.endpoint == "https://10.0.0.5:7433" and t.tls and t.ca_cert == PEM
    assert resolve_target("10.0.0.5:7433", token="t", ca_cert=PEM, env={}).ca_cert == PEM
    t = resolve_target("https://127.0.0.1:4000", token="t", tls_server_name="agent.example", env={})
    assert t.tls_server_name == "agent.example" and t.ca_cert is None
    t = resolve_target(env={"AGENTCOMPUTER_ENDPOINT": "https://a.example", "AGENTCOMPUTER_CA_CERT": str(ca)})
    assert t.address == "a.example:443" and t.ca_cert == PEM
    assert resolve_target("http://[::1]:9", env={}).address == "[::1]:9"
    for bad, why in [
        ("ftp://x:1", "http:// or https://"),
        ("http://x:1/path", "no path"),
        ("http://x:99999", "invalid endpoint"),
        ("http://:1", "no host"),
    ]:
        with pytest.raises(ConfigurationError, match=why):
            resolve_target(bad, env={})
    (tmp_path / "bad.pem").write_text("not pem")
    with pytest.raises(ConfigurationError, match="no certificate"):
        resolve_target("https://x:1", ca_cert=tmp_path / "bad.pem", env={})
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        resolve_target("http://10.0.0.9:7433", token="t", env={})
    assert any("unencrypted" in str(x.message) for x in w)


def test_port_forward_output() -> None:
    text = "endpoint http://127.0.0.1:40111\ntoken s3cret\ncomputer team/demo\n"
    pf = parse_port_forward(text)
    assert (pf.endpoint, pf.token, pf.computer) == ("http://127.0.0.1:40111", "s3cret", "team/demo")
    assert pf.ca_cert is None and "s3cret" not in repr(pf)
    tls = parse_port_forward(text.replace("http:", "https:") + "ca-cert /tmp/ca.pem\ntls-server-name agent.svc\n")
    assert tls.ca_cert == "/tmp/ca.pem" and tls.tls_server_name == "agent.svc"
    with pytest.raises(ConfigurationError, match="'token ...'"):
        parse_port_forward("endpoint http://127.0.0.1:1\ncomputer a/b\n")


def test_port_forward_lines_drive_a_client(agent: Agent, computer: agentcomputer.Computer) -> None:
    """The lines port-forward prints are enough to reach a computer; here
    they name the local agent and its token."""
    text = f"endpoint {agent.endpoint}\ntoken {agent.token}\ncomputer {computer.name}\n"
    remote = agentcomputer.Client.port_forward_computer(text)
    try:
        remote.write("via-forward.txt", "ok")
        assert computer.read_text("via-forward.txt") == "ok"
        assert remote.client.target.token_source == "the token argument"
    finally:
        remote.client.close()


def test_env_only_discovery(agent: Agent, monkeypatch: pytest.MonkeyPatch, computer: agentcomputer.Computer) -> None:
    """With AGENTCOMPUTER_ENDPOINT and AGENTCOMPUTER_DATA_DIR, Client() needs
    no arguments: the token comes from the agent's data directory."""
    monkeypatch.setenv("AGENTCOMPUTER_ENDPOINT", agent.endpoint.replace("http://", ""))
    monkeypatch.setenv("AGENTCOMPUTER_DATA_DIR", str(agent.data_dir))
    for var in ("AGENTCOMPUTER_TOKEN", "AGENTCOMPUTER_TOKEN_FILE", "AGENTCOMPUTER_CA_CERT"):
        monkeypatch.delenv(var, raising=False)
    with agentcomputer.Client() as c:
        assert c.endpoint == agent.endpoint
        assert computer.name in [i.name for i in c.list_computers()]
