//! `tar c`: files of `/workspace` written as an archive by the archive
//! code's [`Packer`] on a worker thread (never following a symlink under a
//! directory), handed back in chunks and written to stdout or to the
//! archive file as they come; gzipped with `z`.

use std::io::Write;
use std::path::Path;

use agentcomputer_archive::{ArchiveError, Packer};
use agentcomputer_fs::{Attr, ROOT_INO};
use bashkit::{CommandContext, CommandStatus};
use tokio::sync::mpsc;

use super::options::Plan;
use super::report::{self, EXIT_FATAL, FAILED_BEFORE, NOT_RECOVERABLE};
use super::worker::{self, AHEAD, ChannelWriter};
use crate::builtins::stream::input::{absolute, workspace_relative};
use crate::builtins::stream::{Env, reason, warn};

/// One operand, found.
pub(super) struct Member {
    attr: Attr,
    /// Its name in the archive: the operand as given, without a leading
    /// `/` or trailing ones.
    name: String,
}

/// The operands of `plan`, looked up without following a final symlink.
pub(super) struct Members {
    found: Vec<Member>,
    /// Diagnostics for operands not found (`tar: x: Cannot stat: ...`),
    /// and whether a leading `/` was removed.
    messages: String,
    missing: bool,
}

/// Finds `plan`'s operands, each from the directory its `-C`s name; `None`
/// when one lies outside `/workspace` or names `..` (bashkit's `tar` runs
/// those).
pub(super) fn members(cwd: &Path, env: &Env, plan: &Plan) -> Option<Members> {
    let fs = env.engine.engine();
    let mut out = Members {
        found: Vec::new(),
        messages: String::new(),
        missing: false,
    };
    let mut stripped = false;
    for (dirs, operand) in &plan.operands {
        let base = super::directory(cwd, &plan.dirs[..*dirs]);
        let rel = workspace_relative(&absolute(&base, operand))?;
        if operand.split('/').any(|part| part == "..") {
            return None;
        }
        let trimmed = operand.trim_end_matches('/');
        let name = match trimmed.trim_start_matches('/') {
            "" => ".".to_string(),
            rest => {
                stripped |= trimmed.starts_with('/');
                rest.to_string()
            }
        };
        match fs.resolve(ROOT_INO, rel.as_bytes(), false) {
            Ok(attr) => out.found.push(Member { attr, name }),
            Err(e) => {
                let text = report::strerror(&e);
                out.messages
                    .push_str(&format!("tar: {operand}: Cannot stat: {text}\n"));
                out.missing = true;
            }
        }
    }
    if stripped {
        out.messages = format!(
            "tar: Removing leading `/' from member names\n{}",
            out.messages
        );
    }
    Some(out)
}

/// Where the archive goes.
enum Sink {
    Stdout,
    /// A file of the shell's namespace, made empty first.
    File(std::path::PathBuf, String),
}

/// Writes the archive of `members` as `plan` says.
pub(super) async fn run(
    ctx: &CommandContext<'_>,
    env: &Env,
    plan: &Plan,
    members: Members,
) -> bashkit::Result<CommandStatus> {
    let sink = match plan.file.as_deref() {
        None | Some("-") | Some("/dev/stdout") => Sink::Stdout,
        Some(file) => {
            let path = absolute(ctx.cwd, file);
            match ctx.fs.write_file(&path, b"").await {
                Ok(()) => Sink::File(path, file.to_string()),
                Err(e @ (bashkit::Error::Cancelled | bashkit::Error::ResourceLimit(_))) => {
                    return Err(e);
                }
                Err(e) => {
                    let text = reason(&e);
                    warn(
                        ctx,
                        format!("tar: {file}: Cannot open: {text}\n{NOT_RECOVERABLE}"),
                    )
                    .await?;
                    return Ok(CommandStatus::with_code(EXIT_FATAL));
                }
            }
        }
    };
    if !members.messages.is_empty() {
        warn(ctx, members.messages.clone()).await?;
    }
    let fs = env.engine.engine().clone();
    let (data_tx, mut data_rx) = mpsc::channel::<Vec<u8>>(AHEAD);
    let (names_tx, mut names_rx) = mpsc::unbounded_channel::<String>();
    let (verbose, gzip) = (plan.verbose, plan.gzip);
    let found = members.found;
    let done = worker::spawn(move || -> Result<(), ArchiveError> {
        let out = ChannelWriter::new(data_tx);
        let each = |name: &str| {
            if verbose {
                let _ = names_tx.send(name.to_string());
            }
        };
        if gzip {
            let out = flate2::write::GzEncoder::new(out, flate2::Compression::default());
            let out = pack(&fs, out, &found, each)?;
            out.finish()
                .map_err(ArchiveError::Io)?
                .flush()
                .map_err(ArchiveError::Io)
        } else {
            pack(&fs, out, &found, each).map(|_| ())
        }
    })
    .map_err(bashkit::Error::Io)?;

    // The names `v` lists go to stdout, or to stderr when the archive does.
    let mut failed: Option<bashkit::Error> = None;
    let mut write_error = None;
    loop {
        tokio::select! {
            biased;
            Some(name) = names_rx.recv() => {
                let line = format!("{name}\n");
                let shown = match sink {
                    Sink::Stdout => warn(ctx, line).await,
                    Sink::File(..) => ctx.stdout.write_all(line.as_bytes()).await,
                };
                if let Err(e) = shown {
                    failed = Some(e);
                    break;
                }
            }
            chunk = data_rx.recv() => {
                let Some(chunk) = chunk else { break };
                if env.budget.step_stopped() {
                    failed = Some(env.budget.stop_error());
                    break;
                }
                let written = match &sink {
                    Sink::Stdout => ctx.stdout.write_all(&chunk).await,
                    Sink::File(path, _) => ctx.fs.append_file(path, &chunk).await,
                };
                match written {
                    Ok(()) => {}
                    Err(e @ (bashkit::Error::Cancelled | bashkit::Error::ResourceLimit(_))) => {
                        failed = Some(e);
                        break;
                    }
                    Err(e) if matches!(sink, Sink::Stdout) => {
                        failed = Some(e);
                        break;
                    }
                    Err(e) => {
                        write_error = Some(reason(&e));
                        break;
                    }
                }
            }
        }
    }
    // A worker still writing sees a broken pipe and ends.
    drop(data_rx);
    while let Some(name) = names_rx.recv().await {
        if failed.is_none() && write_error.is_none() {
            let line = format!("{name}\n");
            let _ = match sink {
                Sink::Stdout => warn(ctx, line).await,
                Sink::File(..) => ctx.stdout.write_all(line.as_bytes()).await,
            };
        }
    }
    let result = done.await;
    if let Some(e) = failed {
        return Err(e);
    }
    if let (Some(text), Sink::File(_, file)) = (write_error, &sink) {
        warn(
            ctx,
            format!("tar: {file}: Cannot write: {text}\n{NOT_RECOVERABLE}"),
        )
        .await?;
        return Ok(CommandStatus::with_code(EXIT_FATAL));
    }
    match result {
        Ok(Ok(())) if members.missing => {
            warn(ctx, FAILED_BEFORE.to_string()).await?;
            Ok(CommandStatus::with_code(EXIT_FATAL))
        }
        Ok(Ok(())) => Ok(CommandStatus::success()),
        Ok(Err(e)) => {
            warn(ctx, report::fatal(&e, 1)).await?;
            Ok(CommandStatus::with_code(EXIT_FATAL))
        }
        Err(_) => {
            warn(
                ctx,
                format!("tar: the archive writer failed\n{NOT_RECOVERABLE}"),
            )
            .await?;
            Ok(CommandStatus::with_code(EXIT_FATAL))
        }
    }
}

/// Packs `members` into `out` and gives `out` back after the archive's end.
fn pack<W: Write>(
    fs: &agentcomputer_fs::Fs,
    out: W,
    members: &[Member],
    each: impl FnMut(&str),
) -> Result<W, ArchiveError> {
    let mut packer = Packer::new(fs, out).each(each);
    for m in members {
        packer.add(&m.attr, &m.name)?;
    }
    packer.finish()
}
