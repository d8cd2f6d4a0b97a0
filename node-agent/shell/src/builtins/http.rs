//! What `curl` and `wget` share: the exec's network settings, option
//! parsing, where a body goes (stdout, a file of the computer, nowhere),
//! and reading request bodies from files or stdin.
//!
//! Both are streaming host commands (bashkit's `Command`): bytes reach a
//! pipe or the exec's output as they arrive, and bashkit drops the command
//! when the exec's deadline passes or it is cancelled, which closes the
//! connection (see `agentcomputer_egress::http::Response`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentcomputer_egress::Policy;
use bashkit::{BashBuilder, CommandContext, CommandOutput, FileSystem};

use super::{curl::Curl, wget::Wget};

/// Largest request body read from a file or stdin (`-d @file`, `-T`).
pub(super) const MAX_UPLOAD_BYTES: u64 = 64 * 1024 * 1024;

/// Bytes gathered before one write to a file of the computer: each write
/// is a transaction of the engine.
const FILE_WRITE_BYTES: usize = 256 * 1024;

/// The network side of one exec.
#[derive(Debug, Clone)]
pub(crate) struct Network {
    /// Decides every connection, each redirect hop included.
    pub policy: Arc<Policy>,
    /// Cap on one response body, bytes.
    pub max_download_bytes: u64,
}

/// Registers `curl` and `wget` for one exec.
pub(crate) fn install(builder: BashBuilder, network: Network) -> BashBuilder {
    let network = Arc::new(network);
    builder
        .command("curl", Curl::new(Arc::clone(&network)))
        .command("wget", Wget::new(network))
}

/// Options as the command line gave them: long name (without dashes) and
/// value, in order, and the operands.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Parsed {
    pub opts: Vec<(String, Option<String>)>,
    pub operands: Vec<String>,
}

/// The options one command knows.
pub(super) struct Spec {
    /// Short letter and the long name it stands for.
    pub short: &'static [(char, &'static str)],
    /// Long names that take a value.
    pub valued: &'static [&'static str],
    /// Long names without a value.
    pub flags: &'static [&'static str],
}

impl Spec {
    /// Splits `args` getopt-style: clustered short flags (`-sSL`), values
    /// attached or separate (`-ofile`, `-o file`, `--output=file`,
    /// `--output file`), operands anywhere, `--` ends the options. Errors:
    /// the message for an unknown option or a missing value.
    pub(super) fn parse(&self, args: &[String]) -> Result<Parsed, String> {
        let mut out = Parsed::default();
        let mut iter = args.iter();
        while let Some(arg) = iter.next() {
            if arg == "--" {
                out.operands.extend(iter.cloned());
                break;
            }
            if let Some(long) = arg.strip_prefix("--") {
                let (name, inline) = match long.split_once('=') {
                    Some((n, v)) => (n, Some(v.to_string())),
                    None => (long, None),
                };
                if self.valued.contains(&name) {
                    let value = match inline {
                        Some(v) => v,
                        None => iter
                            .next()
                            .cloned()
                            .ok_or_else(|| format!("option --{name}: requires parameter"))?,
                    };
                    out.opts.push((name.to_string(), Some(value)));
                } else if self.flags.contains(&name) && inline.is_none() {
                    out.opts.push((name.to_string(), None));
                } else {
                    return Err(format!("option --{name}: is unknown"));
                }
                continue;
            }
            let Some(cluster) = arg.strip_prefix('-').filter(|c| !c.is_empty()) else {
                out.operands.push(arg.clone());
                continue;
            };
            for (i, c) in cluster.char_indices() {
                let Some((_, name)) = self.short.iter().find(|(s, _)| *s == c) else {
                    return Err(format!("option -{c}: is unknown"));
                };
                if self.valued.contains(name) {
                    let rest = &cluster[i + c.len_utf8()..];
                    let value = if rest.is_empty() {
                        iter.next()
                            .cloned()
                            .ok_or_else(|| format!("option -{c}: requires parameter"))?
                    } else {
                        rest.to_string()
                    };
                    out.opts.push((name.to_string(), Some(value)));
                    break;
                }
                out.opts.push((name.to_string(), None));
            }
        }
        Ok(out)
    }
}

/// Where a response body goes.
pub(super) enum Sink {
    Stdout(CommandOutput),
    Discard,
    /// A file of the computer's namespace, written in
    /// [`FILE_WRITE_BYTES`] pieces; created empty by [`Sink::file`].
    File {
        fs: Arc<dyn FileSystem>,
        path: PathBuf,
        pending: Vec<u8>,
    },
}

/// Why a write failed.
pub(super) enum SinkError {
    /// The destination refused the bytes (full, gone, not writable):
    /// curl's exit 23, wget's 3.
    Write(String),
    /// The exec is ending (output cap, timeout, cancellation): passed on
    /// to bashkit as it is.
    Fatal(bashkit::Error),
}

impl Sink {
    /// A sink for `path` (`-` is stdout; `/dev/null` discards), creating or
    /// truncating the file.
    pub(super) async fn open(
        path: &str,
        cwd: &Path,
        fs: &Arc<dyn FileSystem>,
        stdout: &CommandOutput,
    ) -> Result<Sink, SinkError> {
        match path {
            "-" | "/dev/stdout" => return Ok(Sink::Stdout(stdout.clone())),
            "/dev/null" => return Ok(Sink::Discard),
            _ => {}
        }
        let path = resolve(cwd, path);
        fs.write_file(&path, b"").await.map_err(write_error)?;
        Ok(Sink::File {
            fs: Arc::clone(fs),
            path,
            pending: Vec::new(),
        })
    }

    pub(super) async fn write(&mut self, bytes: &[u8]) -> Result<(), SinkError> {
        match self {
            Sink::Stdout(out) => out.write_all(bytes).await.map_err(write_error),
            Sink::Discard => Ok(()),
            Sink::File { pending, .. } => {
                pending.extend_from_slice(bytes);
                if pending.len() >= FILE_WRITE_BYTES {
                    self.flush().await?;
                }
                Ok(())
            }
        }
    }

    /// Writes what is buffered; call once the body is complete.
    pub(super) async fn flush(&mut self) -> Result<(), SinkError> {
        if let Sink::File { fs, path, pending } = self
            && !pending.is_empty()
        {
            fs.append_file(path, pending).await.map_err(write_error)?;
            pending.clear();
        }
        Ok(())
    }

    /// Removes the file this sink created, after a failed transfer, so a
    /// partial body never passes for a whole one; best effort (the failure
    /// being reported matters more than a failed removal).
    pub(super) async fn discard(self) {
        if let Sink::File { fs, path, .. } = self {
            let _ = fs.remove(&path, false).await;
        }
    }
}

fn write_error(e: bashkit::Error) -> SinkError {
    match e {
        bashkit::Error::Io(io) => SinkError::Write(io.to_string()),
        bashkit::Error::ResourceLimit(_) | bashkit::Error::Cancelled => SinkError::Fatal(e),
        other => SinkError::Write(other.to_string()),
    }
}

/// `path` taken relative to the command's working directory.
pub(super) fn resolve(cwd: &Path, path: &str) -> PathBuf {
    bashkit::normalize_path(&cwd.join(path))
}

/// Bytes of `@name` in a data option: `-` is stdin, else a file of the
/// computer. Errors: a message for people (missing file, too large).
pub(super) async fn read_source(ctx: &CommandContext<'_>, name: &str) -> Result<Vec<u8>, String> {
    let too_large = || format!("{name} is larger than {MAX_UPLOAD_BYTES} bytes");
    if name == "-" {
        let mut all = Vec::new();
        while let Some(chunk) = ctx.stdin.read_chunk().await.map_err(|e| e.to_string())? {
            all.extend_from_slice(&chunk);
            if all.len() as u64 > MAX_UPLOAD_BYTES {
                return Err(too_large());
            }
        }
        return Ok(all);
    }
    let path = resolve(ctx.cwd, name);
    let meta = ctx
        .fs
        .stat(&path)
        .await
        .map_err(|_| format!("Failed to open {name}: No such file or directory"))?;
    if meta.size > MAX_UPLOAD_BYTES {
        return Err(too_large());
    }
    ctx.fs
        .read_file(&path)
        .await
        .map_err(|e| format!("Failed to read {name}: {e}"))
}

/// Seconds as curl and wget take them (`5`, `0.5`). Errors: not a
/// non-negative number.
pub(super) fn seconds(text: &str) -> Result<std::time::Duration, String> {
    text.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(std::time::Duration::from_secs_f64)
        .ok_or_else(|| format!("expected a number of seconds, got {text:?}"))
}

/// The last path segment of `url`, or `None` when it is empty.
pub(super) fn remote_name(url: &url::Url) -> Option<String> {
    url.path_segments()
        .and_then(|mut s| s.next_back())
        .filter(|s| !s.is_empty())
        .map(percent_decode)
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(Some(h)), Some(Some(l))) = (
                bytes.get(i + 1).map(|b| hex(*b)),
                bytes.get(i + 2).map(|b| hex(*b)),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    // A decoded slash would name another directory.
    String::from_utf8_lossy(&out).replace('/', "_")
}

/// Parses a command-line URL; like curl and wget, a missing scheme means
/// `http://`.
pub(super) fn parse_url(text: &str) -> Result<url::Url, String> {
    let with_scheme = if text.contains("://") {
        text.to_string()
    } else {
        format!("http://{text}")
    };
    url::Url::parse(&with_scheme).map_err(|e| format!("URL rejected: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: Spec = Spec {
        short: &[('s', "silent"), ('o', "output"), ('L', "location")],
        valued: &["output"],
        flags: &["silent", "location"],
    };

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn opts(p: &Parsed) -> Vec<(&str, Option<&str>)> {
        p.opts
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_deref()))
            .collect()
    }

    #[test]
    fn getopt_style() {
        let p = SPEC
            .parse(&args(&["-sLo", "f", "u1", "--output=g", "--silent", "u2"]))
            .unwrap();
        assert_eq!(
            opts(&p),
            [
                ("silent", None),
                ("location", None),
                ("output", Some("f")),
                ("output", Some("g")),
                ("silent", None)
            ]
        );
        assert_eq!(p.operands, ["u1", "u2"]);
        let attached = SPEC.parse(&args(&["-ofile", "--", "-s"])).unwrap();
        assert_eq!(opts(&attached), [("output", Some("file"))]);
        assert_eq!(attached.operands, ["-s"]);
        let dash = SPEC.parse(&args(&["-o", "-", "-"])).unwrap();
        assert_eq!(opts(&dash), [("output", Some("-"))]);
        assert_eq!(dash.operands, ["-"]);
    }

    #[test]
    fn unknown_and_missing() {
        assert_eq!(
            SPEC.parse(&args(&["-x"])).unwrap_err(),
            "option -x: is unknown"
        );
        assert_eq!(
            SPEC.parse(&args(&["--nope"])).unwrap_err(),
            "option --nope: is unknown"
        );
        assert_eq!(
            SPEC.parse(&args(&["-o"])).unwrap_err(),
            "option -o: requires parameter"
        );
        assert!(SPEC.parse(&args(&["--silent=1"])).is_err());
    }

    #[test]
    fn names_and_urls() {
        let url = parse_url("127.0.0.1:8080/a/b%20c.txt").unwrap();
        assert_eq!(url.as_str(), "http://127.0.0.1:8080/a/b%20c.txt");
        assert_eq!(remote_name(&url).as_deref(), Some("b c.txt"));
        assert_eq!(remote_name(&parse_url("http://h/").unwrap()), None);
        assert_eq!(
            remote_name(&parse_url("http://h/x%2Fy").unwrap()).as_deref(),
            Some("x_y")
        );
        assert!(parse_url("http://[::1").is_err());
        assert_eq!(seconds("0.5").unwrap().as_millis(), 500);
        assert!(seconds("-1").is_err());
    }
}
