//! `md5sum`, `sha1sum`, `sha224sum`, `sha256sum`, `sha384sum`,
//! `sha512sum`: digests of inputs of any size, fed in steps; `-c` checks a
//! list in coreutils' format.

use super::input::Input;
use super::{Env, fail, reason, warn};
use async_trait::async_trait;
use bashkit::{Command, CommandContext, CommandStatus};
use digest::DynDigest;

/// One of the supported digests.
#[derive(Clone, Copy)]
pub(crate) enum Algorithm {
    Md5,
    Sha1,
    Sha224,
    Sha256,
    Sha384,
    Sha512,
}

impl Algorithm {
    pub(super) const ALL: [Algorithm; 6] = [
        Algorithm::Md5,
        Algorithm::Sha1,
        Algorithm::Sha224,
        Algorithm::Sha256,
        Algorithm::Sha384,
        Algorithm::Sha512,
    ];

    pub(super) fn command(self) -> &'static str {
        match self {
            Algorithm::Md5 => "md5sum",
            Algorithm::Sha1 => "sha1sum",
            Algorithm::Sha224 => "sha224sum",
            Algorithm::Sha256 => "sha256sum",
            Algorithm::Sha384 => "sha384sum",
            Algorithm::Sha512 => "sha512sum",
        }
    }

    fn hasher(self) -> Box<dyn DynDigest + Send> {
        match self {
            Algorithm::Md5 => Box::new(md5::Md5::default()),
            Algorithm::Sha1 => Box::new(sha1::Sha1::default()),
            Algorithm::Sha224 => Box::new(sha2::Sha224::default()),
            Algorithm::Sha256 => Box::new(sha2::Sha256::default()),
            Algorithm::Sha384 => Box::new(sha2::Sha384::default()),
            Algorithm::Sha512 => Box::new(sha2::Sha512::default()),
        }
    }
}

pub(crate) struct Sum(pub Env, pub Algorithm);

#[async_trait]
impl Command for Sum {
    async fn execute(&self, ctx: CommandContext<'_>) -> bashkit::Result<CommandStatus> {
        let mut check = false;
        let mut binary = false;
        let mut quiet = false;
        let mut status_only = false;
        let mut files = Vec::new();
        let mut options_done = false;
        for arg in ctx.args {
            if options_done || arg == "-" || !arg.starts_with('-') {
                files.push(arg.clone());
                continue;
            }
            match arg.as_str() {
                "--" => options_done = true,
                "--check" => check = true,
                "--binary" => binary = true,
                "--text" => binary = false,
                "--quiet" => quiet = true,
                "--status" => status_only = true,
                "--strict" | "--warn" | "--ignore-missing" | "--tag" | "--zero" => {
                    return fail(&ctx, format!("option '{arg}' is not supported")).await;
                }
                a if a.starts_with("--") => {
                    return fail(&ctx, format!("unrecognized option '{a}'")).await;
                }
                a => {
                    for f in a[1..].chars() {
                        match f {
                            'c' => check = true,
                            'b' => binary = true,
                            't' => binary = false,
                            'w' => {}
                            other => {
                                return fail(&ctx, format!("invalid option -- '{other}'")).await;
                            }
                        }
                    }
                }
            }
        }
        if files.is_empty() {
            files.push("-".into());
        }
        if check {
            return self.check(&ctx, &files, quiet, status_only).await;
        }
        let mut status = 0;
        let marker = if binary { '*' } else { ' ' };
        for name in &files {
            match self.digest(&ctx, name).await {
                Ok(hex) => {
                    ctx.stdout
                        .write_all(format!("{hex} {marker}{name}\n").as_bytes())
                        .await?;
                }
                Err(e @ (bashkit::Error::Cancelled | bashkit::Error::ResourceLimit(_))) => {
                    return Err(e);
                }
                Err(e) => {
                    fail(&ctx, format!("{name}: {}", reason(&e))).await?;
                    status = 1;
                }
            }
        }
        Ok(CommandStatus::with_code(status))
    }
}

impl Sum {
    /// The lowercase hex digest of input `name`.
    async fn digest(&self, ctx: &CommandContext<'_>, name: &str) -> bashkit::Result<String> {
        let mut input = Input::open(ctx, &self.0, name).await?;
        let mut hasher = self.1.hasher();
        while let Some(piece) = input.read().await? {
            hasher.update(&piece);
        }
        let out = hasher.finalize();
        Ok(out.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// `-c`: each line of each list is `HEX  NAME` or `HEX *NAME`.
    async fn check(
        &self,
        ctx: &CommandContext<'_>,
        lists: &[String],
        quiet: bool,
        status_only: bool,
    ) -> bashkit::Result<CommandStatus> {
        let mut failed = 0u64;
        let mut unreadable = 0u64;
        let mut malformed = 0u64;
        let mut status = 0;
        for list in lists {
            let text = match read_list(ctx, &self.0, list).await {
                Ok(t) => t,
                Err(e @ (bashkit::Error::Cancelled | bashkit::Error::ResourceLimit(_))) => {
                    return Err(e);
                }
                Err(e) => {
                    fail(ctx, format!("{list}: {}", reason(&e))).await?;
                    status = 1;
                    continue;
                }
            };
            for line in text.split(|b| *b == b'\n') {
                let line = String::from_utf8_lossy(line);
                let line = line.trim_end_matches('\r');
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let Some((hex, name)) = line.split_once(' ') else {
                    malformed += 1;
                    continue;
                };
                let name = name.strip_prefix([' ', '*']).unwrap_or(name);
                let result = match self.digest(ctx, name).await {
                    Ok(actual) => Some(actual.eq_ignore_ascii_case(hex)),
                    Err(e @ (bashkit::Error::Cancelled | bashkit::Error::ResourceLimit(_))) => {
                        return Err(e);
                    }
                    Err(e) => {
                        if !status_only {
                            warn(ctx, format!("{}: {name}: {}\n", ctx.name, reason(&e))).await?;
                        }
                        None
                    }
                };
                let verdict = match result {
                    Some(true) => "OK",
                    Some(false) => {
                        failed += 1;
                        "FAILED"
                    }
                    None => {
                        unreadable += 1;
                        "FAILED open or read"
                    }
                };
                if !(status_only || quiet && verdict == "OK") {
                    ctx.stdout
                        .write_all(format!("{name}: {verdict}\n").as_bytes())
                        .await?;
                }
            }
        }
        if !status_only {
            let plural = |n: u64, one: &str, many: &str| {
                if n == 1 {
                    one.to_string()
                } else {
                    many.to_string()
                }
            };
            if malformed > 0 {
                let lines = plural(malformed, "line is", "lines are");
                warn(
                    ctx,
                    format!(
                        "{}: WARNING: {malformed} {lines} improperly formatted\n",
                        ctx.name
                    ),
                )
                .await?;
            }
            if unreadable > 0 {
                let files = plural(unreadable, "listed file could", "listed files could");
                warn(
                    ctx,
                    format!("{}: WARNING: {unreadable} {files} not be read\n", ctx.name),
                )
                .await?;
            }
            if failed > 0 {
                let sums = plural(failed, "computed checksum did", "computed checksums did");
                warn(
                    ctx,
                    format!("{}: WARNING: {failed} {sums} NOT match\n", ctx.name),
                )
                .await?;
            }
        }
        if failed > 0 || unreadable > 0 {
            status = 1;
        }
        Ok(CommandStatus::with_code(status))
    }
}

/// A checksum list, whole: admitted against the memory budget as it grows.
async fn read_list(ctx: &CommandContext<'_>, env: &Env, name: &str) -> bashkit::Result<Vec<u8>> {
    let mut input = Input::open(ctx, env, name).await?;
    let mut text = Vec::new();
    while let Some(piece) = input.read().await? {
        env.budget.admit((text.len() + piece.len()) as u64, name)?;
        text.extend_from_slice(&piece);
    }
    Ok(text)
}
