//! Named positions of a log: a restore at an earlier position holds
//! exactly that state, the base of each position is the snapshot object
//! before it, and pruning below a base leaves later positions restorable
//! while earlier ones are refused by name.

mod common;

use std::collections::BTreeMap;

use agentcomputer_backup::{
    Error, Options, Shipper, base_of, log_objects, prune_below, restore_at,
};
use agentcomputer_fs::{Fs, Limits, ROOT_INO, RenameFlags};
use object_store::path::Path;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_at_a_position_holds_that_state_and_pruning_releases_older_ones() {
    let Some(server) = common::ObjectServer::start() else {
        return;
    };
    let store = server.store();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let fs = Fs::create(&db, Limits::default()).unwrap();
    fs.leave_checkpoints_to_backup().unwrap();
    let prefix = Path::from("computers/positions");
    let shipper = Shipper::start(&db, store.clone(), prefix.clone(), Options::default())
        .await
        .unwrap();
    // The shipper's first object: the snapshot everything below starts from.
    let origin = shipper.shipped().borrow().position;

    common::write_file(&fs, "a", b"first a");
    common::write_file(&fs, "b", &common::content(1, 300_000));
    let first_state = common::files(&fs);
    let first = shipper.sync().await.unwrap().position;

    fs.rename(ROOT_INO, b"a", ROOT_INO, b"renamed", RenameFlags::default())
        .unwrap();
    common::write_file(&fs, "b", b"b overwritten");
    let second_state = common::files(&fs);
    let second = shipper.sync().await.unwrap().position;
    assert!(second > first);
    // A shipper that starts without a resume record writes a new snapshot
    // object: positions after it no longer need anything before it.
    shipper.stop().await.unwrap();
    let shipper = Shipper::start(&db, store.clone(), prefix.clone(), Options::default())
        .await
        .unwrap();
    common::write_file(&fs, "c", b"after the second snapshot object");
    let third_state = common::files(&fs);
    let third = shipper.sync().await.unwrap().position;
    shipper.stop().await.unwrap();

    for (at, state) in [
        (Some(first), &first_state),
        (Some(second), &second_state),
        (None, &third_state),
    ] {
        let dest = dir.path().join(format!("at-{at:?}.db"));
        let r = restore_at(&store, &prefix, &dest, at).await.unwrap();
        assert_eq!(r.position, at.unwrap_or(third));
        assert_eq!(
            &common::files(&Fs::open(&dest).unwrap()),
            state,
            "at {at:?}"
        );
    }
    assert_ne!(first_state, second_state);

    let none = BTreeMap::new();
    assert_eq!(
        base_of(&store, &prefix, first, &none).await.unwrap(),
        origin
    );
    assert_eq!(
        base_of(&store, &prefix, second, &none).await.unwrap(),
        origin
    );
    let restarted = base_of(&store, &prefix, third, &none).await.unwrap();
    assert!(restarted > second && restarted <= third, "{restarted}");
    // A walk stops at a position whose base is known (here a made-up one,
    // to see that it was taken), never past a snapshot object.
    let known = BTreeMap::from([(first, 12345)]);
    assert_eq!(
        base_of(&store, &prefix, second, &known).await.unwrap(),
        12345
    );
    assert_eq!(
        base_of(&store, &prefix, third, &known).await.unwrap(),
        restarted
    );

    let before: u64 = log_objects(&store, &prefix)
        .await
        .unwrap()
        .iter()
        .map(|o| o.bytes)
        .sum();
    let (count, bytes) = prune_below(&store, &prefix, restarted).await.unwrap();
    assert_eq!(count, restarted - origin);
    let after: u64 = log_objects(&store, &prefix)
        .await
        .unwrap()
        .iter()
        .map(|o| o.bytes)
        .sum();
    assert_eq!(before - after, bytes);
    // The latest state is whole; a pruned position is refused by name.
    let dest = dir.path().join("latest-after-prune.db");
    restore_at(&store, &prefix, &dest, None).await.unwrap();
    assert_eq!(common::files(&Fs::open(&dest).unwrap()), third_state);
    let err = restore_at(&store, &prefix, &dir.path().join("gone.db"), Some(first))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoBackup { .. }), "{err}");
    assert!(
        err.to_string()
            .contains(&format!("no object at position {first}")),
        "{err}"
    );
    assert!(!dir.path().join("gone.db").exists());
}
