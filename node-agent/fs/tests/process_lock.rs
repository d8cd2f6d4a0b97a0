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
