//! Unpacking an archive nobody vouches for under one directory.

use std::cell::Cell;
use std::collections::HashMap;
use std::io::Read;
use std::rc::Rc;

use agentcomputer_fs::{Errno, FileKind, Fs, Ino, Owner, SetAttr, TimeSet, Timespec, XattrFlags};

use crate::STEP_BYTES;
use crate::error::ArchiveError;
use crate::metered::{METADATA_BUDGET, Metered};
use crate::names::components;

/// Permission bits an unpacked entry may keep: not set-user-ID nor
/// set-group-ID (an archive does not choose who runs a program).
const KEPT_PERM: u32 = 0o1777;

/// Permission bits of a directory an entry needs but the archive does not
/// name.
const IMPLIED_DIR_PERM: u32 = 0o755;

/// What an unpack made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unpacked {
    /// Entries unpacked (directories, files, links), extension headers
    /// not counted.
    pub entries: u64,
    /// Bytes of file data written.
    pub bytes: u64,
}

/// Unpacks an untrusted archive under one directory of a computer: no
/// absolute name, no `..`, no entry under a symlink (the parent of every
/// entry is walked one name at a time without following links), hard
/// links only to files this archive made, no devices, FIFOs or sockets.
/// Each file is written unnamed and linked in once its data is all there.
pub struct Guard<'a> {
    fs: &'a Fs,
    root: Ino,
    owner: Owner,
    /// Regular files this archive made, by their name in it: the only
    /// targets its hard links may name.
    files: HashMap<String, Ino>,
    /// Directories to give their mode and mtime once their entries are in
    /// (writing into a directory changes its mtime).
    dirs: Vec<(Ino, u32, u64)>,
    done: Unpacked,
    /// The allowance of the archive's [`Metered`] reader.
    left: Rc<Cell<u64>>,
    /// Told each entry's name, as the archive gives it, before it is
    /// unpacked.
    each: Box<dyn FnMut(&str) + 'a>,
}

impl<'a> Guard<'a> {
    /// A guard unpacking under directory `root` of `fs`; what it makes is
    /// owned by `owner`.
    pub fn new(fs: &'a Fs, root: Ino, owner: Owner) -> Guard<'a> {
        Guard {
            fs,
            root,
            owner,
            files: HashMap::new(),
            dirs: Vec::new(),
            done: Unpacked::default(),
            left: Rc::new(Cell::new(METADATA_BUDGET)),
            each: Box::new(|_| {}),
        }
    }

    /// Calls `each` with every entry's name (as the archive gives it,
    /// lossily decoded) before the entry is unpacked: `tar xv`'s list.
    pub fn each(mut self, each: impl FnMut(&str) + 'a) -> Guard<'a> {
        self.each = Box::new(each);
        self
    }

    /// Unpacks every entry of `archive`, refusing the first hostile one.
    /// Errors: [`ArchiveError::Refused`] (nothing of that entry is made),
    /// [`ArchiveError::Malformed`], [`ArchiveError::Fs`] naming the entry
    /// (`ENOSPC`, `EISDIR`, ...). Entries before the failing one stay.
    pub fn unpack(mut self, archive: impl Read) -> Result<Unpacked, ArchiveError> {
        let mut archive = tar::Archive::new(Metered {
            inner: archive,
            left: self.left.clone(),
        });
        let mut entries = archive.entries().map_err(|e| ArchiveError::Malformed {
            name: None,
            detail: e.to_string(),
        })?;
        loop {
            self.left.set(METADATA_BUDGET);
            let Some(entry) = entries.next() else {
                break;
            };
            let entry = entry.map_err(|e| ArchiveError::Malformed {
                name: None,
                detail: e.to_string(),
            })?;
            self.entry(entry)?;
        }
        // Innermost first, so a parent's mtime is set after its children's.
        for (ino, perm, mtime) in std::mem::take(&mut self.dirs).into_iter().rev() {
            let set = SetAttr {
                perm: Some(perm),
                mtime: Some(at_seconds(mtime)),
                ..SetAttr::default()
            };
            self.fs.setattr(ino, &set).map_err(ArchiveError::fs("."))?;
        }
        Ok(self.done)
    }

    fn entry<R: Read>(&mut self, mut entry: tar::Entry<'_, R>) -> Result<(), ArchiveError> {
        let kind = entry.header().entry_type();
        if matches!(
            kind,
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader
        ) {
            return Ok(());
        }
        let raw = entry.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&raw).into_owned();
        // Extended attributes from pax records, as GNU tar and bsdtar
        // write them (`SCHILY.xattr.NAME`).
        let xattrs: Vec<(Vec<u8>, Vec<u8>)> = match entry.pax_extensions() {
            Ok(Some(records)) => {
                let records: Vec<_> = records.filter_map(Result::ok).collect();
                // GNU's pax sparse files put their map in the data, under
                // another name: unpacked as they are they would be wrong.
                if records
                    .iter()
                    .any(|r| r.key_bytes().starts_with(b"GNU.sparse."))
                {
                    return Err(ArchiveError::refused(
                        &shown,
                        "a pax sparse file (GNU.sparse records) is not supported; archive it without --sparse, or with --format=gnu",
                    ));
                }
                records
                    .iter()
                    .filter_map(|r| {
                        let name = r.key_bytes().strip_prefix(b"SCHILY.xattr.")?;
                        Some((name.to_vec(), r.value_bytes().to_vec()))
                    })
                    .collect()
            }
            Ok(None) => Vec::new(),
            Err(e) => {
                return Err(ArchiveError::Malformed {
                    name: Some(shown),
                    detail: e.to_string(),
                });
            }
        };
        let fs = self.fs;
        let set_xattrs = |ino: Ino| -> Result<(), ArchiveError> {
            for (name, value) in &xattrs {
                match fs.setxattr(ino, name, value, XattrFlags::default()) {
                    Ok(()) => {}
                    // A namespace a computer does not keep (system.*, an
                    // ACL): left out, as tar does where it cannot set one.
                    Err(e) if matches!(e.errno(), Errno::ENOTSUP | Errno::EINVAL) => {}
                    Err(e) => return Err(ArchiveError::fs(&shown)(e)),
                }
            }
            Ok(())
        };
        (self.each)(&shown);
        let parts = components(&raw).map_err(|why| ArchiveError::refused(&shown, why))?;
        let name = parts.join("/");
        let perm = entry.header().mode().unwrap_or(0o644) & KEPT_PERM;
        let mtime = entry.header().mtime().unwrap_or(0);
        let Some((last, parents)) = parts.split_last() else {
            // The directory itself (`./`): its mode and mtime.
            if kind == tar::EntryType::Directory {
                self.dirs.push((self.root, perm, mtime));
                self.done.entries += 1;
                return Ok(());
            }
            return Err(ArchiveError::refused(
                &shown,
                "only a directory may name the top",
            ));
        };
        let parent = self.parent(parents, &shown)?;
        let on = ArchiveError::fs(&shown);
        let existing = match self.fs.lookup(parent, last.as_bytes()) {
            Ok(attr) => Some(attr),
            Err(e) if e.errno() == Errno::ENOENT => None,
            Err(e) => return Err(on(e)),
        };
        let is_dir = existing
            .as_ref()
            .is_some_and(|a| a.kind == FileKind::Directory);
        let set_mtime = |ino: Ino| {
            let set = SetAttr {
                mtime: Some(at_seconds(mtime)),
                ..SetAttr::default()
            };
            self.fs.setattr(ino, &set).map(|_| ())
        };
        match kind {
            tar::EntryType::Directory => {
                let ino = match existing {
                    Some(attr) if attr.kind == FileKind::Directory => attr.ino,
                    Some(_) => {
                        self.fs.unlink(parent, last.as_bytes()).map_err(&on)?;
                        self.mkdir(parent, last, perm, &shown)?
                    }
                    None => self.mkdir(parent, last, perm, &shown)?,
                };
                set_xattrs(ino)?;
                self.dirs.push((ino, perm, mtime));
            }
            // GNU sparse entries read as whole files, holes as zeros.
            tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => {
                if is_dir {
                    return Err(on(Errno::EISDIR.into()));
                }
                let (attr, handle) = self
                    .fs
                    .create_unnamed(parent, perm, self.owner)
                    .map_err(&on)?;
                let size = entry.size();
                // File data is bounded by the quota, not the metadata budget.
                self.left.set(u64::MAX);
                let mut at = 0u64;
                let mut buf = vec![0u8; STEP_BYTES];
                loop {
                    let n =
                        read_full(&mut entry, &mut buf).map_err(|e| ArchiveError::Malformed {
                            name: Some(shown.clone()),
                            detail: e.to_string(),
                        })?;
                    if n == 0 {
                        break;
                    }
                    // A step of zeros stays a hole (as `cp --sparse=auto`
                    // makes them): sparse files come in sparse.
                    if buf[..n].iter().all(|&b| b == 0) {
                        at += n as u64;
                        continue;
                    }
                    let mut done = 0;
                    while done < n {
                        let w = self.fs.write(attr.ino, at, &buf[done..n]).map_err(&on)?;
                        if w == 0 {
                            return Err(on(Errno::EIO.into()));
                        }
                        done += w;
                        at += w as u64;
                    }
                }
                // A stream that ended inside the file leaves what was there.
                if at != size {
                    return Err(ArchiveError::Malformed {
                        name: Some(shown.clone()),
                        detail: format!("the stream ended after {at} of its {size} bytes"),
                    });
                }
                // A hole at the end: the length, without data.
                if self.fs.getattr(attr.ino).map_err(&on)?.size < at {
                    let set = SetAttr {
                        size: Some(at),
                        ..SetAttr::default()
                    };
                    self.fs.setattr(attr.ino, &set).map_err(&on)?;
                }
                set_xattrs(attr.ino)?;
                set_mtime(attr.ino).map_err(&on)?;
                // A symlink under the name is replaced, not followed.
                if existing
                    .as_ref()
                    .is_some_and(|a| a.kind != FileKind::RegularFile)
                {
                    self.fs.unlink(parent, last.as_bytes()).map_err(&on)?;
                }
                self.fs
                    .link_unnamed(attr.ino, parent, last.as_bytes(), true)
                    .map_err(&on)?;
                drop(handle);
                self.done.bytes += at;
                self.files.insert(name, attr.ino);
            }
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| ArchiveError::refused(&shown, "a symlink without a target"))?
                    .into_owned();
                if is_dir {
                    return Err(on(Errno::EISDIR.into()));
                }
                if existing.is_some() {
                    self.fs.unlink(parent, last.as_bytes()).map_err(&on)?;
                }
                let attr = self
                    .fs
                    .symlink(parent, last.as_bytes(), &target, self.owner)
                    .map_err(&on)?;
                set_mtime(attr.ino).map_err(&on)?;
            }
            tar::EntryType::Link => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| ArchiveError::refused(&shown, "a hard link without a target"))?
                    .into_owned();
                let target = components(&target)
                    .map_err(|why| ArchiveError::refused(&shown, why))?
                    .join("/");
                let Some(&ino) = self.files.get(&target) else {
                    return Err(ArchiveError::refused(
                        &shown,
                        "a hard link to a file that is not earlier in this archive",
                    ));
                };
                if is_dir {
                    return Err(on(Errno::EISDIR.into()));
                }
                if existing.as_ref().is_some_and(|a| a.ino == ino) {
                    self.done.entries += 1;
                    return Ok(());
                }
                if existing.is_some() {
                    self.fs.unlink(parent, last.as_bytes()).map_err(&on)?;
                }
                self.fs.link(ino, parent, last.as_bytes()).map_err(&on)?;
                self.files.insert(name, ino);
            }
            tar::EntryType::Char | tar::EntryType::Block | tar::EntryType::Fifo => {
                return Err(ArchiveError::refused(
                    &shown,
                    "devices and FIFOs cannot be made in a computer",
                ));
            }
            other => {
                return Err(ArchiveError::refused(
                    &shown,
                    format!("entries of type {other:?} are not supported"),
                ));
            }
        }
        self.done.entries += 1;
        Ok(())
    }

    /// The directory `parents` names under the root, made where missing;
    /// never through a symlink.
    fn parent(&mut self, parents: &[&str], shown: &str) -> Result<Ino, ArchiveError> {
        let mut dir = self.root;
        for (i, part) in parents.iter().enumerate() {
            dir = match self.fs.lookup(dir, part.as_bytes()) {
                Ok(attr) if attr.kind == FileKind::Directory => attr.ino,
                Ok(attr) if attr.kind == FileKind::Symlink => {
                    let so_far = parents[..=i].join("/");
                    return Err(ArchiveError::refused(
                        shown,
                        format!(
                            "{so_far:?} is a symlink, and entries are never written through one"
                        ),
                    ));
                }
                Ok(_) => return Err(ArchiveError::fs(shown)(Errno::ENOTDIR.into())),
                Err(e) if e.errno() == Errno::ENOENT => {
                    self.mkdir(dir, part, IMPLIED_DIR_PERM, shown)?
                }
                Err(e) => return Err(ArchiveError::fs(shown)(e)),
            };
        }
        Ok(dir)
    }

    fn mkdir(
        &mut self,
        parent: Ino,
        name: &str,
        perm: u32,
        shown: &str,
    ) -> Result<Ino, ArchiveError> {
        // Made writable for its entries; the archive's mode comes at the end.
        self.fs
            .mkdir(parent, name.as_bytes(), perm | 0o700, self.owner)
            .map(|a| a.ino)
            .map_err(ArchiveError::fs(shown))
    }
}

/// `seconds` since the epoch as a time to set.
fn at_seconds(seconds: u64) -> TimeSet {
    TimeSet::At(Timespec::from_nanos(
        i64::try_from(seconds)
            .unwrap_or(0)
            .saturating_mul(1_000_000_000),
    ))
}

/// Reads until `buf` is full or the entry ends.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentcomputer_fs::{Limits, ROOT_INO};

    const OWNER: Owner = Owner {
        uid: 1000,
        gid: 1000,
    };

    fn fresh(limits: Limits) -> (tempfile::TempDir, Fs) {
        let dir = tempfile::tempdir().unwrap();
        let fs = Fs::create(&dir.path().join("fs.db"), limits).unwrap();
        (dir, fs)
    }

    /// A tar header of `kind` whose name field holds `name` verbatim (the
    /// tar writer itself refuses hostile names, so they are set raw).
    fn raw_header(kind: tar::EntryType, name: &[u8], size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(0o644);
        h.set_mtime(1_700_000_000);
        h.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name);
        h
    }

    /// Appends an entry with a raw name (and link name) to `out`.
    fn push(out: &mut Vec<u8>, kind: tar::EntryType, name: &[u8], link: &[u8], data: &[u8]) {
        let mut h = raw_header(kind, name, data.len() as u64);
        h.as_gnu_mut().unwrap().linkname[..link.len()].copy_from_slice(link);
        h.set_cksum();
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(data);
        let pad = (512 - data.len() % 512) % 512;
        out.extend(std::iter::repeat_n(0u8, pad));
    }

    fn end(mut out: Vec<u8>) -> Vec<u8> {
        out.extend_from_slice(&[0u8; 1024]);
        out
    }

    fn unpack(fs: &Fs, archive: impl Read) -> Result<Unpacked, ArchiveError> {
        Guard::new(fs, ROOT_INO, OWNER).unpack(archive)
    }

    fn exists(fs: &Fs, path: &str) -> bool {
        fs.resolve(ROOT_INO, path.as_bytes(), false).is_ok()
    }

    fn refused(e: &ArchiveError) -> bool {
        matches!(e, ArchiveError::Refused { .. })
    }

    #[test]
    fn a_tree_unpacks_with_modes_mtimes_symlinks_and_hard_links() {
        let (_d, fs) = fresh(Limits::default());
        let mut a = Vec::new();
        push(&mut a, tar::EntryType::Directory, b"./", b"", b"");
        push(&mut a, tar::EntryType::Directory, b"d/e/", b"", b"");
        push(&mut a, tar::EntryType::Regular, b"d/f.txt", b"", b"hello");
        push(
            &mut a,
            tar::EntryType::Symlink,
            b"d/l",
            b"../../etc/passwd",
            b"",
        );
        push(&mut a, tar::EntryType::Link, b"d/g.txt", b"d/f.txt", b"");
        let mut seen = Vec::new();
        let done = Guard::new(&fs, ROOT_INO, OWNER)
            .each(|name| seen.push(name.to_string()))
            .unpack(&end(a)[..])
            .unwrap();
        assert_eq!((done.entries, done.bytes), (5, 5));
        assert_eq!(seen, ["./", "d/e/", "d/f.txt", "d/l", "d/g.txt"]);
        let f = fs.resolve(ROOT_INO, b"d/f.txt", false).unwrap();
        assert_eq!(fs.read(f.ino, 0, 100).unwrap(), b"hello");
        assert_eq!((f.perm, f.nlink, f.uid), (0o644, 2, 1000));
        assert_eq!(f.mtime.as_nanos(), 1_700_000_000 * 1_000_000_000);
        // A directory the archive names gets its mtime after its entries.
        let e = fs.resolve(ROOT_INO, b"d/e", false).unwrap();
        assert_eq!(e.mtime.as_nanos(), 1_700_000_000 * 1_000_000_000);
        let l = fs.resolve(ROOT_INO, b"d/l", false).unwrap();
        assert_eq!(l.kind, FileKind::Symlink);
        assert_eq!(fs.readlink(l.ino).unwrap(), b"../../etc/passwd");
    }

    #[test]
    fn absolute_names_and_dotdot_are_refused() {
        for name in [&b"/etc/x"[..], b"../x", b"a/../../x", b"a/.."] {
            let (_d, fs) = fresh(Limits::default());
            let mut a = Vec::new();
            push(&mut a, tar::EntryType::Regular, name, b"", b"x");
            let err = unpack(&fs, &end(a)[..]).unwrap_err();
            assert!(refused(&err), "{err:?}");
            assert!(err.to_string().contains("refused"), "{err}");
            assert!(!exists(&fs, "x") && !exists(&fs, "etc"));
        }
    }

    #[test]
    fn nothing_is_written_through_a_symlink_the_archive_made() {
        let (_d, fs) = fresh(Limits::default());
        fs.mkdir(ROOT_INO, b"outside", 0o755, OWNER).unwrap();
        let under = fs.mkdir(ROOT_INO, b"under", 0o755, OWNER).unwrap();
        let mut a = Vec::new();
        push(&mut a, tar::EntryType::Symlink, b"l", b"../outside", b"");
        push(&mut a, tar::EntryType::Regular, b"l/planted", b"", b"x");
        let err = Guard::new(&fs, under.ino, OWNER)
            .unpack(&end(a)[..])
            .unwrap_err();
        assert!(refused(&err), "{err:?}");
        assert!(err.to_string().contains("symlink"), "{err}");
        assert!(!exists(&fs, "outside/planted"));
        // The link itself was made, as a link.
        assert_eq!(
            fs.resolve(ROOT_INO, b"under/l", false).unwrap().kind,
            FileKind::Symlink
        );
    }

    #[test]
    fn a_file_over_a_symlink_replaces_the_link() {
        let (_d, fs) = fresh(Limits::default());
        let target = fs.mkdir(ROOT_INO, b"keep", 0o755, OWNER).unwrap();
        fs.symlink(ROOT_INO, b"l", b"keep/file", OWNER).unwrap();
        let (_, h) = fs.create_unnamed(target.ino, 0o644, OWNER).unwrap();
        drop(h);
        let mut a = Vec::new();
        push(&mut a, tar::EntryType::Regular, b"l", b"", b"new");
        unpack(&fs, &end(a)[..]).unwrap();
        let l = fs.resolve(ROOT_INO, b"l", false).unwrap();
        assert_eq!(l.kind, FileKind::RegularFile);
        assert!(!exists(&fs, "keep/file"));
    }

    #[test]
    fn hard_links_outside_the_archive_are_refused() {
        let (_d, fs) = fresh(Limits::default());
        fs.mkdir(ROOT_INO, b"secret", 0o755, OWNER).unwrap();
        for target in [&b"secret"[..], b"../x", b"/etc/passwd", b"later"] {
            let mut a = Vec::new();
            push(&mut a, tar::EntryType::Link, b"h", target, b"");
            push(&mut a, tar::EntryType::Regular, b"later", b"", b"x");
            let err = unpack(&fs, &end(a)[..]).unwrap_err();
            assert!(refused(&err), "{err:?}");
            assert!(!exists(&fs, "h"));
        }
    }

    #[test]
    fn devices_and_fifos_are_refused_with_a_clear_error() {
        for kind in [
            tar::EntryType::Char,
            tar::EntryType::Block,
            tar::EntryType::Fifo,
        ] {
            let (_d, fs) = fresh(Limits::default());
            let mut a = Vec::new();
            push(&mut a, kind, b"dev", b"", b"");
            let err = unpack(&fs, &end(a)[..]).unwrap_err();
            assert!(err.to_string().contains("devices and FIFOs"), "{err}");
            assert!(!exists(&fs, "dev"));
        }
    }

    #[test]
    fn the_quota_is_reported_and_only_whole_files_stay() {
        let (_d, fs) = fresh(Limits {
            max_bytes: 256 * 1024,
            max_inodes: 1000,
        });
        let mut a = Vec::new();
        push(&mut a, tar::EntryType::Regular, b"small", b"", &[1u8; 1000]);
        push(
            &mut a,
            tar::EntryType::Regular,
            b"big",
            b"",
            &vec![2u8; 1 << 20],
        );
        let err = unpack(&fs, &end(a)[..]).unwrap_err();
        let ArchiveError::Fs { name, error } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(name, "big");
        assert!(
            matches!(error.errno(), Errno::ENOSPC | Errno::EDQUOT),
            "{err}"
        );
        assert!(exists(&fs, "small"));
        assert!(!exists(&fs, "big"));
        // The half-written file's space is given back.
        assert!(fs.statfs().unwrap().used_bytes < 128 * 1024);
    }

    #[test]
    fn setuid_bits_are_dropped() {
        let (_d, fs) = fresh(Limits::default());
        let mut a = Vec::new();
        let mut h = raw_header(tar::EntryType::Regular, b"s", 0);
        h.set_mode(0o4755);
        h.set_cksum();
        a.extend_from_slice(h.as_bytes());
        unpack(&fs, &end(a)[..]).unwrap();
        assert_eq!(fs.resolve(ROOT_INO, b"s", false).unwrap().perm, 0o755);
    }

    /// An endless reader: what a client claiming a huge header would send.
    struct Endless;

    impl Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            buf.fill(b'a');
            Ok(buf.len())
        }
    }

    #[test]
    fn a_long_name_header_claiming_gigabytes_is_refused_at_the_metadata_budget() {
        let (_d, fs) = fresh(Limits::default());
        let mut h = raw_header(tar::EntryType::GNULongName, b"././@LongLink", 8 << 30);
        h.set_cksum();
        let archive = std::io::Cursor::new(h.as_bytes().to_vec()).chain(Endless);
        let err = unpack(&fs, archive).unwrap_err();
        assert!(
            err.to_string().contains("bytes of headers and names"),
            "{err}"
        );
    }

    #[test]
    fn names_past_path_max_are_refused() {
        let (_d, fs) = fresh(Limits::default());
        let name = "a/".repeat(2100) + "f";
        let mut a = Vec::new();
        let mut header = tar::Header::new_gnu();
        header.set_size(1);
        header.set_mode(0o644);
        tar::Builder::new(&mut a)
            .append_data(&mut header, &name, &b"x"[..])
            .unwrap();
        let err = unpack(&fs, &a[..]).unwrap_err();
        assert!(err.to_string().contains("PATH_MAX"), "{err}");
    }

    #[test]
    fn a_stream_ending_inside_a_file_keeps_the_file_that_was_there() {
        let (_d, fs) = fresh(Limits::default());
        let mut a = Vec::new();
        push(&mut a, tar::EntryType::Regular, b"f", b"", b"old");
        unpack(&fs, &end(a)[..]).unwrap();
        let mut b = Vec::new();
        push(&mut b, tar::EntryType::Regular, b"f", b"", &[b'n'; 4096]);
        b.truncate(512 + 1000);
        let err = unpack(&fs, &b[..]).unwrap_err();
        assert!(err.to_string().contains("ended after"), "{err}");
        let f = fs.resolve(ROOT_INO, b"f", false).unwrap();
        assert_eq!(fs.read(f.ino, 0, 100).unwrap(), b"old");
    }

    #[test]
    fn a_packed_tree_lists_and_unpacks_to_the_same_files() {
        let (_d, fs) = fresh(Limits::default());
        let src = fs.mkdir(ROOT_INO, b"src", 0o755, OWNER).unwrap();
        let sub = fs.mkdir(src.ino, b"sub", 0o700, OWNER).unwrap();
        let (f, h) = fs.create_unnamed(sub.ino, 0o640, OWNER).unwrap();
        fs.write(f.ino, 0, &vec![7u8; 3 * crate::STEP_BYTES + 5])
            .unwrap();
        fs.link_unnamed(f.ino, sub.ino, b"f.bin", false).unwrap();
        drop(h);
        fs.link(f.ino, src.ino, b"hard").unwrap();
        fs.symlink(src.ino, b"l", b"sub/f.bin", OWNER).unwrap();
        let mut out = Vec::new();
        let mut written = Vec::new();
        let mut packer = crate::Packer::new(&fs, &mut out).each(|n| written.push(n.to_string()));
        packer.add(&src, "src").unwrap();
        packer.finish().unwrap();
        let mut listed = Vec::new();
        crate::list(&out[..], |l| {
            listed.push(l.name);
            Ok(())
        })
        .unwrap();
        assert_eq!(listed, written);
        assert_eq!(listed[0], "src/");
        assert!(listed.contains(&"src/sub/f.bin".to_string()), "{listed:?}");
        let into = fs.mkdir(ROOT_INO, b"into", 0o755, OWNER).unwrap();
        Guard::new(&fs, into.ino, OWNER).unpack(&out[..]).unwrap();
        let copy = fs.resolve(ROOT_INO, b"into/src/sub/f.bin", false).unwrap();
        assert_eq!(
            (copy.size, copy.perm, copy.nlink),
            (3 * crate::STEP_BYTES as u64 + 5, 0o640, 2)
        );
        let data = fs.read(copy.ino, 0, 4 * crate::STEP_BYTES).unwrap();
        assert!(data.len() == 3 * crate::STEP_BYTES + 5 && data.iter().all(|&b| b == 7));
        let l = fs.resolve(ROOT_INO, b"into/src/l", false).unwrap();
        assert_eq!(fs.readlink(l.ino).unwrap(), b"sub/f.bin");
    }
}
