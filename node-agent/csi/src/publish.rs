//! Publishing volumes: FUSE mounts at the kubelet's target paths, the
//! descriptors the mounter keeps, and the agent's part through the
//! hand-over connection.
//!
//! A publish opens `/dev/fuse`, mounts the target with `fd=N`, keeps that
//! descriptor in a table (target → volume, descriptor) and sends it to the
//! agent, which answers once it serves the connection. Calls for one volume
//! are serialised by a per-volume lock; different volumes proceed in
//! parallel. The mounter never reads the descriptor itself. After a
//! restart of the mounter the table is refilled from the agent
//! (`crate::adopt`).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags};
use tracing::{info, warn};

use crate::handover::{
    CHECK_TIMEOUT, HandoverError, Listener, Reply, Request, SERVE_TIMEOUT, VolumeStats,
};
use crate::mountinfo;

/// The filesystem type of every mount (`fuse.<subtype>`, the subtype the
/// agent's FUSE server reports).
pub use agentcomputer_handover::fsname::FS_TYPE as FSTYPE;

/// Mode of a target directory the mounter creates (hidden by the mount).
const TARGET_MODE: u32 = 0o750;

/// The mount's source: `agentcomputer:<volume>`.
pub use agentcomputer_handover::fsname::source as mount_source;

/// One publish to do, already validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishSpec {
    /// The CSI volume id (the computer's uid).
    pub volume: String,
    /// Absolute target path.
    pub target: PathBuf,
    /// Owning user of the mount (`user_id=`).
    pub uid: u32,
    /// Owning group of the mount (`group_id=`).
    pub gid: u32,
    /// Mount read-only (`MS_RDONLY`).
    pub readonly: bool,
}

/// Why a publish, unpublish or stats call failed; each maps to one gRPC code.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The agent has no such volume, or it is not published at the path.
    #[error("{0}")]
    NotFound(String),
    /// The agent is not connected or did not answer in time (retry later).
    #[error("{0}")]
    Unavailable(String),
    /// The target is published with other settings or holds another mount.
    #[error("{0}")]
    AlreadyExists(String),
    /// A system call or the agent failed.
    #[error("{0}")]
    Internal(String),
}

impl From<HandoverError> for PublishError {
    fn from(e: HandoverError) -> Self {
        match e {
            HandoverError::NotConnected
            | HandoverError::Disconnected
            | HandoverError::TimedOut(_) => PublishError::Unavailable(e.to_string()),
            other => PublishError::Internal(other.to_string()),
        }
    }
}

/// One published target.
struct Published {
    volume: String,
    readonly: bool,
    /// The mount's owner.
    uid: u32,
    gid: u32,
    /// Process id of the agent that serves it.
    agent_pid: Option<i32>,
    /// The mounter's descriptor of the FUSE connection (the agent got a
    /// duplicate through SCM_RIGHTS). Kept so the connection survives an
    /// agent restart and a new agent process can resume it; closed at
    /// unpublish, or when no agent served it for the grace period
    /// (`crate::grace`: then `None`, and the mount stays, dead, until
    /// unpublished).
    fd: Option<OwnedFd>,
    /// Since when no agent process serves the connection (the one that
    /// served it is not the one connected now), as the grace watch last
    /// saw it; `None` while served.
    unserved_since: Option<Instant>,
    /// Hex of the connection's `FUSE_INIT` record (protocol 2 agents),
    /// which `resume` hands back; `None` from a protocol 1 agent.
    init: Option<String>,
}

/// What a new agent process needs to resume one published connection.
pub struct Orphan {
    /// The published target.
    pub target: PathBuf,
    /// The `resume` request to send.
    pub request: Request,
    /// A duplicate of the kept descriptor, to send with it.
    pub fd: OwnedFd,
}

/// Published targets of this mounter, by target path.
#[derive(Default)]
pub struct Table {
    by_target: Mutex<HashMap<PathBuf, Published>>,
}

impl Table {
    /// The volumes published now, sorted, one entry per target.
    pub fn volumes(&self) -> Vec<(String, PathBuf)> {
        let mut v: Vec<(String, PathBuf)> = self
            .by_target
            .lock()
            .iter()
            .map(|(t, p)| (p.volume.clone(), t.clone()))
            .collect();
        v.sort();
        v
    }

    /// The connections a process other than `agent_pid` served, ready to
    /// be resumed by it: those with a `FUSE_INIT` record (the rest are
    /// returned as `Err` with their volume and target). Errors of
    /// duplicating a descriptor are logged and the entry skipped.
    pub fn orphans(&self, agent_pid: Option<i32>) -> Vec<Result<Orphan, (String, PathBuf)>> {
        let by_target = self.by_target.lock();
        let mut v = Vec::new();
        for (target, p) in by_target.iter() {
            if p.agent_pid.is_some() && p.agent_pid == agent_pid {
                continue;
            }
            // Ended for want of an agent (crate::grace): nothing to resume.
            let Some(kept) = &p.fd else {
                continue;
            };
            let Some(init) = &p.init else {
                v.push(Err((p.volume.clone(), target.clone())));
                continue;
            };
            match kept.try_clone() {
                Ok(fd) => v.push(Ok(Orphan {
                    target: target.clone(),
                    request: Request::Resume {
                        volume: p.volume.clone(),
                        uid: p.uid,
                        gid: p.gid,
                        readonly: p.readonly,
                        init: init.clone(),
                        target: target.to_str().map(str::to_string),
                    },
                    fd,
                })),
                Err(e) => {
                    warn!(target = %target.display(), error = %e, "cannot duplicate a kept FUSE descriptor")
                }
            }
        }
        v
    }

    /// Records that process `agent_pid` now serves the connection at
    /// `target`.
    pub fn set_server(&self, target: &Path, agent_pid: Option<i32>) {
        if let Some(p) = self.by_target.lock().get_mut(target) {
            p.agent_pid = agent_pid;
        }
    }

    /// Whether the table holds a descriptor for `target`.
    pub fn holds(&self, target: &Path) -> bool {
        self.by_target.lock().contains_key(target)
    }

    /// Records the connection at `target`, handed back by the agent
    /// process `agent_pid` that serves it (`crate::adopt`, which checked
    /// it), as if this mounter had published it. False (and `fd` closed)
    /// when the table already holds the target.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn adopt(
        &self,
        target: &Path,
        volume: &str,
        readonly: bool,
        (uid, gid): (u32, u32),
        agent_pid: Option<i32>,
        fd: OwnedFd,
        init: String,
    ) -> bool {
        let mut by_target = self.by_target.lock();
        if by_target.contains_key(target) {
            return false;
        }
        by_target.insert(
            target.to_path_buf(),
            Published {
                volume: volume.to_string(),
                readonly,
                uid,
                gid,
                agent_pid,
                fd: Some(fd),
                unserved_since: None,
                init: Some(init),
            },
        );
        true
    }

    /// Whether `volume` is published at `target`.
    pub fn contains(&self, volume: &str, target: &Path) -> bool {
        self.by_target
            .lock()
            .get(target)
            .is_some_and(|p| p.volume == volume)
    }

    /// Whether the table still holds a descriptor for `target` (false when
    /// the target is not published, or its connection was ended by
    /// `crate::grace`).
    pub fn is_live(&self, target: &Path) -> bool {
        self.by_target
            .lock()
            .get(target)
            .is_some_and(|p| p.fd.is_some())
    }

    /// The live connections that no agent process serves at `now`, with
    /// how long each has been without one. A connection is served when
    /// `agent_pid`, the process connected on the hand-over socket now (None:
    /// no agent), is the one that last served it; otherwise it is unserved
    /// from the first call that saw it so, until a call sees it served
    /// again.
    pub fn unserved(&self, agent_pid: Option<i32>, now: Instant) -> Vec<Unserved> {
        let mut by_target = self.by_target.lock();
        let mut v = Vec::new();
        for (target, p) in by_target.iter_mut() {
            if p.fd.is_none() {
                continue;
            }
            if agent_pid.is_some() && p.agent_pid == agent_pid {
                p.unserved_since = None;
                continue;
            }
            let since = *p.unserved_since.get_or_insert(now);
            v.push(Unserved {
                volume: p.volume.clone(),
                target: target.clone(),
                waited: now.saturating_duration_since(since),
            });
        }
        v.sort_by(|a, b| a.target.cmp(&b.target));
        v
    }

    /// Takes the kept descriptor of the connection at `target` out of the
    /// table, leaving the record (the mount stays until unpublished), when
    /// it is still live and still unserved with `agent_pid` connected now.
    /// Returns it with how long it had been unserved; None otherwise.
    pub(crate) fn take_unserved(
        &self,
        target: &Path,
        agent_pid: Option<i32>,
        now: Instant,
    ) -> Option<(OwnedFd, Duration)> {
        let mut by_target = self.by_target.lock();
        let p = by_target.get_mut(target)?;
        if agent_pid.is_some() && p.agent_pid == agent_pid {
            return None;
        }
        let since = p.unserved_since?;
        let fd = p.fd.take()?;
        p.unserved_since = None;
        Some((fd, now.saturating_duration_since(since)))
    }
}

/// A live connection without a serving agent process ([`Table::unserved`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unserved {
    /// The CSI volume id.
    pub volume: String,
    /// The published target.
    pub target: PathBuf,
    /// How long it has been without a server.
    pub waited: Duration,
}

/// Publishes and unpublishes volumes; shared by the CSI Node service.
pub struct Publisher {
    handover: Arc<Listener>,
    table: Arc<Table>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Publisher {
    /// A publisher using the agent connected on `handover`, recording its
    /// targets in `table`.
    pub fn new(handover: Arc<Listener>, table: Arc<Table>) -> Publisher {
        Publisher {
            handover,
            table,
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// The published targets.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The hand-over listener (the connected agent).
    pub(crate) fn handover(&self) -> &Listener {
        &self.handover
    }

    /// Runs `f` holding the lock of `volume`.
    pub(crate) async fn with_volume_lock<T>(&self, volume: &str, f: impl AsyncFnOnce() -> T) -> T {
        let l = self
            .locks
            .lock()
            .entry(volume.to_string())
            .or_default()
            .clone();
        let result = {
            let _guard = l.lock().await;
            f().await
        };
        let mut locks = self.locks.lock();
        // Only the map and this call hold it: nobody waits, forget it.
        if Arc::strong_count(&l) == 2 {
            locks.remove(volume);
        }
        result
    }

    /// Mounts `spec.volume` at `spec.target` and has the agent serve it.
    /// Idempotent: the same volume already published there with the same
    /// `readonly` is a success without a second mount.
    ///
    /// Errors: `AlreadyExists` (published there read-only vs read-write,
    /// another volume or mount at the target), `NotFound` (the agent has no
    /// such volume), `Unavailable` (no agent connected, or it did not
    /// answer), `Internal` (mkdir, open, mount or the agent failed). On
    /// every error nothing stays mounted.
    pub async fn publish(&self, spec: &PublishSpec) -> Result<(), PublishError> {
        self.with_volume_lock(&spec.volume, async || self.publish_locked(spec).await)
            .await
    }

    async fn publish_locked(&self, spec: &PublishSpec) -> Result<(), PublishError> {
        let target = &spec.target;
        let existing = mount_at(target)?;
        let known = self
            .table
            .by_target
            .lock()
            .get(target)
            .map(|p| (p.volume.clone(), p.readonly));
        match (known, existing) {
            (Some((volume, _)), _) if volume != spec.volume => {
                return Err(PublishError::AlreadyExists(format!(
                    "{} is where volume {volume} is published",
                    target.display()
                )));
            }
            (Some((_, readonly)), Some(_)) => {
                if !self.table.is_live(target) {
                    warn!(volume = %spec.volume, target = %target.display(), "published target's connection was ended (no node agent within the grace period); it stays dead until unpublished");
                }
                return same_mode(target, readonly, spec.readonly);
            }
            (Some(_), None) => {
                warn!(volume = %spec.volume, target = %target.display(), "published target is no longer mounted; mounting again");
                self.table.by_target.lock().remove(target);
            }
            (None, Some(m)) if m.fstype == FSTYPE && m.source == mount_source(&spec.volume) => {
                // Mounted by an earlier run of the mounter, and the agent
                // did not hand the connection back (crate::adopt).
                warn!(volume = %spec.volume, target = %target.display(), "target was published by an earlier mounter and its connection was not handed back; no descriptor is kept for it");
                return same_mode(target, m.read_only(), spec.readonly);
            }
            (None, Some(m)) => {
                return Err(PublishError::AlreadyExists(format!(
                    "{} already has a {} mount of {}",
                    target.display(),
                    m.fstype,
                    m.source
                )));
            }
            (None, None) => {}
        }

        let agent = self
            .handover
            .agent()
            .ok_or_else(|| PublishError::from(HandoverError::NotConnected))?;
        let check = Request::Check {
            volume: spec.volume.clone(),
        };
        match agent.request(check, None, CHECK_TIMEOUT).await? {
            Reply::Known => {}
            Reply::NotFound => return Err(not_on_node(&spec.volume)),
            other => return Err(agent_failed("check", other)),
        }

        let created = create_target(target)?;
        let fd = match mount_fuse(spec).await {
            Ok(fd) => fd,
            Err(e) => {
                remove_created(target, created);
                return Err(e);
            }
        };
        let serve = Request::Serve {
            volume: spec.volume.clone(),
            uid: spec.uid,
            gid: spec.gid,
            readonly: spec.readonly,
            target: target.to_str().map(str::to_string),
        };
        let result = match agent.request(serve, Some(fd.as_fd()), SERVE_TIMEOUT).await {
            Ok(Reply::Served { init }) => Ok(init),
            Ok(Reply::NotFound) => Err(not_on_node(&spec.volume)),
            Ok(other) => Err(agent_failed("serve", other)),
            Err(e) => Err(e.into()),
        };
        let init = match result {
            Ok(init) => init,
            Err(e) => {
                if let Err(u) = unmount(target).await {
                    warn!(target = %target.display(), error = %u, "unmount after a failed publish failed");
                }
                drop(fd);
                remove_created(target, created);
                return Err(e);
            }
        };
        self.table.by_target.lock().insert(
            target.clone(),
            Published {
                volume: spec.volume.clone(),
                readonly: spec.readonly,
                uid: spec.uid,
                gid: spec.gid,
                agent_pid: agent.pid(),
                fd: Some(fd),
                unserved_since: None,
                init,
            },
        );
        info!(volume = %spec.volume, target = %target.display(), readonly = spec.readonly, "published volume");
        Ok(())
    }

    /// Hands every published connection that an earlier agent process
    /// served to the agent connected now (`resume`), so sandboxes keep
    /// their `/workspace` across an agent restart or upgrade. Connections
    /// without a `FUSE_INIT` record (served by a protocol 1 agent), and
    /// those the agent fails to resume, are logged: they stay without a
    /// server until the pod is recreated.
    pub async fn resume_orphans(&self) {
        let Some(agent) = self.handover.agent() else {
            return;
        };
        let orphans = self.table.orphans(agent.pid());
        for orphan in orphans {
            let orphan = match orphan {
                Ok(o) => o,
                Err((volume, target)) => {
                    warn!(volume = %volume, target = %target.display(), "served by an agent that cannot resume (protocol 1): left without a server until the pod is recreated");
                    continue;
                }
            };
            if agent.protocol() < 2 {
                warn!(target = %orphan.target.display(), "the connected agent speaks protocol 1 and cannot resume: left without a server until the pod is recreated");
                continue;
            }
            let volume = orphan.request.volume().to_string();
            let started = std::time::Instant::now();
            // The server is recorded under the volume's lock, which the
            // grace watch takes before ending a connection (crate::grace):
            // a connection resumed just at the deadline is never ended.
            let reply = self
                .with_volume_lock(&volume, async || {
                    if !self.table.is_live(&orphan.target) {
                        return Ok(Reply::Error {
                            message: "the connection was ended while waiting for a node agent"
                                .into(),
                        });
                    }
                    let reply = agent
                        .request(orphan.request, Some(orphan.fd.as_fd()), SERVE_TIMEOUT)
                        .await;
                    if let Ok(Reply::Served { .. }) = reply {
                        self.table.set_server(&orphan.target, agent.pid());
                    }
                    reply
                })
                .await;
            match reply {
                Ok(Reply::Served { .. }) => {
                    info!(volume = %volume, target = %orphan.target.display(), took = ?started.elapsed(), "the new node agent process resumed a published volume");
                }
                Ok(other) => {
                    warn!(volume = %volume, target = %orphan.target.display(), reply = ?other, "the node agent could not resume a published volume: left without a server until the pod is recreated")
                }
                Err(e) => {
                    warn!(volume = %volume, target = %orphan.target.display(), error = %e, "resuming a published volume failed: left without a server until the pod is recreated")
                }
            }
        }
    }

    /// Unmounts `target` (lazily if busy), removes the directory and drops
    /// the kept descriptor. Idempotent: a target that is not mounted or
    /// does not exist is a success. Errors: `Internal` (umount or rmdir failed).
    pub async fn unpublish(&self, volume: &str, target: &Path) -> Result<(), PublishError> {
        self.with_volume_lock(volume, async || {
            if mount_at(target)?.is_some() {
                unmount(target).await.map_err(|e| {
                    PublishError::Internal(format!("unmount {}: {e}", target.display()))
                })?;
            }
            let kept = self.table.by_target.lock().remove(target);
            if let Some(p) = &kept
                && p.volume != volume
            {
                warn!(target = %target.display(), published = %p.volume, asked = volume, "unpublished a target of another volume");
            }
            drop(kept);
            match std::fs::remove_dir(target) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(PublishError::Internal(format!(
                        "remove {}: {e}",
                        target.display()
                    )));
                }
            }
            info!(volume, target = %target.display(), "unpublished volume");
            Ok(())
        })
        .await
    }

    /// The engine's usage counters of `volume`, published at `path`.
    /// Errors: `NotFound` (not published there, or the agent does not
    /// know it), `Unavailable`, `Internal`.
    pub async fn stats(&self, volume: &str, path: &Path) -> Result<VolumeStats, PublishError> {
        if !self.table.contains(volume, path) {
            return Err(PublishError::NotFound(format!(
                "volume {volume} is not published at {}",
                path.display()
            )));
        }
        let agent = self
            .handover
            .agent()
            .ok_or_else(|| PublishError::from(HandoverError::NotConnected))?;
        match agent
            .request(
                Request::Stats {
                    volume: volume.to_string(),
                },
                None,
                CHECK_TIMEOUT,
            )
            .await?
        {
            Reply::Stats(s) => Ok(s),
            Reply::NotFound => Err(not_on_node(volume)),
            other => Err(agent_failed("stats", other)),
        }
    }
}

fn same_mode(target: &Path, published_ro: bool, wanted_ro: bool) -> Result<(), PublishError> {
    if published_ro == wanted_ro {
        Ok(())
    } else {
        let mode = |ro| if ro { "read-only" } else { "read-write" };
        Err(PublishError::AlreadyExists(format!(
            "{} is published {}, asked {}",
            target.display(),
            mode(published_ro),
            mode(wanted_ro)
        )))
    }
}

fn not_on_node(volume: &str) -> PublishError {
    PublishError::NotFound(format!("volume {volume} is not on this node's agent"))
}

fn agent_failed(what: &str, reply: Reply) -> PublishError {
    match reply {
        Reply::Error { message } => PublishError::Internal(format!("node agent {what}: {message}")),
        other => PublishError::Internal(format!("node agent answered {what} with {other:?}")),
    }
}

fn mount_at(target: &Path) -> Result<Option<mountinfo::MountEntry>, PublishError> {
    mountinfo::mount_at(target)
        .map_err(|e| PublishError::Internal(format!("reading /proc/self/mountinfo: {e}")))
}

/// Creates the target directory if missing (the kubelet creates only its
/// parent); true when this call created it.
fn create_target(target: &Path) -> Result<bool, PublishError> {
    match std::fs::DirBuilder::new().mode(TARGET_MODE).create(target) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && target.is_dir() => Ok(false),
        Err(e) => Err(PublishError::Internal(format!(
            "create {}: {e}",
            target.display()
        ))),
    }
}

fn remove_created(target: &Path, created: bool) {
    if created && let Err(e) = std::fs::remove_dir(target) {
        warn!(target = %target.display(), error = %e, "could not remove the target directory after a failed publish");
    }
}

/// Opens `/dev/fuse` and mounts `spec.target` on it; returns the descriptor.
async fn mount_fuse(spec: &PublishSpec) -> Result<OwnedFd, PublishError> {
    let spec = spec.clone();
    tokio::task::spawn_blocking(move || {
        let dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .map_err(|e| PublishError::Internal(format!("open /dev/fuse: {e}")))?;
        let fd = OwnedFd::from(dev);
        let data = mount_data(std::os::fd::AsRawFd::as_raw_fd(&fd), spec.uid, spec.gid);
        let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
        if spec.readonly {
            flags |= MsFlags::MS_RDONLY;
        }
        nix::mount::mount(
            Some(mount_source(&spec.volume).as_str()),
            &spec.target,
            Some(FSTYPE),
            flags,
            Some(data.as_str()),
        )
        .map_err(|e| PublishError::Internal(format!("mount {}: {e}", spec.target.display())))?;
        Ok(fd)
    })
    .await
    .map_err(|e| PublishError::Internal(format!("mount task: {e}")))?
}

/// The FUSE mount data (fs/fuse/inode.c, `fuse_parse_param`): the
/// connection's descriptor, root mode `S_IFDIR` (octal 40000), the owner,
/// `allow_other` (pods run as any user) and `default_permissions` (the
/// kernel checks modes).
pub fn mount_data(fd: i32, uid: u32, gid: u32) -> String {
    format!("fd={fd},rootmode=40000,user_id={uid},group_id={gid},allow_other,default_permissions")
}

/// Unmounts `target`; a busy mount is detached lazily (`MNT_DETACH`). A
/// target that is not a mount point (`EINVAL`) or missing is fine.
async fn unmount(target: &Path) -> io::Result<()> {
    let target = target.to_path_buf();
    tokio::task::spawn_blocking(
        move || match nix::mount::umount2(&target, MntFlags::empty()) {
            Ok(()) | Err(Errno::EINVAL) | Err(Errno::ENOENT) => Ok(()),
            Err(Errno::EBUSY) => {
                info!(target = %target.display(), "target busy; detaching it lazily");
                nix::mount::umount2(&target, MntFlags::MNT_DETACH).map_err(io::Error::from)
            }
            Err(e) => Err(e.into()),
        },
    )
    .await
    .map_err(io::Error::other)?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_data_names_descriptor_owner_and_permissions() {
        assert_eq!(
            mount_data(7, 1000, 1001),
            "fd=7,rootmode=40000,user_id=1000,group_id=1001,allow_other,default_permissions"
        );
        assert_eq!(mount_source("abc"), "agentcomputer:abc");
    }

    #[test]
    fn volumes_of_another_agent_process_are_orphans_to_resume() {
        let table = Table::default();
        let dev = || OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        let entries = [
            ("/t/a", Some(10), Some("aa")),
            ("/t/b", Some(11), None),
            ("/t/c", None, Some("cc")),
        ];
        for (target, pid, init) in entries {
            table.by_target.lock().insert(
                PathBuf::from(target),
                Published {
                    volume: format!("v{}", &target[3..]),
                    readonly: false,
                    uid: 1000,
                    gid: 1000,
                    agent_pid: pid,
                    fd: Some(dev()),
                    unserved_since: None,
                    init: init.map(str::to_string),
                },
            );
        }
        let summary = |pid| {
            let mut v: Vec<String> = table
                .orphans(pid)
                .into_iter()
                .map(|o| match o {
                    Ok(o) => match o.request {
                        Request::Resume { volume, init, .. } => format!("{volume}:{init}"),
                        other => panic!("{other:?}"),
                    },
                    Err((volume, _)) => format!("{volume}:cannot"),
                })
                .collect();
            v.sort();
            v
        };
        assert_eq!(summary(Some(10)), ["vb:cannot", "vc:cc"]);
        assert_eq!(summary(Some(12)), ["va:aa", "vb:cannot", "vc:cc"]);
        table.set_server(Path::new("/t/c"), Some(10));
        assert_eq!(summary(Some(10)), ["vb:cannot"]);
        assert_eq!(table.volumes().len(), 3);
    }

    #[test]
    fn the_clock_runs_while_no_agent_process_serves_a_connection() {
        let table = Table::default();
        let null = || OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        for (target, pid) in [("/t/a", 10), ("/t/b", 11)] {
            table.by_target.lock().insert(
                PathBuf::from(target),
                Published {
                    volume: format!("v{}", &target[3..]),
                    readonly: false,
                    uid: 1000,
                    gid: 1000,
                    agent_pid: Some(pid),
                    fd: Some(null()),
                    unserved_since: None,
                    init: Some("00".into()),
                },
            );
        }
        let t0 = Instant::now();
        let waited = |pid, at| {
            table
                .unserved(pid, at)
                .into_iter()
                .map(|u| (u.volume, u.waited))
                .collect::<Vec<_>>()
        };
        // Agent 10 connected: b is unserved from now.
        assert_eq!(waited(Some(10), t0), [("vb".to_string(), Duration::ZERO)]);
        let t1 = t0 + Duration::from_secs(3);
        // No agent: a starts, b goes on.
        assert_eq!(
            waited(None, t1),
            [
                ("va".to_string(), Duration::ZERO),
                ("vb".to_string(), Duration::from_secs(3))
            ]
        );
        // Agent 10 came back: a's clock stops; b cannot be taken while it
        // is served, and is taken once (the record stays, without it).
        let t2 = t1 + Duration::from_secs(1);
        assert_eq!(waited(Some(10), t2).len(), 1);
        assert!(
            table
                .take_unserved(Path::new("/t/a"), Some(10), t2)
                .is_none()
        );
        let (_, took) = table
            .take_unserved(Path::new("/t/b"), Some(10), t2)
            .unwrap();
        assert_eq!(took, Duration::from_secs(4));
        assert!(
            table
                .take_unserved(Path::new("/t/b"), Some(10), t2)
                .is_none()
        );
        assert!(table.holds(Path::new("/t/b")) && !table.is_live(Path::new("/t/b")));
        // A dead connection is neither unserved nor an orphan to resume.
        assert!(waited(None, t2).iter().all(|(v, _)| v != "vb"));
        assert!(
            table
                .orphans(Some(12))
                .iter()
                .all(|o| o.as_ref().is_ok_and(|o| o.target == Path::new("/t/a")))
        );
        assert_eq!(table.orphans(Some(12)).len(), 1);
    }

    #[test]
    fn modes_must_match() {
        let t = Path::new("/t");
        assert!(same_mode(t, true, true).is_ok());
        assert!(matches!(
            same_mode(t, false, true),
            Err(PublishError::AlreadyExists(_))
        ));
    }
}
