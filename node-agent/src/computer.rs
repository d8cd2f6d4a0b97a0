//! A computer's identity and settings as stored on disk.
//!
//! Layout under the data directory: `computers/<name>/fs.db` is the
//! filesystem engine's SQLite database, `computers/<name>/computer.json` the
//! [`Settings`] below, `computers/<name>/share.key` the secret its share
//! links are signed with ([`crate::registry::Registry::share_key`]).

use std::io;
use std::path::Path;

use agentcomputer_egress::EgressConfig;
use agentcomputer_fs::Limits;
use serde::{Deserialize, Serialize};

/// File name of a computer's settings inside its directory.
pub const SETTINGS_FILE: &str = crate::layout::SETTINGS_FILE;

/// File name of a computer's filesystem database inside its directory.
pub const DB_FILE: &str = crate::layout::DB_FILE;

/// Longest computer name (a DNS-1123 label is at most 63 characters).
pub const NAME_MAX: usize = 63;

/// Whether `name` is a DNS-1123 label (RFC 1123 section 2.1 as Kubernetes
/// applies it): 1-63 characters of `[a-z0-9-]`, starting and ending with a
/// lowercase letter or digit. Such names are safe as directory names and as
/// Kubernetes object names.
pub fn is_valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= NAME_MAX
        && bytes.iter().all(|b| alnum(b) || *b == b'-')
        && alnum(&bytes[0])
        && alnum(&bytes[bytes.len() - 1])
}

/// Usage counters recorded when a computer's engine is closed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Bytes of file content stored.
    pub used_bytes: u64,
    /// Inode-equivalents in use (hard links past the first name count).
    pub used_inodes: u64,
    /// Bytes the database takes on the host disk (file plus WAL). Files
    /// written before the field existed load as 0.
    #[serde(default)]
    pub disk_bytes: u64,
}

/// The contents of `computer.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// The computer's name (same as its directory's name).
    pub name: String,
    /// Creation time, nanoseconds since the Unix epoch.
    pub created_unix_nanos: i64,
    /// Quota on stored file bytes. Applied to the engine each time it opens,
    /// so editing this file while the agent is stopped changes the quota.
    pub max_bytes: u64,
    /// Quota on inodes, applied like `max_bytes`.
    pub max_inodes: u64,
    /// Usage when the engine was last closed cleanly. `None` while the engine
    /// is open (or after a crash), meaning "open the engine to find out".
    #[serde(default)]
    pub usage_at_close: Option<Usage>,
    /// Where the computer's programs may connect. Files written before
    /// the field existed load as deny-all.
    #[serde(default)]
    pub egress: EgressConfig,
    /// Which in-process runtimes may run. Files written before the field
    /// existed load with both on.
    #[serde(default)]
    pub runtimes: Runtimes,
    /// Per-computer default and maximum of every exec. Files written
    /// before the field existed load with the agent's defaults.
    #[serde(default)]
    pub exec: ExecLimits,
    /// The name people know the computer by when it differs from the
    /// directory's name: in a cluster `NAMESPACE/NAME` of its
    /// AgentComputer (the directory is named by the resource's uid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// The id the computer's backup is kept under in the object store
    /// (`computers/<id>/`, docs/backup.md): random, drawn when it is made
    /// or first opened by an agent with a backup store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_id: Option<String>,
    /// Where the backup log stood when the computer last closed cleanly,
    /// and the database file then, so the next open continues the log
    /// without a snapshot if the file is unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_resume: Option<BackupResume>,
    /// How long the computer's past states stay restorable, in seconds
    /// (`spec.retention` in a cluster): point-in-time restores reach back
    /// this far, and a restore's undo snapshot is kept this long. `None`:
    /// the node agent's default (`--retention`, 7 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_secs: Option<u64>,
}

/// A clean close's backup position ([`Settings::backup_resume`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupResume {
    /// The log's position: the database file is exactly that state.
    pub position: u64,
    /// The digest of the object at `position`, hex.
    pub digest: String,
    /// The database file's length and modification time (ns since the
    /// epoch) right after the close.
    pub db_bytes: u64,
    pub db_mtime_ns: i128,
}

/// The runtimes a computer may use (an AgentComputer's `spec.runtimes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Runtimes {
    /// The bash interpreter.
    #[serde(default = "enabled")]
    pub shell: bool,
    /// The JavaScript (QuickJS) runtime.
    #[serde(default = "enabled")]
    pub javascript: bool,
    /// The container runtime (local mode: the bubblewrap sandbox). On in
    /// local mode, also for `computer.json` files written before the field
    /// existed; a cluster sets it from `spec.runtimes.container`.
    #[serde(default = "enabled")]
    pub container: bool,
}

fn enabled() -> bool {
    true
}

impl Default for Runtimes {
    /// Every runtime on (local mode's computers).
    fn default() -> Self {
        Runtimes {
            shell: true,
            javascript: true,
            container: true,
        }
    }
}

/// Limits of one exec on a computer, each both the default (when the
/// request gives none) and the maximum (a request asking for more gets
/// this). `None` keeps the agent-wide default and maximum
/// ([`crate::api::DEFAULT_TIMEOUT`], [`crate::api::MAX_TIMEOUT`],
/// [`crate::api::DEFAULT_MAX_OUTPUT`], [`crate::api::DEFAULT_EXEC_MEMORY`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecLimits {
    /// Wall-clock limit in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Cap on stdout plus stderr bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_bytes: Option<u64>,
    /// Memory budget of an exec in bytes (the shell's memory limit, the
    /// JavaScript heap limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
}

/// What a computer's owner decides about it: everything in [`Settings`]
/// except identity and bookkeeping. Applied at create and on update
/// ([`crate::registry::Registry::update`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// Quota on bytes and inodes.
    pub limits: Limits,
    /// Egress policy (validated by the caller).
    pub egress: EgressConfig,
    /// Runtimes enabled.
    pub runtimes: Runtimes,
    /// Exec limits.
    pub exec: ExecLimits,
    /// See [`Settings::display_name`].
    pub display_name: Option<String>,
    /// See [`Settings::retention_secs`].
    pub retention: Option<std::time::Duration>,
}

impl Settings {
    /// Replaces the owner's decisions in these settings with `config`.
    pub fn apply(&mut self, config: Config) {
        self.max_bytes = config.limits.max_bytes;
        self.max_inodes = config.limits.max_inodes;
        self.egress = config.egress;
        self.runtimes = config.runtimes;
        self.exec = config.exec;
        self.display_name = config.display_name;
        self.retention_secs = config.retention.map(|d| d.as_secs());
    }

    /// The name to show people: [`Settings::display_name`], else the
    /// directory's name.
    pub fn shown_name(&self) -> &str {
        self.display_name.as_deref().unwrap_or(&self.name)
    }

    /// The engine limits these settings ask for.
    pub fn limits(&self) -> Limits {
        Limits {
            max_bytes: self.max_bytes,
            max_inodes: self.max_inodes,
        }
    }

    /// Reads `dir/computer.json`. Errors: the file's I/O error, or
    /// `InvalidData` when it is not valid settings JSON.
    pub fn load(dir: &Path) -> io::Result<Settings> {
        let text = std::fs::read(dir.join(SETTINGS_FILE))?;
        serde_json::from_slice(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// Writes `dir/computer.json` atomically (temporary file, fsync, rename),
    /// so a crash leaves either the old or the new settings.
    /// The file is private to the agent's user (`0600`).
    pub fn save(&self, dir: &Path) -> io::Result<()> {
        let tmp = dir.join(format!(".{SETTINGS_FILE}.tmp"));
        let mut text = serde_json::to_vec_pretty(self).map_err(io::Error::other)?;
        text.push(b'\n');
        {
            use std::io::Write;
            let mut f = crate::private::create_file(&tmp)?;
            f.write_all(&text)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, dir.join(SETTINGS_FILE))
    }
}

/// Nanoseconds since the Unix epoch, now.
pub fn now_unix_nanos() -> i64 {
    agentcomputer_fs::Timespec::now().as_nanos()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels() {
        for ok in ["demo", "a", "a-b", "x1", "0", &"a".repeat(63)] {
            assert!(is_valid_name(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "A",
            "a_b",
            "a.b",
            "ä",
            "a b",
            &"a".repeat(64),
            "..",
        ] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn settings_round_trip_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let s = Settings {
            name: "demo".into(),
            created_unix_nanos: 42,
            max_bytes: 1 << 30,
            max_inodes: 1000,
            usage_at_close: Some(Usage {
                disk_bytes: 4096,
                used_bytes: 7,
                used_inodes: 2,
            }),
            egress: EgressConfig {
                mode: agentcomputer_egress::Mode::AllowList,
                hosts: vec!["pypi.org".into()],
                ..EgressConfig::default()
            },
            runtimes: Runtimes {
                shell: true,
                javascript: false,
                container: true,
            },
            exec: ExecLimits {
                timeout_ms: Some(5000),
                max_output_bytes: None,
                memory_bytes: Some(1 << 20),
            },
            display_name: Some("team-a/demo".into()),
            backup_id: Some("0123456789abcdef0123456789abcdef".into()),
            backup_resume: Some(BackupResume {
                position: 7,
                digest: "ab".repeat(32),
                db_bytes: 4096,
                db_mtime_ns: 1_700_000_000_000_000_000,
            }),
            retention_secs: Some(3600),
        };
        s.save(dir.path()).unwrap();
        assert_eq!(Settings::load(dir.path()).unwrap(), s);
        std::fs::write(dir.path().join(SETTINGS_FILE), b"{nope").unwrap();
        let err = Settings::load(dir.path()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn settings_without_egress_load_as_deny_all() {
        let dir = tempfile::tempdir().unwrap();
        let old = br#"{"name":"demo","created_unix_nanos":1,"max_bytes":10,"max_inodes":10,"usage_at_close":null}"#;
        std::fs::write(dir.path().join(SETTINGS_FILE), old).unwrap();
        let s = Settings::load(dir.path()).unwrap();
        assert_eq!(s.egress, EgressConfig::default());
        assert_eq!(s.egress.mode, agentcomputer_egress::Mode::DenyAll);
        assert_eq!(s.runtimes, Runtimes::default());
        assert_eq!(s.exec, ExecLimits::default());
        assert_eq!(s.shown_name(), "demo");
    }
}
