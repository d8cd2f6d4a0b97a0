//! Reading committed transactions out of a SQLite WAL file.
//!
//! Format (SQLite file format docs, "The WAL File Format"): a 32-byte header
//! (magic `0x377f0682` or `0x377f0683`, version, page size, checkpoint
//! sequence, salt-1, salt-2, checksum-1, checksum-2; big-endian), then
//! frames of a 24-byte header (page number, database size in pages after
//! commit or 0, salt-1, salt-2, checksum-1, checksum-2) and one page. A
//! frame is valid when its salts equal the header's and its checksum, which
//! runs over every frame before it, matches; a valid frame with a nonzero
//! size ends a transaction. Frames after the last valid commit frame (a
//! transaction in progress, or stale frames of an earlier WAL cycle) are
//! not committed and are ignored, as SQLite's own recovery ignores them.

/// Bytes of the WAL file's header.
pub const HEADER_BYTES: u64 = 32;
/// Bytes of each frame's header, before its page.
pub const FRAME_HEADER_BYTES: u64 = 24;

/// The WAL header's fields the shipper needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalHeader {
    /// Checksums use big-endian words (magic `0x377f0683`).
    pub big_endian: bool,
    /// Page size in bytes.
    pub page_size: u32,
    /// Salt-1 and salt-2: change at every WAL restart (salt-1 by one).
    pub salt: (u32, u32),
    /// The header's checksum, which seeds the first frame's.
    pub checksum: (u32, u32),
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().unwrap())
}

/// SQLite's WAL checksum of `data` (a multiple of 8 bytes), continuing from `s`.
pub fn checksum(data: &[u8], s: (u32, u32), big_endian: bool) -> (u32, u32) {
    // One loop per byte order, so the order is not decided per word: the
    // shipper checksums every frame the writer appends.
    if big_endian {
        checksum_words(data, s, u32::from_be_bytes)
    } else {
        checksum_words(data, s, u32::from_le_bytes)
    }
}

#[inline(always)]
fn checksum_words(data: &[u8], (mut a, mut b): (u32, u32), word: fn([u8; 4]) -> u32) -> (u32, u32) {
    for w in data.chunks_exact(8) {
        a = a
            .wrapping_add(word([w[0], w[1], w[2], w[3]]))
            .wrapping_add(b);
        b = b
            .wrapping_add(word([w[4], w[5], w[6], w[7]]))
            .wrapping_add(a);
    }
    (a, b)
}

/// Parses and verifies a WAL header; `None` if `buf` holds no valid header
/// (an empty or new WAL file, or a torn header write).
pub fn parse_header(buf: &[u8]) -> Option<WalHeader> {
    if buf.len() < HEADER_BYTES as usize {
        return None;
    }
    let magic = be32(&buf[0..4]);
    if magic & !1 != 0x377f0682 {
        return None;
    }
    let big_endian = magic & 1 == 1;
    let page_size = match be32(&buf[8..12]) {
        1 => 65536,
        n if n.is_power_of_two() && (512..=65536).contains(&n) => n,
        _ => return None,
    };
    let checksum = checksum(&buf[0..24], (0, 0), big_endian);
    if checksum != (be32(&buf[24..28]), be32(&buf[28..32])) {
        return None;
    }
    Some(WalHeader {
        big_endian,
        page_size,
        salt: (be32(&buf[16..20]), be32(&buf[20..24])),
        checksum,
    })
}

/// One committed transaction: its frames in WAL order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    /// (page number, byte offset of the page within the scanned buffer).
    pub frames: Vec<(u32, usize)>,
    /// Database size in pages after the transaction.
    pub db_pages: u32,
}

/// What [`scan`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// Committed transactions, oldest first.
    pub transactions: Vec<Transaction>,
    /// Bytes of `buf` consumed up to the end of the last commit frame.
    pub consumed: usize,
    /// The running checksum at the end of the last commit frame.
    pub checksum: (u32, u32),
    /// Bytes of `buf` holding valid frames, committed or not: where the
    /// scan stopped. Less than a frame short of `buf`'s end means the
    /// buffer ended first and the WAL may hold more.
    pub valid: usize,
}

/// Scans `buf`, the WAL's bytes from a frame boundary on, for committed
/// transactions, with `checksum` the running checksum at that boundary
/// (the header's for the first frame).
pub fn scan(buf: &[u8], header: &WalHeader, checksum_in: (u32, u32)) -> Scan {
    let ps = header.page_size as usize;
    let frame = FRAME_HEADER_BYTES as usize + ps;
    let mut out = Scan {
        transactions: Vec::new(),
        consumed: 0,
        checksum: checksum_in,
        valid: 0,
    };
    let mut s = checksum_in;
    let mut pending = Vec::new();
    let mut at = 0;
    while at + frame <= buf.len() {
        let h = &buf[at..at + 24];
        if (be32(&h[8..12]), be32(&h[12..16])) != header.salt {
            break;
        }
        s = checksum(&h[0..8], s, header.big_endian);
        s = checksum(&buf[at + 24..at + frame], s, header.big_endian);
        if s != (be32(&h[16..20]), be32(&h[20..24])) {
            break;
        }
        let pgno = be32(&h[0..4]);
        if pgno == 0 {
            break;
        }
        pending.push((pgno, at + 24));
        at += frame;
        out.valid = at;
        let db_pages = be32(&h[4..8]);
        if db_pages != 0 {
            out.transactions.push(Transaction {
                frames: std::mem::take(&mut pending),
                db_pages,
            });
            out.consumed = at;
            out.checksum = s;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    #[test]
    fn finds_each_commit_of_a_real_wal_and_nothing_after_a_damaged_frame() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.db");
        let c = Connection::open(&db).unwrap();
        c.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;
             CREATE TABLE t(x BLOB);",
        )
        .unwrap();
        for i in 0..5 {
            c.execute("INSERT INTO t VALUES (randomblob(?1))", [1000 * (i + 1)])
                .unwrap();
        }
        let mut wal = std::fs::read(dir.path().join("t.db-wal")).unwrap();
        let h = parse_header(&wal).unwrap();
        assert_eq!(h.page_size, 4096);
        let all = scan(&wal[32..], &h, h.checksum);
        // The CREATE TABLE and five inserts.
        assert_eq!(all.transactions.len(), 6);
        assert_eq!(all.consumed, wal.len() - 32);
        // Damage a page of the fourth transaction: only three remain.
        let off = 32 + all.transactions[3].frames[0].1 + 100;
        wal[off] ^= 0xff;
        let cut = scan(&wal[32..], &h, h.checksum);
        assert_eq!(cut.transactions, all.transactions[..3].to_vec());
        // Resuming at a boundary with its checksum finds the rest.
        let rest = scan(&wal[32 + all.transactions[0].frames.len() * 4120..], &h, {
            let first = scan(
                &wal[32..32 + all.transactions[0].frames.len() * 4120],
                &h,
                h.checksum,
            );
            first.checksum
        });
        assert_eq!(rest.transactions.len(), 2);
    }

    #[test]
    fn refuses_a_bad_header() {
        assert_eq!(parse_header(&[0u8; 32]), None);
        assert_eq!(parse_header(&[0u8; 10]), None);
    }
}
