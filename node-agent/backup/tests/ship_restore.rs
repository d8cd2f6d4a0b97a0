//! The shipper under a write load against a real S3-compatible server,
//! restored into an empty directory: every committed transaction is there.

mod common;

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::Duration;

use agentcomputer_backup::{Options, Shipper, restore};
use agentcomputer_fs::{Fs, Limits};
use object_store::path::Path;
use rand::{Rng, SeedableRng};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_under_writes_is_restored_with_every_committed_transaction() {
    let Some(server) = common::ObjectServer::start() else {
        return;
    };
    let store = server.store();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let fs = Fs::create(&db, Limits::default()).unwrap();
    fs.leave_checkpoints_to_backup().unwrap();
    common::write_file(&fs, "before-start", b"written before the shipper started");
    // A small checkpoint threshold, so the WAL restarts many times.
    let options = Options {
        poll_interval: Duration::from_millis(5),
        checkpoint_pages: 64,
        ..Options::default()
    };
    let prefix = Path::from("computers/load");
    let shipper = Shipper::start(&db, store.clone(), prefix.clone(), options.clone())
        .await
        .unwrap();

    // The writer: creates, overwrites and deletes files, each one
    // transaction; it reports each acknowledged state to the test.
    let (acked_tx, acked_rx) = mpsc::channel::<BTreeMap<String, Vec<u8>>>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let writer_fs = fs.clone();
    let writer = std::thread::spawn(move || {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut expect = BTreeMap::new();
        expect.insert(
            "before-start".to_string(),
            b"written before the shipper started".to_vec(),
        );
        for i in 0..400 {
            let name = format!("f{}", rng.random_range(0..120));
            if i % 7 == 3 && expect.contains_key(&name) {
                writer_fs
                    .unlink(agentcomputer_fs::ROOT_INO, name.as_bytes())
                    .unwrap();
                expect.remove(&name);
            } else {
                let data = common::content(i, rng.random_range(0..40_000));
                common::write_file(&writer_fs, &name, &data);
                expect.insert(name, data);
            }
            if i % 50 == 49 {
                // Waits while the test syncs and restores this state.
                acked_tx.send(expect.clone()).unwrap();
                go_rx.recv().unwrap();
            }
        }
        acked_tx.send(expect.clone()).unwrap();
        expect
    });
    // At each pause: sync, then a restore holds exactly the acknowledged state.
    let mut restores = 0;
    while let Ok(acked) = acked_rx.recv() {
        let at = shipper.sync().await.unwrap();
        if restores < 3 {
            let dest = dir.path().join(format!("mid-{restores}.db"));
            let r = restore(&store, &prefix, &dest).await.unwrap();
            assert_eq!(r.position, at.position);
            assert_eq!(
                common::files(&Fs::open(&dest).unwrap()),
                acked,
                "restore {restores}"
            );
            restores += 1;
        }
        let _ = go_tx.send(());
    }
    let expect = writer.join().unwrap();
    let at = shipper.sync().await.unwrap();
    assert!(at.txn >= 400, "{at:?}: every write is a transaction");
    assert_eq!(
        at.snapshots, 1,
        "{at:?}: only the first snapshot; the shipper ran every checkpoint"
    );
    let wal = std::fs::metadata(dir.path().join("fs.db-wal"))
        .unwrap()
        .len();
    assert!(
        wal < 64 * 1024 * 1024,
        "the WAL stayed bounded: {wal} bytes"
    );

    let dest_dir = tempfile::tempdir().unwrap();
    let dest = dest_dir.path().join("fs.db");
    let r = restore(&store, &prefix, &dest).await.unwrap();
    assert_eq!(r.position, at.position);
    assert_eq!(r.snapshot, 1);
    let restored = Fs::open(&dest).unwrap();
    assert!(restored.check().unwrap().is_empty());
    assert_eq!(common::files(&restored), expect);
    assert_eq!(common::files(&fs), expect);
    shipper.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_never_replaces_a_file_and_an_empty_prefix_is_reported() {
    let Some(server) = common::ObjectServer::start() else {
        return;
    };
    let store = server.store();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("exists.db");
    std::fs::write(&dest, b"keep me").unwrap();
    let e = restore(&store, &Path::from("nothing"), &dest)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("never replaces"), "{e}");
    assert_eq!(std::fs::read(&dest).unwrap(), b"keep me");
    let e = restore(&store, &Path::from("nothing"), &dir.path().join("new.db"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no backup under nothing"), "{e}");
    assert!(!dir.path().join("new.db").exists());
}

/// Without the engine's hook, a checkpoint the shipper did not run
/// (`Fs::compact` ends with `wal_checkpoint(TRUNCATE)`) may copy frames
/// not yet shipped and empty the WAL: the shipper notices and writes a new
/// snapshot, so the restore still holds every commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_the_shipper_did_not_run_costs_a_snapshot_and_loses_nothing() {
    let Some(server) = common::ObjectServer::start() else {
        return;
    };
    let store = server.store();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let fs = Fs::create(&db, Limits::default()).unwrap();
    let prefix = Path::from("computers/foreign-checkpoint");
    // Polls rarely, so the compact below runs before the writes are shipped.
    let options = Options {
        poll_interval: Duration::from_secs(3600),
        ..Options::default()
    };
    let shipper = Shipper::start(&db, store.clone(), prefix.clone(), options.clone())
        .await
        .unwrap();
    for i in 0..10 {
        common::write_file(&fs, &format!("a{i}"), &common::content(i, 5000));
    }
    assert_eq!(shipper.sync().await.unwrap().snapshots, 1);
    for i in 0..5 {
        common::write_file(&fs, &format!("b{i}"), &common::content(i + 50, 7000));
    }
    fs.compact().unwrap();
    assert_eq!(
        fs.disk_usage().unwrap().wal_bytes,
        0,
        "the engine's checkpoint emptied the WAL"
    );
    common::write_file(&fs, "after", b"after the foreign checkpoint");
    let at = shipper.sync().await.unwrap();
    assert_eq!(at.snapshots, 2, "{at:?}");
    let dest = dir.path().join("restored.db");
    restore(&store, &prefix, &dest).await.unwrap();
    assert_eq!(common::files(&Fs::open(&dest).unwrap()), common::files(&fs));
    shipper.stop().await.unwrap();
}

/// With the hook the engine runs no checkpoint of its own, `compact`'s
/// included: the shipper's first snapshot is its only one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_checkpoints_left_to_the_shipper_compact_keeps_the_wal() {
    let Some(server) = common::ObjectServer::start() else {
        return;
    };
    let store = server.store();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let fs = Fs::create(&db, Limits::default()).unwrap();
    fs.leave_checkpoints_to_backup().unwrap();
    assert!(fs.checkpoints_left_to_backup());
    let prefix = Path::from("computers/hooked");
    let options = Options {
        poll_interval: Duration::from_secs(3600),
        ..Options::default()
    };
    let shipper = Shipper::start(&db, store.clone(), prefix.clone(), options.clone())
        .await
        .unwrap();
    for i in 0..5 {
        common::write_file(&fs, &format!("b{i}"), &common::content(i, 7000));
    }
    fs.compact().unwrap();
    assert!(
        fs.disk_usage().unwrap().wal_bytes > 0,
        "compact left the WAL to the shipper"
    );
    let at = shipper.sync().await.unwrap();
    assert_eq!(at.snapshots, 1, "{at:?}");
    let dest = dir.path().join("restored.db");
    restore(&store, &prefix, &dest).await.unwrap();
    assert_eq!(common::files(&Fs::open(&dest).unwrap()), common::files(&fs));
    shipper.stop().await.unwrap();
}

/// An agent that stops and opens the computer again (or another node
/// after a restore) starts a new shipper on the same prefix: it snapshots
/// at the next position and the log restores to the latest state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_shipper_on_a_reopened_database_continues_the_log() {
    let Some(server) = common::ObjectServer::start() else {
        return;
    };
    let store = server.store();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let prefix = Path::from("computers/reopened");
    let options = Options {
        poll_interval: Duration::from_secs(3600),
        ..Options::default()
    };
    {
        let fs = Fs::create(&db, Limits::default()).unwrap();
        fs.leave_checkpoints_to_backup().unwrap();
        let shipper = Shipper::start(&db, store.clone(), prefix.clone(), options.clone())
            .await
            .unwrap();
        common::write_file(&fs, "a", b"first life");
        assert_eq!(shipper.sync().await.unwrap().position, 2);
        common::write_file(&fs, "unshipped", b"committed after the last round");
        // Gone without a last round, as a killed agent would be.
        drop(shipper);
    }
    // Elsewhere: the log restores what was shipped.
    let elsewhere = dir.path().join("elsewhere.db");
    restore(&store, &prefix, &elsewhere).await.unwrap();
    let got = common::files(&Fs::open(&elsewhere).unwrap());
    assert_eq!(got.keys().collect::<Vec<_>>(), ["a"]);

    // Here: the database reopens with everything it committed.
    let fs = Fs::open(&db).unwrap();
    fs.leave_checkpoints_to_backup().unwrap();
    common::write_file(&fs, "b", b"second life");
    let shipper = Shipper::start(&db, store.clone(), prefix.clone(), options.clone())
        .await
        .unwrap();
    common::write_file(&fs, "c", b"after the new snapshot");
    let at = shipper.sync().await.unwrap();
    assert_eq!((at.position, at.snapshots), (4, 1));
    let dest = dir.path().join("restored.db");
    let r = restore(&store, &prefix, &dest).await.unwrap();
    assert_eq!((r.snapshot, r.position), (3, 4));
    let restored = common::files(&Fs::open(&dest).unwrap());
    assert_eq!(restored, common::files(&fs));
    assert_eq!(
        restored.keys().collect::<Vec<_>>(),
        ["a", "b", "c", "unshipped"]
    );
    shipper.stop().await.unwrap();
}

/// A single-threaded runtime cannot drive the shipper's uploads while its
/// thread waits on them: refused with a clear error rather than a hang.
#[tokio::test(flavor = "current_thread")]
async fn a_single_threaded_runtime_is_refused() {
    let Some(server) = common::ObjectServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let _fs = Fs::create(&db, Limits::default()).unwrap();
    let r = Shipper::start(&db, server.store(), Path::from("x"), Options::default()).await;
    let e = r.err().expect("refused");
    assert!(
        e.to_string().contains("needs a multi-thread Tokio runtime"),
        "{e}"
    );
}
