//! How many frames of a WAL are committed, from the WAL index (the `-shm`
//! file) instead of checking every frame.
//!
//! Format (SQLite docs, "WAL-mode File Format", section "The WAL-Index
//! Header"): the file begins with two copies of a 48-byte header in the
//! machine's byte order: `iVersion` (u32), unused (u32), `iChange` (u32),
//! `isInit` (u8), `bigEndCksum` (u8), `szPage` (u16), `mxFrame` (u32: the
//! last valid frame, always a commit frame), `nPage` (u32),
//! `aFrameCksum` (2 × u32), `aSalt` (2 × u32, the WAL header's salt bytes
//! as they are in the file), `aCksum` (2 × u32). A writer changes the two
//! copies one after the other, so a reader that finds them equal read a
//! whole header, as SQLite's own readers do.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Bytes of one copy of the header.
const HEADER_BYTES: usize = 48;

/// The WAL index header as a reader sees it whole (both copies equal),
/// `None` when it cannot be read or is being written. Every commit
/// changes it (`iChange`, `mxFrame`), and so does a WAL restart (the
/// salts): equal headers at two times mean nothing was committed between.
pub(crate) fn header(shm_path: &Path) -> Option<[u8; HEADER_BYTES]> {
    let file = File::open(shm_path).ok()?;
    let mut buf = [0u8; 2 * HEADER_BYTES];
    file.read_exact_at(&mut buf, 0).ok()?;
    let (first, second) = buf.split_at(HEADER_BYTES);
    (first == second && first[12] != 0).then(|| first.try_into().unwrap())
}

/// The frames of the WAL cycle whose header holds `salt` (its bytes
/// 16..24, as in the file) that are committed, as the WAL index at
/// `shm_path` says: `mxFrame`. `None` when the index cannot be read, is
/// not initialised, is being written (its two copies differ), or
/// describes another cycle (its salt differs: the WAL restarted).
pub(crate) fn committed_frames(shm_path: &Path, salt: [u8; 8]) -> Option<u64> {
    let first = header(shm_path)?;
    if first[32..40] != salt {
        return None;
    }
    let mx_frame = u32::from_ne_bytes(first[16..20].try_into().unwrap());
    Some(u64::from(mx_frame))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal;
    use rusqlite::Connection;

    #[test]
    fn the_index_counts_the_frames_a_scan_finds_committed() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.db");
        let shm = dir.path().join("t.db-shm");
        let c = Connection::open(&db).unwrap();
        c.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;
             CREATE TABLE t(x BLOB);",
        )
        .unwrap();
        let salt_of = |wal: &[u8]| -> [u8; 8] { wal[16..24].try_into().unwrap() };
        for i in 0..20 {
            c.execute("INSERT INTO t VALUES (randomblob(?1))", [3000 * (i + 1)])
                .unwrap();
            let bytes = std::fs::read(dir.path().join("t.db-wal")).unwrap();
            let h = wal::parse_header(&bytes).unwrap();
            let scan = wal::scan(&bytes[32..], &h, h.checksum);
            let frames = scan.consumed as u64 / (24 + u64::from(h.page_size));
            assert_eq!(committed_frames(&shm, salt_of(&bytes)), Some(frames));
            // Another cycle's salt is not this index's.
            let mut other = salt_of(&bytes);
            other[3] ^= 1;
            assert_eq!(committed_frames(&shm, other), None);
        }
        // After a restart the index describes the new cycle only.
        c.execute_batch("PRAGMA wal_checkpoint(RESTART)").unwrap();
        let old = std::fs::read(dir.path().join("t.db-wal")).unwrap();
        c.execute("INSERT INTO t VALUES (1)", []).unwrap();
        let new = std::fs::read(dir.path().join("t.db-wal")).unwrap();
        assert_ne!(salt_of(&old), salt_of(&new));
        assert_eq!(committed_frames(&shm, salt_of(&old)), None);
        assert!(committed_frames(&shm, salt_of(&new)).unwrap() >= 1);
        assert_eq!(
            committed_frames(&dir.path().join("missing-shm"), [0; 8]),
            None
        );
    }
}
