//! `tar x` and `tar t`: an archive from stdin or a file, read a step at a
//! time and handed to the archive code on a worker thread, which unpacks
//! it under a directory of `/workspace` ([`Guard`]: nothing outside it,
//! nothing through a symlink, no devices) or lists its names. Gzip is
//! recognized by its magic bytes, with or without `z`.

use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agentcomputer_archive::{ArchiveError, Guard, list};
use agentcomputer_fs::{FileKind, ROOT_INO};
use bashkit::{CommandContext, CommandStatus};
use tokio::sync::mpsc;

use super::options::{Mode, Plan};
use super::report::{self, EXIT_FATAL, NOT_RECOVERABLE};
use super::worker::{self, AHEAD, ChannelReader};
use crate::builtins::stream::input::Input;
use crate::builtins::stream::{Env, reason, warn};

/// Runs `plan` (mode `x` or `t`); `into` is the directory to unpack under,
/// relative to `/workspace` (`.` for itself), and `shown` its name as
/// given (`-C`'s value).
pub(super) async fn run(
    ctx: &CommandContext<'_>,
    env: &Env,
    plan: &Plan,
    into: &str,
    shown: &str,
) -> bashkit::Result<CommandStatus> {
    let fs = env.engine.engine().clone();
    let root = if plan.mode == Mode::Extract {
        let found = fs
            .resolve(ROOT_INO, into.as_bytes(), true)
            .and_then(|attr| match attr.kind {
                FileKind::Directory => Ok(attr.ino),
                _ => Err(agentcomputer_fs::Errno::ENOTDIR.into()),
            });
        match found {
            Ok(ino) => ino,
            Err(e) => {
                let text = report::strerror(&e);
                return fatal(
                    ctx,
                    format!("tar: {shown}: Cannot open: {text}\n{NOT_RECOVERABLE}"),
                )
                .await;
            }
        }
    } else {
        ROOT_INO
    };
    let mut input = match plan.file.as_deref() {
        None | Some("-") => Input::stdin(ctx, env),
        Some(file) => match Input::open(ctx, env, file).await {
            Ok(input) => input,
            Err(e @ (bashkit::Error::Cancelled | bashkit::Error::ResourceLimit(_))) => {
                return Err(e);
            }
            Err(e) => {
                let text = reason(&e);
                return fatal(
                    ctx,
                    format!("tar: {file}: Cannot open: {text}\n{NOT_RECOVERABLE}"),
                )
                .await;
            }
        },
    };

    let (data_tx, data_rx) = mpsc::channel::<Vec<u8>>(AHEAD);
    // Bounded by the input in flight: every name is an entry the worker
    // read from the few chunks it was handed.
    let (names_tx, mut names_rx) = mpsc::unbounded_channel::<String>();
    let entries = Arc::new(AtomicU64::new(0));
    let (mode, verbose, gzip) = (plan.mode, plan.verbose, plan.gzip);
    let seen = Arc::clone(&entries);
    let done = worker::spawn(move || -> Result<(), ArchiveError> {
        let reader = decompressed(ChannelReader::new(data_rx), gzip)?;
        if mode == Mode::List {
            list(reader, |entry| {
                seen.fetch_add(1, Ordering::Relaxed);
                names_tx
                    .send(entry.name)
                    .map_err(|_| ArchiveError::Io(std::io::ErrorKind::BrokenPipe.into()))
            })?;
            return Ok(());
        }
        Guard::new(&fs, root, crate::SHELL_OWNER)
            .each(|name| {
                seen.fetch_add(1, Ordering::Relaxed);
                if verbose {
                    let _ = names_tx.send(name.to_string());
                }
            })
            .unpack(reader)?;
        Ok(())
    })
    .map_err(bashkit::Error::Io)?;

    // Feeds the worker until the input ends or the worker stops reading
    // (the archive's end, or an error); names are written as they come.
    let mut feed = Some(data_tx);
    let mut failed: Option<bashkit::Error> = None;
    let mut read_error = None;
    while let Some(tx) = &feed {
        while let Ok(name) = names_rx.try_recv() {
            if failed.is_none()
                && let Err(e) = ctx.stdout.write_all(format!("{name}\n").as_bytes()).await
            {
                failed = Some(e);
            }
        }
        if failed.is_some() {
            break;
        }
        match input.read().await {
            Ok(Some(piece)) => {
                if tx.send(piece).await.is_err() {
                    feed = None;
                }
            }
            Ok(None) => feed = None,
            Err(e) => {
                if env.budget.stopped() {
                    failed = Some(e);
                } else {
                    read_error = Some(reason(&e));
                }
                feed = None;
            }
        }
    }
    // The worker sees the end of its input and ends; its names first.
    drop(feed);
    while let Some(name) = names_rx.recv().await {
        if failed.is_none()
            && let Err(e) = ctx.stdout.write_all(format!("{name}\n").as_bytes()).await
        {
            failed = Some(e);
        }
    }
    let result = done.await;
    if let Some(e) = failed {
        return Err(e);
    }
    if let Some(text) = read_error {
        let file = plan.file.as_deref().unwrap_or("-");
        return fatal(
            ctx,
            format!("tar: {file}: Read error: {text}\n{NOT_RECOVERABLE}"),
        )
        .await;
    }
    match result {
        Ok(Ok(())) => Ok(CommandStatus::success()),
        Ok(Err(e)) => fatal(ctx, report::fatal(&e, entries.load(Ordering::Relaxed))).await,
        Err(_) => {
            fatal(
                ctx,
                format!("tar: the archive reader failed\n{NOT_RECOVERABLE}"),
            )
            .await
        }
    }
}

/// Writes `message` to stderr and answers GNU tar's fatal status.
async fn fatal(ctx: &CommandContext<'_>, message: String) -> bashkit::Result<CommandStatus> {
    warn(ctx, message).await?;
    Ok(CommandStatus::with_code(EXIT_FATAL))
}

/// The archive in `raw`, gunzipped when it starts with gzip's magic bytes.
/// Errors: an empty input and `z` given for input that is not gzip (GNU
/// tar fails there too), and compressions the runtime does not read
/// (bzip2, xz, zstd).
fn decompressed(mut raw: ChannelReader, gzip: bool) -> Result<Box<dyn Read>, ArchiveError> {
    let mut head = [0u8; 6];
    let mut n = 0;
    while n < head.len() {
        match raw.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) => return Err(ArchiveError::Io(e)),
        }
    }
    let head = head[..n].to_vec();
    let whole = std::io::Cursor::new(head.clone()).chain(raw);
    let other = |what: &str| ArchiveError::Malformed {
        name: None,
        detail: format!(
            "{what}; the shell runtime's tar reads plain and gzip archives (--runtime container runs GNU tar)"
        ),
    };
    match &head[..] {
        [0x1f, 0x8b, ..] => Ok(Box::new(flate2::read::MultiGzDecoder::new(whole))),
        // GNU tar refuses an empty input too.
        [] => Err(ArchiveError::Malformed {
            name: None,
            detail: "the input is empty".into(),
        }),
        _ if gzip => Err(ArchiveError::Malformed {
            name: None,
            detail: "the input is not in gzip format, and z was given".into(),
        }),
        [b'B', b'Z', b'h', ..] => Err(other("a bzip2-compressed archive")),
        [0xfd, b'7', b'z', b'X', b'Z', 0] => Err(other("an xz-compressed archive")),
        [0x28, 0xb5, 0x2f, 0xfd, ..] => Err(other("a zstd-compressed archive")),
        _ => Ok(Box::new(whole)),
    }
}
