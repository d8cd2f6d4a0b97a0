//! Reading the commits a WAL gained since the last read, each frame once.
//!
//! The shipper keeps a [`Cursor`] at the end of the last commit frame it
//! read (a frame boundary, and the running checksum there) and reads on
//! from it to the end of the valid frames, in pieces that grow from a few
//! frames to 1 MiB: after a WAL restart the file still holds the old
//! cycle's frames, whose first one ends the read, and a busy writer's
//! megabytes take few system calls. Frames after the last commit frame
//! (a transaction still being written, which SQLite may still rewrite in
//! place) are not taken; the next read starts before them again.
//!
//! What the committed transactions wrote goes to [`Pending`], which keeps
//! the latest version of each page until an upload takes them all: an
//! object holds each page once however often the transactions it covers
//! wrote it, so a busy writer's rewrites of the same pages cost memory
//! once.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::wal::{self, WalHeader};

/// Frames read first from a cursor; each further piece is four times
/// larger, up to [`MAX_PIECE_BYTES`].
const FIRST_PIECE_FRAMES: usize = 16;
/// Largest piece read with one system call.
const MAX_PIECE_BYTES: usize = 1 << 20;
/// Page buffers kept for reuse after an upload (1 MiB of 4 KiB pages);
/// more are freed, so one large transaction does not pin its size.
const SPARE_PAGES: usize = 256;

/// The end of the last commit frame read: where the next read starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cursor {
    /// Byte offset in the WAL file (a frame boundary).
    pub(crate) offset: u64,
    /// The running WAL checksum at `offset`.
    pub(crate) checksum: (u32, u32),
}

/// Committed transactions read from the WAL and not yet uploaded: the
/// latest version of each page they wrote.
#[derive(Debug)]
pub(crate) struct Pending {
    page_size: usize,
    pages: BTreeMap<u32, Box<[u8]>>,
    spare: Vec<Box<[u8]>>,
    /// Transactions whose pages are held.
    pub(crate) txns: u64,
    /// Database size in pages after the last of them.
    pub(crate) db_pages: u32,
}

impl Pending {
    /// Nothing pending, for pages of `page_size` bytes.
    pub(crate) fn new(page_size: u32) -> Pending {
        Pending {
            page_size: page_size as usize,
            pages: BTreeMap::new(),
            spare: Vec::new(),
            txns: 0,
            db_pages: 0,
        }
    }

    /// The page size held pages have; changing it drops everything held.
    pub(crate) fn set_page_size(&mut self, page_size: u32) {
        if self.page_size != page_size as usize {
            *self = Pending::new(page_size);
        }
    }

    fn add(&mut self, pgno: u32, page: &[u8]) {
        match self.pages.get_mut(&pgno) {
            Some(held) => held.copy_from_slice(page),
            None => {
                let buf = match self.spare.pop() {
                    Some(mut b) => {
                        b.copy_from_slice(page);
                        b
                    }
                    None => page.into(),
                };
                self.pages.insert(pgno, buf);
            }
        }
    }

    /// The pages an object of the held transactions carries: those within
    /// the database's size after the last one, in page order.
    pub(crate) fn pages(&self) -> impl Iterator<Item = (u32, &[u8])> {
        self.pages
            .range(..=self.db_pages)
            .map(|(&p, b)| (p, &b[..]))
    }

    /// How many pages [`Pending::pages`] yields.
    pub(crate) fn page_count(&self) -> u32 {
        self.pages.range(..=self.db_pages).count() as u32
    }

    /// Frees the page buffers kept for reuse.
    pub(crate) fn release_spare(&mut self) {
        self.spare = Vec::new();
    }

    /// Forgets the held transactions (uploaded, or covered by a snapshot).
    pub(crate) fn clear(&mut self) {
        let pages = std::mem::take(&mut self.pages);
        let room = SPARE_PAGES.saturating_sub(self.spare.len());
        self.spare.extend(pages.into_values().take(room));
        self.txns = 0;
        self.db_pages = 0;
    }
}

/// How far a read goes, and how it knows a frame is committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bound {
    /// The WAL index says the cycle's committed frames end at this byte
    /// offset (its `mxFrame`, always a commit frame). Frames before it are
    /// taken on their salts alone, without recomputing the running
    /// checksum (as SQLite's own readers take them), and the checksum at
    /// the cursor is the one the last frame's header records: a committed
    /// frame is only written again after a WAL restart, which rewrites the
    /// WAL header before any frame of the new cycle, so a piece read
    /// before the header is seen unchanged holds no frame of another
    /// cycle. The bound keeps a read from chasing a writer that appends
    /// faster than it reads.
    Committed(u64),
    /// Nothing known (no readable WAL index): every frame's checksum is
    /// checked, to the last valid commit frame.
    Unknown,
}

/// Reads `file`, the WAL of the cycle `header` begins, from `at` to its
/// last committed frame within `bound`, adding each committed transaction
/// to `pending` and moving `at` past it as it is added (so an error part
/// way leaves the two agreeing). `buf` is scratch space kept between
/// reads. Returns the frames of the transactions added.
pub(crate) fn read_commits(
    file: &File,
    header: &WalHeader,
    at: &mut Cursor,
    pending: &mut Pending,
    buf: &mut Vec<u8>,
    bound: Bound,
) -> std::io::Result<u64> {
    let end = match bound {
        Bound::Committed(end) => end,
        Bound::Unknown => u64::MAX,
    };
    let trusted = matches!(bound, Bound::Committed(_));
    let ps = header.page_size as usize;
    let frame = wal::FRAME_HEADER_BYTES as usize + ps;
    let max_frames = (MAX_PIECE_BYTES / frame).max(1);
    let mut piece = FIRST_PIECE_FRAMES.min(max_frames);
    // Frames, whole, of a transaction begun in an earlier piece.
    let mut carried: Vec<u8> = Vec::new();
    let mut pos = at.offset;
    let mut sum = at.checksum;
    let mut added = 0u64;
    loop {
        let take = piece.min((end.saturating_sub(pos) / frame as u64) as usize);
        if take == 0 {
            return Ok(added);
        }
        let want = take * frame;
        if buf.len() < want {
            buf.resize(want, 0);
        }
        let n = read_full(file, &mut buf[..want], pos)?;
        if trusted && !same_cycle(file, header)? {
            // The WAL restarted while it was read: the next round sees it.
            return Ok(added);
        }
        let whole = n / frame;
        // Index in this piece of the first frame of the open transaction.
        let mut open = 0;
        let mut ended = whole < piece;
        for i in 0..whole {
            let f = &buf[i * frame..(i + 1) * frame];
            if (be32(&f[8..12]), be32(&f[12..16])) != header.salt {
                ended = true;
                break;
            }
            let recorded = (be32(&f[16..20]), be32(&f[20..24]));
            sum = if trusted {
                recorded
            } else {
                let s = wal::checksum(&f[0..8], sum, header.big_endian);
                wal::checksum(&f[24..], s, header.big_endian)
            };
            if sum != recorded || be32(&f[0..4]) == 0 {
                ended = true;
                break;
            }
            let db_pages = be32(&f[4..8]);
            if db_pages != 0 {
                let frames = carried
                    .chunks_exact(frame)
                    .chain(buf[open * frame..(i + 1) * frame].chunks_exact(frame));
                for g in frames {
                    pending.add(be32(&g[0..4]), &g[24..]);
                    added += 1;
                }
                carried.clear();
                pending.txns += 1;
                pending.db_pages = db_pages;
                open = i + 1;
                *at = Cursor {
                    offset: pos + ((i + 1) * frame) as u64,
                    checksum: sum,
                };
            }
        }
        if ended {
            return Ok(added);
        }
        carried.extend_from_slice(&buf[open * frame..whole * frame]);
        pos += (whole * frame) as u64;
        piece = (piece * 4).min(max_frames);
    }
}

/// Whether the WAL file's header still names the cycle `header` began
/// (its salts, bytes 16..24).
fn same_cycle(file: &File, header: &WalHeader) -> std::io::Result<bool> {
    let mut salt = [0u8; 8];
    if read_full(file, &mut salt, 16)? < salt.len() {
        return Ok(false);
    }
    Ok((be32(&salt[0..4]), be32(&salt[4..8])) == header.salt)
}

/// Fills `buf` from `offset` on, short only at the end of the file.
fn read_full(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], offset + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    /// A database in WAL mode that never checkpoints, with one table `t`.
    fn wal_database() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let c = Connection::open(dir.path().join("t.db")).unwrap();
        c.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;
             CREATE TABLE t(x BLOB);",
        )
        .unwrap();
        (dir, c)
    }

    /// The cursor at the first frame of the cycle `h` begins.
    fn first_frame(h: &WalHeader) -> Cursor {
        Cursor {
            offset: wal::HEADER_BYTES,
            checksum: h.checksum,
        }
    }

    /// Reads the WAL file at `path`, of the cycle `h` begins, from its
    /// first frame within `bound`: the cursor reached and what was taken.
    fn read_from_start(path: &std::path::Path, h: &WalHeader, bound: Bound) -> (Cursor, Pending) {
        let mut at = first_frame(h);
        let mut pending = Pending::new(h.page_size);
        let file = File::open(path).unwrap();
        read_commits(&file, h, &mut at, &mut pending, &mut Vec::new(), bound).unwrap();
        (at, pending)
    }

    fn wal_of(dir: &std::path::Path) -> (File, WalHeader) {
        let path = dir.join("t.db-wal");
        let head = std::fs::read(&path).unwrap();
        (
            File::open(&path).unwrap(),
            wal::parse_header(&head).unwrap(),
        )
    }

    /// What [`wal::scan`] finds in the whole WAL, as pages by number.
    fn scanned(dir: &std::path::Path) -> (u64, BTreeMap<u32, Vec<u8>>, u32) {
        let wal_bytes = std::fs::read(dir.join("t.db-wal")).unwrap();
        let h = wal::parse_header(&wal_bytes).unwrap();
        let tail = &wal_bytes[32..];
        let found = wal::scan(tail, &h, h.checksum);
        let mut pages = BTreeMap::new();
        for t in &found.transactions {
            for &(p, off) in &t.frames {
                pages.insert(p, tail[off..off + h.page_size as usize].to_vec());
            }
        }
        let db_pages = found.transactions.last().map_or(0, |t| t.db_pages);
        pages.retain(|&p, _| p <= db_pages);
        (found.transactions.len() as u64, pages, db_pages)
    }

    #[test]
    fn reads_each_commit_once_across_reads_and_large_transactions() {
        let (dir, c) = wal_database();
        let (file, h) = wal_of(dir.path());
        let mut at = first_frame(&h);
        let mut pending = Pending::new(h.page_size);
        let mut buf = Vec::new();
        let mut txns = 0;
        for round in 0..6 {
            // Small transactions, then one larger than the biggest piece.
            for i in 0..round * 3 {
                c.execute("INSERT INTO t VALUES (randomblob(?1))", [500 * (i + 1)])
                    .unwrap();
            }
            if round == 4 {
                c.execute("INSERT INTO t VALUES (randomblob(3000000))", [])
                    .unwrap();
            }
            let held = pending.txns;
            read_commits(&file, &h, &mut at, &mut pending, &mut buf, Bound::Unknown).unwrap();
            txns += pending.txns - held;
            // Read again at once: nothing new.
            let before = at;
            assert_eq!(
                read_commits(
                    &file,
                    &h,
                    &mut at,
                    &mut Pending::new(h.page_size),
                    &mut buf,
                    Bound::Unknown
                )
                .unwrap(),
                0
            );
            assert_eq!(at, before);
            if round % 2 == 1 {
                pending.clear();
            }
        }
        // Everything read, in order, matches one scan of the whole WAL.
        let (all_txns, _, _) = scanned(dir.path());
        assert_eq!(txns, all_txns);
        assert_eq!(
            at.offset,
            std::fs::metadata(dir.path().join("t.db-wal"))
                .unwrap()
                .len()
        );
        // And the pages held since the last clear are the latest versions.
        let mut fresh = Pending::new(h.page_size);
        let mut from_start = first_frame(&h);
        read_commits(
            &file,
            &h,
            &mut from_start,
            &mut fresh,
            &mut buf,
            Bound::Unknown,
        )
        .unwrap();
        let (_, pages, db_pages) = scanned(dir.path());
        assert_eq!(fresh.db_pages, db_pages);
        let got: BTreeMap<u32, Vec<u8>> = fresh.pages().map(|(p, b)| (p, b.to_vec())).collect();
        assert_eq!(got, pages);
        assert_eq!(fresh.page_count() as usize, pages.len());
    }

    #[test]
    fn stops_before_an_unfinished_transaction_and_a_damaged_frame() {
        let (dir, c) = wal_database();
        for i in 0..4 {
            c.execute("INSERT INTO t VALUES (randomblob(?1))", [2000 * (i + 1)])
                .unwrap();
        }
        let path = dir.path().join("t.db-wal");
        let mut bytes = std::fs::read(&path).unwrap();
        let h = wal::parse_header(&bytes).unwrap();
        let all = wal::scan(&bytes[32..], &h, h.checksum);
        // The last transaction loses its commit frame's last byte: torn.
        let cut = bytes.len() - 1;
        bytes.truncate(cut);
        let torn = dir.path().join("torn-wal");
        std::fs::write(&torn, &bytes).unwrap();
        let (at, pending) = read_from_start(&torn, &h, Bound::Unknown);
        assert_eq!(pending.txns as usize, all.transactions.len() - 1);
        let second_last = &all.transactions[all.transactions.len() - 2];
        let end = second_last.frames.last().unwrap().1 + h.page_size as usize;
        assert_eq!(at.offset as usize, 32 + end);
        // A damaged page in the third transaction: two are read.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[32 + all.transactions[2].frames[0].1 + 7] ^= 0xff;
        std::fs::write(&torn, &bytes).unwrap();
        let (_, pending) = read_from_start(&torn, &h, Bound::Unknown);
        assert_eq!(pending.txns, 2);
    }

    /// The bound the shipper passes: where the WAL index says the
    /// committed frames of the WAL's current cycle end.
    fn index_bound(dir: &std::path::Path, h: &WalHeader) -> Bound {
        let mut salt = [0u8; 8];
        salt[..4].copy_from_slice(&h.salt.0.to_be_bytes());
        salt[4..].copy_from_slice(&h.salt.1.to_be_bytes());
        let n = crate::wal_index::committed_frames(&dir.join("t.db-shm"), salt).unwrap();
        Bound::Committed(wal::HEADER_BYTES + n * (wal::FRAME_HEADER_BYTES + h.page_size as u64))
    }

    #[test]
    fn a_read_within_the_index_bound_takes_what_a_checked_read_takes() {
        let (dir, c) = wal_database();
        let (file, h) = wal_of(dir.path());
        let start = first_frame(&h);
        let (mut checked_at, mut trusted_at) = (start, start);
        let mut checked = Pending::new(h.page_size);
        let mut trusted = Pending::new(h.page_size);
        let mut buf = Vec::new();
        for round in 0..4 {
            for i in 0..5 {
                c.execute(
                    "INSERT INTO t VALUES (randomblob(?1))",
                    [700 * (i + round + 1)],
                )
                .unwrap();
            }
            if round == 2 {
                c.execute("INSERT INTO t VALUES (randomblob(2500000))", [])
                    .unwrap();
            }
            let bound = index_bound(dir.path(), &h);
            let a = read_commits(
                &file,
                &h,
                &mut checked_at,
                &mut checked,
                &mut buf,
                Bound::Unknown,
            )
            .unwrap();
            let b =
                read_commits(&file, &h, &mut trusted_at, &mut trusted, &mut buf, bound).unwrap();
            assert_eq!(a, b);
            // The cursor, its running checksum included, is the same:
            // a later checked read can go on from a trusted one.
            assert_eq!(checked_at, trusted_at);
            assert_eq!(Bound::Committed(trusted_at.offset), bound);
        }
        assert_eq!(checked.txns, trusted.txns);
        assert_eq!(checked.db_pages, trusted.db_pages);
        assert!(checked.pages().eq(trusted.pages()));
    }

    #[test]
    fn a_read_within_the_index_bound_stops_at_it_and_at_a_restarted_wal() {
        let (dir, c) = wal_database();
        c.execute("INSERT INTO t VALUES (randomblob(5000))", [])
            .unwrap();
        let (file, h) = wal_of(dir.path());
        let bound = index_bound(dir.path(), &h);
        // Committed after the bound was read: left for the next read.
        c.execute("INSERT INTO t VALUES (randomblob(5000))", [])
            .unwrap();
        let mut at = first_frame(&h);
        let mut pending = Pending::new(h.page_size);
        read_commits(&file, &h, &mut at, &mut pending, &mut Vec::new(), bound).unwrap();
        assert_eq!(pending.txns, 2, "the table's creation and the first insert");
        assert_eq!(Bound::Committed(at.offset), bound);
        // The WAL header names another cycle: nothing is taken.
        let wal_path = dir.path().join("t.db-wal");
        let mut bytes = std::fs::read(&wal_path).unwrap();
        bytes[16] ^= 1;
        let restarted = dir.path().join("restarted-wal");
        std::fs::write(&restarted, &bytes).unwrap();
        let mut at = first_frame(&h);
        let mut pending = Pending::new(h.page_size);
        let file = File::open(&restarted).unwrap();
        let taken = read_commits(&file, &h, &mut at, &mut pending, &mut Vec::new(), bound).unwrap();
        assert_eq!((taken, pending.txns), (0, 0));
        assert_eq!(at.offset, wal::HEADER_BYTES);
    }
}
