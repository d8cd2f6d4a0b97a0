//! Walking the work tree: every file and symlink not ignored, with its
//! attributes, skipping `.git` and ignored directories.
//!
//! Ignore rules are gitignore(5)'s, matched by gitoxide's `gix-ignore`:
//! `.git/info/exclude`, then each directory's `.gitignore` from the top
//! down, a deeper file's match winning over a shallower one's.

use crate::error::Result;
use crate::files::{Files, join};
use agentcomputer_fs::{Attr, FileKind, Ino};
use bstr::ByteSlice;
use gix_glob::search::pattern::List;
use gix_ignore::search::Ignore;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Ignore rules from the `.gitignore` files met so far.
pub struct IgnoreRules {
    /// (directory, rules), shallowest first.
    lists: Vec<(Vec<u8>, List<Ignore>)>,
}

fn parse_list(bytes: &[u8], dir: &[u8]) -> Option<List<Ignore>> {
    let source = PathBuf::from(format!("/{}/.gitignore", dir.to_str_lossy()).replace("//", "/"));
    List::from_bytes(bytes, source, Some(Path::new("/")), Ignore::default()).ok()
}

impl IgnoreRules {
    /// The rules of `info/exclude` and the top `.gitignore`.
    pub fn load(files: &Files, top: &[u8], git_dir: &[u8]) -> Result<Self> {
        let mut rules = Self { lists: Vec::new() };
        if let Some(bytes) = files.read(&join(git_dir, b"info/exclude"))? {
            rules
                .lists
                .extend(parse_list(&bytes, b"").map(|l| (Vec::new(), l)));
        }
        rules.enter(files, top, b"")?;
        Ok(rules)
    }

    /// Adds directory `dir`'s `.gitignore`, if any (`top` is the work tree).
    fn enter(&mut self, files: &Files, top: &[u8], dir: &[u8]) -> Result<()> {
        let path = join(&join(top, dir), b".gitignore");
        if let Some(bytes) = files.read(&path)? {
            self.lists
                .extend(parse_list(&bytes, dir).map(|l| (dir.to_vec(), l)));
        }
        Ok(())
    }

    /// Drops the rules of directories that `dir` is not under.
    fn leave_to(&mut self, dir: &[u8]) {
        self.lists.retain(|(d, _)| crate::paths::is_under(dir, d));
    }

    /// Whether repository path `path` is ignored.
    pub fn ignored(&self, path: &[u8], is_dir: bool) -> bool {
        let basename = path.rfind(b"/").map(|p| p + 1);
        for (_, list) in self.lists.iter().rev() {
            if let Some(m) = gix_ignore::search::pattern_matching_relative_path(
                list,
                path.as_bstr(),
                basename,
                Some(is_dir),
                gix_glob::pattern::Case::Sensitive,
            ) {
                return !m.pattern.is_negative();
            }
        }
        false
    }
}

/// What a walk found.
#[derive(Default)]
pub struct Scan {
    /// Files and symlinks not ignored, by repository path.
    pub files: BTreeMap<Vec<u8>, Attr>,
    /// Ignored files and directories met (a directory is not entered).
    pub ignored: Vec<(Vec<u8>, bool)>,
}

/// Walks the work tree `top` below repository directory `start` (empty
/// for all of it). `stop` is polled between directories.
pub fn scan(
    files: &Files,
    top: &[u8],
    git_dir: &[u8],
    start: &[u8],
    stop: &dyn Fn() -> bool,
) -> Result<Scan> {
    let mut rules = IgnoreRules::load(files, top, git_dir)?;
    // The rules of the directories above `start`.
    let mut dir = Vec::new();
    for part in start.split(|b| *b == b'/').filter(|p| !p.is_empty()) {
        if !dir.is_empty() {
            dir.push(b'/');
        }
        dir.extend_from_slice(part);
        rules.enter(files, top, &dir)?;
    }
    let mut out = Scan::default();
    let Some(start_attr) = files.lstat(&join(top, start))? else {
        return Ok(out);
    };
    if start_attr.kind != FileKind::Directory {
        if crate::index::mode_of(&start_attr).is_some() {
            if rules.ignored(start, false) {
                out.ignored.push((start.to_vec(), false));
            } else {
                out.files.insert(start.to_vec(), start_attr);
            }
        }
        return Ok(out);
    }
    let mut stack: Vec<(Vec<u8>, Ino)> = vec![(start.to_vec(), start_attr.ino)];
    while let Some((dir, ino)) = stack.pop() {
        if stop() {
            return Err(crate::error::Error::Stopped);
        }
        rules.leave_to(&dir);
        if !dir.is_empty() && dir != start {
            rules.enter(files, top, &dir)?;
        }
        for (name, attr) in files.list_ino(ino)? {
            if name == b".git" {
                continue;
            }
            let path = if dir.is_empty() {
                name
            } else {
                [dir.as_slice(), b"/", &name].concat()
            };
            let is_dir = attr.kind == FileKind::Directory;
            if rules.ignored(&path, is_dir) {
                out.ignored.push((path, is_dir));
                continue;
            }
            if is_dir {
                stack.push((path, attr.ino));
            } else if crate::index::mode_of(&attr).is_some() {
                out.files.insert(path, attr);
            }
        }
    }
    Ok(out)
}
