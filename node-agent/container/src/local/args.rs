//! The bubblewrap command line of one run: pure data, so it can be read
//! and tested without running anything.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Host directories that make up the userland, bound read-only where they
/// are directories and recreated as the same symlink where the host has a
/// symlink (merged-/usr systems: `/bin -> usr/bin`).
pub const USERLAND: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt",
];

/// Entries of the host's `/etc` the sandbox sees (read-only), when they
/// exist: what a userland needs to load libraries, resolve users it is
/// told about, verify TLS certificates and find `alternatives`. Users and
/// groups are the sandbox's own (see [`super::PASSWD`]).
pub const ETC: &[&str] = &[
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "ssl",
    "pki",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "mime.types",
    "nsswitch.conf",
    "host.conf",
    "gai.conf",
    "protocols",
    "services",
    "os-release",
    "debian_version",
    "bash.bashrc",
    "profile",
    "inputrc",
    "magic",
    "manpath.config",
    "python3",
    "python3.11",
    "gitconfig",
    "npmrc",
];

/// Everything the command line is made from.
#[derive(Debug, Clone)]
pub(super) struct Layout<'a> {
    /// The computer's files on the host (its FUSE mount).
    pub workspace: &'a Path,
    /// Descriptors (inherited by `bwrap`) holding the sandbox's own
    /// `/etc/passwd`, `/etc/group`, `/etc/hosts`, and where each goes:
    /// copied in by bubblewrap (`--ro-bind-data`), so no host path of the
    /// agent's shows in the sandbox's mount table.
    pub etc_files: &'a [(i32, &'static str)],
    /// Host `/etc` entries to show (those of [`ETC`] that exist).
    pub etc_entries: &'a [String],
    /// `(path, Some(symlink target))` or `(path, None)` for a directory, of
    /// the host's userland entries that exist.
    pub userland: &'a [(String, Option<PathBuf>)],
    /// `--unshare-net`: only loopback. `false` keeps the namespace the
    /// process starts in (the proxy namespace).
    pub unshare_net: bool,
    /// Host name inside.
    pub hostname: &'a str,
    /// Size of the private `/tmp` in bytes.
    pub tmp_bytes: u64,
    /// The sandbox user.
    pub uid: u32,
    pub gid: u32,
    /// `setpriv` on the host.
    pub setpriv: &'a Path,
    /// The descriptor (inherited by `bwrap`) holding the script and the
    /// caller's environment, read by the shell after the privilege drop
    /// ([`crate::launch`]).
    pub launch_fd: i32,
    /// Descriptors (inherited by `bwrap`) each holding one seccomp
    /// program, loaded in this order before the sandbox's first exec
    /// (`--add-seccomp-fd`; see [`crate::seccomp`]).
    pub seccomp_fds: &'a [i32],
}

/// The arguments to give `bwrap` (its path not included): its options,
/// then the sandbox's command (`--`, `setpriv` dropping to the sandbox
/// user, then `bash -c LAUNCHER` reading the script from
/// [`Layout::launch_fd`]). The options hold host paths, so the agent hands
/// them over through `--args FD` rather than argv (readable by everyone
/// in `/proc/PID/cmdline`, inside the sandbox too); the command, which
/// bubblewrap takes on argv only, holds nothing of the host or the caller.
pub(super) fn bwrap_args(l: &Layout<'_>) -> (Vec<OsString>, Vec<OsString>) {
    fn push_to(to: &mut Vec<OsString>, items: &[&dyn AsRef<std::ffi::OsStr>]) {
        to.extend(items.iter().map(|i| i.as_ref().to_os_string()));
    }
    let mut options: Vec<OsString> = Vec::new();
    let mut push = |items: &[&dyn AsRef<std::ffi::OsStr>]| push_to(&mut options, items);
    push(&[
        &"--die-with-parent",
        &"--new-session",
        &"--unshare-pid",
        &"--unshare-ipc",
        &"--unshare-uts",
        &"--unshare-cgroup-try",
        &"--hostname",
        &l.hostname,
    ]);
    if l.unshare_net {
        push(&[&"--unshare-net"]);
    }
    for fd in l.seccomp_fds {
        push(&[&"--add-seccomp-fd", &fd.to_string()]);
    }
    for (path, link) in l.userland {
        match link {
            Some(target) => push(&[&"--symlink", target, path]),
            None => push(&[&"--ro-bind", path, path]),
        }
    }
    push(&[&"--dir", &"/etc"]);
    for name in l.etc_entries {
        let p = format!("/etc/{name}");
        push(&[&"--ro-bind", &p, &p]);
    }
    for (fd, inside) in l.etc_files {
        push(&[
            &"--perms",
            &"0644",
            &"--ro-bind-data",
            &fd.to_string(),
            inside,
        ]);
    }
    let tmp_bytes = l.tmp_bytes.to_string();
    push(&[
        &"--proc",
        &"/proc",
        &"--dev",
        &"/dev",
        &"--perms",
        &"01777",
        &"--size",
        &tmp_bytes,
        &"--tmpfs",
        &"/tmp",
        &"--dir",
        &"/var",
        &"--symlink",
        &"../tmp",
        &"/var/tmp",
        &"--bind",
        &l.workspace,
        &crate::WORKSPACE,
        // The root tmpfs itself (holding the mountpoints) read-only too.
        &"--remount-ro",
        &"/",
        // The run's own working directory is entered by the shell after
        // the privilege drop (`crate::launch`): bubblewrap would follow
        // links in the computer as root.
        &"--chdir",
        &crate::WORKSPACE,
        &"--cap-add",
        &"CAP_SETUID",
        &"--cap-add",
        &"CAP_SETGID",
    ]);
    let mut command: Vec<OsString> = Vec::new();
    let mut push = |items: &[&dyn AsRef<std::ffi::OsStr>]| push_to(&mut command, items);
    let uid = format!("--reuid={}", l.uid);
    let launcher = crate::launch::launcher(l.launch_fd);
    let gid = format!("--regid={}", l.gid);
    push(&[
        &"--",
        &l.setpriv,
        &uid,
        &gid,
        &"--clear-groups",
        &"--inh-caps=-all",
        &"--bounding-set=-all",
        &"--no-new-privs",
        &"--",
        &"/bin/bash",
        &"-c",
        &launcher,
        // $0, as `bash -c SCRIPT` sets it.
        &"/bin/bash",
    ]);
    (options, command)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(args: &[OsString]) -> String {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn the_command_line_builds_the_documented_walls() {
        let userland = vec![
            ("/usr".to_string(), None),
            ("/bin".to_string(), Some(PathBuf::from("usr/bin"))),
        ];
        let etc_files = vec![(9, "/etc/passwd")];
        let l = Layout {
            workspace: Path::new("/data/run/workspaces/demo"),
            etc_files: &etc_files,
            etc_entries: &["ssl".to_string()],
            userland: &userland,
            unshare_net: true,
            hostname: "demo",
            tmp_bytes: 1 << 20,
            uid: 1000,
            gid: 1000,
            setpriv: Path::new("/usr/bin/setpriv"),
            launch_fd: 7,
            seccomp_fds: &[5, 6],
        };
        let (options, command) = bwrap_args(&l);
        let t = format!("{} {}", text(&options), text(&command));
        assert_eq!(text(&command[..2]), "-- /usr/bin/setpriv");
        assert!(!text(&command).contains("/data"), "{command:?}");
        for want in [
            "--die-with-parent",
            "--unshare-pid",
            "--unshare-net",
            "--ro-bind /usr /usr",
            "--symlink usr/bin /bin",
            "--ro-bind /etc/ssl /etc/ssl",
            "--perms 0644 --ro-bind-data 9 /etc/passwd",
            "--perms 01777 --size 1048576 --tmpfs /tmp",
            "--bind /data/run/workspaces/demo /workspace",
            "--remount-ro / --chdir /workspace --cap-add",
            "-- /usr/bin/setpriv --reuid=1000 --regid=1000 --clear-groups",
            "--no-new-privs -- /bin/bash -c { mapfile -d '' -u 7 AGENTCOMPUTER_LAUNCH",
            "--add-seccomp-fd 5 --add-seccomp-fd 6",
        ] {
            assert!(t.contains(want), "{want:?} missing from {t}");
        }
        // Nothing of the host is bound writable but the workspace.
        assert_eq!(t.matches("--bind ").count(), 1, "{t}");
        let shared = Layout {
            unshare_net: false,
            ..l
        };
        assert!(!text(&bwrap_args(&shared).0).contains("--unshare-net"));
    }
}
