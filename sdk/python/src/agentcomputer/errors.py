"""Exceptions raised by the client.

Every failure the node agent reports is a gRPC status; the library raises it
as an :class:`AgentComputerError` subclass:

* a filesystem failure carries the POSIX errno name (``ENOENT``, ``EEXIST``
  ...; the agent puts it in the ``errno`` response metadata and at the start
  of the message). It is raised as a :class:`RemoteOSError`, which is also an
  :class:`OSError` whose ``errno`` is this machine's number for that name and
  whose ``filename`` is the path the call named, and, where Python has one,
  the matching built-in subclass: ``ENOENT`` is a :class:`FileNotFoundError`,
  ``EEXIST`` a :class:`FileExistsError`, ``ENOTDIR`` a
  :class:`NotADirectoryError`, ``EISDIR`` an :class:`IsADirectoryError`,
  ``EACCES``/``EPERM`` a :class:`PermissionError`, ``ETIMEDOUT`` a
  :class:`TimeoutError`. So ``except FileNotFoundError`` works as with local
  files;
* an unknown computer is :class:`ComputerNotFoundError`, a name taken by
  another computer :class:`ComputerExistsError`;
* a missing or wrong token is :class:`AuthenticationError` (gRPC
  UNAUTHENTICATED) and another computer's token
  :class:`PermissionDeniedError` (PERMISSION_DENIED without an errno);
* an agent that cannot be reached is :class:`AgentUnavailableError` (also a
  :class:`ConnectionError`);
* a call or stream that outlasted its deadline is
  :class:`DeadlineExceededError` (also a :class:`TimeoutError`);
* anything else is a plain :class:`AgentComputerError` with its gRPC code.

The client does not trust what the agent sends: an answer that breaks the
API's contract (a chunk at the wrong offset, more bytes than asked, a name
that is not a name, JSON that does not parse) raises a
:class:`ProtocolError`, and output past the run's cap an
:class:`OutputLimitError`; the call is dropped then.

The mapping of errno names to gRPC codes is the API's (proto/agentcomputer/
v1/agentcomputer.proto, header comment).
"""

from __future__ import annotations

import errno as _errno
import re
from typing import Optional

__all__ = [
    "AgentComputerError",
    "AgentUnavailableError",
    "AuthenticationError",
    "ComputerExistsError",
    "ComputerNotFoundError",
    "ConfigurationError",
    "DeadlineExceededError",
    "ExecError",
    "OutputLimitError",
    "PermissionDeniedError",
    "ProtocolError",
    "RemoteOSError",
    "from_status",
]

_ERRNO_PREFIX = re.compile(r"^(E[A-Z0-9]{1,15}): ")
#: What an errno name looks like (``ENOENT``); anything else in the
#: ``errno`` metadata is ignored.
_ERRNO_NAME = re.compile(r"^E[A-Z0-9]{1,15}$")


class AgentComputerError(Exception):
    """A call to the node agent failed.

    Attributes:
        code: the gRPC status code name (``"NOT_FOUND"``, ``"UNAVAILABLE"``
            ...), or ``None`` for a failure found before any call.
        errno_name: the POSIX errno name the agent reported (``"ENOENT"``),
            or ``None``.
        message: the agent's message (``"ENOENT: no such file or directory:
            x.txt"``).
    """

    code: Optional[str]
    errno_name: Optional[str]
    message: str

    def __init__(self, message: str, *, code: Optional[str] = None, errno_name: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.errno_name = errno_name

    def __str__(self) -> str:
        return self.message


class ConfigurationError(AgentComputerError):
    """The endpoint, token or CA certificate given (or found) is unusable."""


class AgentUnavailableError(AgentComputerError, ConnectionError):
    """The node agent cannot be reached (gRPC UNAVAILABLE)."""


class ComputerMovedError(AgentUnavailableError):
    """The computer was handed over to another node (a drain, ``kubectl
    computer move``, a failover; docs/moves.md); the call did not run.
    Reach the computer through its new node's agent (a new ``kubectl
    computer port-forward NAME``) and make the call again.

    Attributes:
        node: the node that serves the computer now.
    """

    def __init__(self, message: str, *, code: str, node: str) -> None:
        super().__init__(message, code=code)
        self.node = node


#: gRPC metadata key of the agent's answer for a computer handed over to
#: another node: that node's name.
MOVED_TO_METADATA_KEY = "agentcomputer-moved-to"


class AuthenticationError(AgentComputerError):
    """The agent refused the token, or none was sent (gRPC UNAUTHENTICATED)."""


class PermissionDeniedError(AgentComputerError):
    """The token is valid but not for this computer, or (for
    :meth:`Computer.publish`) the computer's egress policy does not allow
    the remote (PERMISSION_DENIED, no errno; the message says which)."""


class ComputerNotFoundError(AgentComputerError, LookupError):
    """No computer of that name exists on the agent."""


class ComputerExistsError(AgentComputerError):
    """CreateComputer of a name that is taken (creation is never idempotent)."""


class ExecError(AgentComputerError):
    """A run ended with a non-zero exit code or an error, when ``check=True``.

    Attributes:
        result: the :class:`agentcomputer.ExecResult` of the run.
    """

    def __init__(self, message: str, result: object) -> None:
        super().__init__(message)
        self.result = result


class DeadlineExceededError(AgentComputerError, TimeoutError):
    """A call or stream outlasted its deadline (gRPC DEADLINE_EXCEEDED):
    a single-answer call its ``Client(timeout=...)``, an exec stream its
    run's timeout plus ``Client(exec_grace=...)``, a read, backup or grep
    stream ``Client(idle_timeout=...)`` while waiting for the agent's next
    message, an upload (write) the same while waiting for the agent to take
    the next message or to answer. The call is cancelled. Also a
    :class:`TimeoutError`.
    """


class ProtocolError(AgentComputerError):
    """The agent's answer broke the API's contract: a read chunk that does
    not continue where the previous one ended, more bytes or entries than
    were asked for, an exec stream without its one exit event, a result
    that is not JSON, a path out of ``/workspace``, a share link that is not
    an ``http(s)`` URL... The message says what was wrong and shows the
    first bytes of the offending value; the call is dropped (a stream is
    cancelled), so nothing more is read from it. ``code`` is ``None``.
    """


class OutputLimitError(ProtocolError):
    """:meth:`Computer.exec` received more output than the run may produce:
    stdout plus stderr past the run's cap (its ``max_output_bytes``, else
    the agent's default of 16 MiB) plus a 64 KiB allowance. A compliant
    agent cuts the output at the cap and adds at most a one-line notice, so
    more is a broken or hostile agent;
    the stream is dropped rather than gathered.

    Attributes:
        limit: the most bytes the client accepted (cap plus allowance).
        received: the bytes received when the limit was passed.
    """

    def __init__(self, message: str, *, limit: int, received: int) -> None:
        super().__init__(message)
        self.limit = limit
        self.received = received


class RemoteOSError(AgentComputerError, OSError):
    """A filesystem call failed with a POSIX errno on the computer.

    Also an :class:`OSError`: ``errno`` is the local number of
    ``errno_name`` (``None`` if this platform has no such errno),
    ``strerror`` the agent's message and ``filename`` the path of the call.
    """

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        errno_name: Optional[str] = None,
        filename: Optional[str] = None,
    ) -> None:
        found = getattr(_errno, errno_name, None) if errno_name and _ERRNO_NAME.match(errno_name) else None
        number = found if isinstance(found, int) else None
        OSError.__init__(self, number, message, filename)
        self.message = message
        self.code = code
        self.errno_name = errno_name

    def __str__(self) -> str:
        return self.message


class RemoteFileNotFoundError(RemoteOSError, FileNotFoundError):
    """ENOENT: the path does not exist."""


class RemoteFileExistsError(RemoteOSError, FileExistsError):
    """EEXIST: the path exists already."""


class RemoteNotADirectoryError(RemoteOSError, NotADirectoryError):
    """ENOTDIR: a component of the path is not a directory."""


class RemoteIsADirectoryError(RemoteOSError, IsADirectoryError):
    """EISDIR: the path is a directory where a file was needed."""


class RemotePermissionError(RemoteOSError, PermissionError):
    """EACCES or EPERM: the operation is not permitted."""


class RemoteTimeoutError(RemoteOSError, TimeoutError):
    """ETIMEDOUT."""


_OS_ERRORS: dict[str, type[RemoteOSError]] = {
    "ENOENT": RemoteFileNotFoundError,
    "EEXIST": RemoteFileExistsError,
    "ENOTDIR": RemoteNotADirectoryError,
    "EISDIR": RemoteIsADirectoryError,
    "EACCES": RemotePermissionError,
    "EPERM": RemotePermissionError,
    "ETIMEDOUT": RemoteTimeoutError,
}

__all__ += [cls.__name__ for cls in set(_OS_ERRORS.values())]


def errno_name_of(message: str, metadata: Optional[dict[str, str]] = None) -> Optional[str]:
    """The errno name of a status: its ``errno`` metadata, else the message
    prefix; a value that is no errno name (``E`` and up to 15 capitals or
    digits) is ignored."""
    if metadata:
        name = metadata.get("errno")
        if name and _ERRNO_NAME.match(name):
            return name
    m = _ERRNO_PREFIX.match(message)
    return m.group(1) if m else None


def from_status(
    code: str,
    message: str,
    metadata: Optional[dict[str, str]] = None,
    *,
    path: Optional[str] = None,
) -> AgentComputerError:
    """The exception for a gRPC status.

    Args:
        code: the status code's name (``"NOT_FOUND"``).
        message: the status message.
        metadata: the call's trailing metadata (``errno`` is read from it).
        path: the path the call named, set as ``filename`` of an OSError.
    """
    moved_to = (metadata or {}).get(MOVED_TO_METADATA_KEY)
    if code == "UNAVAILABLE" and moved_to:
        return ComputerMovedError(message, code=code, node=moved_to)
    name = errno_name_of(message, metadata)
    if name is not None:
        cls = _OS_ERRORS.get(name, RemoteOSError)
        return cls(message, code=code, errno_name=name, filename=path)
    if code == "NOT_FOUND" and message.startswith("computer "):
        return ComputerNotFoundError(message, code=code)
    if code == "ALREADY_EXISTS" and message.startswith("computer "):
        return ComputerExistsError(message, code=code)
    if code == "UNAUTHENTICATED":
        return AuthenticationError(message, code=code)
    if code == "PERMISSION_DENIED":
        return PermissionDeniedError(message, code=code)
    if code == "UNAVAILABLE":
        return AgentUnavailableError(message, code=code)
    if code == "DEADLINE_EXCEEDED":
        return DeadlineExceededError(message, code=code)
    return AgentComputerError(message, code=code)
