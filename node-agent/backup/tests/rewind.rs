//! Rewinds: a restore of a log to an earlier position is recorded as a
//! rewind object of a few dozen bytes instead of a new full copy. The
//! restored file continues the log (its shipper resumes, no snapshot
//! object), every position before and after the rewind restores to its own
//! state, bases follow the rewind, a copy caught up across a rewind is
//! told to restore whole, and a rewind that does not name the state it
//! claims is reported as corrupt.

mod common;

use std::collections::BTreeMap;

use agentcomputer_backup::object::{self, Header, Kind};
use agentcomputer_backup::{
    Error, Options, Resume, Shipper, base_of, catch_up, log_objects, restore_at, rewind,
};
use agentcomputer_fs::{Fs, Limits};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_recorded_as_a_rewind_continues_the_log_and_keeps_its_history() {
    let Some(server) = common::ObjectServer::start() else {
        return;
    };
    let store = server.store();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let fs = Fs::create(&db, Limits::default()).unwrap();
    fs.leave_checkpoints_to_backup().unwrap();
    let prefix = Path::from("computers/rewind");
    let shipper = Shipper::start(&db, store.clone(), prefix.clone(), Options::default())
        .await
        .unwrap();
    let origin = shipper.shipped().borrow().position;

    common::write_file(&fs, "a", &common::content(1, 400_000));
    common::write_file(&fs, "kept", b"in every state");
    let first_state = common::files(&fs);
    let first = shipper.sync().await.unwrap().position;
    common::write_file(&fs, "a", b"a overwritten");
    common::write_file(&fs, "b", &common::content(2, 200_000));
    let second_state = common::files(&fs);
    let head = shipper.stop().await.unwrap().position;
    drop(fs);
    assert!(head > first);

    // The restore of `first`, recorded as a rewind after the head.
    let restored = dir.path().join("restored.db");
    let r = restore_at(&store, &prefix, &restored, Some(first))
        .await
        .unwrap();
    assert!(r.exact, "the checks changed the restored file");
    let before = log_objects(&store, &prefix).await.unwrap();
    let (at, digest) = rewind(&store, &prefix, head, &r).await.unwrap();
    assert_eq!(at, head + 1);
    let after = log_objects(&store, &prefix).await.unwrap();
    assert_eq!(after.len(), before.len() + 1);
    let added = after.last().unwrap();
    assert_eq!(added.position, at);
    assert!(added.bytes < 200, "a rewind of {} bytes", added.bytes);
    // A second rewind at the same head is another writer's: refused.
    assert!(matches!(
        rewind(&store, &prefix, head, &r).await,
        Err(Error::Stale { .. })
    ));

    // The restored file continues the log: no snapshot object.
    let fs = Fs::open(&restored).unwrap();
    fs.leave_checkpoints_to_backup().unwrap();
    assert_eq!(common::files(&fs), first_state);
    let shipper = Shipper::start(
        &restored,
        store.clone(),
        prefix.clone(),
        Options {
            resume: Some(Resume {
                position: at,
                digest,
            }),
            ..Options::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(shipper.shipped().borrow().snapshots, 0, "it shipped a copy");
    common::write_file(&fs, "c", b"after the restore");
    let third_state = common::files(&fs);
    let third = shipper.stop().await.unwrap().position;
    drop(fs);
    assert!(third > at);

    // Every position restores to its own state, across the rewind.
    for (position, state) in [
        (Some(first), &first_state),
        (Some(head), &second_state),
        (Some(at), &first_state),
        (None, &third_state),
    ] {
        let dest = dir.path().join(format!("at-{position:?}.db"));
        let got = restore_at(&store, &prefix, &dest, position).await.unwrap();
        assert_eq!(got.position, position.unwrap_or(third));
        assert_eq!(
            &common::files(&Fs::open(&dest).unwrap()),
            state,
            "at {position:?}"
        );
    }
    assert_ne!(first_state, second_state);
    assert_ne!(first_state, third_state);

    // A base walks through the rewind to the snapshot `first` starts from.
    let none = BTreeMap::new();
    assert_eq!(
        base_of(&store, &prefix, third, &none).await.unwrap(),
        origin
    );
    assert_eq!(base_of(&store, &prefix, at, &none).await.unwrap(), origin);

    // A copy at the head before the rewind cannot be patched across it.
    let copy = dir.path().join("copy.db");
    let old = restore_at(&store, &prefix, &copy, Some(head))
        .await
        .unwrap();
    let e = catch_up(
        &store,
        &prefix,
        &copy,
        Resume {
            position: head,
            digest: old.digest,
        },
    )
    .await
    .unwrap_err();
    assert!(matches!(e, Error::Rewound { .. }), "{e}");

    // A rewind that names another state than the one it claims (here the
    // digest of the head instead of `first`'s) is corrupt, by name.
    let key = object::key(&prefix, at);
    let bytes = store.get(&key).await.unwrap().bytes().await.unwrap();
    let good = object::Object::decode(&bytes).unwrap().header;
    let forged = Header {
        kind: Kind::Rewind,
        ..good
    };
    let (forged, _) = object::encode_rewind(&forged, first, &old.digest);
    store.put(&key, PutPayload::from(forged)).await.unwrap();
    let dest = dir.path().join("forged.db");
    let e = restore_at(&store, &prefix, &dest, None).await.unwrap_err();
    assert!(
        matches!(&e, Error::Corrupt { key: k, .. } if *k == key.to_string()),
        "{e}"
    );
    assert!(!dest.exists());
}

/// A large object is hashed while its pages are written into the new file:
/// a flipped byte in it still fails the restore by name, and no file
/// appears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_large_object_is_caught_while_its_pages_are_written() {
    let Some(server) = common::ObjectServer::start() else {
        return;
    };
    let store = server.store();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let fs = Fs::create(&db, Limits::default()).unwrap();
    fs.leave_checkpoints_to_backup().unwrap();
    let prefix = Path::from("computers/large");
    let shipper = Shipper::start(&db, store.clone(), prefix.clone(), Options::default())
        .await
        .unwrap();
    common::write_file(&fs, "big", &common::content(3, 24 << 20));
    let head = shipper.stop().await.unwrap().position;
    drop(fs);
    let large = log_objects(&store, &prefix)
        .await
        .unwrap()
        .into_iter()
        .find(|o| o.bytes >= 20 << 20)
        .expect("an object of the 24 MiB file");
    let clean = dir.path().join("clean.db");
    restore_at(&store, &prefix, &clean, Some(head))
        .await
        .unwrap();

    let key = object::key(&prefix, large.position);
    let file = server.object_file(key.as_ref());
    let mut bad = std::fs::read(&file).unwrap();
    let middle = bad.len() / 2;
    bad[middle] ^= 0x01;
    std::fs::write(&file, &bad).unwrap();
    let dest = dir.path().join("damaged.db");
    let e = restore_at(&store, &prefix, &dest, Some(head))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Corrupt { key: k, reason } if *k == key.to_string() && reason.contains("checksum")),
        "{e}"
    );
    assert!(!dest.exists());
    assert!(!dir.path().join("damaged.db.restoring").exists());
}
