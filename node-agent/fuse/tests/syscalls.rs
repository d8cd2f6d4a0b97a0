//! Syscall-level behaviour of the mount, checked against what Linux
//! filesystems do (open(2), pread(2), link(2), rename(2), mmap(2), ...).

mod common;

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, PermissionsExt};

use common::{cpath, last_errno, mount_new, sh_as_nobody};

fn errno_of(r: std::io::Result<impl Sized>) -> i32 {
    r.err().and_then(|e| e.raw_os_error()).unwrap_or(0)
}

#[test]
fn open_excl_trunc_and_append() {
    let Some(m) = mount_new() else { return };
    let p = m.path("f");
    std::fs::write(&p, b"0123456789").unwrap();
    let excl = OpenOptions::new().write(true).create_new(true).open(&p);
    assert_eq!(errno_of(excl), libc::EEXIST);

    let mut a = OpenOptions::new().append(true).open(&p).unwrap();
    a.seek(SeekFrom::Start(0)).unwrap();
    a.write_all(b"AB").unwrap();
    drop(a);
    assert_eq!(std::fs::read(&p).unwrap(), b"0123456789AB");

    let mut t = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    assert_eq!(t.metadata().unwrap().len(), 0);
    t.write_all(b"x").unwrap();
    drop(t);
    assert_eq!(std::fs::read(&p).unwrap(), b"x");
    assert_eq!(
        m.fs.read_all(m.fs.resolve(1, b"/f", true).unwrap().ino)
            .unwrap(),
        b"x"
    );
}

#[test]
fn pread_pwrite_at_offsets_and_across_holes() {
    let Some(m) = mount_new() else { return };
    let p = m.path("sparse");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    f.write_all_at(b"head", 0).unwrap();
    f.write_all_at(b"middle", (1 << 20) + 3).unwrap();
    f.write_all_at(b"tail", 10 << 20).unwrap();
    f.sync_all().unwrap();
    let md = f.metadata().unwrap();
    assert_eq!(md.len(), (10 << 20) + 4);
    // Holes take no space: far fewer 512-byte blocks than the size.
    assert!(md.blocks() * 512 < 1 << 20, "blocks {}", md.blocks());

    let mut buf = vec![0xffu8; 16];
    f.read_exact_at(&mut buf, (1 << 20) - 5).unwrap();
    assert_eq!(&buf[..8], &[0; 8]);
    assert_eq!(&buf[8..14], b"middle");
    assert_eq!(&buf[14..], &[0; 2]);
    let mut hole = vec![0xffu8; 4096];
    f.read_exact_at(&mut hole, 5 << 20).unwrap();
    assert!(hole.iter().all(|&b| b == 0));
    let mut end = vec![0u8; 10];
    let n = f.read_at(&mut end, (10 << 20) + 2).unwrap();
    assert_eq!(&end[..n], b"il");
    assert_eq!(f.read_at(&mut end, 11 << 20).unwrap(), 0);

    // Overwrite inside existing data, then read the whole file back.
    f.write_all_at(b"HE", 0).unwrap();
    drop(f);
    let all = std::fs::read(&p).unwrap();
    assert_eq!(&all[..4], b"HEad");
    assert_eq!(&all[(1 << 20) + 3..(1 << 20) + 9], b"middle");
}

#[test]
fn dup_shares_the_offset() {
    let Some(m) = mount_new() else { return };
    let p = m.path("dup");
    let mut f = File::create(&p).unwrap();
    let mut g = f.try_clone().unwrap();
    f.write_all(b"one").unwrap();
    g.write_all(b"two").unwrap();
    assert_eq!(f.stream_position().unwrap(), 6);
    drop((f, g));
    assert_eq!(std::fs::read(&p).unwrap(), b"onetwo");
}

#[test]
fn hard_links_share_an_inode() {
    let Some(m) = mount_new() else { return };
    let a = m.path("a");
    let b = m.path("sub/b");
    std::fs::create_dir(m.path("sub")).unwrap();
    std::fs::write(&a, b"shared").unwrap();
    std::fs::hard_link(&a, &b).unwrap();
    let (ma, mb) = (
        std::fs::metadata(&a).unwrap(),
        std::fs::metadata(&b).unwrap(),
    );
    assert_eq!(ma.ino(), mb.ino());
    assert_eq!(mb.nlink(), 2);
    std::fs::write(&b, b"changed").unwrap();
    assert_eq!(std::fs::read(&a).unwrap(), b"changed");
    std::fs::remove_file(&a).unwrap();
    assert_eq!(std::fs::metadata(&b).unwrap().nlink(), 1);
    assert_eq!(std::fs::read(&b).unwrap(), b"changed");
    assert_eq!(
        errno_of(std::fs::hard_link(m.path("sub"), m.path("dirlink"))),
        libc::EPERM
    );
}

#[test]
fn unlinked_open_file_keeps_its_data_until_closed() {
    let Some(m) = mount_new() else { return };
    let p = m.path("victim");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    f.write_all(&vec![7u8; 300_000]).unwrap();
    f.sync_all().unwrap();
    let used_open = m.fs.statfs().unwrap().used_bytes;
    std::fs::remove_file(&p).unwrap();
    assert!(!p.exists());
    assert_eq!(f.metadata().unwrap().nlink(), 0);
    // Still readable and writable through the descriptor.
    f.write_all_at(b"more", 300_000).unwrap();
    let mut back = Vec::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_end(&mut back).unwrap();
    assert_eq!(back.len(), 300_004);
    assert!(back[..300_000].iter().all(|&b| b == 7));
    assert!(m.fs.statfs().unwrap().used_bytes >= used_open);
    drop(f);
    // Release is asynchronous to close(2): wait for the data to go.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while m.fs.statfs().unwrap().used_bytes >= 300_000 {
        assert!(
            std::time::Instant::now() < deadline,
            "unlinked data never freed"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(m.fs.check().unwrap().is_empty());
}

fn renameat2(from: &std::path::Path, to: &std::path::Path, flags: u32) -> i32 {
    let (a, b) = (cpath(from), cpath(to));
    // SAFETY: both are valid NUL-terminated paths.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    };
    if r == 0 { 0 } else { last_errno() }
}

#[test]
fn rename_over_files_and_directories() {
    let Some(m) = mount_new() else { return };
    let (a, b) = (m.path("a"), m.path("b"));
    std::fs::write(&a, b"A").unwrap();
    std::fs::write(&b, b"B").unwrap();
    let ino_a = std::fs::metadata(&a).unwrap().ino();
    std::fs::rename(&a, &b).unwrap();
    assert!(!a.exists());
    assert_eq!(std::fs::read(&b).unwrap(), b"A");
    assert_eq!(std::fs::metadata(&b).unwrap().ino(), ino_a);

    let (d1, d2, d3) = (m.path("d1"), m.path("d2"), m.path("d3"));
    for d in [&d1, &d2, &d3] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(d1.join("inner"), b"i").unwrap();
    std::fs::write(d3.join("x"), b"x").unwrap();
    std::fs::rename(&d1, &d2).unwrap();
    assert_eq!(std::fs::read(d2.join("inner")).unwrap(), b"i");
    assert_eq!(errno_of(std::fs::rename(&d2, &d3)), libc::ENOTEMPTY);
    assert_eq!(errno_of(std::fs::rename(&b, &d3)), libc::EISDIR);
    assert_eq!(errno_of(std::fs::rename(&d3, &b)), libc::ENOTDIR);
    assert_eq!(
        errno_of(std::fs::rename(&d2, d2.join("below"))),
        libc::EINVAL
    );
    // `..` of a moved directory follows it.
    std::fs::rename(&d2, d3.join("moved")).unwrap();
    let up = std::fs::metadata(d3.join("moved/..")).unwrap().ino();
    assert_eq!(up, std::fs::metadata(&d3).unwrap().ino());

    assert_eq!(
        renameat2(&b, &d3.join("x"), libc::RENAME_NOREPLACE),
        libc::EEXIST
    );
    assert_eq!(renameat2(&b, &d3.join("x"), libc::RENAME_EXCHANGE), 0);
    assert_eq!(std::fs::read(&b).unwrap(), b"x");
    assert_eq!(std::fs::read(d3.join("x")).unwrap(), b"A");
    // Exchange a file with a directory.
    assert_eq!(renameat2(&b, &d3, libc::RENAME_EXCHANGE), 0);
    assert!(std::fs::metadata(&b).unwrap().is_dir());
    assert_eq!(std::fs::read(&d3).unwrap(), b"x");
    assert_eq!(renameat2(&d3, &m.path("new"), libc::RENAME_NOREPLACE), 0);
    assert!(m.fs.check().unwrap().is_empty());
}

#[test]
fn mkfifo_and_mknod() {
    let Some(m) = mount_new() else { return };
    let p = m.path("fifo");
    nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o640)).unwrap();
    let md = std::fs::metadata(&p).unwrap();
    assert!(md.file_type().is_fifo());
    assert_eq!(md.permissions().mode() & 0o777, 0o640 & !current_umask());
    let p2 = p.clone();
    let writer = std::thread::spawn(move || {
        let mut w = OpenOptions::new().write(true).open(&p2).unwrap();
        w.write_all(b"through the pipe").unwrap();
    });
    let mut got = String::new();
    File::open(&p).unwrap().read_to_string(&mut got).unwrap();
    writer.join().unwrap();
    assert_eq!(got, "through the pipe");

    if !common::is_root() {
        eprintln!("SKIPPED: mknod of a device needs CAP_MKNOD");
        return;
    }
    let dev = m.path("null2");
    nix::sys::stat::mknod(
        &dev,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o600),
        nix::sys::stat::makedev(1, 3),
    )
    .unwrap();
    let md = std::fs::metadata(&dev).unwrap();
    assert!(md.file_type().is_char_device());
    assert_eq!(md.rdev(), nix::sys::stat::makedev(1, 3));
}

fn current_umask() -> u32 {
    // SAFETY: umask only swaps the process mask; restored at once.
    let old = unsafe { libc::umask(0o022) };
    unsafe { libc::umask(old) };
    old
}

#[test]
fn permissions_are_checked_by_the_kernel_for_other_users() {
    if !common::is_root() {
        eprintln!("SKIPPED: switching to user nobody needs root");
        return;
    }
    let Some(m) = mount_new() else { return };
    let ro = m.path("readonly");
    std::fs::write(&ro, b"secret").unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o444)).unwrap();
    let (code, err) = sh_as_nobody("echo x >> \"$1\"", &[&ro]);
    assert_ne!(code, 0);
    assert!(err.contains("Permission denied"), "{err}");
    let (code, _) = sh_as_nobody("cat \"$1\" >/dev/null", &[&ro]);
    assert_eq!(code, 0, "reading a 0444 file is allowed");
    // Root bypasses mode bits, as on any filesystem.
    OpenOptions::new().append(true).open(&ro).unwrap();

    // New inodes belong to the caller.
    let open = m.path("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let theirs = open.join("theirs");
    let (code, err) = sh_as_nobody("echo hi > \"$1\" && mkdir \"$1.d\"", &[&theirs]);
    assert_eq!(code, 0, "{err}");
    let md = std::fs::metadata(&theirs).unwrap();
    assert_eq!((md.uid(), md.gid()), (65534, 65534));
    // Sticky directory: nobody can't remove root's file.
    let mine = open.join("mine");
    std::fs::write(&mine, b"root's").unwrap();
    let (code, err) = sh_as_nobody("rm -f \"$1\"", &[&mine]);
    assert_ne!(code, 0);
    assert!(err.contains("Operation not permitted"), "{err}");
    assert!(mine.exists());
}

#[test]
fn setgid_directories_pass_on_their_group() {
    if !common::is_root() {
        eprintln!("SKIPPED: chown to another group needs root");
        return;
    }
    let Some(m) = mount_new() else { return };
    let d = m.path("shared");
    std::fs::create_dir(&d).unwrap();
    nix::unistd::chown(&d, None, Some(nix::unistd::Gid::from_raw(4242))).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o2775)).unwrap();
    std::fs::write(d.join("f"), b"").unwrap();
    std::fs::create_dir(d.join("sub")).unwrap();
    assert_eq!(std::fs::metadata(d.join("f")).unwrap().gid(), 4242);
    let sub = std::fs::metadata(d.join("sub")).unwrap();
    assert_eq!(sub.gid(), 4242);
    assert_ne!(sub.mode() & libc::S_ISGID, 0);
}

#[test]
fn dot_dot_and_inode_numbers() {
    let Some(m) = mount_new() else { return };
    std::fs::create_dir_all(m.path("x/y")).unwrap();
    let root = std::fs::metadata(&m.mnt).unwrap().ino();
    assert_eq!(root, 1);
    let x = std::fs::metadata(m.path("x")).unwrap();
    assert_eq!(std::fs::metadata(m.path("x/y/..")).unwrap().ino(), x.ino());
    assert_eq!(x.nlink(), 3);
    assert_eq!(x.ino(), m.fs.resolve(1, b"/x", true).unwrap().ino);
    // readdir reports `.` and `..` with the right inodes.
    let mut dir = nix::dir::Dir::open(
        &m.path("x/y"),
        nix::fcntl::OFlag::O_RDONLY,
        nix::sys::stat::Mode::empty(),
    )
    .unwrap();
    let mut seen = std::collections::HashMap::new();
    for e in dir.iter() {
        let e = e.unwrap();
        seen.insert(e.file_name().to_bytes().to_vec(), e.ino());
    }
    assert_eq!(
        seen[&b".".to_vec()],
        std::fs::metadata(m.path("x/y")).unwrap().ino()
    );
    assert_eq!(seen[&b"..".to_vec()], x.ino());
}

#[test]
fn mmap_read_and_write() {
    use nix::sys::mman::{MapFlags, MsFlags, ProtFlags, mmap, msync, munmap};
    let Some(m) = mount_new() else { return };
    let p = m.path("mapped");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    f.write_all_at(&vec![b'a'; 3 * 4096], 0).unwrap();
    let len = std::num::NonZeroUsize::new(3 * 4096).unwrap();
    // SAFETY: a fresh shared mapping of a file we own, unmapped below.
    let ptr = unsafe {
        mmap(
            None,
            len,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_SHARED,
            &f,
            0,
        )
    }
    .unwrap();
    // SAFETY: the mapping is len bytes long and nothing else aliases it.
    let bytes = unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr() as *mut u8, len.get()) };
    assert!(bytes.iter().all(|&b| b == b'a'));
    bytes[4096..4096 + 5].copy_from_slice(b"MMAP!");
    // SAFETY: the range is the mapping made above.
    unsafe { msync(ptr, len.get(), MsFlags::MS_SYNC) }.unwrap();
    unsafe { munmap(ptr, len.get()) }.unwrap();
    drop(f);
    let back = std::fs::read(&p).unwrap();
    assert_eq!(&back[4096..4101], b"MMAP!");
    let ino = std::fs::metadata(&p).unwrap().ino();
    assert_eq!(&m.fs.read(ino, 4096, 5).unwrap(), b"MMAP!");
}

fn setxattr(p: &std::path::Path, name: &str, value: &[u8], flags: i32) -> i32 {
    let (p, n) = (cpath(p), std::ffi::CString::new(name).unwrap());
    // SAFETY: valid C strings and a buffer of the given length.
    let r = unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    };
    if r == 0 { 0 } else { last_errno() }
}

fn getxattr(p: &std::path::Path, name: &str) -> Result<Vec<u8>, i32> {
    let (p, n) = (cpath(p), std::ffi::CString::new(name).unwrap());
    let mut buf = vec![0u8; 256];
    // SAFETY: valid C strings; the buffer is 256 bytes.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return Err(last_errno());
    }
    buf.truncate(r as usize);
    Ok(buf)
}

#[test]
fn extended_attributes() {
    let Some(m) = mount_new() else { return };
    let p = m.path("x");
    std::fs::write(&p, b"").unwrap();
    assert_eq!(setxattr(&p, "user.color", b"blue", 0), 0);
    assert_eq!(setxattr(&p, "user.size", b"7", 0), 0);
    assert_eq!(getxattr(&p, "user.color"), Ok(b"blue".to_vec()));
    assert_eq!(
        setxattr(&p, "user.color", b"red", libc::XATTR_CREATE),
        libc::EEXIST
    );
    assert_eq!(
        setxattr(&p, "user.none", b"x", libc::XATTR_REPLACE),
        libc::ENODATA
    );
    assert_eq!(getxattr(&p, "user.none"), Err(libc::ENODATA));
    let c = cpath(&p);
    let mut list = vec![0u8; 128];
    // SAFETY: valid path; buffer of 128 bytes.
    let n = unsafe { libc::listxattr(c.as_ptr(), list.as_mut_ptr().cast(), list.len()) };
    assert_eq!(&list[..n as usize], b"user.color\0user.size\0");
    // Size query, then a too-small buffer.
    let name = std::ffi::CString::new("user.color").unwrap();
    // SAFETY: a null buffer of size 0 asks for the size.
    let size = unsafe { libc::getxattr(c.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    assert_eq!(size, 4);
    let mut small = [0u8; 2];
    // SAFETY: buffer of 2 bytes.
    let r = unsafe { libc::getxattr(c.as_ptr(), name.as_ptr(), small.as_mut_ptr().cast(), 2) };
    assert_eq!((r, last_errno()), (-1, libc::ERANGE));
    // SAFETY: valid C strings.
    assert_eq!(unsafe { libc::removexattr(c.as_ptr(), name.as_ptr()) }, 0);
    assert_eq!(getxattr(&p, "user.color"), Err(libc::ENODATA));
    // The engine sees the same attributes.
    let ino = std::fs::metadata(&p).unwrap().ino();
    assert_eq!(m.fs.getxattr(ino, b"user.size").unwrap(), b"7");
}

fn flock_struct(typ: i32, start: i64, len: i64) -> libc::flock {
    // SAFETY: flock is plain data; zero is a valid value for every field.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = typ as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = start;
    fl.l_len = len;
    fl
}

/// In a forked child: tries `F_SETLK` with `typ` on `[start, start+len)` and
/// exits 0 on success, 1 on EAGAIN/EACCES, 2 otherwise.
fn child_trylock(path: &std::path::Path, typ: i32, start: i64, len: i64) -> i32 {
    let c = cpath(path);
    // SAFETY: the child only makes async-signal-safe calls, then _exit.
    match unsafe { libc::fork() } {
        0 => unsafe {
            let fd = libc::open(c.as_ptr(), libc::O_RDWR);
            let fl = flock_struct(typ, start, len);
            let r = libc::fcntl(fd, libc::F_SETLK, &fl);
            let code = if r == 0 {
                0
            } else if *libc::__errno_location() == libc::EAGAIN
                || *libc::__errno_location() == libc::EACCES
            {
                1
            } else {
                2
            };
            libc::_exit(code)
        },
        pid => {
            let mut status = 0;
            // SAFETY: waiting for our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            libc::WEXITSTATUS(status)
        }
    }
}

#[test]
fn posix_ofd_and_flock_locks() {
    let Some(m) = mount_new() else { return };
    let p = m.path("locked");
    std::fs::write(&p, vec![0u8; 100]).unwrap();
    let f = OpenOptions::new().read(true).write(true).open(&p).unwrap();
    let wl = flock_struct(libc::F_WRLCK, 10, 20);
    // SAFETY: valid fd and flock struct.
    assert_eq!(unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLK, &wl) }, 0);
    assert_eq!(
        child_trylock(&p, libc::F_WRLCK, 0, 15),
        1,
        "overlapping lock must conflict"
    );
    assert_eq!(child_trylock(&p, libc::F_RDLCK, 25, 10), 1);
    assert_eq!(
        child_trylock(&p, libc::F_WRLCK, 30, 10),
        0,
        "disjoint range is free"
    );
    // F_GETLK reports our lock to a query for a conflicting one.
    let g = OpenOptions::new().read(true).write(true).open(&p).unwrap();
    let mut q = flock_struct(libc::F_WRLCK, 0, 0);
    // SAFETY: valid fd and flock struct. OFD query from a second description.
    assert_eq!(
        unsafe { libc::fcntl(g.as_raw_fd(), libc::F_OFD_GETLK, &mut q) },
        0
    );
    assert_eq!(i32::from(q.l_type), libc::F_WRLCK);
    assert_eq!((q.l_start, q.l_len), (10, 20));
    // Closing any descriptor of the file drops the process's POSIX locks.
    drop(g);
    assert_eq!(child_trylock(&p, libc::F_WRLCK, 0, 15), 0);

    // OFD locks conflict between two descriptions in one process.
    let a = OpenOptions::new().read(true).write(true).open(&p).unwrap();
    let b = OpenOptions::new().read(true).write(true).open(&p).unwrap();
    let l = flock_struct(libc::F_WRLCK, 0, 0);
    // SAFETY: valid fds and flock structs.
    assert_eq!(
        unsafe { libc::fcntl(a.as_raw_fd(), libc::F_OFD_SETLK, &l) },
        0
    );
    assert_eq!(
        unsafe { libc::fcntl(b.as_raw_fd(), libc::F_OFD_SETLK, &l) },
        -1
    );
    assert_eq!(last_errno(), libc::EAGAIN);
    drop(a);
    assert_eq!(
        unsafe { libc::fcntl(b.as_raw_fd(), libc::F_OFD_SETLK, &l) },
        0
    );

    // flock(2) seen by another process (util-linux flock).
    let h = File::open(&p).unwrap();
    // SAFETY: valid fd.
    assert_eq!(
        unsafe { libc::flock(h.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        0
    );
    let busy = std::process::Command::new("flock")
        .arg("-n")
        .arg(&p)
        .arg("true")
        .status()
        .unwrap();
    assert_eq!(busy.code(), Some(1));
    // SAFETY: valid fd.
    assert_eq!(unsafe { libc::flock(h.as_raw_fd(), libc::LOCK_UN) }, 0);
    let free = std::process::Command::new("flock")
        .arg("-n")
        .arg(&p)
        .arg("true")
        .status()
        .unwrap();
    assert!(free.success());
}

#[test]
fn statfs_reports_the_engine_counters() {
    let Some(m) = mount_new() else { return };
    for i in 0..10 {
        std::fs::write(m.path(&format!("f{i}")), vec![1u8; 10_000]).unwrap();
    }
    let st = nix::sys::statvfs::statvfs(&m.mnt).unwrap();
    let e = m.fs.statfs().unwrap();
    assert_eq!(st.files() - st.files_free(), e.used_inodes);
    assert_eq!(st.files(), e.files);
    assert_eq!(st.blocks(), e.blocks);
    assert_eq!(st.blocks_free(), e.blocks_free);
    assert_eq!(st.name_max(), 255);
    assert_eq!(e.used_inodes, 11);
}

#[test]
fn fallocate_and_copy_file_range() {
    let Some(m) = mount_new() else { return };
    let p = m.path("alloc");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    let used_before = m.fs.statfs().unwrap().used_bytes;
    nix::fcntl::fallocate(&f, nix::fcntl::FallocateFlags::empty(), 0, 1 << 20).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 1 << 20);
    // The space is held against the quota, not just promised.
    assert_eq!(m.fs.statfs().unwrap().used_bytes, used_before + (1 << 20));
    nix::fcntl::fallocate(
        &f,
        nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE,
        0,
        1 << 20,
    )
    .unwrap();
    // Space past the end of file cannot be held without showing in the size.
    assert_eq!(
        nix::fcntl::fallocate(
            &f,
            nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE,
            0,
            4 << 20,
        ),
        Err(nix::errno::Errno::EOPNOTSUPP)
    );
    assert_eq!(f.metadata().unwrap().len(), 1 << 20);
    f.write_all_at(&[9u8; 8192], 0).unwrap();
    nix::fcntl::fallocate(
        &f,
        nix::fcntl::FallocateFlags::FALLOC_FL_PUNCH_HOLE
            | nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE,
        100,
        1000,
    )
    .unwrap();
    let mut buf = vec![0u8; 2000];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert!(buf[..100].iter().all(|&b| b == 9));
    assert!(buf[100..1100].iter().all(|&b| b == 0));
    assert!(buf[1100..].iter().all(|&b| b == 9));
    // With another file's bytes stored, the whole quota no longer fits; the
    // check comes before anything is written.
    std::fs::write(m.path("other"), vec![1u8; 1 << 20]).unwrap();
    let past_quota = nix::fcntl::fallocate(
        &f,
        nix::fcntl::FallocateFlags::empty(),
        0,
        m.fs.limits().max_bytes as i64,
    );
    assert_eq!(past_quota, Err(nix::errno::Errno::ENOSPC));
    assert_eq!(f.metadata().unwrap().len(), 1 << 20, "nothing reserved");
    let too_big = nix::fcntl::fallocate(&f, nix::fcntl::FallocateFlags::empty(), 0, 1 << 50);
    assert_eq!(too_big, Err(nix::errno::Errno::EFBIG));

    // copy_file_range inside the mount.
    let src = m.path("src");
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&src, &data).unwrap();
    let (s, d) = (
        File::open(&src).unwrap(),
        File::create(m.path("dst")).unwrap(),
    );
    let mut left = data.len();
    while left > 0 {
        // SAFETY: valid fds; null offsets use and advance the file offsets.
        let n = unsafe {
            libc::copy_file_range(
                s.as_raw_fd(),
                std::ptr::null_mut(),
                d.as_raw_fd(),
                std::ptr::null_mut(),
                left,
                0,
            )
        };
        assert!(
            n > 0,
            "copy_file_range: {}",
            std::io::Error::last_os_error()
        );
        left -= n as usize;
    }
    drop((s, d));
    assert_eq!(std::fs::read(m.path("dst")).unwrap(), data);
}

#[test]
fn many_threads_read_and_write_at_once() {
    let Some(m) = mount_new() else { return };
    let mnt = m.mnt.clone();
    let workers: Vec<_> = (0..8)
        .map(|t| {
            let mnt = mnt.clone();
            std::thread::spawn(move || {
                for i in 0..40 {
                    let p = mnt.join(format!("t{t}-{i}"));
                    let body = format!("thread {t} file {i}").repeat(100 + i);
                    std::fs::write(&p, &body).unwrap();
                    assert_eq!(std::fs::read_to_string(&p).unwrap(), body);
                    if i % 3 == 0 {
                        std::fs::remove_file(&p).unwrap();
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let n = std::fs::read_dir(&mnt).unwrap().count();
    assert_eq!(n, 8 * (40 - 14));
    assert!(m.fs.check().unwrap().is_empty());
}
