"""What the sync and asyncio clients share: channel settings, request
building, data chunking and error translation."""

from __future__ import annotations

import io
import json
import os
from typing import Any, Iterable, Iterator, Literal, Mapping, Optional, Union

import grpc

from . import _guard as g
from .connection import Target
from .errors import AgentComputerError, AgentUnavailableError, ProtocolError, from_status
from .models import GlobResult, ShareLink
from .v1 import agentcomputer_pb2 as pb
from .v1 import agentcomputer_pb2_grpc as pb_grpc

#: Bytes per data message of a Write stream (the API's preferred 1 MiB).
CHUNK_BYTES = 1024 * 1024
#: The agent's message limit (4 MiB); answers are received with some room.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024

Runtime = Literal["shell", "javascript", "container", "auto"]
WriteMode = Literal["truncate", "create", "append", "exclusive"]
#: What :meth:`Computer.write` accepts: bytes, text (UTF-8 unless an
#: encoding is given), a binary file object, or an iterable of byte chunks.
Data = Union[bytes, bytearray, memoryview, str, io.BufferedIOBase, io.RawIOBase, Iterable[bytes]]

_RUNTIMES: dict[str, pb.Runtime] = {
    "shell": pb.RUNTIME_SHELL,
    "javascript": pb.RUNTIME_JAVASCRIPT,
    "js": pb.RUNTIME_JAVASCRIPT,
    "container": pb.RUNTIME_CONTAINER,
    "auto": pb.RUNTIME_AUTO,
}
_WRITE_MODES: dict[str, pb.WriteMode] = {
    "truncate": pb.WRITE_MODE_TRUNCATE,
    "create": pb.WRITE_MODE_CREATE,
    "append": pb.WRITE_MODE_APPEND,
    "exclusive": pb.WRITE_MODE_EXCLUSIVE,
}


def new_stub(channel: Any) -> Any:
    """The generated service stub (untyped code) over a sync or aio channel."""
    cls: Any = pb_grpc.AgentComputerStub
    return cls(channel)


def check_deadlines(idle_timeout: Optional[float], exec_grace: Optional[float]) -> None:
    """Checks the stream deadlines a client was given: each a positive
    number of seconds or ``None``. Raises ``ValueError``."""
    for name, value in (("idle_timeout", idle_timeout), ("exec_grace", exec_grace)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name} must be a positive number of seconds or None, got {value!r}")


def channel_options(target: Target) -> list[tuple[str, Any]]:
    """gRPC channel arguments for ``target``."""
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES + 64 * 1024),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ]
    if target.tls_server_name:
        options.append(("grpc.ssl_target_name_override", target.tls_server_name))
        options.append(("grpc.default_authority", target.tls_server_name))
    return options


def credentials(target: Target) -> grpc.ChannelCredentials:
    """TLS credentials trusting ``target.ca_cert`` (or gRPC's default roots)."""
    return grpc.ssl_channel_credentials(root_certificates=target.ca_cert)


def call_metadata(target: Target) -> tuple[tuple[str, str], ...]:
    """``authorization: Bearer TOKEN`` (RFC 6750), or nothing without a token."""
    if target.token:
        return (("authorization", f"Bearer {target.token}"),)
    return ()


def translate(err: grpc.RpcError, target: Target, path: Optional[str] = None) -> AgentComputerError:
    """The library's exception for a failed call."""
    call: Any = err  # grpc.Call and grpc.aio.AioRpcError both have these
    code_obj = call.code() if hasattr(call, "code") else None
    code = code_obj.name if code_obj is not None else "UNKNOWN"
    details = (call.details() if hasattr(call, "details") else None) or str(err)
    md: dict[str, str] = {}
    try:
        for k, v in call.trailing_metadata() or ():
            if isinstance(v, str):
                md[k] = v
    except Exception:  # a failure before any response has no metadata
        pass
    if code == "UNAVAILABLE" and "errno" not in md:
        hint = " (start one with: node-agent local)" if "127.0.0.1" in target.address or "localhost" in target.address else ""
        return AgentUnavailableError(
            f"cannot connect to node agent at {target.endpoint}: {details}{hint}",
            code=code,
        )
    if code == "UNAUTHENTICATED" and not target.token:
        details += (
            " (no token was sent: pass token=..., set AGENTCOMPUTER_TOKEN or"
            " AGENTCOMPUTER_TOKEN_FILE, or run on the agent's machine)"
        )
    return from_status(code, details, md, path=path)


def runtime_value(runtime: str) -> pb.Runtime:
    try:
        return _RUNTIMES[runtime]
    except KeyError:
        raise ValueError(f"unknown runtime {runtime!r}: expected shell, javascript, container or auto") from None


#: Standard input of an exec: bytes or text (UTF-8), a binary file object
#: (read piece by piece as the run takes it), or an iterable of bytes.
Stdin = Union[bytes, bytearray, memoryview, str, io.BufferedIOBase, io.RawIOBase, Iterable[bytes], None]


def exec_call(
    computer: str,
    script: str,
    *,
    runtime: str,
    cwd: str,
    env: Optional[Mapping[str, str]],
    stdin: Stdin,
    timeout: Optional[float],
    max_output_bytes: int,
    input: Any,
    memory_limit_bytes: int,
) -> "tuple[pb.ExecRequest, Optional[Iterator[bytes]]]":
    """The ExecRequest of a run and, when its stdin goes up as a stream
    (ExecStream), the stdin's pieces; ``None`` when the request carries its
    stdin itself (Exec). Bytes and text that fit in one message with the
    rest of the request go whole; larger ones, file objects and iterables
    are streamed in pieces of :data:`CHUNK_BYTES`, read only as the run
    takes them. Raises ``ValueError`` as :func:`exec_request` does; the
    ``E2BIG`` limit then applies to the request without its stdin."""
    whole = stdin is None or isinstance(stdin, (bytes, bytearray, memoryview, str))
    req = exec_request(
        computer,
        script,
        runtime=runtime,
        cwd=cwd,
        env=env,
        stdin=None,
        timeout=timeout,
        max_output_bytes=max_output_bytes,
        input=input,
        memory_limit_bytes=memory_limit_bytes,
    )
    if whole:
        data = stdin.encode() if isinstance(stdin, str) else bytes(stdin or b"")
        if req.ByteSize() + len(data) + 16 <= MAX_MESSAGE_BYTES:
            req.stdin = data
            return req, None
        return req, chunks_of(data)
    return req, chunks_of(stdin)  # type: ignore[arg-type]


def exec_stream_messages(req: pb.ExecRequest, stdin: Iterable[bytes]) -> Iterator[pb.ExecStreamRequest]:
    """The messages of an ExecStream call: the request, the stdin's pieces,
    then the end of input."""
    yield pb.ExecStreamRequest(start=req)
    for piece in stdin:
        if piece:
            yield pb.ExecStreamRequest(stdin=piece)
    yield pb.ExecStreamRequest(stdin_end=pb.StdinEnd())


def exec_request(
    computer: str,
    script: str,
    *,
    runtime: str,
    cwd: str,
    env: Optional[Mapping[str, str]],
    stdin: Union[bytes, str, None],
    timeout: Optional[float],
    max_output_bytes: int,
    input: Any,
    memory_limit_bytes: int,
) -> pb.ExecRequest:
    """An ExecRequest; validates what can be checked here. Raises
    ``ValueError`` for a bad argument, and (its message starting with
    ``E2BIG``) for a request encoded larger than :data:`MAX_MESSAGE_BYTES`,
    which the agent could not take.

    ``timeout`` is in seconds (``None``: the agent's 60 s default; at most
    3600); ``input`` is a JSON-serialisable value for JavaScript (``None``
    sends nothing, which the module sees as ``null``).
    """
    rt = runtime_value(runtime)
    timeout_ms = 0
    if timeout is not None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        timeout_ms = max(1, int(round(timeout * 1000)))
    input_json = ""
    if input is not None:
        if rt != pb.RUNTIME_JAVASCRIPT:
            raise ValueError("input is for the javascript runtime only (use stdin for others)")
        input_json = json.dumps(input)
    if isinstance(stdin, str):
        stdin = stdin.encode()
    req = pb.ExecRequest(
        computer=computer,
        runtime=rt,
        script=script,
        cwd=cwd,
        env=dict(env or {}),
        stdin=bytes(stdin or b""),
        timeout_ms=timeout_ms,
        max_output_bytes=max_output_bytes,
        input_json=input_json,
        memory_limit_bytes=memory_limit_bytes,
    )
    size = req.ByteSize()
    if size > MAX_MESSAGE_BYTES:
        raise ValueError(
            f"E2BIG: the exec request is {size} bytes (script, stdin, env and input together),"
            f" more than the node agent's message limit of {MAX_MESSAGE_BYTES} bytes (4 MiB);"
            " write large data to a file first (Computer.write) and read it from there"
            " (`prog < FILE`)"
        )
    return req


#: Longest lifetime of a share link, in seconds (7 days; the agent's limit).
SHARE_MAX_SECONDS = 7 * 24 * 3600


def share_request(computer: str, path: str, expires_in: Optional[float]) -> pb.ShareRequest:
    """A ShareRequest for a link lasting ``expires_in`` seconds (``None``:
    the agent's default, one hour). Raises ``ValueError`` outside 1 to
    :data:`SHARE_MAX_SECONDS` (the API reads 0 as "unset", so it cannot be
    sent as a lifetime)."""
    seconds = 0
    if expires_in is not None:
        if isinstance(expires_in, bool) or not (1 <= expires_in <= SHARE_MAX_SECONDS):
            raise ValueError(
                f"expires_in must be from 1 to {SHARE_MAX_SECONDS} seconds (7 days),"
                f" or None for the default of one hour; got {expires_in!r}"
            )
        seconds = int(expires_in)
    return pb.ShareRequest(computer=computer, path=path, expires_in_seconds=seconds)


def write_header(computer: str, path: str, mode: str, perm: int, offset: int) -> pb.WriteRequest:
    try:
        m = _WRITE_MODES[mode]
    except KeyError:
        raise ValueError(f"unknown write mode {mode!r}: expected one of {sorted(_WRITE_MODES)}") from None
    if offset and m != pb.WRITE_MODE_CREATE:
        raise ValueError("offset is for mode='create' only")
    return pb.WriteRequest(header=pb.WriteHeader(computer=computer, path=path, mode=m, perm=perm, offset=offset))


def chunks_of(data: Data, encoding: str = "utf-8") -> Iterator[bytes]:
    """Splits ``data`` into pieces of at most :data:`CHUNK_BYTES`; reads a
    file object piece by piece, never whole."""
    if isinstance(data, str):
        data = data.encode(encoding)
    if isinstance(data, (bytes, bytearray, memoryview)):
        view = memoryview(data).cast("B")
        for i in range(0, len(view), CHUNK_BYTES):
            yield bytes(view[i : i + CHUNK_BYTES])
        return
    read = getattr(data, "read", None)
    if read is not None:
        while True:
            piece = read(CHUNK_BYTES)
            if not piece:
                return
            if isinstance(piece, str):
                raise TypeError("write() needs a binary file object (open it with 'rb')")
            yield bytes(piece)
    for piece in data:
        if isinstance(piece, str):
            piece = piece.encode(encoding)
        if not isinstance(piece, (bytes, bytearray, memoryview)):
            raise TypeError(f"write() data must be bytes, str, a binary file or an iterable of bytes, got {type(piece).__name__}")
        view = memoryview(piece).cast("B")
        for i in range(0, len(view), CHUNK_BYTES):
            yield bytes(view[i : i + CHUNK_BYTES])


class WriteStream:
    """The messages of one Write call: the header, the data, and an end
    message carrying the byte count (only a stream that carries it is
    published by the agent).

    A failure of the data source (a read error, data of a wrong type) ends
    the stream without the end message, so the agent drops the upload, and
    is kept in :attr:`error` for the caller to raise (gRPC would otherwise
    only report a cancelled call).
    """

    def __init__(self, header: pb.WriteRequest, pieces: Iterator[bytes]) -> None:
        self.header = header
        self.pieces = pieces
        self.total = 0
        self.error: Optional[BaseException] = None

    def __iter__(self) -> Iterator[pb.WriteRequest]:
        yield self.header
        try:
            for piece in self.pieces:
                if piece:
                    self.total += len(piece)
                    yield pb.WriteRequest(data=piece)
        except Exception as e:  # noqa: BLE001 - handed to the caller
            self.error = e
            return
        yield pb.WriteRequest(end=pb.WriteEnd(total_bytes=self.total))


def open_destination(dest: Union[str, "os.PathLike[str]", io.IOBase, Any]) -> tuple[Any, bool]:
    """A binary file object to write to, and whether the caller must close it."""
    if isinstance(dest, (str, os.PathLike)):
        return open(dest, "wb"), True
    if not hasattr(dest, "write"):
        raise TypeError("destination must be a path or a binary file object")
    return dest, False


def check_page(resp: pb.ReadDirResponse, page_size: int, token_sent: str, seen: set[str]) -> None:
    """Checks one ReadDir page: at most the entries asked (``page_size``, 0
    meaning 1000, at most 10000), names that are names, and a next page
    token other than every token of this listing so far (``seen``, which
    this adds to: a token sent twice would make the listing go round for
    ever). Raises ProtocolError."""
    most = g.page_size(page_size)
    if len(resp.entries) > most:
        raise ProtocolError(f"the agent sent a page of {len(resp.entries)} entries, more than the {most} asked")
    for e in resp.entries:
        g.entry_name(e)
    if token_sent and resp.next_page_token == token_sent:
        raise ProtocolError(
            f"the agent sent the same page token back ({g.shown(token_sent)}): the listing would never end"
        )
    if resp.next_page_token and resp.next_page_token in seen:
        raise ProtocolError(
            f"the agent sent a page token it had sent before ({g.shown(resp.next_page_token)}):"
            " the listing would go round for ever"
        )
    if token_sent:
        seen.add(token_sent)


def glob_result(resp: pb.GlobResponse, max_results: int) -> GlobResult:
    """The GlobResult of a Glob answer, checked: at most ``max_results``
    paths (0: 10000), each relative to ``/workspace``. Raises ProtocolError."""
    g.count(len(resp.paths), max_results, g.GLOB_DEFAULT_MAX, "paths")
    for p in resp.paths:
        g.relative_path(p, "glob")
    return GlobResult(resp.paths, truncated=resp.truncated)


def share_link(resp: pb.ShareResponse) -> ShareLink:
    """The ShareLink of a Share answer, checked (see
    :func:`agentcomputer._guard.share_response`)."""
    g.share_response(resp)
    return ShareLink.from_proto(resp)
