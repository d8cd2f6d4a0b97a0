//! Appends to one file gathered into large engine writes.
//!
//! bashkit hands a command's redirected output (`cmd > file`, `cmd >>
//! file`) to the filesystem in pieces of at most 4 KiB, one `append_file`
//! each. As one engine transaction apiece (walk the path, rewrite the
//! file's last chunk, commit), 50 MB took ~12,000 transactions and about
//! 25 times the CPU of an upload of the same bytes, which writes 1 MiB
//! messages (docs/benchmarks.md, "Bulk data through the shell").
//!
//! So appends to the same file follow the first one into a buffer, written
//! to the engine in one transaction once it holds [`FLUSH_BYTES`]. The
//! first append of a run goes to the engine at once, so what it finds
//! (no such directory, a directory, a named pipe) is reported to the
//! writer as before; only a regular file is buffered. What a buffer may
//! hold is bounded by the computer's free quota read when it starts, so a
//! write that does not fit is made directly and fails with `ENOSPC` in the
//! writer's own call. The buffer is written before any other filesystem
//! call of the exec, before every command (the runtime's hook), and at the
//! end of the exec, so the script itself never sees it; other execs
//! and the API may see the file up to [`FLUSH_BYTES`] behind while the
//! command runs. A buffer that cannot be written outside the writer's own
//! call (the quota taken meanwhile by another exec) is kept as the exec's
//! deferred error, reported on stderr when the script ends.

use super::EngineFs;
use bashkit::Metadata;
use parking_lot::Mutex;
use std::path::{Path, PathBuf};

/// Bytes gathered before one engine write: the size of an upload's
/// messages.
pub(crate) const FLUSH_BYTES: usize = 1 << 20;

/// The appends of one exec not yet in the engine.
#[derive(Default)]
pub(crate) struct Appends {
    pending: Mutex<Option<Pending>>,
    /// A buffer that could not be written where no caller could be told:
    /// the path and why.
    deferred: Mutex<Option<(PathBuf, String)>>,
}

/// A regular file's buffered appends.
struct Pending {
    path: PathBuf,
    /// The file as the engine has it, before `data`.
    meta: Metadata,
    data: Vec<u8>,
    /// Most bytes this buffer may hold: free quota when it started, at most
    /// [`FLUSH_BYTES`].
    room: usize,
}

impl EngineFs {
    /// Appends `data` to `path`, gathering runs of appends to one regular
    /// file (see the module documentation).
    pub(crate) fn append(&self, path: &Path, data: &[u8]) -> bashkit::Result<()> {
        let mut pending = self.appends.pending.lock();
        if let Some(p) = pending.as_mut()
            && p.path == path
            && p.data.len() + data.len() <= p.room
        {
            self.budget
                .admit((p.data.len() + data.len()) as u64, "the write")?;
            p.data.extend_from_slice(data);
            if p.data.len() >= FLUSH_BYTES {
                let bytes = std::mem::take(&mut p.data);
                self.write_mode(path, &bytes, agentcomputer_fs::WriteMode::Append)?;
                p.meta = super::metadata(&self.walk(path)?);
                p.room = self.room();
            }
            return Ok(());
        }
        if let Some(p) = pending.take()
            && !p.data.is_empty()
        {
            self.write_mode(&p.path, &p.data, agentcomputer_fs::WriteMode::Append)?;
        }
        let regular = self.write_mode(path, data, agentcomputer_fs::WriteMode::Append)?;
        if regular {
            *pending = Some(Pending {
                path: path.to_path_buf(),
                meta: super::metadata(&self.walk(path)?),
                data: Vec::new(),
                room: self.room(),
            });
        }
        Ok(())
    }

    /// The metadata of `path` when it is the file being appended to: the
    /// engine's, with the buffered bytes counted in its size.
    pub(crate) fn appending(&self, path: &Path) -> Option<Metadata> {
        let pending = self.appends.pending.lock();
        let p = pending.as_ref().filter(|p| p.path == path)?;
        let mut meta = p.meta.clone();
        meta.size += p.data.len() as u64;
        Some(meta)
    }

    /// Writes the buffered appends to the engine; errors go to the caller,
    /// whose call then fails (any filesystem call but an append).
    pub(crate) fn flush_appends(&self) -> bashkit::Result<()> {
        let taken = self.appends.pending.lock().take();
        match taken {
            Some(p) if !p.data.is_empty() => self
                .write_mode(&p.path, &p.data, agentcomputer_fs::WriteMode::Append)
                .map(drop),
            _ => Ok(()),
        }
    }

    /// Writes the buffered appends where no caller can be told of a
    /// failure (between commands, at the end of the exec): a failure is
    /// kept for [`EngineFs::deferred_error`].
    pub(crate) fn flush_appends_deferred(&self) {
        let taken = self.appends.pending.lock().take();
        if let Some(p) = taken
            && !p.data.is_empty()
            && let Err(e) = self.write_mode(&p.path, &p.data, agentcomputer_fs::WriteMode::Append)
        {
            let reason = crate::builtins::error_reason(&e);
            self.appends.deferred.lock().get_or_insert((p.path, reason));
        }
    }

    /// The first buffered write that failed outside its writer's call:
    /// the file's path in the engine and the strerror text.
    pub(crate) fn deferred_error(&self) -> Option<(PathBuf, String)> {
        self.appends.deferred.lock().take()
    }

    /// Bytes a buffer may hold now: the free quota, at most
    /// [`FLUSH_BYTES`]; 0 when it cannot be read (then appends go to the
    /// engine one by one).
    fn room(&self) -> usize {
        match self.fs.statfs() {
            Ok(s) => {
                let free = s.blocks_free.saturating_mul(u64::from(s.block_size));
                usize::try_from(free).unwrap_or(usize::MAX).min(FLUSH_BYTES)
            }
            Err(_) => 0,
        }
    }
}
