//! `Fs::commit_only_while`: once the rule says no, no call commits
//! anything (each fails with EIO, a batch is lost whole), through a plain
//! view and a view with a commit window; when it says yes again, calls
//! commit as before.

mod common;
use common::committed_names;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agentcomputer_fs::{Errno, FileKind, Fs, Limits, Owner, ROOT_INO};

fn touch(fs: &Fs, name: &str) -> agentcomputer_fs::Result<u64> {
    fs.mknod(
        ROOT_INO,
        name.as_bytes(),
        FileKind::RegularFile,
        0o644,
        0,
        Owner::ROOT,
    )
    .map(|a| a.ino)
}

#[test]
fn nothing_commits_while_the_rule_says_no() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let fs = Fs::create(&db, Limits::default()).unwrap();
    let held = Arc::new(AtomicBool::new(true));
    {
        let held = held.clone();
        fs.commit_only_while(move || held.load(Ordering::Acquire))
            .unwrap();
    }
    touch(&fs, "before").unwrap();

    held.store(false, Ordering::Release);
    let e = touch(&fs, "after-loss").unwrap_err();
    assert_eq!(e.errno(), Errno::EIO, "{e}");
    let e = fs
        .write_all(
            ROOT_INO,
            b"before",
            b"late data",
            agentcomputer_fs::WriteMode::Truncate,
            0o644,
            Owner::ROOT,
        )
        .unwrap_err();
    assert_eq!(e.errno(), Errno::EIO, "{e}");
    // A view with a commit window: its calls look done, but the batch
    // is refused at its commit and reported lost.
    let windowed = fs.with_commit_window(Duration::from_secs(3600));
    let _ = touch(&windowed, "in-a-batch");
    assert!(windowed.flush().is_err(), "the batch's commit was refused");
    assert_eq!(committed_names(&db), ["before"]);
    let attr = fs.lookup(ROOT_INO, b"before").unwrap();
    assert_eq!(
        fs.read_all(attr.ino).unwrap(),
        b"",
        "the refused write left nothing"
    );

    held.store(true, Ordering::Release);
    touch(&fs, "after-renew").unwrap();
    assert_eq!(committed_names(&db), ["after-renew", "before"]);
}
