//! A snapshot racing the deletion of its computer, through the gRPC API of
//! the real `node-agent` binary with a `file://` log: whichever wins, no
//! snapshot outlives its computer. Either the snapshot is taken first and
//! deleted with the computer, or the deletion comes first and the
//! snapshot is refused; its name is free again in both cases, and no
//! computer can be made from it.

mod common;

use std::time::Duration;

use agentcomputer_proto::v1 as pb;
use common::*;
use tonic::Code;

async fn snapshot(
    c: &mut Client,
    computer: &str,
    snap: &str,
) -> Result<pb::SnapshotInfo, tonic::Status> {
    c.snapshot(pb::SnapshotRequest {
        computer: computer.into(),
        snapshot: snap.into(),
    })
    .await
    .map(|r| r.into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_racing_the_deletion_of_its_computer_does_not_outlive_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().join("log").display());
    let agent = Agent::start(dir.path(), &["--backup", &url]);
    let mut c = agent.client().await;
    create(&mut c, "keeper", 64 << 20).await;
    let (mut taken, mut refused) = (0, 0);
    for i in 0..24u64 {
        let name = format!("racer-{i}");
        let snap = format!("race-{i}");
        create(&mut c, &name, 64 << 20).await;
        let ran = sh(&mut c, &name, "head -c 200000 /dev/urandom > data.bin").await;
        assert_eq!(ran.code, 0, "{ran:?}");
        // The deletion starts at a different moment of the snapshot's
        // work each time: before it, during its sync, during its record.
        let (mut a, mut b) = (c.clone(), c.clone());
        let (n1, n2, s1) = (name.clone(), name.clone(), snap.clone());
        let taking = tokio::spawn(async move { snapshot(&mut a, &n1, &s1).await });
        tokio::time::sleep(Duration::from_micros(i * 700)).await;
        let deleting = tokio::spawn(async move {
            b.delete_computer(pb::DeleteComputerRequest { name: n2 })
                .await
        });
        let took = taking.await.unwrap();
        deleting.await.unwrap().expect("the deletion succeeds");
        match &took {
            Ok(_) => taken += 1,
            Err(e) => {
                assert_eq!(e.code(), Code::NotFound, "{e:?}");
                refused += 1;
            }
        }
        // No computer comes from it, and its name is free again.
        let from = c
            .create_computer_from(pb::CreateComputerFromRequest {
                name: format!("copy-{i}"),
                source: Some(pb::create_computer_from_request::Source::Snapshot(
                    snap.clone(),
                )),
            })
            .await;
        assert_eq!(
            from.as_ref().map(|_| ()).map_err(|e| e.code()),
            Err(Code::NotFound),
            "round {i} (snapshot {took:?}): {from:?}"
        );
        snapshot(&mut c, "keeper", &snap).await.unwrap_or_else(|e| {
            panic!("round {i} (snapshot {took:?}): the name stayed taken: {e:?}")
        });
    }
    eprintln!("snapshots taken before the deletion: {taken}, refused after it: {refused}");
}
