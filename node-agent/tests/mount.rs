//! Host FUSE mounts through a real `node-agent local` process: files
//! written on the mount are seen by exec at once and the reverse, unmount,
//! a SIGKILLed agent's dead mount kept (never a writable plain directory)
//! until mounted again, delete of a mounted computer, links that host tools
//! do not follow, non-empty and foreign directories refused, and files
//! shown as the mounting user's. Needs /dev/fuse and root (prints SKIPPED
//! otherwise).

mod common;

use std::path::Path;
use std::time::Duration;

use agentcomputer_proto::v1 as pb;
use common::{Agent, Client, create, sh};
use tonic::Code;

fn fuse_available() -> bool {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: /dev/fuse is absent, FUSE tests cannot run on this machine");
        return false;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: mounting from the node agent needs root");
        return false;
    }
    true
}

async fn mount(c: &mut Client, computer: &str, dir: &Path) -> Result<(), tonic::Status> {
    mount_with(c, computer, dir, false).await
}

async fn mount_with(
    c: &mut Client,
    computer: &str,
    dir: &Path,
    nonempty: bool,
) -> Result<(), tonic::Status> {
    c.mount(pb::MountRequest {
        computer: computer.into(),
        host_path: dir.to_str().unwrap().into(),
        nonempty,
    })
    .await
    .map(|_| ())
}

async fn unmount(c: &mut Client, computer: &str, dir: &Path) -> Result<(), tonic::Status> {
    c.unmount(pb::UnmountRequest {
        computer: computer.into(),
        host_path: dir.to_str().unwrap().into(),
    })
    .await
    .map(|_| ())
}

fn assert_errno(r: Result<(), tonic::Status>, code: Code, errno: &str) {
    let s = r.expect_err("call should fail");
    assert_eq!(s.code(), code, "{}", s.message());
    assert!(s.message().starts_with(errno), "{}", s.message());
}

fn recorded(data: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read(data.join("mounts.json")).unwrap();
    serde_json::from_slice(&text).unwrap()
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// A node agent with a 100 ms idle timeout, on a fresh data directory,
/// with computer `demo` mounted at a fresh directory: (data, mountpoint,
/// agent, client). `None` (skipped) without FUSE.
async fn mounted_demo() -> Option<(tempfile::TempDir, tempfile::TempDir, Agent, Client)> {
    if !fuse_available() {
        return None;
    }
    let data = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let agent = Agent::start(data.path(), &["--idle-timeout", "100ms"]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    mount(&mut c, "demo", mnt.path()).await.unwrap();
    Some((data, mnt, agent, c))
}

/// Whether computer `demo` is open (not hibernated).
async fn is_open(c: &mut Client) -> bool {
    c.get_computer(pb::GetComputerRequest {
        name: "demo".into(),
    })
    .await
    .unwrap()
    .into_inner()
    .open
}

#[tokio::test(flavor = "multi_thread")]
async fn mount_is_shared_with_exec_and_unmounts() {
    // A short idle timeout: a mounted computer must stay open anyway.
    let Some((data, mnt, agent, mut c)) = mounted_demo().await else {
        return;
    };
    assert_eq!(
        recorded(data.path()),
        vec![serde_json::json!({"computer": "demo", "path": mnt.path()})]
    );

    std::fs::write(mnt.path().join("a"), "hi\n").unwrap();
    let ran = sh(&mut c, "demo", "cat a; echo yo > b").await;
    assert_eq!((ran.stdout.as_str(), ran.code), ("hi\n", 0), "{ran:?}");
    assert_eq!(
        std::fs::read_to_string(mnt.path().join("b")).unwrap(),
        "yo\n"
    );

    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(is_open(&mut c).await, "a mounted computer was hibernated");
    assert_eq!(entries(mnt.path()), ["a", "b"]);

    assert_errno(
        mount(&mut c, "demo", mnt.path()).await,
        Code::FailedPrecondition,
        "EBUSY",
    );
    assert_errno(
        mount(&mut c, "demo", Path::new("rel/dir")).await,
        Code::InvalidArgument,
        "EINVAL",
    );
    let other = tempfile::tempdir().unwrap();
    assert_errno(
        mount(&mut c, "demo", &other.path().join("missing")).await,
        Code::NotFound,
        "ENOENT",
    );
    std::fs::write(other.path().join("f"), "").unwrap();
    assert_errno(
        mount(&mut c, "demo", &other.path().join("f")).await,
        Code::FailedPrecondition,
        "ENOTDIR",
    );
    let missing = mount(&mut c, "nope", other.path()).await.unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);

    unmount(&mut c, "demo", mnt.path()).await.unwrap();
    assert!(entries(mnt.path()).is_empty(), "still mounted");
    assert!(recorded(data.path()).is_empty());
    let err = unmount(&mut c, "demo", mnt.path()).await.unwrap_err();
    assert_errno(Err::<(), _>(err.clone()), Code::InvalidArgument, "EINVAL");
    assert!(
        err.message().contains("is not mounted at"),
        "{}",
        err.message()
    );
    // The files stay in the computer.
    let ran = sh(&mut c, "demo", "cat a b").await;
    assert_eq!(ran.stdout, "hi\nyo\n");
    assert!(agent.stop().await.success());
}

/// A killed agent's mount stays dead across the restart: a write to the
/// path fails (ENOTCONN) instead of landing in the directory underneath,
/// until `mount` at the same path replaces the dead mount (or `unmount`
/// removes it).
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_agents_mount_stays_dead_until_mounted_again() {
    if !fuse_available() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    // Without the descriptor holder: a killed agent's mounts end with it.
    const OFF: &[&str] = &["--keep-mounts", "off"];
    let agent = Agent::start(data.path(), OFF);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    mount(&mut c, "demo", mnt.path()).await.unwrap();
    // Durable at fsync, as on a local disk (the mount commits requests in
    // groups: docs/durability.md).
    let mut f = std::fs::File::create(mnt.path().join("a")).unwrap();
    std::io::Write::write_all(&mut f, b"hi\n").unwrap();
    f.sync_all().unwrap();
    drop(f);
    drop(c);
    // Dropping the agent sends SIGKILL: no chance to unmount.
    drop(agent);
    assert_eq!(
        nix::sys::statfs::statfs(mnt.path()).err(),
        Some(nix::errno::Errno::ENOTCONN),
        "the killed agent's mount should be dead"
    );

    let agent = Agent::start(data.path(), OFF);
    let mut c = agent.client().await;
    // The restarted agent serves and has not turned the path into a plain
    // directory: writes fail loudly.
    c.list_computers(pb::ListComputersRequest {}).await.unwrap();
    let err = std::fs::write(mnt.path().join("late"), "lost?\n").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOTCONN), "{err}");
    assert_eq!(
        recorded(data.path()),
        vec![serde_json::json!({"computer": "demo", "path": mnt.path()})],
        "the dead mount must stay recorded"
    );

    // Mounting at the same path replaces the dead mount.
    mount(&mut c, "demo", mnt.path()).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(mnt.path().join("a")).unwrap(),
        "hi\n"
    );
    assert!(!mnt.path().join("late").exists());
    assert_eq!(
        recorded(data.path()),
        vec![serde_json::json!({"computer": "demo", "path": mnt.path()})]
    );
    // A clean stop unmounts; nothing was ever written underneath.
    drop(c);
    assert!(agent.stop().await.success());
    assert!(
        entries(mnt.path()).is_empty(),
        "files landed under the mount"
    );
    assert!(recorded(data.path()).is_empty());

    // Killed again: `unmount` removes the dead mount, and the path is a
    // plain (empty) directory again only then.
    let agent = Agent::start(data.path(), OFF);
    let mut c = agent.client().await;
    mount(&mut c, "demo", mnt.path()).await.unwrap();
    drop(c);
    drop(agent);
    let agent = Agent::start(data.path(), OFF);
    let mut c = agent.client().await;
    assert_errno(
        unmount(&mut c, "other", mnt.path()).await,
        Code::InvalidArgument,
        "EINVAL",
    );
    assert_eq!(
        nix::sys::statfs::statfs(mnt.path()).err(),
        Some(nix::errno::Errno::ENOTCONN)
    );
    unmount(&mut c, "demo", mnt.path()).await.unwrap();
    assert!(entries(mnt.path()).is_empty());
    assert!(recorded(data.path()).is_empty());
    drop(c);
    assert!(agent.stop().await.success());
}

/// Appends and fsyncs numbered records to `log` until `stop` is set;
/// returns the acknowledged count, or the first error with its record.
fn append_records(
    log: std::path::PathBuf,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    acked: std::sync::Arc<std::sync::Mutex<Vec<std::time::Instant>>>,
) -> Result<usize, String> {
    use std::io::Write;
    let mut n = 0;
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| format!("open for record {n}: {e}"))?;
        writeln!(f, "{n}").map_err(|e| format!("write of record {n}: {e}"))?;
        f.sync_all()
            .map_err(|e| format!("fsync of record {n}: {e}"))?;
        acked.lock().unwrap().push(std::time::Instant::now());
        n += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(n)
}

/// Longest time between two acknowledged records.
/// A thread appending records with [`append_records`] until finished,
/// with the times of the records it saw acknowledged.
struct RecordWriter {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    acked: std::sync::Arc<std::sync::Mutex<Vec<std::time::Instant>>>,
    thread: std::thread::JoinHandle<Result<usize, String>>,
}

impl RecordWriter {
    fn start(log: std::path::PathBuf) -> RecordWriter {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let thread = {
            let (stop, acked) = (stop.clone(), acked.clone());
            std::thread::spawn(move || append_records(log, stop, acked))
        };
        RecordWriter {
            stop,
            acked,
            thread,
        }
    }

    /// The acknowledgement times so far.
    fn acked(&self) -> std::sync::MutexGuard<'_, Vec<std::time::Instant>> {
        self.acked.lock().unwrap()
    }

    /// Waits (up to 30 s) for `more` records to be acknowledged.
    async fn wait_for(&self, more: usize) {
        let start = self.acked().len();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while self.acked().len() < start + more {
            assert!(std::time::Instant::now() < deadline, "the writer is stuck");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops the writer; its record count, or the error it saw.
    fn finish(self) -> Result<usize, String> {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.thread.join().unwrap()
    }
}

fn longest_gap(acked: &[std::time::Instant]) -> Duration {
    acked
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default()
}

/// The descriptor holder keeps host mounts alive across the agent: a
/// writer appending and fsyncing through the mount sees no error while the
/// agent is SIGKILLed and started again, and while it hands over to a new
/// process (SIGUSR2); every acknowledged record is in the computer, and a
/// file kept open stays readable. When no agent comes back within the
/// grace period, the holder closes the connection: the mount fails with
/// ECONNABORTED, then ENOTCONN (never a hang), and the next agent removes
/// it on unmount.
#[tokio::test(flavor = "multi_thread")]
async fn host_mounts_survive_a_killed_and_a_replaced_agent() {
    if !fuse_available() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    const GRACE: &[&str] = &["--mount-grace", "3s"];
    let agent = Agent::start(data.path(), GRACE);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    mount(&mut c, "demo", mnt.path()).await.unwrap();
    std::fs::write(mnt.path().join("kept"), "kept open\n").unwrap();
    let mut kept = std::fs::File::open(mnt.path().join("kept")).unwrap();
    drop(c);

    let writer = RecordWriter::start(mnt.path().join("log"));
    writer.wait_for(10).await;

    // 1. SIGKILL, then a new agent.
    drop(agent);
    let agent = Agent::start(data.path(), GRACE);
    writer.wait_for(10).await;
    let crash_gap = longest_gap(&writer.acked());
    let mut text = String::new();
    std::io::Read::read_to_string(&mut kept, &mut text).unwrap();
    assert_eq!(text, "kept open\n");

    // 2. A hand-over: SIGUSR2 leaves the mounts, the next process resumes.
    let before = writer.acked().len();
    assert!(
        agent
            .stop_with(nix::sys::signal::Signal::SIGUSR2)
            .await
            .success()
    );
    let agent = Agent::start(data.path(), GRACE);
    writer.wait_for(10).await;
    let handover_gap = longest_gap(&writer.acked()[before.saturating_sub(1)..]);
    eprintln!("longest pause seen by the writer: crash {crash_gap:?}, hand-over {handover_gap:?}");
    assert!(
        handover_gap < Duration::from_secs(1),
        "hand-over pause {handover_gap:?}"
    );

    let written = writer.finish().expect("the writer saw no error");
    let mut c = agent.client().await;
    let ran = sh(&mut c, "demo", "wc -l < log; tail -1 log").await;
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_eq!(
        ran.stdout,
        format!("{written}\n{}\n", written - 1),
        "every acknowledged record"
    );

    // 3. Killed, and no agent within the grace: the holder lets go.
    drop(c);
    drop(kept);
    drop(agent);
    let t = std::time::Instant::now();
    // A call waiting when the holder lets go fails with ECONNABORTED (the
    // kernel aborts the connection), later ones with ENOTCONN.
    let err = std::fs::metadata(mnt.path().join("log")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ECONNABORTED), "{err}");
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
    let err = std::fs::metadata(mnt.path().join("log")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOTCONN), "{err}");
    let agent = Agent::start(data.path(), GRACE);
    let mut c = agent.client().await;
    unmount(&mut c, "demo", mnt.path()).await.unwrap();
    assert!(entries(mnt.path()).is_empty());
    drop(c);
    assert!(agent.stop().await.success());
}

/// The pid of the descriptor holder listening in data directory `data`
/// (`SO_PEERCRED` of a connection to its socket: the listener's
/// credentials); `None` when none listens. The holder refuses the
/// connection itself (its agent is connected), which changes nothing.
fn holder_pid(data: &Path) -> Option<i32> {
    use nix::sys::socket::{
        AddressFamily, SockFlag, SockType, UnixAddr, connect, getsockopt, socket, sockopt,
    };
    use std::os::fd::AsRawFd;
    let sock = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .ok()?;
    let addr = UnixAddr::new(&data.join("fuse-holder.sock")).ok()?;
    connect(sock.as_raw_fd(), &addr).ok()?;
    getsockopt(&sock, sockopt::PeerCredentials)
        .ok()
        .map(|c| c.pid())
}

/// An agent logging at `info` to a pipe: the agent and a receiver of its
/// log lines (each also printed to the test's stderr).
fn agent_with_log(data: &Path, extra: &[&str]) -> (Agent, std::sync::mpsc::Receiver<String>) {
    let mut agent = Agent::start_with(data, extra, |cmd| {
        cmd.env("RUST_LOG", "info")
            .stderr(std::process::Stdio::piped());
    });
    let stderr = agent.take_stderr();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            eprintln!("agent: {line}");
            let _ = tx.send(line);
        }
    });
    (agent, rx)
}

/// Waits up to `secs` for a line of `log` containing `text`.
fn wait_for_line(log: &std::sync::mpsc::Receiver<String>, text: &str, secs: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match log.recv_timeout(left) {
            Ok(line) if line.contains(text) => return,
            Ok(_) => {}
            Err(e) => panic!("no log line with {text:?} within {secs} s ({e})"),
        }
    }
}

/// A killed descriptor holder is replaced: the agent notices the link
/// broke, starts a new holder and hands it every connection it serves,
/// so a later `kill -9` of the agent still leaves the mount to the next
/// agent. A writer appending and fsyncing through the mount sees no error
/// throughout, and every acknowledged record is in the computer.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_holder_is_replaced_and_mounts_still_survive_the_agent() {
    if !fuse_available() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    const GRACE: &[&str] = &["--mount-grace", "20s"];
    let (agent, log) = agent_with_log(data.path(), GRACE);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    mount(&mut c, "demo", mnt.path()).await.unwrap();
    drop(c);

    let writer = RecordWriter::start(mnt.path().join("log"));
    writer.wait_for(10).await;

    // The holder is killed; the agent starts a new one and keeps the
    // mount's connection with it again.
    let first = holder_pid(data.path()).expect("a holder listens");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_for_line(
        &log,
        "a new FUSE descriptor holder keeps the host mounts again",
        30,
    );
    let second = holder_pid(data.path()).expect("a new holder listens");
    assert_ne!(first, second, "the same holder still answers");
    writer.wait_for(10).await;

    // Now the agent is killed: the new holder keeps the mount for the next
    // agent.
    drop(agent);
    let agent = Agent::start(data.path(), GRACE);
    writer.wait_for(10).await;
    let gap = longest_gap(&writer.acked());
    let written = writer.finish().expect("the writer saw no error");
    eprintln!("longest pause seen by the writer: {gap:?}");
    let mut c = agent.client().await;
    let ran = sh(&mut c, "demo", "wc -l < log; tail -1 log").await;
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_eq!(
        ran.stdout,
        format!("{written}\n{}\n", written - 1),
        "every acknowledged record"
    );
    drop(c);
    assert!(agent.stop().await.success());
    assert!(entries(mnt.path()).is_empty(), "a clean stop unmounts");
}

/// A kill between mount(2) and the holder's `keep` leaves no unrecorded
/// dead mount: the agent records the target before mounting, so the next
/// agent finds the dead mount there (its connection held by nobody) and
/// keeps it as a recorded dead mount, which `unmount` removes and `mount`
/// replaces. The window is held open without any test hook: the holder is
/// stopped (SIGSTOP), so the agent's `keep` waits for an answer after
/// mount(2); the agent is then killed, and the stopped holder with the
/// `keep` it never read.
#[tokio::test(flavor = "multi_thread")]
async fn a_kill_between_mount_and_keep_leaves_a_recorded_dead_mount() {
    use nix::sys::signal::{Signal, kill};
    if !fuse_available() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let agent = Agent::start(data.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let holder = nix::unistd::Pid::from_raw(holder_pid(data.path()).expect("a holder listens"));
    // Killed however the test ends: a stopped holder would keep the mount
    // alive and unserved.
    struct KillOnDrop(nix::unistd::Pid);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = kill(self.0, Signal::SIGKILL);
        }
    }
    let _killer = KillOnDrop(holder);
    kill(holder, Signal::SIGSTOP).unwrap();
    let mounting = {
        let mut c = agent.client().await;
        let path = mnt.path().to_path_buf();
        tokio::spawn(async move { mount(&mut c, "demo", &path).await })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while agentcomputer_csi::mountinfo::count_at(mnt.path()).unwrap() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no mount(2) within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The intent is on disk before mount(2).
    assert_eq!(
        recorded(data.path()),
        vec![serde_json::json!({"computer": "demo", "path": mnt.path()})],
        "the target is recorded before it is mounted"
    );
    drop(c);
    drop(agent);
    kill(holder, Signal::SIGKILL).unwrap();
    assert!(mounting.await.unwrap().is_err(), "the agent was killed");
    // Nobody holds the connection any more: the kernel aborted it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while nix::sys::statfs::statfs(mnt.path()).err() != Some(nix::errno::Errno::ENOTCONN) {
        assert!(
            std::time::Instant::now() < deadline,
            "the mount is not dead"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let agent = Agent::start(data.path(), &[]);
    let mut c = agent.client().await;
    c.list_computers(pb::ListComputersRequest {}).await.unwrap();
    // Kept dead and recorded: writes fail, nothing lands underneath.
    let err = std::fs::write(mnt.path().join("late"), "lost?\n").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOTCONN), "{err}");
    assert_eq!(
        recorded(data.path()),
        vec![serde_json::json!({"computer": "demo", "path": mnt.path()})],
        "the dead mount must stay recorded"
    );
    // `unmount` removes it, and the path is a plain directory again.
    unmount(&mut c, "demo", mnt.path()).await.unwrap();
    assert_eq!(
        agentcomputer_csi::mountinfo::count_at(mnt.path()).unwrap(),
        0
    );
    assert!(entries(mnt.path()).is_empty());
    assert!(recorded(data.path()).is_empty());
    // And it mounts again.
    mount(&mut c, "demo", mnt.path()).await.unwrap();
    std::fs::write(mnt.path().join("a"), "hi\n").unwrap();
    let ran = sh(&mut c, "demo", "cat a").await;
    assert_eq!(ran.stdout, "hi\n");
    drop(c);
    assert!(agent.stop().await.success());
    assert!(entries(mnt.path()).is_empty(), "a clean stop unmounts");
}

/// A computer's symbolic link pointing at a host file: host tools writing
/// through the mount get ELOOP (`nosymfollow`) and the host file stays as
/// it was; `readlink` still shows the link and the computer's own runtimes
/// still resolve links.
#[tokio::test(flavor = "multi_thread")]
async fn host_tools_do_not_follow_a_computers_symlinks() {
    let Some((_data, mnt, agent, mut c)) = mounted_demo().await else {
        return;
    };
    let host = tempfile::tempdir().unwrap();
    let victim = host.path().join("victim.txt");
    std::fs::write(&victim, "host data\n").unwrap();
    let script = format!(
        "ln -s {} victim && echo in-computer > a.txt && ln -s a.txt rel && cat rel",
        victim.display()
    );
    let ran = sh(&mut c, "demo", &script).await;
    assert_eq!(
        (ran.stdout.as_str(), ran.code),
        ("in-computer\n", 0),
        "{ran:?}"
    );

    let link = mnt.path().join("victim");
    let err = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&link)
        .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{err}");
    let err = std::fs::write(&link, "pwned\n").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{err}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "host data\n");
    assert_eq!(std::fs::read_link(&link).unwrap(), victim);
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // Links inside the computer are not followed on the host either.
    let err = std::fs::read(mnt.path().join("rel")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{err}");
    assert_eq!(
        std::fs::read_to_string(mnt.path().join("a.txt")).unwrap(),
        "in-computer\n"
    );
    // The mount says so in its options (proc(5), mountinfo field 6).
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = info
        .lines()
        .rfind(|l| l.split(' ').nth(4) == Some(mnt.path().to_str().unwrap()))
        .expect("the mount in mountinfo");
    let options: Vec<&str> = line.split(' ').nth(5).unwrap().split(',').collect();
    for o in ["nosymfollow", "nosuid", "nodev", "rw"] {
        assert!(options.contains(&o), "{o} missing: {line}");
    }
    unmount(&mut c, "demo", mnt.path()).await.unwrap();
    assert!(agent.stop().await.success());
}

/// A directory with entries is refused unless `nonempty` is asked for;
/// with it the entries are hidden while mounted and back afterwards.
#[tokio::test(flavor = "multi_thread")]
async fn mount_over_a_non_empty_directory_needs_nonempty() {
    if !fuse_available() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("mine.txt"), "keep\n").unwrap();
    let agent = Agent::start(data.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let err = mount(&mut c, "demo", dir.path()).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
    assert_eq!(
        err.message(),
        format!(
            "ENOTEMPTY: cannot mount over {}: it is not empty, and the mount would hide its files until unmounted; use an empty directory, or ask for it with --nonempty",
            dir.path().display()
        )
    );
    assert_eq!(entries(dir.path()), ["mine.txt"], "something was mounted");

    mount_with(&mut c, "demo", dir.path(), true).await.unwrap();
    assert!(entries(dir.path()).is_empty());
    unmount(&mut c, "demo", dir.path()).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("mine.txt")).unwrap(),
        "keep\n"
    );
    assert!(agent.stop().await.success());
}

/// Files on a host mount show as the mounting user's (the agent's euid and
/// egid), whoever made them, so `git` accepts a repository on it; files made
/// through the mount are stored as the sandbox user (1000), and chown to
/// anyone else is refused.
#[tokio::test(flavor = "multi_thread")]
async fn files_on_a_host_mount_belong_to_the_mounting_user() {
    use std::os::unix::fs::MetadataExt;
    let Some((_data, mnt, agent, mut c)) = mounted_demo().await else {
        return;
    };
    let me = (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    );
    let ran = sh(&mut c, "demo", "mkdir proj && echo hi > proj/a.txt").await;
    assert_eq!(ran.code, 0, "{ran:?}");
    let proj = mnt.path().join("proj");
    for p in [mnt.path().to_path_buf(), proj.clone(), proj.join("a.txt")] {
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!((m.uid(), m.gid()), me, "{}", p.display());
    }
    // Made through the mount: shown as ours, stored as the sandbox user.
    std::fs::write(proj.join("b.txt"), "b\n").unwrap();
    let m = std::fs::metadata(proj.join("b.txt")).unwrap();
    assert_eq!((m.uid(), m.gid()), me);
    let info = c
        .stat(pb::StatRequest {
            computer: "demo".into(),
            path: "proj/b.txt".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((info.uid, info.gid), (1000, 1000));
    let err = nix::unistd::chown(
        &proj.join("b.txt"),
        Some(nix::unistd::Uid::from_raw(4242)),
        None,
    )
    .unwrap_err();
    assert_eq!(err, nix::errno::Errno::EPERM);
    nix::unistd::chown(
        &proj.join("b.txt"),
        Some(nix::unistd::Uid::from_raw(me.0)),
        None,
    )
    .unwrap();

    if which("git") {
        let git = |args: &[&str]| {
            let home = tempfile::tempdir().unwrap();
            std::process::Command::new("git")
                .args(args)
                .current_dir(&proj)
                .env("HOME", home.path())
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env_remove("GIT_DIR")
                .output()
                .unwrap()
        };
        let out = git(&["init", "-q"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = git(&["status", "--porcelain"]);
        assert!(
            out.status.success(),
            "git status on the mount: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "?? a.txt\n?? b.txt\n");
    } else {
        eprintln!("git is not installed: ownership checked with stat only");
    }
    unmount(&mut c, "demo", mnt.path()).await.unwrap();
    assert!(agent.stop().await.success());
}

/// Whether `program` is on the PATH.
fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_a_mounted_computer_unmounts_it() {
    if !fuse_available() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let agent = Agent::start(data.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    mount(&mut c, "demo", mnt.path()).await.unwrap();
    std::fs::write(mnt.path().join("a"), "hi\n").unwrap();
    c.delete_computer(pb::DeleteComputerRequest {
        name: "demo".into(),
    })
    .await
    .unwrap();
    assert!(std::fs::metadata(mnt.path()).unwrap().is_dir());
    assert!(entries(mnt.path()).is_empty(), "delete left the mount");
    assert!(recorded(data.path()).is_empty());
    assert!(agent.stop().await.success());
}

/// A busy unmount detaches lazily and the session keeps serving the
/// processes that hold files; the computer stays open (one engine) until
/// they let go, however short the idle timeout.
#[tokio::test(flavor = "multi_thread")]
async fn a_lazily_detached_mount_keeps_its_computer_open_until_released() {
    // A short idle timeout: a mounted computer must stay open anyway.
    let Some((_data, mnt, agent, mut c)) = mounted_demo().await else {
        return;
    };
    std::fs::write(mnt.path().join("held"), "before\n").unwrap();
    let mut held = std::fs::OpenOptions::new()
        .append(true)
        .open(mnt.path().join("held"))
        .unwrap();
    unmount(&mut c, "demo", mnt.path()).await.unwrap();
    assert!(entries(mnt.path()).is_empty(), "the path is free at once");

    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(is_open(&mut c).await, "closed under a live detached mount");
    // The detached session and the runtimes share one engine.
    use std::io::Write;
    held.write_all(b"through the detached mount\n").unwrap();
    let ran = sh(&mut c, "demo", "cat held").await;
    assert_eq!(ran.stdout, "before\nthrough the detached mount\n");

    drop(held);
    let mut closed = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if !is_open(&mut c).await {
            closed = true;
            break;
        }
    }
    assert!(
        closed,
        "the computer never closed after the last file was released"
    );
    assert!(agent.stop().await.success());
}

/// The agent mounts only over directories of its own user: another user's
/// directory is refused with EPERM and a message naming both users, and
/// nothing is mounted there.
#[tokio::test(flavor = "multi_thread")]
async fn mount_over_another_users_directory_is_refused() {
    if !fuse_available() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let host = tempfile::tempdir().unwrap();
    let theirs = host.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    nix::unistd::chown(
        &theirs,
        Some(nix::unistd::Uid::from_raw(65534)),
        Some(nix::unistd::Gid::from_raw(65534)),
    )
    .unwrap();
    let agent = Agent::start(data.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let err = mount(&mut c, "demo", &theirs).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{}", err.message());
    assert_eq!(
        err.message(),
        format!(
            "EPERM: cannot mount over {}: it belongs to uid 65534, not to the node agent's user (uid 0)",
            theirs.display()
        )
    );
    assert_eq!(
        nix::sys::statfs::statfs(&theirs).unwrap().filesystem_type(),
        nix::sys::statfs::statfs(host.path())
            .unwrap()
            .filesystem_type(),
        "something was mounted"
    );
    assert!(!data.path().join("mounts.json").exists() || recorded(data.path()).is_empty());
    // Their own directory is fine.
    let ours = host.path().join("ours");
    std::fs::create_dir(&ours).unwrap();
    mount(&mut c, "demo", &ours).await.unwrap();
    unmount(&mut c, "demo", &ours).await.unwrap();
    assert!(agent.stop().await.success());
}

/// A path through a symbolic link another user planted is refused with
/// ELOOP naming the path, whether the link is the last component or one
/// in the middle: following it would mount over a directory the caller
/// never named (here one of the agent's own user, which passes the
/// ownership check). Nothing is mounted anywhere and nothing is recorded.
#[tokio::test(flavor = "multi_thread")]
async fn mount_through_another_users_symlink_is_refused() {
    if !fuse_available() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let host = tempfile::tempdir().unwrap();
    let nobody = (
        Some(nix::unistd::Uid::from_raw(65534)),
        Some(nix::unistd::Gid::from_raw(65534)),
    );
    // Root-owned, empty directories the planted links point at: `target`,
    // and `parent/sub`.
    let target = host.path().join("target");
    std::fs::create_dir(&target).unwrap();
    let parent = host.path().join("parent");
    std::fs::create_dir_all(parent.join("sub")).unwrap();
    let theirs = host.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    nix::unistd::chown(&theirs, nobody.0, nobody.1).unwrap();
    let plant = |link: &Path, to: &Path| {
        std::os::unix::fs::symlink(to, link).unwrap();
        nix::unistd::fchownat(
            nix::fcntl::AT_FDCWD,
            link,
            nobody.0,
            nobody.1,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .unwrap();
    };
    let last = theirs.join("link");
    plant(&last, &target);
    plant(&theirs.join("up"), &parent);
    let middle = theirs.join("up").join("sub");
    let agent = Agent::start(data.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let fs_type = |p: &Path| nix::sys::statfs::statfs(p).unwrap().filesystem_type();
    for path in [&last, &middle] {
        let err = mount(&mut c, "demo", path).await.unwrap_err();
        assert_eq!(
            (err.code(), err.message()),
            (
                Code::FailedPrecondition,
                format!(
                    "ELOOP: cannot mount at {}: a component of the path is a symbolic link, and host mounts follow none; give the path without links",
                    path.display()
                )
                .as_str()
            ),
        );
        for dir in [&target, &parent.join("sub")] {
            assert_eq!(
                fs_type(dir),
                fs_type(host.path()),
                "something was mounted at {}",
                dir.display()
            );
        }
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mountinfo.contains(host.path().to_str().unwrap()),
        "{mountinfo}"
    );
    assert!(!data.path().join("mounts.json").exists() || recorded(data.path()).is_empty());
    // The agent is up, and the real path mounts.
    mount(&mut c, "demo", &target).await.unwrap();
    unmount(&mut c, "demo", &target).await.unwrap();
    assert!(agent.stop().await.success());
}

/// isatty(3) on a mounted file (an ioctl, TCGETS) says "not a terminal"
/// with `ENOTTY`, as a local file does, and the agent's log stays quiet:
/// every Python `open()` asks it.
#[tokio::test]
async fn ioctls_on_mount_files_are_enotty_and_not_logged() {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    if !fuse_available() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let mut agent = Agent::start_with(data.path(), &[], |cmd| {
        cmd.stderr(std::process::Stdio::piped());
    });
    let mut log = agent.take_stderr();
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    mount(&mut c, "demo", mnt.path()).await.unwrap();
    let file = mnt.path().join("notes.txt");
    std::fs::write(&file, "x").unwrap();
    let opened = std::fs::File::open(&file).unwrap();
    for _ in 0..20 {
        // SAFETY: isatty only reads the descriptor, which `opened` owns.
        let tty = unsafe { libc::isatty(opened.as_raw_fd()) };
        let errno = std::io::Error::last_os_error().raw_os_error();
        assert_eq!((tty, errno), (0, Some(libc::ENOTTY)));
    }
    drop(opened);
    unmount(&mut c, "demo", mnt.path()).await.unwrap();
    drop(c);
    assert!(agent.stop().await.success());
    let mut text = String::new();
    log.read_to_string(&mut text).unwrap();
    assert!(!text.contains("ioctl"), "the agent logged ioctls:\n{text}");
}

/// An agent that is not root cannot make a host mount safe (`nosymfollow`
/// takes CAP_SYS_ADMIN): it refuses at once, in one line saying so and
/// what to do, instead of failing inside the mount with an errno that
/// names neither cause (`EACCES` from a `/dev/fuse` of mode 0600, `ENOENT`
/// without `fusermount3`).
#[tokio::test]
async fn an_agent_that_is_not_root_refuses_mounts_saying_why() {
    use std::os::unix::fs::PermissionsExt;
    if !fuse_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let nobody = Some(nix::unistd::Uid::from_raw(65534));
    let nogroup = Some(nix::unistd::Gid::from_raw(65534));
    let data = dir.path().join("data");
    let mnt = dir.path().join("mnt");
    for d in [&data, &mnt] {
        std::fs::create_dir(d).unwrap();
        nix::unistd::chown(d, nobody, nogroup).unwrap();
    }
    let agent = Agent::start_as(&data, &[], 65534);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let err = mount(&mut c, "demo", &mnt).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{}", err.message());
    assert_eq!(
        err.message(),
        format!(
            "EPERM: cannot mount at {}: this node agent runs as uid 65534, and host mounts need one running as root (they refuse symbolic links with nosymfollow, which takes CAP_SYS_ADMIN); start node-agent local as root to mount",
            mnt.display()
        )
    );
    assert_eq!(
        nix::sys::statfs::statfs(&mnt).unwrap().filesystem_type(),
        nix::sys::statfs::statfs(dir.path())
            .unwrap()
            .filesystem_type(),
        "something was mounted"
    );
    assert!(!data.join("mounts.json").exists() || recorded(&data).is_empty());
    // The rest of the agent works.
    assert_eq!(sh(&mut c, "demo", "echo ok").await.stdout, "ok\n");
    assert!(agent.stop().await.success());
}

/// Unmount never follows a link: another user who owns a directory of
/// the mount's path moves the mount away and plants links that lead the
/// recorded path to a tmpfs (the decoy). The unmount is refused with
/// ELOOP naming the path and the decoy stays mounted; with a plain
/// directory planted instead it is refused with EBUSY. The moved mount
/// is not forgotten, by this agent nor by the next one after a kill:
/// deleting the computer detaches it where it now is, and nothing of the
/// computer stays mounted anywhere.
#[tokio::test(flavor = "multi_thread")]
async fn unmount_through_a_planted_link_is_refused_and_delete_still_detaches() {
    use std::os::unix::process::CommandExt;
    if !fuse_available() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let host = tempfile::tempdir().unwrap();
    let decoy = host.path().join("tm");
    std::fs::create_dir(&decoy).unwrap();
    nix::mount::mount(
        Some("tmpfs"),
        &decoy,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        Some("size=1m"),
    )
    .unwrap();
    std::fs::write(decoy.join("file"), "precious\n").unwrap();
    let ev = host.path().join("ev");
    let mnt = ev.join("b").join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let nobody = (
        Some(nix::unistd::Uid::from_raw(65534)),
        Some(nix::unistd::Gid::from_raw(65534)),
    );
    nix::unistd::chown(&ev, nobody.0, nobody.1).unwrap();
    nix::unistd::chown(&ev.join("b"), nobody.0, nobody.1).unwrap();
    let as_nobody = |script: &str| {
        let out = std::process::Command::new("sh")
            .args(["-c", script])
            .current_dir(&ev)
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        assert!(out.status.success(), "{script}: {out:?}");
    };
    let agent = Agent::start(data.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "q1", 0).await;
    mount(&mut c, "q1", &mnt).await.unwrap();
    std::fs::write(mnt.join("mine"), "computer\n").unwrap();
    let decoy_text = decoy.to_str().unwrap();
    as_nobody(&format!(
        "mv b b_old && mkdir y && ln -s {decoy_text} y/mnt && ln -s {}/y b",
        ev.display()
    ));
    let fs_type = |p: &Path| nix::sys::statfs::statfs(p).unwrap().filesystem_type();
    let decoy_intact = |when: &str| {
        assert_eq!(
            fs_type(&decoy),
            nix::sys::statfs::TMPFS_MAGIC,
            "the decoy was unmounted {when}"
        );
        assert_eq!(
            std::fs::read_to_string(decoy.join("file")).unwrap(),
            "precious\n"
        );
    };

    let err = unmount(&mut c, "q1", &mnt).await.unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (
            Code::FailedPrecondition,
            format!(
                "ELOOP: cannot unmount at {}: a component of the path is a symbolic link, and host mounts follow none; nothing was unmounted, and the computer's mount stays until it is unmounted by a path without links or the computer is deleted",
                mnt.display()
            )
            .as_str()
        )
    );
    decoy_intact("through a link");
    // The mount is still known, and still the computer's.
    assert_eq!(recorded(data.path()).len(), 1, "the mount was forgotten");
    assert_eq!(
        std::fs::read_to_string(ev.join("b_old/mnt/mine")).unwrap(),
        "computer\n"
    );

    // A plain directory where the mount was: not the computer's mount.
    as_nobody("rm b && mkdir -p b/mnt");
    let err = unmount(&mut c, "q1", &mnt).await.unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (
            Code::FailedPrecondition,
            format!(
                "EBUSY: cannot unmount at {}: the path no longer leads to this computer's mount (a directory of it was moved or replaced, or another mount covers it); nothing was unmounted, and the computer's mount stays until the path leads to it again or the computer is deleted",
                mnt.display()
            )
            .as_str()
        )
    );
    decoy_intact("through a replaced directory");
    assert_eq!(recorded(data.path()).len(), 1, "the mount was forgotten");

    // A killed agent's successor takes the mount over and refuses alike.
    as_nobody("rm -r b && ln -s y b");
    drop(c);
    drop(agent);
    let agent = Agent::start(data.path(), &[]);
    let mut c = agent.client().await;
    let err = unmount(&mut c, "q1", &mnt).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
    assert!(err.message().starts_with("ELOOP: "), "{}", err.message());
    decoy_intact("by the next agent");
    assert_eq!(
        std::fs::read_to_string(ev.join("b_old/mnt/mine")).unwrap(),
        "computer\n"
    );

    c.delete_computer(pb::DeleteComputerRequest { name: "q1".into() })
        .await
        .unwrap();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mountinfo.contains("agentcomputer:q1"),
        "the deleted computer is still mounted: {mountinfo}"
    );
    assert!(entries(&ev.join("b_old/mnt")).is_empty());
    assert!(recorded(data.path()).is_empty());
    decoy_intact("by the delete");
    assert!(agent.stop().await.success());
    nix::mount::umount(&decoy).unwrap();
}
