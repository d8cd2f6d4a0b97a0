//! Runner for the brush shell's own binary (`brush` of the `brush-shell`
//! crate, built by `bench/shell-spec/install-brush.sh`): each case runs as a
//! child process exactly as GNU bash does ([`super::bash::run_all_with`]),
//! so its column is brush's agreement as a host program, the upper bound
//! of what embedding its crates could give.

use super::bash;
use crate::{Job, Observed};
use anyhow::Result;
use std::path::Path;
use std::time::Duration;

/// Arguments put before bash's: `--no-config` keeps brush from reading a
/// user configuration file, and `--input-backend=basic` makes it read a
/// script on stdin as bash does. With brush-shell's default (reedline)
/// backend, brush 0.4.0 parses such a script line by line, so every
/// construct spanning lines (a function body, a here-document, `if`/`fi`)
/// fails with "syntax error at end of input".
pub const ARGS: &[&str] = &["--no-config", "--input-backend=basic"];

/// Runs every job in order with the brush binary at `brush`.
pub fn run_all(
    brush: &Path,
    jobs: &[Job],
    testdata: &[(String, Vec<u8>)],
    timeout: Duration,
    progress: impl Fn(usize),
) -> Result<Vec<Observed>> {
    bash::run_all_with(brush, ARGS, jobs, testdata, timeout, progress)
}

/// The first line of `brush --version` (e.g. `brush 0.4.0 (git:…)`), or
/// `None` when the binary does not run.
pub fn version(brush: &Path) -> Option<String> {
    let out = std::process::Command::new(brush)
        .arg("--version")
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
}
