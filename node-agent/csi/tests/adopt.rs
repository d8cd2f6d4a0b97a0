//! A restarted `agentcomputer-mounter` takes FUSE connections back from the
//! agent (`give` → `adopt`, hand-over protocol 3) only when they check
//! out: the test mounts a `fuse.agentcomputer` target itself (as an earlier
//! run of the mounter would have), plays the agent with `AgentEnd`, and
//! hands back first a pipe, then the real descriptor under another volume,
//! then the real one. The first two are refused and logged, and the
//! mounter keeps nothing (NodeGetVolumeStats for the target is NOT_FOUND);
//! the third is kept (NodeGetVolumeStats then reaches the agent). Needs
//! root and /dev/fuse (prints SKIPPED otherwise).

mod common;
use common::channel;

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentcomputer_csi::pb::csi::NodeGetVolumeStatsRequest;
use agentcomputer_csi::pb::csi::node_client::NodeClient;
use agentcomputer_csi::publish::{FSTYPE, mount_data, mount_source};
use agentcomputer_handover::mounter::{AgentEnd, Reply, Request, VolumeStats};
use tokio::task::JoinHandle;
use tonic::Code;

const VOLUME: &str = "vol-adopt";

struct Mounter {
    child: Child,
}

impl Drop for Mounter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A FUSE mount made by the test, as an earlier mounter run left it: the
/// kernel connection lives while `fd` is open; nobody answers its
/// `FUSE_INIT`, so nothing may touch the mount's files. Unmounted (lazily)
/// when dropped.
struct TestMount {
    target: PathBuf,
    fd: OwnedFd,
}

impl Drop for TestMount {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.target, nix::mount::MntFlags::MNT_DETACH);
    }
}

fn mount(target: &Path) -> TestMount {
    std::fs::create_dir_all(target).unwrap();
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .unwrap();
    let fd = OwnedFd::from(dev);
    nix::mount::mount(
        Some(mount_source(VOLUME).as_str()),
        target,
        Some(FSTYPE),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some(mount_data(fd.as_raw_fd(), 1000, 1000).as_str()),
    )
    .unwrap();
    TestMount {
        target: target.to_path_buf(),
        fd,
    }
}

/// Waits until the mounter's log has `needle` after byte `from`; returns
/// the log's length then.
async fn logged(log: &Path, from: usize, needle: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.get(from..).is_some_and(|t| t.contains(needle)) {
            return text.len();
        }
        assert!(
            Instant::now() < deadline,
            "{needle:?} not logged within 15 s:\n{}",
            text.get(from..).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The usage the fake agent reports for the volume.
const STATS: VolumeStats = VolumeStats {
    total_bytes: 4096,
    used_bytes: 7,
    available_bytes: 4089,
    total_inodes: 100,
    used_inodes: 3,
    available_inodes: 97,
};

/// Plays the agent on one connection: `give` for `target` is answered by
/// `hand_back` (a reply and the descriptor sent with it), any other
/// `give` with `not_found`, `stats` of the volume with [`STATS`].
fn fake_agent(
    end: AgentEnd,
    target: PathBuf,
    hand_back: impl Fn() -> (Reply, OwnedFd) + Send + 'static,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        while let Ok(Some(incoming)) = end.next().await {
            let (reply, fd) = match &incoming.request {
                Request::Give { volume, target: t }
                    if volume == VOLUME && Path::new(t) == target =>
                {
                    let (r, fd) = hand_back();
                    (r, Some(fd))
                }
                Request::Stats { volume } if volume == VOLUME => (Reply::Stats(STATS), None),
                _ => (Reply::NotFound, None),
            };
            end.reply(incoming.id, reply, fd.as_ref().map(|f| f.as_fd()))
                .await
                .unwrap();
        }
    })
}

fn adopt(volume: &str) -> Reply {
    Reply::Adopt {
        volume: volume.into(),
        uid: 1000,
        gid: 1000,
        readonly: false,
        init: "00".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_live_fuse_descriptors_of_mounted_volumes_are_adopted() {
    if !Path::new("/dev/fuse").exists() || !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: mounting a FUSE target needs root and /dev/fuse");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let csi = dir.path().join("plugins/agentcomputer.dev/csi.sock");
    let handover = dir.path().join("run/mounter.sock");
    let log = dir.path().join("mounter.log");
    let _mounter = Mounter {
        child: Command::new(env!("CARGO_BIN_EXE_agentcomputer-mounter"))
            .args(["--node-name", "node-x"])
            .arg(format!("--csi-endpoint=unix://{}", csi.display()))
            .arg("--registration-dir")
            .arg(dir.path().join("plugins_registry"))
            .arg("--handover-socket")
            .arg(&handover)
            .args(["--agent-uid", "0", "--agent-gid", "0"])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(csi.exists() && handover.exists()) {
        assert!(Instant::now() < deadline, "mounter sockets not within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let target = dir.path().join("pods/p1/volumes/mount");
    let mounted = mount(&target);
    let mut node = NodeClient::new(channel(csi.clone()).await);
    let stats = NodeGetVolumeStatsRequest {
        volume_id: VOLUME.into(),
        volume_path: target.display().to_string(),
        staging_target_path: String::new(),
    };

    // 1. A pipe is not /dev/fuse.
    let end = AgentEnd::connect(&handover).await.unwrap();
    let agent = fake_agent(end, target.clone(), || {
        let (r, _w) = nix::unistd::pipe().unwrap();
        (adopt(VOLUME), r)
    });
    let mut at = logged(&log, 0, "the descriptor is not /dev/fuse").await;
    let err = node.node_get_volume_stats(stats.clone()).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{}", err.message());
    agent.abort();

    // 2. The real connection, named as a volume not mounted there.
    let end = AgentEnd::connect(&handover).await.unwrap();
    let real = mounted.fd.try_clone().unwrap();
    let agent = fake_agent(end, target.clone(), move || {
        (adopt("vol-else"), real.try_clone().unwrap())
    });
    at = logged(&log, at, "not volume vol-else").await;
    let err = node.node_get_volume_stats(stats.clone()).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{}", err.message());
    agent.abort();

    // 3. The real connection of the volume mounted there: kept, so the
    // stats of the target now come from the agent.
    let end = AgentEnd::connect(&handover).await.unwrap();
    let real = mounted.fd.try_clone().unwrap();
    let agent = fake_agent(end, target.clone(), move || {
        (adopt(VOLUME), real.try_clone().unwrap())
    });
    logged(&log, at, "took back the descriptor of a published volume").await;
    let usage = node
        .node_get_volume_stats(stats.clone())
        .await
        .unwrap()
        .into_inner()
        .usage;
    assert_eq!(
        usage.iter().map(|u| (u.total, u.used)).collect::<Vec<_>>(),
        [(4096, 7), (100, 3)]
    );
    agent.abort();
    drop(mounted);
}
