//! Directory listing with `.` and `..` in front of the engine's entries.
//!
//! Offsets: `.` is 1, `..` is 2, and every other entry uses the engine's
//! stable cookie (never below 3), so the kernel resumes a listing with the
//! offset of the last entry it took (fuse_lowlevel.h, `readdir`).

use agentcomputer_fs::{Attr, Errno, FileKind, Fs, Ino, Result};

/// Entries fetched from the engine per query.
const BATCH: usize = 256;

/// One entry of a listing.
pub(crate) struct Entry<'a> {
    pub(crate) ino: Ino,
    /// Offset to resume after this entry.
    pub(crate) offset: u64,
    pub(crate) kind: FileKind,
    pub(crate) name: &'a [u8],
    /// The entry's attributes, read with the listing (`None` for `.` and
    /// `..`).
    pub(crate) attr: Option<&'a Attr>,
}

/// Calls `emit` for the entries of `dir` after `offset` until it returns
/// `true` (reply buffer full) or the directory ends. A directory removed
/// while open lists as empty, as on Linux.
pub(crate) fn list(
    fs: &Fs,
    dir: Ino,
    offset: u64,
    mut emit: impl FnMut(Entry<'_>) -> bool,
) -> Result<()> {
    let mut after = if offset <= 2 { 0 } else { offset };
    // The first batch comes with the parent, so `..` costs no extra query.
    let (parent, mut batch) = match fs.readdir_plus(dir, after, BATCH) {
        Ok(b) => b,
        Err(e) if e.errno() == Errno::ENOENT => return Ok(()),
        Err(e) => return Err(e),
    };
    if offset < 1
        && emit(Entry {
            ino: dir,
            offset: 1,
            kind: FileKind::Directory,
            name: b".",
            attr: None,
        })
    {
        return Ok(());
    }
    if offset < 2
        && emit(Entry {
            ino: parent,
            offset: 2,
            kind: FileKind::Directory,
            name: b"..",
            attr: None,
        })
    {
        return Ok(());
    }
    loop {
        for (e, a) in &batch {
            if emit(Entry {
                ino: e.ino,
                offset: e.cookie,
                kind: e.kind,
                name: &e.name,
                attr: Some(a),
            }) {
                return Ok(());
            }
            after = e.cookie;
        }
        if batch.len() < BATCH {
            return Ok(());
        }
        batch = match fs.readdir_plus(dir, after, BATCH) {
            Ok((_, b)) => b,
            Err(e) if e.errno() == Errno::ENOENT => return Ok(()),
            Err(e) => return Err(e),
        };
    }
}
