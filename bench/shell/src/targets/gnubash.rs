//! GNU bash with the host's coreutils: `bash -c SCRIPT` spawned per run in a
//! directory on the local disk.

use super::Ran;
use crate::scenarios::Scenario;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// A scratch directory per scenario under `root`.
pub(crate) struct GnuBash {
    root: PathBuf,
    cwd: PathBuf,
}

impl GnuBash {
    pub(crate) fn new(root: PathBuf) -> Self {
        let cwd = root.clone();
        Self { root, cwd }
    }

    pub(crate) fn load(&mut self, sc: &Scenario) -> Result<()> {
        self.cwd = self.root.join(sc.key);
        if self.cwd.exists() {
            std::fs::remove_dir_all(&self.cwd)?;
        }
        std::fs::create_dir_all(&self.cwd)?;
        self.write_files(&sc.files)
    }

    pub(crate) fn write_files(&self, files: &[(String, Vec<u8>)]) -> Result<()> {
        for (path, bytes) in files {
            let full = self.cwd.join(path);
            if let Some(parent) = full.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&full, bytes).with_context(|| full.display().to_string())?;
        }
        Ok(())
    }

    /// Timed from spawn to exit, output read. `LC_ALL=C`: byte order for
    /// `sort` and byte semantics, as the two interpreters have.
    pub(crate) fn run(&self, script: &str) -> Result<Ran> {
        let start = Instant::now();
        let out = Command::new("bash")
            .args(["-c", script])
            .current_dir(&self.cwd)
            .env("LC_ALL", "C")
            .output()
            .context("spawning bash")?;
        Ok(Ran {
            elapsed: start.elapsed(),
            stdout: out.stdout,
            stderr: out.stderr,
            status: out.status.code().unwrap_or(-1),
        })
    }
}
