"""The checks of what the agent sends, as pure functions: the edges the
hostile server does not reach."""

from __future__ import annotations

import pytest

from agentcomputer import ProtocolError
from agentcomputer import _guard as g
from agentcomputer.v1 import agentcomputer_pb2 as pb


@pytest.mark.parametrize("path", ["a.txt", "src/b.rs", "..hidden", "a/..b/c", "a..", ""])
def test_relative_paths_that_stay_in_workspace(path: str) -> None:
    assert g.relative_path(path, "glob") == path


@pytest.mark.parametrize("path", ["/etc/passwd", "..", "../x", "a/../../b", "a/..", "a\0b"])
def test_paths_that_leave_workspace(path: str) -> None:
    with pytest.raises(ProtocolError):
        g.relative_path(path, "glob")


@pytest.mark.parametrize("name, ok", [("a", True), ("...", True), (".", False), ("", False), ("a\0", False)])
def test_entry_names(name: str, ok: bool) -> None:
    entry = pb.DirEntry(name=name)
    if ok:
        g.entry_name(entry)
    else:
        with pytest.raises(ProtocolError):
            g.entry_name(entry)
    # The exact bytes are checked too: a lossy name may hide a slash.
    with pytest.raises(ProtocolError):
        g.entry_name(pb.DirEntry(name="a\ufffdb", name_bytes=b"a/\xffb"))


def test_result_json() -> None:
    assert g.parse_result_json("") is None
    assert g.parse_result_json('{"a": [1, 2.5, null]}') == {"a": [1, 2.5, None]}
    for bad in ("NaN", "[Infinity]", "{", "1 2", "[" * 100_000 + "]" * 100_000):
        with pytest.raises(ProtocolError) as e:
            g.parse_result_json(bad)
        assert repr(bad[:20])[:-1] in str(e.value) and len(str(e.value)) < 400


def test_read_sequence_from_an_offset() -> None:
    seq = g.ReadSequence("f", 100, 15)
    assert seq.chunk(100, b"x" * 10) == b"x" * 10
    assert seq.chunk(110, b"y" * 5) == b"y" * 5
    with pytest.raises(ProtocolError, match="more than the 15 bytes asked"):
        seq.chunk(115, b"z")
    # Reading to the end: no length to pass.
    to_end = g.ReadSequence("f", 0, 0)
    for i in range(5):
        to_end.chunk(i * g.MAX_CHUNK_BYTES, b"\0" * g.MAX_CHUNK_BYTES)


def test_limits_and_deadlines() -> None:
    assert g.output_limit(0) == 16 * 1024 * 1024 + 64 * 1024
    assert g.output_limit(10) == 10 + 64 * 1024
    assert g.exec_deadline(None, 30) == 3630
    assert g.exec_deadline(5, 1.5) == 6.5
    assert g.exec_deadline(5, None) is None
    assert g.page_size(0) == 1000 and g.page_size(7) == 7 and g.page_size(50_000) == 10_000


def test_share_links() -> None:
    good = pb.ShareResponse(url="https://h:1/share/v1/c/a.txt?expires=5&sig=x", expires_unix_seconds=5, path="a.txt")
    g.share_response(good)
    for url in ("javascript:alert(1)", "http:///share?expires=5", "https://h/share?expires=6", "https://h/share"):
        with pytest.raises(ProtocolError):
            g.share_response(pb.ShareResponse(url=url, expires_unix_seconds=5, path="a.txt"))
