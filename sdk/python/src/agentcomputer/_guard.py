"""Checks of what the agent sends, shared by the sync and asyncio clients.

The client does not trust the server: every promise the API makes
(proto/agentcomputer/v1/agentcomputer.proto) that the client relies on is
checked as the answer arrives, and a broken one raises
:class:`~agentcomputer.errors.ProtocolError` (output past a run's cap:
:class:`~agentcomputer.errors.OutputLimitError`) before anything more is
read or gathered. The limits here are the API's own; the deadlines of
streams are the clients' (``Client(idle_timeout=..., exec_grace=...)``).
"""

from __future__ import annotations

import json
from typing import Any, Optional, Union
from urllib.parse import parse_qs, urlsplit

from .errors import OutputLimitError, ProtocolError
from .models import ExecEvent, ExecExit, ExecResult, ExecStderr, ExecStdout
from .v1 import agentcomputer_pb2 as pb

MiB = 1024 * 1024

#: The agent's cap on a run's stdout plus stderr when the request asks for
#: none (``max_output_bytes`` 0): 16 MiB.
DEFAULT_MAX_OUTPUT_BYTES = 16 * MiB
#: Bytes :meth:`Computer.exec` accepts past a run's cap before it calls the
#: agent broken (64 KiB): room for the notice the agent adds when it cuts
#: the output (``shell: output exceeded ...`` on stderr).
OUTPUT_ALLOWANCE_BYTES = 64 * 1024
#: The longest run timeout any computer may have, in seconds (the agent's
#: maximum, 1 hour): the deadline of a run that names no timeout, since a
#: computer's own default (``spec.limits.timeoutSeconds``) may be anything
#: up to it.
MAX_EXEC_TIMEOUT = 3600.0
#: Default of ``Client(exec_grace=...)``: seconds an exec stream may last
#: past its run's timeout (the run's start, a container's teardown).
DEFAULT_EXEC_GRACE = 30.0
#: Default of ``Client(idle_timeout=...)``: seconds a read, backup or grep
#: stream may wait for the agent's next message.
DEFAULT_IDLE_TIMEOUT = 120.0
#: Seconds by which the client's clock and gRPC's may differ when telling
#: the client's own exec deadline from an agent's DEADLINE_EXCEEDED.
CLOCK_SLACK = 0.05
#: Most bytes in one ReadChunk or BackupChunk (the API's 1 MiB).
MAX_CHUNK_BYTES = MiB
#: Longest ``ExecExit.result_json``: the agent's message limit (4 MiB) less
#: 64 KiB, past which the agent fails the run instead.
MAX_RESULT_JSON_BYTES = 4 * MiB - 64 * 1024
#: The API's defaults and maxima of counts asked for with 0.
GREP_DEFAULT_MAX = 1000
GLOB_DEFAULT_MAX = 10_000
PAGE_DEFAULT = 1000
PAGE_MAX = 10_000
#: Longest GrepMatch.line, in characters (the API cuts at 4096 bytes).
GREP_LINE_MAX = 4096
#: Longest share URL accepted, in characters.
MAX_URL_CHARS = 64 * 1024


def shown(value: Union[str, bytes], most: int = 80) -> str:
    """The first ``most`` characters (or bytes) of ``value``, quoted, with
    the full length when it was cut: for error messages."""
    if len(value) <= most:
        return repr(value)
    return f"{value[:most]!r}... ({len(value)} in all)"


def output_limit(max_output_bytes: int) -> int:
    """Most stdout plus stderr bytes a run asked for ``max_output_bytes``
    (0: the default of 16 MiB) may send: its cap plus
    :data:`OUTPUT_ALLOWANCE_BYTES`."""
    return (max_output_bytes or DEFAULT_MAX_OUTPUT_BYTES) + OUTPUT_ALLOWANCE_BYTES


def exec_deadline(timeout: Optional[float], grace: Optional[float]) -> Optional[float]:
    """Seconds an exec stream may last: the run's timeout (``None``: the
    longest any computer may have, 1 hour, since the computer's own default
    is not known here) plus ``grace``; ``None`` (no deadline) when
    ``grace`` is ``None``."""
    if grace is None:
        return None
    return (timeout if timeout is not None else MAX_EXEC_TIMEOUT) + grace


def _seconds(s: float) -> str:
    return f"{s:g} s"


def exec_deadline_message(timeout: Optional[float], grace: float) -> str:
    """The message of the DeadlineExceededError of an exec stream."""
    run = _seconds(timeout) if timeout is not None else f"the longest allowed, {_seconds(MAX_EXEC_TIMEOUT)}"
    return (
        f"the agent did not end the exec stream within the run's timeout ({run}) plus the grace"
        f" ({_seconds(grace)}, Client(exec_grace=...)); the call was cancelled"
    )


def idle_message(what: str, idle: float) -> str:
    """The message of the DeadlineExceededError of an idle stream;
    ``what`` names it (``"Read stream of 'a.txt'"``)."""
    return (
        f"the agent sent nothing on the {what} for {_seconds(idle)}"
        " (Client(idle_timeout=...)); the call was cancelled"
    )


# ------------------------------------------------------------------ exec


def parse_result_json(text: str) -> Any:
    """``ExecExit.result_json`` as a Python value (``None`` when empty).
    Raises ProtocolError for text that is not JSON as ``JSON.stringify``
    writes it (``NaN`` and ``Infinity`` included) or nests too deep to
    parse, showing its first bytes."""
    if not text:
        return None

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        return json.loads(text, parse_constant=no_constant)
    except (ValueError, RecursionError) as e:
        raise ProtocolError(f"the agent sent a result that is not JSON ({e}): {shown(text)}") from None


def check_exit(m: pb.ExecExit) -> ExecExit:
    """An ExecExit, its ``result_json`` at most :data:`MAX_RESULT_JSON_BYTES`."""
    if len(m.result_json) > MAX_RESULT_JSON_BYTES:
        raise ProtocolError(
            f"the agent sent a result_json of {len(m.result_json)} characters, more than the API's"
            f" {MAX_RESULT_JSON_BYTES} bytes: {shown(m.result_json)}"
        )
    return ExecExit.from_proto(m)


class ExecSequence:
    """The order of an exec stream's events: output, then exactly one exit,
    then the end. :meth:`event` converts each message; :meth:`end` checks
    the exit came."""

    def __init__(self) -> None:
        self.exit: Optional[ExecExit] = None

    def event(self, m: pb.ExecEvent) -> ExecEvent:
        """The event of message ``m``. Raises ProtocolError for an empty
        event or any event after the exit."""
        if self.exit is not None:
            raise ProtocolError(f"the agent sent an exec event after the exit event: {shown(str(m))}")
        which = m.WhichOneof("event")
        if which == "stdout":
            return ExecStdout(m.stdout)
        if which == "stderr":
            return ExecStderr(m.stderr)
        if which == "exit":
            self.exit = check_exit(m.exit)
            return self.exit
        raise ProtocolError("the agent sent an empty exec event (no stdout, stderr or exit)")

    def end(self) -> ExecExit:
        """The exit event, at the stream's end. Raises ProtocolError when
        the stream ended without one."""
        if self.exit is None:
            raise ProtocolError("the exec stream ended without an exit event")
        return self.exit


class ExecGather:
    """Gathers a run's output for :meth:`Computer.exec`, at most ``limit``
    bytes of stdout plus stderr (see :func:`output_limit`)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.stdout = bytearray()
        self.stderr = bytearray()

    def add(self, event: ExecEvent) -> None:
        """Keeps an output event. Raises OutputLimitError past the limit
        (the event is not kept)."""
        if isinstance(event, (ExecStdout, ExecStderr)):
            received = len(self.stdout) + len(self.stderr) + len(event.data)
            if received > self.limit:
                raise OutputLimitError(
                    f"the agent sent {received} bytes of output, more than the run's cap of"
                    f" {self.limit - OUTPUT_ALLOWANCE_BYTES} bytes (max_output_bytes; 0 is the agent's"
                    f" default, 16 MiB) plus an allowance of {OUTPUT_ALLOWANCE_BYTES}; the run was cancelled",
                    limit=self.limit,
                    received=received,
                )
            (self.stdout if isinstance(event, ExecStdout) else self.stderr).extend(event.data)

    def result(self, exit: ExecExit) -> ExecResult:
        """The gathered output and ``exit`` as an ExecResult."""
        return ExecResult(
            stdout_bytes=bytes(self.stdout),
            stderr_bytes=bytes(self.stderr),
            exit_code=exit.code,
            error=exit.error,
            result_json=exit.result_json,
            duration_ms=exit.duration_ms,
            runtime=exit.runtime,
            runtime_reason=exit.runtime_reason,
        )


# ------------------------------------------------------------------ chunks


class ReadSequence:
    """The chunks of one Read: each at most 1 MiB and not empty, the first at
    the asked ``offset``, each next one where the previous ended, and not
    past ``offset + length`` (``length`` 0: to the end of the file)."""

    def __init__(self, path: str, offset: int, length: int) -> None:
        self.path = path
        self.next = offset
        self.end = offset + length if length else None
        self.length = length

    def chunk(self, offset: int, data: bytes) -> bytes:
        """``data`` once checked. Raises ProtocolError."""
        what = f"read of {self.path!r}"
        if not data:
            raise ProtocolError(f"the agent sent an empty chunk in the {what} at offset {offset}")
        if len(data) > MAX_CHUNK_BYTES:
            raise ProtocolError(
                f"the agent sent a chunk of {len(data)} bytes in the {what}, more than the API's {MAX_CHUNK_BYTES}"
            )
        if offset != self.next:
            raise ProtocolError(f"the agent sent a chunk of the {what} at offset {offset}, expected {self.next}")
        self.next += len(data)
        if self.end is not None and self.next > self.end:
            raise ProtocolError(
                f"the agent sent more than the {self.length} bytes asked in the {what} (up to offset {self.next})"
            )
        return data


class BackupSequence:
    """The chunks of one Backup: offsets continuous from 0, every chunk
    carrying the same ``total_bytes``, never past it, and the stream ending
    exactly at it."""

    def __init__(self, computer: str) -> None:
        self.what = f"backup of computer {computer!r}"
        self.next = 0
        self.total: Optional[int] = None

    def chunk(self, m: pb.BackupChunk) -> bytes:
        """The chunk's data once checked. Raises ProtocolError."""
        data = bytes(m.data)
        if not data or len(data) > MAX_CHUNK_BYTES:
            raise ProtocolError(
                f"the agent sent a chunk of {len(data)} bytes in the {self.what} (1 to {MAX_CHUNK_BYTES})"
            )
        if self.total is None:
            self.total = m.total_bytes
        elif m.total_bytes != self.total:
            raise ProtocolError(
                f"the {self.what}'s total changed from {self.total} to {m.total_bytes} bytes mid-stream"
            )
        if m.offset != self.next:
            raise ProtocolError(f"the agent sent a chunk of the {self.what} at offset {m.offset}, expected {self.next}")
        self.next += len(data)
        if self.next > self.total:
            raise ProtocolError(f"the {self.what} went past its total of {self.total} bytes (to {self.next})")
        return data

    def end(self) -> None:
        """At the stream's end. Raises ProtocolError for a copy short of its
        total (an empty database still has a header, so no chunk is short too)."""
        if self.total is None or self.next != self.total:
            raise ProtocolError(f"the {self.what} ended at {self.next} of {self.total or 0} bytes")


# ------------------------------------------------------------------ names and paths


def relative_path(path: str, what: str) -> str:
    """``path``, a path relative to ``/workspace`` as the agent sends it.
    Raises ProtocolError for an absolute path, a ``..`` component or a NUL:
    a path the caller might join to a local directory must stay in it."""
    if path.startswith("/") or "\0" in path or ".." in path.split("/"):
        raise ProtocolError(f"the agent sent a {what} path out of /workspace: {shown(path)}")
    return path


def entry_name(m: pb.DirEntry) -> None:
    """Checks a directory entry's name: not empty, ``.`` or ``..``, without
    ``/`` or NUL (in ``name`` and ``name_bytes``). Raises ProtocolError."""
    for name in (m.name, m.name_bytes.decode("utf-8", "replace") if m.name_bytes else m.name):
        if name in ("", ".", "..") or "/" in name or "\0" in name:
            raise ProtocolError(f"the agent sent a directory entry that is not a name: {shown(name)}")


def count(n: int, asked: int, default: int, what: str) -> None:
    """Raises ProtocolError when ``n`` items passed the ``asked`` number
    (0: the API's ``default``)."""
    most = asked or default
    if n > most:
        raise ProtocolError(f"the agent sent {n} {what}, more than the {most} asked for")


def page_size(asked: int) -> int:
    """Most entries one ReadDir page may hold for ``page_size`` ``asked``."""
    return min(asked, PAGE_MAX) if asked else PAGE_DEFAULT


def grep_match(m: pb.GrepMatch) -> None:
    """Checks one grep match: a relative path, a line of at most 4096
    characters. Raises ProtocolError."""
    relative_path(m.path, "grep match")
    if len(m.line) > GREP_LINE_MAX:
        raise ProtocolError(f"the agent sent a grep line of {len(m.line)} characters, more than {GREP_LINE_MAX}")


def share_response(m: pb.ShareResponse) -> None:
    """Checks a share link: an ``http(s)`` URL with a host, whose
    ``expires`` parameter is the ``expires_unix_seconds`` answered, and a
    relative path. Raises ProtocolError."""
    url = m.url
    if len(url) > MAX_URL_CHARS:
        raise ProtocolError(f"the agent sent a share URL of {len(url)} characters: {shown(url)}")
    try:
        parts = urlsplit(url)
        expires = parse_qs(parts.query).get("expires", [])
    except ValueError:
        parts, expires = None, []
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ProtocolError(f"the agent sent a share link that is not an http(s) URL: {shown(url)}")
    if expires != [str(m.expires_unix_seconds)]:
        raise ProtocolError(
            f"the agent sent a share link whose expires parameter {expires} is not its"
            f" expires_unix_seconds {m.expires_unix_seconds}: {shown(url)}"
        )
    relative_path(m.path, "share")
