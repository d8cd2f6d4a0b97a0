//! The shell runtime's `tar`: archives of any size stream through it (an
//! archive larger than the exec's memory budget unpacks from streamed
//! stdin), `tar c` / `tar t` / `tar x` agree with each other and with the
//! tar format, and errors read as GNU tar's. Real engine databases.

mod common;

use agentcomputer_shell::{ExecRequest, ShellLimits, StdinStream};
use common::{Computer, Run};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The exec's memory budget in these tests (16 MiB).
const BUDGET: u64 = 16 << 20;

/// `len` bytes no compressor shrinks, different for each `seed`.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A tar archive (GNU headers, as GNU tar writes) of `files`, each
/// `(name, data)`, with the directories they need named first.
fn archive(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = tar::Builder::new(Vec::new());
    let mut dirs = std::collections::BTreeSet::new();
    for (name, _) in files {
        let mut at = String::new();
        for part in name.split('/').collect::<Vec<_>>().split_last().unwrap().1 {
            at = if at.is_empty() {
                part.to_string()
            } else {
                format!("{at}/{part}")
            };
            if dirs.insert(at.clone()) {
                let mut h = tar::Header::new_gnu();
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o755);
                h.set_size(0);
                out.append_data(&mut h, &at, std::io::empty()).unwrap();
            }
        }
    }
    for (name, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        h.set_mtime(1_700_000_000);
        out.append_data(&mut h, name, &data[..]).unwrap();
    }
    out.into_inner().unwrap()
}

/// Runs `script` with `input` on a [`StdinStream`] in 64 KiB chunks, the
/// way ExecStream delivers it, under [`BUDGET`].
async fn streamed(c: &Computer, script: &str, input: Vec<u8>) -> Run {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        for chunk in input.chunks(64 * 1024) {
            if tx.send(chunk.to_vec()).await.is_err() {
                return;
            }
        }
    });
    let req = ExecRequest {
        script: script.into(),
        stdin_stream: StdinStream::new(rx),
        timeout: Duration::from_secs(300),
        ..ExecRequest::default()
    };
    let limits = ShellLimits {
        memory_bytes: BUDGET,
        ..ShellLimits::default()
    };
    common::exec_with_limits(&c.fs, req, CancellationToken::new(), limits).await
}

#[tokio::test]
async fn an_archive_larger_than_the_memory_budget_unpacks_from_streamed_stdin() {
    let c = Computer::new();
    // 40 MiB of files, two and a half times the budget, in 5 files of 8 MiB
    // and small ones in nested directories.
    let mut files: Vec<(String, Vec<u8>)> = (0..5)
        .map(|i| (format!("big/f{i}.bin"), noise(i, 8 << 20)))
        .collect();
    for i in 0..50 {
        files.push((
            format!("small/d{}/s{i}.txt", i % 7),
            format!("small {i}\n").into_bytes(),
        ));
    }
    let tarball = archive(&files);
    assert!(tarball.len() as u64 > 2 * BUDGET);

    c.sh("mkdir v w").await.ok();
    // A `mkdir` first leaves the archive to `tar`.
    let out = streamed(
        &c,
        "mkdir out && tar x -C out && echo done",
        tarball.clone(),
    )
    .await;
    assert_eq!(out.ok(), "done\n");
    for (name, data) in &files {
        assert!(c.read(&format!("out/{name}")) == *data, "{name} differs");
    }

    // `tar xvf -` from the working directory: the names as it goes.
    let out = streamed(&c, "cd v && tar xvf - | tail -n 2", tarball.clone()).await;
    assert_eq!(out.ok(), "small/d6/s48.txt\nsmall/d0/s49.txt\n");
    assert!(c.read("v/big/f4.bin") == files[4].1);

    // The same stream through a form bashkit's tar runs (it holds the
    // whole archive) passes the budget: the test would see a tar that
    // gathers its input.
    let out = streamed(&c, "tar x -C w --strip-components=0", tarball).await;
    assert_ne!(out.code(), 0);
    assert!(out.stderr().contains("memory limit"), "{}", out.stderr());
}

#[tokio::test]
async fn a_gzipped_stream_unpacks_with_z_or_without() {
    let c = Computer::new();
    let files = vec![
        ("a/x.bin".to_string(), noise(9, 3 << 20)),
        ("a/y.txt".to_string(), b"y\n".to_vec()),
    ];
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &archive(&files)).unwrap();
    let gz = gz.finish().unwrap();
    c.sh("mkdir z n p in").await.ok();
    for script in ["tar xz -C z", "tar x -C n"] {
        streamed(&c, script, gz.clone()).await.ok();
    }
    for dir in ["z", "n"] {
        assert!(c.read(&format!("{dir}/a/x.bin")) == files[0].1);
        assert_eq!(c.read(&format!("{dir}/a/y.txt")), b"y\n");
    }
    // `z` on an archive that is not gzip fails, as GNU tar's does.
    let out = streamed(&c, "tar xz -C p", archive(&files)).await;
    assert_eq!(out.code(), 2);
    assert!(
        out.stderr().contains("not in gzip format"),
        "{}",
        out.stderr()
    );
}

#[tokio::test]
async fn create_list_and_extract_agree() {
    let c = Computer::new();
    c.write("seed.bin", &noise(3, 5 << 20));
    let out = c
        .sh(
            "mkdir -p src/sub && mv seed.bin src/sub/f.bin && echo hi > src/a.txt && \
             ln -s sub/f.bin src/link && ln src/a.txt src/hard.txt && \
             tar c src | tar t && \
             mkdir copy && tar cf - src | tar x -C copy && \
             cmp src/sub/f.bin copy/src/sub/f.bin && readlink copy/src/link && \
             stat -c %h copy/src/a.txt && \
             tar czf src.tgz src && tar tzf src.tgz | wc -l && \
             tar cvf plain.tar -C src sub a.txt && tar tf plain.tar",
        )
        .await;
    let text = out.ok();
    let mut lines = text.lines();
    let mut listed: Vec<&str> = lines.by_ref().take(6).collect();
    listed.sort();
    assert_eq!(
        listed,
        [
            "src/",
            "src/a.txt",
            "src/hard.txt",
            "src/link",
            "src/sub/",
            "src/sub/f.bin"
        ]
    );
    assert_eq!(
        lines.collect::<Vec<_>>(),
        [
            "sub/f.bin",
            "2",
            "6",
            "sub/",
            "sub/f.bin",
            "a.txt",
            "sub/",
            "sub/f.bin",
            "a.txt"
        ]
    );
    assert!(c.read("copy/src/sub/f.bin") == c.read("src/sub/f.bin"));
}

#[tokio::test]
async fn errors_read_as_gnu_tars() {
    let c = Computer::new();
    let out = streamed(&c, "tar x -C nope", archive(&[("f".into(), b"x".to_vec())])).await;
    assert_eq!(out.code(), 2);
    assert_eq!(
        out.stderr(),
        "tar: nope: Cannot open: No such file or directory\n\
         tar: Error is not recoverable: exiting now\n"
    );

    let out = c
        .sh("mkdir d; tar cf d.tar d missing; echo $?; tar tf d.tar")
        .await;
    assert_eq!(out.stdout(), "2\nd/\n");
    assert_eq!(
        out.stderr(),
        "tar: missing: Cannot stat: No such file or directory\n\
         tar: Exiting with failure status due to previous errors\n"
    );

    // A hostile entry stops the command; nothing lands outside.
    let mut hostile = Vec::new();
    let mut h = tar::Header::new_gnu();
    h.set_size(1);
    h.set_mode(0o644);
    h.as_gnu_mut().unwrap().name[..8].copy_from_slice(b"../evil\0");
    h.set_cksum();
    hostile.extend_from_slice(h.as_bytes());
    hostile.extend_from_slice(&[b'x'; 512]);
    hostile.extend_from_slice(&[0; 1024]);
    c.sh("mkdir in").await.ok();
    let out = streamed(&c, "tar x -C in", hostile).await;
    assert_eq!(out.code(), 2);
    assert!(
        out.stderr()
            .starts_with("tar: ../evil: refused: a `..` component\n"),
        "{}",
        out.stderr()
    );
    assert!(
        c.fs.resolve(agentcomputer_fs::ROOT_INO, b"evil", false)
            .is_err()
    );

    // No input at all (an exec without stdin), as GNU tar: not an archive.
    for script in ["tar x", "tar t"] {
        let out = c.sh(script).await;
        assert_eq!(out.code(), 2, "{script}");
        assert_eq!(
            out.stderr(),
            "tar: This does not look like a tar archive (the input is empty)\n\
             tar: Error is not recoverable: exiting now\n",
            "{script}"
        );
    }

    let out = streamed(&c, "tar t", b"this is not an archive at all".repeat(40)).await;
    assert_eq!(out.code(), 2);
    assert!(
        out.stderr()
            .starts_with("tar: This does not look like a tar archive"),
        "{}",
        out.stderr()
    );
}
