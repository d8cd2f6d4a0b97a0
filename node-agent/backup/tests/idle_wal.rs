//! While a backup runs, the engine leaves the WAL file at its largest
//! (truncating it at a restart made the writer wait); once the database
//! is idle, the shipper truncates it, without a new snapshot and without
//! losing a commit.

mod common;

use std::time::{Duration, Instant};

use agentcomputer_backup::{Options, Shipper, restore};
use agentcomputer_fs::{Fs, Limits, WAL_SIZE_LIMIT};
use object_store::path::Path;

fn wal_len(wal: &std::path::Path) -> u64 {
    std::fs::metadata(wal).map_or(0, |m| m.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_databases_large_wal_is_truncated_and_the_log_goes_on() {
    let Some(server) = common::ObjectServer::start() else {
        return;
    };
    let store = server.store();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let wal = dir.path().join("fs.db-wal");
    let fs = Fs::create(&db, Limits::default()).unwrap();
    fs.leave_checkpoints_to_backup().unwrap();
    let prefix = Path::from("computers/idle");
    let shipper = Shipper::start(
        &db,
        store.clone(),
        prefix.clone(),
        Options {
            poll_interval: Duration::from_millis(100),
            writer_hold: Some(fs.writer_hold()),
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let wake = shipper.wake_handle();
    fs.subscribe(Box::new(move |_| wake.wake()));

    // One transaction larger than the engine's WAL limit.
    let big = common::content(1, 40 << 20);
    let writer_fs = fs.clone();
    let data = big.clone();
    tokio::task::spawn_blocking(move || common::write_file(&writer_fs, "big", &data))
        .await
        .unwrap();
    shipper.sync().await.unwrap();
    let largest = wal_len(&wal);
    assert!(largest > WAL_SIZE_LIMIT, "WAL {largest} bytes after 40 MiB");

    // Idle: about a second after the last commit, the file is emptied.
    let start = Instant::now();
    while wal_len(&wal) > 0 && start.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let idle = start.elapsed();
    assert_eq!(
        wal_len(&wal),
        0,
        "WAL still {} bytes after {idle:?}",
        wal_len(&wal)
    );

    // The next commits start the next cycle, which the shipper follows
    // without a snapshot.
    let writer_fs = fs.clone();
    tokio::task::spawn_blocking(move || {
        common::write_file(&writer_fs, "after", b"after the truncation");
        common::write_file(&writer_fs, "again", b"and another")
    })
    .await
    .unwrap();
    let at = shipper.sync().await.unwrap();
    assert_eq!(at.snapshots, 1, "{at:?}");
    let dest = dir.path().join("restored.db");
    let r = restore(&store, &prefix, &dest).await.unwrap();
    assert_eq!(r.position, at.position);
    let restored = Fs::open(&dest).unwrap();
    assert!(restored.check().unwrap().is_empty());
    let files = common::files(&restored);
    assert_eq!(files["big"], big);
    assert_eq!(files["after"], b"after the truncation");
    assert_eq!(files["again"], b"and another");
    assert_eq!(files, common::files(&fs));
    shipper.stop().await.unwrap();
}
