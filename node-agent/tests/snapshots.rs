//! Snapshots, restores and forks through a real local agent whose
//! continuous backup goes to a `file://` log under its data directory
//! (docs/snapshots.md): a restore brings every file back with its content
//! and mode and can itself be undone, a run going on is ended with a
//! message, copies change independently, a database file made by Backup
//! becomes a computer, a snapshot taken under a writer renaming files is
//! one consistent point, and every bad request gets a clear error.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use agentcomputer_proto::v1 as pb;
use common::*;
use tonic::Code;

/// A local agent backing up to `file://<data>/log`.
fn agent(data: &Path) -> Agent {
    let url = format!("file://{}", data.join("log").display());
    Agent::start(data, &["--backup", &url])
}

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

async fn restore(
    c: &mut Client,
    computer: &str,
    snap: &str,
) -> Result<pb::RestoreComputerResponse, tonic::Status> {
    c.restore_computer(pb::RestoreComputerRequest {
        computer: computer.into(),
        snapshot: snap.into(),
        unix_nanos: 0,
    })
    .await
    .map(|r| r.into_inner())
}

async fn create_from(
    c: &mut Client,
    name: &str,
    source: pb::create_computer_from_request::Source,
) -> Result<pb::Computer, tonic::Status> {
    c.create_computer_from(pb::CreateComputerFromRequest {
        name: name.into(),
        source: Some(source),
    })
    .await
    .map(|r| r.into_inner())
}

fn from_snapshot(s: &str) -> pb::create_computer_from_request::Source {
    pb::create_computer_from_request::Source::Snapshot(s.into())
}

fn from_computer(s: &str) -> pb::create_computer_from_request::Source {
    pb::create_computer_from_request::Source::Computer(s.into())
}

async fn list(c: &mut Client, computer: &str) -> pb::ListSnapshotsResponse {
    c.list_snapshots(pb::ListSnapshotsRequest {
        computer: computer.into(),
    })
    .await
    .unwrap()
    .into_inner()
}

/// Every path under the computer's root with (kind, permission bits,
/// content or link target), through the API.
async fn tree(c: &mut Client, computer: &str) -> BTreeMap<String, (i32, u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![String::new()];
    while let Some(dir) = dirs.pop() {
        for name in names(c, computer, if dir.is_empty() { "." } else { &dir }).await {
            let path = if dir.is_empty() {
                name.clone()
            } else {
                format!("{dir}/{name}")
            };
            let st = c
                .stat(pb::StatRequest {
                    computer: computer.into(),
                    path: path.clone(),
                    follow_symlinks: false,
                })
                .await
                .unwrap()
                .into_inner();
            let body = match st.kind() {
                pb::FileKind::Regular => read(c, computer, &path).await.unwrap(),
                pb::FileKind::Symlink => st.symlink_target.clone().into_bytes(),
                pb::FileKind::Directory => {
                    dirs.push(path.clone());
                    Vec::new()
                }
                _ => Vec::new(),
            };
            out.insert(path, (st.kind, st.perm, body));
        }
    }
    out
}

/// Bytes of the files under `dir`.
fn du(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            if m.is_dir() { du(&e.path()) } else { m.len() }
        })
        .sum()
}

async fn restore_time(
    c: &mut Client,
    computer: &str,
    at: std::time::SystemTime,
) -> Result<pb::RestoreComputerResponse, tonic::Status> {
    c.restore_computer(pb::RestoreComputerRequest {
        computer: computer.into(),
        snapshot: String::new(),
        unix_nanos: at.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64,
    })
    .await
    .map(|r| r.into_inner())
}

async fn chmod(c: &mut Client, computer: &str, path: &str, perm: u32) {
    c.chmod(pb::ChmodRequest {
        computer: computer.into(),
        path: path.into(),
        perm,
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_brings_every_file_back_ends_runs_and_can_be_undone() {
    let data = tempfile::tempdir().unwrap();
    let agent = agent(data.path());
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let ran = sh(
        &mut c,
        "demo",
        "mkdir -p src/deep/er && printf 'fn main() {}\\n' > src/main.rs && printf 'x%.0s' $(seq 1 3000) > src/deep/er/big.txt && printf '#!/bin/sh\\necho hi\\n' > run.sh && ln -s src/main.rs link && touch empty",
    )
    .await;
    assert_eq!(ran.code, 0, "{ran:?}");
    write(
        &mut c,
        "demo",
        "blob.bin",
        pb::WriteMode::Truncate,
        &(0..3_000_000u32)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    chmod(&mut c, "demo", "run.sh", 0o751).await;
    chmod(&mut c, "demo", "src/deep", 0o700).await;
    chmod(&mut c, "demo", "empty", 0o400).await;
    let before = tree(&mut c, "demo").await;
    assert_eq!(before.len(), 9, "{:?}", before.keys());

    let s1 = snapshot(&mut c, "demo", "s1").await.unwrap();
    assert_eq!((s1.name.as_str(), s1.computer.as_str()), ("s1", "demo"));
    assert!(s1.position > 0 && s1.database_bytes > 3_000_000, "{s1:?}");
    // Nothing of the log is the snapshot's alone: the latest state needs it all.
    assert_eq!(s1.own_bytes, 0);

    let ran = sh(&mut c, "demo", "rm -rf ./* && echo changed > after.txt").await;
    assert_eq!(ran.code, 0, "{ran:?}");
    assert_eq!(names(&mut c, "demo", ".").await, vec!["after.txt"]);

    // A run going on when the restore comes is ended, and says why.
    let mut slow = c.clone();
    let running = tokio::spawn(async move {
        run(
            &mut slow,
            exec_req(
                "demo",
                "echo started > running.txt; sleep 60; echo late > late.txt",
            ),
        )
        .await
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while read(&mut c, "demo", "running.txt").await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the run never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    let log_before = du(&data.path().join("log"));
    let r = restore(&mut c, "demo", "s1").await.unwrap();
    assert_eq!(r.restored.as_ref().unwrap().name, "s1");
    // The log records the restore with a rewind to s1's position, not a
    // new copy of the 3 MB database: it grows by the changes the close
    // shipped and a few records.
    let grown = du(&data.path().join("log")) - log_before;
    assert!(
        grown < 1 << 20,
        "the log grew by {grown} bytes at a restore"
    );
    assert!(r.ended_runs >= 1, "{r:?}");
    let undo = r.before.unwrap();
    assert!(undo.name.starts_with("before-restore-"), "{undo:?}");
    let ended = running.await.unwrap();
    assert!(
        ended.error.contains("was restored to snapshot s1"),
        "{ended:?}"
    );
    assert_eq!(tree(&mut c, "demo").await, before);

    // The restore is undone by restoring the snapshot it took first.
    let listed = list(&mut c, "demo").await;
    let shown: Vec<&str> = listed.snapshots.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(shown, vec!["s1", undo.name.as_str()]);
    assert_eq!(listed.max_snapshots, 64);
    restore(&mut c, "demo", &undo.name).await.unwrap();
    assert_eq!(
        names(&mut c, "demo", ".").await,
        vec!["after.txt", "running.txt"]
    );
    // And back again: the computer keeps working after each restore.
    restore(&mut c, "demo", "s1").await.unwrap();
    assert_eq!(tree(&mut c, "demo").await, before);
    write(&mut c, "demo", "new.txt", pb::WriteMode::Truncate, b"new")
        .await
        .unwrap();
    assert_eq!(read(&mut c, "demo", "new.txt").await.unwrap(), b"new");

    // Restores wrote no full copies to the log: the latest state still
    // needs everything the snapshots do, so they hold nothing of their
    // own, and deleting them releases nothing within the retention window.
    let listed = list(&mut c, "demo").await;
    assert!(
        listed.snapshots.iter().all(|s| s.own_bytes == 0),
        "{listed:?}"
    );
    let mut released = 0;
    for s in &listed.snapshots {
        let d = c
            .delete_snapshot(pb::DeleteSnapshotRequest {
                computer: "demo".into(),
                snapshot: s.name.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        released += d.released_bytes;
    }
    assert_eq!(released, 0);
    assert!(list(&mut c, "demo").await.snapshots.is_empty());
    // The latest state is still whole after the release: a fork of it.
    create_from(&mut c, "after-prune", from_computer("demo"))
        .await
        .unwrap();
    let mut expected = before.clone();
    expected.insert(
        "new.txt".into(),
        (pb::FileKind::Regular as i32, 0o644, b"new".to_vec()),
    );
    let forked = tree(&mut c, "after-prune").await;
    assert_eq!(
        forked.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    assert_eq!(forked["blob.bin"], before["blob.bin"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_from_a_snapshot_a_computer_or_a_backup_file_change_independently() {
    let data = tempfile::tempdir().unwrap();
    let agent = agent(data.path());
    let mut c = agent.client().await;
    c.create_computer(pb::CreateComputerRequest {
        name: "src".into(),
        max_bytes: 50 << 20,
        max_inodes: 5000,
        egress: Some(pb::Egress {
            mode: pb::EgressMode::AllowAll as i32,
            ..Default::default()
        }),
    })
    .await
    .unwrap();
    write(&mut c, "src", "a.txt", pb::WriteMode::Truncate, b"original")
        .await
        .unwrap();
    snapshot(&mut c, "src", "base").await.unwrap();
    write(
        &mut c,
        "src",
        "a.txt",
        pb::WriteMode::Truncate,
        b"changed later",
    )
    .await
    .unwrap();

    // From the snapshot: its files, the source's quota and egress policy.
    let copy = create_from(&mut c, "copy", from_snapshot("base"))
        .await
        .unwrap();
    assert_eq!((copy.max_bytes, copy.max_inodes), (50 << 20, 5000));
    assert_eq!(copy.egress.unwrap().mode, pb::EgressMode::AllowAll as i32);
    assert_eq!(read(&mut c, "copy", "a.txt").await.unwrap(), b"original");
    // A fork: the source as it is now.
    create_from(&mut c, "fork", from_computer("src"))
        .await
        .unwrap();
    assert_eq!(
        read(&mut c, "fork", "a.txt").await.unwrap(),
        b"changed later"
    );
    // Each changes alone.
    write(&mut c, "copy", "a.txt", pb::WriteMode::Truncate, b"copy's")
        .await
        .unwrap();
    write(&mut c, "fork", "only-fork", pb::WriteMode::Truncate, b"")
        .await
        .unwrap();
    assert_eq!(
        read(&mut c, "src", "a.txt").await.unwrap(),
        b"changed later"
    );
    assert_eq!(
        read(&mut c, "fork", "a.txt").await.unwrap(),
        b"changed later"
    );
    assert_eq!(names(&mut c, "src", ".").await, vec!["a.txt"]);
    // A copy has a log of its own: snapshots of it, and restores.
    snapshot(&mut c, "copy", "copy-1").await.unwrap();
    write(&mut c, "copy", "a.txt", pb::WriteMode::Truncate, b"again")
        .await
        .unwrap();
    restore(&mut c, "copy", "copy-1").await.unwrap();
    assert_eq!(read(&mut c, "copy", "a.txt").await.unwrap(), b"copy's");
    // Deleting the source leaves its copies whole.
    c.delete_computer(pb::DeleteComputerRequest { name: "src".into() })
        .await
        .unwrap();
    assert_eq!(read(&mut c, "copy", "a.txt").await.unwrap(), b"copy's");
    // ... and frees its snapshots' names.
    let err = create_from(&mut c, "late", from_snapshot("base"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");

    // From a file made by Backup: streamed to the agent, checked, a computer.
    let mut stream = c
        .backup(pb::BackupRequest {
            computer: "fork".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut file = Vec::new();
    while let Some(piece) = stream.message().await.unwrap() {
        file.extend_from_slice(&piece.data);
    }
    let imported = import(&mut c, "imported", &file).await.unwrap();
    assert_eq!(imported.name, "imported");
    assert_eq!(
        read(&mut c, "imported", "a.txt").await.unwrap(),
        b"changed later"
    );
    assert_eq!(
        names(&mut c, "imported", ".").await,
        vec!["a.txt", "only-fork"]
    );
    // A file that is not a computer's database is refused, and leaves nothing.
    let err = import(&mut c, "junk", b"SQLite format 3\0 but nothing else")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("not a sound computer database"),
        "{err:?}"
    );
    let err = c
        .get_computer(pb::GetComputerRequest {
            name: "junk".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    // An import into a name that exists is refused.
    let err = import(&mut c, "copy", &file).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");
}

async fn import(c: &mut Client, name: &str, file: &[u8]) -> Result<pb::Computer, tonic::Status> {
    let mut pieces = Vec::new();
    for (i, data) in file.chunks(agentcomputer_proto::CHUNK_BYTES).enumerate() {
        pieces.push(pb::ImportComputerRequest {
            name: if i == 0 { name.into() } else { String::new() },
            offset: (i * agentcomputer_proto::CHUNK_BYTES) as u64,
            data: data.to_vec(),
            ..Default::default()
        });
    }
    c.import_computer(futures::stream::iter(pieces))
        .await
        .map(|r| r.into_inner())
}

/// A writer replaces `current` by renaming a freshly written `next-<i>`
/// over it, over and over; snapshots taken meanwhile each hold one point:
/// `current` whole (one value throughout), and at most the one `next-*`
/// written before its rename.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_under_a_renaming_writer_is_one_consistent_point() {
    let data = tempfile::tempdir().unwrap();
    let agent = agent(data.path());
    let mut c = agent.client().await;
    create(&mut c, "busy", 0).await;
    let body = |i: u32| format!("{i:08}").repeat(20_000).into_bytes();
    write(&mut c, "busy", "current", pb::WriteMode::Truncate, &body(0))
        .await
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut w = c.clone();
    let stopped = stop.clone();
    let writer = tokio::spawn(async move {
        let mut i = 1;
        while !stopped.load(std::sync::atomic::Ordering::SeqCst) {
            let next = format!("next-{i}");
            write(&mut w, "busy", &next, pb::WriteMode::Truncate, &body(i))
                .await
                .unwrap();
            w.rename(pb::RenameRequest {
                computer: "busy".into(),
                from: next,
                to: "current".into(),
                ..Default::default()
            })
            .await
            .unwrap();
            i += 1;
        }
        i
    });
    let mut taken = Vec::new();
    for n in 0..6 {
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        taken.push(
            snapshot(&mut c, "busy", &format!("busy-{n}"))
                .await
                .unwrap(),
        );
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let renames = writer.await.unwrap();
    assert!(renames > 6, "the writer made only {renames} renames");
    let mut seen = std::collections::BTreeSet::new();
    for s in &taken {
        let copy = format!("copy-{}", s.name);
        create_from(&mut c, &copy, from_snapshot(&s.name))
            .await
            .unwrap();
        let current = read(&mut c, &copy, "current").await.unwrap();
        let first = String::from_utf8(current[..8].to_vec()).unwrap();
        let i: u32 = first.parse().unwrap();
        assert_eq!(current, body(i), "{copy}: current is torn");
        seen.insert(i);
        let listed = names(&mut c, &copy, ".").await;
        let pending: Vec<_> = listed.iter().filter(|n| n.starts_with("next-")).collect();
        assert!(pending.len() <= 1, "{copy}: {listed:?}");
        for p in pending {
            // Written and not yet renamed: the one after `current`, whole.
            assert_eq!(p, &format!("next-{}", i + 1), "{copy}: {listed:?}");
            assert_eq!(read(&mut c, &copy, p).await.unwrap(), body(i + 1));
        }
    }
    assert!(
        seen.len() > 1,
        "every snapshot saw the same state: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_and_limits_get_clear_errors() {
    let data = tempfile::tempdir().unwrap();
    let agent = agent(data.path());
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    create(&mut c, "other", 0).await;

    let err = snapshot(&mut c, "missing", "s").await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert!(
        err.message().contains("computer \"missing\" not found"),
        "{err:?}"
    );
    let err = snapshot(&mut c, "demo", "Bad_Name").await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    snapshot(&mut c, "demo", "taken").await.unwrap();
    // Snapshot names are unique on the agent, across computers.
    let err = snapshot(&mut c, "other", "taken").await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");
    assert!(
        err.message().contains("snapshot \"taken\" already exists"),
        "{err:?}"
    );
    // A snapshot is restored only into its own computer.
    let err = restore(&mut c, "other", "taken").await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert!(
        err.message().contains("snapshot \"taken\" not found"),
        "{err:?}"
    );
    let err = restore(&mut c, "demo", "never").await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let err = c
        .delete_snapshot(pb::DeleteSnapshotRequest {
            computer: "demo".into(),
            snapshot: "never".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let err = create_from(&mut c, "x", from_snapshot("never"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let err = create_from(&mut c, "x", from_computer("missing"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    // The target name is taken.
    let err = create_from(&mut c, "other", from_snapshot("taken"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");
    let err = create_from(&mut c, "other", from_computer("demo"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");

    // The count limit: 64 per computer, then a clear refusal.
    for i in 1..64 {
        snapshot(&mut c, "demo", &format!("n{i}")).await.unwrap();
    }
    let err = snapshot(&mut c, "demo", "one-more").await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message()
            .contains("it has 64 snapshots, the most a computer may have (64)"),
        "{err:?}"
    );
    // A restore needs room for its undo snapshot.
    let err = restore(&mut c, "demo", "taken").await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    c.delete_snapshot(pb::DeleteSnapshotRequest {
        computer: "demo".into(),
        snapshot: "n1".into(),
    })
    .await
    .unwrap();
    snapshot(&mut c, "demo", "one-more").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_backup_store_snapshots_are_refused_naming_the_flag() {
    let data = tempfile::tempdir().unwrap();
    let agent = Agent::start(data.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let err = snapshot(&mut c, "demo", "s").await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("--backup file:///DIR"), "{err:?}");
    let err = create_from(&mut c, "fork", from_computer("demo"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    // An import needs no store.
    let mut stream = c
        .backup(pb::BackupRequest {
            computer: "demo".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut file = Vec::new();
    while let Some(piece) = stream.message().await.unwrap() {
        file.extend_from_slice(&piece.data);
    }
    import(&mut c, "copy", &file).await.unwrap();
    assert!(names(&mut c, "copy", ".").await.is_empty());
}

/// A computer mounted on the host is not restored under the processes
/// using the mount: the restore is refused naming the mount, nothing
/// changes (the mount keeps showing the current files), and after the
/// unmount the same restore goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mounted_computer_is_not_restored_under_its_mount() {
    if !Path::new("/dev/fuse").exists() || !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: host mounts need /dev/fuse and an agent running as root");
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let agent = agent(data.path());
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    write(
        &mut c,
        "demo",
        "a.txt",
        pb::WriteMode::Truncate,
        b"snapshotted",
    )
    .await
    .unwrap();
    snapshot(&mut c, "demo", "s1").await.unwrap();
    write(&mut c, "demo", "a.txt", pb::WriteMode::Truncate, b"current")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    c.mount(pb::MountRequest {
        computer: "demo".into(),
        host_path: dir.path().to_str().unwrap().into(),
        nonempty: false,
    })
    .await
    .unwrap();
    let held = std::fs::File::open(dir.path().join("a.txt")).unwrap();
    let err = restore(&mut c, "demo", "s1").await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(
        err.message()
            .contains(&format!("while it is mounted at {}", dir.path().display())),
        "{err:?}"
    );
    assert!(err.message().contains("nothing was changed"), "{err:?}");
    // The mount and a file held open on it go on as before.
    let mut seen = String::new();
    std::io::Read::read_to_string(&mut &held, &mut seen).unwrap();
    assert_eq!(seen, "current");
    assert_eq!(std::fs::read(dir.path().join("a.txt")).unwrap(), b"current");
    drop(held);
    c.unmount(pb::UnmountRequest {
        computer: "demo".into(),
        host_path: dir.path().to_str().unwrap().into(),
    })
    .await
    .unwrap();
    restore(&mut c, "demo", "s1").await.unwrap();
    assert_eq!(read(&mut c, "demo", "a.txt").await.unwrap(), b"snapshotted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn point_in_time_restores_reach_back_as_far_as_the_retention_window() {
    use std::time::{Duration, SystemTime};
    let data = tempfile::tempdir().unwrap();
    let url = format!("file://{}", data.path().join("log").display());
    let agent = Agent::start(data.path(), &["--backup", &url, "--retention", "5s"]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    write(&mut c, "demo", "a.txt", pb::WriteMode::Truncate, b"one")
        .await
        .unwrap();
    snapshot(&mut c, "demo", "s1").await.unwrap();
    let one = SystemTime::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    write(&mut c, "demo", "a.txt", pb::WriteMode::Truncate, b"two")
        .await
        .unwrap();
    snapshot(&mut c, "demo", "s2").await.unwrap();

    // A time within the window: the state then.
    let r = restore_time(&mut c, "demo", one).await.unwrap();
    let undo = r.before.unwrap().name;
    assert_eq!(read(&mut c, "demo", "a.txt").await.unwrap(), b"one");

    // A time before the window is refused, saying how far back it reaches.
    let e = restore_time(
        &mut c,
        "demo",
        SystemTime::now() - Duration::from_secs(3600),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange, "{e:?}");
    assert!(
        e.message().contains("outside its retention window of 5s"),
        "{}",
        e.message()
    );
    assert_eq!(read(&mut c, "demo", "a.txt").await.unwrap(), b"one");

    // Once the window has passed them, the restore's undo snapshot goes
    // (at the next restore or snapshot deletion) and the time it was
    // made is refused; named snapshots stay until deleted.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let r = restore(&mut c, "demo", "s2").await.unwrap();
    assert_eq!(read(&mut c, "demo", "a.txt").await.unwrap(), b"two");
    let names: Vec<String> = list(&mut c, "demo")
        .await
        .snapshots
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(
        names,
        vec!["s1".to_string(), "s2".into(), r.before.unwrap().name],
        "{undo} outlived the window"
    );
    let e = restore_time(&mut c, "demo", one).await.unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange, "{e:?}");
    // What the log still holds restores whole.
    restore(&mut c, "demo", "s1").await.unwrap();
    assert_eq!(read(&mut c, "demo", "a.txt").await.unwrap(), b"one");
}
