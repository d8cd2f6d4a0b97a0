//! The layering rules over parsed files: every file is in exactly one row of
//! the layer table, no import reaches a row of the same or a higher rank,
//! the files of one folder (its `mod.rs` and other module roots aside) form
//! no cycle, and no file is longer than a limit.

use std::collections::{BTreeSet, HashMap};

use super::doc_table::Entry;
use super::imports::{Parsed, Reference, Root};

/// One import of a file by another, both inside the library.
#[derive(Debug)]
pub struct Edge {
    pub from: usize,
    pub to: usize,
    pub line: usize,
    pub path: String,
}

/// The files `files[from]` reaches, one edge per reference; `main.rs` (the
/// binary, whose `crate` is itself) and references leaving the crate give
/// none.
pub fn edges(files: &[Parsed]) -> Vec<Edge> {
    let modules: HashMap<&[String], usize> = files
        .iter()
        .enumerate()
        .filter(|(_, f)| f.rel != "main.rs")
        .map(|(i, f)| (f.module.as_slice(), i))
        .collect();
    let mut out = Vec::new();
    for (from, file) in files.iter().enumerate() {
        if file.rel == "main.rs" {
            continue;
        }
        for r in &file.refs {
            if let Some(to) = resolve(files, &modules, r, 0)
                && to != from
            {
                out.push(Edge {
                    from,
                    to,
                    line: r.line,
                    path: r.segments.join("::"),
                });
            }
        }
    }
    out
}

/// The file `r` lands in: the longest module prefix of its absolute path,
/// then through a `use` of that module's file that names the next segment
/// (a re-export) when it leads to another file.
fn resolve(
    files: &[Parsed],
    modules: &HashMap<&[String], usize>,
    r: &Reference,
    depth: usize,
) -> Option<usize> {
    let absolute: Vec<String> = match &r.root {
        Root::Crate => r.segments.clone(),
        Root::Plain { scope } => {
            let mut child = scope.clone();
            child.push(r.segments[0].clone());
            if !modules.contains_key(child.as_slice()) {
                return None;
            }
            let mut abs = scope.clone();
            abs.extend(r.segments.iter().cloned());
            abs
        }
    };
    let k = (0..=absolute.len())
        .rev()
        .find(|k| modules.contains_key(&absolute[..*k]))?;
    let target = modules[&absolute[..k]];
    if k < absolute.len()
        && depth < 8
        && let Some(re) = files[target].uses.get(&absolute[k])
    {
        let mut further = re.clone();
        further.segments.extend(absolute[k + 1..].iter().cloned());
        if let Some(t) = resolve(files, modules, &further, depth + 1) {
            return Some(t);
        }
    }
    Some(target)
}

/// The row of `entries` that covers `rel`. Errors: none or several do.
pub fn entry_of(entries: &[Entry], rel: &str) -> Result<usize, String> {
    let hits: Vec<usize> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| {
            e.paths
                .iter()
                .any(|p| p == rel || (p.ends_with('/') && rel.starts_with(p.as_str())))
        })
        .map(|(i, _)| i)
        .collect();
    match hits.as_slice() {
        [one] => Ok(*one),
        [] => Err(format!("{rel} is in no row of the layer table")),
        _ => Err(format!("{rel} is in several rows of the layer table")),
    }
}

/// Every break of the rules, one line each, empty when the files keep them.
pub fn violations(entries: &[Entry], files: &[Parsed]) -> Vec<String> {
    let mut out = Vec::new();
    let mut row = Vec::new();
    for f in files {
        match entry_of(entries, &f.rel) {
            Ok(i) => row.push(i),
            Err(e) => {
                out.push(e);
                row.push(usize::MAX);
            }
        }
    }
    for e in entries {
        for p in &e.paths {
            let covers = files
                .iter()
                .any(|f| f.rel == *p || (p.ends_with('/') && f.rel.starts_with(p.as_str())));
            if !covers {
                out.push(format!("the layer table names {p}, which matches no file"));
            }
        }
    }
    let edges = edges(files);
    for e in &edges {
        let (rf, rt) = (row[e.from], row[e.to]);
        if rf == usize::MAX || rt == usize::MAX || rf == rt {
            continue;
        }
        if entries[rt].rank >= entries[rf].rank {
            out.push(format!(
                "{}:{}: crate::{} reaches {} (layer {}) from layer {}: an import must reach a lower layer",
                files[e.from].rel,
                e.line,
                e.path,
                files[e.to].rel,
                entries[rt].rank,
                entries[rf].rank,
            ));
        }
    }
    out.extend(folder_cycles(entries, files, &row, &edges));
    out
}

/// Cycles among the files of one folder row, module roots left out (a
/// `mod.rs`, or `exec.rs` beside `exec/`, declares its children and
/// re-exports them, so it is both above and below them by nature).
fn folder_cycles(
    entries: &[Entry],
    files: &[Parsed],
    row: &[usize],
    edges: &[Edge],
) -> Vec<String> {
    let is_root = |i: usize| {
        files[i].rel.ends_with("/mod.rs")
            || files.iter().any(|f| {
                f.module.len() > files[i].module.len() && f.module.starts_with(&files[i].module)
            })
    };
    let n = files.len();
    let mut reach = vec![vec![false; n]; n];
    for e in edges {
        let same_folder = row[e.from] == row[e.to]
            && row[e.from] != usize::MAX
            && entries[row[e.from]].paths.iter().any(|p| p.ends_with('/'));
        if same_folder && !is_root(e.from) && !is_root(e.to) {
            reach[e.from][e.to] = true;
        }
    }
    // Transitive closure (Floyd-Warshall over booleans; a folder has tens
    // of files).
    for k in 0..n {
        let through_k = reach[k].clone();
        for row in reach.iter_mut().filter(|row| row[k]) {
            for (to, reached) in row.iter_mut().enumerate() {
                *reached |= through_k[to];
            }
        }
    }
    let mut cycles: BTreeSet<Vec<String>> = BTreeSet::new();
    for (i, row) in reach.iter().enumerate() {
        if row[i] {
            let mut members: Vec<String> = (0..n)
                .filter(|j| row[*j] && reach[*j][i])
                .map(|j| files[j].rel.clone())
                .collect();
            members.sort();
            cycles.insert(members);
        }
    }
    cycles
        .into_iter()
        .map(|c| {
            format!(
                "import cycle between files of one folder: {}",
                c.join(" <-> ")
            )
        })
        .collect()
}

/// Files whose counted lines (without `#[cfg(test)]` items) pass `max`.
pub fn too_long(files: &[Parsed], max: usize) -> Vec<String> {
    files
        .iter()
        .filter(|f| f.counted_lines > max)
        .map(|f| {
            format!(
                "{} has {} lines besides its tests, over {max}: split it by idea",
                f.rel, f.counted_lines
            )
        })
        .collect()
}
