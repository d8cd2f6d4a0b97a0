//! The node agent's library keeps its layers: the table under "Layers of the
//! node agent" in docs/architecture.md puts every file of node-agent/src in
//! one layer, and this test reads every file (its `#[cfg(test)]` items
//! aside) with syn and fails on an import that reaches the same or a higher
//! layer, on an import cycle between files of one folder, and on a file
//! longer than 700 lines besides its tests.

mod layering {
    pub mod check;
    pub mod doc_table;
    pub mod imports;
}

use std::path::{Path, PathBuf};

use layering::{check, doc_table, imports};

/// The most lines a file of node-agent/src may have besides its tests.
const MAX_LINES: usize = 700;

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, as paths relative to `base`, sorted.
fn rust_files(base: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(base, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(base).unwrap();
            out.push(rel.to_str().unwrap().replace('\\', "/"));
        }
    }
    out.sort();
}

fn parse_tree() -> Vec<imports::Parsed> {
    let src = src_dir();
    let mut rels = Vec::new();
    rust_files(&src, &src, &mut rels);
    assert!(
        rels.len() > 50,
        "found only {rels:?} under {}",
        src.display()
    );
    rels.iter()
        .map(|rel| {
            let text = std::fs::read_to_string(src.join(rel)).unwrap();
            imports::parse(rel, &text).unwrap_or_else(|e| panic!("{e}"))
        })
        .collect()
}

fn doc_entries() -> Vec<doc_table::Entry> {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/architecture.md");
    let text = std::fs::read_to_string(&doc).unwrap();
    doc_table::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", doc.display()))
}

#[test]
fn every_import_reaches_a_lower_layer() {
    let entries = doc_entries();
    let files = parse_tree();
    let broken = check::violations(&entries, &files);
    assert!(
        broken.is_empty(),
        "node-agent/src breaks the layers of docs/architecture.md:\n{}",
        broken.join("\n")
    );
}

#[test]
fn no_file_is_over_the_line_limit() {
    let files = parse_tree();
    let long = check::too_long(&files, MAX_LINES);
    assert!(long.is_empty(), "{}", long.join("\n"));
}

/// A synthetic crate: `(path under src/, text)`.
fn synthetic(files: &[(&str, &str)]) -> Vec<imports::Parsed> {
    files
        .iter()
        .map(|(rel, text)| imports::parse(rel, text).unwrap())
        .collect()
}

const TABLE: &str = "\
## Layers of the node agent

| Layer | Files | Idea |
|---|---|---|
| 1 base | `layout.rs` | names |
| 2 | `store/` | the store |
| 3 | `api/` | the API |
| 4 | `local/` | local mode |
| 4 | `cli/` | the command line |
| 5 | `lib.rs` | the root |
";

fn synthetic_base() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "lib.rs",
            "pub mod layout; pub mod store; pub mod api; pub mod local;",
        ),
        ("layout.rs", "pub const DB: &str = \"fs.db\";"),
        (
            "store/mod.rs",
            "mod open; mod close; pub use open::Store; pub const F: &str = crate::layout::DB;",
        ),
        (
            "store/open.rs",
            "pub struct Store; pub fn open() -> Store { Store }",
        ),
        (
            "store/close.rs",
            "use super::Store; pub fn close(_: Store) {}",
        ),
        (
            "api/mod.rs",
            "use crate::store::{self, Store}; pub fn serve(_: Store) { store::F; }",
        ),
        (
            "local/mod.rs",
            "pub fn run() { crate::api::serve(crate::store::Store) }",
        ),
        (
            "cli/mod.rs",
            "pub fn main() { crate::api::serve(crate::store::Store) }",
        ),
    ]
}

#[test]
fn checker_passes_a_layered_crate() {
    let entries = doc_table::parse(TABLE).unwrap();
    let files = synthetic(&synthetic_base());
    assert_eq!(check::violations(&entries, &files), Vec::<String>::new());
    // The re-export `pub use open::Store` leads to the defining file.
    let edges = check::edges(&files);
    let close_to: Vec<&str> = edges
        .iter()
        .filter(|e| files[e.from].rel == "store/close.rs")
        .map(|e| files[e.to].rel.as_str())
        .collect();
    assert_eq!(close_to, ["store/open.rs"]);
}

#[test]
fn checker_fails_an_upward_import() {
    let entries = doc_entries_of(TABLE);
    let mut base = synthetic_base();
    base[3] = (
        "store/open.rs",
        "pub struct Store;\npub fn open() -> Store { crate::api::serve(Store); Store }",
    );
    let broken = check::violations(&entries, &synthetic(&base));
    assert_eq!(
        broken,
        [
            "store/open.rs:2: crate::api::serve reaches api/mod.rs (layer 3) from layer 2: an import must reach a lower layer"
        ]
    );
}

#[test]
fn checker_fails_an_import_between_peers_and_a_use_upward() {
    let entries = doc_entries_of(TABLE);
    let mut base = synthetic_base();
    base[6] = (
        "local/mod.rs",
        "use crate::cli::main;\npub fn run() { main() }",
    );
    base[1] = ("layout.rs", "use crate::store::{Store as S};");
    let broken = check::violations(&entries, &synthetic(&base));
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(
        broken[0].starts_with(
            "layout.rs:1: crate::store::Store reaches store/open.rs (layer 2) from layer 1"
        ),
        "{broken:?}"
    );
    assert!(
        broken[1].starts_with(
            "local/mod.rs:1: crate::cli::main reaches cli/mod.rs (layer 4) from layer 4"
        ),
        "{broken:?}"
    );
}

#[test]
fn checker_ignores_tests_doc_links_and_visibility() {
    let entries = doc_entries_of(TABLE);
    let mut base = synthetic_base();
    base[1] = (
        "layout.rs",
        "//! Used by [`crate::api::serve`].\n\
         pub(in crate) const DB: &str = \"fs.db\";\n\
         #[cfg(test)]\nmod tests { use crate::api::serve; }\n",
    );
    assert_eq!(
        check::violations(&entries, &synthetic(&base)),
        Vec::<String>::new()
    );
}

#[test]
fn checker_sees_paths_in_macros_and_relative_paths() {
    let entries = doc_entries_of(TABLE);
    let mut base = synthetic_base();
    base[1] = (
        "layout.rs",
        "pub fn f() { println!(\"{}\", crate::local::run()); }",
    );
    base[4] = (
        "store/close.rs",
        "pub fn close() { super::super::api::serve(super::Store) }",
    );
    let broken = check::violations(&entries, &synthetic(&base));
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(
        broken[0].starts_with("layout.rs:1: crate::local::run reaches local/mod.rs"),
        "{broken:?}"
    );
    assert!(
        broken[1].starts_with("store/close.rs:1: crate::api::serve reaches api/mod.rs"),
        "{broken:?}"
    );
}

#[test]
fn checker_fails_a_cycle_within_a_folder() {
    let entries = doc_entries_of(TABLE);
    let mut base = synthetic_base();
    base[3] = (
        "store/open.rs",
        "pub struct Store; pub fn open() -> Store { super::close::close(Store); Store }",
    );
    let broken = check::violations(&entries, &synthetic(&base));
    assert_eq!(
        broken,
        ["import cycle between files of one folder: store/close.rs <-> store/open.rs"]
    );
}

#[test]
fn checker_fails_a_file_outside_the_table_and_a_stale_row() {
    let entries = doc_entries_of(TABLE);
    let mut base = synthetic_base();
    base.retain(|(rel, _)| !rel.starts_with("local/"));
    base.push(("extra.rs", "pub fn f() {}"));
    let broken = check::violations(&entries, &synthetic(&base));
    assert_eq!(
        broken,
        [
            "extra.rs is in no row of the layer table",
            "the layer table names local/, which matches no file"
        ]
    );
}

#[test]
fn line_limit_does_not_count_test_items() {
    let body = "pub fn f() {}\n".repeat(10);
    let tests = format!(
        "#[cfg(test)]\nmod tests {{\n{}}}\n",
        "fn t() {}\n".repeat(50)
    );
    let files = synthetic(&[("a.rs", &format!("{body}{tests}"))]);
    assert_eq!(files[0].counted_lines, 10);
    assert!(check::too_long(&files, 10).is_empty());
    assert_eq!(
        check::too_long(&files, 9),
        ["a.rs has 10 lines besides its tests, over 9: split it by idea"]
    );
}

#[test]
fn table_errors_are_named() {
    assert!(
        doc_table::parse("# nothing")
            .unwrap_err()
            .contains("no heading")
    );
    let no_rank =
        "## Layers of the node agent\n\n| L | F | I |\n|---|---|---|\n| base | `a.rs` | x |\n";
    assert!(
        doc_table::parse(no_rank)
            .unwrap_err()
            .contains("line 5: the first cell starts with no rank")
    );
    let twice = "## Layers of the node agent\n\n| L | F | I |\n|---|---|---|\n| 1 | `a.rs` | x |\n| 2 | `a.rs` | y |\n";
    assert!(
        doc_table::parse(twice)
            .unwrap_err()
            .contains("a.rs is in two rows")
    );
}

fn doc_entries_of(text: &str) -> Vec<doc_table::Entry> {
    doc_table::parse(text).unwrap()
}
