//! Glob and Grep over a computer's files.

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use agentcomputer_fs::{FileKind, Fs, Ino};
use agentcomputer_proto::{CHUNK_BYTES, v1 as pb};
use globset::{Glob, GlobBuilder, GlobMatcher};
use nix::errno::Errno;
use regex::bytes::{Regex, RegexBuilder};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::convert::resolve;
use super::walk::walk;
use crate::blocking::blocking;
use crate::errors::{errno_detail, on};
use crate::paths::ApiPath;
use crate::registry::Lease;

const GLOB_DEFAULT_MAX: usize = 10_000;
const GREP_DEFAULT_MAX: usize = 1000;
/// A file whose first this many bytes hold a NUL is binary (as git decides).
const BINARY_SNIFF: usize = 8192;
/// Longest line returned by Grep, in bytes.
const LINE_MAX: usize = 4096;
/// Bytes of one line matched against the pattern (16 MiB); the rest of a
/// longer line is not searched. Bounds Grep's memory per call.
const LINE_SCAN_MAX: usize = 16 * 1024 * 1024;

fn compile_glob(pattern: &str) -> Result<GlobMatcher, Status> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|g: Glob| g.compile_matcher())
        .map_err(|e| errno_detail(Errno::EINVAL, format_args!("invalid glob {pattern:?}: {e}")))
}

fn has_glob_meta(component: &str) -> bool {
    component.contains(['*', '?', '[', ']', '{', '}', '\\'])
}

/// Serves Glob. The pattern's leading literal components pick the directory
/// the walk starts from; without `**` the walk goes no deeper than the
/// pattern has components. The paths are sorted; past `max_results` the
/// first ones in that order are kept and `truncated` is set.
pub fn glob(fs: &Fs, req: &pb::GlobRequest) -> Result<pb::GlobResponse, Status> {
    let max = match req.max_results {
        0 => GLOB_DEFAULT_MAX,
        n => n as usize,
    };
    // Normalise like any path (so `/workspace/...` and `..` behave), then
    // match against paths relative to /workspace.
    let normalised = ApiPath::parse(&req.pattern)?;
    let components = normalised.components();
    if components.is_empty() {
        return Err(errno_detail(Errno::EINVAL, "empty glob pattern"));
    }
    let literal = components.iter().take_while(|c| !has_glob_meta(c)).count();
    let mut paths = Vec::new();
    let mut truncated = false;
    if literal == components.len() {
        // No wildcard: the pattern names one path.
        if resolve(fs, &normalised, false).is_ok() {
            paths.push(normalised.relative());
        }
        return Ok(pb::GlobResponse { paths, truncated });
    }
    let matcher = compile_glob(&normalised.relative())?;
    let base_rel = components[..literal].join("/");
    let base = match resolve(fs, &ApiPath::parse(&base_rel)?, true) {
        Ok(attr) if attr.kind == FileKind::Directory => attr,
        _ => return Ok(pb::GlobResponse { paths, truncated }),
    };
    let rest = &components[literal..];
    let max_depth = if rest.iter().any(|c| c.contains("**")) {
        usize::MAX
    } else {
        rest.len()
    };
    // The answer is the `max` first matches in sorted order, not the first
    // ones the walk meets: keep the smallest `max` seen (memory bounded by
    // `max`), so the whole tree is walked.
    let mut kept = BTreeSet::new();
    walk(fs, base.ino, &base_rel, max_depth, |path, _| {
        if matcher.is_match(path) {
            if kept.len() < max {
                kept.insert(path.to_string());
            } else {
                truncated = true;
                if kept.last().is_some_and(|last| path < last.as_str()) {
                    kept.pop_last();
                    kept.insert(path.to_string());
                }
            }
        }
        ControlFlow::Continue(())
    })
    .map_err(on(&req.pattern))?;
    paths.extend(kept);
    Ok(pb::GlobResponse { paths, truncated })
}

/// The stream of a Grep call.
pub type GrepStream = ReceiverStream<Result<pb::GrepMatch, Status>>;

/// Starts Grep: validates the request, then searches on the blocking pool,
/// streaming matches; stops early when the client goes away.
pub async fn grep(lease: Lease, req: pb::GrepRequest) -> Result<GrepStream, Status> {
    let root = ApiPath::parse(&req.path)?;
    let regex = RegexBuilder::new(&req.pattern)
        .case_insensitive(req.case_insensitive)
        .build()
        .map_err(|e| errno_detail(Errno::EINVAL, format_args!("invalid regex: {e}")))?;
    let filter = match req.glob.as_str() {
        "" => None,
        g => Some((compile_glob(g)?, g.contains('/'))),
    };
    let max = match req.max_matches {
        0 => GREP_DEFAULT_MAX,
        n => n as usize,
    };
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(blocking(move || {
        let fs = lease.fs();
        let mut search = Search {
            fs,
            regex: &regex,
            tx: &tx,
            left: max,
        };
        let result = (|| -> Result<(), Status> {
            let attr = resolve(fs, &root, true)?;
            if attr.kind != FileKind::Directory {
                let _ = search
                    .file(attr.ino, &root.relative())
                    .map_err(on(root.shown()))?;
                return Ok(());
            }
            let mut failure = None;
            walk(fs, attr.ino, &root.relative(), usize::MAX, |path, e| {
                if e.kind != FileKind::RegularFile {
                    return ControlFlow::Continue(());
                }
                if let Some((matcher, by_path)) = &filter {
                    let subject = if *by_path {
                        path
                    } else {
                        path.rsplit('/').next().unwrap_or(path)
                    };
                    if !matcher.is_match(subject) {
                        return ControlFlow::Continue(());
                    }
                }
                match search.file(e.ino, path) {
                    Ok(ControlFlow::Continue(())) => ControlFlow::Continue(()),
                    Ok(ControlFlow::Break(())) => ControlFlow::Break(()),
                    // A file removed during the walk is simply skipped.
                    Err(err) if err.errno() == Errno::ENOENT => ControlFlow::Continue(()),
                    Err(err) => {
                        failure = Some(on(path)(err));
                        ControlFlow::Break(())
                    }
                }
            })
            .map_err(on(root.shown()))?;
            failure.map_or(Ok(()), Err)
        })();
        if let Err(status) = result {
            let _ = tx.blocking_send(Err(status));
        }
    }));
    Ok(ReceiverStream::new(rx))
}

struct Search<'a> {
    fs: &'a Fs,
    regex: &'a Regex,
    tx: &'a mpsc::Sender<Result<pb::GrepMatch, Status>>,
    left: usize,
}

impl Search<'_> {
    /// Greps one file chunk by chunk, in time linear in its size: each
    /// byte is looked at once for newlines, and each line is matched once.
    /// A line's first [`LINE_SCAN_MAX`] bytes are matched; the rest of a
    /// longer line is skipped, so memory stays bounded whatever the file
    /// (a sparse file can hold a terabyte-long line of zeros). Breaks when
    /// the match budget is spent or the client is gone, checked between
    /// chunks.
    fn file(&mut self, ino: Ino, path: &str) -> agentcomputer_fs::Result<ControlFlow<()>> {
        let mut offset = 0u64;
        let mut line_no = 0u64;
        // The current line's bytes so far, at most LINE_SCAN_MAX.
        let mut carry: Vec<u8> = Vec::new();
        let mut pending = false;
        loop {
            if self.tx.is_closed() {
                return Ok(ControlFlow::Break(()));
            }
            let data = self.fs.read(ino, offset, CHUNK_BYTES)?;
            if offset == 0 && data[..data.len().min(BINARY_SNIFF)].contains(&0) {
                return Ok(ControlFlow::Continue(()));
            }
            let eof = data.len() < CHUNK_BYTES;
            offset += data.len() as u64;
            let mut pos = 0;
            while pos < data.len() {
                let rest = &data[pos..];
                let (line_part, ended) = match rest.iter().position(|b| *b == b'\n') {
                    Some(nl) => (&rest[..nl], true),
                    None => (rest, false),
                };
                pos += line_part.len() + usize::from(ended);
                if !ended {
                    let room = LINE_SCAN_MAX - carry.len();
                    carry.extend_from_slice(&line_part[..line_part.len().min(room)]);
                    pending = true;
                    continue;
                }
                line_no += 1;
                let flow = if pending {
                    let room = LINE_SCAN_MAX - carry.len();
                    carry.extend_from_slice(&line_part[..line_part.len().min(room)]);
                    let flow = self.check(path, line_no, &carry);
                    carry.clear();
                    pending = false;
                    flow
                } else {
                    self.check(
                        path,
                        line_no,
                        &line_part[..line_part.len().min(LINE_SCAN_MAX)],
                    )
                };
                if flow.is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
            if eof {
                if pending {
                    line_no += 1;
                    if self.check(path, line_no, &carry).is_break() {
                        return Ok(ControlFlow::Break(()));
                    }
                }
                return Ok(ControlFlow::Continue(()));
            }
        }
    }

    fn check(&mut self, path: &str, line_number: u64, line: &[u8]) -> ControlFlow<()> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if !self.regex.is_match(line) {
            return ControlFlow::Continue(());
        }
        let mut text = String::from_utf8_lossy(&line[..line.len().min(LINE_MAX + 4)]).into_owned();
        if text.len() > LINE_MAX {
            let mut end = LINE_MAX;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
        let m = pb::GrepMatch {
            path: path.to_string(),
            line_number,
            line: text,
        };
        if self.tx.blocking_send(Ok(m)).is_err() {
            return ControlFlow::Break(());
        }
        self.left -= 1;
        if self.left == 0 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}
