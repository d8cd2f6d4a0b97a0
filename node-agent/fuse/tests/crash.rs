//! Crash test: a writer appends and fsyncs records through the mount while
//! the process serving the mount is killed with SIGKILL, again and again.
//! After each kill the stale mount is cleaned up, the database must pass
//! `Fs::check`, and every record whose fsync succeeded must be there.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentcomputer_fs::{Fs, Limits, ROOT_INO};
use agentcomputer_fuse::cleanup_stale_mounts;
use rand::Rng;

const SERVER: &str = env!("CARGO_BIN_EXE_agentcomputer-fuse");
const ROUNDS: usize = 6;
const RECORDS_PER_FILE: u64 = 40;

fn record(n: u64) -> String {
    format!("record {n:08} {}\n", "x".repeat((n % 97) as usize))
}

fn file_of(n: u64) -> String {
    format!("log-{:04}", n / RECORDS_PER_FILE)
}

/// Appends records from `first` on until the mount fails; pushes the number
/// of every record whose fsync succeeded.
fn write_until_failure(mnt: PathBuf, first: u64, acked: Arc<Mutex<Vec<u64>>>) {
    let mut n = first;
    loop {
        let r = (|| -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(mnt.join(file_of(n)))?;
            f.write_all(record(n).as_bytes())?;
            f.sync_all()
        })();
        if r.is_err() {
            return;
        }
        acked.lock().unwrap().push(n);
        n += 1;
    }
}

fn start_server(db: &Path, mnt: &Path) -> std::process::Child {
    let mut child = Command::new(SERVER)
        .arg("--db")
        .arg(db)
        .arg("--mountpoint")
        .arg(mnt)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("mounted"), "server said {line:?}");
    child
}

#[test]
fn fsynced_writes_survive_killing_the_server() {
    if !common::fuse_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let db = dir.path().join("fs.db");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    drop(Fs::create(&db, Limits::default()).unwrap());

    let acked = Arc::new(Mutex::new(Vec::new()));
    let mut rng = rand::rng();
    for round in 0..ROUNDS {
        let mut server = start_server(&db, &mnt);
        let first = acked.lock().unwrap().last().map_or(0, |n| n + 1);
        let writer = {
            let (mnt, acked) = (mnt.clone(), acked.clone());
            std::thread::spawn(move || write_until_failure(mnt, first, acked))
        };
        // Let at least one record through (a loaded machine may be slow to
        // start), then kill at a random moment.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while acked.lock().unwrap().len() <= first as usize {
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: the writer never got a record through"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(rng.random_range(50..400)));
        server.kill().unwrap(); // SIGKILL
        server.wait().unwrap();
        // The kernel fails every request of a dead server, so the writer ends.
        writer.join().unwrap();

        let removed = cleanup_stale_mounts(dir.path()).unwrap();
        assert_eq!(removed, vec![mnt.clone()], "round {round}");

        let fs = Fs::open(&db).unwrap();
        let problems = fs.check().unwrap();
        assert!(problems.is_empty(), "round {round}: {problems:?}");
        let acked = acked.lock().unwrap();
        for &n in acked.iter() {
            let ino = fs
                .resolve(ROOT_INO, file_of(n).as_bytes(), true)
                .unwrap_or_else(|e| panic!("round {round}: {} lost: {e}", file_of(n)))
                .ino;
            let content = String::from_utf8(fs.read_all(ino).unwrap()).unwrap();
            assert!(
                content.lines().any(|l| format!("{l}\n") == record(n)),
                "round {round}: acknowledged record {n} lost"
            );
        }
        eprintln!("round {round}: {} records acknowledged so far", acked.len());
    }
}
