//! Child processes: spawned here, reaped here, killed completely here.
//!
//! The runner is usually PID 1 of its container, so orphans (a script's
//! background jobs whose shell is gone) are re-parented to it and must be
//! reaped or they stay zombies; elsewhere it makes itself a child
//! subreaper (`PR_SET_CHILD_SUBREAPER`, prctl(2)) so that they come to it
//! all the same. One task therefore reaps every child with
//! `waitpid(-1, WNOHANG)` on each SIGCHLD and hands the status of the
//! processes it spawned to whoever waits for them; std's and tokio's own
//! child waiting are not used (they would race with it).
//!
//! A run's processes are killed by its process group and, since a
//! process can leave the group (`setsid`, a double-forking daemon), by
//! everything that [`crate::procs`] finds of it below this process; when no
//! run is left, every remaining descendant is killed (see
//! `docs/container-runtime.md`).

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::oneshot;

use crate::log;
use crate::procs::{Key, Table, kill_completely};

/// How often the processes of the runs going are sampled (see
/// [`Reaper::start`]).
const SAMPLE_EVERY: Duration = Duration::from_millis(200);

/// A run's identity in the reaper.
pub(crate) type RunId = u64;

/// What the reaper knows of one run still going.
struct Tracked {
    /// The run's process group and session (the script's pid; it calls
    /// setsid).
    pgid: i32,
    /// Every process seen belonging to the run while it was going.
    seen: HashSet<Key>,
}

/// Spawns processes, reaps every child, and kills what the runs leave.
pub(crate) struct Reaper {
    /// Exit codes wanted: pid → where to send it. Locked across spawn and
    /// across reaping, so a child that exits at once is not reaped before
    /// it is listed.
    waiting: Mutex<HashMap<i32, oneshot::Sender<i32>>>,
    /// Runs not yet finished. Locked (before `waiting`) across spawn and
    /// across the sweep of [`Reaper::run_done`], so no run starts while
    /// the last one's leftovers are being killed.
    runs: Mutex<HashMap<RunId, Tracked>>,
    next: AtomicU64,
    /// This process's pid: only its descendants are ever killed.
    me: i32,
}

impl Reaper {
    /// Starts the reaping task (SIGCHLD is watched before this returns)
    /// and the sampler: every [`SAMPLE_EVERY`] the processes of each run
    /// still going (its group and session, what was seen before, and
    /// their descendants) are remembered, so that one which leaves the
    /// session and whose parent then dies (re-parented here, outside the
    /// run's tree) is still known as the run's when it is killed.
    pub(crate) fn start() -> std::io::Result<Arc<Reaper>> {
        let mut sigchld = signal(SignalKind::child())?;
        if std::process::id() != 1 {
            nix::sys::prctl::set_child_subreaper(true)?;
        }
        let reaper = Arc::new(Reaper {
            waiting: Mutex::default(),
            runs: Mutex::default(),
            next: AtomicU64::new(1),
            me: std::process::id() as i32,
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
        let weak = Arc::downgrade(&reaper);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(r) = weak.upgrade() else { return };
                let idle = r.runs.lock().is_empty();
                if !idle {
                    let _ = tokio::task::spawn_blocking(move || r.sample()).await;
                }
            }
        });
        Ok(reaper)
    }

    /// Spawns `cmd` (which must make its own session, by `setsid`) as a
    /// new run and returns it with a receiver of its exit code (128+N when
    /// killed by signal N) and the run's id. The run is tracked until
    /// [`Reaper::run_done`].
    pub(crate) fn spawn(
        &self,
        cmd: &mut Command,
    ) -> std::io::Result<(Child, oneshot::Receiver<i32>, RunId)> {
        let mut runs = self.runs.lock();
        let mut waiting = self.waiting.lock();
        let child = cmd.spawn()?;
        let pid = child.id() as i32;
        let (tx, rx) = oneshot::channel();
        waiting.insert(pid, tx);
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        runs.insert(
            id,
            Tracked {
                pgid: pid,
                seen: HashSet::new(),
            },
        );
        Ok((child, rx, id))
    }

    /// Remembers the current processes of every run.
    fn sample(&self) {
        let table = Table::scan_below(self.me);
        let mut runs = self.runs.lock();
        let groups = group_counts(&runs);
        for t in runs.values_mut() {
            let members = table.run_members(self.me, t.pgid, groups[&t.pgid] == 1, &t.seen);
            t.seen.extend(members.iter().map(|p| p.key()));
        }
    }

    /// Kills run `id` completely: every descendant of this process that is
    /// in its process group or session, was seen as the run's, or descends
    /// from one of those; frozen with SIGSTOP, then
    /// SIGKILLed, until none is left (bounded by
    /// [`crate::procs::KILL_DEADLINE`]). Runs in a blocking thread.
    pub(crate) async fn kill_run(self: &Arc<Self>, id: RunId) {
        let r = self.clone();
        let _ = tokio::task::spawn_blocking(move || r.kill_run_now(id)).await;
    }

    fn kill_run_now(&self, id: RunId) {
        let (pgid, by_group, mut seen) = {
            let runs = self.runs.lock();
            let Some(t) = runs.get(&id) else { return };
            // Another run with the same number as its group can only be a
            // later run whose script got this run's pid after it was
            // reaped and its group emptied: then the group and session
            // say nothing about this run.
            (t.pgid, group_counts(&runs)[&t.pgid] == 1, t.seen.clone())
        };
        // No killpg(2): once the group's leader is reaped its number can
        // be reused outside this process's tree. The scan below signals
        // only descendants, the group's members among them.
        let me = self.me;
        let mut killed = HashSet::new();
        let left = kill_completely(
            me,
            |table| table.run_members(me, pgid, by_group, &seen),
            &mut killed,
        );
        if !left.is_empty() {
            log!(
                "{} process(es) of a run did not die within {:?}: {:?}",
                left.len(),
                crate::procs::KILL_DEADLINE,
                left.iter().map(|p| p.pid).collect::<Vec<_>>()
            );
        }
        seen.extend(killed);
        if let Some(t) = self.runs.lock().get_mut(&id) {
            t.seen.extend(seen);
        }
    }

    /// Kills run `id` for the last time and forgets it. When it was the
    /// last run going, every process still descending from this one is
    /// killed too (in the sandbox pod, where this is PID 1, that is every
    /// other process of the container that is not a `kubectl exec`
    /// session's own tree): that catches a process that left its run's
    /// session and lost its parent before it was ever sampled.
    pub(crate) async fn run_done(self: &Arc<Self>, id: RunId) {
        let r = self.clone();
        let _ = tokio::task::spawn_blocking(move || {
            let last = {
                let runs = r.runs.lock();
                runs.len() == 1 && runs.contains_key(&id)
            };
            if !last {
                r.kill_run_now(id);
            }
            let mut runs = r.runs.lock();
            runs.remove(&id);
            if runs.is_empty() {
                // Every descendant, this run's included. Held across the
                // sweep: a run spawned now would be taken for a leftover.
                r.kill_descendants();
            }
            drop(runs);
        })
        .await;
    }

    /// Kills every descendant of this process (SIGTERM of the runner; the
    /// sweep when no run is going).
    pub(crate) fn kill_descendants(&self) {
        let me = self.me;
        let left = kill_completely(me, |table| table.descendants_of(me), &mut HashSet::new());
        if !left.is_empty() {
            log!(
                "{} leftover process(es) did not die within {:?}: {:?}",
                left.len(),
                crate::procs::KILL_DEADLINE,
                left.iter().map(|p| p.pid).collect::<Vec<_>>()
            );
        }
    }

    /// Reaps every child that has ended. The lock is held throughout, so
    /// no reaping happens while [`Reaper::spawn`] runs: std's spawn itself
    /// waits for a child whose exec failed, and would find it gone.
    fn reap(&self) {
        let mut waiting = self.waiting.lock();
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

/// How many runs use each process group number.
fn group_counts(runs: &HashMap<RunId, Tracked>) -> HashMap<i32, usize> {
    let mut counts = HashMap::new();
    for t in runs.values() {
        *counts.entry(t.pgid).or_insert(0) += 1;
    }
    counts
}
