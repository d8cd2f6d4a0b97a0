//! File commands: `ls`, `cat`, `put`, `get`, `stat`, `mkdir`, `rm`, `mv`.

use std::io::{Read, Write};
use std::path::Path;

use agentcomputer_proto::CHUNK_BYTES;
use agentcomputer_proto::v1 as pb;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;

pub use agentcomputer_mcp::calls::files::{list_dir, mkdir, rm};

use crate::client::Client;
use crate::error::{CliError, Result, local_io};
use crate::format::{long_line, shown, stat_text};
use crate::progress::Transfer;

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
    parents: bool,
    progress: bool,
) -> Result<()> {
    let mut file = std::fs::File::open(local).map_err(|e| local_io("cannot open", local, e))?;
    let meta = file
        .metadata()
        .map_err(|e| local_io("cannot stat", local, e))?;
    if meta.is_dir() {
        return Err(CliError::new(format!(
            "{} is a directory (put -r copies a tree)",
            local.display()
        )));
    }
    let remote = if remote.is_empty() {
        "./".to_string()
    } else {
        remote
    };
    // An existing directory (`.`, `dir`) receives the file under its name,
    // as with `dir/`.
    let into_dir = remote.ends_with('/')
        || client
            .stat(pb::StatRequest {
                computer: computer.clone(),
                path: remote.clone(),
                follow_symlinks: true,
            })
            .await
            .is_ok_and(|r| r.into_inner().kind() == pb::FileKind::Directory);
    let remote = if into_dir && !remote.ends_with('/') {
        format!("{remote}/")
    } else {
        remote
    };
    let remote = if remote.ends_with('/') {
        let name = local
            .file_name()
            .ok_or_else(|| CliError::new(format!("{} has no file name", local.display())))?;
        format!("{remote}{}", name.to_string_lossy())
    } else {
        remote
    };
    if parents
        && let Some((parent, _)) = remote.rsplit_once('/')
        && !parent.is_empty()
    {
        mkdir(client, computer.clone(), parent.to_string(), true).await?;
    }
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
