//! Child processes: spawned here, reaped here.
//!
//! The runner is usually PID 1 of its container, so orphans (a script's
//! background jobs whose shell is gone) are re-parented to it and must be
//! reaped or they stay zombies; elsewhere it makes itself a child
//! subreaper (`PR_SET_CHILD_SUBREAPER`, prctl(2)) so that they come to it
//! all the same. One task therefore reaps every child with
//! `waitpid(-1, WNOHANG)` on each SIGCHLD and hands the status of the
//! processes it spawned to whoever waits for them; std's and tokio's own
//! child waiting are not used (they would race with it).

use std::collections::{HashMap, HashSet};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};

use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::oneshot;

/// Spawns processes, reaps every child, and knows the process groups of
/// the runs still going.
pub struct Reaper {
    /// Exit codes wanted: pid → where to send it. Locked across spawn and
    /// across reaping, so a child that exits at once is not reaped before
    /// it is listed.
    waiting: Mutex<HashMap<i32, oneshot::Sender<i32>>>,
    /// Process groups of runs not yet finished (killed on SIGTERM).
    groups: Mutex<HashSet<i32>>,
}

impl Reaper {
    /// Starts the reaping task (SIGCHLD is watched before this returns).
    pub fn start() -> std::io::Result<Arc<Reaper>> {
        let mut sigchld = signal(SignalKind::child())?;
        if std::process::id() != 1 {
            nix::sys::prctl::set_child_subreaper(true)?;
        }
        let reaper = Arc::new(Reaper {
            waiting: Mutex::default(),
            groups: Mutex::default(),
        });
        let r = reaper.clone();
        tokio::spawn(async move {
            loop {
                r.reap();
                if sigchld.recv().await.is_none() {
                    return;
                }
            }
        });
        Ok(reaper)
    }

    /// Spawns `cmd` (which must make its own process group, e.g. by
    /// `setsid`) and returns it with a receiver of its exit code (128+N
    /// when killed by signal N). The group is listed until
    /// [`Reaper::group_done`].
    pub fn spawn(&self, cmd: &mut Command) -> std::io::Result<(Child, oneshot::Receiver<i32>)> {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let child = cmd.spawn()?;
        let pid = child.id() as i32;
        let (tx, rx) = oneshot::channel();
        waiting.insert(pid, tx);
        self.groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pid);
        Ok((child, rx))
    }

    /// Kills process group `pgid` (SIGKILL); a group already gone is fine.
    pub fn kill_group(&self, pgid: i32) {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }

    /// Kills group `pgid` for the last time and forgets it.
    pub fn group_done(&self, pgid: i32) {
        self.kill_group(pgid);
        self.groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&pgid);
    }

    /// Kills the process group of every run still going.
    pub fn kill_all(&self) {
        let groups: Vec<i32> = self
            .groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .copied()
            .collect();
        for pgid in groups {
            self.kill_group(pgid);
        }
    }

    /// Reaps every child that has ended. The lock is held throughout, so
    /// no reaping happens while [`Reaper::spawn`] runs: std's spawn itself
    /// waits for a child whose exec failed, and would find it gone.
    fn reap(&self) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let (pid, code) = match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => (pid, code),
                Ok(WaitStatus::Signaled(pid, sig, _)) => (pid, 128 + sig as i32),
                Ok(WaitStatus::StillAlive) | Err(_) => return,
                Ok(_) => continue,
            };
            if let Some(tx) = waiting.remove(&pid.as_raw()) {
                let _ = tx.send(code);
            }
        }
    }
}
