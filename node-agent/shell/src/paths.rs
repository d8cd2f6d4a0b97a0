//! The path convention of the shell: the computer is at `/workspace`, work
//! starts there, relative paths in requests are taken under it.

use crate::sandbox_fs::WORKSPACE;
use bashkit::normalize_path;
use std::path::Path;

/// The shell's starting directory for a request's `cwd`.
///
/// `""` is `/workspace`; a relative path is taken under `/workspace` and
/// cannot climb out of it (`../x` is `/workspace/x`); an absolute path is a
/// path of the shell's namespace, normalized lexically (`/tmp`,
/// `/workspace/src`).
pub fn resolve_cwd(cwd: &str) -> String {
    if cwd.starts_with('/') {
        return normalize_path(Path::new(cwd))
            .to_string_lossy()
            .into_owned();
    }
    let inner = normalize_path(&Path::new("/").join(cwd));
    let inner = inner.to_string_lossy();
    if inner == "/" {
        WORKSPACE.to_string()
    } else {
        format!("{WORKSPACE}{inner}")
    }
}

#[cfg(test)]
mod tests {
    use super::resolve_cwd;

    #[test]
    fn cwd_rules() {
        assert_eq!(resolve_cwd(""), "/workspace");
        assert_eq!(resolve_cwd("."), "/workspace");
        assert_eq!(resolve_cwd("src/lib"), "/workspace/src/lib");
        assert_eq!(resolve_cwd("../../etc"), "/workspace/etc");
        assert_eq!(resolve_cwd("/tmp/"), "/tmp");
        assert_eq!(resolve_cwd("/workspace/a/../b"), "/workspace/b");
        assert_eq!(resolve_cwd("/../.."), "/");
    }
}
