//! The layer table of `docs/architecture.md`: the one place that says which
//! file of `node-agent/src` is in which layer.

/// One row: a layer rank (lower is lower), the files and folders it covers.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The row's rank, from its first cell (`3`, or `3 registry`).
    pub rank: u32,
    /// `name.rs` for one file, `name/` for a folder and everything in it,
    /// paths under `src/`.
    pub paths: Vec<String>,
}

/// The heading the table follows in the document.
pub const HEADING: &str = "## Layers of the node agent";

/// Reads the first Markdown table after the line starting with [`HEADING`]
/// in `doc`. Each body row is `| RANK ... | `path`, `path` ... | idea |`:
/// the rank is the first cell's leading number, the paths are the second
/// cell's backticked words. Errors: no heading, no table, a row without a
/// rank, paths or idea (named by its line), a path named twice.
pub fn parse(doc: &str) -> Result<Vec<Entry>, String> {
    let mut lines = doc.lines().enumerate();
    lines
        .by_ref()
        .find(|(_, l)| l.starts_with(HEADING))
        .ok_or_else(|| format!("no heading {HEADING:?}"))?;
    let table: Vec<(usize, &str)> = lines
        .skip_while(|(_, l)| !l.starts_with('|'))
        .take_while(|(_, l)| l.starts_with('|'))
        .collect();
    if table.len() < 3 {
        return Err(format!("no table with rows after {HEADING:?}"));
    }
    let mut entries: Vec<Entry> = Vec::new();
    for (index, line) in &table[2..] {
        let n = index + 1;
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if cells.len() < 3 || cells[2].is_empty() {
            return Err(format!(
                "line {n}: a row needs rank, paths and idea: {line}"
            ));
        }
        let digits: String = cells[0].chars().take_while(char::is_ascii_digit).collect();
        let rank = digits
            .parse()
            .map_err(|_| format!("line {n}: the first cell starts with no rank: {line}"))?;
        let paths: Vec<String> = cells[1]
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect();
        if paths.is_empty() {
            return Err(format!("line {n}: no `path` in the second cell: {line}"));
        }
        for p in &paths {
            if entries.iter().any(|e| e.paths.contains(p)) {
                return Err(format!("line {n}: {p} is in two rows"));
            }
        }
        entries.push(Entry { rank, paths });
    }
    Ok(entries)
}
