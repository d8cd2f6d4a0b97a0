//! Kernel inode references, each backed by an engine [`Handle`].
//!
//! Every entry reply (lookup, create, mknod, mkdir, symlink, link,
//! readdirplus) gives the kernel one more reference to an inode, and
//! FORGET gives them back (fuse_lowlevel.h, "lookup count"). While the
//! kernel holds a reference it may use the inode, in particular for files
//! a process still has open or mapped after they were unlinked. So the
//! mount keeps one engine handle per referenced inode: the engine keeps an
//! unlinked inode's data until FORGET, exactly as long as the kernel can
//! still read it. This replaces per-open handles, so the server can let
//! the kernel open files without asking it (no OPEN or RELEASE round
//! trips).
//!
//! A server that took a live connection over starts with no counts while
//! the kernel keeps its references. Inodes that are still linked are
//! counted again from their next lookup; files unlinked while open before
//! the take-over cannot be looked up again, and the engine keeps them for
//! the kernel instead (`OpenOptions::keep_orphans`) until their FORGET
//! comes (see [`Forgot::Unknown`]).

use parking_lot::Mutex;
use std::collections::HashMap;

use agentcomputer_fs::{Fs, Handle, Ino, ROOT_INO, Result};

const SHARDS: usize = 16;

/// Lookup counts of one mount, sharded by inode number so concurrent
/// requests rarely meet on a lock.
pub(crate) struct Lookups {
    shards: Vec<Mutex<HashMap<Ino, (u64, Handle)>>>,
}

impl Default for Lookups {
    fn default() -> Self {
        Lookups {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }
}

/// What a FORGET did to the counts.
pub(crate) enum Forgot {
    /// References remain.
    Kept,
    /// The last reference went: the engine handle, to drop outside the lock.
    Last(Handle),
    /// This server never counted a reference to the inode: the kernel got
    /// it from an earlier server of the same connection (or the inode is
    /// the root). If it is an orphan the engine kept at open, the kernel
    /// has just evicted it after its last close (fs/fuse/inode.c,
    /// `fuse_evict_inode` queues one FORGET with the inode's whole lookup
    /// count), so it can be freed (`Fs::release_orphan`).
    Unknown,
}

impl Lookups {
    fn shard(&self, ino: Ino) -> parking_lot::MutexGuard<'_, HashMap<Ino, (u64, Handle)>> {
        self.shards[(ino as usize) % SHARDS].lock()
    }

    /// Counts one more kernel reference to `ino`, opening an engine handle
    /// for the first. The root is never forgotten and needs none.
    ///
    /// Errors: `ENOENT` if the inode is already gone (a concurrent removal).
    pub(crate) fn remember(&self, fs: &Fs, ino: Ino) -> Result<()> {
        if ino == ROOT_INO {
            return Ok(());
        }
        let mut shard = self.shard(ino);
        if let Some((n, _)) = shard.get_mut(&ino) {
            *n += 1;
            return Ok(());
        }
        let h = fs.open_inode(ino)?;
        shard.insert(ino, (1, h));
        Ok(())
    }

    /// Counts one reference to `ino` if none is counted: the kernel holds
    /// one this server did not count, from an earlier server of a
    /// connection taken over (see `Server::hold_target`).
    ///
    /// Errors: `ENOENT` if the inode is gone.
    pub(crate) fn adopt(&self, fs: &Fs, ino: Ino) -> Result<()> {
        if ino == ROOT_INO {
            return Ok(());
        }
        let mut shard = self.shard(ino);
        if shard.contains_key(&ino) {
            return Ok(());
        }
        let h = fs.open_inode(ino)?;
        shard.insert(ino, (1, h));
        Ok(())
    }

    /// Takes back `n` references; the last one returns the engine handle,
    /// which the caller drops outside the lock (dropping the last handle
    /// of an unlinked inode writes to the database).
    pub(crate) fn forget(&self, ino: Ino, n: u64) -> Forgot {
        let mut shard = self.shard(ino);
        let Some((count, _)) = shard.get_mut(&ino) else {
            return Forgot::Unknown;
        };
        *count = count.saturating_sub(n);
        if *count > 0 {
            return Forgot::Kept;
        }
        match shard.remove(&ino) {
            Some((_, h)) => Forgot::Last(h),
            None => Forgot::Unknown,
        }
    }

    /// Drops every handle (the connection ended).
    pub(crate) fn clear(&self) {
        for s in &self.shards {
            let all: Vec<(u64, Handle)> = s.lock().drain().map(|(_, v)| v).collect();
            drop(all);
        }
    }

    /// Inodes the kernel holds references to (for tests and metrics).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentcomputer_fs::{FileKind, Limits, Owner};

    #[test]
    fn unlinked_inode_lives_until_the_last_reference_is_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Fs::create(&dir.path().join("db"), Limits::default()).unwrap();
        let a = fs
            .mknod(ROOT_INO, b"f", FileKind::RegularFile, 0o644, 0, Owner::ROOT)
            .unwrap();
        fs.write(a.ino, 0, b"data").unwrap();
        let l = Lookups::default();
        l.remember(&fs, a.ino).unwrap();
        l.remember(&fs, a.ino).unwrap();
        l.remember(&fs, ROOT_INO).unwrap();
        assert_eq!(l.len(), 1);
        fs.unlink(ROOT_INO, b"f").unwrap();
        assert!(matches!(l.forget(a.ino, 1), Forgot::Kept));
        assert_eq!(fs.read(a.ino, 0, 10).unwrap(), b"data");
        let Forgot::Last(h) = l.forget(a.ino, 1) else {
            panic!("the last reference returns the handle")
        };
        drop(h);
        assert!(fs.getattr(a.ino).is_err(), "freed with the last reference");
        assert!(matches!(l.forget(a.ino, 1), Forgot::Unknown));
        assert!(matches!(l.forget(ROOT_INO, 1), Forgot::Unknown));
        assert!(fs.check().unwrap().is_empty());
    }
}
