//! Helpers shared by the commands that reach past bashkit's `FileSystem`
//! trait to the engine behind `/workspace`.

use crate::sandbox_fs::WORKSPACE;
use bashkit::{FileType, normalize_path, vfs_join};
use std::path::{Path, PathBuf};

/// uid and gid of the virtual user `sandbox` of `/etc/passwd`, shown as
/// the owner of files bashkit's own trees hold.
pub(crate) const SANDBOX_ID: u32 = agentcomputer_runtime_contract::SANDBOX_UID;

/// The type letter `ls -l` and `stat` print for `t`.
pub(crate) fn kind_char(t: FileType) -> char {
    match t {
        FileType::Directory => 'd',
        FileType::Symlink => 'l',
        FileType::Fifo => 'p',
        FileType::File => '-',
    }
}

/// The type letter `ls -l` and `stat` print for an engine inode of `kind`.
pub(crate) fn engine_kind_char(kind: agentcomputer_fs::FileKind) -> char {
    use agentcomputer_fs::FileKind;
    match kind {
        FileKind::Directory => 'd',
        FileKind::Symlink => 'l',
        FileKind::NamedPipe => 'p',
        FileKind::CharDevice => 'c',
        FileKind::BlockDevice => 'b',
        FileKind::Socket => 's',
        FileKind::RegularFile => '-',
    }
}

/// `path` (absolute, normalized) relative to the engine root when it lies
/// under `/workspace`: `/workspace/a/b` is `/a/b`; `None` elsewhere.
pub(crate) fn engine_path(abs: &Path) -> Option<Vec<u8>> {
    let rest = abs.strip_prefix(WORKSPACE).ok()?;
    Some(format!("/{}", rest.to_string_lossy()).into_bytes())
}

/// `path` as written on a command line, made absolute at `cwd` and
/// normalized lexically, as bashkit's own commands resolve operands.
pub(crate) fn resolve(cwd: &Path, path: &str) -> PathBuf {
    normalize_path(&vfs_join(cwd, Path::new(path)))
}

/// The text bash and coreutils print for a filesystem error, without
/// bashkit's `io error: ` prefix. The engine adapter's errors already carry
/// the `strerror(3)` text; bashkit's in-memory scratch tree says "not
/// found" and the like (lower case), which is replaced by the `strerror`
/// text of the error's kind.
pub(crate) fn reason(err: &bashkit::Error) -> String {
    use std::io::ErrorKind;
    let bashkit::Error::Io(e) = err else {
        return err.to_string();
    };
    let message = e.to_string();
    if !message.starts_with(|c: char| c.is_ascii_lowercase()) {
        return message;
    }
    match e.kind() {
        ErrorKind::NotFound => "No such file or directory",
        ErrorKind::PermissionDenied => "Permission denied",
        ErrorKind::IsADirectory => "Is a directory",
        ErrorKind::NotADirectory => "Not a directory",
        ErrorKind::AlreadyExists => "File exists",
        ErrorKind::DirectoryNotEmpty => "Directory not empty",
        ErrorKind::Unsupported => "Operation not supported",
        _ => return message,
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_paths_map_to_the_engine_root() {
        assert_eq!(
            engine_path(Path::new("/workspace/a/b")),
            Some(b"/a/b".to_vec())
        );
        assert_eq!(engine_path(Path::new("/workspace")), Some(b"/".to_vec()));
        assert_eq!(engine_path(Path::new("/workspaces/a")), None);
        assert_eq!(engine_path(Path::new("/tmp/a")), None);
    }

    #[test]
    fn reasons_are_strerror_text() {
        let io = |kind, msg: &str| bashkit::Error::Io(std::io::Error::new(kind, msg.to_string()));
        assert_eq!(
            reason(&io(std::io::ErrorKind::NotFound, "not found")),
            "No such file or directory"
        );
        assert_eq!(
            reason(&io(std::io::ErrorKind::Other, "Input/output error")),
            "Input/output error"
        );
    }

    #[test]
    fn operands_resolve_at_cwd() {
        let cwd = Path::new("/workspace/src");
        assert_eq!(resolve(cwd, "../a"), PathBuf::from("/workspace/a"));
        assert_eq!(resolve(cwd, "/tmp/x/."), PathBuf::from("/tmp/x"));
    }
}
