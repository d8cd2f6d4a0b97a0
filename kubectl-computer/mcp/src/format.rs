//! Text forms of file attributes, as `ls -l` and `stat` print them.

use std::time::{Duration, UNIX_EPOCH};

use agentcomputer_proto::v1::{FileInfo, FileKind};

/// The `ls -l` type letter of a kind.
fn type_char(kind: FileKind) -> char {
    match kind {
        FileKind::Directory => 'd',
        FileKind::Symlink => 'l',
        FileKind::Fifo => 'p',
        FileKind::CharDevice => 'c',
        FileKind::BlockDevice => 'b',
        FileKind::Socket => 's',
        FileKind::Regular | FileKind::Unspecified => '-',
    }
}

/// A kind in words, as stat(1) prints it.
pub fn kind_name(kind: FileKind) -> &'static str {
    match kind {
        FileKind::Regular => "regular file",
        FileKind::Directory => "directory",
        FileKind::Symlink => "symbolic link",
        FileKind::Fifo => "fifo",
        FileKind::CharDevice => "character special file",
        FileKind::BlockDevice => "block special file",
        FileKind::Socket => "socket",
        FileKind::Unspecified => "unknown",
    }
}

/// `drwxr-xr-x`-style mode string, with setuid/setgid/sticky letters.
pub fn mode_string(kind: FileKind, perm: u32) -> String {
    let mut s = String::with_capacity(10);
    s.push(type_char(kind));
    let specials = [(0o4000, 's', 'S'), (0o2000, 's', 'S'), (0o1000, 't', 'T')];
    for (i, (special, with_x, without_x)) in specials.into_iter().enumerate() {
        let shift = 6 - 3 * i as u32;
        let bits = (perm >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        let x = bits & 1 != 0;
        s.push(match (perm & special != 0, x) {
            (true, true) => with_x,
            (true, false) => without_x,
            (false, true) => 'x',
            (false, false) => '-',
        });
    }
    s
}

/// A time in nanoseconds since the epoch as RFC 3339 UTC, to the second.
pub fn time(unix_nanos: i64) -> String {
    if unix_nanos < 0 {
        return "-".into();
    }
    let t = UNIX_EPOCH + Duration::from_nanos(unix_nanos as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// A name or path from a computer as printed: always with its control
/// characters escaped, whether stdout is a terminal or not, so a tenant's
/// file name cannot move the cursor, retitle or recolour the operator's
/// terminal, or forge extra lines in a pipe. `\n`, `\r`, `\t` and `\\`
/// are written so; other C0 bytes and DEL as `\xNN`; C1 controls
/// (U+0080 to U+009F) as `\u{NN}`. Other text is printed as it is.
pub fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    let needs = |c: char| c == '\\' || c.is_control();
    if !text.chars().any(needs) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 && c.is_control() => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{{{:02x}}}", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// One `ls -l` line for `name` (escaped by [`shown`], as is a symlink's
/// target).
pub fn long_line(name: &str, info: &FileInfo) -> String {
    let kind = info.kind();
    let mut line = format!(
        "{} {:>3} {:>5} {:>5} {:>10} {} {}",
        mode_string(kind, info.perm),
        info.nlink,
        info.uid,
        info.gid,
        info.size,
        time(info.mtime_unix_nanos),
        shown(name)
    );
    if kind == FileKind::Symlink {
        line.push_str(" -> ");
        line.push_str(&shown(&info.symlink_target));
    }
    line
}

/// A stat(1)-like description of `path`.
pub fn stat_text(path: &str, info: &FileInfo) -> String {
    let kind = info.kind();
    let name = if kind == FileKind::Symlink {
        format!("{} -> {}", shown(path), shown(&info.symlink_target))
    } else {
        shown(path).into_owned()
    };
    format!(
        "  File: {name}\n  Size: {:<12} Blocks: {:<10} {}\n Inode: {:<12} Links: {}\nAccess: ({:04o}/{})  Uid: {}  Gid: {}\nAccess: {}\nModify: {}\nChange: {}\n",
        info.size,
        info.blocks,
        kind_name(kind),
        info.ino,
        info.nlink,
        info.perm,
        mode_string(kind, info.perm),
        info.uid,
        info.gid,
        time(info.atime_unix_nanos),
        time(info.mtime_unix_nanos),
        time(info.ctime_unix_nanos),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(shown("plain name.txt"), "plain name.txt");
        assert_eq!(shown("\x1b]0;owned\x07"), "\\x1b]0;owned\\x07");
        assert_eq!(shown("a\nb\tc\\d"), "a\\nb\\tc\\\\d");
        assert_eq!(shown("\u{9b}31m"), "\\u{9b}31m");
        assert_eq!(shown("caf\u{e9}"), "caf\u{e9}");
    }

    #[test]
    fn modes() {
        assert_eq!(mode_string(FileKind::Directory, 0o755), "drwxr-xr-x");
        assert_eq!(mode_string(FileKind::Regular, 0o644), "-rw-r--r--");
        assert_eq!(mode_string(FileKind::Regular, 0o4755), "-rwsr-xr-x");
        assert_eq!(mode_string(FileKind::Directory, 0o1777), "drwxrwxrwt");
        assert_eq!(mode_string(FileKind::Symlink, 0o2640), "lrw-r-S---");
    }

    #[test]
    fn times() {
        assert_eq!(time(0), "1970-01-01T00:00:00Z");
        assert_eq!(time(1_700_000_000_500_000_000), "2023-11-14T22:13:20Z");
    }
}
