//! `agentcomputer-fuse`: mounts one computer database at a directory until
//! SIGINT or SIGTERM, or until the mount is unmounted from outside
//! (`fusermount3 -u`, `umount`). Used by the crash test, the pjdfstest script and the
//! filesystem benchmark; the node agent mounts through the library instead.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use agentcomputer_fs::{Fs, Limits};
use agentcomputer_fuse::{MountOptions, cleanup_stale_mounts, mount};
use clap::Parser;
use nix::sys::signal::{SigSet, Signal};

/// Serve a computer's filesystem database as a FUSE mount.
#[derive(Parser)]
struct Args {
    /// The SQLite database of the filesystem (created if missing).
    #[arg(long)]
    db: PathBuf,
    /// Directory to mount on.
    #[arg(long)]
    mountpoint: PathBuf,
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

    cleanup_stale_mounts(&args.mountpoint)?;
    let fs = Fs::open_or_create(&args.db, Limits::default())?;
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
    let handle = mount(fs, &args.mountpoint, opts)?;
    println!("mounted {}", args.mountpoint.display());
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
