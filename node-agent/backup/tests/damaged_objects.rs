//! A corrupted, truncated or missing object is reported by name and
//! nothing is restored.

mod common;

use std::time::Duration;

use agentcomputer_backup::{Error, Options, Shipper, restore};
use agentcomputer_fs::{Fs, Limits};
use object_store::path::Path;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_objects_are_named_and_nothing_is_restored() {
    let Some(server) = common::ObjectServer::start() else {
        return;
    };
    let store = server.store();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let fs = Fs::create(&db, Limits::default()).unwrap();
    fs.leave_checkpoints_to_backup().unwrap();
    let prefix = Path::from("computers/damaged");
    let options = Options {
        poll_interval: Duration::from_secs(3600),
        ..Options::default()
    };
    let shipper = Shipper::start(&db, store.clone(), prefix.clone(), options.clone())
        .await
        .unwrap();
    // Positions 2..=5: one write each.
    for i in 0..4 {
        common::write_file(&fs, &format!("f{i}"), &common::content(i, 9000));
        let at = shipper.sync().await.unwrap();
        assert_eq!(at.position, i as u64 + 2);
    }
    shipper.stop().await.unwrap();
    let dest = dir.path().join("restored.db");
    let key = |p: u64| format!("computers/damaged/log/{p:016x}");

    // A flipped byte in a page of position 3.
    let file = server.object_file(&key(3));
    let good = std::fs::read(&file).unwrap();
    let mut bad = good.clone();
    bad[200] ^= 0x40;
    std::fs::write(&file, &bad).unwrap();
    let e = restore(&store, &prefix, &dest).await.unwrap_err();
    assert!(
        matches!(&e, Error::Corrupt { key: k, .. } if *k == key(3)),
        "{e}"
    );
    assert!(e.to_string().contains("corrupted"), "{e}");
    assert!(!dest.exists());

    // Position 4 cut short.
    std::fs::write(&file, &good).unwrap();
    let file4 = server.object_file(&key(4));
    let good4 = std::fs::read(&file4).unwrap();
    std::fs::write(&file4, &good4[..good4.len() - 100]).unwrap();
    let e = restore(&store, &prefix, &dest.with_extension("2"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Corrupt { key: k, .. } if *k == key(4)),
        "{e}"
    );
    assert!(e.to_string().contains("truncated"), "{e}");

    // Position 4 gone.
    std::fs::remove_file(&file4).unwrap();
    let e = restore(&store, &prefix, &dest.with_extension("3"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Missing { key: k } if *k == key(4)),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        format!("backup object {} is missing", key(4))
    );

    // Position 4 replaced by position 3's object: the position check names it.
    std::fs::write(&file4, &good).unwrap();
    let e = restore(&store, &prefix, &dest.with_extension("4"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Corrupt { key: k, .. } if *k == key(4)),
        "{e}"
    );

    // The latest object cut to less than a header.
    let file5 = server.object_file(&key(5));
    let good5 = std::fs::read(&file5).unwrap();
    std::fs::write(&file5, &good5[..10]).unwrap();
    let e = restore(&store, &prefix, &dest.with_extension("5"))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Corrupt { key: k, .. } if *k == key(5)),
        "{e}"
    );
    std::fs::write(&file5, &good5).unwrap();

    // Put back, everything restores.
    std::fs::write(&file4, &good4).unwrap();
    let r = restore(&store, &prefix, &dest).await.unwrap();
    assert_eq!((r.snapshot, r.position), (1, 5));
    assert_eq!(common::files(&Fs::open(&dest).unwrap()), common::files(&fs));
}
