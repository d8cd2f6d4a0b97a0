//! The shell's whole filesystem namespace: the computer at `/workspace`,
//! a per-exec in-memory scratch tree everywhere else (`/tmp`, `$HOME`).
//!
//! This replaces bashkit's `MountableFs` for the `/workspace` mount for
//! one reason: `MountableFs` reports the *root's* `limits()` while summing
//! every mount's `usage()`, and builtins such as `tar` check the sum against
//! those limits. With a small scratch quota, extracting an archive into a
//! well-filled workspace would then fail. Here limits and usage both cover
//! the two trees, while each tree still enforces its own quota (the engine
//! with `ENOSPC`, the scratch tree with its `FsLimits`).
//!
//! Nothing of the host is reachable: the scratch tree is memory, the
//! workspace is the engine, and `..` is resolved lexically and clamps at `/`.

use crate::engine_fs::EngineFs;
use crate::errno::errno_error;
use crate::stderr;
use agentcomputer_fs::Errno;
use async_trait::async_trait;
use bashkit::{
    DirEntry, FileSystem, FileSystemExt, FileType, FsLimits, FsUsage, InMemoryFs, Metadata,
    normalize_path,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

/// Where the computer's files appear in the shell.
pub const WORKSPACE: &str = "/workspace";

/// The composed namespace handed to bashkit as its filesystem.
pub struct SandboxFs {
    scratch: Arc<InMemoryFs>,
    workspace: Arc<EngineFs>,
    /// The script's fd 2, when it points at the runtime's ordered output.
    stderr: Option<Arc<stderr::Sink>>,
    /// Scripts the script runs from files, mended as they are read.
    loads: Option<crate::dup_input::Loads>,
}

/// Which tree a path lives in, and the path inside that tree.
enum Route {
    Scratch(PathBuf),
    Workspace(PathBuf),
}

impl SandboxFs {
    /// Joins `workspace` at [`WORKSPACE`] with a fresh scratch tree capped at
    /// `scratch_limits`; `home` (an absolute path) is created in scratch.
    pub fn new(workspace: EngineFs, scratch_limits: FsLimits, home: &str) -> Self {
        let scratch = InMemoryFs::with_limits(scratch_limits);
        // Listed by `ls /`; every lookup below it goes to the engine.
        scratch.add_dir(WORKSPACE, 0o755);
        scratch.add_dir(home, 0o755);
        Self {
            scratch: Arc::new(scratch),
            workspace: Arc::new(workspace),
            stderr: None,
            loads: None,
        }
    }

    /// Reads of script files `bash FILE`/`source FILE` load go through
    /// `loads` (see the `dup_input` module).
    pub(crate) fn with_loads(mut self, loads: crate::dup_input::Loads) -> Self {
        self.loads = Some(loads);
        self
    }

    /// Writes to [`stderr::PATH`] go to `sink` (see the `stderr` module).
    pub(crate) fn with_stderr(mut self, sink: stderr::Sink) -> Self {
        self.stderr = Some(Arc::new(sink));
        self
    }

    /// The stderr sink, when `path` names it.
    fn stderr_sink(&self, path: &Path) -> Option<&stderr::Sink> {
        self.stderr.as_deref().filter(|_| stderr::is_sink(path))
    }

    fn route(path: &Path) -> Route {
        let path = normalize_path(path);
        match path.strip_prefix(WORKSPACE) {
            Ok(rest) => Route::Workspace(Path::new("/").join(rest)),
            Err(_) => Route::Scratch(path),
        }
    }

    fn tree(&self, route: &Route) -> (&dyn FileSystem, PathBuf) {
        match route {
            Route::Scratch(p) => (self.scratch.as_ref(), p.clone()),
            Route::Workspace(p) => (self.workspace.as_ref(), p.clone()),
        }
    }

    fn resolve(&self, path: &Path) -> (&dyn FileSystem, PathBuf) {
        self.tree(&Self::route(path))
    }

    /// Whether two paths are in the same tree.
    fn same_tree(a: &Route, b: &Route) -> bool {
        matches!(
            (a, b),
            (Route::Scratch(_), Route::Scratch(_)) | (Route::Workspace(_), Route::Workspace(_))
        )
    }
}

/// Moves or copies one entry between the two trees (mv(1) across file
/// systems: copy, then delete the source). Directories are copied
/// recursively. Not atomic: a failure midway leaves a partial target.
async fn copy_across(
    from_fs: &dyn FileSystem,
    from: &Path,
    to_fs: &dyn FileSystem,
    to: &Path,
) -> bashkit::Result<()> {
    // (source, target) pairs still to copy; directories push their children.
    let mut pending = vec![(from.to_path_buf(), to.to_path_buf())];
    while let Some((src, dst)) = pending.pop() {
        let meta = from_fs.stat(&src).await?;
        match meta.file_type {
            FileType::Directory => {
                to_fs.mkdir(&dst, true).await?;
                to_fs.chmod(&dst, meta.mode).await?;
                for entry in from_fs.read_dir(&src).await? {
                    pending.push((src.join(&entry.name), dst.join(&entry.name)));
                }
            }
            FileType::Symlink => {
                let target = from_fs.read_link(&src).await?;
                if to_fs.exists(&dst).await? {
                    to_fs.remove(&dst, false).await?;
                }
                to_fs.symlink(&target, &dst).await?;
            }
            FileType::File | FileType::Fifo => {
                let data = from_fs.read_file(&src).await?;
                to_fs.write_file(&dst, &data).await?;
                to_fs.chmod(&dst, meta.mode).await?;
            }
        }
    }
    Ok(())
}

#[async_trait]
impl FileSystem for SandboxFs {
    async fn read_file(&self, path: &Path) -> bashkit::Result<Vec<u8>> {
        let (fs, p) = self.resolve(path);
        let content = fs.read_file(&p).await?;
        Ok(match &self.loads {
            Some(loads) => loads.mend_read(path, content),
            None => content,
        })
    }

    async fn write_file(&self, path: &Path, content: &[u8]) -> bashkit::Result<()> {
        if let Some(sink) = self.stderr_sink(path) {
            return sink.write(content).await;
        }
        let (fs, p) = self.resolve(path);
        fs.write_file(&p, content).await
    }

    async fn append_file(&self, path: &Path, content: &[u8]) -> bashkit::Result<()> {
        if let Some(sink) = self.stderr_sink(path) {
            return sink.write(content).await;
        }
        let (fs, p) = self.resolve(path);
        fs.append_file(&p, content).await
    }

    async fn mkdir(&self, path: &Path, recursive: bool) -> bashkit::Result<()> {
        let (fs, p) = self.resolve(path);
        fs.mkdir(&p, recursive).await
    }

    async fn remove(&self, path: &Path, recursive: bool) -> bashkit::Result<()> {
        let (fs, p) = self.resolve(path);
        fs.remove(&p, recursive).await
    }

    async fn stat(&self, path: &Path) -> bashkit::Result<Metadata> {
        let (fs, p) = self.resolve(path);
        fs.stat(&p).await
    }

    async fn read_dir(&self, path: &Path) -> bashkit::Result<Vec<DirEntry>> {
        let (fs, p) = self.resolve(path);
        fs.read_dir(&p).await
    }

    async fn exists(&self, path: &Path) -> bashkit::Result<bool> {
        let (fs, p) = self.resolve(path);
        fs.exists(&p).await
    }

    async fn rename(&self, from: &Path, to: &Path) -> bashkit::Result<()> {
        let (a, b) = (Self::route(from), Self::route(to));
        let (from_fs, from_p) = self.tree(&a);
        let (to_fs, to_p) = self.tree(&b);
        if Self::same_tree(&a, &b) {
            return from_fs.rename(&from_p, &to_p).await;
        }
        if from_p == Path::new("/") && matches!(a, Route::Workspace(_)) {
            return Err(errno_error(Errno::EBUSY));
        }
        if to_fs.exists(&to_p).await? && to_fs.stat(&to_p).await?.file_type.is_dir() {
            // rename(2) only replaces an empty directory, and only by one.
            if !from_fs.stat(&from_p).await?.file_type.is_dir() {
                return Err(errno_error(Errno::EISDIR));
            }
            to_fs.remove(&to_p, false).await?;
        }
        copy_across(from_fs, &from_p, to_fs, &to_p).await?;
        from_fs.remove(&from_p, true).await
    }

    async fn copy(&self, from: &Path, to: &Path) -> bashkit::Result<()> {
        let (a, b) = (Self::route(from), Self::route(to));
        let (from_fs, from_p) = self.tree(&a);
        let (to_fs, to_p) = self.tree(&b);
        if Self::same_tree(&a, &b) {
            return from_fs.copy(&from_p, &to_p).await;
        }
        if from_fs.stat(&from_p).await?.file_type.is_dir() {
            return Err(errno_error(Errno::EISDIR));
        }
        copy_across(from_fs, &from_p, to_fs, &to_p).await
    }

    async fn symlink(&self, target: &Path, link: &Path) -> bashkit::Result<()> {
        let (fs, p) = self.resolve(link);
        fs.symlink(target, &p).await
    }

    async fn read_link(&self, path: &Path) -> bashkit::Result<PathBuf> {
        let (fs, p) = self.resolve(path);
        fs.read_link(&p).await
    }

    async fn chmod(&self, path: &Path, mode: u32) -> bashkit::Result<()> {
        let (fs, p) = self.resolve(path);
        fs.chmod(&p, mode).await
    }

    async fn set_modified_time(&self, path: &Path, time: SystemTime) -> bashkit::Result<()> {
        let (fs, p) = self.resolve(path);
        fs.set_modified_time(&p, time).await
    }
}

#[async_trait]
impl FileSystemExt for SandboxFs {
    /// Usage of both trees together.
    fn usage(&self) -> FsUsage {
        let (s, w) = (self.scratch.usage(), self.workspace.usage());
        FsUsage::new(
            s.total_bytes.saturating_add(w.total_bytes),
            s.file_count.saturating_add(w.file_count),
            s.dir_count.saturating_add(w.dir_count),
        )
    }

    /// Limits of both trees together: quotas add up, single-file and path
    /// limits are the larger of the two. Each tree still enforces its own.
    fn limits(&self) -> FsLimits {
        let (s, w) = (self.scratch.limits(), self.workspace.limits());
        FsLimits {
            max_total_bytes: s.max_total_bytes.saturating_add(w.max_total_bytes),
            max_file_size: s.max_file_size.max(w.max_file_size),
            max_file_count: s.max_file_count.saturating_add(w.max_file_count),
            max_dir_count: s.max_dir_count.saturating_add(w.max_dir_count),
            max_path_depth: s.max_path_depth.max(w.max_path_depth),
            max_filename_length: s.max_filename_length.max(w.max_filename_length),
            max_path_length: s.max_path_length.max(w.max_path_length),
        }
    }

    async fn mkfifo(&self, path: &Path, mode: u32) -> bashkit::Result<()> {
        let (fs, p) = self.resolve(path);
        fs.mkfifo(&p, mode).await
    }

    fn backend_kind(&self) -> &'static str {
        "agentcomputer-sandbox"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routed(p: &str) -> (bool, String) {
        match SandboxFs::route(Path::new(p)) {
            Route::Workspace(p) => (true, p.to_string_lossy().into_owned()),
            Route::Scratch(p) => (false, p.to_string_lossy().into_owned()),
        }
    }

    #[test]
    fn workspace_prefix_routes_to_engine_root() {
        assert_eq!(routed("/workspace"), (true, "/".into()));
        assert_eq!(routed("/workspace/a/b"), (true, "/a/b".into()));
        assert_eq!(
            routed("/workspace/../etc/passwd"),
            (false, "/etc/passwd".into())
        );
        assert_eq!(routed("/workspaces/x"), (false, "/workspaces/x".into()));
        assert_eq!(routed("/tmp/x"), (false, "/tmp/x".into()));
        assert_eq!(routed("/../../workspace/x"), (true, "/x".into()));
    }
}
