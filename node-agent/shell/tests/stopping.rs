//! A stopped exec stops: after its timeout or a cancellation the script
//! ends at its next statement boundary at the latest, the caller hears
//! within 1 s, and nothing of the run lands in the computer after the
//! answer. Tried with every command that can run long on a big input.

mod common;

use agentcomputer_fs::{FileKind, Fs, Ino, ROOT_INO};
use agentcomputer_shell::{EXIT_CANCELLED, EXIT_TIMEOUT, ExecRequest};
use common::{Computer, exec};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How long past its timeout or cancellation a run may take to answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);

/// Commands that run for seconds on the computer made by [`computer`] (a
/// 1 GiB sparse file `sparse`, ~40 MB of numbered lines in `big`, plain and
/// in `tree/`, five times that in `blob`, 20 000 small files under
/// `files/`), each followed by statements that must never run once the
/// exec was stopped.
const LONG: &[&str] = &[
    "cp blob copy",
    "cat sparse > out",
    // Three times over: one 40 MB copy can end within the 300 ms timeout.
    "cat big big big > out",
    "cat big big big big | wc -l > count",
    "sort big > sorted",
    "xxd big > hex",
    "xxd -p -c 900000000 blob > hex",
    "tac blob > reversed",
    "cat big big | tac > reversed",
    "rev blob > reversed",
    "grep -r 123456 . > hits",
    "seq 1 100000000 > nums",
    "head -c 900000000 /dev/zero > zeros",
    "tail -n 1 sparse > last",
    "sha256sum sparse > sum",
    "for i in 1 2 3 4 5; do find . > list; done",
    "for i in 1 2 3; do grep -r zzz files > hits; done",
    "tar cf /tmp/files.tar files",
    "git init -q . && git add -A",
    "sleep 30",
    "while read l; do :; done < big",
];

/// "1\n2\n...\n" up to `count`.
fn numbers(count: u32) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 1..=count {
        out.extend_from_slice(format!("{i}\n").as_bytes());
    }
    out
}

async fn computer() -> Computer {
    let c = Computer::new();
    let lines = numbers(5_000_000);
    c.write("big", &lines);
    c.write("blob", &lines.repeat(5));
    c.fs.mkdir(ROOT_INO, b"tree", 0o755, agentcomputer_fs::Owner::ROOT)
        .expect("mkdir");
    c.write("tree/a", &lines);
    c.write("tree/b", &lines);
    c.write("sparse", b"");
    // 20 000 small files in 20 directories.
    let owner = agentcomputer_fs::Owner::ROOT;
    let files = c.fs.mkdir(ROOT_INO, b"files", 0o755, owner).expect("mkdir");
    for d in 0..20 {
        let dir =
            c.fs.mkdir(files.ino, format!("d{d}").as_bytes(), 0o755, owner)
                .expect("mkdir");
        for f in 0..1000 {
            c.fs.write_all(
                dir.ino,
                format!("f{f}").as_bytes(),
                format!("{f}\n").as_bytes(),
                agentcomputer_fs::WriteMode::Truncate,
                0o644,
                owner,
            )
            .expect("write");
        }
    }
    let ino = c.fs.resolve(ROOT_INO, b"sparse", true).expect("sparse").ino;
    c.fs.setattr(
        ino,
        &agentcomputer_fs::SetAttr {
            size: Some(1 << 30),
            ..Default::default()
        },
    )
    .expect("1 GiB sparse file");
    c
}

/// Every name under the engine root with its kind, size and mtime.
fn tree(fs: &Fs) -> Vec<(String, u64, i64, u32)> {
    fn walk(fs: &Fs, dir: Ino, prefix: &str, out: &mut Vec<(String, u64, i64, u32)>) {
        for entry in fs.readdir(dir, 0, 100_000).expect("readdir") {
            let name = format!("{prefix}/{}", String::from_utf8_lossy(&entry.name));
            let attr = fs.getattr(entry.ino).expect("getattr");
            out.push((name.clone(), attr.size, attr.mtime.sec, attr.mtime.nsec));
            if entry.kind == FileKind::Directory {
                walk(fs, entry.ino, &name, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(fs, ROOT_INO, "", &mut out);
    out.sort();
    out
}

/// Runs `long` then `echo after` into a file and to stdout, stopped by a
/// 300 ms timeout (`cancel_after` `None`) or a cancellation; checks the exit
/// status, the time to the answer, that nothing after `long` ran, and that
/// the computer does not change after the answer.
async fn stopped(c: &Computer, long: &str, cancel_after: Option<Duration>) {
    let script = format!("{long}; echo after > marker; echo after");
    let timeout = match cancel_after {
        Some(_) => Duration::from_secs(60),
        None => Duration::from_millis(300),
    };
    let cancel = CancellationToken::new();
    if let Some(after) = cancel_after {
        let trigger = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            trigger.cancel();
        });
    }
    let start = Instant::now();
    let run = exec(
        &c.fs,
        ExecRequest {
            script: script.clone(),
            timeout,
            ..ExecRequest::default()
        },
        cancel,
    )
    .await;
    let took = start.elapsed();
    let at_answer = tree(&c.fs);
    let (code, stopped_at) = match cancel_after {
        Some(after) => (EXIT_CANCELLED, after),
        None => (EXIT_TIMEOUT, timeout),
    };
    eprintln!("{script}: exit {} after {took:?}", run.code());
    let (out, err) = (run.stdout(), run.stderr());
    assert_eq!(run.code(), code, "{script}: stdout {out:?} stderr {err:?}");
    assert!(
        took < stopped_at + ANSWER_WITHIN,
        "{script}: answered after {took:?}"
    );
    assert!(
        !out.contains("after"),
        "{script}: the statement after the stopped command ran: stdout {out:?} stderr {err:?}"
    );
    assert!(
        !at_answer.iter().any(|(name, ..)| name == "/marker"),
        "{script}: the statement after the stopped command ran"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        tree(&c.fs),
        at_answer,
        "{script}: the computer changed after the answer"
    );
    // Clean up for the next case (the outputs would slow it down).
    let _ = c
        .sh("rm -f copy out count sorted hits nums zeros last sum list hex reversed")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_exec_stops_at_the_next_statement_and_leaves_nothing_after() {
    let c = computer().await;
    for long in LONG {
        stopped(&c, long, None).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_exec_stops_at_the_next_statement_and_leaves_nothing_after() {
    let c = computer().await;
    for long in LONG {
        stopped(&c, long, Some(Duration::from_millis(300))).await;
    }
}

/// `truncate` sizes files by metadata: sizes far past the exec's memory
/// budget take no time and no memory; bad input fails with GNU's messages.
#[tokio::test]
async fn truncate_sizes_by_metadata() {
    let c = Computer::new();
    let start = Instant::now();
    let out = c
        .sh("truncate -s 8G f && truncate -s +1G f && truncate -s 1200000000 g h && wc -c f && wc -c h && truncate -s '<5' f && wc -c f && truncate -r g -s -200000000 f && wc -c f && truncate -c -s 1 nofile; ls nofile")
        .await;
    let took = start.elapsed();
    assert_eq!(
        out.stdout(),
        "9663676416 f\n1200000000 h\n5 f\n1000000000 f\n",
        "{out:?}"
    );
    assert!(out.stderr().contains("nofile"), "{out:?}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    // Holes cost nothing.
    let statfs = c.fs.statfs().unwrap();
    assert!(statfs.used_bytes < 1 << 20, "{statfs:?}");

    // Shrinking keeps the head of the content.
    c.write("text", b"hello world");
    assert_eq!(c.sh("truncate -s 5 text; cat text").await.ok(), "hello");
    assert_eq!(
        c.sh("truncate -s %4 text; wc -c text; head -c 5 text")
            .await
            .ok(),
        "8 text\nhello",
    );
    // Through a symlink, in the workspace and into scratch.
    let out = c
        .sh("ln -s text l; truncate -s 2 l; cat text; echo; ln -s /tmp/s ls; truncate -s 3 ls; wc -c /tmp/s")
        .await;
    assert_eq!(out.ok(), "he\n3 /tmp/s\n");

    for (script, message) in [
        (
            "truncate -s 20G f",
            "truncate: failed to truncate 'f' at 21474836480 bytes: File too large\n",
        ),
        (
            "truncate -s 100M /tmp/x",
            "truncate: failed to truncate '/tmp/x' at 104857600 bytes: File too large\n",
        ),
        ("truncate -s x f", "truncate: Invalid number: 'x'\n"),
        (
            "truncate -s 8E f",
            "truncate: Invalid number: '8E': Value too large for defined data type\n",
        ),
        (
            "truncate f",
            "truncate: you must specify either '--size' or '--reference'\nTry 'truncate --help' for more information.\n",
        ),
        (
            "truncate -s 1",
            "truncate: missing file operand\nTry 'truncate --help' for more information.\n",
        ),
        (
            "mkdir -p d; truncate -s 1 d",
            "truncate: cannot open 'd' for writing: Is a directory\n",
        ),
        (
            "truncate -s 1 nodir/x",
            "truncate: cannot open 'nodir/x' for writing: No such file or directory\n",
        ),
        ("truncate -s /0 f", "truncate: division by zero\n"),
    ] {
        let out = c.sh(script).await;
        assert_eq!(out.code(), 1, "{script}: {out:?}");
        assert_eq!(out.stderr(), message, "{script}");
    }
    // A refused size changed nothing.
    assert_eq!(c.sh("wc -c f").await.ok(), "1000000000 f\n");
}
