//! Unpacking all or nothing: the archive goes into a hidden directory made
//! under the target, and only once every entry is in is that directory
//! merged into the target, by renames (which need no space). A refused
//! entry, a broken stream or the quota removes the hidden directory, so
//! the target is as it was and the space is given back.
//!
//! The merge follows [`Guard`]'s rules for what already exists: a file or
//! symlink is replaced, a directory is merged into, a non-directory under
//! a directory's name is replaced by the directory, and a non-directory
//! over an existing directory is `EISDIR` (found before anything is
//! renamed). Only a failure of the engine itself between two renames can
//! leave part of a merge; a stopped agent can leave the hidden directory
//! (`.import-…`) behind.

use std::cell::RefCell;
use std::collections::HashSet;
use std::io::Read;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use agentcomputer_fs::{Errno, FileKind, Fs, Ino, Owner, RenameFlags, SetAttr, TimeSet};

use crate::error::ArchiveError;
use crate::names::components;
use crate::unpack::{Guard, Unpacked};

/// How the hidden directory's name starts.
pub const STAGING_PREFIX: &str = ".import-";

/// Directory entries read per step.
const BATCH: usize = 1024;

/// Unpacks `archive` under directory `root` all or nothing (see the
/// module). Errors: as [`Guard::unpack`], and `EISDIR` naming an entry
/// that is not a directory where `root` has one.
pub fn unpack_whole(
    fs: &Fs,
    root: Ino,
    owner: Owner,
    archive: impl Read,
) -> Result<Unpacked, ArchiveError> {
    let name = staging_name();
    let staging = fs
        .mkdir(root, name.as_bytes(), 0o700, owner)
        .map_err(ArchiveError::fs("."))?
        .ino;
    // The names the archive gives (normalised): a directory it names gets
    // the archive's mode and mtime where it is merged into an existing one.
    let named = Rc::new(RefCell::new(HashSet::new()));
    let seen = named.clone();
    let unpacked = Guard::new(fs, staging, owner)
        .each(move |entry| {
            if let Ok(parts) = components(entry.as_bytes()) {
                seen.borrow_mut().insert(parts.join("/"));
            }
        })
        .unpack(archive)
        .and_then(|done| conflicts(fs, staging, root).map(|()| done));
    let done = match unpacked {
        Ok(done) => done,
        Err(e) => {
            let _ = remove_tree(fs, root, name.as_bytes(), staging);
            return Err(e);
        }
    };
    let named = named.borrow();
    // Read before the merge, which changes it.
    let merged = fs
        .getattr(staging)
        .map_err(ArchiveError::fs("."))
        .and_then(|top| merge(fs, staging, root, &named).map(|()| top));
    let top = match merged {
        Ok(top) => top,
        Err(e) => {
            let _ = remove_tree(fs, root, name.as_bytes(), staging);
            return Err(e);
        }
    };
    fs.rmdir(root, name.as_bytes())
        .map_err(ArchiveError::fs("."))?;
    if named.contains("") {
        copy_mode_and_mtime(fs, &top, root).map_err(ArchiveError::fs("."))?;
    }
    Ok(done)
}

/// A name no other import uses at the same time.
fn staging_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{STAGING_PREFIX}{nanos:x}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Every entry of directory `dir`.
fn entries(fs: &Fs, dir: Ino) -> agentcomputer_fs::Result<Vec<agentcomputer_fs::DirEntry>> {
    let mut all = Vec::new();
    let mut after = 0;
    loop {
        let batch = fs.readdir(dir, after, BATCH)?;
        let Some(last) = batch.last() else {
            return Ok(all);
        };
        after = last.cookie;
        all.extend(batch);
    }
}

/// `name` under `prefix`, as an archive would name it.
fn join(prefix: &str, name: &[u8]) -> String {
    let name = String::from_utf8_lossy(name);
    if prefix.is_empty() {
        name.into_owned()
    } else {
        format!("{prefix}/{name}")
    }
}

/// What `name` is under `dir`, if anything.
fn existing(fs: &Fs, dir: Ino, name: &[u8]) -> agentcomputer_fs::Result<Option<FileKind>> {
    match fs.lookup(dir, name) {
        Ok(attr) => Ok(Some(attr.kind)),
        Err(e) if e.errno() == Errno::ENOENT => Ok(None),
        Err(e) => Err(e),
    }
}

/// Finds the first staged non-directory whose name is a directory in the
/// target (`EISDIR`), before anything is renamed.
fn conflicts(fs: &Fs, staging: Ino, root: Ino) -> Result<(), ArchiveError> {
    let mut stack = vec![(staging, root, String::new())];
    while let Some((from, to, prefix)) = stack.pop() {
        for e in entries(fs, from).map_err(ArchiveError::fs(&prefix))? {
            let shown = join(&prefix, &e.name);
            let there = match fs.lookup(to, &e.name) {
                Ok(attr) => attr,
                Err(err) if err.errno() == Errno::ENOENT => continue,
                Err(err) => return Err(ArchiveError::fs(&shown)(err)),
            };
            match (e.kind, there.kind) {
                (FileKind::Directory, FileKind::Directory) => {
                    stack.push((e.ino, there.ino, shown));
                }
                (_, FileKind::Directory) => {
                    return Err(ArchiveError::fs(&shown)(Errno::EISDIR.into()));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// One step of the merge: a staged directory to move into a target one,
/// or, once its entries are moved, to remove and whose attributes to give.
enum Step {
    Merge {
        from: Ino,
        to: Ino,
        prefix: String,
    },
    Finish {
        parent: Ino,
        name: Vec<u8>,
        staged: agentcomputer_fs::Attr,
        to: Ino,
        prefix: String,
    },
}

/// Moves everything under `staging` into `root` (see the module).
fn merge(fs: &Fs, staging: Ino, root: Ino, named: &HashSet<String>) -> Result<(), ArchiveError> {
    let replace = RenameFlags::default();
    let mut steps = vec![Step::Merge {
        from: staging,
        to: root,
        prefix: String::new(),
    }];
    while let Some(step) = steps.pop() {
        match step {
            Step::Merge { from, to, prefix } => {
                for e in entries(fs, from).map_err(ArchiveError::fs(&prefix))? {
                    let shown = join(&prefix, &e.name);
                    let on = ArchiveError::fs(&shown);
                    match (e.kind, existing(fs, to, &e.name).map_err(&on)?) {
                        (FileKind::Directory, Some(FileKind::Directory)) => {
                            let there = fs.lookup(to, &e.name).map_err(&on)?.ino;
                            // Read now: moving its entries out changes it.
                            let staged = fs.getattr(e.ino).map_err(&on)?;
                            steps.push(Step::Finish {
                                parent: from,
                                name: e.name.clone(),
                                staged,
                                to: there,
                                prefix: shown.clone(),
                            });
                            steps.push(Step::Merge {
                                from: e.ino,
                                to: there,
                                prefix: shown.clone(),
                            });
                        }
                        (_, Some(FileKind::Directory)) => return Err(on(Errno::EISDIR.into())),
                        (FileKind::Directory, Some(_)) => {
                            // A directory does not replace a file by rename.
                            fs.unlink(to, &e.name).map_err(&on)?;
                            fs.rename(from, &e.name, to, &e.name, replace)
                                .map_err(&on)?;
                        }
                        _ => fs
                            .rename(from, &e.name, to, &e.name, replace)
                            .map_err(&on)?,
                    }
                }
            }
            Step::Finish {
                parent,
                name,
                staged,
                to,
                prefix,
            } => {
                let on = ArchiveError::fs(&prefix);
                fs.rmdir(parent, &name).map_err(&on)?;
                if named.contains(&prefix) {
                    copy_mode_and_mtime(fs, &staged, to).map_err(&on)?;
                }
            }
        }
    }
    Ok(())
}

/// Gives directory `to` the permission bits and mtime of `from`.
fn copy_mode_and_mtime(
    fs: &Fs,
    from: &agentcomputer_fs::Attr,
    to: Ino,
) -> agentcomputer_fs::Result<()> {
    let set = SetAttr {
        perm: Some(from.perm),
        mtime: Some(TimeSet::At(from.mtime)),
        ..SetAttr::default()
    };
    fs.setattr(to, &set).map(|_| ())
}

/// Removes directory `parent/name` (inode `dir`) and everything below it,
/// depth first with an explicit stack.
fn remove_tree(fs: &Fs, parent: Ino, name: &[u8], dir: Ino) -> agentcomputer_fs::Result<()> {
    let mut stack: Vec<(Ino, Vec<u8>, Ino)> = vec![(parent, name.to_vec(), dir)];
    while let Some((parent, name, dir)) = stack.last().cloned() {
        let batch = fs.readdir(dir, 0, BATCH)?;
        if batch.is_empty() {
            fs.rmdir(parent, &name)?;
            stack.pop();
            continue;
        }
        for e in batch {
            if e.kind == FileKind::Directory {
                stack.push((dir, e.name, e.ino));
                break;
            }
            fs.unlink(dir, &e.name)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentcomputer_fs::{Limits, ROOT_INO, WriteMode};

    const OWNER: Owner = Owner {
        uid: 1000,
        gid: 1000,
    };

    fn fresh(max_bytes: u64) -> (tempfile::TempDir, Fs) {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits {
            max_bytes,
            max_inodes: 1000,
        };
        let fs = Fs::create(&dir.path().join("fs.db"), limits).unwrap();
        (dir, fs)
    }

    fn file(b: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(1_700_000_000);
        b.append_data(&mut h, name, data).unwrap();
    }

    fn dir(b: &mut tar::Builder<Vec<u8>>, name: &str, mode: u32) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_size(0);
        h.set_mode(mode);
        h.set_mtime(1_600_000_000);
        b.append_data(&mut h, name, std::io::empty()).unwrap();
    }

    fn write(fs: &Fs, path: &str, data: &[u8]) {
        fs.write_all(
            ROOT_INO,
            path.as_bytes(),
            data,
            WriteMode::Truncate,
            0o644,
            OWNER,
        )
        .unwrap();
    }

    fn read(fs: &Fs, path: &str) -> Vec<u8> {
        let attr = fs.resolve(ROOT_INO, path.as_bytes(), false).unwrap();
        fs.read_all(attr.ino).unwrap()
    }

    fn names(fs: &Fs, dir: Ino) -> Vec<String> {
        let mut all: Vec<String> = entries(fs, dir)
            .unwrap()
            .into_iter()
            .map(|e| String::from_utf8(e.name).unwrap())
            .collect();
        all.sort();
        all
    }

    /// Past the quota nothing of the archive stays, not even the whole
    /// files before the one that did not fit, and its space is back.
    #[test]
    fn past_the_quota_nothing_of_the_archive_stays() {
        let (_d, fs) = fresh(256 * 1024);
        write(&fs, "keep", b"kept");
        let used = fs.statfs().unwrap().used_bytes;
        let mut b = tar::Builder::new(Vec::new());
        file(&mut b, "small", &[1u8; 1000]);
        dir(&mut b, "sub", 0o755);
        file(&mut b, "sub/big", &vec![2u8; 1 << 20]);
        let archive = b.into_inner().unwrap();
        let err = unpack_whole(&fs, ROOT_INO, OWNER, &archive[..]).unwrap_err();
        let ArchiveError::Fs { name, error } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(name, "sub/big");
        assert!(
            matches!(error.errno(), Errno::ENOSPC | Errno::EDQUOT),
            "{err}"
        );
        assert_eq!(names(&fs, ROOT_INO), ["keep"]);
        assert_eq!(fs.statfs().unwrap().used_bytes, used);
    }

    /// Files and symlinks are replaced, directories merged into, a file
    /// under a directory's name gives way to the directory; a directory
    /// the archive names gets its mode and mtime, the top included.
    #[test]
    fn a_whole_archive_merges_as_the_guard_unpacks() {
        let (_d, fs) = fresh(1 << 30);
        fs.mkdir(ROOT_INO, b"d", 0o755, OWNER).unwrap();
        write(&fs, "d/old", b"old");
        write(&fs, "f", b"before");
        write(&fs, "x", b"a file first");
        fs.symlink(ROOT_INO, b"s", b"/etc/passwd", OWNER).unwrap();
        let mut b = tar::Builder::new(Vec::new());
        dir(&mut b, "./", 0o750);
        dir(&mut b, "d", 0o700);
        file(&mut b, "d/new", b"new");
        file(&mut b, "f", b"after");
        file(&mut b, "s", b"no longer a link");
        dir(&mut b, "x", 0o755);
        file(&mut b, "x/in", b"in");
        file(&mut b, "deep/er/file", b"implied parents");
        let archive = b.into_inner().unwrap();
        let done = unpack_whole(&fs, ROOT_INO, OWNER, &archive[..]).unwrap();
        assert_eq!(done.entries, 8);
        assert_eq!(names(&fs, ROOT_INO), ["d", "deep", "f", "s", "x"]);
        let d = fs.resolve(ROOT_INO, b"d", false).unwrap();
        assert_eq!(names(&fs, d.ino), ["new", "old"]);
        assert_eq!((d.perm, d.mtime.sec), (0o700, 1_600_000_000));
        assert_eq!(read(&fs, "f"), b"after");
        assert_eq!(read(&fs, "s"), b"no longer a link");
        assert_eq!(read(&fs, "x/in"), b"in");
        assert_eq!(read(&fs, "deep/er/file"), b"implied parents");
        let top = fs.getattr(ROOT_INO).unwrap();
        assert_eq!((top.perm, top.mtime.sec), (0o750, 1_600_000_000));
    }

    /// A file where the target has a directory is EISDIR before anything
    /// is renamed: the archive's other entries are not there either.
    #[test]
    fn a_file_over_a_directory_changes_nothing() {
        let (_d, fs) = fresh(1 << 30);
        fs.mkdir(ROOT_INO, b"d", 0o755, OWNER).unwrap();
        write(&fs, "d/inside", b"x");
        let mut b = tar::Builder::new(Vec::new());
        file(&mut b, "a", b"a");
        file(&mut b, "d", b"not a directory");
        let archive = b.into_inner().unwrap();
        let err = unpack_whole(&fs, ROOT_INO, OWNER, &archive[..]).unwrap_err();
        assert!(
            matches!(&err, ArchiveError::Fs { name, error } if name == "d" && error.errno() == Errno::EISDIR),
            "{err:?}"
        );
        assert_eq!(names(&fs, ROOT_INO), ["d"]);
    }
}
