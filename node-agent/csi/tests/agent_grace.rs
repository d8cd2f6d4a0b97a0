//! The mounter's bound on how long a published volume waits for a node
//! agent (`--agent-grace`, `agentcomputer_csi::grace`), end to end: the
//! real `agentcomputer-mounter` binary with a 2 s grace, a real FUSE mount
//! published through CSI, and the node agent's part played by child
//! processes of this test (this same executable, started with
//! `AGENT_GRACE_ROLE=agent`), which serve the connection with the real FUSE
//! server over a real engine (`agentcomputer_fuse::serve_connection`,
//! `resume_connection`), so killing one is killing the server.
//!
//! 1. An agent killed and replaced within the grace: the new one resumes
//!    the connection, a call made while no agent ran completes, and the
//!    mount still works after the grace has passed.
//! 2. The agent killed and not replaced: a call waiting on the mount fails
//!    with `ECONNABORTED` (or `ENOTCONN`) within the grace and a margin,
//!    not before the grace; later calls fail with `ENOTCONN`; the mounter
//!    runs on, the dead mount stays, and an error names the volume.
//! 3. An agent connecting afterwards is not asked to resume the dead
//!    connection; NodeUnpublishVolume removes the mount as usual.
//!
//! No libtest harness (`harness = false` in Cargo.toml): `main` runs the
//! steps in order, or plays the agent in a child. Needs root and
//! /dev/fuse (prints SKIPPED otherwise).

mod common;
use common::channel;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentcomputer_csi::mountinfo;
use agentcomputer_csi::pb::csi;
use agentcomputer_csi::pb::csi::node_client::NodeClient;
use agentcomputer_csi::pb::csi::volume_capability::access_mode::Mode;
use agentcomputer_csi::pb::csi::volume_capability::{AccessMode, AccessType, MountVolume};
use agentcomputer_handover::mounter::{AgentEnd, Reply, Request};
use nix::errno::Errno;

const VOLUME: &str = "vol-grace";
const GRACE: Duration = Duration::from_secs(2);
/// The watch looks every grace/4; the rest is a loaded machine's slack.
const MARGIN: Duration = Duration::from_secs(3);
const ROLE: &str = "AGENT_GRACE_ROLE";

fn main() {
    if std::env::var(ROLE).as_deref() == Ok("agent") {
        agent();
        return;
    }
    if !Path::new("/dev/fuse").exists() || !nix::unistd::geteuid().is_root() {
        println!("SKIPPED: publishing a FUSE volume needs root and /dev/fuse");
        return;
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(run());
    println!("agent_grace: ok");
}

// ------------------------------------------------------------- the agent

/// Plays the node agent: connects to `AGENT_GRACE_SOCKET` and serves or
/// resumes every connection it is handed over the engine at
/// `AGENT_GRACE_DB`; prints one line per request (`serve`, `resume`, ...)
/// on stdout. Runs until killed.
fn agent() {
    let socket = PathBuf::from(std::env::var("AGENT_GRACE_SOCKET").unwrap());
    let db = PathBuf::from(std::env::var("AGENT_GRACE_DB").unwrap());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let end = loop {
            match AgentEnd::connect(&socket).await {
                Ok(e) => break e,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        println!("connected");
        let mut serving = Vec::new();
        let opts = agentcomputer_fuse::MountOptions {
            commit_window: Duration::ZERO,
            ..Default::default()
        };
        while let Ok(Some(incoming)) = end.next().await {
            let (name, reply) = match (incoming.request, incoming.fd) {
                (Request::Check { .. }, _) => ("check", Reply::Known),
                (Request::Serve { .. }, Some(fd)) => {
                    let fs = agentcomputer_fs::Fs::open_or_create(&db, Default::default()).unwrap();
                    let conn = agentcomputer_fuse::serve_connection(fs, fd, opts.clone()).unwrap();
                    let init = hex::encode(conn.init_record().as_bytes());
                    serving.push(conn);
                    ("serve", Reply::Served { init: Some(init) })
                }
                (Request::Resume { init, .. }, Some(fd)) => {
                    let fs = agentcomputer_fs::Fs::open_or_create_with(
                        &db,
                        Default::default(),
                        agentcomputer_fs::OpenOptions { keep_orphans: true },
                    )
                    .unwrap();
                    let init =
                        agentcomputer_fuse::InitRecord::from_bytes(hex::decode(init).unwrap())
                            .unwrap();
                    match agentcomputer_fuse::resume_connection(fs, fd, opts.clone(), init) {
                        Ok(conn) => {
                            serving.push(conn);
                            ("resume", Reply::Served { init: None })
                        }
                        Err(e) => (
                            "resume-failed",
                            Reply::Error {
                                message: e.to_string(),
                            },
                        ),
                    }
                }
                _ => ("other", Reply::NotFound),
            };
            println!("{name}");
            end.reply(incoming.id, reply, None).await.unwrap();
        }
    });
}

/// An agent child process; its stdout lines go to `lines`.
struct AgentProcess {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl AgentProcess {
    fn start(socket: &Path, db: &Path) -> AgentProcess {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(ROLE, "agent")
            .env("AGENT_GRACE_SOCKET", socket)
            .env("AGENT_GRACE_DB", db)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        AgentProcess { child, lines }
    }

    /// Waits (at most 15 s) for the line `what`.
    fn expect(&self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l == what => return,
                Ok(_) => {}
                Err(e) => panic!("the agent did not print {what:?}: {e}"),
            }
        }
    }

    /// Every line printed so far.
    fn printed(&self) -> Vec<String> {
        self.lines.try_iter().collect()
    }

    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// -------------------------------------------------------------- the test

struct Mounter(Child);

impl Drop for Mounter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `f` on a thread of its own: it may block on the mount.
fn on_thread<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> tokio::sync::oneshot::Receiver<(T, Instant)> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let r = f();
        let _ = tx.send((r, Instant::now()));
    });
    rx
}

fn errno_of(r: std::io::Result<impl Sized>) -> Option<Errno> {
    r.err()
        .map(|e| Errno::from_raw(e.raw_os_error().unwrap_or_default()))
}

/// Lazily unmounts every mount under a directory when dropped, so a failed
/// run leaves no dead mount behind (the temp dir's removal would stop at it).
struct UnmountUnder(PathBuf);

impl Drop for UnmountUnder {
    fn drop(&mut self) {
        let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
            return;
        };
        for target in mounts.lines().filter_map(|l| l.split(' ').nth(1)) {
            if Path::new(target).starts_with(&self.0) {
                let _ = nix::mount::umount2(target, nix::mount::MntFlags::MNT_DETACH);
            }
        }
    }
}

async fn run() {
    let dir = tempfile::tempdir().unwrap();
    let _unmount = UnmountUnder(dir.path().to_path_buf());
    let csi_socket = dir.path().join("plugins/agentcomputer.dev/csi.sock");
    let handover = dir.path().join("run/mounter.sock");
    let log = dir.path().join("mounter.log");
    let db = dir.path().join("computer.db");
    let mut mounter = Mounter(
        Command::new(env!("CARGO_BIN_EXE_agentcomputer-mounter"))
            .args(["--node-name", "node-x"])
            .arg(format!("--csi-endpoint=unix://{}", csi_socket.display()))
            .arg("--registration-dir")
            .arg(dir.path().join("plugins_registry"))
            .arg("--handover-socket")
            .arg(&handover)
            .args(["--agent-uid", "0", "--agent-gid", "0"])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg(format!("--agent-grace={}", GRACE.as_secs()))
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(csi_socket.exists() && handover.exists()) {
        assert!(Instant::now() < deadline, "mounter sockets not within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut node = NodeClient::new(channel(csi_socket.clone()).await);
    let a = AgentProcess::start(&handover, &db);
    a.expect("connected");

    let target = dir.path().join("pods/p1/volumes/mount");
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    node.node_publish_volume(csi::NodePublishVolumeRequest {
        volume_id: VOLUME.into(),
        target_path: target.display().to_string(),
        volume_capability: Some(csi::VolumeCapability {
            access_mode: Some(AccessMode {
                mode: Mode::SingleNodeWriter as i32,
            }),
            access_type: Some(AccessType::Mount(MountVolume::default())),
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    a.expect("serve");
    std::fs::write(target.join("a"), b"before").unwrap();

    // 1. Killed and replaced within the grace.
    a.kill();
    let t = target.clone();
    let waiting = on_thread(move || std::fs::read(t.join("b")));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b = AgentProcess::start(&handover, &db);
    b.expect("resume");
    let (read, _) = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("the call made while no agent ran was never answered")
        .unwrap();
    assert_eq!(
        errno_of(read),
        Some(Errno::ENOENT),
        "the waiting call is answered by the new agent"
    );
    tokio::time::sleep(GRACE + MARGIN).await;
    assert_eq!(std::fs::read(target.join("a")).unwrap(), b"before");
    std::fs::write(target.join("c"), b"after the grace").unwrap();
    assert_eq!(std::fs::read(target.join("c")).unwrap(), b"after the grace");
    println!("an agent back within the grace resumes the mount, which keeps working: ok");

    // 2. Killed and not replaced.
    b.kill();
    let killed = Instant::now();
    let t = target.clone();
    let waiting = on_thread(move || std::fs::metadata(t.join("never-looked-up")));
    let (stat, ended) = tokio::time::timeout(GRACE + MARGIN + Duration::from_secs(5), waiting)
        .await
        .expect("the call waiting on the mount still waits well past the grace")
        .unwrap();
    let took = ended - killed;
    let errno = errno_of(stat);
    assert!(
        matches!(errno, Some(Errno::ECONNABORTED) | Some(Errno::ENOTCONN)),
        "the waiting call failed with {errno:?}"
    );
    assert!(
        took >= GRACE - Duration::from_millis(100),
        "ended after {took:?}, before the grace"
    );
    assert!(took <= GRACE + MARGIN, "ended after {took:?}");
    println!(
        "a call waiting on the mount failed with {errno:?} {took:?} after the agent was killed (grace {GRACE:?})"
    );
    assert_eq!(
        errno_of(nix::sys::statfs::statfs(&target).map_err(std::io::Error::from)),
        Some(Errno::ENOTCONN)
    );
    assert_eq!(
        errno_of(std::fs::read(target.join("a"))),
        Some(Errno::ENOTCONN)
    );
    assert!(
        mounter.0.try_wait().unwrap().is_none(),
        "the mounter exited"
    );
    let entry = mountinfo::mount_at(&target)
        .unwrap()
        .expect("the dead mount stays");
    assert_eq!(entry.source, format!("agentcomputer:{VOLUME}"));
    // The mounter logs once it has ended the connection, which the waiting
    // call may see first: give the line a moment to reach the file.
    let wanted = "no node agent served the volume within the grace period";
    let deadline = Instant::now() + Duration::from_secs(5);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        if text.contains(wanted) || Instant::now() >= deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let line = text
        .lines()
        .find(|l| l.contains(wanted))
        .unwrap_or_else(|| panic!("no error logged:\n{text}"));
    assert!(
        line.contains("ERROR") && line.contains(VOLUME) && line.contains("waited"),
        "{line}"
    );
    println!(
        "no agent within the grace: ECONNABORTED/ENOTCONN, the mounter up, the mount kept: ok"
    );

    // 3. A later agent is not handed the dead connection.
    let c = AgentProcess::start(&handover, &db);
    c.expect("connected");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let asked = c.printed();
    assert!(
        !asked.iter().any(|l| l.starts_with("resume")),
        "the dead connection was handed over: {asked:?}"
    );
    assert!(
        mounter.0.try_wait().unwrap().is_none(),
        "the mounter exited"
    );
    node.node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
        volume_id: VOLUME.into(),
        target_path: target.display().to_string(),
    })
    .await
    .unwrap();
    assert!(mountinfo::mount_at(&target).unwrap().is_none());
    assert!(!target.exists());
    c.kill();
    println!("a later agent gets no resume; unpublish removes the dead mount: ok");
}
