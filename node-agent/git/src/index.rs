//! The index (`.git/index`, the staging area), read and written in git's
//! own format by gitoxide's `gix-index`, so that real git 2.39+ and this
//! code share it (versions 2–4 read; version 2 written, as git does by
//! default).
//!
//! In memory it is a map from (path, stage) to entry, which keeps git's
//! order (paths compared as bytes, then stage).

use crate::error::{Error, Result};
use crate::files::{Files, join};
use crate::odb::HASH;
use agentcomputer_fs::{Attr, FileKind, Timespec};
use bstr::ByteSlice;
use gix_hash::ObjectId;
use gix_index::entry::{Flags, Mode, Stage, Stat};
use std::collections::BTreeMap;

/// Tree-entry mode of a regular file.
pub const MODE_FILE: u32 = 0o100644;
/// Tree-entry mode of an executable file.
pub const MODE_EXEC: u32 = 0o100755;
/// Tree-entry mode of a symlink.
pub const MODE_LINK: u32 = 0o120000;
/// Tree-entry mode of a submodule (gitlink).
pub const MODE_GITLINK: u32 = 0o160000;
/// Tree-entry mode of a directory.
pub const MODE_TREE: u32 = 0o040000;

/// One staged path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Path relative to the work tree, `/`-separated.
    pub path: Vec<u8>,
    /// The blob (or commit, for a gitlink).
    pub id: ObjectId,
    /// One of the `MODE_*` constants.
    pub mode: u32,
    /// 0, or 1–3 (base, ours, theirs) during a conflicted merge.
    pub stage: u8,
    /// The file's stat data when it was staged, to skip rehashing.
    pub stat: Stat,
}

/// The staging area of one repository.
#[derive(Debug, Default)]
pub struct Index {
    /// Entries by (path, stage).
    pub entries: BTreeMap<(Vec<u8>, u8), Entry>,
    /// When the index file was last written: entries whose file changed
    /// in that same instant or later are "racily clean" (git
    /// Documentation/technical/racy-git.txt) and are compared by content.
    pub written: Option<Timespec>,
}

/// The mode git records for a file with attributes `a`.
pub fn mode_of(a: &Attr) -> Option<u32> {
    match a.kind {
        FileKind::RegularFile if a.perm & 0o100 != 0 => Some(MODE_EXEC),
        FileKind::RegularFile => Some(MODE_FILE),
        FileKind::Symlink => Some(MODE_LINK),
        _ => None,
    }
}

/// The stat data git keeps for a file with attributes `a` (times and
/// sizes truncated to 32 bits as in the format).
pub fn stat_of(a: &Attr) -> Stat {
    let t = |t: Timespec| gix_index::entry::stat::Time {
        secs: t.sec as u32,
        nsecs: t.nsec,
    };
    Stat {
        mtime: t(a.mtime),
        ctime: t(a.ctime),
        dev: 0,
        ino: a.ino as u32,
        uid: a.uid,
        gid: a.gid,
        size: a.size as u32,
    }
}

impl Index {
    /// Reads `.git/index` in `git_dir`; empty when missing.
    pub fn load(files: &Files, git_dir: &[u8]) -> Result<Self> {
        let path = join(git_dir, b"index");
        let Some(attr) = files.lstat(&path)? else {
            return Ok(Self::default());
        };
        let bytes = files.read_ino(attr.ino).map_err(|e| e.at(&path))?;
        let stamp = filetime::FileTime::from_unix_time(attr.mtime.sec, attr.mtime.nsec);
        let (state, _) = gix_index::State::from_bytes(&bytes, stamp, HASH, Default::default())
            .map_err(|e| Error::Corrupt(format!("index file corrupt: {e}")))?;
        let mut entries = BTreeMap::new();
        for e in state.entries() {
            let path = e.path(&state).to_vec();
            let stage = e.flags.stage_raw() as u8;
            entries.insert(
                (path.clone(), stage),
                Entry {
                    path,
                    id: e.id,
                    mode: e.mode.bits(),
                    stage,
                    stat: e.stat,
                },
            );
        }
        Ok(Self {
            entries,
            written: Some(attr.mtime),
        })
    }

    /// Writes the index to `git_dir` through `index.lock`.
    pub fn save(&self, files: &Files, git_dir: &[u8]) -> Result<()> {
        let mut state = gix_index::State::new(HASH);
        for e in self.entries.values() {
            let stage = match e.stage {
                1 => Stage::Base,
                2 => Stage::Ours,
                3 => Stage::Theirs,
                _ => Stage::Unconflicted,
            };
            let mode = Mode::from_bits(e.mode)
                .ok_or_else(|| Error::Corrupt(format!("bad mode {:o}", e.mode)))?;
            state.dangerously_push_entry(
                e.stat,
                e.id,
                Flags::from_stage(stage),
                mode,
                e.path.as_bstr(),
            );
        }
        let mut out = Vec::with_capacity(self.entries.len() * 80 + 64);
        let options = gix_index::write::Options {
            extensions: gix_index::write::Extensions::None,
            skip_hash: false,
        };
        state
            .write_to(&mut out, options)
            .map_err(|e| Error::fatal(format!("unable to write new index file: {e}")))?;
        // The trailing checksum over everything before it (gitformat-index(5)).
        let mut hasher = gix_hash::hasher(HASH);
        hasher.update(&out);
        let sum = hasher
            .try_finalize()
            .map_err(|e| Error::fatal(format!("unable to write new index file: {e}")))?;
        out.extend_from_slice(sum.as_slice());
        files.replace_locked(&join(git_dir, b"index"), &out)
    }

    /// The stage-0 entry for `path`.
    pub fn get(&self, path: &[u8]) -> Option<&Entry> {
        self.entries.get(&(path.to_vec(), 0))
    }

    /// Whether `path` has entries of stages 1–3 (an unresolved conflict).
    pub fn conflicted(&self, path: &[u8]) -> bool {
        (1..=3).any(|s| self.entries.contains_key(&(path.to_vec(), s)))
    }

    /// Every path with a conflict, once each.
    pub fn conflicts(&self) -> Vec<Vec<u8>> {
        let mut out: Vec<Vec<u8>> = Vec::new();
        for (path, stage) in self.entries.keys() {
            if *stage > 0 && out.last() != Some(path) {
                out.push(path.clone());
            }
        }
        out
    }

    /// Stages `entry` at stage 0, dropping the path's conflict stages.
    pub fn put(&mut self, entry: Entry) {
        self.remove(&entry.path);
        self.entries.insert((entry.path.clone(), 0), entry);
    }

    /// Removes every stage of `path`; returns whether anything was there.
    pub fn remove(&mut self, path: &[u8]) -> bool {
        let mut any = false;
        for s in 0..=3 {
            any |= self.entries.remove(&(path.to_vec(), s)).is_some();
        }
        any
    }

    /// The stage-0 paths under directory `dir` (`a/b`), or `dir` itself
    /// when it is a file; `dir` empty means every path.
    pub fn paths_under(&self, dir: &[u8]) -> Vec<Vec<u8>> {
        self.entries
            .keys()
            .filter(|(p, _)| crate::paths::is_under(p, dir))
            .map(|(p, _)| p.clone())
            .fold(Vec::new(), |mut v: Vec<Vec<u8>>, p| {
                if v.last() != Some(&p) {
                    v.push(p);
                }
                v
            })
    }
}
