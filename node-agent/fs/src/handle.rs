//! Open handles: an inode with no links stays until its last handle closes.
//!
//! Counts live in memory (`Inner::open`); a database row in `orphans` marks
//! an unlinked inode kept for its handles, so a crash can't leak it: the next
//! open frees every orphan. An open that serves a live FUSE connection keeps
//! them instead (`OpenOptions::keep_orphans`): the kernel holds them for
//! processes in the mount, and its FORGET frees them
//! ([`Fs::release_orphan`]).

use std::sync::Arc;
use std::time::Duration;

use rusqlite::OptionalExtension;

use crate::fs::{Inner, WriteTxn};
use crate::{Attr, Errno, Fs, Ino, Result, inode};

/// An open inode. While it lives, the inode's data survives `unlink` and
/// `rename` over it; dropping the last handle of an unlinked inode frees it.
pub struct Handle {
    inner: Arc<Inner>,
    ino: Ino,
    /// Commit window of the view that opened it (see `Fs::with_commit_window`).
    window: Duration,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle").field("ino", &self.ino).finish()
    }
}

impl Handle {
    /// The inode this handle keeps open.
    pub fn ino(&self) -> Ino {
        self.ino
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let last = {
            let mut open = self.inner.open.lock();
            match open.get_mut(&self.ino) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    false
                }
                _ => {
                    open.remove(&self.ino);
                    true
                }
            }
        };
        if last && let Err(e) = release_orphan(&self.inner, self.ino, self.window) {
            tracing::error!(
                ino = self.ino,
                error = %e,
                "freeing an unlinked inode failed; it is purged at next open"
            );
        }
    }
}

/// Frees `ino` if it is an orphan nobody holds open any more: no engine
/// handle, and no client from before the open (see `Inner::kept`).
/// Returns whether it was freed.
fn release_orphan(inner: &Inner, ino: Ino, window: Duration) -> Result<bool> {
    let mut t = inner.begin(window)?;
    let is_orphan = t
        .conn()
        .prepare_cached("SELECT 1 FROM orphans WHERE ino = ?1")?
        .query_row([ino as i64], |_| Ok(()))
        .optional()?
        .is_some();
    // A handle opened meanwhile wins.
    if !is_orphan || t.open_count(ino) > 0 || is_kept(inner, ino) {
        return Ok(false);
    }
    inode::free(t.conn(), ino)?;
    t.changed_inode(ino);
    t.commit()?;
    Ok(true)
}

fn is_kept(inner: &Inner, ino: Ino) -> bool {
    inner.kept.lock().contains(&ino)
}

/// Removes one link of inode `ino` inside `t`: with no links left the inode
/// is freed, or kept as an orphan while handles hold it.
pub(crate) fn drop_link(t: &mut WriteTxn<'_>, ino: Ino, is_dir: bool) -> Result<()> {
    let i = inode::get(t.conn(), ino)?;
    let last = is_dir || i.attr.nlink <= 1;
    if !last {
        inode::add_nlink(t.conn(), ino, -1, t.now)?;
        // The name dropped was an extra link: one inode-equivalent back.
        inode::meta_add(t.conn(), "used_inodes", -1)?;
    } else {
        // The counts stay locked until commit; open_inode checks the
        // database under the same lock, so it sees our outcome.
        if t.open_count(ino) > 0 {
            t.conn()
                .prepare_cached("UPDATE inodes SET nlink = 0, ctime = ?2 WHERE ino = ?1")?
                .execute(rusqlite::params![ino as i64, t.now])?;
            t.conn()
                .prepare_cached("INSERT OR IGNORE INTO orphans (ino) VALUES (?1)")?
                .execute([ino as i64])?;
        } else {
            inode::free(t.conn(), ino)?;
        }
    }
    t.changed_inode(ino);
    Ok(())
}

impl Fs {
    /// The outside holder of orphan `ino` let it go: frees an orphan kept
    /// at open ([`crate::OpenOptions::keep_orphans`]) unless an engine
    /// [`Handle`] still holds it (then the last handle's drop frees it).
    /// The FUSE server calls this when the kernel forgets an inode it
    /// holds no handle for: after a take-over, the kernel's references to
    /// files that were unlinked while open, which it forgets when it
    /// evicts them at their last close.
    ///
    /// Returns whether the inode was freed. Anything but a kept orphan is
    /// left alone (`Ok(false)`) without touching the database, so the call
    /// is cheap for the many inodes a new server never saw.
    ///
    /// Errors: `EIO` (or `ENOSPC`) if the freeing transaction fails; the
    /// inode is then freed at the next open without `keep_orphans`.
    pub fn release_orphan(&self, ino: Ino) -> Result<bool> {
        let was_kept = self.inner.kept.lock().remove(&ino);
        if !was_kept {
            return Ok(false);
        }
        release_orphan(&self.inner, ino, self.window)
    }

    /// How many orphans kept at open ([`crate::OpenOptions::keep_orphans`])
    /// wait for [`Fs::release_orphan`].
    pub fn kept_orphans(&self) -> usize {
        self.inner.kept.lock().len()
    }

    /// Resolves `path` (as [`Fs::resolve`]) and opens the inode it names
    /// (as [`Fs::open_inode`]) in one snapshot: a path that exists
    /// throughout never gives `ENOENT` because a rename or replace landed
    /// between the two steps, and the handle holds the inode the path named.
    ///
    /// Errors: as [`Fs::resolve`].
    pub fn open_path(&self, cwd: Ino, path: &[u8], follow_last: bool) -> Result<(Attr, Handle)> {
        // Lock order as in `open_inode`. Holding the counts across the
        // snapshot keeps an unlink from freeing the inode in between (it
        // decides under the same lock).
        let r = self.inner.reader()?;
        let mut open = self.inner.open.lock();
        let attr = r.snapshot(|c| crate::path::resolve_in(c, cwd, path, follow_last))?;
        *open.entry(attr.ino).or_insert(0) += 1;
        let handle = Handle {
            inner: self.inner.clone(),
            ino: attr.ino,
            window: self.window,
        };
        Ok((attr, handle))
    }

    /// Opens inode `ino`: the returned [`Handle`] keeps its data alive after
    /// the last link goes, until the handle is dropped.
    ///
    /// Errors: `ENOENT` if the inode does not exist.
    pub fn open_inode(&self, ino: Ino) -> Result<Handle> {
        // Lock order: the reader first (it may be the writer), then counts.
        let r = self.inner.reader()?;
        let mut open = self.inner.open.lock();
        if inode::find(&r, ino)?.is_none() {
            return Err(Errno::ENOENT.into());
        }
        *open.entry(ino).or_insert(0) += 1;
        Ok(Handle {
            inner: self.inner.clone(),
            ino,
            window: self.window,
        })
    }
}
