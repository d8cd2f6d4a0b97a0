//! Moving data in and out of a computer over gRPC, against a real
//! `node-agent local`: ExecStream (stdin in chunks, any size), Export (a
//! tree as a tar stream) and Import (a tar stream unpacked, hostile entries
//! refused).

mod common;

use agentcomputer_proto::v1 as pb;
use common::{Agent, Client, assert_errno, create, exec_req, js_req, sh};
use pb::exec_event::Event;
use pb::exec_stream_request::Msg;
use tonic::Code;

fn start_msg(req: pb::ExecRequest) -> pb::ExecStreamRequest {
    pb::ExecStreamRequest {
        msg: Some(Msg::Start(req)),
    }
}

fn stdin_msg(data: &[u8]) -> pb::ExecStreamRequest {
    pb::ExecStreamRequest {
        msg: Some(Msg::Stdin(data.to_vec())),
    }
}

fn end_msg() -> pb::ExecStreamRequest {
    pb::ExecStreamRequest {
        msg: Some(Msg::StdinEnd(pb::StdinEnd {})),
    }
}

/// Output and exit of an ExecStream call given `messages`.
async fn run_stream(
    c: &mut Client,
    messages: impl tokio_stream::Stream<Item = pb::ExecStreamRequest> + Send + 'static,
) -> Result<(String, pb::ExecExit), tonic::Status> {
    let mut events = c.exec_stream(messages).await?.into_inner();
    let mut out = String::new();
    while let Some(ev) = events.message().await? {
        match ev.event.unwrap() {
            Event::Stdout(b) | Event::Stderr(b) => out.push_str(&String::from_utf8_lossy(&b)),
            Event::Exit(e) => return Ok((out, e)),
        }
    }
    panic!("no exit event: {out}");
}

/// 48 MiB of input in 1 MiB chunks, sent from a task through a channel
/// of two, as a client that does not hold its input would.
fn chunked_input(
    req: pb::ExecRequest,
    chunks: usize,
    end: bool,
) -> tokio_stream::wrappers::ReceiverStream<pb::ExecStreamRequest> {
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    tokio::spawn(async move {
        let _ = tx.send(start_msg(req)).await;
        for i in 0..chunks {
            let chunk = vec![b'a' + (i % 26) as u8; 1 << 20];
            if tx.send(stdin_msg(&chunk)).await.is_err() {
                return;
            }
        }
        if end {
            let _ = tx.send(end_msg()).await;
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_stream_gives_the_shell_input_of_any_size() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;

    // 48 MiB, twelve times one message, into a file as it comes.
    let (out, exit) = run_stream(
        &mut c,
        chunked_input(exec_req("demo", "cat > big.txt; ls -l big.txt"), 48, true),
    )
    .await
    .unwrap();
    assert_eq!((exit.code, exit.error.as_str()), (0, ""), "{out}");
    assert!(out.contains(&(48u64 << 20).to_string()), "{out}");

    // The request's own stdin comes first; a half-close ends the input too.
    let mut req = exec_req("demo", "cat; echo; cat");
    req.stdin = b"first ".to_vec();
    let messages = tokio_stream::iter(vec![start_msg(req), stdin_msg(b"second")]);
    let (out, exit) = run_stream(&mut c, messages).await.unwrap();
    assert_eq!((out.as_str(), exit.code), ("first second\n", 0));

    // A script that reads nothing ends at once, whatever is still coming.
    let began = std::time::Instant::now();
    let (_, exit) = run_stream(&mut c, chunked_input(exec_req("demo", "true"), 48, true))
        .await
        .unwrap();
    assert_eq!(exit.code, 0);
    assert!(began.elapsed() < std::time::Duration::from_secs(30));

    // The first message must start the run.
    let err = run_stream(&mut c, tokio_stream::iter(vec![stdin_msg(b"x")]))
        .await
        .unwrap_err();
    assert_errno(&err, Code::InvalidArgument, "EINVAL");

    // A second `start` stops the run and says why.
    let messages = tokio_stream::iter(vec![
        start_msg(exec_req("demo", "cat > /dev/null")),
        start_msg(exec_req("demo", "true")),
    ]);
    let (_, exit) = run_stream(&mut c, messages).await.unwrap();
    assert!(exit.error.contains("standard input failed"), "{exit:?}");
    assert!(exit.error.contains("second `start`"), "{exit:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_gets_streamed_input_whole_within_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let source = "export default () => require('fs').readFileSync(0).length";
    let (_, exit) = run_stream(&mut c, chunked_input(js_req("demo", source, ""), 6, true))
        .await
        .unwrap();
    assert_eq!(exit.result_json, (6u64 << 20).to_string(), "{exit:?}");

    let mut req = js_req("demo", source, "");
    req.memory_limit_bytes = 8 << 20;
    let (_, exit) = run_stream(&mut c, chunked_input(req, 12, true))
        .await
        .unwrap();
    assert_eq!(exit.code, 1);
    assert!(exit.error.contains("memory budget"), "{exit:?}");
}

/// The Export stream of `path`, as one archive.
async fn export(c: &mut Client, path: &str) -> Result<Vec<u8>, tonic::Status> {
    let mut stream = c
        .export(pb::ExportRequest {
            computer: "demo".into(),
            path: path.into(),
        })
        .await?
        .into_inner();
    let mut all = Vec::new();
    while let Some(chunk) = stream.message().await? {
        assert!(chunk.data.len() <= agentcomputer_proto::CHUNK_BYTES);
        all.extend_from_slice(&chunk.data);
    }
    Ok(all)
}

/// Imports `archive` under `path` in chunks of 64 KiB.
async fn import(
    c: &mut Client,
    path: &str,
    archive: &[u8],
) -> Result<pb::ImportResponse, tonic::Status> {
    use pb::import_request::Msg;
    let mut messages = vec![pb::ImportRequest {
        msg: Some(Msg::Header(pb::ImportHeader {
            computer: "demo".into(),
            path: path.into(),
        })),
    }];
    for piece in archive.chunks(64 << 10) {
        messages.push(pb::ImportRequest {
            msg: Some(Msg::Data(piece.to_vec())),
        });
    }
    messages.push(pb::ImportRequest {
        msg: Some(Msg::End(pb::ImportEnd {})),
    });
    c.import(tokio_stream::iter(messages))
        .await
        .map(|r| r.into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_and_import_copy_a_tree_and_refuse_hostile_archives() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 64 << 20).await;
    let made = sh(
        &mut c,
        "demo",
        "mkdir -p src/a/b src/empty && printf hi > src/a/b/x.txt && head -c 3000000 /dev/urandom > src/a/big.bin \
         && chmod 750 src/a/b && chmod 600 src/a/b/x.txt && ln -s ../a/big.bin src/a/b/link && ln src/a/big.bin src/a/hard.bin",
    )
    .await;
    assert_eq!(made.code, 0, "{made:?}");

    let archive = export(&mut c, "src").await.unwrap();
    let mut entries: Vec<(String, tar::EntryType, u32)> = tar::Archive::new(&archive[..])
        .entries()
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let path = e.path().unwrap().display().to_string();
            (path, e.header().entry_type(), e.header().mode().unwrap())
        })
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let names: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        names,
        [
            ".",
            "a",
            "a/b",
            "a/b/link",
            "a/b/x.txt",
            "a/big.bin",
            "a/hard.bin",
            "empty"
        ]
    );
    let of = |name: &str| entries.iter().find(|e| e.0 == name).unwrap();
    assert_eq!(of("a/b").2, 0o750);
    assert_eq!(of("a/b/link").1, tar::EntryType::Symlink);
    assert_eq!(of("a/hard.bin").1, tar::EntryType::Link);

    // Back in under another name: the same tree.
    sh(&mut c, "demo", "mkdir copy").await;
    let done = import(&mut c, "copy", &archive).await.unwrap();
    assert_eq!(done.entries, 8);
    let compare = sh(
        &mut c,
        "demo",
        "cmp src/a/big.bin copy/a/big.bin && readlink copy/a/b/link && stat -c '%a %h' copy/a/b copy/a/b/x.txt copy/a/big.bin && ls copy/empty | wc -l",
    )
    .await;
    assert_eq!(
        compare.stdout, "../a/big.bin\n750 2\n600 1\n644 2\n0\n",
        "{compare:?}"
    );

    // Hostile archives: refused with EINVAL naming the entry; nothing
    // lands outside the target.
    let mut planted = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    planted.append_link(&mut h, "escape", "../src").unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_size(1);
    planted
        .append_data(&mut h, "escape/evil.txt", &b"x"[..])
        .unwrap();
    let planted = planted.into_inner().unwrap();
    sh(&mut c, "demo", "mkdir h").await;
    let err = import(&mut c, "h", &planted).await.unwrap_err();
    assert_errno(&err, Code::InvalidArgument, "EINVAL");
    assert!(err.message().contains("escape/evil.txt"), "{err:?}");
    // All or nothing: not even the symlink before the refused entry stays.
    let check = sh(&mut c, "demo", "ls src; ls -A h | wc -l").await;
    assert_eq!(check.stdout, "a\nempty\n0\n");

    let mut fifo = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Fifo);
    h.set_size(0);
    fifo.append_data(&mut h, "pipe", std::io::empty()).unwrap();
    let err = import(&mut c, "h", &fifo.into_inner().unwrap())
        .await
        .unwrap_err();
    assert_errno(&err, Code::InvalidArgument, "EINVAL");
    assert!(err.message().contains("FIFOs"), "{err:?}");

    // Past the quota (64 MiB): ENOSPC naming the file; the computer is
    // still usable, and nothing of the archive is there, neither the
    // half-written file nor the whole one before it.
    let mut big = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(3);
    big.append_data(&mut h, "first.txt", &b"one"[..]).unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_size(80 << 20);
    big.append_data(&mut h, "huge.bin", std::io::repeat(7).take(80 << 20))
        .unwrap();
    let err = import(&mut c, "h", &big.into_inner().unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("huge.bin"), "{err:?}");
    let after = sh(
        &mut c,
        "demo",
        "ls -A h | wc -l; echo ok > h/ok.txt && cat h/ok.txt",
    )
    .await;
    assert_eq!(after.stdout, "0\nok\n");

    // The target must be a directory.
    let err = import(&mut c, "src/a/big.bin", &archive).await.unwrap_err();
    assert_errno(&err, Code::FailedPrecondition, "ENOTDIR");
}

use std::io::Read as _;
