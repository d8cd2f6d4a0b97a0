//! A writer that starts with a burst, long before the next upload is
//! due: the engine's wakes alone have the shipper read, checkpoint and
//! restart the WAL in steps, so the WAL stays small, and a restore after
//! `sync` holds every commit.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use agentcomputer_backup::{Options, Shipper, restore};
use agentcomputer_fs::{Fs, Limits};
use object_store::path::Path;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_is_read_and_its_wal_restarted_in_steps_before_any_upload_is_due() {
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
    // Cycles of 1024 frames (4 MiB), read every 256 frames (1 MiB). After a quiet spell the first commit
    // goes up at once; the burst that follows is within the next upload
    // interval, and no poll is due in it.
    let interval = Duration::from_secs(3);
    let options = Options {
        poll_interval: Duration::from_secs(60),
        min_upload_interval: interval,
        checkpoint_pages: 1024,
        writer_hold: Some(fs.writer_hold()),
        ..Options::default()
    };
    let shipper = Shipper::start(&db, store.clone(), Path::from("burst"), options)
        .await
        .unwrap();
    let wake = shipper.wake_handle();
    fs.subscribe(Box::new(move |_| wake.wake()));
    tokio::time::sleep(interval + Duration::from_millis(200)).await;
    common::write_file(&fs, "after a quiet spell", b"goes up at once");
    let first_salt = common::salt1(&wal);

    // 3000 commits of a 16 KiB file, back to back: about 18,000 frames,
    // 70 MiB of WAL if nothing were read until an upload (and at most a
    // restart or two). A release build writes it in about 0.6 s: 16, 9 and
    // 8 restarts and a WAL of 19-31 MiB in three runs on two loaded cores.
    let writer_fs = fs.clone();
    let (expect, largest_wal) = tokio::task::spawn_blocking(move || {
        let mut expect = BTreeMap::new();
        expect.insert("first".to_string(), b"before the shipper".to_vec());
        expect.insert(
            "after a quiet spell".to_string(),
            b"goes up at once".to_vec(),
        );
        let mut largest = 0;
        for i in 0..3000 {
            let name = format!("f{}", i % 50);
            let data = common::content(i, 16 << 10);
            common::write_file(&writer_fs, &name, &data);
            expect.insert(name, data);
            largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
        }
        (expect, largest)
    })
    .await
    .unwrap();
    let restarts = common::salt1(&dir.path().join("fs.db-wal")).wrapping_sub(first_salt);
    eprintln!("{restarts} WAL restarts, largest WAL {largest_wal} bytes");
    assert!(
        restarts >= 4,
        "only {restarts} WAL restarts in a 70 MiB burst of 4 MiB cycles"
    );
    assert!(
        largest_wal < 48 << 20,
        "the WAL grew to {largest_wal} bytes in a burst before any upload"
    );

    let at = shipper.sync().await.unwrap();
    assert_eq!(at.snapshots, 1, "{at:?}: every restart was the shipper's");
    let dest = dir.path().join("restored.db");
    restore(&store, &Path::from("burst"), &dest).await.unwrap();
    let restored = Fs::open(&dest).unwrap();
    assert!(restored.check().unwrap().is_empty());
    assert_eq!(common::files(&restored), expect);
    shipper.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_within_the_upload_interval_goes_up_when_it_ends() {
    let Some(server) = common::ObjectServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let fs = Fs::create(&db, Limits::default()).unwrap();
    fs.leave_checkpoints_to_backup().unwrap();
    // No poll within the test: only the upload interval's end ships the
    // second commit, whose wake calls for no round.
    let interval = Duration::from_millis(300);
    let options = Options {
        poll_interval: Duration::from_secs(60),
        min_upload_interval: interval,
        writer_hold: Some(fs.writer_hold()),
        ..Options::default()
    };
    let shipper = Shipper::start(&db, server.store(), Path::from("interval"), options)
        .await
        .unwrap();
    let wake = shipper.wake_handle();
    fs.subscribe(Box::new(move |_| wake.wake()));
    tokio::time::sleep(interval).await;
    let mut shipped = shipper.shipped();
    common::write_file(&fs, "a", b"goes up at once");
    let first = tokio::time::timeout(Duration::from_secs(5), async {
        shipped
            .wait_for(|p| p.uploads >= 2)
            .await
            .map(|p| p.txn)
            .unwrap()
    })
    .await
    .expect("the first commit after a quiet spell goes up at once");
    common::write_file(&fs, "b", b"waits for the interval's end");
    let started = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(10), shipped.wait_for(|p| p.txn > first))
        .await
        .expect("a commit within the upload interval waited for a poll")
        .unwrap();
    assert!(
        started.elapsed() < interval + Duration::from_millis(700),
        "shipped after {:?}",
        started.elapsed()
    );
    shipper.stop().await.unwrap();
}
