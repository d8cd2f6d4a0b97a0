"""The asyncio client: :class:`AsyncClient` and :class:`AsyncComputer`.

The same methods, arguments, results and exceptions as the blocking
:mod:`agentcomputer.client`, as coroutines (``await computer.stat(p)``) and
async iterators (``async for chunk in computer.iter_read(p)``), over
``grpc.aio``. Create the client inside a running event loop.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, AsyncGenerator, AsyncIterable, AsyncIterator, BinaryIO, Iterable, Iterator, Mapping, Optional, Tuple, Union

import grpc
import grpc.aio

from . import _common as c
from . import _guard as g
from ._idle import AsyncWatch, amessages, arequests
from .client import _exec_failure
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
    Statfs,
    BackupCheck,
    Restored,
    Snapshot,
    create_from_request,
    import_pieces,
    restore_request,
)
from .v1 import agentcomputer_pb2 as pb

__all__ = ["AsyncClient", "AsyncComputer", "AsyncExecStream"]

PathLike = Union[str, "os.PathLike[str]"]
AsyncData = Union[c.Data, AsyncIterable[bytes]]


class AsyncClient:
    """A connection to one node agent, for asyncio. Arguments (deadlines
    ``timeout``, ``idle_timeout`` and ``exec_grace`` included) as
    :class:`agentcomputer.Client`. Use ``async with`` or ``await close()``."""

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
            self._channel = grpc.aio.secure_channel(self.target.address, c.credentials(self.target), options)
        else:
            self._channel = grpc.aio.insecure_channel(self.target.address, options)
        self._stub: Any = c.new_stub(self._channel)
        self._md = c.call_metadata(self.target)

    @classmethod
    def from_port_forward(cls, output: Union[str, PortForward], **kwargs: Any) -> AsyncClient:
        """A client for what ``kubectl computer port-forward NAME`` printed."""
        pf = parse_port_forward(output) if isinstance(output, str) else output
        return cls(pf.endpoint, pf.token, ca_cert=pf.ca_cert, tls_server_name=pf.tls_server_name, **kwargs)

    @classmethod
    def port_forward_computer(cls, output: Union[str, PortForward], **kwargs: Any) -> AsyncComputer:
        """The computer a ``kubectl computer port-forward NAME`` serves."""
        pf = parse_port_forward(output) if isinstance(output, str) else output
        return cls.from_port_forward(pf, **kwargs).computer(pf.computer)

    @property
    def endpoint(self) -> str:
        """The agent's URL."""
        return self.target.endpoint

    async def close(self) -> None:
        """Closes the connection; calls in flight are cancelled."""
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncClient({self.target.endpoint!r})"

    async def _unary(self, method: str, request: Any, path: Optional[str] = None) -> Any:
        try:
            return await getattr(self._stub, method)(request, metadata=self._md, timeout=self.timeout)
        except grpc.RpcError as e:
            raise c.translate(e, self.target, path) from None

    async def _stream(self, method: str, request: Any, path: Optional[str] = None) -> AsyncGenerator[Any, None]:
        """The messages of a response stream, each awaited at most
        :attr:`idle_timeout`; the call is cancelled when the iteration ends
        or is closed."""
        call = getattr(self._stub, method)(request, metadata=self._md)
        try:
            async for m in amessages(call, self.idle_timeout, f"{method} stream" + (f" of {path!r}" if path else "")):
                yield m
        except grpc.RpcError as e:
            raise c.translate(e, self.target, path) from None
        finally:
            call.cancel()

    def computer(self, name: str) -> AsyncComputer:
        """A handle on computer ``name`` (no call is made)."""
        return AsyncComputer(self, name)

    async def create_computer(
        self,
        name: str,
        *,
        max_bytes: int = 0,
        max_inodes: int = 0,
        egress: Optional[Egress] = None,
    ) -> AsyncComputer:
        """Creates a computer; see :meth:`agentcomputer.Client.create_computer`."""
        req = pb.CreateComputerRequest(
            name=name,
            max_bytes=max_bytes,
            max_inodes=max_inodes,
            egress=egress.to_proto() if egress else None,
        )
        info = ComputerInfo.from_proto(await self._unary("CreateComputer", req))
        return AsyncComputer(self, name, info)

    async def get_computer(self, name: str) -> ComputerInfo:
        """Describes computer ``name``. Raises ComputerNotFoundError."""
        return ComputerInfo.from_proto(await self._unary("GetComputer", pb.GetComputerRequest(name=name)))

    async def list_computers(self) -> list[ComputerInfo]:
        """All computers of this agent, sorted by name."""
        resp = await self._unary("ListComputers", pb.ListComputersRequest())
        return [ComputerInfo.from_proto(m) for m in resp.computers]

    async def create_computer_from(
        self,
        name: str,
        *,
        snapshot: Optional[str] = None,
        computer: Optional[str] = None,
    ) -> AsyncComputer:
        """Creates computer ``name`` as a copy of a snapshot or of another
        computer now (see :meth:`agentcomputer.Client.create_computer_from`)."""
        req = create_from_request(name, snapshot, computer)
        info = ComputerInfo.from_proto(await self._unary("CreateComputerFrom", req))
        return AsyncComputer(self, name, info)

    async def import_computer(self, name: str, source: Union[str, "os.PathLike[str]", BinaryIO, bytes]) -> AsyncComputer:
        """Creates computer ``name`` from a database file made by a backup
        (see :meth:`agentcomputer.Client.import_computer`); this async form
        reads the whole file into memory before it sends it."""
        if isinstance(source, (bytes, bytearray, memoryview)) or hasattr(source, "read"):
            pieces = list(import_pieces(name, c.chunks_of(source)))  # type: ignore[arg-type]
        else:
            with open(os.fspath(source), "rb") as f:
                pieces = list(import_pieces(name, c.chunks_of(f)))

        async def send() -> AsyncIterator[pb.ImportComputerRequest]:
            for p in pieces:
                yield p

        try:
            resp = await self._stub.ImportComputer(send(), metadata=self._md)
        except grpc.RpcError as e:
            raise c.translate(e, self.target, None) from None
        return AsyncComputer(self, name, ComputerInfo.from_proto(resp))

    async def delete_computer(self, name: str) -> None:
        """Deletes computer ``name`` and all its files."""
        await self._unary("DeleteComputer", pb.DeleteComputerRequest(name=name))


class AsyncExecStream:
    """The events of one running exec (``async for``); :meth:`cancel` stops
    it. After the iteration, :attr:`exit` holds the exit event, or ``None``
    when the run was cancelled before it ended. As
    :class:`agentcomputer.ExecStream`: no output cap (nothing is gathered),
    a deadline of the run's timeout plus the client's ``exec_grace``."""

    def __init__(
        self,
        client: AsyncClient,
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
            # them: the stdin is read no faster than the run consumes it (a
            # file object is read on the event loop's thread).
            self._call = client._stub.ExecStream(
                c.exec_stream_messages(request, stdin), metadata=client._md, timeout=self._deadline
            )
        self._cancelled = False
        self.exit: Optional[ExecExit] = None

    async def __aiter__(self) -> AsyncIterator[ExecEvent]:
        sequence = g.ExecSequence()
        try:
            async for m in self._call:
                event = sequence.event(m)
                if isinstance(event, ExecExit):
                    self.exit = event
                yield event
        except asyncio.CancelledError:
            # grpc.aio ends a cancelled call's iteration with CancelledError.
            # After our own cancel() the iteration just ends; a cancellation
            # of the task itself goes on.
            task = asyncio.current_task()
            cancelling = getattr(task, "cancelling", None)
            if self._cancelled and not (cancelling is not None and cancelling()):
                return
            raise
        except grpc.RpcError as e:
            status: Any = e  # grpc.Call and grpc.aio.AioRpcError both have code()
            if self._cancelled and status.code() == grpc.StatusCode.CANCELLED:
                return
            grace = self._client.exec_grace
            if (
                status.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                and self._deadline is not None
                and grace is not None
                and time.monotonic() - self._started >= self._deadline - g.CLOCK_SLACK
            ):
                raise DeadlineExceededError(
                    g.exec_deadline_message(self._timeout, grace), code="DEADLINE_EXCEEDED"
                ) from None
            raise c.translate(e, self._client.target) from None
        except ProtocolError:
            self._call.cancel()
            raise
        if not self._cancelled:
            sequence.end()

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called."""
        return self._cancelled

    def cancel(self) -> None:
        """Cancels the run (the agent stops it). An ``async for`` in
        progress, even inside its loop, then ends without an error after
        the events already received; :attr:`exit` stays ``None`` unless the
        run had ended. Does nothing after the run ended."""
        self._cancelled = True
        self._call.cancel()

    async def __aenter__(self) -> AsyncExecStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cancel()


async def _async_chunks(data: AsyncData, encoding: str) -> AsyncIterator[bytes]:
    if hasattr(data, "__aiter__"):
        async for piece in data:
            for sub in c.chunks_of(piece, encoding):
                yield sub
        return
    for piece in c.chunks_of(data, encoding):
        yield piece


class _AsyncWriteStream:
    def __init__(self, header: pb.WriteRequest, pieces: AsyncIterator[bytes]) -> None:
        self.header = header
        self.pieces = pieces
        self.total = 0
        self.error: Optional[BaseException] = None

    async def __aiter__(self) -> AsyncIterator[pb.WriteRequest]:
        yield self.header
        try:
            async for piece in self.pieces:
                if piece:
                    self.total += len(piece)
                    yield pb.WriteRequest(data=piece)
        except Exception as e:  # noqa: BLE001 - handed to the caller
            self.error = e
            return
        yield pb.WriteRequest(end=pb.WriteEnd(total_bytes=self.total))


class AsyncComputer:
    """One computer of an agent, for asyncio: the methods of
    :class:`agentcomputer.Computer` as coroutines and async iterators."""

    def __init__(self, client: AsyncClient, name: str, info: Optional[ComputerInfo] = None) -> None:
        self.client = client
        self.name = name
        self._info = info

    def __repr__(self) -> str:
        return f"AsyncComputer({self.name!r}, endpoint={self.client.endpoint!r})"

    async def info(self) -> ComputerInfo:
        """Settings and usage now."""
        return await self.client.get_computer(self.name)

    async def delete(self) -> None:
        """Deletes this computer and all its files."""
        await self.client.delete_computer(self.name)

    async def stat(self, path: str, *, follow_symlinks: bool = True) -> FileInfo:
        """Attributes of ``path``; see :meth:`agentcomputer.Computer.stat`."""
        req = pb.StatRequest(computer=self.name, path=path, follow_symlinks=follow_symlinks)
        return FileInfo.from_proto(await self.client._unary("Stat", req, path), path)

    async def lstat(self, path: str) -> FileInfo:
        """Attributes of ``path`` itself, not following a final symlink."""
        return await self.stat(path, follow_symlinks=False)

    async def exists(self, path: str) -> bool:
        """Whether ``path`` exists."""
        try:
            await self.stat(path)
            return True
        except FileNotFoundError:
            return False

    async def iter_read(self, path: str, *, offset: int = 0, length: Optional[int] = None) -> AsyncIterator[bytes]:
        """Streams a byte range of a file in chunks of at most 1 MiB; checks
        and errors as :meth:`agentcomputer.Computer.iter_read`."""
        if offset < 0 or (length is not None and length < 0):
            raise ValueError("offset and length must not be negative")
        if length == 0:
            return
        req = pb.ReadRequest(computer=self.name, path=path, offset=offset, length=length or 0)
        sequence = g.ReadSequence(path, offset, length or 0)
        chunks = self.client._stream("Read", req, path)
        try:
            async for chunk in chunks:
                yield sequence.chunk(chunk.offset, chunk.data)
        finally:
            await chunks.aclose()

    async def export_tar(self, path: str = ".") -> AsyncIterator[bytes]:
        """Streams a tar archive of ``path``; as
        :meth:`agentcomputer.Computer.export_tar`."""
        req = pb.ExportRequest(computer=self.name, path=path)
        chunks = self.client._stream("Export", req, path)
        try:
            async for chunk in chunks:
                yield chunk.data
        finally:
            await chunks.aclose()

    async def import_tar(self, path: str, archive: Union[Iterable[bytes], AsyncIterable[bytes]]) -> Tuple[int, int]:
        """Unpacks a tar archive under the directory ``path``; returns
        (entries unpacked, bytes of file data written). As
        :meth:`agentcomputer.Computer.import_tar`."""

        async def pieces() -> AsyncIterator[pb.ImportRequest]:
            yield pb.ImportRequest(header=pb.ImportHeader(computer=self.name, path=path))
            if isinstance(archive, AsyncIterable):
                async for data in archive:
                    if data:
                        yield pb.ImportRequest(data=data)
            else:
                for data in archive:
                    if data:
                        yield pb.ImportRequest(data=data)
            yield pb.ImportRequest(end=pb.ImportEnd())

        try:
            resp = await self.client._stub.Import(pieces(), metadata=self.client._md)
        except grpc.RpcError as e:
            raise c.translate(e, self.client.target, path) from None
        return resp.entries, resp.bytes

    async def read_bytes(self, path: str, *, offset: int = 0, length: Optional[int] = None) -> bytes:
        """The content of a regular file (or a byte range of it), held whole
        in memory: pass ``length`` to bound it."""
        return b"".join([p async for p in self.iter_read(path, offset=offset, length=length)])

    async def read_text(self, path: str, *, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The content of a text file."""
        return (await self.read_bytes(path)).decode(encoding, errors)

    async def download(self, path: str, dest: Union[PathLike, BinaryIO]) -> int:
        """Copies a file to a local path or binary file object; returns the bytes copied."""
        f, close = c.open_destination(dest)
        n = 0
        try:
            async for piece in self.iter_read(path):
                f.write(piece)
                n += len(piece)
        finally:
            if close:
                f.close()
        return n

    async def write(
        self,
        path: str,
        data: AsyncData,
        *,
        mode: c.WriteMode = "truncate",
        perm: int = 0,
        offset: int = 0,
        encoding: str = "utf-8",
    ) -> FileInfo:
        """Writes a regular file, streamed; see :meth:`agentcomputer.Computer.write`.
        ``data`` may also be an async iterable of bytes."""
        header = c.write_header(self.name, path, mode, perm, offset)
        stream = _AsyncWriteStream(header, _async_chunks(data, encoding))
        idle = self.client.idle_timeout
        watch = AsyncWatch(idle) if idle is not None else None
        messages = arequests(stream.__aiter__(), watch) if watch is not None else stream.__aiter__()
        stalled = DeadlineExceededError(
            g.idle_message(f"Write stream of {path!r}", idle or 0.0), code="DEADLINE_EXCEEDED"
        )
        call = self.client._stub.Write(messages, metadata=self.client._md)
        watcher = None
        if watch is not None:
            watch.call = call
            watcher = asyncio.ensure_future(watch.run())
        try:
            resp = await call
        except asyncio.CancelledError:
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
            if watcher is not None:
                watcher.cancel()
        if stream.error is not None:
            raise stream.error
        return FileInfo.from_proto(resp.info, path)

    async def write_bytes(self, path: str, data: bytes, **kwargs: Any) -> FileInfo:
        """Writes ``data`` to ``path``."""
        return await self.write(path, data, **kwargs)

    async def write_text(self, path: str, text: str, *, encoding: str = "utf-8", **kwargs: Any) -> FileInfo:
        """Writes ``text`` to ``path``."""
        return await self.write(path, text, encoding=encoding, **kwargs)

    async def append(self, path: str, data: AsyncData, **kwargs: Any) -> FileInfo:
        """Appends to ``path``, creating it if missing."""
        return await self.write(path, data, mode="append", **kwargs)

    async def upload(self, local_path: PathLike, path: str, **kwargs: Any) -> FileInfo:
        """Copies the local file ``local_path`` to ``path``, streamed."""
        with open(local_path, "rb") as f:
            return await self.write(path, f, **kwargs)

    async def iterdir(self, path: str = ".", *, with_info: bool = False, page_size: int = 0) -> AsyncIterator[DirEntry]:
        """The entries of a directory, fetched page by page; checks as
        :meth:`agentcomputer.Computer.iterdir`."""
        token = ""
        seen: set[str] = set()
        while True:
            req = pb.ReadDirRequest(
                computer=self.name, path=path, page_size=page_size, page_token=token, with_info=with_info
            )
            resp = await self.client._unary("ReadDir", req, path)
            c.check_page(resp, page_size, token, seen)
            for e in resp.entries:
                yield DirEntry.from_proto(e, path)
            token = resp.next_page_token
            if not token:
                return

    async def ls(self, path: str = ".", *, with_info: bool = False) -> list[DirEntry]:
        """All entries of a directory."""
        return [e async for e in self.iterdir(path, with_info=with_info)]

    async def listdir(self, path: str = ".") -> list[str]:
        """The names in a directory."""
        return [e.name async for e in self.iterdir(path)]

    async def mkdir(self, path: str, *, parents: bool = False, perm: int = 0) -> FileInfo:
        """Creates a directory (``parents=True``: mkdir -p)."""
        req = pb.MkdirRequest(computer=self.name, path=path, parents=parents, perm=perm)
        return FileInfo.from_proto(await self.client._unary("Mkdir", req, path), path)

    async def rm(self, path: str, *, recursive: bool = False) -> None:
        """Removes a file, symlink or empty directory (``recursive``: a whole tree)."""
        req = pb.RemoveRequest(computer=self.name, path=path, recursive=recursive)
        await self.client._unary("Remove", req, path)

    async def rename(self, src: str, dst: str, *, noreplace: bool = False) -> None:
        """Moves ``src`` to ``dst`` like rename(2)."""
        req = pb.RenameRequest(computer=self.name, to=dst, noreplace=noreplace, **{"from": src})
        await self.client._unary("Rename", req, src)

    async def symlink(self, path: str, target: str) -> FileInfo:
        """Creates a symbolic link at ``path`` pointing to ``target``."""
        req = pb.SymlinkRequest(computer=self.name, path=path, target=target)
        return FileInfo.from_proto(await self.client._unary("Symlink", req, path), path)

    async def readlink(self, path: str) -> str:
        """The target of the symbolic link ``path``."""
        req = pb.ReadlinkRequest(computer=self.name, path=path)
        return str((await self.client._unary("Readlink", req, path)).target)

    async def chmod(self, path: str, perm: int) -> FileInfo:
        """Sets the permission bits of ``path``."""
        req = pb.ChmodRequest(computer=self.name, path=path, perm=perm)
        return FileInfo.from_proto(await self.client._unary("Chmod", req, path), path)

    async def glob(self, pattern: str, *, max_results: int = 0) -> GlobResult:
        """Paths matching ``pattern``; see :meth:`agentcomputer.Computer.glob`."""
        req = pb.GlobRequest(computer=self.name, pattern=pattern, max_results=max_results)
        return c.glob_result(await self.client._unary("Glob", req), max_results)

    async def iter_grep(
        self,
        pattern: str,
        path: str = "",
        *,
        glob: str = "",
        max_matches: int = 0,
        ignore_case: bool = False,
    ) -> AsyncIterator[GrepMatch]:
        """Streams matching lines; see :meth:`agentcomputer.Computer.iter_grep`."""
        req = pb.GrepRequest(
            computer=self.name,
            path=path,
            pattern=pattern,
            glob=glob,
            max_matches=max_matches,
            case_insensitive=ignore_case,
        )
        n = 0
        found = self.client._stream("Grep", req, path or None)
        try:
            async for m in found:
                n += 1
                g.count(n, max_matches, g.GREP_DEFAULT_MAX, "matches")
                g.grep_match(m)
                yield GrepMatch(path=m.path, line_number=m.line_number, line=m.line)
        finally:
            await found.aclose()

    async def grep(self, pattern: str, path: str = "", **kwargs: Any) -> list[GrepMatch]:
        """All matches of :meth:`iter_grep`, as a list."""
        return [m async for m in self.iter_grep(pattern, path, **kwargs)]

    async def statfs(self) -> Statfs:
        """Usage and limits of the whole filesystem."""
        return Statfs.from_proto(await self.client._unary("Statfs", pb.StatfsRequest(computer=self.name)))

    async def sync(self) -> int:
        """Returns once every call answered on the computer before this
        one is in the node agent's backup store (continuous backup to
        object storage), so that it survives the node; returns the log's
        position (0: the computer was not open, so nothing was waiting).
        Raises AgentComputerError with ``code`` ``FAILED_PRECONDITION`` when
        the agent has no backup store or the computer's shipper stopped (the
        message says why), RemoteOSError (``EIO``, ``code`` ``UNAVAILABLE``)
        while the store cannot be reached: retry."""
        return (await self.client._unary("Sync", pb.SyncRequest(computer=self.name))).position

    async def snapshot(self, name: Optional[str] = None) -> Snapshot:
        """Takes a snapshot now (see :meth:`agentcomputer.Computer.snapshot`)."""
        req = pb.SnapshotRequest(computer=self.name, snapshot=name or "")
        return Snapshot.from_proto(await self.client._unary("Snapshot", req))

    async def snapshots(self) -> list[Snapshot]:
        """This computer's snapshots, oldest first."""
        resp = await self.client._unary("ListSnapshots", pb.ListSnapshotsRequest(computer=self.name))
        return [Snapshot.from_proto(m) for m in resp.snapshots]

    async def delete_snapshot(self, name: str) -> int:
        """Deletes snapshot ``name``; returns the bytes of backup log released."""
        req = pb.DeleteSnapshotRequest(computer=self.name, snapshot=name)
        return (await self.client._unary("DeleteSnapshot", req)).released_bytes

    async def restore(self, snapshot: Optional[str] = None, *, at: Optional[float] = None) -> Restored:
        """Brings the computer back to ``snapshot`` or the time ``at`` (see
        :meth:`agentcomputer.Computer.restore`)."""
        req = restore_request(self.name, snapshot, at)
        return Restored.from_proto(await self.client._unary("RestoreComputer", req))

    async def fork(self, new: str) -> AsyncComputer:
        """A new computer ``new`` with this one's files as they are now."""
        req = create_from_request(new, None, self.name)
        await self.client._unary("CreateComputerFrom", req)
        return AsyncComputer(self.client, new)

    async def verify_backup(self) -> BackupCheck:
        """Restores the computer's latest backup into a scratch file on
        its node and checks it (every object's checksum and chain, SQLite's
        integrity check, the filesystem engine's check). Raises
        AgentComputerError with ``code`` ``DATA_LOSS`` naming a damaged or
        missing object."""
        return BackupCheck.from_proto(
            await self.client._unary("VerifyBackup", pb.VerifyBackupRequest(computer=self.name))
        )

    async def iter_backup(self) -> AsyncIterator[bytes]:
        """Streams a consistent copy of the computer's database; checks as
        :meth:`agentcomputer.Computer.iter_backup`."""
        sequence = g.BackupSequence(self.name)
        chunks = self.client._stream("Backup", pb.BackupRequest(computer=self.name))
        try:
            async for chunk in chunks:
                yield sequence.chunk(chunk)
        finally:
            await chunks.aclose()
        sequence.end()

    async def backup(self, dest: Union[PathLike, BinaryIO]) -> int:
        """Writes a consistent copy of the database to ``dest``; returns its size."""
        f, close = c.open_destination(dest)
        n = 0
        try:
            async for piece in self.iter_backup():
                f.write(piece)
                n += len(piece)
        finally:
            if close:
                f.close()
        return n

    async def share(self, path: str, *, expires_in: Optional[float] = None) -> ShareLink:
        """A signed download link to the file at ``path`` that works for
        ``expires_in`` seconds (1 to 604800; ``None``: the agent's default,
        one hour). Raises ``ValueError`` for a lifetime outside 1 to 604800
        (0 and negative ones included), ``FileNotFoundError`` for a missing
        file, ``OSError`` (``EISDIR``) for a directory, ProtocolError for
        an answer that is not an ``http(s)`` link to a path in
        ``/workspace`` expiring when it says."""
        req = c.share_request(self.name, path, expires_in)
        return c.share_link(await self.client._unary("Share", req, path))

    async def mount(self, host_path: str, *, nonempty: bool = False) -> None:
        """Mounts the files over FUSE at ``host_path`` on the agent's machine."""
        req = pb.MountRequest(computer=self.name, host_path=host_path, nonempty=nonempty)
        await self.client._unary("Mount", req, host_path)

    async def unmount(self, host_path: str) -> None:
        """Undoes :meth:`mount`."""
        req = pb.UnmountRequest(computer=self.name, host_path=host_path)
        await self.client._unary("Unmount", req, host_path)

    async def publish(
        self,
        dir: str,
        remote: str,
        *,
        branch: Optional[str] = None,
        message: Optional[str] = None,
        credentials: Optional[c.Credentials] = None,
        credentials_env: Optional[str] = None,
    ) -> Published:
        """Commits ``dir`` with git and pushes it to ``remote`` (see
        :meth:`agentcomputer.Computer.publish` for the arguments, the
        credentials and the errors)."""
        req = c.publish_request(self.name, dir, remote, branch, message, credentials, credentials_env)
        try:
            resp = await self.client._stub.Publish(
                req, metadata=self.client._md, timeout=c.publish_deadline(self.client.timeout)
            )
        except grpc.RpcError as e:
            raise c.translate(e, self.client.target) from None
        return Published.from_proto(resp)

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
    ) -> AsyncExecStream:
        """Starts a run; ``async for`` over the result gives its events (no
        output cap; a deadline of ``timeout`` plus the client's ``exec_grace``)."""
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
        return AsyncExecStream(self.client, req, timeout, rest)

    async def exec(
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
        """Runs ``script`` and waits for it; see :meth:`agentcomputer.Computer.exec`
        (the same output cap, deadline and errors)."""
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
            async for event in stream:
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
