//! Text of `ls` output: the long format's columns and the multi-column
//! layout, as GNU coreutils 9 prints them in the C locale (ls(1),
//! coreutils `src/ls.c`), with times in UTC.

use super::workspace::SANDBOX_ID;

/// One entry to print, with what `stat(2)` tells about it.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// Name as printed (an operand as written, or a directory entry name).
    pub name: String,
    /// `S_IFMT`-style type letter: `-`, `d`, `l`, `p`.
    pub kind: char,
    /// Permission bits (`0o7777`).
    pub perm: u32,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    /// Inode number, when the tree has one (the engine); the scratch tree has none.
    pub ino: Option<u64>,
    pub size: u64,
    /// Allocated size in 1024-byte blocks (what `total` adds up).
    pub blocks_k: u64,
    /// Modification time, seconds since the epoch.
    pub mtime: i64,
    /// Symlink target, for `-l`.
    pub target: Option<String>,
    /// Any execute bit set (for `-F`).
    pub executable: bool,
}

/// Which owner columns the long format shows and how.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LongStyle {
    pub human: bool,
    pub numeric_ids: bool,
    pub no_owner: bool,
    pub no_group: bool,
    pub inode: bool,
}

/// `-rwxr-xr-x`: the type letter and `rwx` triplets with set-id and
/// sticky bits (`s`/`S`, `t`/`T`).
pub(crate) fn mode_string(kind: char, perm: u32) -> String {
    let mut s = String::with_capacity(10);
    s.push(kind);
    let special = [(0o4000, 's', 'S'), (0o2000, 's', 'S'), (0o1000, 't', 'T')];
    for (i, (bit, on, off)) in special.iter().enumerate() {
        let shift = 6 - 3 * i as u32;
        let triplet = (perm >> shift) & 7;
        s.push(if triplet & 4 != 0 { 'r' } else { '-' });
        s.push(if triplet & 2 != 0 { 'w' } else { '-' });
        let exec = triplet & 1 != 0;
        s.push(match (perm & bit != 0, exec) {
            (true, true) => *on,
            (true, false) => *off,
            (false, true) => 'x',
            (false, false) => '-',
        });
    }
    s
}

/// GNU `-h` size: bytes below 1024, else the smallest unit that keeps the
/// number under 1024, rounded up, with one decimal below 10 (`1.5K`, `10K`).
pub(crate) fn human_size(bytes: u64) -> String {
    if bytes < 1024 {
        return bytes.to_string();
    }
    let mut value = bytes as f64;
    for unit in ["K", "M", "G", "T", "P", "E"] {
        value /= 1024.0;
        if value < 1024.0 || unit == "E" {
            let tenths = (value * 10.0).ceil() / 10.0;
            return if tenths < 10.0 {
                format!("{tenths:.1}{unit}")
            } else {
                format!("{}{unit}", value.ceil() as u64)
            };
        }
    }
    unreachable!("the loop returns at the last unit")
}

/// Civil date (year, month 1-12, day) of `days` since 1970-01-01
/// (Howard Hinnant's `civil_from_days`).
pub(crate) fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// GNU's default long-format time: `Nov 30 10:28` for times within the
/// last six months (and not in the future), else `Nov 30  2025`.
pub(crate) fn ls_time(mtime: i64, now: i64) -> String {
    const SIX_MONTHS: i64 = 31_556_952 / 2;
    let (year, month, day) = civil(mtime.div_euclid(86_400));
    let mon = MONTHS[month as usize - 1];
    if mtime <= now && now - mtime < SIX_MONTHS {
        let secs = mtime.rem_euclid(86_400);
        format!("{mon} {day:>2} {:02}:{:02}", secs / 3600, secs % 3600 / 60)
    } else {
        format!("{mon} {day:>2}  {year}")
    }
}

/// The user or group name of `id` (the virtual identities of
/// `/etc/passwd`), else the number.
fn id_name(id: u32, numeric: bool) -> String {
    match id {
        _ if numeric => id.to_string(),
        0 => "root".into(),
        SANDBOX_ID => "sandbox".into(),
        other => other.to_string(),
    }
}

/// Long-format lines for `entries`, columns padded to a common width.
/// `name_of` renders each name (quoting and `-F` indicator).
pub(crate) fn long_lines(
    entries: &[Entry],
    style: LongStyle,
    now: i64,
    name_of: impl Fn(&Entry) -> String,
) -> String {
    let rows: Vec<[String; 6]> = entries
        .iter()
        .map(|e| {
            [
                e.ino.map_or("?".into(), |i| i.to_string()),
                e.nlink.to_string(),
                id_name(e.uid, style.numeric_ids),
                id_name(e.gid, style.numeric_ids),
                if style.human {
                    human_size(e.size)
                } else {
                    e.size.to_string()
                },
                ls_time(e.mtime, now),
            ]
        })
        .collect();
    let width = |col: usize| rows.iter().map(|r| r[col].len()).max().unwrap_or(0);
    let (w_ino, w_links, w_user, w_group, w_size) =
        (width(0), width(1), width(2), width(3), width(4));
    let mut out = String::new();
    for (e, row) in entries.iter().zip(&rows) {
        if style.inode {
            out.push_str(&format!("{:>w_ino$} ", row[0]));
        }
        out.push_str(&mode_string(e.kind, e.perm));
        out.push_str(&format!(" {:>w_links$} ", row[1]));
        if !style.no_owner {
            out.push_str(&format!("{:<w_user$} ", row[2]));
        }
        if !style.no_group {
            out.push_str(&format!("{:<w_group$} ", row[3]));
        }
        out.push_str(&format!("{:>w_size$} {} {}", row[4], row[5], name_of(e)));
        if let Some(target) = &e.target {
            out.push_str(" -> ");
            out.push_str(target);
        }
        out.push('\n');
    }
    out
}

/// Names laid out in columns no wider than `line` characters, filled
/// down the columns (`-C`) or across the rows (`-x`), two spaces apart.
pub(crate) fn columns(names: &[String], line: usize, across: bool) -> String {
    if names.is_empty() {
        return String::new();
    }
    let widths: Vec<usize> = names.iter().map(|n| n.chars().count()).collect();
    // The most columns whose widths (plus separators) fit the line.
    let mut best = 1;
    for cols in (1..=names.len()).rev() {
        let rows = names.len().div_ceil(cols);
        if across && cols > 1 && names.len() <= (rows - 1) * cols {
            continue;
        }
        let col_width = |c: usize| {
            (0..rows)
                .filter_map(|r| {
                    let i = if across { r * cols + c } else { c * rows + r };
                    widths.get(i).copied()
                })
                .max()
                .unwrap_or(0)
        };
        let total: usize = (0..cols).map(col_width).sum::<usize>() + 2 * (cols - 1);
        if total <= line {
            best = cols;
            break;
        }
    }
    let cols = best;
    let rows = names.len().div_ceil(cols);
    let index = |r: usize, c: usize| if across { r * cols + c } else { c * rows + r };
    let col_width: Vec<usize> = (0..cols)
        .map(|c| {
            (0..rows)
                .filter_map(|r| widths.get(index(r, c)).copied())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in 0..rows {
        let cells: Vec<usize> = (0..cols)
            .map(|c| index(r, c))
            .filter(|&i| i < names.len())
            .collect();
        for (k, &i) in cells.iter().enumerate() {
            out.push_str(&names[i]);
            if k + 1 < cells.len() {
                let c = if across { i % cols } else { i / rows };
                out.push_str(&" ".repeat(col_width[c] - widths[i] + 2));
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes() {
        assert_eq!(mode_string('-', 0o644), "-rw-r--r--");
        assert_eq!(mode_string('d', 0o755), "drwxr-xr-x");
        assert_eq!(mode_string('-', 0o4755), "-rwsr-xr-x");
        assert_eq!(mode_string('d', 0o1777), "drwxrwxrwt");
        assert_eq!(mode_string('-', 0o2644), "-rw-r-Sr--");
    }

    #[test]
    fn human_sizes_round_up_like_gnu() {
        assert_eq!(human_size(0), "0");
        assert_eq!(human_size(1023), "1023");
        assert_eq!(human_size(1024), "1.0K");
        assert_eq!(human_size(1536), "1.5K");
        assert_eq!(human_size(1537), "1.6K");
        assert_eq!(human_size(10 * 1024), "10K");
        assert_eq!(human_size(108_894), "107K");
        assert_eq!(human_size(5 * 1024 * 1024), "5.0M");
    }

    #[test]
    fn times_recent_and_old() {
        // 2026-11-30 10:28:00 UTC and 2025-01-02 03:04:05 UTC.
        let now = 1_796_034_480;
        assert_eq!(ls_time(now, now), "Nov 30 10:28");
        assert_eq!(ls_time(1_735_787_045, now), "Jan  2  2025");
        assert_eq!(ls_time(now + 86_400, now), "Dec  1  2026");
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(-1), (1969, 12, 31));
    }

    #[test]
    fn columns_fill_down_then_across() {
        let names: Vec<String> = ["a", "bb", "ccc", "d", "e"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(columns(&names, 80, false), "a  bb  ccc  d  e\n");
        assert_eq!(columns(&names, 8, false), "a    d\nbb   e\nccc\n");
        assert_eq!(columns(&names, 8, true), "a    bb\nccc  d\ne\n");
    }
}
