//! The exec's stdin is consumed once, as a pipe is: a second reader sees
//! what the first left. Each case runs on a real engine database; where the
//! answer is bash's, the host's bash reading the same bytes from a pipe
//! gives the expected output in the same test (when it is installed).

mod common;

use agentcomputer_shell::{EXIT_TIMEOUT, ExecRequest};
use common::{Computer, Run};
use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

async fn with_stdin(c: &Computer, script: &str, stdin: &[u8]) -> Run {
    c.exec(ExecRequest {
        script: script.into(),
        stdin: stdin.to_vec(),
        timeout: Duration::from_secs(60),
        ..ExecRequest::default()
    })
    .await
}

/// stdout and status of `script` under the host's bash with `stdin` on a
/// pipe, or `None` without a host bash.
fn host_bash(script: &str, stdin: &[u8]) -> Option<(String, i32)> {
    let mut child = std::process::Command::new("bash")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut pipe = child.stdin.take()?;
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        // A script that stops reading closes the pipe: not an error here.
        let _ = pipe.write_all(&data);
    });
    let out = child.wait_with_output().ok()?;
    writer.join().expect("stdin writer");
    Some((
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.code()?,
    ))
}

/// Runs `script` with `stdin` and checks stdout and status against
/// `expected`, and against the host's bash when there is one.
async fn same_as_bash(c: &Computer, script: &str, stdin: &[u8], expected: &str) {
    let run = with_stdin(c, script, stdin).await;
    assert_eq!(
        (run.stdout(), run.code()),
        (expected.to_string(), 0),
        "{script}: stderr {:?}",
        run.stderr()
    );
    if let Some(host) = host_bash(script, stdin) {
        assert_eq!(host, (expected.to_string(), 0), "host bash: {script}");
    }
}

#[tokio::test]
async fn a_second_reader_sees_what_the_first_left() {
    let c = Computer::new();
    let lines = b"l1\nl2\nl3\n";
    same_as_bash(&c, "wc -l; cat", lines, "3\n").await;
    same_as_bash(&c, "cat; cat; wc -c", lines, "l1\nl2\nl3\n0\n").await;
    same_as_bash(&c, "read a; read b; cat", lines, "l3\n").await;
    same_as_bash(
        &c,
        "read a; read b; echo \"[$a] [$b]\"; cat",
        lines,
        "[l1] [l2]\nl3\n",
    )
    .await;
    same_as_bash(&c, "read a; wc -l", lines, "2\n").await;
    same_as_bash(
        &c,
        "while read -r l; do echo \"<$l>\"; done; cat",
        lines,
        "<l1>\n<l2>\n<l3>\n",
    )
    .await;
    // head reads ahead on a pipe: a small input is gone after it, as in bash.
    same_as_bash(&c, "head -n1; cat", lines, "l1\n").await;
    // A pipeline inside the script reads the same stdin.
    same_as_bash(&c, "read a; cat | tr a-z A-Z; cat", lines, "L2\nL3\n").await;
    // A command substitution reads the same stdin.
    same_as_bash(&c, "echo \"<$(cat)>\"; wc -l", lines, "<l1\nl2\nl3>\n0\n").await;
    // Input without a final newline, and a script that never reads it.
    same_as_bash(&c, "read a; echo \"$a\"; cat", b"x\ny", "x\ny").await;
    same_as_bash(&c, "echo never read", lines, "never read\n").await;
}

#[tokio::test]
async fn twenty_mib_are_consumed_once_and_unread_stdin_is_dropped() {
    let c = Computer::new();
    // 20 MiB of 32-byte lines.
    let line = b"abcdefghijklmnopqrstuvwxyz01234\n";
    let big = line.repeat((20 << 20) / line.len());
    let started = Instant::now();
    let run = with_stdin(&c, "wc -c; cat | wc -c", &big).await;
    assert_eq!(run.ok(), "20971520\n0\n");
    let run = with_stdin(&c, "read a; read b; echo \"$a$b\"; wc -l", &big).await;
    let rest = (20 << 20) / line.len() - 2;
    assert_eq!(
        run.ok(),
        format!("abcdefghijklmnopqrstuvwxyz01234abcdefghijklmnopqrstuvwxyz01234\n{rest}\n")
    );
    // Nobody reads: the feeder stops at the closed pipe, and pipefail sees
    // only the script's own status.
    let run = with_stdin(&c, "set -o pipefail; echo done", &big).await;
    assert_eq!(run.ok(), "done\n");
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn the_script_runs_in_the_main_shell_with_stdin() {
    let c = Computer::new();
    let script = "x=1\ncd /tmp\nf() { echo \"f $1\"; }\ntrap 'echo bye' EXIT\n\
                  read a\necho \"$a $x $PWD $LINENO $BASH_SUBSHELL\"\nf \"$a\"\n\
                  [ \"$$\" = \"$BASHPID\" ] && echo same-pid\n\
                  echo piped | read v; echo \"[$v]\"\nshopt -q lastpipe || echo no-lastpipe";
    let expected = "in 1 /tmp 6 0\nf in\nsame-pid\n[]\nno-lastpipe\nbye\n";
    same_as_bash(&c, script, b"in\n", expected).await;

    let run = with_stdin(&c, "cat >/dev/null; exit 3; echo no", b"x\n").await;
    assert_eq!((run.stdout(), run.code()), (String::new(), 3));
    let run = with_stdin(&c, "exit 4", b"x\n").await;
    assert_eq!(run.code(), 4);
    let run = with_stdin(&c, "set -e; read a; false; echo no", b"x\n").await;
    assert_eq!((run.stdout(), run.code()), (String::new(), 1));
    let run = with_stdin(&c, "trap 'echo err' ERR; false; echo after", b"x\n").await;
    assert_eq!(run.ok(), "err\nafter\n");
    let run = with_stdin(&c, "echo oops >&2; read a; echo \"$a\" >&2", b"x\n").await;
    assert_eq!((run.stderr(), run.code()), ("oops\nx\n".to_string(), 0));
}

#[tokio::test]
async fn syntax_errors_read_the_same_with_and_without_stdin() {
    let c = Computer::new();
    for script in ["echo ok\nif true; then\n", "echo )", "cat <<EOF\nno end"] {
        let without = c.sh(script).await;
        let with = with_stdin(&c, script, b"data\n").await;
        assert_eq!(with.chunks, without.chunks, "{script:?}");
        assert_eq!(with.outcome, without.outcome, "{script:?}");
    }
    let run = with_stdin(&c, "echo ok\nif true; then\n", b"data\n").await;
    assert_eq!(run.code(), 2);
    assert!(run.stderr().contains("line 3"), "{}", run.stderr());
}

#[tokio::test]
async fn a_timeout_stops_a_script_with_stdin() {
    let c = Computer::new();
    let big = vec![b'x'; 8 << 20];
    for script in ["sleep 30", "read a; sleep 30", "while true; do :; done"] {
        let started = Instant::now();
        let run = c
            .exec(ExecRequest {
                script: script.into(),
                stdin: big.clone(),
                timeout: Duration::from_millis(500),
                ..ExecRequest::default()
            })
            .await;
        assert_eq!(run.code(), EXIT_TIMEOUT, "{script}: {:?}", run.outcome);
        assert!(started.elapsed() < Duration::from_secs(5), "{script}");
    }
}

/// Input from a [`StdinStream`] after the request's own bytes: fed chunk
/// by chunk to a wrapped script (consumed once, as a pipe is), gathered
/// whole for one that runs unwrapped, and a script that stops reading ends
/// the feed while more is still coming.
#[tokio::test]
async fn streamed_input_follows_the_request_bytes() {
    use agentcomputer_shell::StdinStream;
    let c = Computer::new();
    let streamed = |first: &[u8], chunks: Vec<Vec<u8>>| {
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        tokio::spawn(async move {
            for chunk in chunks {
                if tx.send(chunk).await.is_err() {
                    return;
                }
            }
        });
        (first.to_vec(), StdinStream::new(rx))
    };
    let run = |script: &str, (stdin, stream): (Vec<u8>, StdinStream)| {
        c.exec(ExecRequest {
            script: script.into(),
            stdin,
            stdin_stream: stream,
            timeout: Duration::from_secs(60),
            ..ExecRequest::default()
        })
    };
    let chunks = vec![b"b\n".to_vec(), b"c\nd\n".to_vec()];
    let out = run(
        "read x; echo \"first $x\"; wc -l; cat",
        streamed(b"a\n", chunks),
    )
    .await;
    assert_eq!((out.stdout(), out.code()), ("first a\n3\n".to_string(), 0));

    // Unwrapped (a here-document to the end): the input arrives whole.
    let chunks = vec![b"y\n".to_vec(), b"z\n".to_vec()];
    let out = run("cat; cat <<EOF\nend", streamed(b"x\n", chunks)).await;
    assert!(out.stdout().starts_with("x\ny\nz\n"), "{:?}", out.stdout());

    // 64 MiB coming, the script reads a line and ends.
    let many = (0..64).map(|_| vec![b'q'; 1 << 20]).collect();
    let began = Instant::now();
    let out = run("head -c 3", streamed(b"", many)).await;
    assert_eq!((out.stdout(), out.code()), ("qqq".to_string(), 0));
    assert!(began.elapsed() < Duration::from_secs(30));
}

/// A script that does not read all of its streamed stdin ends when it
/// does, while the client still holds its input open: unread input is
/// dropped and the exit is reported, as `sleep 30 | bash -c 'echo quick'`
/// ends at once.
#[tokio::test]
async fn a_script_ends_with_its_last_command_while_streamed_input_stays_open() {
    use agentcomputer_shell::StdinStream;
    let c = Computer::new();
    for (script, first, expected, code) in [
        ("echo hi", &b""[..], "hi\n", 0),
        ("read x; echo \"got $x\"", &b"a\nb\n"[..], "got a\n", 0),
        ("head -n1; false", &b"a\nb\n"[..], "a\n", 1),
    ] {
        let (tx, rx) = tokio::sync::mpsc::channel::<Vec<u8>>(2);
        tx.send(first.to_vec()).await.unwrap();
        let began = Instant::now();
        let run = tokio::time::timeout(
            Duration::from_secs(3),
            c.exec(ExecRequest {
                script: script.into(),
                stdin_stream: StdinStream::new(rx),
                timeout: Duration::from_secs(60),
                ..ExecRequest::default()
            }),
        )
        .await;
        let run = run.unwrap_or_else(|_| panic!("{script}: still running after 3 s"));
        let took = began.elapsed();
        eprintln!("{script:?}: exit {} after {took:?}", run.code());
        assert_eq!(
            (run.stdout(), run.code()),
            (expected.to_string(), code),
            "{script}"
        );
        assert!(took < Duration::from_secs(2), "{script}: {took:?}");
        // The run let go of the input the client still holds open.
        assert!(tx.is_closed(), "{script}: input still held");
    }
}

/// Commands that never read stdin (`mkdir`, `ls`, ...) leave it to the
/// next command, as in bash: bashkit took the rest of the input for them.
#[tokio::test]
async fn commands_that_never_read_stdin_leave_it_to_the_next() {
    let c = Computer::new();
    for (script, expected) in [
        ("mkdir -p d; wc -l; cat", "2\n"),
        ("ls >/dev/null; cat", "a\nb\n"),
        (
            "if true; then rm -f nope; fi; read x; echo \"$x\"; cat",
            "a\nb\n",
        ),
    ] {
        let out = with_stdin(&c, script, b"a\nb\n").await;
        assert_eq!(out.ok(), expected, "{script}");
        if let Some((bash, _)) =
            host_bash(&format!("cd $(mktemp -d) && {{ {script}; }}"), b"a\nb\n")
        {
            assert_eq!(bash, expected, "host bash: {script}");
        }
    }
}
