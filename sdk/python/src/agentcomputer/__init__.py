"""Python client for Agent Computer node agents.

A computer is a persistent filesystem with runtimes (shell, JavaScript, a
container) that run on it. This library speaks the node agent's gRPC API
(stubs generated from the repository's ``proto/`` when the package is
built)::

    from agentcomputer import Client

    computer = Client().create_computer("demo")
    computer.write("notes.txt", "hello\\n")
    print(computer.exec("wc -c notes.txt").stdout)

:class:`Client` finds a local agent (``node-agent local``) and its token on
its own, as the ``kubectl computer`` CLI does; see
:mod:`agentcomputer.connection`. :mod:`agentcomputer.aio` has the same API
for asyncio, :mod:`agentcomputer.errors` the exceptions.
"""

from ._guard import DEFAULT_MAX_OUTPUT_BYTES, OUTPUT_ALLOWANCE_BYTES
from .aio import AsyncClient, AsyncComputer, AsyncExecStream
from .client import Client, Computer, ExecStream
from .connection import PortForward, Target, default_data_dir, parse_port_forward, resolve_target
from .errors import (
    AgentComputerError,
    AgentUnavailableError,
    AuthenticationError,
    ComputerExistsError,
    ComputerMovedError,
    ComputerNotFoundError,
    ConfigurationError,
    DeadlineExceededError,
    ExecError,
    OutputLimitError,
    PermissionDeniedError,
    ProtocolError,
    RemoteOSError,
)
from .models import (
    ComputerInfo,
    DirEntry,
    Egress,
    EgressCidr,
    ExecEvent,
    ExecExit,
    ExecResult,
    ExecStderr,
    ExecStdout,
    FileInfo,
    GlobResult,
    GrepMatch,
    Published,
    ShareLink,
    Statfs,
    BackupCheck,
    Restored,
    Snapshot,
)

__all__ = [
    "DEFAULT_MAX_OUTPUT_BYTES",
    "OUTPUT_ALLOWANCE_BYTES",
    "AgentComputerError",
    "AgentUnavailableError",
    "AsyncClient",
    "AsyncComputer",
    "AsyncExecStream",
    "AuthenticationError",
    "Client",
    "Computer",
    "ComputerExistsError",
    "ComputerInfo",
    "ComputerMovedError",
    "ComputerNotFoundError",
    "ConfigurationError",
    "DeadlineExceededError",
    "DirEntry",
    "Egress",
    "EgressCidr",
    "ExecError",
    "ExecEvent",
    "ExecExit",
    "ExecResult",
    "ExecStderr",
    "ExecStdout",
    "ExecStream",
    "FileInfo",
    "GlobResult",
    "GrepMatch",
    "OutputLimitError",
    "PermissionDeniedError",
    "PortForward",
    "ProtocolError",
    "Published",
    "RemoteOSError",
    "ShareLink",
    "Statfs",
    "BackupCheck",
    "Restored",
    "Snapshot",
    "Target",
    "default_data_dir",
    "parse_port_forward",
    "resolve_target",
]
