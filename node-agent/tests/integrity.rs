//! Data integrity through the gRPC API of a real `node-agent local`
//! process: acknowledged uploads across a delete and re-create of their
//! computer, reads that see one version of a file, and online backups.

mod common;

use std::time::Duration;

use agentcomputer_proto::v1 as pb;
use common::*;
use tonic::Code;

async fn delete(c: &mut Client, name: &str) {
    c.delete_computer(pb::DeleteComputerRequest { name: name.into() })
        .await
        .expect("delete computer");
}

/// A Write stream that began before DeleteComputer + CreateComputer of the
/// same name never answers OK for data that went into the deleted computer:
/// it fails with ABORTED, and the new computer holds no part of it.
#[tokio::test]
async fn upload_across_delete_and_recreate_is_not_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    for mode in [
        pb::WriteMode::Create,
        pb::WriteMode::Append,
        pb::WriteMode::Truncate,
    ] {
        create(&mut c, "demo", 0).await;
        let mut uploader = agent.client().await;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let call = tokio::spawn(async move {
            uploader
                .write(tokio_stream::wrappers::ReceiverStream::new(rx))
                .await
        });
        let piece = vec![b'u'; agentcomputer_proto::CHUNK_BYTES];
        tx.send(pb::WriteRequest {
            msg: Some(pb::write_request::Msg::Header(pb::WriteHeader {
                computer: "demo".into(),
                path: "upload".into(),
                mode: mode as i32,
                perm: 0,
                offset: 0,
            })),
        })
        .await
        .unwrap();
        tx.send(pb::WriteRequest {
            msg: Some(pb::write_request::Msg::Data(piece.clone())),
        })
        .await
        .unwrap();
        // Wait until the first piece is in the engine (used bytes grow by a
        // chunk): the upload is running against the old computer.
        let mut started = false;
        for _ in 0..500 {
            let used = c
                .get_computer(pb::GetComputerRequest {
                    name: "demo".into(),
                })
                .await
                .unwrap()
                .into_inner()
                .used_bytes;
            if used >= piece.len() as u64 {
                started = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            started,
            "{mode:?}: the first piece never reached the engine"
        );

        delete(&mut c, "demo").await;
        create(&mut c, "demo", 0).await;
        tx.send(pb::WriteRequest {
            msg: Some(pb::write_request::Msg::Data(piece.clone())),
        })
        .await
        .unwrap();
        tx.send(end_msg(2 * piece.len() as u64)).await.unwrap();
        drop(tx);
        let answer = call.await.unwrap();
        match answer {
            Ok(ok) => {
                // Acknowledged: the data must be in the computer the name
                // denotes now.
                let got = read(&mut c, "demo", "upload").await;
                panic!(
                    "{mode:?}: upload answered OK ({:?}) after its computer was deleted; \
                     the new computer has {:?}",
                    ok.into_inner().bytes_written,
                    got.map(|d| d.len())
                );
            }
            Err(status) => {
                assert_eq!(status.code(), Code::Aborted, "{mode:?}: {status:?}");
                assert!(
                    status.message().contains("was deleted during the write"),
                    "{status:?}"
                );
            }
        }
        let err = read(&mut c, "demo", "upload").await.unwrap_err();
        assert_eq!(err.code(), Code::NotFound, "{mode:?}: {err:?}");
        delete(&mut c, "demo").await;
    }
}

/// Re-uploads `path` (TRUNCATE: a new inode linked over the old one) with
/// `len` bytes of `A`, then of `B`, ... until `stop` is set.
async fn replacer(
    agent: &Agent,
    path: &'static str,
    len: usize,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<u32> {
    let mut c = agent.client().await;
    tokio::spawn(async move {
        let mut rounds = 0u32;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let fill = b'A' + (rounds % 26) as u8;
            write(
                &mut c,
                "demo",
                path,
                pb::WriteMode::Truncate,
                &vec![fill; len],
            )
            .await
            .unwrap();
            rounds += 1;
        }
        rounds
    })
}

/// While JavaScript rewrites files in place (`writeFileSync`: the same
/// inode, truncated and rewritten in one transaction), whole API reads of
/// them see one version (all bytes alike) — the one under the snapshot
/// bound always, the longer one or `ABORTED`; and while uploads replace a
/// file, reads of its path never give `ENOENT`.
#[tokio::test]
async fn api_reads_see_one_version() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    const SMALL: usize = 2 << 20;
    const BIG: usize = 6 << 20;
    write(
        &mut c,
        "demo",
        "replaced",
        pb::WriteMode::Truncate,
        &vec![b'A'; 4096],
    )
    .await
    .unwrap();
    let source = format!(
        r#"const fs = require("fs");
export default ({{rounds}}) => {{
  for (let i = 0; i < rounds; i++) {{
    const c = String.fromCharCode(65 + i % 26);
    fs.writeFileSync("inplace", c.repeat({SMALL}));
    fs.writeFileSync("big", c.repeat({BIG}));
  }}
  return rounds;
}}"#
    );
    // The files exist before the reads start.
    let first = run(&mut c, js_req("demo", &source, r#"{"rounds":1}"#)).await;
    assert_eq!(first.code, 0, "{first:?}");
    let mut js = agent.client().await;
    let rewriting =
        tokio::spawn(
            async move { run(&mut js, js_req("demo", &source, r#"{"rounds":25}"#)).await },
        );
    let stop = Arc::new(AtomicBool::new(false));
    let replacing = replacer(&agent, "replaced", 4096, stop.clone()).await;
    let uniform = |data: &[u8]| data.iter().all(|&b| b == data[0]);
    let (mut reads, mut mixed, mut missing, mut aborted, mut whole_big) = (0, 0, 0, 0, 0);
    while !rewriting.is_finished() {
        reads += 1;
        let data = read(&mut c, "demo", "inplace").await.unwrap();
        assert_eq!(data.len(), SMALL);
        if !uniform(&data) {
            mixed += 1;
        }
        match read(&mut c, "demo", "replaced").await {
            Ok(data) => assert!(data.len() == 4096 && uniform(&data)),
            Err(e) if e.code() == Code::NotFound => missing += 1,
            Err(e) => panic!("read of a replaced file: {e:?}"),
        }
        match read(&mut c, "demo", "big").await {
            Ok(data) => {
                assert_eq!(data.len(), BIG);
                if !uniform(&data) {
                    mixed += 1;
                }
                whole_big += 1;
            }
            Err(e) => {
                assert_eq!(e.code(), Code::Aborted, "{e:?}");
                assert!(e.message().contains("changed while it was read"), "{e:?}");
                aborted += 1;
            }
        }
    }
    let ran = rewriting.await.unwrap();
    assert_eq!(ran.code, 0, "{ran:?}");
    stop.store(true, Ordering::Relaxed);
    let replaced = replacing.await.unwrap();
    assert!(
        reads >= 3 && replaced > 3,
        "too little overlap: {reads} reads, {replaced} uploads"
    );
    assert_eq!(mixed, 0, "reads mixed two versions");
    assert_eq!(missing, 0, "reads of an always-existing path gave ENOENT");
    eprintln!("{reads} rounds of reads; big file: {whole_big} whole, {aborted} aborted");
    // Unchanged, a big file reads whole.
    let data = read(&mut c, "demo", "big").await.unwrap();
    assert!(data.len() == BIG && uniform(&data));
}
