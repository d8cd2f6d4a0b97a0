//! Reading an archive's table of contents without unpacking it.

use std::cell::Cell;
use std::io::Read;
use std::rc::Rc;

use crate::error::ArchiveError;
use crate::metered::{METADATA_BUDGET, Metered};

/// One entry of an archive as `tar t` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The name as the archive gives it (lossily decoded); a directory's
    /// ends in `/`.
    pub name: String,
    /// The entry's type.
    pub kind: tar::EntryType,
    /// Permission bits (`0o7777`).
    pub mode: u32,
    /// Owner and group names, or their numbers when the archive has no
    /// names.
    pub user: String,
    /// See `user`.
    pub group: String,
    /// Bytes of data.
    pub size: u64,
    /// Seconds since the epoch.
    pub mtime: u64,
    /// A link's target (symlinks and hard links).
    pub link: Option<String>,
}

/// Calls `each` with every entry of `archive` in order, skipping file
/// data; stops at the first error `each` returns. Extension headers (PAX)
/// are not entries. Errors: [`ArchiveError::Malformed`] (including
/// headers past [`METADATA_BUDGET`]), or `each`'s.
pub fn list(
    archive: impl Read,
    mut each: impl FnMut(Listed) -> Result<(), ArchiveError>,
) -> Result<u64, ArchiveError> {
    let left = Rc::new(Cell::new(METADATA_BUDGET));
    let mut archive = tar::Archive::new(Metered {
        inner: archive,
        left: left.clone(),
    });
    let malformed = |e: std::io::Error| ArchiveError::Malformed {
        name: None,
        detail: e.to_string(),
    };
    let mut entries = archive.entries().map_err(malformed)?;
    let mut count = 0;
    loop {
        left.set(METADATA_BUDGET);
        let Some(entry) = entries.next() else {
            break;
        };
        let mut entry = entry.map_err(malformed)?;
        let header = entry.header();
        let kind = header.entry_type();
        if matches!(
            kind,
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader
        ) {
            continue;
        }
        let mut name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        if kind == tar::EntryType::Directory && !name.ends_with('/') {
            name.push('/');
        }
        let numeric = |n: std::io::Result<u64>| n.map(|n| n.to_string()).unwrap_or_default();
        let user = match header.username() {
            Ok(Some(u)) if !u.is_empty() => u.to_string(),
            _ => numeric(header.uid()),
        };
        let group = match header.groupname() {
            Ok(Some(g)) if !g.is_empty() => g.to_string(),
            _ => numeric(header.gid()),
        };
        let listed = Listed {
            kind,
            mode: header.mode().unwrap_or(0) & 0o7777,
            user,
            group,
            size: entry.size(),
            mtime: header.mtime().unwrap_or(0),
            link: entry
                .link_name_bytes()
                .map(|l| String::from_utf8_lossy(&l).into_owned()),
            name,
        };
        // The data is skipped by reading it, past the metadata budget.
        left.set(u64::MAX);
        std::io::copy(&mut entry, &mut std::io::sink()).map_err(|e| ArchiveError::Malformed {
            name: Some(listed.name.clone()),
            detail: e.to_string(),
        })?;
        count += 1;
        each(listed)?;
    }
    Ok(count)
}
