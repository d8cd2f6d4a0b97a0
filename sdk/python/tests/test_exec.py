"""Exec: results, streaming events, timeout, stdin, env, cwd, JavaScript."""

from __future__ import annotations

import os
import shutil
import time

import pytest

import agentcomputer
from agentcomputer import ExecExit, ExecStderr, ExecStdout


def test_result_object(computer: agentcomputer.Computer) -> None:
    computer.write("notes.txt", "hello\n")
    r = computer.exec("wc -c notes.txt")
    assert r.stdout == "6 notes.txt\n"
    assert r.stdout_bytes == b"6 notes.txt\n"
    assert r.exit_code == 0 and r.ok and r.error == ""
    assert str(r) == r.stdout

    r = computer.exec("echo out; echo err >&2; exit 3")
    assert (r.stdout, r.stderr, r.exit_code, r.ok) == ("out\n", "err\n", 3, False)
    with pytest.raises(agentcomputer.ExecError) as e:
        computer.exec("echo boom >&2; exit 7", check=True)
    assert e.value.result.exit_code == 7  # type: ignore[attr-defined]
    assert "exit code 7" in str(e.value) and "boom" in str(e.value)


def test_stdin_env_cwd(computer: agentcomputer.Computer) -> None:
    assert computer.exec("cat", stdin="from stdin").stdout == "from stdin"
    assert computer.exec("wc -c", stdin=b"\x00\x01\x02").stdout.strip() == "3"
    r = computer.exec('echo "$GREETING $WHO"', env={"GREETING": "hi", "WHO": "there"})
    assert r.stdout == "hi there\n"
    computer.mkdir("sub/dir", parents=True)
    assert computer.exec("pwd", cwd="sub/dir").stdout == "/workspace/sub/dir\n"
    assert computer.exec("pwd").stdout == "/workspace\n"
    # The run's writes are the computer's files.
    computer.exec("echo made > made.txt", cwd="sub")
    assert computer.read_text("sub/made.txt") == "made\n"


def test_timeout(computer: agentcomputer.Computer) -> None:
    start = time.monotonic()
    r = computer.exec("echo before; sleep 30; echo after", timeout=0.5)
    elapsed = time.monotonic() - start
    assert elapsed < 10
    assert r.stdout == "before\n"
    assert r.error != "" and not r.ok
    assert "tim" in r.error.lower()
    with pytest.raises(ValueError):
        computer.exec("true", timeout=0)
    with pytest.raises(agentcomputer.AgentComputerError) as e:
        computer.exec("true", timeout=7200)
    assert e.value.code == "INVALID_ARGUMENT"


def test_output_cap(computer: agentcomputer.Computer) -> None:
    r = computer.exec("for i in $(seq 1 2000); do echo line-$i; done", max_output_bytes=1000)
    assert len(r.stdout_bytes) <= 1000
    assert r.error != ""


def test_the_agents_cap_is_within_what_exec_gathers(computer: agentcomputer.Computer) -> None:
    """The agent cuts a run's output at its cap and may add its own notice;
    exec() accepts that (the cap plus its allowance) and no more."""
    allowance = agentcomputer.OUTPUT_ALLOWANCE_BYTES
    r = computer.exec("yes abcdefghijklmnop | head -c 18000000")
    assert len(r.stdout_bytes) == agentcomputer.DEFAULT_MAX_OUTPUT_BYTES and r.exit_code == 141
    assert len(r.stdout_bytes) + len(r.stderr_bytes) <= agentcomputer.DEFAULT_MAX_OUTPUT_BYTES + allowance
    both = "for i in $(seq 1 20000); do echo out-$i; echo err-$i >&2; done"
    r = computer.exec(both, max_output_bytes=100_000)
    assert 90_000 < len(r.stdout_bytes) + len(r.stderr_bytes) <= 100_000 + allowance and r.error
    js = "console.log('x'.repeat(200000)); console.error('y'.repeat(200000))"
    r = computer.exec(js, runtime="javascript", max_output_bytes=100_000)
    assert len(r.stdout_bytes) == 100_000 and r.error
    assert len(r.stdout_bytes) + len(r.stderr_bytes) <= 100_000 + allowance


def test_stream_events_arrive_as_produced(computer: agentcomputer.Computer) -> None:
    seen: list[tuple[float, agentcomputer.ExecEvent]] = []
    start = time.monotonic()
    with computer.exec_stream("echo first; echo warn >&2; sleep 1; echo second; exit 4") as stream:
        for event in stream:
            seen.append((time.monotonic() - start, event))
    kinds = [type(e).__name__ for _, e in seen]
    assert kinds[-1] == "ExecExit" and kinds.count("ExecExit") == 1
    outs = [(t, e.data) for t, e in seen if isinstance(e, ExecStdout)]
    errs = [e.data for _, e in seen if isinstance(e, ExecStderr)]
    assert b"".join(d for _, d in outs) == b"first\nsecond\n"
    assert b"".join(errs) == b"warn\n"
    exit_time, exit_event = seen[-1]
    assert isinstance(exit_event, ExecExit) and exit_event.code == 4
    assert stream.exit == exit_event
    # "first" came before the sleep ended, not with the exit.
    assert outs[0][1].startswith(b"first")
    assert exit_time - outs[0][0] >= 0.7


def test_stream_cancel_stops_the_run(computer: agentcomputer.Computer) -> None:
    stream = computer.exec_stream("echo started; sleep 30; echo never > never.txt")
    it = iter(stream)
    first = next(it)
    assert isinstance(first, ExecStdout) and first.data == b"started\n"
    stream.cancel()
    # The iteration ends without an error, and without an exit event.
    assert list(it) == []
    assert stream.cancelled and stream.exit is None
    time.sleep(0.5)
    assert not computer.exists("never.txt")


def test_stream_cancel_inside_the_loop_ends_it(computer: agentcomputer.Computer) -> None:
    seen = []
    with computer.exec_stream("echo a; sleep 30; echo never > never.txt") as stream:
        for event in stream:
            seen.append(event)
            stream.cancel()
    assert [type(e).__name__ for e in seen] == ["ExecStdout"]
    assert stream.exit is None
    # A run that ended is not affected by a late cancel().
    done = computer.exec_stream("echo b")
    events = list(done)
    done.cancel()
    assert isinstance(events[-1], ExecExit) and done.exit == events[-1]


def test_request_over_the_message_limit(computer: agentcomputer.Computer) -> None:
    with pytest.raises(ValueError) as e:
        computer.exec_stream("true", env={"BIG": "y" * (4 * 1024 * 1024)})
    message = str(e.value)
    assert message.startswith("E2BIG:") and "4194304" in message and "file" in message
    # Just under the limit goes through whole; past it, stdin is streamed.
    fits = b"z" * (4 * 1024 * 1024 - 1024)
    assert computer.exec("wc -c", stdin=fits).stdout.strip() == str(len(fits))
    big = b"x" * (6 * 1024 * 1024)
    assert computer.exec("wc -c", stdin=big).stdout.strip() == str(len(big))


def test_stdin_from_a_file_or_an_iterable_is_streamed(computer: agentcomputer.Computer, tmp_path) -> None:
    import hashlib

    data = os.urandom(12 * 1024 * 1024)
    local = tmp_path / "in.bin"
    local.write_bytes(data)
    with open(local, "rb") as f:
        r = computer.exec("cat > copy.bin", stdin=f, check=True)
    assert r.exit_code == 0
    assert computer.read_bytes("copy.bin") == data

    pieces = (data[i : i + 100_000] for i in range(0, len(data), 100_000))
    r = computer.exec("sha256sum", stdin=pieces, check=True)
    assert r.stdout.split()[0] == hashlib.sha256(data).hexdigest()

    # JavaScript gets its input whole.
    r = computer.exec(
        "export default () => require('fs').readFileSync(0).length",
        runtime="javascript",
        stdin=iter([b"ab", b"cde"]),
    )
    assert r.result == 5


def test_javascript(computer: agentcomputer.Computer) -> None:
    computer.write("data.json", '{"n": 41}')
    script = """
import { readFile } from "node:fs/promises";
export default async function (input) {
  const data = JSON.parse(await readFile("data.json", "utf8"));
  console.log("log line");
  return { sum: data.n + input.add, env: process.env.MODE };
}
"""
    r = computer.exec(script, runtime="javascript", input={"add": 1}, env={"MODE": "test"})
    assert r.ok, r
    assert r.result == {"sum": 42, "env": "test"}
    assert r.stdout == "log line\n"
    bad = computer.exec("throw new TypeError('nope')", runtime="javascript")
    assert bad.exit_code == 1 and "TypeError: nope" in bad.error
    with pytest.raises(ValueError):
        computer.exec("echo", input={"x": 1})
    with pytest.raises(ValueError):
        computer.exec("echo", runtime="cobol")  # type: ignore[arg-type]


def test_runtime_auto_says_where_it_ran(computer: agentcomputer.Computer) -> None:
    computer.exec("mkdir -p src", check=True)
    computer.write("src/a.py", "# TODO one\n")
    r = computer.exec("grep -rn TODO src | wc -l", runtime="auto")
    assert (r.stdout, r.exit_code) == ("1\n", 0)
    assert (r.runtime, r.runtime_reason) == ("shell", "every command is built into the shell runtime")

    # A named runtime says which ran, and gives no reason.
    r = computer.exec("true")
    assert (r.runtime, r.runtime_reason) == ("shell", "")

    # The shell runtime's one answer for a command it does not have.
    r = computer.exec("python3 -V")
    assert r.exit_code == 127
    assert r.stderr == (
        "bash: python3: command not found (the shell runtime runs built-in commands only; "
        "--runtime container or --runtime auto runs real binaries)\n"
    )

    with pytest.raises(ValueError, match="container or auto"):
        computer.exec("true", runtime="bogus")  # type: ignore[arg-type]


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("bwrap") is None,
    reason="the local container sandbox needs root and bubblewrap",
)
def test_runtime_auto_runs_real_binaries_in_the_container(computer: agentcomputer.Computer) -> None:
    r = computer.exec('python3 -c "print(6*7)"', runtime="auto")
    assert (r.stdout, r.exit_code) == ("42\n", 0), r.stderr
    assert (r.runtime, r.runtime_reason) == ("container", "python3 is not a shell runtime command")
    events = list(computer.exec_stream("node --version >/dev/null 2>&1; echo $?", runtime="auto"))
    exit = events[-1]
    assert isinstance(exit, ExecExit) and exit.runtime == "container"
