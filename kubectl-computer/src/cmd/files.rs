//! File commands: `ls`, `cat`, `put`, `get`, `stat`, `mkdir`, `rm`, `mv`.

use std::io::{Read, Write};
use std::path::Path;

use agentcomputer_proto::CHUNK_BYTES;
use agentcomputer_proto::v1 as pb;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;

use crate::client::Client;
use crate::error::{CliError, Result, local_io};
use crate::format::{long_line, shown, stat_text};
use crate::progress::Transfer;

/// Entries requested per ReadDir page.
const PAGE: u32 = 1000;

pub async fn ls(client: &mut Client, computer: String, path: String, long: bool) -> Result<()> {
    let info = client
        .stat(pb::StatRequest {
            computer: computer.clone(),
            path: path.clone(),
            follow_symlinks: true,
        })
        .await?
        .into_inner();
    let mut out = std::io::stdout().lock();
    if info.kind() != pb::FileKind::Directory {
        let line = if long {
            long_line(&path, &info)
        } else {
            shown(&path).into_owned()
        };
        let _ = writeln!(out, "{line}");
        return Ok(());
    }
    for e in list_dir(client, computer, path, long, usize::MAX).await?.0 {
        let line = match (&e.info, long) {
            (Some(info), true) => long_line(&e.name, info),
            _ => shown(&e.name).into_owned(),
        };
        if writeln!(out, "{line}").is_err() {
            return Ok(()); // stdout closed
        }
    }
    Ok(())
}

/// The entries of directory `path` sorted by name, as ls(1) shows them
/// (readdir order is storage order), each with its attributes when
/// `with_info`; at most `max` of them, and whether more were left out.
/// Pages of 1000 entries are fetched until `max` are had. Errors: the
/// API's (ENOENT, ENOTDIR...).
pub async fn list_dir(
    client: &mut Client,
    computer: String,
    path: String,
    with_info: bool,
    max: usize,
) -> Result<(Vec<pb::DirEntry>, bool)> {
    let mut entries: Vec<pb::DirEntry> = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .read_dir(pb::ReadDirRequest {
                computer: computer.clone(),
                path: path.clone(),
                page_size: PAGE,
                page_token: token,
                with_info,
            })
            .await?
            .into_inner();
        entries.extend(page.entries);
        if page.next_page_token.is_empty() {
            break;
        }
        if entries.len() > max {
            entries.sort_unstable_by(|a, b| a.name.cmp(&b.name));
            entries.truncate(max);
            return Ok((entries, true));
        }
        token = page.next_page_token;
    }
    entries.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    let more = entries.len() > max;
    entries.truncate(max);
    Ok((entries, more))
}

/// Reads at most `max` bytes of `path` from byte `offset`, streaming the
/// chunks and stopping once `max` are had; returns them and whether the
/// file has more (a byte past them was seen, or the range ran past `max`).
/// Errors: the API's (ENOENT, EISDIR...).
pub async fn read_bytes(
    client: &mut Client,
    computer: String,
    path: String,
    offset: u64,
    max: usize,
) -> Result<(Vec<u8>, bool)> {
    let mut stream = client
        .read(pb::ReadRequest {
            computer,
            path,
            offset,
            // One byte more than wanted tells whether the file goes on.
            length: max as u64 + 1,
        })
        .await?
        .into_inner();
    let mut data = Vec::new();
    while let Some(chunk) = stream.message().await? {
        data.extend_from_slice(&chunk.data);
        if data.len() > max {
            break;
        }
    }
    let more = data.len() > max;
    data.truncate(max);
    Ok((data, more))
}

/// Replaces (or creates) `path` with `data` atomically (WRITE_MODE_TRUNCATE:
/// readers see the old or the new content, never a mix), sent in 1 MiB
/// pieces; a new file gets mode 0644, an existing one keeps its bits.
/// Returns the file's attributes after the write. Errors: the API's
/// (ENOENT for a missing parent, EISDIR, ENOSPC...).
pub async fn write_bytes(
    client: &mut Client,
    computer: String,
    path: String,
    data: &[u8],
) -> Result<pb::WriteResponse> {
    use pb::write_request::Msg;
    let mut msgs = vec![Msg::Header(pb::WriteHeader {
        computer,
        path,
        mode: pb::WriteMode::Truncate as i32,
        perm: 0,
        offset: 0,
    })];
    msgs.extend(data.chunks(CHUNK_BYTES).map(|c| Msg::Data(c.to_vec())));
    msgs.push(Msg::End(pb::WriteEnd {
        total_bytes: data.len() as u64,
    }));
    let stream = tokio_stream::iter(
        msgs.into_iter()
            .map(|msg| pb::WriteRequest { msg: Some(msg) }),
    );
    Ok(client.write(stream).await?.into_inner())
}

pub async fn cat(client: &mut Client, computer: String, path: String) -> Result<()> {
    let mut stream = client
        .read(pb::ReadRequest {
            computer,
            path,
            offset: 0,
            length: 0,
        })
        .await?
        .into_inner();
    let mut out = std::io::stdout().lock();
    while let Some(chunk) = stream.message().await? {
        if out.write_all(&chunk.data).is_err() {
            return Ok(()); // stdout closed
        }
    }
    let _ = out.flush();
    Ok(())
}

/// Uploads `local` to `remote` (atomic replace). A `remote` ending in `/`
/// receives the local file's name. The local file is streamed in 1 MiB
/// pieces and published only after its end message; if reading it fails,
/// the upload is abandoned and the remote file is left as it was. With
/// `progress` (see [`crate::progress::enabled`]) a bar on stderr shows the
/// bytes sent of the file's size (a spinner when the size is unknown: a
/// pipe or device).
pub async fn put(
    client: &mut Client,
    computer: String,
    local: &Path,
    remote: String,
    progress: bool,
) -> Result<()> {
    let mut file = std::fs::File::open(local).map_err(|e| local_io("cannot open", local, e))?;
    let meta = file
        .metadata()
        .map_err(|e| local_io("cannot stat", local, e))?;
    if meta.is_dir() {
        return Err(CliError::new(format!("{} is a directory", local.display())));
    }
    let remote = if remote.ends_with('/') {
        let name = local
            .file_name()
            .ok_or_else(|| CliError::new(format!("{} has no file name", local.display())))?;
        format!("{remote}{}", name.to_string_lossy())
    } else {
        remote
    };
    use std::os::unix::fs::PermissionsExt;
    let label = format!("put {}", shown(&remote));
    let header = pb::WriteHeader {
        computer,
        path: remote,
        mode: pb::WriteMode::Truncate as i32,
        perm: meta.permissions().mode() & 0o777,
        offset: 0,
    };
    let transfer = Transfer::start(label, meta.is_file().then_some(meta.len()), progress);
    let sent = transfer.counter();
    let (tx, rx) = mpsc::channel::<pb::WriteRequest>(4);
    let (fail_tx, fail_rx) = oneshot::channel::<CliError>();
    let local_owned = local.to_path_buf();
    let reader = tokio::task::spawn_blocking(move || {
        let send = |msg| {
            tx.blocking_send(pb::WriteRequest { msg: Some(msg) })
                .is_ok()
        };
        if !send(pb::write_request::Msg::Header(header)) {
            return;
        }
        let mut total = 0u64;
        loop {
            let mut buf = vec![0u8; CHUNK_BYTES];
            match read_full(&mut file, &mut buf) {
                Ok(0) => {
                    // Only the end message makes the node agent publish.
                    send(pb::write_request::Msg::End(pb::WriteEnd {
                        total_bytes: total,
                    }));
                    return;
                }
                Ok(n) => {
                    total += n as u64;
                    buf.truncate(n);
                    if !send(pb::write_request::Msg::Data(buf)) {
                        return;
                    }
                    sent.add(n as u64);
                }
                Err(e) => {
                    // Ending the stream without its end message makes the
                    // node agent discard the upload.
                    let _ = fail_tx.send(local_io("cannot read", &local_owned, e));
                    return;
                }
            }
        }
    });
    let result = tokio::select! {
        // A local read error explains the upload's failure best.
        biased;
        Ok(e) = fail_rx => Err(e),
        r = client.write(ReceiverStream::new(rx)) => r.map(|_| ()).map_err(CliError::from),
    };
    reader.abort();
    if result.is_ok() {
        transfer.finish();
    }
    result
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
fn read_full(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Downloads `remote` into `local` (`-` is stdout). The data goes to a
/// temporary file beside `local`, renamed into place once complete, so an
/// interrupted download never leaves a truncated file under that name.
/// With `progress` (see [`crate::progress::enabled`]) a bar on stderr shows
/// the bytes received of the file's size, which is asked for first (one
/// Stat call); a spinner if that fails.
pub async fn get(
    client: &mut Client,
    computer: String,
    remote: String,
    local: &Path,
    progress: bool,
) -> Result<()> {
    let total = if progress {
        client
            .stat(pb::StatRequest {
                computer: computer.clone(),
                path: remote.clone(),
                follow_symlinks: true,
            })
            .await
            .ok()
            .map(|r| r.into_inner())
            .filter(|info| info.kind() == pb::FileKind::Regular)
            .map(|info| info.size)
    } else {
        None
    };
    let mut stream = client
        .read(pb::ReadRequest {
            computer,
            path: remote.clone(),
            offset: 0,
            length: 0,
        })
        .await?
        .into_inner();
    let transfer = Transfer::start(format!("get {}", shown(&remote)), total, progress);
    let received = transfer.counter();
    if local == Path::new("-") {
        let mut out = std::io::stdout().lock();
        while let Some(chunk) = stream.message().await? {
            out.write_all(&chunk.data)
                .map_err(|e| CliError::new(format!("cannot write stdout: {e}")))?;
            received.add(chunk.data.len() as u64);
        }
        let _ = out.flush();
        transfer.finish();
        return Ok(());
    }
    let target = if local.is_dir() {
        let name = remote.rsplit('/').next().unwrap_or(&remote);
        local.join(name)
    } else {
        local.to_path_buf()
    };
    let dir = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => Path::new(".").to_path_buf(),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(&dir)
        .map_err(|e| local_io("cannot create a file in", &dir, e))?;
    while let Some(chunk) = stream.message().await? {
        tmp.write_all(&chunk.data)
            .map_err(|e| local_io("cannot write", &target, e))?;
        received.add(chunk.data.len() as u64);
    }
    tmp.as_file()
        .sync_all()
        .map_err(|e| local_io("cannot write", &target, e))?;
    tmp.persist(&target)
        .map_err(|e| local_io("cannot write", &target, e.error))?;
    transfer.finish();
    Ok(())
}

pub async fn stat(client: &mut Client, computer: String, path: String, follow: bool) -> Result<()> {
    let info = client
        .stat(pb::StatRequest {
            computer,
            path: path.clone(),
            follow_symlinks: follow,
        })
        .await?
        .into_inner();
    out!("{}", stat_text(&path, &info));
    Ok(())
}

pub async fn mkdir(
    client: &mut Client,
    computer: String,
    path: String,
    parents: bool,
) -> Result<()> {
    client
        .mkdir(pb::MkdirRequest {
            computer,
            path,
            parents,
            perm: 0,
        })
        .await?;
    Ok(())
}

pub async fn rm(
    client: &mut Client,
    computer: String,
    path: String,
    recursive: bool,
) -> Result<()> {
    if path.is_empty() {
        return Err(CliError::new(
            "rm: the path is empty: name a file or directory under /workspace (the workspace itself cannot be removed)",
        ));
    }
    client
        .remove(pb::RemoveRequest {
            computer,
            path,
            recursive,
        })
        .await?;
    Ok(())
}

pub async fn mv(
    client: &mut Client,
    computer: String,
    from: String,
    to: String,
    no_clobber: bool,
) -> Result<()> {
    client
        .rename(pb::RenameRequest {
            computer,
            from,
            to,
            noreplace: no_clobber,
        })
        .await?;
    Ok(())
}
