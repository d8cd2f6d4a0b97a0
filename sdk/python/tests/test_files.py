"""Files: read and write (bytes, text, streamed), stat, ls, mkdir, rm,
rename, symlinks, chmod, glob, grep, statfs, backup."""

from __future__ import annotations

import time

import hashlib
import io
import os
import sqlite3
from pathlib import Path

import pytest

import agentcomputer


def test_bytes_and_text(computer: agentcomputer.Computer) -> None:
    info = computer.write("a.bin", bytes(range(256)))
    assert info.size == 256 and info.is_file
    assert computer.read_bytes("a.bin") == bytes(range(256))
    assert computer.read_bytes("a.bin", offset=250) == bytes(range(250, 256))
    assert computer.read_bytes("a.bin", offset=10, length=3) == bytes([10, 11, 12])
    assert computer.read_bytes("a.bin", offset=1000) == b""

    computer.write_text("t.txt", "héllo wörld\n")
    assert computer.read_text("t.txt") == "héllo wörld\n"
    assert computer.stat("t.txt").size == len("héllo wörld\n".encode())
    computer.write_text("latin.txt", "é", encoding="latin-1")
    assert computer.read_bytes("latin.txt") == b"\xe9"

    # Absolute paths under /workspace are the same file.
    assert computer.read_text("/workspace/t.txt") == "héllo wörld\n"


def test_write_modes(computer: agentcomputer.Computer) -> None:
    computer.write("m.txt", "0123456789")
    computer.write("m.txt", "ab", mode="create", offset=3)
    assert computer.read_text("m.txt") == "012ab56789"
    computer.append("m.txt", "!")
    assert computer.read_text("m.txt") == "012ab56789!"
    computer.write("m.txt", "new")
    assert computer.read_text("m.txt") == "new"
    with pytest.raises(FileExistsError) as e:
        computer.write("m.txt", "x", mode="exclusive")
    assert e.value.errno_name == "EEXIST"  # type: ignore[attr-defined]
    computer.write("fresh.txt", "x", mode="exclusive", perm=0o600)
    assert computer.stat("fresh.txt").perm == 0o600
    with pytest.raises(ValueError):
        computer.write("m.txt", "x", mode="sideways")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        computer.write("m.txt", "x", offset=5)


def test_write_from_file_objects_and_iterables(computer: agentcomputer.Computer, tmp_path: Path) -> None:
    computer.write("from-io", io.BytesIO(b"abc" * 1000))
    assert computer.read_bytes("from-io") == b"abc" * 1000
    computer.write("from-gen", (bytes([i]) * 10 for i in range(5)))
    assert computer.read_bytes("from-gen") == b"".join(bytes([i]) * 10 for i in range(5))
    with pytest.raises(TypeError):
        computer.write("bad", [1, 2, 3])  # type: ignore[list-item]
    assert not computer.exists("bad")
    local = tmp_path / "up.txt"
    local.write_bytes(b"uploaded\n")
    computer.upload(local, "up.txt")
    out = tmp_path / "down.txt"
    assert computer.download("up.txt", out) == 9
    assert out.read_bytes() == b"uploaded\n"


def test_large_file_streams(computer: agentcomputer.Computer, tmp_path: Path) -> None:
    """6 MiB + 123 bytes go up in 1 MiB messages and come back in chunks of
    at most 1 MiB, byte for byte."""
    size = 6 * 1024 * 1024 + 123
    data = os.urandom(size)
    local = tmp_path / "big.bin"
    local.write_bytes(data)
    info = computer.upload(local, "big.bin")
    assert info.size == size
    chunks = list(computer.iter_read("big.bin"))
    assert len(chunks) >= 7
    assert all(len(c) <= 1024 * 1024 for c in chunks)
    assert hashlib.sha256(b"".join(chunks)).digest() == hashlib.sha256(data).digest()
    # A range across a chunk boundary.
    start = 1024 * 1024 - 10
    assert computer.read_bytes("big.bin", offset=start, length=20) == data[start : start + 20]
    out = tmp_path / "back.bin"
    assert computer.download("big.bin", out) == size
    assert out.read_bytes() == data


def test_stat_and_symlinks(computer: agentcomputer.Computer) -> None:
    computer.write("target.txt", "hello")
    link = computer.symlink("link", "target.txt")
    assert link.is_symlink and link.symlink_target == "target.txt"
    assert computer.readlink("link") == "target.txt"
    assert computer.stat("link").is_file
    assert computer.stat("link").size == 5
    l = computer.lstat("link")
    assert l.is_symlink and l.size == len("target.txt")
    st = computer.stat("target.txt")
    assert st.ino > 1 and st.nlink == 1 and st.mtime_ns > 0
    assert st.filemode() == "-rw-r--r--"
    assert st.mtime.year >= 2024
    assert computer.stat(".").is_dir and computer.stat(".").ino == 1
    assert computer.chmod("target.txt", 0o751).perm == 0o751
    assert computer.stat("target.txt").mode & 0o7777 == 0o751
    assert computer.exists("target.txt") and not computer.exists("nope")


def test_directories(computer: agentcomputer.Computer) -> None:
    computer.mkdir("a")
    assert computer.stat("a").is_dir
    with pytest.raises(FileExistsError):
        computer.mkdir("a")
    with pytest.raises(FileNotFoundError):
        computer.mkdir("x/y/z")
    computer.mkdir("x/y/z", parents=True)
    computer.mkdir("x/y/z", parents=True)  # no error with parents
    assert computer.mkdir("p", perm=0o700).perm == 0o700
    for i in range(25):
        computer.write(f"a/f{i:02}.txt", str(i))
    names = computer.listdir("a")
    assert sorted(names) == [f"f{i:02}.txt" for i in range(25)]
    # Paging: ask for pages of 7 entries, get all 25 once each.
    paged = [e.name for e in computer.iterdir("a", page_size=7)]
    assert sorted(paged) == sorted(names)
    entries = computer.ls("a", with_info=True)
    for e in entries:
        assert e.info is not None and e.info.size == len(str(int(e.name[1:3])))
    assert all(e.kind == "file" and not e.is_dir for e in entries)
    top = {e.name: e for e in computer.ls()}
    assert top["a"].is_dir and top["x"].kind == "directory"

    with pytest.raises(agentcomputer.RemoteOSError) as e:
        computer.rm("a")
    assert e.value.errno_name == "ENOTEMPTY"
    computer.rm("a/f00.txt")
    assert not computer.exists("a/f00.txt")
    computer.rm("a", recursive=True)
    assert not computer.exists("a")


def test_rename(computer: agentcomputer.Computer) -> None:
    computer.write("one", "1")
    computer.write("two", "2")
    computer.rename("one", "uno")
    assert computer.read_text("uno") == "1" and not computer.exists("one")
    with pytest.raises(FileExistsError):
        computer.rename("uno", "two", noreplace=True)
    computer.rename("uno", "two")
    assert computer.read_text("two") == "1"
    with pytest.raises(FileNotFoundError) as e:
        computer.rename("missing", "elsewhere")
    assert e.value.filename == "missing"


def test_glob(computer: agentcomputer.Computer) -> None:
    computer.write("top.py", "x")
    computer.mkdir("src/sub", parents=True)
    for p in ["src/a.py", "src/b.py", "src/sub/c.py", "src/sub/d.txt"]:
        computer.write(p, "x")
    got = computer.glob("src/**/*.py")
    assert list(got) == ["src/a.py", "src/b.py", "src/sub/c.py"]
    assert got.truncated is False
    assert computer.glob("*.py") == ["top.py"]
    cut = computer.glob("src/**/*.py", max_results=2)
    assert len(cut) == 2 and cut.truncated is True


def test_grep(computer: agentcomputer.Computer) -> None:
    computer.mkdir("src", parents=True)
    computer.write("src/main.py", "import os\nprint('Hello')\n# TODO fix\n")
    computer.write("src/lib.rs", "fn main() {}\n// todo: more\n")
    computer.write("notes.md", "TODO list\n")
    computer.write("blob.bin", b"TODO\0binary")
    hits = computer.grep("TODO")
    assert {(m.path, m.line_number) for m in hits} == {("src/main.py", 3), ("notes.md", 1)}
    loose = computer.grep("todo", ignore_case=True)
    assert {m.path for m in loose} == {"src/main.py", "src/lib.rs", "notes.md"}
    only_py = computer.grep("todo", glob="*.py", ignore_case=True)
    assert [(m.path, m.line) for m in only_py] == [("src/main.py", "# TODO fix")]
    in_dir = computer.grep("main", "src")
    assert [m.path for m in in_dir] == ["src/lib.rs"]
    assert len(computer.grep("o", max_matches=2)) == 2
    streamed = list(computer.iter_grep("Hello", "src/main.py"))
    assert streamed == [agentcomputer.GrepMatch("src/main.py", 2, "print('Hello')")]
    with pytest.raises(agentcomputer.AgentComputerError) as e:
        computer.grep("(unclosed")
    assert e.value.code == "INVALID_ARGUMENT"


def test_statfs(computer: agentcomputer.Computer) -> None:
    before = computer.statfs()
    computer.write("f", b"z" * 100_000)
    after = computer.statfs()
    assert after.block_size > 0 and after.name_max >= 255
    assert after.used_bytes >= before.used_bytes + 100_000
    assert after.used_inodes == before.used_inodes + 1
    assert after.files_free == after.files - after.used_inodes


def test_backup_is_a_sqlite_database(computer: agentcomputer.Computer, tmp_path: Path) -> None:
    computer.write("kept.txt", "in the backup")
    out = tmp_path / "fs.db"
    n = computer.backup(out)
    assert n == out.stat().st_size and n > 0
    assert out.read_bytes()[:16] == b"SQLite format 3\0"
    db = sqlite3.connect(out)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        db.close()


def test_share_link_downloads_the_file(computer: agentcomputer.Computer) -> None:
    import urllib.error
    import urllib.request

    computer.write("report.txt", "shared text\n")
    link = computer.share("report.txt", expires_in=60)
    assert link.path == "report.txt"
    assert link.expires_unix_seconds > 0
    with urllib.request.urlopen(link.url, timeout=10) as r:
        assert r.read() == b"shared text\n"
        assert r.headers["Content-Type"].startswith("text/plain")
    tampered = link.url[:-1] + ("0" if link.url[-1] != "0" else "1")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(tampered, timeout=10)
    assert e.value.code == 403
    with pytest.raises(FileNotFoundError):
        computer.share("missing.txt")


def test_share_lifetime_bounds(computer: agentcomputer.Computer) -> None:
    computer.write("r.txt", "x\n")
    # 0 would be read as "unset" by the API (a one-hour link): refused, as
    # are negative, too long and non-numeric lifetimes, before any call.
    for bad in (0, 0.5, -1, -3600, 604_801, float("nan"), True):
        with pytest.raises(ValueError, match="1 to 604800"):
            computer.share("r.txt", expires_in=bad)
    now = time.time()
    assert 0 < computer.share("r.txt", expires_in=1).expires_unix_seconds - now <= 2
    week = computer.share("r.txt", expires_in=604_800).expires_unix_seconds - now
    assert 604_790 < week <= 604_801
    default = computer.share("r.txt").expires_unix_seconds - now
    assert 3590 < default <= 3601



def test_export_then_import_round_trips_a_tree(computer: agentcomputer.Computer) -> None:
    import tarfile

    computer.mkdir("src/pkg", parents=True)
    computer.write_text("src/pkg/a.py", "x = 1\n")
    computer.write("src/big.bin", bytes(range(256)) * 8192)
    archive = b"".join(computer.export_tar("src"))
    names = sorted(m.name for m in tarfile.open(fileobj=io.BytesIO(archive)).getmembers())
    assert any(n.endswith("pkg/a.py") for n in names), names
    computer.mkdir("copy")
    # Fed in small pieces, as a stream would be.
    pieces = (archive[i : i + 65536] for i in range(0, len(archive), 65536))
    entries, data = computer.import_tar("copy", pieces)
    assert entries >= 4 and data == 6 + 256 * 8192
    found = [p for p in ("copy/src/pkg/a.py", "copy/pkg/a.py") if computer.exists(p)]
    assert found, computer.ls("copy")
    assert computer.read_text(found[0]) == "x = 1\n"
    with pytest.raises(FileNotFoundError):
        list(computer.export_tar("no-such-dir"))
