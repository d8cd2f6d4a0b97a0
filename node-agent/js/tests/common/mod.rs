//! Shared helpers: a real engine database in a temp dir, and one exec.
#![allow(dead_code)]

use std::time::Duration;

use agentcomputer_fs::{Fs, Limits};
use agentcomputer_js::{JsOutcome, JsRequest, OutputChunk, RunOptions};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub(crate) struct Computer {
    pub fs: Fs,
    _dir: tempfile::TempDir,
}

pub(crate) fn computer() -> Computer {
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::create(&dir.path().join("computer.db"), Limits::default()).unwrap();
    Computer { fs, _dir: dir }
}

/// What one exec printed and returned.
#[derive(Debug)]
pub(crate) struct Ran {
    pub outcome: JsOutcome,
    pub stdout: String,
    pub stderr: String,
    pub chunks: Vec<OutputChunk>,
}

impl Ran {
    pub(crate) fn ok(&self) -> &serde_json::Value {
        assert_eq!(
            self.outcome.exit_code, 0,
            "exec failed: {:?}\nstdout: {}\nstderr: {}",
            self.outcome.error, self.stdout, self.stderr
        );
        self.outcome.result.as_ref().unwrap()
    }

    pub(crate) fn err(&self) -> &str {
        assert_ne!(
            self.outcome.exit_code, 0,
            "exec succeeded: {:?} stdout: {}",
            self.outcome.result, self.stdout
        );
        self.outcome.error.as_deref().unwrap()
    }
}

pub(crate) fn request(source: &str) -> JsRequest {
    JsRequest {
        source: source.to_string(),
        timeout: Duration::from_secs(20),
        ..JsRequest::default()
    }
}

pub(crate) async fn run_req(fs: &Fs, req: JsRequest) -> Ran {
    run_with(fs, req, RunOptions::default(), CancellationToken::new()).await
}

pub(crate) async fn run_with(
    fs: &Fs,
    req: JsRequest,
    options: RunOptions,
    cancel: CancellationToken,
) -> Ran {
    let (tx, mut rx) = mpsc::channel(64);
    let collector = tokio::spawn(async move {
        let mut chunks = Vec::new();
        while let Some(c) = rx.recv().await {
            chunks.push(c);
        }
        chunks
    });
    let outcome = agentcomputer_js::run_with(fs.clone(), req, tx, cancel, options).await;
    let chunks = collector.await.unwrap();
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    for c in &chunks {
        match c {
            OutputChunk::Stdout(b) => stdout.extend_from_slice(b),
            OutputChunk::Stderr(b) => stderr.extend_from_slice(b),
        }
    }
    Ran {
        outcome,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        chunks,
    }
}

pub(crate) async fn run(fs: &Fs, source: &str) -> Ran {
    run_req(fs, request(source)).await
}
