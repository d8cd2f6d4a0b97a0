"""``Computer.publish`` against a real git server (``git http-backend`` on
loopback, tests/gitserver.py): a directory is committed and pushed
through the computer's egress policy with credentials that exist only for
the call; each refusal raises the exception its gRPC code maps to."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Iterator

import pytest

import agentcomputer
from agentcomputer import AsyncClient, Egress, EgressCidr

from conftest import Agent, unique_name
from gitserver import GitServer, bare_repo, basic, git

SECRET = "s3cret-token"


def allowing(port: int) -> Egress:
    """An egress policy that lets the computer reach 127.0.0.1:PORT only."""
    return Egress(mode="allow_list", cidrs=(EgressCidr("127.0.0.1/32", ((port, port),)),))


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[GitServer]:
    """A git server with an empty ``site.git`` that wants ``ada:SECRET``."""
    bare_repo(tmp_path, "site")
    with GitServer(tmp_path, basic("ada", SECRET)) as s:
        yield s


@pytest.fixture()
def publisher(client: agentcomputer.Client, server: GitServer) -> Iterator[agentcomputer.Computer]:
    """A computer allowed to reach the git server, with ``site/index.html``."""
    comp = client.create_computer(unique_name("pub"), egress=allowing(server.port))
    try:
        comp.exec("mkdir site && echo hello > site/index.html", check=True)
        yield comp
    finally:
        comp.delete()


def log(server: GitServer, branch: str = "main") -> str:
    return git(server.root / "site.git", "log", "--format=%s", branch)


def test_publish_commits_and_pushes_with_credentials_from_every_source(
    publisher: agentcomputer.Computer, server: GitServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = server.url("site.git")

    # Without credentials the server refuses; git's reason comes back as
    # the remote's failure (not as a lost connection to the agent), and the
    # commit made stays for the next publish.
    with pytest.raises(agentcomputer.RemoteOSError) as e:
        publisher.publish("site", remote, message="first page")
    assert (e.value.code, e.value.errno_name) == ("UNAVAILABLE", "EIO")
    assert "could not read Username" in str(e.value)
    assert not isinstance(e.value, agentcomputer.AgentUnavailableError)

    # From an environment variable of this process.
    monkeypatch.setenv("PUBLISH_TOKEN", f"ada:{SECRET}\n")
    done = publisher.publish("/workspace/site", remote, credentials_env="PUBLISH_TOKEN")
    assert isinstance(done, agentcomputer.Published)
    assert (done.branch, done.committed, len(done.commit)) == ("main", False, 40)
    assert git(server.root / "site.git", "rev-parse", "main").strip() == done.commit
    assert log(server) == "first page\n"
    assert SECRET not in repr(done) and SECRET not in done.output

    # A "USER:SECRET" string, after a change: a second commit on top.
    publisher.exec("echo more >> site/index.html", check=True)
    second = publisher.publish("site", remote, message="second", credentials=f"ada:{SECRET}")
    assert second.committed and second.commit != done.commit
    assert log(server) == "second\nfirst page\n"

    # Nothing changed: the same commit, pushed again.
    again = publisher.publish("site", remote, credentials=("ada", SECRET))
    assert (again.commit, again.committed) == (second.commit, False)

    # A (user, secret) tuple, to another branch.
    publisher.exec("echo third > site/third.html", check=True)
    third = publisher.publish("site", remote, branch="release", message="third", credentials=("ada", SECRET))
    assert third.branch == "release"
    assert log(server, "release") == "third\nsecond\nfirst page\n"
    assert log(server) == "second\nfirst page\n"
    git(server.root / "site.git", "fsck", "--strict", "--no-dangling")

    # Wrong credentials: the server's refusal, nothing pushed.
    with pytest.raises(agentcomputer.RemoteOSError) as e:
        publisher.publish("site", remote, branch="other", credentials=("ada", "wrong"))
    assert e.value.code == "UNAVAILABLE"

    # The server got the credentials (and only ever these or none) ...
    assert basic("ada", SECRET) in server.seen
    assert set(server.seen) <= {None, basic("ada", SECRET), basic("ada", "wrong")}
    # ... and the computer holds no trace of them: not in a file, not in
    # the repository's config.
    found = publisher.exec("grep -r s3cret / ; echo status=$?")
    assert found.stdout == "status=1\n", found.stderr
    config = publisher.read_text("site/.git/config")
    assert "ada" not in config and "remote" not in config


def test_a_bare_token_is_sent_as_x_access_token(client: agentcomputer.Client, tmp_path: Path) -> None:
    bare_repo(tmp_path, "tok")
    with GitServer(tmp_path, basic("x-access-token", "ghp_abc123")) as server:
        comp = client.create_computer(unique_name("tok"), egress=allowing(server.port))
        try:
            comp.mkdir("proj")
            comp.write_text("proj/README.md", "# proj\n")
            done = comp.publish("proj", server.url("tok.git"), credentials="ghp_abc123")
            assert done.committed and done.branch == "main"
            assert git(tmp_path / "tok.git", "log", "--format=%s", "main") == "Publish /proj\n"
        finally:
            comp.delete()


def test_the_egress_policy_is_enforced(computer: agentcomputer.Computer, server: GitServer) -> None:
    # The fixture's computer has the default policy: deny all.
    computer.exec("mkdir site && echo hi > site/a.txt", check=True)
    with pytest.raises(agentcomputer.PermissionDeniedError) as e:
        computer.publish("site", server.url("site.git"), credentials=("ada", SECRET))
    assert e.value.code == "PERMISSION_DENIED"
    assert "egress" in str(e.value)
    assert SECRET not in str(e.value)
    assert server.seen == []


def test_credentials_in_the_url_are_refused_before_anything_is_sent(
    publisher: agentcomputer.Computer, server: GitServer
) -> None:
    url = f"http://ada:{SECRET}@127.0.0.1:{server.port}/site.git"
    with pytest.raises(ValueError) as e:
        publisher.publish("site", url)
    assert "credentials do not belong in the URL" in str(e.value)
    assert SECRET not in str(e.value) and "***@127.0.0.1" in str(e.value)
    assert server.seen == []

    # The agent refuses it too (for clients that do not check), without
    # repeating the secret.
    from agentcomputer.v1 import agentcomputer_pb2 as pb

    req = pb.PublishRequest(computer=publisher.name, dir="/site", remote=url)
    with pytest.raises(agentcomputer.AgentComputerError) as e2:
        publisher.client._unary("Publish", req)
    assert e2.value.code == "INVALID_ARGUMENT"
    assert "credentials do not belong in the URL" in str(e2.value)
    assert SECRET not in str(e2.value)
    assert server.seen == []


def test_arguments_are_checked_without_showing_the_secret(
    publisher: agentcomputer.Computer, server: GitServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = server.url("site.git")
    monkeypatch.delenv("NO_SUCH_PUBLISH_VAR", raising=False)
    with pytest.raises(ValueError, match="not both"):
        publisher.publish("site", remote, credentials="a:b", credentials_env="X")
    with pytest.raises(ValueError, match="NO_SUCH_PUBLISH_VAR: the variable is not set"):
        publisher.publish("site", remote, credentials_env="NO_SUCH_PUBLISH_VAR")
    with pytest.raises(ValueError, match="empty"):
        publisher.publish("site", remote, credentials="\n")
    with pytest.raises(TypeError) as e:
        publisher.publish("site", remote, credentials=("ada", SECRET, "x"))  # type: ignore[arg-type]
    assert SECRET not in str(e.value)
    assert server.seen == []


def test_refusals_map_to_their_codes(client: agentcomputer.Client, server: GitServer, tmp_path: Path) -> None:
    remote = server.url("site.git")
    a = client.create_computer(unique_name("pa"), egress=allowing(server.port))
    b = client.create_computer(unique_name("pb"), egress=allowing(server.port))
    try:
        # An empty directory: nothing to publish.
        a.mkdir("empty")
        with pytest.raises(agentcomputer.AgentComputerError) as e:
            a.publish("empty", remote, credentials=("ada", SECRET))
        assert e.value.code == "FAILED_PRECONDITION"
        # Not a directory of the computer.
        with pytest.raises(agentcomputer.AgentComputerError) as e:
            a.publish("missing", remote, credentials=("ada", SECRET))
        assert e.value.code == "INVALID_ARGUMENT"
        # Not an http(s) remote.
        with pytest.raises(agentcomputer.AgentComputerError) as e:
            a.publish("empty", "ssh://git@127.0.0.1/site.git")
        assert e.value.code == "INVALID_ARGUMENT"

        # Two unrelated histories to one branch: the second push is not a
        # fast-forward, and the remote's refusal is git's message.
        a.exec("mkdir site && echo 'from a' > site/a.txt", check=True)
        b.exec("mkdir site && echo 'from b' > site/b.txt", check=True)
        first = a.publish("site", remote, credentials=("ada", SECRET))
        with pytest.raises(agentcomputer.AgentComputerError) as e:
            b.publish("site", remote, credentials=("ada", SECRET))
        assert e.value.code == "ABORTED"
        assert "rejected" in str(e.value)
        assert git(tmp_path / "site.git", "rev-parse", "main").strip() == first.commit

        # A remote the policy allows that nothing answers at.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        c = client.create_computer(unique_name("pc"), egress=allowing(port))
        try:
            c.exec("mkdir site && echo c > site/c.txt", check=True)
            with pytest.raises(agentcomputer.RemoteOSError) as e:
                c.publish("site", f"http://127.0.0.1:{port}/site.git")
            assert (e.value.code, e.value.errno_name) == ("UNAVAILABLE", "EIO")
        finally:
            c.delete()
    finally:
        a.delete()
        b.delete()


def test_async_publish(agent: Agent, server: GitServer) -> None:
    async def main() -> None:
        async with AsyncClient(agent.endpoint, data_dir=agent.data_dir) as client:
            comp = await client.create_computer(unique_name("apub"), egress=allowing(server.port))
            try:
                await comp.mkdir("site")
                await comp.write_text("site/index.html", "async\n")
                done = await comp.publish("site", server.url("site.git"), message="async", credentials=("ada", SECRET))
                assert done.committed and done.branch == "main"
                with pytest.raises(ValueError):
                    await comp.publish("site", f"https://ada:{SECRET}@example.org/r.git")
            finally:
                await comp.delete()

    asyncio.run(main())
    assert log(server) == "async\n"
