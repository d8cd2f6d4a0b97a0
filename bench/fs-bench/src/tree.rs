//! The many-small-files input: a tarball of an npm `node_modules` tree,
//! built once from `bench/fs-bench/npm-tree` (pinned by its lock file) and
//! cached under `target/fs-bench-cache/`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The tarball's path, building it first if missing (needs `npm` and the
/// npm registry once).
pub(crate) fn node_modules_tarball(workspace: &Path) -> Result<PathBuf> {
    let cache = workspace.join("target/fs-bench-cache");
    let tar = cache.join("node_modules.tar");
    if tar.exists() {
        return Ok(tar);
    }
    let build = cache.join("npm");
    std::fs::create_dir_all(&build)?;
    let spec = workspace.join("bench/fs-bench/npm-tree");
    for f in ["package.json", "package-lock.json"] {
        std::fs::copy(spec.join(f), build.join(f)).with_context(|| format!("copy {f}"))?;
    }
    eprintln!("building the node_modules tree once with npm ci ...");
    run(Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&build))?;
    let tmp = cache.join("node_modules.tar.part");
    run(Command::new("tar")
        .arg("cf")
        .arg(&tmp)
        .arg("node_modules")
        .current_dir(&build))?;
    std::fs::rename(&tmp, &tar)?;
    Ok(tar)
}

fn run(cmd: &mut Command) -> Result<()> {
    let st = cmd.status().with_context(|| format!("{cmd:?}"))?;
    if !st.success() {
        bail!("{cmd:?} failed: {st}");
    }
    Ok(())
}
