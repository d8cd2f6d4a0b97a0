//! Markdown rendering of a harness run.

use crate::judge::Verdict;
use std::fmt::Write;

/// Shells in column order. `brush` (the brush shell's own binary) is
/// optional: its column is all skips when the run was given no binary.
pub const SHELLS: [&str; 4] = ["agentcomputer-shell", "just-bash", "bash", "brush"];

/// Index of the bash column in [`SHELLS`] and [`CaseResult::verdicts`].
pub const BASH: usize = 2;

/// Marks the hand-written part of the document, kept across regenerations.
pub const HAND_START: &str = "<!-- hand-written: start -->";
/// End of the hand-written part.
pub const HAND_END: &str = "<!-- hand-written: end -->";
/// Marks the brush suite's section, which a run of the Oils suite keeps
/// and a run of the brush suite replaces.
pub const BRUSH_START: &str = "<!-- brush suite: start -->";
/// End of the brush suite's section.
pub const BRUSH_END: &str = "<!-- brush suite: end -->";
/// Marks the hand-written part inside the brush section.
pub const BRUSH_HAND_START: &str = "<!-- brush hand-written: start -->";
/// End of the hand-written part inside the brush section.
pub const BRUSH_HAND_END: &str = "<!-- brush hand-written: end -->";

/// One case's verdicts, one per shell of [`SHELLS`].
#[derive(Debug, Clone)]
pub struct CaseResult {
    /// Case name.
    pub name: String,
    /// Line of its `####` header.
    pub line: usize,
    /// Verdict per shell of [`SHELLS`].
    pub verdicts: [Verdict; 4],
}

/// One spec file's results.
#[derive(Debug, Clone)]
pub struct FileResult {
    /// File name.
    pub name: String,
    /// Its cases.
    pub cases: Vec<CaseResult>,
}

/// (pass, fail, skip) of shell `s` over `cases`; a refused case counts
/// in none of them (see [`refused`]).
pub fn counts<'a>(
    cases: impl IntoIterator<Item = &'a CaseResult>,
    s: usize,
) -> (usize, usize, usize) {
    let mut c = (0, 0, 0);
    for r in cases {
        match r.verdicts[s] {
            Verdict::Pass => c.0 += 1,
            Verdict::Fail(_) => c.1 += 1,
            Verdict::Skip(_) => c.2 += 1,
            Verdict::Refused(_) => {}
        }
    }
    c
}

/// Cases shell `s` refused to run.
pub fn refused<'a>(cases: impl IntoIterator<Item = &'a CaseResult>, s: usize) -> usize {
    cases
        .into_iter()
        .filter(|r| matches!(r.verdicts[s], Verdict::Refused(_)))
        .count()
}

/// Lists the cases agentcomputer-shell refused, per file, with the
/// construct named.
fn write_refused(d: &mut String, files: &[FileResult], heading: &str) {
    let all: Vec<(&str, &CaseResult, &str)> = files
        .iter()
        .flat_map(|f| {
            f.cases.iter().filter_map(move |c| match &c.verdicts[0] {
                Verdict::Refused(what) => Some((f.name.as_str(), c, what.as_str())),
                _ => None,
            })
        })
        .collect();
    let _ = writeln!(d, "{heading} ({})\n", all.len());
    if all.is_empty() {
        let _ = writeln!(d, "None.\n");
        return;
    }
    for (file, c, what) in all {
        let _ = writeln!(d, "- {file}: `{}` — {what}", c.name.replace('`', "'"));
    }
    let _ = writeln!(d);
}

/// Run parameters printed in the document.
pub struct Meta<'a> {
    /// Corpus description (commit).
    pub corpus: &'a str,
    /// Versions of the shells of [`SHELLS`].
    pub versions: [String; 4],
    /// Per-case timeout.
    pub timeout_secs: u64,
    /// Excluded files with reasons.
    pub excluded: Vec<(String, String)>,
}

/// Renders the whole document; `hand` is the preserved hand-written
/// section (without markers), `brush` the brush suite's section (with its
/// markers), appended as it is.
pub fn render(files: &[FileResult], meta: &Meta, hand: &str, brush: Option<&str>) -> String {
    let mut d = String::new();
    let all: Vec<&CaseResult> = files.iter().flat_map(|f| &f.cases).collect();
    let _ = writeln!(d, "# Shell conformance\n");
    let _ = writeln!(
        d,
        "How closely the shell runtime (`agentcomputer-shell`, bashkit) follows bash, measured with the\n\
         [Oils](https://github.com/oils-for-unix/oils) spec tests (Apache-2.0) next to\n\
         [just-bash](https://www.npmjs.com/package/just-bash), GNU bash itself and the\n\
         [brush](https://github.com/reubeno/brush) shell's binary. Each case is judged\n\
         against the expectation the corpus states for bash (`## OK/BUG/N-I bash ...` where present).\n"
    );
    let _ = writeln!(
        d,
        "Reproduce from the repository root (needs `node`/`npm` for just-bash):\n"
    );
    let _ = writeln!(
        d,
        "```sh\nmkdir -p target/shell-spec && npm install --prefix target/shell-spec just-bash@3.4.2\n\
         cargo run --release -p shell-spec -- --corpus ../shared/oils-spec --out docs/shell-conformance.md \\\n    \
         --brush-bin \"$(bash bench/shell-spec/install-brush.sh)\"\n```\n"
    );
    let _ = writeln!(d, "{HAND_START}\n{}\n{HAND_END}\n", hand.trim());
    let _ = writeln!(d, "## Totals\n");
    let _ = writeln!(
        d,
        "| Shell | Version | Pass | Fail | Refused | Skip | Pass rate |"
    );
    let _ = writeln!(d, "|---|---|---:|---:|---:|---:|---:|");
    for (s, name) in SHELLS.iter().enumerate() {
        let (p, f, k) = counts(all.iter().copied(), s);
        let r = refused(all.iter().copied(), s);
        let rate = if p + f + r == 0 {
            0.0
        } else {
            100.0 * p as f64 / (p + f + r) as f64
        };
        let _ = writeln!(
            d,
            "| {name} | {} | {p} | {f} | {r} | {k} | {rate:.1} % |",
            meta.versions[s]
        );
    }
    let _ = writeln!(
        d,
        "\n{} cases in {} files; corpus {}; per-case timeout {} s; pass rate = pass / (pass + fail + refused); \
         refused: the runtime ran none of the script and said which construct it cannot run as bash does.\n",
        all.len(),
        files.len(),
        meta.corpus,
        meta.timeout_secs
    );
    let _ = writeln!(d, "## Per file (pass / fail / refused / skip)\n");
    let _ = writeln!(
        d,
        "| File | Cases | {} | {} | {} | {} |",
        SHELLS[0], SHELLS[1], SHELLS[2], SHELLS[3]
    );
    let _ = writeln!(d, "|---|---:|---:|---:|---:|---:|");
    for f in files {
        let cell = |s| {
            let (p, fl, k) = counts(&f.cases, s);
            let r = refused(&f.cases, s);
            format!("{p} / {fl} / {r} / {k}")
        };
        let _ = writeln!(
            d,
            "| {} | {} | {} | {} | {} | {} |",
            f.name,
            f.cases.len(),
            cell(0),
            cell(1),
            cell(2),
            cell(3)
        );
    }
    let _ = writeln!(d, "\n## Excluded files\n");
    let _ = writeln!(
        d,
        "Besides all `ysh-*`, `oil-*` and `hay*` files (none of which ship in the corpus):\n"
    );
    for (n, why) in &meta.excluded {
        let _ = writeln!(d, "- `{n}`: {why}");
    }
    write_refused(&mut d, files, "\n## Cases agentcomputer-shell refuses");
    let _ = writeln!(d, "## Failing cases of agentcomputer-shell\n");
    let _ = writeln!(
        d,
        "`line` is the case's `####` line in the spec file; the reason shows the first accepted outcome.\n"
    );
    for f in files {
        let fails: Vec<_> = f
            .cases
            .iter()
            .filter_map(|c| match &c.verdicts[0] {
                Verdict::Fail(why) => Some((c, why)),
                _ => None,
            })
            .collect();
        if fails.is_empty() {
            continue;
        }
        let _ = writeln!(d, "### {} ({})\n", f.name, fails.len());
        for (c, why) in fails {
            let bash_too = if matches!(c.verdicts[BASH], Verdict::Fail(_)) {
                " (bash fails too)"
            } else {
                ""
            };
            let _ = writeln!(
                d,
                "- {}: `{}` — {}{bash_too}",
                c.line,
                c.name.replace('`', "'"),
                why.replace('\n', " ")
            );
        }
        let _ = writeln!(d);
    }
    if let Some(b) = brush {
        let _ = writeln!(d, "{}", b.trim());
    }
    d
}

fn between<'a>(doc: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let s = doc.find(start)? + start.len();
    let e = doc[s..].find(end)? + s;
    Some(&doc[s..e])
}

/// The hand-written section of an existing document, if any.
pub fn hand_written(doc: &str) -> Option<String> {
    let start = doc.find(HAND_START)? + HAND_START.len();
    let end = doc[start..].find(HAND_END)? + start;
    Some(doc[start..end].trim().to_string())
}

/// The brush section of a document, markers included.
pub fn brush_section(doc: &str) -> Option<String> {
    let body = between(doc, BRUSH_START, BRUSH_END)?;
    Some(format!("{BRUSH_START}{body}{BRUSH_END}"))
}

/// `doc` with its brush section replaced by `section` (markers included),
/// or with `section` appended when it has none.
pub fn with_brush_section(doc: &str, section: &str) -> String {
    match (doc.find(BRUSH_START), doc.find(BRUSH_END)) {
        (Some(s), Some(e)) if e > s => format!(
            "{}{}{}",
            &doc[..s],
            section.trim(),
            &doc[e + BRUSH_END.len()..]
        ),
        _ => format!("{}\n\n{}\n", doc.trim_end(), section.trim()),
    }
}

/// Run parameters of the brush suite printed in its section.
pub struct BrushMeta {
    /// `brush-shell 0.4.0`.
    pub corpus: String,
    /// Versions of the shells of [`SHELLS`].
    pub versions: [String; 4],
    /// Per-case timeout.
    pub timeout_secs: u64,
    /// Wall-clock time of the run, seconds.
    pub elapsed_secs: f64,
}

/// One brush file's results: its cases' verdicts, where a skipped case's
/// reason is its exclusion.
pub type BrushFile = FileResult;

fn rate(p: usize, f: usize) -> String {
    if p + f == 0 {
        "–".into()
    } else {
        format!("{:.1} %", 100.0 * p as f64 / (p + f) as f64)
    }
}

/// Renders the brush section (markers included); `hand` is its preserved
/// hand-written part (failure classes).
pub fn render_brush(files: &[BrushFile], meta: &BrushMeta, hand: &str) -> String {
    let mut d = String::new();
    let all: Vec<&CaseResult> = files.iter().flat_map(|f| &f.cases).collect();
    let _ = writeln!(d, "{BRUSH_START}\n");
    let _ = writeln!(d, "## Brush suite: agreement with bash\n");
    let _ = writeln!(
        d,
        "The YAML compatibility cases of the [brush](https://github.com/reubeno/brush) shell (MIT),\n\
         read at run time from the published `{}` crate (`tests/cases/`). GNU bash is the oracle: a\n\
         case passes for a shell when its stdout and exit status equal bash's (stdout with whitespace\n\
         runs collapsed where the case says `ignore_whitespace`, not compared under `ignore_stdout`).\n\
         Every case runs on a fresh computer (a new engine database) for agentcomputer-shell, a fresh\n\
         `new Bash()` for just-bash and a fresh temp directory for bash and brush (the `brush` binary\n\
         of that crate, run as bash is, after `--no-config --input-backend=basic`); the bash column is a second\n\
         bash run judged against the first (cases whose output is not deterministic).\n",
        meta.corpus
    );
    let _ = writeln!(d, "Reproduce from the repository root:\n");
    let _ = writeln!(
        d,
        "```sh\nmkdir -p target/shell-spec && npm install --prefix target/shell-spec just-bash@3.4.2\n\
         cargo run -p shell-spec -- --suite brush --brush \"$(bash bench/shell-spec/fetch-brush.sh)\" --out docs/shell-conformance.md \\\n    \
         --brush-bin \"$(bash bench/shell-spec/install-brush.sh)\"\n```\n"
    );
    let _ = writeln!(d, "{BRUSH_HAND_START}\n{}\n{BRUSH_HAND_END}\n", hand.trim());
    let _ = writeln!(d, "### Brush totals\n");
    let _ = writeln!(
        d,
        "| Shell | Version | Agree | Differ | Refused | Excluded | Agreement |"
    );
    let _ = writeln!(d, "|---|---|---:|---:|---:|---:|---:|");
    for (s, name) in SHELLS.iter().enumerate() {
        let (p, f, k) = counts(all.iter().copied(), s);
        let r = refused(all.iter().copied(), s);
        let _ = writeln!(
            d,
            "| {name} | {} | {p} | {f} | {r} | {k} | {} |",
            meta.versions[s],
            rate(p, f + r)
        );
    }
    let _ = writeln!(
        d,
        "\n{} cases in {} files; per-case timeout {} s; agreement = agree / (agree + differ + refused); \
         the whole run took {:.0} s (debug build, the shells side by side).\n",
        all.len(),
        files.len(),
        meta.timeout_secs,
        meta.elapsed_secs
    );
    let _ = writeln!(
        d,
        "### Brush per file (agree / differ / refused / excluded)\n"
    );
    let _ = writeln!(
        d,
        "| File | Cases | {} | {} | {} | {} |",
        SHELLS[0], SHELLS[1], SHELLS[2], SHELLS[3]
    );
    let _ = writeln!(d, "|---|---:|---:|---:|---:|---:|");
    for f in files {
        let cell = |s| {
            let (p, fl, k) = counts(&f.cases, s);
            let r = refused(&f.cases, s);
            format!("{p} / {fl} / {r} / {k}")
        };
        let _ = writeln!(
            d,
            "| {} | {} | {} | {} | {} | {} |",
            f.name,
            f.cases.len(),
            cell(0),
            cell(1),
            cell(2),
            cell(3)
        );
    }
    let _ = writeln!(d, "\n### Brush excluded cases\n");
    for f in files {
        for c in &f.cases {
            if let Verdict::Skip(why) = &c.verdicts[0] {
                let _ = writeln!(d, "- {}: `{}` — {why}", f.name, c.name.replace('`', "'"));
            }
        }
    }
    write_refused(
        &mut d,
        files,
        "\n### Brush cases agentcomputer-shell refuses",
    );
    let _ = writeln!(
        d,
        "### Brush cases where agentcomputer-shell differs from bash\n"
    );
    for f in files {
        let fails: Vec<_> = f
            .cases
            .iter()
            .filter_map(|c| match &c.verdicts[0] {
                Verdict::Fail(why) => Some((c, why)),
                _ => None,
            })
            .collect();
        if fails.is_empty() {
            continue;
        }
        let _ = writeln!(d, "#### {} ({})\n", f.name, fails.len());
        for (c, why) in fails {
            let _ = writeln!(
                d,
                "- `{}` — {}",
                c.name.replace('`', "'"),
                why.replace('\n', " ")
            );
        }
        let _ = writeln!(d);
    }
    let _ = writeln!(d, "{BRUSH_END}");
    d
}

/// The hand-written part of the brush section of `doc`, if any.
pub fn brush_hand_written(doc: &str) -> Option<String> {
    between(doc, BRUSH_HAND_START, BRUSH_HAND_END).map(|s| s.trim().to_string())
}
