//! `ls` with GNU coreutils' options and long format.
//!
//! bashkit's `ls` prints no link count, owner, group or `total` in `-l`,
//! never lists `.`/`..`, and rejects `-r`, `-S`, `-p`, `-i`, `-n` and
//! `--color` as unimplemented, all of which agent scripts use (`ls -ltr`,
//! `ls -lS`, `ls --color=auto`). This one follows ls(1) of GNU coreutils 9
//! in the C locale for output that is not a terminal: one name per line
//! unless `-C`/`-x`, names sorted bytewise, times in UTC. Link counts,
//! owners and inode numbers under `/workspace` come from the engine; the
//! scratch tree has none, so there every file has one link, the shell's
//! user and group, and no inode number (`?`).

use super::ls_format::{Entry, LongStyle, columns, human_size, long_lines};
use super::workspace::{SANDBOX_ID, engine_kind_char, engine_path, kind_char, reason, resolve};
use agentcomputer_fs::{Fs, ROOT_INO};
use bashkit::{Builtin, BuiltinContext, ExecResult, Metadata, async_trait};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The `ls` command; `engine` is the computer behind `/workspace`.
pub(crate) struct Ls {
    engine: Fs,
}

impl Ls {
    pub(crate) fn new(engine: Fs) -> Self {
        Self { engine }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Default)]
enum Format {
    #[default]
    OnePerLine,
    Long,
    Columns,
    Across,
    Commas,
}

#[derive(Clone, Copy, PartialEq, Eq, Default)]
enum Sort {
    #[default]
    Name,
    Time,
    Size,
    None,
}

#[derive(Clone, Copy, PartialEq, Eq, Default)]
enum Indicator {
    #[default]
    None,
    Slash,
    Classify,
}

#[derive(Clone, Copy, PartialEq, Eq, Default)]
enum Quoting {
    #[default]
    Literal,
    Escape,
    Double,
}

#[derive(Default)]
struct Opts {
    all: bool,
    almost_all: bool,
    format: Format,
    style: LongStyle,
    recursive: bool,
    reverse: bool,
    sort: Sort,
    directory: bool,
    indicator: Indicator,
    dereference: bool,
    dirs_first: bool,
    quoting: Quoting,
}

impl Opts {
    fn long(&self) -> bool {
        self.format == Format::Long
    }

    fn short(&mut self, c: char) -> Result<(), String> {
        match c {
            'a' => self.all = true,
            'A' => self.almost_all = true,
            'l' => self.format = Format::Long,
            '1' => self.format = Format::OnePerLine,
            'C' => self.format = Format::Columns,
            'x' => self.format = Format::Across,
            'm' => self.format = Format::Commas,
            'g' => (self.format, self.style.no_owner) = (Format::Long, true),
            'o' => (self.format, self.style.no_group) = (Format::Long, true),
            'G' => self.style.no_group = true,
            'n' => (self.format, self.style.numeric_ids) = (Format::Long, true),
            'h' => self.style.human = true,
            'i' => self.style.inode = true,
            'R' => self.recursive = true,
            'r' => self.reverse = true,
            't' => self.sort = Sort::Time,
            'S' => self.sort = Sort::Size,
            'U' => self.sort = Sort::None,
            'f' => (self.all, self.sort) = (true, Sort::None),
            'd' => self.directory = true,
            'F' => self.indicator = Indicator::Classify,
            'p' => self.indicator = Indicator::Slash,
            'L' => self.dereference = true,
            'H' => {}
            'N' => self.quoting = Quoting::Literal,
            'b' => self.quoting = Quoting::Escape,
            'Q' => self.quoting = Quoting::Double,
            _ => return Err(format!("invalid option -- '{c}'")),
        }
        Ok(())
    }

    fn long_option(&mut self, name: &str, value: Option<&str>) -> Result<(), String> {
        let flag = |c| Some(c);
        let short = match (name, value) {
            ("all", None) => flag('a'),
            ("almost-all", None) => flag('A'),
            ("human-readable", None) => flag('h'),
            ("inode", None) => flag('i'),
            ("numeric-uid-gid", None) => flag('n'),
            ("no-group", None) => flag('G'),
            ("recursive", None) => flag('R'),
            ("reverse", None) => flag('r'),
            ("directory", None) => flag('d'),
            ("classify", None | Some("always" | "yes" | "force")) => flag('F'),
            ("dereference", None) => flag('L'),
            ("literal", None) => flag('N'),
            ("escape", None) => flag('b'),
            ("quote-name", None) => flag('Q'),
            // Output is never a terminal: no colours, whatever is asked.
            ("color" | "colour", _) => None,
            ("group-directories-first", None) => {
                self.dirs_first = true;
                None
            }
            ("format", Some(v)) => match v {
                "long" | "verbose" => flag('l'),
                "single-column" => flag('1'),
                "vertical" => flag('C'),
                "across" | "horizontal" => flag('x'),
                "commas" => flag('m'),
                _ => return Err(format!("invalid argument '{v}' for '--format'")),
            },
            ("sort", Some(v)) => match v {
                "name" => {
                    self.sort = Sort::Name;
                    None
                }
                "none" => flag('U'),
                "size" => flag('S'),
                "time" => flag('t'),
                _ => return Err(format!("invalid argument '{v}' for '--sort'")),
            },
            ("indicator-style", Some(v)) => {
                self.indicator = match v {
                    "none" => Indicator::None,
                    "slash" => Indicator::Slash,
                    "classify" => Indicator::Classify,
                    _ => return Err(format!("invalid argument '{v}' for '--indicator-style'")),
                };
                None
            }
            _ => return Err(format!("unrecognized option '--{name}'")),
        };
        match short {
            Some(c) => self.short(c),
            None => Ok(()),
        }
    }
}

fn parse(args: &[String]) -> Result<(Opts, Vec<String>), String> {
    let mut opts = Opts::default();
    let mut operands = Vec::new();
    let mut done = false;
    for arg in args {
        if done || arg == "-" || !arg.starts_with('-') {
            operands.push(arg.clone());
        } else if arg == "--" {
            done = true;
        } else if let Some(long) = arg.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            opts.long_option(name, value)?;
        } else {
            for c in arg[1..].chars() {
                opts.short(c)?;
            }
        }
    }
    Ok((opts, operands))
}

fn epoch_secs(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

/// What one listing pass produced.
#[derive(Default)]
struct Output {
    out: String,
    err: String,
    status: i32,
}

struct Lister<'a, 'c> {
    engine: &'a Fs,
    ctx: &'a BuiltinContext<'c>,
    opts: Opts,
    now: i64,
    line: usize,
}

impl Lister<'_, '_> {
    /// An entry named `name` for the file at `path` with bashkit's `meta`;
    /// the engine adds links, owners and inode under `/workspace`.
    async fn entry(&self, name: String, path: &Path, meta: &Metadata, follow: bool) -> Entry {
        let kind = kind_char(meta.file_type);
        let mut e = Entry {
            name,
            kind,
            perm: meta.mode & 0o7777,
            nlink: if kind == 'd' { 2 } else { 1 },
            uid: SANDBOX_ID,
            gid: SANDBOX_ID,
            ino: None,
            size: meta.size,
            blocks_k: meta.size.div_ceil(4096) * 4,
            mtime: epoch_secs(meta.modified),
            target: None,
            executable: meta.mode & 0o111 != 0,
        };
        let wants_engine = self.opts.long() || self.opts.style.inode;
        if wants_engine
            && let Some(rel) = engine_path(path)
            && let Ok(attr) = self.engine.resolve(ROOT_INO, &rel, follow)
        {
            e.kind = engine_kind_char(attr.kind);
            e.perm = attr.perm & 0o7777;
            e.nlink = u64::from(attr.nlink);
            e.uid = attr.uid;
            e.gid = attr.gid;
            e.ino = Some(attr.ino);
            e.blocks_k = attr.blocks.div_ceil(2);
        }
        if self.opts.long()
            && kind == 'l'
            && let Ok(target) = self.ctx.fs.read_link(path).await
        {
            e.target = Some(target.to_string_lossy().into_owned());
        }
        e
    }

    fn sort(&self, entries: &mut [Entry]) {
        match self.opts.sort {
            Sort::Name => entries.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes())),
            Sort::Time => entries.sort_by(|a, b| b.mtime.cmp(&a.mtime).then(a.name.cmp(&b.name))),
            Sort::Size => entries.sort_by(|a, b| b.size.cmp(&a.size).then(a.name.cmp(&b.name))),
            Sort::None => {}
        }
        if self.opts.reverse {
            entries.reverse();
        }
        if self.opts.dirs_first {
            entries.sort_by_key(|e| e.kind != 'd');
        }
    }

    fn display_name(&self, e: &Entry) -> String {
        let mut s = match self.opts.quoting {
            Quoting::Literal => e.name.clone(),
            Quoting::Escape => escape(&e.name, false),
            Quoting::Double => format!("\"{}\"", escape(&e.name, true)),
        };
        let indicator = match (self.opts.indicator, e.kind) {
            (Indicator::None, _) => None,
            (_, 'd') => Some('/'),
            (Indicator::Slash, _) => None,
            (_, 'l') if !self.opts.long() => Some('@'),
            (_, 'p') => Some('|'),
            (_, '-') if e.executable => Some('*'),
            _ => None,
        };
        s.extend(indicator);
        s
    }

    fn render(&self, entries: &[Entry], out: &mut String) {
        let names = || entries.iter().map(|e| self.display_name(e));
        match self.opts.format {
            Format::Long => {
                out.push_str(&long_lines(entries, self.opts.style, self.now, |e| {
                    self.display_name(e)
                }));
            }
            Format::OnePerLine if !self.opts.style.inode => {
                for name in names() {
                    out.push_str(&name);
                    out.push('\n');
                }
            }
            Format::Commas if !entries.is_empty() => {
                out.push_str(&names().collect::<Vec<_>>().join(", "));
                out.push('\n');
            }
            Format::Commas => {}
            format => {
                let cells: Vec<String> = entries
                    .iter()
                    .map(|e| match (self.opts.style.inode, e.ino) {
                        (true, Some(ino)) => format!("{ino} {}", self.display_name(e)),
                        (true, None) => format!("? {}", self.display_name(e)),
                        _ => self.display_name(e),
                    })
                    .collect();
                let line = if format == Format::OnePerLine {
                    0
                } else {
                    self.line
                };
                out.push_str(&columns(&cells, line, format == Format::Across));
            }
        }
    }

    /// Lists directory `path` under the header `shown` (when `header`),
    /// then its subdirectories with `-R`.
    async fn list_dir(&self, shown: &str, path: &Path, header: bool, result: &mut Output) {
        let listing = match self.ctx.fs.read_dir(path).await {
            Ok(listing) => listing,
            Err(e) => {
                result.err.push_str(&format!(
                    "ls: cannot open directory '{shown}': {}\n",
                    reason(&e)
                ));
                result.status = result.status.max(if header { 1 } else { 2 });
                return;
            }
        };
        let mut entries = Vec::with_capacity(listing.len() + 2);
        if self.opts.all {
            for (dot, p) in [(".", path.to_path_buf()), ("..", resolve(path, ".."))] {
                if let Ok(meta) = self.ctx.fs.stat(&p).await {
                    entries.push(self.entry(dot.to_string(), &p, &meta, true).await);
                }
            }
        }
        for item in listing {
            if item.name.starts_with('.') && !(self.opts.all || self.opts.almost_all) {
                continue;
            }
            let p = path.join(&item.name);
            entries.push(self.entry(item.name, &p, &item.metadata, false).await);
        }
        self.sort(&mut entries);
        if header {
            result.out.push_str(&format!("{shown}:\n"));
        }
        if self.opts.long() {
            let total: u64 = entries.iter().map(|e| e.blocks_k).sum();
            let total = if self.opts.style.human {
                human_size(total * 1024)
            } else {
                total.to_string()
            };
            result.out.push_str(&format!("total {total}\n"));
        }
        self.render(&entries, &mut result.out);
        if self.opts.recursive {
            for e in entries.iter().filter(|e| e.kind == 'd') {
                if e.name == "." || e.name == ".." {
                    continue;
                }
                let sub_shown = if shown.ends_with('/') {
                    format!("{shown}{}", e.name)
                } else {
                    format!("{shown}/{}", e.name)
                };
                result.out.push('\n');
                Box::pin(self.list_dir(&sub_shown, &path.join(&e.name), true, result)).await;
            }
        }
    }
}

/// GNU's `-b` escapes (and `"` too inside `-Q` quotes).
fn escape(name: &str, quote: bool) -> String {
    let mut s = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' if quote => s.push_str("\\\""),
            ' ' if !quote => s.push_str("\\ "),
            '\n' => s.push_str("\\n"),
            '\t' => s.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => s.push_str(&format!("\\{:03o}", c as u32)),
            c => s.push(c),
        }
    }
    s
}

#[async_trait]
impl Builtin for Ls {
    async fn execute(&self, ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        let (opts, mut operands) = match parse(ctx.args) {
            Ok(parsed) => parsed,
            Err(message) => {
                return Ok(ExecResult::err(
                    format!("ls: {message}\nTry 'ls --help' for more information.\n"),
                    2,
                ));
            }
        };
        if operands.is_empty() {
            operands.push(".".into());
        }
        let line = ctx
            .variables
            .get("COLUMNS")
            .or_else(|| ctx.env.get("COLUMNS"))
            .and_then(|c| c.parse().ok())
            .filter(|&c: &usize| c > 0)
            .unwrap_or(80);
        let cwd = ctx.cwd.clone();
        let lister = Lister {
            engine: &self.engine,
            ctx: &ctx,
            opts,
            now: epoch_secs(SystemTime::now()),
            line,
        };
        let opts = &lister.opts;
        // Command-line symlinks are followed unless the listing shows
        // links themselves (-l, -d, -F), as GNU's default `-H`-like rule.
        let follow_args = opts.dereference
            || !(opts.long() || opts.directory || opts.indicator != Indicator::None);

        let mut result = Output::default();
        let mut files = Vec::new();
        let mut dirs: Vec<(String, PathBuf)> = Vec::new();
        for op in &operands {
            let path = resolve(&cwd, op);
            let follow = follow_args || op.ends_with('/');
            let meta = if follow {
                ctx.fs.stat(&path).await
            } else {
                ctx.fs.lstat(&path).await
            };
            // A dangling symlink is still listed as itself.
            let meta = match meta {
                Err(_) if follow => ctx.fs.lstat(&path).await.map(|m| (m, false)),
                other => other.map(|m| (m, follow)),
            };
            match meta {
                Ok((m, _)) if m.file_type.is_dir() && !opts.directory => {
                    dirs.push((op.clone(), path));
                }
                Ok((m, followed)) => {
                    files.push(lister.entry(op.clone(), &path, &m, followed).await)
                }
                Err(e) => {
                    result
                        .err
                        .push_str(&format!("ls: cannot access '{op}': {}\n", reason(&e)));
                    result.status = 2;
                }
            }
        }
        lister.sort(&mut files);
        if opts.sort == Sort::Name {
            dirs.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        }
        if opts.reverse {
            dirs.reverse();
        }
        lister.render(&files, &mut result.out);
        let headers = operands.len() > 1 || opts.recursive;
        for (i, (shown, path)) in dirs.iter().enumerate() {
            if i > 0 || !files.is_empty() {
                result.out.push('\n');
            }
            lister.list_dir(shown, path, headers, &mut result).await;
        }

        let mut exec = ExecResult::err(result.err, result.status);
        exec.stdout = result.out.into();
        Ok(exec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options() {
        let (o, ops) = parse(&args(&["-ltr", "--color=auto", "x"])).unwrap();
        assert!(o.long() && o.reverse && o.sort == Sort::Time);
        assert_eq!(ops, ["x"]);
        let (o, _) = parse(&args(&["-l", "-1"])).unwrap();
        assert!(o.format == Format::OnePerLine);
        let (o, _) = parse(&args(&["--sort=size", "--format=commas"])).unwrap();
        assert!(o.sort == Sort::Size && o.format == Format::Commas);
        assert_eq!(
            parse(&args(&["-z"])).err().as_deref(),
            Some("invalid option -- 'z'")
        );
        assert!(parse(&args(&["--bogus"])).is_err());
    }

    #[test]
    fn escapes() {
        assert_eq!(escape("a b\n", false), "a\\ b\\n");
        assert_eq!(escape("q\"\u{1}", true), "q\\\"\\001");
    }
}
