//! Online backup: a consistent copy of the database taken while the
//! filesystem is in use.

use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::fs::io_error;
use crate::{Errno, Error, Fs, Result};

impl Fs {
    /// Writes a consistent copy of this filesystem's whole database to
    /// `dest`, which must not exist yet, and returns its size in bytes.
    ///
    /// The copy is one snapshot: every call that returned before this one
    /// began is in it (calls batched by a commit window are committed
    /// first), nothing half-done is, and writers go on meanwhile. It is
    /// SQLite's `VACUUM INTO` run in one read transaction (so it also holds
    /// what is still in the WAL, which a plain file copy misses), made
    /// compact and synced to disk before this returns. The file is created
    /// `0600`. The copy opens as a filesystem like the original
    /// ([`Fs::open`]). Disk: the live data once more; time: one read of it.
    ///
    /// Errors: `EEXIST` if `dest` exists, `EINVAL` for a path that is not
    /// UTF-8, `ENOSPC` and other I/O errors of writing the copy (a partial
    /// copy is removed).
    pub fn backup_to(&self, dest: &Path) -> Result<u64> {
        let dest_str = dest.to_str().ok_or_else(|| Error::Errno {
            errno: Errno::EINVAL,
            context: Some("the backup path is not UTF-8".to_string()),
        })?;
        // Created empty and private first: VACUUM INTO accepts an empty
        // file, and no other user ever sees the copy's bytes.
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(dest)
            .map_err(|e| match e.kind() {
                ErrorKind::AlreadyExists => Error::Errno {
                    errno: Errno::EEXIST,
                    context: Some("the backup file exists".to_string()),
                },
                _ => io_error(e),
            })?;
        let copied = (|| -> Result<u64> {
            self.flush()?;
            let r = self.inner.readers.get()?;
            r.execute("VACUUM INTO ?1", [dest_str])?;
            let f = std::fs::File::open(dest).map_err(io_error)?;
            f.sync_all().map_err(io_error)?;
            Ok(f.metadata().map_err(io_error)?.len())
        })();
        if copied.is_err() {
            let _ = std::fs::remove_file(dest);
        }
        copied
    }
}
