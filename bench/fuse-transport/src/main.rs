//! `fuse-transport`: what one FUSE round trip costs on this machine, with
//! a server that does nothing, over the classic `/dev/fuse` read/write
//! transport (fuser, as the node agent uses it) and over FUSE-over-io_uring
//! (fractal-fuse), against the same loop on the local disk.
//!
//! The loop `lstat`s names that do not exist, each once: one LOOKUP per
//! call on a FUSE mount, a directory lookup on ext4. The result bounds
//! every metadata benchmark of the real server from below.
//!
//! Usage (root; io_uring needs `/sys/module/fuse/parameters/enable_uring`,
//! which this program sets for the run and restores, unless it is killed):
//! `cargo run --release -p fuse-transport -- [--ops N] [--reps R]`

mod servers;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";
/// `statfs(2)` `f_type` of a FUSE mount (include/uapi/linux/magic.h).
const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

#[derive(Parser)]
#[command(about = "Round-trip cost of a null FUSE server per transport")]
struct Args {
    /// `lstat` calls per client thread and repetition.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    ops: u64,
    /// Measured repetitions (after one warm-up); the median is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    reps: u64,
    /// Internal: serve a null filesystem (`dev:THREADS` or `uring`) at DIR.
    #[arg(long, num_args = 2, value_names = ["KIND", "DIR"], hide = true)]
    serve: Option<Vec<String>>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(s) = &args.serve {
        let dir = Path::new(&s[1]);
        return match s[0].split_once(':') {
            Some(("dev", n)) => Ok(servers::dev_fuse::serve(dir, n.parse()?)?),
            None if s[0] == "uring" => Ok(servers::io_uring::serve(dir)?),
            None if s[0] == "engine" => serve_engine(dir),
            _ => bail!("unknown server kind {}", s[0]),
        };
    }
    if !nix::unistd::geteuid().is_root() {
        bail!("run as root: the /dev/fuse server mounts with mount(2)");
    }
    let work = tempfile::tempdir()?;
    let disk = work.path().join("disk");
    std::fs::create_dir(&disk)?;
    let disk_label = format!("local disk ({})", fs_type(&disk));
    let uring = UringSwitch::on();

    println!("lstat of a missing name: one LOOKUP per call on a FUSE mount");
    println!(
        "{:<34} {:>8} {:>12} {:>10}",
        "transport", "clients", "us per call", "vs disk"
    );
    for clients in [1, 2] {
        let base = measure(&disk, clients, &args)?;
        row(&disk_label, clients, base, base);
        for threads in [1, 4] {
            let label = format!("/dev/fuse, fuser, {threads} thread(s)");
            match with_server(work.path(), &format!("dev:{threads}"), |m| {
                measure(m, clients, &args)
            }) {
                Ok(t) => row(&label, clients, t, base),
                Err(e) => println!("{label:<34} {clients:>8} failed: {e:#}"),
            }
        }
        let label = "/dev/fuse, agentcomputer-fuse";
        match with_server(work.path(), "engine", |m| measure(m, clients, &args)) {
            Ok(t) => row(label, clients, t, base),
            Err(e) => println!("{label:<34} {clients:>8} failed: {e:#}"),
        }
        let label = "io_uring, fractal-fuse, 1/CPU";
        match (
            &uring,
            with_server(work.path(), "uring", |m| measure(m, clients, &args)),
        ) {
            (Err(why), _) => println!("{label:<34} {clients:>8} skipped: {why}"),
            (Ok(_), Ok(t)) => row(label, clients, t, base),
            (Ok(_), Err(e)) => println!("{label:<34} {clients:>8} failed: {e:#}"),
        }
    }
    Ok(())
}

fn row(label: &str, clients: usize, per_call: Duration, base: Duration) {
    println!(
        "{label:<34} {clients:>8} {:>12.1} {:>9.1}x",
        per_call.as_secs_f64() * 1e6,
        per_call.as_secs_f64() / base.as_secs_f64()
    );
}

/// Median time per `lstat`, as each client thread sees it, over `reps`
/// repetitions after a warm-up; every name is looked up once.
fn measure(dir: &Path, clients: usize, args: &Args) -> Result<Duration> {
    let mut times = Vec::new();
    for rep in 0..=args.reps {
        let start = Instant::now();
        std::thread::scope(|s| {
            for c in 0..clients {
                s.spawn(move || {
                    for i in 0..args.ops {
                        let name = dir.join(format!("missing-{rep}-{c}-{i}"));
                        let _ = std::fs::symlink_metadata(name);
                    }
                });
            }
        });
        if rep > 0 {
            times.push(start.elapsed() / args.ops as u32);
        }
    }
    times.sort();
    Ok(times[times.len() / 2])
}

/// Runs a null server of `kind` in a child process on a fresh mount point
/// under `work`, calls `f` with the mount point, then unmounts.
fn with_server<T>(work: &Path, kind: &str, f: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
    let mnt = tempfile::tempdir_in(work)?;
    let child = Command::new(std::env::current_exe()?)
        .arg("--serve")
        .arg(kind)
        .arg(mnt.path())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("start the server")?;
    let mut server = Server(child, mnt.path().to_path_buf());
    let deadline = Instant::now() + Duration::from_secs(5);
    while !is_fuse(mnt.path()) {
        if let Some(status) = server.0.try_wait()? {
            bail!("the server exited with {status} before mounting");
        }
        if Instant::now() > deadline {
            bail!("no mount after 5 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f(mnt.path())
}

/// The filesystem type of `dir`, by `statfs(2)` magic
/// (include/uapi/linux/magic.h).
fn fs_type(dir: &Path) -> String {
    let Ok(s) = nix::sys::statfs::statfs(dir) else {
        return "unknown".into();
    };
    match s.filesystem_type().0 {
        0xEF53 => "ext4".into(),
        0x0102_1994 => "tmpfs".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683E => "btrfs".into(),
        other => format!("f_type {other:#x}"),
    }
}

/// Serves a fresh computer at `dir` with the node agent's FUSE server and
/// default options (4 request threads, group commit) until unmounted.
fn serve_engine(dir: &Path) -> Result<()> {
    let db = tempfile::tempdir()?;
    let fs = agentcomputer_fs::Fs::create(
        &db.path().join("computer.db"),
        agentcomputer_fs::Limits::default(),
    )?;
    let handle = agentcomputer_fuse::mount(fs, dir, agentcomputer_fuse::MountOptions::default())?;
    while handle.is_serving() {
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn is_fuse(dir: &Path) -> bool {
    nix::sys::statfs::statfs(dir).is_ok_and(|s| s.filesystem_type().0 == FUSE_SUPER_MAGIC)
}

/// A server process; unmounting its mount point ends it.
struct Server(Child, PathBuf);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.1, nix::mount::MntFlags::MNT_DETACH);
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.0.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Turns the kernel's FUSE-over-io_uring switch on for the run and back
/// to what it was afterwards. `Err` says why io_uring cannot be measured.
struct UringSwitch {
    was_on: bool,
}

impl UringSwitch {
    fn on() -> Result<UringSwitch, String> {
        let was = std::fs::read_to_string(ENABLE_URING)
            .map_err(|e| format!("{ENABLE_URING}: {e} (kernel without FUSE io_uring)"))?;
        let was_on = was.trim() == "Y";
        if !was_on {
            std::fs::write(ENABLE_URING, "Y").map_err(|e| format!("{ENABLE_URING}: {e}"))?;
        }
        Ok(UringSwitch { was_on })
    }
}

impl Drop for UringSwitch {
    fn drop(&mut self) {
        if !self.was_on {
            let _ = std::fs::write(ENABLE_URING, "N");
        }
    }
}
