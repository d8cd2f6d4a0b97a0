//! Connections that never authenticate cannot lock the token holder out:
//! another local user (uid 65534, arriving as 127.0.0.1 like everyone)
//! holds a thousand idle or half-sent connections to the API port and as
//! many to the share port, and the token holder's calls and downloads are
//! still answered.
//!
//! The agent runs with the common default descriptor limits (soft 1024,
//! hard 8192, as a login session or a systemd service gets them), under
//! which a thousand idle connections used to exhaust its descriptors.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agentcomputer_proto::v1 as pb;
use common::{Agent, create, curl, sh, write};

/// Connections the other user opens to each port.
const FLOOD: usize = 1000;

/// Holds `FLOOD` connections to each of the ports (every other one with a
/// request begun but never finished) until its stdin closes; prints how
/// many it opened (it stops at the first connection refused or not
/// accepted within 2 s).
const FLOODER: &str = r#"
import socket, sys
api, share, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
held, failed = [], 0
for i in range(n):
    for port, partial in ((api, b"PRI * HTTP/2.0\r\n"), (share, b"GET /share/v1/x/y HTTP/1.1\r\nHost: a\r\n")):
        s = socket.socket()
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", port))
            if i % 2:
                s.send(partial)
            held.append(s)
        except OSError:
            failed += 1
            s.close()
    if failed:
        break
print("opened", len(held), "failed", failed, flush=True)
sys.stdin.read()
"#;

struct Flooder(Child);

impl Drop for Flooder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_floods_leave_the_token_holder_served() {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("skipped: needs root to flood as another user");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut wrapper = Command::new("prlimit");
    wrapper.args(["--nofile=1024:8192", "--"]);
    wrapper.arg(env!("CARGO_BIN_EXE_node-agent"));
    let log_dir = tempfile::tempdir().unwrap();
    let log_path = log_dir.path().join("agent.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut agent = Agent::start_wrapped_with(wrapper, dir.path(), &[], |cmd| {
        cmd.stderr(log);
    });
    let mut c = agent.client().await;
    create(&mut c, "owner", 0).await;
    write(
        &mut c,
        "owner",
        "f.txt",
        pb::WriteMode::Truncate,
        b"shared bytes",
    )
    .await
    .unwrap();
    let link = c
        .share(pb::ShareRequest {
            computer: "owner".into(),
            path: "f.txt".into(),
            expires_in_seconds: 600,
        })
        .await
        .unwrap()
        .into_inner()
        .url;

    let api_port = port_of(&agent.url);
    let share_port = port_of(link.split("/share/").next().unwrap());
    let mut flooder = Flooder(
        Command::new("/usr/bin/python3")
            .args(["-c", FLOODER])
            .arg(api_port.to_string())
            .arg(share_port.to_string())
            .arg(FLOOD.to_string())
            .uid(65534)
            .gid(65534)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the flooder"),
    );
    let mut line = String::new();
    BufReader::new(flooder.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    eprintln!("flooder: {}", line.trim());

    // The token holder, on new connections, while the flood is held.
    let answered = tokio::time::timeout(Duration::from_secs(20), async {
        let mut c = agent.client().await;
        create(&mut c, "second", 0).await;
        let ran = sh(&mut c, "owner", "cat f.txt; echo; echo ok").await;
        assert_eq!(ran.stdout, "shared bytes\nok\n", "{ran:?}");
    })
    .await;
    assert!(
        answered.is_ok(),
        "the token holder's calls were not answered within 20 s during the flood"
    );
    let got = tokio::task::spawn_blocking(move || curl(&link))
        .await
        .unwrap();
    assert_eq!(
        got.as_deref(),
        Ok(&b"shared bytes"[..]),
        "the share link was not served during the flood"
    );
    assert!(agent.alive(), "the agent died under the flood");
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        !log.contains("Too many open files"),
        "the agent ran out of descriptors:\n{log}"
    );
    for listener in ["api", "share"] {
        assert!(
            log.contains(&format!(
                "too many unauthenticated connections: closed the oldest listener=\"{listener}\""
            )),
            "the {listener} gate did not act:\n{log}"
        );
    }
}
