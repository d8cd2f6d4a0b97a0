//! Where this process's cgroups are: the directory of each of its cgroups
//! as this process sees it, on cgroup v1 and v2, on a host and inside a
//! container. Shared by the node agent (its memory limit) and the container
//! runtime (the cgroups of its runs), which cannot depend on each other.
//!
//! `/proc/self/cgroup` names the process's cgroup as a path from the root
//! of each hierarchy (cgroups(7)): `4:memory:/kubepods/pod1/ctr` for a v1
//! hierarchy, `0::/kubepods/pod1/ctr` for the unified (v2) one. The files
//! of that cgroup are under a mount of the hierarchy, whose `root` field in
//! `/proc/self/mountinfo` (proc(5)) says which cgroup the mount shows at
//! its mountpoint. On a host the root is `/` and the directory is the
//! mountpoint joined with the path; in a container without a cgroup
//! namespace the runtime mounts only the container's own cgroup, so the
//! root is the container's path and the directory is the mountpoint
//! itself. Joining the path to `/sys/fs/cgroup/<controller>` as if the root
//! were always `/` finds nothing inside a container.

use std::path::{Path, PathBuf};

/// One line of `/proc/self/cgroup`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnCgroup {
    /// The v1 controllers of the hierarchy (`memory`, `cpu,cpuacct`,
    /// `name=systemd`); empty for the unified hierarchy.
    pub controllers: String,
    /// The cgroup's path from the hierarchy's root, `/kubepods/pod1/ctr`.
    pub path: String,
}

impl OwnCgroup {
    /// Whether this is a v1 hierarchy carrying `controller`.
    pub fn has(&self, controller: &str) -> bool {
        self.controllers.split(',').any(|c| c == controller)
    }

    /// Whether this is the unified (v2) hierarchy's line (`0::PATH`).
    pub fn is_unified(&self) -> bool {
        self.controllers.is_empty()
    }
}

/// The lines of a `/proc/self/cgroup` text (malformed lines skipped).
pub fn own_cgroups(cgroup: &str) -> Vec<OwnCgroup> {
    cgroup
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _id = parts.next()?;
            Some(OwnCgroup {
                controllers: parts.next()?.to_string(),
                path: parts.next()?.to_string(),
            })
        })
        .collect()
}

/// One cgroup mount of `/proc/self/mountinfo`, the fields used here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Field 4: the cgroup shown at the mountpoint (`/` for the whole
    /// hierarchy).
    pub root: String,
    /// Field 5.
    pub mountpoint: PathBuf,
    /// The field after ` - `: `cgroup` (v1) or `cgroup2`.
    pub fstype: String,
    /// The super options, last field (a v1 mount's controllers are among
    /// them: `rw,memory`).
    pub options: String,
}

impl Mount {
    /// Whether this is a v1 mount of `controller`.
    pub fn is_v1_of(&self, controller: &str) -> bool {
        self.fstype == "cgroup" && self.options.split(',').any(|o| o == controller)
    }

    /// Whether this is a mount of the unified (v2) hierarchy.
    pub fn is_v2(&self) -> bool {
        self.fstype == "cgroup2"
    }

    /// The directory of cgroup `path` under this mount, when the mount
    /// shows it (its root is `path` or an ancestor of it).
    pub fn dir_of(&self, path: &str) -> Option<PathBuf> {
        let rest = if self.root == "/" {
            path.strip_prefix('/')?
        } else if path == self.root {
            ""
        } else {
            path.strip_prefix(self.root.as_str())?.strip_prefix('/')?
        };
        Some(if rest.is_empty() {
            self.mountpoint.clone()
        } else {
            self.mountpoint.join(rest)
        })
    }
}

/// The cgroup mounts (v1 and v2) of a mountinfo text, in mount order.
/// Paths are unescaped (`\040` for a space and the like: proc(5)).
pub fn cgroup_mounts(mountinfo: &str) -> Vec<Mount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let fields: Vec<&str> = before.split(' ').collect();
            let mut tail = after.split(' ');
            let fstype = tail.next()?;
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            let _source = tail.next()?;
            let options = tail.next().unwrap_or("");
            Some(Mount {
                root: unescape(fields.get(3)?),
                mountpoint: PathBuf::from(unescape(fields.get(4)?)),
                fstype: fstype.to_string(),
                options: options.to_string(),
            })
        })
        .collect()
}

/// The directories showing cgroup `path` in the mounts `mounts` keeps,
/// latest mount first: a later mount over the same mountpoint hides an
/// earlier one, so the first whose files are there is the one to use.
pub fn dirs_of<'a>(
    mounts: &'a [Mount],
    path: &'a str,
    keep: impl Fn(&Mount) -> bool + 'a,
) -> impl Iterator<Item = (&'a Mount, PathBuf)> + 'a {
    mounts
        .iter()
        .rev()
        .filter(move |m| keep(m))
        .filter_map(move |m| Some((m, m.dir_of(path)?)))
}

/// Undoes mountinfo's octal escapes (`\040`, `\011`, `\012`, `\134`).
pub fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && let Ok(code) = u8::from_str_radix(&field[i + 1..i + 4], 8)
        {
            out.push(code);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The ancestors of `dir` up to and including `top`, nearest first
/// (nothing when `dir` is `top` or not below it).
pub fn ancestors<'a>(dir: &'a Path, top: &'a Path) -> impl Iterator<Item = PathBuf> + 'a {
    dir.ancestors()
        .skip(1)
        .take_while(move |d| d.starts_with(top))
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_self_cgroup_lines_are_read() {
        let own = own_cgroups("12:pids:/a\n4:memory,pids:/b\n1:name=systemd:/c\n0::/d\nbogus\n");
        assert_eq!(own.len(), 4);
        assert!(own[1].has("memory") && own[1].has("pids") && !own[1].has("cpu"));
        assert!(own[3].is_unified() && own[3].path == "/d");
        assert!(!own[2].is_unified());
    }

    #[test]
    fn only_cgroup_mounts_are_kept_with_their_fields() {
        let mountinfo = "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
                         30 25 0:27 /kubepods/pod\\0401 /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n\
                         40 30 0:30 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate\n";
        let mounts = cgroup_mounts(mountinfo);
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[0].root, "/kubepods/pod 1");
        assert!(mounts[0].is_v1_of("memory") && !mounts[0].is_v1_of("pids"));
        assert!(mounts[1].is_v2() && !mounts[0].is_v2());
    }

    #[test]
    fn a_mount_shows_its_root_and_what_is_below() {
        let at = |root: &str| Mount {
            root: root.into(),
            mountpoint: "/m".into(),
            fstype: "cgroup2".into(),
            options: "rw".into(),
        };
        // Host: the whole hierarchy.
        assert_eq!(at("/").dir_of("/a/b"), Some("/m/a/b".into()));
        assert_eq!(at("/").dir_of("/"), Some("/m".into()));
        // Container: its own cgroup is the mountpoint.
        assert_eq!(
            at("/kubepods/pod1").dir_of("/kubepods/pod1"),
            Some("/m".into())
        );
        assert_eq!(
            at("/kubepods/pod1").dir_of("/kubepods/pod1/c"),
            Some("/m/c".into())
        );
        // Not shown: a sibling, or a name that only starts alike.
        assert_eq!(at("/kubepods/pod1").dir_of("/kubepods/pod10"), None);
        assert_eq!(at("/other").dir_of("/kubepods/pod1"), None);
    }

    #[test]
    fn later_mounts_come_first() {
        let mountinfo = "30 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
                         90 30 0:27 /kubepods/pod1/ctr /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        let mounts = cgroup_mounts(mountinfo);
        let dirs: Vec<PathBuf> = dirs_of(&mounts, "/kubepods/pod1/ctr", |m| m.is_v1_of("memory"))
            .map(|(_, d)| d)
            .collect();
        assert_eq!(
            dirs,
            vec![
                PathBuf::from("/sys/fs/cgroup/memory"),
                PathBuf::from("/sys/fs/cgroup/memory/kubepods/pod1/ctr")
            ]
        );
    }

    #[test]
    fn ancestors_stop_at_the_mountpoint() {
        let got: Vec<PathBuf> = ancestors(Path::new("/m/a/b"), Path::new("/m")).collect();
        assert_eq!(got, vec![PathBuf::from("/m/a"), PathBuf::from("/m")]);
        assert_eq!(ancestors(Path::new("/m"), Path::new("/m")).count(), 0);
    }

    #[test]
    fn escaped_mountpoints_are_read_back() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
    }
}
