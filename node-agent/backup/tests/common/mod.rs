//! A real S3-compatible server for the tests: versitygw over a temporary
//! directory, listening on a free loopback port, killed on drop.
//!
//! The binary comes from `AGENTCOMPUTER_OBJECT_STORE_BIN`, or from the cache
//! `scripts/install-object-store.sh` fills. Without it, tests skip with a
//! loud message (CI installs it first, in .ci/run).

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcomputer_backup::{S3Config, s3_store};
use object_store::ObjectStore;

pub(crate) const ACCESS_KEY: &str = "agentcomputer-test";
pub(crate) const SECRET_KEY: &str = "agentcomputer-test-secret";
pub(crate) const BUCKET: &str = "backups";

/// The server binary, or `None` (with a message on stderr) if not installed.
pub(crate) fn server_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("AGENTCOMPUTER_OBJECT_STORE_BIN") {
        return Some(PathBuf::from(p));
    }
    if let Some(home) = std::env::var_os("HOME") {
        let p = PathBuf::from(home)
            .join(".cache/agentcomputer/object-store/versitygw-v1.8.0/bin/versitygw");
        if p.is_file() {
            return Some(p);
        }
    }
    // Straight to the process's stderr: the test harness captures
    // `eprintln!` of passing tests, and a skip must be seen.
    use std::io::Write;
    let _ = std::io::stderr().write_all(
        b"\n!!! SKIPPED: no S3-compatible server installed; run scripts/install-object-store.sh \
          (or set AGENTCOMPUTER_OBJECT_STORE_BIN) !!!\n\n",
    );
    None
}

/// A running server with one bucket, [`BUCKET`].
pub(crate) struct ObjectServer {
    child: Child,
    _dir: tempfile::TempDir,
    pub addr: SocketAddr,
}

impl ObjectServer {
    /// Starts the server, or returns `None` if it is not installed.
    /// Panics if it does not start listening within 20 s.
    pub(crate) fn start() -> Option<ObjectServer> {
        let bin = server_binary()?;
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        // The POSIX backend serves each directory under its root as a bucket.
        std::fs::create_dir_all(data.join(BUCKET)).unwrap();
        let addr = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
        let child = Command::new(&bin)
            .args([
                "--access",
                ACCESS_KEY,
                "--secret",
                SECRET_KEY,
                "--quiet",
                "--keep-alive",
            ])
            .arg("--port")
            .arg(addr.to_string())
            .arg("posix")
            .arg(&data)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let mut server = ObjectServer {
            child,
            _dir: dir,
            addr,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(addr).is_err() {
            if let Some(status) = server.child.try_wait().unwrap() {
                let log = std::fs::read_to_string(server._dir.path().join("server.log"))
                    .unwrap_or_default();
                panic!("object store exited with {status}: {log}");
            }
            assert!(
                Instant::now() < deadline,
                "object store did not listen on {addr} within 20 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(server)
    }

    pub(crate) fn config(&self) -> S3Config {
        S3Config {
            endpoint: format!("http://{}", self.addr),
            bucket: BUCKET.into(),
            region: "us-east-1".into(),
            access_key_id: ACCESS_KEY.into(),
            secret_access_key: SECRET_KEY.into(),
            allow_http: true,
        }
    }

    /// A client of the bucket.
    pub(crate) fn store(&self) -> Arc<dyn ObjectStore> {
        s3_store(&self.config()).unwrap()
    }

    /// The file holding object `key` in the server's data directory.
    pub(crate) fn object_file(&self, key: &str) -> PathBuf {
        self._dir.path().join("data").join(BUCKET).join(key)
    }
}

impl Drop for ObjectServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes `data` as file `name` at the root of `fs`, in one transaction.
pub(crate) fn write_file(fs: &agentcomputer_fs::Fs, name: &str, data: &[u8]) {
    fs.write_all(
        agentcomputer_fs::ROOT_INO,
        name.as_bytes(),
        data,
        agentcomputer_fs::WriteMode::Truncate,
        0o644,
        agentcomputer_fs::Owner::ROOT,
    )
    .unwrap();
}

/// Every file at the root of `fs`: name and content.
pub(crate) fn files(fs: &agentcomputer_fs::Fs) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut cookie = 0;
    loop {
        let page = fs.readdir(agentcomputer_fs::ROOT_INO, cookie, 256).unwrap();
        let Some(last) = page.last() else { break };
        cookie = last.cookie;
        for e in &page {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            out.insert(
                String::from_utf8(e.name.clone()).unwrap(),
                fs.read_all(e.ino).unwrap(),
            );
        }
    }
    out
}

/// Deterministic content of `len` bytes for record `i`.
pub(crate) fn content(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| (i * 31 + k * 7 + k / 251) as u8).collect()
}
