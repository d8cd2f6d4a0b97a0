//! The real `kubectl-computer` binary against a node agent served in-process
//! (the `agentcomputer-node-agent` library) on an ephemeral loopback port,
//! with a temporary data directory. The CLI finds the agent token in that
//! data directory on its own (`AGENTCOMPUTER_DATA_DIR`, as a user sets it
//! for `node-agent local`).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use rand::RngCore;

mod common;

/// The CLI's view of an in-process agent.
struct Server(common::Agent);

impl std::ops::Deref for Server {
    type Target = common::Agent;
    fn deref(&self) -> &common::Agent {
        &self.0
    }
}

impl Server {
    fn start(data: &Path) -> Server {
        Server(common::Agent::start(data, None, true))
    }

    /// Shuts the agent down gracefully and waits for it.
    fn stop(self) {
        self.0.stop();
    }

    fn cli(&self, args: &[&str]) -> Output {
        run(self.command(), args, None)
    }

    fn cli_stdin(&self, args: &[&str], stdin: &[u8]) -> Output {
        run(self.command(), args, Some(stdin))
    }

    /// The CLI, set to reach this agent and find its token.
    fn command(&self) -> Command {
        let mut cmd = command(&self.url);
        cmd.env("AGENTCOMPUTER_DATA_DIR", &self.data);
        cmd
    }
}

/// The CLI with endpoint `url`, and no token or CA from this environment.
fn command(url: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubectl-computer"));
    cmd.env("AGENTCOMPUTER_ENDPOINT", url)
        .env_remove("AGENTCOMPUTER_TOKEN")
        .env_remove("AGENTCOMPUTER_TOKEN_FILE")
        .env_remove("AGENTCOMPUTER_CA_CERT")
        .env_remove("AGENTCOMPUTER_DATA_DIR");
    cmd
}

fn cli_at(url: &str, args: &[&str], stdin: Option<&[u8]>) -> Output {
    run(command(url), args, stdin)
}

fn run(mut cmd: Command, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = cmd
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Asserts success and returns stdout.
fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Asserts failure with exit status 1 and returns stderr.
fn fails(out: Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stderr)
}

#[test]
fn exec_streams_output_and_exit_codes_and_files_persist() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    assert!(ok(server.cli(&["create", "demo", "--quota", "1Gi"])).contains("demo"));
    let err = fails(server.cli(&["create", "demo"]));
    assert_eq!(err, "error: computer \"demo\" already exists\n");
    // An inode quota: the third inode (the root is one) is refused.
    let made = ok(server.cli(&["create", "tiny", "--max-inodes", "2"]));
    assert!(made.contains("2 inodes"), "{made}");
    ok(server.cli(&["exec", "tiny", "--", "touch one"]));
    let out = server.cli(&["exec", "tiny", "--", "touch two"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("No space left on device"),
        "{}",
        text(&out.stderr)
    );
    let out = server.cli(&["create", "zero", "--max-inodes", "0"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(
        text(&out.stderr).contains("invalid value '0'"),
        "{}",
        text(&out.stderr)
    );

    let out = ok(server.cli(&[
        "exec",
        "demo",
        "--",
        r#"mkdir -p src && printf "a\nb\n" > src/x.txt && wc -l < src/x.txt"#,
    ]));
    assert_eq!(out.trim(), "2");
    let out = server.cli(&["exec", "demo", "--", "exit 3"]);
    assert_eq!(out.status.code(), Some(3));
    let out = server.cli(&["exec", "demo", "--", "echo oops >&2; false"]);
    assert_eq!(
        (out.status.code(), text(&out.stderr)),
        (Some(1), "oops\n".to_string())
    );
    let out = server.cli_stdin(
        &[
            "exec",
            "demo",
            "--stdin",
            "--env",
            "N=2",
            "--cwd",
            "src",
            "--",
            "tr a-z A-Z; echo $N; pwd",
        ],
        b"hi\n",
    );
    assert_eq!(ok(out), "HI\n2\n/workspace/src\n");
    let out = server.cli(&[
        "exec",
        "demo",
        "--timeout",
        "0.5",
        "--",
        "while true; do :; done",
    ]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("timed out"),
        "{}",
        text(&out.stderr)
    );

    server.stop();
    let server = Server::start(dir.path());
    assert_eq!(ok(server.cli(&["cat", "demo", "src/x.txt"])), "a\nb\n");
    let list = ok(server.cli(&["list"]));
    assert!(
        list.lines()
            .any(|l| l.starts_with("demo ") && l.contains(" 1 GiB")),
        "{list}"
    );
}

#[test]
fn javascript_exec_prints_results_and_shares_files_with_the_shell() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    ok(server.cli(&["create", "demo"]));
    ok(server.cli(&["exec", "demo", "--", "mkdir src; touch a b"]));

    let out = server.cli(&[
        "exec",
        "demo",
        "--runtime",
        "javascript",
        "--input",
        r#"{"n":3}"#,
        "--",
        r#"import {readdir} from "node:fs/promises"; export default async ({n}) => ({n, files: (await readdir(".")).length})"#,
    ]);
    assert_eq!(ok(out), "{\"n\":3,\"files\":3}\n");

    // A module's file read by the shell, and the other way round.
    let js = |source: &str| server.cli(&["exec", "demo", "--runtime", "js", "--", source]);
    ok(js(
        r#"import {writeFile} from "node:fs/promises"; await writeFile("out.json", JSON.stringify({x: 1}))"#,
    ));
    assert_eq!(
        ok(server.cli(&["exec", "demo", "--", "jq .x out.json"])),
        "1\n"
    );
    ok(server.cli(&["exec", "demo", "--", "echo from shell > src/s.txt"]));
    let out = js(
        r#"import fs from "node:fs"; export default () => fs.readFileSync("src/s.txt", "utf8")"#,
    );
    assert_eq!(ok(out), "\"from shell\\n\"\n");

    // Output comes first; a null result prints nothing; the result starts a
    // line of its own.
    assert_eq!(
        ok(js(
            "console.log('a'); console.error('b'); export default () => [1, 'x']"
        )),
        "a\n[1,\"x\"]\n"
    );
    assert_eq!(ok(js("console.log('only output')")), "only output\n");
    assert_eq!(
        ok(js(
            "process.stdout.write('no newline'); export default () => 42"
        )),
        "no newline\n42\n"
    );
    assert_eq!(js("process.exit(7)").status.code(), Some(7));

    // An uncaught error: status 1, the error's stack on stderr, once.
    let err = fails(js("export default () => { throw new Error('boom') }"));
    assert!(err.starts_with("Error: boom\n    at "), "{err}");
    assert_eq!(err.matches("boom").count(), 1, "{err}");

    // Malformed --input is refused before anything runs.
    let out = server.cli(&[
        "exec",
        "demo",
        "--runtime",
        "javascript",
        "--input",
        "{\"n\":",
        "--",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("error: invalid value '{\"n\":' for '--input <JSON>': not valid JSON: EOF while parsing a value at line 1 column 5"),
        "{err}"
    );
    let out = server.cli(&["exec", "demo", "--input", "1", "--", "cat"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).starts_with("error: --input is only for --runtime javascript"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn javascript_timeout_and_streaming() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    ok(server.cli(&["create", "demo"]));
    let started = std::time::Instant::now();
    let out = server.cli(&[
        "exec",
        "demo",
        "--runtime",
        "javascript",
        "--timeout",
        "2",
        "--",
        "while(true){}",
    ]);
    let took = started.elapsed();
    // 124 like timeout(1) and the shell runtime.
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert_eq!(err.trim_end(), "javascript: timed out after 2s");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(6),
        "{took:?}"
    );
    let out = server.cli(&[
        "exec",
        "demo",
        "--runtime",
        "javascript",
        "--",
        "export default () => 'next'",
    ]);
    assert_eq!(ok(out), "\"next\"\n");

    // The module prints a line, then waits for a file that is made only
    // once that line has come out of the CLI.
    let source = r#"import {existsSync} from "node:fs";
        console.log("ready");
        await new Promise((ok) => { const t = setInterval(() => { if (existsSync("go")) { clearInterval(t); ok(); } }, 5); });
        export default () => "done";"#;
    let mut child = server
        .command()
        .args([
            "exec",
            "demo",
            "--runtime",
            "javascript",
            "--timeout",
            "30",
            "--",
            source,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert_eq!(line, "ready\n");
    ok(server.cli(&["exec", "demo", "--", "touch go"]));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(rest, "\"done\"\n");
}

#[test]
fn put_and_get_fifty_mib_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    ok(server.cli(&["create", "demo"]));
    let mut data = vec![0u8; 50 << 20];
    rand::rng().fill_bytes(&mut data);
    let local = dir.path().join("big.bin");
    std::fs::write(&local, &data).unwrap();
    // "data/" needs the directory first.
    let err = fails(server.cli(&["put", "demo", local.to_str().unwrap(), "data/"]));
    assert_eq!(
        err,
        "error: ENOENT: no such file or directory: data/big.bin\n"
    );
    ok(server.cli(&["mkdir", "demo", "-p", "data"]));
    ok(server.cli(&["put", "demo", local.to_str().unwrap(), "data/"]));
    let back = dir.path().join("back.bin");
    ok(server.cli(&["get", "demo", "data/big.bin", back.to_str().unwrap()]));
    assert!(
        std::fs::read(&back).unwrap() == data,
        "downloaded bytes differ"
    );
    let stat = ok(server.cli(&["stat", "demo", "data/big.bin"]));
    assert!(stat.contains(&format!("Size: {}", data.len())), "{stat}");
    let cat = server.cli(&["cat", "demo", "data/big.bin"]);
    assert!(cat.status.success() && cat.stdout == data);
}

#[test]
fn file_commands() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    ok(server.cli(&["create", "demo"]));
    ok(server.cli(&["mkdir", "demo", "-p", "a/b"]));
    ok(server.cli(&[
        "exec",
        "demo",
        "--",
        "for i in $(seq 1 1005); do : > a/b/f$i; done; echo x > a/top.txt",
    ]));
    // More entries than one ReadDir page.
    let listing = ok(server.cli(&["ls", "demo", "a/b"]));
    assert_eq!(listing.lines().count(), 1005);
    let long = ok(server.cli(&["ls", "demo", "a", "-l"]));
    assert!(
        long.lines()
            .any(|l| l.starts_with("drwxr-xr-x") && l.ends_with(" b")),
        "{long}"
    );
    assert!(
        long.lines()
            .any(|l| l.starts_with("-rw-r--r--") && l.contains(" 2 ") && l.ends_with(" top.txt")),
        "{long}"
    );

    ok(server.cli(&["mv", "demo", "a/top.txt", "top.txt"]));
    assert_eq!(
        ok(server.cli(&["cat", "demo", "/workspace/top.txt"])),
        "x\n"
    );
    let err = fails(server.cli(&["rm", "demo", "a"]));
    assert!(err.starts_with("error: ENOTEMPTY: "), "{err}");
    ok(server.cli(&["rm", "demo", "-r", "a"]));
    assert_eq!(ok(server.cli(&["ls", "demo"])), "top.txt\n");
    assert_eq!(ok(server.cli(&["glob", "demo", "*.txt"])), "top.txt\n");
    assert_eq!(ok(server.cli(&["grep", "demo", "x"])), "top.txt:1:x\n");
    assert_eq!(
        server.cli(&["grep", "demo", "nomatch"]).status.code(),
        Some(1)
    );

    let err = fails(server.cli(&["cat", "demo", "src/nope"]));
    assert_eq!(err, "error: ENOENT: no such file or directory: src/nope\n");
    let err = fails(server.cli(&["cat", "ghost", "x"]));
    assert_eq!(err, "error: computer \"ghost\" not found\n");
    // The container runtime as the README shows it (an agent running as
    // root with bubblewrap), or its refusal saying what is missing.
    let out = server.cli(&[
        "exec",
        "demo",
        "--runtime",
        "container",
        "--",
        "echo from-container > /workspace/c.txt; python3 -c 'print(6*7)'",
    ]);
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    let bwrap = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .any(|d| d.join("bwrap").is_file());
    if root && bwrap {
        assert_eq!(ok(out), "42\n");
        assert_eq!(
            ok(server.cli(&["exec", "demo", "--", "cat c.txt"])),
            "from-container\n"
        );
    } else {
        let err = fails(out);
        assert!(
            err.starts_with("error: the container runtime is not available"),
            "{err}"
        );
    }
    ok(server.cli(&["delete", "demo"]));
    assert_eq!(
        ok(server.cli(&["list"])).lines().count(),
        1,
        "only the header is left"
    );
}

#[test]
fn unreachable_agent_gives_one_clear_line() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let err = fails(cli_at(&url, &["list"], None));
    assert_eq!(
        err,
        format!(
            "error: cannot connect to node agent at {url}: connection refused (start one with: node-agent local)\n"
        )
    );
    let err = fails(cli_at(&url, &["--endpoint", "not a url", "list"], None));
    assert!(err.starts_with("error: invalid endpoint"), "{err}");
}

#[test]
fn killed_upload_keeps_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    ok(server.cli(&["create", "demo"]));
    let old = dir.path().join("old.txt");
    std::fs::write(&old, "old content\n").unwrap();
    ok(server.cli(&["put", "demo", old.to_str().unwrap(), "f.txt"]));

    // An upload from a pipe that never ends, killed midway.
    let mut child = server
        .command()
        .args(["put", "demo", "/dev/stdin", "f.txt"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    pipe.write_all(&vec![b'z'; 3 << 20]).unwrap();
    // The upload's data is stored while it runs (the INODES column counts
    // its unnamed file), but no name appears for it.
    let inodes = || -> u64 {
        let listing = ok(server.cli(&["list"]));
        let row = listing
            .lines()
            .find(|l| l.starts_with("demo "))
            .unwrap()
            .to_string();
        // NAME, USED, QUOTA and DISK (two words each but NAME), INODES.
        row.split_whitespace().nth(7).unwrap().parse().unwrap()
    };
    let before = 2; // the root and f.txt
    let mut uploading = false;
    for _ in 0..500 {
        if inodes() == before + 1 {
            uploading = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(uploading, "the upload never started");
    assert_eq!(ok(server.cli(&["ls", "demo"])), "f.txt\n");
    child.kill().unwrap();
    child.wait().unwrap();
    drop(pipe);

    let mut cleaned = false;
    for _ in 0..500 {
        if inodes() == before {
            cleaned = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(cleaned, "the aborted upload's file was not freed");
    assert_eq!(ok(server.cli(&["ls", "demo"])), "f.txt\n");
    assert_eq!(ok(server.cli(&["cat", "demo", "f.txt"])), "old content\n");
}

/// `create --allow-cidr` opens exactly that range to the shell's curl; a
/// computer created without egress flags stays closed.
#[test]
fn create_sets_the_egress_policy() {
    let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", http.local_addr().unwrap());
    std::thread::spawn(move || {
        use std::io::Read;
        for stream in http.incoming() {
            let Ok(mut s) = stream else { return };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\nconnection: close\r\n\r\nhi\n",
            );
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let out = ok(server.cli(&["create", "web", "--allow-cidr", "127.0.0.1"]));
    assert!(out.contains("egress allow-list: 0 hosts, 1 cidr"), "{out}");
    let out = ok(server.cli(&["create", "sealed"]));
    assert!(out.contains("egress deny-all"), "{out}");

    let script = format!("curl -sS {url}");
    assert_eq!(ok(server.cli(&["exec", "web", "--", &script])), "hi\n");
    let denied = server.cli(&["exec", "sealed", "--", &script]);
    assert_eq!(denied.status.code(), Some(7));
    assert!(text(&denied.stderr).contains("egress denied by policy"));

    let err = fails(server.cli(&[
        "create",
        "x",
        "--egress",
        "allow-all",
        "--allow-host",
        "a.com",
    ]));
    assert!(err.contains("--egress allow-list"), "{err}");
    let err = fails(server.cli(&["create", "x", "--allow-host", "Bad Host"]));
    assert!(err.contains("host rule"), "{err}");
    // Host rules never match IP literals: the refusal names the flag that does.
    let err = fails(server.cli(&["create", "x", "--allow-host", "10.0.0.1"]));
    assert!(err.contains("--allow-cidr 10.0.0.1"), "{err}");
}

/// Runs the CLI with its stdout a pipe whose reader is already gone
/// (`| head` that has exited): every write fails with `EPIPE`.
fn cli_into_closed_pipe(server: &Server, args: &[&str]) -> Output {
    let (reader, writer) = nix::unistd::pipe().unwrap();
    drop(reader);
    server
        .command()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn closed_stdout_escaped_names_bare_endpoints_and_empty_paths() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    ok(server.cli(&["create", "demo"]));
    let local = dir.path().join("payload.txt");
    std::fs::write(&local, "x\n").unwrap();
    // A tenant's file name that would retitle the operator's terminal and
    // forge a second line.
    let evil = "evil\x1b]0;owned\x07\nsecond line";
    ok(server.cli(&["put", "demo", local.to_str().unwrap(), evil]));

    // `list | head -3` and friends: no panic on the broken pipe.
    for args in [
        &["list"][..],
        &["ls", "demo"],
        &["ls", "-l", "demo"],
        &["stat", "demo", evil],
        &["glob", "demo", "*"],
        &["cat", "demo", evil],
        &["exec", "demo", "--", "echo hi"],
    ] {
        let out = cli_into_closed_pipe(&server, args);
        let err = text(&out.stderr);
        assert!(
            !err.contains("panicked") && out.status.code() != Some(101),
            "{args:?}: {:?}\n{err}",
            out.status
        );
    }

    // Control characters in names are escaped, always.
    let listed = ok(server.cli(&["ls", "demo"]));
    assert!(
        !listed.contains('\x1b') && !listed.contains('\x07'),
        "{listed:?}"
    );
    assert!(
        listed.contains("evil\\x1b]0;owned\\x07\\nsecond line"),
        "{listed:?}"
    );
    let long = ok(server.cli(&["ls", "-l", "demo"]));
    assert!(!long.contains('\x1b'), "{long:?}");
    assert_eq!(long.lines().count(), 1, "{long:?}");
    let globbed = ok(server.cli(&["glob", "demo", "*"]));
    assert_eq!(globbed, "evil\\x1b]0;owned\\x07\\nsecond line\n");

    // HOST:PORT without a scheme, as the operator's status shows it.
    let bare = server.url.trim_start_matches("http://").to_string();
    let mut cmd = server.command();
    cmd.env("AGENTCOMPUTER_ENDPOINT", &bare);
    assert!(ok(run(cmd, &["list"], None)).contains("demo"));

    // `rm demo ""` says what is wrong.
    let err = fails(server.cli(&["rm", "demo", ""]));
    assert!(err.starts_with("error: rm: the path is empty"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// An "agent" that accepts connections and hangs up on them once the
/// client has sent something, as a killed agent does mid-call.
fn hang_up_server() -> String {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            // An empty HTTP/2 SETTINGS frame, then hang up after the
            // client's first bytes.
            let _ = conn.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            drop(conn);
        }
    });
    url
}

#[test]
fn an_agent_that_went_away_gives_one_line_naming_it() {
    let url = hang_up_server();
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("f");
    std::fs::write(&local, vec![1u8; 100_000]).unwrap();
    for args in [
        &["--token", "t", "put", "demo", local.to_str().unwrap(), "f"][..],
        &["--token", "t", "exec", "demo", "--", "echo hi"],
        &["--token", "t", "list"],
    ] {
        let err = fails(cli_at(&url, args, None));
        assert!(
            err.starts_with(&format!(
                "error: the node agent at {url} is unreachable or went away ("
            )),
            "{args:?}: {err}"
        );
        assert!(err.contains("node-agent local"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

/// `backup` while another client keeps uploading: the copy passes SQLite's
/// `PRAGMA integrity_check` and the engine's own check, holds every upload
/// acknowledged before the backup began, and a second backup to the same
/// file is refused rather than overwriting it.
#[test]
fn backup_during_writes_is_consistent_and_complete() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    ok(server.cli(&["create", "demo"]));
    let acked = Arc::new(Mutex::new(0usize));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (acked, stop) = (acked.clone(), stop.clone());
        let (url, data) = (server.url.clone(), server.data.clone());
        let local = dir.path().join("upload");
        std::thread::spawn(move || {
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                // Large enough that a commit spans many WAL frames.
                let body = format!("v{i}:").repeat(20_000);
                std::fs::write(&local, &body).unwrap();
                let out = command(&url)
                    .env("AGENTCOMPUTER_DATA_DIR", &data)
                    .args(["put", "demo", local.to_str().unwrap(), &format!("f{i}")])
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{}", text(&out.stderr));
                i += 1;
                *acked.lock().unwrap() = i;
            }
        })
    };
    while *acked.lock().unwrap() < 5 {
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = *acked.lock().unwrap();
    let copy = dir.path().join("demo.db");
    let said = ok(server.cli(&["backup", "demo", copy.to_str().unwrap()]));
    assert!(said.starts_with("backed up demo: "), "{said}");
    // The writer goes on for a while after the backup.
    let after = *acked.lock().unwrap();
    while *acked.lock().unwrap() < after + 3 {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();

    let err = fails(server.cli(&["backup", "demo", copy.to_str().unwrap()]));
    assert!(err.contains("exists"), "{err}");

    {
        let conn = rusqlite::Connection::open_with_flags(
            &copy,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .unwrap();
        let verdict: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(verdict, "ok");
    }
    {
        let probe = dir.path().join("probe.db");
        std::fs::copy(&copy, &probe).unwrap();
        let fs = agentcomputer_fs::Fs::open(&probe).unwrap();
        assert!(fs.check().unwrap().is_empty(), "{:?}", fs.check());
        for i in 0..before {
            let attr = fs
                .resolve(agentcomputer_fs::ROOT_INO, format!("f{i}").as_bytes(), true)
                .unwrap_or_else(|e| {
                    panic!("f{i}, acknowledged before the backup, is missing: {e}")
                });
            let body = fs.read_all(attr.ino).unwrap();
            assert_eq!(body, format!("v{i}:").repeat(20_000).as_bytes(), "f{i}");
        }
    }

    // The restore the README describes: create a computer, stop the agent,
    // put the copy in place of its fs.db, start the agent.
    ok(server.cli(&["create", "restored"]));
    let data = server.data.clone();
    server.stop();
    let db = data.join("computers/restored/fs.db");
    for side in ["fs.db-wal", "fs.db-shm"] {
        let _ = std::fs::remove_file(data.join("computers/restored").join(side));
    }
    std::fs::copy(&copy, &db).unwrap();
    let server = Server::start(&data);
    let got = ok(server.cli(&["cat", "restored", "f0"]));
    assert_eq!(got, "v0:".repeat(20_000));
    let ls = ok(server.cli(&["ls", "restored"]));
    assert!(ls.lines().count() >= before, "{ls}");
}

/// `put` and `get` with stderr a pipe (as in scripts and CI), on a terminal
/// type that could draw: no progress bar or any other byte on stderr, and
/// stdout carries exactly what it carries without bars.
#[test]
fn transfers_into_a_pipe_print_no_progress() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    ok(server.cli(&["create", "demo"]));
    let mut data = vec![0u8; 8 << 20];
    rand::rng().fill_bytes(&mut data);
    let local = dir.path().join("big.bin");
    std::fs::write(&local, &data).unwrap();
    let back = dir.path().join("back.bin");
    let piped = |args: &[&str]| {
        let mut cmd = server.command();
        cmd.env("TERM", "xterm-256color");
        let out = run(cmd, args, None);
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{args:?}: status {:?}, stderr {:?}",
            out.status,
            text(&out.stderr)
        );
        out.stdout
    };
    assert!(piped(&["put", "demo", local.to_str().unwrap(), "big.bin"]).is_empty());
    assert!(piped(&["get", "demo", "big.bin", back.to_str().unwrap()]).is_empty());
    assert!(
        std::fs::read(&back).unwrap() == data,
        "downloaded bytes differ"
    );
    assert!(
        piped(&["get", "demo", "big.bin", "-"]) == data,
        "get - differs"
    );
    let copy = dir.path().join("copy.db");
    let said = text(&piped(&["backup", "demo", copy.to_str().unwrap()]));
    assert!(
        said.starts_with("backed up demo: ") && said.lines().count() == 1,
        "{said}"
    );
}

/// Runs `kubectl-computer ARGS` on a pseudo-terminal made by `script(1)`
/// (util-linux), so that stdout and stderr are a terminal of type `term`;
/// returns the exit status and everything the terminal showed.
fn on_terminal(server: &Server, term: &str, args: &[&str]) -> (bool, String) {
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let line = std::iter::once(env!("CARGO_BIN_EXE_kubectl-computer"))
        .chain(args.iter().copied())
        .map(quote)
        .collect::<Vec<_>>()
        .join(" ");
    // The CLI's environment (endpoint, data directory), given to script(1),
    // which passes it on to the shell that runs the line.
    let cli = server.command();
    let mut script = Command::new("script");
    script.args(["-q", "-e", "-c", &line, "/dev/null"]);
    for (k, v) in cli.get_envs() {
        match v {
            Some(v) => script.env(k, v),
            None => script.env_remove(k),
        };
    }
    let out = script
        .env("TERM", term)
        .env("SHELL", "/bin/sh")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("script(1) from util-linux runs");
    (out.status.success(), text(&out.stdout))
}

/// On a terminal, `put`, `get` and `backup` draw a bar that reaches the
/// total (8 MiB for the file), with the rate and ETA fields;
/// `--no-progress` and `TERM=dumb` draw nothing.
#[test]
fn transfers_on_a_terminal_draw_a_bar_with_the_total() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"));
    ok(server.cli(&["create", "demo"]));
    let mut data = vec![0u8; 8 << 20];
    rand::rng().fill_bytes(&mut data);
    let local = dir.path().join("big.bin");
    std::fs::write(&local, &data).unwrap();
    let local = local.to_str().unwrap();
    let back = dir.path().join("back.bin");
    let back = back.to_str().unwrap();

    let (ok_put, shown) = on_terminal(
        &server,
        "xterm-256color",
        &["put", "demo", local, "big.bin"],
    );
    assert!(ok_put, "{shown}");
    assert!(shown.contains("put big.bin "), "{shown:?}");
    assert!(shown.contains("8.00 MiB/8.00 MiB"), "{shown:?}");
    assert!(shown.contains("ETA"), "{shown:?}");

    let (ok_get, shown) = on_terminal(&server, "xterm-256color", &["get", "demo", "big.bin", back]);
    assert!(ok_get, "{shown}");
    assert!(shown.contains("get big.bin "), "{shown:?}");
    assert!(shown.contains("8.00 MiB/8.00 MiB"), "{shown:?}");
    assert!(
        std::fs::read(back).unwrap() == data,
        "downloaded bytes differ"
    );

    // The stream reports the database's size: the bar fills up.
    let copy = dir.path().join("copy.db");
    let copy = copy.to_str().unwrap();
    let (ok_backup, shown) = on_terminal(&server, "xterm-256color", &["backup", "demo", copy]);
    assert!(ok_backup, "{shown}");
    assert!(shown.contains("backup demo "), "{shown:?}");
    assert!(
        shown.contains(&format!("[{}]", "=".repeat(20))),
        "{shown:?}"
    );
    assert!(shown.contains("backed up demo: "), "{shown:?}");
    std::fs::remove_file(copy).unwrap();

    for (term, args) in [
        (
            "xterm-256color",
            &["backup", "demo", copy, "--no-progress"][..],
        ),
        (
            "xterm-256color",
            &["get", "demo", "big.bin", back, "--no-progress"],
        ),
        (
            "xterm-256color",
            &["put", "demo", local, "big.bin", "--no-progress"],
        ),
        ("dumb", &["get", "demo", "big.bin", back]),
        ("dumb", &["put", "demo", local, "big.bin"]),
    ] {
        let (ok, shown) = on_terminal(&server, term, args);
        // Only backup prints anything: its one result line.
        let expected = if args[0] == "backup" {
            let size = std::fs::metadata(copy).unwrap().len();
            format!("backed up demo: {size} bytes to {copy}\r\n")
        } else {
            String::new()
        };
        assert!(ok && shown == expected, "TERM={term} {args:?}: {shown:?}");
    }
    // A failed transfer leaves only the error line, the bar erased.
    let (ok, shown) = on_terminal(
        &server,
        "xterm-256color",
        &["get", "demo", "nope.bin", back],
    );
    assert!(!ok && shown.contains("ENOENT"), "{shown:?}");
}

/// `share` prints a link that `curl` downloads; expiries out of bounds and
/// directories are refused with one line.
#[test]
fn share_prints_a_link_that_downloads_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    ok(server.cli(&["create", "demo"]));
    ok(server.cli(&[
        "exec",
        "demo",
        "--",
        "mkdir out; printf 'a,b\\n1,2\\n' > out/table.csv",
    ]));
    let out = server.cli(&["share", "demo", "out/table.csv", "--expires", "90s"]);
    let stderr = text(&out.stderr);
    let url = ok(out).trim().to_string();
    assert!(
        url.starts_with("http://127.0.0.1:")
            && url.contains("/share/v1/demo/out/table.csv?expires="),
        "{url}"
    );
    assert!(stderr.starts_with("out/table.csv expires 20"), "{stderr}");
    let got = Command::new("curl")
        .args(["-sS", "-D", "-", &url])
        .output()
        .unwrap();
    let got = text(&got.stdout);
    assert!(got.starts_with("HTTP/1.1 200 OK"), "{got}");
    assert!(
        got.to_ascii_lowercase().contains("content-type: text/csv"),
        "{got}"
    );
    assert!(got.ends_with("\r\n\r\na,b\n1,2\n"), "{got}");
    // The expiry asked for is the one given.
    let expires: i64 = url
        .rsplit_once("expires=")
        .unwrap()
        .1
        .split('&')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((85..=91).contains(&(expires - now)), "{expires} vs {now}");

    let err = fails(server.cli(&["share", "demo", "out"]));
    assert!(err.contains("EISDIR"), "{err}");
    let refused = server.cli(&["share", "demo", "out/table.csv", "--expires", "8d"]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    assert!(text(&refused.stderr).contains("1s to 7d"));
}

/// Whether this process may build the local container sandbox (root, with
/// bubblewrap on the host).
fn sandbox_possible() -> bool {
    let root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false);
    if !root || !Path::new("/usr/bin/bwrap").exists() {
        eprintln!("SKIPPED: the local container sandbox needs root and bubblewrap");
        return false;
    }
    true
}

#[test]
fn runtime_auto_says_where_it_ran_and_shell_names_missing_commands() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    ok(server.cli(&["create", "demo"]));
    ok(server.cli(&["exec", "demo", "--", "mkdir src; touch a b"]));

    let out = server.cli(&["exec", "demo", "--runtime", "auto", "--", "ls | wc -l"]);
    assert_eq!(
        text(&out.stderr),
        "auto: ran in the shell runtime (every command is built into the shell runtime)\n"
    );
    assert_eq!(ok(out).trim(), "3");

    // The shell runtime (the default) answers a missing command as bash
    // does, naming the runtimes that have it; no auto line.
    let out = server.cli(&["exec", "demo", "--", "python3 -V"]);
    assert_eq!(out.status.code(), Some(127));
    assert_eq!(
        text(&out.stderr),
        "bash: python3: command not found (the shell runtime runs built-in commands only; \
         --runtime container or --runtime auto runs real binaries)\n"
    );

    if sandbox_possible() {
        let out = server.cli(&[
            "exec",
            "demo",
            "--runtime",
            "auto",
            "--",
            "python3 -c \"print(6*7)\"",
        ]);
        assert_eq!(
            text(&out.stderr),
            "auto: ran in the container runtime (python3 is not a shell runtime command)\n"
        );
        assert_eq!(ok(out), "42\n");
    }

    // auto is a choice made at each exec, not a runtime to enable.
    let err = fails(server.cli(&["create", "other", "--runtime", "auto"]));
    assert!(
        err.starts_with("error: --runtime auto is for exec"),
        "{err}"
    );
    assert!(err.contains("--runtime shell,container"), "{err}");
    server.stop();
}
