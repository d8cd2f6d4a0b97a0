//! The agent sizes its execs' memory from its own cgroup's limit when it
//! runs the way a container runtime without a cgroup namespace starts it:
//! in a memory cgroup with a limit, with only that cgroup mounted at the
//! hierarchy's usual place (so `/proc/self/cgroup` names a path the mount
//! does not show from its root). Needs root and a writable memory cgroup
//! (v1 or v2); otherwise SKIPPED.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use agentcomputer_proto::v1 as pb;
use common::*;
use tonic::Code;

const MIB: u64 = 1 << 20;

/// A memory cgroup made for the test below the test's own, and where its
/// hierarchy is mounted; its processes are killed and it is removed on
/// drop.
struct Limited {
    dir: PathBuf,
    mountpoint: PathBuf,
}

impl Limited {
    /// A child of this process's memory cgroup limited to `limit` bytes.
    fn make(limit: u64) -> Option<Limited> {
        let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let (mountpoint, path, file) = if let Some(path) = cgroup.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then_some(path)
        }) {
            ("/sys/fs/cgroup/memory", path, "memory.limit_in_bytes")
        } else {
            let path = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
            ("/sys/fs/cgroup", path, "memory.max")
        };
        let parent = Path::new(mountpoint).join(path.trim_start_matches('/'));
        let dir = parent.join(format!("agentcomputer-limit-{}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        let made = Limited {
            dir,
            mountpoint: PathBuf::from(mountpoint),
        };
        std::fs::write(made.dir.join(file), limit.to_string()).ok()?;
        Some(made)
    }

    /// A wrapper that moves the agent into the cgroup, then mounts the
    /// cgroup alone over the hierarchy's mountpoint in a mount namespace
    /// of its own, as a container runtime does.
    fn wrapper(&self) -> Command {
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg(format!(
                "echo $$ > '{dir}/cgroup.procs' && mount --bind '{dir}' '{mnt}' && exec \"$0\" \"$@\"",
                dir = self.dir.display(),
                mnt = self.mountpoint.display()
            ))
            .arg(env!("CARGO_BIN_EXE_node-agent"));
        cmd
    }
}

impl Drop for Limited {
    fn drop(&mut self) {
        // The agent's FUSE holder outlives the agent by its grace.
        for _ in 0..100 {
            let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
            if procs.trim().is_empty() {
                break;
            }
            for pid in procs.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[tokio::test]
async fn execs_fit_the_agents_own_cgroup_limit_inside_a_container() {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("SKIPPED: needs root (cgroups and mount namespaces)");
        return;
    }
    let Some(limited) = Limited::make(400 * MIB) else {
        eprintln!("SKIPPED: no writable memory cgroup below this process's own");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start_wrapped(limited.wrapper(), dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "m", 0).await;

    // Half of the room under 400 MiB is less than 200 MiB: an exec asking
    // for 200 MiB can never fit, and the refusal names the pool.
    let mut req = exec_req("m", "true");
    req.memory_limit_bytes = 200 * MIB;
    let err = c.exec(req).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("exec_memory = "), "{err:?}");
    // A budget that fits runs.
    let mut req = exec_req("m", "echo ok");
    req.memory_limit_bytes = 48 * MIB;
    let r = run(&mut c, req).await;
    assert_eq!((r.code, r.stdout.as_str()), (0, "ok\n"), "{r:?}");
    let req = pb::ExecRequest {
        computer: "m".into(),
        script: "echo default".into(),
        ..Default::default()
    };
    assert_eq!(run(&mut c, req).await.stdout, "default\n");
    agent.stop().await;
}
