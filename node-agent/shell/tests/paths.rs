//! The path convention: the computer at /workspace, scratch elsewhere, and
//! nothing of the host visible.

mod common;

use agentcomputer_shell::ExecRequest;
use common::Computer;

#[tokio::test]
async fn scripts_start_in_workspace_and_see_the_engine_root_there() {
    let c = Computer::new();
    c.write("root-file", b"x");
    let out = c.sh("pwd; ls /workspace; ls /").await;
    let text = out.ok();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("/workspace"));
    assert_eq!(lines.next(), Some("root-file"));
    let root: Vec<&str> = lines.collect();
    assert!(root.contains(&"workspace"), "{root:?}");
    assert!(root.contains(&"tmp"), "{root:?}");
}

#[tokio::test]
async fn cd_dotdot_leaves_workspace_into_the_sandbox_root_only() {
    let c = Computer::new();
    let out = c
        .sh("cd ..; pwd; cd ../../..; pwd; cd workspace; pwd")
        .await;
    assert_eq!(out.ok(), "/\n/\n/workspace\n");
}

#[tokio::test]
async fn the_host_filesystem_is_not_visible() {
    let c = Computer::new();
    // A file the host has: this database, by its host path.
    let host_db = c.dir.path().join("computer.db");
    let script = format!(
        "cat ../../etc/passwd; echo; ls {dir} 2>&1; cat {db} 2>&1 | head -c 20; ls /proc/self/fd 2>&1 | head -1",
        dir = c.dir.path().display(),
        db = host_db.display()
    );
    let out = c.sh(&script).await;
    let text = out.stdout();
    // bashkit's synthetic /etc/passwd has no root line; the host's does.
    assert!(!text.contains("root:x:0:0"), "{text}");
    assert!(!text.contains("SQLite format"), "{text}");
    assert!(text.contains("No such file or directory"), "{text}");
}

#[tokio::test]
async fn relative_symlinks_resolve_inside_workspace() {
    let c = Computer::new();
    let out = c
        .sh("mkdir -p lib/v1; echo v1 > lib/v1/x; ln -s v1 lib/current; cat lib/current/x; cd lib/current && pwd && cat x")
        .await;
    assert_eq!(out.ok(), "v1\n/workspace/lib/current\nv1\n");
}

#[tokio::test]
async fn absolute_workspace_symlinks_resolve_like_in_a_container() {
    let c = Computer::new();
    let out = c
        .sh("mkdir -p data; echo abs > data/f; ln -s /workspace/data/f abs-link; ln -s /workspace/data dlink; \
             cat abs-link; cat dlink/f; readlink abs-link")
        .await;
    assert_eq!(out.ok(), "abs\nabs\n/workspace/data/f\n");
    // The engine keeps the target exactly as written.
    let attr =
        c.fs.resolve(agentcomputer_fs::ROOT_INO, b"abs-link", false)
            .unwrap();
    assert_eq!(c.fs.readlink(attr.ino).unwrap(), b"/workspace/data/f");
}

#[tokio::test]
async fn symlinks_cannot_reach_the_host() {
    let c = Computer::new();
    let out = c
        .sh("ln -s ../../../../../../etc/passwd up; ln -s /etc/shadow abs; cat up; cat abs 2>&1; true")
        .await;
    let text = out.stdout();
    assert!(!text.contains("root:x:0:0"), "{text}");
    assert!(text.contains("No such file or directory"), "{text}");
}

#[tokio::test]
async fn a_relative_cwd_cannot_climb_out_of_workspace() {
    let c = Computer::new();
    c.sh("mkdir etc").await.ok();
    let out = c
        .exec(ExecRequest {
            script: "pwd".into(),
            cwd: "../../etc".into(),
            ..ExecRequest::default()
        })
        .await;
    assert_eq!(out.ok(), "/workspace/etc\n");
}

#[tokio::test]
async fn an_absolute_cwd_is_a_shell_path() {
    let c = Computer::new();
    let out = c
        .exec(ExecRequest {
            script: "pwd; touch here".into(),
            cwd: "/tmp".into(),
            ..ExecRequest::default()
        })
        .await;
    assert_eq!(out.ok(), "/tmp\n");
}

#[tokio::test]
async fn error_messages_read_like_bash() {
    let c = Computer::new();
    let out = c
        .sh("cat missing; mkdir d; cat d; echo x > d; rmdir /workspace; mkdir d; touch f; mkdir f/x; rm d/nothing; true")
        .await;
    let err = out.stderr();
    for expected in [
        "missing: No such file or directory",
        "d: Is a directory",
        "File exists",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in:\n{err}");
    }
    assert!(!err.contains("io error"), "{err}");
}

#[tokio::test]
async fn writes_through_a_symlinked_directory_land_in_its_target() {
    let c = Computer::new();
    let out = c
        .sh("mkdir real; ln -s real link; echo x > link/f; mkdir -p link/sub/deeper; ls real; ls real/sub")
        .await;
    assert_eq!(out.ok(), "f\nsub\ndeeper\n");
    assert_eq!(c.read("real/f"), b"x\n");
}

#[tokio::test]
async fn big_directories_list_and_remove_across_pages() {
    let c = Computer::new();
    let before = c.fs.statfs().unwrap().used_inodes;
    let out = c
        .sh("mkdir -p big/sub; cd big; touch f{1..600} sub/g{1..30}; ls | wc -l; ls -l | wc -l; cd ..; rm -r big; ls")
        .await;
    // `ls -l` adds its `total` line.
    assert_eq!(out.ok(), "601\n602\n");
    assert_eq!(c.fs.statfs().unwrap().used_inodes, before);
}
