//! Which corpus files are measured.

use std::path::{Path, PathBuf};

/// Files left out although present: features of other shells or of Oils
/// itself, and interactive-only builtins.
pub const EXCLUDED: &[(&str, &str)] = &[
    ("errexit-osh.test.sh", "OSH-only strict_errexit options"),
    ("osh-bugs.test.sh", "OSH regressions"),
    ("command-sub-ksh.test.sh", "ksh `${ cmd; }` syntax"),
    ("print-source-code.test.sh", "OSH source printing"),
    ("spec-harness-bug.test.sh", "Oils harness self-test"),
    (
        "known-differences.test.sh",
        "OSH-vs-bash differences by design",
    ),
    ("divergence.test.sh", "OSH-vs-bash differences by design"),
    ("strict-options.test.sh", "OSH strict_* options"),
    ("builtin-bind.test.sh", "interactive readline"),
    ("builtin-completion.test.sh", "interactive completion"),
    ("builtin-fc.test.sh", "interactive history editing"),
    ("builtin-history.test.sh", "interactive history"),
    ("prompt.test.sh", "interactive prompt"),
    ("serialize.test.sh", "OSH serialization formats"),
];

/// The `*.test.sh` files under `corpus/spec` that are measured, sorted,
/// excluding `ysh-*`, `oil-*`, `hay*` and [`EXCLUDED`].
pub fn spec_files(corpus: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(corpus.join("spec"))? {
        let p = e?.path();
        let name = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if !name.ends_with(".test.sh") || !is_included(&name) {
            continue;
        }
        out.push(p);
    }
    out.sort();
    Ok(out)
}

/// Whether a spec file name is bash-relevant.
pub fn is_included(name: &str) -> bool {
    !(name.starts_with("ysh-")
        || name.starts_with("oil-")
        || name.starts_with("hay")
        || EXCLUDED.iter().any(|(n, _)| *n == name))
}
