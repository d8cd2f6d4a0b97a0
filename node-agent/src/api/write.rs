//! The Write call: a client-streamed upload into one regular file.
//!
//! Data is written to the engine in pieces of about [`CHUNK_BYTES`] as it
//! arrives, never buffered whole. TRUNCATE and EXCLUSIVE uploads go into an
//! unnamed file (`O_TMPFILE` semantics, [`Fs::create_unnamed`]) that is
//! linked over the target only after the last byte. If the upload fails, is
//! aborted or runs out of quota, the old file is intact and the unnamed file
//! is freed with its handle; after a crash of the node agent, the engine
//! purges it when the computer is next opened. No temporary name ever
//! appears in a directory.

use agentcomputer_fs::{FileKind, Fs, Ino, SetAttr};
use agentcomputer_proto::{CHUNK_BYTES, v1 as pb};
use nix::errno::Errno;
use pb::write_request::Msg;
use tonic::{Status, Streaming};

use super::convert::{OWNER, file_info, parent_of, resolve};
use super::streams::{StreamGate, idle_error};
use crate::blocking::blocking;
use crate::errors::{deleted_during, errno_detail, errno_status, on};
use crate::paths::ApiPath;
use crate::registry::{Lease, Registry};

/// Default permission bits of a new file.
const FILE_PERM: u32 = 0o644;

/// Where the data of one upload goes.
struct Target {
    ino: Ino,
    /// Next write offset (ignored for append).
    offset: u64,
    append: bool,
    /// Bytes written so far.
    written: u64,
    /// Keeps the inode alive while the upload runs; for an unpublished
    /// unnamed file, dropping it frees the data.
    open: Option<agentcomputer_fs::Handle>,
    /// Set for atomic uploads: link the unnamed file as `name` in `dir`.
    publish: Option<Publish>,
}

struct Publish {
    dir: Ino,
    name: Vec<u8>,
    noreplace: bool,
}

impl Drop for Target {
    fn drop(&mut self) {
        // Freeing an abandoned upload's data is a database transaction of
        // any size: keep it off the async threads, also when the call's
        // future is dropped because the client left.
        if let Some(handle) = self.open.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => drop(rt.spawn_blocking(move || drop(handle))),
                Err(_) => drop(handle),
            }
        }
    }
}

/// Serves one Write stream; `authorize` checks the caller's credential for
/// the computer the header names and returns its registry key. Errors: `EINVAL` for a stream not starting with
/// a header (or with two, or with anything after the end, or a byte count
/// that disagrees with the end message), `ECANCELED` for a stream without
/// an end message, path errors, `EEXIST` for EXCLUSIVE over an
/// existing path, `EISDIR`, `ENOSPC` past the quota, the client's own
/// stream error when it aborts, `DEADLINE_EXCEEDED` when no message came
/// for the idle timeout, `RESOURCE_EXHAUSTED` past the stream caps (see
/// [`super::streams`]), `ABORTED` (errno `ECANCELED`) when the computer was
/// deleted before the upload was durable: an OK answer means the data is in
/// the computer the name denotes when the answer is sent.
pub async fn write(
    registry: &Registry,
    authorize: impl FnOnce(&str) -> Result<String, Status>,
    gate: &StreamGate,
    client: &str,
    mut stream: Streaming<pb::WriteRequest>,
) -> Result<pb::WriteResponse, Status> {
    let idle = gate.limits().idle_timeout;
    // Waits for the next message, ending a stalled upload: dropping the
    // call's state frees the unnamed file (its bytes stop counting against
    // the quota) and the lease (the computer may hibernate).
    async fn next(
        stream: &mut Streaming<pb::WriteRequest>,
        idle: std::time::Duration,
    ) -> Result<Option<pb::WriteRequest>, Status> {
        match tokio::time::timeout(idle, stream.message()).await {
            Ok(r) => r,
            Err(_) => Err(idle_error("upload", idle)),
        }
    }
    let header = match next(&mut stream, idle).await? {
        Some(pb::WriteRequest {
            msg: Some(Msg::Header(h)),
        }) => h,
        Some(_) => {
            return Err(errno_detail(
                Errno::EINVAL,
                "the first Write message must be a header",
            ));
        }
        None => return Err(errno_detail(Errno::EINVAL, "empty Write stream")),
    };
    let key = authorize(&header.computer)?;
    let _permit = gate.admit(client, &key)?;
    let lease = registry.acquire(&key).await?;
    let path = ApiPath::parse(&header.path)?;
    let mode = pb::WriteMode::try_from(header.mode).map_err(|_| {
        errno_detail(
            Errno::EINVAL,
            format_args!("unknown write mode {}", header.mode),
        )
    })?;
    let fs = lease.fs().clone();
    let shown = path.shown().to_string();

    let mut target = {
        let fs = fs.clone();
        blocking(move || prepare(&fs, &path, mode, &header)).await?
    };
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK_BYTES);
    let mut end: Option<u64> = None;
    while let Some(msg) = next(&mut stream, idle).await? {
        match (msg.msg, end) {
            (_, Some(_)) => {
                return Err(errno_detail(
                    Errno::EINVAL,
                    "nothing may follow the end of a Write stream",
                ));
            }
            (Some(Msg::Data(data)), None) => {
                if buf.is_empty() {
                    buf = data;
                } else {
                    buf.extend_from_slice(&data);
                }
                if buf.len() >= CHUNK_BYTES {
                    still_there(&lease, &shown)?;
                    buf = flush(&fs, &mut target, buf, &shown).await?;
                }
            }
            (Some(Msg::End(e)), None) => end = Some(e.total_bytes),
            (Some(Msg::Header(_)), None) => {
                return Err(errno_detail(
                    Errno::EINVAL,
                    "a Write stream takes one header",
                ));
            }
            (None, None) => {}
        }
    }
    flush(&fs, &mut target, buf, &shown).await?;
    // A stream can end cleanly at the transport level even though the
    // client gave up; only the end message makes the upload complete.
    let Some(total) = end else {
        return Err(errno_detail(
            Errno::ECANCELED,
            format_args!("upload of {shown} ended before its end message; nothing was published"),
        ));
    };
    if total != target.written {
        return Err(errno_detail(
            Errno::EINVAL,
            format_args!(
                "upload of {shown}: end message says {total} bytes, {} arrived",
                target.written
            ),
        ));
    }

    let bytes_written = target.written;
    let info = {
        let shown = shown.clone();
        blocking(move || finish(&fs, &target, &shown)).await?
    };
    // The acknowledgement is true only if the computer still exists now
    // that the data is durable: a delete that came first removed it with
    // the database, and a computer created since under the same name is
    // another database. A delete after this check comes after the write.
    still_there(&lease, &shown)?;
    drop(lease);
    Ok(pb::WriteResponse {
        bytes_written,
        info: Some(info),
    })
}

/// Fails the upload if its computer was deleted since the lease was taken:
/// writing on would only fill the deleted database.
fn still_there(lease: &Lease, shown: &str) -> Result<(), Status> {
    if lease.deleted() {
        return Err(deleted_during(lease.name(), shown));
    }
    Ok(())
}

/// Resolves or creates the inode an upload writes to.
fn prepare(
    fs: &Fs,
    path: &ApiPath,
    mode: pb::WriteMode,
    header: &pb::WriteHeader,
) -> Result<Target, Status> {
    let shown = path.shown();
    let (dir, name) = parent_of(fs, path).map_err(|e| {
        if path.is_root() {
            errno_status(Errno::EISDIR, shown)
        } else {
            e
        }
    })?;
    let existing = match fs.lookup(dir, name.as_bytes()) {
        Ok(attr) => Some(attr),
        Err(e) if e.errno() == Errno::ENOENT => None,
        Err(e) => return Err(on(shown)(e)),
    };
    if path.dir_only() {
        // Linux answers open(2) with O_CREAT on `name/` with EISDIR, whatever
        // `name` is or whether it exists.
        return Err(errno_status(Errno::EISDIR, shown));
    }
    let new_perm = |old: Option<u32>| match header.perm {
        0 => old.unwrap_or(FILE_PERM),
        p => p & 0o7777,
    };
    let in_place = |attr: agentcomputer_fs::Attr, offset: u64, append: bool| {
        // Writes through a symlink land in its target, as open(2) does.
        let attr = if attr.kind == FileKind::Symlink {
            resolve(fs, path, true)?
        } else {
            attr
        };
        match attr.kind {
            FileKind::RegularFile => Ok(Target {
                ino: attr.ino,
                offset,
                append,
                written: 0,
                publish: None,
                open: Some(fs.open_inode(attr.ino).map_err(on(shown))?),
            }),
            FileKind::Directory => Err(errno_status(Errno::EISDIR, shown)),
            _ => Err(errno_status(Errno::EINVAL, shown)),
        }
    };
    // A new file is written unnamed and linked when the upload completes,
    // so a failed or abandoned upload leaves no empty file behind. The link
    // refuses to replace a file made meanwhile under the name (EEXIST), as
    // creating the name first would have.
    let unnamed = |offset: u64, append: bool, perm: u32, noreplace: bool| {
        let (attr, open) = fs.create_unnamed(dir, perm, OWNER).map_err(on(shown))?;
        Ok(Target {
            ino: attr.ino,
            offset,
            append,
            written: 0,
            publish: Some(Publish {
                dir,
                name: name.as_bytes().to_vec(),
                noreplace,
            }),
            open: Some(open),
        })
    };
    match (mode, existing) {
        (pb::WriteMode::Create, Some(attr)) => in_place(attr, header.offset, false),
        (pb::WriteMode::Create, None) => unnamed(header.offset, false, new_perm(None), true),
        (pb::WriteMode::Append, Some(attr)) => in_place(attr, 0, true),
        (pb::WriteMode::Append, None) => unnamed(0, true, new_perm(None), true),
        (pb::WriteMode::Exclusive, Some(_)) => Err(errno_status(Errno::EEXIST, shown)),
        (pb::WriteMode::Truncate | pb::WriteMode::Unspecified, Some(attr))
            if attr.kind == FileKind::Symlink =>
        {
            // Replacing the link would lose it: truncate its target instead.
            let target = in_place(attr, 0, false)?;
            let set = SetAttr {
                size: Some(0),
                ..SetAttr::default()
            };
            fs.setattr(target.ino, &set).map_err(on(shown))?;
            Ok(target)
        }
        (pb::WriteMode::Truncate | pb::WriteMode::Unspecified, Some(attr))
            if attr.kind == FileKind::Directory =>
        {
            Err(errno_status(Errno::EISDIR, shown))
        }
        (mode, existing) => {
            let perm = new_perm(existing.as_ref().map(|a| a.perm));
            unnamed(0, false, perm, mode == pb::WriteMode::Exclusive)
        }
    }
}

/// Writes `buf` at the target's offset (or end, for append) and returns the
/// emptied buffer for reuse.
async fn flush(fs: &Fs, target: &mut Target, buf: Vec<u8>, shown: &str) -> Result<Vec<u8>, Status> {
    if buf.is_empty() {
        return Ok(buf);
    }
    let fs = fs.clone();
    let (ino, offset, append) = (target.ino, target.offset, target.append);
    let (mut buf, end) = blocking(move || -> agentcomputer_fs::Result<(Vec<u8>, u64)> {
        let mut at = if append {
            fs.getattr(ino)?.size
        } else {
            offset
        };
        let mut done = 0;
        while done < buf.len() {
            let n = fs.write(ino, at, &buf[done..])?;
            if n == 0 {
                return Err(Errno::EIO.into());
            }
            done += n;
            at += n as u64;
        }
        Ok((buf, at))
    })
    .await
    .map_err(on(shown))?;
    target.written += buf.len() as u64;
    target.offset = end;
    buf.clear();
    Ok(buf)
}

/// Makes the upload durable, publishes an unnamed file, and describes the
/// result.
fn finish(fs: &Fs, target: &Target, shown: &str) -> Result<pb::FileInfo, Status> {
    if let Some(p) = &target.publish {
        fs.link_unnamed(target.ino, p.dir, &p.name, !p.noreplace)
            .map_err(on(shown))?;
    }
    // One sync after publishing covers the content and the link: a
    // completed Write survives power loss (docs/durability.md).
    fs.fsync(Some(target.ino)).map_err(on(shown))?;
    let attr = fs.getattr(target.ino).map_err(on(shown))?;
    Ok(file_info(fs, &attr))
}
