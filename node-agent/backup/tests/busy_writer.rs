//! A writer that never pauses: the shipper still ends its WAL cycles (its
//! pinned checkpoints never catch up with such a writer, so it takes the
//! write lock for a moment, or the engine's writer when the engine lends
//! it), the WAL stays small, no snapshot is needed after the first, and a
//! restore holds every commit.

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

/// What a run of [`busy_writer`] saw: commits, WAL restarts, the largest
/// WAL file, and the shipper's position at the end.
struct Seen {
    commits: usize,
    restarts: u32,
    largest_wal: u64,
}

/// Commits 4 KiB files for 3 s (and at least 1000), `pause` apart, with a
/// shipper of 256-frame cycles that is lent the engine's writer if
/// `lend`; checks that every restart was the shipper's and that a restore
/// holds every commit.
async fn busy_writer(pause: Duration, lend: bool) -> Option<Seen> {
    // One writer at a time: two at once on a small machine would measure
    // each other.
    static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _turn = ONE_AT_A_TIME.lock().await;
    let server = common::ObjectServer::start()?;
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
        writer_hold: lend.then(|| fs.writer_hold()),
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
        while start.elapsed() < Duration::from_secs(3) || i < 1000 {
            let name = format!("f{}", i % 40);
            let data = common::content(i, 4096);
            common::write_file(&writer_fs, &name, &data);
            expect.insert(name, data);
            i += 1;
            if !pause.is_zero() {
                std::thread::sleep(pause);
            }
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

    let dest = dir.path().join("restored.db");
    let r = restore(&store, &prefix, &dest).await.unwrap();
    assert_eq!(r.position, at.position);
    let restored = Fs::open(&dest).unwrap();
    assert!(restored.check().unwrap().is_empty());
    assert_eq!(common::files(&restored), expect);
    shipper.stop().await.unwrap();
    Some(Seen {
        commits,
        restarts,
        largest_wal: largest,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_never_pauses_gets_its_wal_restarted_and_loses_nothing() {
    // A commit every millisecond or so: never the pause a pinned
    // checkpoint needs to catch up (it runs for longer), and a pace a
    // debug build's shipper keeps up with while racing for the write lock.
    let Some(seen) = busy_writer(Duration::from_millis(1), false).await else {
        return;
    };
    assert!(
        seen.restarts >= 5,
        "only {} WAL restarts under a busy writer",
        seen.restarts
    );
    // Each cycle holds about 256 frames plus what the writer added before
    // the shipper won the lock race; without restarts the WAL grows by
    // about 20 KiB a commit (40 MB in a run of 2000 commits). The race is
    // at the scheduler's mercy: 2-3 MiB on an idle machine, 10 MB in a
    // cold CI run sharing two cores with the rest of the suite.
    assert!(
        seen.largest_wal < 16 << 20,
        "the WAL grew to {} bytes under a busy writer",
        seen.largest_wal
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_with_no_pause_at_all_is_bounded_once_the_engine_lends_its_writer() {
    // Back to back, as fast as the engine commits: SQLite's write lock is
    // free only for microseconds between two transactions, so a shipper
    // racing for it seldom wins and the WAL grew by hundreds of MiB in a
    // few seconds; holding the engine's writer, it ends every cycle due.
    let Some(seen) = busy_writer(Duration::ZERO, true).await else {
        return;
    };
    assert!(seen.commits > 1000, "{} commits", seen.commits);
    // Each commit adds about nine frames (37 KB). A cycle ends at 256
    // frames plus what the writer adds while the shipper reads and syncs
    // before it takes the writer: a few hundred KiB in a release build,
    // a few MiB in a debug build on a loaded machine. Racing for SQLite's
    // lock instead, a handful of cycles ended in such a run and the WAL
    // reached 60-80 MiB (debug) or 514 MiB (release).
    assert!(
        seen.restarts as usize >= seen.commits / 400,
        "only {} WAL restarts in {} back-to-back commits",
        seen.restarts,
        seen.commits
    );
    assert!(
        seen.largest_wal < 32 << 20,
        "the WAL grew to {} bytes under a writer that never pauses",
        seen.largest_wal
    );
}
