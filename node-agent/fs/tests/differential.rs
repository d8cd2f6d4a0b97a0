//! Differential test: random operation sequences applied to the engine and
//! to a real directory on the local disk, comparing every result (values
//! and errno names) and, at the end, the whole trees.
//!
//! The real side resolves paths with `openat2(RESOLVE_IN_ROOT)`, which gives
//! exactly the engine's rules: `..` at the root stays there and absolute
//! symlinks resolve from the root. We run as root, so permission-denied
//! cases never arise and are not compared.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};

use agentcomputer_fs::{
    Attr, Errno, FileKind, Fs, Ino, Limits, Owner, ROOT_INO, RenameFlags, SetAttr, Tuning,
    errno_name,
};
use nix::dir::Dir;
use nix::fcntl::{AtFlags, OFlag, OpenHow, ResolveFlag, openat2, readlinkat, renameat2};
use nix::sys::stat::{FileStat, Mode, SFlag, fchmod, fstat, mkdirat, mknodat};
use nix::sys::uio::{pread, pwrite};
use nix::unistd::{UnlinkatFlags, ftruncate, linkat, symlinkat, unlinkat};
use proptest::prelude::*;

/// What one operation returned, in a form both sides can produce.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Out {
    Unit,
    Bytes(Vec<u8>),
    Stat {
        kind: &'static str,
        perm: u32,
        nlink: u32,
        /// Not compared for directories (ext4 reports block sizes).
        size: Option<u64>,
    },
    Names(Vec<(Vec<u8>, &'static str)>),
}

type Res = Result<Out, &'static str>;

#[derive(Debug, Clone)]
enum Op {
    Mknod(String, u32),
    Mkdir(String, u32),
    Write(String, u64, usize, u8),
    Truncate(String, u64),
    Rename(String, String, u8),
    Link(String, String),
    Unlink(String),
    Rmdir(String),
    Symlink(String, String),
    Chmod(String, u32),
    Stat(String, bool),
    ReadDir(String),
    Read(String, u64, usize),
    Readlink(String),
}

fn kind_name(k: FileKind) -> &'static str {
    match k {
        FileKind::RegularFile => "file",
        FileKind::Directory => "dir",
        FileKind::Symlink => "symlink",
        FileKind::NamedPipe => "fifo",
        FileKind::CharDevice => "chr",
        FileKind::BlockDevice => "blk",
        FileKind::Socket => "sock",
    }
}

fn content(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i % 251) as u8))
        .collect()
}

// ---------------------------------------------------------------- engine --

struct Engine {
    fs: Fs,
}

impl Engine {
    fn err(e: agentcomputer_fs::Error) -> &'static str {
        e.errno_name()
    }

    fn stat_of(a: &Attr) -> Out {
        Out::Stat {
            kind: kind_name(a.kind),
            perm: a.perm,
            nlink: a.nlink,
            size: (a.kind != FileKind::Directory).then_some(a.size),
        }
    }

    fn file(&self, p: &str) -> Result<Ino, &'static str> {
        Ok(self
            .fs
            .resolve(ROOT_INO, p.as_bytes(), true)
            .map_err(Self::err)?
            .ino)
    }

    fn apply(&self, op: &Op) -> Res {
        let fs = &self.fs;
        let parent = |p: &str| fs.resolve_parent(ROOT_INO, p.as_bytes()).map_err(Self::err);
        let r: Result<Out, agentcomputer_fs::Error> = match op {
            Op::Mknod(p, perm) => {
                let (d, n) = parent(p)?;
                fs.mknod(d, &n, FileKind::RegularFile, *perm, 0, Owner::ROOT)
                    .map(|_| Out::Unit)
            }
            Op::Mkdir(p, perm) => {
                let (d, n) = parent(p)?;
                fs.mkdir(d, &n, *perm, Owner::ROOT).map(|_| Out::Unit)
            }
            Op::Write(p, off, len, seed) => {
                let ino = self.file(p)?;
                fs.write(ino, *off, &content(*len, *seed))
                    .map(|n| Out::Bytes(n.to_le_bytes().to_vec()))
            }
            Op::Truncate(p, len) => {
                let ino = self.file(p)?;
                let set = SetAttr {
                    size: Some(*len),
                    ..Default::default()
                };
                fs.setattr(ino, &set).map(|_| Out::Unit)
            }
            Op::Rename(a, b, flags) => {
                let (da, na) = parent(a)?;
                let (db, nb) = parent(b)?;
                let flags = RenameFlags {
                    noreplace: flags & 1 != 0,
                    exchange: flags & 2 != 0,
                };
                fs.rename(da, &na, db, &nb, flags).map(|_| Out::Unit)
            }
            Op::Link(a, b) => {
                let src = fs
                    .resolve(ROOT_INO, a.as_bytes(), false)
                    .map_err(Self::err)?;
                let (db, nb) = parent(b)?;
                fs.link(src.ino, db, &nb).map(|_| Out::Unit)
            }
            Op::Unlink(p) => {
                let (d, n) = parent(p)?;
                fs.unlink(d, &n).map(|_| Out::Unit)
            }
            Op::Rmdir(p) => {
                let (d, n) = parent(p)?;
                fs.rmdir(d, &n).map(|_| Out::Unit)
            }
            Op::Symlink(target, p) => {
                let (d, n) = parent(p)?;
                fs.symlink(d, &n, target.as_bytes(), Owner::ROOT)
                    .map(|_| Out::Unit)
            }
            Op::Chmod(p, perm) => {
                let ino = self.file(p)?;
                let set = SetAttr {
                    perm: Some(*perm),
                    ..Default::default()
                };
                fs.setattr(ino, &set).map(|_| Out::Unit)
            }
            Op::Stat(p, follow) => fs
                .resolve(ROOT_INO, p.as_bytes(), *follow)
                .map(|a| Self::stat_of(&a)),
            Op::ReadDir(p) => {
                let ino = self.file(p)?;
                self.list(ino)
            }
            Op::Read(p, off, len) => {
                let ino = self.file(p)?;
                fs.read(ino, *off, *len).map(Out::Bytes)
            }
            Op::Readlink(p) => {
                let a = fs
                    .resolve(ROOT_INO, p.as_bytes(), false)
                    .map_err(Self::err)?;
                fs.readlink(a.ino).map(Out::Bytes)
            }
        };
        r.map_err(Self::err)
    }

    /// Lists a directory in pages of 2 to exercise cookies.
    fn list(&self, dir: Ino) -> Result<Out, agentcomputer_fs::Error> {
        let mut names = Vec::new();
        let mut cookie = 0;
        loop {
            let page = self.fs.readdir(dir, cookie, 2)?;
            let Some(last) = page.last() else { break };
            cookie = last.cookie;
            names.extend(page.into_iter().map(|e| (e.name, kind_name(e.kind))));
        }
        names.sort();
        Ok(Out::Names(names))
    }

    fn tree(&self) -> BTreeMap<Vec<u8>, Out> {
        let mut out = BTreeMap::new();
        self.walk(ROOT_INO, b"", &mut out);
        out
    }

    fn walk(&self, dir: Ino, prefix: &[u8], out: &mut BTreeMap<Vec<u8>, Out>) {
        let a = self.fs.getattr(dir).unwrap();
        out.insert(prefix.to_vec(), Self::stat_of(&a));
        out.insert([prefix, b"/"].concat(), self.list(dir).unwrap());
        for e in self.fs.readdir(dir, 0, usize::MAX).unwrap() {
            let path = [prefix, b"/", &e.name].concat();
            let a = self.fs.getattr(e.ino).unwrap();
            match a.kind {
                FileKind::Directory => self.walk(e.ino, &path, out),
                kind => {
                    out.insert(path.clone(), Self::stat_of(&a));
                    let body = if kind == FileKind::Symlink {
                        self.fs.readlink(e.ino).unwrap()
                    } else {
                        self.fs.read(e.ino, 0, usize::MAX).unwrap()
                    };
                    out.insert([&path[..], b"#"].concat(), Out::Bytes(body));
                }
            }
        }
    }
}

// ------------------------------------------------------------ real disk --

struct Real {
    root: OwnedFd,
}

fn en(e: Errno) -> &'static str {
    errno_name(e)
}

impl Real {
    fn open(&self, p: &str, flags: OFlag) -> Result<OwnedFd, &'static str> {
        let how = OpenHow::new()
            .flags(flags | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_IN_ROOT);
        openat2(self.root.as_fd(), p, how).map_err(en)
    }

    fn parent(&self, p: &str) -> Result<(OwnedFd, String), &'static str> {
        let (dir, name) = match p.rfind('/') {
            Some(0) => ("/", &p[1..]),
            Some(i) => (&p[..i], &p[i + 1..]),
            None => (".", p),
        };
        Ok((
            self.open(dir, OFlag::O_PATH | OFlag::O_DIRECTORY)?,
            name.to_string(),
        ))
    }

    fn stat_of(st: &FileStat) -> Out {
        let kind = match SFlag::from_bits_truncate(st.st_mode & libc::S_IFMT) {
            SFlag::S_IFREG => "file",
            SFlag::S_IFDIR => "dir",
            SFlag::S_IFLNK => "symlink",
            SFlag::S_IFIFO => "fifo",
            SFlag::S_IFCHR => "chr",
            SFlag::S_IFBLK => "blk",
            _ => "sock",
        };
        Out::Stat {
            kind,
            perm: st.st_mode & 0o7777,
            nlink: st.st_nlink as u32,
            size: (kind != "dir").then_some(st.st_size as u64),
        }
    }

    fn read_fd(fd: &OwnedFd, off: u64, len: usize) -> Result<Vec<u8>, &'static str> {
        let mut buf = vec![0u8; len.min(1 << 24)];
        let mut got = 0;
        // At least one call: Linux answers EISDIR for a directory even when
        // asked for 0 bytes, and so must the oracle.
        loop {
            let n = pread(fd.as_fd(), &mut buf[got..], (off + got as u64) as i64).map_err(en)?;
            got += n;
            if n == 0 || got == buf.len() {
                break;
            }
        }
        buf.truncate(got);
        Ok(buf)
    }

    fn apply(&self, op: &Op) -> Res {
        let unit = |r: nix::Result<()>| r.map(|()| Out::Unit).map_err(en);
        match op {
            Op::Mknod(p, perm) => {
                let (d, n) = self.parent(p)?;
                unit(mknodat(
                    d.as_fd(),
                    n.as_str(),
                    SFlag::S_IFREG,
                    Mode::from_bits_truncate(*perm),
                    0,
                ))
            }
            Op::Mkdir(p, perm) => {
                let (d, n) = self.parent(p)?;
                unit(mkdirat(
                    d.as_fd(),
                    n.as_str(),
                    Mode::from_bits_truncate(*perm),
                ))
            }
            Op::Write(p, off, len, seed) => {
                let fd = self.open(p, OFlag::O_WRONLY)?;
                let data = content(*len, *seed);
                let n = pwrite(fd.as_fd(), &data, *off as i64).map_err(en)?;
                Ok(Out::Bytes(n.to_le_bytes().to_vec()))
            }
            Op::Truncate(p, len) => {
                let fd = self.open(p, OFlag::O_WRONLY)?;
                unit(ftruncate(fd.as_fd(), *len as i64))
            }
            Op::Rename(a, b, flags) => {
                let (da, na) = self.parent(a)?;
                let (db, nb) = self.parent(b)?;
                let mut f = nix::fcntl::RenameFlags::empty();
                if flags & 1 != 0 {
                    f |= nix::fcntl::RenameFlags::RENAME_NOREPLACE;
                }
                if flags & 2 != 0 {
                    f |= nix::fcntl::RenameFlags::RENAME_EXCHANGE;
                }
                unit(renameat2(
                    da.as_fd(),
                    na.as_str(),
                    db.as_fd(),
                    nb.as_str(),
                    f,
                ))
            }
            Op::Link(a, b) => {
                let src = self.open(a, OFlag::O_PATH | OFlag::O_NOFOLLOW)?;
                let (db, nb) = self.parent(b)?;
                unit(linkat(
                    src.as_fd(),
                    "",
                    db.as_fd(),
                    nb.as_str(),
                    AtFlags::AT_EMPTY_PATH,
                ))
            }
            Op::Unlink(p) => {
                let (d, n) = self.parent(p)?;
                unit(unlinkat(d.as_fd(), n.as_str(), UnlinkatFlags::NoRemoveDir))
            }
            Op::Rmdir(p) => {
                let (d, n) = self.parent(p)?;
                unit(unlinkat(d.as_fd(), n.as_str(), UnlinkatFlags::RemoveDir))
            }
            Op::Symlink(target, p) => {
                let (d, n) = self.parent(p)?;
                unit(symlinkat(target.as_str(), d.as_fd(), n.as_str()))
            }
            Op::Chmod(p, perm) => {
                let fd = self.open(p, OFlag::O_RDONLY)?;
                unit(fchmod(fd.as_fd(), Mode::from_bits_truncate(*perm)))
            }
            Op::Stat(p, follow) => {
                let flags = if *follow {
                    OFlag::O_PATH
                } else {
                    OFlag::O_PATH | OFlag::O_NOFOLLOW
                };
                let fd = self.open(p, flags)?;
                Ok(Self::stat_of(&fstat(fd.as_fd()).map_err(en)?))
            }
            Op::ReadDir(p) => {
                let fd = self.open(p, OFlag::O_RDONLY | OFlag::O_DIRECTORY)?;
                Ok(Self::list(fd))
            }
            Op::Read(p, off, len) => {
                let fd = self.open(p, OFlag::O_RDONLY)?;
                Ok(Out::Bytes(Self::read_fd(&fd, *off, *len)?))
            }
            Op::Readlink(p) => {
                let (d, n) = self.parent(p)?;
                let t = readlinkat(d.as_fd(), n.as_str()).map_err(en)?;
                Ok(Out::Bytes(t.into_encoded_bytes()))
            }
        }
    }

    fn list(fd: OwnedFd) -> Out {
        let mut dir = Dir::from_fd(fd).unwrap();
        let mut names: Vec<(Vec<u8>, &'static str)> = Vec::new();
        for e in dir.iter() {
            let e = e.unwrap();
            let name = e.file_name().to_bytes().to_vec();
            if name == b"." || name == b".." {
                continue;
            }
            let kind = match e.file_type() {
                Some(nix::dir::Type::Directory) => "dir",
                Some(nix::dir::Type::Symlink) => "symlink",
                Some(nix::dir::Type::File) => "file",
                other => panic!("unexpected dirent type {other:?}"),
            };
            names.push((name, kind));
        }
        names.sort();
        Out::Names(names)
    }

    fn tree(&self) -> BTreeMap<Vec<u8>, Out> {
        let mut out = BTreeMap::new();
        self.walk("", &mut out);
        out
    }

    fn walk(&self, prefix: &str, out: &mut BTreeMap<Vec<u8>, Out>) {
        let here = if prefix.is_empty() { "." } else { &prefix[1..] };
        let fd = self.open(here, OFlag::O_PATH | OFlag::O_NOFOLLOW).unwrap();
        out.insert(
            prefix.as_bytes().to_vec(),
            Self::stat_of(&fstat(fd.as_fd()).unwrap()),
        );
        let listing = Self::list(
            self.open(here, OFlag::O_RDONLY | OFlag::O_DIRECTORY)
                .unwrap(),
        );
        out.insert(format!("{prefix}/").into_bytes(), listing.clone());
        let Out::Names(names) = listing else {
            unreachable!()
        };
        for (name, kind) in names {
            let path = format!("{prefix}/{}", String::from_utf8(name).unwrap());
            let rel = &path[1..];
            match kind {
                "dir" => self.walk(&path, out),
                _ => {
                    let fd = self.open(rel, OFlag::O_PATH | OFlag::O_NOFOLLOW).unwrap();
                    out.insert(
                        path.clone().into_bytes(),
                        Self::stat_of(&fstat(fd.as_fd()).unwrap()),
                    );
                    let body = if kind == "symlink" {
                        let (d, n) = self.parent(rel).unwrap();
                        readlinkat(d.as_fd(), n.as_str())
                            .unwrap()
                            .into_encoded_bytes()
                    } else {
                        let fd = self.open(rel, OFlag::O_RDONLY).unwrap();
                        Self::read_fd(&fd, 0, usize::MAX).unwrap()
                    };
                    out.insert(format!("{path}#").into_bytes(), Out::Bytes(body));
                }
            }
        }
    }
}

// ----------------------------------------------------------- generators --

/// A path of 1-3 names; sometimes with `.` or `..` components or a
/// leading `/` (the root of the computer).
fn path() -> impl Strategy<Value = String> {
    let name = || {
        prop_oneof![
            12 => prop::sample::select(vec!["a", "b", "c"]),
            1 => prop::sample::select(vec![".", ".."]),
        ]
    };
    let names = prop_oneof![
        3 => prop::collection::vec(name(), 1..=1),
        4 => prop::collection::vec(name(), 2..=2),
        1 => prop::collection::vec(name(), 3..=3),
    ];
    (names, prop::bool::weighted(0.1)).prop_map(|(v, abs)| {
        let p = v.join("/");
        if abs { format!("/{p}") } else { p }
    })
}

/// A path for calls that resolve it whole, where a trailing `/` matters.
fn whole_path() -> impl Strategy<Value = String> {
    (path(), prop::bool::weighted(0.15))
        .prop_map(|(p, slash)| if slash { format!("{p}/") } else { p })
}

/// A starting tree, so random operations find something to work on.
fn setup() -> Vec<Op> {
    let s = String::from;
    vec![
        Op::Mkdir(s("a"), 0o755),
        Op::Mknod(s("b"), 0o644),
        Op::Write(s("b"), 0, 5000, 7),
        Op::Mkdir(s("a/b"), 0o755),
        Op::Mknod(s("a/a"), 0o600),
        Op::Mkdir(s("c"), 0o700),
        Op::Mkdir(s("c/c"), 0o755),
        Op::Symlink(s("../a"), s("c/a")),
        Op::Mknod(s("c/b"), 0o644),
    ]
}

fn target() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => path(),
        2 => path().prop_map(|p| format!("../{p}")),
        2 => path().prop_map(|p| format!("/{p}")),
        1 => prop::sample::select(vec![".", "..", "/", "a/", "../..", "./a"]).prop_map(String::from),
    ]
}

fn perm() -> impl Strategy<Value = u32> {
    prop::sample::select(vec![0o755, 0o700, 0o644, 0o600, 0o777, 0o555])
}

fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        prop::sample::select(vec![1u64, 4095, 4096, 4097, 8191, 12288, 70000]),
        0u64..20_000,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (path(), perm()).prop_map(|(p, m)| Op::Mknod(p, m)),
        3 => (path(), perm()).prop_map(|(p, m)| Op::Mkdir(p, m)),
        4 => (whole_path(), offset(), 0usize..9000, any::<u8>()).prop_map(|(p, o, l, s)| Op::Write(p, o, l, s)),
        2 => (whole_path(), offset()).prop_map(|(p, l)| Op::Truncate(p, l)),
        4 => (path(), path(), prop::sample::select(vec![0u8, 0, 0, 1, 2])).prop_map(|(a, b, f)| Op::Rename(a, b, f)),
        2 => (path(), path()).prop_map(|(a, b)| Op::Link(a, b)),
        2 => path().prop_map(Op::Unlink),
        2 => path().prop_map(Op::Rmdir),
        2 => (target(), path()).prop_map(|(t, p)| Op::Symlink(t, p)),
        1 => (whole_path(), perm()).prop_map(|(p, m)| Op::Chmod(p, m)),
        2 => (whole_path(), any::<bool>()).prop_map(|(p, f)| Op::Stat(p, f)),
        2 => whole_path().prop_map(Op::ReadDir),
        3 => (whole_path(), offset(), 0usize..10_000).prop_map(|(p, o, l)| Op::Read(p, o, l)),
        1 => path().prop_map(Op::Readlink),
    ]
}

fn memory_tempdir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(d) = tempfile::tempdir_in(shm)
    {
        return d;
    }
    tempfile::tempdir().unwrap()
}

/// An empty database made once: copying it is much cheaper than creating
/// one per case (creation syncs the file and its directory).
fn template() -> &'static std::path::Path {
    static TEMPLATE: std::sync::OnceLock<(tempfile::TempDir, std::path::PathBuf)> =
        std::sync::OnceLock::new();
    let (_, path) = TEMPLATE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("template.db");
        // Small chunks so short writes cross chunk boundaries.
        let tuning = Tuning {
            chunk_size: 4096,
            page_size: 4096,
        };
        drop(Fs::create_with(&path, Limits::default(), tuning).unwrap());
        (dir, path)
    });
    path
}

/// Runs `ops` on both sides; with `batched`, through one group-commit batch
/// (every call a savepoint of it), then checks the tree again after the
/// batch committed and the database was reopened.
fn run(ops: &[Op], batched: bool) -> Result<(), TestCaseError> {
    // mknodat/mkdirat on the real side apply the umask; the engine leaves
    // that to its callers.
    nix::sys::stat::umask(Mode::empty());
    let tmp = tempfile::tempdir().unwrap();
    let real_root = tmp.path().join("root");
    std::fs::create_dir(&real_root).unwrap();
    std::fs::set_permissions(
        &real_root,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let real = Real {
        root: nix::fcntl::open(
            &real_root,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .unwrap(),
    };
    // The engine's database goes to memory-backed storage when there is
    // some: closing a database checkpoints and syncs it, which on a busy
    // disk dominated the run time. The oracle directory stays on disk.
    let db_dir = memory_tempdir();
    let db = db_dir.path().join("fs.db");
    std::fs::copy(template(), &db).unwrap();
    let opened = Fs::open(&db).unwrap();
    let fs = if batched {
        // Only the view may keep the database open: the reopen below must
        // be the sole `Fs` on the file.
        let view = opened.with_commit_window(std::time::Duration::from_secs(3600));
        drop(opened);
        view
    } else {
        opened
    };
    let engine = Engine { fs };
    for (i, op) in setup().iter().chain(ops).enumerate() {
        let want = real.apply(op);
        let got = engine.apply(op);
        prop_assert_eq!(&got, &want, "step {} {:?}", i, op);
    }
    let (got, want) = (engine.tree(), real.tree());
    for (k, v) in &want {
        prop_assert_eq!(
            got.get(k),
            Some(v),
            "tree entry {}",
            String::from_utf8_lossy(k)
        );
    }
    prop_assert_eq!(got.len(), want.len(), "tree sizes");
    prop_assert_eq!(engine.fs.check().unwrap(), Vec::<String>::new());
    if batched {
        drop(engine);
        let engine = Engine {
            fs: Fs::open(&db).unwrap(),
        };
        prop_assert_eq!(engine.tree(), got, "tree after commit and reopen");
        prop_assert_eq!(engine.fs.check().unwrap(), Vec::<String>::new());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_local_disk(ops in prop::collection::vec(op(), 1..50)) {
        run(&ops, false)?;
    }

    #[test]
    fn engine_matches_local_disk_in_one_commit_batch(ops in prop::collection::vec(op(), 1..50)) {
        run(&ops, true)?;
    }
}
