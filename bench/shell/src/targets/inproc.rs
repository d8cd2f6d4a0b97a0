//! The shell runtime in-process: `agentcomputer_shell::run` over a real
//! engine database in a temporary directory, as the node agent calls it.

use super::Ran;
use crate::scenarios::Scenario;
use agentcomputer_fs::{Fs, Ino, Limits, ROOT_INO, WriteMode};
use agentcomputer_shell::{ExecRequest, OutputChunk, SHELL_OWNER, run};
use anyhow::{Result, anyhow};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// One engine database per scenario, under `dir`.
pub(crate) struct InProc {
    dir: PathBuf,
    fs: Option<Fs>,
    /// Directories created so far, by path relative to the root.
    dirs: HashMap<String, Ino>,
}

impl InProc {
    pub(crate) fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            fs: None,
            dirs: HashMap::new(),
        }
    }

    pub(crate) fn load(&mut self, sc: &Scenario) -> Result<()> {
        // Close the previous scenario's computer before creating the next.
        self.fs = None;
        self.dirs.clear();
        let fs = Fs::create(&self.dir.join(format!("{}.db", sc.key)), Limits::default())
            .map_err(|e| anyhow!("create engine: {e}"))?;
        self.fs = Some(fs);
        self.write_files(&sc.files)
    }

    fn fs(&self) -> Result<&Fs> {
        self.fs
            .as_ref()
            .ok_or_else(|| anyhow!("no scenario loaded"))
    }

    /// Writes every file (creating or truncating it), one engine
    /// transaction per file, as a script's `>` would.
    pub(crate) fn write_files(&mut self, files: &[(String, Vec<u8>)]) -> Result<()> {
        for (path, bytes) in files {
            let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
            let dir = self.mkdir_p(parent)?;
            self.fs()?
                .write_all(
                    dir,
                    name.as_bytes(),
                    bytes,
                    WriteMode::Truncate,
                    0o644,
                    SHELL_OWNER,
                )
                .map_err(|e| anyhow!("write {path}: {e}"))?;
        }
        Ok(())
    }

    fn mkdir_p(&mut self, path: &str) -> Result<Ino> {
        if path.is_empty() {
            return Ok(ROOT_INO);
        }
        if let Some(&ino) = self.dirs.get(path) {
            return Ok(ino);
        }
        let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
        let parent = self.mkdir_p(parent)?;
        let fs = self.fs()?;
        let ino = match fs.lookup(parent, name.as_bytes()) {
            Ok(attr) => attr.ino,
            Err(_) => {
                fs.mkdir(parent, name.as_bytes(), 0o755, SHELL_OWNER)
                    .map_err(|e| anyhow!("mkdir {path}: {e}"))?
                    .ino
            }
        };
        self.dirs.insert(path.to_string(), ino);
        Ok(ino)
    }

    pub(crate) async fn run(&mut self, script: &str) -> Result<Ran> {
        let fs = self.fs()?.clone();
        let req = ExecRequest {
            script: script.into(),
            timeout: Duration::from_secs(600),
            max_output_bytes: 256 << 20,
            ..ExecRequest::default()
        };
        let (tx, mut rx) = mpsc::channel(64);
        let start = Instant::now();
        let collect = async {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            while let Some(chunk) = rx.recv().await {
                match chunk {
                    OutputChunk::Stdout(b) => out.extend(b),
                    OutputChunk::Stderr(b) => err.extend(b),
                }
            }
            (out, err)
        };
        let (outcome, (stdout, stderr)) =
            tokio::join!(run(fs, req, tx, CancellationToken::new()), collect);
        Ok(Ran {
            elapsed: start.elapsed(),
            stdout,
            stderr,
            status: outcome.exit_code,
        })
    }
}
