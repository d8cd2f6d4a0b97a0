//! The file tools (`read`, `write`, `edit`, `ls`, `find`, `grep`,
//! `delete`) and `share`.

use std::time::Duration;

use agentcomputer_proto::v1 as pb;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};

use super::super::search::{self, Query};
use super::super::text::{EditRefusal, is_binary, replace_exact, select_lines};
use super::params::{
    DeleteParams, EditParams, FindParams, GrepParams, LsParams, ReadParams, ShareParams,
    WriteParams,
};
use super::result::{invalid, success};
use super::router::Tools;
use crate::calls::files::{list_dir, mkdir, read_bytes, rm, write_bytes};
use crate::calls::search::glob_paths;
use crate::error::Error;
use crate::format::{kind_name, long_line, shown, time};

/// Most bytes of a file `read` and `edit` look at (16 MiB): lines past it
/// cannot be addressed, and a larger file cannot be edited here.
const SCAN_MAX: usize = 16 << 20;
/// `read`'s default and largest `max_bytes`.
const READ_DEFAULT_BYTES: u64 = 100_000;
const READ_MAX_BYTES: u64 = 1_000_000;
/// `find`'s default and largest `max_results`.
const FIND_DEFAULT_RESULTS: u32 = 1000;
const FIND_MAX_RESULTS: u32 = 10_000;

/// The parent directory of `path` as the API names it; `None` for a file
/// directly in /workspace.
fn parent_of(path: &str) -> Option<&str> {
    let trimmed = path.trim_end_matches('/');
    let (parent, _) = trimmed.rsplit_once('/')?;
    match parent {
        "" | "/workspace" | "." => None,
        p => Some(p),
    }
}

impl Tools {
    pub(super) async fn read_file(&self, p: ReadParams) -> Result<CallToolResult, Error> {
        let _stream = self.agent.file_stream().await;
        let start = p.start_line.unwrap_or(1).max(1);
        let end = p.end_line.unwrap_or(u64::MAX);
        if end < start {
            return Err(invalid(format!(
                "end_line {end} is before start_line {start}"
            )));
        }
        let max_bytes = p
            .max_bytes
            .unwrap_or(READ_DEFAULT_BYTES)
            .clamp(1, READ_MAX_BYTES) as usize;
        let mut client = self.agent.client();
        let computer = self.agent.computer();
        let (data, more) =
            read_bytes(&mut client, computer.clone(), p.path.clone(), 0, SCAN_MAX).await?;
        if is_binary(&data, !more) {
            let size = if more {
                client
                    .stat(pb::StatRequest {
                        computer,
                        path: p.path.clone(),
                        follow_symlinks: true,
                    })
                    .await?
                    .into_inner()
                    .size
            } else {
                data.len() as u64
            };
            let text = format!(
                "{}: binary file ({size} bytes), not shown; inspect it with exec (`file`, `xxd | head`)",
                p.path
            );
            return Ok(success(
                text,
                json!({"path": p.path, "binary": true, "size": size}),
            ));
        }
        // An incomplete read may end inside a character.
        let valid = match std::str::from_utf8(&data) {
            Ok(t) => t,
            Err(e) => std::str::from_utf8(&data[..e.valid_up_to()]).unwrap_or_default(),
        };
        let to = usize::try_from(end).unwrap_or(usize::MAX);
        let lines = select_lines(valid, start as usize, to, max_bytes);
        let whole = start == 1 && !lines.cut && !more && lines.last == lines.total;
        let mut content = vec![ContentBlock::text(lines.text.clone())];
        if !whole {
            let total = if more {
                format!("at least {}", lines.total)
            } else {
                lines.total.to_string()
            };
            let mut note = if lines.last < lines.first && lines.cut {
                format!(
                    "[line {} is longer than max_bytes ({max_bytes}); only its start is shown; use exec (cut, head -c) for the rest]",
                    lines.first
                )
            } else if lines.last < lines.first {
                format!(
                    "[no lines: the file has {total} lines, start_line is {}]",
                    lines.first
                )
            } else {
                format!("[lines {}-{} of {total}", lines.first, lines.last)
            };
            if lines.last >= lines.first {
                if lines.cut {
                    note.push_str(&format!(
                        "; cut at max_bytes ({max_bytes}); continue with start_line={}",
                        lines.last + 1
                    ));
                } else if (lines.last < lines.total || more) && end == u64::MAX {
                    note.push_str(&format!("; continue with start_line={}", lines.last + 1));
                }
                note.push(']');
            }
            if more && lines.last >= lines.total.saturating_sub(1) {
                note.push_str(&format!(
                    " [only the first {SCAN_MAX} bytes can be read by line; use exec (sed -n, tail) past them]"
                ));
            }
            content.push(ContentBlock::text(note));
        }
        let mut result = CallToolResult::success(content);
        result.structured_content = Some(json!({
            "path": p.path,
            "text": lines.text,
            "first_line": lines.first,
            "last_line": lines.last,
            "total_lines": if more { Value::Null } else { json!(lines.total) },
            "truncated": lines.cut,
        }));
        Ok(result)
    }

    pub(super) async fn write_file(&self, p: WriteParams) -> Result<CallToolResult, Error> {
        let _stream = self.agent.file_stream().await;
        let mut client = self.agent.client();
        if let Some(parent) = parent_of(&p.path) {
            mkdir(&mut client, self.agent.computer(), parent.to_string(), true).await?;
        }
        let resp = write_bytes(
            &mut client,
            self.agent.computer(),
            p.path.clone(),
            p.content.as_bytes(),
        )
        .await?;
        Ok(success(
            format!("wrote {} bytes to {}", resp.bytes_written, p.path),
            json!({"path": p.path, "bytes_written": resp.bytes_written}),
        ))
    }

    pub(super) async fn edit_file(&self, p: EditParams) -> Result<CallToolResult, Error> {
        let _stream = self.agent.file_stream().await;
        let mut client = self.agent.client();
        let computer = self.agent.computer();
        let (data, more) =
            read_bytes(&mut client, computer.clone(), p.path.clone(), 0, SCAN_MAX).await?;
        if more {
            return Err(Error {
                message: format!(
                    "EFBIG: {} is larger than {SCAN_MAX} bytes; edit it with exec (sed -i)",
                    p.path
                ),
                errno: Some("EFBIG".into()),
                moved_to: None,
            });
        }
        if is_binary(&data, true) {
            return Err(invalid(format!(
                "{} is a binary file; edit it with exec",
                p.path
            )));
        }
        let content = String::from_utf8_lossy(&data);
        let (new, count) = replace_exact(&content, &p.old_string, &p.new_string, p.replace_all)
            .map_err(|refusal| match refusal {
                EditRefusal::Pointless(why) => invalid(format!("{why} ({})", p.path)),
                EditRefusal::NotFound => invalid(format!(
                    "old_string not found in {}; it must match exactly, whitespace and indentation included (read the file first)",
                    p.path
                )),
                EditRefusal::Ambiguous(n) => invalid(format!(
                    "old_string occurs {n} times in {}; include more surrounding text to make it unique, or set replace_all",
                    p.path
                )),
            })?;
        write_bytes(&mut client, computer, p.path.clone(), new.as_bytes()).await?;
        let s = if count == 1 { "" } else { "s" };
        Ok(success(
            format!("replaced {count} occurrence{s} in {}", p.path),
            json!({"path": p.path, "replacements": count}),
        ))
    }

    pub(super) async fn list(&self, p: LsParams) -> Result<CallToolResult, Error> {
        let mut client = self.agent.client();
        let computer = self.agent.computer();
        let max = p.max_entries.unwrap_or(1000).max(1) as usize;
        let info = client
            .stat(pb::StatRequest {
                computer: computer.clone(),
                path: p.path.clone(),
                follow_symlinks: true,
            })
            .await?
            .into_inner();
        let describe = |name: &str, info: &pb::FileInfo| {
            json!({
                "name": name,
                "type": kind_name(info.kind()),
                "size": info.size,
                "mode": format!("{:04o}", info.perm),
                "modified": time(info.mtime_unix_nanos),
            })
        };
        if info.kind() != pb::FileKind::Directory {
            return Ok(success(
                long_line(&p.path, &info),
                json!({"path": p.path, "entries": [describe(&p.path, &info)], "truncated": false}),
            ));
        }
        let (entries, truncated) =
            list_dir(&mut client, computer, p.path.clone(), true, max).await?;
        let mut text = String::new();
        let mut listed = Vec::with_capacity(entries.len());
        for e in &entries {
            match &e.info {
                Some(info) => {
                    text.push_str(&long_line(&e.name, info));
                    listed.push(describe(&e.name, info));
                }
                None => {
                    text.push_str(&shown(&e.name));
                    listed.push(json!({"name": e.name}));
                }
            }
            text.push('\n');
        }
        if entries.is_empty() {
            text.push_str("(empty directory)\n");
        }
        if truncated {
            text.push_str(&format!(
                "[only the first {max} entries are shown; raise max_entries or use find]\n"
            ));
        }
        Ok(success(
            text,
            json!({"path": p.path, "entries": listed, "truncated": truncated}),
        ))
    }

    pub(super) async fn find_paths(&self, p: FindParams) -> Result<CallToolResult, Error> {
        let max = p.max_results.unwrap_or(FIND_DEFAULT_RESULTS);
        if !(1..=FIND_MAX_RESULTS).contains(&max) {
            return Err(invalid(format!(
                "max_results is from 1 to {FIND_MAX_RESULTS}, not {max}"
            )));
        }
        let mut client = self.agent.client();
        // The agent answers the `max` first paths in sorted order.
        let resp = glob_paths(&mut client, self.agent.computer(), p.pattern.clone(), max).await?;
        // Names are escaped in the text (a newline in a name cannot forge a
        // line); structured content keeps them raw.
        let mut text: String = resp
            .paths
            .iter()
            .map(|p| format!("{}\n", shown(p)))
            .collect();
        if resp.paths.is_empty() {
            text.push_str(&format!("no path matches {}\n", shown(&p.pattern)));
        }
        if resp.truncated {
            text.push_str(&format!(
                "[only the first {} paths are shown; narrow the pattern or raise max_results]\n",
                resp.paths.len()
            ));
        }
        Ok(success(
            text,
            json!({"paths": resp.paths, "truncated": resp.truncated}),
        ))
    }

    pub(super) async fn search(&self, p: GrepParams) -> Result<CallToolResult, Error> {
        if p.context_lines > 20 {
            return Err(invalid("context_lines is at most 20"));
        }
        let max = p.max_matches.unwrap_or(100);
        if !(1..=10_000).contains(&max) {
            return Err(invalid("max_matches is from 1 to 10000"));
        }
        let mut client = self.agent.client();
        let query = Query {
            computer: self.agent.computer(),
            pattern: p.pattern,
            path: p.path,
            include: p.include,
            exclude: p.exclude,
            ignore_case: p.ignore_case,
            context: p.context_lines as usize,
            max: max as usize,
        };
        // Context lines are read with Read streams.
        let _stream = self.agent.file_stream().await;
        let found = search::grep(&mut client, query).await?;
        let mut text = found.text;
        if found.hits.is_empty() {
            text.push_str("no matches\n");
        }
        if found.truncated {
            text.push_str(&format!(
                "[stopped after {max} matches; narrow the search or raise max_matches]\n"
            ));
        }
        Ok(success(
            text,
            json!({"matches": found.hits, "truncated": found.truncated}),
        ))
    }

    pub(super) async fn remove(&self, p: DeleteParams) -> Result<CallToolResult, Error> {
        let mut client = self.agent.client();
        rm(
            &mut client,
            self.agent.computer(),
            p.path.clone(),
            p.recursive,
        )
        .await?;
        Ok(success(
            format!("deleted {}", p.path),
            json!({"path": p.path, "deleted": true}),
        ))
    }

    pub(super) async fn link(&self, p: ShareParams) -> Result<CallToolResult, Error> {
        let seconds = p.expires_in_seconds.unwrap_or(3600);
        if !(1..=604_800).contains(&seconds) {
            return Err(invalid(format!(
                "expires_in_seconds must be 1 to 604800 (7 days), not {seconds}"
            )));
        }
        let mut client = self.agent.client();
        let link = client
            .share(pb::ShareRequest {
                computer: self.agent.computer(),
                path: p.path.clone(),
                expires_in_seconds: seconds,
            })
            .await?
            .into_inner();
        let expires_at = u64::try_from(link.expires_unix_seconds)
            .map(|s| {
                humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_secs(s))
                    .to_string()
            })
            .unwrap_or_default();
        Ok(success(
            format!("{}\n(expires {expires_at})", link.url),
            json!({
                "url": link.url,
                "path": link.path,
                "expires_unix_seconds": link.expires_unix_seconds,
                "expires_at": expires_at,
            }),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents() {
        assert_eq!(parent_of("notes.md"), None);
        assert_eq!(parent_of("/workspace/notes.md"), None);
        assert_eq!(parent_of("a/b/c.txt"), Some("a/b"));
        assert_eq!(parent_of("/workspace/a/c.txt"), Some("/workspace/a"));
    }
}
