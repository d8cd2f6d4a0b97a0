//! Consistency check of a database: SQLite's own check plus the engine's
//! invariants (link counts, sizes, counters, dangling rows).

use std::collections::{HashMap, HashSet};

use rusqlite::Connection;

use crate::{FileKind, Fs, ROOT_INO, Result, inode};

/// What `check` knows of one inode.
struct Row {
    kind: Option<FileKind>,
    nlink: i64,
    size: i64,
    stored: i64,
    parent: i64,
}

fn check_in(conn: &Connection, cs: i64) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    {
        let mut st = conn.prepare("PRAGMA integrity_check")?;
        let rows = st.query_map([], |r| r.get::<_, String>(0))?;
        for r in rows {
            let r = r?;
            if r != "ok" {
                problems.push(format!("integrity_check: {r}"));
            }
        }
    }
    let mut inodes: HashMap<i64, Row> = HashMap::new();
    {
        let mut st = conn.prepare("SELECT ino, mode, nlink, size, stored, parent FROM inodes")?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            let mode: u32 = r.get(1)?;
            inodes.insert(
                r.get(0)?,
                Row {
                    kind: FileKind::from_mode(mode),
                    nlink: r.get(2)?,
                    size: r.get(3)?,
                    stored: r.get(4)?,
                    parent: r.get(5)?,
                },
            );
        }
    }
    for (ino, i) in &inodes {
        if i.kind.is_none() {
            problems.push(format!("inode {ino}: bad mode"));
        }
    }
    match inodes.get(&(ROOT_INO as i64)) {
        Some(r) if r.kind == Some(FileKind::Directory) && r.parent == ROOT_INO as i64 => {}
        _ => problems.push("root inode missing or broken".into()),
    }
    // Entries: targets exist, parents are directories; count links.
    let mut links: HashMap<i64, i64> = HashMap::new();
    let mut subdirs: HashMap<i64, i64> = HashMap::new();
    let mut dir_entry_parent: HashMap<i64, i64> = HashMap::new();
    {
        let mut st = conn.prepare("SELECT parent, name, ino FROM dirents")?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            let (parent, name, ino): (i64, Vec<u8>, i64) = (r.get(0)?, r.get(1)?, r.get(2)?);
            let shown = String::from_utf8_lossy(&name).into_owned();
            match inodes.get(&parent) {
                Some(p) if p.kind == Some(FileKind::Directory) => {}
                _ => problems.push(format!("entry {parent}/{shown}: parent is not a directory")),
            }
            let Some(child) = inodes.get(&ino) else {
                problems.push(format!("entry {parent}/{shown}: inode {ino} missing"));
                continue;
            };
            *links.entry(ino).or_default() += 1;
            if child.kind == Some(FileKind::Directory) {
                *subdirs.entry(parent).or_default() += 1;
                dir_entry_parent.insert(ino, parent);
            }
        }
    }
    let orphans: HashSet<i64> = {
        let mut st = conn.prepare("SELECT ino FROM orphans")?;
        st.query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?
    };
    for o in &orphans {
        match inodes.get(o) {
            None => problems.push(format!("orphan {o}: inode missing")),
            Some(i) if i.nlink != 0 => problems.push(format!("orphan {o}: nlink {}", i.nlink)),
            _ => {}
        }
    }
    for (&ino, i) in &inodes {
        let names = links.get(&ino).copied().unwrap_or(0);
        if ino == ROOT_INO as i64 {
            if names != 0 {
                problems.push("root has a directory entry".into());
            }
        } else if i.nlink == 0 {
            if names != 0 || !orphans.contains(&ino) {
                problems.push(format!(
                    "inode {ino}: nlink 0 but {names} entries or not an orphan"
                ));
            }
            continue;
        }
        if i.kind == Some(FileKind::Directory) {
            let want = 2 + subdirs.get(&ino).copied().unwrap_or(0);
            if i.nlink != want {
                problems.push(format!("dir {ino}: nlink {} != {want}", i.nlink));
            }
            if ino != ROOT_INO as i64 {
                if names != 1 {
                    problems.push(format!("dir {ino}: {names} entries"));
                }
                if dir_entry_parent.get(&ino) != Some(&i.parent) {
                    problems.push(format!(
                        "dir {ino}: parent {} disagrees with its entry",
                        i.parent
                    ));
                }
            }
        } else if i.nlink != names {
            problems.push(format!("inode {ino}: nlink {} != {names} entries", i.nlink));
        }
    }
    // Every directory reaches the root by `..` without a cycle.
    for (&ino, i) in &inodes {
        if i.kind != Some(FileKind::Directory) || i.nlink == 0 {
            continue;
        }
        let mut cur = ino;
        let mut steps = 0usize;
        while cur != ROOT_INO as i64 {
            steps += 1;
            match inodes.get(&cur) {
                Some(r) if steps <= inodes.len() => cur = r.parent,
                _ => {
                    problems.push(format!("dir {ino}: does not reach the root"));
                    break;
                }
            }
        }
    }
    // Chunks: owner exists, within chunk size and file size; stored sums.
    let mut stored: HashMap<i64, i64> = HashMap::new();
    {
        let mut st = conn.prepare("SELECT ino, idx, length(data) FROM chunks")?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            let (ino, idx, len): (i64, i64, i64) = (r.get(0)?, r.get(1)?, r.get(2)?);
            let Some(i) = inodes.get(&ino) else {
                problems.push(format!("chunk {ino}:{idx}: inode missing"));
                continue;
            };
            if i.kind != Some(FileKind::RegularFile) {
                problems.push(format!("chunk {ino}:{idx}: not a regular file"));
            }
            if len > cs || idx < 0 {
                problems.push(format!("chunk {ino}:{idx}: length {len}"));
            }
            if idx * cs + len > i.size {
                problems.push(format!("chunk {ino}:{idx}: past the file size {}", i.size));
            }
            *stored.entry(ino).or_default() += len;
        }
    }
    let mut total_stored = 0i64;
    for (&ino, i) in &inodes {
        let s = stored.get(&ino).copied().unwrap_or(0);
        if s != i.stored {
            problems.push(format!("inode {ino}: stored {} != chunks {s}", i.stored));
        }
        total_stored += i.stored;
    }
    // Symlinks and xattrs belong to existing inodes of the right kind.
    {
        let mut st = conn.prepare("SELECT ino, length(target) FROM symlinks")?;
        let mut rows = st.query([])?;
        let mut seen = HashSet::new();
        while let Some(r) = rows.next()? {
            let (ino, len): (i64, i64) = (r.get(0)?, r.get(1)?);
            seen.insert(ino);
            match inodes.get(&ino) {
                Some(i) if i.kind == Some(FileKind::Symlink) => {
                    if i.size != len {
                        problems.push(format!("symlink {ino}: size {} != target {len}", i.size));
                    }
                }
                _ => problems.push(format!("symlink target {ino}: not a symlink inode")),
            }
        }
        for (&ino, i) in &inodes {
            if i.kind == Some(FileKind::Symlink) && !seen.contains(&ino) {
                problems.push(format!("symlink {ino}: target missing"));
            }
        }
    }
    {
        let mut st = conn.prepare("SELECT DISTINCT ino FROM xattrs")?;
        let owners: Vec<i64> = st
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        for o in owners {
            if !inodes.contains_key(&o) {
                problems.push(format!("xattr of inode {o}: inode missing"));
            }
        }
    }
    let used_bytes = inode::meta_get(conn, "used_bytes")?;
    let xattr_bytes: i64 = conn.query_row(
        "SELECT COALESCE(SUM(length(name) + length(value)), 0) FROM xattrs",
        [],
        |r| r.get(0),
    )?;
    let target_bytes: i64 = conn.query_row(
        "SELECT COALESCE(SUM(length(target)), 0) FROM symlinks",
        [],
        |r| r.get(0),
    )?;
    let expected = total_stored + xattr_bytes + target_bytes;
    if used_bytes != expected {
        problems.push(format!(
            "meta used_bytes {used_bytes} != chunks {total_stored} + xattrs {xattr_bytes} + symlink targets {target_bytes}"
        ));
    }
    // One inode-equivalent per inode plus one per extra hard link.
    let extra_links: i64 = inodes
        .values()
        .filter(|i| i.kind != Some(FileKind::Directory))
        .map(|i| (i.nlink - 1).max(0))
        .sum();
    let used_inodes = inode::meta_get(conn, "used_inodes")?;
    if used_inodes != inodes.len() as i64 + extra_links {
        problems.push(format!(
            "meta used_inodes {used_inodes} != inodes {} + extra links {extra_links}",
            inodes.len()
        ));
    }
    problems.sort();
    Ok(problems)
}

impl Fs {
    /// Checks the database: SQLite `PRAGMA integrity_check`, link counts
    /// against entries (directories: 2 + subdirectories), `..` pointers,
    /// chunks against sizes, dangling entries, chunks, symlink targets and
    /// xattrs, orphans, and the usage counters against the rows. Reads one
    /// snapshot; takes time linear in the database size.
    ///
    /// Returns the problems found, one line each; empty means consistent.
    pub fn check(&self) -> Result<Vec<String>> {
        let r = self.inner.reader()?;
        let cs = self.inner.chunk_size as i64;
        r.snapshot(|c| check_in(c, cs))
    }
}
