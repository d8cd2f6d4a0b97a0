//! File calls: a directory listing, a bounded read, an atomic whole-file
//! write, mkdir and remove.

use agentcomputer_proto::CHUNK_BYTES;
use agentcomputer_proto::v1 as pb;

use crate::client::Client;
use crate::error::{Error, Result};

/// Entries requested per ReadDir page.
const PAGE: u32 = 1000;

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

/// Creates directory `path` with mode 0755; with
/// `parents`, its missing parents too and no error if it exists. Errors:
/// the API's (EEXIST, ENOENT for a missing parent, ENOTDIR...).
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

/// Removes `path`; a directory needs `recursive` unless it is empty
/// (symlinks are removed, never followed).
/// Errors: an empty path (the workspace itself) is refused here; the
/// API's (ENOENT, ENOTEMPTY, EISDIR...).
pub async fn rm(
    client: &mut Client,
    computer: String,
    path: String,
    recursive: bool,
) -> Result<()> {
    if path.is_empty() {
        return Err(Error::new(
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
