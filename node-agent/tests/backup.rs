//! Continuous backup through the node agent, against a real S3-compatible
//! server (versitygw, `scripts/install-object-store.sh`): a computer
//! outlives its agent's data directory, every write acknowledged before a
//! `kill -9` comes back, a damaged object is named and never served, a
//! second agent taking a computer over fences the first, and deleting a
//! computer deletes its backup.

mod common;
#[path = "../backup/tests/common/mod.rs"]
mod object_server;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agentcomputer_proto::v1 as pb;
use common::*;
use futures::TryStreamExt;
use nix::sys::signal::Signal;
use object_server::{ACCESS_KEY, BUCKET, ObjectServer, SECRET_KEY};
use tonic::Code;

/// The URL every agent of these tests backs up to.
fn url() -> String {
    format!("s3://{BUCKET}/team")
}

/// `node-agent local --backup` on `data`, its S3 settings in the
/// environment as an operator would set them.
fn backup_agent(data: &Path, server: &ObjectServer) -> Agent {
    backup_agent_with(data, server, &[])
}

/// [`backup_agent`] with `extra` arguments.
fn backup_agent_with(data: &Path, server: &ObjectServer, extra: &[&str]) -> Agent {
    let endpoint = format!("http://{}", server.addr);
    let url = url();
    let mut args = vec!["--backup", url.as_str()];
    args.extend_from_slice(extra);
    Agent::start_with(data, &args, |cmd: &mut Command| {
        cmd.env("AWS_ENDPOINT_URL", &endpoint)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY);
    })
}

async fn sync(c: &mut Client, name: &str) -> Result<u64, tonic::Status> {
    c.sync(pb::SyncRequest {
        computer: name.into(),
    })
    .await
    .map(|r| r.into_inner().position)
}

async fn verify(c: &mut Client, name: &str) -> Result<pb::VerifyBackupResponse, tonic::Status> {
    c.verify_backup(pb::VerifyBackupRequest {
        computer: name.into(),
    })
    .await
    .map(|r| r.into_inner())
}

/// How long after its answer a write is in the store at the latest, as
/// this test holds the agent to: the shipper's upload interval (500 ms)
/// and an upload, with room for a loaded debug build.
const LAG_BOUND: Duration = Duration::from_millis(2500);

/// Every object key under `prefix` in the bucket, sorted.
async fn keys(server: &ObjectServer, prefix: &str) -> Vec<String> {
    let store = server.store();
    let prefix = object_store::path::Path::from(prefix);
    let mut keys: Vec<String> = store
        .list(Some(&prefix))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    keys.sort();
    keys
}

/// The acceptance path: writes, `sync`, `kill -9`, the data directory
/// deleted, a new agent on an empty one: the computer is listed, restored
/// on first use with every line and its settings, and its backup verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_computer_outlives_its_agent_and_its_data_directory() {
    let Some(server) = ObjectServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let agent = backup_agent(&data, &server);
    let mut c = agent.client().await;
    create(&mut c, "demo", 64 << 20).await;
    let ran = sh(
        &mut c,
        "demo",
        "for i in $(seq 1000); do echo $i >> records; done",
    )
    .await;
    assert_eq!((ran.code, ran.error.as_str()), (0, ""), "{ran:?}");
    let position = sync(&mut c, "demo").await.unwrap();
    assert!(position >= 1, "sync reached position {position}");
    agent.stop_with(Signal::SIGKILL).await;
    std::fs::remove_dir_all(&data).unwrap();

    let agent = backup_agent(&data, &server);
    let mut c = agent.client().await;
    let listed = c
        .list_computers(pb::ListComputersRequest::default())
        .await
        .unwrap()
        .into_inner();
    let names: Vec<_> = listed.computers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["demo"],
        "the bucket's computers are listed before first use"
    );
    let started = Instant::now();
    let ran = sh(&mut c, "demo", "wc -l < records; sed -n '1p;1000p' records").await;
    eprintln!(
        "first call after restore answered in {:?}",
        started.elapsed()
    );
    assert_eq!(ran.stdout, "1000\n1\n1000\n", "{ran:?}");
    let got = c
        .get_computer(pb::GetComputerRequest {
            name: "demo".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        got.max_bytes,
        64 << 20,
        "the quota came back with the files"
    );
    let v = verify(&mut c, "demo").await.unwrap();
    assert!(v.position >= position && v.database_bytes > 0, "{v:?}");
    agent.stop().await;
}

/// Writes land one after another while the agent is killed: what a new
/// agent restores is exactly the first k writes (no gap, nothing torn);
/// k covers every write acknowledged with `sync` (every tenth of the first
/// 200), and every write answered more than [`LAG_BOUND`] before the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_acknowledged_before_a_kill_is_restored() {
    let Some(server) = ObjectServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let agent = backup_agent(&data, &server);
    let mut c = agent.client().await;
    create(&mut c, "load", 64 << 20).await;
    let writer = {
        let mut c = agent.client().await;
        tokio::spawn(async move {
            let (mut acked, mut synced) = (0u64, 0u64);
            let mut answered = Vec::new();
            for i in 1u64.. {
                // Synced every tenth write of the first 200; after that
                // only the continuous shipping keeps up.
                let sync = i % 10 == 0 && i <= 200;
                let req = pb::ExecRequest {
                    sync,
                    ..exec_req("load", &format!("echo {i} >> log"))
                };
                let Ok(stream) = c.exec(req).await else { break };
                let mut stream = stream.into_inner();
                let mut exit = None;
                while let Ok(Some(ev)) = stream.message().await {
                    if let Some(pb::exec_event::Event::Exit(e)) = ev.event {
                        exit = Some(e);
                    }
                }
                match exit {
                    Some(e) if e.code == 0 && e.error.is_empty() => {
                        acked = i;
                        answered.push((i, Instant::now()));
                        if sync {
                            assert!(e.backup_position > 0, "{e:?}");
                            synced = i;
                        }
                    }
                    _ => break,
                }
            }
            (acked, synced, answered)
        })
    };
    tokio::time::sleep(Duration::from_secs(6)).await;
    let killed = Instant::now();
    agent.stop_with(Signal::SIGKILL).await;
    let (acked, synced, answered) = writer.await.unwrap();
    let shipped_by_then = answered
        .iter()
        .filter(|(_, t)| *t + LAG_BOUND < killed)
        .map(|(i, _)| *i)
        .max()
        .unwrap_or(0);
    assert!(synced >= 10, "only {acked} writes were answered in 3 s");
    std::fs::remove_dir_all(&data).unwrap();

    let agent = backup_agent(&data, &server);
    let mut c = agent.client().await;
    let log = read(&mut c, "load", "log").await.unwrap();
    let lines: Vec<u64> = String::from_utf8(log)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    let k = lines.len() as u64;
    assert_eq!(
        lines,
        (1..=k).collect::<Vec<_>>(),
        "the restored log is the first {k} writes"
    );
    assert!(
        k >= synced.max(shipped_by_then) && k <= acked + 1,
        "restored {k} writes; {acked} were answered, {synced} confirmed by sync, {shipped_by_then} answered more than {LAG_BOUND:?} before the kill"
    );
    eprintln!(
        "{acked} writes answered before the kill, {synced} synced, {shipped_by_then} answered more than {LAG_BOUND:?} before it, {k} restored"
    );
    agent.stop().await;
}

/// A flipped byte in the bucket: verify-backup names the object (DATA_LOSS),
/// and a new agent refuses to serve the computer rather than restore it
/// wrong, leaving nothing in its data directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_backup_is_named_and_never_served() {
    let Some(server) = ObjectServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let agent = backup_agent(&dir.path().join("a"), &server);
    let mut c = agent.client().await;
    create(&mut c, "demo", 64 << 20).await;
    sh(&mut c, "demo", "seq 5000 > numbers").await;
    sync(&mut c, "demo").await.unwrap();
    agent.stop().await;
    let logs: Vec<String> = keys(&server, "team/computers")
        .await
        .into_iter()
        .filter(|k| k.contains("/log/"))
        .collect();
    let first = logs.first().expect("a log object").clone();
    let file = server.object_file(&first);
    let mut bytes = std::fs::read(&file).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&file, bytes).unwrap();

    let b_data = dir.path().join("b");
    let agent = backup_agent(&b_data, &server);
    let mut c = agent.client().await;
    let e = verify(&mut c, "demo").await.unwrap_err();
    assert_eq!(e.code(), Code::DataLoss, "{e:?}");
    assert!(
        e.message().contains(&first) && e.message().contains("corrupt"),
        "{e:?}"
    );
    let e = c
        .stat(pb::StatRequest {
            computer: "demo".into(),
            path: "numbers".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::DataLoss, "{e:?}");
    assert!(
        !b_data.join("computers/demo").exists(),
        "nothing was restored"
    );
    agent.stop().await;
}

/// A second agent given the same bucket serves the computer (restoring it
/// and taking its log over); the first one's shipper is fenced at its
/// next upload and says so instead of forking the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_taking_a_computer_over_fences_the_first() {
    let Some(server) = ObjectServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = backup_agent_with(&dir.path().join("a"), &server, &["--idle-timeout", "1s"]);
    let mut ca = a.client().await;
    create(&mut ca, "demo", 64 << 20).await;
    sh(&mut ca, "demo", "echo one > f").await;
    sync(&mut ca, "demo").await.unwrap();

    let b = backup_agent(&dir.path().join("b"), &server);
    let mut cb = b.client().await;
    assert_eq!(sh(&mut cb, "demo", "cat f").await.stdout, "one\n");
    sh(&mut cb, "demo", "echo two >> f").await;
    sync(&mut cb, "demo").await.unwrap();

    sh(&mut ca, "demo", "echo stale >> f").await;
    let e = sync(&mut ca, "demo").await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("another shipper"), "{e:?}");
    b.stop().await;
    // A hibernates; opened again, it finds the log past its copy and
    // serves the log's state, never its own stale write.
    closed(&mut ca, "demo").await;
    assert_eq!(sh(&mut ca, "demo", "cat f").await.stdout, "one\ntwo\n");
    a.stop().await;

    // The log holds B's history, never A's late write.
    let c_agent = backup_agent(&dir.path().join("c"), &server);
    let mut cc = c_agent.client().await;
    assert_eq!(sh(&mut cc, "demo", "cat f").await.stdout, "one\ntwo\n");
    c_agent.stop().await;
}

/// Waits until computer `name` has hibernated (its engine closed).
async fn closed(c: &mut Client, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = c
            .get_computer(pb::GetComputerRequest { name: name.into() })
            .await
            .unwrap()
            .into_inner();
        if !got.open {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} did not hibernate in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Total bytes of the log objects under `prefix`.
async fn log_bytes(server: &ObjectServer) -> (usize, u64) {
    let store = server.store();
    let prefix = object_store::path::Path::from("team/computers");
    let metas: Vec<_> = store.list(Some(&prefix)).try_collect().await.unwrap();
    let logs: Vec<_> = metas
        .iter()
        .filter(|m| m.location.as_ref().contains("/log/"))
        .collect();
    (logs.len(), logs.iter().map(|m| m.size).sum())
}

/// A computer that hibernated and opens again continues its log: the
/// reopening costs a few small objects, not a snapshot of its database,
/// and a restore still holds everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopening_a_hibernated_computer_continues_its_log_without_a_snapshot() {
    let Some(server) = ObjectServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let agent = backup_agent_with(&dir.path().join("a"), &server, &["--idle-timeout", "1s"]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 64 << 20).await;
    // 4 MiB of incompressible data: a snapshot would be at least that.
    let ran = sh(
        &mut c,
        "demo",
        "head -c 4194304 /dev/urandom > big; echo 1 > n",
    )
    .await;
    assert_eq!(ran.code, 0, "{ran:?}");
    sync(&mut c, "demo").await.unwrap();
    for round in 2..=4 {
        closed(&mut c, "demo").await;
        let (objects, bytes) = log_bytes(&server).await;
        let ran = sh(&mut c, "demo", &format!("echo {round} >> n")).await;
        assert_eq!(ran.code, 0, "{ran:?}");
        sync(&mut c, "demo").await.unwrap();
        let (objects_after, bytes_after) = log_bytes(&server).await;
        assert!(
            bytes_after - bytes < 1 << 20,
            "round {round}: reopening added {} bytes in {} objects",
            bytes_after - bytes,
            objects_after - objects
        );
    }
    agent.stop().await;
    let other = backup_agent(&dir.path().join("b"), &server);
    let mut c = other.client().await;
    let ran = sh(&mut c, "demo", "cat n; wc -c < big").await;
    assert_eq!(ran.stdout, "1\n2\n3\n4\n4194304\n", "{ran:?}");
    other.stop().await;
}

/// Deleting a computer removes its log, settings and index entry; the
/// name can then be made again with a fresh log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_computer_deletes_its_backup() {
    let Some(server) = ObjectServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let agent = backup_agent(&dir.path().join("a"), &server);
    let mut c = agent.client().await;
    create(&mut c, "demo", 64 << 20).await;
    sh(&mut c, "demo", "echo x > f").await;
    sync(&mut c, "demo").await.unwrap();
    assert!(!keys(&server, "team/computers").await.is_empty());
    assert_eq!(keys(&server, "team/names").await, ["team/names/demo"]);
    c.delete_computer(pb::DeleteComputerRequest {
        name: "demo".into(),
    })
    .await
    .unwrap();
    assert_eq!(keys(&server, "team").await, Vec::<String>::new());
    create(&mut c, "demo", 64 << 20).await;
    let ran = sh(&mut c, "demo", "cat f").await;
    assert_ne!(
        ran.code, 0,
        "a new computer of the old name starts empty: {ran:?}"
    );
    agent.stop().await;
}

/// A directory target (`file:///DIR`) works the same, and an agent without
/// any backup store says how to configure one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_target_and_no_target() {
    let dir = tempfile::tempdir().unwrap();
    let target = format!("file://{}", dir.path().join("bucket").display());
    let agent = Agent::start(&dir.path().join("a"), &["--backup", &target]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 64 << 20).await;
    sh(&mut c, "demo", "echo kept > f").await;
    assert!(sync(&mut c, "demo").await.unwrap() >= 1);
    agent.stop_with(Signal::SIGKILL).await;
    let agent = Agent::start(&dir.path().join("b"), &["--backup", &target]);
    let mut c = agent.client().await;
    assert_eq!(sh(&mut c, "demo", "cat f").await.stdout, "kept\n");
    agent.stop().await;

    let agent = Agent::start(&dir.path().join("plain"), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 64 << 20).await;
    let e = sync(&mut c, "demo").await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("--backup"), "{e:?}");
    let e = c
        .exec(pb::ExecRequest {
            sync: true,
            ..exec_req("demo", "echo never > ran")
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(
        read(&mut c, "demo", "ran").await.is_err(),
        "the run never started"
    );
    agent.stop().await;
}

/// A store that refuses the agent (here: a bucket that does not exist)
/// ends its start with the store's message before the agent announces an
/// address, so nothing that waits for `listening on` connects to an agent
/// about to exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_refuses_ends_the_start_before_the_address_is_announced() {
    let Some(server) = ObjectServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_node-agent"))
        .args(["local", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--listen", "127.0.0.1:0", "--share-listen", "off"])
        .args(["--proxy-listen", "off", "--keep-mounts", "off"])
        .args(["--backup", "s3://no-such-bucket/team"])
        .env("AWS_ENDPOINT_URL", format!("http://{}", server.addr))
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(
        !stdout.contains("listening on"),
        "announced before failing: {stdout}"
    );
    assert!(
        stderr.contains("cannot use the backup store (--backup s3://no-such-bucket/team)")
            && stderr.contains("NoSuchBucket"),
        "{stderr}"
    );
}
