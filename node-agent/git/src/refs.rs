//! References: `HEAD`, loose refs under `refs/`, and `packed-refs`
//! (gitrepository-layout(5)). Updates go through `.lock` files like real
//! git's; a ref deleted while packed is also removed from `packed-refs`.

use crate::error::{Error, Result};
use crate::files::{Files, join};
use gix_hash::ObjectId;
use std::collections::BTreeMap;

/// Symbolic references followed before giving up (git's `MAXDEPTH`).
const MAX_DEPTH: usize = 5;

/// What a reference file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// An object id.
    Direct(ObjectId),
    /// Another reference's full name (`ref: refs/heads/main`).
    Symbolic(String),
}

/// The references of one repository.
pub struct Refs {
    files: Files,
    /// The `.git` directory.
    git_dir: Vec<u8>,
}

/// Whether `name` is a valid branch or tag name (the rules of
/// git-check-ref-format(1) that matter for names typed by hand).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('-')
        && !name.starts_with('/')
        && !name.ends_with('/')
        && !name.ends_with('.')
        && !name.ends_with(".lock")
        && !name.contains("..")
        && !name.contains("//")
        && !name.contains("@{")
        && name != "@"
        && !name.split('/').any(|c| c.starts_with('.'))
        && !name
            .bytes()
            .any(|b| b < 0x20 || b == 0x7f || b" ~^:?*[\\".contains(&b))
}

impl Refs {
    /// The references in `git_dir`.
    pub fn new(files: Files, git_dir: Vec<u8>) -> Self {
        Self { files, git_dir }
    }

    /// What `name` (`HEAD`, `refs/heads/main`) holds; `None` if it does
    /// not exist.
    pub fn read(&self, name: &str) -> Result<Option<Target>> {
        if let Some(bytes) = self.files.read(&join(&self.git_dir, name.as_bytes()))? {
            return parse(name, &bytes).map(Some);
        }
        Ok(self.packed()?.remove(name).map(Target::Direct))
    }

    /// The object `name` finally points at, following symbolic refs;
    /// `None` for a missing ref or an unborn branch.
    pub fn resolve(&self, name: &str) -> Result<Option<ObjectId>> {
        let mut name = name.to_string();
        for _ in 0..MAX_DEPTH {
            match self.read(&name)? {
                None => return Ok(None),
                Some(Target::Direct(id)) => return Ok(Some(id)),
                Some(Target::Symbolic(next)) => name = next,
            }
        }
        Err(Error::fatal(format!(
            "reference {name} is a symbolic ref loop"
        )))
    }

    /// The full ref name `HEAD` points at (`refs/heads/main`), or `None`
    /// when `HEAD` is detached.
    pub fn head_branch(&self) -> Result<Option<String>> {
        match self.read("HEAD")? {
            Some(Target::Symbolic(name)) => Ok(Some(name)),
            Some(Target::Direct(_)) => Ok(None),
            None => Err(Error::Corrupt("HEAD is missing".into())),
        }
    }

    /// Points `name` at `id`.
    pub fn set(&self, name: &str, id: ObjectId) -> Result<()> {
        let line = format!("{}\n", id.to_hex());
        self.files
            .replace_locked(&join(&self.git_dir, name.as_bytes()), line.as_bytes())
    }

    /// Makes `name` a symbolic ref to `target` (`HEAD` → `refs/heads/x`).
    pub fn set_symbolic(&self, name: &str, target: &str) -> Result<()> {
        let line = format!("ref: {target}\n");
        self.files
            .replace_locked(&join(&self.git_dir, name.as_bytes()), line.as_bytes())
    }

    /// Points the branch `HEAD` names (or `HEAD` itself when detached) at
    /// `id`: what a commit, a merge or a reset moves.
    pub fn set_head_target(&self, id: ObjectId) -> Result<()> {
        match self.head_branch()? {
            Some(branch) => self.set(&branch, id),
            None => self.set("HEAD", id),
        }
    }

    /// Removes `name`, loose and packed. Missing is not an error.
    pub fn delete(&self, name: &str) -> Result<()> {
        self.files
            .remove_file(&join(&self.git_dir, name.as_bytes()))?;
        let packed_path = join(&self.git_dir, b"packed-refs");
        let Some(bytes) = self.files.read(&packed_path)? else {
            return Ok(());
        };
        let mut kept = Vec::with_capacity(bytes.len());
        let mut removed = false;
        let mut skip_peeled = false;
        for line in bytes.split_inclusive(|b| *b == b'\n') {
            if line.starts_with(b"^") {
                if !skip_peeled {
                    kept.extend_from_slice(line);
                }
                continue;
            }
            skip_peeled = false;
            let trimmed = line.strip_suffix(b"\n").unwrap_or(line);
            if trimmed.len() > 41 && &trimmed[41..] == name.as_bytes() {
                removed = true;
                skip_peeled = true;
                continue;
            }
            kept.extend_from_slice(line);
        }
        if removed {
            self.files.replace_locked(&packed_path, &kept)?;
        }
        Ok(())
    }

    /// Every ref under `prefix` (`refs/heads/`), loose over packed, by
    /// full name, with the object each resolves to.
    pub fn list(&self, prefix: &str) -> Result<BTreeMap<String, ObjectId>> {
        let mut out: BTreeMap<String, ObjectId> = self
            .packed()?
            .into_iter()
            .filter(|(n, _)| n.starts_with(prefix))
            .collect();
        let base = prefix.trim_end_matches('/');
        let mut stack = vec![base.to_string()];
        while let Some(dir) = stack.pop() {
            for (name, attr) in self.files.list(&join(&self.git_dir, dir.as_bytes()))? {
                let Ok(name) = String::from_utf8(name) else {
                    continue;
                };
                let full = format!("{dir}/{name}");
                if attr.kind == agentcomputer_fs::FileKind::Directory {
                    stack.push(full);
                } else if !name.ends_with(".lock")
                    && full.starts_with(prefix)
                    && let Some(id) = self.resolve(&full)?
                {
                    out.insert(full, id);
                }
            }
        }
        Ok(out)
    }

    /// The refs in `packed-refs`, by name.
    fn packed(&self) -> Result<BTreeMap<String, ObjectId>> {
        let mut out = BTreeMap::new();
        let Some(bytes) = self.files.read(&join(&self.git_dir, b"packed-refs"))? else {
            return Ok(out);
        };
        for line in bytes.split(|b| *b == b'\n') {
            if line.len() < 42 || line[0] == b'#' || line[0] == b'^' {
                continue;
            }
            let (Ok(id), Ok(name)) = (
                ObjectId::from_hex(&line[..40]),
                std::str::from_utf8(&line[41..]),
            ) else {
                return Err(Error::Corrupt("unexpected line in packed-refs".into()));
            };
            out.insert(name.to_string(), id);
        }
        Ok(out)
    }
}

fn parse(name: &str, bytes: &[u8]) -> Result<Target> {
    let text = std::str::from_utf8(bytes).map_err(|_| Error::Corrupt(format!("bad ref {name}")))?;
    let text = text.trim_end();
    if let Some(target) = text.strip_prefix("ref:") {
        let target = target.trim();
        // A symbolic ref names a ref under refs/ (or HEAD): a target with
        // `..` or outside refs/ would read or move files elsewhere.
        let inside = target
            .strip_prefix("refs/")
            .is_some_and(|rest| rest.split('/').all(valid_name));
        if !inside && target != "HEAD" {
            return Err(Error::Corrupt(format!("bad symbolic ref {name}: {target}")));
        }
        return Ok(Target::Symbolic(target.to_string()));
    }
    ObjectId::from_hex(text.as_bytes())
        .map(Target::Direct)
        .map_err(|_| Error::Corrupt(format!("bad ref {name}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ref_names_follow_check_ref_format() {
        for ok in ["main", "feature/x", "v1.0", "a-b_c"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in [
            "", "-x", "a..b", "a b", "x.lock", "a/.b", "a:b", "x/", "@", "a@{1}", "a~1", "a^",
        ] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }
}
