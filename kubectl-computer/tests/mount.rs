//! `mount` and `unmount` through the real `kubectl-computer` binary against
//! a node agent served in-process, with a real FUSE mount. Needs /dev/fuse
//! and root (prints SKIPPED otherwise).

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use agentcomputer_node_agent::{LocalConfig, serve};

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

/// The CLI in `cwd` against `url`, with the agent token from `token_file`.
fn command(url: &str, token_file: &Path, cwd: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubectl-computer"));
    cmd.current_dir(cwd)
        .env("AGENTCOMPUTER_ENDPOINT", url)
        .env("AGENTCOMPUTER_TOKEN_FILE", token_file)
        .env_remove("AGENTCOMPUTER_TOKEN");
    cmd
}

/// Runs the CLI in `cwd` against `url`; asserts success, returns stdout.
fn cli(url: &str, token_file: &Path, cwd: &Path, args: &[&str]) -> String {
    let out: Output = command(url, token_file, cwd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {:?}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn mount_exec_and_unmount() {
    if !fuse_available() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let host = tempfile::tempdir().unwrap();
    let mnt = host.path().join("m");
    std::fs::create_dir(&mnt).unwrap();

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let token = agentcomputer_node_agent::local::prepare(data.path()).unwrap();
    let token_file = host.path().join("token");
    std::fs::write(&token_file, token.expose()).unwrap();
    let config = LocalConfig {
        data_dir: data.path().to_path_buf(),
        idle_timeout: Duration::from_secs(300),
        tls: None,
        proxy_listen: None,
        streams: Default::default(),
        admission: agentcomputer_node_agent::admission::AdmissionConfig::for_node(),
        fuse_holder: None,
        share: None,
        backup: None,
    };
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            serve(listener, config, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        rt.shutdown_timeout(Duration::from_secs(1));
    });

    let cwd = host.path();
    cli(&url, &token_file, cwd, &["create", "demo"]);
    // A relative directory is made absolute on the client's side.
    let out = cli(&url, &token_file, cwd, &["mount", "demo", "m"]);
    assert_eq!(out, format!("computer demo mounted at {}\n", mnt.display()));
    std::fs::write(mnt.join("a"), "hi\n").unwrap();
    let out = cli(
        &url,
        &token_file,
        cwd,
        &["exec", "demo", "--", "cat a; echo yo > b"],
    );
    assert_eq!(out, "hi\n");
    assert_eq!(std::fs::read_to_string(mnt.join("b")).unwrap(), "yo\n");

    let out = cli(
        &url,
        &token_file,
        cwd,
        &["unmount", "demo", &mnt.to_string_lossy()],
    );
    assert_eq!(
        out,
        format!("computer demo unmounted from {}\n", mnt.display())
    );
    assert_eq!(std::fs::read_dir(&mnt).unwrap().count(), 0);

    let again = command(&url, &token_file, cwd)
        .args(["unmount", "demo", "m"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&again.stderr),
        format!(
            "error: EINVAL: computer \"demo\" is not mounted at {}\n",
            mnt.display()
        )
    );

    // A directory with entries needs --nonempty.
    let full = host.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("keep.txt"), "mine\n").unwrap();
    let refused = command(&url, &token_file, cwd)
        .args(["mount", "demo", "full"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&refused.stderr),
        format!(
            "error: ENOTEMPTY: cannot mount over {}: it is not empty, and the mount would hide its files until unmounted; use an empty directory, or ask for it with --nonempty\n",
            full.display()
        )
    );
    let out = cli(
        &url,
        &token_file,
        cwd,
        &["mount", "--nonempty", "demo", "full"],
    );
    assert_eq!(
        out,
        format!("computer demo mounted at {}\n", full.display())
    );
    assert_eq!(std::fs::read_to_string(full.join("b")).unwrap(), "yo\n");
    assert!(
        !full.join("keep.txt").exists(),
        "the directory's files show through"
    );
    cli(&url, &token_file, cwd, &["unmount", "demo", "full"]);
    assert_eq!(
        std::fs::read_to_string(full.join("keep.txt")).unwrap(),
        "mine\n"
    );

    stop.send(()).unwrap();
    server.join().unwrap();
}
