//! File content in fixed-size chunks: `chunks(ino, idx, data)`.
//!
//! Chunk `idx` holds bytes `[idx * cs, idx * cs + len(data))` of the file,
//! where `cs` is the chunk size. A chunk's blob stops at the last byte ever
//! written into it (or at the file size after a truncate), so a short file
//! costs its length, not a whole chunk. Missing chunks and bytes past a
//! blob's end, below the file size, are holes and read as zeros. The quota
//! counts the sum of blob lengths (`inodes.stored`, `meta.used_bytes`).

use rusqlite::{Connection, OptionalExtension, params};

use crate::fs::WriteTxn;
use crate::inode::{self, Inode};
use crate::{Errno, FileKind, Fs, Ino, Result};

/// A regular file, or the errno for using another kind as one: `EISDIR`
/// for a directory, `EINVAL` for anything else.
pub(crate) fn regular(i: Inode) -> Result<Inode> {
    match i.attr.kind {
        FileKind::RegularFile => Ok(i),
        FileKind::Directory => Err(Errno::EISDIR.into()),
        _ => Err(Errno::EINVAL.into()),
    }
}

/// Reads `[offset, offset + len)` of file `ino`, clipped to its size.
pub(crate) fn read_in(
    conn: &Connection,
    cs: u64,
    ino: Ino,
    offset: u64,
    len: usize,
) -> Result<Vec<u8>> {
    let f = regular(inode::get(conn, ino)?)?;
    let n = f.attr.size.saturating_sub(offset).min(len as u64) as usize;
    let mut out = vec![0u8; n];
    fill(conn, cs, ino, offset, &mut out)?;
    Ok(out)
}

/// Reads into `buf` from `offset` of file `ino`; returns the bytes read
/// (short at end of file).
pub(crate) fn read_into_in(
    conn: &Connection,
    cs: u64,
    ino: Ino,
    offset: u64,
    buf: &mut [u8],
) -> Result<usize> {
    let f = regular(inode::get(conn, ino)?)?;
    let n = f.attr.size.saturating_sub(offset).min(buf.len() as u64) as usize;
    let out = &mut buf[..n];
    out.fill(0);
    fill(conn, cs, ino, offset, out)?;
    Ok(n)
}

/// Copies the stored bytes of `[offset, offset + out.len())` into `out`,
/// which the caller zeroed (holes stay zero). Loads only the overlapping
/// chunks, in one range scan.
fn fill(conn: &Connection, cs: u64, ino: Ino, offset: u64, out: &mut [u8]) -> Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    let end = offset + out.len() as u64;
    let mut st = conn
        .prepare_cached("SELECT idx, data FROM chunks WHERE ino = ?1 AND idx BETWEEN ?2 AND ?3")?;
    let first = offset / cs;
    let last = (end - 1) / cs;
    let mut rows = st.query(params![ino as i64, first as i64, last as i64])?;
    while let Some(row) = rows.next()? {
        let idx = row.get::<_, i64>(0)? as u64;
        let data = row.get_ref(1)?.as_blob().map_err(rusqlite::Error::from)?;
        let start = idx * cs;
        // Overlap of [start, start + len(data)) with [offset, end).
        let lo = start.max(offset);
        let hi = (start + data.len() as u64).min(end);
        if lo < hi {
            out[(lo - offset) as usize..(hi - offset) as usize]
                .copy_from_slice(&data[(lo - start) as usize..(hi - start) as usize]);
        }
    }
    Ok(())
}

impl WriteTxn<'_> {
    /// Writes `data` at `offset` of file `ino`; see [`Fs::write`].
    pub(crate) fn write_data(&mut self, ino: Ino, offset: u64, data: &[u8]) -> Result<usize> {
        let f = regular(inode::get(self.conn(), ino)?)?;
        if data.is_empty() {
            return Ok(0);
        }
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= self.inner.limits().file_size_limit())
            .ok_or(Errno::EFBIG)?;
        let cs = self.inner.chunk_size;
        let first = offset / cs;
        let last = (end - 1) / cs;
        // Old blob lengths of the touched chunks, read from record headers
        // only (length() of a blob does not load it).
        let mut old_len = Vec::with_capacity((last - first + 1) as usize);
        {
            let mut st = self.conn().prepare_cached(
                "SELECT idx, length(data) FROM chunks WHERE ino = ?1 AND idx BETWEEN ?2 AND ?3",
            )?;
            let mut rows = st.query(params![ino as i64, first as i64, last as i64])?;
            while let Some(r) = rows.next()? {
                old_len.push((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64));
            }
        }
        let old_of = |idx: u64| {
            old_len
                .iter()
                .find(|(i, _)| *i == idx)
                .map(|(_, l)| *l)
                .unwrap_or(0)
        };
        let mut delta: i64 = 0;
        for idx in first..=last {
            let cstart = idx * cs;
            let wend = end.min(cstart + cs) - cstart;
            delta += wend.max(old_of(idx)) as i64 - old_of(idx) as i64;
        }
        self.check_byte_quota(delta)?;
        let mut get = self
            .conn()
            .prepare_cached("SELECT data FROM chunks WHERE ino = ?1 AND idx = ?2")?;
        let mut put = self.conn().prepare_cached(
            "INSERT INTO chunks (ino, idx, data) VALUES (?1, ?2, ?3)
             ON CONFLICT (ino, idx) DO UPDATE SET data = excluded.data",
        )?;
        for idx in first..=last {
            let cstart = idx * cs;
            let wstart = offset.max(cstart) - cstart;
            let wend = end.min(cstart + cs) - cstart;
            let src = &data[(cstart + wstart - offset) as usize..(cstart + wend - offset) as usize];
            let old = old_of(idx);
            if wstart == 0 && wend >= old {
                // The write covers all the chunk holds: no need to read it.
                put.execute(params![ino as i64, idx as i64, src])?;
                continue;
            }
            let mut buf: Vec<u8> = if old > 0 {
                get.query_row(params![ino as i64, idx as i64], |r| r.get(0))?
            } else {
                Vec::new()
            };
            if (buf.len() as u64) < wend {
                buf.resize(wend as usize, 0);
            }
            buf[wstart as usize..wend as usize].copy_from_slice(src);
            put.execute(params![ino as i64, idx as i64, buf])?;
        }
        drop((get, put));
        let size = f.attr.size.max(end);
        self.conn()
            .prepare_cached(
                "UPDATE inodes SET size = ?2, stored = stored + ?3, mtime = ?4, ctime = ?4
                 WHERE ino = ?1",
            )?
            .execute(params![ino as i64, size as i64, delta, self.now])?;
        inode::meta_add(self.conn(), "used_bytes", delta)?;
        self.changed_inode(ino);
        Ok(data.len())
    }

    /// `ENOSPC` if `delta` more stored bytes would pass the quota.
    pub(crate) fn check_byte_quota(&self, delta: i64) -> Result<()> {
        if delta <= 0 {
            return Ok(());
        }
        let used = inode::meta_get(self.conn(), "used_bytes")?.max(0) as u64;
        if used.saturating_add(delta as u64) > self.inner.limits().max_bytes {
            return Err(Errno::ENOSPC.into());
        }
        Ok(())
    }

    /// Sets the size of file `f` to `size`: drops the chunks past the end
    /// and cuts the last one; growing leaves a hole (nothing stored).
    pub(crate) fn truncate(&mut self, f: &Inode, size: u64) -> Result<()> {
        if size > f.attr.size && size > self.inner.limits().file_size_limit() {
            return Err(Errno::EFBIG.into());
        }
        let ino = f.attr.ino as i64;
        let cs = self.inner.chunk_size;
        let mut freed: i64 = 0;
        if size < f.attr.size && f.stored > 0 {
            // First chunk index lying wholly past the new end.
            let keep = size.div_ceil(cs) as i64;
            freed += self
                .conn()
                .prepare_cached(
                    "DELETE FROM chunks WHERE ino = ?1 AND idx >= ?2 RETURNING length(data)",
                )?
                .query_map(params![ino, keep], |r| r.get::<_, i64>(0))?
                .sum::<rusqlite::Result<i64>>()?;
            let tail = (size % cs) as i64;
            if tail != 0 {
                let idx = (size / cs) as i64;
                let old: Option<i64> = self
                    .conn()
                    .prepare_cached("SELECT length(data) FROM chunks WHERE ino = ?1 AND idx = ?2")?
                    .query_row(params![ino, idx], |r| r.get(0))
                    .optional()?;
                if let Some(old) = old.filter(|&l| l > tail) {
                    self.conn()
                        .prepare_cached(
                            "UPDATE chunks SET data = substr(data, 1, ?3) WHERE ino = ?1 AND idx = ?2",
                        )?
                        .execute(params![ino, idx, tail])?;
                    freed += old - tail;
                }
            }
        }
        self.conn()
            .prepare_cached(
                "UPDATE inodes SET size = ?2, stored = stored - ?3, mtime = ?4, ctime = ?4
                 WHERE ino = ?1",
            )?
            .execute(params![ino, size as i64, freed, self.now])?;
        inode::meta_add(self.conn(), "used_bytes", -freed)?;
        self.changed_inode(f.attr.ino);
        Ok(())
    }
}

impl WriteTxn<'_> {
    /// Reserves `[offset, offset + len)` of file `ino`; see [`Fs::allocate`].
    pub(crate) fn allocate(
        &mut self,
        ino: Ino,
        offset: u64,
        len: u64,
        keep_size: bool,
    ) -> Result<()> {
        let f = regular(inode::get(self.conn(), ino)?)?;
        if len == 0 {
            return Err(Errno::EINVAL.into());
        }
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.inner.limits().file_size_limit())
            .ok_or(Errno::EFBIG)?;
        if end > f.attr.size {
            if keep_size {
                // Stored bytes always lie below the size: space past the
                // end cannot be held without showing in the size.
                return Err(Errno::EOPNOTSUPP.into());
            }
            self.truncate(&f, end)?;
        }
        let cs = self.inner.chunk_size;
        let first = offset / cs;
        let last = (end - 1) / cs;
        // A chunk's blob runs from the chunk's start, so reserving bytes of
        // chunk `idx` means its blob reaching `need(idx)`.
        let need = |idx: u64| end.min((idx + 1) * cs) - idx * cs;
        let mut existing: Vec<(u64, u64)> = Vec::new();
        {
            let mut st = self.conn().prepare_cached(
                "SELECT idx, length(data) FROM chunks WHERE ino = ?1 AND idx BETWEEN ?2 AND ?3
                 ORDER BY idx",
            )?;
            let mut rows = st.query(params![ino as i64, first as i64, last as i64])?;
            while let Some(r) = rows.next()? {
                existing.push((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64));
            }
        }
        let have: u64 = existing.iter().map(|&(i, l)| l.min(need(i))).sum();
        let delta = (end - first * cs - have) as i64;
        self.check_byte_quota(delta)?;
        if delta == 0 {
            return Ok(());
        }
        {
            let mut grow = self.conn().prepare_cached(
                "UPDATE chunks SET data = data || zeroblob(?3) WHERE ino = ?1 AND idx = ?2",
            )?;
            let mut add = self.conn().prepare_cached(
                "INSERT INTO chunks (ino, idx, data) VALUES (?1, ?2, zeroblob(?3))",
            )?;
            let mut next = existing.iter().peekable();
            for idx in first..=last {
                match next.next_if(|&&(i, _)| i == idx) {
                    Some(&(_, l)) if l < need(idx) => {
                        grow.execute(params![ino as i64, idx as i64, (need(idx) - l) as i64])?;
                    }
                    Some(_) => {}
                    None => {
                        add.execute(params![ino as i64, idx as i64, need(idx) as i64])?;
                    }
                }
            }
        }
        self.conn()
            .prepare_cached("UPDATE inodes SET stored = stored + ?2, ctime = ?3 WHERE ino = ?1")?
            .execute(params![ino as i64, delta, self.now])?;
        inode::meta_add(self.conn(), "used_bytes", delta)?;
        self.changed_inode(ino);
        Ok(())
    }
}

impl Fs {
    /// Reserves space for `[offset, offset + len)` of file `ino`, as
    /// `fallocate(2)` mode 0 (or `FALLOC_FL_KEEP_SIZE` inside the file):
    /// the holes in the range are stored as zeros and counted against the
    /// byte quota, so later writes there cannot fail with `ENOSPC`. Bytes
    /// already stored are kept. Without `keep_size` the file grows to
    /// cover the range. One transaction: all reserved, or nothing.
    ///
    /// Errors: `EINVAL` for `len` 0; `EFBIG` past
    /// [`crate::Limits::file_size_limit`]; `ENOSPC` if the quota has no room
    /// for the holes; `EOPNOTSUPP` for `keep_size` with the range passing
    /// the end of file (space past the size cannot be held); `ENOENT`,
    /// `EISDIR`, `EINVAL` for other non-regular files.
    pub fn allocate(&self, ino: Ino, offset: u64, len: u64, keep_size: bool) -> Result<()> {
        let mut t = self.begin()?;
        t.allocate(ino, offset, len, keep_size)?;
        t.commit()
    }

    /// Reads up to `len` bytes at `offset` of file `ino`: short at end of
    /// file, empty past it; holes read as zeros. Only the chunks overlapping
    /// the range are loaded. Reads don't update atime (as `noatime`).
    ///
    /// Errors: `ENOENT`, `EISDIR`, `EINVAL` for other non-regular files.
    pub fn read(&self, ino: Ino, offset: u64, len: usize) -> Result<Vec<u8>> {
        let r = self.inner.reader()?;
        let cs = self.inner.chunk_size;
        r.snapshot(|c| read_in(c, cs, ino, offset, len))
    }

    /// Like [`Fs::read`], also returning the file's [`DataVersion`] as of
    /// the same snapshot: a reader that reads a file in several calls can
    /// tell whether all of them saw one version.
    ///
    /// Errors: as [`Fs::read`].
    pub fn read_versioned(
        &self,
        ino: Ino,
        offset: u64,
        len: usize,
    ) -> Result<(Vec<u8>, crate::DataVersion)> {
        let r = self.inner.reader()?;
        let cs = self.inner.chunk_size;
        r.snapshot(|c| {
            let f = regular(inode::get(c, ino)?)?;
            let data = read_in(c, cs, ino, offset, len)?;
            Ok((data, crate::DataVersion::of(&f.attr)))
        })
    }

    /// Like [`Fs::read`], into the caller's buffer (no allocation): reads
    /// up to `buf.len()` bytes at `offset` and returns how many were read
    /// (0 at or past end of file). Same errors as [`Fs::read`].
    pub fn read_into(&self, ino: Ino, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let r = self.inner.reader()?;
        let cs = self.inner.chunk_size;
        r.snapshot(|c| read_into_in(c, cs, ino, offset, buf))
    }

    /// Writes `data` at `offset` of file `ino` in one transaction touching
    /// only the chunks in range; a write past the end leaves a hole. Returns
    /// `data.len()` (never short). Updates size, mtime and ctime.
    ///
    /// Errors: `ENOSPC` if the stored bytes would pass the quota (nothing is
    /// written), `EFBIG` past [`crate::Limits::file_size_limit`], `ENOENT`, `EISDIR`,
    /// `EINVAL` for other non-regular files.
    pub fn write(&self, ino: Ino, offset: u64, data: &[u8]) -> Result<usize> {
        let mut t = self.begin()?;
        let n = t.write_data(ino, offset, data)?;
        t.commit()?;
        Ok(n)
    }

    /// Appends `data` at the end of file `ino` as it is inside the
    /// transaction (`O_APPEND`: the end is read and written atomically, so
    /// concurrent appends from any runtime never overwrite each other).
    /// Returns the offset the data went to and `data.len()`.
    ///
    /// Errors: as [`Fs::write`].
    pub fn append(&self, ino: Ino, data: &[u8]) -> Result<(u64, usize)> {
        let mut t = self.begin()?;
        let at = regular(inode::get(t.conn(), ino)?)?.attr.size;
        let n = t.write_data(ino, at, data)?;
        t.commit()?;
        Ok((at, n))
    }
}
