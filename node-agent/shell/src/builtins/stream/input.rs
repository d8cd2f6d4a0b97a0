//! One input of a streaming command: stdin, a file of the computer read in
//! ranged steps from the engine, or a small file of the scratch tree.

use super::{Env, STEP_BYTES};
use agentcomputer_fs::{FileKind, Fs, Ino, ROOT_INO};
use bashkit::{CommandContext, CommandInput, normalize_path};
use std::path::{Path, PathBuf};

/// Where the bytes come from.
enum Source {
    Stdin(CommandInput),
    /// A regular file of the computer: read `STEP_BYTES` at a time.
    Engine {
        fs: Fs,
        ino: Ino,
        offset: u64,
    },
    /// Bytes already in memory (a scratch-tree file, a FIFO's buffer),
    /// admitted against the budget before they were read.
    Memory {
        data: Vec<u8>,
        pos: usize,
    },
    /// An endless character device of the namespace, generated a step at
    /// a time: `/dev/zero` (and `/dev/full`, which reads as zeros) or
    /// `/dev/urandom` and `/dev/random` (the host's CSPRNG).
    Device(Device),
}

/// The endless devices a command can read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Device {
    Zero,
    Random,
}

impl Device {
    /// The device at absolute namespace path `path`, if it is one. The
    /// scratch tree holds these paths (bashkit puts them there), and they
    /// cannot be replaced by a script.
    pub(crate) fn at(path: &Path) -> Option<Device> {
        match path.to_str()? {
            "/dev/zero" | "/dev/full" => Some(Device::Zero),
            "/dev/urandom" | "/dev/random" => Some(Device::Random),
            _ => None,
        }
    }

    /// One step of the device's bytes.
    fn step(self) -> bashkit::Result<Vec<u8>> {
        let mut data = vec![0u8; STEP_BYTES];
        if self == Device::Random {
            getrandom::fill(&mut data).map_err(|e| {
                std::io::Error::other(format!("cannot read the host's random source: {e}"))
            })?;
        }
        Ok(data)
    }
}

/// An open input.
pub(crate) struct Input {
    source: Source,
    budget: crate::budget::ExecBudget,
    /// The logical size of a regular file (its holes included), if known.
    pub size: Option<u64>,
}

impl Input {
    /// Standard input of the command.
    pub(super) fn stdin(ctx: &CommandContext<'_>, env: &Env) -> Input {
        Input {
            source: Source::Stdin(ctx.stdin.clone()),
            budget: env.budget.clone(),
            size: None,
        }
    }

    /// Opens operand `name` (`-`, `/dev/stdin` and `/dev/fd/0` are stdin),
    /// following symlinks. Errors are
    /// the filesystem's (`ENOENT`, `EISDIR`, `EFBIG` for a scratch file
    /// past the memory budget).
    pub(super) async fn open(
        ctx: &CommandContext<'_>,
        env: &Env,
        name: &str,
    ) -> bashkit::Result<Input> {
        if matches!(name, "-" | "/dev/stdin" | "/dev/fd/0") {
            return Ok(Self::stdin(ctx, env));
        }
        let path = absolute(ctx.cwd, name);
        if let Some(device) = Device::at(&path) {
            return Ok(Input {
                source: Source::Device(device),
                budget: env.budget.clone(),
                size: None,
            });
        }
        let meta = ctx.fs.stat(&path).await?;
        if meta.file_type.is_dir() {
            return Err(
                std::io::Error::new(std::io::ErrorKind::IsADirectory, "Is a directory").into(),
            );
        }
        if let Some(rel) = workspace_relative(&path) {
            let fs = env.engine.engine().clone();
            if let Ok(attr) = fs.resolve(ROOT_INO, rel.as_bytes(), true)
                && attr.kind == FileKind::RegularFile
            {
                return Ok(Input {
                    source: Source::Engine {
                        fs,
                        ino: attr.ino,
                        offset: 0,
                    },
                    budget: env.budget.clone(),
                    size: Some(attr.size),
                });
            }
        }
        // Scratch files, FIFOs, links into scratch: through the namespace,
        // whose whole-file reads are held to the memory budget.
        env.budget.admit(meta.size, name)?;
        let data = ctx.fs.read_file(&path).await?;
        Ok(Input {
            size: meta.file_type.is_file().then_some(data.len() as u64),
            source: Source::Memory { data, pos: 0 },
            budget: env.budget.clone(),
        })
    }

    /// The next piece (at most [`STEP_BYTES`] for files, a pipe's worth for
    /// stdin); `None` at end of input. Fails with the timeout or `Cancelled`
    /// once the exec must stop.
    pub(super) async fn read(&mut self) -> bashkit::Result<Option<Vec<u8>>> {
        if self.budget.step_stopped() {
            return Err(self.budget.stop_error());
        }
        match &mut self.source {
            Source::Stdin(input) => input.read_chunk().await,
            Source::Engine { fs, ino, offset } => {
                let data = fs
                    .read(*ino, *offset, STEP_BYTES)
                    .map_err(crate::errno::from_engine)?;
                *offset += data.len() as u64;
                Ok((!data.is_empty()).then_some(data))
            }
            Source::Memory { data, pos } => {
                if *pos >= data.len() {
                    return Ok(None);
                }
                let end = (*pos + STEP_BYTES).min(data.len());
                let piece = data[*pos..end].to_vec();
                *pos = end;
                Ok(Some(piece))
            }
            Source::Device(device) => device.step().map(Some),
        }
    }

    /// Moves the read position to byte `offset` of a file, when the input
    /// can seek (an engine file or bytes in memory); false for stdin.
    pub(super) fn seek(&mut self, to: u64) -> bool {
        match &mut self.source {
            Source::Stdin(_) => false,
            // Every offset of an endless device reads alike.
            Source::Device(_) => true,
            Source::Engine { offset, .. } => {
                *offset = to;
                true
            }
            Source::Memory { data, pos } => {
                *pos = usize::try_from(to).unwrap_or(usize::MAX).min(data.len());
                true
            }
        }
    }

    /// Reads `len` bytes at `at` of a seekable input (for reading a file
    /// from its end); empty for stdin.
    pub(super) fn read_at(&mut self, at: u64, len: usize) -> bashkit::Result<Vec<u8>> {
        if self.budget.step_stopped() {
            return Err(self.budget.stop_error());
        }
        match &self.source {
            Source::Stdin(_) | Source::Device(_) => Ok(Vec::new()),
            Source::Engine { fs, ino, .. } => {
                fs.read(*ino, at, len).map_err(crate::errno::from_engine)
            }
            Source::Memory { data, .. } => {
                let start = usize::try_from(at).unwrap_or(usize::MAX).min(data.len());
                let end = start.saturating_add(len).min(data.len());
                Ok(data[start..end].to_vec())
            }
        }
    }
}

/// `name` as an absolute path of the shell's namespace.
pub(crate) fn absolute(cwd: &Path, name: &str) -> PathBuf {
    normalize_path(&cwd.join(name))
}

/// The path inside the computer of an absolute shell path under
/// `/workspace` (`/workspace/a/b` is `a/b`, `/workspace` is `.`).
pub(super) fn workspace_relative(path: &Path) -> Option<String> {
    let rest = path.strip_prefix(crate::WORKSPACE).ok()?;
    let rest = rest.to_str()?;
    Some(if rest.is_empty() {
        ".".into()
    } else {
        rest.to_string()
    })
}
