//! The brush shell's YAML compatibility cases (`tests/cases/**/*.yaml` of
//! the `brush-shell` crate, MIT), with GNU bash as the oracle.
//!
//! Format, as the files use it: a file is a mapping with `name`, `cases`
//! and optionally `common_test_files` (files every case of the file gets)
//! and `incompatible_configs`. A case is a mapping with `name` and any of
//! `stdin` (the text fed to the shell's standard input; with no `args`
//! that text is the script bash reads), `args` (the shell's arguments,
//! strings or numbers: a script path, `-c TEXT ...`, options),
//! `env` (extra environment variables), `test_files` (`path`, optional
//! `contents`, optional `executable`; `source_path` names a file relative
//! to the YAML file), `home_dir` (`$HOME`, relative to the case's
//! directory), `skip`, `known_failure` (brush's own bookkeeping, ignored
//! here), `pty`, `ignore_stdout`, `ignore_whitespace`, `ignore_stderr`,
//! `min_oracle_version`, `max_oracle_version`, `removed_default_args` and
//! `additional_test_args` (changes to brush's own default flags), and,
//! under `tests/cases/brush/`, brush-only expectations (`expected_stdout`,
//! `expected_exit_code`, `snapshot`). Unknown keys are kept in
//! [`Case::unknown`] and otherwise ignored.
//!
//! A case is judged by comparing a shell's stdout and exit status with
//! bash's on a fresh directory ([`judge`]); [`exclusion`] says which cases
//! are not run and why.

use crate::Observed;
use crate::judge::Verdict;
use anyhow::{Context, Result, bail};
use serde::Deserialize;
use serde_norway::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A file a case finds in its working directory before it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestFile {
    /// Path relative to the working directory (`sub/x.sh`).
    pub path: String,
    /// Its bytes (empty when the case gives no `contents`).
    pub contents: Vec<u8>,
    /// Mode 0755 instead of 0644.
    pub executable: bool,
}

/// One brush case.
#[derive(Debug, Clone, Default)]
pub struct Case {
    /// The case's `name`.
    pub name: String,
    /// Text for the shell's standard input (the script when `args` is
    /// absent); empty when not given.
    pub stdin: String,
    /// The shell's arguments, when given (numbers are written as YAML
    /// prints them).
    pub args: Option<Vec<String>>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// The file's `common_test_files` followed by the case's `test_files`.
    pub files: Vec<TestFile>,
    /// `$HOME` relative to the working directory, when given.
    pub home_dir: Option<String>,
    /// Marked `skip: true`.
    pub skip: bool,
    /// Needs a pseudo-terminal (`pty: true`).
    pub pty: bool,
    /// Stdout is not compared.
    pub ignore_stdout: bool,
    /// Stdout is compared with runs of whitespace collapsed.
    pub ignore_whitespace: bool,
    /// Oldest bash the case is meant for (`5.3`).
    pub min_oracle_version: Option<String>,
    /// Newest bash the case is meant for.
    pub max_oracle_version: Option<String>,
    /// Changes to brush's default flags (`--input-backend=basic`, `--norc`).
    pub brush_flag_changes: Vec<String>,
    /// The case states brush-only expectations (`expected_stdout`,
    /// `expected_exit_code`, `snapshot`).
    pub brush_expectations: bool,
    /// Keys this loader does not know, in file order.
    pub unknown: Vec<String>,
}

/// One YAML file of cases.
#[derive(Debug, Clone)]
pub struct File {
    /// Path relative to `tests/cases` (`compat/builtins/echo.yaml`).
    pub name: String,
    /// Its cases, in file order.
    pub cases: Vec<Case>,
}

#[derive(Deserialize)]
struct RawFile {
    #[serde(default)]
    cases: Vec<BTreeMap<String, Value>>,
    #[serde(default)]
    common_test_files: Vec<RawTestFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTestFile {
    path: String,
    #[serde(default)]
    contents: Option<String>,
    #[serde(default)]
    source_path: Option<String>,
    #[serde(default)]
    executable: bool,
}

impl RawTestFile {
    fn resolve(self, yaml_dir: &Path) -> Result<TestFile> {
        let contents = match (self.contents, self.source_path) {
            (Some(_), Some(_)) => bail!("{}: both contents and source_path", self.path),
            (Some(c), None) => c.into_bytes(),
            (None, Some(src)) => std::fs::read(yaml_dir.join(&src))
                .with_context(|| format!("{}: source_path {src}", self.path))?,
            (None, None) => Vec::new(),
        };
        if self.path.starts_with('/') || self.path.split('/').any(|p| p == "..") {
            bail!("test file path {:?} leaves the case directory", self.path);
        }
        Ok(TestFile {
            path: self.path,
            contents,
            executable: self.executable,
        })
    }
}

/// A scalar as text: strings as they are, numbers and booleans as YAML
/// prints them.
fn scalar(v: &Value, what: &str) -> Result<String> {
    Ok(match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => bail!("{what}: expected a scalar, got {other:?}"),
    })
}

fn strings(v: &Value, what: &str) -> Result<Vec<String>> {
    match v {
        Value::Sequence(items) => items.iter().map(|i| scalar(i, what)).collect(),
        other => bail!("{what}: expected a list, got {other:?}"),
    }
}

fn flag(v: &Value, what: &str) -> Result<bool> {
    v.as_bool()
        .with_context(|| format!("{what}: expected true/false, got {v:?}"))
}

fn case_from(map: BTreeMap<String, Value>, common: &[TestFile], yaml_dir: &Path) -> Result<Case> {
    let mut c = Case {
        files: common.to_vec(),
        ..Case::default()
    };
    let mut own_files = Vec::new();
    for (k, v) in map {
        match k.as_str() {
            "name" => c.name = scalar(&v, "name")?,
            "stdin" => c.stdin = scalar(&v, "stdin")?,
            "args" => c.args = Some(strings(&v, "args")?),
            "env" => {
                let Value::Mapping(m) = v else {
                    bail!("env: expected a mapping")
                };
                for (ek, ev) in m {
                    c.env
                        .push((scalar(&ek, "env key")?, scalar(&ev, "env value")?));
                }
            }
            "test_files" => {
                own_files = Vec::<RawTestFile>::deserialize(v).context("test_files")?;
            }
            "home_dir" => c.home_dir = Some(scalar(&v, "home_dir")?),
            "skip" => c.skip = flag(&v, "skip")?,
            "pty" => c.pty = flag(&v, "pty")?,
            "ignore_stdout" => c.ignore_stdout = flag(&v, "ignore_stdout")?,
            "ignore_whitespace" => c.ignore_whitespace = flag(&v, "ignore_whitespace")?,
            "min_oracle_version" => c.min_oracle_version = Some(scalar(&v, "min_oracle_version")?),
            "max_oracle_version" => c.max_oracle_version = Some(scalar(&v, "max_oracle_version")?),
            "removed_default_args" | "additional_test_args" => {
                c.brush_flag_changes.extend(strings(&v, &k)?)
            }
            "expected_stdout" | "expected_exit_code" | "snapshot" => c.brush_expectations = true,
            // Brush's bookkeeping and platform filters; stderr is not judged.
            "known_failure"
            | "ignore_stderr"
            | "incompatible_configs"
            | "incompatible_os"
            | "incompatible_platforms"
            | "expect_status" => {}
            _ => c.unknown.push(k),
        }
    }
    if c.name.is_empty() {
        bail!("case without a name");
    }
    for f in own_files {
        c.files.push(f.resolve(yaml_dir)?);
    }
    Ok(c)
}

/// Parses one YAML file; `name` is how the report calls it.
pub fn parse(text: &str, name: &str, yaml_dir: &Path) -> Result<File> {
    let raw: RawFile = serde_norway::from_str(text).with_context(|| format!("parsing {name}"))?;
    let common = raw
        .common_test_files
        .into_iter()
        .map(|f| f.resolve(yaml_dir))
        .collect::<Result<Vec<_>>>()
        .with_context(|| format!("{name}: common_test_files"))?;
    let cases = raw
        .cases
        .into_iter()
        .enumerate()
        .map(|(i, m)| case_from(m, &common, yaml_dir).with_context(|| format!("{name}: case {i}")))
        .collect::<Result<Vec<_>>>()?;
    Ok(File {
        name: name.to_string(),
        cases,
    })
}

/// Every `*.yaml` file under `cases` (the `tests/cases` directory),
/// parsed, sorted by relative path.
pub fn load_all(cases: &Path) -> Result<Vec<File>> {
    let mut paths = Vec::new();
    let mut stack = vec![cases.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
            let p = e?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "yaml") {
                paths.push(p);
            }
        }
    }
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let rel = p.strip_prefix(cases).unwrap_or(p).to_string_lossy();
            let text = std::fs::read_to_string(p).with_context(|| format!("{}", p.display()))?;
            parse(&text, &rel, p.parent().unwrap_or(cases))
        })
        .collect()
}

/// `tests/cases` under a fetched crate directory (or the directory itself
/// when it already is one).
pub fn cases_dir(src: &Path) -> PathBuf {
    let nested = src.join("tests/cases");
    if nested.is_dir() {
        nested
    } else {
        src.to_path_buf()
    }
}

/// `"5.2.15"` → `[5, 2, 15]` (missing parts are 0; non-digits end a part).
pub fn version(s: &str) -> [u32; 3] {
    let mut out = [0; 3];
    for (slot, part) in out.iter_mut().zip(s.trim().split('.')) {
        let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
        *slot = digits.parse().unwrap_or(0);
    }
    out
}

/// Shell flags that only brush has (its harness passes or removes them).
const BRUSH_FLAGS: &[&str] = &[
    "--input-backend",
    "--no-config",
    "--config",
    "--xtrace-file",
    "--disable-bracketed-paste",
    "--disable-color",
    "--enable-highlighting",
    "--sh",
];

/// Whether a shell argument turns on interactive mode (`-i`, or `i` in a
/// cluster of single-letter options such as `-ic`).
fn is_interactive_flag(a: &str) -> bool {
    a.len() >= 2
        && a.starts_with('-')
        && !a.starts_with("--")
        && a[1..].chars().all(|c| c.is_ascii_alphabetic())
        && a[1..].contains('i')
}

/// Why `case` of file `file` is not run against `oracle` (bash's version),
/// if so. The rules: `skip: true`; the `tests/cases/brush/` files (brush's
/// own command line and tracing, judged by brush-only expectations); a
/// case that needs `-i` or a terminal; brush-only flags; a case for a bash
/// newer (or older) than the oracle.
pub fn exclusion(file: &str, case: &Case, oracle: [u32; 3]) -> Option<String> {
    if case.skip {
        return Some("marked `skip`".into());
    }
    if file.starts_with("brush/") || case.brush_expectations {
        return Some("brush-only (its own CLI and expectations, no bash oracle)".into());
    }
    if case.pty {
        return Some("needs a terminal (`pty`)".into());
    }
    let args = case.args.as_deref().unwrap_or_default();
    // Options come before the script name or `-c` text; stop at the first
    // operand.
    let mut opts = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--" || !(a.starts_with('-') || a.starts_with('+')) {
            break;
        }
        opts.push(a.as_str());
        if matches!(
            a.as_str(),
            "-o" | "+o" | "-O" | "+O" | "--rcfile" | "--init-file"
        ) && let Some(v) = it.next()
        {
            opts.push(v);
        }
        if a.contains('c') && !a.starts_with("--") {
            break;
        }
    }
    if opts.iter().any(|a| is_interactive_flag(a)) {
        return Some("needs `-i` (interactive shell)".into());
    }
    if let Some(f) = args
        .iter()
        .chain(&case.brush_flag_changes)
        .find(|a| BRUSH_FLAGS.iter().any(|b| a.split('=').next() == Some(b)))
    {
        return Some(format!("brush-specific flag `{f}`"));
    }
    if let Some(min) = &case.min_oracle_version
        && version(min) > oracle
    {
        return Some(format!("needs bash ≥ {min}"));
    }
    if let Some(max) = &case.max_oracle_version {
        let m = version(max);
        // `5.2` covers every 5.2.x.
        let parts = max.split('.').count();
        if oracle[..parts.min(3)] > m[..parts.min(3)] {
            return Some(format!("for bash ≤ {max}"));
        }
    }
    None
}

fn squeeze(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    let mut gap = false;
    for &c in b {
        if c.is_ascii_whitespace() {
            gap = true;
        } else {
            if gap && !out.is_empty() {
                out.push(b' ');
            }
            gap = false;
            out.push(c);
        }
    }
    out
}

/// `b` from a little before byte `from` on, at most 60 characters, with
/// `…` where it was cut.
fn clip(b: &[u8], from: usize) -> String {
    const MAX: usize = 60;
    let start = from.saturating_sub(20).min(b.len());
    let lead = if start > 0 { "…" } else { "" };
    let s = format!("{lead}{}", String::from_utf8_lossy(&b[start..]));
    if s.chars().count() <= MAX {
        s
    } else {
        let mut t: String = s.chars().take(MAX).collect();
        t.push('…');
        t
    }
}

/// Judges `got` against bash's outcome `oracle`: same exit status and same
/// stdout (whitespace runs collapsed under `ignore_whitespace`, not
/// compared under `ignore_stdout`). A timeout fails.
pub fn judge(case: &Case, oracle: &Observed, got: &Observed) -> Verdict {
    if let Some(message) = &got.refused {
        return Verdict::Refused(crate::judge::refused_construct(message));
    }
    if got.timed_out {
        return Verdict::Fail("timeout".into());
    }
    if !case.ignore_stdout {
        let same = if case.ignore_whitespace {
            squeeze(&oracle.stdout) == squeeze(&got.stdout)
        } else {
            oracle.stdout == got.stdout
        };
        if !same {
            let at = oracle
                .stdout
                .iter()
                .zip(&got.stdout)
                .take_while(|(a, b)| a == b)
                .count();
            return Verdict::Fail(format!(
                "stdout {:?} != bash {:?}",
                clip(&got.stdout, at),
                clip(&oracle.stdout, at)
            ));
        }
    }
    if oracle.status != got.status {
        return Verdict::Fail(format!("status {} != bash {}", got.status, oracle.status));
    }
    Verdict::Pass
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
name: "sample"
common_test_files:
  - path: "helpers.sh"
    contents: "h() { echo h; }\n"
cases:
  - name: "plain"
    stdin: |
      echo hi
  - name: "args"
    args: ["-c", "echo $1", 1, "-2"]
    env:
      FOO: bar
    test_files:
      - path: "x.sh"
        contents: "echo x"
        executable: true
      - path: "empty"
  - name: "skipped"
    skip: true
  - name: "interactive"
    args: ["-i"]
  - name: "new"
    min_oracle_version: 5.3
  - name: "old"
    max_oracle_version: 5.1
  - name: "backend"
    removed_default_args: ["--input-backend=basic"]
  - name: "odd"
    known_failure: true
    echo "x: y
"#;

    fn sample() -> File {
        parse(SAMPLE, "compat/sample.yaml", Path::new(".")).unwrap()
    }

    #[test]
    fn fields_are_read() {
        let f = sample();
        assert_eq!(f.cases.len(), 8);
        let a = &f.cases[1];
        assert_eq!(a.args.as_deref().unwrap(), ["-c", "echo $1", "1", "-2"]);
        assert_eq!(a.env, [("FOO".to_string(), "bar".to_string())]);
        assert_eq!(a.files.len(), 3);
        assert_eq!(a.files[0].path, "helpers.sh");
        assert!(a.files[1].executable);
        assert!(a.files[2].contents.is_empty());
        assert_eq!(f.cases[0].stdin, "echo hi\n");
        assert_eq!(f.cases[7].unknown, ["echo \"x"]);
    }

    #[test]
    fn exclusions_follow_the_rules() {
        let f = sample();
        let o = version("5.2.15");
        let why: Vec<_> = f.cases.iter().map(|c| exclusion(&f.name, c, o)).collect();
        assert_eq!(why[0], None);
        assert_eq!(why[1], None);
        assert!(why[2].as_deref().unwrap().contains("skip"));
        assert!(why[3].as_deref().unwrap().contains("-i"));
        assert!(why[4].as_deref().unwrap().contains("5.3"));
        assert!(why[5].as_deref().unwrap().contains("5.1"));
        assert!(why[6].as_deref().unwrap().contains("brush-specific"));
        assert_eq!(why[7], None);
        // `-c` text containing `-i` is not an option.
        let c = Case {
            name: "c".into(),
            args: Some(vec!["-c".into(), "-i".into()]),
            ..Case::default()
        };
        assert_eq!(exclusion("compat/x.yaml", &c, o), None);
        let c = Case {
            name: "c".into(),
            args: Some(vec!["-ic".into(), "true".into()]),
            ..Case::default()
        };
        assert!(exclusion("compat/x.yaml", &c, o).is_some());
        // 5.2 covers 5.2.15.
        let c = Case {
            name: "c".into(),
            max_oracle_version: Some("5.2".into()),
            ..Case::default()
        };
        assert_eq!(exclusion("compat/x.yaml", &c, o), None);
    }

    #[test]
    fn judge_compares_stdout_and_status() {
        let obs = |s: &str, st| Observed {
            stdout: s.as_bytes().to_vec(),
            status: st,
            ..Observed::default()
        };
        let c = Case::default();
        assert_eq!(judge(&c, &obs("a\n", 1), &obs("a\n", 1)), Verdict::Pass);
        assert!(matches!(
            judge(&c, &obs("a\n", 1), &obs("a\n", 0)),
            Verdict::Fail(_)
        ));
        assert!(matches!(
            judge(&c, &obs("a\n", 0), &obs("a \n", 0)),
            Verdict::Fail(_)
        ));
        let ws = Case {
            ignore_whitespace: true,
            ..Case::default()
        };
        assert_eq!(judge(&ws, &obs("a  b\n", 0), &obs("a b", 0)), Verdict::Pass);
        let no = Case {
            ignore_stdout: true,
            ..Case::default()
        };
        assert_eq!(judge(&no, &obs("a", 0), &obs("b", 0)), Verdict::Pass);
    }
}
