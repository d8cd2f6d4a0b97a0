"""The blocking client: :class:`Client` and its :class:`Computer` handles.

Every method is one or more calls of the node agent's gRPC API
(proto/agentcomputer/v1/agentcomputer.proto); a failure raises an
:class:`agentcomputer.errors.AgentComputerError` (see that module for the
mapping of errno names to Python exceptions). Paths are relative to
``/workspace`` or absolute under it, as in the API. For asyncio, see
:mod:`agentcomputer.aio`, which has the same methods as coroutines.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, BinaryIO, Generator, Iterable, Iterator, Mapping, Optional, Tuple, Union

import grpc

from . import _common as c
from . import _guard as g
from ._idle import Watch, messages, requests
from .connection import PathOrPem, PortForward, Target, parse_port_forward, resolve_target
from .errors import DeadlineExceededError, ExecError, OutputLimitError, ProtocolError
from .models import (
    ComputerInfo,
    DirEntry,
    Egress,
    ExecEvent,
    ExecExit,
    ExecResult,
    FileInfo,
    GlobResult,
    GrepMatch,
    Published,
    ShareLink,
    Snapshot,
    Restored,
    create_from_request,
    import_pieces,
    restore_request,
    Statfs,
    BackupCheck,
)
from .v1 import agentcomputer_pb2 as pb

__all__ = ["Client", "Computer", "ExecStream"]

PathLike = Union[str, "os.PathLike[str]"]


class Client:
    """A connection to one node agent.

    Args:
        endpoint: the agent's URL (``http://HOST:PORT``, ``https://HOST:PORT``
            or a bare ``HOST:PORT``); default ``AGENTCOMPUTER_ENDPOINT``, else
            the local agent ``http://127.0.0.1:7433``.
        token: the bearer token; default ``AGENTCOMPUTER_TOKEN``, the token
            file, or for a local endpoint the local agent's token file (see
            :mod:`agentcomputer.connection` for the whole rule, the CLI's).
        token_file: a file holding the token.
        ca_cert: for ``https://``: the CA certificate(s) to trust, as a PEM
            file path or PEM bytes.
        tls_server_name: the name in the agent's certificate, when it is not
            the endpoint's host.
        data_dir: the local agent's data directory (for its token file).
        timeout: deadline in seconds for each single-answer call (stat,
            mkdir, ...); ``None`` waits forever. Streams have their own:
        idle_timeout: the longest wait, in seconds, for the agent's next
            message of a read, backup or grep stream, and in an upload
            (write) for the agent to take the next message or, after the
            last, to answer (default 120; the time the caller spends
            between messages, or reading the data to upload, does not
            count); ``None`` waits forever. A backup's first chunk comes once the copy is
            taken and a grep over a large tree may be silent while it
            scans: raise it for those.
        exec_grace: seconds an exec stream may last past its run's timeout
            (the ``timeout`` of :meth:`Computer.exec`, else the longest
            any computer may have, 1 hour, since a computer's own default
            may be longer than the agent's 60 s) before it is cancelled
            (default 30); ``None`` trusts the agent to end it.

        A stream past its deadline raises
        :class:`~agentcomputer.errors.DeadlineExceededError`.

    Raises:
        ConfigurationError: the endpoint, token file or CA is unusable.
        ValueError: ``idle_timeout`` or ``exec_grace`` is not a positive
            number of seconds or ``None``.

    The connection is made lazily; an agent that cannot be reached raises
    :class:`~agentcomputer.errors.AgentUnavailableError` at the first call.
    Use the client as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        endpoint: Optional[str] = None,
        token: Optional[str] = None,
        *,
        token_file: Optional[PathLike] = None,
        ca_cert: Optional[PathOrPem] = None,
        tls_server_name: Optional[str] = None,
        data_dir: Optional[PathLike] = None,
        timeout: Optional[float] = 60.0,
        idle_timeout: Optional[float] = g.DEFAULT_IDLE_TIMEOUT,
        exec_grace: Optional[float] = g.DEFAULT_EXEC_GRACE,
    ) -> None:
        c.check_deadlines(idle_timeout, exec_grace)
        self.target: Target = resolve_target(
            endpoint,
            token,
            token_file=token_file,
            ca_cert=ca_cert,
            tls_server_name=tls_server_name,
            data_dir=data_dir,
        )
        self.timeout = timeout
        self.idle_timeout = idle_timeout
        self.exec_grace = exec_grace
        options = c.channel_options(self.target)
        if self.target.tls:
            self._channel = grpc.secure_channel(self.target.address, c.credentials(self.target), options)
        else:
            self._channel = grpc.insecure_channel(self.target.address, options)
        self._stub: Any = c.new_stub(self._channel)
        self._md = c.call_metadata(self.target)

    @classmethod
    def from_port_forward(cls, output: Union[str, PortForward], **kwargs: Any) -> Client:
        """A client for what ``kubectl computer port-forward NAME`` printed
        (its text, or a parsed :class:`PortForward`). Use
        :meth:`port_forward_computer` for the computer itself."""
        pf = parse_port_forward(output) if isinstance(output, str) else output
        return cls(pf.endpoint, pf.token, ca_cert=pf.ca_cert, tls_server_name=pf.tls_server_name, **kwargs)

    @classmethod
    def port_forward_computer(cls, output: Union[str, PortForward], **kwargs: Any) -> Computer:
        """The computer a ``kubectl computer port-forward NAME`` serves, from
        the lines it printed (``endpoint``, ``token``, ``computer``...)."""
        pf = parse_port_forward(output) if isinstance(output, str) else output
        return cls.from_port_forward(pf, **kwargs).computer(pf.computer)

    @property
    def endpoint(self) -> str:
        """The agent's URL."""
        return self.target.endpoint

    def close(self) -> None:
        """Closes the connection; calls in flight are cancelled."""
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.target.endpoint!r})"

    # ------------------------------------------------------------ calls

    def _unary(self, method: str, request: Any, path: Optional[str] = None) -> Any:
        try:
            return getattr(self._stub, method)(request, metadata=self._md, timeout=self.timeout)
        except grpc.RpcError as e:
            raise c.translate(e, self.target, path) from None

    def _stream(self, method: str, request: Any, path: Optional[str] = None) -> Generator[Any, None, None]:
        """The messages of a response stream, each awaited at most
        :attr:`idle_timeout`; the call is cancelled when the iteration ends
        or is closed (a check of its messages failed)."""
        call = getattr(self._stub, method)(request, metadata=self._md)
        try:
            yield from messages(call, self.idle_timeout, f"{method} stream" + (f" of {path!r}" if path else ""))
        except grpc.RpcError as e:
            raise c.translate(e, self.target, path) from None
        finally:
            call.cancel()

    # ------------------------------------------------------------ computers

    def computer(self, name: str) -> Computer:
        """A handle on computer ``name`` (no call is made)."""
        return Computer(self, name)

    def create_computer(
        self,
        name: str,
        *,
        max_bytes: int = 0,
        max_inodes: int = 0,
        egress: Optional[Egress] = None,
    ) -> Computer:
        """Creates a computer with an empty ``/workspace`` and returns its handle.

        Args:
            name: DNS-1123 label (1-63 of ``[a-z0-9-]``).
            max_bytes: quota in bytes (0: the agent's default, 10 GiB).
            max_inodes: inode quota (0: 1,000,000).
            egress: outbound network policy (default deny-all).

        Raises:
            ComputerExistsError: the name is taken (creation is never idempotent).
            AgentComputerError: INVALID_ARGUMENT for a bad name or policy.
        """
        req = pb.CreateComputerRequest(
            name=name,
            max_bytes=max_bytes,
            max_inodes=max_inodes,
            egress=egress.to_proto() if egress else None,
        )
        info = ComputerInfo.from_proto(self._unary("CreateComputer", req))
        return Computer(self, name, info)

    def get_computer(self, name: str) -> ComputerInfo:
        """Describes computer ``name``. Raises ComputerNotFoundError."""
        return ComputerInfo.from_proto(self._unary("GetComputer", pb.GetComputerRequest(name=name)))

    def list_computers(self) -> list[ComputerInfo]:
        """All computers of this agent, sorted by name."""
        resp = self._unary("ListComputers", pb.ListComputersRequest())
        return [ComputerInfo.from_proto(m) for m in resp.computers]

    def delete_computer(self, name: str) -> None:
        """Deletes computer ``name`` and all its files; its running execs are
        cancelled. Raises ComputerNotFoundError."""
        self._unary("DeleteComputer", pb.DeleteComputerRequest(name=name))

    def create_computer_from(
        self,
        name: str,
        *,
        snapshot: Optional[str] = None,
        computer: Optional[str] = None,
    ) -> Computer:
        """Creates computer ``name`` as a copy of a snapshot, or of another
        computer as it is now (a fork): same files, quota and egress
        policy; it changes independently. Needs an agent with a backup store.

        Raises:
            ComputerExistsError: the name is taken.
            AgentComputerError: ``NOT_FOUND`` for an unknown snapshot or
                source computer, ``FAILED_PRECONDITION`` without a backup store.
        """
        req = create_from_request(name, snapshot, computer)
        info = ComputerInfo.from_proto(self._unary("CreateComputerFrom", req))
        return Computer(self, name, info)

    def import_computer(self, name: str, source: Union[PathLike, BinaryIO, bytes]) -> Computer:
        """Creates computer ``name`` from a database file made by
        :meth:`Computer.backup` (a path, a binary file or bytes), streamed
        in 1 MiB pieces; the agent checks it before the computer exists.

        Raises:
            ComputerExistsError: the name is taken.
            AgentComputerError: ``INVALID_ARGUMENT`` for a file that is not a
                sound computer database.
        """
        if isinstance(source, (bytes, bytearray, memoryview)) or hasattr(source, "read"):
            pieces = import_pieces(name, c.chunks_of(source))  # type: ignore[arg-type]
            return self._import(name, pieces)
        with open(os.fspath(source), "rb") as f:
            return self._import(name, import_pieces(name, c.chunks_of(f)))

    def _import(self, name: str, pieces: Iterator[pb.ImportComputerRequest]) -> Computer:
        try:
            resp = self._stub.ImportComputer(pieces, metadata=self._md)
        except grpc.RpcError as e:
            raise c.translate(e, self.target, None) from None
        return Computer(self, name, ComputerInfo.from_proto(resp))


class ExecStream:
    """The events of one running exec, as they come: :class:`ExecStdout`
    and :class:`ExecStderr` pieces, then one :class:`ExecExit`.

    Nothing is gathered, so there is no cap on the output it passes on
    (the agent's own cap, ``max_output_bytes``, still applies to the run);
    the stream does have a deadline: the run's timeout plus the client's
    ``exec_grace``, counted from the call's start.

    Iterate over it; :meth:`cancel` (or leaving a ``with`` block) stops the
    run. After the iteration, :attr:`exit` holds the exit event, or ``None``
    when the run was cancelled before it ended.
    """

    def __init__(
        self,
        client: Client,
        request: pb.ExecRequest,
        timeout: Optional[float] = None,
        stdin: Optional[Iterator[bytes]] = None,
    ) -> None:
        self._client = client
        self._timeout = timeout
        self._deadline = g.exec_deadline(timeout, client.exec_grace)
        self._started = time.monotonic()
        if stdin is None:
            self._call = client._stub.Exec(request, metadata=client._md, timeout=self._deadline)
        else:
            # gRPC takes the messages as HTTP/2 flow control lets it send
            # them: the stdin is read no faster than the run consumes it.
            self._call = client._stub.ExecStream(
                c.exec_stream_messages(request, stdin), metadata=client._md, timeout=self._deadline
            )
        self._cancelled = False
        self.exit: Optional[ExecExit] = None

    def __iter__(self) -> Iterator[ExecEvent]:
        """The events. Raises (besides the call's errors)
        DeadlineExceededError past the run's timeout plus the client's
        ``exec_grace``, ProtocolError for events out of the API's order
        (an empty event, one after the exit, no exit at the end)."""
        sequence = g.ExecSequence()
        try:
            for m in self._call:
                event = sequence.event(m)
                if isinstance(event, ExecExit):
                    self.exit = event
                yield event
        except grpc.RpcError as e:
            status: Any = e  # grpc.Call and grpc.aio.AioRpcError both have code()
            if self._cancelled and status.code() == grpc.StatusCode.CANCELLED:
                # Our own cancel(): the iteration just ends.
                return
            raise self._failure(e) from None
        except ProtocolError:
            self._call.cancel()
            raise
        if not self._cancelled:
            sequence.end()

    def _failure(self, e: grpc.RpcError) -> Exception:
        status: Any = e
        ran = time.monotonic() - self._started
        grace = self._client.exec_grace
        if status.code() == grpc.StatusCode.DEADLINE_EXCEEDED and self._deadline is not None and grace is not None:
            if ran >= self._deadline - g.CLOCK_SLACK:
                return DeadlineExceededError(g.exec_deadline_message(self._timeout, grace), code="DEADLINE_EXCEEDED")
        return c.translate(e, self._client.target)

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called."""
        return self._cancelled

    def cancel(self) -> None:
        """Cancels the run (the agent stops it). An iteration in progress,
        even inside its loop, then ends without an error after the events
        already received; :attr:`exit` stays ``None`` unless the run had
        ended. Does nothing after the run ended."""
        self._cancelled = True
        self._call.cancel()

    def __enter__(self) -> ExecStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


class Computer:
    """One computer of an agent: its files and exec.

    Get one from :meth:`Client.create_computer` or :meth:`Client.computer`.

    Attributes:
        name: the name sent in requests (in a cluster, ``NAMESPACE/NAME``).
        client: the :class:`Client` it uses.
    """

    def __init__(self, client: Client, name: str, info: Optional[ComputerInfo] = None) -> None:
        self.client = client
        self.name = name
        self._info = info

    def __repr__(self) -> str:
        return f"Computer({self.name!r}, endpoint={self.client.endpoint!r})"

    def info(self) -> ComputerInfo:
        """Settings and usage now (GetComputer)."""
        return self.client.get_computer(self.name)

    def delete(self) -> None:
        """Deletes this computer and all its files."""
        self.client.delete_computer(self.name)

    # ------------------------------------------------------------ files

    def stat(self, path: str, *, follow_symlinks: bool = True) -> FileInfo:
        """Attributes of ``path`` (stat(2); lstat(2) with ``follow_symlinks=False``).

        Raises:
            FileNotFoundError: (a RemoteOSError) no such path.
        """
        req = pb.StatRequest(computer=self.name, path=path, follow_symlinks=follow_symlinks)
        return FileInfo.from_proto(self.client._unary("Stat", req, path), path)

    def lstat(self, path: str) -> FileInfo:
        """Attributes of ``path`` itself, not following a final symlink."""
        return self.stat(path, follow_symlinks=False)

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists (a dangling symlink does not)."""
        try:
            self.stat(path)
            return True
        except FileNotFoundError:
            return False

    def iter_read(self, path: str, *, offset: int = 0, length: Optional[int] = None) -> Iterator[bytes]:
        """Streams a byte range of a regular file in chunks of at most 1 MiB,
        never holding the whole file.

        Args:
            offset: first byte.
            length: bytes to read; ``None`` reads to the end.

        Raises (while iterating):
            FileNotFoundError, IsADirectoryError: as for open(2).
            RemoteOSError: ECANCELED when the file changed past the first 4 MiB.
            ProtocolError: a chunk that does not start where the previous
                one ended (the first: at ``offset``), is empty or larger
                than 1 MiB, or passes ``length``.
            DeadlineExceededError: the agent sent nothing for the client's
                ``idle_timeout``.
        """
        if offset < 0 or (length is not None and length < 0):
            raise ValueError("offset and length must not be negative")
        if length == 0:
            return
        req = pb.ReadRequest(computer=self.name, path=path, offset=offset, length=length or 0)
        sequence = g.ReadSequence(path, offset, length or 0)
        with contextlib.closing(self.client._stream("Read", req, path)) as chunks:
            for chunk in chunks:
                yield sequence.chunk(chunk.offset, chunk.data)

    def export_tar(self, path: str = ".") -> Iterator[bytes]:
        """Streams a tar archive (POSIX ustar with GNU long names) of the
        directory, file or symlink at ``path``, in pieces as the agent
        sends them; nothing is held whole.

        Raises (while iterating): FileNotFoundError and the other errors of
        the path, as :meth:`iter_read`.
        """
        req = pb.ExportRequest(computer=self.name, path=path)
        with contextlib.closing(self.client._stream("Export", req, path)) as chunks:
            for chunk in chunks:
                yield chunk.data

    def import_tar(self, path: str, archive: Iterable[bytes]) -> Tuple[int, int]:
        """Unpacks the tar archive whose bytes ``archive`` yields under the
        existing directory ``path``; returns (entries unpacked, bytes of
        file data written).

        Raises: RemoteOSError (EINVAL) naming an entry that
        would leave ``path`` or is a device, FIFO or socket; ENOSPC or
        EDQUOT past the quota; the path's errors as for open(2).
        """

        def pieces() -> Iterator[pb.ImportRequest]:
            yield pb.ImportRequest(header=pb.ImportHeader(computer=self.name, path=path))
            for data in archive:
                if data:
                    yield pb.ImportRequest(data=data)
            yield pb.ImportRequest(end=pb.ImportEnd())

        try:
            resp = self.client._stub.Import(pieces(), metadata=self.client._md)
        except grpc.RpcError as e:
            raise c.translate(e, self.client.target, path) from None
        return resp.entries, resp.bytes

    def read_bytes(self, path: str, *, offset: int = 0, length: Optional[int] = None) -> bytes:
        """The content of a regular file (or a byte range of it), held whole
        in memory: pass ``length`` to bound it (the agent may send no more),
        or stream with :meth:`iter_read` / :meth:`download`."""
        return b"".join(self.iter_read(path, offset=offset, length=length))

    def read_text(self, path: str, *, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The content of a text file."""
        return self.read_bytes(path).decode(encoding, errors)

    def download(self, path: str, dest: Union[PathLike, BinaryIO]) -> int:
        """Copies a file to ``dest`` (a local path or a binary file object),
        streamed; returns the bytes copied."""
        f, close = c.open_destination(dest)
        n = 0
        try:
            for piece in self.iter_read(path):
                f.write(piece)
                n += len(piece)
        finally:
            if close:
                f.close()
        return n

    def write(
        self,
        path: str,
        data: c.Data,
        *,
        mode: c.WriteMode = "truncate",
        perm: int = 0,
        offset: int = 0,
        encoding: str = "utf-8",
    ) -> FileInfo:
        """Writes a regular file, streamed in 1 MiB messages.

        Args:
            data: bytes, text (encoded with ``encoding``), a binary file
                object (read piece by piece), or an iterable of bytes.
            mode: ``"truncate"`` (default: replace the whole content
                atomically; a failed upload leaves the old file),
                ``"create"`` (write in place at ``offset``), ``"append"``,
                or ``"exclusive"`` (fail with FileExistsError if it exists).
            perm: permission bits of a new file (0: 0o644; for truncate of
                an existing file, keep its bits).

        Returns: the file's attributes after the write.

        Raises:
            FileExistsError: ``exclusive`` and the path exists.
            IsADirectoryError, NotADirectoryError, FileNotFoundError (a
                missing parent directory), RemoteOSError (ENOSPC over quota).
            DeadlineExceededError: the agent took no data, or gave no
                answer after the last, for the client's ``idle_timeout``
                (the time spent reading ``data`` does not count).
        """
        header = c.write_header(self.name, path, mode, perm, offset)
        stream = c.WriteStream(header, c.chunks_of(data, encoding))
        idle = self.client.idle_timeout
        watch = Watch(None, idle) if idle is not None else None
        messages = requests(iter(stream), watch) if watch is not None else iter(stream)
        stalled = DeadlineExceededError(
            g.idle_message(f"Write stream of {path!r}", idle or 0.0), code="DEADLINE_EXCEEDED"
        )
        try:
            call = self.client._stub.Write.future(messages, metadata=self.client._md)
            if watch is not None:
                watch.set_call(call)
            resp = call.result()
        except grpc.FutureCancelledError:
            if watch is not None and watch.fired:
                raise stalled from None
            raise
        except grpc.RpcError as e:
            if stream.error is not None:
                raise stream.error
            if watch is not None and watch.fired:
                raise stalled from None
            raise c.translate(e, self.client.target, path) from None
        finally:
            if watch is not None:
                watch.stop()
        if stream.error is not None:
            raise stream.error
        return FileInfo.from_proto(resp.info, path)

    def write_bytes(self, path: str, data: bytes, **kwargs: Any) -> FileInfo:
        """Writes ``data`` to ``path`` (see :meth:`write`)."""
        return self.write(path, data, **kwargs)

    def write_text(self, path: str, text: str, *, encoding: str = "utf-8", **kwargs: Any) -> FileInfo:
        """Writes ``text`` to ``path`` (see :meth:`write`)."""
        return self.write(path, text, encoding=encoding, **kwargs)

    def append(self, path: str, data: c.Data, **kwargs: Any) -> FileInfo:
        """Appends to ``path``, creating it if missing (O_APPEND)."""
        return self.write(path, data, mode="append", **kwargs)

    def upload(self, local_path: PathLike, path: str, **kwargs: Any) -> FileInfo:
        """Copies the local file ``local_path`` to ``path``, streamed."""
        with open(local_path, "rb") as f:
            return self.write(path, f, **kwargs)

    def iterdir(self, path: str = ".", *, with_info: bool = False, page_size: int = 0) -> Iterator[DirEntry]:
        """The entries of a directory (without ``.`` and ``..``), fetched page
        by page. ``with_info`` fills each :attr:`DirEntry.info`.

        Raises ProtocolError for a page larger than asked, an entry name
        that is not a name (empty, ``.``, ``..``, with ``/`` or NUL), or a
        next page token equal to the one sent (a listing that would never
        end)."""
        token = ""
        seen: set[str] = set()
        while True:
            req = pb.ReadDirRequest(
                computer=self.name, path=path, page_size=page_size, page_token=token, with_info=with_info
            )
            resp = self.client._unary("ReadDir", req, path)
            c.check_page(resp, page_size, token, seen)
            for e in resp.entries:
                yield DirEntry.from_proto(e, path)
            token = resp.next_page_token
            if not token:
                return

    def ls(self, path: str = ".", *, with_info: bool = False) -> list[DirEntry]:
        """All entries of a directory, in the agent's stable order."""
        return list(self.iterdir(path, with_info=with_info))

    def listdir(self, path: str = ".") -> list[str]:
        """The names in a directory, like :func:`os.listdir`."""
        return [e.name for e in self.iterdir(path)]

    def mkdir(self, path: str, *, parents: bool = False, perm: int = 0) -> FileInfo:
        """Creates a directory (``parents=True``: with missing parents, and an
        existing directory is no error). ``perm`` 0 means 0o755.

        Raises: FileExistsError, FileNotFoundError (no parent).
        """
        req = pb.MkdirRequest(computer=self.name, path=path, parents=parents, perm=perm)
        return FileInfo.from_proto(self.client._unary("Mkdir", req, path), path)

    def rm(self, path: str, *, recursive: bool = False) -> None:
        """Removes a file, symlink or empty directory; ``recursive`` removes
        a directory with everything under it (symlinks are not followed).

        Raises: FileNotFoundError; RemoteOSError ENOTEMPTY for a non-empty
        directory without ``recursive``.
        """
        req = pb.RemoveRequest(computer=self.name, path=path, recursive=recursive)
        self.client._unary("Remove", req, path)

    def rename(self, src: str, dst: str, *, noreplace: bool = False) -> None:
        """Moves ``src`` to ``dst`` like rename(2), replacing ``dst`` unless
        ``noreplace`` (then FileExistsError)."""
        req = pb.RenameRequest(computer=self.name, to=dst, noreplace=noreplace, **{"from": src})
        self.client._unary("Rename", req, src)

    def symlink(self, path: str, target: str) -> FileInfo:
        """Creates a symbolic link at ``path`` pointing to ``target``."""
        req = pb.SymlinkRequest(computer=self.name, path=path, target=target)
        return FileInfo.from_proto(self.client._unary("Symlink", req, path), path)

    def readlink(self, path: str) -> str:
        """The target of the symbolic link ``path``."""
        req = pb.ReadlinkRequest(computer=self.name, path=path)
        return str(self.client._unary("Readlink", req, path).target)

    def chmod(self, path: str, perm: int) -> FileInfo:
        """Sets the permission bits of ``path`` (following symlinks)."""
        req = pb.ChmodRequest(computer=self.name, path=path, perm=perm)
        return FileInfo.from_proto(self.client._unary("Chmod", req, path), path)

    def glob(self, pattern: str, *, max_results: int = 0) -> GlobResult:
        """Paths matching ``pattern`` (``src/**/*.rs``; ``globset`` syntax),
        relative to ``/workspace`` and sorted. The result is a list with a
        ``truncated`` attribute (``max_results``, 0 meaning 10000, cut it).
        Raises ProtocolError for more paths than asked or a path out of
        ``/workspace``."""
        req = pb.GlobRequest(computer=self.name, pattern=pattern, max_results=max_results)
        return c.glob_result(self.client._unary("Glob", req), max_results)

    def iter_grep(
        self,
        pattern: str,
        path: str = "",
        *,
        glob: str = "",
        max_matches: int = 0,
        ignore_case: bool = False,
    ) -> Iterator[GrepMatch]:
        """Streams the lines matching the regular expression ``pattern``
        (``regex`` crate syntax) in the file or directory ``path`` (default:
        everything). ``glob`` limits the files searched (``*.py``,
        ``src/**/*.rs``); ``max_matches`` 0 means 1000. Binary files are skipped.

        Raises ProtocolError for more matches than ``max_matches``, a path
        out of ``/workspace`` or a line over 4096 characters;
        DeadlineExceededError when the agent sends nothing for the client's
        ``idle_timeout`` (a long scan without matches counts)."""
        req = pb.GrepRequest(
            computer=self.name,
            path=path,
            pattern=pattern,
            glob=glob,
            max_matches=max_matches,
            case_insensitive=ignore_case,
        )
        n = 0
        with contextlib.closing(self.client._stream("Grep", req, path or None)) as found:
            for m in found:
                n += 1
                g.count(n, max_matches, g.GREP_DEFAULT_MAX, "matches")
                g.grep_match(m)
                yield GrepMatch(path=m.path, line_number=m.line_number, line=m.line)

    def grep(self, pattern: str, path: str = "", **kwargs: Any) -> list[GrepMatch]:
        """All matches of :meth:`iter_grep`, as a list."""
        return list(self.iter_grep(pattern, path, **kwargs))

    def statfs(self) -> Statfs:
        """Usage and limits of the whole filesystem, like statfs(2)."""
        return Statfs.from_proto(self.client._unary("Statfs", pb.StatfsRequest(computer=self.name)))

    def sync(self) -> int:
        """Returns once every call answered on the computer before this
        one is in the node agent's backup store (continuous backup to
        object storage), so that it survives the node; returns the log's
        position (0: the computer was not open, so nothing was waiting).
        Raises AgentComputerError with ``code`` ``FAILED_PRECONDITION`` when
        the agent has no backup store or the computer's shipper stopped (the
        message says why), RemoteOSError (``EIO``, ``code`` ``UNAVAILABLE``)
        while the store cannot be reached: retry."""
        return self.client._unary("Sync", pb.SyncRequest(computer=self.name)).position

    def snapshot(self, name: Optional[str] = None) -> Snapshot:
        """Takes a snapshot of the whole filesystem now (every call answered
        before this one is in it) while execs keep running; ``name``
        defaults to ``<computer>-<unix seconds>``. A checkpoint before a
        risky step: :meth:`restore` brings it back.

        Raises:
            AgentComputerError: ``ALREADY_EXISTS`` for a name taken,
                ``RESOURCE_EXHAUSTED`` past the snapshot limits,
                ``FAILED_PRECONDITION`` without a backup store.
        """
        req = pb.SnapshotRequest(computer=self.name, snapshot=name or "")
        return Snapshot.from_proto(self.client._unary("Snapshot", req))

    def snapshots(self) -> list[Snapshot]:
        """This computer's snapshots, oldest first."""
        resp = self.client._unary("ListSnapshots", pb.ListSnapshotsRequest(computer=self.name))
        return [Snapshot.from_proto(m) for m in resp.snapshots]

    def delete_snapshot(self, name: str) -> int:
        """Deletes snapshot ``name``; returns the bytes of backup log released."""
        req = pb.DeleteSnapshotRequest(computer=self.name, snapshot=name)
        return self.client._unary("DeleteSnapshot", req).released_bytes

    def restore(self, snapshot: Optional[str] = None, *, at: Optional[float] = None) -> Restored:
        """Brings the computer back to ``snapshot``, or to the time ``at``
        (seconds since the epoch) within what its backup log keeps. Running
        execs are ended; the state they leave is kept first as the snapshot
        ``Restored.before``, so the restore can be undone.

        Raises:
            AgentComputerError: ``NOT_FOUND`` for an unknown snapshot,
                ``FAILED_PRECONDITION`` while the computer is mounted.
        """
        req = restore_request(self.name, snapshot, at)
        return Restored.from_proto(self.client._unary("RestoreComputer", req))

    def fork(self, new: str) -> Computer:
        """A new computer ``new`` with this one's files as they are now."""
        return self.client.create_computer_from(new, computer=self.name)

    def verify_backup(self) -> BackupCheck:
        """Restores the computer's latest backup into a scratch file on
        its node and checks it (every object's checksum and chain, SQLite's
        integrity check, the filesystem engine's check). Raises
        AgentComputerError with ``code`` ``DATA_LOSS`` naming a damaged or
        missing object."""
        return BackupCheck.from_proto(
            self.client._unary("VerifyBackup", pb.VerifyBackupRequest(computer=self.name))
        )

    def iter_backup(self) -> Iterator[bytes]:
        """Streams a consistent copy of the computer's database (``fs.db``);
        it is complete only if the iteration ends without an error.

        Raises ProtocolError for chunks out of order, past the size the
        agent announced, or a stream that ends short of it;
        DeadlineExceededError when the agent sends nothing for the client's
        ``idle_timeout`` (the first chunk comes once the copy is taken)."""
        sequence = g.BackupSequence(self.name)
        with contextlib.closing(self.client._stream("Backup", pb.BackupRequest(computer=self.name))) as chunks:
            for chunk in chunks:
                yield sequence.chunk(chunk)
        sequence.end()

    def backup(self, dest: Union[PathLike, BinaryIO]) -> int:
        """Writes a consistent copy of the computer's database to ``dest``
        (a path or binary file); returns its size in bytes."""
        f, close = c.open_destination(dest)
        n = 0
        try:
            for piece in self.iter_backup():
                f.write(piece)
                n += len(piece)
        finally:
            if close:
                f.close()
        return n

    def share(self, path: str, *, expires_in: Optional[float] = None) -> ShareLink:
        """A signed download link to the file at ``path`` that works for
        ``expires_in`` seconds (1 to 604800; ``None``: the agent's default,
        one hour). Raises ``ValueError`` for a lifetime outside 1 to 604800
        (0 and negative ones included), ``FileNotFoundError`` for a missing
        file, ``OSError`` (``EISDIR``) for a directory, ProtocolError for
        an answer that is not an ``http(s)`` link to a path in
        ``/workspace`` expiring when it says."""
        req = c.share_request(self.name, path, expires_in)
        return c.share_link(self.client._unary("Share", req, path))

    def mount(self, host_path: str, *, nonempty: bool = False) -> None:
        """Mounts the files over FUSE at ``host_path`` on the agent's machine
        (local mode only; see the API's Mount)."""
        req = pb.MountRequest(computer=self.name, host_path=host_path, nonempty=nonempty)
        self.client._unary("Mount", req, host_path)

    def unmount(self, host_path: str) -> None:
        """Undoes :meth:`mount`."""
        req = pb.UnmountRequest(computer=self.name, host_path=host_path)
        self.client._unary("Unmount", req, host_path)

    # ------------------------------------------------------------ publish

    def publish(
        self,
        dir: str,
        remote: str,
        *,
        branch: Optional[str] = None,
        message: Optional[str] = None,
        credentials: Optional[c.Credentials] = None,
        credentials_env: Optional[str] = None,
    ) -> Published:
        """Commits directory ``dir`` with git and pushes it to the git
        remote ``remote`` over HTTP(S), through the computer's egress
        policy (docs/git.md, "Publishing"). A directory that is not a
        repository yet becomes one (branch ``main``); with nothing changed
        since the last publish, that commit is pushed again.

        Args:
            dir: the directory, relative to ``/workspace`` or absolute under
                it (``"site"``, ``"/workspace/site"``).
            remote: the remote's ``http://`` or ``https://`` URL, without
                credentials.
            branch: the remote branch (default: the repository's current
                branch, ``main`` for a new one).
            message: the commit message (default ``"Publish DIR"``).
            credentials: HTTP basic credentials for the remote:
                ``"USER:SECRET"``, a bare token (sent as user
                ``x-access-token``, GitHub's name for tokens; servers that
                take a token as the password accept any user), or a
                ``(user, secret)`` tuple.
            credentials_env: instead of ``credentials``, the name of an
                environment variable of this process holding them in the
                same text form.

        The credentials go with this one call and are used for requests to
        the remote's origin only: the agent never writes them to the
        computer, logs them or gives them to a program, and this library
        never shows them in a message or repr.

        The call may take up to the agent's 10 minute limit for a publish
        (the client's ``timeout`` when that is longer).

        Returns: the :class:`Published` commit, whether this call made it,
        the branch and git's output.

        Raises:
            ValueError: both ``credentials`` and ``credentials_env``, a
                variable that is not set, empty credentials, or a remote URL
                with credentials in it (refused before anything is sent;
                the message shows the URL with them replaced by ``***``).
            TypeError: ``credentials`` of another type.
            AgentComputerError: ``INVALID_ARGUMENT`` for a directory that
                is not one, a remote that is not an http(s) URL or a bad
                branch; ``FAILED_PRECONDITION`` when there is nothing to
                publish (an empty directory); ``ABORTED`` when the remote
                refused the push (not a fast-forward; the message is git's,
                and the local commit stays for the next publish).
            PermissionDeniedError: the computer's egress policy does not
                allow the remote (the message gives the policy's reason).
            RemoteOSError: ``errno_name`` ``EIO``, ``code`` ``UNAVAILABLE``:
                the remote could not be reached or the push failed for
                another reason, such as a remote that wants credentials
                (git's message, e.g. ``could not read Username``).
        """
        req = c.publish_request(self.name, dir, remote, branch, message, credentials, credentials_env)
        try:
            resp = self.client._stub.Publish(
                req, metadata=self.client._md, timeout=c.publish_deadline(self.client.timeout)
            )
        except grpc.RpcError as e:
            raise c.translate(e, self.client.target) from None
        return Published.from_proto(resp)

    # ------------------------------------------------------------ exec

    def exec_stream(
        self,
        script: str,
        *,
        runtime: c.Runtime = "shell",
        cwd: str = "",
        env: Optional[Mapping[str, str]] = None,
        stdin: c.Stdin = None,
        timeout: Optional[float] = None,
        max_output_bytes: int = 0,
        input: Any = None,
        memory_limit_bytes: int = 0,
    ) -> ExecStream:
        """Starts a run and returns its events as they come (see :meth:`exec`
        for the arguments). Cancel it with :meth:`ExecStream.cancel`.
        Nothing is gathered, so no output cap applies on this side; the
        stream's deadline is ``timeout`` (``None``: 1 hour) plus the client's
        ``exec_grace``."""
        req, rest = c.exec_call(
            self.name,
            script,
            runtime=runtime,
            cwd=cwd,
            env=env,
            stdin=stdin,
            timeout=timeout,
            max_output_bytes=max_output_bytes,
            input=input,
            memory_limit_bytes=memory_limit_bytes,
        )
        return ExecStream(self.client, req, timeout, rest)

    def exec(
        self,
        script: str,
        *,
        runtime: c.Runtime = "shell",
        cwd: str = "",
        env: Optional[Mapping[str, str]] = None,
        stdin: c.Stdin = None,
        timeout: Optional[float] = None,
        max_output_bytes: int = 0,
        input: Any = None,
        memory_limit_bytes: int = 0,
        check: bool = False,
    ) -> ExecResult:
        """Runs ``script`` and waits for it to finish.

        Args:
            script: a bash script (``shell``, ``container``) or an ES module
                (``javascript``: a default-exported function gets ``input``
                and its awaited return value is :attr:`ExecResult.result`).
            runtime: ``"shell"`` (in-process bash, built-in commands only),
                ``"javascript"`` (QuickJS), ``"container"`` (real binaries in
                a sandbox) or ``"auto"`` (the shell when every command the
                script names is built in there, else the container;
                :attr:`ExecResult.runtime` and ``runtime_reason`` say which
                and why).
            cwd: working directory (default ``/workspace``).
            env: environment variables to add.
            stdin: standard input: bytes or text (UTF-8), a binary file
                object or an iterable of bytes. Bytes that do not fit in one
                4 MiB message, file objects and iterables are streamed
                (ExecStream) in 1 MiB pieces, read only as the run takes
                them, so their size has no limit (a JavaScript module gets
                its input whole, within its memory budget).
            timeout: wall-clock limit in seconds (default 60, at most 3600);
                a run past it is stopped and its :attr:`ExecResult.error` says so.
            max_output_bytes: cap on stdout plus stderr (0: 16 MiB). The
                agent cuts the output there; an agent sending more than the
                cap plus 64 KiB raises OutputLimitError.
            input: JavaScript only: the JSON-serialisable argument.
            memory_limit_bytes: the run's memory budget (0: the agent's default).
            check: raise :class:`~agentcomputer.errors.ExecError` unless the
                run exited with 0 and no error.

        Returns: the :class:`ExecResult` (stdout, stderr, exit code, error).

        Raises:
            OutputLimitError: the agent sent more output than the cap (see
                ``max_output_bytes``); the run is cancelled.
            DeadlineExceededError: the stream outlasted ``timeout`` (or the
                1 hour when none is given) plus the client's ``exec_grace``.
            ProtocolError: the events broke the API's order (no exit, one
                after it) or the result JSON is over 4 MiB.
        """
        gather = g.ExecGather(g.output_limit(max_output_bytes))
        stream = self.exec_stream(
            script,
            runtime=runtime,
            cwd=cwd,
            env=env,
            stdin=stdin,
            timeout=timeout,
            max_output_bytes=max_output_bytes,
            input=input,
            memory_limit_bytes=memory_limit_bytes,
        )
        try:
            for event in stream:
                gather.add(event)
        except OutputLimitError:
            stream.cancel()
            raise
        if stream.exit is None:
            raise ProtocolError("the exec stream ended without an exit event")
        result = gather.result(stream.exit)
        if check and not result.ok:
            raise ExecError(_exec_failure(result), result)
        return result


def _exec_failure(result: ExecResult) -> str:
    why = f"exit code {result.exit_code}"
    if result.error:
        why += f": {result.error}"
    tail = result.stderr.strip().splitlines()[-1:] if result.stderr.strip() else []
    if tail:
        why += f" (stderr: {tail[0]})"
    return f"the run failed with {why}"
