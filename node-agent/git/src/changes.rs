//! What differs between `HEAD`, the index and the work tree: the facts
//! behind `status`, `commit -a`, `add -A`, `diff` and the checks before a
//! checkout.

use crate::Invocation;
use crate::error::Result;
use crate::index::{Entry, Index, mode_of, stat_of};
use crate::odb::HASH;
use crate::repo::Repo;
use crate::tree::Flat;
use crate::worktree::Scan;
use agentcomputer_fs::{Attr, FileKind};
use gix_hash::ObjectId;
use gix_object::Kind;
use std::collections::{BTreeMap, BTreeSet};

/// How one path changed between two sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Only on the newer side.
    Added,
    /// On both, different content or mode.
    Modified,
    /// Only on the older side.
    Deleted,
    /// A file became a symlink or the other way round.
    TypeChanged,
}

impl Change {
    /// The letter of `git status --short` and `diff --name-status`.
    pub(crate) fn letter(self) -> char {
        match self {
            Change::Added => 'A',
            Change::Modified => 'M',
            Change::Deleted => 'D',
            Change::TypeChanged => 'T',
        }
    }
}

/// The state of a repository.
pub(crate) struct Status {
    /// `HEAD` against the index, by path.
    pub(crate) staged: BTreeMap<Vec<u8>, Change>,
    /// Staged renames found among [`Status::staged`]: new path → old
    /// path. The old path is not in `staged` then.
    pub(crate) renames: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The index against the work tree, by path.
    pub(crate) unstaged: BTreeMap<Vec<u8>, Change>,
    /// Untracked files, by path.
    pub(crate) untracked: BTreeSet<Vec<u8>>,
    /// Paths with an unresolved conflict.
    pub(crate) conflicted: BTreeSet<Vec<u8>>,
    /// The work tree as walked.
    #[allow(dead_code)]
    pub(crate) scan: Scan,
    /// The index, with the stat data of unchanged files refreshed.
    pub(crate) index: Index,
    /// Whether [`Status::index`] differs from the file (worth saving).
    pub(crate) index_refreshed: bool,
}

/// The blob id of the work-tree file at `path` with attributes `a`.
pub(crate) fn hash_work_file(
    repo: &Repo,
    path: &[u8],
    a: &Attr,
    stop: &dyn Fn() -> bool,
) -> Result<ObjectId> {
    if a.kind == FileKind::RegularFile {
        return repo
            .odb
            .hash_file(a.ino, a.size, stop)
            .map_err(|e| e.at(&repo.work_path(path)));
    }
    let data = read_work_file(repo, path, a)?;
    gix_object::compute_hash(HASH, Kind::Blob, &data)
        .map_err(|e| crate::Error::fatal(e.to_string()))
}

/// Stores the work-tree file at `path` as a blob (streamed when large).
pub(crate) fn store_work_file(
    repo: &Repo,
    path: &[u8],
    a: &Attr,
    stop: &dyn Fn() -> bool,
) -> Result<ObjectId> {
    if a.kind == FileKind::RegularFile {
        return repo
            .odb
            .write_file(a.ino, a.size, stop)
            .map_err(|e| e.at(&repo.work_path(path)));
    }
    let data = read_work_file(repo, path, a)?;
    repo.odb.write(Kind::Blob, &data)
}

/// The content git stores for the work-tree file at `path`: a file's
/// bytes, or a symlink's target.
pub(crate) fn read_work_file(repo: &Repo, path: &[u8], a: &Attr) -> Result<Vec<u8>> {
    let engine_path = repo.work_path(path);
    if a.kind == FileKind::Symlink {
        repo.files.readlink(&engine_path)
    } else {
        repo.files.read_ino(a.ino).map_err(|e| e.at(&engine_path))
    }
}

/// Whether the stat data recorded in `e` still describes `a`, so its
/// content need not be read (git's `ie_match_stat`, with the racy-git
/// rule: a file changed no earlier than the index was written is read).
fn stat_clean(e: &Entry, a: &Attr, written: Option<agentcomputer_fs::Timespec>) -> bool {
    let s = stat_of(a);
    let same = s.size == e.stat.size
        && s.mtime == e.stat.mtime
        && s.ino == e.stat.ino
        && s.ctime == e.stat.ctime;
    let racy = written.is_some_and(|w| (a.mtime.sec, a.mtime.nsec) >= (w.sec, w.nsec));
    same && !racy
}

/// How the work tree's `a` differs from entry `e`, reading the content
/// only when the stat data does not settle it; `None` when it does not.
/// Refreshes `e`'s stat data when the content is unchanged.
pub(crate) fn work_change(
    repo: &Repo,
    e: &mut Entry,
    a: &Attr,
    written: Option<agentcomputer_fs::Timespec>,
    stop: &dyn Fn() -> bool,
) -> Result<Option<Change>> {
    let Some(mode) = mode_of(a) else {
        return Ok(Some(Change::Deleted));
    };
    if (mode == crate::index::MODE_LINK) != (e.mode == crate::index::MODE_LINK) {
        return Ok(Some(Change::TypeChanged));
    }
    if stat_clean(e, a, written) && mode == e.mode {
        return Ok(None);
    }
    // A different size settles it without reading.
    if a.kind == FileKind::RegularFile
        && e.stat.mtime.secs != 0
        && u64::from(e.stat.size) != a.size
        && a.size < u64::from(u32::MAX)
    {
        return Ok(Some(Change::Modified));
    }
    if hash_work_file(repo, &e.path, a, stop)? != e.id {
        return Ok(Some(Change::Modified));
    }
    if mode != e.mode {
        return Ok(Some(Change::Modified));
    }
    e.stat = stat_of(a);
    Ok(None)
}

/// Compares `head` with the index.
pub(crate) fn staged(head: &Flat, index: &Index) -> BTreeMap<Vec<u8>, Change> {
    let mut out = BTreeMap::new();
    for e in index.entries.values().filter(|e| e.stage == 0) {
        match head.get(&e.path) {
            None => {
                out.insert(e.path.clone(), Change::Added);
            }
            Some((mode, id)) if *id != e.id || *mode != e.mode => {
                let link = |m: u32| m == crate::index::MODE_LINK;
                let c = if link(*mode) != link(e.mode) {
                    Change::TypeChanged
                } else {
                    Change::Modified
                };
                out.insert(e.path.clone(), c);
            }
            Some(_) => {}
        }
    }
    for path in head.keys() {
        if !index.entries.contains_key(&(path.clone(), 0)) && !index.conflicted(path) {
            out.insert(path.clone(), Change::Deleted);
        }
    }
    out
}

/// Pairs each deleted path with an added path of the same content and
/// mode (git's exact rename detection; renames with edits are left as a
/// deletion and an addition). Returns new path → old path and takes the
/// old paths out of `changes`.
pub(crate) fn exact_renames(
    changes: &mut BTreeMap<Vec<u8>, Change>,
    head: &Flat,
    index: &Index,
) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut deleted: BTreeMap<(u32, ObjectId), Vec<Vec<u8>>> = BTreeMap::new();
    for (path, c) in changes.iter() {
        if *c == Change::Deleted
            && let Some(v) = head.get(path)
        {
            deleted.entry(*v).or_default().push(path.clone());
        }
    }
    let mut renames = BTreeMap::new();
    for (path, c) in changes.iter() {
        if *c != Change::Added {
            continue;
        }
        let Some(e) = index.get(path) else { continue };
        if let Some(olds) = deleted.get_mut(&(e.mode, e.id))
            && !olds.is_empty()
        {
            renames.insert(path.clone(), olds.remove(0));
        }
    }
    for old in renames.values() {
        changes.remove(old);
    }
    renames
}

/// The flat tree of `HEAD`, empty on an unborn branch.
pub(crate) fn head_flat(repo: &Repo) -> Result<Flat> {
    match repo.refs.resolve("HEAD")? {
        Some(id) => crate::tree::flatten(&repo.odb, &crate::tree::of_commit(&repo.odb, &id)?),
        None => Ok(Flat::new()),
    }
}

/// Everything `git status` needs.
pub(crate) fn status(inv: &Invocation, repo: &Repo) -> Result<Status> {
    let mut index = Index::load(&repo.files, &repo.git_dir)?;
    let head = head_flat(repo)?;
    let mut staged = staged(&head, &index);
    let renames = exact_renames(&mut staged, &head, &index);
    let scan = crate::worktree::scan(&repo.files, &repo.top, &repo.git_dir, b"", inv.stop)?;
    let mut unstaged = BTreeMap::new();
    let mut refreshed = false;
    let written = index.written;
    let conflicted: BTreeSet<Vec<u8>> = index.conflicts().into_iter().collect();
    for e in index.entries.values_mut() {
        if e.stage != 0 {
            continue;
        }
        inv.check_stop()?;
        let attr = match scan.files.get(&e.path) {
            Some(a) => Some(a.clone()),
            // Tracked but in an ignored directory, or gone.
            None => repo
                .files
                .lstat(&repo.work_path(&e.path))?
                .filter(|a| mode_of(a).is_some()),
        };
        let Some(a) = attr else {
            unstaged.insert(e.path.clone(), Change::Deleted);
            continue;
        };
        let before = e.stat;
        if let Some(c) = work_change(repo, e, &a, written, inv.stop)? {
            unstaged.insert(e.path.clone(), c);
        }
        refreshed |= e.stat != before;
    }
    let untracked = scan
        .files
        .keys()
        .filter(|p| !index.entries.contains_key(&((*p).clone(), 0)) && !index.conflicted(p))
        .cloned()
        .collect();
    Ok(Status {
        staged,
        renames,
        unstaged,
        untracked,
        conflicted,
        scan,
        index,
        index_refreshed: refreshed,
    })
}

/// `untracked` as `git status` lists them by default: a directory that
/// holds no tracked file is shown once, as `dir/`.
pub(crate) fn collapse_untracked(untracked: &BTreeSet<Vec<u8>>, index: &Index) -> Vec<Vec<u8>> {
    let mut tracked_dirs: BTreeSet<&[u8]> = BTreeSet::new();
    for (path, _) in index.entries.keys() {
        let mut end = path.len();
        while let Some(i) = path[..end].iter().rposition(|b| *b == b'/') {
            tracked_dirs.insert(&path[..i]);
            end = i;
        }
    }
    let mut out: Vec<Vec<u8>> = Vec::new();
    for path in untracked {
        let mut shown = path.clone();
        for (i, b) in path.iter().enumerate() {
            if *b == b'/' && !tracked_dirs.contains(&path[..i]) {
                shown = path[..=i].to_vec();
                break;
            }
        }
        if out.last() != Some(&shown) {
            out.push(shown);
        }
    }
    out
}
