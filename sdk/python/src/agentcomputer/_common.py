"""What the sync and asyncio clients share: channel settings, request
building, data chunking and error translation."""

from __future__ import annotations

import io
import json
import os
import re
from typing import Any, Iterable, Iterator, Literal, Mapping, Optional, Tuple, Union

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


#: The longest the agent lets one publish take, pushing included (seconds).
PUBLISH_SECONDS = 600.0
#: How long past :data:`PUBLISH_SECONDS` the client waits for the answer.
PUBLISH_GRACE = 30.0
#: The user a bare token is sent as (GitHub's documented name for tokens;
#: servers that take a token as the password accept any user), as the CLI does.
TOKEN_USER = "x-access-token"

#: Credentials of a git remote: ``"USER:SECRET"``, a bare token, or a
#: ``(user, secret)`` tuple.
Credentials = Union[str, Tuple[str, str]]


def publish_deadline(timeout: Optional[float]) -> Optional[float]:
    """The deadline of a Publish call: the client's ``timeout``, but at
    least the agent's own limit plus a grace (``None`` stays ``None``)."""
    if timeout is None:
        return None
    return max(timeout, PUBLISH_SECONDS + PUBLISH_GRACE)


def parse_credentials(text: str, source: str) -> Tuple[str, str]:
    """``USER:SECRET`` split at the first colon, or a bare token sent as the
    password of :data:`TOKEN_USER`; a trailing newline is ignored. Raises
    ``ValueError`` naming ``source`` (never the text) for empty credentials."""
    text = text.rstrip("\r\n")
    if not text:
        raise ValueError(f"{source}: the credentials are empty")
    user, colon, secret = text.partition(":")
    if not colon:
        return TOKEN_USER, text
    return user, secret


def publish_credentials(credentials: Optional[Credentials], credentials_env: Optional[str]) -> Tuple[str, str]:
    """The (username, password) a Publish sends: from ``credentials``, or
    from the environment variable ``credentials_env`` of this process, or
    none (two empty strings). Raises ``ValueError`` for both given, a
    variable that is not set and empty credentials, ``TypeError`` for a
    value of another type; no message shows the secret."""
    if credentials is not None and credentials_env is not None:
        raise ValueError("publish takes credentials= or credentials_env=, not both")
    if credentials_env is not None:
        if not isinstance(credentials_env, str) or not credentials_env:
            raise TypeError("credentials_env must be the name of an environment variable")
        value = os.environ.get(credentials_env)
        if value is None:
            raise ValueError(f"credentials_env {credentials_env}: the variable is not set")
        return parse_credentials(value, f"credentials_env {credentials_env}")
    if credentials is None:
        return "", ""
    if isinstance(credentials, str):
        return parse_credentials(credentials, "credentials")
    if isinstance(credentials, tuple) and len(credentials) == 2 and all(isinstance(x, str) for x in credentials):
        user, secret = credentials
        if not user and not secret:
            raise ValueError("credentials: the user and the secret are both empty")
        return user, secret
    # The value may hold a secret: its type is named, never its content.
    raise TypeError(
        "credentials must be 'USER:SECRET', a bare token or a (user, secret) tuple of str,"
        f" not {type(credentials).__name__}"
    )


_AUTHORITY_END = re.compile(r"[/?#]")


def check_publish_remote(remote: str) -> None:
    """Refuses an ``http(s)://`` URL with credentials in it (``user:secret@``)
    before it leaves this process; the message shows the URL with them
    replaced by ``***``. The agent checks the rest (scheme, host). Raises
    ``ValueError``."""
    if not isinstance(remote, str):
        raise TypeError(f"remote must be a URL string, not {type(remote).__name__}")
    scheme, sep, rest = remote.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        return
    m = _AUTHORITY_END.search(rest)
    end = m.start() if m else len(rest)
    at = rest.rfind("@", 0, end)
    if at >= 0:
        shown = f"{scheme}://***{rest[at:]}"
        raise ValueError(
            f"remote {shown!r}: credentials do not belong in the URL; pass them with credentials="
            " or credentials_env= (they are used for this call only, never stored)"
        )


#: The computer's directory as files calls name it, and as Publish does.
WORKSPACE = "/workspace"


def publish_dir(path: str) -> str:
    """The API's form of a directory given relative to ``/workspace`` or
    absolute under it: Publish roots absolute paths at ``/workspace``, so
    ``"site"`` and ``"/workspace/site"`` are both ``"/site"`` (and an
    absolute path elsewhere, ``"/site"``, is sent as it is, as the CLI
    does)."""
    if not isinstance(path, str):
        raise TypeError(f"dir must be a str, not {type(path).__name__}")
    if path in ("", ".", "./", WORKSPACE, WORKSPACE + "/"):
        return "/"
    if path.startswith(WORKSPACE + "/"):
        return path[len(WORKSPACE) :]
    if path.startswith("/"):
        return path
    while path.startswith("./"):
        path = path[2:]
    return "/" + path


def publish_request(
    computer: str,
    dir: str,
    remote: str,
    branch: Optional[str],
    message: Optional[str],
    credentials: Optional[Credentials],
    credentials_env: Optional[str],
) -> pb.PublishRequest:
    """A PublishRequest, checked here as far as it can be (see
    :func:`publish_credentials`, :func:`check_publish_remote`)."""
    check_publish_remote(remote)
    username, password = publish_credentials(credentials, credentials_env)
    return pb.PublishRequest(
        computer=computer,
        dir=publish_dir(dir),
        remote=remote,
        branch=branch or "",
        message=message or "",
        username=username,
        password=password,
    )


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
