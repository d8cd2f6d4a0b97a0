//! `truncate` as GNU coreutils has it (`-c`, `-s SIZE`, `-r RFILE`), by
//! metadata. bashkit's `truncate` read the file whole and zero-filled a
//! buffer of the new size before writing it back, so `truncate -s 8G f`
//! allocated 8 GiB in the node agent (any size up to the computer's quota
//! was accepted) and then wrote those zeros in one engine call that held
//! the exec's write fence for seconds. Here a file of the computer gets its
//! new size from the engine in one `setattr` (growing makes a hole, which
//! costs no quota; shrinking frees the chunks past the end): nothing is
//! allocated, whatever the size. A scratch-tree file (`/tmp`, `$HOME`) is
//! held in memory anyway; its new size is checked against the scratch
//! tree's file limit and the exec's memory budget before the buffer is
//! made.

use super::realpath::realpath;
use super::stream::{Env, fail, warn};
use super::truncate_size::SizeSpec;
use super::workspace::{engine_path, reason, resolve};
use crate::engine_fs::NEW_FILE_PERM;
use crate::errno::from_engine;
use agentcomputer_fs::{Errno, FileKind, ROOT_INO, SetAttr};
use async_trait::async_trait;
use bashkit::{Command, CommandContext, CommandStatus, FileSystem};
use std::path::Path;

pub(crate) struct Truncate {
    pub env: Env,
    /// Largest file of the scratch tree, bytes.
    pub scratch_file_bytes: u64,
}

const TRY_HELP: &str = "Try 'truncate --help' for more information.";

const HELP: &str = "Usage: truncate OPTION... FILE...
Shrink or extend the size of each FILE to the specified size.

  -c, --no-create        do not create any files
  -r, --reference=RFILE  base size on RFILE
  -s, --size=SIZE        set or adjust the file size by SIZE bytes
      --help             display this help and exit

SIZE is an integer and optional unit (K, M, G, T, P, E: powers of 1024;
KB, MB, ...: powers of 1000), prefixed by '+' extend by, '-' reduce by,
'<' at most, '>' at least, '/' round down to multiple of, '%' round up to
multiple of.
";

/// The parsed command line.
#[derive(Default)]
struct Options {
    no_create: bool,
    size: Option<String>,
    reference: Option<String>,
    files: Vec<String>,
}

/// What went wrong reading the command line: a message for stderr, and
/// whether GNU's "Try --help" line follows it.
struct Usage(String, bool);

fn parse(args: &[String]) -> Result<Option<Options>, Usage> {
    let mut o = Options::default();
    let mut args = args.iter();
    let missing = |opt: &str| Usage(format!("option requires an argument -- '{opt}'"), true);
    while let Some(arg) = args.next() {
        if arg == "--" {
            o.files.extend(args.by_ref().cloned());
            break;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let mut value_or_next = |o: &str| {
                value
                    .clone()
                    .or_else(|| args.next().cloned())
                    .ok_or_else(|| Usage(format!("option '--{o}' requires an argument"), true))
            };
            match name {
                "no-create" => o.no_create = true,
                "size" => o.size = Some(value_or_next("size")?),
                "reference" => o.reference = Some(value_or_next("reference")?),
                "help" => return Ok(None),
                "io-blocks" => {
                    return Err(Usage("--io-blocks is not supported".into(), false));
                }
                _ => return Err(Usage(format!("unrecognized option '{arg}'"), true)),
            }
            continue;
        }
        let Some(flags) = arg.strip_prefix('-').filter(|f| !f.is_empty()) else {
            o.files.push(arg.clone());
            continue;
        };
        for (i, flag) in flags.char_indices() {
            match flag {
                'c' => o.no_create = true,
                'o' => return Err(Usage("--io-blocks is not supported".into(), false)),
                's' | 'r' => {
                    let rest = &flags[i + 1..];
                    let value = if rest.is_empty() {
                        args.next()
                            .cloned()
                            .ok_or_else(|| missing(&flag.to_string()))?
                    } else {
                        rest.to_string()
                    };
                    match flag {
                        's' => o.size = Some(value),
                        _ => o.reference = Some(value),
                    }
                    break;
                }
                other => return Err(Usage(format!("invalid option -- '{other}'"), true)),
            }
        }
    }
    Ok(Some(o))
}

#[async_trait]
impl Command for Truncate {
    async fn execute(&self, ctx: CommandContext<'_>) -> bashkit::Result<CommandStatus> {
        let o = match parse(ctx.args) {
            Ok(Some(o)) => o,
            Ok(None) => {
                ctx.stdout.write_all(HELP.as_bytes()).await?;
                return Ok(CommandStatus::with_code(0));
            }
            Err(Usage(message, try_help)) => return usage(&ctx, &message, try_help).await,
        };
        let spec = match o.size.as_deref().map(SizeSpec::parse) {
            Some(Ok(spec)) => Some(spec),
            Some(Err(e)) => return fail(&ctx, e.to_string()).await,
            None => None,
        };
        let base = match (&o.reference, spec) {
            (None, None) => {
                let message = "you must specify either '--size' or '--reference'";
                return usage(&ctx, message, true).await;
            }
            (Some(_), Some(spec)) if !spec.is_relative() => {
                let message = "you must specify a relative '--size' with '--reference'";
                return usage(&ctx, message, true).await;
            }
            (Some(rfile), _) => match ctx.fs.stat(&resolve(ctx.cwd, rfile)).await {
                Ok(meta) => Some(meta.size),
                Err(e) => {
                    return fail(&ctx, format!("cannot stat '{rfile}': {}", reason(&e))).await;
                }
            },
            (None, _) => None,
        };
        if o.files.is_empty() {
            return usage(&ctx, "missing file operand", true).await;
        }
        let mut status = 0;
        for file in &o.files {
            let budget = &self.env.budget;
            if budget.step_stopped() {
                return Err(budget.stop_error());
            }
            // `-r` alone copies the reference's size; with `-s` the size is
            // relative to the reference's.
            let target = |current: u64| match (base, spec) {
                (Some(b), Some(spec)) => spec.apply(b),
                (Some(b), None) => Ok(b),
                (None, Some(spec)) => spec.apply(current),
                (None, None) => unreachable!("checked above"),
            };
            if let Err(message) = self.one(&ctx, file, o.no_create, &target).await {
                warn(&ctx, format!("truncate: {message}\n")).await?;
                status = 1;
            }
        }
        Ok(CommandStatus::with_code(status))
    }
}

/// `truncate: message`, GNU's "Try" line when asked, and status 1.
async fn usage(
    ctx: &CommandContext<'_>,
    message: &str,
    try_help: bool,
) -> bashkit::Result<CommandStatus> {
    let tail = if try_help {
        format!("\n{TRY_HELP}")
    } else {
        String::new()
    };
    fail(ctx, format!("{message}{tail}")).await
}

type Target<'a> = dyn Fn(u64) -> Result<u64, super::truncate_size::SizeError> + Sync + 'a;

impl Truncate {
    /// Truncates or extends operand `file`; the error is the message after
    /// `truncate: `.
    async fn one(
        &self,
        ctx: &CommandContext<'_>,
        file: &str,
        no_create: bool,
        target: &Target<'_>,
    ) -> Result<(), String> {
        let open_error =
            |e: &bashkit::Error| format!("cannot open '{file}' for writing: {}", reason(e));
        let (path, meta) = realpath(ctx.fs.as_ref(), &resolve(ctx.cwd, file))
            .await
            .map_err(|e| open_error(&e))?;
        if meta.as_ref().is_some_and(|m| m.file_type.is_dir()) {
            return Err(format!("cannot open '{file}' for writing: Is a directory"));
        }
        if meta.is_none() && no_create {
            return Ok(());
        }
        let current = meta.as_ref().map_or(0, |m| m.size);
        let size = target(current).map_err(|e| e.to_string())?;
        let failed = |why: String| format!("failed to truncate '{file}' at {size} bytes: {why}");
        match engine_path(&path) {
            Some(rel) => self
                .in_engine(&rel, meta.is_some(), size)
                .map_err(|e| match e {
                    Step::Open(e) => open_error(&e),
                    Step::Resize(e) => failed(reason(&e)),
                }),
            None => self
                .in_scratch(ctx.fs.as_ref(), &path, meta.is_some(), size)
                .await
                .map_err(|e| match e {
                    Step::Open(e) => open_error(&e),
                    Step::Resize(e) => failed(reason(&e)),
                }),
        }
    }

    /// Gives the computer's file at engine path `rel` (created when
    /// `exists` is false) the size `size`: one `setattr`, no data moved.
    fn in_engine(&self, rel: &[u8], exists: bool, size: u64) -> Result<(), Step> {
        let fs = self.env.engine.engine();
        let engine = |e| Step::Open(from_engine(e));
        let ino = if exists {
            fs.resolve(ROOT_INO, rel, false).map_err(engine)?.ino
        } else {
            let (parent, name) = fs.resolve_parent(ROOT_INO, rel).map_err(engine)?;
            let owner = self.env.engine.owner();
            match fs.mknod(
                parent,
                &name,
                FileKind::RegularFile,
                NEW_FILE_PERM,
                0,
                owner,
            ) {
                Ok(attr) => attr.ino,
                // Made meanwhile by someone else: resize theirs.
                Err(e) if e.errno() == Errno::EEXIST => {
                    fs.resolve(ROOT_INO, rel, false).map_err(engine)?.ino
                }
                Err(e) => return Err(engine(e)),
            }
        };
        let change = SetAttr {
            size: Some(size),
            ..SetAttr::default()
        };
        fs.setattr(ino, &change)
            .map(drop)
            .map_err(|e| Step::Resize(from_engine(e)))
    }

    /// Resizes the scratch-tree file at `path` (made when `exists` is
    /// false). Its content is memory, so the new size must fit the scratch
    /// tree's file limit and the exec's memory budget before the buffer is
    /// made.
    async fn in_scratch(
        &self,
        fs: &dyn FileSystem,
        path: &Path,
        exists: bool,
        size: u64,
    ) -> Result<(), Step> {
        let too_large = || {
            Step::Resize(bashkit::Error::Io(std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                "File too large",
            )))
        };
        if size > self.scratch_file_bytes {
            return Err(too_large());
        }
        self.env
            .budget
            .admit(size, "the scratch file")
            .map_err(|e| Step::Resize(e.into()))?;
        let mut data = match exists {
            true => fs.read_file(path).await.map_err(Step::Open)?,
            false => Vec::new(),
        };
        let len = usize::try_from(size).map_err(|_| too_large())?;
        data.resize(len, 0);
        fs.write_file(path, &data).await.map_err(Step::Resize)
    }
}

/// Which step failed: opening (or creating) the file, or resizing it.
enum Step {
    Open(bashkit::Error),
    Resize(bashkit::Error),
}
