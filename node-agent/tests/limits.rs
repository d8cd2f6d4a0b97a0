//! One computer cannot hurt the others through streams or the host disk:
//! stalled uploads and reads end and release what they hold, open streams
//! are capped per client and per computer, an unread Read stream buffers
//! little, and the database's host size is reported and given back.

mod common;

use std::time::{Duration, Instant};

use agentcomputer_proto::v1 as pb;
use common::*;
use tonic::Code;

const MIB: u64 = 1 << 20;
/// The address-space limit the stream tests run the agent under (as
/// `isolation.rs`): buffers that grew without bound would fail the test
/// instead of the machine.
const ADDRESS_SPACE: u64 = 4 << 30;

fn upload_header(computer: &str, path: &str) -> pb::WriteRequest {
    pb::WriteRequest {
        msg: Some(pb::write_request::Msg::Header(pb::WriteHeader {
            computer: computer.into(),
            path: path.into(),
            mode: pb::WriteMode::Truncate as i32,
            perm: 0,
            offset: 0,
        })),
    }
}

fn data(bytes: Vec<u8>) -> pb::WriteRequest {
    pb::WriteRequest {
        msg: Some(pb::write_request::Msg::Data(bytes)),
    }
}

fn end(total: u64) -> pb::WriteRequest {
    pb::WriteRequest {
        msg: Some(pb::write_request::Msg::End(pb::WriteEnd {
            total_bytes: total,
        })),
    }
}

/// Uploads `len` bytes to `path` in one call.
async fn upload(
    c: &mut Client,
    computer: &str,
    path: &str,
    len: usize,
) -> Result<(), tonic::Status> {
    let mut msgs = vec![upload_header(computer, path)];
    for piece in (0..len).step_by(MIB as usize) {
        msgs.push(data(vec![b'u'; (len - piece).min(MIB as usize)]));
    }
    msgs.push(end(len as u64));
    c.write(tokio_stream::iter(msgs)).await.map(|_| ())
}

async fn computer(c: &mut Client, name: &str) -> pb::Computer {
    c.get_computer(pb::GetComputerRequest { name: name.into() })
        .await
        .unwrap()
        .into_inner()
}

/// Waits (up to `limit`) until the computer is closed (hibernated).
async fn wait_closed(c: &mut Client, name: &str, limit: Duration) -> pb::Computer {
    let start = Instant::now();
    loop {
        let info = computer(c, name).await;
        if !info.open {
            return info;
        }
        assert!(start.elapsed() < limit, "{name} stayed open");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn read_req(computer: &str, path: &str) -> pb::ReadRequest {
    pb::ReadRequest {
        computer: computer.into(),
        path: path.into(),
        offset: 0,
        length: 0,
    }
}

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// A paused upload used to pin its bytes against the quota (other writes
/// got ENOSPC) and keep the computer from hibernating, forever.
#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_upload_ends_and_gives_back_its_quota() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start_with_address_space(
        dir.path(),
        &["--stream-idle-timeout", "1s", "--idle-timeout", "1s"],
        ADDRESS_SPACE,
    );
    let mut c = agent.client().await;
    create(&mut c, "quota", 4 * MIB).await;

    let mut uploader = agent.client().await;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let started = Instant::now();
    let call = tokio::spawn(async move {
        uploader
            .write(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
    });
    tx.send(upload_header("quota", "paused")).await.unwrap();
    tx.send(data(vec![b'p'; 3 * MIB as usize])).await.unwrap();
    // While it is paused, its bytes count: another upload finds no room.
    let deadline = Instant::now() + Duration::from_secs(5);
    while computer(&mut c, "quota").await.used_bytes < 3 * MIB {
        assert!(
            Instant::now() < deadline,
            "the upload's bytes never arrived"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let e = upload(&mut c, "quota", "other", 2 * MIB as usize)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");

    // The paused upload ends after the idle timeout, nothing published.
    let status = call.await.unwrap().unwrap_err();
    let took = started.elapsed();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(status.message().contains("upload"), "{status:?}");
    assert!(took < Duration::from_secs(4), "took {took:?}");
    drop(tx);
    let deadline = Instant::now() + Duration::from_secs(5);
    while computer(&mut c, "quota").await.used_bytes >= MIB {
        assert!(Instant::now() < deadline, "the quota was not given back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    upload(&mut c, "quota", "other", 2 * MIB as usize)
        .await
        .unwrap();
    let e = c
        .stat(pb::StatRequest {
            computer: "quota".into(),
            path: "paused".into(),
            follow_symlinks: true,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    // And the computer hibernates.
    wait_closed(&mut c, "quota", Duration::from_secs(10)).await;
}

/// An unread Read stream used to hold its lease (the computer never
/// hibernated) and about 8 MB of buffers, forever.
#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_read_ends_releases_its_lease_and_buffers_little() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start_with_address_space(
        dir.path(),
        &[
            "--stream-idle-timeout",
            "3s",
            "--idle-timeout",
            "1s",
            "--max-streams-per-client",
            "100",
            "--max-streams-per-computer",
            "100",
        ],
        ADDRESS_SPACE,
    );
    let mut c = agent.client().await;
    create(&mut c, "reader", 256 * MIB).await;
    upload(&mut c, "reader", "big", 32 * MIB as usize)
        .await
        .unwrap();
    // Warm the engine and the allocator with one full read.
    let mut s = c
        .read(read_req("reader", "big"))
        .await
        .unwrap()
        .into_inner();
    let mut got = 0;
    while let Some(chunk) = s.message().await.unwrap() {
        got += chunk.data.len();
    }
    assert_eq!(got, 32 * MIB as usize);

    // 60 Read streams nobody reads, each on its own connection.
    let before = rss_bytes(agent.pid());
    let mut held = Vec::new();
    for _ in 0..60 {
        let mut r = agent.client().await;
        let s = r
            .read(read_req("reader", "big"))
            .await
            .unwrap()
            .into_inner();
        held.push((r, s));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let grown = rss_bytes(agent.pid()).saturating_sub(before);
    eprintln!(
        "60 unread Read streams: agent RSS grew by {} KiB",
        grown / 1024
    );
    assert!(grown < 60 * 3 * MIB, "60 unread streams took {grown} bytes");

    // After the stream idle timeout they end: the computer can hibernate.
    wait_closed(&mut c, "reader", Duration::from_secs(15)).await;
    let (_, mut s) = held.pop().unwrap();
    let status = loop {
        match s.message().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("a stalled read ended as if complete"),
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn open_streams_are_capped_per_client_and_per_computer() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(
        dir.path(),
        &[
            "--max-streams-per-client",
            "2",
            "--max-streams-per-computer",
            "3",
        ],
    );
    let mut c = agent.client().await;
    create(&mut c, "capped", 64 * MIB).await;
    create(&mut c, "other", 64 * MIB).await;
    upload(&mut c, "capped", "f", 4 * MIB as usize)
        .await
        .unwrap();
    upload(&mut c, "other", "f", 4 * MIB as usize)
        .await
        .unwrap();

    let mut a = agent.client().await;
    let _s1 = a.read(read_req("capped", "f")).await.unwrap().into_inner();
    let _s2 = a.read(read_req("capped", "f")).await.unwrap().into_inner();
    let e = a.read(read_req("capped", "f")).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);
    assert!(e.message().contains("per client"), "{e:?}");
    // Uploads count too.
    let e = upload(&mut a, "capped", "g", 10).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);

    let mut b = agent.client().await;
    let _s3 = b.read(read_req("capped", "f")).await.unwrap().into_inner();
    let e = b.read(read_req("capped", "f")).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);
    assert!(e.message().contains("per computer"), "{e:?}");
    // Another computer still serves.
    let mut s = b.read(read_req("other", "f")).await.unwrap().into_inner();
    let mut got = 0;
    while let Some(chunk) = s.message().await.unwrap() {
        got += chunk.data.len();
    }
    assert_eq!(got, 4 * MIB as usize);
    // Finishing a stream frees its place.
    drop(_s1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _s4 = b.read(read_req("capped", "f")).await.unwrap().into_inner();
}

/// The database's host size is reported beside the used bytes, and a
/// large file's pages go back to the host once it is deleted and the
/// computer goes idle (after deleting a 1.5 GiB file the database used to
/// stay at its high-water size).
#[tokio::test(flavor = "multi_thread")]
async fn disk_bytes_are_reported_and_given_back_when_idle() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &["--idle-timeout", "1s"]);
    let mut c = agent.client().await;
    create(&mut c, "shrink", 256 * MIB).await;
    upload(&mut c, "shrink", "big", 96 * MIB as usize)
        .await
        .unwrap();
    let full = computer(&mut c, "shrink").await;
    assert!(full.disk_bytes >= 96 * MIB, "{full:?}");
    assert!(full.used_bytes >= 96 * MIB, "{full:?}");
    c.remove(pb::RemoveRequest {
        computer: "shrink".into(),
        path: "big".into(),
        recursive: false,
    })
    .await
    .unwrap();
    let idle = wait_closed(&mut c, "shrink", Duration::from_secs(15)).await;
    eprintln!(
        "disk bytes: {} with the file, {} after delete and idle",
        full.disk_bytes, idle.disk_bytes
    );
    assert!(idle.disk_bytes < 4 * MIB, "{idle:?}");
    let db = dir.path().join("computers/shrink/fs.db");
    let on_disk = std::fs::metadata(&db).unwrap().len();
    assert!(on_disk < 4 * MIB, "{} is {on_disk} bytes", db.display());
    assert!(!dir.path().join("computers/shrink/fs.db-wal").exists());
}

/// JavaScript's `/tmp` used to live in /dev/shm, readable by other local
/// users while the exec ran and left behind by a crash.
#[tokio::test(flavor = "multi_thread")]
async fn javascript_scratch_is_private_and_never_left_behind() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // What a crashed run left: removed when the agent starts.
    let scratch = dir.path().join("scratch");
    std::fs::create_dir_all(scratch.join("js-tmp-crashed")).unwrap();
    std::fs::write(scratch.join("js-tmp-crashed/tmp.db"), vec![0u8; 4096]).unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    // The registry is ready once a call succeeded.
    let mut c = agent.client().await;
    create(&mut c, "js", 0).await;
    assert_eq!(
        std::fs::read_dir(&scratch).unwrap().count(),
        0,
        "crash leftovers stayed"
    );
    assert_eq!(mode(&scratch), 0o700);
    let source = r#"import {writeFileSync} from "node:fs";
        writeFileSync("/tmp/secret", "hunter2");
        const until = Date.now() + 3000;
        while (Date.now() < until) {}
        export default () => "done";"#;
    let mut runner = agent.client().await;
    let exec = tokio::spawn(async move { run(&mut runner, js_req("js", source, "null")).await });
    // While it runs, its scratch space is there, and only the agent's user
    // can enter or read it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let sub = loop {
        if let Some(e) = std::fs::read_dir(&scratch).unwrap().next() {
            break e.unwrap().path();
        }
        assert!(Instant::now() < deadline, "no scratch directory appeared");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(mode(&sub), 0o700, "{}", sub.display());
    let mut files = 0;
    for f in std::fs::read_dir(&sub).unwrap() {
        let f = f.unwrap();
        assert_eq!(mode(&f.path()), 0o600, "{}", f.path().display());
        files += 1;
    }
    assert!(files >= 1);
    let ran = exec.await.unwrap();
    assert_eq!(ran.code, 0, "{ran:?}");
    // Removed at the end of the exec.
    assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0);
}
