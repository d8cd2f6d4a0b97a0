//! git configuration, read and written with gitoxide's `gix-config` (the
//! git-config(1) file format, comments and layout kept on rewrite).
//!
//! Two files count: the repository's `.git/config` and the computer's
//! global file, `/.gitconfig` at the engine root (`/workspace/.gitconfig`
//! in the shell): the in-process runtimes have no home directory that
//! outlives an exec, so the one file every runtime sees stands for
//! `~/.gitconfig`. The repository's value wins, as in git.

use crate::error::{Error, Result};
use crate::files::{FILE_PERM, Files};
use bstr::ByteSlice;

/// The global file's engine path.
pub const GLOBAL: &[u8] = b"/.gitconfig";

/// One config file, parsed.
pub struct ConfigFile {
    file: gix_config::File,
    path: Vec<u8>,
}

impl ConfigFile {
    /// Parses the file at `path`; an empty config if missing.
    pub fn load(files: &Files, path: &[u8]) -> Result<Self> {
        let mut bytes = files.read(path)?.unwrap_or_default();
        let file = gix_config::File::from_bytes_owned(
            &mut bytes,
            gix_config::file::Metadata::api(),
            Default::default(),
        )
        .map_err(|e| Error::fatal(format!("bad config file {}: {e}", path.as_bstr())))?;
        Ok(Self {
            file,
            path: path.to_vec(),
        })
    }

    /// The value of `key` (`user.name`, `branch.main.remote`).
    pub fn get(&self, key: &str) -> Option<String> {
        self.file.string(key).map(|v| v.to_str_lossy().into_owned())
    }

    /// Every value of `key`, in file order.
    pub fn get_all(&self, key: &str) -> Vec<String> {
        self.file
            .strings(key)
            .unwrap_or_default()
            .into_iter()
            .map(|v| v.to_str_lossy().into_owned())
            .collect()
    }

    /// Sets `key` to `value`, replacing its last value.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        check_key(key)?;
        self.file
            .set_raw_value(key, value)
            .map(|_| ())
            .map_err(|e| Error::fatal(format!("cannot set {key}: {e}")))
    }

    /// Removes `key`; returns whether it was there.
    pub fn unset(&mut self, key: &str) -> Result<bool> {
        check_key(key)?;
        let (section, sub, name) = split_key(key);
        let Ok(mut s) = self
            .file
            .section_mut(section, sub.map(|s| s.as_bytes().as_bstr()))
        else {
            return Ok(false);
        };
        Ok(s.remove(name).is_some())
    }

    /// Every `key=value` pair, in file order (for `git config --list`).
    pub fn list(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for section in self.file.sections() {
            let header = section.header();
            let prefix = match header.subsection_name() {
                Some(sub) => format!("{}.{}", header.name().to_str_lossy(), sub.to_str_lossy()),
                None => header.name().to_str_lossy().into_owned(),
            };
            let mut names: Vec<String> = Vec::new();
            for name in section.value_names() {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
            for name in names {
                for v in section.values(&name) {
                    out.push((
                        format!("{}.{}", prefix.to_lowercase(), name.to_lowercase()),
                        v.to_str_lossy().into_owned(),
                    ));
                }
            }
        }
        out
    }

    /// Writes the file back.
    pub fn save(&self, files: &Files) -> Result<()> {
        let text = self.file.to_bstring();
        files.write(&self.path, &text, FILE_PERM)
    }
}

/// The repository's config over the global one.
pub struct Config {
    /// `.git/config`.
    pub local: ConfigFile,
    /// [`GLOBAL`].
    pub global: ConfigFile,
}

impl Config {
    /// The value of `key`, repository first.
    pub fn get(&self, key: &str) -> Option<String> {
        self.local.get(key).or_else(|| self.global.get(key))
    }
}

fn split_key(key: &str) -> (&str, Option<&str>, &str) {
    let first = key.find('.').unwrap_or(0);
    let last = key.rfind('.').unwrap_or(0);
    let section = &key[..first];
    let name = &key[last + 1..];
    let sub = (last > first).then(|| &key[first + 1..last]);
    (section, sub, name)
}

/// git's "key does not contain a section" and "invalid key" checks.
fn check_key(key: &str) -> Result<()> {
    let (section, _, name) = split_key(key);
    if !key.contains('.') || section.is_empty() {
        return Err(Error::Failed {
            code: 2,
            message: format!("error: key does not contain a section: {key}"),
        });
    }
    if name.is_empty()
        || !name.starts_with(|c: char| c.is_ascii_alphabetic())
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        return Err(Error::Failed {
            code: 1,
            message: format!("error: invalid key: {key}"),
        });
    }
    Ok(())
}
