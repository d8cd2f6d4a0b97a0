//! The bound on how long a published connection waits for a node agent.
//!
//! The mounter keeps a descriptor of every published FUSE connection, so
//! while no agent process serves it the kernel holds the pods' requests
//! instead of failing them, and the next agent takes the connection over
//! (`resume`). If no agent comes back (a crash loop, a deleted DaemonSet, a
//! broken image), those processes would wait forever. [`watch`] bounds the
//! wait: a live connection that no agent process has served for the grace
//! period (`--agent-grace`, [`DEFAULT_AGENT_GRACE`]) is ended:
//!
//! * aborted through fusectl, `<fusectl>/<N>/abort` with `N` the minor of
//!   the mount's device number (Linux
//!   `Documentation/filesystems/fuse.rst`, "Aborting a filesystem
//!   connection"), when fusectl is mounted in the mounter's mount
//!   namespace; this also ends the connection for a server process that is
//!   alive but gone from the hand-over socket;
//! * and its kept descriptor closed in any case (the last descriptor of a
//!   connection closing aborts it: fs/fuse/dev.c, `fuse_dev_release`).
//!
//! A request waiting on the mount then fails with `ECONNABORTED`, later
//! ones with `ENOTCONN`. The mount itself stays (unmounting a target a pod
//! still uses would let the pod write into its container's own layer), and
//! so does its record: NodeUnpublishVolume removes both as usual, and an
//! agent that connects later is not asked to resume it.
//!
//! A connection counts as served while the agent process that last served
//! it is the one connected on the hand-over socket; so the clock also runs
//! for connections a newly connected agent failed to resume.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::mountinfo;
use crate::publish::{FSTYPE, Publisher, Unserved, mount_source};

/// Default bound on how long a published connection waits for a node
/// agent: 5 minutes, the kubelet's cap on a crash-looping container's
/// restart delay (`MaxContainerBackOff`, pkg/kubelet/kubelet.go), so an
/// agent pod that is restarted at all gets at least one start inside it.
pub const DEFAULT_AGENT_GRACE: Duration = Duration::from_secs(300);

/// The filesystem type of the FUSE control filesystem.
const FUSECTL: &str = "fusectl";

/// How often the table is looked at: a quarter of the grace, between 50 ms
/// and 1 s (a connection ends at most this late after its grace).
pub fn tick(grace: Duration) -> Duration {
    (grace / 4).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

/// Ends every published connection that no agent process has served for
/// `grace`, until `stop` is cancelled. A `grace` of zero waits forever
/// (returns at once).
pub async fn watch(publisher: Arc<Publisher>, grace: Duration, stop: CancellationToken) {
    if grace.is_zero() {
        info!("agent grace 0: published volumes wait for a node agent without bound");
        return;
    }
    let mut ticker = tokio::time::interval(tick(grace));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let agent = current_agent(&publisher);
        let expired: Vec<Unserved> = publisher
            .table()
            .unserved(agent, Instant::now())
            .into_iter()
            .filter(|u| u.waited >= grace)
            .collect();
        // Each takes its volume's lock (a resume may hold it for a while);
        // they run side by side and the next look waits for all of them.
        let mut ending = tokio::task::JoinSet::new();
        for u in expired {
            let publisher = publisher.clone();
            ending.spawn(async move { end(&publisher, u, grace).await });
        }
        while ending.join_next().await.is_some() {}
    }
}

fn current_agent(publisher: &Publisher) -> Option<i32> {
    publisher.handover().agent().and_then(|a| a.pid())
}

/// Ends the connection of `u` under its volume's lock, unless an agent
/// serves it by then (a resume that finished at the deadline).
async fn end(publisher: &Publisher, u: Unserved, grace: Duration) {
    publisher
        .with_volume_lock(&u.volume, async || {
            let agent = current_agent(publisher);
            let Some((fd, waited)) =
                publisher
                    .table()
                    .take_unserved(&u.target, agent, Instant::now())
            else {
                return;
            };
            let aborted = abort(&u.volume, &u.target);
            drop(fd);
            let how = match &aborted {
                Ok(Aborted::Fusectl(path)) => format!("aborted through {}", path.display()),
                Ok(Aborted::NoFusectl) => "descriptor closed (fusectl is not mounted)".into(),
                Ok(Aborted::NotMounted) => "descriptor closed (the target is not mounted)".into(),
                Err(e) => format!("descriptor closed (fusectl abort failed: {e})"),
            };
            error!(
                volume = %u.volume,
                target = %u.target.display(),
                waited = ?waited,
                grace = ?grace,
                "no node agent served the volume within the grace period: its FUSE connection is ended ({how}); \
                 processes waiting on it get ECONNABORTED, later calls ENOTCONN; the dead mount stays until the volume is unpublished"
            );
        })
        .await
}

/// How [`abort`] ended a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Aborted {
    /// Written to this fusectl `abort` file.
    Fusectl(PathBuf),
    /// No fusectl mount is visible: only the descriptor is closed.
    NoFusectl,
    /// The target holds no mount of the volume any more.
    NotMounted,
}

/// Aborts the FUSE connection mounted at `target` for `volume` through
/// fusectl, if fusectl is mounted. Errors: reading the mount table, or
/// writing the `abort` file (a connection already gone is not an error).
pub fn abort(volume: &str, target: &Path) -> io::Result<Aborted> {
    let Some(mount) = mountinfo::mount_at(target)?
        .filter(|m| m.fstype == FSTYPE && m.source == mount_source(volume))
    else {
        return Ok(Aborted::NotMounted);
    };
    let Some(fusectl) = mountinfo::topmost()?
        .into_iter()
        .find(|m| m.fstype == FUSECTL)
    else {
        return Ok(Aborted::NoFusectl);
    };
    let file = abort_file(&fusectl.mountpoint, mount.device);
    match std::fs::write(&file, b"1") {
        Ok(()) => Ok(Aborted::Fusectl(file)),
        // The kernel removed the connection's directory: it has ended.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Aborted::Fusectl(file)),
        Err(e) => {
            warn!(file = %file.display(), error = %e, "cannot abort a FUSE connection through fusectl");
            Err(e)
        }
    }
}

/// `<fusectl>/<minor>/abort`: fusectl names a connection by the minor of
/// its (anonymous, major 0) device number.
pub fn abort_file(fusectl: &Path, (_major, minor): (u32, u32)) -> PathBuf {
    fusectl.join(minor.to_string()).join("abort")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tick_is_a_quarter_of_the_grace_within_bounds() {
        assert_eq!(tick(Duration::from_secs(2)), Duration::from_millis(500));
        assert_eq!(tick(DEFAULT_AGENT_GRACE), Duration::from_secs(1));
        assert_eq!(tick(Duration::from_millis(10)), Duration::from_millis(50));
    }

    #[test]
    fn the_abort_file_is_named_by_the_minor() {
        assert_eq!(
            abort_file(Path::new("/sys/fs/fuse/connections"), (0, 52)),
            Path::new("/sys/fs/fuse/connections/52/abort")
        );
    }

    #[test]
    fn a_target_without_the_volumes_mount_is_not_aborted() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(abort("v", dir.path()).unwrap(), Aborted::NotMounted);
        // The root is mounted, but not as a volume.
        assert_eq!(abort("v", Path::new("/")).unwrap(), Aborted::NotMounted);
    }
}
