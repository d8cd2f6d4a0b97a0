//! Markdown rendering of a harness run.

use crate::judge::Verdict;
use std::fmt::Write;

/// Shells in column order.
pub const SHELLS: [&str; 3] = ["agentcomputer-shell", "just-bash", "bash"];

/// Marks the hand-written part of the document, kept across regenerations.
pub const HAND_START: &str = "<!-- hand-written: start -->";
/// End of the hand-written part.
pub const HAND_END: &str = "<!-- hand-written: end -->";

/// One case's verdicts, one per shell of [`SHELLS`].
#[derive(Debug, Clone)]
pub struct CaseResult {
    /// Case name.
    pub name: String,
    /// Line of its `####` header.
    pub line: usize,
    /// Verdict per shell.
    pub verdicts: [Verdict; 3],
}

/// One spec file's results.
#[derive(Debug, Clone)]
pub struct FileResult {
    /// File name.
    pub name: String,
    /// Its cases.
    pub cases: Vec<CaseResult>,
}

/// (pass, fail, skip) of shell `s` over `cases`.
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
        }
    }
    c
}

/// Run parameters printed in the document.
pub struct Meta<'a> {
    /// Corpus description (commit).
    pub corpus: &'a str,
    /// Versions of the three shells.
    pub versions: [String; 3],
    /// Per-case timeout.
    pub timeout_secs: u64,
    /// Excluded files with reasons.
    pub excluded: Vec<(String, String)>,
}

/// Renders the whole document; `hand` is the preserved hand-written
/// section (without markers).
pub fn render(files: &[FileResult], meta: &Meta, hand: &str) -> String {
    let mut d = String::new();
    let all: Vec<&CaseResult> = files.iter().flat_map(|f| &f.cases).collect();
    let _ = writeln!(d, "# Shell conformance\n");
    let _ = writeln!(
        d,
        "How closely the shell runtime (`agentcomputer-shell`, bashkit) follows bash, measured with the\n\
         [Oils](https://github.com/oils-for-unix/oils) spec tests (Apache-2.0) next to\n\
         [just-bash](https://www.npmjs.com/package/just-bash) and GNU bash itself. Each case is judged\n\
         against the expectation the corpus states for bash (`## OK/BUG/N-I bash ...` where present).\n"
    );
    let _ = writeln!(
        d,
        "Reproduce from the repository root (needs `node`/`npm` for just-bash):\n"
    );
    let _ = writeln!(
        d,
        "```sh\nmkdir -p target/shell-spec && npm install --prefix target/shell-spec just-bash@3.4.2\n\
         cargo run --release -p shell-spec -- --corpus ../shared/oils-spec --out docs/shell-conformance.md\n```\n"
    );
    let _ = writeln!(d, "{HAND_START}\n{}\n{HAND_END}\n", hand.trim());
    let _ = writeln!(d, "## Totals\n");
    let _ = writeln!(d, "| Shell | Version | Pass | Fail | Skip | Pass rate |");
    let _ = writeln!(d, "|---|---|---:|---:|---:|---:|");
    for (s, name) in SHELLS.iter().enumerate() {
        let (p, f, k) = counts(all.iter().copied(), s);
        let rate = if p + f == 0 {
            0.0
        } else {
            100.0 * p as f64 / (p + f) as f64
        };
        let _ = writeln!(
            d,
            "| {name} | {} | {p} | {f} | {k} | {rate:.1} % |",
            meta.versions[s]
        );
    }
    let _ = writeln!(
        d,
        "\n{} cases in {} files; corpus {}; per-case timeout {} s; pass rate = pass / (pass + fail).\n",
        all.len(),
        files.len(),
        meta.corpus,
        meta.timeout_secs
    );
    let _ = writeln!(d, "## Per file (pass / fail / skip)\n");
    let _ = writeln!(
        d,
        "| File | Cases | {} | {} | {} |",
        SHELLS[0], SHELLS[1], SHELLS[2]
    );
    let _ = writeln!(d, "|---|---:|---:|---:|---:|");
    for f in files {
        let cell = |s| {
            let (p, fl, k) = counts(&f.cases, s);
            format!("{p} / {fl} / {k}")
        };
        let _ = writeln!(
            d,
            "| {} | {} | {} | {} | {} |",
            f.name,
            f.cases.len(),
            cell(0),
            cell(1),
            cell(2)
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
    let _ = writeln!(d, "\n## Failing cases of agentcomputer-shell\n");
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
            let bash_too = if matches!(c.verdicts[2], Verdict::Fail(_)) {
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
    d
}

/// The hand-written section of an existing document, if any.
pub fn hand_written(doc: &str) -> Option<String> {
    let start = doc.find(HAND_START)? + HAND_START.len();
    let end = doc[start..].find(HAND_END)? + start;
    Some(doc[start..end].trim().to_string())
}
