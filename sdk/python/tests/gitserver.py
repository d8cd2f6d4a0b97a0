"""A real git server for the publish tests: ``git http-backend`` run as a
CGI program for each request by :mod:`http.server`, on 127.0.0.1 and an
ephemeral port, serving the bare repositories under a directory. It can
demand one ``Authorization`` value (answering 401 otherwise) and records
the ``Authorization`` of every request. Use it as a context manager: the
server thread stops at the end.
"""

from __future__ import annotations

import base64
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional


def basic(user: str, secret: str) -> str:
    """The ``Authorization`` value of HTTP basic credentials."""
    return "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()


def git(cwd: Path, *args: str) -> str:
    """Runs real git ``args`` in ``cwd``, isolated from the machine's
    configuration; returns its stdout; raises unless it succeeds."""
    home = cwd.parent / ".home"
    home.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "LC_ALL": "C",
    }
    out = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"git {args}: {out.stdout}{out.stderr}")
    return out.stdout


def bare_repo(root: Path, name: str) -> Path:
    """An empty bare repository ``NAME.git`` under ``root`` (branch
    ``main``) that takes pushes over HTTP."""
    bare = root / f"{name}.git"
    bare.mkdir(parents=True)
    git(bare, "init", "-q", "--bare", "-b", "main")
    git(bare, "config", "http.receivepack", "true")
    return bare


class GitServer:
    """``git http-backend`` over HTTP for the repositories under ``root``.

    Attributes:
        port: the port it listens on (127.0.0.1).
        seen: the ``Authorization`` value of each request, in order
            (``None`` for a request without one).
    """

    def __init__(self, root: Path, authorization: Optional[str] = None) -> None:
        self.root = root
        self.authorization = authorization
        self.seen: list[Optional[str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                self.cgi()

            def do_POST(self) -> None:
                self.cgi()

            def body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    data = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return data
                        data += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def reply(self, status: str, headers: list[tuple[str, str]], body: bytes) -> None:
                code, _, reason = status.partition(" ")
                self.send_response(int(code), reason or None)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)
                self.close_connection = True

            def cgi(self) -> None:
                data = self.body()
                given = self.headers.get("Authorization")
                server.seen.append(given)
                if server.authorization is not None and given != server.authorization:
                    self.reply("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="git"')], b"")
                    return
                path, _, query = self.path.partition("?")
                home = server.root / ".home"
                home.mkdir(exist_ok=True)
                env = {
                    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                    "HOME": str(home),
                    "GIT_CONFIG_NOSYSTEM": "1",
                    "GIT_PROJECT_ROOT": str(server.root),
                    "GIT_HTTP_EXPORT_ALL": "1",
                    "REMOTE_USER": "tester",
                    "REMOTE_ADDR": "127.0.0.1",
                    "REQUEST_METHOD": self.command,
                    "PATH_INFO": path,
                    "QUERY_STRING": query,
                    "CONTENT_LENGTH": str(len(data)),
                    "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                }
                for header, var in (("Git-Protocol", "GIT_PROTOCOL"), ("Content-Encoding", "HTTP_CONTENT_ENCODING")):
                    if self.headers.get(header):
                        env[var] = self.headers[header]
                out = subprocess.run(
                    ["git", "http-backend"], input=data, env=env, capture_output=True, timeout=60
                ).stdout
                head, sep, rest = out.partition(b"\r\n\r\n")
                if not sep:
                    head, sep, rest = out.partition(b"\n\n")
                status = "200 OK"
                headers = []
                for line in head.decode("latin-1").splitlines():
                    name, _, value = line.partition(":")
                    if name.lower() == "status":
                        status = value.strip()
                    elif name:
                        headers.append((name.strip(), value.strip()))
                self.reply(status, headers, rest)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def url(self, path: str) -> str:
        """``http://127.0.0.1:PORT/PATH``."""
        return f"http://127.0.0.1:{self.port}/{path}"

    def close(self) -> None:
        """Stops serving and waits for the server thread."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(10)

    def __enter__(self) -> GitServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
