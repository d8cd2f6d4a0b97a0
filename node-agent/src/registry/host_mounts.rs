//! Local mode's host mounts: a computer mounted at a host directory over
//! FUSE holds its engine open, so its mounts are state of the open slot.
//! They are recorded in `<data>/mounts.json` ([`crate::registry::mount_records`]).

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentcomputer_container::local::{SANDBOX_GID, SANDBOX_UID};
use agentcomputer_fuse::{MountHandle, MountOptions, OwnerMap};
use tracing::{info, warn};

use crate::blocking::blocking;
use crate::registry::mount_records::{self as mounts, MountRecord};

use super::*;

/// One host mount of a computer.
pub(super) struct HostMount {
    pub(super) handle: MountHandle,
    /// A duplicate of the connection's `/dev/fuse` descriptor when the
    /// descriptor holder keeps it too: a new holder gets it again when the
    /// first one dies ([`Registry::watch_holder`]).
    pub(super) fd: Option<OwnedFd>,
}

impl Registry {
    /// Mounts computer `name` over FUSE at the host directory `path`
    /// (opened without following any link, see [`crate::registry::mount_records::MountDir`]
    /// for its checks; the mount is attached to that descriptor) and
    /// records the mount. The directory must belong to the agent's (effective)
    /// user and be empty unless `nonempty`. A dead mount a killed previous
    /// run left at `path` is replaced.
    ///
    /// The mount is made for the agent's user: `nosymfollow` (no path is
    /// resolved through a link on it, so a computer's links cannot point
    /// host tools at host files; the mount fails where the kernel refuses
    /// the flag) and every file shown as owned by the agent's effective
    /// uid and gid ([`agentcomputer_fuse::OwnerMap`]; files made through it
    /// are stored as the sandbox user).
    ///
    /// Errors: as [`Registry::acquire`], `MountNeedsRoot` (an agent that
    /// is not root: nothing is tried), `MountThroughLink` (a symbolic link
    /// in the path), `MountNotOwned`, `MountNotEmpty`, or `Mount` with
    /// `EINVAL`, `ENOENT`, `ENOTDIR`, `EBUSY` or the kernel's errno.
    ///
    /// Cancel-safe: the work runs to its end on a task of its own, so a
    /// dropped call (a client that hung up) leaves the mount made and
    /// recorded, or neither, never the recorded intent of a mount that was
    /// undone.
    pub async fn mount(
        &self,
        name: &str,
        path: &Path,
        nonempty: bool,
    ) -> Result<(), RegistryError> {
        let shown = path.display().to_string();
        let (this, name, path) = (self.clone(), name.to_string(), path.to_path_buf());
        tokio::spawn(async move { this.mount_to_the_end(&name, &path, nonempty).await })
            .await
            .map_err(|e| RegistryError::Mount {
                path: shown,
                source: io::Error::other(format!("the mount task failed: {e}")),
            })?
    }

    /// [`Registry::mount`]'s work, which must not be dropped midway.
    async fn mount_to_the_end(
        &self,
        name: &str,
        path: &Path,
        nonempty: bool,
    ) -> Result<(), RegistryError> {
        let lease = self.acquire(name).await?;
        let _guard = self.inner.names.lock(name).await;
        let _table = self.inner.mount_table.lock().await;
        if lease.slot.cancel.is_cancelled() {
            // Deleted (or shutting down) while we waited.
            return Err(RegistryError::NotFound(name.to_string()));
        }
        let mount_err = |source| RegistryError::Mount {
            path: path.display().to_string(),
            source,
        };
        if !path.is_absolute() {
            return Err(mount_err(io::Error::from_raw_os_error(
                nix::errno::Errno::EINVAL as i32,
            )));
        }
        let agent_uid = nix::unistd::geteuid().as_raw();
        if agent_uid != 0 {
            return Err(RegistryError::MountNeedsRoot {
                path: path.display().to_string(),
                uid: agent_uid,
            });
        }
        let busy = self
            .inner
            .open
            .lock()
            .values()
            .any(|s| s.mounts.lock().contains_key(path));
        if busy {
            return Err(mount_err(io::Error::from_raw_os_error(
                nix::errno::Errno::EBUSY as i32,
            )));
        }
        let had_dead = self.inner.dead_mounts.lock().iter().any(|r| r.path == path);
        if had_dead {
            let target = path.to_path_buf();
            if blocking(move || mounts::remove_dead(&target))
                .await
                .map_err(mount_err)?
            {
                info!(computer = name, path = %path.display(), "replacing the dead mount a previous run left");
            }
            self.inner.dead_mounts.lock().retain(|r| r.path != path);
            self.save_mounts().await;
        }
        // The target is on disk before mount(2): a kill before the mount
        // is recorded leaves the next start a record to find the dead
        // mount by (mounts::recheck_recorded), instead of a mount no one
        // knows of.
        let intent = MountRecord {
            computer: name.to_string(),
            path: path.to_path_buf(),
        };
        self.inner.mounting.lock().push(intent.clone());
        if let Err(e) = self.try_save_mounts().await {
            self.inner.mounting.lock().retain(|r| *r != intent);
            return Err(RegistryError::Mount {
                path: path.display().to_string(),
                source: io::Error::new(
                    e.kind(),
                    format!("cannot record the mount before making it: {e}"),
                ),
            });
        }
        let fs = lease.fs().clone();
        let target = path.to_path_buf();
        let opts = host_mount_options(name);
        let holder = self.inner.holder.get().cloned();
        let computer = name.to_string();
        let mount = blocking(move || {
            let mount_err = |source| RegistryError::Mount {
                path: target.display().to_string(),
                source,
            };
            let dir = match mounts::MountDir::open(&target) {
                Ok(dir) => dir,
                Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) => {
                    return Err(RegistryError::MountThroughLink {
                        path: target.display().to_string(),
                    });
                }
                Err(e) => return Err(mount_err(e)),
            };
            let owner = dir.owner().map_err(mount_err)?;
            if owner != agent_uid {
                return Err(RegistryError::MountNotOwned {
                    path: target.display().to_string(),
                    owner,
                    agent: agent_uid,
                });
            }
            if !nonempty && !dir.is_empty().map_err(mount_err)? {
                return Err(RegistryError::MountNotEmpty {
                    path: target.display().to_string(),
                });
            }
            // Over a connection that can outlive this process: the holder,
            // when there is one, keeps a duplicate of it.
            let mounted = agentcomputer_fuse::mount_connection_at(fs, dir.as_fd(), &target, opts)
                .and_then(|(handle, kept)| {
                    let Some(holder) = &holder else {
                        return Ok(HostMount { handle, fd: None });
                    };
                    let held = agentcomputer_handover::holder::KeptConnection {
                        path: target.clone(),
                        computer,
                        init: agentcomputer_handover::init::encode(
                            handle.init_record().expect("a connection mount").as_bytes(),
                        ),
                        dev: handle.device(),
                    };
                    holder.keep(&held, kept.as_fd())?;
                    Ok(HostMount {
                        handle,
                        fd: Some(kept),
                    })
                });
            mounted.map_err(|e| {
                let refused = e
                    .get_ref()
                    .and_then(|inner| {
                        inner.downcast_ref::<agentcomputer_fuse::NosymfollowRefused>()
                    })
                    .cloned();
                match refused {
                    Some(refused) => RegistryError::MountUnsafe {
                        path: target.display().to_string(),
                        refused,
                    },
                    None => mount_err(e),
                }
            })
        })
        .await;
        self.inner.mounting.lock().retain(|r| *r != intent);
        let mount = match mount {
            Ok(m) => m,
            Err(e) => {
                self.save_mounts().await;
                return Err(e);
            }
        };
        lease.slot.mounts.lock().insert(path.to_path_buf(), mount);
        info!(computer = name, path = %path.display(), "mounted computer");
        self.save_mounts().await;
        Ok(())
    }

    /// Unmounts the mount of computer `name` at `path` and updates the
    /// record. A busy mount is detached lazily. A dead mount of `name` that
    /// a killed previous run left at `path` is removed. The mount is
    /// unmounted only when `path`, resolved without following any link,
    /// still leads to it (checked on the mount's own descriptor, through
    /// which it is then detached); otherwise it stays mounted and recorded.
    /// Errors: `InvalidName`, `NotMounted`, `UnmountThroughLink` (a link in
    /// the path), `UnmountElsewhere` (the path leads to another place),
    /// `Mount` with `EINVAL` (relative path) or the errno of `umount2(2)`.
    pub async fn unmount(&self, name: &str, path: &Path) -> Result<(), RegistryError> {
        check_name(name)?;
        let mount_err = |errno: nix::errno::Errno| RegistryError::Mount {
            path: path.display().to_string(),
            source: io::Error::from_raw_os_error(errno as i32),
        };
        if !path.is_absolute() {
            return Err(mount_err(nix::errno::Errno::EINVAL));
        }
        let _guard = self.inner.names.lock(name).await;
        let _table = self.inner.mount_table.lock().await;
        let slot = self.inner.open.lock().get(name).cloned();
        let handle = slot.and_then(|s| s.mounts.lock().remove(path));
        let Some(handle) = handle else {
            let dead = self
                .inner
                .dead_mounts
                .lock()
                .iter()
                .any(|r| r.computer == name && r.path == path);
            if dead {
                let target = path.to_path_buf();
                let removed = blocking(move || mounts::remove_dead(&target)).await;
                self.inner.dead_mounts.lock().retain(|r| r.path != path);
                self.save_mounts().await;
                removed.map_err(|source| RegistryError::Mount {
                    path: path.display().to_string(),
                    source,
                })?;
                info!(computer = name, path = %path.display(), "removed the dead mount a previous run left");
                return Ok(());
            }
            return Err(RegistryError::NotMounted {
                name: name.to_string(),
                path: path.display().to_string(),
            });
        };
        let (result, kept) = blocking(move || {
            let mut handle = handle;
            match handle.handle.try_unmount() {
                Err(e) if not_this_mount(&e).is_some() => (Err(e), Some(handle)),
                r => (r, None),
            }
        })
        .await;
        if let Some(handle) = kept {
            // The path was changed under the mount: it stays, recorded and
            // served, and a delete detaches it through its descriptor.
            let source = result.expect_err("refused");
            let slot = self.inner.open.lock().get(name).cloned();
            if let Some(slot) = slot {
                slot.mounts.lock().insert(path.to_path_buf(), handle);
            }
            let errno = not_this_mount(&source).unwrap_or(nix::errno::Errno::EBUSY as i32);
            warn!(computer = name, path = %path.display(), error = %source, "refused to unmount: the path no longer leads to the computer's mount");
            return Err(if errno == nix::errno::Errno::ELOOP as i32 {
                RegistryError::UnmountThroughLink {
                    path: path.display().to_string(),
                }
            } else {
                RegistryError::UnmountElsewhere {
                    path: path.display().to_string(),
                }
            });
        }
        self.let_go(path).await;
        self.save_mounts().await;
        result.map_err(|source| RegistryError::Mount {
            path: path.display().to_string(),
            source,
        })?;
        info!(computer = name, path = %path.display(), "unmounted computer");
        Ok(())
    }

    /// The host mounts now, sorted by computer then path.
    pub fn mounts(&self) -> Vec<MountRecord> {
        let mut out: Vec<MountRecord> = self
            .inner
            .open
            .lock()
            .iter()
            .flat_map(|(name, s)| {
                s.mounts
                    .lock()
                    .keys()
                    .map(|p| MountRecord {
                        computer: name.clone(),
                        path: p.clone(),
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        out.sort_by(|a, b| (&a.computer, &a.path).cmp(&(&b.computer, &b.path)));
        out
    }

    /// Rewrites `mounts.json` from the live mounts, those being made and
    /// the dead ones a previous run left; failures are logged (the record
    /// only helps the next start find dead mounts).
    pub(super) async fn save_mounts(&self) {
        if let Err(e) = self.try_save_mounts().await {
            warn!(error = %e, "could not record host mounts");
        }
    }

    /// [`Registry::save_mounts`], returning the error.
    pub(super) async fn try_save_mounts(&self) -> io::Result<()> {
        let mut records = self.mounts();
        records.extend(self.inner.mounting.lock().iter().cloned());
        records.extend(self.inner.dead_mounts.lock().iter().cloned());
        let dir = self.inner.data_dir.clone();
        blocking(move || mounts::save_records(&dir, &records)).await
    }

    /// Tells the holder that the mount at `path` is gone.
    pub(super) async fn let_go(&self, path: &Path) {
        if let Some(holder) = self.inner.holder.get().cloned() {
            let p = path.to_path_buf();
            if let Err(e) = blocking(move || holder.drop_path(&p)).await {
                warn!(path = %path.display(), error = %e, "could not tell the descriptor holder about an unmount");
            }
        }
    }
}

/// The errno of a refused unmount ([`agentcomputer_fuse::NotThisMount`]:
/// the path no longer leads to the mount), `None` for any other error.
pub(super) fn not_this_mount(e: &io::Error) -> Option<i32> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<agentcomputer_fuse::NotThisMount>())
        .map(|n| n.errno)
}

/// Options of a host mount of computer `name`: made for the agent's
/// user, `nosymfollow`, files shown as the agent's uid and gid.
pub(super) fn host_mount_options(name: &str) -> MountOptions {
    MountOptions {
        fsname: agentcomputer_handover::fsname::source(name),
        nosymfollow: true,
        owner_map: Some(OwnerMap {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            stored_uid: SANDBOX_UID,
            stored_gid: SANDBOX_GID,
        }),
        ..MountOptions::default()
    }
}

/// Unmounts every host mount of `slot`, wherever each is now (through
/// its root descriptor), logging failures.
pub(super) async fn unmount_all(slot: &Arc<Slot>, inner: &Inner) {
    let handles: Vec<(PathBuf, HostMount)> = slot.mounts.lock().drain().collect();
    for (path, mount) in handles {
        let name = slot.name.clone();
        let unmounted = blocking(move || mount.handle.unmount()).await;
        if let Some(holder) = inner.holder.get().cloned() {
            let p = path.clone();
            if let Err(e) = blocking(move || holder.drop_path(&p)).await {
                warn!(path = %path.display(), error = %e, "could not tell the descriptor holder about an unmount");
            }
        }
        match unmounted {
            Ok(()) => info!(computer = %name, path = %path.display(), "unmounted computer"),
            Err(e) => warn!(computer = %name, path = %path.display(), error = %e, "unmount failed"),
        }
    }
}
