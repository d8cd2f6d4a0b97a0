//! The database schema and its migrations.
//!
//! The schema version lives in `meta` under `schema_version`. [`MIGRATIONS`]
//! is an ordered list: step `i` moves a database from version `i` to `i + 1`.
//! Opening a database applies the missing steps, each in its own
//! transaction together with the version bump, so a crash mid-migration
//! leaves the previous version intact.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};

use crate::{Errno, Result};

/// One migration step: SQL run in the step's transaction.
pub(crate) struct Migration {
    pub(crate) sql: &'static str,
}

/// Every step since version 0 (the empty file), in order.
pub(crate) const MIGRATIONS: &[Migration] = &[
    // 0 -> 1: the core tables.
    Migration {
        sql: "
        CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
        -- mode holds the S_IFMT and permission bits; times are ns since the epoch;
        -- stored = bytes held in chunks; parent and next_cookie serve directories.
        CREATE TABLE inodes (
            ino INTEGER PRIMARY KEY AUTOINCREMENT,
            mode INTEGER NOT NULL,
            uid INTEGER NOT NULL,
            gid INTEGER NOT NULL,
            nlink INTEGER NOT NULL,
            size INTEGER NOT NULL DEFAULT 0,
            stored INTEGER NOT NULL DEFAULT 0,
            atime INTEGER NOT NULL,
            mtime INTEGER NOT NULL,
            ctime INTEGER NOT NULL,
            rdev INTEGER NOT NULL DEFAULT 0,
            parent INTEGER NOT NULL DEFAULT 0,
            next_cookie INTEGER NOT NULL DEFAULT 3
        );
        CREATE TABLE dirents (
            parent INTEGER NOT NULL,
            name BLOB NOT NULL,
            ino INTEGER NOT NULL,
            cookie INTEGER NOT NULL,
            PRIMARY KEY (parent, name)
        ) WITHOUT ROWID;
        CREATE UNIQUE INDEX dirents_by_cookie ON dirents (parent, cookie);
        CREATE TABLE chunks (
            ino INTEGER NOT NULL,
            idx INTEGER NOT NULL,
            data BLOB NOT NULL,
            PRIMARY KEY (ino, idx)
        ) WITHOUT ROWID;
        CREATE TABLE symlinks (ino INTEGER PRIMARY KEY, target BLOB NOT NULL);
        CREATE TABLE xattrs (
            ino INTEGER NOT NULL,
            name BLOB NOT NULL,
            value BLOB NOT NULL,
            PRIMARY KEY (ino, name)
        ) WITHOUT ROWID;
        ",
    },
    // 1 -> 2: inodes with no links that were still open, kept until the last
    // handle closes (or purged at the next open after a crash).
    Migration {
        sql: "CREATE TABLE orphans (ino INTEGER PRIMARY KEY);",
    },
    // 2 -> 3: chunks become a rowid table with an index on (ino, idx). In a
    // WITHOUT ROWID table the whole row is the b-tree key, so every key
    // comparison against a chunk that spills to overflow pages first copies
    // the entire blob (sqlite3BtreeIndexMoveto -> accessPayload); SQLite's
    // docs advise rowid tables for rows over ~1/20 of a page ("The
    // WITHOUT ROWID Optimization", section 4). Measured in engine_bench:
    // 64 MiB overwrite 741 -> 1,550 MB/s, read 1,000-1,330 -> 2,300-2,450
    // MB/s, new data 178 -> 212-252 MB/s (docs/engine.md). The copy runs
    // once, in the step's transaction.
    Migration {
        sql: "
        CREATE TABLE chunks_v3 (
            ino INTEGER NOT NULL,
            idx INTEGER NOT NULL,
            data BLOB NOT NULL,
            PRIMARY KEY (ino, idx)
        );
        INSERT INTO chunks_v3 (ino, idx, data) SELECT ino, idx, data FROM chunks ORDER BY ino, idx;
        DROP TABLE chunks;
        ALTER TABLE chunks_v3 RENAME TO chunks;
        ",
    },
    // 3 -> 4: the byte quota also counts xattrs (name and value bytes) and
    // symlink targets, so neither can grow a computer past its quota on
    // the host's disk. The counter takes in what is already stored.
    Migration {
        sql: "
        UPDATE meta SET value = value
            + (SELECT COALESCE(SUM(length(name) + length(value)), 0) FROM xattrs)
            + (SELECT COALESCE(SUM(length(target)), 0) FROM symlinks)
        WHERE key = 'used_bytes';
        ",
    },
    // 4 -> 5: every hard link past an inode's first name is one more
    // inode-equivalent in the inode quota (`Limits::inode_limit`), so names
    // cannot grow a computer's database without bound. The counter takes in
    // the links already made. The same step turns on incremental
    // auto-vacuum (see `rebuild_for_auto_vacuum`, run before the steps).
    Migration {
        sql: "
        UPDATE meta SET value = value
            + (SELECT COALESCE(SUM(nlink - 1), 0) FROM inodes
               WHERE nlink > 1 AND (mode & 61440) != 16384)
        WHERE key = 'used_inodes';
        ",
    },
    // 5 -> 6: the `RENAME_EXCHANGE` requests applied last, by the FUSE
    // request id that asked for them (`Fs::exchange_once`). A server that
    // takes a live connection over gets the dead server's unanswered
    // requests again (`FUSE_NOTIFY_RESEND`); an exchange, unlike every
    // other request, leaves no trace that tells an applied one from a new
    // one, so the record is kept in the same transaction as the swap.
    Migration {
        sql: "
        CREATE TABLE applied_exchanges (
            request INTEGER NOT NULL,
            parent INTEGER NOT NULL,
            name BLOB NOT NULL,
            new_parent INTEGER NOT NULL,
            new_name BLOB NOT NULL
        );
        CREATE INDEX applied_exchanges_request ON applied_exchanges (request);
        ",
    },
];

/// SQLite's `PRAGMA auto_vacuum` value for incremental mode ("PRAGMA
/// auto_vacuum": 0 none, 1 full, 2 incremental).
pub(crate) const AUTO_VACUUM_INCREMENTAL: i64 = 2;

/// The database's auto-vacuum mode as stored in its header.
pub(crate) fn auto_vacuum(conn: &Connection) -> Result<i64> {
    Ok(conn.query_row("PRAGMA auto_vacuum", [], |r| r.get(0))?)
}

/// Rewrites the database at `path` (open on `conn`, the only connection)
/// with incremental auto-vacuum, so free pages can later be handed back to
/// the host (`Fs::compact`). SQLite changes the mode of a database that
/// has tables only through a `VACUUM` ("PRAGMA auto_vacuum"); a plain
/// `VACUUM` would build its copy in a temporary database, which the
/// connection keeps in memory (`temp_store = MEMORY`), so the copy is
/// made with `VACUUM INTO` next to the file and renamed over it.
///
/// Crash safety: the WAL is checkpointed into the file first, the copy is
/// synced before the rename, and the rename is atomic; a crash leaves either
/// the old file (the next open starts over, removing the stale copy) or the
/// new one. Disk: the copy needs room for the live pages once more; time:
/// one read and one write of the live data (docs/engine.md, "Schema").
/// Returns a fresh writer connection on the new file.
pub(crate) fn rebuild_for_auto_vacuum(conn: Connection, path: &Path) -> Result<Connection> {
    let mut copy = path.as_os_str().to_owned();
    copy.push(".vacuum");
    let copy = std::path::PathBuf::from(copy);
    match std::fs::remove_file(&copy) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(crate::fs::io_error(e)),
        _ => {}
    }
    let started = std::time::Instant::now();
    let copy_str = copy.to_str().ok_or_else(|| crate::Error::Errno {
        errno: Errno::EINVAL,
        context: Some(format!("database path {} is not UTF-8", copy.display())),
    })?;
    let built = (|| -> Result<()> {
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        conn.execute_batch(&format!("PRAGMA auto_vacuum = {AUTO_VACUUM_INCREMENTAL};"))?;
        conn.execute("VACUUM INTO ?1", [copy_str])?;
        // SQLite creates the copy with its default mode: give it the
        // original's (0600 for the engine's files) before it takes its place.
        let mode = std::fs::metadata(path)
            .map_err(crate::fs::io_error)?
            .permissions();
        std::fs::set_permissions(&copy, mode).map_err(crate::fs::io_error)?;
        std::fs::File::open(&copy)
            .and_then(|f| f.sync_all())
            .map_err(crate::fs::io_error)?;
        Ok(())
    })();
    if let Err(e) = built {
        let _ = std::fs::remove_file(&copy);
        return Err(e);
    }
    // Closing the only connection checkpoints the WAL and deletes it; a WAL
    // left behind would be replayed onto the new file, so it must be gone.
    conn.close().map_err(|(_, e)| crate::Error::from(e))?;
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
        let _ = std::fs::remove_file(&copy);
        return Err(crate::Error::Errno {
            errno: Errno::EBUSY,
            context: Some("the WAL outlived the last connection".into()),
        });
    }
    let old_len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    std::fs::rename(&copy, path).map_err(crate::fs::io_error)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)
            .and_then(|f| f.sync_all())
            .map_err(crate::fs::io_error)?;
    }
    let new_len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    tracing::info!(
        old_bytes = old_len,
        new_bytes = new_len,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "rebuilt filesystem database with incremental auto-vacuum"
    );
    crate::db::open_writer(path, false, None)
}

/// The version a fully migrated database has.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The schema version of the database, 0 for an empty file.
pub(crate) fn version(conn: &Connection) -> Result<i64> {
    let has_meta: bool = conn
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
            [],
            |_| Ok(true),
        )
        .optional()?
        .unwrap_or(false);
    if !has_meta {
        return Ok(0);
    }
    Ok(conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .optional()?
        .unwrap_or(0))
}

/// Applies the steps after the database's version up to `target`.
///
/// Errors: `ENOTSUP` if the database is newer than this build.
pub(crate) fn migrate_to(conn: &Connection, target: i64) -> Result<()> {
    let mut v = version(conn)?;
    if v > SCHEMA_VERSION {
        return Err(crate::Error::Errno {
            errno: Errno::ENOTSUP,
            context: Some(format!(
                "database schema version {v} is newer than this engine's {SCHEMA_VERSION}"
            )),
        });
    }
    while v < target {
        let step = &MIGRATIONS[v as usize];
        let tx = conn.unchecked_transaction()?;
        tx.execute_batch(step.sql)?;
        tx.execute(
            "INSERT INTO meta (key, value) VALUES ('schema_version', ?1)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            params![v + 1],
        )?;
        tx.commit()?;
        tracing::debug!(from = v, to = v + 1, "migrated filesystem schema");
        v += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FileKind, Fs, Limits, Owner, ROOT_INO, Tuning};

    /// A database left at schema version 1 (before the orphans table) is
    /// brought to the current version by `Fs::open`, keeping its files.
    #[test]
    fn opening_an_older_database_migrates_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.db");
        {
            let conn = crate::db::open_writer(&path, true, Some(4096)).unwrap();
            migrate_to(&conn, 1).unwrap();
            crate::fs::initialize(&conn, Limits::default(), Tuning::default()).unwrap();
            let now = 1_000;
            conn.execute_batch(&format!(
                "INSERT INTO inodes (mode, uid, gid, nlink, size, stored, atime, mtime, ctime)
                 VALUES ({}, 0, 0, 1, 3, 3, {now}, {now}, {now});
                 INSERT INTO dirents (parent, name, ino, cookie) VALUES (1, CAST('old' AS BLOB), 2, 3);
                 UPDATE inodes SET next_cookie = 4 WHERE ino = 1;
                 INSERT INTO chunks (ino, idx, data) VALUES (2, 0, CAST('abc' AS BLOB));
                 INSERT INTO xattrs (ino, name, value) VALUES (2, CAST('user.k' AS BLOB), CAST('vvvv' AS BLOB));
                 INSERT INTO inodes (mode, uid, gid, nlink, size, stored, atime, mtime, ctime)
                 VALUES ({}, 0, 0, 1, 3, 0, {now}, {now}, {now});
                 INSERT INTO symlinks (ino, target) VALUES (3, CAST('old' AS BLOB));
                 INSERT INTO dirents (parent, name, ino, cookie) VALUES (1, CAST('link' AS BLOB), 3, 4);
                 UPDATE inodes SET next_cookie = 5 WHERE ino = 1;
                 UPDATE meta SET value = 3 WHERE key = 'used_bytes';
                 UPDATE meta SET value = 3 WHERE key = 'used_inodes';",
                libc::S_IFREG | 0o644,
                libc::S_IFLNK | 0o777
            ))
            .unwrap();
            assert_eq!(version(&conn).unwrap(), 1);
        }
        let fs = Fs::open(&path).unwrap();
        {
            let r = fs.inner.reader().unwrap();
            assert_eq!(version(&r).unwrap(), SCHEMA_VERSION);
        }
        let old = fs.lookup(ROOT_INO, b"old").unwrap();
        assert_eq!(fs.read_all(old.ino).unwrap(), b"abc");
        // Migration 4 counts the xattr (6 + 4 bytes) and the symlink target
        // (3 bytes) in the byte quota.
        assert_eq!(fs.statfs().unwrap().used_bytes, 3 + 10 + 3);
        assert_eq!(fs.check().unwrap(), Vec::<String>::new());
        // Migration 3 rebuilt chunks as a rowid table with its key index.
        {
            let r = fs.inner.reader().unwrap();
            let sql: String = r
                .query_row(
                    "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'chunks'",
                    [],
                    |row| row.get(0),
                )
                .unwrap();
            assert!(!sql.contains("WITHOUT ROWID"), "{sql}");
            let plan: String = r
                .query_row(
                    "EXPLAIN QUERY PLAN SELECT data FROM chunks WHERE ino = 2 AND idx = 0",
                    [],
                    |row| row.get(3),
                )
                .unwrap();
            assert!(plan.contains("INDEX"), "{plan}");
        }
        // The table added by migration 2 works.
        let h = fs.open_inode(old.ino).unwrap();
        fs.write(old.ino, 70_000, b"past two chunks").unwrap();
        let all = fs.read_all(old.ino).unwrap();
        assert_eq!(&all[..3], b"abc");
        assert_eq!(&all[70_000..], b"past two chunks");
        fs.unlink(ROOT_INO, b"old").unwrap();
        assert_eq!(fs.check().unwrap(), Vec::<String>::new());
        drop(h);
        let f = fs
            .mknod(
                ROOT_INO,
                b"new",
                FileKind::RegularFile,
                0o644,
                0,
                Owner::ROOT,
            )
            .unwrap();
        assert!(f.ino > old.ino);
        assert_eq!(fs.check().unwrap(), Vec::<String>::new());
    }

    #[test]
    fn a_newer_database_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.db");
        drop(Fs::create(&path, Limits::default()).unwrap());
        let conn = crate::db::open_writer(&path, false, None).unwrap();
        conn.execute(
            "UPDATE meta SET value = 99 WHERE key = 'schema_version'",
            [],
        )
        .unwrap();
        drop(conn);
        assert_eq!(Fs::open(&path).unwrap_err().errno(), Errno::ENOTSUP);
    }
}
