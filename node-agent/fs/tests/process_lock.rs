//! One process per database: a second process gets `EBUSY` naming the
//! holder, and the lock dies with the process that held it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use agentcomputer_fs::{Errno, Fs};

#[test]
fn a_database_open_in_another_process_is_refused_until_it_dies() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let mut writer = Command::new(env!("CARGO_BIN_EXE_fs-crash-writer"))
        .arg(&db)
        .arg("0")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The writer prints a line per fsynced record: it has the database open.
    let mut line = String::new();
    BufReader::new(writer.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.starts_with("ack") || line.starts_with("orphan"),
        "{line:?}"
    );

    let err = Fs::open(&db).unwrap_err();
    assert_eq!(err.errno(), Errno::EBUSY, "{err}");
    assert!(
        err.to_string()
            .contains(&format!("process {}", writer.id())),
        "{err}"
    );

    // SIGKILL: the kernel releases the lock with the process.
    writer.kill().unwrap();
    writer.wait().unwrap();
    let fs = Fs::open(&db).unwrap();
    assert_eq!(fs.check().unwrap(), Vec::<String>::new());
    // Within one process a reopen is the caller's business and not refused
    // (the crash tests leak an `Fs` and reopen it).
    std::mem::forget(fs);
    Fs::open(&db).unwrap();
}

/// An engine closing late (its directory was replaced while it was still
/// open, as when a computer is deleted and made again under a lease) must
/// not remove the lock of the database that now has its path.
#[test]
fn a_late_close_leaves_the_new_databases_lock_alone() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("computer");
    std::fs::create_dir(&home).unwrap();
    let db = home.join("fs.db");
    let old = Fs::create(&db, agentcomputer_fs::Limits::default()).unwrap();
    std::fs::rename(&home, dir.path().join("deleted")).unwrap();
    std::fs::create_dir(&home).unwrap();
    let new = Fs::create(&db, agentcomputer_fs::Limits::default()).unwrap();
    drop(old);

    // Another process must still find the new database locked: the writer
    // exits with an error at once instead of writing forever.
    let mut writer = Command::new(env!("CARGO_BIN_EXE_fs-crash-writer"))
        .arg(&db)
        .arg("0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        if let Some(status) = writer.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            writer.kill().unwrap();
            writer.wait().unwrap();
            panic!("another process opened the live database");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(!status.success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut writer.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("is open in process"), "{stderr}");
    drop(new);
}
