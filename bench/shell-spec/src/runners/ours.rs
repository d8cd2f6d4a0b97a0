//! Runner for the in-process shell runtime (`agentcomputer-shell`): each
//! case gets a fresh computer, an engine database in its own temp dir.

use super::TIMEOUT_STATUS;
use crate::{Job, Observed, Setup};
use agentcomputer_fs::{Fs, Ino, Limits, Owner, ROOT_INO, WriteMode};
use agentcomputer_shell::{EXIT_REFUSED, EXIT_TIMEOUT, ExecRequest, OutputChunk, run};
use anyhow::{Context, Result};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Environment every case sees (`$SH` for nested shells, `$TMP` scratch).
const ENV: &[(&str, &str)] = &[("SH", "bash"), ("TMP", "/tmp"), ("REPO_ROOT", "/workspace")];

/// Runs `job` on a fresh computer; `testdata` is written under
/// `/workspace` when an Oils job needs it, a brush job's files likewise.
pub async fn run_one(
    job: &Job,
    testdata: &[(String, Vec<u8>)],
    timeout: Duration,
) -> Result<Observed> {
    let dir = tempfile::tempdir()?;
    let fs = Fs::create(&dir.path().join("computer.db"), Limits::default())
        .map_err(|e| anyhow::anyhow!("create engine: {e}"))?;
    let env = match &job.setup {
        None => {
            for d in super::LAYOUT_DIRS {
                mkdir_p(&fs, d)?;
            }
            if job.needs_testdata {
                for (path, bytes) in testdata {
                    write_with_parents(&fs, path, bytes, 0o644)
                        .with_context(|| format!("writing {path}"))?;
                }
            }
            ENV.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        }
        Some(setup) => brush_setup(&fs, setup)?,
    };
    let req = ExecRequest {
        script: job.script.clone(),
        stdin: job.inline_stdin(),
        env,
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
            o.refused = out
                .error
                .filter(|_| out.exit_code == EXIT_REFUSED)
                .filter(|e| e.starts_with("shell: script not run"));
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

/// Writes a brush case's files under `/workspace` (the engine root and the
/// starting directory) and returns its environment (`$HOME` when the case
/// names one, then the case's variables).
fn brush_setup(fs: &Fs, setup: &Setup) -> Result<Vec<(String, String)>> {
    for f in &setup.files {
        let mode = if f.executable { 0o755 } else { 0o644 };
        write_with_parents(fs, &f.path, &f.contents, mode)
            .with_context(|| format!("writing {}", f.path))?;
    }
    let mut env = Vec::new();
    if let Some(h) = &setup.home_dir {
        let rel = h.trim_start_matches("./").trim_end_matches('/');
        if rel != "." && !rel.is_empty() {
            mkdir_p(fs, rel)?;
        }
        let home = match rel {
            "." | "" => "/workspace".to_string(),
            r => format!("/workspace/{r}"),
        };
        env.push(("HOME".to_string(), home));
    }
    env.extend(setup.env.iter().cloned());
    Ok(env)
}

fn write_with_parents(fs: &Fs, path: &str, bytes: &[u8], mode: u32) -> Result<()> {
    let (parents, name) = path.rsplit_once('/').unwrap_or(("", path));
    let dir = mkdir_p(fs, parents)?;
    fs.write_all(
        dir,
        name.as_bytes(),
        bytes,
        WriteMode::Truncate,
        mode,
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
