//! Crash test: a child process writes and fsyncs through the engine and
//! prints every acknowledged record; we SIGKILL it at random moments and
//! check after each kill that the database opens clean, passes `check()`,
//! holds every acknowledged record, and lost its unlinked-but-open inodes.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use agentcomputer_fs::{Fs, ROOT_INO};
use rand::Rng;

/// Same stream as the writer's `pattern`.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn expected(fields: &[&str]) -> (String, Vec<u8>) {
    let n = |i: usize| fields[i].parse::<u64>().unwrap();
    let mut data = pattern(n(2), n(1) as usize);
    if fields.len() == 6 {
        let (off, plen) = (n(3) as usize, n(4) as usize);
        let patch = pattern(n(5), plen);
        if data.len() < off + plen {
            data.resize(off + plen, 0);
        }
        data[off..off + plen].copy_from_slice(&patch);
    }
    (fields[0].to_string(), data)
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    kill_and_check(None);
}

/// The same through a view with a commit window (as the FUSE server uses):
/// calls return before they commit, but `fsync` commits their batch first,
/// so every record acknowledged after an `fsync` survives.
#[test]
fn acknowledged_writes_survive_sigkill_with_group_commit() {
    kill_and_check(Some(20));
}

fn kill_and_check(window_ms: Option<u64>) {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("crash.db");
    let mut rng = rand::rng();
    let mut acked: Vec<(String, Vec<u8>)> = Vec::new();
    let mut orphans: Vec<u64> = Vec::new();
    let mut next_id = 0u64;
    let runs = 32;
    for run in 0..runs {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fs-crash-writer"))
            .arg(&db)
            .arg(next_id.to_string())
            .args(window_ms.map(|w| w.to_string()))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            let mut r = BufReader::new(stdout);
            let mut buf = String::new();
            // Only whole lines count: a line cut by the kill is dropped.
            while r.read_line(&mut buf).unwrap_or(0) > 0 {
                if buf.ends_with('\n') {
                    lines.push(buf.trim_end().to_string());
                }
                buf.clear();
            }
            lines
        });
        std::thread::sleep(Duration::from_millis(rng.random_range(20..400)));
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        assert!(
            status.code().is_none(),
            "writer exited on its own: {status:?}"
        );
        let lines = reader.join().unwrap();
        for line in &lines {
            let fields: Vec<&str> = line.split(' ').collect();
            match fields[0] {
                "ack" => {
                    acked.push(expected(&fields[1..]));
                    next_id += 1;
                }
                "orphan" => orphans.push(fields[1].parse().unwrap()),
                other => panic!("unexpected line {other}"),
            }
        }
        // The record in flight at the kill may exist partly: skip its id.
        next_id += 1;

        let fs = Fs::open(&db).unwrap();
        let problems = fs.check().unwrap();
        assert!(problems.is_empty(), "run {run}: {problems:?}");
        for (path, data) in &acked {
            let a = fs
                .resolve(ROOT_INO, path.as_bytes(), true)
                .unwrap_or_else(|e| panic!("run {run}: acknowledged {path} missing: {e}"));
            assert_eq!(a.size, data.len() as u64, "run {run}: size of {path}");
            assert!(
                fs.read_all(a.ino).unwrap() == *data,
                "run {run}: content of {path}"
            );
        }
        for ino in &orphans {
            assert_eq!(
                fs.getattr(*ino).unwrap_err().errno_name(),
                "ENOENT",
                "run {run}: orphan {ino} survived reopen"
            );
        }
        drop(fs);
    }
    eprintln!(
        "{runs} kills, {} acknowledged records, {} orphans",
        acked.len(),
        orphans.len()
    );
    assert!(
        acked.len() >= runs,
        "too few acknowledged records: {}",
        acked.len()
    );
    assert!(
        !orphans.is_empty(),
        "no unlink-while-open case was exercised"
    );
}
