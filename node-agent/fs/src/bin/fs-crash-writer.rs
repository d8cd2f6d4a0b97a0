//! Crash-test driver for the engine (used by `tests/crash.rs`).
//!
//! Usage: `fs-crash-writer DB FIRST_ID [COMMIT_WINDOW_MS]` (the window: a
//! group-commit view, see `Fs::with_commit_window`). Writes records through the engine
//! forever, starting at record `FIRST_ID`; after each record is fsynced it
//! prints one line describing it, so whatever was printed before a SIGKILL
//! is what the engine acknowledged:
//!
//! * `ack PATH LEN SEED [OFF PLEN PSEED]`: file PATH holds `LEN` bytes of
//!   `pattern(SEED)`, overwritten at `OFF` by `PLEN` bytes of `pattern(PSEED)`;
//! * `orphan INO`: inode INO was unlinked while open; after a crash it must
//!   be gone.

use std::io::Write;
use std::path::PathBuf;

use agentcomputer_fs::{FileKind, Fs, Handle, Limits, Owner, ROOT_INO, RenameFlags, WriteMode};

/// The bytes of a record: a xorshift stream from `seed`.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let db = PathBuf::from(
        args.next()
            .ok_or("usage: fs-crash-writer DB FIRST_ID [COMMIT_WINDOW_MS]")?,
    );
    let first: u64 = args.next().ok_or("missing FIRST_ID")?.parse()?;
    let fs = Fs::open_or_create(&db, Limits::default())?;
    // Optional third argument: a commit window in ms (group commit).
    let fs = match args.next() {
        Some(ms) => fs.with_commit_window(std::time::Duration::from_millis(ms.parse()?)),
        None => fs,
    };
    let own = Owner::ROOT;
    for k in 0..8 {
        match fs.mkdir(ROOT_INO, format!("d{k}").as_bytes(), 0o755, own) {
            Err(e) if e.errno_name() == "EEXIST" => {}
            r => {
                r?;
            }
        }
    }
    let mut out = std::io::stdout().lock();
    let mut held: Option<Handle> = None;
    for id in first.. {
        let seed = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5555;
        let dir = format!("/d{}", id % 8);
        let len = (seed % 40_000) as usize + 1;
        let line = match id % 4 {
            0 => {
                let path = format!("{dir}/f{id}");
                fs.write_all(
                    ROOT_INO,
                    path.as_bytes(),
                    &pattern(seed, len),
                    WriteMode::CreateNew,
                    0o644,
                    own,
                )?;
                format!("ack {path} {len} {seed}")
            }
            1 => {
                // A file larger than several chunks, written piecewise.
                let path = format!("/big{id}");
                let len = 300_000 + len;
                let a = fs.mknod(
                    ROOT_INO,
                    &path.as_bytes()[1..],
                    FileKind::RegularFile,
                    0o644,
                    0,
                    own,
                )?;
                let data = pattern(seed, len);
                for (i, piece) in data.chunks(50_000).enumerate() {
                    fs.write(a.ino, (i * 50_000) as u64, piece)?;
                }
                format!("ack {path} {len} {seed}")
            }
            2 => {
                let tmp = format!("tmp{id}");
                let path = format!("{dir}/r{id}");
                let a = fs.write_all(
                    ROOT_INO,
                    tmp.as_bytes(),
                    &pattern(seed, len),
                    WriteMode::Truncate,
                    0o644,
                    own,
                )?;
                let (d, name) = fs.resolve_parent(ROOT_INO, path.as_bytes())?;
                fs.rename(ROOT_INO, tmp.as_bytes(), d, &name, RenameFlags::default())?;
                let _ = a;
                format!("ack {path} {len} {seed}")
            }
            _ => {
                let path = format!("{dir}/p{id}");
                let a = fs.write_all(
                    ROOT_INO,
                    path.as_bytes(),
                    &pattern(seed, len),
                    WriteMode::Truncate,
                    0o644,
                    own,
                )?;
                let off = (seed >> 20) % len as u64;
                let plen = ((seed >> 40) % 70_000) as usize + 1;
                let pseed = seed ^ 0xabcd;
                fs.write(a.ino, off, &pattern(pseed, plen))?;
                format!("ack {path} {len} {seed} {off} {plen} {pseed}")
            }
        };
        fs.fsync(None)?;
        writeln!(out, "{line}")?;
        out.flush()?;
        if id % 10 == 0 {
            // Unlink a file while it is open, and keep it open.
            let name = format!("o{id}");
            let a = fs.write_all(
                ROOT_INO,
                name.as_bytes(),
                &pattern(seed, 100_000),
                WriteMode::Truncate,
                0o644,
                own,
            )?;
            let h = fs.open_inode(a.ino)?;
            fs.unlink(ROOT_INO, name.as_bytes())?;
            fs.write(a.ino, 100_000, b"still open")?;
            fs.fsync(None)?;
            held = Some(h);
            writeln!(out, "orphan {}", a.ino)?;
            out.flush()?;
        }
    }
    drop(held);
    Ok(())
}
