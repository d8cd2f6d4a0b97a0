"""A hostile node agent: the AgentComputer gRPC service (the package's own
generated stubs) answering with the ways a broken or malicious server can
misbehave, for the tests that check the client does not trust it.

The misbehaviour is chosen by the request: the ``computer`` name for Exec,
Backup, ReadDir, Glob, Share and Grep, the ``path`` for Read and Stat (see
the ``*_CASES`` comments below). Every flood is bounded (:data:`FLOOD_BYTES`)
and every stall ends after :data:`STALL_SECONDS` or when the client goes
away, so a client that fails to defend itself makes a test fail, never
hang the machine. The server listens on 127.0.0.1 only, on a free port.
"""

from __future__ import annotations

import time
from concurrent import futures
from typing import Any, Iterator

import grpc

from agentcomputer.v1 import agentcomputer_pb2 as pb
from agentcomputer.v1 import agentcomputer_pb2_grpc as pb_grpc

MiB = 1024 * 1024
#: The most any flood sends, in bytes.
FLOOD_BYTES = 64 * MiB
#: The longest any stall lasts, in seconds.
STALL_SECONDS = 20.0


def _stall(context: Any) -> None:
    """Sleeps until the client goes away, at most STALL_SECONDS."""
    end = time.monotonic() + STALL_SECONDS
    while context.is_active() and time.monotonic() < end:
        time.sleep(0.02)


def _exit(code: int = 0, result_json: str = "") -> pb.ExecEvent:
    return pb.ExecEvent(exit=pb.ExecExit(code=code, result_json=result_json, duration_ms=1))


class Hostile(pb_grpc.AgentComputerServicer):  # type: ignore[misc]
    """The service; see the module's docstring."""

    # Exec, by computer name: "flood" (stdout past any cap, up to
    # FLOOD_BYTES), "flood-stderr" (the same on stderr), "hang" (one line,
    # then never the end), "bad-json", "deep-json" (nesting past Python's
    # recursion limit), "huge-json" (past the API's result limit), "no-exit",
    # "empty-event", "after-exit"; anything else: a well-behaved "hi\n" run.
    def Exec(self, request: pb.ExecRequest, context: Any) -> Iterator[pb.ExecEvent]:
        case = request.computer
        if case in ("flood", "flood-stderr"):
            piece = b"x" * MiB
            for _ in range(FLOOD_BYTES // MiB):
                if not context.is_active():
                    return
                yield pb.ExecEvent(stderr=piece) if case == "flood-stderr" else pb.ExecEvent(stdout=piece)
            yield _exit()
        elif case == "hang":
            yield pb.ExecEvent(stdout=b"started\n")
            _stall(context)
        elif case == "bad-json":
            yield _exit(result_json='{"answer": 42, oops')
        elif case == "deep-json":
            yield _exit(result_json="[" * 200_000 + "]" * 200_000)
        elif case == "huge-json":
            yield _exit(result_json='"' + "a" * (4 * MiB - 32 * 1024) + '"')
        elif case == "no-exit":
            yield pb.ExecEvent(stdout=b"partial\n")
        elif case == "empty-event":
            yield pb.ExecEvent()
        elif case == "after-exit":
            yield _exit()
            yield pb.ExecEvent(stdout=b"after the end\n")
        else:
            yield pb.ExecEvent(stdout=b"hi\n")
            yield _exit(result_json='{"ok": true}')

    # Read, by path: "gap" (the second chunk skips bytes), "wrong-start"
    # (the first chunk is not at the asked offset), "overlap" (the second
    # chunk repeats bytes), "endless" (1 MiB chunks past the asked length,
    # up to FLOOD_BYTES), "big-chunk" (one chunk of 2 MiB), "empty-chunks"
    # (empty chunks, up to 100000), "stall" (one chunk, then nothing);
    # anything else: the asked range of a file of 3000 bytes "0123456789..."
    # in chunks of 1000.
    def Read(self, request: pb.ReadRequest, context: Any) -> Iterator[pb.ReadChunk]:
        case = request.path
        at = request.offset
        if case == "gap":
            yield pb.ReadChunk(offset=at, data=b"a" * 10)
            yield pb.ReadChunk(offset=at + 20, data=b"b" * 10)
        elif case == "wrong-start":
            yield pb.ReadChunk(offset=at + 5, data=b"a" * 10)
        elif case == "overlap":
            yield pb.ReadChunk(offset=at, data=b"a" * 10)
            yield pb.ReadChunk(offset=at + 5, data=b"b" * 10)
        elif case == "endless":
            piece = b"e" * MiB
            for i in range(FLOOD_BYTES // MiB):
                if not context.is_active():
                    return
                yield pb.ReadChunk(offset=at + i * MiB, data=piece)
        elif case == "big-chunk":
            yield pb.ReadChunk(offset=at, data=b"b" * (2 * MiB))
        elif case == "empty-chunks":
            for _ in range(100_000):
                if not context.is_active():
                    return
                yield pb.ReadChunk(offset=at, data=b"")
        elif case == "stall":
            yield pb.ReadChunk(offset=at, data=b"s" * 10)
            _stall(context)
        else:
            content = b"".join(b"%d" % (i % 10) for i in range(3000))
            end = len(content) if request.length == 0 else min(len(content), at + request.length)
            while at < end:
                n = min(1000, end - at)
                yield pb.ReadChunk(offset=at, data=content[at : at + n])
                at += n

    # Backup, by computer name: "backup-short" (ends before total_bytes),
    # "backup-over" (more than total_bytes), "backup-total-changes";
    # anything else: 3 chunks of 100 bytes, total 300.
    def Backup(self, request: pb.BackupRequest, context: Any) -> Iterator[pb.BackupChunk]:
        case = request.computer
        if case == "backup-short":
            yield pb.BackupChunk(offset=0, data=b"d" * 100, total_bytes=300)
        elif case == "backup-over":
            for i in range(4):
                yield pb.BackupChunk(offset=i * 100, data=b"d" * 100, total_bytes=300)
        elif case == "backup-total-changes":
            yield pb.BackupChunk(offset=0, data=b"d" * 100, total_bytes=300)
            yield pb.BackupChunk(offset=100, data=b"d" * 100, total_bytes=200)
        else:
            for i in range(3):
                yield pb.BackupChunk(offset=i * 100, data=b"d" * 100, total_bytes=300)

    # Write, by computer name: "write-no-answer" (takes every message,
    # then never answers), "write-no-read" (takes nothing); anything else:
    # takes the upload and answers with its size.
    def Write(self, request_iterator: Iterator[pb.WriteRequest], context: Any) -> pb.WriteResponse:
        header = next(request_iterator)
        case = header.header.computer
        if case == "write-no-read":
            _stall(context)
            return pb.WriteResponse()
        n = 0
        for m in request_iterator:
            n += len(m.data)
        if case == "write-no-answer":
            _stall(context)
        return pb.WriteResponse(info=pb.FileInfo(kind=pb.FILE_KIND_REGULAR, size=n))

    # Grep, by computer name: "grep-many" (2000 matches whatever was asked),
    # "grep-escape" (a path out of /workspace), "grep-stall"; anything
    # else: one match.
    def Grep(self, request: pb.GrepRequest, context: Any) -> Iterator[pb.GrepMatch]:
        case = request.computer
        if case == "grep-many":
            for i in range(2000):
                if not context.is_active():
                    return
                yield pb.GrepMatch(path="a.txt", line_number=i + 1, line="match")
        elif case == "grep-escape":
            yield pb.GrepMatch(path="../../home/user/.bashrc", line_number=1, line="x")
        elif case == "grep-stall":
            yield pb.GrepMatch(path="a.txt", line_number=1, line="match")
            _stall(context)
        else:
            yield pb.GrepMatch(path="a.txt", line_number=1, line="match")

    # ReadDir, by computer name: "dir-escape" (an entry named "../x"),
    # "dir-slash" (an entry named "a/b"), "dir-loop" (the same page token
    # back), "dir-cycle" (page tokens a, b, a, b, ... for ever),
    # "dir-big-page" (more entries than the page size asked);
    # anything else: two entries.
    def ReadDir(self, request: pb.ReadDirRequest, context: Any) -> pb.ReadDirResponse:
        case = request.computer
        if case == "dir-escape":
            return pb.ReadDirResponse(entries=[pb.DirEntry(name="..", kind=pb.FILE_KIND_DIRECTORY, ino=1)])
        if case == "dir-slash":
            return pb.ReadDirResponse(entries=[pb.DirEntry(name="a/b", kind=pb.FILE_KIND_REGULAR, ino=2)])
        if case == "dir-loop":
            return pb.ReadDirResponse(
                entries=[pb.DirEntry(name="x", kind=pb.FILE_KIND_REGULAR, ino=2)], next_page_token="7"
            )
        if case == "dir-cycle":
            token = "b" if request.page_token == "a" else "a"
            return pb.ReadDirResponse(
                entries=[pb.DirEntry(name=f"x{token}", kind=pb.FILE_KIND_REGULAR, ino=2)],
                next_page_token=token,
            )
        if case == "dir-big-page":
            n = (request.page_size or 1000) + 1
            return pb.ReadDirResponse(
                entries=[pb.DirEntry(name=f"f{i}", kind=pb.FILE_KIND_REGULAR, ino=i + 2) for i in range(n)]
            )
        return pb.ReadDirResponse(
            entries=[
                pb.DirEntry(name="a.txt", kind=pb.FILE_KIND_REGULAR, ino=2),
                pb.DirEntry(name="sub", kind=pb.FILE_KIND_DIRECTORY, ino=3),
            ]
        )

    # Glob, by computer name: "glob-escape" (a path out of /workspace),
    # "glob-absolute" (an absolute path), "glob-many" (past max_results).
    def Glob(self, request: pb.GlobRequest, context: Any) -> pb.GlobResponse:
        case = request.computer
        if case == "glob-escape":
            return pb.GlobResponse(paths=["ok.txt", "src/../../etc/passwd"])
        if case == "glob-absolute":
            return pb.GlobResponse(paths=["/etc/passwd"])
        if case == "glob-many":
            n = (request.max_results or 10000) + 1
            return pb.GlobResponse(paths=[f"f{i}" for i in range(n)])
        return pb.GlobResponse(paths=["a.txt", "src/b.txt"])

    # Stat, by path: "bad-errno" (a failure whose errno metadata names no
    # errno); anything else: a file.
    def Stat(self, request: pb.StatRequest, context: Any) -> pb.FileInfo:
        if request.path == "bad-errno":
            context.set_trailing_metadata((("errno", "__class__"),))
            context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")
        t = 1_700_000_000 * 10**9
        return pb.FileInfo(
            kind=pb.FILE_KIND_REGULAR,
            size=5,
            perm=0o644,
            mode=0o100644,
            ino=2,
            nlink=1,
            atime_unix_nanos=t,
            mtime_unix_nanos=t,
            ctime_unix_nanos=t,
        )

    # Share, by computer name: "share-file" (a file:// URL), "share-path"
    # (a shared path out of /workspace), "share-expiry" (an expiry other
    # than the link's); anything else: a good link.
    def Share(self, request: pb.ShareRequest, context: Any) -> pb.ShareResponse:
        case = request.computer
        expires = int(time.time()) + 3600
        url = f"http://127.0.0.1:1/share/v1/{case}/{request.path}?expires={expires}&sig=abc"
        if case == "share-file":
            return pb.ShareResponse(url="file:///etc/passwd", expires_unix_seconds=expires, path=request.path)
        if case == "share-path":
            return pb.ShareResponse(url=url, expires_unix_seconds=expires, path="../../etc/passwd")
        if case == "share-expiry":
            return pb.ShareResponse(url=url, expires_unix_seconds=expires + 10**6, path=request.path)
        return pb.ShareResponse(url=url, expires_unix_seconds=expires, path=request.path)


class HostileServer:
    """The hostile service on 127.0.0.1, a free port; :attr:`endpoint` is
    its URL. :meth:`stop` ends it."""

    def __init__(self) -> None:
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=16),
            options=[("grpc.max_send_message_length", 8 * MiB)],
        )
        pb_grpc.add_AgentComputerServicer_to_server(Hostile(), self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"http://127.0.0.1:{port}"
        self.server.start()

    def stop(self) -> None:
        self.server.stop(grace=None)
