//! Snapshot, restore and fork calls (docs/snapshots.md), and the import
//! of a database file made by Backup.

use std::io::Write as _;

use agentcomputer_fs::Limits;
use agentcomputer_proto::v1 as pb;
use nix::errno::Errno;
use tonic::{Status, Streaming};

use super::computers::to_proto;
use super::streams::idle_error;
use crate::blocking::blocking;
use crate::errors::errno_detail;
use crate::registry::{Registry, RestoreTo, SnapshotInfo, SnapshotSource};

/// The API's view of a snapshot.
pub fn info_to_proto(info: &SnapshotInfo) -> pb::SnapshotInfo {
    pb::SnapshotInfo {
        name: info.record.name.clone(),
        computer: info.record.computer.clone(),
        position: info.record.position,
        created_unix_nanos: info.record.created_unix_nanos,
        database_bytes: info.record.database_bytes,
        own_bytes: info.own_bytes,
        duration_ms: info.took.as_millis() as u64,
    }
}

pub async fn snapshot(
    registry: &Registry,
    req: pb::SnapshotRequest,
) -> Result<pb::SnapshotInfo, Status> {
    let snap = (!req.snapshot.is_empty()).then_some(req.snapshot.as_str());
    let info = registry.snapshot(&req.computer, snap).await?;
    Ok(info_to_proto(&info))
}

pub async fn list(
    registry: &Registry,
    req: pb::ListSnapshotsRequest,
) -> Result<pb::ListSnapshotsResponse, Status> {
    let snapshots = registry.snapshots(&req.computer).await?;
    let limits = registry.snapshot_limits();
    let max_own_bytes = match limits.max_own_bytes {
        Some(b) => b,
        None => registry.get(&req.computer).await?.settings.max_bytes,
    };
    Ok(pb::ListSnapshotsResponse {
        snapshots: snapshots.iter().map(info_to_proto).collect(),
        max_snapshots: limits.max_count as u32,
        max_own_bytes,
    })
}

pub async fn delete(
    registry: &Registry,
    req: pb::DeleteSnapshotRequest,
) -> Result<pb::DeleteSnapshotResponse, Status> {
    let (objects, bytes) = registry
        .delete_snapshot(&req.computer, &req.snapshot)
        .await?;
    Ok(pb::DeleteSnapshotResponse {
        released_objects: objects,
        released_bytes: bytes,
    })
}

pub async fn restore(
    registry: &Registry,
    req: pb::RestoreComputerRequest,
) -> Result<pb::RestoreComputerResponse, Status> {
    let to = match (req.snapshot.is_empty(), req.unix_nanos) {
        (false, 0) => RestoreTo::Snapshot(req.snapshot),
        (true, t) if t > 0 => {
            RestoreTo::Time(std::time::UNIX_EPOCH + std::time::Duration::from_nanos(t as u64))
        }
        _ => {
            return Err(Status::invalid_argument(
                "RestoreComputer needs exactly one of snapshot and unix_nanos (a time after the epoch)",
            ));
        }
    };
    let r = registry.restore_to(&req.computer, &to).await?;
    Ok(pb::RestoreComputerResponse {
        before: Some(info_to_proto(&r.before)),
        restored: Some(info_to_proto(&SnapshotInfo {
            record: r.restored,
            own_bytes: 0,
            took: std::time::Duration::ZERO,
        })),
        ended_runs: r.ended_runs as u32,
        duration_ms: r.elapsed.as_millis() as u64,
    })
}

pub async fn create_from(
    registry: &Registry,
    req: pb::CreateComputerFromRequest,
) -> Result<pb::Computer, Status> {
    use pb::create_computer_from_request::Source;
    let source = match req.source {
        Some(Source::Snapshot(s)) => SnapshotSource::Snapshot(s),
        Some(Source::Computer(c)) => SnapshotSource::Computer(c),
        None => {
            return Err(Status::invalid_argument(
                "CreateComputerFrom needs a source: a snapshot or a computer",
            ));
        }
    };
    Ok(to_proto(registry.create_from(&req.name, &source).await?))
}

/// Receives a database file into the agent's scratch space, piece by
/// piece (each at the offset where the last ended), then makes the
/// computer from it. A client that sends nothing for `idle` is dropped.
pub async fn import(
    registry: &Registry,
    idle: std::time::Duration,
    mut stream: Streaming<pb::ImportComputerRequest>,
) -> Result<pb::Computer, Status> {
    async fn next(
        stream: &mut Streaming<pb::ImportComputerRequest>,
        idle: std::time::Duration,
    ) -> Result<Option<pb::ImportComputerRequest>, Status> {
        match tokio::time::timeout(idle, stream.message()).await {
            Ok(r) => r,
            Err(_) => Err(idle_error("import", idle)),
        }
    }
    let Some(first) = next(&mut stream, idle).await? else {
        return Err(errno_detail(Errno::EINVAL, "empty ImportComputer stream"));
    };
    let name = first.name.clone();
    crate::registry::Registry::computer_dir(registry, &name)?;
    let limits = (first.max_bytes != 0 || first.max_inodes != 0).then(|| {
        let d = Limits::default();
        Limits {
            max_bytes: if first.max_bytes == 0 {
                d.max_bytes
            } else {
                first.max_bytes
            },
            max_inodes: if first.max_inodes == 0 {
                d.max_inodes
            } else {
                first.max_inodes
            },
        }
    });
    let egress = super::egress::from_proto(first.egress.clone())?;
    let path = registry.import_path(&name);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| io_status(e, &name))?;
    let received: Result<(), Status> = async {
        let mut file = Some(file);
        let mut at = 0u64;
        let mut piece = Some(first);
        while let Some(p) = piece.take() {
            if !p.name.is_empty() && p.name != name {
                return Err(errno_detail(
                    Errno::EINVAL,
                    "only the first ImportComputer piece names the computer",
                ));
            }
            if p.offset != at {
                return Err(errno_detail(
                    Errno::EINVAL,
                    format_args!("import piece at offset {} where {at} was due", p.offset),
                ));
            }
            at += p.data.len() as u64;
            let mut f = file.take().expect("the file is put back after each piece");
            let (f, written) = blocking(move || {
                let r = f.write_all(&p.data);
                (f, r)
            })
            .await;
            written.map_err(|e| io_status(e, &name))?;
            file = Some(f);
            piece = next(&mut stream, idle).await?;
        }
        let f = file.take().expect("the file is kept to the end");
        blocking(move || f.sync_all())
            .await
            .map_err(|e| io_status(e, &name))
    }
    .await;
    if let Err(e) = received {
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok(to_proto(
        registry.import(&name, path, limits, egress).await?,
    ))
}

fn io_status(e: std::io::Error, name: &str) -> Status {
    let errno = e.raw_os_error().map(Errno::from_raw).unwrap_or(Errno::EIO);
    crate::errors::errno_status(errno, &format!("import of computer \"{name}\""))
}
