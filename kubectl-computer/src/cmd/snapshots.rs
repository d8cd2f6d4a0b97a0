//! `snapshot`, `snapshots`, `delete-snapshot`, `restore`, `fork` and
//! `create --from`: snapshots are named positions of a computer's
//! continuous backup log (docs/snapshots.md).

use std::io::Read;
use std::path::Path;

use agentcomputer_proto::v1 as pb;
use pb::create_computer_from_request::Source;

use crate::backend::Backend;
use crate::client::Client;
use crate::error::{CliError, Result, local_io};
use crate::format::time;
use crate::size::human;

/// The snapshot subcommands (flattened into the top-level command list).
#[derive(clap::Subcommand)]
pub enum SnapshotCommand {
    /// Take a snapshot of a computer: a consistent point of its whole
    /// filesystem, taken while execs and mounts keep running. Needs an
    /// agent with a backup store (--backup); SNAPSHOT defaults to
    /// NAME-<unix seconds>. Snapshot names are unique on an agent.
    Snapshot {
        name: String,
        snapshot: Option<String>,
    },
    /// List a computer's snapshots: name, time, the database's size then,
    /// and the bytes each holds on its own (what deleting it releases).
    Snapshots { name: String },
    /// Delete a snapshot and release the backup log it alone needs.
    DeleteSnapshot { name: String, snapshot: String },
    /// Bring a computer back to one of its snapshots (--to), or to a point
    /// in time its backup log keeps (--time). Running execs are ended; the
    /// state they leave is kept as a snapshot before-restore-<time> first,
    /// so the restore can be undone. Refused while the computer is mounted.
    Restore {
        name: String,
        /// The snapshot to restore.
        #[arg(
            long = "to",
            value_name = "SNAPSHOT",
            required_unless_present = "time",
            conflicts_with = "time"
        )]
        to: Option<String>,
        /// A time instead: RFC 3339 (2026-01-02T15:04:05Z) or a duration
        /// ago (10m, 1h30m); the latest backup position at or before it.
        #[arg(long, value_name = "TIME", value_parser = parse_time)]
        time: Option<std::time::SystemTime>,
    },
    /// Make computer NEW a copy of computer NAME as it is now (a fork;
    /// shorthand for `create NEW --from computer/NAME`).
    Fork { name: String, new: String },
}

/// Runs one snapshot subcommand.
pub async fn run(backend: &Backend, command: SnapshotCommand) -> Result<()> {
    // In a cluster a snapshot is a ComputerSnapshot object, and a fork an
    // AgentComputer with spec.source.
    if let Backend::Cluster(cluster) = backend {
        use crate::cluster::snapshots as objects;
        match &command {
            SnapshotCommand::Snapshot { name, snapshot } => {
                return objects::take(cluster, name, snapshot.clone()).await;
            }
            SnapshotCommand::Snapshots { name } => return objects::list(cluster, name).await,
            SnapshotCommand::DeleteSnapshot { name, snapshot } => {
                return objects::delete(cluster, name, snapshot).await;
            }
            SnapshotCommand::Fork { name, new } => {
                return objects::create_from(
                    cluster,
                    new,
                    &format!("computer/{name}"),
                    Some(std::time::Duration::from_secs(300)),
                )
                .await;
            }
            SnapshotCommand::Restore { .. } => {}
        }
    }
    match command {
        SnapshotCommand::Snapshot { name, snapshot } => {
            let (mut c, name) = backend.client(name).await?;
            take(&mut c, name, snapshot.unwrap_or_default()).await
        }
        SnapshotCommand::Snapshots { name } => {
            let (mut c, name) = backend.client(name).await?;
            list(&mut c, name).await
        }
        SnapshotCommand::DeleteSnapshot { name, snapshot } => {
            let (mut c, name) = backend.client(name).await?;
            delete(&mut c, name, snapshot).await
        }
        SnapshotCommand::Restore { name, to, time } => {
            let (mut c, name) = backend.client(name).await?;
            restore(&mut c, name, to.unwrap_or_default(), time).await
        }
        SnapshotCommand::Fork { name, new } => {
            create_from(backend, new, &format!("computer/{name}")).await
        }
    }
}

async fn take(c: &mut Client, computer: String, snapshot: String) -> Result<()> {
    let s = c
        .snapshot(pb::SnapshotRequest { computer, snapshot })
        .await?
        .into_inner();
    outln!(
        "snapshot {} of {} taken in {} ms (position {}, {})",
        s.name,
        s.computer,
        s.duration_ms,
        s.position,
        human(s.database_bytes)
    );
    Ok(())
}

async fn list(c: &mut Client, computer: String) -> Result<()> {
    let r = c
        .list_snapshots(pb::ListSnapshotsRequest {
            computer: computer.clone(),
        })
        .await?
        .into_inner();
    let rows: Vec<[String; 5]> = r
        .snapshots
        .iter()
        .map(|s| {
            [
                s.name.clone(),
                time(s.created_unix_nanos),
                human(s.database_bytes),
                human(s.own_bytes),
                s.position.to_string(),
            ]
        })
        .collect();
    let header = ["NAME", "TIME", "SIZE", "OWN", "POSITION"].map(String::from);
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        outln!("{}", line.join("  ").trim_end());
    }
    let own: u64 = r.snapshots.iter().map(|s| s.own_bytes).sum();
    outln!(
        "{} of {} snapshots; {} of {} held on their own",
        r.snapshots.len(),
        r.max_snapshots,
        human(own),
        human(r.max_own_bytes)
    );
    Ok(())
}

async fn delete(c: &mut Client, computer: String, snapshot: String) -> Result<()> {
    let r = c
        .delete_snapshot(pb::DeleteSnapshotRequest {
            computer: computer.clone(),
            snapshot: snapshot.clone(),
        })
        .await?
        .into_inner();
    outln!(
        "snapshot {snapshot} of {computer} deleted ({} released)",
        human(r.released_bytes)
    );
    Ok(())
}

/// `--time`: RFC 3339, or a duration before now.
fn parse_time(s: &str) -> std::result::Result<std::time::SystemTime, String> {
    if let Ok(t) = humantime::parse_rfc3339_weak(s) {
        return Ok(t);
    }
    match humantime::parse_duration(s) {
        Ok(d) => Ok(std::time::SystemTime::now() - d),
        Err(_) => Err(format!(
            "{s:?} is neither an RFC 3339 time (2026-01-02T15:04:05Z) nor a duration ago (10m)"
        )),
    }
}

async fn restore(
    c: &mut Client,
    computer: String,
    snapshot: String,
    time: Option<std::time::SystemTime>,
) -> Result<()> {
    let unix_nanos = time.map_or(0, |t| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64)
    });
    let r = c
        .restore_computer(pb::RestoreComputerRequest {
            computer: computer.clone(),
            snapshot: snapshot.clone(),
            unix_nanos,
        })
        .await?
        .into_inner();
    let undo = r.before.map(|b| b.name).unwrap_or_default();
    let to = match r.restored {
        Some(s) if !s.name.is_empty() => format!("snapshot {}", s.name),
        Some(s) => format!(
            "backup position {} ({})",
            s.position,
            time_of(s.created_unix_nanos)
        ),
        None => String::new(),
    };
    outln!(
        "{computer} restored to {to} in {} ms; {} run(s) ended; undo with: restore {computer} --to {undo}",
        r.duration_ms,
        r.ended_runs
    );
    Ok(())
}

fn time_of(unix_nanos: i64) -> String {
    time(unix_nanos)
}

/// `create NEW --from SOURCE`: `snapshot/S`, `computer/C` or `file:PATH`
/// (a file made by `backup`).
pub async fn create_from(backend: &Backend, new: String, from: &str) -> Result<()> {
    let (mut c, new) = backend.client(new).await?;
    let made = if let Some(path) = from.strip_prefix("file:") {
        import(&mut c, new, Path::new(path)).await?
    } else {
        let source = match from.split_once('/') {
            Some(("snapshot", s)) if !s.is_empty() => Source::Snapshot(s.to_string()),
            Some(("computer", s)) if !s.is_empty() => Source::Computer(s.to_string()),
            _ => {
                return Err(CliError::new(format!(
                    "--from {from}: give snapshot/NAME, computer/NAME or file:PATH"
                )));
            }
        };
        c.create_computer_from(pb::CreateComputerFromRequest {
            name: new,
            source: Some(source),
        })
        .await?
        .into_inner()
    };
    outln!(
        "{} from {from}",
        super::computers::created_line(
            &made.name,
            made.max_bytes,
            made.max_inodes,
            made.egress.as_ref()
        )
    );
    Ok(())
}

/// Streams the database file at `path` to the agent as computer `name`,
/// 1 MiB at a time (read as the upload goes, never whole in memory).
async fn import(c: &mut Client, name: String, path: &Path) -> Result<pb::Computer> {
    let file = std::fs::File::open(path).map_err(|e| local_io("cannot read", path, e))?;
    let failed: std::sync::Arc<std::sync::Mutex<Option<std::io::Error>>> = Default::default();
    let seen = failed.clone();
    // (file, offset, first piece sent, done)
    let pieces = futures::stream::unfold(
        (file, 0u64, false, false),
        move |(mut file, offset, sent, done)| {
            let name = name.clone();
            let failed = seen.clone();
            async move {
                if done {
                    return None;
                }
                let mut buf = vec![0u8; agentcomputer_proto::CHUNK_BYTES];
                let mut n = 0;
                while n < buf.len() {
                    match file.read(&mut buf[n..]) {
                        Ok(0) => break,
                        Ok(k) => n += k,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            *failed.lock().expect("not poisoned") = Some(e);
                            return None;
                        }
                    }
                }
                if n == 0 && sent {
                    return None;
                }
                buf.truncate(n);
                let piece = pb::ImportComputerRequest {
                    name: if sent { String::new() } else { name },
                    offset,
                    data: buf,
                    ..Default::default()
                };
                let last = n < agentcomputer_proto::CHUNK_BYTES;
                Some((piece, (file, offset + n as u64, true, last)))
            }
        },
    );
    let made = c.import_computer(pieces).await;
    if let Some(e) = failed.lock().expect("not poisoned").take() {
        return Err(local_io("cannot read", path, e));
    }
    Ok(made?.into_inner())
}
