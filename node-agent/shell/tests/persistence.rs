//! Files written by one exec live in the engine: the next exec, the engine
//! API and a reopened database all see them, byte for byte.

mod common;

use agentcomputer_fs::{Fs, Limits, ROOT_INO};
use common::Computer;

#[tokio::test]
async fn a_file_written_in_one_exec_is_read_in_the_next() {
    let c = Computer::new();
    c.sh("mkdir -p notes && echo 'remember me' > notes/todo.txt")
        .await
        .ok();
    assert_eq!(c.sh("cat notes/todo.txt").await.ok(), "remember me\n");
    assert_eq!(c.read("notes/todo.txt"), b"remember me\n");
}

#[tokio::test]
async fn files_written_through_the_engine_are_seen_by_the_shell() {
    let c = Computer::new();
    c.write("from-api.txt", b"written by the API\n");
    assert_eq!(
        c.sh("cat /workspace/from-api.txt").await.ok(),
        "written by the API\n"
    );
}

#[tokio::test]
async fn files_survive_closing_and_reopening_the_database() {
    let c = Computer::new();
    c.sh("echo durable > d.txt").await.ok();
    let path = c.dir.path().join("computer.db");
    let reopened = Fs::open(&path).expect("reopen");
    let attr = reopened.resolve(ROOT_INO, b"d.txt", true).unwrap();
    assert_eq!(reopened.read_all(attr.ino).unwrap(), b"durable\n");
}

#[tokio::test]
async fn binary_data_is_kept_byte_for_byte() {
    let c = Computer::new();
    let all: Vec<u8> = (0..=255u8).cycle().take(256 * 40).collect();
    c.write("bin.dat", &all);
    // Copy, pipe and redirect the bytes through the shell.
    let out = c
        .sh("cp bin.dat copy.dat; cat bin.dat > piped.dat; cat bin.dat | base64 | base64 -d > b64.dat; \
             sha256sum bin.dat copy.dat piped.dat b64.dat | cut -d' ' -f1 | uniq | wc -l")
        .await;
    assert_eq!(out.ok(), "1\n");
    for name in ["copy.dat", "piped.dat", "b64.dat"] {
        assert_eq!(c.read(name), all, "{name}");
    }
    // And binary stdout reaches the caller unchanged.
    let raw = c.sh("cat bin.dat").await;
    assert_eq!(raw.code(), 0);
    assert_eq!(raw.stdout_bytes(), all);
}

#[tokio::test]
async fn tmp_is_scratch_per_exec() {
    let c = Computer::new();
    c.sh("echo temp > /tmp/t; cat /tmp/t").await.ok();
    let second = c.sh("cat /tmp/t").await;
    assert_eq!(second.code(), 1);
    assert!(
        second.stderr().contains("No such file or directory"),
        "{}",
        second.stderr()
    );
    // Nothing leaked into the engine.
    assert!(c.fs.resolve(ROOT_INO, b"tmp", true).is_err());
}

#[tokio::test]
async fn moving_between_tmp_and_workspace_copies_across() {
    let c = Computer::new();
    let out = c
        .sh("mkdir -p /tmp/build/out; echo artifact > /tmp/build/out/a; mv /tmp/build result; \
             ls /tmp; cat result/out/a; cp result/out/a /tmp/a2; mv result/out/a /tmp/a3; cat /tmp/a3; ls result/out | wc -l")
        .await;
    assert_eq!(out.ok(), "artifact\nartifact\n0\n");
    let dir = c.fs.resolve(ROOT_INO, b"result/out", true).unwrap();
    assert_eq!(dir.kind, agentcomputer_fs::FileKind::Directory);
    assert!(c.fs.readdir(dir.ino, 0, 10).unwrap().is_empty());
}

#[tokio::test]
async fn a_full_quota_fails_with_enospc_and_keeps_earlier_data() {
    let c = Computer::with_limits(Limits {
        max_bytes: 64 * 1024,
        max_inodes: 1000,
    });
    c.sh("echo keep > k").await.ok();
    let out = c.sh("head -c 200000 /dev/zero > big; echo rc=$?").await;
    assert!(
        out.stderr().contains("No space left on device"),
        "stderr: {}",
        out.stderr()
    );
    assert_eq!(out.stdout(), "rc=1\n");
    assert_eq!(c.read("k"), b"keep\n");
}

#[tokio::test]
async fn df_reports_the_computer_quota() {
    let c = Computer::with_limits(Limits {
        max_bytes: 1024 * 1024 * 1024,
        max_inodes: 1000,
    });
    let out = c.sh("df | awk 'NR==2 {print $2}'").await;
    // 1 GiB of quota in KiB; the scratch tree is not the computer's.
    assert_eq!(out.ok(), format!("{}\n", 1024 * 1024));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_execs_on_one_computer_append_without_losing_lines() {
    let c = Computer::new();
    let runs = (0..8).map(|i| {
        let script = format!(
            "for j in $(seq 1 50); do echo {i}-$j >> shared.log; echo $j >> own-{i}.log; done"
        );
        c.sh_owned(script)
    });
    for out in futures_join_all(runs).await {
        out.ok();
    }
    let shared = String::from_utf8(c.read("shared.log")).unwrap();
    assert_eq!(shared.lines().count(), 400);
    for i in 0..8 {
        let own = String::from_utf8(c.read(&format!("own-{i}.log"))).unwrap();
        assert_eq!(own.lines().count(), 50, "own-{i}.log");
        assert_eq!(
            shared
                .lines()
                .filter(|l| l.starts_with(&format!("{i}-")))
                .count(),
            50
        );
    }
}

/// Awaits all futures concurrently (a tiny `join_all` without a new crate).
async fn futures_join_all<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("exec task"));
    }
    out
}

#[tokio::test]
async fn the_scratch_tree_is_size_capped() {
    let c = Computer::new();
    let limits = agentcomputer_shell::ShellLimits {
        scratch_bytes: 4 * 1024 * 1024,
        ..Default::default()
    };
    let req = agentcomputer_shell::ExecRequest {
        script: "for i in $(seq 1 10); do head -c 1048576 /dev/zero >> /tmp/big || { echo full at $i; break; }; done; wc -c < /tmp/big".into(),
        ..Default::default()
    };
    let out = common::exec_with_limits(&c.fs, req, Default::default(), limits).await;
    // 4 MiB fit; the 5th MiB does not, and the file keeps what it had.
    assert_eq!(out.ok(), "full at 5\n4194304\n");
    assert!(
        out.stderr().contains("4194304 byte limit"),
        "{}",
        out.stderr()
    );
}
