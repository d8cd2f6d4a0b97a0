//! A writer that never pauses: the shipper still ends its WAL cycles (its
//! pinned checkpoints never catch up with such a writer, so it takes the
//! write lock for a moment), the WAL stays small, no snapshot is needed
//! after the first, and a restore holds every commit.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentcomputer_backup::{Options, Shipper, restore};
use agentcomputer_fs::{Fs, Limits};
use object_store::path::Path;

/// Salt-1 of the WAL's header: one more at every restart.
fn salt1(wal: &std::path::Path) -> u32 {
    let head = std::fs::read(wal).unwrap();
    u32::from_be_bytes(head[16..20].try_into().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_never_pauses_gets_its_wal_restarted_and_loses_nothing() {
    let Some(server) = common::ObjectServer::start() else {
        return;
    };
    let store = server.store();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let wal = dir.path().join("fs.db-wal");
    let fs = Fs::create(&db, Limits::default()).unwrap();
    fs.leave_checkpoints_to_backup().unwrap();
    common::write_file(&fs, "first", b"before the shipper");
    // As the node agent runs it, with a small WAL: 256 frames, 1 MiB.
    let options = Options {
        poll_interval: Duration::from_secs(1),
        checkpoint_pages: 256,
        ..Options::default()
    };
    let prefix = Path::from("computers/busy");
    let shipper = Shipper::start(&db, store.clone(), prefix.clone(), options)
        .await
        .unwrap();
    let wake = shipper.wake_handle();
    fs.subscribe(Box::new(move |_| wake.wake()));
    let first_salt = salt1(&wal);

    let done = Arc::new(AtomicBool::new(false));
    let largest_wal = Arc::new(AtomicU64::new(0));
    let watcher = {
        let (done, largest, wal) = (done.clone(), largest_wal.clone(), wal.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Acquire) {
                if let Ok(m) = std::fs::metadata(&wal) {
                    largest.fetch_max(m.len(), Ordering::AcqRel);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let writer_fs = fs.clone();
    let writer = tokio::task::spawn_blocking(move || {
        let mut expect = BTreeMap::new();
        expect.insert("first".to_string(), b"before the shipper".to_vec());
        let start = Instant::now();
        let mut i = 0;
        // A commit every millisecond or so: never the pause a pinned
        // checkpoint needs to catch up (it runs for longer), and a pace a
        // debug build's shipper, which checksums every frame without
        // optimizations, keeps up with.
        while start.elapsed() < Duration::from_secs(3) || i < 1000 {
            let name = format!("f{}", i % 40);
            let data = common::content(i, 4096);
            common::write_file(&writer_fs, &name, &data);
            expect.insert(name, data);
            i += 1;
            std::thread::sleep(Duration::from_millis(1));
        }
        (expect, i)
    });
    let (expect, commits) = writer.await.unwrap();
    done.store(true, Ordering::Release);
    watcher.join().unwrap();

    let at = shipper.sync().await.unwrap();
    let restarts = salt1(&wal).wrapping_sub(first_salt);
    let largest = largest_wal.load(Ordering::Acquire);
    eprintln!(
        "{commits} commits, {restarts} WAL restarts, largest WAL {largest} bytes, {} uploads",
        at.uploads
    );
    assert_eq!(at.snapshots, 1, "{at:?}: every restart was the shipper's");
    assert!(at.txn >= commits as u64, "{at:?}: {commits} commits");
    assert!(
        restarts >= 5,
        "only {restarts} WAL restarts under a busy writer"
    );
    // Each cycle holds about 256 frames plus what the writer added before
    // the shipper took the lock; without restarts the WAL grows by about
    // 20 KiB a commit.
    assert!(
        largest < 8 << 20,
        "the WAL grew to {largest} bytes under a busy writer"
    );

    let dest = dir.path().join("restored.db");
    let r = restore(&store, &prefix, &dest).await.unwrap();
    assert_eq!(r.position, at.position);
    let restored = Fs::open(&dest).unwrap();
    assert!(restored.check().unwrap().is_empty());
    assert_eq!(common::files(&restored), expect);
    shipper.stop().await.unwrap();
}
