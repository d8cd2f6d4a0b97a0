//! `backup`: a consistent online copy of a computer's database.

use std::io::Write;
use std::path::Path;

use agentcomputer_proto::v1 as pb;

use crate::client::Client;
use crate::error::{CliError, Result, local_io};
use crate::progress::Transfer;

/// Streams the backup of `computer` into `local`, which must not exist:
/// the bytes go to a temporary file next to it, which is synced and renamed
/// into place only once the whole copy arrived (an interrupted backup
/// leaves nothing at `local`). Prints the size. Errors: the API's, a gap or
/// a short copy (the stream's offsets and `total_bytes` disagree), local
/// I/O errors, and an existing `local`. With `progress` (see
/// [`crate::progress::enabled`]) a bar on stderr shows the bytes received
/// of the size the stream reports.
pub async fn backup(
    client: &mut Client,
    computer: String,
    local: &Path,
    progress: bool,
) -> Result<()> {
    if local.exists() {
        return Err(CliError::new(format!(
            "{} exists; a backup never overwrites a file",
            local.display()
        )));
    }
    let dir = match local.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => Path::new(".").to_path_buf(),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(&dir)
        .map_err(|e| local_io("cannot create a file in", &dir, e))?;
    let mut stream = client
        .backup(pb::BackupRequest {
            computer: computer.clone(),
        })
        .await?
        .into_inner();
    let transfer = Transfer::start(format!("backup {computer}"), None, progress);
    let received = transfer.counter();
    let mut written = 0u64;
    let mut total = None;
    while let Some(chunk) = stream.message().await? {
        if chunk.offset != written || total.is_some_and(|t| t != chunk.total_bytes) {
            return Err(CliError::new(format!(
                "backup of {computer}: the stream skipped or repeated bytes (offset {}, expected {written})",
                chunk.offset
            )));
        }
        total = Some(chunk.total_bytes);
        transfer.set_total(chunk.total_bytes);
        tmp.write_all(&chunk.data)
            .map_err(|e| local_io("cannot write", local, e))?;
        written += chunk.data.len() as u64;
        received.add(chunk.data.len() as u64);
    }
    if total.is_some_and(|t| t != written) || total.is_none() {
        return Err(CliError::new(format!(
            "backup of {computer}: got {written} of {} bytes",
            total.unwrap_or(0)
        )));
    }
    tmp.as_file()
        .sync_all()
        .map_err(|e| local_io("cannot write", local, e))?;
    tmp.persist_noclobber(local)
        .map_err(|e| local_io("cannot write", local, e.error))?;
    transfer.finish();
    outln!(
        "backed up {computer}: {written} bytes to {}",
        local.display()
    );
    Ok(())
}
