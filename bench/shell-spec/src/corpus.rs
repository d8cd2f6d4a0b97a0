//! Parser for the Oils spec-test case format (`spec/*.test.sh`).
//!
//! A file is a header followed by cases. `#### name` starts a case; the
//! script follows; `## ` lines carry expectations:
//! `## stdout: text`, `## stdout-json: "json string"`, `## status: N`,
//! `## STDOUT:` ... `## END` (block, each line newline-terminated), the same
//! for stderr, `## code: SCRIPT` (a one-line script), and the shell-qualified forms `## OK bash stdout: ...`,
//! `## N-I dash/mksh status: 2`, `## BUG-2 bash STDOUT:` ... `## END`.
//! Source of the format: the corpus README and the Oils `sh_spec.py`
//! conventions (status defaults to 0, stdout is only checked when given).

use anyhow::{Context, Result, bail};
use std::path::Path;

/// One expectation: the fields a case (or one qualified block) states.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expect {
    /// Expected stdout bytes, when stated.
    pub stdout: Option<String>,
    /// Expected stderr bytes, when stated.
    pub stderr: Option<String>,
    /// Expected exit status, when stated.
    pub status: Option<i32>,
}

impl Expect {
    fn is_empty(&self) -> bool {
        self.stdout.is_none() && self.stderr.is_none() && self.status.is_none()
    }

    /// `self` with the fields it lacks taken from `base`.
    fn over(&self, base: &Expect) -> Expect {
        Expect {
            stdout: self.stdout.clone().or_else(|| base.stdout.clone()),
            stderr: self.stderr.clone().or_else(|| base.stderr.clone()),
            status: self.status.or(base.status),
        }
    }
}

/// A qualified expectation block such as `## OK bash/mksh ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Qualified {
    /// `OK`, `BUG`, `N-I`, `OK-2`, ...
    pub qualifier: String,
    /// Shell labels it applies to (`bash`, `dash`, `bash-4.4`, ...).
    pub shells: Vec<String>,
    /// The fields it overrides.
    pub expect: Expect,
}

/// One test case.
#[derive(Debug, Clone)]
pub struct Case {
    /// Text after `#### `.
    pub name: String,
    /// 1-based line of the `####` header.
    pub line: usize,
    /// The script, newline-terminated lines.
    pub script: String,
    /// Unqualified expectation.
    pub default: Expect,
    /// Shell-qualified expectations, in file order.
    pub qualified: Vec<Qualified>,
}

impl Case {
    /// The outcomes accepted for `shell` (e.g. `"bash"`): every qualified
    /// block naming it, each completed from the default, or else the default
    /// alone. A missing status means 0; a missing stdout/stderr is not
    /// checked.
    pub fn accepted_for(&self, shell: &str) -> Vec<Expect> {
        let mut alts: Vec<Expect> = self
            .qualified
            .iter()
            .filter(|q| q.shells.iter().any(|s| label_matches(s, shell)))
            .map(|q| q.expect.over(&self.default))
            .collect();
        if alts.is_empty() {
            alts.push(self.default.clone());
        }
        for a in &mut alts {
            a.status.get_or_insert(0);
        }
        alts
    }
}

/// `bash-4.4` counts as `bash`.
fn label_matches(label: &str, shell: &str) -> bool {
    label == shell
        || label
            .strip_prefix(shell)
            .is_some_and(|r| r.starts_with('-'))
}

/// One parsed spec file.
#[derive(Debug, Clone)]
pub struct SpecFile {
    /// File name, e.g. `alias.test.sh`.
    pub name: String,
    /// Its cases, in order.
    pub cases: Vec<Case>,
}

/// Reads and parses one spec file.
pub fn load(path: &Path) -> Result<SpecFile> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let text = String::from_utf8_lossy(&text);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let cases = parse(&text).with_context(|| format!("parsing {name}"))?;
    Ok(SpecFile { name, cases })
}

/// Expectation fields a `## ` line may set.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Field {
    Stdout,
    Stderr,
    Status,
}

/// A parsed `## ` line.
enum Meta {
    /// `[qual shells] key: value` — one-line value.
    Line(Option<(String, Vec<String>)>, Field, String, bool),
    /// `[qual shells] STDOUT:` — block until `## END`.
    Block(Option<(String, Vec<String>)>, Field),
    /// `code: SCRIPT` — the case's script on one line.
    Code(String),
    /// Anything else (`compare_shells`, `tags`, ...).
    Other,
}

fn is_qualifier(w: &str) -> bool {
    let base = w.split('-').collect::<Vec<_>>();
    match base.as_slice() {
        ["OK"] | ["BUG"] => true,
        ["N", "I"] => true,
        ["OK", n] | ["BUG", n] => n.parse::<u32>().is_ok(),
        ["N", "I", n] => n.parse::<u32>().is_ok(),
        _ => false,
    }
}

fn parse_meta(rest: &str) -> Meta {
    let mut qual = None;
    let mut body = rest;
    let first = rest.split(' ').next().unwrap_or("");
    if is_qualifier(first) {
        let after = rest[first.len()..].trim_start();
        let shells = after.split(' ').next().unwrap_or("");
        qual = Some((
            first.to_string(),
            shells.split('/').map(str::to_string).collect(),
        ));
        body = after[shells.len()..].trim_start();
    }
    let Some((key, value)) = body.split_once(':') else {
        return Meta::Other;
    };
    let value = value.strip_prefix(' ').unwrap_or(value);
    match key {
        "STDOUT" => Meta::Block(qual, Field::Stdout),
        "STDERR" => Meta::Block(qual, Field::Stderr),
        "stdout" => Meta::Line(qual, Field::Stdout, value.to_string(), false),
        "stderr" => Meta::Line(qual, Field::Stderr, value.to_string(), false),
        "stdout-json" => Meta::Line(qual, Field::Stdout, value.to_string(), true),
        "stderr-json" => Meta::Line(qual, Field::Stderr, value.to_string(), true),
        "status" => Meta::Line(qual, Field::Status, value.to_string(), false),
        "code" if qual.is_none() => Meta::Code(value.to_string()),
        _ => Meta::Other,
    }
}

fn set(e: &mut Expect, field: Field, value: String) -> Result<()> {
    match field {
        Field::Stdout => e.stdout = Some(value),
        Field::Stderr => e.stderr = Some(value),
        Field::Status => {
            e.status = Some(
                value
                    .trim()
                    .parse()
                    .with_context(|| format!("bad status {value:?}"))?,
            )
        }
    }
    Ok(())
}

fn target(case: &mut Case, qual: Option<(String, Vec<String>)>) -> &mut Expect {
    match qual {
        None => &mut case.default,
        Some((qualifier, shells)) => {
            let pos = case
                .qualified
                .iter()
                .position(|q| q.qualifier == qualifier && q.shells == shells);
            let i = match pos {
                Some(i) => i,
                None => {
                    case.qualified.push(Qualified {
                        qualifier,
                        shells,
                        expect: Expect::default(),
                    });
                    case.qualified.len() - 1
                }
            };
            &mut case.qualified[i].expect
        }
    }
}

/// Parses the text of one spec file into its cases.
///
/// Errors: a `STDOUT:`/`STDERR:` block without `## END`, a non-numeric
/// status, or invalid JSON in a `-json` field.
pub fn parse(text: &str) -> Result<Vec<Case>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut cases: Vec<Case> = Vec::new();
    let mut i = 0;
    // Once a case's expectations start, later non-`##` lines are comments
    // between cases, not script.
    let mut in_meta = false;
    while i < lines.len() {
        let line = lines[i];
        if let Some(name) = line.strip_prefix("#### ") {
            cases.push(Case {
                name: name.trim().to_string(),
                line: i + 1,
                script: String::new(),
                default: Expect::default(),
                qualified: Vec::new(),
            });
            in_meta = false;
            i += 1;
            continue;
        }
        let Some(case) = cases.last_mut() else {
            i += 1;
            continue;
        };
        if let Some(rest) = line.strip_prefix("## ") {
            in_meta = true;
            match parse_meta(rest) {
                Meta::Line(q, field, value, json) => {
                    let value = match (field, json) {
                        (Field::Status, _) => value,
                        (_, true) => serde_json::from_str::<String>(value.trim())
                            .with_context(|| format!("line {}: bad json", i + 1))?,
                        (_, false) => format!("{value}\n"),
                    };
                    set(target(case, q), field, value)?;
                }
                Meta::Block(q, field) => {
                    let start = i;
                    let mut body = String::new();
                    i += 1;
                    loop {
                        let Some(l) = lines.get(i) else {
                            bail!("line {}: block without ## END", start + 1);
                        };
                        if l.trim_end() == "## END" || l.trim_end() == "## END:" {
                            break;
                        }
                        // A block may also end where the next expectation
                        // or case starts, without `## END`.
                        if l.starts_with("#### ")
                            || l.strip_prefix("## ")
                                .is_some_and(|r| !matches!(parse_meta(r), Meta::Other))
                        {
                            i -= 1;
                            break;
                        }
                        body.push_str(l);
                        body.push('\n');
                        i += 1;
                    }
                    set(target(case, q), field, body)?;
                }
                Meta::Code(code) => case.script = format!("{code}\n"),
                Meta::Other => {}
            }
        } else if !in_meta {
            case.script.push_str(line);
            case.script.push('\n');
        }
        i += 1;
    }
    cases.retain(|c| !c.name.is_empty() || !c.script.is_empty());
    for c in &mut cases {
        c.qualified.retain(|q| !q.expect.is_empty());
    }
    Ok(cases)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "## compare_shells: bash dash\n\n#### one\necho hi\n## stdout: hi\n\n#### open\necho a\n## STDOUT:\na\n## OK bash STDOUT:\nb\n## END\n\n#### two\necho a; exit 3\n## STDOUT:\na\n## END\n## status: 3\n## OK bash status: 4\n## N-I dash/mksh stdout-json: \"\"\n## BUG-2 bash-4.4 STDOUT:\nx\n## END\n";

    #[test]
    fn parses_plain_and_qualified_fields() {
        let cases = parse(SAMPLE).unwrap();
        assert_eq!(cases.len(), 3);
        assert_eq!(cases[0].script, "echo hi\n");
        assert_eq!(cases[0].default.stdout.as_deref(), Some("hi\n"));
        // A block without `## END` ends at the next expectation.
        assert_eq!(cases[1].default.stdout.as_deref(), Some("a\n"));
        assert_eq!(
            cases[1].accepted_for("bash")[0].stdout.as_deref(),
            Some("b\n")
        );
        let two = &cases[2];
        assert_eq!(two.default.stdout.as_deref(), Some("a\n"));
        assert_eq!(two.default.status, Some(3));
        assert_eq!(two.qualified.len(), 3);
        let bash = two.accepted_for("bash");
        assert_eq!(bash.len(), 2);
        assert_eq!(bash[0].status, Some(4));
        assert_eq!(bash[0].stdout.as_deref(), Some("a\n"));
        assert_eq!(bash[1].stdout.as_deref(), Some("x\n"));
        assert_eq!(bash[1].status, Some(3));
        let dash = two.accepted_for("dash");
        assert_eq!(dash[0].stdout.as_deref(), Some(""));
    }

    #[test]
    fn status_defaults_to_zero_and_stdout_is_unchecked() {
        let cases = parse("#### x\ntrue\n").unwrap();
        let a = cases[0].accepted_for("bash");
        assert_eq!(a[0].status, Some(0));
        assert_eq!(a[0].stdout, None);
    }

    #[test]
    fn code_line_is_the_script() {
        let cases = parse("#### x\n## code: foo()\n## status: 2\n").unwrap();
        assert_eq!(cases[0].script, "foo()\n");
    }

    #[test]
    fn unterminated_block_is_an_error() {
        assert!(parse("#### x\n## STDOUT:\nfoo\n").is_err());
    }
}
