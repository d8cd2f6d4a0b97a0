//! Copying a file's content without holding it in memory, and with a way
//! to stop between steps.

use rusqlite::{OptionalExtension, params};

use crate::data::regular;
use crate::{Attr, Errno, Fs, Ino, Owner, Result, SetAttr, inode};

/// Largest number of bytes [`Fs::copy_file`] holds at once (1 MiB): its
/// one buffer, reused for every step.
pub const COPY_STEP_BYTES: usize = 1024 * 1024;

impl Fs {
    /// Copies the content of regular file `src` into a new file named
    /// `name` in `parent` (with `perm` and `owner`), as `cp` does, in steps
    /// of at most [`COPY_STEP_BYTES`]: memory stays bounded whatever the
    /// file's size. Holes are skipped without reading them, and stretches of
    /// zeros in the data stay holes (the copy is sparse, like
    /// `cp --sparse=auto`).
    ///
    /// The copy is built as an unnamed file and gets its name only at the
    /// end, in one transaction that replaces an existing non-directory
    /// entry when `replace` is set: other readers see the old file or the
    /// whole copy, never a part. `stop` is asked before every step; when it
    /// says yes the copy ends with `ECANCELED` and nothing of it stays
    /// (the unnamed file is freed).
    ///
    /// Errors: `ECANCELED`, `EISDIR` (`src` is a directory), `EINVAL` (not
    /// a regular file), `ENOSPC`, `EEXIST` (the name exists and not
    /// `replace`), `ENOENT`, `ENOTDIR`, `ENAMETOOLONG`.
    #[allow(clippy::too_many_arguments)] // each is one of cp(1)'s inputs
    pub fn copy_file(
        &self,
        src: Ino,
        parent: Ino,
        name: &[u8],
        perm: u32,
        owner: Owner,
        replace: bool,
        stop: &dyn Fn() -> bool,
    ) -> Result<Attr> {
        let size = {
            let r = self.inner.reader()?;
            r.snapshot(|c| Ok(regular(inode::get(c, src)?)?.attr.size))?
        };
        let (tmp, _handle) = self.create_unnamed(parent, perm, owner)?;
        let step = COPY_STEP_BYTES.min(usize::try_from(size).unwrap_or(COPY_STEP_BYTES));
        let mut buf = vec![0u8; step];
        let mut offset = 0u64;
        while offset < size {
            if stop() {
                return Err(Errno::ECANCELED.into());
            }
            // Jump over holes: the next chunk holding data decides where.
            let Some(next) = self.next_stored(src, offset)? else {
                break;
            };
            offset = offset.max(next);
            if offset >= size {
                break;
            }
            let n = self.read_into(src, offset, &mut buf)?;
            if n == 0 {
                break;
            }
            let data = &buf[..n];
            if data.iter().any(|&b| b != 0) {
                self.write(tmp.ino, offset, data)?;
            }
            offset += n as u64;
        }
        if stop() {
            return Err(Errno::ECANCELED.into());
        }
        let set = SetAttr {
            size: Some(size),
            ..SetAttr::default()
        };
        self.setattr(tmp.ino, &set)?;
        self.link_unnamed(tmp.ino, parent, name, replace)
    }

    /// Offset of the first chunk of `ino` at or after the chunk holding
    /// byte `offset` that stores data; `None` if there is none.
    fn next_stored(&self, ino: Ino, offset: u64) -> Result<Option<u64>> {
        let cs = self.inner.chunk_size;
        let r = self.inner.reader()?;
        let idx: Option<i64> = r.snapshot(|c| {
            Ok(
                c.prepare_cached("SELECT min(idx) FROM chunks WHERE ino = ?1 AND idx >= ?2")?
                    .query_row(params![ino as i64, (offset / cs) as i64], |r| r.get(0))
                    .optional()?
                    .flatten(),
            )
        })?;
        Ok(idx.map(|i| i as u64 * cs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Limits, ROOT_INO, WriteMode};

    const OWNER: Owner = Owner { uid: 0, gid: 0 };

    fn fs() -> (tempfile::TempDir, Fs) {
        let dir = tempfile::tempdir().unwrap();
        let fs = Fs::create(&dir.path().join("fs.db"), Limits::default()).unwrap();
        (dir, fs)
    }

    #[test]
    fn copies_data_and_holes_in_bounded_steps() {
        let (_d, fs) = fs();
        let mut content = vec![0u8; 3 * COPY_STEP_BYTES + 123];
        for (i, b) in content.iter_mut().enumerate().skip(COPY_STEP_BYTES) {
            *b = (i % 251) as u8;
        }
        let src = fs
            .write_all(
                ROOT_INO,
                b"src",
                &content,
                WriteMode::Truncate,
                0o640,
                OWNER,
            )
            .unwrap();
        // A hole of 1 GiB after the data.
        let big = SetAttr {
            size: Some(1 << 30),
            ..SetAttr::default()
        };
        fs.setattr(src.ino, &big).unwrap();
        let copy = fs
            .copy_file(src.ino, ROOT_INO, b"dst", 0o600, OWNER, false, &|| false)
            .unwrap();
        assert_eq!(copy.size, 1 << 30);
        assert_eq!(copy.perm, 0o600);
        assert_eq!(fs.read(copy.ino, 0, content.len()).unwrap(), content);
        assert_eq!(fs.read(copy.ino, (1 << 30) - 10, 100).unwrap(), vec![0; 10]);
        // The 1 GiB hole costs the copy nothing (zeros that share a chunk
        // with data are stored, as the engine stores any chunk from its
        // start).
        let used = fs.statfs().unwrap().used_bytes;
        assert!(used <= 2 * content.len() as u64, "used {used}");
    }

    #[test]
    fn a_stopped_copy_leaves_nothing() {
        let (_d, fs) = fs();
        let content = vec![7u8; 4 * COPY_STEP_BYTES];
        let src = fs
            .write_all(
                ROOT_INO,
                b"src",
                &content,
                WriteMode::Truncate,
                0o644,
                OWNER,
            )
            .unwrap();
        let used = fs.statfs().unwrap();
        let steps = std::cell::Cell::new(0);
        let err = fs
            .copy_file(src.ino, ROOT_INO, b"dst", 0o644, OWNER, true, &|| {
                steps.set(steps.get() + 1);
                steps.get() > 2
            })
            .unwrap_err();
        assert_eq!(err.errno(), Errno::ECANCELED);
        assert_eq!(
            fs.lookup(ROOT_INO, b"dst").unwrap_err().errno(),
            Errno::ENOENT
        );
        let after = fs.statfs().unwrap();
        assert_eq!(after.used_bytes, used.used_bytes);
        assert_eq!(after.used_inodes, used.used_inodes);
    }

    #[test]
    fn replace_swaps_the_target_whole() {
        let (_d, fs) = fs();
        let src = fs
            .write_all(ROOT_INO, b"src", b"new", WriteMode::Truncate, 0o644, OWNER)
            .unwrap();
        fs.write_all(
            ROOT_INO,
            b"dst",
            b"old content",
            WriteMode::Truncate,
            0o644,
            OWNER,
        )
        .unwrap();
        let err = fs
            .copy_file(src.ino, ROOT_INO, b"dst", 0o644, OWNER, false, &|| false)
            .unwrap_err();
        assert_eq!(err.errno(), Errno::EEXIST);
        let copy = fs
            .copy_file(src.ino, ROOT_INO, b"dst", 0o644, OWNER, true, &|| false)
            .unwrap();
        assert_eq!(fs.read_all(copy.ino).unwrap(), b"new");
    }
}
