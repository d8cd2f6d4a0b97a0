//! The names of everything in a node agent's data directory, in one place
//! (docs/cluster.md and the README describe the layout).
//!
//! ```text
//! <data>/agent.lock            one agent per data directory (data_lock)
//! <data>/token                 local mode's API token (local::token)
//! <data>/mounts.json           host mounts of local mode (registry::mount_records)
//! <data>/fuse-holder.sock      the descriptor holder's socket (local::holder)
//! <data>/fuse-holder.log       its log
//! <data>/run/exec/<random>/    container runs' mountpoints (local::containers)
//! <data>/scratch/              per-exec scratch space, emptied at start
//! <data>/computers/<name>/     one computer:
//!     computer.json            its settings (computer)
//!     fs.db                    its filesystem, one SQLite database
//!     share.key                its share-link key (share::keys)
//! ```

/// The agent's lock file ([`crate::data_lock`]).
pub const LOCK_FILE: &str = "agent.lock";

/// Local mode's API token file.
pub const TOKEN_FILE: &str = "token";

/// Local mode's record of host mounts.
pub const MOUNTS_FILE: &str = "mounts.json";

/// The descriptor holder's socket.
pub const HOLDER_SOCKET_FILE: &str = "fuse-holder.sock";

/// The descriptor holder's log.
pub const HOLDER_LOG_FILE: &str = "fuse-holder.log";

/// Run-time directories of container runs.
pub const RUN_DIR: &str = "run";

/// Below [`RUN_DIR`]: one mountpoint per running container exec.
pub const EXEC_RUN_DIR: &str = "exec";

/// Per-exec scratch space, each exec's in its own subdirectory
/// (JavaScript's `/tmp` database). Mode 0700; whatever it holds when the
/// agent starts is left over from a crash and is removed.
pub const SCRATCH_DIR: &str = "scratch";

/// The computers, one directory each.
pub const COMPUTERS_DIR: &str = "computers";

/// In a computer's directory: its settings.
pub const SETTINGS_FILE: &str = "computer.json";

/// In a computer's directory: its filesystem database.
pub const DB_FILE: &str = "fs.db";

/// File in a computer's directory recording the highest position of its
/// backup log that this node wrote or was about to write (see
/// `agentcomputer_backup::Options::position_file`).
pub const BACKUP_POSITION_FILE: &str = "backup-position";

/// In a computer's directory: its share-link key.
pub const SHARE_KEY_FILE: &str = "share.key";
