//! The local backend: a bubblewrap sandbox on this host.
//!
//! Each run is `bwrap` (run by the root agent, so no setuid binary and no
//! unprivileged user namespaces are needed) building new mount, PID, IPC,
//! UTS, cgroup and network namespaces with the computer's FUSE mount at
//! `/workspace`, the host userland read-only, a private `/tmp`, then
//! `setpriv` dropping to the sandbox user (uid/gid 1000, no capabilities,
//! `no_new_privs`) before `bash` runs the script (handed over as
//! [`crate::launch`] describes, never on argv or in the environment of
//! the root programs), under the seccomp filter of
//! [`crate::seccomp`] (bubblewrap loads it before its last exec). The first process joins the
//! run's cgroup and gets its rlimits before it execs `bwrap`. The run ends
//! by SIGKILL to `bwrap`: its PID namespace's init dies with it
//! (`--die-with-parent`), and with the init the kernel kills every process
//! of the namespace; the cgroup is then emptied as a second net.
//!
//! What it guarantees and what it does not: `docs/container-runtime.md`.

mod args;

use std::ffi::CString;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use args::{ETC, USERLAND};

use crate::cgroup::Cgroup;
use crate::output::{Budget, forward};
use crate::seccomp::Filters;
use crate::{
    Backend, EXIT_CANCELLED, EXIT_OUTPUT_CAP, EXIT_START_FAILED, EXIT_TIMEOUT, Limits, Network,
    Outcome, OutputChunk, RunSpec, Unavailable, human,
};

/// The sandbox user: the same uid/gid the shell and JavaScript runtimes
/// write files as, and the cluster's sandbox pods run as.
pub use agentcomputer_runtime_contract::{SANDBOX_GID, SANDBOX_UID};
/// Size of the private `/tmp` (a tmpfs; its pages count against the
/// run's memory limit where a memory cgroup exists).
pub const TMP_BYTES: u64 = 1 << 30;
/// `PATH` inside the sandbox.
pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// How long output may keep coming after the script's process ended
/// (from processes of its tree still dying).
const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// `/etc/passwd` inside: root (which no sandbox process is), the sandbox
/// user ([`agentcomputer_runtime_contract::SANDBOX_USER`], uid 1000) with
/// its home at `/workspace`, and nobody.
pub const PASSWD: &str = concat!(
    "root:x:0:0:root:/root:/usr/sbin/nologin\n",
    agentcomputer_runtime_contract::sandbox_user!(),
    ":x:1000:1000:",
    agentcomputer_runtime_contract::sandbox_user!(),
    ":/workspace:/bin/bash\n",
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
);
/// `/etc/group` inside.
pub const GROUP: &str = concat!(
    "root:x:0:\n",
    agentcomputer_runtime_contract::sandbox_user!(),
    ":x:1000:\nnogroup:x:65534:\n"
);
/// `/etc/hosts` inside: loopback only (names are resolved by the egress
/// proxy, outside).
pub const HOSTS: &str = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";

/// The sandbox's own files in `/etc`: where each goes and its text.
const ETC_FILES: &[(&str, &str)] = &[
    ("/etc/passwd", PASSWD),
    ("/etc/group", GROUP),
    ("/etc/hosts", HOSTS),
];

/// The bubblewrap backend, ready to run.
#[derive(Debug, Clone)]
pub struct LocalSandbox {
    bwrap: PathBuf,
    setpriv: PathBuf,
    etc_entries: Vec<String>,
    userland: Vec<(String, Option<PathBuf>)>,
    /// What the host's cgroups can enforce (`memory`, `pids`).
    controllers: Vec<&'static str>,
    /// The seccomp programs every sandbox is started with.
    filters: Filters,
    runs: Arc<AtomicU64>,
}

impl LocalSandbox {
    /// Checks that every wall can be built here. Errors: not root (the
    /// message lists the walls that cannot be built), no `bwrap` or
    /// `setpriv` on `PATH`, no seccomp filter for this architecture.
    pub fn probe() -> Result<LocalSandbox, Unavailable> {
        if !nix::unistd::Uid::effective().is_root() {
            return Err(Unavailable(
                "the agent is not running as root, so these walls cannot be built: the mount namespace \
                 that shows only the computer's files and a read-only userland, the PID namespace, the \
                 network namespace (deny-all, proxy-only), the switch to the sandbox user, and the cgroup \
                 that limits memory and processes; container runs are refused (run the agent as root, or \
                 use the shell and javascript runtimes)"
                    .into(),
            ));
        }
        let bwrap = find_program("bwrap").ok_or_else(|| {
            Unavailable(
                "bwrap (bubblewrap) is not installed; install the Debian package bubblewrap".into(),
            )
        })?;
        let setpriv = find_program("setpriv")
            .ok_or_else(|| Unavailable("setpriv (util-linux) is not installed".into()))?;
        let filters = Filters::for_this_arch().map_err(|e| Unavailable(e.to_string()))?;
        let etc_entries = ETC
            .iter()
            .filter(|e| Path::new("/etc").join(e).exists())
            .map(|e| e.to_string())
            .collect();
        let userland = USERLAND
            .iter()
            .filter_map(|p| {
                let meta = std::fs::symlink_metadata(p).ok()?;
                if meta.file_type().is_symlink() {
                    Some((p.to_string(), Some(std::fs::read_link(p).ok()?)))
                } else if meta.is_dir() {
                    Some((p.to_string(), None))
                } else {
                    None
                }
            })
            .collect();
        let probe = Cgroup::create(&format!("probe-{}", std::process::id()), &Limits::default());
        let controllers = probe.controllers().to_vec();
        let _ = probe.remove();
        Ok(LocalSandbox {
            bwrap,
            setpriv,
            etc_entries,
            userland,
            controllers,
            filters,
            runs: Arc::default(),
        })
    }

    /// The host account that has the sandbox user's uid, if any (from the
    /// host's user database, getpwuid(3)). Without a user namespace the
    /// sandbox's processes are that uid on the host too, so that account
    /// can see and change running sandboxes (`/proc/PID/environ`,
    /// `/proc/PID/root`, ptrace where Yama allows it), and signal them.
    pub fn host_account_of_sandbox_uid(&self) -> Option<String> {
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(SANDBOX_UID))
            .ok()
            .flatten()
            .map(|u| u.name)
    }

    /// Limits that cannot be enforced here, as a sentence for the start-up
    /// log, or `None` when all can.
    pub fn weaker_walls(&self) -> Option<String> {
        let missing: Vec<&str> = ["memory", "pids"]
            .into_iter()
            .filter(|c| !self.controllers.contains(c))
            .collect();
        if missing.is_empty() {
            return None;
        }
        let effects: Vec<&str> = missing
            .iter()
            .map(|c| match *c {
                "memory" => "memory use is not limited",
                _ => "the process limit is RLIMIT_NPROC (counted per user, not per run)",
            })
            .collect();
        Some(format!(
            "no usable cgroup controller for {}: {}",
            missing.join(" and "),
            effects.join("; ")
        ))
    }

    /// The cgroup controllers that enforce limits here.
    pub fn controllers(&self) -> &[&'static str] {
        &self.controllers
    }

    fn command(&self, spec: &RunSpec, cgroup: &Cgroup) -> io::Result<Command> {
        // The script and every variable of the run reach only the shell,
        // after the privilege drop (see `crate::launch`).
        let payload = crate::launch::payload(&spec.cwd, &spec.env, &spec.script)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let launch = crate::launch::memfd(&payload)?;
        // Each run reads its own copies: bubblewrap reads from the
        // descriptor's offset.
        let seccomp = self.filters.memfds().map_err(io::Error::other)?;
        let seccomp_fds: Vec<i32> = seccomp.iter().map(|fd| fd.as_raw_fd()).collect();
        let mut etc = Vec::new();
        let mut etc_files = Vec::new();
        for (inside, text) in ETC_FILES {
            let fd = crate::launch::memfd(text.as_bytes())?;
            etc_files.push((fd.as_raw_fd(), *inside));
            etc.push(fd);
        }
        let layout = args::Layout {
            workspace: &spec.workspace,
            etc_files: &etc_files,
            etc_entries: &self.etc_entries,
            userland: &self.userland,
            unshare_net: matches!(spec.network, Network::None),
            hostname: &spec.computer,
            tmp_bytes: TMP_BYTES,
            uid: SANDBOX_UID,
            gid: SANDBOX_GID,
            setpriv: &self.setpriv,
            launch_fd: launch.as_raw_fd(),
            seccomp_fds: &seccomp_fds,
        };
        // bubblewrap reads its arguments from this descriptor and closes
        // it, so neither the host paths nor the command line show in any
        // `/proc/PID/cmdline`.
        let (options, command) = args::bwrap_args(&layout);
        let mut argv = Vec::new();
        for a in options {
            use std::os::unix::ffi::OsStrExt;
            argv.extend_from_slice(a.as_bytes());
            argv.push(0);
        }
        let args_fd = crate::launch::memfd(&argv)?;
        let mut cmd = Command::new(&self.bwrap);
        cmd.arg("--args")
            .arg(args_fd.as_raw_fd().to_string())
            .args(command)
            .env_clear()
            .envs(crate::launch::BASE_ENV.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut inherited = seccomp;
        inherited.extend(etc);
        inherited.push(launch);
        inherited.push(args_fd);
        let pre = PreExec::new(spec, cgroup, self.controllers.contains(&"pids"), inherited)?;
        // SAFETY: the closure only makes async-signal-safe system calls
        // (setns, open, write, close, setrlimit, fcntl) on data prepared
        // before the fork; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || pre.apply());
        }
        Ok(cmd)
    }
}

/// What the child does between fork and exec, prepared beforehand.
struct PreExec {
    netns: Option<i32>,
    procs: Vec<CString>,
    rlimits: Vec<(libc::__rlimit_resource_t, u64)>,
    /// The run's memfds for `bwrap` (its arguments, the seccomp programs,
    /// the script): close-on-exec in the agent (so no other child
    /// inherits them), made inheritable in this child only.
    inherited: Vec<std::os::fd::OwnedFd>,
}

impl PreExec {
    fn new(
        spec: &RunSpec,
        cgroup: &Cgroup,
        pids_cgroup: bool,
        inherited: Vec<std::os::fd::OwnedFd>,
    ) -> io::Result<PreExec> {
        let netns = match &spec.network {
            Network::None => None,
            Network::Namespace(fd) => Some(fd.as_raw_fd()),
        };
        let l = &spec.limits;
        let mut rlimits = vec![(libc::RLIMIT_CORE, 0)];
        if l.cpu_seconds > 0 {
            rlimits.push((libc::RLIMIT_CPU, l.cpu_seconds));
        }
        if l.open_files > 0 {
            rlimits.push((libc::RLIMIT_NOFILE, l.open_files));
        }
        if l.file_size_bytes > 0 {
            rlimits.push((libc::RLIMIT_FSIZE, l.file_size_bytes));
        }
        if l.max_processes > 0 && !pids_cgroup {
            rlimits.push((libc::RLIMIT_NPROC, l.max_processes));
        }
        Ok(PreExec {
            netns,
            procs: cgroup.procs_files().to_vec(),
            rlimits,
            inherited,
        })
    }

    fn apply(&self) -> io::Result<()> {
        // SAFETY: async-signal-safe calls on memory owned by `self`.
        unsafe {
            if let Some(fd) = self.netns
                && libc::setns(fd, libc::CLONE_NEWNET) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The child's own pid, in decimal, without allocating.
            let mut digits = [0u8; 16];
            let mut n = libc::getpid() as u32;
            let mut i = digits.len();
            loop {
                i -= 1;
                digits[i] = b'0' + (n % 10) as u8;
                n /= 10;
                if n == 0 {
                    break;
                }
            }
            for path in &self.procs {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                let wrote = libc::write(fd, digits[i..].as_ptr().cast(), digits.len() - i);
                libc::close(fd);
                if wrote < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            for (resource, value) in &self.rlimits {
                let lim = libc::rlimit {
                    rlim_cur: *value,
                    rlim_max: *value,
                };
                if libc::setrlimit(*resource, &lim) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            // Nothing the agent itself inherited (a descriptor its parent
            // left open, an ignored signal) reaches the sandbox: every
            // descriptor from 3 up closes at exec but the run's own, and
            // every signal has its default action.
            cloexec_from(3);
            for fd in &self.inherited {
                if libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            // The standard signals (glibc keeps 32 and 33 for itself).
            for signal in 1..32 {
                if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                    libc::sigaction(signal, &default, std::ptr::null_mut());
                }
            }
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        }
        Ok(())
    }
}

/// Marks every descriptor from `first` up close-on-exec: `close_range(2)`
/// with `CLOSE_RANGE_CLOEXEC` (Linux 5.11), else `fcntl` on each up to the
/// soft `RLIMIT_NOFILE` (at most 2^20). Async-signal-safe.
///
/// # Safety
/// Only system calls on integers; meant for a child between fork and exec.
unsafe fn cloexec_from(first: u32) {
    /// `CLOSE_RANGE_CLOEXEC` of `<linux/close_range.h>`.
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: raw system calls on integer arguments.
    unsafe {
        if libc::syscall(libc::SYS_close_range, first, u32::MAX, CLOSE_RANGE_CLOEXEC) == 0 {
            return;
        }
        let mut limit: libc::rlimit = std::mem::zeroed();
        let most = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(1 << 20) as i32
        } else {
            1 << 16
        };
        for fd in first as i32..most {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

/// Why the run was stopped by the runtime.
enum Stop {
    Timeout,
    Cancelled,
    OutputCap,
}

#[async_trait::async_trait]
impl Backend for LocalSandbox {
    async fn run(
        &self,
        mut spec: RunSpec,
        out: mpsc::Sender<OutputChunk>,
        cancel: CancellationToken,
    ) -> Outcome {
        let stream = spec.stdin_stream.take();
        let id = format!(
            "{}-{}",
            std::process::id(),
            self.runs.fetch_add(1, Ordering::Relaxed)
        );
        let cgroup = Cgroup::create(&id, &spec.limits);
        let outcome = self.run_in(&spec, stream, &cgroup, &out, &cancel).await;
        let computer = spec.computer.clone();
        // The namespace descriptor stays open until the child has joined it.
        drop(spec);
        let memory_hit = cgroup.hit_memory_limit();
        // Every process is gone (the PID namespace died with its init, and
        // the readers saw the pipes close); removing the directories takes
        // the kernel several milliseconds per hierarchy, so it happens
        // after the answer.
        tokio::task::spawn_blocking(move || {
            if let Err(e) = cgroup.remove() {
                warn!(%computer, error = %e, "could not remove a container run's cgroup");
            }
        });
        let mut outcome = outcome;
        if memory_hit && outcome.error.is_none() && outcome.exit_code != 0 {
            let message = "container: the run reached its memory limit".to_string();
            let _ = out
                .send(OutputChunk::Stderr(format!("{message}\n").into_bytes()))
                .await;
            outcome.error = Some(message);
        }
        outcome
    }
}

impl LocalSandbox {
    async fn run_in(
        &self,
        spec: &RunSpec,
        mut stream: Option<mpsc::Receiver<Vec<u8>>>,
        cgroup: &Cgroup,
        out: &mpsc::Sender<OutputChunk>,
        cancel: &CancellationToken,
    ) -> Outcome {
        let failed = |what: String| Outcome {
            exit_code: EXIT_START_FAILED,
            error: Some(format!("container: cannot start the sandbox: {what}")),
        };
        let mut child = match self.command(spec, cgroup).and_then(|mut c| c.spawn()) {
            Ok(child) => child,
            Err(e) => return failed(e.to_string()),
        };
        let pid = child.id().map(|p| Pid::from_raw(p as i32));
        info!(computer = %spec.computer, pid = ?pid, "container run started");
        let budget = Budget::new(spec.max_output_bytes);
        let stdout = child
            .stdout
            .take()
            .map(|s| tokio::spawn(forward(s, true, budget.clone(), out.clone())));
        let stderr = child
            .stderr
            .take()
            .map(|s| tokio::spawn(forward(s, false, budget.clone(), out.clone())));
        if let Some(mut stdin) = child.stdin.take() {
            let bytes = spec.stdin.clone();
            let rest = stream.take();
            // A script that never reads its stdin must not block the run.
            tokio::spawn(async move {
                if stdin.write_all(&bytes).await.is_err() {
                    return;
                }
                if let Some(mut rest) = rest {
                    while let Some(chunk) = rest.recv().await {
                        if stdin.write_all(&chunk).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
        let waited = tokio::select! {
            status = child.wait() => Ok(status),
            () = tokio::time::sleep(spec.timeout) => Err(Stop::Timeout),
            () = cancel.cancelled() => Err(Stop::Cancelled),
            () = out.closed() => Err(Stop::Cancelled),
            () = budget.over.notified() => Err(Stop::OutputCap),
        };
        let status = match waited {
            Ok(status) => status.ok(),
            Err(stop) => {
                if let Some(pid) = pid {
                    let _ = kill(pid, Signal::SIGKILL);
                }
                let _ = child.wait().await;
                let message = match stop {
                    Stop::Timeout => (
                        EXIT_TIMEOUT,
                        format!("container: script timed out after {}", human(spec.timeout)),
                    ),
                    Stop::Cancelled => (EXIT_CANCELLED, "container: script cancelled".to_string()),
                    Stop::OutputCap => (
                        EXIT_OUTPUT_CAP,
                        format!(
                            "container: output exceeded {} bytes; output truncated and script stopped",
                            budget.cap
                        ),
                    ),
                };
                finish_streams(stdout, stderr, cgroup).await;
                let _ = tokio::time::timeout(
                    DRAIN_GRACE,
                    out.send(OutputChunk::Stderr(format!("{}\n", message.1).into_bytes())),
                )
                .await;
                return Outcome {
                    exit_code: message.0,
                    error: Some(message.1),
                };
            }
        };
        finish_streams(stdout, stderr, cgroup).await;
        if budget.passed() {
            let message = format!(
                "container: output exceeded {} bytes; output truncated and script stopped",
                budget.cap
            );
            let _ = out
                .send(OutputChunk::Stderr(format!("{message}\n").into_bytes()))
                .await;
            return Outcome {
                exit_code: EXIT_OUTPUT_CAP,
                error: Some(message),
            };
        }
        match status {
            Some(status) => Outcome {
                exit_code: exit_code(status),
                error: None,
            },
            None => failed("lost the sandbox's exit status".into()),
        }
    }
}

/// Waits for the output readers: they end when every process holding the
/// pipes is gone. Processes that outlive [`DRAIN_GRACE`] are killed.
async fn finish_streams(
    stdout: Option<tokio::task::JoinHandle<bool>>,
    stderr: Option<tokio::task::JoinHandle<bool>>,
    cgroup: &Cgroup,
) {
    let readers = async {
        if let Some(s) = stdout {
            let _ = s.await;
        }
        if let Some(s) = stderr {
            let _ = s.await;
        }
    };
    tokio::pin!(readers);
    if tokio::time::timeout(DRAIN_GRACE, &mut readers)
        .await
        .is_err()
    {
        let pids = cgroup.pids();
        warn!(
            ?pids,
            "container processes still hold the output after the script ended; killing them"
        );
        cgroup.kill_all();
        let _ = tokio::time::timeout(DRAIN_GRACE, readers).await;
    }
}

/// The exit code as a shell reports it: the status, or 128 + the signal.
fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    }
}

/// The first executable `name` on the agent's `PATH` (or the usual system
/// directories when `PATH` is unset).
fn find_program(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_else(|| PATH.into());
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}
