//! The same null filesystem behind both transports: a root directory that
//! holds one file `f` and answers every other name with `ENOENT`, with no
//! entry, attribute or negative caching, so each `lstat` of a name is one
//! LOOKUP round trip and the handler costs next to nothing.

use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, SystemTime};

const NO_CACHE: Duration = Duration::ZERO;
const FILE_INO: u64 = 2;

/// `/dev/fuse` through fuser 0.18 (blocking reads, `threads` request
/// threads, each on a cloned descriptor), mounted with `mount(2)`.
pub(crate) mod dev_fuse {
    use super::*;
    use fuser::{
        Config, Errno, FileAttr, FileHandle, FileType, Filesystem, Generation, INodeNo, InitFlags,
        KernelConfig, MountOption, ReplyAttr, ReplyEntry, Request, Session,
    };

    struct Null;

    fn attr(ino: u64) -> FileAttr {
        let dir = ino == fuser::INodeNo::ROOT.0;
        FileAttr {
            ino: INodeNo(ino),
            size: 0,
            blocks: 0,
            atime: SystemTime::UNIX_EPOCH,
            mtime: SystemTime::UNIX_EPOCH,
            ctime: SystemTime::UNIX_EPOCH,
            crtime: SystemTime::UNIX_EPOCH,
            kind: if dir {
                FileType::Directory
            } else {
                FileType::RegularFile
            },
            perm: 0o755,
            nlink: 1 + u32::from(dir),
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    impl Filesystem for Null {
        fn init(&mut self, _: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
            // As the node agent's server asks: lookups in one directory run
            // in parallel.
            let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
            Ok(())
        }

        fn lookup(&self, _: &Request, _: INodeNo, name: &OsStr, reply: ReplyEntry) {
            if name == "f" {
                reply.entry(&NO_CACHE, &attr(FILE_INO), Generation(0));
            } else {
                reply.error(Errno::ENOENT);
            }
        }

        fn getattr(&self, _: &Request, ino: INodeNo, _: Option<FileHandle>, reply: ReplyAttr) {
            reply.attr(&NO_CACHE, &attr(ino.0));
        }
    }

    /// Serves `dir` until it is unmounted.
    pub(crate) fn serve(dir: &Path, threads: usize) -> std::io::Result<()> {
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName("fuse-transport".into()),
            MountOption::DefaultPermissions,
        ];
        config.n_threads = Some(threads);
        config.clone_fd = threads > 1;
        Session::new(Null, dir, &config)?.run()
    }
}

/// FUSE over io_uring (kernel 6.14+, `fuse.enable_uring=1`) through
/// fractal-fuse: one ring per CPU, each served by a thread pinned to that
/// CPU, so a request is answered on the CPU that sent it
/// (Documentation/filesystems/fuse-io-uring.rst).
pub(crate) mod io_uring {
    use super::*;
    use fractal_fuse::abi::FUSE_ROOT_ID;
    use fractal_fuse::{
        ENOENT, FileAttr, FileHandleId, FileType, Filesystem, FsResult, InodeId, MountOptions,
        ReplyAttr, ReplyEntry, Request, Session, Timestamp,
    };

    struct Null;

    fn attr(ino: u64) -> FileAttr {
        let dir = ino == FUSE_ROOT_ID;
        let kind = if dir {
            FileType::Directory
        } else {
            FileType::RegularFile
        };
        FileAttr {
            ino,
            size: 0,
            blocks: 0,
            atime: Timestamp::new(0, 0),
            mtime: Timestamp::new(0, 0),
            ctime: Timestamp::new(0, 0),
            mode: kind.to_mode() | 0o755,
            nlink: 1 + u32::from(dir),
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
        }
    }

    impl Filesystem for Null {
        async fn lookup(&self, _: Request, _: InodeId, name: &OsStr) -> FsResult<ReplyEntry> {
            if name == "f" {
                Ok(ReplyEntry {
                    ttl: NO_CACHE,
                    attr: attr(FILE_INO),
                    generation: 0,
                })
            } else {
                Err(ENOENT)
            }
        }

        async fn getattr(
            &self,
            _: Request,
            ino: InodeId,
            _: Option<FileHandleId>,
            _: u32,
        ) -> FsResult<ReplyAttr> {
            Ok(ReplyAttr {
                ttl: NO_CACHE,
                attr: attr(ino.get()),
            })
        }
    }

    /// Serves `dir` until it is unmounted; fails if the kernel refuses
    /// io_uring for FUSE.
    pub(crate) fn serve(dir: &Path) -> std::io::Result<()> {
        let opts = MountOptions::new()
            .fs_name("fuse-transport")
            .default_permissions(true);
        Session::new(dir.to_path_buf(), opts)?.run(Null)
    }
}
