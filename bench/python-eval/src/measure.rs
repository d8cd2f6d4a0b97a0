//! Running one exec and reading this process's memory and CPU from /proc.

use agentcomputer_fs::{Fs, Limits, ROOT_INO};
use agentcomputer_shell::{ExecRequest, OutputChunk, run};
use anyhow::{Context, Result};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// One computer: an engine database in its own temporary directory.
pub(crate) struct Computer {
    pub fs: Fs,
    _dir: Option<tempfile::TempDir>,
}

impl Computer {
    pub(crate) fn new() -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let fs = Fs::create(&dir.path().join("computer.db"), Limits::default())
            .map_err(|e| anyhow::anyhow!("create engine: {e}"))?;
        Ok(Self {
            fs,
            _dir: Some(dir),
        })
    }

    /// Another handle on a computer whose directory someone else keeps.
    pub(crate) fn from_fs(fs: Fs) -> Self {
        Self { fs, _dir: None }
    }

    /// Contents of `path` (relative to `/workspace`) read through the engine
    /// API, not the shell.
    pub(crate) fn read(&self, path: &str) -> Result<Vec<u8>> {
        let attr = self
            .fs
            .resolve(ROOT_INO, path.as_bytes(), true)
            .map_err(|e| anyhow::anyhow!("resolve {path}: {e}"))?;
        self.fs
            .read_all(attr.ino)
            .map_err(|e| anyhow::anyhow!("read {path}: {e}"))
    }

    /// Runs `script` in a fresh exec with `timeout`.
    pub(crate) async fn sh(&self, script: &str, timeout: Duration) -> Ran {
        let (tx, mut rx) = mpsc::channel(64);
        let req = ExecRequest {
            script: script.into(),
            timeout,
            ..ExecRequest::default()
        };
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
        let (outcome, (out, err)) = tokio::join!(
            run(self.fs.clone(), req, tx, CancellationToken::new()),
            collect
        );
        Ran {
            exit: outcome.exit_code,
            stdout: String::from_utf8_lossy(&out).into_owned(),
            stderr: String::from_utf8_lossy(&err).into_owned(),
            elapsed: start.elapsed(),
        }
    }
}

/// What one exec produced.
pub(crate) struct Ran {
    pub exit: i32,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Ran {
    /// The last non-empty line of stderr (Python's exception line), cut to
    /// 160 characters, with `|` escaped for a Markdown table.
    pub(crate) fn error_line(&self) -> String {
        let line = self
            .stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim();
        cell(line)
    }
}

/// `text` made safe for one Markdown table cell, at most 160 characters.
pub(crate) fn cell(text: &str) -> String {
    let mut s: String = text.chars().take(160).collect();
    if text.chars().count() > 160 {
        s.push('…');
    }
    s.replace('|', "\\|").replace('\n', " ")
}

/// p50, p99 and max of `samples`.
pub(crate) fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    (at(0.50), at(0.99), *samples.last().expect("samples"))
}

pub(crate) fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

pub(crate) fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// This process's memory from /proc/self/status, bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mem {
    /// Peak resident set (`VmHWM`), since start or the last [`reset_peak`].
    pub hwm: u64,
    /// Resident set now (`VmRSS`).
    pub rss: u64,
    /// Peak address space (`VmPeak`); cannot be reset.
    pub peak_vm: u64,
    /// Address space now (`VmSize`).
    pub vm: u64,
}

impl Mem {
    pub(crate) fn now() -> Self {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse::<u64>().ok())
                .map_or(0, |kib| kib * 1024)
        };
        Self {
            hwm: field("VmHWM:"),
            rss: field("VmRSS:"),
            peak_vm: field("VmPeak:"),
            vm: field("VmSize:"),
        }
    }

    pub(crate) fn describe(&self) -> String {
        format!(
            "VmRSS {}, VmHWM {}, VmSize {}, VmPeak {}",
            mib(self.rss),
            mib(self.hwm),
            mib(self.vm),
            mib(self.peak_vm)
        )
    }
}

/// Resets `VmHWM` to the current resident set (proc(5), `clear_refs` 5), so
/// the next [`Mem::now`] shows the peak of what ran in between.
pub(crate) fn reset_peak() -> Result<()> {
    std::fs::write("/proc/self/clear_refs", "5")
        .context("reset VmHWM through /proc/self/clear_refs")
}

/// CPU time (user + system) this process has used so far.
pub(crate) fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // proc(5): after the parenthesised command name, utime and stime are
    // fields 14 and 15 (index 11 and 12 of what follows), in clock ticks.
    let Some(close) = stat.rfind(')') else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = stat[close + 2..].split_whitespace().collect();
    let ticks: u64 = fields.get(11).and_then(|t| t.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|t| t.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

/// This process's address-space limit (`RLIMIT_AS`), if any.
pub(crate) fn address_space_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) };
    (rc == 0 && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}
