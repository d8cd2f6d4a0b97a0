//! The `grep` tool: the node agent's Grep, with several include globs,
//! exclude globs and context lines added on this side.
//!
//! One include glob goes to the agent as its `glob`; more, and every
//! exclude glob, are matched here, with the agent's rule: a pattern without
//! `/` is matched against the file name, one with `/` against the path
//! relative to `/workspace`. Context lines come from reading each matching
//! file once (files over [`CONTEXT_FILE_MAX`] get none).

use std::collections::BTreeMap;

use globset::{Glob, GlobBuilder, GlobMatcher};

use crate::calls::files::read_bytes;
use crate::calls::search::GrepArgs;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::format::shown;

/// Largest file whose context lines are shown (16 MiB).
pub(crate) const CONTEXT_FILE_MAX: usize = 16 << 20;

/// Matches the agent is asked for when filtering happens here, to find
/// enough that pass.
const FILTERED_SCAN: u32 = 100_000;

/// What to search.
pub(crate) struct Query {
    pub computer: String,
    pub pattern: String,
    pub path: String,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    pub ignore_case: bool,
    pub context: usize,
    pub max: usize,
}

/// One matching line.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Hit {
    pub path: String,
    pub line: u64,
    pub text: String,
}

/// The result: matches in the agent's order, the grep(1)-style text
/// (`path:N:line`, context lines as `path-N-line`, `--` between groups;
/// paths escaped by [`shown`] so a control character in a file name
/// cannot forge a line, file content as it is),
/// and whether `max` cut the list.
pub(crate) struct Found {
    pub hits: Vec<Hit>,
    pub text: String,
    pub truncated: bool,
}

/// A compiled filter pattern and whether it holds a `/`.
struct Filter(GlobMatcher, bool);

impl Filter {
    fn new(pattern: &str) -> Result<Filter> {
        let glob = GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .or_else(|_| Glob::new(pattern))
            .map_err(|e| Error::new(format!("EINVAL: invalid glob {pattern:?}: {e}")))?;
        Ok(Filter(glob.compile_matcher(), pattern.contains('/')))
    }

    fn matches(&self, path: &str) -> bool {
        if self.1 {
            self.0.is_match(path)
        } else {
            self.0.is_match(path.rsplit('/').next().unwrap_or(path))
        }
    }
}

/// Runs the search. Errors: an invalid regex or glob (EINVAL), the path's
/// (ENOENT...).
pub(crate) async fn grep(client: &mut Client, q: Query) -> Result<Found> {
    let includes = q
        .include
        .iter()
        .map(|p| Filter::new(p))
        .collect::<Result<Vec<_>>>()?;
    let excludes = q
        .exclude
        .iter()
        .map(|p| Filter::new(p))
        .collect::<Result<Vec<_>>>()?;
    let (server_glob, filter_here) = match q.include.as_slice() {
        [one] => (one.clone(), !excludes.is_empty()),
        [] => (String::new(), !excludes.is_empty()),
        _ => (String::new(), true),
    };
    let wanted = q.max.saturating_add(1);
    let max = if filter_here {
        FILTERED_SCAN
    } else {
        u32::try_from(wanted).unwrap_or(u32::MAX)
    };
    let args = GrepArgs {
        computer: q.computer.clone(),
        pattern: q.pattern,
        path: q.path,
        glob: server_glob,
        ignore_case: q.ignore_case,
        max,
    };
    let mut stream = client.grep(args.request()).await?.into_inner();
    let mut hits = Vec::new();
    while let Some(m) = stream.message().await? {
        let keep = (includes.len() < 2 || includes.iter().any(|f| f.matches(&m.path)))
            && !excludes.iter().any(|f| f.matches(&m.path));
        if keep {
            hits.push(Hit {
                path: m.path,
                line: m.line_number,
                text: m.line,
            });
            if hits.len() >= wanted {
                break;
            }
        }
    }
    // Dropping the stream cancels the rest of the agent's search.
    drop(stream);
    let truncated = hits.len() > q.max;
    hits.truncate(q.max);
    let text = if q.context == 0 {
        hits.iter()
            .map(|h| format!("{}:{}:{}\n", shown(&h.path), h.line, h.text))
            .collect()
    } else {
        with_context(client, &q.computer, &hits, q.context).await?
    };
    Ok(Found {
        hits,
        text,
        truncated,
    })
}

/// grep -C output of `hits`, reading each file once.
async fn with_context(
    client: &mut Client,
    computer: &str,
    hits: &[Hit],
    context: usize,
) -> Result<String> {
    // Files in order of first match, each with its matching line numbers.
    let mut order: Vec<&str> = Vec::new();
    let mut lines: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for h in hits {
        let entry = lines.entry(&h.path).or_default();
        if entry.is_empty() {
            order.push(&h.path);
        }
        entry.push(h.line);
    }
    let mut out = String::new();
    for path in order {
        let matched = &lines[path];
        let (data, more) = read_bytes(
            client,
            computer.to_string(),
            path.to_string(),
            0,
            CONTEXT_FILE_MAX,
        )
        .await?;
        let text = String::from_utf8_lossy(&data);
        let file: Vec<&str> = text.lines().collect();
        if more {
            // Too large to show context: the matches alone.
            for h in hits.iter().filter(|h| h.path == path) {
                out.push_str(&format!("{}:{}:{}\n", shown(&h.path), h.line, h.text));
            }
            continue;
        }
        out.push_str(&context_block(&shown(path), &file, matched, context));
    }
    // `--` separates groups; none after the last.
    if out.ends_with("--\n") {
        out.truncate(out.len() - 3);
    }
    Ok(out)
}

/// The lines of `file` around the 1-based line numbers `matched`, as
/// grep -n -C prints them: overlapping windows merge, separate groups are
/// divided by `--`.
fn context_block(path: &str, file: &[&str], matched: &[u64], context: usize) -> String {
    let mut out = String::new();
    let mut printed_to = 0usize; // last line number printed
    for &m in matched {
        let m = m as usize;
        let from = m.saturating_sub(context).max(1).max(printed_to + 1);
        let to = (m + context).min(file.len());
        if from > to {
            continue;
        }
        if printed_to > 0 && from > printed_to + 1 {
            out.push_str("--\n");
        }
        for n in from..=to {
            let sep = if matched.contains(&(n as u64)) {
                ':'
            } else {
                '-'
            };
            out.push_str(&format!("{path}{sep}{n}{sep}{}\n", file[n - 1]));
        }
        printed_to = to;
    }
    if !out.is_empty() {
        out.push_str("--\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_follow_the_agents_rule() {
        let by_name = Filter::new("*.md").unwrap();
        assert!(by_name.matches("docs/deep/notes.md"));
        assert!(!by_name.matches("notes.txt"));
        let by_path = Filter::new("src/*.rs").unwrap();
        assert!(by_path.matches("src/main.rs"));
        assert!(!by_path.matches("src/mcp/main.rs"));
        assert!(Filter::new("src/**/*.rs").unwrap().matches("src/mcp/x.rs"));
        assert!(Filter::new("[").is_err());
    }

    #[test]
    fn context_groups_merge_and_separate() {
        let file: Vec<&str> = (1..=10).map(|_| "x").collect();
        let text = context_block("f", &file, &[2, 3, 9], 1);
        assert_eq!(
            text,
            "f-1-x\nf:2:x\nf:3:x\nf-4-x\n--\nf-8-x\nf:9:x\nf-10-x\n--\n"
        );
    }
}
