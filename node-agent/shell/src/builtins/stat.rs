//! `stat` with GNU coreutils' default layout and format directives.
//!
//! bashkit's `stat` printed a short layout of its own (`Modify:` as epoch
//! seconds) and left `%U %G %u %g %h %i %b %x %y %z` unexpanded in
//! `-c`/`--printf`. This one follows stat(1) of GNU coreutils 9: owners,
//! link counts, inode numbers, blocks and nanosecond times come from the
//! engine under `/workspace`; the scratch tree has no inodes, so there
//! every file has inode 0, one link, the shell's user and group, and its
//! modification time as access and change time. Times are UTC. File
//! system status (`-f`) is not available.

use super::ls_format::{civil, mode_string};
use super::workspace::{SANDBOX_ID, engine_kind_char, engine_path, kind_char, reason, resolve};
use agentcomputer_fs::{Attr, Fs, ROOT_INO};
use bashkit::{Builtin, BuiltinContext, ExecResult, Metadata, async_trait};
use std::time::{SystemTime, UNIX_EPOCH};

/// The `stat` command; `engine` is the computer behind `/workspace`.
pub(crate) struct Stat {
    engine: Fs,
}

impl Stat {
    pub(crate) fn new(engine: Fs) -> Self {
        Self { engine }
    }
}

/// GNU's default layout (`stat FILE`), in this module's directives.
const DEFAULT_FORMAT: &str = "  File: %N\n  Size: %-10s\tBlocks: %-10b IO Block: %-6o %F\n\
Device: 0,0\tInode: %-11i Links: %h\nAccess: (%04a/%10.10A)  Uid: (%5u/%8U)   Gid: (%5g/%8G)\n\
Access: %x\nModify: %y\nChange: %z\n Birth: %w\n";

/// `stat -t`.
const TERSE_FORMAT: &str = "%n %s %b %f %u %g %D %i %h %t %T %X %Y %Z %W %o\n";

/// Seconds and nanoseconds since the epoch.
type Time = (i64, u32);

/// What `stat(2)` tells about one file.
struct Info {
    name: String,
    kind: char,
    perm: u32,
    nlink: u64,
    uid: u32,
    gid: u32,
    ino: u64,
    size: u64,
    /// 512-byte blocks.
    blocks: u64,
    atime: Time,
    mtime: Time,
    ctime: Time,
    birth: Option<Time>,
    target: Option<String>,
}

fn system_time(t: SystemTime) -> Time {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => (-(e.duration().as_secs() as i64), 0),
    }
}

impl Info {
    fn from_metadata(name: String, meta: &Metadata) -> Self {
        let kind = kind_char(meta.file_type);
        let mtime = system_time(meta.modified);
        Self {
            name,
            kind,
            perm: meta.mode & 0o7777,
            nlink: if kind == 'd' { 2 } else { 1 },
            uid: SANDBOX_ID,
            gid: SANDBOX_ID,
            ino: 0,
            size: meta.size,
            blocks: meta.size.div_ceil(4096) * 8,
            atime: mtime,
            mtime,
            ctime: mtime,
            birth: Some(system_time(meta.created)),
            target: None,
        }
    }

    fn apply_engine(&mut self, attr: &Attr) {
        self.kind = engine_kind_char(attr.kind);
        self.perm = attr.perm;
        self.nlink = u64::from(attr.nlink);
        self.uid = attr.uid;
        self.gid = attr.gid;
        self.ino = attr.ino;
        self.size = attr.size;
        self.blocks = attr.blocks;
        self.atime = (attr.atime.sec, attr.atime.nsec);
        self.mtime = (attr.mtime.sec, attr.mtime.nsec);
        self.ctime = (attr.ctime.sec, attr.ctime.nsec);
        self.birth = None;
    }

    fn type_name(&self) -> &'static str {
        match self.kind {
            'd' => "directory",
            'l' => "symbolic link",
            'p' => "fifo",
            'c' => "character special file",
            'b' => "block special file",
            's' => "socket",
            _ if self.size == 0 => "regular empty file",
            _ => "regular file",
        }
    }

    /// `st_mode` with the type bits (`S_IFREG` 0o100000 and so on).
    fn raw_mode(&self) -> u32 {
        let ifmt = match self.kind {
            'd' => 0o040000,
            'l' => 0o120000,
            'p' => 0o010000,
            'c' => 0o020000,
            'b' => 0o060000,
            's' => 0o140000,
            _ => 0o100000,
        };
        ifmt | self.perm
    }
}

fn id_name(id: u32) -> String {
    match id {
        0 => "root".into(),
        SANDBOX_ID => "sandbox".into(),
        _ => "UNKNOWN".into(),
    }
}

/// `2026-11-30 10:57:18.005286351 +0000`.
fn human_time((secs, nsec): Time) -> String {
    let (y, m, d) = civil(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{nsec:09} +0000",
        s / 3600,
        s % 3600 / 60,
        s % 60
    )
}

/// The text of directive `c` for `info`; `None` for an unknown directive.
fn directive(info: &Info, c: char) -> Option<String> {
    let quoted = |s: &str| format!("'{s}'");
    Some(match c {
        'n' => info.name.clone(),
        'N' => match &info.target {
            Some(t) => format!("{} -> {}", quoted(&info.name), quoted(t)),
            None => quoted(&info.name),
        },
        's' => info.size.to_string(),
        'b' => info.blocks.to_string(),
        'B' => "512".into(),
        'o' => "4096".into(),
        'a' => format!("{:o}", info.perm),
        'A' => mode_string(info.kind, info.perm),
        'f' => format!("{:x}", info.raw_mode()),
        'F' => info.type_name().into(),
        'h' => info.nlink.to_string(),
        'i' => info.ino.to_string(),
        'u' => info.uid.to_string(),
        'U' => id_name(info.uid),
        'g' => info.gid.to_string(),
        'G' => id_name(info.gid),
        'd' | 'D' | 't' | 'T' => "0".into(),
        'm' => "/".into(),
        'x' => human_time(info.atime),
        'X' => info.atime.0.to_string(),
        'y' => human_time(info.mtime),
        'Y' => info.mtime.0.to_string(),
        'z' => human_time(info.ctime),
        'Z' => info.ctime.0.to_string(),
        'w' => info.birth.map_or("-".into(), human_time),
        'W' => info.birth.map_or("0".into(), |b| b.0.to_string()),
        _ => return None,
    })
}

/// Expands `%[-0][width][.precision]X` directives of `format` for `info`.
/// An unknown directive is printed as written, as GNU does.
fn expand(format: &str, info: &Info) -> String {
    let mut out = String::new();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut spec = String::from("%");
        let (mut left, mut zero) = (false, false);
        while let Some(&f) = chars
            .peek()
            .filter(|f| matches!(f, '-' | '0' | '#' | '+' | ' '))
        {
            left |= f == '-';
            zero |= f == '0';
            spec.push(f);
            chars.next();
        }
        let width = number(&mut chars, &mut spec);
        let precision = if chars.peek() == Some(&'.') {
            spec.push('.');
            chars.next();
            Some(number(&mut chars, &mut spec).unwrap_or(0))
        } else {
            None
        };
        let Some(d) = chars.next() else {
            out.push_str(&spec);
            break;
        };
        if d == '%' {
            out.push('%');
            continue;
        }
        let Some(mut text) = directive(info, d) else {
            out.push_str(&spec);
            out.push(d);
            continue;
        };
        if let Some(p) = precision {
            text = text.chars().take(p).collect();
        }
        let pad = width.unwrap_or(0).saturating_sub(text.chars().count());
        if left {
            out.push_str(&text);
            out.push_str(&" ".repeat(pad));
        } else if zero {
            out.push_str(&"0".repeat(pad));
            out.push_str(&text);
        } else {
            out.push_str(&" ".repeat(pad));
            out.push_str(&text);
        }
    }
    out
}

/// Digits at the front of `chars`, also appended to `spec`.
fn number(chars: &mut std::iter::Peekable<std::str::Chars>, spec: &mut String) -> Option<usize> {
    let mut n = String::new();
    while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
        n.push(d);
        spec.push(d);
        chars.next();
    }
    n.parse().ok()
}

/// Backslash escapes of `--printf` (`\n`, `\t`, `\\`, `\NNN` octal,
/// `\xHH`).
fn unescape(format: &str) -> String {
    let mut out = String::new();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            out.push('\\');
            break;
        };
        let mut digits = |radix: u32, max: usize, first: Option<char>| {
            let mut v: u32 = first.and_then(|f| f.to_digit(radix)).unwrap_or(0);
            for _ in 0..max {
                match chars.peek().and_then(|d| d.to_digit(radix)) {
                    Some(d) => {
                        v = v * radix + d;
                        chars.next();
                    }
                    None => break,
                }
            }
            char::from_u32(v).unwrap_or('\u{fffd}')
        };
        let ch = match e {
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            'a' => '\u{7}',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'v' => '\u{b}',
            '\\' => '\\',
            '"' => '"',
            '0'..='7' => digits(8, 2, Some(e)),
            'x' => digits(16, 2, None),
            other => {
                out.push('\\');
                other
            }
        };
        out.push(ch);
    }
    out
}

enum Layout {
    Default,
    /// `-c`: the format, a newline after each file.
    Format(String),
    /// `--printf`: escapes expanded, no newline added.
    Printf(String),
}

#[async_trait]
impl Builtin for Stat {
    async fn execute(&self, ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        let usage = |m: String| {
            Ok(ExecResult::err(
                format!("stat: {m}\nTry 'stat --help' for more information.\n"),
                1,
            ))
        };
        let mut layout = Layout::Default;
        let mut follow = false;
        let mut files = Vec::new();
        let mut args = ctx.args.iter();
        let mut done = false;
        while let Some(arg) = args.next() {
            match arg.as_str() {
                a if done || a == "-" || !a.starts_with('-') => files.push(a.to_string()),
                "--" => done = true,
                "-L" | "--dereference" => follow = true,
                "-t" | "--terse" => layout = Layout::Format(TERSE_FORMAT.trim_end().into()),
                "-f" | "--file-system" => {
                    return Ok(ExecResult::err(
                        "stat: file system status is not available; use df\n".to_string(),
                        1,
                    ));
                }
                "-c" | "--format" => match args.next() {
                    Some(f) => layout = Layout::Format(f.clone()),
                    None => return usage(format!("option requires an argument -- '{arg}'")),
                },
                "--printf" => match args.next() {
                    Some(f) => layout = Layout::Printf(unescape(f)),
                    None => return usage("option '--printf' requires an argument".into()),
                },
                a => {
                    if let Some(f) = a.strip_prefix("--format=") {
                        layout = Layout::Format(f.into());
                    } else if let Some(f) = a.strip_prefix("--printf=") {
                        layout = Layout::Printf(unescape(f));
                    } else if let Some(f) = a.strip_prefix("-c") {
                        layout = Layout::Format(f.into());
                    } else {
                        return usage(format!("invalid option -- '{}'", &a[1..]));
                    }
                }
            }
        }
        if files.is_empty() {
            return usage("missing operand".into());
        }

        let cwd = ctx.cwd.clone();
        let (mut out, mut err) = (String::new(), String::new());
        for file in &files {
            let path = resolve(&cwd, file);
            let meta = if follow {
                ctx.fs.stat(&path).await
            } else {
                ctx.fs.lstat(&path).await
            };
            let meta = match meta {
                Ok(m) => m,
                Err(e) => {
                    err.push_str(&format!("stat: cannot statx '{file}': {}\n", reason(&e)));
                    continue;
                }
            };
            let mut info = Info::from_metadata(file.clone(), &meta);
            if let Some(rel) = engine_path(&path)
                && let Ok(attr) = self.engine.resolve(ROOT_INO, &rel, follow)
            {
                info.apply_engine(&attr);
            }
            if info.kind == 'l'
                && let Ok(target) = ctx.fs.read_link(&path).await
            {
                info.target = Some(target.to_string_lossy().into_owned());
            }
            match &layout {
                Layout::Default => {
                    let text = expand(DEFAULT_FORMAT, &info);
                    // The default layout names the file unquoted.
                    let first = match &info.target {
                        Some(t) => format!("  File: {} -> {t}\n", info.name),
                        None => format!("  File: {}\n", info.name),
                    };
                    out.push_str(&first);
                    out.push_str(text.split_once('\n').map_or("", |(_, rest)| rest));
                }
                Layout::Format(f) => {
                    out.push_str(&expand(f, &info));
                    out.push('\n');
                }
                Layout::Printf(f) => out.push_str(&expand(f, &info)),
            }
        }
        let status = i32::from(!err.is_empty());
        let mut result = ExecResult::err(err, status);
        result.stdout = out.into();
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> Info {
        Info {
            name: "f".into(),
            kind: '-',
            perm: 0o644,
            nlink: 2,
            uid: 1000,
            gid: 0,
            ino: 42,
            size: 3,
            blocks: 8,
            atime: (1_796_036_238, 5),
            mtime: (1_796_036_238, 5_286_351),
            ctime: (0, 0),
            birth: None,
            target: None,
        }
    }

    #[test]
    fn directives_and_padding() {
        let i = info();
        assert_eq!(
            expand("%n|%s|%a|%A|%F|%U|%G|%h|%i", &i),
            "f|3|644|-rw-r--r--|regular file|sandbox|root|2|42"
        );
        assert_eq!(expand("%-6s|%05a|%5u|%%|%q", &i), "3     |00644| 1000|%|%q");
        assert_eq!(expand("%f %Y %W %w", &i), "81a4 1796036238 0 -");
        assert_eq!(expand("%y", &i), "2026-11-30 10:57:18.005286351 +0000");
        assert_eq!(expand("%z", &i), "1970-01-01 00:00:00.000000000 +0000");
    }

    #[test]
    fn printf_escapes() {
        assert_eq!(unescape(r"%s\t%n\n\101\x42\q"), "%s\t%n\nAB\\q");
    }
}
