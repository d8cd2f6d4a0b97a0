//! Extended attributes (`xattr(7)`): raw names and values per inode.

use rusqlite::{OptionalExtension, params};

use crate::{Errno, Error, Fs, Ino, Result, inode};

/// Longest xattr name, in bytes (Linux `XATTR_NAME_MAX`).
pub const XATTR_NAME_MAX: usize = 255;
/// Largest xattr value, in bytes (Linux `XATTR_SIZE_MAX`).
pub const XATTR_SIZE_MAX: usize = 65536;

/// Flags of `setxattr(2)`: `create` is `XATTR_CREATE` (fail with `EEXIST`
/// if present), `replace` is `XATTR_REPLACE` (fail with `ENODATA` if
/// absent). Both unset: create or replace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct XattrFlags {
    /// `XATTR_CREATE`: fail with `EEXIST` if the attribute exists.
    pub create: bool,
    /// `XATTR_REPLACE`: fail with `ENODATA` if it does not.
    pub replace: bool,
}

/// Namespaces a name must start with, as on ext4 (`xattr(7)`): `system.`
/// names (POSIX ACLs) are the kernel's business, never stored here.
const NAMESPACES: [&[u8]; 3] = [b"user.", b"trusted.", b"security."];

/// `ERANGE` for an empty name or one over [`XATTR_NAME_MAX`] bytes, as
/// Linux.
fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > XATTR_NAME_MAX {
        return Err(Errno::ERANGE.into());
    }
    Ok(())
}

/// As ext4 answers: `ENOTSUP` for a name outside [`NAMESPACES`], `EINVAL`
/// for a bare prefix such as `user.`, so tools such as
/// `cp --preserve=xattr` see on the mount what they see on a local disk.
/// Only new names are held to it: names stored before the check existed
/// stay readable and removable.
fn check_namespace(name: &[u8]) -> Result<()> {
    match NAMESPACES.iter().find(|ns| name.starts_with(ns)) {
        None => Err(Errno::ENOTSUP.into()),
        Some(ns) if name.len() == ns.len() => Err(Errno::EINVAL.into()),
        Some(_) => Ok(()),
    }
}

/// The error for a name that is not stored: the namespace's error if the
/// name could never be stored, else `ENODATA`.
fn absent(name: &[u8]) -> Error {
    match check_namespace(name) {
        Err(e) => e,
        Ok(()) => Errno::ENODATA.into(),
    }
}

impl Fs {
    /// The value of attribute `name` of inode `ino`.
    ///
    /// Errors: `ENODATA` if absent, `ENOENT` if no such inode, `ERANGE`
    /// for a bad name, `ENOTSUP`/`EINVAL` for a name outside the `user.`,
    /// `trusted.` and `security.` namespaces that is not stored.
    pub fn getxattr(&self, ino: Ino, name: &[u8]) -> Result<Vec<u8>> {
        check_name(name)?;
        let r = self.inner.reader()?;
        r.snapshot(|c| {
            let v: Option<Vec<u8>> = c
                .prepare_cached("SELECT value FROM xattrs WHERE ino = ?1 AND name = ?2")?
                .query_row(params![ino as i64, name], |r| r.get(0))
                .optional()?;
            match v {
                Some(v) => Ok(v),
                None => {
                    inode::get(c, ino)?;
                    Err(absent(name))
                }
            }
        })
    }

    /// Sets attribute `name` of inode `ino` to `value`; sets ctime. The
    /// name and value bytes count against the byte quota.
    ///
    /// Errors: `EEXIST` (`create` and present), `ENODATA` (`replace` and
    /// absent), `E2BIG` for a value over [`XATTR_SIZE_MAX`], `ERANGE` for a
    /// bad name, `ENOTSUP` outside the `user.`, `trusted.` and `security.`
    /// namespaces (`EINVAL` for a bare prefix), `ENOSPC` past the quota,
    /// `ENOENT`.
    pub fn setxattr(&self, ino: Ino, name: &[u8], value: &[u8], flags: XattrFlags) -> Result<()> {
        check_name(name)?;
        check_namespace(name)?;
        if value.len() > XATTR_SIZE_MAX {
            return Err(Errno::E2BIG.into());
        }
        let mut t = self.begin()?;
        inode::get(t.conn(), ino)?;
        let old_len: Option<i64> = t
            .conn()
            .prepare_cached("SELECT length(value) FROM xattrs WHERE ino = ?1 AND name = ?2")?
            .query_row(params![ino as i64, name], |r| r.get(0))
            .optional()?;
        if flags.create && old_len.is_some() {
            return Err(Errno::EEXIST.into());
        }
        if flags.replace && old_len.is_none() {
            return Err(Errno::ENODATA.into());
        }
        // Names and values count against the byte quota.
        let delta = match old_len {
            Some(old) => value.len() as i64 - old,
            None => (name.len() + value.len()) as i64,
        };
        t.check_byte_quota(delta)?;
        t.conn()
            .prepare_cached(
                "INSERT INTO xattrs (ino, name, value) VALUES (?1, ?2, ?3)
                 ON CONFLICT (ino, name) DO UPDATE SET value = excluded.value",
            )?
            .execute(params![ino as i64, name, value])?;
        inode::meta_add(t.conn(), "used_bytes", delta)?;
        inode::add_nlink(t.conn(), ino, 0, t.now)?;
        t.changed_inode(ino);
        t.commit()
    }

    /// The names of all attributes of inode `ino`, sorted bytewise.
    /// Errors: `ENOENT`.
    pub fn listxattr(&self, ino: Ino) -> Result<Vec<Vec<u8>>> {
        let r = self.inner.reader()?;
        r.snapshot(|c| {
            inode::get(c, ino)?;
            let mut st =
                c.prepare_cached("SELECT name FROM xattrs WHERE ino = ?1 ORDER BY name")?;
            let names = st
                .query_map([ino as i64], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<Vec<u8>>>>()?;
            Ok(names)
        })
    }

    /// Removes attribute `name` of inode `ino`; sets ctime.
    /// Errors: `ENODATA` if absent, `ENOENT`, `ERANGE`, `ENOTSUP`/`EINVAL`
    /// as [`Fs::getxattr`].
    pub fn removexattr(&self, ino: Ino, name: &[u8]) -> Result<()> {
        check_name(name)?;
        let mut t = self.begin()?;
        inode::get(t.conn(), ino)?;
        let old_len: i64 = t
            .conn()
            .prepare_cached(
                "DELETE FROM xattrs WHERE ino = ?1 AND name = ?2 RETURNING length(value)",
            )?
            .query_row(params![ino as i64, name], |r| r.get(0))
            .optional()?
            .ok_or_else(|| absent(name))?;
        inode::meta_add(t.conn(), "used_bytes", -(name.len() as i64 + old_len))?;
        inode::add_nlink(t.conn(), ino, 0, t.now)?;
        t.changed_inode(ino);
        t.commit()
    }
}
