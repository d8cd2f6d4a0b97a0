//! Two shippers of one database at once: never do both write one
//! position, and the one that loses stops with a clear error.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use agentcomputer_backup::{Error, Options, Shipper, restore};
use agentcomputer_fs::{Fs, Limits};
use futures::TryStreamExt;
use object_store::ObjectStore;
use object_store::path::Path;

const ROUNDS: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_shippers_never_both_write_a_position_and_the_loser_stops() {
    let Some(server) = common::ObjectServer::start() else {
        return;
    };
    let store = server.store();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let fs = Fs::create(&db, Limits::default()).unwrap();
    fs.leave_checkpoints_to_backup().unwrap();
    let prefix = Path::from("computers/fenced");
    let options = Options {
        poll_interval: Duration::from_millis(2),
        checkpoint_pages: 32,
        ..Options::default()
    };
    let mut all_written = BTreeSet::new();
    let mut fenced_at_start = 0;
    let mut fenced_at_sync = 0;
    for round in 0..ROUNDS {
        // Even rounds: both start at once (one takes the snapshot's
        // position). Odd rounds: one after the other, so the second's
        // snapshot takes the position the first ships to next.
        let (a, b) = if round % 2 == 0 {
            tokio::join!(
                Shipper::start(&db, store.clone(), prefix.clone(), options.clone()),
                Shipper::start(&db, store.clone(), prefix.clone(), options.clone()),
            )
        } else {
            let a = Shipper::start(&db, store.clone(), prefix.clone(), options.clone()).await;
            let b = Shipper::start(&db, store.clone(), prefix.clone(), options.clone()).await;
            (a, b)
        };
        let mut alive = Vec::new();
        for r in [a, b] {
            match r {
                Ok(s) => alive.push(s),
                Err(Error::Fenced { .. }) => fenced_at_start += 1,
                Err(e) => panic!("round {round}: start failed: {e}"),
            }
        }
        assert!(!alive.is_empty(), "round {round}: neither shipper started");
        common::write_file(&fs, &format!("r{round}"), &common::content(round, 20_000));
        let results = futures::future::join_all(alive.iter().map(|s| s.sync())).await;
        let mut winners = Vec::new();
        for (s, r) in alive.into_iter().zip(results) {
            let written: BTreeSet<u64> = s.positions_written().into_iter().collect();
            assert!(
                all_written.is_disjoint(&written),
                "round {round}: positions {:?} written twice",
                all_written.intersection(&written).collect::<Vec<_>>()
            );
            all_written.extend(written);
            match r {
                Ok(at) => winners.push((s, at)),
                Err(e) => {
                    fenced_at_sync += 1;
                    // Fenced in this sync's round, or in a poll before it.
                    assert!(
                        matches!(e, Error::Fenced { .. } | Error::Stopped(_)),
                        "round {round}: {e}"
                    );
                    assert!(
                        e.to_string()
                            .contains("written by another shipper; this shipper stopped"),
                        "{e}"
                    );
                    // It stays stopped, saying why.
                    let again = s.sync().await.unwrap_err();
                    assert!(
                        matches!(&again, Error::Stopped(why) if why.contains("another shipper")),
                        "{again}"
                    );
                }
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "round {round}: exactly one shipper goes on"
        );
        let (winner, _) = winners.pop().unwrap();
        winner.stop().await.unwrap();
    }
    // Every object in the store was written by exactly one shipper, and
    // the log restores to the database as it is.
    let listed: BTreeSet<u64> = store
        .list(Some(&prefix.clone().join("log")))
        .try_collect::<Vec<_>>()
        .await
        .unwrap()
        .iter()
        .map(|m| u64::from_str_radix(m.location.filename().unwrap(), 16).unwrap())
        .collect();
    assert_eq!(listed, all_written);
    eprintln!(
        "{ROUNDS} rounds: {fenced_at_start} shippers fenced at start, {fenced_at_sync} while shipping, {} positions",
        listed.len()
    );
    assert!(
        fenced_at_sync >= ROUNDS / 2,
        "every odd round fences the first shipper while shipping"
    );
    let dest = dir.path().join("restored.db");
    restore(&store, &prefix, &dest).await.unwrap();
    assert_eq!(common::files(&Fs::open(&dest).unwrap()), common::files(&fs));
}
