//! The shells under test. Each runs a batch of [`crate::Job`]s, every
//! job on a fresh instance, bounded by a per-case timeout.

pub mod bash;
pub mod brushbin;
pub mod justbash;
pub mod ours;

use std::path::Path;

/// Directories the cases expect in their working directory, which is the
/// root of an Oils checkout when the suite runs (`_tmp/` and
/// `_tmp/spec-tmp/` for scratch files, `bin/` for a glob case); each runner
/// creates them empty, and the working directory is `$REPO_ROOT`.
pub const LAYOUT_DIRS: &[&str] = &["_tmp/spec-tmp", "bin"];

/// Exit status reported for a case the timeout stopped (as `timeout(1)`).
pub const TIMEOUT_STATUS: i32 = 124;

/// Files of `corpus/spec/testdata` as (path relative to the corpus root,
/// bytes), for cases that read `$REPO_ROOT/spec/testdata`.
pub fn testdata(corpus: &Path) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut stack = vec![corpus.join("spec/testdata")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir)? {
            let e = e?;
            let ty = e.file_type()?;
            if ty.is_dir() {
                stack.push(e.path());
            } else if ty.is_file() {
                let rel = e
                    .path()
                    .strip_prefix(corpus)
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                out.push((rel, std::fs::read(e.path())?));
            }
        }
    }
    out.sort();
    Ok(out)
}
