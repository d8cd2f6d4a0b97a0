"""Plain, typed values the client returns (immutable dataclasses).

They mirror the API's messages (proto/agentcomputer/v1/agentcomputer.proto)
with Python types: sizes in bytes as ``int``, times as ``datetime`` in UTC
(the nanoseconds are kept in ``*_ns`` fields), enums as short strings.
"""

from __future__ import annotations

import stat as _stat
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Iterator, List, Optional, Union

from .errors import ProtocolError
from .v1 import agentcomputer_pb2 as pb

__all__ = [
    "ComputerInfo",
    "DirEntry",
    "Egress",
    "EgressCidr",
    "ExecExit",
    "ExecResult",
    "ExecStderr",
    "ExecStdout",
    "ExecEvent",
    "FileInfo",
    "GlobResult",
    "GrepMatch",
    "Published",
    "Statfs",
]

# FileKind enum values as short names, and back.
_KINDS = {
    pb.FILE_KIND_UNSPECIFIED: "unknown",
    pb.FILE_KIND_REGULAR: "file",
    pb.FILE_KIND_DIRECTORY: "directory",
    pb.FILE_KIND_SYMLINK: "symlink",
    pb.FILE_KIND_FIFO: "fifo",
    pb.FILE_KIND_CHAR_DEVICE: "char_device",
    pb.FILE_KIND_BLOCK_DEVICE: "block_device",
    pb.FILE_KIND_SOCKET: "socket",
}

_EGRESS_MODES = {
    "deny_all": pb.EGRESS_MODE_DENY_ALL,
    "allow_all": pb.EGRESS_MODE_ALLOW_ALL,
    "allow_list": pb.EGRESS_MODE_ALLOW_LIST,
}


def _time(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc)


@dataclass(frozen=True)
class EgressCidr:
    """An IP range and the TCP port ranges allowed in it.

    Attributes:
        cidr: ``"10.0.0.0/8"`` or ``"2001:db8::/32"``.
        ports: ``(first, last)`` inclusive port ranges; empty allows every port.
    """

    cidr: str
    ports: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Egress:
    """A computer's outbound network policy (docs/egress.md).

    Attributes:
        mode: ``"deny_all"`` (the default), ``"allow_all"`` or ``"allow_list"``.
        cidrs: allowed IP ranges (``allow_list`` only).
        hosts: allowed DNS names, ``"pypi.org"`` or ``"*.example.com"``
            (``allow_list`` only).
        allow_metadata: allow the cloud metadata endpoints.
    """

    mode: str = "deny_all"
    cidrs: tuple[EgressCidr, ...] = ()
    hosts: tuple[str, ...] = ()
    allow_metadata: bool = False

    def to_proto(self) -> pb.Egress:
        """The API message. Raises ValueError for an unknown mode."""
        try:
            mode = _EGRESS_MODES[self.mode]
        except KeyError:
            raise ValueError(f"unknown egress mode {self.mode!r}: expected one of {sorted(_EGRESS_MODES)}") from None
        return pb.Egress(
            mode=mode,
            cidrs=[
                pb.EgressCidr(
                    cidr=c.cidr,
                    ports=[pb.EgressPorts(port=a, end_port=b) for a, b in c.ports],
                )
                for c in self.cidrs
            ],
            hosts=list(self.hosts),
            allow_metadata=self.allow_metadata,
        )

    @staticmethod
    def from_proto(m: pb.Egress) -> Egress:
        names = {v: k for k, v in _EGRESS_MODES.items()}
        return Egress(
            mode=names.get(m.mode, "deny_all"),
            cidrs=tuple(
                EgressCidr(c.cidr, tuple((p.port, p.end_port or p.port) for p in c.ports)) for c in m.cidrs
            ),
            hosts=tuple(m.hosts),
            allow_metadata=m.allow_metadata,
        )


@dataclass(frozen=True)
class ComputerInfo:
    """A computer's settings and usage.

    Attributes:
        name: DNS-1123 label (in a cluster, ``NAMESPACE/NAME``).
        max_bytes: quota on stored file bytes (writes past it fail with ENOSPC).
        max_inodes: quota on inodes.
        used_bytes: bytes counted against ``max_bytes`` now.
        used_inodes: inodes in use now.
        disk_bytes: bytes the computer's database takes on the node's disk.
        created: creation time (UTC).
        open: whether the filesystem is open now (idle ones are hibernated).
        egress: outbound network policy.
    """

    name: str
    max_bytes: int
    max_inodes: int
    used_bytes: int
    used_inodes: int
    disk_bytes: int
    created: datetime
    open: bool
    egress: Egress

    @staticmethod
    def from_proto(m: pb.Computer) -> ComputerInfo:
        return ComputerInfo(
            name=m.name,
            max_bytes=m.max_bytes,
            max_inodes=m.max_inodes,
            used_bytes=m.used_bytes,
            used_inodes=m.used_inodes,
            disk_bytes=m.disk_bytes,
            created=_time(m.created_unix_nanos),
            open=m.open,
            egress=Egress.from_proto(m.egress),
        )


@dataclass(frozen=True)
class FileInfo:
    """Attributes of one inode, as stat(2) gives them.

    Attributes:
        path: the path the call named (as given).
        kind: ``"file"``, ``"directory"``, ``"symlink"``, ``"fifo"``,
            ``"char_device"``, ``"block_device"``, ``"socket"``.
        size: bytes (for a symlink, the length of its target).
        perm: permission bits (``0o644``).
        mode: ``st_mode``: kind and permission bits.
        ino, nlink, uid, gid, blocks: as in stat(2) (blocks of 512 bytes).
        mtime, atime, ctime: times (UTC); ``mtime_ns`` etc. in nanoseconds
            since the Unix epoch.
        symlink_target: the target of a symlink, else ``""``.
    """

    path: str
    kind: str
    size: int
    perm: int
    mode: int
    ino: int
    nlink: int
    uid: int
    gid: int
    blocks: int
    atime_ns: int
    mtime_ns: int
    ctime_ns: int
    symlink_target: str = ""

    @property
    def is_file(self) -> bool:
        """True for a regular file."""
        return self.kind == "file"

    @property
    def is_dir(self) -> bool:
        """True for a directory."""
        return self.kind == "directory"

    @property
    def is_symlink(self) -> bool:
        """True for a symbolic link."""
        return self.kind == "symlink"

    @property
    def mtime(self) -> datetime:
        """Last modification time (UTC)."""
        return _time(self.mtime_ns)

    @property
    def atime(self) -> datetime:
        """Last access time (UTC)."""
        return _time(self.atime_ns)

    @property
    def ctime(self) -> datetime:
        """Last status change time (UTC)."""
        return _time(self.ctime_ns)

    def filemode(self) -> str:
        """``ls -l`` style mode string, ``"-rw-r--r--"``."""
        return _stat.filemode(self.mode)

    @staticmethod
    def from_proto(m: pb.FileInfo, path: str) -> FileInfo:
        return FileInfo(
            path=path,
            kind=_KINDS.get(m.kind, "unknown"),
            size=m.size,
            perm=m.perm,
            mode=m.mode,
            ino=m.ino,
            nlink=m.nlink,
            uid=m.uid,
            gid=m.gid,
            blocks=m.blocks,
            atime_ns=m.atime_unix_nanos,
            mtime_ns=m.mtime_unix_nanos,
            ctime_ns=m.ctime_unix_nanos,
            symlink_target=m.symlink_target,
        )


@dataclass(frozen=True)
class DirEntry:
    """One directory entry.

    Attributes:
        name: the entry's name (non-UTF-8 bytes shown as U+FFFD).
        name_bytes: the exact name as bytes.
        kind: as :attr:`FileInfo.kind`.
        ino: inode number.
        info: the entry's attributes (not following symlinks) when the
            listing asked for them, else ``None``.
    """

    name: str
    name_bytes: bytes
    kind: str
    ino: int
    info: Optional[FileInfo] = None

    @property
    def is_dir(self) -> bool:
        """True for a directory."""
        return self.kind == "directory"

    @staticmethod
    def from_proto(m: pb.DirEntry, parent: str) -> DirEntry:
        path = f"{parent.rstrip('/')}/{m.name}" if parent not in ("", ".") else m.name
        return DirEntry(
            name=m.name,
            name_bytes=m.name_bytes or m.name.encode(),
            kind=_KINDS.get(m.kind, "unknown"),
            ino=m.ino,
            info=FileInfo.from_proto(m.info, path) if m.HasField("info") else None,
        )


class GlobResult(List[str]):
    """Paths matching a glob pattern: a list of paths relative to
    ``/workspace``, sorted.

    Attributes:
        truncated: True when ``max_results`` cut the list short.
    """

    def __init__(self, paths: Iterable[str] = (), *, truncated: bool = False) -> None:
        super().__init__(paths)
        self.truncated = truncated


@dataclass(frozen=True)
class GrepMatch:
    """One matching line.

    Attributes:
        path: the file, relative to ``/workspace``.
        line_number: 1-based.
        line: the line without its newline (lossy UTF-8, at most 4096 bytes).
    """

    path: str
    line_number: int
    line: str


@dataclass(frozen=True)
class ShareLink:
    """A signed, expiring download link to one file (the API's Share).

    Attributes:
        url: the link; anyone holding it can download the file until it
            expires, or until the computer is deleted (or, in a cluster, its
            credential rotated).
        expires_unix_seconds: when it stops working, seconds since the epoch.
        path: the shared path, normalised (relative to ``/workspace``).
    """

    url: str
    expires_unix_seconds: int
    path: str

    @staticmethod
    def from_proto(m: pb.ShareResponse) -> ShareLink:
        return ShareLink(url=m.url, expires_unix_seconds=m.expires_unix_seconds, path=m.path)


@dataclass(frozen=True)
class BackupCheck:
    """What :meth:`Computer.verify_backup` restored and checked.

    Attributes:
        snapshot_position: the log position of the snapshot it started from.
        position: the latest log position applied.
        database_bytes: size of the restored database.
        duration_ms: time taken by the restore and its checks.
    """

    snapshot_position: int
    position: int
    database_bytes: int
    duration_ms: int

    @staticmethod
    def from_proto(m: pb.VerifyBackupResponse) -> BackupCheck:
        return BackupCheck(
            snapshot_position=m.snapshot_position,
            position=m.position,
            database_bytes=m.database_bytes,
            duration_ms=m.duration_ms,
        )


@dataclass(frozen=True)
class Statfs:
    """Filesystem-wide usage and limits of one computer, like statfs(2).

    Attributes:
        block_size: bytes per block of the block counts.
        blocks, blocks_free: quota and free space in blocks.
        files, files_free: inode quota and free inodes.
        used_bytes, used_inodes: usage now.
        name_max: longest file name in bytes.
    """

    block_size: int
    blocks: int
    blocks_free: int
    files: int
    files_free: int
    used_bytes: int
    used_inodes: int
    name_max: int

    @staticmethod
    def from_proto(m: pb.StatfsResponse) -> Statfs:
        return Statfs(
            block_size=m.block_size,
            blocks=m.blocks,
            blocks_free=m.blocks_free,
            files=m.files,
            files_free=m.files_free,
            used_bytes=m.used_bytes,
            used_inodes=m.used_inodes,
            name_max=m.name_max,
        )


# ------------------------------------------------------------------ exec


@dataclass(frozen=True)
class ExecStdout:
    """A piece of the run's standard output, as it was produced."""

    data: bytes


@dataclass(frozen=True)
class ExecStderr:
    """A piece of the run's standard error, as it was produced."""

    data: bytes


@dataclass(frozen=True)
class ExecExit:
    """The end of a run; always the last event.

    Attributes:
        code: the exit status (``$?``); for JavaScript 0, 1 for an uncaught
            error or a limit, or the code given to ``process.exit``.
        error: why the run did not finish normally (timeout, output cap,
            runtime failure, an uncaught JS error), or ``""``.
        result_json: JavaScript only: the JSON of the default export's
            awaited return value, else ``""``.
        duration_ms: wall-clock duration in milliseconds.
        runtime: the runtime that ran the program (``"shell"``,
            ``"javascript"``, ``"container"``; for ``runtime="auto"`` the one
            it chose), or ``""`` from an agent that does not say.
        runtime_reason: ``runtime="auto"`` only: why that runtime
            (``"python3 is not a shell runtime command"``), else ``""``.
    """

    code: int
    error: str
    result_json: str
    duration_ms: int
    runtime: str = ""
    runtime_reason: str = ""

    @staticmethod
    def from_proto(m: pb.ExecExit) -> ExecExit:
        return ExecExit(
            code=m.code,
            error=m.error,
            result_json=m.result_json,
            duration_ms=m.duration_ms,
            runtime=m.runtime,
            runtime_reason=m.runtime_reason,
        )


ExecEvent = Union[ExecStdout, ExecStderr, ExecExit]
"""One event of :meth:`Computer.exec_stream`: output, then one exit."""


@dataclass(frozen=True)
class ExecResult:
    """The whole of a finished run.

    Attributes:
        stdout_bytes, stderr_bytes: the output as bytes.
        exit_code: the exit status (``$?``).
        error: why the run did not finish normally (``"timeout ..."``,
            output cap, runtime failure), or ``""`` for a normal exit.
        result_json: JavaScript only: the JSON of the returned value.
        duration_ms: wall-clock duration in milliseconds.
        runtime: the runtime that ran it (for ``runtime="auto"`` the one it
            chose).
        runtime_reason: ``runtime="auto"`` only: why that runtime.
    """

    stdout_bytes: bytes
    stderr_bytes: bytes
    exit_code: int
    error: str = ""
    result_json: str = ""
    duration_ms: int = 0
    runtime: str = ""
    runtime_reason: str = ""
    _events: tuple[ExecEvent, ...] = field(default=(), repr=False, compare=False)

    @property
    def stdout(self) -> str:
        """Standard output as text (UTF-8; undecodable bytes become U+FFFD)."""
        return self.stdout_bytes.decode("utf-8", errors="replace")

    @property
    def stderr(self) -> str:
        """Standard error as text (UTF-8; undecodable bytes become U+FFFD)."""
        return self.stderr_bytes.decode("utf-8", errors="replace")

    @property
    def ok(self) -> bool:
        """True when the run exited with code 0 and no error."""
        return self.exit_code == 0 and not self.error

    @property
    def result(self) -> Any:
        """JavaScript only: the returned value, parsed from ``result_json``
        (``None`` when empty).

        Raises:
            ProtocolError: ``result_json`` is not JSON (or nests too deep
                to parse); the message shows its first bytes.
        """
        from ._guard import parse_result_json

        return parse_result_json(self.result_json)

    def __str__(self) -> str:
        return self.stdout

    @staticmethod
    def collect(events: list[ExecEvent]) -> ExecResult:
        """Joins a run's events into its result (everything up to the first
        exit event; no cap). Raises ProtocolError when there is no exit
        event."""
        out = bytearray()
        err = bytearray()
        for e in events:
            if isinstance(e, ExecStdout):
                out += e.data
            elif isinstance(e, ExecStderr):
                err += e.data
            elif isinstance(e, ExecExit):
                return ExecResult(
                    stdout_bytes=bytes(out),
                    stderr_bytes=bytes(err),
                    exit_code=e.code,
                    error=e.error,
                    result_json=e.result_json,
                    duration_ms=e.duration_ms,
                )
        raise ProtocolError("the exec stream ended without an exit event")


@dataclass(frozen=True)
class Snapshot:
    """One snapshot of a computer: a named position of its backup log.

    Attributes:
        name: unique among the snapshots of the agent's backup store.
        computer: the computer it was taken of.
        position: the backup log position it names.
        created_unix_nanos: when it was taken.
        database_bytes: size of the computer's database then.
        own_bytes: bytes of the log only this snapshot needs (what deleting
            it releases); 0 until the log gets a newer full copy.
        duration_ms: time taken to take it (0 when listed).
    """

    name: str
    computer: str
    position: int
    created_unix_nanos: int
    database_bytes: int
    own_bytes: int
    duration_ms: int

    @staticmethod
    def from_proto(m: pb.SnapshotInfo) -> Snapshot:
        return Snapshot(
            name=m.name,
            computer=m.computer,
            position=m.position,
            created_unix_nanos=m.created_unix_nanos,
            database_bytes=m.database_bytes,
            own_bytes=m.own_bytes,
            duration_ms=m.duration_ms,
        )


@dataclass(frozen=True)
class Restored:
    """What :meth:`Computer.restore` did.

    Attributes:
        before: the snapshot taken first; restoring to it undoes the restore.
        restored: what the computer was brought back to (``name`` empty for
            a point in time).
        ended_runs: calls and runs that were using the computer and were ended.
        duration_ms: time the restore took.
    """

    before: Snapshot
    restored: Snapshot
    ended_runs: int
    duration_ms: int

    @staticmethod
    def from_proto(m: pb.RestoreComputerResponse) -> Restored:
        return Restored(
            before=Snapshot.from_proto(m.before),
            restored=Snapshot.from_proto(m.restored),
            ended_runs=m.ended_runs,
            duration_ms=m.duration_ms,
        )


@dataclass(frozen=True)
class Published:
    """What :meth:`Computer.publish` did.

    Attributes:
        commit: the commit the remote branch now points at (40 hex digits).
        committed: whether this call made a commit (``False``: nothing had
            changed since the last one, which was pushed again).
        branch: the remote branch.
        output: what git printed (the agent leaves credentials out).
    """

    commit: str
    committed: bool
    branch: str
    output: str

    @staticmethod
    def from_proto(m: pb.PublishResponse) -> Published:
        return Published(commit=m.commit, committed=m.committed, branch=m.branch, output=m.output)


def restore_request(computer: str, snapshot: Optional[str], at: Optional[float]) -> pb.RestoreComputerRequest:
    """The request of a restore to ``snapshot`` or to time ``at`` (seconds
    since the epoch); exactly one must be given."""
    if (snapshot is None) == (at is None):
        raise ValueError("restore needs exactly one of snapshot= and at=")
    return pb.RestoreComputerRequest(
        computer=computer,
        snapshot=snapshot or "",
        unix_nanos=int(at * 1_000_000_000) if at is not None else 0,
    )


def create_from_request(name: str, snapshot: Optional[str], computer: Optional[str]) -> pb.CreateComputerFromRequest:
    """The request of a copy of ``snapshot`` or of ``computer`` (a fork);
    exactly one must be given."""
    if (snapshot is None) == (computer is None):
        raise ValueError("create_computer_from needs exactly one of snapshot= and computer=")
    if snapshot is not None:
        return pb.CreateComputerFromRequest(name=name, snapshot=snapshot)
    return pb.CreateComputerFromRequest(name=name, computer=computer)


def import_pieces(name: str, data: Iterator[bytes]) -> Iterator[pb.ImportComputerRequest]:
    """The ImportComputer messages for a database file given in pieces."""
    offset = 0
    first = True
    for piece in data:
        if not piece and not first:
            continue
        yield pb.ImportComputerRequest(name=name if first else "", offset=offset, data=piece)
        offset += len(piece)
        first = False
    if first:
        yield pb.ImportComputerRequest(name=name, offset=0, data=b"")
