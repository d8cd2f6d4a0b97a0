"""Build hook: generates the gRPC stubs from the API's .proto files.

The .proto files are the repository's ``proto/`` directory (``../../proto``
from this project) in a source checkout, or ``proto/`` inside an sdist, which
this hook fills from the checkout when the sdist is built. Nothing generated
is kept in the source tree:

* sdist: the ``.proto`` files are added under ``proto/``;
* wheel: ``grpc_tools.protoc`` compiles them into a temporary directory and
  the results are added as the ``agentcomputer.v1`` package (messages
  ``agentcomputer_pb2.py`` with their ``.pyi`` types, and the service stubs
  ``agentcomputer_pb2_grpc.py``), next to the ``.proto`` they came from.

Generated protobuf and gRPC code checks at import time that the runtime is
at least the version that generated it, so the wheel's metadata gets those
floors (``grpcio>=G``, ``protobuf>=P,<next major``), read from the generated
files themselves.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

# Where the .proto files live, relative to this project: an sdist's copy
# first, then the repository checkout.
PROTO_DIRS = ("proto", os.path.join("..", "..", "proto"))
INIT_TEXT = '"""Generated from the Agent Computer .proto files at build time."""\n'


def find_proto_root(root: Path) -> Path:
    """The directory holding ``agentcomputer/v1/*.proto``."""
    for rel in PROTO_DIRS:
        candidate = (root / rel).resolve()
        if any(candidate.glob("agentcomputer/**/*.proto")):
            return candidate
    raise RuntimeError(
        "no agentcomputer/**/*.proto found in "
        + " or ".join(str((root / rel).resolve()) for rel in PROTO_DIRS)
        + ": build from the repository checkout (sdk/python) or from an sdist"
    )


def proto_files(proto_root: Path) -> list[Path]:
    """The API's .proto files, relative to ``proto_root``, sorted."""
    return sorted(p.relative_to(proto_root) for p in proto_root.glob("agentcomputer/**/*.proto"))


def generate(proto_root: Path, out: Path) -> None:
    """Runs protoc (bundled in grpcio-tools) over every .proto file."""
    import grpc_tools
    from grpc_tools import protoc

    include = Path(grpc_tools.__file__).parent / "_proto"
    files = [str(f) for f in proto_files(proto_root)]
    args = [
        "grpc_tools.protoc",
        f"--proto_path={proto_root}",
        f"--proto_path={include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *files,
    ]
    status = protoc.main(args)
    if status != 0:
        raise RuntimeError(f"protoc failed with status {status}: {' '.join(args)}")


def runtime_floors(out: Path) -> list[str]:
    """Requirements the generated code checks at import time."""
    floors: list[str] = []
    pb2 = "\n".join(p.read_text() for p in out.rglob("*_pb2.py"))
    m = re.search(r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,\s*(\d+),\s*(\d+),\s*(\d+)", pb2)
    if m:
        major, minor, patch = (int(x) for x in m.groups())
        floors.append(f"protobuf>={major}.{minor}.{patch},<{major + 1}")
    grpc = "\n".join(p.read_text() for p in out.rglob("*_pb2_grpc.py"))
    m = re.search(r"GRPC_GENERATED_VERSION\s*=\s*'([0-9.]+)'", grpc)
    if m:
        floors.append(f"grpcio>={m.group(1)}")
    return floors


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    """Adds the .proto files to the sdist and the generated stubs to the wheel."""

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        proto_root = find_proto_root(root)
        if self.target_name == "sdist":
            for rel in proto_files(proto_root):
                build_data["force_include"][str(proto_root / rel)] = str(Path("proto") / rel)
            return
        if self.target_name != "wheel":
            return
        if version == "editable":
            # `pip install -e`: the package is imported from src/, so the
            # stubs go there (ignored by git, left out of the sdist).
            generate(proto_root, root / "src")
            init = root / "src" / "agentcomputer" / "v1" / "__init__.py"
            init.write_text(INIT_TEXT)
            build_data["dependencies"].extend(runtime_floors(root / "src" / "agentcomputer" / "v1"))
            return
        self._tmp = tempfile.mkdtemp(prefix="agentcomputer-stubs-")
        out = Path(self._tmp)
        generate(proto_root, out)
        for rel in proto_files(proto_root):
            # The .proto next to its stubs, for readers of the wheel.
            shutil.copyfile(proto_root / rel, out / rel)
        for package in {p.parent for p in out.rglob("*.py")}:
            init = package / "__init__.py"
            if not init.exists():
                init.write_text(INIT_TEXT)
        for path in sorted(out.rglob("*")):
            rel = path.relative_to(out)
            # The top package (agentcomputer/__init__.py) is the library's own.
            if path.is_file() and rel != Path("agentcomputer/__init__.py"):
                build_data["force_include"][str(path)] = str(rel)
        build_data["dependencies"].extend(runtime_floors(out))

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        tmp = getattr(self, "_tmp", None)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
