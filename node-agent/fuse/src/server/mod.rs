//! The `fuser::Filesystem` implementation over the engine.
//!
//! Requests arrive on several threads at once; every handler is a thin
//! adapter to one or two engine calls (the engine is `Send + Sync` and
//! never holds a global lock across calls: readers use a pool, writers one
//! connection per commit). Permission checks are the kernel's
//! (`default_permissions`); byte-range and `flock` locks are the kernel's
//! too (see `docs/fuse.md`, "Locks").

mod alloc;
mod dir;
mod owner;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use agentcomputer_fs::{
    Attr, Errno, FileKind, Fs, Ino, RenameFlags, Result, SetAttr, TimeSet, XattrFlags,
};
use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, FileHandle, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::convert::{errno, file_attr, file_type, negative_attr, timespec};
use crate::invalidate::{OwnQueue, mark_serving};
use crate::lookups::{Forgot, Lookups};
use crate::options::MountOptions;
use owner::new_inode_owner;

const GEN: Generation = Generation(0);

/// One mount's request handler.
pub(crate) struct Server {
    fs: Fs,
    id: u64,
    opts: MountOptions,
    /// `st_blksize`: the engine's chunk size, so `cp` and stdio use
    /// buffers that fill whole chunks.
    blksize: u32,
    /// Kernel references to inodes, each holding an engine handle.
    lookups: Lookups,
    /// Invalidations of this mount's own kernel cache, sent after replies.
    own: OwnQueue,
    /// The connection was taken over from an earlier server: the kernel
    /// holds references this server never counted.
    resumed: bool,
}

impl Server {
    pub(crate) fn new(fs: Fs, id: u64, opts: MountOptions, own: OwnQueue, resumed: bool) -> Server {
        let blksize = u32::try_from(fs.chunk_size()).unwrap_or(1 << 16);
        Server {
            fs: fs.with_commit_window(opts.commit_window),
            id,
            opts,
            blksize,
            lookups: Lookups::default(),
            own,
            resumed,
        }
    }

    /// Before a request removes the name `name` of `parent` (unlink, or a
    /// rename over it), on a connection taken over: counts the kernel's
    /// reference to the file it names if this server has none. The kernel
    /// sends the request on a dentry it holds (entries stay valid for
    /// `entry_ttl` with no new LOOKUP), possibly one an earlier server
    /// answered, and a process may hold the file open; with the reference
    /// counted, the engine keeps the file as an orphan if this was its last
    /// name, until the kernel's FORGET. Directories hold no data to keep.
    fn hold_target(&self, parent: Ino, name: &OsStr) {
        if !self.resumed {
            return;
        }
        if let Ok(a) = self.fs.lookup(parent, name.as_bytes())
            && a.kind != FileKind::Directory
            && let Err(e) = self.lookups.adopt(&self.fs, a.ino)
        {
            tracing::debug!(ino = a.ino, error = %e, "could not count the kernel's reference");
        }
    }

    /// Called first by every handler: changes this thread makes are
    /// already known to this mount's kernel.
    fn enter(&self) {
        mark_serving(self.id);
    }

    fn attr(&self, a: &Attr) -> fuser::FileAttr {
        let mut attr = file_attr(a, self.blksize);
        if let Some(map) = &self.opts.owner_map {
            attr.uid = map.uid;
            attr.gid = map.gid;
        }
        attr
    }

    /// The owner ids a new inode made by `req` starts from: the caller's,
    /// or the stored ids of an [`crate::OwnerMap`].
    fn creator(&self, req: &Request) -> (u32, u32) {
        match &self.opts.owner_map {
            Some(map) => (map.stored_uid, map.stored_gid),
            None => (req.uid(), req.gid()),
        }
    }

    /// Answers with an entry, counting the kernel's new reference first.
    fn reply_entry(&self, reply: ReplyEntry, r: Result<Attr>) {
        let r = r.and_then(|a| self.lookups.remember(&self.fs, a.ino).map(|()| a));
        match r {
            Ok(a) => reply.entry_with_ttls(
                &self.opts.attr_ttl,
                &self.opts.entry_ttl,
                &self.attr(&a),
                GEN,
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// Creates an inode in `parent` owned by the caller (or by the group of
    /// a set-group-ID parent).
    fn create_node(
        &self,
        req: &Request,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        rdev: u32,
    ) -> Result<Attr> {
        let kind = FileKind::from_mode(mode).ok_or(Errno::EINVAL)?;
        let p = self.fs.getattr(parent)?;
        let is_dir = kind == FileKind::Directory;
        let (uid, gid) = self.creator(req);
        let (owner, perm) = new_inode_owner(&p, uid, gid, mode, is_dir);
        let name = name.as_bytes();
        let made = match kind {
            FileKind::Directory => self.fs.mkdir(parent, name, perm, owner),
            FileKind::Symlink => Err(Errno::EINVAL.into()),
            k => self.fs.mknod(parent, name, k, perm, rdev, owner),
        };
        match made {
            Err(e) if e.errno() == Errno::EEXIST && resent(req) => {
                self.existing(parent, name, kind)
            }
            r => r,
        }
    }

    /// For a resent creation that found its name taken: the entry, when it
    /// is of the kind asked for (the previous server most likely made it
    /// and died before answering), else `EEXIST`.
    fn existing(&self, parent: Ino, name: &[u8], kind: FileKind) -> Result<Attr> {
        match self.fs.lookup(parent, name) {
            Ok(a) if a.kind == kind => Ok(a),
            Ok(_) => Err(Errno::EEXIST.into()),
            Err(e) => Err(e),
        }
    }

    /// For a resent append: whether the previous server applied it already,
    /// judged by the file ending exactly where the kernel expected this
    /// write to end (`offset` is the size it knew) with these very bytes.
    /// A repeated identical append that was not applied ends elsewhere.
    fn appended_already(&self, ino: Ino, offset: u64, data: &[u8]) -> bool {
        let Ok(a) = self.fs.getattr(ino) else {
            return false;
        };
        let len = data.len() as u64;
        if len == 0 || a.size != offset + len {
            return false;
        }
        self.fs
            .read(ino, offset, data.len())
            .is_ok_and(|tail| tail == data)
    }

    /// How the kernel treats a file opened with `flags` (open(2) flags).
    fn open_flags(&self, flags: i32) -> FopenFlags {
        // FLUSH has nothing to do (writes are committed when answered, locks
        // are the kernel's), so close(2) skips it.
        if append_whole(&self.opts, flags) {
            // Through the page cache the kernel sends one write(2) as
            // several WRITE requests whenever it starts inside a page that
            // is not cached (fs/fuse/file.c, fuse_fill_write_pages stops at
            // a partial page that is not uptodate), and each would be
            // appended at the engine's end on its own, letting another
            // runtime's append land in between. Direct I/O sends each
            // write(2) of up to max_write bytes as one request
            // (fuse_direct_io) if its buffer spans at most max_pages pages
            // (256 for a 1 MiB max_write: any buffer up to 1 MiB - 4 KiB,
            // a page-aligned one up to 1 MiB), which `Fs::append` places
            // whole.
            return FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_NOFLUSH;
        }
        // External changes are invalidated explicitly, so cached pages stay
        // valid across opens.
        FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_NOFLUSH
    }

    fn do_setattr(&self, ino: Ino, set: &SetAttr) -> Result<Attr> {
        self.fs.setattr(ino, set)
    }
}

/// The owner change to store for a `chown(2)` asking for `uid`/`gid`. On a
/// mount with an [`crate::OwnerMap`] every inode shows the map's ids, so
/// asking for those changes nothing and any other id is `EPERM` (as on
/// filesystems mounted with `uid=`/`gid=`).
fn owner_change(
    map: Option<&crate::OwnerMap>,
    uid: Option<u32>,
    gid: Option<u32>,
) -> std::result::Result<(Option<u32>, Option<u32>), fuser::Errno> {
    let Some(map) = map else {
        return Ok((uid, gid));
    };
    if uid.is_some_and(|u| u != map.uid) || gid.is_some_and(|g| g != map.gid) {
        return Err(fuser::Errno::EPERM);
    }
    Ok((None, None))
}

/// Whether a file opened with `flags` gets whole appends: written with
/// `O_APPEND` while the writeback cache is off (with it on, the kernel's
/// size is authoritative and appends go through its cache).
/// Whether the kernel sends `req` again after a take-over: its id carries
/// `FUSE_UNIQUE_RESEND` (bit 63; include/uapi/linux/fuse.h, Linux 6.9).
/// The previous server may have applied it before dying unanswered, so
/// the handlers of requests that are not idempotent (append, create,
/// unlink, rename, link) accept the state an applied request leaves, the
/// way an NFS server's duplicate request cache would; a swap
/// (`RENAME_EXCHANGE`) leaves no such state and is looked up in the
/// engine's record of applied swaps instead.
fn resent(req: &Request) -> bool {
    u64::from(req.unique()) & RESEND_BIT != 0
}

/// `FUSE_UNIQUE_RESEND` (include/uapi/linux/fuse.h).
const RESEND_BIT: u64 = 1 << 63;

fn append_whole(opts: &MountOptions, flags: i32) -> bool {
    !opts.writeback_cache
        && flags & libc::O_APPEND != 0
        && flags & libc::O_ACCMODE != libc::O_RDONLY
}

fn time_set(t: TimeOrNow) -> TimeSet {
    match t {
        TimeOrNow::Now => TimeSet::Now,
        TimeOrNow::SpecificTime(t) => TimeSet::At(timespec(t)),
    }
}

fn rename_flags(flags: fuser::RenameFlags) -> std::result::Result<RenameFlags, fuser::Errno> {
    let known = fuser::RenameFlags::RENAME_NOREPLACE | fuser::RenameFlags::RENAME_EXCHANGE;
    if !known.contains(flags) {
        // RENAME_WHITEOUT is for overlay filesystems only.
        return Err(fuser::Errno::EINVAL);
    }
    Ok(RenameFlags {
        noreplace: flags.contains(fuser::RenameFlags::RENAME_NOREPLACE),
        exchange: flags.contains(fuser::RenameFlags::RENAME_EXCHANGE),
    })
}

/// Answers an xattr read: the size when `size` is 0, `ERANGE` when the
/// caller's buffer is too small (getxattr(2)).
fn reply_xattr(reply: ReplyXattr, size: u32, data: &[u8]) {
    if size == 0 {
        reply.size(data.len() as u32);
    } else if data.len() > size as usize {
        reply.error(fuser::Errno::ERANGE);
    } else {
        reply.data(data);
    }
}

impl Filesystem for Server {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let mut wanted = InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_CACHE_SYMLINKS
            | InitFlags::FUSE_ASYNC_DIO
            | InitFlags::FUSE_MAX_PAGES
            // Files opened for appending use direct I/O (`open_flags`);
            // they can still be mapped (Linux 6.6+).
            | InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP;
        if self.opts.writeback_cache {
            wanted |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        for flag in wanted.iter() {
            if config.add_capabilities(flag).is_err() {
                tracing::warn!(?flag, "kernel lacks a FUSE capability");
            }
        }
        let _ = config.set_max_write(self.opts.max_write.max(4096));
        if let Err(max) = config.set_max_readahead(self.opts.max_readahead.max(4096)) {
            let _ = config.set_max_readahead(max);
        }
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        Ok(())
    }

    /// No file of a computer is a device: every ioctl(2) gets `ENOTTY`,
    /// as on a regular file of a local filesystem. `isatty(3)` asks one on
    /// every open stream (each Python `open()`), so this logs at debug only.
    #[allow(clippy::too_many_arguments)]
    fn ioctl(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: fuser::FileHandle,
        _flags: fuser::IoctlFlags,
        cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        tracing::debug!(ino = ino.0, cmd, "ioctl answered ENOTTY");
        reply.error(fuser::Errno::ENOTTY);
    }

    fn destroy(&mut self) {
        self.lookups.clear();
        // The kernel is gone: what it was told is written must be committed.
        if let Err(e) = self.fs.flush() {
            tracing::error!(error = %e, "committing the last requests at unmount failed");
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.enter();
        match self.fs.lookup(parent.0, name.as_bytes()) {
            Err(e) if e.errno() == Errno::ENOENT && !self.opts.negative_ttl.is_zero() => reply
                .entry_with_ttls(
                    &Duration::ZERO,
                    &self.opts.negative_ttl,
                    &negative_attr(),
                    GEN,
                ),
            r => self.reply_entry(reply, r),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.enter();
        match self.lookups.forget(ino.0, nlookup) {
            Forgot::Kept => {}
            // Dropping the last handle of an unlinked inode frees its data.
            Forgot::Last(handle) => drop(handle),
            // A file an earlier server of this connection saw unlinked
            // while open, evicted now at its last close: the engine kept
            // it for the kernel (`OpenOptions::keep_orphans`).
            Forgot::Unknown => match self.fs.release_orphan(ino.0) {
                Ok(true) => tracing::debug!(ino = ino.0, "freed an orphan kept for the kernel"),
                Ok(false) => {}
                Err(e) => tracing::error!(
                    ino = ino.0,
                    error = %e,
                    "freeing an orphan the kernel forgot failed; it is purged at the next ordinary open"
                ),
            },
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.enter();
        match self.fs.getattr(ino.0) {
            Ok(a) => reply.attr(&self.opts.attr_ttl, &self.attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.enter();
        let (uid, gid) = match owner_change(self.opts.owner_map.as_ref(), uid, gid) {
            Ok(ids) => ids,
            Err(e) => return reply.error(e),
        };
        let set = SetAttr {
            perm: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(time_set),
            mtime: mtime.map(time_set),
        };
        match self.do_setattr(ino.0, &set) {
            Ok(a) => reply.attr(&self.opts.attr_ttl, &self.attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.enter();
        match self.fs.readlink(ino.0) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.enter();
        if FileKind::from_mode(mode) == Some(FileKind::Directory) {
            return reply.error(fuser::Errno::EINVAL);
        }
        let r = self.create_node(req, parent.0, name, mode, rdev);
        self.reply_entry(reply, r);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        self.enter();
        let r = self.create_node(req, parent.0, name, libc::S_IFDIR | (mode & 0o7777), 0);
        self.reply_entry(reply, r);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.enter();
        self.hold_target(parent.0, name);
        match self.fs.unlink(parent.0, name.as_bytes()) {
            Ok(()) => reply.ok(),
            Err(e) if e.errno() == Errno::ENOENT && resent(req) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.enter();
        match self.fs.rmdir(parent.0, name.as_bytes()) {
            Ok(()) => reply.ok(),
            Err(e) if e.errno() == Errno::ENOENT && resent(req) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.enter();
        let r = self.fs.getattr(parent.0).and_then(|p| {
            let (uid, gid) = self.creator(req);
            let (owner, _) = new_inode_owner(&p, uid, gid, 0o777, false);
            self.fs.symlink(
                parent.0,
                link_name.as_bytes(),
                target.as_os_str().as_bytes(),
                owner,
            )
        });
        let r = match r {
            Err(e) if e.errno() == Errno::EEXIST && resent(req) => {
                self.existing(parent.0, link_name.as_bytes(), FileKind::Symlink)
            }
            r => r,
        };
        self.reply_entry(reply, r);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.enter();
        let flags = match rename_flags(flags) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        self.hold_target(newparent.0, newname);
        if flags.exchange {
            // Both names exist before and after a swap, so only the
            // engine's record of applied swaps tells a resent one apart.
            let id = u64::from(req.unique()) & !RESEND_BIT;
            return match self.fs.exchange_once(
                parent.0,
                name.as_bytes(),
                newparent.0,
                newname.as_bytes(),
                id,
                resent(req),
            ) {
                Ok(_) => reply.ok(),
                Err(e) => reply.error(errno(&e)),
            };
        }
        match self.fs.rename(
            parent.0,
            name.as_bytes(),
            newparent.0,
            newname.as_bytes(),
            flags,
        ) {
            Ok(()) => reply.ok(),
            // Resent after a take-over: the source is gone and the target
            // name exists, as the dead server's rename left them.
            Err(e)
                if e.errno() == Errno::ENOENT
                    && resent(req)
                    && self.fs.lookup(newparent.0, newname.as_bytes()).is_ok() =>
            {
                reply.ok()
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.enter();
        let r = match self.fs.link(ino.0, newparent.0, newname.as_bytes()) {
            // Resent: the name already links this very inode.
            Err(e) if e.errno() == Errno::EEXIST && resent(req) => {
                match self.fs.lookup(newparent.0, newname.as_bytes()) {
                    Ok(a) if a.ino == ino.0 => Ok(a),
                    _ => Err(e),
                }
            }
            r => r,
        };
        self.reply_entry(reply, r);
    }

    fn open(&self, _req: &Request, _ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        // No per-open state: lookup counts keep unlinked open files alive.
        // The answer only chooses cached or direct I/O (see `open_flags`);
        // that choice is why OPEN (and RELEASE) are served at all.
        reply.opened(FileHandle(0), self.open_flags(flags.0));
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.enter();
        match self.fs.read(ino.0, offset, size as usize) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.enter();
        // Without the writeback cache the kernel places an O_APPEND write at
        // its cached size, which misses what the API, the runtimes or another
        // mount appended since (fs/fuse/file.c, fuse_cache_write_iter refreshes
        // the size only in writeback mode). The engine appends at its own end
        // instead; if that is elsewhere, this mount's cache is dropped once
        // the reply is out. In writeback mode the kernel's size is the truth
        // (its dirty pages are not in the engine yet), and page-cache flushes
        // (FUSE_WRITE_CACHE) carry offsets that are always meant.
        let append = !self.opts.writeback_cache
            && flags.0 & libc::O_APPEND != 0
            && !write_flags.contains(WriteFlags::FUSE_WRITE_CACHE);
        if append {
            if resent(req) && self.appended_already(ino.0, offset, data) {
                reply.written(data.len() as u32);
                return;
            }
            match self.fs.append(ino.0, data) {
                Ok((at, n)) => {
                    reply.written(n as u32);
                    if at != offset {
                        self.own.inode(ino.0);
                    }
                }
                Err(e) => reply.error(errno(&e)),
            }
            return;
        }
        match self.fs.write(ino.0, offset, data) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Writes are committed when answered and locks are the kernel's:
        // nothing to flush. ENOSYS stops FLUSH for good (fs/fuse/file.c,
        // fuse_flush sets no_flush), also for files opened without OPEN.
        reply.error(fuser::Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // Only files made by CREATE are released; they hold nothing.
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.enter();
        match self.fs.fsync(Some(ino.0)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // Listings need no handle. ENOSYS makes the kernel stop sending
        // OPENDIR and RELEASEDIR (two round trips per directory read) and
        // open directories with FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR
        // (fs/fuse/file.c, fuse_file_open): listings stay cached until a
        // change to the directory invalidates them.
        reply.error(fuser::Errno::ENOSYS);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.enter();
        let r = dir::list(&self.fs, ino.0, offset, |e| {
            reply.add(
                INodeNo(e.ino),
                e.offset,
                file_type(e.kind),
                OsStr::from_bytes(e.name),
            )
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.enter();
        let r = dir::list(&self.fs, ino.0, offset, |e| {
            // `.` and `..` give the kernel no reference (fs/fuse/readdir.c,
            // fuse_direntplus_link); every other entry does.
            let counted = e.name != b"." && e.name != b"..";
            let looked_up;
            let a = match e.attr {
                Some(a) => a,
                None => match self.fs.getattr(e.ino) {
                    Ok(a) => {
                        looked_up = a;
                        &looked_up
                    }
                    // Removed since the listing was read: skip it.
                    Err(_) => return false,
                },
            };
            if counted && self.lookups.remember(&self.fs, e.ino).is_err() {
                return false;
            }
            let full = reply.add(
                INodeNo(e.ino),
                e.offset,
                OsStr::from_bytes(e.name),
                &self.opts.entry_ttl,
                &self.attr(a),
                GEN,
            );
            if full && counted {
                // Not sent after all: give the reference back.
                drop(self.lookups.forget(e.ino, 1));
            }
            full
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.enter();
        match self.fs.fsync(Some(ino.0)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.enter();
        match self.fs.statfs() {
            Ok(s) => reply.statfs(
                s.blocks,
                s.blocks_free,
                s.blocks_free,
                s.files,
                s.files_free,
                s.block_size,
                s.name_max,
                s.block_size,
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.enter();
        let flags = XattrFlags {
            create: flags & libc::XATTR_CREATE != 0,
            replace: flags & libc::XATTR_REPLACE != 0,
        };
        match self.fs.setxattr(ino.0, name.as_bytes(), value, flags) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.enter();
        match self.fs.getxattr(ino.0, name.as_bytes()) {
            Ok(v) => reply_xattr(reply, size, &v),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.enter();
        match self.fs.listxattr(ino.0) {
            Ok(names) => {
                let mut buf = Vec::new();
                for n in names {
                    buf.extend_from_slice(&n);
                    buf.push(0);
                }
                reply_xattr(reply, size, &buf)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.enter();
        match self.fs.removexattr(ino.0, name.as_bytes()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // Only reached without default_permissions; the kernel checks modes.
        self.enter();
        match self.fs.getattr(ino.0) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.enter();
        let mode = libc::S_IFREG | (mode & 0o7777);
        let made = match self.create_node(req, parent.0, name, mode, 0) {
            // The kernel believed the name absent (a stale negative entry):
            // without O_EXCL, open what is there.
            Err(e) if e.errno() == Errno::EEXIST && (flags & libc::O_EXCL == 0 || resent(req)) => {
                self.fs
                    .lookup(parent.0, name.as_bytes())
                    .and_then(|a| match a.kind {
                        FileKind::Directory => Err(Errno::EISDIR.into()),
                        _ => Ok(a),
                    })
            }
            r => r,
        };
        let r = made.and_then(|a| self.lookups.remember(&self.fs, a.ino).map(|()| a));
        match r {
            Ok(a) => reply.created(
                &self.opts.entry_ttl,
                &self.attr(&a),
                GEN,
                FileHandle(0),
                self.open_flags(flags),
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.enter();
        match alloc::fallocate(&self.fs, ino.0, offset, length, mode) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        self.enter();
        match alloc::copy_range(&self.fs, ino_in.0, offset_in, ino_out.0, offset_out, len) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_changes_on_a_mapped_mount_keep_the_stored_owner() {
        let map = crate::OwnerMap {
            uid: 0,
            gid: 0,
            stored_uid: 1000,
            stored_gid: 1000,
        };
        assert_eq!(owner_change(None, Some(5), Some(6)), Ok((Some(5), Some(6))));
        assert_eq!(owner_change(Some(&map), Some(0), Some(0)), Ok((None, None)));
        assert_eq!(owner_change(Some(&map), None, None), Ok((None, None)));
        assert_eq!(
            owner_change(Some(&map), Some(1000), None),
            Err(fuser::Errno::EPERM)
        );
        assert_eq!(
            owner_change(Some(&map), None, Some(7)),
            Err(fuser::Errno::EPERM)
        );
    }
}
