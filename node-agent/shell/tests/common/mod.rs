//! Shared test harness: a real engine database in a temporary directory
//! and a helper that runs a script and collects everything it produced.
#![allow(dead_code)]

use agentcomputer_fs::{Fs, Limits, Owner, ROOT_INO, WriteMode};
use agentcomputer_shell::{ExecOutcome, ExecRequest, OutputChunk, ShellLimits, run_with_limits};
use std::time::Duration;
use tempfile::TempDir;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// One computer: an engine database file in its own temporary directory.
pub(crate) struct Computer {
    pub fs: Fs,
    pub dir: TempDir,
}

impl Computer {
    pub(crate) fn new() -> Self {
        Self::with_limits(Limits::default())
    }

    pub(crate) fn with_limits(limits: Limits) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let fs = Fs::create(&dir.path().join("computer.db"), limits).expect("create engine");
        Self { fs, dir }
    }

    /// Runs `script` from `/workspace` with a 30 s timeout.
    pub(crate) async fn sh(&self, script: &str) -> Run {
        self.exec(ExecRequest {
            script: script.into(),
            timeout: Duration::from_secs(30),
            ..ExecRequest::default()
        })
        .await
    }

    /// Like [`Computer::sh`], as a `'static` future for spawning.
    pub(crate) fn sh_owned(
        &self,
        script: String,
    ) -> impl std::future::Future<Output = Run> + Send + 'static {
        let fs = self.fs.clone();
        async move {
            let req = ExecRequest {
                script,
                timeout: Duration::from_secs(30),
                ..ExecRequest::default()
            };
            exec(&fs, req, CancellationToken::new()).await
        }
    }

    pub(crate) async fn exec(&self, req: ExecRequest) -> Run {
        exec(&self.fs, req, CancellationToken::new()).await
    }

    /// Contents of `path` (relative to the engine root) read through the
    /// engine API, not the shell.
    pub(crate) fn read(&self, path: &str) -> Vec<u8> {
        let attr = self
            .fs
            .resolve(ROOT_INO, path.as_bytes(), true)
            .expect("resolve");
        self.fs.read_all(attr.ino).expect("read_all")
    }

    /// Writes `path` through the engine API.
    pub(crate) fn write(&self, path: &str, data: &[u8]) {
        self.fs
            .write_all(
                ROOT_INO,
                path.as_bytes(),
                data,
                WriteMode::Truncate,
                0o644,
                Owner::ROOT,
            )
            .expect("write_all");
    }
}

/// Everything one run produced.
#[derive(Debug)]
pub(crate) struct Run {
    pub chunks: Vec<OutputChunk>,
    pub outcome: ExecOutcome,
}

impl Run {
    pub(crate) fn stdout_bytes(&self) -> Vec<u8> {
        self.chunks
            .iter()
            .filter_map(|c| match c {
                OutputChunk::Stdout(b) => Some(b.as_slice()),
                OutputChunk::Stderr(_) => None,
            })
            .flatten()
            .copied()
            .collect()
    }

    pub(crate) fn stdout(&self) -> String {
        String::from_utf8(self.stdout_bytes()).expect("utf-8 stdout")
    }

    pub(crate) fn stderr(&self) -> String {
        let bytes: Vec<u8> = self
            .chunks
            .iter()
            .filter_map(|c| match c {
                OutputChunk::Stderr(b) => Some(b.as_slice()),
                OutputChunk::Stdout(_) => None,
            })
            .flatten()
            .copied()
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    pub(crate) fn code(&self) -> i32 {
        self.outcome.exit_code
    }

    /// Asserts a clean run and returns its stdout.
    #[track_caller]
    pub(crate) fn ok(&self) -> String {
        assert_eq!(
            self.code(),
            0,
            "exit {} stderr: {}",
            self.code(),
            self.stderr()
        );
        assert_eq!(self.outcome.error, None);
        self.stdout()
    }
}

/// Runs `req` against `fs`, collecting output concurrently.
pub(crate) async fn exec(fs: &Fs, req: ExecRequest, cancel: CancellationToken) -> Run {
    exec_with_limits(fs, req, cancel, ShellLimits::default()).await
}

/// Runs `req` against `fs` under `limits`, collecting output concurrently.
pub(crate) async fn exec_with_limits(
    fs: &Fs,
    req: ExecRequest,
    cancel: CancellationToken,
    limits: ShellLimits,
) -> Run {
    let (tx, mut rx) = mpsc::channel(64);
    let collector = tokio::spawn(async move {
        let mut chunks = Vec::new();
        while let Some(c) = rx.recv().await {
            chunks.push(c);
        }
        chunks
    });
    let outcome = run_with_limits(fs.clone(), req, tx, cancel, limits).await;
    let chunks = collector.await.expect("collector");
    Run { chunks, outcome }
}
