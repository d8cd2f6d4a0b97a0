//! Serving a FUSE connection that another process mounted.
//!
//! In a cluster the privileged mounter opens `/dev/fuse`, mounts the
//! target with `fd=N` and hands the descriptor to the unprivileged agent
//! (see `docs/csi.md`). The agent cannot open `/dev/fuse` itself, so every
//! serving thread reads the one descriptor it was given (the kernel hands
//! each request to exactly one reader). Caching and invalidation are those
//! of [`crate::mount`].

use parking_lot::{Condvar, Mutex};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcomputer_fs::Fs;
use fuser::{Config, SessionACL};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::handshake::{Handshake, InitRecord, start_session};
use crate::invalidate::{Invalidator, OwnQueue, new_mount_id, queue};
use crate::options::MountOptions;
use crate::server::Server;

/// How long [`serve_connection`] waits for the kernel's `FUSE_INIT`.
pub const INIT_TIMEOUT: Duration = Duration::from_secs(10);

type EndHook = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct State {
    /// The session stopped serving.
    ended: bool,
    /// The end hook (if any) has returned too: what [`ConnectionHandle::wait_ended`] waits for.
    finished: bool,
    on_end: Option<EndHook>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    cond: Condvar,
}

/// Serves `fs` over the FUSE connection `fd`: a `/dev/fuse` descriptor
/// whose filesystem another process mounted (`mount(2)` with `fd=N`).
///
/// Answers the kernel's `FUSE_INIT` before returning (waiting at most
/// [`INIT_TIMEOUT`] for it), then serves requests on
/// [`MountOptions::threads`] threads that share `fd`. Every user may use
/// the mount (the kernel enforces `allow_other` and modes). The session
/// ends when the kernel ends the connection (unmount, or an abort through
/// `/sys/fs/fuse/connections`); the agent cannot end it by itself.
/// Every request is committed before it is answered
/// ([`MountOptions::commit_window`] is ignored): the connection may be
/// resumed by another process after this one dies.
/// [`MountOptions::allow_other`] and `fsname` do not apply: the mounting
/// process chose them.
///
/// Errors: `InvalidInput` for a `/dev/fuse` descriptor that no filesystem
/// was mounted with or whose filesystem was unmounted already, `TimedOut` when no `FUSE_INIT` came, `NotConnected`
/// when the connection ended first, `InvalidData` for data that is not
/// FUSE, or the error of reading the descriptor.
pub fn serve_connection(fs: Fs, fd: OwnedFd, opts: MountOptions) -> io::Result<ConnectionHandle> {
    wait_readable(&fd, INIT_TIMEOUT)?;
    start(fs, fd, opts, Handshake::Fresh)
}

/// Takes over the live FUSE connection `fd` that an earlier server (this
/// agent before a crash or an upgrade) started with `init` (its
/// [`ConnectionHandle::init_record`]), and serves `fs` over it as
/// [`serve_connection`] does.
///
/// The kernel sends no second `FUSE_INIT`: the record is replayed to the
/// session, and what the first server negotiated stays in force (a newer
/// build cannot change `max_write` or capabilities of a live connection).
/// The kernel is then asked to resend the requests the earlier server read
/// and never answered (`FUSE_NOTIFY_RESEND`, Linux 6.9+), so processes
/// that were waiting on the mount see their calls complete. Kernel inode
/// references are re-counted on demand: inode numbers are the engine's
/// own and stable, and file handles carry no server state (`fh` is 0).
///
/// Open `fs` with [`agentcomputer_fs::OpenOptions::keep_orphans`] (unless
/// it was open already when the earlier server died): files unlinked while
/// open before the take-over are still open in the kernel, which reads and
/// writes them through this server and frees them with its FORGET at their
/// last close. An ordinary open frees them first, and those processes'
/// descriptors then fail with `ENOENT`.
///
/// Errors: `InvalidInput` for a descriptor with no live connection, or
/// those of starting the session.
pub fn resume_connection(
    fs: Fs,
    fd: OwnedFd,
    opts: MountOptions,
    init: InitRecord,
) -> io::Result<ConnectionHandle> {
    if !is_live(&fd)? {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the descriptor has no live FUSE connection (unmounted, or aborted)",
        ));
    }
    start(fs, fd, opts, Handshake::Resume(init))
}

fn start(
    fs: Fs,
    fd: OwnedFd,
    mut opts: MountOptions,
    how: Handshake,
) -> io::Result<ConnectionHandle> {
    // A connection outlives this process (the mounter or the descriptor
    // holder keeps it), so every answer must mean committed: with a commit
    // window, writes answered in the last window before a crash would be
    // gone, and the next server would answer a later fsync of them with
    // success. Measured cost: docs/fuse.md, "Surviving the agent".
    opts.commit_window = Duration::ZERO;
    let id = new_mount_id();
    let mut config = Config::default();
    config.acl = SessionACL::All;
    config.n_threads = Some(opts.threads.max(1));
    // Cloning needs a new open of /dev/fuse, which the agent cannot do.
    config.clone_fd = false;
    let (tx, rx) = queue();
    let resumed = matches!(how, Handshake::Resume(_));
    let server = Server::new(fs.clone(), id, opts, OwnQueue(tx.clone()), resumed);
    let (session, init) = start_session(server, fd, config, how)?;
    let mut invalidator = Invalidator::start(&fs, session.notifier(), id, (tx, rx))?;
    let shared = Arc::new(Shared::default());
    let ends = shared.clone();
    std::thread::Builder::new()
        .name(format!("fuse-conn-{id}"))
        .spawn(move || {
            if let Err(e) = session.run() {
                tracing::warn!(connection = id, error = %e, "FUSE connection ended with an error");
            }
            // Drops the last clone of the descriptor with the notifier.
            invalidator.stop();
            drop(invalidator);
            let hook = {
                let mut st = ends.state.lock();
                st.ended = true;
                st.on_end.take()
            };
            if let Some(hook) = hook {
                hook();
            }
            ends.state.lock().finished = true;
            ends.cond.notify_all();
        })?;
    Ok(ConnectionHandle { id, shared, init })
}

/// Whether `fd` is a `/dev/fuse` descriptor whose connection is still up:
/// the device reports `POLLERR` for one with no connection (fs/fuse/dev.c,
/// `fuse_dev_poll`).
pub fn is_live(fd: &impl AsFd) -> io::Result<bool> {
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    loop {
        match poll(&mut fds, PollTimeout::ZERO) {
            Ok(_) => {
                let revents = fds[0].revents().unwrap_or(PollFlags::empty());
                return Ok(!revents.intersects(PollFlags::POLLERR | PollFlags::POLLNVAL));
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Waits until `fd` has a request to read (the kernel queues `FUSE_INIT`
/// when the filesystem is mounted).
fn wait_readable(fd: &OwnedFd, timeout: Duration) -> io::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no FUSE_INIT on the handed-over connection within {timeout:?}"),
            ));
        }
        let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
        let wait = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
        match poll(&mut fds, wait) {
            Ok(0) => continue,
            Ok(_) => {
                // /dev/fuse reports POLLERR for a descriptor with no
                // connection (fs/fuse/dev.c, fuse_dev_poll).
                let revents = fds[0].revents().unwrap_or(PollFlags::empty());
                if revents.contains(PollFlags::POLLERR) {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "the descriptor has no live FUSE connection (never mounted, or unmounted already)",
                    ));
                }
                return Ok(());
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// A FUSE connection being served. Dropping the handle does not end the
/// session: only the kernel does (see [`serve_connection`]).
pub struct ConnectionHandle {
    id: u64,
    shared: Arc<Shared>,
    init: InitRecord,
}

impl std::fmt::Debug for ConnectionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionHandle")
            .field("id", &self.id)
            .field("serving", &self.is_serving())
            .finish()
    }
}

impl ConnectionHandle {
    /// A number identifying the connection within this process.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The connection's `FUSE_INIT` request: keep it with a duplicate of
    /// the descriptor so that a later server can [`resume_connection`].
    pub fn init_record(&self) -> &InitRecord {
        &self.init
    }

    /// Whether the session still serves requests.
    pub fn is_serving(&self) -> bool {
        !self.shared.state.lock().ended
    }

    /// Waits up to `timeout` for the session to end and its end hook to
    /// return; true if both happened.
    pub fn wait_ended(&self, timeout: Duration) -> bool {
        let mut st = self.shared.state.lock();
        self.shared
            .cond
            .wait_while_for(&mut st, |s| !s.finished, timeout);
        st.finished
    }

    /// Runs `f` once when the session ends, on the session's thread (or
    /// right away if it has ended). Replaces an earlier hook. `f` must not
    /// wait for the kernel or for this connection.
    pub fn on_end(&self, f: impl FnOnce() + Send + 'static) {
        let mut st = self.shared.state.lock();
        if st.ended {
            drop(st);
            f();
        } else {
            st.on_end = Some(Box::new(f));
        }
    }
}
