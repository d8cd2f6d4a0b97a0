//! Depth-first walk of a directory tree in the engine, for Glob and Grep.

use std::ops::ControlFlow;

use agentcomputer_fs::{DirEntry, FileKind, Fs, Ino};

/// Entries fetched per `readdir` call.
const BATCH: usize = 1024;

/// Visits every entry below directory `root` (whose path relative to
/// `/workspace` is `root_rel`, `""` for the root) with its relative path.
/// Symlinks are reported but never followed, so a walk always ends.
/// `max_depth` limits how deep the walk goes (1 = only `root`'s entries).
/// The visitor stops the walk with `ControlFlow::Break`.
pub fn walk<F>(
    fs: &Fs,
    root: Ino,
    root_rel: &str,
    max_depth: usize,
    mut visit: F,
) -> agentcomputer_fs::Result<()>
where
    F: FnMut(&str, &DirEntry) -> ControlFlow<()>,
{
    let mut stack: Vec<(Ino, String, usize)> = vec![(root, root_rel.to_string(), 1)];
    while let Some((dir, rel, depth)) = stack.pop() {
        let mut cookie = 0;
        let mut subdirs = Vec::new();
        loop {
            let entries = fs.readdir(dir, cookie, BATCH)?;
            let Some(last) = entries.last() else { break };
            cookie = last.cookie;
            let full = entries.len() == BATCH;
            for e in &entries {
                let name = String::from_utf8_lossy(&e.name);
                let path = if rel.is_empty() {
                    name.into_owned()
                } else {
                    format!("{rel}/{name}")
                };
                if visit(&path, e).is_break() {
                    return Ok(());
                }
                if e.kind == FileKind::Directory && depth < max_depth {
                    subdirs.push((e.ino, path, depth + 1));
                }
            }
            if !full {
                break;
            }
        }
        // Reversed so subdirectories are visited in listing order.
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(())
}
