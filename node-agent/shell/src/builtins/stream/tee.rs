//! `tee`: copies stdin to stdout and to files as it arrives, buffering at
//! most [`FLUSH_BYTES`] per file between writes.

use super::input::{Input, absolute};
use super::{Env, fail, reason};
use async_trait::async_trait;
use bashkit::{Command, CommandContext, CommandStatus};
use std::path::PathBuf;

/// Bytes gathered before they are appended to the files (one engine
/// transaction per file per flush).
const FLUSH_BYTES: usize = 256 * 1024;

pub(crate) struct Tee(pub Env);

#[async_trait]
impl Command for Tee {
    async fn execute(&self, ctx: CommandContext<'_>) -> bashkit::Result<CommandStatus> {
        let mut append = false;
        let mut names = Vec::new();
        let mut options_done = false;
        for arg in ctx.args {
            if options_done || arg == "-" || !arg.starts_with('-') {
                names.push(arg.clone());
                continue;
            }
            match arg.as_str() {
                "--" => options_done = true,
                "--append" => append = true,
                "--ignore-interrupts" => {}
                a if a.starts_with("--") => {
                    return fail(&ctx, format!("unrecognized option '{a}'")).await;
                }
                a => {
                    for f in a[1..].chars() {
                        match f {
                            'a' => append = true,
                            'i' | 'p' => {}
                            other => {
                                return fail(&ctx, format!("invalid option -- '{other}'")).await;
                            }
                        }
                    }
                }
            }
        }
        let mut status = 0;
        let mut files: Vec<(String, PathBuf)> = Vec::new();
        for name in names {
            let path = absolute(ctx.cwd, &name);
            let opened = if append {
                ctx.fs.append_file(&path, b"").await
            } else {
                ctx.fs.write_file(&path, b"").await
            };
            match opened {
                Ok(()) => files.push((name, path)),
                Err(e @ (bashkit::Error::Cancelled | bashkit::Error::ResourceLimit(_))) => {
                    return Err(e);
                }
                Err(e) => {
                    fail(&ctx, format!("{name}: {}", reason(&e))).await?;
                    status = 1;
                }
            }
        }
        let mut input = Input::stdin(&ctx, &self.0);
        let mut pending: Vec<u8> = Vec::with_capacity(FLUSH_BYTES);
        loop {
            let piece = input.read().await?;
            let end = piece.is_none();
            if let Some(piece) = &piece {
                // A reader that went away ends tee with SIGPIPE's status,
                // as coreutils' tee without -p.
                ctx.stdout.write_all(piece).await?;
                pending.extend_from_slice(piece);
            }
            if pending.len() >= FLUSH_BYTES || (end && !pending.is_empty()) {
                let mut kept = Vec::with_capacity(files.len());
                for (name, path) in files.drain(..) {
                    match ctx.fs.append_file(&path, &pending).await {
                        Ok(()) => kept.push((name, path)),
                        Err(e @ (bashkit::Error::Cancelled | bashkit::Error::ResourceLimit(_))) => {
                            return Err(e);
                        }
                        Err(e) => {
                            fail(&ctx, format!("{name}: {}", reason(&e))).await?;
                            status = 1;
                        }
                    }
                }
                files = kept;
                pending.clear();
            }
            if end {
                break;
            }
        }
        Ok(CommandStatus::with_code(status))
    }
}
