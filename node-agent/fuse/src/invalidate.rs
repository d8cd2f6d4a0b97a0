//! Kernel cache invalidation for changes that did not come through the mount.
//!
//! The engine calls its subscribers on the committing thread after every
//! commit, with no engine lock held. Threads serving a mount mark
//! themselves with that mount's id, so the mount's subscriber ignores the
//! changes its kernel already knows about. For the rest:
//!
//! * on an ordinary thread (API, shell, JavaScript) the notification is
//!   sent right there, before the engine call returns, so the write is
//!   visible through the mount as soon as the caller sees it succeed;
//! * on a thread serving another mount it is queued for a dedicated
//!   thread: a request-serving thread must not wait for the kernel, which
//!   may hold locks until requests are answered (libfuse docs,
//!   `fuse_lowlevel_notify_inval_entry`).
//!
//! A mount's own server also queues an invalidation for its kernel through
//! [`OwnQueue`] when it wrote elsewhere than the kernel believes (an
//! `O_APPEND` write placed after data the kernel's cached size missed).

use std::cell::Cell;
use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;

use agentcomputer_fs::{Change, Fs, SubscriptionId};
use fuser::{INodeNo, Notifier};

thread_local! {
    /// Id of the mount whose requests this thread serves; 0 for other threads.
    static SERVING: Cell<u64> = const { Cell::new(0) };
}

static NEXT_MOUNT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh id for a new mount (never 0).
pub(crate) fn new_mount_id() -> u64 {
    NEXT_MOUNT_ID.fetch_add(1, Ordering::Relaxed)
}

/// Marks the current thread as serving mount `id`: engine changes it makes
/// are not echoed back to that mount's kernel cache.
pub(crate) fn mark_serving(id: u64) {
    SERVING.with(|c| {
        if c.get() != id {
            c.set(id)
        }
    });
}

/// Most changes handled in one batch (duplicates within a batch are sent once).
const BATCH: usize = 1024;

/// A message for a mount's invalidation thread.
pub(crate) enum Msg {
    Change(Change),
    /// Send what came before, then end.
    Stop,
}

/// The queue of a mount's invalidation thread: create it, hand an
/// [`OwnQueue`] to the server, then start the [`Invalidator`] on it.
pub(crate) fn queue() -> (mpsc::Sender<Msg>, Receiver<Msg>) {
    mpsc::channel()
}

/// Lets a mount's server invalidate its own kernel's cache of an inode
/// after the current request is answered (never synchronously: the kernel
/// may hold the inode's page locks until then).
#[derive(Clone)]
pub(crate) struct OwnQueue(pub(crate) mpsc::Sender<Msg>);

impl OwnQueue {
    /// Queues dropping the kernel's attributes and pages of `ino`.
    pub(crate) fn inode(&self, ino: u64) {
        // A closed queue means the mount is going away.
        let _ = self.0.send(Msg::Change(Change::Inode(ino)));
    }
}

/// Forwards engine changes to the kernel as `inval_inode` / `inval_entry`.
pub(crate) struct Invalidator {
    fs: Fs,
    sub: Option<SubscriptionId>,
    tx: mpsc::Sender<Msg>,
    thread: Option<JoinHandle<()>>,
}

impl Invalidator {
    /// Subscribes to `fs` on behalf of mount `id` and starts the sending
    /// thread, which serves the queue `(tx, rx)` from [`queue`].
    pub(crate) fn start(
        fs: &Fs,
        notifier: Notifier,
        id: u64,
        (tx, rx): (mpsc::Sender<Msg>, Receiver<Msg>),
    ) -> std::io::Result<Invalidator> {
        let queued = notifier.clone();
        let thread = std::thread::Builder::new()
            .name(format!("fuse-inval-{id}"))
            .spawn(move || run(rx, queued))?;
        let to_thread = tx.clone();
        let sub = fs.subscribe(Box::new(move |c: &Change| {
            match SERVING.with(Cell::get) {
                own if own == id => {}
                0 => send(&notifier, c),
                // A closed channel means the mount is going away.
                _ => drop(to_thread.send(Msg::Change(c.clone()))),
            }
        }));
        Ok(Invalidator {
            fs: fs.clone(),
            sub: Some(sub),
            tx,
            thread: Some(thread),
        })
    }

    /// Unsubscribes; the thread sends what is queued and ends.
    pub(crate) fn stop(&mut self) {
        if let Some(sub) = self.sub.take() {
            self.fs.unsubscribe(sub);
        }
        let _ = self.tx.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Invalidator {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(rx: Receiver<Msg>, notifier: Notifier) {
    let mut seen = HashSet::new();
    let mut stop = false;
    while !stop {
        let Ok(first) = rx.recv() else { break };
        seen.clear();
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(m) => batch.push(m),
                Err(_) => break,
            }
        }
        for m in batch {
            match m {
                Msg::Change(c) => {
                    if seen.insert(c.clone()) {
                        send(&notifier, &c);
                    }
                }
                Msg::Stop => stop = true,
            }
        }
    }
}

/// Tells the kernel to forget what it cached about `c`.
fn send(notifier: &Notifier, c: &Change) {
    let r = match c {
        // Drops cached attributes and every cached page of the inode.
        Change::Inode(ino) => notifier.inval_inode(INodeNo(*ino), 0, -1),
        Change::Entry { parent, name } => {
            notifier.inval_entry(INodeNo(*parent), OsStr::from_bytes(name))
        }
    };
    if let Err(e) = r {
        // ENOTCONN/ENODEV once the mount is gone; nothing to keep fresh.
        tracing::debug!(change = ?c, error = %e, "cache invalidation not delivered");
    }
}
