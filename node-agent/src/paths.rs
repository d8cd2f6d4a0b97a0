//! Paths of the API, mapped onto a computer's filesystem.
//!
//! The API speaks of paths as runtimes see them: the computer's files are at
//! `/workspace`. A relative path starts there; an absolute one must be
//! `/workspace` or below it. Normalisation is lexical: empty and `.`
//! components vanish and `..` drops the previous component but stops at
//! `/workspace`, so no request can name anything outside the computer. The
//! engine receives the result as an absolute path from its root inode.
//!
//! Before `workspace`, empty, `.` and `..` components stay at `/` as in any
//! absolute path: `/./workspace/x` and `/../workspace/x` are `/workspace/x`.
//!
//! A path that ends in `/` (or in a `.` or `..` component) names a
//! directory, as in POSIX (XBD 4.13, "Pathname Resolution": a trailing
//! slash resolves as if `.` followed). [`ApiPath::dir_only`] keeps that
//! fact, so calls can answer `ENOTDIR` for `file/` as a local filesystem
//! does, instead of acting on `file`.

use agentcomputer_fs::{NAME_MAX, PATH_MAX};
use nix::errno::Errno;
use tonic::Status;

use crate::errors::{errno_detail, errno_status};

/// Where the computer's files appear in every runtime.
pub const WORKSPACE: &str = "/workspace";

/// A normalised path inside a computer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiPath {
    /// Components below the root; empty for the root itself.
    components: Vec<String>,
    /// The path as the client wrote it, for error messages.
    shown: String,
    /// The client's path ended in `/`, `/.` or `/..`: it must name a
    /// directory.
    dir_only: bool,
    /// The client's last component was `.` or `..`: a name that cannot be
    /// removed or renamed, although normalisation resolved it.
    dot_last: bool,
}

impl ApiPath {
    /// Parses a client path. Errors (INVALID_ARGUMENT): a NUL byte
    /// (`EINVAL`), an absolute path outside `/workspace` (`EINVAL`), a path
    /// longer than `PATH_MAX` or a component longer than `NAME_MAX`
    /// (`ENAMETOOLONG`).
    pub fn parse(path: &str) -> Result<ApiPath, Status> {
        if path.contains('\0') {
            return Err(errno_detail(
                Errno::EINVAL,
                format_args!("path contains a NUL byte: {path:?}"),
            ));
        }
        if path.len() >= PATH_MAX {
            return Err(errno_status(Errno::ENAMETOOLONG, &abbreviate(path)));
        }
        let rest = if let Some(abs) = path.strip_prefix('/') {
            // Empty, `.` and `..` components before `workspace` all stay
            // at `/` (`/..` is `/`), so `/./workspace/x` is `/workspace/x`.
            let mut trimmed = abs;
            while let Some(after) = ["/", "./", "../"]
                .iter()
                .find_map(|p| trimmed.strip_prefix(p))
            {
                trimmed = after;
            }
            match trimmed.strip_prefix(&WORKSPACE[1..]) {
                Some(r) if r.is_empty() || r.starts_with('/') => r,
                _ => {
                    return Err(errno_detail(
                        Errno::EINVAL,
                        format_args!("path is outside {WORKSPACE}: {path}"),
                    ));
                }
            }
        } else {
            path
        };
        let mut components: Vec<String> = Vec::new();
        for part in rest.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    components.pop();
                }
                name => {
                    if name.len() > NAME_MAX {
                        return Err(errno_status(Errno::ENAMETOOLONG, &abbreviate(path)));
                    }
                    components.push(name.to_string());
                }
            }
        }
        let last = rest.rsplit('/').next().unwrap_or("");
        let dir_only = !components.is_empty() && matches!(last, "" | "." | "..");
        let dot_last = matches!(last, "." | "..");
        Ok(ApiPath {
            components,
            shown: path.to_string(),
            dir_only,
            dot_last,
        })
    }

    /// The root directory (`/workspace`).
    pub fn root() -> ApiPath {
        ApiPath {
            components: Vec::new(),
            shown: WORKSPACE.to_string(),
            dir_only: false,
            dot_last: false,
        }
    }

    /// Whether the client's path ended in `/`, `/.` or `/..`, so it may
    /// only name a directory (or a symlink to one, which it then follows).
    /// Always false for the root, which is a directory anyway.
    pub fn dir_only(&self) -> bool {
        self.dir_only
    }

    /// Whether the client's last component was `.` or `..` (`a/b/..`
    /// normalises to `a`, but removing or renaming it must fail, as
    /// rmdir(2) and rename(2) refuse such names).
    pub fn dot_last(&self) -> bool {
        self.dot_last
    }

    /// Whether this is the root directory.
    pub fn is_root(&self) -> bool {
        self.components.is_empty()
    }

    /// The path as the client gave it.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The path for the engine: absolute from its root inode (`/` for root).
    pub fn engine_path(&self) -> Vec<u8> {
        format!("/{}", self.components.join("/")).into_bytes()
    }

    /// The normalised path relative to `/workspace` (`""` for the root), the
    /// form the API returns in listings.
    pub fn relative(&self) -> String {
        self.components.join("/")
    }

    /// The path as runtimes see it, such as `/workspace/src`.
    pub fn runtime_path(&self) -> String {
        if self.is_root() {
            WORKSPACE.to_string()
        } else {
            format!("{WORKSPACE}/{}", self.relative())
        }
    }

    /// The components below the root.
    pub fn components(&self) -> &[String] {
        &self.components
    }

    /// The parent directory and the last component, or `None` for the root.
    pub fn split_last(&self) -> Option<(ApiPath, &str)> {
        let (last, parents) = self.components.split_last()?;
        Some((
            ApiPath {
                components: parents.to_vec(),
                shown: self.shown.clone(),
                dir_only: false,
                dot_last: false,
            },
            last.as_str(),
        ))
    }
}

fn abbreviate(path: &str) -> String {
    if path.len() <= 80 {
        return path.to_string();
    }
    let mut end = 80;
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &path[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn rel(p: &str) -> String {
        ApiPath::parse(p).unwrap().relative()
    }

    #[test]
    fn relative_and_workspace_forms_agree() {
        assert_eq!(rel("src/x.txt"), "src/x.txt");
        assert_eq!(rel("/workspace/src/x.txt"), "src/x.txt");
        assert_eq!(rel("//workspace//src/./x.txt/"), "src/x.txt");
        assert_eq!(rel("/workspace"), "");
        assert_eq!(rel(""), "");
        assert_eq!(rel("."), "");
        assert_eq!(ApiPath::parse("a/b").unwrap().engine_path(), b"/a/b");
        assert_eq!(ApiPath::parse("").unwrap().engine_path(), b"/");
        assert_eq!(ApiPath::parse("a").unwrap().runtime_path(), "/workspace/a");
    }

    #[test]
    fn dotdot_cannot_escape() {
        assert_eq!(rel("../../etc/passwd"), "etc/passwd");
        assert_eq!(rel("/workspace/../etc/passwd"), "etc/passwd");
        assert_eq!(rel("a/../../b"), "b");
        assert_eq!(rel("a/b/../c"), "a/c");
    }

    #[test]
    fn bad_paths_are_rejected_with_errno() {
        for p in ["/etc/passwd", "/", "/workspaces/x", "/tmp"] {
            let s = ApiPath::parse(p).unwrap_err();
            assert_eq!(s.code(), Code::InvalidArgument, "{p}");
            assert!(
                s.message()
                    .starts_with("EINVAL: path is outside /workspace"),
                "{}",
                s.message()
            );
        }
        let s = ApiPath::parse("a\0b").unwrap_err();
        assert!(s.message().starts_with("EINVAL"));
        let long = "x".repeat(NAME_MAX + 1);
        assert!(
            ApiPath::parse(&long)
                .unwrap_err()
                .message()
                .starts_with("ENAMETOOLONG")
        );
        let deep = "a/".repeat(PATH_MAX);
        assert!(
            ApiPath::parse(&deep)
                .unwrap_err()
                .message()
                .starts_with("ENAMETOOLONG")
        );
    }

    #[test]
    fn a_trailing_slash_or_dot_names_a_directory() {
        for p in ["a/", "a//", "a/.", "a/b/..", "/workspace/a/", "./a/./"] {
            assert!(ApiPath::parse(p).unwrap().dir_only(), "{p}");
        }
        for p in [
            "a",
            "a/b",
            "/workspace/a",
            "",
            "/workspace/",
            ".",
            "a/..",
            "/workspace/..",
        ] {
            assert!(!ApiPath::parse(p).unwrap().dir_only(), "{p}");
        }
        // The parent part of a split never carries the flag.
        let p = ApiPath::parse("a/b/").unwrap();
        assert!(!p.split_last().unwrap().0.dir_only());
    }

    #[test]
    fn split_last() {
        let p = ApiPath::parse("a/b/c").unwrap();
        let (parent, name) = p.split_last().unwrap();
        assert_eq!(parent.relative(), "a/b");
        assert_eq!(name, "c");
        assert!(ApiPath::root().split_last().is_none());
    }
}
