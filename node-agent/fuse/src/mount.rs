//! Mounting and unmounting one computer's filesystem.

use std::io;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use agentcomputer_fs::Fs;
use fuser::{Config, MountOption, Session, SessionACL, SessionUnmounter};

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use crate::connection::ConnectionHandle;
use crate::handshake::InitRecord;
use crate::invalidate::{Invalidator, OwnQueue, new_mount_id, queue};
use crate::options::{MountOptions, SUBTYPE};
use crate::server::Server;
use crate::stale::lazy_unmount;

/// How long [`MountHandle::unmount`] waits for a busy, lazily detached
/// mount to finish before leaving its session to end by itself.
const DETACH_WAIT: Duration = Duration::from_secs(2);

/// Mounts `fs` at `mountpoint` and serves it on background threads until
/// the returned handle is unmounted or dropped.
///
/// As root the kernel is called directly (`mount(2)` with a `/dev/fuse`
/// descriptor); otherwise `fusermount3` does it. The mount's source is
/// [`MountOptions::fsname`] (type `fuse`, or `fuse.agentcomputer` through
/// fusermount3); it uses `default_permissions` (the kernel checks
/// modes), `nosuid,nodev`, and `allow_other` per [`MountOptions::allow_other`].
/// With [`MountOptions::nosymfollow`] the mount is given `nosymfollow`
/// (a bind remount, Linux 5.10+) before the first request is served, so no
/// path is ever resolved through one of its links.
///
/// Errors: the `io::Error` of the mount (for example `ENOENT` for a missing
/// mountpoint, `EPERM` without privilege, `ENOTCONN` for a stale mount left
/// at the path: run [`crate::cleanup_stale_mounts`] first). When
/// `nosymfollow` cannot be set (`EPERM` without `CAP_SYS_ADMIN`, `EINVAL`
/// before Linux 5.10) the mount is undone and the error says so, with the
/// kernel's errno.
pub fn mount(fs: Fs, mountpoint: &Path, opts: MountOptions) -> io::Result<MountHandle> {
    // Resolved before mounting: afterwards a lookup of the root would wait
    // for a server that is not serving yet.
    let mountpoint = &mountpoint.canonicalize()?;
    let id = new_mount_id();
    let threads = opts.threads.max(1);
    let allow_other = opts
        .allow_other
        .unwrap_or_else(|| nix::unistd::geteuid().is_root());
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(opts.fsname.clone()),
        MountOption::Subtype(SUBTYPE.to_string()),
        MountOption::DefaultPermissions,
        MountOption::NoSuid,
        MountOption::NoDev,
        MountOption::RW,
    ];
    let nosymfollow = opts.nosymfollow;
    config.acl = if allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(threads);
    config.clone_fd = threads > 1;
    let (tx, rx) = queue();
    let server = Server::new(fs.clone(), id, opts, OwnQueue(tx.clone()), false);
    let mut session = Session::new(server, mountpoint, &config)?;
    if nosymfollow {
        // Requests wait in the kernel until `session.run` serves them, so
        // nothing is resolved on the mount before the flag is set.
        if let Err(errno) = forbid_symlinks(mountpoint) {
            drop(session);
            let refused = NosymfollowRefused {
                mountpoint: mountpoint.clone(),
                errno: errno as i32,
            };
            return Err(io::Error::new(
                io::Error::from_raw_os_error(errno as i32).kind(),
                refused,
            ));
        }
    }
    let invalidator = Invalidator::start(&fs, session.notifier(), id, (tx, rx))?;
    let unmounter = session.unmount_callable();
    let thread = std::thread::Builder::new()
        .name(format!("fuse-session-{id}"))
        .spawn(move || session.run())?;
    Ok(MountHandle {
        root: None,
        mountpoint: mountpoint.to_path_buf(),
        serving: Serving::Session {
            invalidator,
            unmounter: Some(unmounter),
            thread: Some(thread),
        },
    })
}

/// Mounts `fs` at `mountpoint` as [`mount`] does, but over a connection
/// this process opened itself (`/dev/fuse`, `mount(2)` with `fd=N`) and
/// serves with [`crate::serve_connection`], so that the connection can
/// outlive the process: returns the handle and a duplicate of the
/// connection's descriptor for a holder to keep. A later process takes the
/// connection over with [`crate::resume_connection`] (the handle's
/// [`MountHandle::init_record`]) and [`MountHandle::resumed`].
///
/// Root only (`mount(2)` needs `CAP_SYS_ADMIN`). The mount's type is
/// `fuse.agentcomputer`, its source [`MountOptions::fsname`], with
/// `default_permissions`, `nosuid,nodev`, `allow_other` per
/// [`MountOptions::allow_other`] (default: on) and `nosymfollow` per the
/// options. Every request is committed before it is answered.
///
/// Errors: as [`mount`]; `EPERM` when not root.
pub fn mount_connection(
    fs: Fs,
    mountpoint: &Path,
    opts: MountOptions,
) -> io::Result<(MountHandle, OwnedFd)> {
    use nix::mount::MsFlags;
    let mountpoint = &mountpoint.canonicalize()?;
    let dev = OwnedFd::from(
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")?,
    );
    let mut data = format!(
        "fd={},rootmode=40000,user_id={},group_id={},default_permissions",
        dev.as_raw_fd(),
        nix::unistd::geteuid(),
        nix::unistd::getegid()
    );
    if opts.allow_other.unwrap_or(true) {
        data.push_str(",allow_other");
    }
    nix::mount::mount(
        Some(opts.fsname.as_str()),
        mountpoint,
        Some(format!("fuse.{SUBTYPE}").as_str()),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(data.as_str()),
    )?;
    let undo = |e: io::Error| {
        let _ = nix::mount::umount2(mountpoint, nix::mount::MntFlags::MNT_DETACH);
        e
    };
    if opts.nosymfollow
        && let Err(errno) = forbid_symlinks(mountpoint)
    {
        let refused = NosymfollowRefused {
            mountpoint: mountpoint.clone(),
            errno: errno as i32,
        };
        return Err(undo(io::Error::new(
            io::Error::from_raw_os_error(errno as i32).kind(),
            refused,
        )));
    }
    let kept = dev.try_clone().map_err(undo)?;
    let conn = crate::serve_connection(fs, dev, opts).map_err(undo)?;
    Ok((MountHandle::resumed(mountpoint.clone(), conn), kept))
}

/// Sets `nosymfollow` on the mount at `mountpoint`, keeping the flags it
/// was mounted with (`nosuid,nodev`, read-write; a bind remount without
/// atime flags keeps the mount's atime setting: mount(2), `MS_REMOUNT`).
fn forbid_symlinks(mountpoint: &Path) -> nix::Result<()> {
    use nix::mount::MsFlags;
    let flags = MsFlags::MS_REMOUNT
        | MsFlags::MS_BIND
        | MsFlags::MS_NOSUID
        | MsFlags::MS_NODEV
        | MsFlags::from_bits_retain(libc::MS_NOSYMFOLLOW);
    nix::mount::mount::<str, Path, str, str>(None, mountpoint, None, flags, None)
}

/// The error (inside the `io::Error` of [`mount`], reachable with
/// `get_ref()` and `downcast_ref`) when the kernel refused to set
/// [`MountOptions::nosymfollow`]; nothing stays mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NosymfollowRefused {
    /// The mountpoint.
    pub mountpoint: PathBuf,
    /// The errno of the bind remount: `EPERM` without `CAP_SYS_ADMIN`,
    /// `EINVAL` before Linux 5.10.
    pub errno: i32,
}

impl std::fmt::Display for NosymfollowRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the kernel refused nosymfollow for the mount at {} ({}); it needs Linux 5.10 or later and CAP_SYS_ADMIN (a node agent running as root), so nothing was mounted",
            self.mountpoint.display(),
            nix::errno::Errno::from_raw(self.errno).desc()
        )
    }
}

impl std::error::Error for NosymfollowRefused {}

/// A live mount. [`MountHandle::unmount`] or dropping it unmounts;
/// [`MountHandle::leave`] leaves a connection mount for the next process.
pub struct MountHandle {
    mountpoint: PathBuf,
    serving: Serving,
    /// A descriptor of the mount's root, taken when it was made
    /// ([`crate::mount_connection_at`]): the mount is unmounted through
    /// it, never through the path, which can be changed under it.
    root: Option<OwnedFd>,
}

/// How the mount is served.
enum Serving {
    /// A fuser session that mounted by itself ([`mount`]).
    Session {
        invalidator: Invalidator,
        unmounter: Option<SessionUnmounter>,
        thread: Option<JoinHandle<io::Result<()>>>,
    },
    /// A connection served with [`crate::serve_connection`] or
    /// [`crate::resume_connection`] ([`mount_connection`]); `None` once
    /// unmounted or left.
    Connection(Option<ConnectionHandle>),
}

impl std::fmt::Debug for MountHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MountHandle")
            .field("mountpoint", &self.mountpoint)
            .finish()
    }
}

impl MountHandle {
    /// Where the filesystem is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// A handle for the connection `conn` mounted at `mountpoint`, served
    /// by this process after [`crate::resume_connection`] (or by
    /// [`mount_connection`]).
    pub fn resumed(mountpoint: PathBuf, conn: ConnectionHandle) -> MountHandle {
        MountHandle {
            mountpoint,
            serving: Serving::Connection(Some(conn)),
            root: None,
        }
    }

    /// The device (`st_dev`) of the mount, for a handle with a root
    /// descriptor ([`MountHandle::with_root`]): what
    /// [`crate::find_mount_root`] finds the mount by again in another
    /// process. `None` without a root descriptor or when `statx(2)` fails.
    pub fn device(&self) -> Option<u64> {
        let root = self.root.as_ref()?;
        crate::unmount_at::device(root.as_fd()).ok()
    }

    /// This handle, unmounting through `root`, a descriptor of the mount's
    /// root (an `fsmount(2)` descriptor, or an `O_PATH` one opened at the
    /// mountpoint without following links), instead of through its path.
    pub fn with_root(mut self, root: OwnedFd) -> MountHandle {
        self.root = Some(root);
        self
    }

    /// The connection's `FUSE_INIT` record, for a mount that can be
    /// resumed by another process ([`mount_connection`]); `None` otherwise.
    pub fn init_record(&self) -> Option<&InitRecord> {
        match &self.serving {
            Serving::Connection(Some(c)) => Some(c.init_record()),
            _ => None,
        }
    }

    /// Whether the session still serves requests (false once the kernel
    /// ended the connection, for example after an external `umount`).
    pub fn is_serving(&self) -> bool {
        match &self.serving {
            Serving::Session { thread, .. } => thread.as_ref().is_some_and(|t| !t.is_finished()),
            Serving::Connection(c) => c.as_ref().is_some_and(|c| c.is_serving()),
        }
    }

    /// Leaves a connection mount mounted for another process to resume
    /// (the holder of its descriptor keeps it alive): this process stops
    /// answering it when it exits, and requests wait for the next server.
    /// A mount made by [`mount`] cannot be left and is unmounted.
    pub fn leave(mut self) {
        if let Serving::Connection(c) = &mut self.serving {
            c.take();
        }
    }

    /// Unmounts: the kernel writes back cached dirty pages, then the
    /// session ends. A mount still in use (`EBUSY`) is detached lazily
    /// (`MNT_DETACH`): the path is free at once and processes holding files
    /// keep them until they close, served by the session until then.
    ///
    /// A mount with a root descriptor ([`MountHandle::with_root`]) is
    /// detached through it wherever it is now, whatever its path leads to.
    ///
    /// Errors: the `io::Error` of `umount2(2)`.
    pub fn unmount(mut self) -> io::Result<()> {
        self.shutdown()
    }

    /// Unmounts as [`MountHandle::unmount`] does, but only when the
    /// mountpoint, resolved without following any symbolic link, still
    /// leads to this very mount (checked on its root descriptor, see
    /// [`MountHandle::with_root`]); otherwise nothing is unmounted and the
    /// handle still holds the mount. A handle without a root descriptor
    /// unmounts by path.
    ///
    /// Errors: [`crate::NotThisMount`] inside the `io::Error` (`ELOOP`: a
    /// link in the path; `EBUSY`: the path leads elsewhere), or the
    /// `io::Error` of `umount2(2)`.
    pub fn try_unmount(&mut self) -> io::Result<()> {
        if let (Some(root), Serving::Connection(Some(_))) = (&self.root, &self.serving) {
            crate::unmount_at::check_leads_to(root.as_fd(), &self.mountpoint)?;
        }
        self.shutdown()
    }

    fn shutdown(&mut self) -> io::Result<()> {
        let (invalidator, unmounter, thread) = match &mut self.serving {
            Serving::Session {
                invalidator,
                unmounter,
                thread,
            } => (invalidator, unmounter, thread),
            Serving::Connection(conn) => {
                let Some(conn) = conn.take() else {
                    return Ok(());
                };
                if let Some(root) = self.root.take() {
                    crate::unmount_at::detach(&root)?;
                    // The last reference of this process to the mount:
                    // unless files in it are open, it ends here.
                    drop(root);
                    wait_ended(&self.mountpoint, &conn);
                    return Ok(());
                }
                return unmount_connection(&self.mountpoint, &conn);
            }
        };
        let Some(mut unmounter) = unmounter.take() else {
            return Ok(());
        };
        invalidator.stop();
        match unmounter.unmount() {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                lazy_unmount(&self.mountpoint)?;
                let deadline = Instant::now() + DETACH_WAIT;
                let running = |t: &Option<JoinHandle<io::Result<()>>>| {
                    t.as_ref().is_some_and(|t| !t.is_finished())
                };
                while running(thread) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
                if running(thread) {
                    tracing::info!(mountpoint = %self.mountpoint.display(), "mount detached while busy; its session ends when the last file closes");
                    *thread = None;
                    return Ok(());
                }
            }
            Err(e) => return Err(e),
        }
        if let Some(t) = thread.take() {
            match t.join() {
                Ok(r) => r?,
                Err(_) => return Err(io::Error::other("FUSE session thread panicked")),
            }
        }
        Ok(())
    }
}

/// Unmounts a connection mount (lazily when busy) and waits up to
/// [`DETACH_WAIT`] for its session to end.
fn unmount_connection(mountpoint: &Path, conn: &ConnectionHandle) -> io::Result<()> {
    match nix::mount::umount2(mountpoint, nix::mount::MntFlags::empty()) {
        Ok(()) => {}
        Err(nix::errno::Errno::EBUSY) => lazy_unmount(mountpoint)?,
        Err(e) => return Err(e.into()),
    }
    wait_ended(mountpoint, conn);
    Ok(())
}

/// Waits up to [`DETACH_WAIT`] for the connection of a detached mount to
/// end, logging when it does not (files in it are still open).
fn wait_ended(mountpoint: &Path, conn: &ConnectionHandle) {
    if !conn.wait_ended(DETACH_WAIT) {
        tracing::info!(mountpoint = %mountpoint.display(), "mount detached while busy; its connection ends when the last file closes");
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::warn!(mountpoint = %self.mountpoint.display(), error = %e, "unmount failed");
        }
    }
}
