//! One exec cannot turn the computer's files into host memory, and a
//! timeout stops its work: the reproductions of the resource model
//! (docs/isolation.md), each run under a small memory budget.

mod common;

use agentcomputer_fs::{Limits, Owner, ROOT_INO, SetAttr, WriteMode};
use agentcomputer_shell::{EXIT_TIMEOUT, ExecRequest, ShellLimits};
use common::{Computer, Run, exec_with_limits};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The budget every run here gets: far below the sizes the scripts touch.
const BUDGET: u64 = 32 * 1024 * 1024;
/// A terabyte, the logical size of the sparse file (it stores nothing).
const TB: u64 = 1_000_000_000_000;

/// A computer whose byte quota (1e12) lets one file be a sparse terabyte:
/// a file's logical size is capped at the quota (docs/engine.md), so a
/// smaller computer could not even make the file these tests read. Holes
/// cost no quota, so the file stores nothing either way.
fn small_computer() -> Computer {
    Computer::with_limits(Limits {
        max_bytes: TB,
        ..Limits::default()
    })
}

/// `sparse`: a 1e12-byte file of one hole, made through the engine as
/// `truncate -s` or an API write at a huge offset would make it.
fn add_sparse(c: &Computer, name: &str, size: u64) {
    let a =
        c.fs.write_all(
            ROOT_INO,
            name.as_bytes(),
            b"",
            WriteMode::Truncate,
            0o644,
            Owner::ROOT,
        )
        .unwrap();
    let set = SetAttr {
        size: Some(size),
        ..SetAttr::default()
    };
    c.fs.setattr(a.ino, &set).unwrap();
}

async fn run(c: &Computer, script: &str, timeout: Duration) -> (Run, Duration) {
    let req = ExecRequest {
        script: script.into(),
        timeout,
        ..ExecRequest::default()
    };
    let limits = ShellLimits {
        memory_bytes: BUDGET,
        ..ShellLimits::default()
    };
    let start = Instant::now();
    let ran = exec_with_limits(&c.fs, req, CancellationToken::new(), limits).await;
    (ran, start.elapsed())
}

#[tokio::test]
async fn whole_file_commands_refuse_a_sparse_terabyte_before_allocating() {
    let c = small_computer();
    add_sparse(&c, "f", TB);
    // bashkit's own commands that need a whole input, and a redirection
    // of the file to stdin: refused up front with the limit named.
    for (cmd, message) in [
        ("sort f", "memory limit of 33554432 bytes exceeded"),
        ("sed -n 1p f", "memory limit of 33554432 bytes exceeded"),
        ("od -c f", "memory limit of 33554432 bytes exceeded"),
        // The project's tac and rev hold one record, here all zeros.
        ("tac f", "memory limit of 33554432 bytes exceeded"),
        ("rev f", "memory limit of 33554432 bytes exceeded"),
        ("gzip -c f", "memory limit of 33554432 bytes exceeded"),
        ("wc -c < f", "aggregate input bytes"),
    ] {
        let (ran, took) = run(&c, cmd, Duration::from_secs(10)).await;
        assert_ne!(ran.code(), 0, "{cmd}: {}", ran.stdout());
        assert!(ran.stderr().contains(message), "{cmd}: {}", ran.stderr());
        assert!(took < Duration::from_secs(2), "{cmd} took {took:?}");
    }
}

#[tokio::test]
async fn streaming_commands_handle_a_sparse_terabyte_in_bounded_memory() {
    let c = small_computer();
    add_sparse(&c, "f", TB);
    let (ran, took) = run(
        &c,
        "wc -c f; head -c 5 f | od -An -tx1; tail -c 3 f | wc -c; base64 f | head -c 8; echo; \
         cat f | head -c 1000000 | wc -c; cp f g; wc -c g; head -c 4 g | wc -c; xxd -s -4 f",
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(
        ran.ok(),
        "1000000000000 f\n 00 00 00 00 00\n3\nAAAAAAAA\n1000000\n1000000000000 g\n4\n\
         e8d4a50ffc: 0000 0000                                ....\n",
        "{}",
        ran.stderr()
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    // The copy is as sparse as its source: it costs the quota nothing.
    assert!(c.fs.statfs().unwrap().used_bytes < 64 * 1024);
}

#[tokio::test]
async fn reading_a_sparse_terabyte_stops_at_the_timeout() {
    let c = small_computer();
    add_sparse(&c, "f", TB);
    for cmd in [
        "md5sum f",
        "sha256sum f",
        "cat f | wc -c",
        "base64 f | wc -c",
        "cat f | tee g | wc -c",
    ] {
        let (ran, took) = run(&c, cmd, Duration::from_secs(1)).await;
        eprintln!("{cmd}: answered after {took:?} (timeout 1s)");
        assert_eq!(ran.code(), EXIT_TIMEOUT, "{cmd}: {}", ran.stderr());
        assert!(
            ran.stderr().contains("timed out after 1s"),
            "{cmd}: {}",
            ran.stderr()
        );
        assert!(
            took < Duration::from_secs(2),
            "{cmd} stopped after {took:?}"
        );
    }
}

#[tokio::test]
async fn a_pipeline_streams_eight_times_its_budget() {
    // `cat z64 ×8 | wc -c`: 512 MiB through a pipe under a 32 MiB budget.
    let c = small_computer();
    add_sparse(&c, "z64", 64 << 20);
    let (ran, _) = run(
        &c,
        "cat z64 z64 z64 z64 z64 z64 z64 z64 | wc -c; cat z64 z64 | md5sum",
        Duration::from_secs(120),
    )
    .await;
    // md5 of 128 MiB of zeros.
    assert_eq!(
        ran.ok(),
        "536870912\nfde9e0818281836e4fc0edfede2b8762  -\n",
        "{}",
        ran.stderr()
    );
}

#[tokio::test]
async fn a_copy_stopped_by_its_timeout_is_never_committed() {
    let c = Computer::with_limits(Limits {
        max_bytes: 1 << 30,
        ..Limits::default()
    });
    let data: Vec<u8> = (0..160u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8 | 1)
        .collect();
    c.write("big", &data);
    drop(data);
    let before = c.fs.statfs().unwrap();
    let (ran, took) = run(&c, "cp big copy", Duration::from_millis(300)).await;
    eprintln!("cp of 160 MiB: answered after {took:?} (timeout 300ms)");
    assert_eq!(ran.code(), EXIT_TIMEOUT, "{}", ran.stderr());
    assert!(took < Duration::from_millis(1300), "stopped after {took:?}");
    // Nothing of it appears later, and the unnamed copy was freed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        c.fs.lookup(ROOT_INO, b"copy").is_err(),
        "the copy was committed after the timeout"
    );
    let after = c.fs.statfs().unwrap();
    assert_eq!(after.used_bytes, before.used_bytes);
    assert_eq!(after.used_inodes, before.used_inodes);
}

/// Coreutils on the host, if present, on the same bytes.
fn host(script: &str, dir: &std::path::Path) -> Option<Vec<u8>> {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .ok()?;
    out.status.success().then_some(out.stdout)
}

#[tokio::test]
async fn replaced_commands_match_coreutils_above_their_buffers() {
    let c = Computer::with_limits(Limits {
        max_bytes: 1 << 30,
        ..Limits::default()
    });
    // 24 MiB of lines of varying length, with tabs, UTF-8 and control bytes.
    let mut text = Vec::new();
    let mut i: u64 = 0;
    while text.len() < 24 << 20 {
        i += 1;
        let n = (i * 2_654_435_761) % 97;
        text.extend_from_slice(format!("{i}\tlïne {n} ").as_bytes());
        text.extend(std::iter::repeat_n(b'a' + (n % 26) as u8, n as usize));
        if n.is_multiple_of(7) {
            text.extend_from_slice(b"\x01\x7f\xff");
        }
        text.push(b'\n');
        if n.is_multiple_of(11) {
            text.push(b'\n');
        }
    }
    c.write("t", &text);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("t"), &text).unwrap();
    let script = [
        "md5sum t",
        "sha1sum t",
        "sha224sum t",
        "sha256sum t",
        "sha384sum t",
        "sha512sum t",
        "wc t",
        "wc -l -w -m -c -L t",
        "wc t t",
        "head -c 3000001 t | md5sum",
        "head -n 100000 t | md5sum",
        "head -n -5 t | md5sum",
        "head -c -77 t | md5sum",
        "tail -n 7 t",
        "tail -c 100 t | md5sum",
        "tail -n +100000 t | md5sum",
        "tail -c +1000 t | md5sum",
        "cat -n t | md5sum",
        "cat -A t | md5sum",
        "cat -s -b t | md5sum",
        "base64 t | md5sum",
        "base64 -w 0 t | md5sum",
        "base64 t | base64 -d | md5sum",
        "cat t t | cat - t | md5sum",
        "cat t | tail -n 3",
        "cat t | head -n -2 | md5sum",
        "cat t | tee copy | md5sum; md5sum copy",
        "md5sum t > sums; md5sum -c sums",
    ];
    for cmd in script {
        let Some(expected) = host(&format!("export LC_ALL=C.UTF-8; {cmd}"), dir.path()) else {
            eprintln!("skipping: coreutils are not available on this host");
            return;
        };
        let (ran, _) = run(&c, cmd, Duration::from_secs(120)).await;
        assert_eq!(ran.code(), 0, "{cmd}: {}", ran.stderr());
        assert!(
            ran.stdout_bytes() == expected,
            "{cmd}: {:?} != {:?}",
            String::from_utf8_lossy(&ran.stdout_bytes()),
            String::from_utf8_lossy(&expected)
        );
    }
}
