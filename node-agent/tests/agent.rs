//! End-to-end tests of `node-agent local` through its gRPC API: a real agent
//! process, real SQLite files in a temporary data directory, loopback only.

mod common;

use std::time::Duration;

use agentcomputer_proto::v1 as pb;
use common::*;
use pb::exec_event::Event;
use rand::RngCore;
use tonic::Code;

fn random_bytes(n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rand::rng().fill_bytes(&mut v);
    v
}

#[tokio::test]
async fn exec_outputs_exit_codes_and_files_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;

    let r = sh(
        &mut c,
        "demo",
        r#"mkdir -p src && printf "a\nb\n" > src/x.txt && wc -l < src/x.txt"#,
    )
    .await;
    assert_eq!(
        (r.stdout.trim(), r.code, r.error.as_str()),
        ("2", 0, ""),
        "{r:?}"
    );
    let r = sh(&mut c, "demo", "exit 3").await;
    assert_eq!(r.code, 3, "{r:?}");
    let r = sh(&mut c, "demo", "echo oops >&2; false").await;
    assert_eq!(
        (r.stdout.as_str(), r.stderr.as_str(), r.code),
        ("", "oops\n", 1)
    );

    // env, stdin and cwd reach the script.
    let mut req = exec_req("demo", r#"echo "$GREETING $(cat) in $(pwd)""#);
    req.env.insert("GREETING".into(), "hello".into());
    req.stdin = b"world".to_vec();
    req.cwd = "src".into();
    let r = run(&mut c, req).await;
    assert_eq!(r.stdout, "hello world in /workspace/src\n", "{r:?}");
    // Entries no environment can carry are refused, naming the entry.
    for (name, value) in [("", "x"), ("A=B", "x"), ("A\0B", "x"), ("OK", "x\0y")] {
        let mut req = exec_req("demo", "true");
        req.env.insert(name.into(), value.into());
        let err = c.exec(req).await.unwrap_err();
        assert_errno(&err, Code::InvalidArgument, "EINVAL");
        assert!(err.message().contains(&format!("{name:?}")), "{err:?}");
    }

    assert!(agent.stop().await.success(), "clean exit on SIGTERM");
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    let info = c
        .get_computer(pb::GetComputerRequest {
            name: "demo".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.used_bytes, 4);
    assert!(!info.open, "usage comes from the record made at shutdown");
    assert_eq!(read(&mut c, "demo", "src/x.txt").await.unwrap(), b"a\nb\n");
    let r = sh(&mut c, "demo", "cat src/x.txt").await;
    assert_eq!(r.stdout, "a\nb\n");
}

#[tokio::test]
async fn computer_lifecycle_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    let made = create(&mut c, "demo", 1 << 30).await;
    assert_eq!((made.max_bytes, made.name.as_str()), (1 << 30, "demo"));

    let err = c
        .create_computer(pb::CreateComputerRequest {
            name: "demo".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);
    assert_eq!(err.message(), "computer \"demo\" already exists");

    for bad in ["Demo", "-x", "a_b", "", "../x"] {
        let err = c
            .create_computer(pb::CreateComputerRequest {
                name: bad.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{bad:?}");
    }

    let err = read(&mut c, "nope", "x").await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert_eq!(err.message(), "computer \"nope\" not found");
    let err = c.exec(exec_req("nope", "true")).await.unwrap_err();
    assert_eq!(err.message(), "computer \"nope\" not found");

    let err = read(&mut c, "demo", "src/nope").await.unwrap_err();
    assert_errno(&err, Code::NotFound, "ENOENT");
    assert_eq!(err.message(), "ENOENT: no such file or directory: src/nope");

    create(&mut c, "other", 0).await;
    let list = c
        .list_computers(pb::ListComputersRequest {})
        .await
        .unwrap()
        .into_inner();
    let names: Vec<_> = list.computers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["demo", "other"]);

    c.delete_computer(pb::DeleteComputerRequest {
        name: "demo".into(),
    })
    .await
    .unwrap();
    assert!(!dir.path().join("computers/demo").exists());
    let err = c
        .get_computer(pb::GetComputerRequest {
            name: "demo".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = c
        .delete_computer(pb::DeleteComputerRequest {
            name: "demo".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    // The name is free again.
    create(&mut c, "demo", 0).await;
    assert!(names_of(&mut c, "demo").await.is_empty());
}

async fn names_of(c: &mut Client, computer: &str) -> Vec<String> {
    names(c, computer, "").await
}

#[tokio::test]
async fn fifty_mib_round_trip_and_ranged_reads() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let data = random_bytes(50 << 20);
    let resp = write(
        &mut c,
        "demo",
        "/workspace/big.bin",
        pb::WriteMode::Truncate,
        &data,
    )
    .await
    .unwrap();
    assert_eq!(resp.bytes_written, data.len() as u64);
    assert_eq!(resp.info.unwrap().size, data.len() as u64);
    let back = read(&mut c, "demo", "big.bin").await.unwrap();
    assert!(back == data, "50 MiB differ after the round trip");

    let mid = read_range(&mut c, "demo", "big.bin", 3 << 20, 1234567)
        .await
        .unwrap();
    assert_eq!(mid, &data[3 << 20..(3 << 20) + 1234567]);
    let tail = read_range(&mut c, "demo", "big.bin", data.len() as u64 - 10, 100)
        .await
        .unwrap();
    assert_eq!(tail, &data[data.len() - 10..]);
    let past = read_range(&mut c, "demo", "big.bin", data.len() as u64 + 5, 0)
        .await
        .unwrap();
    assert!(past.is_empty());

    let err = read(&mut c, "demo", "").await.unwrap_err();
    assert_errno(&err, Code::FailedPrecondition, "EISDIR");
}

#[tokio::test]
async fn write_modes() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;

    write(&mut c, "demo", "f", pb::WriteMode::Exclusive, b"hello")
        .await
        .unwrap();
    let err = write(&mut c, "demo", "f", pb::WriteMode::Exclusive, b"x")
        .await
        .unwrap_err();
    assert_errno(&err, Code::AlreadyExists, "EEXIST");
    write(&mut c, "demo", "f", pb::WriteMode::Append, b" world")
        .await
        .unwrap();
    assert_eq!(read(&mut c, "demo", "f").await.unwrap(), b"hello world");

    // CREATE writes in place at an offset, keeping the rest.
    let header = pb::WriteHeader {
        computer: "demo".into(),
        path: "f".into(),
        mode: pb::WriteMode::Create as i32,
        perm: 0,
        offset: 6,
    };
    let msgs = vec![
        pb::WriteRequest {
            msg: Some(pb::write_request::Msg::Header(header)),
        },
        pb::WriteRequest {
            msg: Some(pb::write_request::Msg::Data(b"WORLD".to_vec())),
        },
        end_msg(5),
    ];
    c.write(futures::stream::iter(msgs)).await.unwrap();
    assert_eq!(read(&mut c, "demo", "f").await.unwrap(), b"hello WORLD");

    write(&mut c, "demo", "f", pb::WriteMode::Truncate, b"new")
        .await
        .unwrap();
    assert_eq!(read(&mut c, "demo", "f").await.unwrap(), b"new");

    // Without its end message, or with a wrong byte count, nothing is
    // published.
    let header = |path: &str| pb::WriteRequest {
        msg: Some(pb::write_request::Msg::Header(pb::WriteHeader {
            computer: "demo".into(),
            path: path.into(),
            mode: pb::WriteMode::Truncate as i32,
            perm: 0,
            offset: 0,
        })),
    };
    let data = || pb::WriteRequest {
        msg: Some(pb::write_request::Msg::Data(b"partial".to_vec())),
    };
    let err = c
        .write(futures::stream::iter(vec![header("f"), data()]))
        .await
        .unwrap_err();
    assert_errno(&err, Code::Cancelled, "ECANCELED");
    let err = c
        .write(futures::stream::iter(vec![
            header("f"),
            data(),
            end_msg(99),
        ]))
        .await
        .unwrap_err();
    assert_errno(&err, Code::InvalidArgument, "EINVAL");
    let err = c
        .write(futures::stream::iter(vec![header("f"), end_msg(0), data()]))
        .await
        .unwrap_err();
    assert_errno(&err, Code::InvalidArgument, "EINVAL");
    assert_eq!(read(&mut c, "demo", "f").await.unwrap(), b"new");

    // CREATE and APPEND of a new file publish it only when the upload
    // completes: a failed one leaves no empty file behind.
    for mode in [pb::WriteMode::Create, pb::WriteMode::Append] {
        let header = pb::WriteRequest {
            msg: Some(pb::write_request::Msg::Header(pb::WriteHeader {
                computer: "demo".into(),
                path: "fresh".into(),
                mode: mode as i32,
                perm: 0,
                offset: 0,
            })),
        };
        let err = c
            .write(futures::stream::iter(vec![header, data()]))
            .await
            .unwrap_err();
        assert_errno(&err, Code::Cancelled, "ECANCELED");
        assert_eq!(names(&mut c, "demo", "").await, ["f"], "{mode:?}");
    }
    // A new file made by CREATE at an offset starts with a hole.
    let header = pb::WriteRequest {
        msg: Some(pb::write_request::Msg::Header(pb::WriteHeader {
            computer: "demo".into(),
            path: "fresh".into(),
            mode: pb::WriteMode::Create as i32,
            perm: 0,
            offset: 2,
        })),
    };
    c.write(futures::stream::iter(vec![header, data(), end_msg(7)]))
        .await
        .unwrap();
    assert_eq!(read(&mut c, "demo", "fresh").await.unwrap(), b"\0\0partial");
    c.remove(pb::RemoveRequest {
        computer: "demo".into(),
        path: "fresh".into(),
        recursive: false,
    })
    .await
    .unwrap();

    // A stream without a header is refused.
    let msgs = vec![pb::WriteRequest {
        msg: Some(pb::write_request::Msg::Data(b"x".to_vec())),
    }];
    let err = c.write(futures::stream::iter(msgs)).await.unwrap_err();
    assert_errno(&err, Code::InvalidArgument, "EINVAL");

    // An upload whose client goes away midway leaves the old file, no other
    // name, and no space used. The upload runs on a connection of its own;
    // dropping the call while the data stream is still open resets the
    // HTTP/2 stream.
    let (call, tx) = start_upload(&agent, "demo", "f", 3 << 20).await;
    // The upload's data is stored while it runs, under no name...
    wait_used_bytes(&mut c, "demo", |used| used > 3 + (1 << 20)).await;
    assert_eq!(names(&mut c, "demo", "").await, ["f"]);
    call.abort();
    let _ = call.await;
    // ...and freed once the client left, with the old content in place.
    wait_used_bytes(&mut c, "demo", |used| used == 3).await;
    assert_eq!(names(&mut c, "demo", "").await, ["f"]);
    assert_eq!(read(&mut c, "demo", "f").await.unwrap(), b"new");
    drop(tx);
}

/// Starts a TRUNCATE upload of `path` on a connection of its own, sends the
/// header and `len` bytes, and returns the running call and its sender.
async fn start_upload(
    agent: &Agent,
    computer: &str,
    path: &str,
    len: usize,
) -> (
    tokio::task::JoinHandle<Result<tonic::Response<pb::WriteResponse>, tonic::Status>>,
    tokio::sync::mpsc::Sender<pb::WriteRequest>,
) {
    let mut uploader = agent.client().await;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let call = tokio::spawn(async move {
        uploader
            .write(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
    });
    tx.send(pb::WriteRequest {
        msg: Some(pb::write_request::Msg::Header(pb::WriteHeader {
            computer: computer.into(),
            path: path.into(),
            mode: pb::WriteMode::Truncate as i32,
            perm: 0,
            offset: 0,
        })),
    })
    .await
    .unwrap();
    tx.send(pb::WriteRequest {
        msg: Some(pb::write_request::Msg::Data(vec![b'z'; len])),
    })
    .await
    .unwrap();
    (call, tx)
}

/// Polls the computer's `used_bytes` (for up to 10 s) until `ok` holds.
async fn wait_used_bytes(c: &mut Client, computer: &str, ok: impl Fn(u64) -> bool) {
    let mut used = 0;
    for _ in 0..500 {
        used = c
            .statfs(pb::StatfsRequest {
                computer: computer.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .used_bytes;
        if ok(used) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("used_bytes stayed at {used}");
}

#[tokio::test]
async fn an_upload_cut_by_a_crash_leaves_nothing_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    write(&mut c, "demo", "f", pb::WriteMode::Truncate, b"old")
        .await
        .unwrap();
    let (_call, _tx) = start_upload(&agent, "demo", "f", 3 << 20).await;
    wait_used_bytes(&mut c, "demo", |used| used > 3 + (1 << 20)).await;
    // SIGKILL in the middle of the upload.
    drop(agent);

    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    assert_eq!(names(&mut c, "demo", "").await, ["f"]);
    assert_eq!(read(&mut c, "demo", "f").await.unwrap(), b"old");
    wait_used_bytes(&mut c, "demo", |used| used == 3).await;
}

#[tokio::test]
async fn paths_cannot_leave_the_computer() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;

    // The host's /etc/passwd exists; inside the computer it does not.
    let err = read(&mut c, "demo", "../../etc/passwd").await.unwrap_err();
    assert_errno(&err, Code::NotFound, "ENOENT");
    let err = read(&mut c, "demo", "/etc/passwd").await.unwrap_err();
    assert_errno(&err, Code::InvalidArgument, "EINVAL");
    write(
        &mut c,
        "demo",
        "../../../escape.txt",
        pb::WriteMode::Truncate,
        b"in",
    )
    .await
    .unwrap();
    assert_eq!(
        read(&mut c, "demo", "/workspace/escape.txt").await.unwrap(),
        b"in"
    );
    assert!(!dir.path().join("escape.txt").exists());
    // The shell's own namespace has a synthetic /etc; the host's never shows.
    let r = sh(&mut c, "demo", "cat ../../etc/passwd").await;
    assert!(!r.stdout.contains("root:x:0:0"), "{r:?}");
}

#[tokio::test]
async fn quota_gives_enospc_and_keeps_earlier_files() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "small", 1 << 20).await;
    let keep = random_bytes(100 << 10);
    write(&mut c, "small", "keep.bin", pb::WriteMode::Truncate, &keep)
        .await
        .unwrap();

    let err = write(
        &mut c,
        "small",
        "big.bin",
        pb::WriteMode::Truncate,
        &vec![7u8; 2 << 20],
    )
    .await
    .unwrap_err();
    assert_errno(&err, Code::ResourceExhausted, "ENOSPC");
    assert!(err.message().contains("big.bin"), "{}", err.message());
    // Replacing a file past the quota keeps the old one.
    let err = write(
        &mut c,
        "small",
        "keep.bin",
        pb::WriteMode::Truncate,
        &vec![7u8; 2 << 20],
    )
    .await
    .unwrap_err();
    assert_errno(&err, Code::ResourceExhausted, "ENOSPC");
    assert_eq!(read(&mut c, "small", "keep.bin").await.unwrap(), keep);
    assert_eq!(
        names(&mut c, "small", "").await,
        ["keep.bin"],
        "no other names left"
    );
    let st = c
        .statfs(pb::StatfsRequest {
            computer: "small".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.used_bytes, keep.len() as u64);
}

#[tokio::test]
async fn runaway_script_stops_at_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let mut req = exec_req("demo", "while true; do :; done");
    req.timeout_ms = 500;
    let r = run(&mut c, req).await;
    assert_ne!(r.code, 0);
    assert!(r.error.contains("timed out"), "{r:?}");
    let r = sh(&mut c, "demo", "echo still here").await;
    assert_eq!((r.stdout.as_str(), r.code), ("still here\n", 0));

    let mut req = exec_req("demo", "true");
    req.cwd = "missing".into();
    let err = c.exec(req).await.unwrap_err();
    assert_errno(&err, Code::NotFound, "ENOENT");
}

#[tokio::test]
async fn client_disconnect_cancels_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let script = "i=0; while true; do i=$((i+1)); echo $i > counter; echo tick; sleep 0.01; done";
    assert_run_stops_when_client_leaves(&mut c, "demo", exec_req("demo", script), "script").await;
}

#[tokio::test]
async fn runs_on_different_computers_do_not_wait_on_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "busy", 0).await;
    create(&mut c, "idle", 0).await;
    let mut busy = exec_req("busy", "echo go; while true; do :; done");
    busy.timeout_ms = 20_000;
    let mut slow = c.exec(busy).await.unwrap().into_inner();
    assert!(matches!(
        slow.message().await.unwrap().unwrap().event,
        Some(Event::Stdout(_))
    ));
    // While "busy" spins, "idle" answers; "busy" has still not exited.
    for _ in 0..3 {
        let r = sh(&mut c, "idle", "echo ok").await;
        assert_eq!(r.stdout, "ok\n");
    }
    let pending = tokio::time::timeout(Duration::from_millis(100), slow.message()).await;
    assert!(pending.is_err(), "the busy run ended early: {pending:?}");
    // SIGTERM cancels the spinning run and the agent exits cleanly.
    drop(c);
    assert!(agent.stop().await.success());
}

#[tokio::test]
async fn idle_computers_hibernate_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &["--idle-timeout", "200ms"]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    sh(&mut c, "demo", "echo kept > a").await;
    let open = c
        .get_computer(pb::GetComputerRequest {
            name: "demo".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(open.open);
    let mut closed = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let info = c
            .get_computer(pb::GetComputerRequest {
                name: "demo".into(),
            })
            .await
            .unwrap()
            .into_inner();
        if !info.open {
            assert_eq!(info.used_bytes, 5);
            closed = true;
            break;
        }
    }
    assert!(closed, "computer never hibernated");
    let r = sh(&mut c, "demo", "cat a").await;
    assert_eq!(r.stdout, "kept\n");
}

#[tokio::test]
async fn readdir_pages() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let r = sh(
        &mut c,
        "demo",
        "mkdir d; for i in $(seq 1 25); do echo $i > d/f$i; done",
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    let mut token = String::new();
    let mut sizes = Vec::new();
    let mut seen = Vec::new();
    loop {
        let page = c
            .read_dir(pb::ReadDirRequest {
                computer: "demo".into(),
                path: "d".into(),
                page_size: 10,
                page_token: token,
                with_info: true,
            })
            .await
            .unwrap()
            .into_inner();
        sizes.push(page.entries.len());
        for e in page.entries {
            let info = e.info.expect("with_info");
            assert_eq!(info.kind(), pb::FileKind::Regular);
            let n: u64 = e.name[1..].parse().unwrap();
            assert_eq!(info.size, n.to_string().len() as u64 + 1);
            seen.push(e.name);
        }
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(sizes, [10, 10, 5]);
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 25);
    let err = c
        .read_dir(pb::ReadDirRequest {
            computer: "demo".into(),
            path: "d/f1".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_errno(&err, Code::FailedPrecondition, "ENOTDIR");
}

#[tokio::test]
async fn glob_and_grep() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    for (path, body) in [
        ("src/a.rs", &b"fn main() {}\nlet x = 1;\n"[..]),
        ("src/sub/b.rs", b"// nothing\nfn helper() {}"),
        ("src/notes.txt", b"fn in text\n"),
        ("README.md", b"# Title\nFN upper\n"),
        ("bin.dat", b"fn main\0binary"),
    ] {
        let parent = path.rsplit_once('/').map(|(p, _)| p).unwrap_or("");
        c.mkdir(pb::MkdirRequest {
            computer: "demo".into(),
            path: parent.into(),
            parents: true,
            perm: 0,
        })
        .await
        .unwrap();
        write(&mut c, "demo", path, pb::WriteMode::Truncate, body)
            .await
            .unwrap();
    }
    let glob = |pattern: &str| pb::GlobRequest {
        computer: "demo".into(),
        pattern: pattern.into(),
        max_results: 0,
    };
    let g = c.glob(glob("src/**/*.rs")).await.unwrap().into_inner();
    assert_eq!(g.paths, ["src/a.rs", "src/sub/b.rs"]);
    let g = c.glob(glob("/workspace/*.md")).await.unwrap().into_inner();
    assert_eq!(g.paths, ["README.md"]);
    let g = c.glob(glob("src/*")).await.unwrap().into_inner();
    assert_eq!(g.paths, ["src/a.rs", "src/notes.txt", "src/sub"]);
    let mut limited = glob("**");
    limited.max_results = 2;
    let g = c.glob(limited).await.unwrap().into_inner();
    assert_eq!((g.paths.len(), g.truncated), (2, true));
    let err = c.glob(glob("src/[")).await.unwrap_err();
    assert_errno(&err, Code::InvalidArgument, "EINVAL");

    let grep = |pattern: &str, glob: &str| pb::GrepRequest {
        computer: "demo".into(),
        path: String::new(),
        pattern: pattern.into(),
        glob: glob.into(),
        max_matches: 0,
        case_insensitive: false,
    };
    let collect = |mut s: tonic::Streaming<pb::GrepMatch>| async move {
        let mut out = Vec::new();
        while let Some(m) = s.message().await.unwrap() {
            out.push(format!("{}:{}:{}", m.path, m.line_number, m.line));
        }
        out.sort();
        out
    };
    let all = collect(c.grep(grep(r"fn \w+", "")).await.unwrap().into_inner()).await;
    assert_eq!(
        all,
        [
            "src/a.rs:1:fn main() {}",
            "src/notes.txt:1:fn in text",
            "src/sub/b.rs:2:fn helper() {}"
        ],
        "binary bin.dat is skipped"
    );
    let rs = collect(c.grep(grep(r"fn \w+", "*.rs")).await.unwrap().into_inner()).await;
    assert_eq!(rs.len(), 2);
    let mut ci = grep("^fn upper", "");
    ci.case_insensitive = true;
    let found = collect(c.grep(ci).await.unwrap().into_inner()).await;
    assert_eq!(found, ["README.md:2:FN upper"]);
    let mut one = grep("fn", "");
    one.max_matches = 1;
    assert_eq!(
        collect(c.grep(one).await.unwrap().into_inner()).await.len(),
        1
    );
    let mut file = grep("let", "");
    file.path = "src/a.rs".into();
    assert_eq!(
        collect(c.grep(file).await.unwrap().into_inner()).await,
        ["src/a.rs:2:let x = 1;"]
    );
    let err = c.grep(grep("(", "")).await.unwrap_err();
    assert_errno(&err, Code::InvalidArgument, "EINVAL");
}

#[tokio::test]
async fn metadata_calls() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let demo = || "demo".to_string();

    let d = c
        .mkdir(pb::MkdirRequest {
            computer: demo(),
            path: "a/b/c".into(),
            parents: true,
            perm: 0o700,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((d.kind(), d.perm), (pb::FileKind::Directory, 0o700));
    let err = c
        .mkdir(pb::MkdirRequest {
            computer: demo(),
            path: "a/b".into(),
            parents: false,
            perm: 0,
        })
        .await
        .unwrap_err();
    assert_errno(&err, Code::AlreadyExists, "EEXIST");
    let err = c
        .mkdir(pb::MkdirRequest {
            computer: demo(),
            path: "x/y".into(),
            parents: false,
            perm: 0,
        })
        .await
        .unwrap_err();
    assert_errno(&err, Code::NotFound, "ENOENT");
    write(
        &mut c,
        "demo",
        "a/b/c/f.txt",
        pb::WriteMode::Truncate,
        b"data",
    )
    .await
    .unwrap();

    c.symlink(pb::SymlinkRequest {
        computer: demo(),
        path: "link".into(),
        target: "a/b/c/f.txt".into(),
    })
    .await
    .unwrap();
    let t = c
        .readlink(pb::ReadlinkRequest {
            computer: demo(),
            path: "link".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(t.target, "a/b/c/f.txt");
    let l = c
        .stat(pb::StatRequest {
            computer: demo(),
            path: "link".into(),
            follow_symlinks: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (l.kind(), l.symlink_target.as_str()),
        (pb::FileKind::Symlink, "a/b/c/f.txt")
    );
    let f = c
        .stat(pb::StatRequest {
            computer: demo(),
            path: "link".into(),
            follow_symlinks: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((f.kind(), f.size), (pb::FileKind::Regular, 4));
    let m = c
        .chmod(pb::ChmodRequest {
            computer: demo(),
            path: "link".into(),
            perm: 0o600,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((m.ino, m.perm), (f.ino, 0o600));

    write(&mut c, "demo", "other.txt", pb::WriteMode::Truncate, b"o")
        .await
        .unwrap();
    let err = c
        .rename(pb::RenameRequest {
            computer: demo(),
            from: "other.txt".into(),
            to: "link".into(),
            noreplace: true,
        })
        .await
        .unwrap_err();
    assert_errno(&err, Code::AlreadyExists, "EEXIST");
    c.rename(pb::RenameRequest {
        computer: demo(),
        from: "other.txt".into(),
        to: "a/moved.txt".into(),
        noreplace: true,
    })
    .await
    .unwrap();
    assert_eq!(read(&mut c, "demo", "a/moved.txt").await.unwrap(), b"o");

    let err = c
        .remove(pb::RemoveRequest {
            computer: demo(),
            path: "a".into(),
            recursive: false,
        })
        .await
        .unwrap_err();
    assert_errno(&err, Code::FailedPrecondition, "ENOTEMPTY");
    c.remove(pb::RemoveRequest {
        computer: demo(),
        path: "a".into(),
        recursive: true,
    })
    .await
    .unwrap();
    assert_eq!(names(&mut c, "demo", "").await, ["link"]);
    let err = c
        .remove(pb::RemoveRequest {
            computer: demo(),
            path: "/workspace".into(),
            recursive: true,
        })
        .await
        .unwrap_err();
    assert_errno(&err, Code::FailedPrecondition, "EBUSY");
    c.remove(pb::RemoveRequest {
        computer: demo(),
        path: "link".into(),
        recursive: false,
    })
    .await
    .unwrap();
    let st = c
        .statfs(pb::StatfsRequest { computer: demo() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((st.used_bytes, st.used_inodes), (0, 1));
    assert!(st.blocks > 0 && st.name_max == 255);
}

/// A path ending in `/` names a directory, as on Linux: calls on `file/`
/// fail with the errno Linux gives instead of acting on `file`.
#[tokio::test]
async fn a_trailing_slash_names_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let demo = || "demo".to_string();
    write(&mut c, "demo", "f", pb::WriteMode::Truncate, b"data")
        .await
        .unwrap();
    c.mkdir(pb::MkdirRequest {
        computer: demo(),
        path: "d/".into(),
        parents: false,
        perm: 0,
    })
    .await
    .unwrap();
    c.symlink(pb::SymlinkRequest {
        computer: demo(),
        path: "ld".into(),
        target: "d".into(),
    })
    .await
    .unwrap();

    let stat = |path: &str, follow: bool| pb::StatRequest {
        computer: demo(),
        path: path.into(),
        follow_symlinks: follow,
    };
    let err = c.stat(stat("f/", true)).await.unwrap_err();
    assert_errno(&err, Code::FailedPrecondition, "ENOTDIR");
    // lstat of `link/` follows the link to its directory.
    let d = c.stat(stat("ld/", false)).await.unwrap().into_inner();
    assert_eq!(d.kind(), pb::FileKind::Directory);
    let err = read(&mut c, "demo", "f/").await.unwrap_err();
    assert_errno(&err, Code::FailedPrecondition, "ENOTDIR");

    for mode in [
        pb::WriteMode::Truncate,
        pb::WriteMode::Create,
        pb::WriteMode::Append,
    ] {
        for path in ["f/", "new/", "d/"] {
            let err = write(&mut c, "demo", path, mode, b"x").await.unwrap_err();
            assert_errno(&err, Code::FailedPrecondition, "EISDIR");
        }
    }
    let remove = |path: &str| pb::RemoveRequest {
        computer: demo(),
        path: path.into(),
        recursive: false,
    };
    for path in ["f/", "ld/"] {
        let err = c.remove(remove(path)).await.unwrap_err();
        assert_errno(&err, Code::FailedPrecondition, "ENOTDIR");
    }
    let rename = |from: &str, to: &str| pb::RenameRequest {
        computer: demo(),
        from: from.into(),
        to: to.into(),
        noreplace: false,
    };
    for (from, to) in [("f/", "g"), ("f", "g/")] {
        let err = c.rename(rename(from, to)).await.unwrap_err();
        assert_errno(&err, Code::FailedPrecondition, "ENOTDIR");
    }
    let err = c
        .symlink(pb::SymlinkRequest {
            computer: demo(),
            path: "s/".into(),
            target: "f".into(),
        })
        .await
        .unwrap_err();
    assert_errno(&err, Code::NotFound, "ENOENT");
    // Nothing was touched, and directories still take the slash.
    assert_eq!(read(&mut c, "demo", "f").await.unwrap(), b"data");
    assert_eq!(names(&mut c, "demo", "").await, ["d", "f", "ld"]);
    // `d/x/..` normalises to `d`, but removing or renaming it is refused.
    c.mkdir(pb::MkdirRequest {
        computer: demo(),
        path: "d/x".into(),
        parents: false,
        perm: 0,
    })
    .await
    .unwrap();
    for path in ["d/x/..", "d/.", "d/x/."] {
        let err = c
            .remove(pb::RemoveRequest {
                computer: demo(),
                path: path.into(),
                recursive: true,
            })
            .await
            .unwrap_err();
        assert_errno(&err, Code::InvalidArgument, "EINVAL");
        let err = c.rename(rename(path, "moved")).await.unwrap_err();
        assert_errno(&err, Code::InvalidArgument, "EINVAL");
    }
    assert_eq!(names(&mut c, "demo", "d").await, ["x"]);
    c.rename(rename("d/", "e/")).await.unwrap();
    c.remove(pb::RemoveRequest {
        computer: demo(),
        path: "e/".into(),
        recursive: true,
    })
    .await
    .unwrap();
    assert_eq!(names(&mut c, "demo", "").await, ["f", "ld"]);
}

/// A StatRequest whose `path` (field 2, a proto3 `string`) may hold any
/// bytes: what a client that does not check UTF-8 sends.
#[derive(Clone, PartialEq, prost::Message)]
struct RawStatRequest {
    #[prost(string, tag = "1")]
    computer: String,
    #[prost(bytes = "vec", tag = "2")]
    path: Vec<u8>,
}

#[tokio::test]
async fn bad_requests_are_invalid_argument_and_dot_paths_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let r = sh(&mut c, "demo", "echo x > f").await;
    assert_eq!(r.code, 0, "{r:?}");

    // Invalid UTF-8 in a string field: the client's mistake.
    let channel = tonic::transport::Endpoint::from_shared(agent.url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let mut req = tonic::Request::new(RawStatRequest {
        computer: "demo".into(),
        path: b"f\xff\xfe".to_vec(),
    });
    req.metadata_mut().insert(
        "authorization",
        format!("Bearer {}", agent.token()).parse().unwrap(),
    );
    let err = grpc
        .unary::<_, pb::FileInfo, _>(
            req,
            http::uri::PathAndQuery::from_static("/agentcomputer.v1.AgentComputer/Stat"),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .expect_err("a path that is not UTF-8 must be refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
    assert!(err.message().contains("UTF-8"), "{}", err.message());

    // `.` and `..` before `workspace` stay at `/`.
    for path in ["/./workspace/f", "/../workspace/f", "//./workspace/./f"] {
        let info = c
            .stat(pb::StatRequest {
                computer: "demo".into(),
                path: path.into(),
                follow_symlinks: true,
            })
            .await
            .unwrap_or_else(|e| panic!("{path}: {}", e.message()))
            .into_inner();
        assert_eq!(info.size, 2, "{path}");
    }
    let err = c
        .stat(pb::StatRequest {
            computer: "demo".into(),
            path: "/./etc/passwd".into(),
            follow_symlinks: true,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);

    // A timeout above the maximum is refused, naming the maximum.
    let err = c
        .exec(pb::ExecRequest {
            timeout_ms: 3_600_001,
            ..exec_req("demo", "echo never")
        })
        .await
        .expect_err("a timeout above the maximum must be refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
    assert!(err.message().contains("3600000 ms"), "{}", err.message());
    let r = run(
        &mut c,
        pb::ExecRequest {
            timeout_ms: 3_600_000,
            ..exec_req("demo", "echo fine")
        },
    )
    .await;
    assert_eq!((r.stdout.as_str(), r.code), ("fine\n", 0), "{r:?}");
}

#[tokio::test]
async fn an_exec_ended_by_delete_says_the_computer_was_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let mut runner = c.clone();
    let running =
        tokio::spawn(async move { sh(&mut runner, "demo", "echo started; sleep 30").await });
    // Delete once the script runs.
    tokio::time::sleep(Duration::from_millis(500)).await;
    c.delete_computer(pb::DeleteComputerRequest {
        name: "demo".into(),
    })
    .await
    .unwrap();
    let r = tokio::time::timeout(Duration::from_secs(20), running)
        .await
        .expect("the run must end when its computer is deleted")
        .unwrap();
    assert_ne!(r.code, 0, "{r:?}");
    assert!(
        r.error.contains("computer demo was deleted"),
        "error {:?}",
        r.error
    );
}
