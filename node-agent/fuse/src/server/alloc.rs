//! `fallocate(2)` and `copy_file_range(2)` on top of the engine's
//! read/write/setattr calls.

use agentcomputer_fs::{Errno, Error, Fs, Ino, Result, SetAttr};

/// Bytes moved per engine call when zeroing or copying, so one request
/// never holds a huge buffer or a long write transaction.
const STEP: u64 = 1 << 20;

/// Applies `fallocate(fd, mode, offset, len)` to file `ino`.
///
/// * mode 0 / `FALLOC_FL_KEEP_SIZE`: [`Fs::allocate`] stores the range's
///   holes as zeros, so the space is counted against the quota and later
///   writes there cannot fail with `ENOSPC`; `KEEP_SIZE` past the end of
///   file is `EOPNOTSUPP` (the engine holds no bytes past the size).
/// * `FALLOC_FL_PUNCH_HOLE | KEEP_SIZE` and `FALLOC_FL_ZERO_RANGE`: the
///   range inside the file reads as zeros afterwards (written as zeros:
///   the engine has no call to drop a byte range).
/// * other modes: `EOPNOTSUPP`, as filesystems without them answer
///   (fallocate(2), "ERRORS").
pub(crate) fn fallocate(fs: &Fs, ino: Ino, offset: u64, len: u64, mode: i32) -> Result<()> {
    if len == 0 {
        return Err(Errno::EINVAL.into());
    }
    let end = offset.checked_add(len).ok_or(Errno::EFBIG)?;
    let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
    let rest = mode & !libc::FALLOC_FL_KEEP_SIZE;
    let size = fs.getattr(ino)?.size;
    match rest {
        // The engine stores the range's holes as zeros: the space is held
        // against the quota (see `Fs::allocate`), and the size grows.
        0 => return fs.allocate(ino, offset, len, keep_size),
        libc::FALLOC_FL_PUNCH_HOLE if keep_size => zero(fs, ino, offset, end.min(size))?,
        libc::FALLOC_FL_PUNCH_HOLE => return Err(Errno::EINVAL.into()),
        libc::FALLOC_FL_ZERO_RANGE => zero(fs, ino, offset, end.min(size))?,
        _ => return Err(Errno::EOPNOTSUPP.into()),
    }
    if !keep_size && end > size {
        fs.setattr(
            ino,
            &SetAttr {
                size: Some(end),
                ..SetAttr::default()
            },
        )?;
    }
    Ok(())
}

/// Writes zeros over `[from, to)` of file `ino`.
fn zero(fs: &Fs, ino: Ino, from: u64, to: u64) -> Result<()> {
    let zeros = vec![0u8; STEP.min(to.saturating_sub(from)) as usize];
    let mut at = from;
    while at < to {
        let n = STEP.min(to - at) as usize;
        fs.write(ino, at, &zeros[..n])?;
        at += n as u64;
    }
    Ok(())
}

/// Copies up to `len` bytes from `src` at `src_off` to `dst` at `dst_off`
/// inside the engine, stopping at the end of `src`. Returns bytes copied.
pub(crate) fn copy_range(
    fs: &Fs,
    src: Ino,
    src_off: u64,
    dst: Ino,
    dst_off: u64,
    len: u64,
) -> Result<u64> {
    // The reply carries a 32-bit count; callers loop for the rest.
    let len = len.min(1 << 30);
    let mut done = 0u64;
    while done < len {
        let want = STEP.min(len - done) as usize;
        let data = fs.read(src, src_off + done, want)?;
        if data.is_empty() {
            break;
        }
        if src == dst && overlaps(src_off + done, dst_off + done, data.len() as u64) {
            // copy_file_range(2): overlapping ranges of one file are EINVAL.
            return Err(Error::from(Errno::EINVAL));
        }
        fs.write(dst, dst_off + done, &data)?;
        done += data.len() as u64;
        if data.len() < want {
            break;
        }
    }
    Ok(done)
}

fn overlaps(a: u64, b: u64, len: u64) -> bool {
    a < b.saturating_add(len) && b < a.saturating_add(len)
}
