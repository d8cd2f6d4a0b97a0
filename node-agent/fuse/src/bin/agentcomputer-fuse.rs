//! `agentcomputer-fuse`: mounts one computer database at a directory until
//! SIGINT or SIGTERM, or until the mount is unmounted from outside
//! (`fusermount3 -u`, `umount`). Used by the crash test, the pjdfstest script and the
//! filesystem benchmark; the node agent mounts through the library instead.
//!
//! With `--fd N` it serves a connection that its parent mounted and passed
//! as descriptor N instead of mounting, and prints `init HEX` (the
//! connection's `FUSE_INIT` record); with `--resume-init HEX` as well it
//! takes that live connection over from an earlier server (the take-over
//! test kills one server and starts the next).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use agentcomputer_fs::{Fs, Limits, OpenOptions};
use std::os::fd::{FromRawFd, OwnedFd};

use agentcomputer_fuse::{
    InitRecord, MountOptions, cleanup_stale_mounts, mount, resume_connection, serve_connection,
};
use clap::Parser;
use nix::sys::signal::{SigSet, Signal};

/// Serve a computer's filesystem database as a FUSE mount.
#[derive(Parser)]
struct Args {
    /// The SQLite database of the filesystem (created if missing).
    #[arg(long)]
    db: PathBuf,
    /// Directory to mount on (ignored with `--fd`).
    #[arg(long, required_unless_present = "fd")]
    mountpoint: Option<PathBuf>,
    /// Serve the FUSE connection of this inherited descriptor (mounted by
    /// the parent with `fd=N`) instead of mounting.
    #[arg(long)]
    fd: Option<i32>,
    /// With `--fd`: the connection is live, served before; take it over
    /// with this `FUSE_INIT` record (hex, as printed by the first server).
    #[arg(long, requires = "fd")]
    resume_init: Option<String>,
    /// Request-serving threads.
    #[arg(long, default_value_t = MountOptions::default().threads)]
    threads: usize,
    /// Attribute, entry and negative-entry cache timeout, in milliseconds.
    #[arg(long)]
    ttl_ms: Option<u64>,
    /// Turn the kernel's writeback cache on (off by default, as for the
    /// node agent's mounts: docs/fuse.md, "Why the writeback cache is off").
    #[arg(long)]
    writeback: bool,
    /// Group commit window, in milliseconds (0: commit every request).
    #[arg(long, default_value_t = MountOptions::default().commit_window.as_millis() as u64)]
    commit_window_ms: u64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    // Block the stop signals before any thread starts, so only sigwait sees them.
    let mut stop = SigSet::empty();
    stop.add(Signal::SIGINT);
    stop.add(Signal::SIGTERM);
    stop.thread_block()?;

    // A live connection's kernel may hold files unlinked while open: the
    // engine keeps them for it (freed at its FORGET).
    let options = OpenOptions {
        keep_orphans: args.resume_init.is_some(),
    };
    let fs = Fs::open_or_create_with(&args.db, Limits::default(), options)?;
    let mut opts = MountOptions {
        threads: args.threads,
        writeback_cache: args.writeback,
        commit_window: Duration::from_millis(args.commit_window_ms),
        ..MountOptions::default()
    };
    if let Some(ms) = args.ttl_ms {
        let ttl = Duration::from_millis(ms);
        (opts.attr_ttl, opts.entry_ttl, opts.negative_ttl) = (ttl, ttl, ttl);
    }
    if let Some(fd) = args.fd {
        return serve_inherited(fs, fd, opts, args.resume_init.as_deref(), &stop);
    }
    let mountpoint = args.mountpoint.expect("clap requires it without --fd");
    cleanup_stale_mounts(&mountpoint)?;
    let handle = mount(fs, &mountpoint, opts)?;
    println!("mounted {}", mountpoint.display());
    std::io::stdout().flush()?;
    loop {
        if let Some(sig) = wait_signal(&stop, Duration::from_millis(200))? {
            eprintln!("{sig}: unmounting");
            break;
        }
        if !handle.is_serving() {
            eprintln!("unmounted from outside: exiting");
            break;
        }
    }
    handle.unmount()?;
    Ok(())
}

/// Serves the inherited connection `fd` until it ends or a stop signal
/// comes (then the connection is left for the next server).
fn serve_inherited(
    fs: Fs,
    fd: i32,
    opts: MountOptions,
    resume: Option<&str>,
    stop: &SigSet,
) -> Result<(), Box<dyn std::error::Error>> {
    // SAFETY: the parent passed `fd` open for this process to own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let conn = match resume {
        Some(hex_init) => {
            let init = InitRecord::from_bytes(hex::decode(hex_init)?)?;
            resume_connection(fs, fd, opts, init)?
        }
        None => serve_connection(fs, fd, opts)?,
    };
    println!("init {}", hex::encode(conn.init_record().as_bytes()));
    std::io::stdout().flush()?;
    loop {
        if let Some(sig) = wait_signal(stop, Duration::from_millis(200))? {
            eprintln!("{sig}: leaving the connection");
            return Ok(());
        }
        if !conn.is_serving() {
            eprintln!("the connection ended: exiting");
            return Ok(());
        }
    }
}

/// Waits up to `timeout` for one of the blocked signals in `set`
/// (`sigtimedwait(2)`); `None` when none arrived.
fn wait_signal(set: &SigSet, timeout: Duration) -> std::io::Result<Option<Signal>> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `set` is a valid sigset_t, `ts` a valid timespec, and a null
    // siginfo pointer is allowed.
    let n = unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &ts) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
            _ => Err(e),
        };
    }
    Signal::try_from(n).map(Some).map_err(std::io::Error::from)
}
