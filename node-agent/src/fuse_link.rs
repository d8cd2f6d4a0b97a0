//! The agent's end of the hand-over link to the cluster's privileged
//! mounter (`agentcomputer-mounter`, protocol in
//! `agentcomputer_csi::handover` and `docs/csi.md`).
//!
//! The agent connects to the mounter's socket and answers its requests:
//! `check` (is this volume here), `serve` (serve the FUSE connection that
//! comes with the message over the computer's engine) and `stats` (the
//! engine's usage counters). The volume id is the registry key (in cluster
//! mode, the AgentComputer's uid).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentcomputer_csi::handover::{AgentEnd, Incoming, Reply, Request, VolumeStats};
use agentcomputer_fuse::{InitRecord, MountOptions};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::blocking::blocking;
use crate::registry::{Registry, RegistryError};

/// First delay before connecting again after a failure.
pub const RETRY_MIN: Duration = Duration::from_millis(100);

/// Longest delay between connection attempts.
pub const RETRY_MAX: Duration = Duration::from_secs(5);

/// Connects to the mounter at `socket` and answers its requests until
/// `stop` is cancelled. A failed connection is retried with a delay
/// doubling from [`RETRY_MIN`] to [`RETRY_MAX`]; one warning is logged per
/// outage, and one line when the link is up again.
pub async fn run(registry: Registry, socket: PathBuf, stop: CancellationToken) {
    let mut delay = RETRY_MIN;
    let mut outage = false;
    loop {
        let attempt = tokio::select! {
            _ = stop.cancelled() => return,
            r = AgentEnd::connect(&socket) => r,
        };
        match attempt {
            Ok(end) => {
                info!(socket = %socket.display(), "connected to the mounter");
                outage = false;
                delay = RETRY_MIN;
                serve(&registry, end, &stop).await;
                if stop.is_cancelled() {
                    return;
                }
                warn!(socket = %socket.display(), "link to the mounter ended; reconnecting");
            }
            Err(e) => {
                if !outage {
                    warn!(socket = %socket.display(), error = %e, "cannot reach the mounter; retrying until it answers");
                    outage = true;
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(RETRY_MAX);
    }
}

/// Answers requests on one connection until it ends or `stop`.
async fn serve(registry: &Registry, end: AgentEnd, stop: &CancellationToken) {
    let end = Arc::new(end);
    loop {
        let next = tokio::select! {
            _ = stop.cancelled() => return,
            r = end.next() => r,
        };
        match next {
            Ok(Some(incoming)) => {
                let (registry, end) = (registry.clone(), end.clone());
                tokio::spawn(async move {
                    let id = incoming.id;
                    let reply = answer(&registry, incoming).await;
                    if let Err(e) = end.reply(id, reply).await {
                        warn!(error = %e, "could not answer the mounter");
                    }
                });
            }
            Ok(None) => return,
            Err(e) => {
                warn!(error = %e, "bad message from the mounter; dropping the link");
                return;
            }
        }
    }
}

async fn answer(registry: &Registry, incoming: Incoming) -> Reply {
    let Incoming { request, fd, .. } = incoming;
    match request {
        Request::Check { volume } => match registry.get(&volume).await {
            Ok(_) => Reply::Known,
            Err(e) => failure(&volume, e),
        },
        Request::Serve {
            volume,
            uid,
            gid,
            readonly,
        } => serve_fuse(registry, volume, fd, None, (uid, gid, readonly)).await,
        Request::Resume {
            volume,
            uid,
            gid,
            readonly,
            init,
        } => {
            let record = match hex::decode(&init)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
                .and_then(InitRecord::from_bytes)
            {
                Ok(r) => r,
                Err(e) => {
                    return Reply::Error {
                        message: format!("resume of {volume}: bad FUSE_INIT record: {e}"),
                    };
                }
            };
            serve_fuse(registry, volume, fd, Some(record), (uid, gid, readonly)).await
        }
        Request::Stats { volume } => {
            let lease = match registry.acquire(&volume).await {
                Ok(l) => l,
                Err(e) => return failure(&volume, e),
            };
            match blocking(move || lease.fs().statfs().map(|st| (st, lease.fs().limits()))).await {
                // Bytes exactly (statfs rounds its block counts down).
                Ok((st, limits)) => Reply::Stats(VolumeStats {
                    total_bytes: limits.max_bytes,
                    used_bytes: st.used_bytes,
                    available_bytes: limits.max_bytes.saturating_sub(st.used_bytes),
                    total_inodes: st.files,
                    used_inodes: st.used_inodes,
                    available_inodes: st.files_free,
                }),
                Err(e) => Reply::Error {
                    message: format!("statfs of {volume}: {e}"),
                },
            }
        }
    }
}

/// Serves (or, with `resume`, takes over again) the FUSE connection `fd`
/// of computer `volume` and keeps it with the computer; the reply carries
/// the connection's `FUSE_INIT` record for the mounter to keep.
async fn serve_fuse(
    registry: &Registry,
    volume: String,
    fd: Option<std::os::fd::OwnedFd>,
    resume: Option<InitRecord>,
    (uid, gid, readonly): (u32, u32, bool),
) -> Reply {
    let Some(fd) = fd else {
        return Reply::Error {
            message: "serve came without a FUSE descriptor".into(),
        };
    };
    // A live connection's kernel may hold files unlinked while open: an
    // engine opened for it keeps them (freed at the kernel's FORGET).
    let lease = if resume.is_some() {
        registry.acquire_live(&volume).await
    } else {
        registry.acquire(&volume).await
    };
    let lease = match lease {
        Ok(l) => l,
        Err(e) => return failure(&volume, e),
    };
    let fs = lease.fs().clone();
    let opts = MountOptions {
        fsname: format!("agentcomputer:{volume}"),
        ..MountOptions::default()
    };
    let resuming = resume.is_some();
    let started = std::time::Instant::now();
    let conn = match blocking(move || match resume {
        Some(init) => agentcomputer_fuse::resume_connection(fs, fd, opts, init),
        None => agentcomputer_fuse::serve_connection(fs, fd, opts),
    })
    .await
    {
        Ok(c) => c,
        Err(e) => {
            warn!(computer = %volume, error = %e, resuming, "cannot serve the handed-over FUSE connection");
            return Reply::Error {
                message: format!("serving the FUSE connection: {e}"),
            };
        }
    };
    let init = hex::encode(conn.init_record().as_bytes());
    match registry.attach_connection(&lease, conn).await {
        Ok(()) => {
            if resuming {
                info!(computer = %volume, uid, gid, readonly, took = ?started.elapsed(), "resumed a live FUSE connection served by an earlier agent process");
            } else {
                info!(computer = %volume, uid, gid, readonly, "serving a handed-over FUSE connection");
            }
            Reply::Served { init: Some(init) }
        }
        Err(e) => failure(&volume, e),
    }
}

/// The reply for a registry error: unknown or invalid names are `NotFound`.
fn failure(volume: &str, e: RegistryError) -> Reply {
    match e {
        RegistryError::NotFound(_) | RegistryError::InvalidName(_) => Reply::NotFound,
        other => {
            warn!(computer = volume, error = %other, "request of the mounter failed");
            Reply::Error {
                message: other.to_string(),
            }
        }
    }
}
