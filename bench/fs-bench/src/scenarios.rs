//! The workloads. Each runs in a fresh directory on the filesystem under
//! test and times its stages separately. Metadata loops use syscalls from
//! this process (1000 process starts would hide the filesystem); the rest
//! use the tools an agent would run (dd, cp, cat, find, tar, git, grep).

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// Inputs shared by all runs.
pub(crate) struct Ctx {
    /// 64 MiB of random bytes in a file on tmpfs (the `dd` source).
    pub random_src: PathBuf,
    /// The node_modules tarball.
    pub tarball: PathBuf,
    /// Files in the tarball.
    pub tarball_files: usize,
    /// HOME for git (an empty directory with a fixed identity).
    pub home: PathBuf,
}

/// Records the duration of named stages.
pub(crate) struct Timer {
    pub stages: Vec<(String, f64)>,
}

impl Timer {
    fn stage(&mut self, name: impl Into<String>, f: impl FnOnce() -> Result<()>) -> Result<()> {
        let t = Instant::now();
        f()?;
        self.stages.push((name.into(), t.elapsed().as_secs_f64()));
        Ok(())
    }
}

/// One workload: a name and the function running its stages in `dir`.
pub(crate) type Scenario = (&'static str, fn(&Path, &Ctx, &mut Timer) -> Result<()>);

pub(crate) const ALL: &[Scenario] = &[
    ("files", files),
    ("tree", tree),
    ("zeros", |d, c, t| {
        big_file(d, c, t, "zeros", Path::new("/dev/zero"))
    }),
    ("random", |d, c, t| {
        big_file(d, c, t, "random", &c.random_src)
    }),
    ("git100", git100),
    ("node_modules", node_modules),
];

const MIB: usize = 1 << 20;

fn files(dir: &Path, _: &Ctx, t: &mut Timer) -> Result<()> {
    let names: Vec<PathBuf> = (0..1000)
        .map(|i| dir.join(format!("file-{i:04}")))
        .collect();
    t.stage("create 1000 files", || {
        for n in &names {
            File::create(n)?;
        }
        Ok(())
    })?;
    t.stage("stat 1000 files", || {
        for n in &names {
            std::fs::symlink_metadata(n)?;
        }
        Ok(())
    })?;
    t.stage("rm 1000 files", || {
        for n in &names {
            std::fs::remove_file(n)?;
        }
        Ok(())
    })
}

fn tree(dir: &Path, _: &Ctx, t: &mut Timer) -> Result<()> {
    t.stage("mkdir 10x10x10 + touch 1000 files", || {
        for a in 0..10 {
            for b in 0..10 {
                for c in 0..10 {
                    let d = dir.join(format!("d{a}/d{b}/d{c}"));
                    std::fs::create_dir_all(&d)?;
                    File::create(d.join("f"))?;
                }
            }
        }
        Ok(())
    })?;
    t.stage("find over the tree", || sh(dir, "find . > /dev/null", &[]))
}

fn big_file(dir: &Path, _: &Ctx, t: &mut Timer, kind: &str, src: &Path) -> Result<()> {
    let src = src.to_str().context("source path")?;
    let f = dir.join("big");
    t.stage(format!("64 MiB {kind}: write (dd, fsync)"), || {
        sh(
            dir,
            "dd if=\"$1\" of=big bs=1M count=64 conv=fsync status=none",
            &[src],
        )
    })?;
    t.stage(format!("64 MiB {kind}: copy (cp, sync)"), || {
        sh(dir, "cp big copy && sync copy", &[])
    })?;
    t.stage(format!("64 MiB {kind}: read (cat)"), || {
        sh(dir, "cat big > /dev/null", &[])
    })?;
    t.stage(format!("64 MiB {kind}: pure read"), || {
        let mut buf = vec![0u8; MIB];
        let mut r = File::open(&f)?;
        let mut total = 0;
        loop {
            let n = r.read(&mut buf)?;
            if n == 0 {
                break;
            }
            total += n;
        }
        if total != 64 * MIB {
            bail!("read {total} bytes");
        }
        Ok(())
    })?;
    t.stage(format!("64 MiB {kind}: pure copy"), || {
        let mut buf = vec![0u8; MIB];
        let mut r = File::open(&f)?;
        let mut w = File::create(dir.join("copy2"))?;
        loop {
            let n = r.read(&mut buf)?;
            if n == 0 {
                break;
            }
            w.write_all(&buf[..n])?;
        }
        w.sync_all()?;
        Ok(())
    })?;
    t.stage(format!("64 MiB {kind}: overwrite (dd, fsync)"), || {
        sh(
            dir,
            "dd if=\"$1\" of=big bs=1M count=64 conv=notrunc,fsync status=none",
            &[src],
        )
    })?;
    Ok(())
}

fn git100(dir: &Path, ctx: &Ctx, t: &mut Timer) -> Result<()> {
    t.stage("git init + commit of 100 files", || {
        git_sh(
            dir,
            ctx,
            "git init -q && for i in $(seq 100); do echo \"file $i\" > \"f$i.txt\"; done && \
             git add -A && git commit -q -m init",
        )
    })
}

fn node_modules(dir: &Path, ctx: &Ctx, t: &mut Timer) -> Result<()> {
    let tar = ctx.tarball.to_str().context("tarball path")?;
    t.stage(
        format!("untar {} files (node_modules)", ctx.tarball_files),
        || sh(dir, "tar xf \"$1\"", &[tar]),
    )?;
    t.stage("git add -A && git commit", || {
        git_sh(
            dir,
            ctx,
            "git init -q && git add -A && git commit -q -m deps",
        )
    })?;
    t.stage("git status", || {
        git_sh(dir, ctx, "git status --porcelain > /dev/null")
    })?;
    // grep exits 1 when nothing matches; the pattern does match.
    t.stage("grep -r", || {
        sh(dir, "grep -r -l deprecated . > /dev/null", &[])
    })
}

fn git_sh(dir: &Path, ctx: &Ctx, script: &str) -> Result<()> {
    let st = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("HOME", &ctx.home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        // No detached background gc/maintenance writing after the timer stops.
        .env("GIT_CONFIG_COUNT", "2")
        .env("GIT_CONFIG_KEY_0", "gc.auto")
        .env("GIT_CONFIG_VALUE_0", "0")
        .env("GIT_CONFIG_KEY_1", "maintenance.auto")
        .env("GIT_CONFIG_VALUE_1", "false")
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.invalid")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.invalid")
        .stdout(Stdio::null())
        .status()?;
    if !st.success() {
        bail!("{script}: {st}");
    }
    Ok(())
}

/// Runs `sh -c script sh args...` in `dir`; fails on a non-zero exit.
pub(crate) fn sh(dir: &Path, script: &str, args: &[&str]) -> Result<()> {
    let st = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .status()?;
    if !st.success() {
        bail!("{script}: {st}");
    }
    Ok(())
}
