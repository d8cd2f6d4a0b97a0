//! `export` and `import`: a computer's tree out to a tar stream on stdout,
//! and a tar file (or stdin) into a computer, over the node agent's Export
//! and Import calls ([`tar_stream`]), streamed whatever the size. An import
//! is all or nothing: the agent unpacks into a hidden directory and merges
//! it in only once every entry is in (docs/cli.md).

use std::io::{BufReader, IsTerminal, Read, Write};
use std::path::PathBuf;

use agentcomputer_proto::v1 as pb;

use super::tar_stream;
use crate::backend::Backend;
use crate::client::Client;
use crate::error::{CliError, Result, local_io};
use crate::format::shown;
use crate::size::human;

/// The two magic bytes that start a gzip stream (RFC 1952).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// What `export` writes.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A GNU tar archive.
    Tar,
    /// A GNU tar archive, gzip-compressed.
    #[value(name = "tar.gz", alias = "tgz")]
    TarGz,
}

/// The export and import subcommands (flattened into the top-level list).
#[derive(clap::Subcommand)]
pub enum ArchiveCommand {
    /// Write a computer's files (PATH, default /workspace: a directory with
    /// everything under it, or one file) as a tar archive on standard
    /// output: `export demo > demo.tar`. GNU tar: modes, mtimes, symlinks
    /// and hard links are kept; owners are the API's.
    Export {
        name: String,
        #[arg(default_value = "")]
        path: String,
        /// tar, or tar.gz (gzip-compressed).
        #[arg(long, value_enum, default_value = "tar")]
        format: Format,
    },
    /// Unpack a tar archive (FILE, `-` for standard input; tar or tar.gz,
    /// told apart by its first bytes) into a computer's directory PATH
    /// (default /workspace; made with its parents when missing). All or
    /// nothing: an archive past the quota (ENOSPC), with a hostile entry
    /// (an absolute name, `..`, a write through a symlink, a device) or cut
    /// short leaves the directory as it was.
    Import {
        name: String,
        file: PathBuf,
        #[arg(default_value = "")]
        path: String,
    },
}

/// Runs one export or import subcommand.
pub async fn run(backend: &Backend, command: ArchiveCommand) -> Result<()> {
    match command {
        ArchiveCommand::Export { name, path, format } => {
            let (mut c, name) = backend.client(name).await?;
            export(&mut c, name, path, format).await
        }
        ArchiveCommand::Import { name, file, path } => {
            let (mut c, name) = backend.client(name).await?;
            import(&mut c, name, file, path).await
        }
    }
}

async fn export(c: &mut Client, computer: String, path: String, format: Format) -> Result<()> {
    if std::io::stdout().is_terminal() {
        return Err(CliError::new(
            "export writes a tar archive to standard output, which is a terminal: redirect it (export NAME > NAME.tar) or pipe it (| tar t)",
        ));
    }
    let req = pb::ExportRequest { computer, path };
    tar_stream::receive(c, req, move |mut archive| {
        let broke = |e: std::io::Error| CliError::new(format!("export: {e}"));
        let stdout = std::io::stdout().lock();
        match format {
            Format::Tar => {
                let mut out = std::io::BufWriter::new(stdout);
                std::io::copy(&mut archive, &mut out).map_err(broke)?;
                out.flush().map_err(broke)
            }
            Format::TarGz => {
                let mut gz = flate2::write::GzEncoder::new(
                    std::io::BufWriter::new(stdout),
                    flate2::Compression::default(),
                );
                std::io::copy(&mut archive, &mut gz).map_err(broke)?;
                gz.finish().and_then(|mut out| out.flush()).map_err(broke)
            }
        }
    })
    .await
}

async fn import(c: &mut Client, computer: String, file: PathBuf, path: String) -> Result<()> {
    let stdin = file.as_os_str() == "-";
    let input: Box<dyn Read + Send> = if stdin {
        if std::io::stdin().is_terminal() {
            return Err(CliError::new(
                "import - reads a tar archive from standard input, which is a terminal: give a file or pipe one in",
            ));
        }
        Box::new(std::io::stdin())
    } else {
        let f = std::fs::File::open(&file).map_err(|e| local_io("cannot open", &file, e))?;
        Box::new(f)
    };
    let missing = c
        .stat(pb::StatRequest {
            computer: computer.clone(),
            path: path.clone(),
            follow_symlinks: true,
        })
        .await
        .is_err_and(|s| s.code() == tonic::Code::NotFound);
    if missing {
        agentcomputer_mcp::calls::files::mkdir(c, computer.clone(), path.clone(), true).await?;
    }
    let header = pb::ImportHeader {
        computer: computer.clone(),
        path: path.clone(),
    };
    let shown_file = file.clone();
    let produce = move |sink: &mut tar_stream::ImportSink| {
        let mut input = input;
        // The first two bytes, however the pipe delivers them.
        let mut head = Vec::with_capacity(GZIP_MAGIC.len());
        (&mut input)
            .take(GZIP_MAGIC.len() as u64)
            .read_to_end(&mut head)?;
        let gzip = head == GZIP_MAGIC;
        let mut input = BufReader::with_capacity(1 << 20, std::io::Cursor::new(head).chain(input));
        if gzip {
            std::io::copy(&mut flate2::bufread::MultiGzDecoder::new(input), sink)?;
        } else {
            std::io::copy(&mut input, sink)?;
        }
        Ok(())
    };
    let failed = move |e| local_io("cannot read", &shown_file, e);
    let done = tar_stream::send(c, header, produce, failed).await?;
    outln!(
        "imported {} entries ({}) into {}:{}",
        done.entries,
        human(done.bytes),
        computer,
        shown(if path.is_empty() { "/workspace" } else { &path })
    );
    Ok(())
}
