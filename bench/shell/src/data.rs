//! The input files of the scenarios, generated from a fixed seed so every
//! target and every run sees the same bytes.

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde_json::json;

/// One input file: a path relative to the working directory, and its bytes.
pub(crate) type File = (String, Vec<u8>);

/// Identifiers and keywords the code-like text is made of.
const WORDS: &[&str] = &[
    "self", "config", "buffer", "request", "response", "handle", "state", "index", "count",
    "value", "result", "error", "path", "name", "entry", "node", "parent", "child", "cache",
    "reader", "writer", "stream", "token", "limit", "offset", "length", "options", "context",
    "client", "server", "session", "record", "field", "schema", "query", "filter", "batch",
];

/// Directory names of the source tree.
const DIRS: &[&str] = &[
    "core", "net", "io", "util", "storage", "api", "model", "view", "parser", "codec", "auth",
    "sched", "metrics", "config", "cli", "plugin", "cache", "proto",
];

/// Syllables of the pseudo-words sorted by the sort scenario.
const SYLLABLES: &[&str] = &[
    "ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "zu", "pe", "dra", "gon", "bel", "tis", "mor",
];

fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// One line of code-like text; about one line in 40 carries a `TODO`.
fn code_line(r: &mut StdRng, ext: &str) -> String {
    let a = WORDS.choose(r).unwrap();
    let b = WORDS.choose(r).unwrap();
    let c = WORDS.choose(r).unwrap();
    let indent = "    ".repeat(r.random_range(0..4));
    let comment = if ext == "rs" || ext == "ts" {
        "//"
    } else {
        "#"
    };
    match r.random_range(0..40) {
        0 => format!("{indent}{comment} TODO: handle {a} when {b} is empty"),
        1..=6 => format!(
            "{indent}let {a}_{b} = {c}.{a}({b}_{c}, {});",
            r.random_range(0..4096)
        ),
        7..=11 => format!("{indent}if {a}.{b}() > {c}_limit {{"),
        12..=15 => format!("{indent}}}"),
        16..=19 => format!(
            "{indent}fn {a}_{b}(&self, {c}: &{}) -> Result<()> {{",
            cap(b)
        ),
        20..=23 => format!("{indent}{comment} The {a} of this {b} is kept in {c}."),
        24..=27 => format!("{indent}return {a}.map(|{b}| {b}.{c}());"),
        _ => format!("{indent}{a}.{b} = {c}.{a} + {};", r.random_range(0..100)),
    }
}

fn cap(w: &str) -> String {
    let mut s = w.to_string();
    s[..1].make_ascii_uppercase();
    s
}

/// A source tree of `files` files of 1-8 KiB of code-like text, under
/// `src/` (nested up to 10 directories deep), plus `tests/` and `docs/`.
/// About 60 % are `.rs` files.
pub(crate) fn source_tree(files: usize) -> Vec<File> {
    let mut r = rng(1);
    let mut out = Vec::with_capacity(files);
    for i in 0..files {
        let top = match i % 10 {
            0 => "tests",
            1 => "docs",
            _ => "src",
        };
        let depth = r.random_range(0..10);
        let mut path = top.to_string();
        // Few distinct names per level, so directories hold several files.
        for level in 0..depth {
            let pick = r.random_range(0..3) + level % 5;
            path.push('/');
            path.push_str(DIRS[pick % DIRS.len()]);
        }
        let ext = *[
            "rs", "rs", "rs", "rs", "rs", "rs", "ts", "md", "toml", "json",
        ]
        .choose(&mut r)
        .unwrap();
        path.push_str(&format!("/{}_{i}.{ext}", WORDS.choose(&mut r).unwrap()));
        let target = r.random_range(1024..8192);
        let mut text = String::with_capacity(target + 80);
        while text.len() < target {
            text.push_str(&code_line(&mut r, ext));
            text.push('\n');
        }
        out.push((path, text.into_bytes()));
    }
    out
}

/// `files` text files `f000.txt`... of about 4 KiB each where `foo`
/// appears a few times per line.
pub(crate) fn sed_files(files: usize) -> Vec<File> {
    let mut r = rng(2);
    (0..files)
        .map(|i| {
            let mut text = String::new();
            while text.len() < 4096 {
                let a = WORDS.choose(&mut r).unwrap();
                let b = WORDS.choose(&mut r).unwrap();
                match r.random_range(0..3) {
                    0 => text.push_str(&format!("foo {a} foobar {b} foo\n")),
                    1 => text.push_str(&format!("{a} = foo({b}); // no bar here\n")),
                    _ => text.push_str(&format!("{a} {b} plain line {}\n", r.random_range(0..999))),
                }
            }
            (format!("f{i:03}.txt"), text.into_bytes())
        })
        .collect()
}

/// `data.json`: `{"items": [...]}` with objects of id, name, score
/// (0-99), tags, active and meta, compact, at least `bytes` long.
pub(crate) fn json_doc(bytes: usize) -> Vec<File> {
    let mut r = rng(3);
    let mut items = Vec::new();
    let mut size = 0;
    while size < bytes {
        let id = items.len();
        let tags: Vec<&str> = (0..r.random_range(0..4))
            .map(|_| *WORDS.choose(&mut r).unwrap())
            .collect();
        let item = json!({
            "id": id,
            "name": format!("{}-{}-{id}", WORDS.choose(&mut r).unwrap(), DIRS.choose(&mut r).unwrap()),
            "score": r.random_range(0..100),
            "tags": tags,
            "active": r.random_bool(0.7),
            "meta": { "created": 1_700_000_000 + r.random_range(0..10_000_000), "owner": WORDS.choose(&mut r).unwrap() },
        });
        size += item.to_string().len() + 1;
        items.push(item);
    }
    let doc = json!({ "version": 1, "items": items });
    vec![("data.json".into(), doc.to_string().into_bytes())]
}

/// `words.txt`: `lines` lines, each one pseudo-word drawn from a
/// vocabulary of 3,000 with a skewed (Zipf-like) frequency.
pub(crate) fn word_lines(lines: usize) -> Vec<File> {
    let mut r = rng(4);
    let vocab: Vec<String> = (0..3000)
        .map(|_| {
            (0..r.random_range(2..5))
                .map(|_| *SYLLABLES.choose(&mut r).unwrap())
                .collect()
        })
        .collect();
    let mut text = String::with_capacity(lines * 10);
    for _ in 0..lines {
        // Squaring a uniform draw favours low indexes: a few words are
        // frequent, most are rare, as in real logs.
        let u: f64 = r.random();
        let i = ((u * u * u) * vocab.len() as f64) as usize;
        text.push_str(&vocab[i.min(vocab.len() - 1)]);
        text.push('\n');
    }
    vec![("words.txt".into(), text.into_bytes())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_shapes() {
        let tree = source_tree(1000);
        assert_eq!(tree.len(), 1000);
        assert!(
            tree.iter()
                .all(|(_, b)| (1024..8192 + 200).contains(&b.len()))
        );
        assert!(tree.iter().any(|(p, _)| p.matches('/').count() >= 9));
        let todos = tree
            .iter()
            .filter(|(_, b)| String::from_utf8_lossy(b).contains("TODO"))
            .count();
        assert!(todos > 100, "{todos}");
        let json = json_doc(5_000_000);
        assert!(json[0].1.len() >= 5_000_000);
        let v: serde_json::Value = serde_json::from_slice(&json[0].1).unwrap();
        assert!(v["items"].as_array().unwrap().len() > 10_000);
        let words = word_lines(100_000);
        assert_eq!(words[0].1.iter().filter(|&&b| b == b'\n').count(), 100_000);
        // Deterministic: the same seed gives the same bytes.
        assert_eq!(sed_files(3), sed_files(3));
    }
}
