//! The agent's end of the hand-over link to the cluster's privileged
//! mounter (`agentcomputer-mounter`, protocol in
//! `agentcomputer_handover::mounter` and `docs/csi.md`).
//!
//! The agent connects to the mounter's socket and answers its requests:
//! `check` (is this volume here), `serve` (serve the FUSE connection that
//! comes with the message over the computer's engine), `resume` (take a
//! live one over again), `give` (hand a connection back to a restarted
//! mounter) and `stats` (the engine's usage counters). The volume id is
//! the registry key (in cluster mode, the AgentComputer's uid).
//!
//! The agent keeps a duplicate of the descriptor of every connection it
//! serves, with what the mounter said of it ([`ServedConnections`]), for `give`: the
//! mounter's own duplicates live in its memory only, and a restarted
//! mounter takes them back from here so that a later agent restart still
//! finds every connection held by the mounter.

use parking_lot::Mutex;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentcomputer_fuse::MountOptions;
use agentcomputer_handover::mounter::{AgentEnd, Incoming, Reply, Request, VolumeStats};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::blocking::blocking;
use crate::registry::{Handed, TakeOverError, serve_handed_over};
use crate::registry::{Registry, RegistryError};

/// First delay before connecting again after a failure.
pub const RETRY_MIN: Duration = Duration::from_millis(100);

/// Longest delay between connection attempts.
pub const RETRY_MAX: Duration = Duration::from_secs(5);

/// How long after the first link to the mounter opens still keep orphans
/// ([`Registry::shorten_orphan_hold`]): the mounter sends every `resume`
/// right after the link is up, one at a time (each waits at most
/// `SERVE_TIMEOUT`, in practice milliseconds).
pub const RESUME_WINDOW: Duration = Duration::from_secs(120);

/// One connection this agent process serves, as the mounter described it.
struct ServedConnection {
    volume: String,
    /// The mount's target path (protocol 3 mounters say it); `None` for a
    /// connection handed over by an older mounter.
    target: Option<String>,
    uid: u32,
    gid: u32,
    readonly: bool,
    /// Hex of the connection's `FUSE_INIT` record.
    init: String,
    /// A duplicate of the connection's `/dev/fuse` descriptor.
    fd: OwnedFd,
}

/// The connections this agent process serves, for `give`. Entries whose
/// connection the kernel ended (the target was unmounted) are dropped
/// whenever the list is used.
#[derive(Default)]
struct ServedConnections {
    list: Mutex<Vec<ServedConnection>>,
}

impl ServedConnections {
    fn lock(&self) -> parking_lot::MutexGuard<'_, Vec<ServedConnection>> {
        let mut list = self.list.lock();
        list.retain(|c| agentcomputer_fuse::is_live(&c.fd).unwrap_or(false));
        list
    }

    /// Records a connection now served; replaces an entry of the same target.
    fn add(&self, conn: ServedConnection) {
        let mut list = self.lock();
        if conn.target.is_some() {
            list.retain(|c| c.target != conn.target);
        }
        list.push(conn);
    }

    /// The `adopt` reply and a duplicate descriptor for the connection of
    /// `volume` at `target`: the one recorded with that target or, failing
    /// that, the only one of the volume recorded without a target (handed
    /// over by a protocol 2 mounter), which then gets the target. `None`
    /// when there is no such connection or it is ambiguous.
    fn give(&self, volume: &str, target: &str) -> Option<std::io::Result<(Reply, OwnedFd)>> {
        let mut list = self.lock();
        let index = match list
            .iter()
            .position(|c| c.volume == volume && c.target.as_deref() == Some(target))
        {
            Some(i) => i,
            None => {
                let mut untargeted = list
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.volume == volume && c.target.is_none())
                    .map(|(i, _)| i);
                match (untargeted.next(), untargeted.next()) {
                    (Some(i), None) => i,
                    _ => return None,
                }
            }
        };
        let c = &mut list[index];
        c.target = Some(target.to_string());
        Some(c.fd.try_clone().map(|fd| {
            (
                Reply::Adopt {
                    volume: c.volume.clone(),
                    uid: c.uid,
                    gid: c.gid,
                    readonly: c.readonly,
                    init: c.init.clone(),
                },
                fd,
            )
        }))
    }
}

/// Connects to the mounter at `socket` and answers its requests until
/// `stop` is cancelled. A failed connection is retried with a delay
/// doubling from [`RETRY_MIN`] to [`RETRY_MAX`]; one warning is logged per
/// outage, and one line when the link is up again.
pub async fn run(registry: Registry, socket: PathBuf, stop: CancellationToken) {
    let held = Arc::new(ServedConnections::default());
    let mut delay = RETRY_MIN;
    let mut outage = false;
    let mut linked = false;
    loop {
        let attempt = tokio::select! {
            _ = stop.cancelled() => return,
            r = AgentEnd::connect(&socket) => r,
        };
        match attempt {
            Ok(end) => {
                info!(socket = %socket.display(), "connected to the mounter");
                if !linked {
                    linked = true;
                    registry.shorten_orphan_hold(std::time::Instant::now() + RESUME_WINDOW);
                }
                outage = false;
                delay = RETRY_MIN;
                serve(&registry, &held, end, &stop).await;
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
async fn serve(
    registry: &Registry,
    held: &Arc<ServedConnections>,
    end: AgentEnd,
    stop: &CancellationToken,
) {
    let end = Arc::new(end);
    loop {
        let next = tokio::select! {
            _ = stop.cancelled() => return,
            r = end.next() => r,
        };
        match next {
            Ok(Some(incoming)) => {
                let (registry, held, end) = (registry.clone(), held.clone(), end.clone());
                tokio::spawn(async move {
                    let id = incoming.id;
                    let (reply, fd) = answer(&registry, &held, incoming).await;
                    if let Err(e) = end.reply(id, reply, fd.as_ref().map(|f| f.as_fd())).await {
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

/// The reply to one request, and the descriptor that goes with it (`give`).
async fn answer(
    registry: &Registry,
    held: &ServedConnections,
    incoming: Incoming,
) -> (Reply, Option<OwnedFd>) {
    let Incoming { request, fd, .. } = incoming;
    let reply = match request {
        Request::Give { volume, target } => return give_back(held, &volume, &target),
        Request::Check { volume } => match registry.get(&volume).await {
            Ok(_) => Reply::Known,
            Err(e) => failure(&volume, e),
        },
        Request::Serve {
            volume,
            uid,
            gid,
            readonly,
            target,
        } => {
            let conn = Described {
                volume,
                target,
                uid,
                gid,
                readonly,
            };
            serve_fuse(registry, held, conn, fd, None).await
        }
        Request::Resume {
            volume,
            uid,
            gid,
            readonly,
            init,
            target,
        } => {
            let conn = Described {
                volume,
                target,
                uid,
                gid,
                readonly,
            };
            serve_fuse(registry, held, conn, fd, Some(init)).await
        }
        Request::Stats { volume } => stats(registry, volume).await,
    };
    (reply, None)
}

/// `give`: a duplicate of the connection served for `volume` at `target`.
fn give_back(held: &ServedConnections, volume: &str, target: &str) -> (Reply, Option<OwnedFd>) {
    match held.give(volume, target) {
        Some(Ok((reply, fd))) => {
            info!(computer = %volume, target, "handing a served FUSE connection back to the mounter");
            (reply, Some(fd))
        }
        Some(Err(e)) => (
            Reply::Error {
                message: format!("duplicating the connection's descriptor: {e}"),
            },
            None,
        ),
        None => (Reply::NotFound, None),
    }
}

/// `stats`: the engine's usage counters of computer `volume`.
async fn stats(registry: &Registry, volume: String) -> Reply {
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

/// A connection as `serve` and `resume` describe it.
struct Described {
    volume: String,
    target: Option<String>,
    uid: u32,
    gid: u32,
    readonly: bool,
}

/// Serves (or, with `resume`, takes over again) the FUSE connection `fd`
/// of computer `conn.volume` and keeps it with the computer, and a
/// duplicate of it in `held`; the reply carries the connection's
/// `FUSE_INIT` record for the mounter to keep.
async fn serve_fuse(
    registry: &Registry,
    held: &ServedConnections,
    conn: Described,
    fd: Option<OwnedFd>,
    resume: Option<String>,
) -> Reply {
    let Described {
        volume,
        target,
        uid,
        gid,
        readonly,
    } = conn;
    let Some(fd) = fd else {
        return Reply::Error {
            message: "serve came without a FUSE descriptor".into(),
        };
    };
    let kept = match fd.try_clone() {
        Ok(k) => k,
        Err(e) => {
            return Reply::Error {
                message: format!("duplicating the FUSE descriptor: {e}"),
            };
        }
    };
    let resuming = resume.is_some();
    let handed = match &resume {
        Some(init) => Handed::Live { init },
        None => Handed::Fresh,
    };
    let opts = MountOptions {
        fsname: agentcomputer_handover::fsname::source(&volume),
        ..MountOptions::default()
    };
    let started = std::time::Instant::now();
    let (lease, conn) = match serve_handed_over(registry, &volume, fd, opts, handed).await {
        Ok(served) => served,
        Err(TakeOverError::Registry(e)) => return failure(&volume, e),
        Err(e) => {
            warn!(computer = %volume, error = %e, resuming, "cannot serve the handed-over FUSE connection");
            return Reply::Error {
                message: format!("{volume}: {e}"),
            };
        }
    };
    let init = agentcomputer_handover::init::encode(conn.init_record().as_bytes());
    match registry.attach_connection(&lease, conn).await {
        Ok(()) => {
            held.add(ServedConnection {
                volume: volume.clone(),
                target,
                uid,
                gid,
                readonly,
                init: init.clone(),
                fd: kept,
            });
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
