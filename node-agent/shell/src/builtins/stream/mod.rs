//! The project's streaming commands: `cat`, `wc`, `head`, `tail`, `tee`,
//! `base64`, `seq`, `yes`, `xxd`, `tac`, `rev`, `md5sum` and `sha1sum`/`sha224sum`/`sha256sum`/`sha384sum`/
//! `sha512sum`, and `tar` (the `tar` module), registered through bashkit's
//! streaming `Command` extension.
//!
//! bashkit's own versions of these read every input whole into memory, so
//! a sparse file of a terabyte (which costs no quota) became a terabyte
//! allocation in the node agent. These read files of the computer in steps
//! of [`STEP_BYTES`] straight from the engine (holes come back as zeros in
//! that buffer, nothing larger is ever made), read stdin as the pipe
//! delivers it, and write each piece on as soon as it is made, so pipelines
//! between them run in bounded memory. Every step checks the exec's stop
//! flag, so a timeout stops them within one step. What must be held (the
//! last lines of `tail`, a `head -n -N` window) is admitted against the
//! exec's memory budget before it grows.

mod base64_cmd;
mod cat;
mod digest;
mod head;
mod input;
mod rev;
mod seq;
mod tac;
mod tail;
mod tar;
mod tee;
mod wc;
mod xxd;
mod yes;

use crate::budget::ExecBudget;
use crate::engine_fs::EngineFs;
use bashkit::{BashBuilder, CommandContext};

/// Bytes read from a file per step (256 KiB).
pub(crate) const STEP_BYTES: usize = 256 * 1024;

/// What every streaming command gets: the computer's engine (for ranged
/// reads of `/workspace` files) and the exec's budget.
#[derive(Clone)]
pub(crate) struct Env {
    pub engine: EngineFs,
    pub budget: ExecBudget,
}

/// Registers the streaming commands on `builder`; `tar` runs bashkit's own
/// through `fallback` for the forms it leaves.
pub(crate) fn install(
    builder: BashBuilder,
    env: &Env,
    fallback: crate::whole_input::Shared,
) -> BashBuilder {
    let mut builder = builder
        .command("cat", cat::Cat(env.clone()))
        .command("wc", wc::Wc(env.clone()))
        .command("head", head::Head(env.clone()))
        .command("tail", tail::Tail(env.clone()))
        .command("tee", tee::Tee(env.clone()))
        .command("base64", base64_cmd::Base64(env.clone()))
        .command("seq", seq::Seq(env.clone()))
        .command("yes", yes::Yes(env.clone()))
        .command("xxd", xxd::Xxd(env.clone()))
        .command("tac", tac::Tac(env.clone()))
        .command("rev", rev::Rev(env.clone()))
        .command(
            "tar",
            tar::Tar {
                env: env.clone(),
                fallback,
            },
        );
    for algo in digest::Algorithm::ALL {
        builder = builder.command(algo.command(), digest::Sum(env.clone(), algo));
    }
    builder
}

/// Writes `message` (a whole diagnostic line) to stderr; a closed stderr
/// is ignored, as the shell ignores it.
pub(crate) async fn warn(ctx: &CommandContext<'_>, message: String) -> bashkit::Result<()> {
    match ctx.stderr.write_all(message.as_bytes()).await {
        Err(bashkit::Error::Io(_)) => Ok(()),
        other => other,
    }
}

/// `name: message` plus newline on stderr, then status 1.
pub(crate) async fn fail(
    ctx: &CommandContext<'_>,
    message: String,
) -> bashkit::Result<bashkit::CommandStatus> {
    warn(ctx, format!("{}: {message}\n", ctx.name)).await?;
    Ok(bashkit::CommandStatus::with_code(1))
}

/// The diagnostic text of an error as coreutils prints it ("No such file
/// or directory"), without Rust-shaped prefixes or `(os error N)`.
pub(crate) fn reason(e: &bashkit::Error) -> String {
    let bashkit::Error::Io(io) = e else {
        return e.to_string();
    };
    let message = io.to_string();
    match message.as_str() {
        "is a directory" => return "Is a directory".into(),
        "file not found" | "not found" | "parent directory not found" => {
            return "No such file or directory".into();
        }
        _ => {}
    }
    match message.rsplit_once(" (os error ") {
        Some((text, _)) => text.to_string(),
        None => message,
    }
}

/// A count argument (`head -n 10`, `tail -c 1K`): digits with an optional
/// multiplier suffix as coreutils reads them (`b` 512, `K`/`KiB` 1024,
/// `kB` 1000, `M`/`MiB`, `MB`, `G`/`GiB`, `GB`, `T`...). `None` if invalid.
pub(crate) fn parse_count(text: &str) -> Option<u64> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let (number, suffix) = text.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let multiplier: u64 = match suffix {
        "" => 1,
        "b" => 512,
        "kB" | "KB" => 1000,
        "K" | "k" | "KiB" => 1 << 10,
        "MB" => 1000 * 1000,
        "M" | "MiB" => 1 << 20,
        "GB" => 1000 * 1000 * 1000,
        "G" | "GiB" => 1 << 30,
        "T" | "TiB" => 1 << 40,
        _ => return None,
    };
    number.checked_mul(multiplier)
}

/// Splits bundled short options: `-nE` gives `n`, `E`. Returns `None` for
/// operands (`-`, anything not starting with `-`).
pub(crate) fn short_flags(arg: &str) -> Option<std::str::Chars<'_>> {
    let rest = arg.strip_prefix('-')?;
    if rest.is_empty() || rest.starts_with('-') {
        return None;
    }
    Some(rest.chars())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_take_coreutils_suffixes() {
        assert_eq!(parse_count("10"), Some(10));
        assert_eq!(parse_count("2K"), Some(2048));
        assert_eq!(parse_count("1kB"), Some(1000));
        assert_eq!(parse_count("3M"), Some(3 << 20));
        assert_eq!(parse_count("1b"), Some(512));
        assert_eq!(parse_count("x"), None);
        assert_eq!(parse_count("5Q"), None);
        assert_eq!(parse_count("99999999999999999999"), None);
    }
}
