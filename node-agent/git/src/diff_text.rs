//! One file's difference in git's patch format (git-diff(1), "GENERATING
//! PATCH TEXT WITH -P"): the `diff --git` header lines, then unified hunks
//! with 3 lines of context, each hunk header followed by the nearest line
//! above it that starts with a letter, `_` or `$` (git's default
//! "funcname"). Line differences come from the `similar` crate (Myers).

use similar::{ChangeTag, TextDiff};
use std::fmt::Write;

/// One side of a file's difference.
#[derive(Clone, Copy)]
pub(crate) struct Side<'a> {
    /// The tree-entry mode, `None` when the file is absent on this side.
    pub(crate) mode: Option<u32>,
    /// Abbreviated object id (all zeros when absent).
    pub(crate) id: &'a str,
    /// Content.
    pub(crate) data: &'a [u8],
}

/// Longest a line diff of one file may search for the smallest edit;
/// past it `similar` finishes with a coarser (still exact) diff, so a huge
/// rewritten file cannot hold the exec past its stop checks, which come
/// between files.
const DIFF_DEADLINE: std::time::Duration = std::time::Duration::from_secs(1);

/// The line diff of `old` and `new`, bounded by [`DIFF_DEADLINE`].
pub(crate) fn line_diff<'a>(old: &'a str, new: &'a str) -> TextDiff<'a, 'a, 'a, str> {
    TextDiff::configure()
        .timeout(DIFF_DEADLINE)
        .diff_lines(old, new)
}

/// Bytes git looks at to call a file binary (a NUL in them).
const BINARY_PROBE: usize = 8000;

fn is_binary(data: &[u8]) -> bool {
    data[..data.len().min(BINARY_PROBE)].contains(&0)
}

/// Appends the patch for `path` from `old` to `new` to `out`.
pub(crate) fn patch(out: &mut String, path: &str, old: Side, new: Side) {
    let _ = writeln!(out, "diff --git a/{path} b/{path}");
    match (old.mode, new.mode) {
        (None, Some(m)) => {
            let _ = writeln!(out, "new file mode {m:06o}");
        }
        (Some(m), None) => {
            let _ = writeln!(out, "deleted file mode {m:06o}");
        }
        (Some(a), Some(b)) if a != b => {
            let _ = writeln!(out, "old mode {a:06o}\nnew mode {b:06o}");
        }
        _ => {}
    }
    if old.id == new.id {
        return;
    }
    match (old.mode, new.mode) {
        (Some(a), Some(b)) if a == b => {
            let _ = writeln!(out, "index {}..{} {a:06o}", old.id, new.id);
        }
        _ => {
            let _ = writeln!(out, "index {}..{}", old.id, new.id);
        }
    }
    let a_name = if old.mode.is_some() {
        format!("a/{path}")
    } else {
        "/dev/null".into()
    };
    let b_name = if new.mode.is_some() {
        format!("b/{path}")
    } else {
        "/dev/null".into()
    };
    if is_binary(old.data) || is_binary(new.data) {
        let _ = writeln!(out, "Binary files {a_name} and {b_name} differ");
        return;
    }
    let _ = writeln!(out, "--- {a_name}\n+++ {b_name}");
    hunks(out, old.data, new.data);
}

/// The unified hunks from `old` to `new`, without file headers.
pub(crate) fn hunks(out: &mut String, old: &[u8], new: &[u8]) {
    let old_text = String::from_utf8_lossy(old);
    let new_text = String::from_utf8_lossy(new);
    let diff = line_diff(old_text.as_ref(), new_text.as_ref());
    let old_lines: Vec<&str> = old_text.split_inclusive('\n').collect();
    let unified = diff.unified_diff();
    let mut unified = unified;
    unified.context_radius(3);
    for hunk in unified.iter_hunks() {
        let header = hunk.header().to_string();
        let first_old = hunk
            .ops()
            .first()
            .map(|op| op.old_range().start)
            .unwrap_or(0);
        let _ = write!(out, "{header}");
        if let Some(f) = funcname(&old_lines, first_old) {
            let _ = write!(out, " {f}");
        }
        out.push('\n');
        for change in hunk.iter_changes() {
            let sign = match change.tag() {
                ChangeTag::Equal => ' ',
                ChangeTag::Delete => '-',
                ChangeTag::Insert => '+',
            };
            out.push(sign);
            let value = change.value();
            out.push_str(value);
            if !value.ends_with('\n') {
                out.push_str("\n\\ No newline at end of file\n");
            }
        }
    }
}

/// The last line before line `start` (0-based) of `lines` that begins
/// with a letter, `_` or `$`, cut to 80 bytes and trimmed at the end.
fn funcname(lines: &[&str], start: usize) -> Option<String> {
    lines[..start.min(lines.len())]
        .iter()
        .rev()
        .find(|l| l.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == '$'))
        .map(|l| {
            let l = l.trim_end();
            let mut end = l.len().min(80);
            while !l.is_char_boundary(end) {
                end -= 1;
            }
            l[..end].trim_end().to_string()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_line_gets_gits_hunk_layout() {
        let mut out = String::new();
        let old = Side {
            mode: Some(0o100644),
            id: "1111111",
            data: b"a\nb\nc\n",
        };
        let new = Side {
            mode: Some(0o100644),
            id: "2222222",
            data: b"a\nB\nc\n",
        };
        patch(&mut out, "f", old, new);
        assert_eq!(
            out,
            "diff --git a/f b/f\nindex 1111111..2222222 100644\n--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
        );
    }

    #[test]
    fn a_new_file_without_final_newline_is_marked() {
        let mut out = String::new();
        let old = Side {
            mode: None,
            id: "0000000",
            data: b"",
        };
        let new = Side {
            mode: Some(0o100644),
            id: "2222222",
            data: b"x",
        };
        patch(&mut out, "f", old, new);
        assert_eq!(
            out,
            "diff --git a/f b/f\nnew file mode 100644\nindex 0000000..2222222\n--- /dev/null\n+++ b/f\n@@ -0,0 +1 @@\n+x\n\\ No newline at end of file\n"
        );
    }
}
