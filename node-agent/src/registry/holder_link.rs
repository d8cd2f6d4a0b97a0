//! Local mode's link to the descriptor holder ([`crate::local::holder`]): host
//! mount connections are kept there so that they outlive this process,
//! handed to a new holder when one dies, and taken over again by the next
//! agent process.

use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentcomputer_fuse::MountHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::blocking::blocking;

use super::*;

/// How many times [`Registry::watch_holder`] tries to replace a dead
/// descriptor holder.
pub const HOLDER_RESTART_ATTEMPTS: u32 = 5;

/// Delay after the first failed attempt to replace the descriptor holder
/// (doubling after each).
pub const HOLDER_RESTART_DELAY: Duration = Duration::from_millis(200);

impl Registry {
    /// Makes host mounts over connections `holder` keeps (local mode), so
    /// they outlive this process. Set once, before the first mount.
    pub fn set_holder(&self, holder: Arc<crate::registry::HolderClient>) {
        let _ = self.inner.holder.set(holder);
    }

    /// Watches the link to the descriptor holder until `stop` is cancelled
    /// (local mode; returns at once without a holder). When the link
    /// breaks (the holder was killed), starts a new holder as at start-up
    /// and hands it every connection this process still serves
    /// ([`Registry::keep_served`]), so that a later crash of this process
    /// still leaves the mounts to the next one. Up to
    /// [`HOLDER_RESTART_ATTEMPTS`] attempts, [`HOLDER_RESTART_DELAY`]
    /// apart and doubling, each logged; after the last, host mounts end
    /// with this process (logged) and the watch stops.
    pub async fn watch_holder(self, stop: CancellationToken) {
        let Some(holder) = self.inner.holder.get().cloned() else {
            return;
        };
        loop {
            let h = holder.clone();
            let broken = tokio::select! {
                _ = stop.cancelled() => return,
                r = blocking(move || h.wait_broken(Duration::from_secs(1))) => r,
            };
            match broken {
                Ok(false) => continue,
                Ok(true) => {}
                // Out of descriptors says nothing about the holder: look
                // again once some are back.
                Err(e) if crate::registry::is_descriptor_shortage(&e) => {
                    warn!(error = %e, "cannot watch the link to the FUSE descriptor holder for now; retrying");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                    continue;
                }
                Err(e) => {
                    warn!(error = %e, "cannot watch the link to the FUSE descriptor holder; treating it as broken");
                }
            }
            warn!(
                "the link to the FUSE descriptor holder broke (the holder died): starting a new one"
            );
            let mut delay = HOLDER_RESTART_DELAY;
            let mut replaced = false;
            for attempt in 1..=HOLDER_RESTART_ATTEMPTS {
                if stop.is_cancelled() {
                    return;
                }
                let h = holder.clone();
                let result = match blocking(move || h.restart()).await {
                    Ok(()) => self.keep_served().await,
                    Err(e) => Err(e),
                };
                match result {
                    Ok(kept) => {
                        info!(
                            attempt,
                            kept, "a new FUSE descriptor holder keeps the host mounts again"
                        );
                        replaced = true;
                        break;
                    }
                    Err(e) => {
                        warn!(attempt, of = HOLDER_RESTART_ATTEMPTS, error = %e, "replacing the FUSE descriptor holder failed");
                    }
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay *= 2;
            }
            if !replaced {
                tracing::error!(
                    attempts = HOLDER_RESTART_ATTEMPTS,
                    "no FUSE descriptor holder: host mounts will end with this process"
                );
                return;
            }
        }
    }

    /// Hands a duplicate of every host mount connection this process
    /// serves over a held connection to the holder (`keep`), under the
    /// mount table lock. Connections the kernel ended are skipped.
    /// Returns how many were kept. Errors: the first failed `keep`.
    pub async fn keep_served(&self) -> io::Result<usize> {
        let Some(holder) = self.inner.holder.get().cloned() else {
            return Ok(0);
        };
        let _table = self.inner.mount_table.lock().await;
        let mut batch = Vec::new();
        for slot in self.inner.open.lock().values() {
            for (path, m) in slot.mounts.lock().iter() {
                let (Some(fd), Some(init)) = (&m.fd, m.handle.init_record()) else {
                    continue;
                };
                if !agentcomputer_fuse::is_live(fd).unwrap_or(false) {
                    continue;
                }
                let held = agentcomputer_handover::holder::KeptConnection {
                    path: path.clone(),
                    computer: slot.name.clone(),
                    init: agentcomputer_handover::init::encode(init.as_bytes()),
                    dev: m.handle.device(),
                };
                batch.push((held, fd.try_clone()?));
            }
        }
        blocking(move || {
            for (held, fd) in &batch {
                holder.keep(held, fd.as_fd())?;
            }
            Ok(batch.len())
        })
        .await
    }

    /// Takes over the host mounts a previous agent process served (the
    /// holder's `list`): each is served again over its live connection
    /// (`agentcomputer_fuse::resume_connection`), so processes using it
    /// see a pause, not an error. A mount whose computer is gone, or that
    /// cannot be resumed, is unmounted lazily and let go. Returns how many
    /// were resumed.
    pub async fn resume_mounts(
        &self,
        held: Vec<(
            agentcomputer_handover::holder::KeptConnection,
            std::os::fd::OwnedFd,
        )>,
    ) -> usize {
        let mut resumed = 0;
        for (h, fd) in held {
            let started = std::time::Instant::now();
            // The mount's root, found without following the path: it is
            // unmounted through it, never through the path.
            let (p, dev) = (h.path.clone(), h.dev);
            let root = match blocking(move || agentcomputer_fuse::find_mount_root(&p, dev)).await {
                Ok(Some(root)) => Some(root),
                Ok(None) => {
                    warn!(computer = %h.computer, path = %h.path.display(), "cannot find the root of a host mount of a previous run without following its path");
                    None
                }
                Err(e) => {
                    warn!(computer = %h.computer, path = %h.path.display(), error = %e, "cannot find the root of a host mount of a previous run");
                    None
                }
            };
            let result = async {
                let root = match &root {
                    Some(root) => root.try_clone(),
                    None => Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        "its mount cannot be found without following a link",
                    )),
                }
                .map_err(|source| RegistryError::Mount {
                    path: h.path.display().to_string(),
                    source,
                })?;
                let kept = fd.try_clone().map_err(|source| RegistryError::Mount {
                    path: h.path.display().to_string(),
                    source,
                })?;
                let handed = crate::registry::Handed::Live { init: &h.init };
                let opts = host_mount_options(&h.computer);
                let (lease, conn) =
                    crate::registry::serve_handed_over(self, &h.computer, fd, opts, handed)
                        .await
                        .map_err(|e| match e {
                            crate::registry::TakeOverError::Registry(e) => e,
                            other => RegistryError::Mount {
                                path: h.path.display().to_string(),
                                source: io::Error::other(other.to_string()),
                            },
                        })?;
                let mount = HostMount {
                    handle: MountHandle::resumed(h.path.clone(), conn).with_root(root),
                    fd: Some(kept),
                };
                lease.slot.mounts.lock().insert(h.path.clone(), mount);
                Ok::<(), RegistryError>(())
            }
            .await;
            match result {
                Ok(()) => {
                    resumed += 1;
                    info!(computer = %h.computer, path = %h.path.display(), took = ?started.elapsed(), "resumed a host mount served by a previous run");
                }
                Err(e) => {
                    // Detached through its root, wherever it is; one that
                    // cannot be found is never unmounted by path: its
                    // connection ends when the holder lets go, and the
                    // mount is left dead (ENOTCONN) where it is.
                    match root {
                        Some(root) => {
                            warn!(computer = %h.computer, path = %h.path.display(), error = %e, "cannot resume a host mount of a previous run: unmounting it");
                            if let Err(e) =
                                blocking(move || agentcomputer_fuse::detach_mount(&root)).await
                            {
                                warn!(path = %h.path.display(), error = %e, "unmount failed");
                            }
                        }
                        None => {
                            warn!(computer = %h.computer, path = %h.path.display(), error = %e, "cannot resume a host mount of a previous run: ending its connection; the mount is left dead where it is");
                        }
                    }
                    self.let_go(&h.path).await;
                }
            }
        }
        self.save_mounts().await;
        resumed
    }

    /// Stops serving every host mount made over a held connection without
    /// unmounting it (the next agent process resumes it); other mounts
    /// stay for [`Registry::close_all`] to unmount. Returns how many were
    /// left.
    pub fn leave_mounts(&self) -> usize {
        let slots: Vec<Arc<Slot>> = self.inner.open.lock().values().cloned().collect();
        let mut left = 0;
        for slot in slots {
            let mut mounts = slot.mounts.lock();
            let held: Vec<PathBuf> = mounts
                .iter()
                .filter(|(_, m)| m.handle.init_record().is_some())
                .map(|(p, _)| p.clone())
                .collect();
            for p in held {
                if let Some(m) = mounts.remove(&p) {
                    m.handle.leave();
                    left += 1;
                }
            }
        }
        left
    }
}
