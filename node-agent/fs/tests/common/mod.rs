//! Helpers shared by the engine's integration tests.

use std::path::Path;

use agentcomputer_fs::ROOT_INO;
use rusqlite::{Connection, OpenFlags};

/// Names in the root directory as committed in the database file, read by
/// a connection of our own: it sees only committed transactions.
pub(crate) fn committed_names(db: &Path) -> Vec<String> {
    let c = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let mut st = c
        .prepare("SELECT name FROM dirents WHERE parent = ?1 ORDER BY name")
        .unwrap();
    st.query_map([ROOT_INO as i64], |r| r.get::<_, Vec<u8>>(0))
        .unwrap()
        .map(|n| String::from_utf8(n.unwrap()).unwrap())
        .collect()
}
