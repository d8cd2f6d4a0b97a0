"""The package as shipped: an sdist that carries the .proto files, a wheel
built from that sdist alone with stubs generated at build time, the whole
API covered, and type information that a user's type checker sees.

Building uses the backend installed in this environment (hatchling,
grpcio-tools and ``build``, as scripts/test.sh installs them), without
network access.
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import agentcomputer
from agentcomputer import aio, client

PROJECT = Path(__file__).resolve().parents[1]
PROTO = PROJECT.parents[1] / "proto" / "agentcomputer" / "v1" / "agentcomputer.proto"


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(sdist, wheel built from the sdist unpacked far from the repository)."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--sdist", "--outdir", str(out), str(PROJECT)],
        check=True,
        capture_output=True,
    )
    (sdist,) = out.glob("agentcomputer-*.tar.gz")
    unpacked = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(sdist) as t:
        t.extractall(unpacked)
    (src,) = unpacked.iterdir()
    wheels = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(wheels), str(src)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("agentcomputer-*.whl")
    return sdist, wheel


def test_sdist_carries_the_protos_and_no_generated_code(dists: tuple[Path, Path]) -> None:
    sdist, _ = dists
    with tarfile.open(sdist) as t:
        names = t.getnames()
        (proto,) = [n for n in names if n.endswith("proto/agentcomputer/v1/agentcomputer.proto")]
        f = t.extractfile(proto)
        assert f is not None
        assert f.read() == PROTO.read_bytes()
    assert not [n for n in names if n.endswith(("_pb2.py", "_pb2_grpc.py"))]
    assert any(n.endswith("hatch_build.py") for n in names)
    assert any(n.endswith("agentcomputer/py.typed") for n in names)


def test_wheel_from_sdist_has_generated_stubs(dists: tuple[Path, Path]) -> None:
    _, wheel = dists
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for needed in [
            "agentcomputer/py.typed",
            "agentcomputer/v1/__init__.py",
            "agentcomputer/v1/agentcomputer_pb2.py",
            "agentcomputer/v1/agentcomputer_pb2.pyi",
            "agentcomputer/v1/agentcomputer_pb2_grpc.py",
            "agentcomputer/v1/agentcomputer.proto",
        ]:
            assert needed in names, needed
        grpc_stub = z.read("agentcomputer/v1/agentcomputer_pb2_grpc.py").decode()
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    for rpc in rpcs("AgentComputer"):
        assert f"/agentcomputer.v1.AgentComputer/{rpc}" in grpc_stub, rpc
    # The runtime floors the generated code checks at import.
    assert re.search(r"^Requires-Dist: grpcio>=\d+\.\d+", metadata, re.M)
    assert re.search(r"^Requires-Dist: protobuf>=\d+\.\d+\.\d+,<\d+", metadata, re.M)


def rpcs(service: str) -> list[str]:
    """The rpc names of ``service`` in the repository's .proto."""
    text = PROTO.read_text()
    body = re.search(r"service %s \{(.*?)\n\}" % service, text, re.S)
    assert body, service
    return re.findall(r"^\s*rpc (\w+)\(", body.group(1), re.M)


def test_every_rpc_is_offered_by_both_flavours() -> None:
    """A new rpc in proto/ fails here until both clients call it."""
    names = rpcs("AgentComputer")
    assert "Exec" in names and "Write" in names
    for module in (client, aio):
        source = Path(module.__file__ or "").read_text()
        for rpc in names:
            used = f'"{rpc}"' in source or f"_stub.{rpc}(" in source or f"_stub.{rpc}.future(" in source
            assert used, f"{module.__name__} does not call {rpc}"


def test_user_code_type_checks(tmp_path: Path) -> None:
    """The installed package is typed (py.typed): a strict check of user
    code passes, and a wrong use is caught."""
    good = tmp_path / "good.py"
    good.write_text(
        "from agentcomputer import Client, ExecResult, FileInfo\n"
        "def tool(c: Client) -> str:\n"
        "    comp = c.computer('demo')\n"
        "    info: FileInfo = comp.write('a.txt', 'hi')\n"
        "    r: ExecResult = comp.exec('cat a.txt', timeout=5.0, env={'A': 'b'})\n"
        "    return r.stdout + comp.read_text('a.txt') + str(info.size + r.exit_code)\n"
    )
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from agentcomputer import Client\n"
        "def tool(c: Client) -> int:\n"
        "    return c.computer('demo').read_text('a.txt')\n"
    )
    run = lambda f: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(f)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    ok = run(good)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    wrong = run(bad)
    assert wrong.returncode == 1
    assert 'Incompatible return value type (got "str", expected "int")' in wrong.stdout


def test_public_items_are_documented() -> None:
    for name in agentcomputer.__all__:
        obj = getattr(agentcomputer, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__doc__, name
    for cls in (agentcomputer.Client, agentcomputer.Computer, agentcomputer.AsyncClient, agentcomputer.AsyncComputer):
        for attr, member in vars(cls).items():
            if not attr.startswith("_") and callable(member):
                assert member.__doc__, f"{cls.__name__}.{attr}"
