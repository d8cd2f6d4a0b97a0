//! `put -r` and `get -r`: directory trees in and out of a computer as tar
//! streams (the node agent's Import and Export, carried by
//! [`tar_stream`]), packed from and unpacked into a local directory.

use std::io::Read;
use std::path::{Path, PathBuf};

use agentcomputer_proto::v1 as pb;

use super::tar_stream;
use crate::client::Client;
use crate::error::{CliError, Result, local_io};
use crate::format::shown;

/// The name a copy of `path` gets inside an existing directory: its last
/// component (`.` and `/` ends ignored).
fn base_name(path: &str) -> Option<&str> {
    path.split('/')
        .rev()
        .find(|p| !p.is_empty() && *p != ".")
        .filter(|p| *p != "..")
}

/// Uploads the local directory `local` as `remote`, as `cp -r` does: into
/// `remote/NAME` when `remote` is an existing directory, else as `remote`
/// itself (made, with its parents when `parents`). Symlinks go up as
/// symlinks; modes and mtimes are kept.
pub async fn put_tree(
    client: &mut Client,
    computer: String,
    local: &Path,
    remote: String,
    parents: bool,
) -> Result<()> {
    let meta = std::fs::metadata(local).map_err(|e| local_io("cannot stat", local, e))?;
    if !meta.is_dir() {
        return Err(CliError::new(format!(
            "{} is not a directory (put without -r copies a file)",
            local.display()
        )));
    }
    let existing = client
        .stat(pb::StatRequest {
            computer: computer.clone(),
            path: remote.clone(),
            follow_symlinks: true,
        })
        .await
        .ok()
        .map(|r| r.into_inner());
    let dest = match existing {
        Some(info) if info.kind() == pb::FileKind::Directory => {
            let absolute = std::path::absolute(local).unwrap_or_else(|_| local.to_path_buf());
            let name = absolute
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .ok_or_else(|| CliError::new(format!("{} has no name", local.display())))?;
            let dest = match remote.trim_end_matches('/') {
                "" => name,
                dir => format!("{dir}/{name}"),
            };
            agentcomputer_mcp::calls::files::mkdir(client, computer.clone(), dest.clone(), true)
                .await?;
            dest
        }
        Some(_) => {
            return Err(CliError::new(format!(
                "ENOTDIR: {} exists and is not a directory",
                shown(&remote)
            )));
        }
        None => {
            agentcomputer_mcp::calls::files::mkdir(
                client,
                computer.clone(),
                remote.clone(),
                parents,
            )
            .await?;
            remote
        }
    };
    let header = pb::ImportHeader {
        computer,
        path: dest,
    };
    let root = local.to_path_buf();
    let shown_root = root.clone();
    let produce = move |sink: &mut tar_stream::ImportSink| {
        let mut builder = tar::Builder::new(sink);
        builder.follow_symlinks(false);
        builder.mode(tar::HeaderMode::Complete);
        builder.append_dir_all(".", &root)?;
        builder.finish()
    };
    let failed = move |e| local_io("cannot read", &shown_root, e);
    tar_stream::send(client, header, produce, failed).await?;
    Ok(())
}

/// Downloads the remote directory `remote` as `local`, as `cp -r` does:
/// into `local/NAME` when `local` is an existing directory, else as
/// `local` itself. Symlinks come down as symlinks and are never followed
/// while unpacking; no entry lands outside the target (the archive comes
/// from the computer, whose tenant chose its names); devices and FIFOs are
/// refused. Modes and mtimes are kept.
pub async fn get_tree(
    client: &mut Client,
    computer: String,
    remote: String,
    local: &Path,
) -> Result<()> {
    let info = client
        .stat(pb::StatRequest {
            computer: computer.clone(),
            path: remote.clone(),
            follow_symlinks: true,
        })
        .await?
        .into_inner();
    if info.kind() != pb::FileKind::Directory {
        return Err(CliError::new(format!(
            "ENOTDIR: {} is not a directory (get without -r copies a file)",
            shown(&remote)
        )));
    }
    let target: PathBuf = if local.is_dir() {
        let name = base_name(&remote).unwrap_or("workspace");
        local.join(name)
    } else {
        local.to_path_buf()
    };
    std::fs::create_dir_all(&target).map_err(|e| local_io("cannot create", &target, e))?;
    let req = pb::ExportRequest {
        computer,
        path: remote,
    };
    let dest = target.clone();
    tar_stream::receive(client, req, move |reader| unpack_local(reader, &dest)).await
}

/// The process's umask (read by setting it and putting it back).
fn umask() -> u32 {
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    nix::sys::stat::umask(old);
    old.bits()
}

/// Unpacks `archive` under `dest`, refusing devices, FIFOs and any entry
/// the tar reader would place outside `dest`. Modes are the archive's
/// permission bits less the umask, as `tar x` does for a user: no
/// set-user-ID, set-group-ID or sticky bit from a computer's tree reaches
/// this machine. Directories are kept writable for their entries and get
/// their modes and mtimes once everything under them is written, so a
/// read-only directory (`0555`) unpacks. A regular file shorter than its
/// header says (a stream that broke) is an error.
fn unpack_local(archive: impl Read, dest: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let mask = umask();
    let mut archive = tar::Archive::new(archive);
    archive.set_preserve_permissions(false);
    archive.set_mask(mask);
    archive.set_preserve_mtime(true);
    archive.set_overwrite(true);
    let bad = |e: std::io::Error| CliError::new(format!("bad tar stream from the node agent: {e}"));
    let mut dirs = Vec::new();
    for entry in archive.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let kind = entry.header().entry_type();
        if matches!(
            kind,
            tar::EntryType::Char | tar::EntryType::Block | tar::EntryType::Fifo
        ) {
            return Err(CliError::new(format!(
                "refused archive entry {}: devices and FIFOs are not unpacked",
                shown(&name)
            )));
        }
        let placed = entry
            .unpack_in(dest)
            .map_err(|e| CliError::new(format!("cannot unpack {}: {e}", shown(&name))))?;
        // Where unpack_in put it: the name's normal components under dest.
        let at: std::path::PathBuf = std::path::Path::new(&name)
            .components()
            .filter(|c| matches!(c, std::path::Component::Normal(_)))
            .collect();
        let at = dest.join(at);
        if !placed {
            return Err(CliError::new(format!(
                "refused archive entry {}: it would land outside {}",
                shown(&name),
                dest.display()
            )));
        }
        if placed && kind.is_file() {
            let want = entry.header().size().unwrap_or(0);
            let got = std::fs::symlink_metadata(&at).map(|m| m.len()).unwrap_or(0);
            if got != want {
                return Err(CliError::new(format!(
                    "the tree's stream broke inside {}: {got} of its {want} bytes arrived",
                    shown(&name)
                )));
            }
        }
        if kind == tar::EntryType::Directory {
            let mode = entry.header().mode().unwrap_or(0o755) & 0o777 & !mask;
            let mtime = entry.header().mtime().unwrap_or(0);
            let _ = std::fs::set_permissions(&at, std::fs::Permissions::from_mode(mode | 0o700));
            dirs.push((at, mode, mtime));
        }
    }
    // Writing into a directory changed its mtime, and a read-only one had
    // to stay writable: set them last, innermost first.
    for (dir, mode, mtime) in dirs.into_iter().rev() {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(mtime);
        if let Ok(f) = std::fs::File::open(&dir) {
            let _ = f.set_modified(at);
        }
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_in_a_directory_is_named_after_the_last_component() {
        assert_eq!(base_name("src/lib"), Some("lib"));
        assert_eq!(base_name("src/lib/"), Some("lib"));
        assert_eq!(base_name("src/."), Some("src"));
        assert_eq!(base_name(""), None);
        assert_eq!(base_name("a/.."), None);
    }

    /// An archive whose entry names `../evil` is refused, and nothing
    /// lands beside the target.
    #[test]
    fn entries_outside_the_target_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("t");
        std::fs::create_dir(&dest).unwrap();
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(1);
        header.set_mode(0o644);
        header.as_gnu_mut().unwrap().name[..7].copy_from_slice(b"../evil");
        header.set_cksum();
        let mut data = header.as_bytes().to_vec();
        data.extend_from_slice(&[b'x'; 512]);
        data.extend_from_slice(&[0; 1024]);
        assert!(unpack_local(&data[..], &dest).is_err());
        assert!(!dir.path().join("evil").exists());
    }

    #[test]
    fn fifos_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Fifo);
        header.set_size(0);
        builder
            .append_data(&mut header, "pipe", std::io::empty())
            .unwrap();
        let data = builder.into_inner().unwrap();
        let err = unpack_local(&data[..], dir.path()).unwrap_err();
        assert!(err.to_string().contains("FIFOs"), "{err}");
        assert!(!dir.path().join("pipe").exists());
    }
}
