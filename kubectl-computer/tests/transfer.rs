//! Moving data in and out of a computer with the real `kubectl-computer`
//! binary against a node agent served in-process: standard input of an
//! exec (and the warning when it is not sent), and directory trees with
//! `put -r` and `get -r`.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

mod common;

/// The CLI, set to reach `agent` and find its token.
fn cli(agent: &common::Agent) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubectl-computer"));
    cmd.env("AGENTCOMPUTER_ENDPOINT", &agent.url)
        .env("AGENTCOMPUTER_DATA_DIR", &agent.data)
        .env_remove("AGENTCOMPUTER_TOKEN")
        .env_remove("AGENTCOMPUTER_TOKEN_FILE")
        .env_remove("AGENTCOMPUTER_CA_CERT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Runs the CLI with `args` and no standard input (`/dev/null`).
fn run(agent: &common::Agent, args: &[&str]) -> Output {
    cli(agent).args(args).stdin(Stdio::null()).output().unwrap()
}

/// Runs the CLI with `args`, writing `input` into a pipe on its stdin.
fn run_piped(agent: &common::Agent, args: &[&str], input: &[u8]) -> Output {
    let mut child = cli(agent).args(args).stdin(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // A writer thread: the CLI may not read all of it (no -i).
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Asserts success and returns stdout.
fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn start(dir: &Path) -> common::Agent {
    let agent = common::Agent::start(&dir.join("data"), None, false);
    ok(run(&agent, &["create", "demo"]));
    agent
}

const WARNING: &str = "warning: standard input is not sent without -i (--stdin)";

#[test]
fn piped_input_without_i_draws_a_warning_and_with_i_reaches_the_script() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(dir.path());

    let out = run_piped(&agent, &["exec", "demo", "--", "sort"], b"b\na\n");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "");
    assert!(text(&out.stderr).contains(WARNING), "{}", text(&out.stderr));

    let out = run_piped(&agent, &["exec", "-i", "demo", "--", "sort"], b"b\na\n");
    assert_eq!(ok(out.clone()), "a\nb\n");
    assert!(
        !text(&out.stderr).contains("warning"),
        "{}",
        text(&out.stderr)
    );

    // /dev/null is no input anyone meant to send.
    let out = run(&agent, &["exec", "demo", "--", "echo hi"]);
    assert_eq!(ok(out.clone()), "hi\n");
    assert_eq!(text(&out.stderr), "");

    // A file on stdin is input too.
    let file = dir.path().join("in.txt");
    std::fs::write(&file, "x\n").unwrap();
    let out = cli(&agent)
        .args(["exec", "demo", "--", "true"])
        .stdin(std::fs::File::open(&file).unwrap())
        .output()
        .unwrap();
    assert!(text(&out.stderr).contains(WARNING), "{}", text(&out.stderr));
}

/// Random bytes, `n` of them.
fn random(n: usize) -> Vec<u8> {
    use rand::RngCore;
    let mut data = vec![0u8; n];
    rand::rng().fill_bytes(&mut data);
    data
}

/// Runs the CLI with `args` and the stdout of `producer` as its stdin,
/// as `producer | kubectl-computer ARGS` would.
fn run_after(agent: &common::Agent, producer: &mut Command, args: &[&str]) -> Output {
    let mut first = producer.stdout(Stdio::piped()).spawn().unwrap();
    let out = cli(agent)
        .args(args)
        .stdin(first.stdout.take().unwrap())
        .output()
        .unwrap();
    assert!(first.wait().unwrap().success());
    out
}

/// 100 MB of stdin through `exec -i`, far past one 4 MiB message: into a
/// file (its bytes checked), and as tar archives unpacked by `tar x`.
#[test]
fn a_hundred_megabytes_of_stdin_reach_the_script() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(dir.path());
    let data = random(100 << 20);
    let local = dir.path().join("big.bin");
    std::fs::write(&local, &data).unwrap();

    let out = cli(&agent)
        .args([
            "exec",
            "-i",
            "demo",
            "--timeout",
            "600",
            "--",
            "cat > big.bin",
        ])
        .stdin(std::fs::File::open(&local).unwrap())
        .output()
        .unwrap();
    ok(out);
    let back = dir.path().join("back.bin");
    ok(run(
        &agent,
        &["get", "demo", "big.bin", back.to_str().unwrap()],
    ));
    assert!(std::fs::read(&back).unwrap() == data, "the bytes differ");

    // A tree as a tar stream, 100 MB: the shell runtime's `tar x` and the
    // container's GNU tar both stream it (the exec's memory budget is
    // 256 MiB; the shell's `tar` holds a few chunks at a time).
    let size = 100 << 20;
    let tree = dir.path().join("tree");
    std::fs::create_dir_all(tree.join("a/b")).unwrap();
    for (i, piece) in data[..size].chunks(10 << 20).enumerate() {
        std::fs::write(tree.join(format!("a/f{i:02}.bin")), piece).unwrap();
    }
    std::fs::write(tree.join("a/b/x.txt"), "x\n").unwrap();
    for runtime in ["shell", "container"] {
        if runtime == "container" && !sandbox_possible() {
            continue;
        }
        let into = format!("t-{runtime}");
        ok(run(&agent, &["mkdir", "demo", &into]));
        let mut producer = Command::new("tar");
        producer.args(["c", "-C", tree.to_str().unwrap()]);
        producer.arg("a/b/x.txt");
        for i in 0..size / (10 << 20) {
            producer.arg(format!("a/f{i:02}.bin"));
        }
        // `tar x` reads stdin when no archive is named, as GNU tar does.
        let unpack = if runtime == "shell" {
            "tar x"
        } else {
            "tar xf -"
        };
        let script = format!("cd {into} && {unpack} && sha256sum a/f*.bin && cat a/b/x.txt");
        let out = run_after(
            &agent,
            &mut producer,
            &[
                "exec",
                "-i",
                "demo",
                "--runtime",
                runtime,
                "--timeout",
                "600",
                "--",
                &script,
            ],
        );
        let mut want = String::new();
        for (i, piece) in data[..size].chunks(10 << 20).enumerate() {
            use sha2::Digest;
            let sum = hex::encode(sha2::Sha256::digest(piece));
            want.push_str(&format!("{sum}  a/f{i:02}.bin\n"));
        }
        want.push_str("x\n");
        assert_eq!(ok(out), want, "{runtime}");
    }
}

/// Whether this machine can run the local container sandbox (root,
/// bubblewrap); prints why not, for a SKIPPED line.
fn sandbox_possible() -> bool {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("SKIPPED (container part): the local container sandbox needs root");
        return false;
    }
    if !Path::new("/usr/bin/bwrap").exists() {
        eprintln!("SKIPPED (container part): bwrap (package bubblewrap) is not installed");
        return false;
    }
    true
}

/// Lists `root` as `path mode [link target]` lines, sorted, for comparing
/// trees with their modes and symlinks.
fn listing(root: &Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let meta = std::fs::symlink_metadata(e.path()).unwrap();
            let rel = e.path().strip_prefix(root).unwrap().display().to_string();
            let mut line = format!("{rel} {:o}", meta.permissions().mode() & 0o7777);
            if meta.file_type().is_symlink() {
                line = format!(
                    "{rel} -> {}",
                    std::fs::read_link(e.path()).unwrap().display()
                );
            } else if meta.is_dir() {
                walk(root, &e.path(), out);
            } else {
                line.push_str(&format!(
                    " {}",
                    meta.modified()
                        .unwrap()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap()
                        .as_secs()
                ));
            }
            out.push(line);
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

#[test]
fn put_r_and_get_r_copy_a_tree_as_it_is() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let agent = start(dir.path());
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("nested/deeper")).unwrap();
    std::fs::create_dir_all(src.join("empty")).unwrap();
    std::fs::write(src.join("top.txt"), "top\n").unwrap();
    std::fs::write(src.join("nested/run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    std::fs::write(src.join("nested/deeper/data.bin"), random(3 << 20)).unwrap();
    std::fs::set_permissions(src.join("nested/run.sh"), PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::set_permissions(src.join("top.txt"), PermissionsExt::from_mode(0o600)).unwrap();
    std::fs::set_permissions(src.join("nested/deeper"), PermissionsExt::from_mode(0o750)).unwrap();
    std::os::unix::fs::symlink("../top.txt", src.join("nested/link")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", src.join("abs-link")).unwrap();

    // Into a new remote directory (with -p for its parent), then back.
    ok(run(
        &agent,
        &["put", "-r", "-p", "demo", src.to_str().unwrap(), "x/copy"],
    ));
    let out = run(
        &agent,
        &[
            "exec",
            "demo",
            "--",
            "./x/copy/nested/run.sh; readlink x/copy/nested/link",
        ],
    );
    assert_eq!(ok(out), "hi\n../top.txt\n");
    let back = dir.path().join("back");
    ok(run(
        &agent,
        &["get", "-r", "demo", "x/copy", back.to_str().unwrap()],
    ));
    let diff = Command::new("diff")
        .args(["-r", "--no-dereference"])
        .arg(&src)
        .arg(&back)
        .output()
        .unwrap();
    assert!(diff.status.success(), "{}", text(&diff.stdout));
    assert_eq!(listing(&src), listing(&back));

    // Into existing directories, as cp -r: DIR/NAME.
    ok(run(
        &agent,
        &["put", "-r", "demo", src.to_str().unwrap(), "x"],
    ));
    let out = run(&agent, &["exec", "demo", "--", "cat x/src/top.txt"]);
    assert_eq!(ok(out), "top\n");
    let into = dir.path().join("into");
    std::fs::create_dir(&into).unwrap();
    ok(run(
        &agent,
        &["get", "-r", "demo", "x/src", into.to_str().unwrap()],
    ));
    assert_eq!(listing(&src), listing(&into.join("src")));
}

#[test]
fn get_r_gives_modes_less_the_umask_and_unpacks_read_only_directories() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let agent = start(dir.path());
    let out = run(
        &agent,
        &[
            "exec",
            "demo",
            "--",
            "mkdir -p t/ro && echo x > t/ro/f && echo y > t/s && chmod 4777 t/s && chmod 555 t/ro",
        ],
    );
    ok(out);
    let back = dir.path().join("back");
    ok(run(
        &agent,
        &["get", "-r", "demo", "t", back.to_str().unwrap()],
    ));
    let umask = {
        let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
        nix::sys::stat::umask(old);
        old.bits()
    };
    let mode = |p: &str| {
        std::fs::metadata(back.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    // No set-user-ID bit from the computer; the umask applies as for tar x.
    assert_eq!(mode("s"), 0o777 & !umask);
    assert_eq!(mode("ro"), 0o555 & !umask);
    assert_eq!(std::fs::read_to_string(back.join("ro/f")).unwrap(), "x\n");
}

#[test]
fn put_into_a_directory_keeps_the_name_and_p_makes_parents() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(dir.path());
    let small = dir.path().join("small.txt");
    std::fs::write(&small, "small\n").unwrap();
    let small = small.to_str().unwrap();
    ok(run(&agent, &["put", "demo", small, "."]));
    ok(run(&agent, &["mkdir", "demo", "dir"]));
    ok(run(&agent, &["put", "demo", small, "dir"]));
    ok(run(&agent, &["put", "demo", small, "dir/"]));
    let out = run(&agent, &["put", "demo", small, "a/b/c.txt"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("ENOENT"),
        "{}",
        text(&out.stderr)
    );
    ok(run(&agent, &["put", "-p", "demo", small, "a/b/c.txt"]));
    let out = run(
        &agent,
        &[
            "exec",
            "demo",
            "--",
            "cat small.txt dir/small.txt a/b/c.txt",
        ],
    );
    assert_eq!(ok(out), "small\nsmall\nsmall\n");
}

/// A container run that ends without reading its input ends the CLI at
/// once, though its stdin stays open.
#[test]
fn a_run_that_ends_first_does_not_wait_for_the_input() {
    if !sandbox_possible() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let agent = start(dir.path());
    let began = std::time::Instant::now();
    let mut child = cli(&agent)
        .args([
            "exec",
            "-i",
            "demo",
            "--runtime",
            "container",
            "--",
            "echo quick",
        ])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    // Held open, never written.
    let _input = child.stdin.take().unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(ok(out), "quick\n");
    assert!(
        began.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        began.elapsed()
    );
}
