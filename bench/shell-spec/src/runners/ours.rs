//! Runner for the in-process shell runtime (`agentcomputer-shell`): each
//! case gets a fresh computer, an engine database in its own temp dir.

use super::TIMEOUT_STATUS;
use crate::{Job, Observed};
use agentcomputer_fs::{Fs, Ino, Limits, Owner, ROOT_INO, WriteMode};
use agentcomputer_shell::{EXIT_TIMEOUT, ExecRequest, OutputChunk, run};
use anyhow::{Context, Result};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Environment every case sees (`$SH` for nested shells, `$TMP` scratch).
const ENV: &[(&str, &str)] = &[("SH", "bash"), ("TMP", "/tmp"), ("REPO_ROOT", "/workspace")];

/// Runs `job` on a fresh computer; `testdata` is written under
/// `/workspace` when the job needs it.
pub async fn run_one(
    job: &Job,
    testdata: &[(String, Vec<u8>)],
    timeout: Duration,
) -> Result<Observed> {
    let dir = tempfile::tempdir()?;
    let fs = Fs::create(&dir.path().join("computer.db"), Limits::default())
        .map_err(|e| anyhow::anyhow!("create engine: {e}"))?;
    for d in super::LAYOUT_DIRS {
        mkdir_p(&fs, d)?;
    }
    if job.needs_testdata {
        for (path, bytes) in testdata {
            write_with_parents(&fs, path, bytes).with_context(|| format!("writing {path}"))?;
        }
    }
    let req = ExecRequest {
        script: job.script.clone(),
        env: ENV
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        timeout,
        max_output_bytes: 1 << 20,
        ..ExecRequest::default()
    };
    let (tx, mut rx) = mpsc::channel(64);
    let collect = tokio::spawn(async move {
        let mut o = Observed::default();
        while let Some(c) = rx.recv().await {
            match c {
                OutputChunk::Stdout(b) => o.stdout.extend_from_slice(&b),
                OutputChunk::Stderr(b) => o.stderr.extend_from_slice(&b),
            }
        }
        o
    });
    let cancel = CancellationToken::new();
    // The runtime enforces `timeout` itself; this outer bound only guards
    // the harness against a runtime that fails to stop.
    let outcome = tokio::time::timeout(
        timeout * 2 + Duration::from_secs(1),
        run(fs, req, tx, cancel.clone()),
    )
    .await;
    cancel.cancel();
    let mut o = collect.await?;
    match outcome {
        Ok(out) => {
            o.status = out.exit_code;
            o.timed_out = out.exit_code == EXIT_TIMEOUT && out.error.is_some();
        }
        Err(_) => {
            o.status = TIMEOUT_STATUS;
            o.timed_out = true;
        }
    }
    Ok(o)
}

/// The identity scripts run as (`id` prints uid 1000).
const OWNER: Owner = Owner {
    uid: 1000,
    gid: 1000,
};

fn write_with_parents(fs: &Fs, path: &str, bytes: &[u8]) -> Result<()> {
    let (parents, name) = path.rsplit_once('/').unwrap_or(("", path));
    let dir = mkdir_p(fs, parents)?;
    fs.write_all(
        dir,
        name.as_bytes(),
        bytes,
        WriteMode::Truncate,
        0o644,
        OWNER,
    )
    .map_err(|e| anyhow::anyhow!("write: {e}"))?;
    Ok(())
}

/// Creates `path` (relative to the engine root) and missing parents;
/// returns its inode.
fn mkdir_p(fs: &Fs, path: &str) -> Result<Ino> {
    let mut dir = ROOT_INO;
    for p in path.split('/').filter(|p| !p.is_empty()) {
        dir = match fs.lookup(dir, p.as_bytes()) {
            Ok(a) => a.ino,
            Err(_) => {
                fs.mkdir(dir, p.as_bytes(), 0o755, OWNER)
                    .map_err(|e| anyhow::anyhow!("mkdir {p}: {e}"))?
                    .ino
            }
        };
    }
    Ok(dir)
}

/// Runs every job in order on one multi-threaded tokio runtime.
pub fn run_all(
    jobs: &[Job],
    testdata: &[(String, Vec<u8>)],
    timeout: Duration,
    progress: impl Fn(usize),
) -> Result<Vec<Observed>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut out = Vec::with_capacity(jobs.len());
        for (i, job) in jobs.iter().enumerate() {
            out.push(run_one(job, testdata, timeout).await?);
            progress(i + 1);
        }
        Ok(out)
    })
}
