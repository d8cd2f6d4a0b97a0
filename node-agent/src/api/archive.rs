//! Export and Import: a tree of a computer as a tar stream, out and in.
//!
//! Export walks a directory without following any symlink under it and
//! writes GNU tar (long names as GNU extension entries) into a bounded
//! channel of chunks, on a blocking thread: a slow client holds the walk
//! back. Import reads the caller's tar stream on a blocking thread through
//! a bounded channel and unpacks each entry into the engine as it comes, so
//! neither side holds the archive.
//!
//! An archive comes from whoever holds the token, so Import trusts none of
//! its names ([`Guard`]): no absolute name, no `..`, no entry under a
//! symlink (the parent of every entry is walked one name at a time without
//! following links), hard links only to files this archive made, no
//! devices, FIFOs or sockets. Each file is written unnamed and linked in
//! once its data is all there, so a failure (the quota, a refused entry, a
//! broken stream) leaves only whole entries behind.

use std::collections::HashMap;
use std::io::{Read, Write};

use agentcomputer_fs::{FileKind, Fs, Ino, SetAttr, TimeSet, Timespec};
use agentcomputer_proto::{CHUNK_BYTES, v1 as pb};
use nix::errno::Errno;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::convert::{OWNER, resolve};
use super::streams::{StreamGate, idle_error};
use crate::errors::{errno_detail, fs_status};
use crate::paths::ApiPath;
use crate::registry::{Lease, Registry};

/// Chunks of an archive buffered between the blocking thread and the
/// client, either way.
const AHEAD: usize = 4;

/// Permission bits an unpacked entry may keep: not set-user-ID nor
/// set-group-ID (an archive does not choose who runs a program).
const KEPT_PERM: u32 = 0o1777;

/// Permission bits of a directory an entry needs but the archive does not
/// name.
const IMPLIED_DIR_PERM: u32 = 0o755;

/// The stream of an Export call.
pub type ExportStream = ReceiverStream<Result<pb::ExportChunk, Status>>;

/// Starts writing `req.path` of the leased computer as a tar stream,
/// holding `permit` (the stream caps) until it ends. Errors before
/// streaming: path errors; during: the engine's, and `DEADLINE_EXCEEDED`
/// when the client takes no chunk for `idle` (the lease and permit are
/// released then).
pub async fn export(
    lease: Lease,
    permit: super::streams::StreamPermit,
    req: pb::ExportRequest,
    idle: std::time::Duration,
) -> Result<ExportStream, Status> {
    let path = ApiPath::parse(&req.path)?;
    let fs = lease.fs().clone();
    let root = {
        let (fs, path) = (fs.clone(), path.clone());
        crate::blocking::blocking(move || resolve(&fs, &path, true)).await?
    };
    let top = match path.split_last() {
        Some((_, name)) => name.to_string(),
        None => "workspace".to_string(),
    };
    let (tx, rx) = mpsc::channel(AHEAD);
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        // Held while the archive is written: the computer stays open and
        // the stream counts against the caps of Read and Write streams.
        let _held = (lease, permit);
        let sink = ChunkSink {
            tx: tx.clone(),
            buf: Vec::with_capacity(CHUNK_BYTES),
            runtime,
            idle,
        };
        let mut builder = tar::Builder::new(sink);
        builder.mode(tar::HeaderMode::Complete);
        let mut exporter = Exporter {
            fs: &fs,
            builder: &mut builder,
            linked: HashMap::new(),
        };
        let done = match root.kind {
            FileKind::Directory => exporter.tree(root.ino, "."),
            _ => exporter.entry(&root, &top).map(|_| ()),
        };
        let done = done
            .and_then(|()| builder.into_inner())
            .and_then(|mut s| s.flush());
        if let Err(e) = done {
            // A client that left is no error to report.
            if e.kind() == std::io::ErrorKind::TimedOut {
                let _ = tx.try_send(Err(idle_error("export", idle)));
            } else if e.kind() != std::io::ErrorKind::BrokenPipe {
                let status = match e.get_ref().and_then(|i| i.downcast_ref::<FsFailure>()) {
                    Some(FsFailure(status)) => status.clone(),
                    None => Status::internal(format!("EIO: export: {e}")),
                };
                let _ = tx.blocking_send(Err(status));
            }
        }
    });
    Ok(ReceiverStream::new(rx))
}

/// An engine failure carried through `std::io::Error` to the stream.
#[derive(Debug)]
struct FsFailure(Status);

impl std::fmt::Display for FsFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.message())
    }
}

impl std::error::Error for FsFailure {}

fn fs_io(path: &str) -> impl Fn(agentcomputer_fs::Error) -> std::io::Error + '_ {
    move |e| std::io::Error::other(FsFailure(fs_status(&e, path)))
}

/// Collects the archive into chunks of [`CHUNK_BYTES`] for the client.
struct ChunkSink {
    tx: mpsc::Sender<Result<pb::ExportChunk, Status>>,
    buf: Vec<u8>,
    /// Where the wait for room in `tx` is timed.
    runtime: tokio::runtime::Handle,
    /// Longest wait for the client to take a chunk.
    idle: std::time::Duration,
}

impl ChunkSink {
    /// Sends the buffered chunk. Errors: `BrokenPipe` when the client left,
    /// `TimedOut` when it took nothing for the idle timeout.
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let data = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK_BYTES));
        let sent = self.runtime.block_on(tokio::time::timeout(
            self.idle,
            self.tx.send(Ok(pb::ExportChunk { data })),
        ));
        match sent {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(std::io::ErrorKind::BrokenPipe.into()),
            Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
        }
    }
}

impl Write for ChunkSink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = data.len().min(CHUNK_BYTES - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == CHUNK_BYTES {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

struct Exporter<'a> {
    fs: &'a Fs,
    builder: &'a mut tar::Builder<ChunkSink>,
    /// Files with more than one link already written: inode to name.
    linked: HashMap<Ino, String>,
}

impl Exporter<'_> {
    /// Writes directory `dir` as `name` and everything under it, depth
    /// first, without following symlinks. The walk keeps its own stack (a
    /// directory, its name and where its listing stopped), so a tree of any
    /// depth costs heap, never the thread's stack.
    fn tree(&mut self, dir: Ino, name: &str) -> std::io::Result<()> {
        let attr = self.fs.getattr(dir).map_err(fs_io(name))?;
        self.entry(&attr, name)?;
        let mut stack: Vec<(Ino, String, u64)> = vec![(dir, name.to_string(), 0)];
        while let Some((dir, name, after)) = stack.pop() {
            let entries = self.fs.readdir(dir, after, 1024).map_err(fs_io(&name))?;
            let Some(last) = entries.last() else {
                continue;
            };
            // The rest of this directory after the subdirectory, if any,
            // that this batch descends into.
            let mut resume = last.cookie;
            let mut descend = None;
            for e in entries {
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                let child_name = String::from_utf8_lossy(&e.name);
                let child = if name == "." {
                    child_name.into_owned()
                } else {
                    format!("{name}/{child_name}")
                };
                let attr = self.fs.getattr(e.ino).map_err(fs_io(&child))?;
                self.entry(&attr, &child)?;
                if e.kind == FileKind::Directory {
                    resume = e.cookie;
                    descend = Some((e.ino, child));
                    break;
                }
            }
            stack.push((dir, name, resume));
            if let Some((ino, child)) = descend {
                stack.push((ino, child, 0));
            }
        }
        Ok(())
    }

    /// Writes one entry (not a directory's contents); FIFOs, devices and
    /// sockets are skipped.
    fn entry(&mut self, attr: &agentcomputer_fs::Attr, name: &str) -> std::io::Result<()> {
        let mut header = tar::Header::new_gnu();
        header.set_mode(attr.perm & 0o7777);
        header.set_uid(u64::from(attr.uid));
        header.set_gid(u64::from(attr.gid));
        header.set_mtime(u64::try_from(attr.mtime.as_nanos() / 1_000_000_000).unwrap_or(0));
        match attr.kind {
            FileKind::Directory => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                self.builder
                    .append_data(&mut header, name, std::io::empty())
            }
            FileKind::Symlink => {
                let target = self.fs.readlink(attr.ino).map_err(fs_io(name))?;
                let target = String::from_utf8_lossy(&target).into_owned();
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                self.builder.append_link(&mut header, name, target)
            }
            FileKind::RegularFile => {
                if attr.nlink > 1 {
                    if let Some(first) = self.linked.get(&attr.ino) {
                        header.set_entry_type(tar::EntryType::Link);
                        header.set_size(0);
                        let first = first.clone();
                        return self.builder.append_link(&mut header, name, first);
                    }
                    self.linked.insert(attr.ino, name.to_string());
                }
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(attr.size);
                let data = FileReader {
                    fs: self.fs,
                    ino: attr.ino,
                    at: 0,
                    size: attr.size,
                    name,
                };
                self.builder.append_data(&mut header, name, data)
            }
            _ => Ok(()),
        }
    }
}

/// Exactly `size` bytes of a file: what it holds, zeros past an end that
/// moved back meanwhile (the header already promised `size`).
struct FileReader<'a> {
    fs: &'a Fs,
    ino: Ino,
    at: u64,
    size: u64,
    name: &'a str,
}

impl Read for FileReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let want = usize::try_from(self.size - self.at)
            .unwrap_or(usize::MAX)
            .min(buf.len())
            .min(CHUNK_BYTES);
        if want == 0 {
            return Ok(0);
        }
        let n = self
            .fs
            .read_into(self.ino, self.at, &mut buf[..want])
            .map_err(fs_io(self.name))?;
        let n = if n == 0 {
            buf[..want].fill(0);
            want
        } else {
            n
        };
        self.at += n as u64;
        Ok(n)
    }
}

/// Serves one Import stream; `authorize` checks the caller's credential
/// for the computer the header names and returns its registry key.
/// Errors: `EINVAL` for a stream not starting with a header and for every
/// entry [`Guard`] refuses, `ECANCELED` for a stream that ends without
/// `ImportEnd`, path errors of the directory (`ENOTDIR`, `ENOENT`), the
/// engine's errors naming the entry (`ENOSPC`, `EDQUOT`), and
/// `DEADLINE_EXCEEDED` when no message came for the idle timeout.
pub async fn import(
    registry: &Registry,
    authorize: impl FnOnce(&str) -> Result<String, Status>,
    gate: &StreamGate,
    client: &str,
    mut stream: Streaming<pb::ImportRequest>,
) -> Result<pb::ImportResponse, Status> {
    use pb::import_request::Msg;
    let idle = gate.limits().idle_timeout;
    let first = match tokio::time::timeout(idle, stream.message()).await {
        Ok(first) => first?,
        Err(_) => return Err(idle_error("import", idle)),
    };
    let Some(pb::ImportRequest {
        msg: Some(Msg::Header(header)),
    }) = first
    else {
        return Err(errno_detail(
            Errno::EINVAL,
            "the first Import message must be a header",
        ));
    };
    let key = authorize(&header.computer)?;
    let _permit = gate.admit(client, &key)?;
    let lease = registry.acquire(&key).await?;
    let path = ApiPath::parse(&header.path)?;
    let fs = lease.fs().clone();
    let dir = {
        let (fs, path) = (fs.clone(), path.clone());
        crate::blocking::blocking(move || resolve(&fs, &path, true)).await?
    };
    if dir.kind != FileKind::Directory {
        return Err(crate::errors::errno_status(Errno::ENOTDIR, path.shown()));
    }
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(AHEAD);
    let unpack = {
        let fs = fs.clone();
        tokio::task::spawn_blocking(move || {
            let reader = ChannelReader {
                rx,
                chunk: Vec::new(),
                at: 0,
            };
            Guard::new(&fs, dir.ino).unpack(reader)
        })
    };
    // Feeds the unpacker until the end message; the unpacker ending first
    // (a refused entry, the quota) drops the receiver and ends the feed.
    let fed: Result<(), Status> = async {
        loop {
            let message = match tokio::time::timeout(idle, stream.message()).await {
                Ok(m) => m?,
                Err(_) => return Err(idle_error("import", idle)),
            };
            match message {
                Some(pb::ImportRequest {
                    msg: Some(Msg::Data(data)),
                }) => {
                    let tx = tx.clone();
                    let sent = tokio::task::spawn_blocking(move || tx.send(data).is_ok())
                        .await
                        .unwrap_or(false);
                    if !sent {
                        return Ok(());
                    }
                }
                Some(pb::ImportRequest {
                    msg: Some(Msg::End(_)),
                }) => return Ok(()),
                Some(_) => {
                    return Err(errno_detail(
                        Errno::EINVAL,
                        "an Import message after the header must be data or the end",
                    ));
                }
                None => {
                    return Err(errno_detail(
                        Errno::ECANCELED,
                        "the Import stream ended without its end message",
                    ));
                }
            }
        }
    }
    .await;
    drop(tx);
    if let Err(status) = fed {
        // The unpacker sees the channel close mid-archive and stops.
        let _ = unpack.await;
        return Err(status);
    }
    let summary = unpack
        .await
        .map_err(|e| Status::internal(format!("EIO: import: {e}")))??;
    let fs2 = fs.clone();
    crate::blocking::blocking(move || fs2.fsync(None))
        .await
        .map_err(|e| fs_status(&e, path.shown()))?;
    if lease.deleted() {
        return Err(crate::errors::deleted_during(lease.name(), "the import"));
    }
    Ok(summary)
}

/// The caller's tar stream, read on the blocking thread.
struct ChannelReader {
    rx: std::sync::mpsc::Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    at: usize,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.chunk.len() {
            match self.rx.recv() {
                Ok(chunk) => {
                    self.chunk = chunk;
                    self.at = 0;
                }
                // The end: a stream that ended early fails in the tar reader
                // (a short entry) or before the Import answers.
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len() - self.at);
        buf[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Most bytes the tar reader may take between two entries: a header block,
/// GNU long-name and long-link blocks, PAX records and the padding of the
/// entry before. The tar crate reads these whole into memory, so an
/// archive claiming a gigabyte of name is refused here, not allocated.
const METADATA_BUDGET: u64 = 1024 * 1024;

/// Longest entry name accepted (Linux's PATH_MAX, bytes).
const MAX_NAME_BYTES: usize = 4096;

/// An archive reader that fails once it has given more bytes than its
/// allowance; the guard sets the allowance before each entry's headers and
/// lifts it only while it copies a regular file's data.
struct Metered<R> {
    inner: R,
    left: std::rc::Rc<std::cell::Cell<u64>>,
}

impl<R: Read> Read for Metered<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.left.get();
        if left == 0 {
            return Err(std::io::Error::other(format!(
                "more than {METADATA_BUDGET} bytes of headers and names for one entry"
            )));
        }
        let most = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..most])?;
        self.left.set(left - n as u64);
        Ok(n)
    }
}

/// Unpacks an untrusted archive under one directory of a computer.
pub struct Guard<'a> {
    fs: &'a Fs,
    root: Ino,
    /// Regular files this archive made, by their name in it: the only
    /// targets its hard links may name.
    files: HashMap<String, Ino>,
    /// Directories to give their mode and mtime once their entries are in
    /// (writing into a directory changes its mtime).
    dirs: Vec<(Ino, u32, u64)>,
    entries: u64,
    bytes: u64,
    /// The allowance of the archive's [`Metered`] reader.
    left: std::rc::Rc<std::cell::Cell<u64>>,
}

/// An entry refused, as the call's status.
fn refused(name: &str, why: &str) -> Status {
    errno_detail(
        Errno::EINVAL,
        format_args!("archive entry {name:?} refused: {why}"),
    )
}

impl<'a> Guard<'a> {
    /// A guard unpacking under directory `root` of `fs`.
    pub fn new(fs: &'a Fs, root: Ino) -> Guard<'a> {
        Guard {
            fs,
            root,
            files: HashMap::new(),
            dirs: Vec::new(),
            entries: 0,
            bytes: 0,
            left: std::rc::Rc::new(std::cell::Cell::new(METADATA_BUDGET)),
        }
    }

    /// Unpacks every entry of `archive`, refusing the first hostile one.
    pub fn unpack(mut self, archive: impl Read) -> Result<pb::ImportResponse, Status> {
        let mut archive = tar::Archive::new(Metered {
            inner: archive,
            left: self.left.clone(),
        });
        let mut entries = archive
            .entries()
            .map_err(|e| errno_detail(Errno::EINVAL, format_args!("not a tar archive: {e}")))?;
        loop {
            self.left.set(METADATA_BUDGET);
            let Some(entry) = entries.next() else {
                break;
            };
            let entry = entry
                .map_err(|e| errno_detail(Errno::EINVAL, format_args!("bad tar archive: {e}")))?;
            self.entry(entry)?;
        }
        // Innermost first, so a parent's mtime is set after its children's.
        for (ino, perm, mtime) in std::mem::take(&mut self.dirs).into_iter().rev() {
            let set = SetAttr {
                perm: Some(perm),
                mtime: Some(TimeSet::At(Timespec::from_nanos(
                    i64::try_from(mtime)
                        .unwrap_or(0)
                        .saturating_mul(1_000_000_000),
                ))),
                ..SetAttr::default()
            };
            self.fs.setattr(ino, &set).map_err(|e| fs_status(&e, "."))?;
        }
        Ok(pb::ImportResponse {
            entries: self.entries,
            bytes: self.bytes,
        })
    }

    fn entry<R: Read>(&mut self, mut entry: tar::Entry<'_, R>) -> Result<(), Status> {
        let kind = entry.header().entry_type();
        if matches!(
            kind,
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader
        ) {
            return Ok(());
        }
        let raw = entry.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&raw).into_owned();
        let parts = components(&raw).map_err(|why| refused(&shown, why))?;
        let name = parts.join("/");
        let perm = entry.header().mode().unwrap_or(0o644) & KEPT_PERM;
        let mtime = entry.header().mtime().unwrap_or(0);
        let Some((last, parents)) = parts.split_last() else {
            // The directory itself (`./`): its mode and mtime.
            if kind == tar::EntryType::Directory {
                self.dirs.push((self.root, perm, mtime));
                self.entries += 1;
                return Ok(());
            }
            return Err(refused(&shown, "only a directory may name the top"));
        };
        let parent = self.parent(parents, &shown)?;
        let existing = match self.fs.lookup(parent, last.as_bytes()) {
            Ok(attr) => Some(attr),
            Err(e) if e.errno() == Errno::ENOENT => None,
            Err(e) => return Err(fs_status(&e, &shown)),
        };
        let on = |e: agentcomputer_fs::Error| fs_status(&e, &shown);
        let set_mtime = |ino: Ino| {
            let set = SetAttr {
                mtime: Some(TimeSet::At(Timespec::from_nanos(
                    i64::try_from(mtime)
                        .unwrap_or(0)
                        .saturating_mul(1_000_000_000),
                ))),
                ..SetAttr::default()
            };
            self.fs.setattr(ino, &set).map(|_| ())
        };
        match kind {
            tar::EntryType::Directory => {
                let ino = match existing {
                    Some(attr) if attr.kind == FileKind::Directory => attr.ino,
                    Some(_) => {
                        self.fs.unlink(parent, last.as_bytes()).map_err(on)?;
                        self.mkdir(parent, last, perm, &shown)?
                    }
                    None => self.mkdir(parent, last, perm, &shown)?,
                };
                self.dirs.push((ino, perm, mtime));
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                if existing
                    .as_ref()
                    .is_some_and(|a| a.kind == FileKind::Directory)
                {
                    return Err(fs_status(&Errno::EISDIR.into(), &shown));
                }
                let (attr, handle) = self.fs.create_unnamed(parent, perm, OWNER).map_err(on)?;
                let size = entry.size();
                // File data is bounded by the quota, not the metadata budget.
                self.left.set(u64::MAX);
                let mut at = 0u64;
                let mut buf = vec![0u8; CHUNK_BYTES];
                loop {
                    let n = read_full(&mut entry, &mut buf).map_err(|e| {
                        errno_detail(
                            Errno::EINVAL,
                            format_args!("bad tar archive at {shown:?}: {e}"),
                        )
                    })?;
                    if n == 0 {
                        break;
                    }
                    let mut done = 0;
                    while done < n {
                        let w = self.fs.write(attr.ino, at, &buf[done..n]).map_err(on)?;
                        if w == 0 {
                            return Err(fs_status(&Errno::EIO.into(), &shown));
                        }
                        done += w;
                        at += w as u64;
                    }
                }
                // A stream that ended inside the file leaves what was there.
                if at != size {
                    return Err(errno_detail(
                        Errno::EINVAL,
                        format_args!(
                            "bad tar archive at {shown:?}: the stream ended after {at} of its {size} bytes"
                        ),
                    ));
                }
                set_mtime(attr.ino).map_err(on)?;
                // A symlink under the name is replaced, not followed.
                if existing
                    .as_ref()
                    .is_some_and(|a| a.kind != FileKind::RegularFile)
                {
                    self.fs.unlink(parent, last.as_bytes()).map_err(on)?;
                }
                self.fs
                    .link_unnamed(attr.ino, parent, last.as_bytes(), true)
                    .map_err(on)?;
                drop(handle);
                self.bytes += at;
                self.files.insert(name, attr.ino);
            }
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| refused(&shown, "a symlink without a target"))?
                    .into_owned();
                if existing
                    .as_ref()
                    .is_some_and(|a| a.kind == FileKind::Directory)
                {
                    return Err(fs_status(&Errno::EISDIR.into(), &shown));
                }
                if existing.is_some() {
                    self.fs.unlink(parent, last.as_bytes()).map_err(on)?;
                }
                let attr = self
                    .fs
                    .symlink(parent, last.as_bytes(), &target, OWNER)
                    .map_err(on)?;
                set_mtime(attr.ino).map_err(on)?;
            }
            tar::EntryType::Link => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| refused(&shown, "a hard link without a target"))?
                    .into_owned();
                let target = components(&target)
                    .map_err(|why| refused(&shown, why))?
                    .join("/");
                let Some(&ino) = self.files.get(&target) else {
                    return Err(refused(
                        &shown,
                        "a hard link to a file that is not earlier in this archive",
                    ));
                };
                if existing
                    .as_ref()
                    .is_some_and(|a| a.kind == FileKind::Directory)
                {
                    return Err(fs_status(&Errno::EISDIR.into(), &shown));
                }
                if existing.as_ref().is_some_and(|a| a.ino == ino) {
                    self.entries += 1;
                    return Ok(());
                }
                if existing.is_some() {
                    self.fs.unlink(parent, last.as_bytes()).map_err(on)?;
                }
                self.fs.link(ino, parent, last.as_bytes()).map_err(on)?;
                self.files.insert(name, ino);
            }
            tar::EntryType::Char | tar::EntryType::Block | tar::EntryType::Fifo => {
                return Err(refused(
                    &shown,
                    "devices and FIFOs cannot be made in a computer",
                ));
            }
            other => {
                return Err(refused(
                    &shown,
                    &format!("entries of type {other:?} are not supported"),
                ));
            }
        }
        self.entries += 1;
        Ok(())
    }

    /// The directory `parents` names under the root, made where missing;
    /// never through a symlink.
    fn parent(&mut self, parents: &[&str], shown: &str) -> Result<Ino, Status> {
        let mut dir = self.root;
        for (i, part) in parents.iter().enumerate() {
            dir = match self.fs.lookup(dir, part.as_bytes()) {
                Ok(attr) if attr.kind == FileKind::Directory => attr.ino,
                Ok(attr) if attr.kind == FileKind::Symlink => {
                    let so_far = parents[..=i].join("/");
                    return Err(refused(
                        shown,
                        &format!(
                            "{so_far:?} is a symlink, and entries are never written through one"
                        ),
                    ));
                }
                Ok(_) => return Err(fs_status(&Errno::ENOTDIR.into(), shown)),
                Err(e) if e.errno() == Errno::ENOENT => {
                    self.mkdir(dir, part, IMPLIED_DIR_PERM, shown)?
                }
                Err(e) => return Err(fs_status(&e, shown)),
            };
        }
        Ok(dir)
    }

    fn mkdir(&mut self, parent: Ino, name: &str, perm: u32, shown: &str) -> Result<Ino, Status> {
        // Made writable for its entries; the archive's mode comes at the end.
        self.fs
            .mkdir(parent, name.as_bytes(), perm | 0o700, OWNER)
            .map(|a| a.ino)
            .map_err(|e| fs_status(&e, shown))
    }
}

/// The names of an archive path, `.` and empty ones dropped. Errors: an
/// absolute path or a `..` component.
fn components(raw: &[u8]) -> Result<Vec<&str>, &'static str> {
    if raw.first() == Some(&b'/') {
        return Err("an absolute name");
    }
    if raw.len() > MAX_NAME_BYTES {
        return Err("a name longer than 4096 bytes (PATH_MAX)");
    }
    let text = std::str::from_utf8(raw).map_err(|_| "a name that is not UTF-8")?;
    let mut parts = Vec::new();
    for part in text.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err("a `..` component"),
            _ if part.contains('\0') => return Err("a NUL byte"),
            _ => parts.push(part),
        }
    }
    Ok(parts)
}

/// Reads until `buf` is full or the entry ends.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentcomputer_fs::{Limits, ROOT_INO};

    fn fresh(limits: Limits) -> (tempfile::TempDir, Fs) {
        let dir = tempfile::tempdir().unwrap();
        let fs = Fs::create(&dir.path().join("fs.db"), limits).unwrap();
        (dir, fs)
    }

    /// A tar header of `kind` whose name field holds `name` verbatim (the
    /// tar writer itself refuses hostile names, so they are set raw).
    fn raw_header(kind: tar::EntryType, name: &[u8], size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(0o644);
        h.set_mtime(1_700_000_000);
        h.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name);
        h
    }

    /// Appends an entry with a raw name (and link name) to `out`.
    fn push(out: &mut Vec<u8>, kind: tar::EntryType, name: &[u8], link: &[u8], data: &[u8]) {
        let mut h = raw_header(kind, name, data.len() as u64);
        h.as_gnu_mut().unwrap().linkname[..link.len()].copy_from_slice(link);
        h.set_cksum();
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(data);
        let pad = (512 - data.len() % 512) % 512;
        out.extend(std::iter::repeat_n(0u8, pad));
    }

    fn end(mut out: Vec<u8>) -> Vec<u8> {
        out.extend_from_slice(&[0u8; 1024]);
        out
    }

    fn unpack(fs: &Fs, archive: &[u8]) -> Result<pb::ImportResponse, Status> {
        Guard::new(fs, ROOT_INO).unpack(archive)
    }

    fn exists(fs: &Fs, path: &str) -> bool {
        fs.resolve(ROOT_INO, path.as_bytes(), false).is_ok()
    }

    #[test]
    fn a_tree_unpacks_with_modes_mtimes_symlinks_and_hard_links() {
        let (_d, fs) = fresh(Limits::default());
        let mut a = Vec::new();
        push(&mut a, tar::EntryType::Directory, b"./", b"", b"");
        push(&mut a, tar::EntryType::Directory, b"d/e/", b"", b"");
        push(&mut a, tar::EntryType::Regular, b"d/f.txt", b"", b"hello");
        push(
            &mut a,
            tar::EntryType::Symlink,
            b"d/l",
            b"../../etc/passwd",
            b"",
        );
        push(&mut a, tar::EntryType::Link, b"d/g.txt", b"d/f.txt", b"");
        let done = unpack(&fs, &end(a)).unwrap();
        assert_eq!((done.entries, done.bytes), (5, 5));
        let f = fs.resolve(ROOT_INO, b"d/f.txt", false).unwrap();
        assert_eq!(fs.read(f.ino, 0, 100).unwrap(), b"hello");
        assert_eq!((f.perm, f.nlink), (0o644, 2));
        assert_eq!(f.mtime.as_nanos(), 1_700_000_000 * 1_000_000_000);
        // A directory the archive names gets its mtime after its entries.
        let e = fs.resolve(ROOT_INO, b"d/e", false).unwrap();
        assert_eq!(e.mtime.as_nanos(), 1_700_000_000 * 1_000_000_000);
        let l = fs.resolve(ROOT_INO, b"d/l", false).unwrap();
        assert_eq!(l.kind, FileKind::Symlink);
        assert_eq!(fs.readlink(l.ino).unwrap(), b"../../etc/passwd");
        assert!(exists(&fs, "d/e"));
    }

    #[test]
    fn absolute_names_and_dotdot_are_refused() {
        for name in [&b"/etc/x"[..], b"../x", b"a/../../x", b"a/.."] {
            let (_d, fs) = fresh(Limits::default());
            let mut a = Vec::new();
            push(&mut a, tar::EntryType::Regular, name, b"", b"x");
            let err = unpack(&fs, &end(a)).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
            assert!(err.message().contains("refused"), "{err:?}");
            assert!(!exists(&fs, "x") && !exists(&fs, "etc"));
        }
    }

    #[test]
    fn nothing_is_written_through_a_symlink_the_archive_made() {
        let (_d, fs) = fresh(Limits::default());
        fs.mkdir(ROOT_INO, b"outside", 0o755, OWNER).unwrap();
        let under = fs.mkdir(ROOT_INO, b"under", 0o755, OWNER).unwrap();
        let mut a = Vec::new();
        push(&mut a, tar::EntryType::Symlink, b"l", b"../outside", b"");
        push(&mut a, tar::EntryType::Regular, b"l/planted", b"", b"x");
        let err = Guard::new(&fs, under.ino).unpack(&end(a)[..]).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains("symlink"), "{err:?}");
        assert!(!exists(&fs, "outside/planted"));
        // The link itself was made, as a link.
        assert_eq!(
            fs.resolve(ROOT_INO, b"under/l", false).unwrap().kind,
            FileKind::Symlink
        );
    }

    #[test]
    fn a_file_over_a_symlink_replaces_the_link() {
        let (_d, fs) = fresh(Limits::default());
        let target = fs.mkdir(ROOT_INO, b"keep", 0o755, OWNER).unwrap();
        fs.symlink(ROOT_INO, b"l", b"keep/file", OWNER).unwrap();
        let (_, h) = fs.create_unnamed(target.ino, 0o644, OWNER).unwrap();
        drop(h);
        let mut a = Vec::new();
        push(&mut a, tar::EntryType::Regular, b"l", b"", b"new");
        unpack(&fs, &end(a)).unwrap();
        let l = fs.resolve(ROOT_INO, b"l", false).unwrap();
        assert_eq!(l.kind, FileKind::RegularFile);
        assert!(!exists(&fs, "keep/file"));
    }

    #[test]
    fn hard_links_outside_the_archive_are_refused() {
        let (_d, fs) = fresh(Limits::default());
        fs.mkdir(ROOT_INO, b"secret", 0o755, OWNER).unwrap();
        for target in [&b"secret"[..], b"../x", b"/etc/passwd", b"later"] {
            let mut a = Vec::new();
            push(&mut a, tar::EntryType::Link, b"h", target, b"");
            push(&mut a, tar::EntryType::Regular, b"later", b"", b"x");
            let err = unpack(&fs, &end(a)).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
            assert!(!exists(&fs, "h"));
        }
    }

    #[test]
    fn devices_and_fifos_are_refused_with_a_clear_error() {
        for kind in [
            tar::EntryType::Char,
            tar::EntryType::Block,
            tar::EntryType::Fifo,
        ] {
            let (_d, fs) = fresh(Limits::default());
            let mut a = Vec::new();
            push(&mut a, kind, b"dev", b"", b"");
            let err = unpack(&fs, &end(a)).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument);
            assert!(err.message().contains("devices and FIFOs"), "{err:?}");
            assert!(!exists(&fs, "dev"));
        }
    }

    #[test]
    fn the_quota_is_reported_and_only_whole_files_stay() {
        let (_d, fs) = fresh(Limits {
            max_bytes: 256 * 1024,
            max_inodes: 1000,
        });
        let mut a = Vec::new();
        push(&mut a, tar::EntryType::Regular, b"small", b"", &[1u8; 1000]);
        push(
            &mut a,
            tar::EntryType::Regular,
            b"big",
            b"",
            &vec![2u8; 1 << 20],
        );
        let err = unpack(&fs, &end(a)).unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
        assert!(
            err.message().starts_with("ENOSPC") || err.message().starts_with("EDQUOT"),
            "{err:?}"
        );
        assert!(err.message().contains("big"), "{err:?}");
        assert!(exists(&fs, "small"));
        assert!(!exists(&fs, "big"));
        // The half-written file's space is given back.
        assert!(fs.statfs().unwrap().used_bytes < 128 * 1024);
    }

    #[test]
    fn setuid_bits_are_dropped() {
        let (_d, fs) = fresh(Limits::default());
        let mut a = Vec::new();
        let mut h = raw_header(tar::EntryType::Regular, b"s", 0);
        h.set_mode(0o4755);
        h.set_cksum();
        a.extend_from_slice(h.as_bytes());
        unpack(&fs, &end(a)).unwrap();
        assert_eq!(fs.resolve(ROOT_INO, b"s", false).unwrap().perm, 0o755);
    }

    /// An endless reader: what a client claiming a huge header would send.
    struct Endless;

    impl Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            buf.fill(b'a');
            Ok(buf.len())
        }
    }

    #[test]
    fn a_long_name_header_claiming_gigabytes_is_refused_at_the_metadata_budget() {
        let (_d, fs) = fresh(Limits::default());
        let mut h = raw_header(tar::EntryType::GNULongName, b"././@LongLink", 8 << 30);
        h.set_cksum();
        let archive = std::io::Cursor::new(h.as_bytes().to_vec()).chain(Endless);
        let err = unpack_reader(&fs, archive).unwrap_err();
        assert!(
            err.message().contains("bytes of headers and names"),
            "{err:?}"
        );
    }

    #[test]
    fn names_past_path_max_are_refused() {
        let (_d, fs) = fresh(Limits::default());
        let name = "a/".repeat(2100) + "f";
        let mut a = Vec::new();
        let mut header = tar::Header::new_gnu();
        header.set_size(1);
        header.set_mode(0o644);
        tar::Builder::new(&mut a)
            .append_data(&mut header, &name, &b"x"[..])
            .unwrap();
        let err = unpack(&fs, &a).unwrap_err();
        assert!(err.message().contains("PATH_MAX"), "{err:?}");
    }

    #[test]
    fn a_stream_ending_inside_a_file_keeps_the_file_that_was_there() {
        let (_d, fs) = fresh(Limits::default());
        let mut a = Vec::new();
        push(&mut a, tar::EntryType::Regular, b"f", b"", b"old");
        unpack(&fs, &end(a)).unwrap();
        let mut b = Vec::new();
        push(&mut b, tar::EntryType::Regular, b"f", b"", &[b'n'; 4096]);
        b.truncate(512 + 1000);
        let err = unpack(&fs, &b).unwrap_err();
        assert!(err.message().contains("ended after"), "{err:?}");
        let f = fs.resolve(ROOT_INO, b"f", false).unwrap();
        assert_eq!(fs.read(f.ino, 0, 100).unwrap(), b"old");
    }

    fn unpack_reader(fs: &Fs, archive: impl Read) -> Result<pb::ImportResponse, Status> {
        Guard::new(fs, ROOT_INO).unpack(archive)
    }
}
