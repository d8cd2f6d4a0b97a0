//! Taking published connections back from the agent after a mounter
//! restart (hand-over protocol 3, `give` → `adopt`).
//!
//! The table of kept descriptors ([`crate::publish::Table`]) lives in
//! memory. A restarted mounter finds the targets an earlier run mounted in
//! the mount table (type [`FSTYPE`], source `agentcomputer:<volume>`) but
//! holds no descriptor for them, so an agent restart would end their
//! connections. When an agent speaking protocol 3 connects, the mounter
//! asks it to `give` each such connection back and records the descriptor
//! exactly as if it had published the volume: the next agent process then
//! `resume`s it.
//!
//! The agent is not trusted with what it hands back. A descriptor is kept
//! only when
//! * it is the FUSE device: a character device with `st_rdev` =
//!   `makedev(10, 229)` (`/dev/fuse`, Linux
//!   `Documentation/admin-guide/devices.txt`, misc major 10, minor 229);
//! * its connection is live (`poll(2)` reports no `POLLERR`,
//!   fs/fuse/dev.c `fuse_dev_poll`);
//! * the target is still mounted for the volume the agent names (type,
//!   source: so only for the volume asked) with the read-only setting and owner
//!   (`user_id=`, `group_id=`) the agent reports.
//!
//! Anything else is refused and logged, and the descriptor closed. Which
//! connection a descriptor belongs to cannot be read from it: the agent
//! (which cannot open `/dev/fuse`) holds only descriptors this mounter or
//! its earlier runs gave it, and one of another of its volumes' mounts
//! would fail the owner and mode checks only when those differ.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use tracing::{info, warn};

use crate::handover::{AgentConn, CHECK_TIMEOUT, HandoverError, PROTOCOL_VERSION, Reply, Request};
use crate::mountinfo::{self, MountEntry};
use crate::node::is_volume_id;
use crate::publish::{FSTYPE, Publisher, Table, mount_source};

/// Major number of `/dev/fuse` (misc devices), Linux
/// `Documentation/admin-guide/devices.txt`.
pub const FUSE_MAJOR: u32 = 10;

/// Minor number of `/dev/fuse` among the misc devices (same source).
pub const FUSE_MINOR: u32 = 229;

/// The oldest hand-over protocol with `give`.
pub const ADOPT_PROTOCOL: u32 = 3;

const _: () = assert!(ADOPT_PROTOCOL <= PROTOCOL_VERSION);

/// The targets mounted by a mounter of this driver (type [`FSTYPE`],
/// source `agentcomputer:<volume id>`) that `table` holds no descriptor
/// for, as (volume, target), in mount order. Errors: reading the mount
/// table.
pub fn unheld(table: &Table) -> io::Result<Vec<(String, PathBuf)>> {
    Ok(mountinfo::topmost()?
        .into_iter()
        .filter(|m| m.fstype == FSTYPE)
        .filter_map(|m| {
            let volume = agentcomputer_handover::fsname::computer_of(&m.source)?;
            is_volume_id(volume).then(|| (volume.to_string(), m.mountpoint))
        })
        .filter(|(_, target)| !table.holds(target))
        .collect())
}

/// Why a descriptor handed back by the agent was not kept.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The agent serves no connection for the target (or failed to say).
    #[error("the node agent holds no connection for it: {0}")]
    NotHeld(String),
    /// What the agent sent does not pass the checks (module documentation).
    #[error("refused: {0}")]
    Refused(String),
    /// The exchange failed.
    #[error("asking the node agent failed: {0}")]
    Handover(#[from] HandoverError),
}

/// Whether `fd` is a `/dev/fuse` descriptor with a live connection.
/// Errors (as text): another kind of file, or a dead connection.
pub fn check_descriptor(fd: &impl AsFd) -> Result<(), String> {
    let st = nix::sys::stat::fstat(fd).map_err(|e| format!("fstat of the descriptor: {e}"))?;
    let is_char = (st.st_mode & libc::S_IFMT) == libc::S_IFCHR;
    let fuse = libc::makedev(FUSE_MAJOR, FUSE_MINOR);
    if !is_char || st.st_rdev != fuse {
        return Err(format!(
            "the descriptor is not /dev/fuse (mode {:o}, device {}:{})",
            st.st_mode,
            libc::major(st.st_rdev),
            libc::minor(st.st_rdev)
        ));
    }
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    loop {
        match poll(&mut fds, PollTimeout::ZERO) {
            Ok(_) => break,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(format!("poll of the descriptor: {e}")),
        }
    }
    let revents = fds[0].revents().unwrap_or(PollFlags::empty());
    if revents.intersects(PollFlags::POLLERR | PollFlags::POLLNVAL) {
        return Err("the /dev/fuse descriptor has no live connection".into());
    }
    Ok(())
}

/// Whether `mount` (the topmost mount at `target`) is this driver's mount
/// of `volume` with owner `uid`/`gid` and the `readonly` setting.
pub fn check_mount(
    target: &Path,
    mount: Option<&MountEntry>,
    volume: &str,
    (uid, gid): (u32, u32),
    readonly: bool,
) -> Result<(), String> {
    let Some(m) = mount else {
        return Err(format!("{} is not mounted", target.display()));
    };
    if m.fstype != FSTYPE || m.source != mount_source(volume) {
        return Err(format!(
            "{} is a {} mount of {}, not volume {volume}",
            target.display(),
            m.fstype,
            m.source
        ));
    }
    if m.read_only() != readonly {
        return Err(format!(
            "{} is mounted {}, the agent says {}",
            target.display(),
            if m.read_only() {
                "read-only"
            } else {
                "read-write"
            },
            if readonly { "read-only" } else { "read-write" }
        ));
    }
    let (uid_s, gid_s) = (uid.to_string(), gid.to_string());
    if m.super_option("user_id") != Some(uid_s.as_str())
        || m.super_option("group_id") != Some(gid_s.as_str())
    {
        return Err(format!(
            "{} belongs to user_id={} group_id={}, the agent says {uid}:{gid}",
            target.display(),
            m.super_option("user_id").unwrap_or("?"),
            m.super_option("group_id").unwrap_or("?")
        ));
    }
    Ok(())
}

/// Asks the connected agent for every unheld target's connection (see the
/// module documentation) and keeps those that pass the checks. Logs one
/// line per target: adopted, refused (with the reason) or not held by the
/// agent; a protocol 1 or 2 agent cannot give connections back, which is
/// logged once.
pub async fn adopt_unheld(publisher: &Publisher) {
    let Some(agent) = publisher.handover().agent() else {
        return;
    };
    let unheld = match unheld(publisher.table()) {
        Ok(u) => u,
        Err(e) => {
            warn!(error = %e, "cannot read /proc/self/mountinfo to find published targets");
            return;
        }
    };
    if unheld.is_empty() {
        return;
    }
    if agent.protocol() < ADOPT_PROTOCOL {
        warn!(
            count = unheld.len(),
            protocol = agent.protocol(),
            "mounted targets have no kept descriptor and the node agent is too old to hand them back: they end if that agent process stops"
        );
        return;
    }
    for (volume, target) in unheld {
        let result = publisher
            .with_volume_lock(&volume, async || {
                adopt_one(publisher.table(), &agent, &volume, &target).await
            })
            .await;
        match result {
            Ok(true) => {
                info!(volume = %volume, target = %target.display(), "took back the descriptor of a published volume from the node agent")
            }
            Ok(false) => {}
            Err(e @ Refusal::NotHeld(_)) => {
                warn!(volume = %volume, target = %target.display(), "no descriptor kept for a mounted target: {e}")
            }
            Err(e) => {
                warn!(volume = %volume, target = %target.display(), "descriptor handed back by the node agent not kept: {e}")
            }
        }
    }
}

/// Asks for and checks one target's connection (under the volume's lock);
/// true when it was added to `table`, false when the table holds the
/// target already (published meanwhile).
async fn adopt_one(
    table: &Table,
    agent: &AgentConn,
    volume: &str,
    target: &Path,
) -> Result<bool, Refusal> {
    if table.holds(target) {
        return Ok(false);
    }
    let Some(target_text) = target.to_str() else {
        return Err(Refusal::NotHeld(
            "the target path is not UTF-8, so the agent cannot have it recorded".into(),
        ));
    };
    let give = Request::Give {
        volume: volume.to_string(),
        target: target_text.to_string(),
    };
    let (reply, fds) = agent.request_descriptor(give, CHECK_TIMEOUT).await?;
    let (got, uid, gid, readonly, init) = match reply {
        Reply::Adopt {
            volume: got,
            uid,
            gid,
            readonly,
            init,
        } => (got, uid, gid, readonly, init),
        Reply::NotFound => return Err(Refusal::NotHeld("not_found".into())),
        Reply::Error { message } => return Err(Refusal::NotHeld(message)),
        other => {
            return Err(Refusal::Refused(format!(
                "the node agent answered give with {other:?}"
            )));
        }
    };
    let fd = one_descriptor(fds)?;
    check_descriptor(&fd).map_err(Refusal::Refused)?;
    // Read again: the target may have been unmounted meanwhile. A volume
    // other than the one asked is not the one mounted there.
    let mount = mountinfo::mount_at(target)
        .map_err(|e| Refusal::Refused(format!("reading /proc/self/mountinfo: {e}")))?;
    check_mount(target, mount.as_ref(), &got, (uid, gid), readonly).map_err(Refusal::Refused)?;
    if let Err(e) = agentcomputer_handover::init::decode(&init) {
        return Err(Refusal::Refused(e.to_string()));
    }
    Ok(table.adopt(target, volume, readonly, (uid, gid), agent.pid(), fd, init))
}

fn one_descriptor(fds: Vec<OwnedFd>) -> Result<OwnedFd, Refusal> {
    let count = fds.len();
    let mut fds = fds.into_iter();
    match (fds.next(), count) {
        (Some(fd), 1) => Ok(fd),
        _ => Err(Refusal::Refused(format!(
            "adopt came with {count} descriptors, not one"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(line: &str) -> MountEntry {
        mountinfo::parse_line(line.as_bytes()).unwrap()
    }

    #[test]
    fn only_the_fuse_device_with_a_live_connection_passes() {
        let (r, _w) = nix::unistd::pipe().unwrap();
        let err = check_descriptor(&r).unwrap_err();
        assert!(err.contains("not /dev/fuse"), "{err}");
        let null = std::fs::File::open("/dev/null").unwrap();
        let err = check_descriptor(&null).unwrap_err();
        assert!(err.contains("device 1:3"), "{err}");
        if let Ok(fuse) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
        {
            // Opened but never mounted: no connection.
            let err = check_descriptor(&fuse).unwrap_err();
            assert!(err.contains("no live connection"), "{err}");
        }
    }

    #[test]
    fn the_mount_must_be_the_volumes_with_its_owner_and_mode() {
        let t = Path::new("/t");
        let m = entry(
            "36 35 0:45 / /t rw,nosuid,nodev - fuse.agentcomputer agentcomputer:v1 rw,user_id=1000,group_id=1001,default_permissions,allow_other",
        );
        assert!(check_mount(t, Some(&m), "v1", (1000, 1001), false).is_ok());
        for (volume, owner, ro, needle) in [
            ("v2", (1000, 1001), false, "not volume v2"),
            ("v1", (1000, 1001), true, "mounted read-write"),
            ("v1", (0, 1001), false, "the agent says 0:1001"),
            ("v1", (1000, 0), false, "the agent says 1000:0"),
        ] {
            let err = check_mount(t, Some(&m), volume, owner, ro).unwrap_err();
            assert!(err.contains(needle), "{err}");
        }
        let err = check_mount(t, None, "v1", (1000, 1001), false).unwrap_err();
        assert!(err.contains("not mounted"), "{err}");
        let other = entry("36 35 0:45 / /t rw - tmpfs agentcomputer:v1 rw");
        assert!(check_mount(t, Some(&other), "v1", (1000, 1001), false).is_err());
    }
}
