//! A bucket that is gone: the store answers at once with an error the
//! client does not retry, the shipper's rounds fail, and it backs off
//! between them instead of retrying every millisecond.

mod common;

use std::time::Duration;

use agentcomputer_backup::{Options, Shipper};
use agentcomputer_fs::{Fs, Limits};
use object_store::path::Path;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rounds_against_a_bucket_that_is_gone_back_off() {
    let Some(server) = common::ObjectServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fs.db");
    let fs = Fs::create(&db, Limits::default()).unwrap();
    fs.leave_checkpoints_to_backup().unwrap();
    let options = Options {
        poll_interval: Duration::from_secs(1),
        writer_hold: Some(fs.writer_hold()),
        ..Options::default()
    };
    let shipper = Shipper::start(&db, server.store(), Path::from("outage"), options)
        .await
        .unwrap();
    let wake = shipper.wake_handle();
    fs.subscribe(Box::new(move |_| wake.wake()));
    // The POSIX backend serves each directory under its root as a bucket.
    let bucket = server.object_file("");
    let gone = bucket.with_extension("gone");
    std::fs::rename(&bucket, &gone).unwrap();

    common::write_file(&fs, "a", b"cannot go up");
    let shipped = shipper.shipped();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let failed = shipped.borrow().failed_rounds;
    // 100 ms, then twice as long each time: 5 tries in 3 s. Retried at
    // once, a round that fails in a millisecond ran hundreds of times.
    eprintln!("{failed} failed rounds in 3 s");
    assert!(
        (1..=8).contains(&failed),
        "{failed} failed rounds in 3 s against a bucket that is gone"
    );
    assert!(
        shipper.sync().await.is_err(),
        "a sync must say the bucket is gone"
    );
    // Back again: the commit goes up.
    std::fs::rename(&gone, &bucket).unwrap();
    let mut shipped = shipper.shipped();
    tokio::time::timeout(
        Duration::from_secs(15),
        shipped.wait_for(|p| p.unshipped_since.is_none() && p.uploads >= 2),
    )
    .await
    .expect("the commit went up once the bucket was back")
    .unwrap();
    shipper.stop().await.unwrap();
}
