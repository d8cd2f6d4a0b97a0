//! The process table as `/proc` shows it, and killing a set of processes
//! completely: the tree of a run, including what left its process group
//! or session (`setsid`, double forks), without cgroups (an unprivileged
//! pod cannot make them).
//!
//! Identity is `(pid, start time)`: the start time (`/proc/PID/stat` field
//! 22, clock ticks since boot; proc(5)) changes when a pid is reused, so a
//! pid remembered from an earlier scan is never mistaken for a newcomer.
//! Only descendants of this process (the parent chain, field 4, reaches
//! it) are ever signalled.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A process, identified across pid reuse.
pub(crate) type Key = (i32, u64);

/// One process of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Proc {
    pub pid: i32,
    pub ppid: i32,
    /// Process group (field 5).
    pub pgrp: i32,
    /// Session (field 6).
    pub session: i32,
    /// Start time in clock ticks after boot (field 22).
    pub start: u64,
    /// Dead, waiting to be reaped (state `Z` or `X`): signals do nothing.
    pub dead: bool,
}

impl Proc {
    pub(crate) fn key(&self) -> Key {
        (self.pid, self.start)
    }
}

/// Parses one `/proc/PID/stat` line. The command name (field 2) is in
/// parentheses and may itself hold spaces and parentheses, so the fields
/// are counted from the last `)`. `None` when the line is not in that form.
pub(crate) fn parse_stat(line: &str) -> Option<Proc> {
    let open = line.find(" (")?;
    let pid = line[..open].trim().parse().ok()?;
    let close = line.rfind(')')?;
    // Fields 3.. (state is field 3).
    let rest: Vec<&str> = line.get(close + 1..)?.split_whitespace().collect();
    let field = |n: usize| rest.get(n - 3).copied();
    let state = field(3)?;
    Some(Proc {
        pid,
        ppid: field(4)?.parse().ok()?,
        pgrp: field(5)?.parse().ok()?,
        session: field(6)?.parse().ok()?,
        start: field(22)?.parse().ok()?,
        dead: matches!(state, "Z" | "X" | "x"),
    })
}

/// The processes visible in `/proc` at one moment, with their parent
/// links. Processes that end while being read are left out.
#[derive(Debug, Default)]
pub(crate) struct Table {
    procs: HashMap<i32, Proc>,
}

impl Table {
    /// Reads the processes below `root` (and `root` itself): from each
    /// thread's `children` list (`/proc/PID/task/TID/children`, proc(5);
    /// reading only the subtree keeps a scan cheap on a busy host), or from
    /// all of `/proc` where the kernel has no such lists
    /// (`CONFIG_PROC_CHILDREN` off). A list read while its process forks
    /// may miss the new child; the callers scan again until nothing new
    /// appears (see [`kill_completely`]).
    pub(crate) fn scan_below(root: i32) -> Table {
        if !std::path::Path::new(&format!("/proc/{root}/task/{root}/children")).exists() {
            return Table::scan();
        }
        let mut procs = HashMap::new();
        let mut queue = vec![root];
        while let Some(pid) = queue.pop() {
            if procs.contains_key(&pid) {
                continue;
            }
            let Some(p) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|line| parse_stat(&line))
            else {
                continue;
            };
            procs.insert(pid, p);
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                continue;
            };
            for task in tasks.flatten() {
                if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
                    queue.extend(
                        list.split_whitespace()
                            .filter_map(|c| c.parse::<i32>().ok()),
                    );
                }
            }
        }
        Table { procs }
    }

    /// Reads all of `/proc`.
    pub(crate) fn scan() -> Table {
        let mut procs = HashMap::new();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Table { procs };
        };
        for entry in dir.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            if let Ok(line) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                && let Some(p) = parse_stat(&line)
            {
                procs.insert(p.pid, p);
            }
        }
        Table { procs }
    }

    /// A table of the given processes (for tests of the selection logic).
    #[cfg(test)]
    pub(crate) fn from_procs(procs: impl IntoIterator<Item = Proc>) -> Table {
        Table {
            procs: procs.into_iter().map(|p| (p.pid, p)).collect(),
        }
    }

    /// Every live process whose parent chain reaches `ancestor` (itself
    /// excluded).
    pub(crate) fn descendants_of(&self, ancestor: i32) -> Vec<Proc> {
        self.procs
            .values()
            .filter(|p| !p.dead && p.pid != ancestor && self.descends_from(p.pid, ancestor))
            .copied()
            .collect()
    }

    fn descends_from(&self, mut pid: i32, ancestor: i32) -> bool {
        // A parent chain is at most as long as the table (guards against a
        // table read while processes were re-parented, which can show a
        // cycle).
        for _ in 0..=self.procs.len() {
            match self.procs.get(&pid) {
                Some(p) if p.ppid == ancestor => return true,
                Some(p) if p.ppid > 0 && p.ppid != pid => pid = p.ppid,
                _ => return false,
            }
        }
        false
    }

    /// The live descendants of `runner` that belong to a run: in its
    /// process group or session `group` (when `by_group`), or remembered
    /// in `seen`, and every descendant of those.
    pub(crate) fn run_members(
        &self,
        runner: i32,
        group: i32,
        by_group: bool,
        seen: &HashSet<Key>,
    ) -> Vec<Proc> {
        let candidates = self.descendants_of(runner);
        let mut members: HashSet<i32> = candidates
            .iter()
            .filter(|p| {
                (by_group && (p.pgrp == group || p.session == group)) || seen.contains(&p.key())
            })
            .map(|p| p.pid)
            .collect();
        // Children of members, to a fixed point.
        loop {
            let before = members.len();
            for p in &candidates {
                if members.contains(&p.ppid) {
                    members.insert(p.pid);
                }
            }
            if members.len() == before {
                break;
            }
        }
        candidates
            .into_iter()
            .filter(|p| members.contains(&p.pid))
            .collect()
    }
}

/// How long [`kill_completely`] keeps trying.
pub(crate) const KILL_DEADLINE: Duration = Duration::from_secs(3);

/// Kills every process `select` picks from a fresh table of the processes
/// below `root` ([`Table::scan_below`]), until a scan
/// finds none alive or [`KILL_DEADLINE`] passes. Each round first freezes
/// the selection with SIGSTOP, rescanning until no new process appears (a
/// stopped process cannot fork, so the children made before the stop are
/// all visible and selected through their parent), then SIGKILLs all of
/// it. Every process signalled is added to `killed`. Returns the
/// processes still alive at the deadline (e.g. stuck in uninterruptible
/// sleep), empty when all are gone.
pub(crate) fn kill_completely(
    root: i32,
    mut select: impl FnMut(&Table) -> Vec<Proc>,
    killed: &mut HashSet<Key>,
) -> Vec<Proc> {
    let deadline = Instant::now() + KILL_DEADLINE;
    loop {
        let mut targets = select(&Table::scan_below(root));
        if targets.is_empty() || Instant::now() >= deadline {
            return targets;
        }
        let mut frozen: HashMap<Key, Proc> = HashMap::new();
        for _ in 0..64 {
            let fresh: Vec<Proc> = targets
                .iter()
                .filter(|p| !frozen.contains_key(&p.key()))
                .copied()
                .collect();
            if fresh.is_empty() {
                break;
            }
            for p in fresh {
                let _ = kill(Pid::from_raw(p.pid), Signal::SIGSTOP);
                frozen.insert(p.key(), p);
            }
            targets = select(&Table::scan_below(root));
        }
        for p in frozen.values() {
            let _ = kill(Pid::from_raw(p.pid), Signal::SIGKILL);
            killed.insert(p.key());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: i32, ppid: i32, pgrp: i32, session: i32) -> Proc {
        Proc {
            pid,
            ppid,
            pgrp,
            session,
            start: pid as u64 * 10,
            dead: false,
        }
    }

    #[test]
    fn stat_lines_are_parsed_from_the_last_parenthesis() {
        let line = "4242 (we ird) (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10 18446744073709551615";
        let got = parse_stat(line).unwrap();
        assert_eq!(
            got,
            Proc {
                pid: 4242,
                ppid: 1,
                pgrp: 4242,
                session: 4242,
                start: 987654,
                dead: false
            }
        );
        assert!(
            parse_stat("7 (z) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0")
                .unwrap()
                .dead
        );
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (short) S 0 1"), None);
        // This process's own line.
        let me = parse_stat(&std::fs::read_to_string("/proc/self/stat").unwrap()).unwrap();
        assert_eq!(me.pid, std::process::id() as i32);
    }

    /// No process is spawned here: the runner's other unit test reaps
    /// and sweeps every descendant of this test process.
    #[test]
    fn a_scan_below_a_process_finds_its_whole_subtree() {
        let me = std::process::id() as i32;
        let parent = std::os::unix::process::parent_id() as i32;
        // This process is found below its parent, through the children
        // lists of whichever of the parent's threads forked it, with the
        // same fields as a direct read.
        let below_parent = Table::scan_below(parent);
        let direct = parse_stat(&std::fs::read_to_string("/proc/self/stat").unwrap()).unwrap();
        assert_eq!(below_parent.procs.get(&me), Some(&direct));
        assert!(
            below_parent
                .descendants_of(parent)
                .iter()
                .any(|p| p.pid == me)
        );
        // Only the subtree: the parent's own parent is not in it.
        let grandparent = below_parent.procs[&parent].ppid;
        assert!(!below_parent.procs.contains_key(&grandparent) || grandparent == parent);
        let below_me = Table::scan_below(me);
        assert!(below_me.procs.contains_key(&me));
        assert!(
            below_me
                .procs
                .keys()
                .all(|&p| p == me || below_me.descends_from(p, me)),
            "{below_me:?}"
        );
    }

    #[test]
    fn members_are_the_group_the_seen_and_their_children_below_the_runner() {
        // 100 = runner; 200 = a run (group and session 200); 210 left the
        // session with setsid (still a child of the run's shell); 300 left
        // it and was re-parented to the runner (a double fork), seen
        // earlier; 400 is another run; 500 is not below the runner at all,
        // though it claims group 200 (an unrelated process in a test).
        let t = Table::from_procs([
            p(100, 1, 100, 100),
            p(200, 100, 200, 200),
            p(201, 200, 200, 200),
            p(210, 201, 210, 210),
            p(211, 210, 210, 210),
            p(300, 100, 300, 300),
            p(301, 300, 300, 300),
            p(400, 100, 400, 400),
            p(500, 1, 200, 200),
            Proc {
                dead: true,
                ..p(202, 200, 200, 200)
            },
        ]);
        let pids = |v: Vec<Proc>| {
            let mut v: Vec<i32> = v.into_iter().map(|p| p.pid).collect();
            v.sort();
            v
        };
        assert_eq!(
            pids(t.run_members(100, 200, true, &HashSet::new())),
            vec![200, 201, 210, 211]
        );
        let seen = HashSet::from([(300, 3000)]);
        assert_eq!(
            pids(t.run_members(100, 200, true, &seen)),
            vec![200, 201, 210, 211, 300, 301]
        );
        // A remembered pid with another start time is another process.
        let reused = HashSet::from([(300, 1)]);
        assert_eq!(
            pids(t.run_members(100, 999, false, &reused)),
            Vec::<i32>::new()
        );
        assert_eq!(
            pids(t.descendants_of(100)),
            vec![200, 201, 210, 211, 300, 301, 400]
        );
    }
}
