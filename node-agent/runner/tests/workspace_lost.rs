//! The runner stops when its workspace mount ends for good, and only then:
//! a real FUSE mount made by the test (`fd=N`, as the mounter makes one) is
//! served by the real FUSE server over a real engine in a child process of
//! this test (this same executable started with
//! `WORKSPACE_LOST_ROLE=server`). The runner serves over it (its node
//! agent unreachable, so it keeps retrying) while:
//!
//! 1. the server runs: the runner runs;
//! 2. the server is killed while the test keeps the connection open (as
//!    the mounter does while it waits for the next agent): the runner's
//!    checks block, which is waiting, and it keeps running;
//! 3. the test closes the last descriptor, which ends the connection (as
//!    the mounter does after its grace period): the runner writes
//!    "workspace mount lost: ..." to its termination message file and
//!    exits with status 4 within a check interval and a margin;
//! 4. a runner started again over the dead mount stops at once the same way.
//!
//! No libtest harness (`harness = false`). Needs root and /dev/fuse (prints
//! SKIPPED otherwise).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ROLE: &str = "WORKSPACE_LOST_ROLE";
/// The runner's check interval (node-agent/runner/src/workspace.rs) is 2 s.
const INTERVAL: Duration = Duration::from_secs(2);

fn main() {
    if std::env::var(ROLE).as_deref() == Ok("server") {
        serve();
        return;
    }
    if !Path::new("/dev/fuse").exists() || !nix::unistd::geteuid().is_root() {
        println!("SKIPPED: a FUSE mount needs root and /dev/fuse");
        return;
    }
    run();
    println!("workspace_lost: ok");
}

/// Serves the connection of inherited descriptor `WORKSPACE_LOST_FD` over
/// the engine at `WORKSPACE_LOST_DB` until killed; prints `serving`.
fn serve() {
    let fd: i32 = std::env::var("WORKSPACE_LOST_FD").unwrap().parse().unwrap();
    let db = std::env::var("WORKSPACE_LOST_DB").unwrap();
    // SAFETY: the parent left this descriptor open for this process.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let fs = agentcomputer_fs::Fs::open_or_create(Path::new(&db), Default::default()).unwrap();
    let _conn = agentcomputer_fuse::serve_connection(fs, fd, Default::default()).unwrap();
    println!("serving");
    loop {
        std::thread::park();
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn runner(workspace: &Path, log: &Path) -> Killed {
    // Nothing listens there: the runner keeps retrying to attach.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    Killed(
        Command::new(env!("CARGO_BIN_EXE_agentcomputer-runner"))
            .args(["serve", "--workspace"])
            .arg(workspace)
            .env("AGENTCOMPUTER_AGENT", port.to_string())
            .env("AGENTCOMPUTER_COMPUTER", "c1")
            .env("AGENTCOMPUTER_TOKEN", "t")
            .env("AGENTCOMPUTER_TERMINATION_LOG", log)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// Waits at most `limit` for `child` to exit; its status code.
fn exit_within(child: &mut Killed, limit: Duration) -> Option<i32> {
    let began = Instant::now();
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            return status.code();
        }
        assert!(
            began.elapsed() < limit,
            "the runner still runs after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct Unmount<'a>(&'a Path);

impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

fn run() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("workspace");
    std::fs::create_dir(&ws).unwrap();
    let log = dir.path().join("termination-log");
    std::fs::write(&log, "").unwrap();
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .unwrap();
    let fd = OwnedFd::from(dev);
    nix::mount::mount(
        Some("agentcomputer:c1"),
        &ws,
        Some("fuse.agentcomputer"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some(
            format!(
                "fd={},rootmode=40000,user_id=0,group_id=0,allow_other,default_permissions",
                fd.as_raw_fd()
            )
            .as_str(),
        ),
    )
    .unwrap();
    let _unmount = Unmount(&ws);
    // dup(2) leaves close-on-exec off: the server child inherits it.
    let inherited = nix::unistd::dup(&fd).unwrap();
    let mut server = Killed(
        Command::new(std::env::current_exe().unwrap())
            .env(ROLE, "server")
            .env("WORKSPACE_LOST_FD", inherited.as_raw_fd().to_string())
            .env("WORKSPACE_LOST_DB", dir.path().join("c1.db"))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    drop(inherited);
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.0.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "serving");
    std::fs::write(ws.join("f"), b"x").unwrap();

    // 1. Served: the runner runs.
    let mut r = runner(&ws, &log);
    std::thread::sleep(INTERVAL * 2);
    assert!(
        r.0.try_wait().unwrap().is_none(),
        "the runner stopped over a live mount"
    );

    // 2. No server, the connection kept: waiting, not lost.
    server.0.kill().unwrap();
    server.0.wait().unwrap();
    std::thread::sleep(INTERVAL * 3);
    assert!(
        r.0.try_wait().unwrap().is_none(),
        "the runner stopped while the mount waited"
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "");

    // 3. The last descriptor closed: the connection ends.
    let closed = Instant::now();
    drop(fd);
    let code = exit_within(&mut r, INTERVAL + Duration::from_secs(3));
    let took = closed.elapsed();
    assert_eq!(
        code,
        Some(i32::from(agentcomputer_proto::RUNNER_EXIT_WORKSPACE_LOST))
    );
    let why = std::fs::read_to_string(&log).unwrap();
    assert!(
        why.starts_with(&format!("workspace mount lost: statfs {}: ", ws.display())),
        "{why}"
    );
    println!("the runner stopped {took:?} after the connection ended: {why}");

    // 4. A runner started over the dead mount stops at once.
    std::fs::write(&log, "").unwrap();
    let mut again = runner(&ws, &log);
    let code = exit_within(&mut again, Duration::from_secs(5));
    assert_eq!(
        code,
        Some(i32::from(agentcomputer_proto::RUNNER_EXIT_WORKSPACE_LOST))
    );
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("Transport endpoint is not connected"),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
}
