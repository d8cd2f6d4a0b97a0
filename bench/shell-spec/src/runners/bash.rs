//! Runner for real bash: each case runs as `bash < SCRIPT` (Oils) or
//! `bash --norc --noprofile ARGS < STDIN` (brush) in a fresh temp dir, in its own process group that is killed on timeout.
//! Any shell that takes bash's command line runs the same way
//! ([`run_all_with`], used for the brush binary).

use super::TIMEOUT_STATUS;
use crate::{Job, Observed, Setup};
use anyhow::Result;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Runs `job` with `bash` (a path) in a fresh temp directory: an Oils case
/// in a checkout-like `$REPO_ROOT`, a brush case per its [`Setup`].
pub fn run_one(
    bash: &Path,
    job: &Job,
    testdata: &[(String, Vec<u8>)],
    timeout: Duration,
) -> Result<Observed> {
    run_one_with(bash, &[], job, testdata, timeout)
}

/// Runs `job` like [`run_one`] with the shell at `shell`, whose command
/// line gets `extra_args` first (before `--norc --noprofile ARGS` of a
/// brush case, so only long options for bash; alone for an Oils case);
/// `$SH` names `shell`.
pub fn run_one_with(
    shell: &Path,
    extra_args: &[&str],
    job: &Job,
    testdata: &[(String, Vec<u8>)],
    timeout: Duration,
) -> Result<Observed> {
    let bash = shell;
    let dir = tempfile::tempdir()?;
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp)?;
    let out_path = dir.path().join("stdout");
    let err_path = dir.path().join("stderr");
    let mut child = match &job.setup {
        None => oils_command(bash, extra_args, job, testdata, dir.path(), &tmp)?,
        Some(setup) => brush_command(bash, extra_args, setup, dir.path(), &tmp)?,
    }
    .stdout(std::fs::File::create(&out_path)?)
    .stderr(std::fs::File::create(&err_path)?)
    .process_group(0)
    .spawn()?;
    let pgid = child.id() as i32;
    let deadline = Instant::now() + timeout;
    let (status, timed_out) = loop {
        if let Some(st) = child.try_wait()? {
            break (
                st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0)),
                false,
            );
        }
        if Instant::now() >= deadline {
            kill_group(pgid);
            child.wait()?;
            break (TIMEOUT_STATUS, true);
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    // Background jobs the case left behind die with the case.
    kill_group(pgid);
    Ok(Observed {
        stdout: std::fs::read(&out_path)?,
        stderr: std::fs::read(&err_path)?,
        status,
        timed_out,
        refused: None,
    })
}

/// An Oils case: `bash` reading the case on stdin in a checkout-like
/// `$REPO_ROOT` ([`super::LAYOUT_DIRS`], `testdata` when needed).
fn oils_command(
    bash: &Path,
    extra_args: &[&str],
    job: &Job,
    testdata: &[(String, Vec<u8>)],
    dir: &Path,
    tmp: &Path,
) -> Result<Command> {
    let root = dir.join("repo");
    std::fs::create_dir(&root)?;
    for d in super::LAYOUT_DIRS {
        std::fs::create_dir_all(root.join(d))?;
    }
    if job.needs_testdata {
        for (path, bytes) in testdata {
            let p = root.join(path);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(p, bytes)?;
        }
    }
    // The script on stdin, as the Oils harness feeds cases: `$0` is the
    // shell, `BASH_SOURCE` is empty, `FUNCNAME` has no `main`, and a fatal
    // error exits 1 (not 127 as under `-c`).
    let script = dir.join("case.sh");
    std::fs::write(&script, &job.script)?;
    let mut cmd = Command::new(bash);
    cmd.arg0("bash")
        .args(extra_args)
        .current_dir(&root)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", tmp)
        .env("LC_ALL", "C.UTF-8")
        .env("SH", bash)
        .env("TMP", tmp)
        .env("REPO_ROOT", &root)
        .stdin(std::fs::File::open(&script)?);
    Ok(cmd)
}

/// A brush case: `bash --norc --noprofile ARGS` (as brush's harness runs
/// its oracle) in a fresh directory holding the case's files, with the
/// case's stdin and environment.
fn brush_command(
    bash: &Path,
    extra_args: &[&str],
    setup: &Setup,
    dir: &Path,
    tmp: &Path,
) -> Result<Command> {
    let cwd = dir.join("case");
    std::fs::create_dir(&cwd)?;
    for f in &setup.files {
        let p = cwd.join(&f.path);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&p, &f.contents)?;
        let mode = if f.executable { 0o755 } else { 0o644 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))?;
    }
    let home = match &setup.home_dir {
        Some(h) => cwd.join(h),
        None => dir.join("home"),
    };
    std::fs::create_dir_all(&home)?;
    let stdin = dir.join("stdin");
    std::fs::write(&stdin, &setup.stdin)?;
    let mut cmd = Command::new(bash);
    cmd.arg0("bash")
        .args(extra_args)
        .args(["--norc", "--noprofile"])
        .args(setup.args.iter().flatten())
        .current_dir(&cwd)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", &home)
        .env("LC_ALL", "C.UTF-8")
        .env("TMPDIR", tmp)
        .envs(setup.env.iter().map(|(k, v)| (k, v)))
        .stdin(std::fs::File::open(&stdin)?);
    Ok(cmd)
}

fn kill_group(pgid: i32) {
    // SAFETY: kill(2) with a negative pid signals that process group only.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// Runs every job in order.
pub fn run_all(
    bash: &Path,
    jobs: &[Job],
    testdata: &[(String, Vec<u8>)],
    timeout: Duration,
    progress: impl Fn(usize),
) -> Result<Vec<Observed>> {
    run_all_with(bash, &[], jobs, testdata, timeout, progress)
}

/// Runs every job in order with the shell at `shell` and `extra_args`
/// (see [`run_one_with`]).
pub fn run_all_with(
    shell: &Path,
    extra_args: &[&str],
    jobs: &[Job],
    testdata: &[(String, Vec<u8>)],
    timeout: Duration,
    progress: impl Fn(usize),
) -> Result<Vec<Observed>> {
    let mut out = Vec::with_capacity(jobs.len());
    for (i, job) in jobs.iter().enumerate() {
        out.push(run_one_with(shell, extra_args, job, testdata, timeout)?);
        progress(i + 1);
    }
    Ok(out)
}
