//! `ln` and `link` that make real hard links.
//!
//! bashkit's own `ln` makes a symbolic link whatever it is asked, because
//! its `FileSystem` trait has no hard-link call. The engine has one
//! ([`Fs::link`]), so for two paths under `/workspace` these commands link
//! the inode there; hard links anywhere else fail as they do on a
//! filesystem without them. Symbolic links go through the shell's
//! namespace as before. Behaviour and messages follow GNU coreutils 9
//! `ln(1)` and `link(1)`.

use super::workspace::{engine_path, reason, resolve};
use crate::errno::io_error;
use agentcomputer_fs::{Errno, Fs, ROOT_INO};
use bashkit::{Builtin, BuiltinContext, ExecResult, async_trait};
use std::path::{Component, Path, PathBuf};

/// `ln [-sfnTLPrv] [-t DIR] TARGET... [LINK_NAME|DIRECTORY]`.
pub(crate) struct Ln {
    engine: Fs,
}

impl Ln {
    pub(crate) fn new(engine: Fs) -> Self {
        Self { engine }
    }
}

/// `link FILE1 FILE2`: one hard link, no options.
pub(crate) struct Link {
    engine: Fs,
}

impl Link {
    pub(crate) fn new(engine: Fs) -> Self {
        Self { engine }
    }
}

#[derive(Default)]
struct Options {
    symbolic: bool,
    force: bool,
    no_deref: bool,
    no_target_dir: bool,
    verbose: bool,
    logical: bool,
    relative: bool,
    target_dir: Option<String>,
}

/// Parses options and operands; `Err` is the usage message.
fn parse(args: &[String]) -> Result<(Options, Vec<String>), String> {
    let mut opts = Options::default();
    let mut files = Vec::new();
    let mut iter = args.iter();
    let mut opts_done = false;
    while let Some(arg) = iter.next() {
        if opts_done || arg == "-" || !arg.starts_with('-') {
            files.push(arg.clone());
        } else if arg == "--" {
            opts_done = true;
        } else if let Some(long) = arg.strip_prefix("--") {
            match long {
                "symbolic" => opts.symbolic = true,
                "force" => opts.force = true,
                "no-dereference" => opts.no_deref = true,
                "no-target-directory" => opts.no_target_dir = true,
                "verbose" => opts.verbose = true,
                "logical" => opts.logical = true,
                "physical" => opts.logical = false,
                "relative" => opts.relative = true,
                "target-directory" => {
                    opts.target_dir =
                        Some(iter.next().ok_or("option requires an argument")?.clone())
                }
                _ => match long.strip_prefix("target-directory=") {
                    Some(dir) => opts.target_dir = Some(dir.to_string()),
                    None => return Err(format!("unrecognized option '{arg}'")),
                },
            }
        } else {
            let flags = &arg[1..];
            for (i, c) in flags.char_indices() {
                match c {
                    's' => opts.symbolic = true,
                    'f' => opts.force = true,
                    'n' => opts.no_deref = true,
                    'T' => opts.no_target_dir = true,
                    'v' => opts.verbose = true,
                    'L' => opts.logical = true,
                    'P' => opts.logical = false,
                    'r' => opts.relative = true,
                    't' => {
                        let rest = &flags[i + 1..];
                        let dir = if rest.is_empty() {
                            iter.next()
                                .ok_or("option requires an argument -- 't'")?
                                .clone()
                        } else {
                            rest.to_string()
                        };
                        opts.target_dir = Some(dir);
                        break;
                    }
                    _ => return Err(format!("invalid option -- '{c}'")),
                }
            }
        }
    }
    if opts.relative && !opts.symbolic {
        return Err("cannot do --relative without --symbolic".into());
    }
    Ok((opts, files))
}

fn usage_error(cmd: &str, message: &str) -> ExecResult {
    ExecResult::err(
        format!("{cmd}: {message}\nTry '{cmd} --help' for more information.\n"),
        1,
    )
}

/// Why a hard link from `src` to `dst` (absolute, normalized) failed.
enum HardLinkError {
    /// The source is missing or unreadable.
    Access(String),
    Directory,
    /// Creating the new name failed (strerror text).
    Create(String),
}

/// Adds the name `dst` for the file at `src` in the engine.
async fn hard_link(
    engine: &Fs,
    ctx: &BuiltinContext<'_>,
    src: &Path,
    dst: &Path,
    follow: bool,
) -> Result<(), HardLinkError> {
    let meta = if follow {
        ctx.fs.stat(src).await
    } else {
        ctx.fs.lstat(src).await
    };
    match meta {
        Err(e) => return Err(HardLinkError::Access(reason(&e))),
        Ok(m) if m.file_type.is_dir() => return Err(HardLinkError::Directory),
        Ok(_) => {}
    }
    let errno_text = |errno: Errno| HardLinkError::Create(io_error(errno).to_string());
    let (Some(src_rel), Some(dst_rel)) = (engine_path(src), engine_path(dst)) else {
        // The scratch tree cannot hold hard links; between the two trees a
        // link would cross filesystems.
        let both_scratch = engine_path(src).is_none() && engine_path(dst).is_none();
        return Err(errno_text(if both_scratch {
            Errno::EPERM
        } else {
            Errno::EXDEV
        }));
    };
    let engine_err = |e: agentcomputer_fs::Error| errno_text(e.errno());
    let attr = engine
        .resolve(ROOT_INO, &src_rel, follow)
        .map_err(engine_err)?;
    let (parent, name) = engine
        .resolve_parent(ROOT_INO, &dst_rel)
        .map_err(engine_err)?;
    engine.link(attr.ino, parent, &name).map_err(engine_err)?;
    Ok(())
}

/// `target` as seen from directory `from` (both absolute, normalized):
/// what `ln -r` stores.
fn relative_to(target: &Path, from: &Path) -> PathBuf {
    let t: Vec<Component> = target.components().collect();
    let f: Vec<Component> = from.components().collect();
    let common = t.iter().zip(&f).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..f.len() {
        out.push("..");
    }
    for c in &t[common..] {
        out.push(c.as_os_str());
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

#[async_trait]
impl Builtin for Ln {
    async fn execute(&self, ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        let (opts, mut files) = match parse(ctx.args) {
            Ok(parsed) => parsed,
            Err(message) => return Ok(usage_error("ln", &message)),
        };
        if files.is_empty() {
            return Ok(usage_error("ln", "missing file operand"));
        }
        let cwd = ctx.cwd.clone();
        // Where the links go: `-t DIR`, the last operand, or `.` when the
        // only operand is a target.
        let (dest, into_dir) = if let Some(dir) = &opts.target_dir {
            if opts.no_target_dir {
                return Ok(usage_error(
                    "ln",
                    "cannot combine --target-directory and --no-target-directory",
                ));
            }
            match ctx.fs.stat(&resolve(&cwd, dir)).await {
                Ok(m) if m.file_type.is_dir() => {}
                Ok(_) => {
                    return Ok(ExecResult::err(
                        format!("ln: target '{dir}' is not a directory\n"),
                        1,
                    ));
                }
                Err(e) => {
                    return Ok(ExecResult::err(
                        format!("ln: target '{dir}': {}\n", reason(&e)),
                        1,
                    ));
                }
            }
            (dir.clone(), true)
        } else if files.len() == 1 {
            if opts.no_target_dir {
                let after = &files[0];
                return Ok(usage_error(
                    "ln",
                    &format!("missing destination file operand after '{after}'"),
                ));
            }
            (".".to_string(), true)
        } else {
            let dest = files.pop().unwrap_or_default();
            let dest_path = resolve(&cwd, &dest);
            let meta = if opts.no_deref {
                ctx.fs.lstat(&dest_path).await
            } else {
                ctx.fs.stat(&dest_path).await
            };
            let is_dir = matches!(&meta, Ok(m) if m.file_type.is_dir());
            if opts.no_target_dir && files.len() > 1 {
                return Ok(usage_error("ln", &format!("extra operand '{dest}'")));
            }
            if files.len() > 1 && !is_dir {
                let why = match meta {
                    Err(e) => format!("ln: target '{dest}': {}\n", reason(&e)),
                    Ok(_) => format!("ln: target '{dest}' is not a directory\n"),
                };
                return Ok(ExecResult::err(why, 1));
            }
            (dest, is_dir && !opts.no_target_dir)
        };

        let mut out = String::new();
        let mut errors = String::new();
        for target in &files {
            let (shown, link_path) = if into_dir {
                let base = target.trim_end_matches('/').rsplit('/').next();
                let base = base.filter(|b| !b.is_empty()).unwrap_or(target);
                let shown = match dest.as_str() {
                    d if d.ends_with('/') => format!("{d}{base}"),
                    d => format!("{d}/{base}"),
                };
                (shown, resolve(&resolve(&cwd, &dest), base))
            } else {
                (dest.clone(), resolve(&cwd, &dest))
            };
            let src_path = resolve(&cwd, target);
            let kind = if opts.symbolic { "symbolic" } else { "hard" };

            if let Ok(existing) = ctx.fs.lstat(&link_path).await {
                if !opts.force {
                    errors.push_str(&format!(
                        "ln: failed to create {kind} link '{shown}': File exists\n"
                    ));
                    continue;
                }
                if existing.file_type.is_dir() {
                    errors.push_str(&format!("ln: '{shown}': cannot overwrite directory\n"));
                    continue;
                }
                if !opts.symbolic && src_path == link_path {
                    errors.push_str(&format!("ln: '{target}' and '{shown}' are the same file\n"));
                    continue;
                }
                if let Err(e) = ctx.fs.remove(&link_path, false).await {
                    errors.push_str(&format!("ln: cannot remove '{shown}': {}\n", reason(&e)));
                    continue;
                }
            }

            if opts.symbolic {
                let stored = if opts.relative {
                    let parent = link_path.parent().unwrap_or(Path::new("/"));
                    relative_to(&src_path, parent)
                } else {
                    PathBuf::from(target)
                };
                if let Err(e) = ctx.fs.symlink(&stored, &link_path).await {
                    errors.push_str(&format!(
                        "ln: failed to create symbolic link '{shown}': {}\n",
                        reason(&e)
                    ));
                } else if opts.verbose {
                    out.push_str(&format!("'{shown}' -> '{}'\n", stored.display()));
                }
                continue;
            }

            match hard_link(&self.engine, &ctx, &src_path, &link_path, opts.logical).await {
                Ok(()) if opts.verbose => out.push_str(&format!("'{shown}' => '{target}'\n")),
                Ok(()) => {}
                Err(HardLinkError::Access(why)) => {
                    errors.push_str(&format!("ln: failed to access '{target}': {why}\n"))
                }
                Err(HardLinkError::Directory) => errors.push_str(&format!(
                    "ln: {target}: hard link not allowed for directory\n"
                )),
                Err(HardLinkError::Create(why)) => errors.push_str(&format!(
                    "ln: failed to create hard link '{shown}' => '{target}': {why}\n"
                )),
            }
        }

        let mut result = if errors.is_empty() {
            ExecResult::ok(String::new())
        } else {
            ExecResult::err(errors, 1)
        };
        result.stdout = out.into();
        Ok(result)
    }
}

#[async_trait]
impl Builtin for Link {
    async fn execute(&self, ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        let files: Vec<&String> = match ctx.args.first().map(String::as_str) {
            Some("--") => ctx.args[1..].iter().collect(),
            _ => ctx.args.iter().collect(),
        };
        let (src, dst) = match files.as_slice() {
            [] => return Ok(usage_error("link", "missing operand")),
            [one] => {
                return Ok(usage_error(
                    "link",
                    &format!("missing operand after '{one}'"),
                ));
            }
            [a, b] => (*a, *b),
            [_, _, extra, ..] => {
                return Ok(usage_error("link", &format!("extra operand '{extra}'")));
            }
        };
        let cwd = ctx.cwd.clone();
        let (src_path, dst_path) = (resolve(&cwd, src), resolve(&cwd, dst));
        let why = match ctx.fs.lstat(&dst_path).await {
            Ok(_) => Some(io_error(Errno::EEXIST).to_string()),
            Err(_) => match hard_link(&self.engine, &ctx, &src_path, &dst_path, false).await {
                Ok(()) => None,
                Err(HardLinkError::Access(why) | HardLinkError::Create(why)) => Some(why),
                Err(HardLinkError::Directory) => Some(io_error(Errno::EPERM).to_string()),
            },
        };
        Ok(match why {
            None => ExecResult::ok(String::new()),
            Some(why) => ExecResult::err(
                format!("link: cannot create link '{dst}' to '{src}': {why}\n"),
                1,
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_targets() {
        let rel = |t: &str, f: &str| relative_to(Path::new(t), Path::new(f));
        assert_eq!(rel("/w/a/b", "/w/c"), PathBuf::from("../a/b"));
        assert_eq!(rel("/w/a", "/w"), PathBuf::from("a"));
        assert_eq!(rel("/w", "/w"), PathBuf::from("."));
        assert_eq!(rel("/tmp/x", "/w/d/e"), PathBuf::from("../../../tmp/x"));
    }

    #[test]
    fn options_and_usage_errors() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (o, f) = parse(&args(&["-sfv", "a", "b"])).unwrap();
        assert!(o.symbolic && o.force && o.verbose && !o.relative);
        assert_eq!(f, ["a", "b"]);
        let (o, f) = parse(&args(&["-tdir", "a"])).unwrap();
        assert_eq!(o.target_dir.as_deref(), Some("dir"));
        assert_eq!(f, ["a"]);
        assert!(parse(&args(&["-r", "a", "b"])).is_err());
        assert!(parse(&args(&["-q", "a"])).is_err());
    }
}
