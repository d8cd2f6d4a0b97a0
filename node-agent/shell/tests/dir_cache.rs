//! Directories an exec has walked through are cached for the rest of the
//! exec; a change made meanwhile by another user of the computer (here the
//! engine API, as FUSE or the gRPC API would) must be seen at once.

mod common;

use agentcomputer_fs::{ROOT_INO, RenameFlags};
use common::Computer;
use std::time::{Duration, Instant};

#[tokio::test]
async fn a_directory_renamed_by_another_writer_mid_exec_is_seen() {
    let c = Computer::new();
    c.sh("mkdir a && echo one > a/x").await.ok();
    // The script walks into `a`, says so, and waits for the go-ahead.
    let script = "cat a/x; : > ready; \
                  while [ ! -e go ]; do sleep 0.01; done; \
                  cat a/x 2>/dev/null || echo gone; cat b/x";
    let run = tokio::spawn(c.sh_owned(script.into()));
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.fs.lookup(ROOT_INO, b"ready").is_err() {
        assert!(Instant::now() < deadline, "the script never got ready");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    c.fs.rename(ROOT_INO, b"a", ROOT_INO, b"b", RenameFlags::default())
        .unwrap();
    c.write("go", b"");
    assert_eq!(run.await.unwrap().ok(), "one\ngone\none\n");
}

#[tokio::test]
async fn a_directory_the_script_itself_replaces_is_walked_afresh() {
    let c = Computer::new();
    let out = c
        .sh("mkdir -p d/e && echo old > d/e/f && cat d/e/f; \
             mv d gone && mkdir -p d/e && echo new > d/e/f && cat d/e/f; \
             rm -r d && cat d/e/f 2>/dev/null || echo missing; cat gone/e/f")
        .await;
    assert_eq!(out.ok(), "old\nnew\nmissing\nold\n");
}
