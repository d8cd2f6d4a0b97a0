//! Host FUSE mounts through a real `node-agent local` process: files
//! written on the mount are seen by exec at once and the reverse, unmount,
//! a SIGKILLed agent's stale mount removed at the next start, and delete of
//! a mounted computer. Needs /dev/fuse and root (prints SKIPPED otherwise).

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
    c.mount(pb::MountRequest {
        computer: computer.into(),
        host_path: dir.to_str().unwrap().into(),
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

#[tokio::test(flavor = "multi_thread")]
async fn stale_mount_of_a_killed_agent_is_removed_at_restart() {
    if !fuse_available() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let agent = Agent::start(data.path(), &[]);
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

    let agent = Agent::start(data.path(), &[]);
    let meta = std::fs::metadata(mnt.path()).expect("stat of the old mountpoint");
    assert!(meta.is_dir());
    assert!(
        entries(mnt.path()).is_empty(),
        "the stale mount is still there"
    );
    assert!(recorded(data.path()).is_empty());

    let mut c = agent.client().await;
    mount(&mut c, "demo", mnt.path()).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(mnt.path().join("a")).unwrap(),
        "hi\n"
    );
    // A clean stop unmounts.
    drop(c);
    assert!(agent.stop().await.success());
    assert!(entries(mnt.path()).is_empty(), "shutdown left the mount");
    assert!(recorded(data.path()).is_empty());
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
