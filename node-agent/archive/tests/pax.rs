//! The pax format of exports, with GNU tar as the oracle: what a computer
//! exports, GNU tar extracts with its extended attributes, names and link
//! targets too long for ustar, and mtimes to the nanosecond; what GNU tar
//! archives in pax format with `--xattrs`, an import brings in with its
//! extended attributes.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use agentcomputer_archive::{Guard, Packer};
use agentcomputer_fs::{
    Fs, Limits, Owner, ROOT_INO, SetAttr, TimeSet, Timespec, WriteMode, XattrFlags,
};

fn tar() -> Option<Command> {
    let ok = Command::new("tar")
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("GNU tar"));
    if !ok {
        use std::io::Write;
        let _ = std::io::stderr().write_all(b"\n!!! SKIPPED: GNU tar is not installed !!!\n\n");
        return None;
    }
    Some(Command::new("tar"))
}

/// A user extended attribute of a host file (not following a symlink).
fn host_xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; 65536];
    // SAFETY: both strings are NUL-terminated and the buffer is as long as said.
    let len =
        unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (len >= 0).then(|| {
        buf.truncate(len as usize);
        buf
    })
}

fn set_host_xattr(path: &Path, name: &str, value: &[u8]) {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    // SAFETY: both strings are NUL-terminated and the value is as long as said.
    let r = unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "setxattr {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

fn write(fs: &Fs, dir: u64, name: &str, data: &[u8]) -> u64 {
    fs.write_all(
        dir,
        name.as_bytes(),
        data,
        WriteMode::Truncate,
        0o640,
        Owner::ROOT,
    )
    .unwrap()
    .ino
}

#[test]
fn gnu_tar_extracts_an_export_with_its_xattrs_long_names_and_nanosecond_mtimes() {
    let Some(mut tar) = tar() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::create(&dir.path().join("fs.db"), Limits::default()).unwrap();
    let sub = fs.mkdir(ROOT_INO, b"sub", 0o750, Owner::ROOT).unwrap().ino;
    let file = write(&fs, sub, "notes.txt", b"hello");
    fs.setxattr(file, b"user.origin", b"agent", XattrFlags::default())
        .unwrap();
    fs.setxattr(
        file,
        b"user.binary",
        &[0, 1, 2, 255, b'\n'],
        XattrFlags::default(),
    )
    .unwrap();
    fs.setxattr(sub, b"user.dir", b"yes", XattrFlags::default())
        .unwrap();
    fs.setattr(
        file,
        &SetAttr {
            mtime: Some(TimeSet::At(Timespec::from_nanos(1_700_000_000_123_456_789))),
            ..SetAttr::default()
        },
    )
    .unwrap();
    // A name longer than ustar's 255 bytes (name and prefix), and a symlink
    // to a target longer than its 100.
    let mut deep = sub;
    let mut long_path = String::from("sub");
    for i in 0..6 {
        let part = format!("directory-{i}-{}", "d".repeat(40));
        deep = fs
            .mkdir(deep, part.as_bytes(), 0o755, Owner::ROOT)
            .unwrap()
            .ino;
        long_path = format!("{long_path}/{part}");
    }
    let long_name = format!("file-{}.txt", "f".repeat(120));
    write(&fs, deep, &long_name, b"deep");
    let long_target = format!("../{}", "t".repeat(150));
    fs.symlink(ROOT_INO, b"link", long_target.as_bytes(), Owner::ROOT)
        .unwrap();

    let archive = dir.path().join("out.tar");
    {
        let out = std::fs::File::create(&archive).unwrap();
        let mut packer = Packer::new(&fs, out);
        packer.add(&fs.getattr(ROOT_INO).unwrap(), ".").unwrap();
        packer.finish().unwrap();
    }
    let into = dir.path().join("x");
    std::fs::create_dir(&into).unwrap();
    let out = tar
        .args(["--xattrs", "--xattrs-include=user.*", "-xpf"])
        .arg(&archive)
        .arg("-C")
        .arg(&into)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let notes = into.join("sub/notes.txt");
    assert_eq!(std::fs::read(&notes).unwrap(), b"hello");
    assert_eq!(
        host_xattr(&notes, "user.origin").as_deref(),
        Some(&b"agent"[..])
    );
    assert_eq!(
        host_xattr(&notes, "user.binary").as_deref(),
        Some(&[0, 1, 2, 255, b'\n'][..])
    );
    assert_eq!(
        host_xattr(&into.join("sub"), "user.dir").as_deref(),
        Some(&b"yes"[..])
    );
    let m = std::fs::metadata(&notes).unwrap();
    assert_eq!((m.mtime(), m.mtime_nsec()), (1_700_000_000, 123_456_789));
    let deep_file = into.join(&long_path).join(&long_name);
    assert!(long_path.len() + long_name.len() > 255);
    assert_eq!(std::fs::read(&deep_file).unwrap(), b"deep");
    assert_eq!(
        std::fs::read_link(into.join("link"))
            .unwrap()
            .as_os_str()
            .as_bytes(),
        long_target.as_bytes()
    );

    // GNU tar names the format: pax headers, no GNU extension entries.
    let listed = Command::new("tar")
        .args(["--list", "--verbose", "--show-transformed-names", "-f"])
        .arg(&archive)
        .output()
        .unwrap();
    let dump = std::fs::read(&archive).unwrap();
    assert!(
        !dump.windows(13).any(|w| w == b"././@LongLink"),
        "a GNU long-name entry in the export"
    );
    assert!(listed.status.success());
}

#[test]
fn an_import_of_a_gnu_tar_pax_archive_keeps_its_xattrs() {
    let Some(mut tar) = tar() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("d/f.txt"), b"content").unwrap();
    set_host_xattr(&src.join("d/f.txt"), "user.kind", b"report");
    set_host_xattr(&src.join("d"), "user.team", b"a");
    let archive = dir.path().join("in.tar");
    let out = tar
        .args(["--xattrs", "--format=posix", "-cf"])
        .arg(&archive)
        .arg("-C")
        .arg(&src)
        .arg("d")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let fs = Fs::create(&dir.path().join("fs.db"), Limits::default()).unwrap();
    Guard::new(&fs, ROOT_INO, Owner::ROOT)
        .unpack(std::fs::File::open(&archive).unwrap())
        .unwrap();
    let d = fs.lookup(ROOT_INO, b"d").unwrap().ino;
    let f = fs.lookup(d, b"f.txt").unwrap().ino;
    assert_eq!(fs.read_all(f).unwrap(), b"content");
    assert_eq!(fs.getxattr(f, b"user.kind").unwrap(), b"report");
    assert_eq!(fs.getxattr(d, b"user.team").unwrap(), b"a");
}

/// Sparse files as far as the tar crate reads them: GNU's own sparse
/// entries (`--format=gnu --sparse`) come in whole, holes as zeros; pax
/// sparse files (`--format=posix --sparse`), whose data starts with their
/// map under another name, are refused by name rather than unpacked
/// wrong.
#[test]
fn sparse_files_from_gnu_tar_come_in_whole_or_are_refused_by_name() {
    let Some(_) = tar() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::File::create(src.join("sparse.bin")).unwrap();
        f.seek(SeekFrom::Start(3 << 20)).unwrap();
        f.write_all(b"data after a hole").unwrap();
        f.seek(SeekFrom::Start(6 << 20)).unwrap();
        f.write_all(b"end").unwrap();
    }
    let expected = std::fs::read(src.join("sparse.bin")).unwrap();
    for (format, accepted) in [("gnu", true), ("posix", false)] {
        let archive = dir.path().join(format!("{format}.tar"));
        let out = Command::new("tar")
            .args(["--sparse", &format!("--format={format}"), "-cf"])
            .arg(&archive)
            .arg("-C")
            .arg(&src)
            .arg("sparse.bin")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let fs = Fs::create(&dir.path().join(format!("{format}.db")), Limits::default()).unwrap();
        let r =
            Guard::new(&fs, ROOT_INO, Owner::ROOT).unpack(std::fs::File::open(&archive).unwrap());
        if accepted {
            r.unwrap();
            let f = fs.lookup(ROOT_INO, b"sparse.bin").unwrap();
            assert_eq!(fs.read_all(f.ino).unwrap(), expected, "--format={format}");
            // Its holes stay holes: it holds far less than its length.
            assert!(
                fs.statfs().unwrap().used_bytes < 2 << 20,
                "{:?}",
                fs.statfs().unwrap()
            );
        } else {
            let e = r.unwrap_err().to_string();
            assert!(e.contains("GNU.sparse"), "--format={format}: {e}");
            assert!(fs.lookup(ROOT_INO, b"sparse.bin").is_err());
        }
    }
}
