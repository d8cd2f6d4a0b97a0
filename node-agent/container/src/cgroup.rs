//! A cgroup per run: memory and process limits for the whole tree, and a
//! way to find and kill every process of it.
//!
//! Both hierarchies are supported: cgroup v2 (one unified tree with
//! `memory.max`, `pids.max`, `cgroup.kill`) and v1 (one tree per
//! controller, `memory.limit_in_bytes`, `pids.max`), including the hybrid
//! layout where v1 controllers sit beside an empty v2 tree. The run's
//! cgroup is made below the agent's own cgroup (from `/proc/self/cgroup`,
//! found through `/proc/self/mountinfo` so that it is found inside a
//! container as on a host: `agentcomputer-cgroupfs`), named `agentcomputer-<run id>`. A controller that cannot be used (not
//! mounted, read-only, not delegated) is left out and reported by
//! [`Cgroup::controllers`].

use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use agentcomputer_cgroupfs::{Mount, OwnCgroup, cgroup_mounts, dirs_of, own_cgroups};

use crate::Limits;

/// How long [`Cgroup::kill_all`] keeps killing before it gives up.
const KILL_PATIENCE: Duration = Duration::from_secs(5);

/// One run's cgroup, in every hierarchy that could take it.
#[derive(Debug)]
pub struct Cgroup {
    /// Directories made, one per hierarchy.
    dirs: Vec<PathBuf>,
    /// `cgroup.procs` of each, for the child to join itself before exec.
    procs: Vec<CString>,
    /// Controllers that enforce this run's limits (`memory`, `pids`).
    controllers: Vec<&'static str>,
    /// v2 only: `cgroup.kill` is present.
    kill_file: Option<PathBuf>,
}

impl Cgroup {
    /// Makes the cgroup `agentcomputer-<id>` and sets `limits` (zero fields
    /// are left unlimited). Controllers that cannot be used are skipped;
    /// the result may enforce nothing (see [`Cgroup::controllers`]).
    pub fn create(id: &str, limits: &Limits) -> Cgroup {
        let name = format!("agentcomputer-{id}");
        let mut cg = Cgroup {
            dirs: Vec::new(),
            procs: Vec::new(),
            controllers: Vec::new(),
            kill_file: None,
        };
        let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        match parents(&cgroup, &mountinfo, Path::exists) {
            Parents::V2(parent) => cg.create_v2(&parent, &name, limits),
            Parents::V1 { memory, pids } => {
                for (controller, parent, file, value) in [
                    (
                        "memory",
                        memory,
                        "memory.limit_in_bytes",
                        limits.memory_bytes,
                    ),
                    ("pids", pids, "pids.max", limits.max_processes),
                ] {
                    let Some(parent) = parent else { continue };
                    let dir = parent.join(&name);
                    if std::fs::create_dir(&dir).is_err() {
                        continue;
                    }
                    cg.adopt(&dir);
                    if value > 0 && std::fs::write(dir.join(file), value.to_string()).is_ok() {
                        cg.controllers.push(controller);
                    }
                    if controller == "memory" && value > 0 {
                        // Swap counts too where the kernel accounts it.
                        let _ = std::fs::write(
                            dir.join("memory.memsw.limit_in_bytes"),
                            value.to_string(),
                        );
                    }
                }
            }
            Parents::None => {}
        }
        cg
    }

    fn create_v2(&mut self, parent: &Path, name: &str, limits: &Limits) {
        // Controllers must be enabled for children by the parent; this
        // fails where the parent has processes of its own (not the root)
        // or was not delegated, and then nothing is enforced.
        let _ = std::fs::write(parent.join("cgroup.subtree_control"), "+memory +pids");
        let dir = parent.join(name);
        if std::fs::create_dir(&dir).is_err() {
            return;
        }
        self.adopt(&dir);
        for (controller, file, value) in [
            ("memory", "memory.max", limits.memory_bytes),
            ("pids", "pids.max", limits.max_processes),
        ] {
            if value > 0 && std::fs::write(dir.join(file), value.to_string()).is_ok() {
                self.controllers.push(controller);
            }
        }
        if limits.memory_bytes > 0 {
            let _ = std::fs::write(dir.join("memory.swap.max"), "0");
        }
        let kill = dir.join("cgroup.kill");
        if kill.exists() {
            self.kill_file = Some(kill);
        }
    }

    fn adopt(&mut self, dir: &Path) {
        if let Ok(p) = CString::new(
            dir.join("cgroup.procs")
                .into_os_string()
                .into_encoded_bytes(),
        ) {
            self.procs.push(p);
        }
        self.dirs.push(dir.to_path_buf());
    }

    /// Controllers enforcing this run's limits, e.g. `["memory", "pids"]`.
    pub fn controllers(&self) -> &[&'static str] {
        &self.controllers
    }

    /// `cgroup.procs` paths the child writes its pid to before it execs.
    pub fn procs_files(&self) -> &[CString] {
        &self.procs
    }

    /// Whether the run went past its memory limit at least once (v1
    /// `memory.failcnt`, v2 `memory.events` `max`/`oom_kill`).
    pub fn hit_memory_limit(&self) -> bool {
        // v1: `memory.failcnt` and `memory.memsw.failcnt` count charges
        // refused at the limit, but the kernel may reclaim or kill first
        // and leave them at 0; `memory.oom_control` counts the OOM kills
        // (`oom_kill N`, Linux 4.13). v2: `memory.events`' `oom_kill`.
        let positive = |n: &str| n.trim().parse::<u64>().is_ok_and(|n| n > 0);
        let counter = |text: &str, key: &str| {
            text.lines()
                .any(|l| l.strip_prefix(key).is_some_and(|n| positive(n)))
        };
        self.dirs.iter().any(|d| {
            let read = |f: &str| std::fs::read_to_string(d.join(f)).ok();
            read("memory.failcnt").is_some_and(|n| positive(&n))
                || read("memory.memsw.failcnt").is_some_and(|n| positive(&n))
                || read("memory.oom_control").is_some_and(|t| counter(&t, "oom_kill "))
                || read("memory.events").is_some_and(|t| counter(&t, "oom_kill "))
        })
    }

    /// The pids in the cgroup now, from every hierarchy.
    pub fn pids(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .dirs
            .iter()
            .filter_map(|d| std::fs::read_to_string(d.join("cgroup.procs")).ok())
            .flat_map(|s| {
                s.lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect::<Vec<_>>()
            })
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Kills every process in the cgroup (and any that are forked while
    /// doing so) until it is empty or [`KILL_PATIENCE`] has passed.
    /// Returns whether it is empty.
    pub fn kill_all(&self) -> bool {
        if let Some(kill) = &self.kill_file {
            let _ = std::fs::write(kill, "1");
        }
        let start = Instant::now();
        loop {
            let pids = self.pids();
            if pids.is_empty() {
                return true;
            }
            if start.elapsed() > KILL_PATIENCE {
                return false;
            }
            for pid in pids {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Kills what is left and removes the directories.
    pub fn remove(self) -> io::Result<()> {
        self.kill_all();
        let mut result = Ok(());
        for dir in &self.dirs {
            // An exited process leaves the cgroup a moment after it is
            // reaped; rmdir says EBUSY until then.
            let start = Instant::now();
            loop {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e)
                        if e.raw_os_error() == Some(libc::EBUSY)
                            && start.elapsed() < KILL_PATIENCE =>
                    {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
        }
        result
    }
}

/// The directories under which a run's cgroup is made: the agent's own
/// cgroup in each hierarchy, as this process sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Parents {
    /// The unified hierarchy (cgroup v2 alone).
    V2(PathBuf),
    /// The v1 hierarchies of the two controllers used (hybrid layouts
    /// included); `None` where a controller is not mounted.
    V1 {
        memory: Option<PathBuf>,
        pids: Option<PathBuf>,
    },
    /// No usable hierarchy.
    None,
}

/// [`Parents`] from the texts of `/proc/self/cgroup` and
/// `/proc/self/mountinfo` (through the mounts' roots, so inside a
/// container too: `agentcomputer-cgroupfs`); `exists` tells which
/// directories are there (a later mount over a mountpoint hides an earlier
/// one).
fn parents(cgroup: &str, mountinfo: &str, exists: impl Fn(&Path) -> bool) -> Parents {
    let own = own_cgroups(cgroup);
    let mounts = cgroup_mounts(mountinfo);
    let dir = |line: &OwnCgroup, keep: &dyn Fn(&Mount) -> bool| {
        dirs_of(&mounts, &line.path, keep)
            .map(|(_, d)| d)
            .find(|d| exists(d))
    };
    if mounts.is_empty() {
        return Parents::None;
    }
    // The unified hierarchy is used when no v1 hierarchy carries either
    // controller (a v1 named hierarchy such as name=systemd beside it
    // carries none; the hybrid layout's v1 memory and pids do).
    let v1_in_use = mounts
        .iter()
        .any(|m| m.is_v1_of("memory") || m.is_v1_of("pids"));
    if !v1_in_use && mounts.iter().any(Mount::is_v2) {
        return own
            .iter()
            .find(|l| l.is_unified())
            .and_then(|l| dir(l, &Mount::is_v2))
            .map_or(Parents::None, Parents::V2);
    }
    let v1 = |controller: &str| {
        own.iter()
            .filter(|l| l.has(controller))
            .find_map(|l| dir(l, &|m: &Mount| m.is_v1_of(controller)))
    };
    Parents::V1 {
        memory: v1("memory"),
        pids: v1("pids"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1_CGROUP: &str = "12:pids:/kubepods/pod1/ctr\n4:memory:/kubepods/pod1/ctr\n0::/\n";

    #[test]
    fn v1_inside_a_container_is_the_mountpoint_itself() {
        // The runtime mounted only the container's own cgroup of each
        // hierarchy (no cgroup namespace).
        let mountinfo = "30 25 0:27 /kubepods/pod1/ctr /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n\
                         31 25 0:28 /kubepods/pod1/ctr /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids\n";
        assert_eq!(
            parents(V1_CGROUP, mountinfo, |_| true),
            Parents::V1 {
                memory: Some("/sys/fs/cgroup/memory".into()),
                pids: Some("/sys/fs/cgroup/pids".into()),
            }
        );
    }

    #[test]
    fn v1_on_a_host_joins_the_path_below_the_root() {
        let mountinfo = "30 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
                         31 25 0:28 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n\
                         32 25 0:29 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            parents(V1_CGROUP, mountinfo, |_| true),
            Parents::V1 {
                memory: Some("/sys/fs/cgroup/memory/kubepods/pod1/ctr".into()),
                pids: Some("/sys/fs/cgroup/pids/kubepods/pod1/ctr".into()),
            }
        );
    }

    #[test]
    fn v1_combined_controllers_and_unusual_mountpoints() {
        // memory and pids co-mounted on one hierarchy, somewhere else.
        let cgroup = "3:memory,pids:/agent\n";
        let mountinfo = "30 25 0:27 / /cg/mp rw - cgroup cgroup rw,memory,pids\n";
        assert_eq!(
            parents(cgroup, mountinfo, |_| true),
            Parents::V1 {
                memory: Some("/cg/mp/agent".into()),
                pids: Some("/cg/mp/agent".into()),
            }
        );
    }

    #[test]
    fn v2_inside_a_container_without_a_cgroup_namespace() {
        let mountinfo =
            "40 30 0:30 /kubepods/pod1/ctr /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";
        assert_eq!(
            parents("0::/kubepods/pod1/ctr\n", mountinfo, |_| true),
            Parents::V2("/sys/fs/cgroup".into())
        );
    }

    #[test]
    fn v2_beside_a_named_v1_hierarchy() {
        // A systemd container on a v2 host: name=systemd mounted as v1,
        // every controller on the unified hierarchy.
        let mountinfo = "40 30 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n\
                         41 40 0:31 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd\n";
        assert_eq!(
            parents("1:name=systemd:/\n0::/agent\n", mountinfo, |_| true),
            Parents::V2("/sys/fs/cgroup/agent".into())
        );
    }

    #[test]
    fn v2_on_a_host_and_in_a_cgroup_namespace() {
        let mountinfo = "40 30 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            parents("0::/system.slice/agent.service\n", mountinfo, |_| true),
            Parents::V2("/sys/fs/cgroup/system.slice/agent.service".into())
        );
        assert_eq!(
            parents("0::/\n", mountinfo, |_| true),
            Parents::V2("/sys/fs/cgroup".into())
        );
    }

    #[test]
    fn the_latest_mount_whose_directory_is_there_wins() {
        // The host's hierarchy, then the container's cgroup bound over the
        // same mountpoint: the path resolves through the later mount.
        let mountinfo = "30 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
                         90 30 0:27 /kubepods/pod1/ctr /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        let there = |d: &Path| d == Path::new("/sys/fs/cgroup/memory");
        assert_eq!(
            parents("4:memory:/kubepods/pod1/ctr\n", mountinfo, there),
            Parents::V1 {
                memory: Some("/sys/fs/cgroup/memory".into()),
                pids: None
            }
        );
        // Nothing there at all: no parent.
        assert_eq!(
            parents("4:memory:/kubepods/pod1/ctr\n", mountinfo, |_| false),
            Parents::V1 {
                memory: None,
                pids: None
            }
        );
    }

    #[test]
    fn a_cgroup_no_mount_shows_is_not_used() {
        let mountinfo = "30 25 0:27 /other /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert_eq!(
            parents(V1_CGROUP, mountinfo, |_| true),
            Parents::V1 {
                memory: None,
                pids: None
            }
        );
        assert_eq!(parents("0::/a\n", "", |_| true), Parents::None);
    }

    #[test]
    fn a_cgroup_limits_and_kills_its_processes() {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("SKIPPED: making cgroups needs root");
            return;
        }
        let cg = Cgroup::create(&format!("test-{}", std::process::id()), &Limits::default());
        if cg.procs_files().is_empty() {
            eprintln!("SKIPPED: no writable cgroup hierarchy on this machine");
            return;
        }
        let mut child = std::process::Command::new("sleep")
            .arg("100")
            .spawn()
            .unwrap();
        let pid = child.id().to_string();
        for p in cg.procs_files() {
            std::fs::write(p.to_str().unwrap(), &pid).unwrap();
        }
        assert_eq!(cg.pids(), vec![child.id() as i32]);
        assert!(cg.kill_all());
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        cg.remove().unwrap();
    }
}
