//! `fs-bench`: the filesystem workloads of cloudflare/computer's published
//! benchmark (metadata, a 10x10x10 tree, 64 MiB files, git, and a
//! many-small-files npm tree) run against an Agent Computer FUSE mount,
//! tmpfs and the local disk in one run, interleaved, with warm-up; prints
//! medians and ratios as a markdown table and writes every sample as JSON.
//!
//! Needs root and /dev/fuse (the mount uses allow_other), git, tar, dd,
//! and npm once to build the node_modules tarball.
//!
//! With `--backup`, a fourth target: a second mount whose database is
//! shipped continuously to a directory store, as the node agent ships every
//! computer (the engine leaves checkpoints to the shipper, which is woken by
//! its change notifications), so each row shows what backup costs it.

mod backup;
mod report;
mod scenarios;
mod tree;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentcomputer_fs::{Fs, Limits};
use agentcomputer_fuse::{MountOptions, mount};
use anyhow::{Context, Result};
use clap::Parser;
use rand::RngCore;

use report::{BACKUP_TARGET, Samples, TARGETS};
use scenarios::{ALL, Ctx, Timer};

#[derive(Parser)]
struct Args {
    /// Measured repetitions per scenario and target (after one warm-up).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Only scenarios whose name contains one of these.
    #[arg(long)]
    only: Vec<String>,
    /// Where to write the JSON results.
    #[arg(long, default_value = "target/fs-bench.json")]
    json: PathBuf,
    /// Directory for the ext4 target and the FUSE database (on the local disk).
    #[arg(long, default_value = "/var/tmp")]
    disk: PathBuf,
    /// Directory on tmpfs.
    #[arg(long, default_value = "/dev/shm")]
    tmpfs: PathBuf,
    /// FUSE attribute/entry/negative timeout in milliseconds (default: the library's).
    #[arg(long)]
    ttl_ms: Option<u64>,
    /// FUSE request threads (default: the library's).
    #[arg(long)]
    threads: Option<usize>,
    /// Turn the kernel writeback cache on for the mount.
    #[arg(long)]
    writeback: bool,
    /// Group commit window of the mount in milliseconds (default: the library's).
    #[arg(long)]
    commit_window_ms: Option<u64>,
    /// Add the `fuse+backup` target: the same mount with its database
    /// shipped continuously to a directory store under --disk.
    #[arg(long)]
    backup: bool,
    /// Where the `fuse+backup` target's directory store lives (default: a
    /// directory under --disk). In a cluster objects go over the network,
    /// not to the disk the database is on: a directory on tmpfs keeps the
    /// store's writes off that disk.
    #[arg(long, requires = "backup")]
    backup_store: Option<PathBuf>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()?;
    std::env::set_current_dir(&workspace)?;
    let scenarios: Vec<_> = ALL
        .iter()
        .filter(|(n, _)| args.only.is_empty() || args.only.iter().any(|o| n.contains(o.as_str())))
        .collect();

    let disk = tempdir_in(&args.disk, "fs-bench")?;
    let shm = tempdir_in(&args.tmpfs, "fs-bench")?;
    // Declared before the mount, so dropped (removed) after it, also on error.
    let _cleanup = RemoveOnDrop(vec![disk.clone(), shm.clone()]);
    let home = disk.join("home");
    std::fs::create_dir(&home)?;
    let random_src = shm.join("random-64MiB");
    let mut data = vec![0u8; 64 << 20];
    rand::rng().fill_bytes(&mut data);
    std::fs::write(&random_src, &data)?;
    drop(data);
    let needs_tree = scenarios.iter().any(|(n, _)| *n == "node_modules");
    let tarball = if needs_tree {
        tree::node_modules_tarball(&workspace)?
    } else {
        PathBuf::new()
    };
    let tarball_files = if needs_tree {
        count_tar_files(&tarball)?
    } else {
        0
    };
    let ctx = Ctx {
        random_src,
        tarball,
        tarball_files,
        home,
    };

    let mut opts = MountOptions {
        writeback_cache: args.writeback,
        ..MountOptions::default()
    };
    if let Some(ms) = args.ttl_ms {
        let t = Duration::from_millis(ms);
        (opts.attr_ttl, opts.entry_ttl, opts.negative_ttl) = (t, t, t);
    }
    if let Some(n) = args.threads {
        opts.threads = n;
    }
    if let Some(ms) = args.commit_window_ms {
        opts.commit_window = Duration::from_millis(ms);
    }
    eprintln!("mount options: {opts:?}");
    let limits = Limits {
        max_bytes: 64 << 30,
        max_inodes: 10_000_000,
    };
    let fs = Fs::create(&disk.join("fs.db"), limits)?;
    let mnt = disk.join("fuse");
    std::fs::create_dir(&mnt)?;
    let handle = mount(fs, &mnt, opts.clone())?;
    let mut targets: Vec<&str> = TARGETS.to_vec();
    let mut roots = vec![mnt.clone(), shm.join("tmpfs"), disk.join("ext4")];
    for r in &roots[1..] {
        std::fs::create_dir(r)?;
    }
    let backup_store = match &args.backup_store {
        Some(parent) => Some(tempdir_in(parent, "fs-bench-store")?),
        None => None,
    };
    let _store_cleanup = RemoveOnDrop(backup_store.iter().cloned().collect());
    // Declared before the backed-up mount, so they outlive it.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let backed_up = if args.backup {
        let mnt = disk.join("fuse-backup");
        std::fs::create_dir(&mnt)?;
        let store = backup_store.clone().unwrap_or_else(|| disk.join("store"));
        let mounted = backup::mount_backed_up(&runtime, &disk, &store, &mnt, limits, opts.clone())?;
        targets.push(BACKUP_TARGET);
        roots.push(mnt);
        Some(mounted)
    } else {
        None
    };

    let mut samples = Samples::default();
    for rep in 0..=args.reps {
        for (name, run) in &scenarios {
            // Rotate the target order so no target always goes first.
            for k in 0..targets.len() {
                let i = (k + rep) % targets.len();
                let dir = roots[i].join(format!("{name}-{rep}"));
                std::fs::create_dir(&dir)?;
                // SAFETY: sync(2) has no preconditions.
                unsafe { libc::sync() };
                let mut t = Timer { stages: Vec::new() };
                run(&dir, &ctx, &mut t).with_context(|| format!("{name} on {}", targets[i]))?;
                std::fs::remove_dir_all(&dir)?;
                for (stage, secs) in t.stages {
                    eprintln!("rep {rep} {:5} {stage}: {:.1} ms", targets[i], secs * 1e3);
                    if rep > 0 {
                        samples.add(&stage, targets[i], secs);
                    }
                }
            }
        }
    }
    handle.unmount()?;
    if let Some(mounted) = backed_up {
        let shipped = mounted.finish(&runtime)?;
        eprintln!("fuse+backup: {shipped}");
    }
    let rows = report::rows(&samples);
    println!("{}", report::markdown(&rows));
    let doc = serde_json::json!({
        "reps": args.reps,
        "warmup_reps": 1,
        "mount_options": format!("{opts:?}"),
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "rows": rows,
    });
    if let Some(p) = args.json.parent() {
        std::fs::create_dir_all(p)?;
    }
    std::fs::write(&args.json, serde_json::to_string_pretty(&doc)?)?;
    eprintln!("wrote {}", args.json.display());
    Ok(())
}

/// Removes the benchmark's scratch directories when dropped.
struct RemoveOnDrop(Vec<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn tempdir_in(parent: &Path, prefix: &str) -> Result<PathBuf> {
    let d = parent.join(format!("{prefix}.{}", std::process::id()));
    std::fs::create_dir_all(&d).with_context(|| format!("create {}", d.display()))?;
    Ok(d)
}

fn count_tar_files(tar: &Path) -> Result<usize> {
    let out = std::process::Command::new("tar")
        .arg("tf")
        .arg(tar)
        .output()?;
    Ok(out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty() && !l.ends_with(b"/"))
        .count())
}
