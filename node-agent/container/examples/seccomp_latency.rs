//! What the sandbox's seccomp filter costs a run: bubblewrap with the
//! sandbox's namespaces starting `COMMAND` and exiting, with and without
//! the filter's programs (`--add-seccomp-fd`), the two alternating in one
//! process so that load on the machine affects both alike. Needs root
//! and `bwrap`.
//!
//! ```text
//! cargo run -p agentcomputer-container --example seccomp_latency -- [RUNS] [COMMAND...]
//! ```
//!
//! Prints p50 and p99 in milliseconds for each, and the difference of the
//! p50s. Default: 200 runs of `/bin/true`.

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentcomputer_container::seccomp::Filters;

fn main() {
    let mut args = std::env::args().skip(1);
    let runs: usize = args
        .next()
        .map(|n| n.parse().expect("RUNS is a number"))
        .unwrap_or(200);
    let mut command: Vec<String> = args.collect();
    if command.is_empty() {
        command = vec!["/bin/true".into()];
    }
    let filters = Filters::for_this_arch().expect("no seccomp filter here");
    let mut plain = Vec::with_capacity(runs);
    let mut filtered = Vec::with_capacity(runs);
    // One warm-up of each, then alternate.
    for i in 0..runs * 2 + 2 {
        let with_filter = i % 2 == 1;
        let took = once(&filters, with_filter, &command);
        if i >= 2 {
            if with_filter {
                filtered.push(took)
            } else {
                plain.push(took)
            }
        }
    }
    let (p50a, p99a) = percentiles(&mut plain);
    let (p50b, p99b) = percentiles(&mut filtered);
    println!("{runs} runs of {command:?} in bwrap, alternating:");
    println!("  without the filter: p50 {p50a:.2} ms, p99 {p99a:.2} ms");
    println!("  with the filter:    p50 {p50b:.2} ms, p99 {p99b:.2} ms");
    println!("  p50 difference: {:+.2} ms", p50b - p50a);
}

/// One sandbox start to exit, in the namespaces a run gets.
fn once(filters: &Filters, with_filter: bool, command: &[String]) -> Duration {
    let fds = if with_filter {
        filters.memfds().expect("memfd")
    } else {
        Vec::new()
    };
    let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let mut cmd = Command::new("bwrap");
    cmd.args([
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-net",
        "--unshare-cgroup-try",
    ]);
    for dir in ["/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc"] {
        match std::fs::read_link(dir) {
            Ok(target) => {
                cmd.arg("--symlink").arg(target).arg(dir);
            }
            Err(_) if std::path::Path::new(dir).is_dir() => {
                cmd.args(["--ro-bind", dir, dir]);
            }
            Err(_) => {}
        }
    }
    cmd.args(["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]);
    for fd in &raw {
        cmd.arg("--add-seccomp-fd").arg(fd.to_string());
    }
    cmd.arg("--").args(command);
    cmd.stdin(Stdio::null()).stdout(Stdio::null());
    let inherit = raw.clone();
    // SAFETY: fcntl only, on descriptors open before the fork.
    unsafe {
        cmd.pre_exec(move || {
            for fd in &inherit {
                if libc::fcntl(*fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let started = Instant::now();
    let status = cmd.status().expect("cannot run bwrap");
    let took = started.elapsed();
    assert!(status.success(), "bwrap failed: {status}");
    drop(fds);
    took
}

fn percentiles(v: &mut [Duration]) -> (f64, f64) {
    v.sort();
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1000.0;
    (at(0.5), at(0.99))
}
