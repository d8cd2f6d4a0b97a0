//! The object database: loose objects (`objects/xx/yyyy…`, zlib-deflated
//! `"<kind> <size>\0<data>"`) and packs (`objects/pack/pack-*.{idx,pack}`),
//! in the layout of gitrepository-layout(5), so real git reads what this
//! writes and the other way round.
//!
//! New objects are always written loose. Packs are read through
//! gitoxide's `gix-pack` from their bytes in memory, loaded on first use.

use crate::error::{Error, Result};
use crate::files::{Files, OBJECT_PERM, join};
use agentcomputer_fs::Ino;
use flate2::Compression;
use flate2::read::ZlibDecoder;
use flate2::write::ZlibEncoder;
use gix_hash::{ObjectId, oid};
use gix_object::Kind;
use std::cell::RefCell;
use std::io::{Read, Write};
use std::path::PathBuf;

/// Bytes read from or written to a file per step when a blob is streamed:
/// larger files are hashed, compressed and checked out in steps of this
/// size, with a stop check between steps, never held whole.
pub const STEP: usize = 1 << 20;

/// The hash every repository here uses (SHA-256 repositories are refused).
pub const HASH: gix_hash::Kind = gix_hash::Kind::Sha1;

/// One object: its kind and its content.
#[derive(Debug, Clone)]
pub struct Object {
    /// blob, tree, commit or tag.
    pub kind: Kind,
    /// The content, without the loose header.
    pub data: Vec<u8>,
}

struct Pack {
    index: gix_pack::index::File<Vec<u8>>,
    data: gix_pack::data::File<Vec<u8>>,
}

/// The objects of one repository.
pub struct Odb {
    files: Files,
    /// `…/.git/objects`.
    dir: Vec<u8>,
    packs: RefCell<Option<Vec<Pack>>>,
}

/// Hex of `id`, for paths and messages.
pub fn hex(id: &oid) -> String {
    id.to_hex().to_string()
}

impl Odb {
    /// The object database at `dir` (`…/.git/objects`).
    pub fn new(files: Files, dir: Vec<u8>) -> Self {
        Self {
            files,
            dir,
            packs: RefCell::new(None),
        }
    }

    fn loose_path(&self, id: &oid) -> Vec<u8> {
        let h = hex(id);
        join(&self.dir, format!("{}/{}", &h[..2], &h[2..]).as_bytes())
    }

    /// Stores `data` as an object of `kind` and returns its id. Writing an
    /// object that exists already changes nothing.
    pub fn write(&self, kind: Kind, data: &[u8]) -> Result<ObjectId> {
        let id = gix_object::compute_hash(HASH, kind, data)
            .map_err(|e| Error::fatal(format!("hashing an object: {e}")))?;
        if self.contains(&id)? {
            return Ok(id);
        }
        let mut z = ZlibEncoder::new(Vec::with_capacity(data.len() / 2 + 64), Compression::fast());
        let io = |e: std::io::Error| Error::fatal(format!("compressing an object: {e}"));
        z.write_all(&gix_object::encode::loose_header(kind, data.len() as u64))
            .map_err(io)?;
        z.write_all(data).map_err(io)?;
        let bytes = z.finish().map_err(io)?;
        self.files
            .write_new(&self.loose_path(&id), &bytes, OBJECT_PERM)?;
        Ok(id)
    }

    /// The blob id of file `ino` (`size` bytes), read in [`STEP`]s.
    ///
    /// Errors: [`Error::Stopped`]; [`Error::Fatal`] when the file changed
    /// size while it was read.
    pub fn hash_file(&self, ino: Ino, size: u64, stop: &dyn Fn() -> bool) -> Result<ObjectId> {
        let mut hasher = gix_hash::hasher(HASH);
        hasher.update(&gix_object::encode::loose_header(Kind::Blob, size));
        self.each_step(ino, size, stop, |chunk| {
            hasher.update(chunk);
            Ok(())
        })?;
        hasher
            .try_finalize()
            .map_err(|e| Error::fatal(format!("hashing a file: {e}")))
    }

    /// Stores file `ino` (`size` bytes) as a blob, streamed: hashed in one
    /// pass, then (if new) compressed into `objects/tmp_obj_…` in a second
    /// and renamed into place, so memory stays at a few [`STEP`]s
    /// whatever the file's size and a stop leaves no object behind.
    pub fn write_file(&self, ino: Ino, size: u64, stop: &dyn Fn() -> bool) -> Result<ObjectId> {
        if size <= STEP as u64 {
            let data = self.files.read_ino(ino)?;
            return self.write(Kind::Blob, &data);
        }
        let id = self.hash_file(ino, size, stop)?;
        if self.contains(&id)? {
            return Ok(id);
        }
        let tmp = join(&self.dir, format!("tmp_obj_{}", hex(&id)).as_bytes());
        self.files.write(&tmp, b"", 0o644)?;
        let result = (|| {
            let tmp_ino = self
                .files
                .lstat(&tmp)?
                .ok_or_else(|| Error::fatal("temporary object vanished"))?
                .ino;
            let fs = self.files.engine();
            let io = |e: std::io::Error| Error::fatal(format!("compressing an object: {e}"));
            let mut z = ZlibEncoder::new(Vec::with_capacity(STEP + 64 * 1024), Compression::fast());
            z.write_all(&gix_object::encode::loose_header(Kind::Blob, size))
                .map_err(io)?;
            let mut written = 0u64;
            self.each_step(ino, size, stop, |chunk| {
                z.write_all(chunk).map_err(io)?;
                if z.get_ref().len() >= STEP {
                    let out = std::mem::take(z.get_mut());
                    fs.write(tmp_ino, written, &out)
                        .map_err(|e| Error::engine(&tmp, e))?;
                    written += out.len() as u64;
                }
                Ok(())
            })?;
            let out = z.finish().map_err(io)?;
            fs.write(tmp_ino, written, &out)
                .map_err(|e| Error::engine(&tmp, e))?;
            self.files.rename(&tmp, &self.loose_path(&id))
        })();
        if result.is_err() {
            let _ = self.files.remove_file(&tmp);
        }
        result.map(|()| id)
    }

    /// Writes blob `id` as the whole content of engine file `path` (made
    /// with `perm` if new). A large loose object is inflated in [`STEP`]s
    /// straight into the file; others are read whole first.
    pub fn checkout_blob(
        &self,
        id: &oid,
        path: &[u8],
        perm: u32,
        stop: &dyn Fn() -> bool,
    ) -> Result<()> {
        let loose = self.loose_path(id);
        let big = self.files.lstat(&loose)?.filter(|a| a.size > STEP as u64);
        let Some(source) = big else {
            let data = self.read_kind(id, Kind::Blob)?;
            return self.files.write(path, &data, perm);
        };
        let corrupt = || Error::Corrupt(format!("loose object {} is corrupt", hex(id)));
        let fs = self.files.engine().clone();
        let reader = EngineReader {
            fs: fs.clone(),
            ino: source.ino,
            offset: 0,
            size: source.size,
        };
        let mut z = ZlibDecoder::new(std::io::BufReader::with_capacity(STEP, reader));
        let mut header = Vec::new();
        let mut byte = [0u8; 1];
        while header.len() < 64 {
            z.read_exact(&mut byte).map_err(|_| corrupt())?;
            header.push(byte[0]);
            if byte[0] == 0 {
                break;
            }
        }
        let (kind, size, _) = gix_object::decode::loose_header(&header).map_err(|_| corrupt())?;
        if kind != Kind::Blob {
            return Err(Error::fatal(format!(
                "object {} is a {kind}, not a blob",
                hex(id)
            )));
        }
        self.files.write(path, b"", perm)?;
        let dest = self
            .files
            .lstat(path)?
            .ok_or_else(|| Error::fatal("checked-out file vanished"))?
            .ino;
        let mut buf = vec![0u8; STEP];
        let mut written = 0u64;
        loop {
            if stop() {
                return Err(Error::Stopped);
            }
            let mut filled = 0;
            while filled < buf.len() {
                match z.read(&mut buf[filled..]).map_err(|_| corrupt())? {
                    0 => break,
                    n => filled += n,
                }
            }
            if filled == 0 {
                break;
            }
            fs.write(dest, written, &buf[..filled])
                .map_err(|e| Error::engine(path, e))?;
            written += filled as u64;
        }
        if written != size {
            return Err(corrupt());
        }
        Ok(())
    }

    /// Calls `f` with each [`STEP`] of file `ino`, checking `stop` first.
    fn each_step(
        &self,
        ino: Ino,
        size: u64,
        stop: &dyn Fn() -> bool,
        mut f: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let fs = self.files.engine();
        let mut offset = 0u64;
        while offset < size {
            if stop() {
                return Err(Error::Stopped);
            }
            let want = STEP.min((size - offset) as usize);
            let chunk = fs
                .read(ino, offset, want)
                .map_err(|e| Error::engine(b"", e))?;
            if chunk.len() != want {
                return Err(Error::fatal("a file changed size while git read it"));
            }
            f(&chunk)?;
            offset += want as u64;
        }
        Ok(())
    }

    /// Stores an encodable object (tree, commit, tag).
    pub fn write_object(&self, object: &impl gix_object::WriteTo) -> Result<ObjectId> {
        let mut buf = Vec::with_capacity(object.size() as usize);
        object
            .write_to(&mut buf)
            .map_err(|e| Error::fatal(format!("encoding an object: {e}")))?;
        self.write(object.kind(), &buf)
    }

    /// Whether the object `id` is stored.
    pub fn contains(&self, id: &oid) -> Result<bool> {
        if self.files.lstat(&self.loose_path(id))?.is_some() {
            return Ok(true);
        }
        self.with_packs(|packs| Ok(packs.iter().any(|p| p.index.lookup(id).is_some())))
    }

    /// The object `id`; `None` when it is not stored.
    pub fn try_read(&self, id: &oid) -> Result<Option<Object>> {
        if let Some(bytes) = self.files.read(&self.loose_path(id))? {
            return decode_loose(id, &bytes, self.files.max_whole()).map(Some);
        }
        self.with_packs(|packs| {
            for p in packs {
                if let Some(i) = p.index.lookup(id) {
                    return read_packed(self, p, i, id).map(Some);
                }
            }
            Ok(None)
        })
    }

    /// The object `id`. Errors: [`Error::Corrupt`] when it is missing.
    pub fn read(&self, id: &oid) -> Result<Object> {
        self.try_read(id)?
            .ok_or_else(|| Error::Corrupt(format!("unable to read {}", hex(id))))
    }

    /// The object `id`, which must be of `kind`.
    pub fn read_kind(&self, id: &oid, kind: Kind) -> Result<Vec<u8>> {
        let o = self.read(id)?;
        if o.kind != kind {
            return Err(Error::fatal(format!(
                "object {} is a {}, not a {}",
                hex(id),
                o.kind,
                kind
            )));
        }
        Ok(o.data)
    }

    /// Every stored id starting with the hex `prefix` (at least 4 digits),
    /// loose and packed, without repeats.
    pub fn ids_with_prefix(&self, prefix: &str) -> Result<Vec<ObjectId>> {
        let mut out = Vec::new();
        if prefix.len() < 4 || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(out);
        }
        let prefix = prefix.to_ascii_lowercase();
        for (name, _) in self.files.list(&join(&self.dir, &prefix.as_bytes()[..2]))? {
            let full = format!("{}{}", &prefix[..2], String::from_utf8_lossy(&name));
            if full.starts_with(&prefix)
                && let Ok(id) = ObjectId::from_hex(full.as_bytes())
            {
                out.push(id);
            }
        }
        self.with_packs(|packs| {
            for p in packs {
                for e in p.index.iter() {
                    if hex(&e.oid).starts_with(&prefix) && !out.contains(&e.oid) {
                        out.push(e.oid);
                    }
                }
            }
            Ok(())
        })?;
        Ok(out)
    }

    fn with_packs<T>(&self, f: impl FnOnce(&[Pack]) -> Result<T>) -> Result<T> {
        if self.packs.borrow().is_none() {
            let loaded = self.load_packs()?;
            *self.packs.borrow_mut() = Some(loaded);
        }
        let packs = self.packs.borrow();
        f(packs.as_deref().unwrap_or_default())
    }

    /// Forgets the packs loaded, after a fetch added one.
    pub fn refresh(&self) {
        *self.packs.borrow_mut() = None;
    }

    fn load_packs(&self) -> Result<Vec<Pack>> {
        let dir = join(&self.dir, b"pack");
        let mut packs = Vec::new();
        for (name, _) in self.files.list(&dir)? {
            let Some(stem) = name.strip_suffix(b".idx") else {
                continue;
            };
            let idx_path = join(&dir, &name);
            let mut pack_name = stem.to_vec();
            pack_name.extend_from_slice(b".pack");
            let pack_path = join(&dir, &pack_name);
            let (Some(idx), Some(data)) =
                (self.files.read(&idx_path)?, self.files.read(&pack_path)?)
            else {
                continue;
            };
            let lossy = |p: &[u8]| PathBuf::from(String::from_utf8_lossy(p).into_owned());
            let index =
                gix_pack::index::File::from_data(idx, lossy(&idx_path), HASH).map_err(|e| {
                    Error::Corrupt(format!("{}: {e}", String::from_utf8_lossy(&idx_path)))
                })?;
            let data = gix_pack::data::File::from_data(data, lossy(&pack_path), HASH)
                .map_err(|e| {
                    Error::Corrupt(format!("{}: {e}", String::from_utf8_lossy(&pack_path)))
                })?
                .with_alloc_limit_bytes(Some(
                    usize::try_from(self.files.max_whole()).unwrap_or(usize::MAX),
                ));
            packs.push(Pack { index, data });
        }
        Ok(packs)
    }
}

/// A file of the engine as a `Read`, for streamed inflation.
struct EngineReader {
    fs: agentcomputer_fs::Fs,
    ino: Ino,
    offset: u64,
    size: u64,
}

impl Read for EngineReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let want = buf.len().min((self.size - self.offset) as usize);
        if want == 0 {
            return Ok(0);
        }
        let n = self
            .fs
            .read_into(self.ino, self.offset, &mut buf[..want])
            .map_err(|e| std::io::Error::from_raw_os_error(e.errno() as i32))?;
        self.offset += n as u64;
        Ok(n)
    }
}

fn decode_loose(id: &oid, bytes: &[u8], max_whole: u64) -> Result<Object> {
    let corrupt = || Error::Corrupt(format!("loose object {} is corrupt", hex(id)));
    let mut z = ZlibDecoder::new(bytes);
    // The header first: an object declaring more than the limit is refused
    // before anything of it is inflated (a small file can declare and
    // inflate to gigabytes).
    let mut raw = Vec::with_capacity(64);
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\0") {
        if raw.len() >= 64 || z.read(&mut byte).map_err(|_| corrupt())? == 0 {
            return Err(corrupt());
        }
        raw.push(byte[0]);
    }
    let (_, declared, _) = gix_object::decode::loose_header(&raw).map_err(|_| corrupt())?;
    if declared > max_whole {
        return Err(Error::TooLarge {
            what: format!("object {}", hex(id)),
            bytes: declared,
            limit: max_whole,
        });
    }
    raw.reserve(declared as usize);
    // Never more than declared: a stream longer than its header is corrupt.
    z.take(declared + 1)
        .read_to_end(&mut raw)
        .map_err(|_| corrupt())?;
    let (kind, size, header_len) = gix_object::decode::loose_header(&raw).map_err(|_| corrupt())?;
    // In place: no second copy of the content.
    raw.drain(..header_len);
    let data = raw;
    if data.len() as u64 != size {
        return Err(corrupt());
    }
    Ok(Object { kind, data })
}

fn read_packed(odb: &Odb, pack: &Pack, index: u32, id: &oid) -> Result<Object> {
    let corrupt =
        |e: &dyn std::fmt::Display| Error::Corrupt(format!("packed object {}: {e}", hex(id)));
    let offset = pack.index.pack_offset_at_index(index);
    let entry = pack.data.entry(offset).map_err(|e| corrupt(&e))?;
    let mut out = Vec::new();
    let mut inflate = gix_zlib::Inflate::default();
    // A base named by id (a REF_DELTA) is looked up in this pack first,
    // then anywhere in the database.
    let resolve =
        |base: &oid,
         buf: &mut Vec<u8>|
         -> Result<Option<gix_pack::data::decode::entry::ResolvedBase>, gix_error::Error> {
            use gix_pack::data::decode::entry::ResolvedBase;
            if let Some(i) = pack.index.lookup(base) {
                return pack
                    .data
                    .entry(pack.index.pack_offset_at_index(i))
                    .map(|e| Some(ResolvedBase::InPack(e)));
            }
            match decode_base_elsewhere(odb, base) {
                Some(o) => {
                    buf.clear();
                    buf.extend_from_slice(&o.data);
                    Ok(Some(ResolvedBase::OutOfPack {
                        kind: o.kind,
                        end: o.data.len(),
                    }))
                }
                None => Ok(None),
            }
        };
    let outcome = pack
        .data
        .decode_entry(
            entry,
            &mut out,
            &mut inflate,
            &resolve,
            &mut gix_pack::cache::Never,
        )
        .map_err(|e| corrupt(&e))?;
    out.truncate(outcome.object_size as usize);
    Ok(Object {
        kind: outcome.kind,
        data: out,
    })
}

fn decode_base_elsewhere(odb: &Odb, base: &oid) -> Option<Object> {
    let bytes = odb.files.read(&odb.loose_path(base)).ok()??;
    decode_loose(base, &bytes, odb.files.max_whole()).ok()
}
