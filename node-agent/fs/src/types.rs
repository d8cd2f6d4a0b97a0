//! Plain data types shared by the engine's callers.

/// An inode number. The root directory is [`ROOT_INO`].
pub type Ino = u64;

/// Inode number of the root directory (as in FUSE, `FUSE_ROOT_ID`).
pub const ROOT_INO: Ino = 1;

/// Longest name of one directory entry, in bytes (Linux `NAME_MAX`).
pub const NAME_MAX: usize = 255;

/// Longest path accepted, in bytes including the terminating NUL (Linux `PATH_MAX`).
pub const PATH_MAX: usize = 4096;

/// Symlinks followed during one resolution before `ELOOP` (Linux `MAXSYMLINKS`).
pub const MAX_SYMLINK_HOPS: usize = 40;

/// The kind of an inode; mirrors the `S_IFMT` bits of `st_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// `S_IFREG`: content in chunks.
    RegularFile,
    /// `S_IFDIR`: entries, no content.
    Directory,
    /// `S_IFLNK`: the target path is its content.
    Symlink,
    /// `S_IFIFO`: a FIFO's inode only; no data passes through the engine.
    NamedPipe,
    /// `S_IFCHR`: a character device's inode, with its `rdev`.
    CharDevice,
    /// `S_IFBLK`: a block device's inode, with its `rdev`.
    BlockDevice,
    /// `S_IFSOCK`: a socket's inode only.
    Socket,
}

impl FileKind {
    /// The `S_IFMT` bits of this kind (for example `0o100000` for a regular file).
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::RegularFile => libc::S_IFREG,
            FileKind::Directory => libc::S_IFDIR,
            FileKind::Symlink => libc::S_IFLNK,
            FileKind::NamedPipe => libc::S_IFIFO,
            FileKind::CharDevice => libc::S_IFCHR,
            FileKind::BlockDevice => libc::S_IFBLK,
            FileKind::Socket => libc::S_IFSOCK,
        }
    }

    /// The kind encoded in the `S_IFMT` bits of `mode`, if any.
    pub fn from_mode(mode: u32) -> Option<FileKind> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => FileKind::RegularFile,
            libc::S_IFDIR => FileKind::Directory,
            libc::S_IFLNK => FileKind::Symlink,
            libc::S_IFIFO => FileKind::NamedPipe,
            libc::S_IFCHR => FileKind::CharDevice,
            libc::S_IFBLK => FileKind::BlockDevice,
            libc::S_IFSOCK => FileKind::Socket,
            _ => return None,
        })
    }
}

/// A point in time as seconds and nanoseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timespec {
    /// Whole seconds since the epoch (negative before 1970).
    pub sec: i64,
    /// 0..=999_999_999
    pub nsec: u32,
}

impl Timespec {
    /// The current wall-clock time.
    pub fn now() -> Timespec {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Timespec {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos(),
        }
    }

    /// Nanoseconds since the epoch, the form stored in the database.
    pub fn as_nanos(self) -> i64 {
        self.sec
            .saturating_mul(1_000_000_000)
            .saturating_add(self.nsec as i64)
    }

    /// Inverse of [`Timespec::as_nanos`].
    pub fn from_nanos(ns: i64) -> Timespec {
        Timespec {
            sec: ns.div_euclid(1_000_000_000),
            nsec: ns.rem_euclid(1_000_000_000) as u32,
        }
    }
}

/// What identifies one version of a file's content: every write,
/// truncate or allocation of the file sets a new ctime (and `utimensat`
/// cannot set ctime), so two reads that see the same `DataVersion` of an
/// inode read the same bytes. Returned by [`crate::Fs::read_versioned`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataVersion {
    /// Size in bytes.
    pub size: u64,
    /// Last content change, as `utimensat` may have set it.
    pub mtime: Timespec,
    /// Last change of content or attributes, set by the engine only.
    pub ctime: Timespec,
}

impl DataVersion {
    /// The version `attr` describes.
    pub fn of(attr: &Attr) -> DataVersion {
        DataVersion {
            size: attr.size,
            mtime: attr.mtime,
            ctime: attr.ctime,
        }
    }
}

/// The attributes of one inode, as `stat(2)` reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    /// The inode number (`st_ino`); the root directory is 1.
    pub ino: Ino,
    /// The file type (the `S_IFMT` bits of `st_mode`).
    pub kind: FileKind,
    /// Permission bits only (`0o7777`), without the `S_IFMT` bits.
    pub perm: u32,
    /// Hard links to the inode (`st_nlink`; a directory has 2 plus one per
    /// subdirectory).
    pub nlink: u32,
    /// Owning user id (`st_uid`).
    pub uid: u32,
    /// Owning group id (`st_gid`).
    pub gid: u32,
    /// Size in bytes (for a symlink, the target's length).
    pub size: u64,
    /// Bytes actually stored, counted in 512-byte blocks as `st_blocks` does.
    pub blocks: u64,
    /// Last access (`st_atime`).
    pub atime: Timespec,
    /// Last content change (`st_mtime`).
    pub mtime: Timespec,
    /// Last change of content or attributes (`st_ctime`).
    pub ctime: Timespec,
    /// Device number for character and block devices, else 0.
    pub rdev: u32,
}

impl Attr {
    /// `st_mode`: the kind bits and the permission bits together.
    pub fn mode(&self) -> u32 {
        self.kind.mode_bits() | self.perm
    }
}

/// How a time attribute is changed by [`SetAttr`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeSet {
    /// The current time (`UTIME_NOW`).
    Now,
    /// This time exactly.
    At(Timespec),
}

/// The attributes to change in one `setattr` call; `None` leaves a field alone.
#[derive(Debug, Clone, Default)]
pub struct SetAttr {
    /// Permission bits (`0o7777`).
    pub perm: Option<u32>,
    /// New owning user id (`chown`).
    pub uid: Option<u32>,
    /// New owning group id (`chown`).
    pub gid: Option<u32>,
    /// New size: shrinking drops whole chunks past the end and zeroes the
    /// tail of the last one; growing makes a hole.
    pub size: Option<u64>,
    /// New access time (`utimensat`).
    pub atime: Option<TimeSet>,
    /// New modification time (`utimensat`).
    pub mtime: Option<TimeSet>,
}

/// Who performs an operation: new inodes get this owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// The user id new inodes get.
    pub uid: u32,
    /// The group id new inodes get.
    pub gid: u32,
}

impl Owner {
    /// uid 0, gid 0.
    pub const ROOT: Owner = Owner { uid: 0, gid: 0 };
}

/// One directory entry as returned by `readdir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The inode the entry names.
    pub ino: Ino,
    /// The entry's name: raw bytes, never containing `/` or NUL.
    pub name: Vec<u8>,
    /// That inode's type (`d_type`).
    pub kind: FileKind,
    /// Opaque cursor: pass it back to `readdir` to continue after this entry.
    pub cookie: u64,
}

/// Flags of `rename` (Linux `renameat2(2)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RenameFlags {
    /// `RENAME_NOREPLACE`: fail with `EEXIST` if the target exists.
    pub noreplace: bool,
    /// `RENAME_EXCHANGE`: atomically swap source and target (both must exist).
    pub exchange: bool,
}

/// Filesystem-wide counters, as `statfs(2)` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFs {
    /// Block size used for the counts below, in bytes.
    pub block_size: u32,
    /// Quota in blocks.
    pub blocks: u64,
    /// Free blocks (quota minus used).
    pub blocks_free: u64,
    /// Inode limit.
    pub files: u64,
    /// Free inodes.
    pub files_free: u64,
    /// Bytes counted against the byte quota: content stored in chunks
    /// (holes are free), xattr names and values, symlink targets.
    pub used_bytes: u64,
    /// Inode-equivalents in use: every inode, plus one for each hard link
    /// past an inode's first name.
    pub used_inodes: u64,
    /// Longest name, in bytes.
    pub name_max: u32,
}

/// Settings of a computer's filesystem, given at create and open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Quota on stored file bytes; writes past it fail with `ENOSPC`.
    pub max_bytes: u64,
    /// Quota on the number of inodes; creates past it fail with `ENOSPC`.
    pub max_inodes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: 10 * 1024 * 1024 * 1024,
            max_inodes: 1_000_000,
        }
    }
}

/// Quota bytes per inode-equivalent: the inode quota in force is at most
/// `max_bytes / BYTES_PER_INODE` (but at least [`MIN_INODE_LIMIT`]), as
/// `mke2fs` derives an ext4 inode count from the size (its default ratio is
/// 16 KiB). Every inode and every extra hard link is one inode-equivalent;
/// its host cost (inode row, directory entry with a name of up to 255
/// bytes, index cells) is bounded by this ratio instead of being counted
/// byte by byte (docs/engine.md, "What the host stores").
pub const BYTES_PER_INODE: u64 = 4096;
/// Inode-equivalents allowed however small the byte quota.
pub const MIN_INODE_LIMIT: u64 = 16_384;
/// Smallest cap on a file's logical size, in bytes (1 GiB): a file may be
/// as large as the byte quota or this, whichever is larger, never more
/// than [`crate::MAX_FILE_SIZE`].
pub const MIN_FILE_SIZE_LIMIT: u64 = 1 << 30;

impl Limits {
    /// The inode quota in force: `max_inodes`, but at most `max_bytes /
    /// BYTES_PER_INODE` and at least [`MIN_INODE_LIMIT`] (never more than
    /// `max_inodes`). `statfs` reports it as `files`.
    pub fn inode_limit(&self) -> u64 {
        let by_bytes = (self.max_bytes / BYTES_PER_INODE).max(MIN_INODE_LIMIT);
        self.max_inodes.min(by_bytes)
    }

    /// The largest logical size of one file, in bytes: the byte quota, at
    /// least [`MIN_FILE_SIZE_LIMIT`], at most [`crate::MAX_FILE_SIZE`].
    /// Holes cost no quota, so this caps how much a sparse file can make
    /// its readers scan; writes and truncates past it fail with `EFBIG`.
    pub fn file_size_limit(&self) -> u64 {
        self.max_bytes
            .clamp(MIN_FILE_SIZE_LIMIT, crate::MAX_FILE_SIZE)
    }
}
