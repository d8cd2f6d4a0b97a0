//! `tar`'s command line, as far as the runtime's own `tar` takes it.
//!
//! GNU tar's three ways of giving options are read: the old bundle as
//! first word (`tar xzf a.tgz -C dir`: `f` and `C` take the next words in
//! order), short options (`-xzf a.tgz`, `-fa.tgz`, `-C dir`) and long ones
//! (`--extract`, `--file=a.tgz`, `--directory dir`). Every other option,
//! and shapes the runtime's `tar` leaves alone (member operands of `x` and
//! `t`, `tv`, `-vv`), answer [`Parsed::Other`]: bashkit's `tar` runs them.

/// What the command does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// `c`: write an archive of the operands.
    Create,
    /// `x`: unpack an archive.
    Extract,
    /// `t`: list an archive's names.
    List,
}

/// A command line the runtime's `tar` runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Plan {
    pub mode: Mode,
    /// `v`: list each entry as it is handled.
    pub verbose: bool,
    /// `z`: gzip the archive written (reading detects gzip by itself).
    pub gzip: bool,
    /// `f ARCHIVE`; `None` or `-` is standard input or output.
    pub file: Option<String>,
    /// Every `-C DIR`, in order: each is taken from the one before.
    pub dirs: Vec<String>,
    /// `c`'s operands, each with the number of `-C` given before it.
    pub operands: Vec<(usize, String)>,
}

/// The reading of a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Parsed {
    /// A form the runtime's `tar` runs.
    Plan(Plan),
    /// Anything else: bashkit's `tar` runs it (and reports its errors).
    Other,
}

/// Reads `args` (without the command name).
pub(super) fn parse(args: &[String]) -> Parsed {
    match parse_plan(args) {
        Some(plan) => Parsed::Plan(plan),
        None => Parsed::Other,
    }
}

#[derive(Default)]
struct Seen {
    modes: Vec<Mode>,
    verbose: u32,
    gzip: bool,
    file: Option<String>,
    dirs: Vec<String>,
    operands: Vec<(usize, String)>,
}

impl Seen {
    /// Takes short option `c`; `value` gives its argument when it takes
    /// one. `None` for an option the runtime's `tar` does not take.
    fn short(&mut self, c: char, value: &mut dyn FnMut() -> Option<String>) -> Option<()> {
        match c {
            'c' => self.modes.push(Mode::Create),
            'x' => self.modes.push(Mode::Extract),
            't' => self.modes.push(Mode::List),
            'v' => self.verbose += 1,
            'z' => self.gzip = true,
            // Keeping the archive's permission bits is what `x` does.
            'p' => {}
            'f' => self.file = Some(value()?),
            'C' => {
                let dir = value()?;
                self.dirs.push(dir);
            }
            _ => return None,
        }
        Some(())
    }

    /// Takes long option `name` (`--name` or `--name=value`).
    fn long(&mut self, name: &str, value: &mut dyn FnMut() -> Option<String>) -> Option<()> {
        let (name, inline) = match name.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (name, None),
        };
        let mut value = || inline.clone().or_else(&mut *value);
        match name {
            "create" => self.modes.push(Mode::Create),
            "extract" | "get" => self.modes.push(Mode::Extract),
            "list" => self.modes.push(Mode::List),
            "verbose" => self.verbose += 1,
            "gzip" | "gunzip" | "ungzip" => self.gzip = true,
            "file" => self.file = Some(value()?),
            "directory" => {
                let dir = value()?;
                self.dirs.push(dir);
            }
            // What unpacking does anyway for the sandbox user.
            "same-permissions" | "preserve-permissions" | "no-same-owner" | "overwrite" => {}
            _ => return None,
        }
        Some(())
    }
}

fn parse_plan(args: &[String]) -> Option<Plan> {
    let mut seen = Seen::default();
    let mut rest = args
        .iter()
        .cloned()
        .collect::<std::collections::VecDeque<_>>();
    // The old bundle: `tar xzf ARCHIVE ...`.
    if let Some(first) = rest.front()
        && !first.starts_with('-')
    {
        let bundle = rest.pop_front()?;
        for c in bundle.chars() {
            seen.short(c, &mut || rest.pop_front())?;
        }
    }
    let mut operands_only = false;
    while let Some(arg) = rest.pop_front() {
        if operands_only || arg == "-" || !arg.starts_with('-') {
            let before = seen.dirs.len();
            seen.operands.push((before, arg));
            continue;
        }
        if arg == "--" {
            operands_only = true;
        } else if let Some(long) = arg.strip_prefix("--") {
            seen.long(long, &mut || rest.pop_front())?;
        } else {
            let letters: Vec<char> = arg[1..].chars().collect();
            let mut i = 0;
            while i < letters.len() {
                let c = letters[i];
                i += 1;
                // `-fNAME`: the rest of the word is the value.
                let attached: String = letters[i..].iter().collect();
                let mut used_attached = false;
                let mut value = || {
                    if attached.is_empty() {
                        rest.pop_front()
                    } else {
                        used_attached = true;
                        Some(attached.clone())
                    }
                };
                seen.short(c, &mut value)?;
                if used_attached {
                    break;
                }
            }
        }
    }
    let [mode] = seen.modes[..] else {
        return None;
    };
    if seen.verbose > 1 {
        return None;
    }
    let verbose = seen.verbose == 1;
    match mode {
        Mode::Create if seen.operands.is_empty() => return None,
        Mode::Extract | Mode::List if !seen.operands.is_empty() => return None,
        Mode::List if verbose => return None,
        _ => {}
    }
    Some(Plan {
        mode,
        verbose,
        gzip: seen.gzip,
        file: seen.file,
        dirs: seen.dirs,
        operands: seen.operands,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(words: &str) -> Option<Plan> {
        let args: Vec<String> = words.split_whitespace().map(String::from).collect();
        match parse(&args) {
            Parsed::Plan(p) => Some(p),
            Parsed::Other => None,
        }
    }

    #[test]
    fn the_three_option_styles_read_alike() {
        for words in [
            "xzf a.tgz -C d",
            "-xzf a.tgz -C d",
            "-x -z -fa.tgz -Cd",
            "--extract --gzip --file=a.tgz --directory d",
        ] {
            let p = plan(words).unwrap_or_else(|| panic!("{words}"));
            assert_eq!(p.mode, Mode::Extract, "{words}");
            assert!(p.gzip, "{words}");
            assert_eq!(p.file.as_deref(), Some("a.tgz"), "{words}");
            assert_eq!(p.dirs, ["d"], "{words}");
        }
        let p = plan("x").unwrap();
        assert_eq!((p.mode, p.file, p.verbose), (Mode::Extract, None, false));
        let p = plan("xv").unwrap();
        assert!(p.verbose);
        let p = plan("xf -").unwrap();
        assert_eq!(p.file.as_deref(), Some("-"));
    }

    #[test]
    fn create_keeps_where_each_operand_was_named() {
        let p = plan("cf - a -C sub b c").unwrap();
        assert_eq!(p.mode, Mode::Create);
        assert_eq!(
            p.operands,
            [
                (0, "a".to_string()),
                (1, "b".to_string()),
                (1, "c".to_string())
            ]
        );
        assert_eq!(plan("c dir").unwrap().file, None);
    }

    #[test]
    fn other_forms_are_left_to_bashkit() {
        for words in [
            "xjf a.tbz",
            "xf a.tar member",
            "tvf a.tar",
            "xvvf a.tar",
            "xf a.tar --strip-components=1",
            "xOf a.tar",
            "c",
            "xc",
            "f a.tar",
            "xf",
        ] {
            assert_eq!(plan(words), None, "{words}");
        }
    }
}
