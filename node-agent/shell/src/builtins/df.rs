//! `df` over the computer's filesystem, laid out as GNU coreutils' df.
//!
//! bashkit's `df` described its own in-memory tree: a file system named
//! `bashkit-vfs`, its scratch limits for sizes and inodes, and an extra
//! `# Files: ...` line after the table (so `df -h . | tail -1` read that
//! line). This one prints GNU's header and one line for the computer's
//! filesystem, named `agentcomputer` and mounted on `/workspace`, with the
//! engine's figures (`statfs`): size is the byte quota, used the bytes
//! counted against it, available the rest; inodes (`-i`) are the engine's
//! inode limit and the inodes in use. `-h` scales by 1024 as GNU does (one
//! decimal under 10, rounded up). Operands must exist under `/workspace`:
//! the per-run scratch tree (`/tmp`, `$HOME`) is not the computer's
//! filesystem and has no line of its own.

use super::workspace::{engine_path, reason, resolve};
use agentcomputer_fs::Fs;
use bashkit::{Builtin, BuiltinContext, ExecResult, async_trait};

/// The name in the `Filesystem` column.
pub(crate) const FILESYSTEM: &str = "agentcomputer";
/// Where the computer's filesystem is mounted in every runtime.
const MOUNTED_ON: &str = "/workspace";

/// The `df` command; `engine` is the computer behind `/workspace`.
pub(crate) struct Df {
    engine: Fs,
}

impl Df {
    pub(crate) fn new(engine: Fs) -> Self {
        Self { engine }
    }
}

/// Which figures the table shows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unit {
    /// 1024-byte blocks (GNU's default, `-k`).
    Kibibytes,
    /// `-h`: powers of 1024 with a suffix.
    Human,
    /// `-P`: POSIX's header, 1024-byte blocks.
    Posix,
}

/// `n` as GNU's `-h` prints it: under 1024 as is; else in the largest
/// power of 1024 it reaches, with one decimal under 10, rounded up.
pub(crate) fn human(n: u64) -> String {
    const SUFFIXES: [&str; 6] = ["K", "M", "G", "T", "P", "E"];
    if n < 1024 {
        return n.to_string();
    }
    let mut unit = 1024u128;
    let mut i = 0;
    while i + 1 < SUFFIXES.len() && u128::from(n) >= unit * 1024 {
        unit *= 1024;
        i += 1;
    }
    let n = u128::from(n);
    let tenths = (n * 10).div_ceil(unit);
    if tenths < 100 {
        return format!("{}.{}{}", tenths / 10, tenths % 10, SUFFIXES[i]);
    }
    let whole = n.div_ceil(unit);
    // Rounding up can reach the next unit (1023.1K is 1.0M).
    if whole >= 1024 && i + 1 < SUFFIXES.len() {
        return format!("1.0{}", SUFFIXES[i + 1]);
    }
    format!("{whole}{}", SUFFIXES[i])
}

/// GNU's use percentage: used over used plus available, rounded up; `-`
/// when both are zero.
fn percent(used: u64, avail: u64) -> String {
    let total = u128::from(used) + u128::from(avail);
    if total == 0 {
        return "-".into();
    }
    format!("{}%", (u128::from(used) * 100).div_ceil(total))
}

/// Rows laid out as GNU's df does: the first column left-aligned and at
/// least 14 wide, the last left as is, the others right-aligned and at
/// least 5 wide (GNU's minimum widths), one space between.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows[0].len();
    let width: Vec<usize> = (0..columns)
        .map(|c| {
            let least = match c {
                0 => 14,
                _ if c + 2 < columns => 5,
                _ => 0,
            };
            rows.iter()
                .map(|r| r[c].chars().count())
                .max()
                .unwrap_or(0)
                .max(least)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c == 0 {
                line.push_str(&format!("{cell:<w$}", w = width[c]));
            } else if c + 1 == columns {
                line.push(' ');
                line.push_str(cell);
            } else {
                line.push_str(&format!(" {cell:>w$}", w = width[c]));
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

#[async_trait]
impl Builtin for Df {
    async fn execute(&self, ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        let mut unit = Unit::Kibibytes;
        let mut inodes = false;
        let mut operands = Vec::new();
        let mut done = false;
        for arg in ctx.args {
            let a = arg.as_str();
            if done || a == "-" || !a.starts_with('-') {
                operands.push(a.to_string());
                continue;
            }
            match a {
                "--" => done = true,
                "--human-readable" => unit = Unit::Human,
                "--inodes" => inodes = true,
                "--portability" => unit = Unit::Posix,
                "--local" | "--all" => {}
                "--help" => {
                    return Ok(ExecResult::ok(
                        "Usage: df [OPTION]... [FILE]...\n\
                         Show the computer's file system (/workspace): its quota, the bytes\n\
                         counted against it and the rest, or its inodes.\n\n\
                         \x20 -h, --human-readable  sizes in powers of 1024 (e.g. 1.5G)\n\
                         \x20 -i, --inodes          inodes instead of blocks\n\
                         \x20 -k                    1024-byte blocks (the default)\n\
                         \x20 -P, --portability     the POSIX output format\n\
                         \x20 -a, -l                accepted, no effect\n"
                            .to_string(),
                    ));
                }
                _ if a.starts_with("--") => {
                    return Ok(ExecResult::err(
                        format!(
                            "df: unrecognized option '{a}'\nTry 'df --help' for more information.\n"
                        ),
                        1,
                    ));
                }
                _ => {
                    for c in a[1..].chars() {
                        match c {
                            'h' => unit = Unit::Human,
                            'i' => inodes = true,
                            'k' => {
                                if unit != Unit::Posix {
                                    unit = Unit::Kibibytes
                                }
                            }
                            'P' => unit = Unit::Posix,
                            'a' | 'l' => {}
                            _ => {
                                return Ok(ExecResult::err(
                                    format!(
                                        "df: invalid option -- '{c}'\nTry 'df --help' for more information.\n"
                                    ),
                                    1,
                                ));
                            }
                        }
                    }
                }
            }
        }
        let mut stderr = String::new();
        let mut lines = 0usize;
        if operands.is_empty() {
            lines = 1;
        }
        for operand in &operands {
            let abs = resolve(ctx.cwd, operand);
            if engine_path(&abs).is_none() {
                stderr.push_str(&format!(
                    "df: {operand}: per-run scratch space, not the computer's file system; df shows {MOUNTED_ON}\n"
                ));
                continue;
            }
            match ctx.fs.stat(&abs).await {
                Ok(_) => lines += 1,
                Err(e) => stderr.push_str(&format!("df: {operand}: {}\n", reason(&e))),
            }
        }
        let fs = match self.engine.statfs() {
            Ok(s) => s,
            Err(e) => {
                return Ok(ExecResult::err(format!("df: {MOUNTED_ON}: {e}\n"), 1));
            }
        };
        let bs = u64::from(fs.block_size);
        let size = fs.blocks * bs;
        let avail = fs.blocks_free * bs;
        let used = fs.used_bytes;
        let header: [&str; 6] = match (inodes, unit) {
            (true, _) => [
                "Filesystem",
                "Inodes",
                "IUsed",
                "IFree",
                "IUse%",
                "Mounted on",
            ],
            (false, Unit::Human) => ["Filesystem", "Size", "Used", "Avail", "Use%", "Mounted on"],
            (false, Unit::Kibibytes) => [
                "Filesystem",
                "1K-blocks",
                "Used",
                "Available",
                "Use%",
                "Mounted on",
            ],
            (false, Unit::Posix) => [
                "Filesystem",
                "1024-blocks",
                "Used",
                "Available",
                "Capacity",
                "Mounted on",
            ],
        };
        let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
        let row: Vec<String> = if inodes {
            let iused = fs.files.saturating_sub(fs.files_free);
            // GNU's `df -ih` scales counts by 1024 like sizes.
            let show = |n: u64| match unit {
                Unit::Human => human(n),
                _ => n.to_string(),
            };
            vec![
                FILESYSTEM.into(),
                show(fs.files),
                show(iused),
                show(fs.files_free),
                percent(iused, fs.files_free),
                MOUNTED_ON.into(),
            ]
        } else {
            let (s, u, a) = match unit {
                Unit::Human => (human(size), human(used), human(avail)),
                _ => (
                    (size / 1024).to_string(),
                    used.div_ceil(1024).to_string(),
                    (avail / 1024).to_string(),
                ),
            };
            vec![
                FILESYSTEM.into(),
                s,
                u,
                a,
                percent(used, avail),
                MOUNTED_ON.into(),
            ]
        };
        let mut rows = vec![header];
        rows.extend(std::iter::repeat_n(row, lines));
        let stdout = if lines > 0 {
            table(&rows)
        } else {
            String::new()
        };
        if stderr.is_empty() {
            return Ok(ExecResult::ok(stdout));
        }
        let mut result = ExecResult::err(stderr, 1);
        result.stdout = stdout.into();
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_sizes_round_up_like_gnu() {
        assert_eq!(human(0), "0");
        assert_eq!(human(1023), "1023");
        assert_eq!(human(1024), "1.0K");
        assert_eq!(human(1025), "1.1K");
        assert_eq!(human(10 * 1024), "10K");
        assert_eq!(human(25 << 20), "25M");
        assert_eq!(human((1 << 30) - 1), "1.0G");
        assert_eq!(human(10 << 30), "10G");
        assert_eq!(human(1536 << 20), "1.5G");
    }

    #[test]
    fn use_percent_rounds_up() {
        assert_eq!(percent(0, 0), "-");
        assert_eq!(percent(0, 100), "0%");
        assert_eq!(percent(1, 1000), "1%");
        assert_eq!(percent(50, 50), "50%");
    }

    #[test]
    fn table_aligns_like_gnu() {
        let rows = vec![
            vec![
                "Filesystem".into(),
                "1K-blocks".into(),
                "Use%".into(),
                "Mounted on".into(),
            ],
            vec![
                "agentcomputer".into(),
                "10".into(),
                "1%".into(),
                "/workspace".into(),
            ],
        ];
        assert_eq!(
            table(&rows),
            "Filesystem     1K-blocks Use% Mounted on\nagentcomputer         10   1% /workspace\n"
        );
    }
}
