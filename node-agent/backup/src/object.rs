//! The backup's object format and names.
//!
//! Every object is one position of a prefix's log, named
//! `<prefix>/log/<position as 16 hex digits>` (so names sort by position),
//! and is either a **snapshot** (every page of the database),
//! **changes** (the last version of each page that one or more whole
//! transactions wrote), or a **rewind** (the state of an earlier position
//! again: what a restore to that position writes, instead of the whole
//! database). Layout, integers big-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `ACBKUP01` |
//! | 1 | kind: 1 snapshot, 2 changes, 3 rewind |
//! | 3 | zero |
//! | 4 | page size in bytes |
//! | 8 | position |
//! | 8 | first transaction (count of transactions shipped before this object, plus one) |
//! | 8 | last transaction |
//! | 4 | database size in pages after this object |
//! | 4 | number of pages that follow |
//! | 32 | digest (trailer) of the previous position's object (zero for a first snapshot) |
//! | 8 | creation time, milliseconds since the Unix epoch |
//! | 8 | writer: a random number each shipper draws at start |
//! | n × (4 + page size) | page number, page (snapshot, changes) |
//! | 8 + 32 | rewind only: the earlier position, and its object's digest |
//! | 32 | SHA-256 of every byte before it |
//!
//! A rewind's page count is 0 and its database size is the earlier
//! position's; its previous digest is, as for every object, the one of the
//! position just before it, so the chain stays whole.
//!
//! The trailing digest catches a corrupted or truncated object; the
//! previous object's digest chains positions, so an object replaced by
//! another one's is caught too.

use object_store::path::Path;

/// The first 8 bytes of every object.
pub const MAGIC: &[u8; 8] = b"ACBKUP01";
/// Bytes before the first page record.
pub const HEADER_BYTES: usize = 96;
/// Bytes of the SHA-256 trailer.
pub const DIGEST_BYTES: usize = 32;

/// What an object holds (its header's kind byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Every page of the database.
    Snapshot = 1,
    /// The last version of each page one or more whole transactions wrote.
    Changes = 2,
    /// The state of an earlier position again ([`Object::rewind_target`]).
    Rewind = 3,
}

/// Bytes of a rewind's body: the earlier position and its object's digest.
pub const REWIND_BYTES: usize = 8 + 32;

/// An object's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Snapshot or changes.
    pub kind: Kind,
    /// The database's page size, in bytes.
    pub page_size: u32,
    /// The object's position in the log.
    pub position: u64,
    /// Transactions shipped before this object, plus one.
    pub first_txn: u64,
    /// The last transaction this object holds.
    pub last_txn: u64,
    /// The database's size in pages once this object is applied.
    pub db_pages: u32,
    /// Page records that follow the header.
    pub page_count: u32,
    /// The trailer digest of the previous position's object (zero for a
    /// first snapshot).
    pub prev_digest: [u8; 32],
    /// When it was made, milliseconds since the Unix epoch.
    pub created_ms: u64,
    /// The shipper that wrote it: two shippers at one WAL position never
    /// make byte-identical objects, so neither takes the other's for its own.
    pub writer: u64,
}

/// The key of `position` under `prefix`.
pub fn key(prefix: &Path, position: u64) -> Path {
    prefix.clone().join("log").join(format!("{position:016x}"))
}

/// The directory of a prefix's log (for listing).
pub fn log_dir(prefix: &Path) -> Path {
    prefix.clone().join("log")
}

/// The position a log key names, or `None` for another name.
pub fn position_of(key: &Path) -> Option<u64> {
    let name = key.filename()?;
    if name.len() != 16 {
        return None;
    }
    u64::from_str_radix(name, 16).ok()
}

/// Encodes an object: `pages` are (page number, page bytes of `page_size`).
/// Returns the bytes and their digest, the trailer (what the next position
/// records as `prev_digest`).
pub fn encode<'a>(
    header: &Header,
    pages: impl Iterator<Item = (u32, &'a [u8])>,
) -> (Vec<u8>, [u8; 32]) {
    let ps = header.page_size as usize;
    let mut out =
        Vec::with_capacity(HEADER_BYTES + header.page_count as usize * (4 + ps) + DIGEST_BYTES);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[header.kind as u8, 0, 0, 0]);
    out.extend_from_slice(&header.page_size.to_be_bytes());
    out.extend_from_slice(&header.position.to_be_bytes());
    out.extend_from_slice(&header.first_txn.to_be_bytes());
    out.extend_from_slice(&header.last_txn.to_be_bytes());
    out.extend_from_slice(&header.db_pages.to_be_bytes());
    out.extend_from_slice(&header.page_count.to_be_bytes());
    out.extend_from_slice(&header.prev_digest);
    out.extend_from_slice(&header.created_ms.to_be_bytes());
    out.extend_from_slice(&header.writer.to_be_bytes());
    debug_assert_eq!(out.len(), HEADER_BYTES);
    let mut n = 0u32;
    for (pgno, page) in pages {
        assert_eq!(page.len(), ps, "page {pgno} is not one page");
        out.extend_from_slice(&pgno.to_be_bytes());
        out.extend_from_slice(page);
        n += 1;
    }
    assert_eq!(n, header.page_count, "page count in the header");
    assert!(
        header.kind != Kind::Rewind || n == 0,
        "a rewind holds no pages"
    );
    let trailer = sha256(&out);
    out.extend_from_slice(&trailer);
    (out, trailer)
}

/// Encodes a rewind: the state at `header.position` is the state at
/// position `to`, whose object's digest is `to_digest`. `header.kind` must
/// be [`Kind::Rewind`] and its page count 0. Returns the bytes and their
/// digest.
pub fn encode_rewind(header: &Header, to: u64, to_digest: &[u8; 32]) -> (Vec<u8>, [u8; 32]) {
    assert_eq!(header.kind, Kind::Rewind);
    assert_eq!(header.page_count, 0);
    let (mut out, _) = encode(header, std::iter::empty());
    out.truncate(HEADER_BYTES);
    out.extend_from_slice(&to.to_be_bytes());
    out.extend_from_slice(to_digest);
    let trailer = sha256(&out);
    out.extend_from_slice(&trailer);
    (out, trailer)
}

/// SHA-256 through ring, whose assembly hashes at full speed in every
/// build profile (the shipper hashes every byte it uploads).
fn sha256(bytes: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    d.as_ref().try_into().expect("SHA-256 is 32 bytes")
}

/// An object's digest: its trailer, the SHA-256 of every byte before it
/// (meaningful once [`Object::decode`] verified it).
pub fn digest(bytes: &[u8]) -> [u8; 32] {
    let mut d = [0; 32];
    if bytes.len() >= DIGEST_BYTES {
        d.copy_from_slice(&bytes[bytes.len() - DIGEST_BYTES..]);
    }
    d
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().unwrap())
}
fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().unwrap())
}

/// Decodes the first [`HEADER_BYTES`] of an object. Errors: why the bytes
/// are not a header of this format (wrong magic, kind, page size).
pub fn decode_header(b: &[u8]) -> Result<Header, String> {
    if b.len() < HEADER_BYTES {
        return Err(format!(
            "{} bytes, shorter than a header ({HEADER_BYTES})",
            b.len()
        ));
    }
    if &b[0..8] != MAGIC {
        return Err("not a backup object (bad magic)".into());
    }
    let kind = match b[8] {
        1 => Kind::Snapshot,
        2 => Kind::Changes,
        3 => Kind::Rewind,
        k => return Err(format!("unknown kind {k}")),
    };
    let page_size = be32(&b[12..16]);
    if !page_size.is_power_of_two() || !(512..=65536).contains(&page_size) {
        return Err(format!("bad page size {page_size}"));
    }
    Ok(Header {
        kind,
        page_size,
        position: be64(&b[16..24]),
        first_txn: be64(&b[24..32]),
        last_txn: be64(&b[32..40]),
        db_pages: be32(&b[40..44]),
        page_count: be32(&b[44..48]),
        prev_digest: b[48..80].try_into().unwrap(),
        created_ms: be64(&b[80..88]),
        writer: be64(&b[88..96]),
    })
}

/// A verified object: its header and page records.
#[derive(Debug)]
pub struct Object<'a> {
    /// The parsed header.
    pub header: Header,
    bytes: &'a [u8],
}

impl<'a> Object<'a> {
    /// Verifies length and trailing digest and decodes the header.
    /// Errors: a description of what is wrong (truncated, corrupted).
    pub fn decode(bytes: &'a [u8]) -> Result<Object<'a>, String> {
        let o = Object::decode_unverified(bytes)?;
        o.verify()?;
        Ok(o)
    }

    /// [`Object::decode`] without the digest, which [`Object::verify`]
    /// checks (so a large object can be hashed while its pages are
    /// written elsewhere). Errors: what is wrong with the header or the
    /// length.
    pub fn decode_unverified(bytes: &'a [u8]) -> Result<Object<'a>, String> {
        let header = decode_header(bytes)?;
        if header.kind == Kind::Rewind && header.page_count != 0 {
            return Err(format!("a rewind with {} page records", header.page_count));
        }
        let body = match header.kind {
            Kind::Rewind => REWIND_BYTES as u64,
            _ => header.page_count as u64 * (4 + header.page_size as u64),
        };
        let expected = HEADER_BYTES as u64 + body + DIGEST_BYTES as u64;
        if bytes.len() as u64 != expected {
            return Err(format!(
                "{} bytes where its header promises {expected} (truncated or padded)",
                bytes.len()
            ));
        }
        Ok(Object { header, bytes })
    }

    /// Checks the trailing digest. Errors: a checksum mismatch.
    pub fn verify(&self) -> Result<(), String> {
        let body = &self.bytes[..self.bytes.len() - DIGEST_BYTES];
        if sha256(body)[..] != self.bytes[body.len()..] {
            return Err("checksum mismatch (corrupted)".into());
        }
        Ok(())
    }

    /// An object [`Object::decode`] verified before, with the header it
    /// gave, without hashing it again.
    pub(crate) fn verified(bytes: &'a [u8], header: Header) -> Object<'a> {
        Object { header, bytes }
    }

    /// The page records: (page number, page); none for a rewind.
    pub fn pages(&self) -> impl Iterator<Item = (u32, &'a [u8])> + '_ {
        let ps = self.header.page_size as usize;
        let body = match self.header.kind {
            Kind::Rewind => &[][..],
            _ => &self.bytes[HEADER_BYTES..self.bytes.len() - DIGEST_BYTES],
        };
        body.chunks_exact(4 + ps).map(|r| (be32(&r[0..4]), &r[4..]))
    }

    /// For a rewind: the earlier position whose state it is, and the
    /// digest of that position's object. `None` for other kinds.
    pub fn rewind_target(&self) -> Option<(u64, [u8; 32])> {
        (self.header.kind == Kind::Rewind).then(|| {
            let b = &self.bytes[HEADER_BYTES..HEADER_BYTES + REWIND_BYTES];
            (be64(&b[0..8]), b[8..40].try_into().unwrap())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let h = Header {
            kind: Kind::Changes,
            page_size: 512,
            position: 7,
            first_txn: 3,
            last_txn: 4,
            db_pages: 9,
            page_count: 2,
            prev_digest: [5; 32],
            created_ms: 1,
            writer: 2,
        };
        let a = vec![1u8; 512];
        let b = vec![2u8; 512];
        encode(&h, [(2, &a[..]), (9, &b[..])].into_iter()).0
    }

    #[test]
    fn round_trips() {
        let bytes = sample();
        let o = Object::decode(&bytes).unwrap();
        assert_eq!(o.header.position, 7);
        assert_eq!(o.header.prev_digest, [5; 32]);
        let pages: Vec<_> = o.pages().map(|(n, p)| (n, p[0])).collect();
        assert_eq!(pages, vec![(2, 1), (9, 2)]);
    }

    #[test]
    fn detects_a_flipped_byte_and_a_truncation() {
        let mut bytes = sample();
        bytes[300] ^= 1;
        assert!(Object::decode(&bytes).unwrap_err().contains("corrupted"));
        let bytes = sample();
        assert!(
            Object::decode(&bytes[..bytes.len() - 1])
                .unwrap_err()
                .contains("truncated")
        );
        assert!(Object::decode(&bytes[..40]).is_err());
    }

    #[test]
    fn a_rewind_round_trips_and_is_checked() {
        let h = Header {
            kind: Kind::Rewind,
            page_size: 4096,
            position: 9,
            first_txn: 0,
            last_txn: 0,
            db_pages: 3,
            page_count: 0,
            prev_digest: [5; 32],
            created_ms: 1,
            writer: 2,
        };
        let (bytes, digest) = encode_rewind(&h, 4, &[6; 32]);
        assert_eq!(bytes.len(), HEADER_BYTES + REWIND_BYTES + DIGEST_BYTES);
        let o = Object::decode(&bytes).unwrap();
        assert_eq!(o.header, h);
        assert_eq!(o.rewind_target(), Some((4, [6; 32])));
        assert_eq!(o.pages().count(), 0);
        assert_eq!(super::digest(&bytes), digest);
        let mut bad = bytes.clone();
        bad[HEADER_BYTES + 3] ^= 1;
        assert!(Object::decode(&bad).unwrap_err().contains("corrupted"));
        assert!(Object::decode(&bytes[..bytes.len() - 1]).is_err());
        let changes = sample();
        assert_eq!(Object::decode(&changes).unwrap().rewind_target(), None);
    }

    #[test]
    fn keys_sort_by_position_and_parse_back() {
        let p = Path::from("computers/demo");
        let k = key(&p, 0x1f);
        assert_eq!(k.as_ref(), "computers/demo/log/000000000000001f");
        assert_eq!(position_of(&k), Some(0x1f));
        assert_eq!(position_of(&Path::from("computers/demo/log/x")), None);
        assert!(key(&p, 9).as_ref() < key(&p, 10).as_ref());
    }
}
