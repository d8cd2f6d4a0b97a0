//! [`BackupTarget`]: one agent's connection to its bucket (or directory),
//! the name index, and each computer's shipper and restore.

use std::path::Path as FsPath;
use std::sync::Arc;

use agentcomputer_backup::{Options, Restored, S3Config, Shipper};
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use tracing::warn;

use super::url::BackupUrl;

mod snapshots;
pub use snapshots::{SnapshotRecord, is_valid_snapshot_name};

/// Why a backup operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The object store refused or failed a request.
    #[error("backup store {url}: {source}")]
    Store {
        url: String,
        #[source]
        source: object_store::Error,
    },
    /// Shipping or restoring failed (a fenced shipper, a damaged object, ...).
    #[error("{0}")]
    Log(#[from] agentcomputer_backup::Error),
    /// The bucket's index already has a computer of this name with another id.
    #[error(
        "the backup store {url} already holds a computer named \"{name}\" (id {id}); it is restored on first use, or delete it first"
    )]
    NameTaken {
        url: String,
        name: String,
        id: String,
    },
    /// An index entry or settings object cannot be read.
    #[error("backup object {key} is unreadable: {reason}")]
    Unreadable { key: String, reason: String },
}

/// The store and prefix all of one agent's computers are backed up under.
pub struct BackupTarget {
    url: BackupUrl,
    store: Arc<dyn ObjectStore>,
    root: Path,
    options: Options,
    retention: std::time::Duration,
}

/// How long a computer's past states stay restorable unless its settings
/// say otherwise (`--retention`, the chart's `backup.retention`).
pub const DEFAULT_RETENTION: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

impl std::fmt::Debug for BackupTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BackupTarget({})", self.url)
    }
}

/// Reads an environment variable, treating an empty one as unset.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl BackupTarget {
    /// Connects to `url` (see [`BackupUrl`] for where an S3 endpoint's
    /// region and keys come from). No request is made yet. Errors: missing
    /// keys, an invalid endpoint, a directory that cannot be made.
    pub fn open(url: &BackupUrl) -> Result<BackupTarget, String> {
        let (store, root): (Arc<dyn ObjectStore>, Path) = match url {
            BackupUrl::S3 { bucket, prefix } => {
                let region = env("AWS_REGION")
                    .or_else(|| env("AWS_DEFAULT_REGION"))
                    .unwrap_or_else(|| "us-east-1".into());
                let endpoint = env("AWS_ENDPOINT_URL")
                    .unwrap_or_else(|| format!("https://s3.{region}.amazonaws.com"));
                let missing = |v: &str| format!("backup to {url} needs {v} in the environment");
                let access_key_id =
                    env("AWS_ACCESS_KEY_ID").ok_or_else(|| missing("AWS_ACCESS_KEY_ID"))?;
                let secret_access_key =
                    env("AWS_SECRET_ACCESS_KEY").ok_or_else(|| missing("AWS_SECRET_ACCESS_KEY"))?;
                let allow_http = endpoint.starts_with("http://");
                if allow_http && !is_loopback_url(&endpoint) {
                    warn!(%endpoint, "backups go to the object store over plain HTTP: anyone on the path can read them");
                }
                let store = agentcomputer_backup::s3_store(&S3Config {
                    endpoint,
                    bucket: bucket.clone(),
                    region,
                    access_key_id,
                    secret_access_key,
                    allow_http,
                })
                .map_err(|e| format!("backup to {url}: {e}"))?;
                (store, Path::from(prefix.as_str()))
            }
            BackupUrl::Dir(dir) => {
                crate::private::ensure_dir(dir)
                    .map_err(|e| format!("backup to {url}: cannot make {}: {e}", dir.display()))?;
                let store = object_store::local::LocalFileSystem::new_with_prefix(dir)
                    .map_err(|e| format!("backup to {url}: {e}"))?
                    // Each object is durable when its put returns, as an
                    // S3 PUT's 200 promises.
                    .with_fsync(true);
                (Arc::new(store), Path::default())
            }
        };
        Ok(BackupTarget {
            url: url.clone(),
            store,
            root,
            options: Options {
                // The engine's change notifications wake each shipper
                // (`Registry::start_backup`); polls only catch what they
                // miss. 200 idle computers polled every 10 ms cost a
                // quarter of a core (docs/benchmarks.md).
                poll_interval: std::time::Duration::from_secs(1),
                ..Options::default()
            },
            retention: DEFAULT_RETENTION,
        })
    }

    /// This target with `retention` as the default retention of the
    /// computers it backs up ([`DEFAULT_RETENTION`] until set).
    pub fn with_retention(mut self, retention: std::time::Duration) -> BackupTarget {
        self.retention = retention;
        self
    }

    /// The default retention of the computers backed up here.
    pub fn retention(&self) -> std::time::Duration {
        self.retention
    }

    /// Where computer `id`'s objects live.
    pub fn computer_prefix(&self, id: &str) -> Path {
        self.root.clone().join("computers").join(id)
    }

    fn name_key(&self, name: &str) -> Path {
        name.split('/')
            .fold(self.root.clone().join("names"), |p, part| p.join(part))
    }

    fn settings_key(&self, id: &str) -> Path {
        self.computer_prefix(id).join("computer.json")
    }

    fn store_err(&self, source: object_store::Error) -> BackupError {
        BackupError::Store {
            url: self.url.to_string(),
            source,
        }
    }

    /// The id the index gives computer `name`, if any.
    pub async fn lookup(&self, name: &str) -> Result<Option<String>, BackupError> {
        let key = self.name_key(name);
        match self.store.get(&key).await {
            Ok(got) => {
                let bytes = got.bytes().await.map_err(|e| self.store_err(e))?;
                let id = std::str::from_utf8(&bytes)
                    .ok()
                    .map(str::trim)
                    .filter(|id| is_valid_id(id))
                    .ok_or_else(|| BackupError::Unreadable {
                        key: key.to_string(),
                        reason: "not a computer id".into(),
                    })?;
                Ok(Some(id.to_string()))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.store_err(e)),
        }
    }

    /// Records `name` → `id` in the index. The same entry again is fine.
    /// Errors: [`BackupError::NameTaken`] if `name` has another id.
    pub async fn register(&self, name: &str, id: &str) -> Result<(), BackupError> {
        let key = self.name_key(name);
        let put = self
            .store
            .put_opts(
                &key,
                PutPayload::from(id.to_string()),
                PutOptions::from(PutMode::Create),
            )
            .await;
        match put {
            Ok(_) => Ok(()),
            Err(object_store::Error::AlreadyExists { .. }) => match self.lookup(name).await? {
                Some(held) if held == id => Ok(()),
                Some(held) => Err(BackupError::NameTaken {
                    url: self.url.to_string(),
                    name: name.to_string(),
                    id: held,
                }),
                // Removed in between: try once more.
                None => Box::pin(self.register(name, id)).await,
            },
            Err(e) => Err(self.store_err(e)),
        }
    }

    /// Stores computer `id`'s settings (`computer.json` bytes).
    pub async fn save_settings(&self, id: &str, json: Vec<u8>) -> Result<(), BackupError> {
        self.store
            .put(&self.settings_key(id), PutPayload::from(json))
            .await
            .map(|_| ())
            .map_err(|e| self.store_err(e))
    }

    /// Computer `id`'s settings as last stored. Errors: a missing object
    /// is [`BackupError::Unreadable`].
    pub async fn load_settings(&self, id: &str) -> Result<Vec<u8>, BackupError> {
        let key = self.settings_key(id);
        match self.store.get(&key).await {
            Ok(got) => Ok(got.bytes().await.map_err(|e| self.store_err(e))?.to_vec()),
            Err(object_store::Error::NotFound { .. }) => Err(BackupError::Unreadable {
                key: key.to_string(),
                reason: "missing".into(),
            }),
            Err(e) => Err(self.store_err(e)),
        }
    }

    /// One request that proves the store answers and the bucket exists
    /// (a listing of the index), for a clear error at start instead of at
    /// the first open. Errors: the store's.
    pub async fn probe(&self) -> Result<(), BackupError> {
        let dir = self.root.clone().join("names");
        self.store
            .list_with_delimiter(Some(&dir))
            .await
            .map(|_| ())
            .map_err(|e| self.store_err(e))
    }

    /// The names in the index, sorted.
    pub async fn names(&self) -> Result<Vec<String>, BackupError> {
        let dir = self.root.clone().join("names");
        let metas: Vec<_> = self
            .store
            .list(Some(&dir))
            .try_collect()
            .await
            .map_err(|e| self.store_err(e))?;
        let mut names: Vec<String> = metas
            .iter()
            .filter_map(|m| {
                let parts: Vec<_> = m.location.prefix_match(&dir)?.collect();
                let name = parts
                    .iter()
                    .map(|p| p.as_ref())
                    .collect::<Vec<_>>()
                    .join("/");
                (!name.is_empty()).then_some(name)
            })
            .collect();
        names.sort();
        Ok(names)
    }

    /// Removes computer `id`'s objects and its index entry (when that still
    /// names `id`).
    pub async fn forget(&self, name: &str, id: &str) -> Result<(), BackupError> {
        if self.lookup(name).await?.as_deref() == Some(id) {
            match self.store.delete(&self.name_key(name)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.store_err(e)),
            }
        }
        // Its snapshots go with it: their names are free again.
        for record in self.snapshots(id).await? {
            self.remove_snapshot(id, &record.name).await?;
        }
        let prefix = self.computer_prefix(id);
        let metas: Vec<_> = self
            .store
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(|e| self.store_err(e))?;
        for m in metas {
            match self.store.delete(&m.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.store_err(e)),
            }
        }
        Ok(())
    }

    /// Starts shipping the database at `db` as computer `id`'s log,
    /// continuing it from `resume` when that still describes the store's
    /// latest position; `position_file` is the computer's record of how far
    /// this node's shippers went, and `writer_hold` lends the engine's
    /// writer to end WAL cycles (see [`agentcomputer_backup::Options`]).
    pub async fn start_shipper(
        &self,
        db: &FsPath,
        id: &str,
        resume: Option<agentcomputer_backup::Resume>,
        position_file: &FsPath,
        writer_hold: agentcomputer_fs::WriterHold,
    ) -> Result<Shipper, BackupError> {
        let options = Options {
            resume,
            position_file: Some(position_file.to_path_buf()),
            writer_hold: Some(writer_hold),
            ..self.options.clone()
        };
        Ok(Shipper::start(db, self.store.clone(), self.computer_prefix(id), options).await?)
    }

    /// Restores computer `id`'s latest state into the new file `dest`,
    /// checked (see [`agentcomputer_backup::restore`]).
    pub async fn restore(&self, id: &str, dest: &FsPath) -> Result<Restored, BackupError> {
        Ok(agentcomputer_backup::restore(&self.store, &self.computer_prefix(id), dest).await?)
    }

    /// The latest position of computer `id`'s log in the store (None: no
    /// log). Errors: the store's.
    pub async fn head(&self, id: &str) -> Result<Option<u64>, BackupError> {
        use futures::TryStreamExt;
        let dir = agentcomputer_backup::object::log_dir(&self.computer_prefix(id));
        let metas: Vec<_> = self
            .store
            .list(Some(&dir))
            .try_collect()
            .await
            .map_err(agentcomputer_backup::Error::from)?;
        Ok(metas
            .iter()
            .filter_map(|m| agentcomputer_backup::object::position_of(&m.location))
            .max())
    }

    /// Brings the file `db`, exactly at log position `from`, to computer
    /// `id`'s latest position in place (see
    /// [`agentcomputer_backup::catch_up`]).
    pub async fn catch_up(
        &self,
        id: &str,
        db: &FsPath,
        from: agentcomputer_backup::Resume,
    ) -> Result<Restored, BackupError> {
        Ok(
            agentcomputer_backup::catch_up(&self.store, &self.computer_prefix(id), db, from)
                .await?,
        )
    }
}

/// A computer id as this agent makes them (32 hex digits) or a cluster uid
/// (a UUID): letters, digits and `-`, 1 to 64 characters.
pub fn is_valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
}

/// Whether `url`'s host is a loopback address or `localhost`.
fn is_loopback_url(url: &str) -> bool {
    let host = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest)
        .split(['/', '?'])
        .next()
        .unwrap_or("");
    let host = match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_endpoints_are_told_apart() {
        assert!(is_loopback_url("http://127.0.0.1:7070"));
        assert!(is_loopback_url("http://[::1]:9000/"));
        assert!(is_loopback_url("http://localhost"));
        assert!(!is_loopback_url("http://10.0.0.1:9000"));
        assert!(!is_loopback_url("http://minio.storage.svc:9000"));
    }

    /// The index, settings and forgetting, on a directory store.
    #[tokio::test(flavor = "multi_thread")]
    async fn the_index_refuses_a_second_id_for_a_name_and_forget_removes_everything() {
        let dir = tempfile::tempdir().unwrap();
        let t = BackupTarget::open(&BackupUrl::Dir(dir.path().join("b"))).unwrap();
        assert_eq!(t.lookup("demo").await.unwrap(), None);
        t.register("demo", "aaaa").await.unwrap();
        t.register("demo", "aaaa").await.unwrap();
        let e = t.register("demo", "bbbb").await.unwrap_err();
        assert!(
            matches!(e, BackupError::NameTaken { ref id, .. } if id == "aaaa"),
            "{e}"
        );
        t.register("ns1/web", "cccc").await.unwrap();
        assert_eq!(t.names().await.unwrap(), ["demo", "ns1/web"]);
        t.save_settings("aaaa", b"{}".to_vec()).await.unwrap();
        assert_eq!(t.load_settings("aaaa").await.unwrap(), b"{}");
        t.forget("demo", "aaaa").await.unwrap();
        assert_eq!(t.lookup("demo").await.unwrap(), None);
        assert!(matches!(
            t.load_settings("aaaa").await,
            Err(BackupError::Unreadable { .. })
        ));
        assert_eq!(t.names().await.unwrap(), ["ns1/web"]);
    }
}
