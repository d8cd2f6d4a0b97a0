//! The memory limit of the agent's own cgroup, found the same way on
//! cgroup v1 and v2, on a host and inside a container.
//!
//! `/proc/self/cgroup` names the process's cgroup as a path from the root
//! of each hierarchy (cgroups(7)). The files of that cgroup are under a
//! mount of the hierarchy, whose `root` field in `/proc/self/mountinfo`
//! (proc(5)) says which cgroup the mount shows at its mountpoint. On a
//! host the root is `/`; in a container without a cgroup namespace the
//! runtime mounts only the container's own cgroup, so the root is the
//! container's path (`/kubepods/burstable/pod…/…`) and the cgroup's
//! directory is the mountpoint itself. Joining the path to
//! `/sys/fs/cgroup/memory` as if the root were always `/` finds nothing
//! there, and the agent would size its exec memory from the node's memory
//! instead of its container's limit. Finding the directory is
//! `agentcomputer-cgroupfs`'s, shared with the container runtime.
//!
//! The limit is the smallest of the cgroup's and its visible ancestors'
//! (cgroup v1 `memory.limit_in_bytes`, or its `hierarchical_memory_limit`
//! in `memory.stat`, which the kernel computes over every ancestor, seen or
//! not; cgroup v2 `memory.max`, `max` for none). The usage is the cgroup's
//! own (`memory.usage_in_bytes`, `memory.current`).

use std::path::{Path, PathBuf};

use agentcomputer_cgroupfs::{ancestors, cgroup_mounts, dirs_of, own_cgroups};

/// cgroup v1 reports "no limit" as the largest page-aligned `i64`; anything
/// at or above this is no limit.
const V1_UNLIMITED: u64 = 1 << 62;

/// The memory cgroup of a process, with a limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMemory {
    /// The cgroup's directory as this process sees it.
    pub dir: PathBuf,
    /// 1 or 2.
    pub version: u8,
    /// The smallest limit of the cgroup and its ancestors, in bytes.
    pub limit: u64,
    /// Bytes the cgroup uses now.
    pub usage: u64,
}

impl CgroupMemory {
    /// Bytes left under the limit.
    pub fn room(&self) -> u64 {
        self.limit.saturating_sub(self.usage)
    }
}

/// The limited memory cgroup of this process, or `None` when it has no
/// limit or none can be found (no memory controller, unreadable files).
pub fn own() -> Option<CgroupMemory> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    find(&cgroup, &mountinfo, |p| std::fs::read_to_string(p).ok())
}

/// [`own`] over the texts of `/proc/self/cgroup` and
/// `/proc/self/mountinfo`, reading cgroup files with `read`. A v1 memory
/// hierarchy is preferred when both exist (the hybrid layout, where v2
/// holds no controller).
pub fn find(
    cgroup: &str,
    mountinfo: &str,
    read: impl Fn(&Path) -> Option<String>,
) -> Option<CgroupMemory> {
    let mounts = cgroup_mounts(mountinfo);
    let own = own_cgroups(cgroup);
    let number = |p: &Path| -> Option<u64> { read(p)?.trim().parse().ok() };
    for line in own.iter().filter(|l| l.has("memory")) {
        // The latest mount that shows the cgroup and has its files.
        let found = dirs_of(&mounts, &line.path, |m| m.is_v1_of("memory"))
            .find_map(|(m, dir)| Some((m, number(&dir.join("memory.usage_in_bytes"))?, dir)));
        let Some((mount, usage, dir)) = found else {
            continue;
        };
        let own = number(&dir.join("memory.limit_in_bytes"));
        let hierarchical = read(&dir.join("memory.stat")).and_then(|stat| {
            stat.lines().find_map(|l| {
                l.strip_prefix("hierarchical_memory_limit ")?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
        });
        let ancestors = ancestors(&dir, &mount.mountpoint)
            .filter_map(|d| number(&d.join("memory.limit_in_bytes")))
            .min();
        let limit = [own, hierarchical, ancestors]
            .into_iter()
            .flatten()
            .min()
            .filter(|&l| l < V1_UNLIMITED)?;
        return Some(CgroupMemory {
            dir,
            version: 1,
            limit,
            usage,
        });
    }
    let path = &own.iter().find(|l| l.is_unified())?.path;
    let (mount, usage, dir) = dirs_of(&mounts, path, |m| m.is_v2())
        .find_map(|(m, dir)| Some((m, number(&dir.join("memory.current"))?, dir)))?;
    let limit = std::iter::once(dir.clone())
        .chain(ancestors(&dir, &mount.mountpoint))
        .filter_map(|d| number(&d.join("memory.max")))
        .min()?;
    Some(CgroupMemory {
        dir,
        version: 2,
        limit,
        usage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn files(entries: &[(&str, &str)]) -> impl Fn(&Path) -> Option<String> {
        let map: HashMap<PathBuf, String> = entries
            .iter()
            .map(|(p, v)| (PathBuf::from(p), v.to_string()))
            .collect();
        move |p| map.get(p).cloned()
    }

    const V1_CGROUP: &str = "9:pids:/kubepods/pod1/ctr\n4:memory:/kubepods/pod1/ctr\n0::/\n";

    #[test]
    fn v1_inside_a_container_reads_the_mountpoint_itself() {
        // The container runtime mounted only the container's cgroup.
        let mountinfo = "30 25 0:27 /kubepods/pod1/ctr /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n";
        let read = files(&[
            (
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                "2147483648\n",
            ),
            ("/sys/fs/cgroup/memory/memory.usage_in_bytes", "391118848\n"),
            (
                "/sys/fs/cgroup/memory/memory.stat",
                "cache 1\nhierarchical_memory_limit 2147483648\n",
            ),
        ]);
        let m = find(V1_CGROUP, mountinfo, read).unwrap();
        assert_eq!(m.dir, Path::new("/sys/fs/cgroup/memory"));
        assert_eq!((m.version, m.limit, m.usage), (1, 2 << 30, 391118848));
        assert_eq!(m.room(), (2 << 30) - 391118848);
    }

    #[test]
    fn v1_on_a_host_takes_the_smallest_limit_of_the_ancestors() {
        let mountinfo = "30 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        let read = files(&[
            (
                "/sys/fs/cgroup/memory/kubepods/pod1/ctr/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
            (
                "/sys/fs/cgroup/memory/kubepods/pod1/memory.limit_in_bytes",
                "1073741824\n",
            ),
            (
                "/sys/fs/cgroup/memory/kubepods/pod1/ctr/memory.usage_in_bytes",
                "100\n",
            ),
        ]);
        let m = find(V1_CGROUP, mountinfo, read).unwrap();
        assert_eq!(m.dir, Path::new("/sys/fs/cgroup/memory/kubepods/pod1/ctr"));
        assert_eq!(m.limit, 1 << 30);
    }

    #[test]
    fn v1_without_a_limit_is_none() {
        let mountinfo = "30 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        let read = files(&[
            (
                "/sys/fs/cgroup/memory/kubepods/pod1/ctr/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
            (
                "/sys/fs/cgroup/memory/kubepods/pod1/ctr/memory.usage_in_bytes",
                "100\n",
            ),
        ]);
        assert_eq!(find(V1_CGROUP, mountinfo, read), None);
    }

    #[test]
    fn v2_in_a_cgroup_namespace_and_a_parent_limit() {
        // With a cgroup namespace the process sees itself at "/" of a
        // mount whose root is "/".
        let mountinfo = "40 30 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        let read = files(&[
            ("/sys/fs/cgroup/memory.max", "536870912\n"),
            ("/sys/fs/cgroup/memory.current", "1000\n"),
        ]);
        let m = find("0::/\n", mountinfo, read).unwrap();
        assert_eq!((m.version, m.limit, m.usage), (2, 512 << 20, 1000));
        // A limit set on the parent only (the pod), none on the container.
        let read = files(&[
            ("/sys/fs/cgroup/kubepods/pod1/ctr/memory.max", "max\n"),
            ("/sys/fs/cgroup/kubepods/pod1/memory.max", "268435456\n"),
            ("/sys/fs/cgroup/kubepods/pod1/ctr/memory.current", "5\n"),
        ]);
        let m = find("0::/kubepods/pod1/ctr\n", mountinfo, read).unwrap();
        assert_eq!(m.limit, 256 << 20);
        // No limit anywhere.
        let read = files(&[
            ("/sys/fs/cgroup/memory.max", "max\n"),
            ("/sys/fs/cgroup/memory.current", "5\n"),
        ]);
        assert_eq!(find("0::/\n", mountinfo, read), None);
    }

    #[test]
    fn a_path_the_mount_does_not_show_is_skipped() {
        let mountinfo = "30 25 0:27 /other /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert_eq!(find(V1_CGROUP, mountinfo, files(&[])), None);
        // A mount of "/kubepods/pod1" does not show "/kubepods/pod10".
        let mountinfo = "30 25 0:27 /kubepods/pod1 /m rw - cgroup cgroup rw,memory\n";
        let read = files(&[
            ("/m/memory.limit_in_bytes", "1048576\n"),
            ("/m/memory.usage_in_bytes", "1\n"),
        ]);
        assert_eq!(find("4:memory:/kubepods/pod10\n", mountinfo, read), None);
    }

    #[test]
    fn a_mount_over_the_hierarchy_hides_the_one_below() {
        // The host's whole hierarchy, then the container's cgroup bound
        // over the same mountpoint: paths resolve through the later one.
        let mountinfo = "30 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
                         90 30 0:27 /kubepods/pod1/ctr /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        let read = files(&[
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "419430400\n"),
            ("/sys/fs/cgroup/memory/memory.usage_in_bytes", "4096\n"),
        ]);
        let m = find(V1_CGROUP, mountinfo, read).unwrap();
        assert_eq!(
            (m.dir.as_path(), m.limit),
            (Path::new("/sys/fs/cgroup/memory"), 400 << 20)
        );
    }
}
