//! Keeping the data directory private to the agent's user.
//!
//! Everything under a data directory is readable only by the user the agent
//! runs as: directories are created `0700` and files `0600`, whatever the
//! process umask (the mode is set explicitly after creation, since a umask can
//! only clear bits). [`secure_data_dir`] runs at start and tightens what older
//! versions left wider (they used `0755`/`0644`), logging every change.

use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tracing::{info, warn};

/// Mode of every directory under the data directory, and of it.
pub const DIR_MODE: u32 = 0o700;

/// Mode of every regular file under the data directory.
pub const FILE_MODE: u32 = 0o600;

/// One permission change made by [`secure_data_dir`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tightened {
    /// The file or directory changed.
    pub path: PathBuf,
    /// Its permission bits before (`st_mode & 0o7777`).
    pub from: u32,
    /// Its permission bits after.
    pub to: u32,
}

/// Creates directory `path` with mode [`DIR_MODE`] (exactly, whatever the
/// umask). Errors as `mkdir(2)`: `AlreadyExists` if it exists, `NotFound`
/// when the parent is missing.
pub fn create_dir(path: &Path) -> io::Result<()> {
    DirBuilder::new().mode(DIR_MODE).create(path)?;
    std::fs::set_permissions(path, Permissions::from_mode(DIR_MODE))
}

/// Makes sure directory `path` exists: creates it (and missing parents,
/// those with the usual `0777 & !umask`) with mode [`DIR_MODE`]; an existing
/// directory is left as it is. Errors: it cannot be created, or it exists
/// but is not a directory.
pub fn ensure_dir(path: &Path) -> io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    match create_dir(path) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => Ok(()),
        other => other,
    }
}

/// Opens `path` for writing, creating it or truncating it, with mode
/// [`FILE_MODE`]: a new file is created with it, and an existing one (say a
/// leftover temporary file of an older version) is set to it before anything
/// is written. Errors as `open(2)` and `fchmod(2)`.
pub fn create_file(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(path)?;
    file.set_permissions(Permissions::from_mode(FILE_MODE))?;
    Ok(file)
}

/// Creates the new file `path` (`O_EXCL`: `AlreadyExists` if anything is
/// there, a symlink included) with mode [`FILE_MODE`].
pub fn create_new_file(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)?;
    file.set_permissions(Permissions::from_mode(FILE_MODE))?;
    Ok(file)
}

use crate::layout::{COMPUTERS_DIR, RUN_DIR};

/// Makes `data_dir` private to this process's user: creates it with mode
/// [`DIR_MODE`] if missing, then removes the group and other permission bits
/// of it, of the regular files directly in it, and of every directory and
/// regular file under `computers/` and `run/` (directories also get
/// `u+rwx`). Other
/// directories in it are not the agent's and are left alone (the data
/// directory's own mode already keeps other users out). Symbolic links are
/// not followed and other file types are left alone; nothing on another
/// filesystem (a mount inside the data directory) is touched. Every change
/// is logged and returned.
///
/// Errors: the directory cannot be created or read, or a mode cannot be
/// changed (a file owned by another user: `PermissionDenied`); the message
/// names the path.
pub fn secure_data_dir(data_dir: &Path) -> anyhow::Result<Vec<Tightened>> {
    use anyhow::Context;
    ensure_dir(data_dir)
        .with_context(|| format!("cannot create data directory {}", data_dir.display()))?;
    let meta = std::fs::symlink_metadata(data_dir)
        .with_context(|| format!("cannot read data directory {}", data_dir.display()))?;
    if !meta.is_dir() {
        anyhow::bail!("data directory {} is not a directory", data_dir.display());
    }
    let mut changes = Vec::new();
    tighten(data_dir, &meta, &mut changes)?;
    walk(data_dir, meta.dev(), true, &mut changes)?;
    for c in &changes {
        info!(path = %c.path.display(), from = %format!("{:04o}", c.from), to = %format!("{:04o}", c.to), "made private to the agent's user");
    }
    if !changes.is_empty() {
        warn!(
            count = changes.len(),
            data_dir = %data_dir.display(),
            "tightened permissions that other users could read through"
        );
    }
    Ok(changes)
}

/// Tightens the entries of `dir`, descending into directories. At the top
/// (`top`), only into the agent's own directories `computers`, `run` and
/// `scratch`.
fn walk(dir: &Path, dev: u64, top: bool, changes: &mut Vec<Tightened>) -> anyhow::Result<()> {
    use anyhow::Context;
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot read {}", dir.display()))?;
        let path = entry.path();
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            // Removed meanwhile (a temporary file).
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot stat {}", path.display())),
        };
        if meta.dev() != dev {
            warn!(path = %path.display(), "not making a mount inside the data directory private");
            continue;
        }
        if top
            && meta.is_dir()
            && entry.file_name() != COMPUTERS_DIR
            && entry.file_name() != RUN_DIR
            && entry.file_name() != crate::layout::SCRATCH_DIR
        {
            warn!(path = %path.display(), "leaving a directory the agent did not make as it is");
            continue;
        }
        tighten(&path, &meta, changes)?;
        if meta.is_dir() {
            walk(&path, dev, false, changes)?;
        }
    }
    Ok(())
}

/// Clears the group/other bits of `path` (a directory or regular file).
fn tighten(
    path: &Path,
    meta: &std::fs::Metadata,
    changes: &mut Vec<Tightened>,
) -> anyhow::Result<()> {
    let from = meta.mode() & 0o7777;
    let to = if meta.is_dir() {
        (from & !0o077) | DIR_MODE
    } else if meta.is_file() {
        from & !0o077
    } else {
        return Ok(());
    };
    if to != from {
        std::fs::set_permissions(path, Permissions::from_mode(to)).map_err(|e| {
            anyhow::anyhow!(
                "cannot make {} private (mode {from:04o}, owner uid {}): {e}",
                path.display(),
                meta.uid()
            )
        })?;
        changes.push(Tightened {
            path: path.to_path_buf(),
            from,
            to,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn creates_private_whatever_the_umask() {
        let dir = tempfile::tempdir().unwrap();
        // The widest umask possible must not matter: modes are set exactly.
        let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o000));
        let d = dir.path().join("d");
        create_dir(&d).unwrap();
        let f = d.join("f");
        create_file(&f).unwrap();
        let g = d.join("g");
        create_new_file(&g).unwrap();
        nix::sys::stat::umask(old);
        assert_eq!(mode(&d), DIR_MODE);
        assert_eq!(mode(&f), FILE_MODE);
        assert_eq!(mode(&g), FILE_MODE);
        assert_eq!(
            create_new_file(&g).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        // An existing wide file is narrowed before it is written.
        std::fs::set_permissions(&f, Permissions::from_mode(0o666)).unwrap();
        create_file(&f).unwrap();
        assert_eq!(mode(&f), FILE_MODE);
    }

    #[test]
    fn secure_tightens_an_old_layout_and_leaves_links_alone() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let comp = data.join("computers/demo");
        std::fs::create_dir_all(&comp).unwrap();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, b"x").unwrap();
        std::fs::set_permissions(&outside, Permissions::from_mode(0o644)).unwrap();
        std::os::unix::fs::symlink(&outside, data.join("link")).unwrap();
        for p in [&data, &data.join("computers"), &comp] {
            std::fs::set_permissions(p, Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::write(comp.join("fs.db"), b"x").unwrap();
        std::fs::set_permissions(comp.join("fs.db"), Permissions::from_mode(0o644)).unwrap();
        std::fs::write(data.join("ro"), b"x").unwrap();
        std::fs::set_permissions(data.join("ro"), Permissions::from_mode(0o444)).unwrap();
        let foreign = data.join("not-ours");
        std::fs::create_dir(&foreign).unwrap();
        std::fs::set_permissions(&foreign, Permissions::from_mode(0o755)).unwrap();

        let changes = secure_data_dir(&data).unwrap();
        assert_eq!(mode(&data), 0o700);
        assert_eq!(mode(&data.join("computers")), 0o700);
        assert_eq!(mode(&comp), 0o700);
        assert_eq!(mode(&comp.join("fs.db")), 0o600);
        // Only group and other bits go: a read-only file stays read-only.
        assert_eq!(mode(&data.join("ro")), 0o400);
        // The link's target is outside and stays as it was, and so does a
        // directory that is not the agent's.
        assert_eq!(mode(&outside), 0o644);
        assert_eq!(mode(&foreign), 0o755);
        assert_eq!(changes.len(), 5, "{changes:?}");
        assert!(changes.contains(&Tightened {
            path: comp.join("fs.db"),
            from: 0o644,
            to: 0o600
        }));
        // A second run finds nothing to do.
        assert!(secure_data_dir(&data).unwrap().is_empty());
    }

    #[test]
    fn secure_creates_a_missing_dir() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("a/b/data");
        assert!(secure_data_dir(&data).unwrap().is_empty());
        assert_eq!(mode(&data), 0o700);
        std::fs::write(dir.path().join("file"), b"").unwrap();
        let err = secure_data_dir(&dir.path().join("file")).unwrap_err();
        assert!(format!("{err:#}").contains("file"), "{err:#}");
    }
}
