//! A node agent served in-process on its own runtime thread, on an
//! ephemeral loopback port, for the CLI's integration tests.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agentcomputer_node_agent::local::LocalShare;
use agentcomputer_node_agent::{LocalConfig, serve};

/// A running in-process agent; stopped gracefully on drop.
pub struct Agent {
    pub addr: SocketAddr,
    /// `http://ADDR`.
    pub url: String,
    pub data: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Agent {
    /// Serves `data` (token made first, as the binary does), with `tls`
    /// when given and share links on a free port when `share`.
    pub fn start(
        data: &Path,
        tls: Option<tonic::transport::ServerTlsConfig>,
        share: bool,
    ) -> Agent {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        // The token exists before the first client comes, as with the binary.
        agentcomputer_node_agent::local::prepare(data).unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let config = LocalConfig {
            data_dir: data.to_path_buf(),
            idle_timeout: Duration::from_secs(300),
            tls,
            proxy_listen: None,
            streams: Default::default(),
            admission: agentcomputer_node_agent::admission::AdmissionConfig::for_node(),
            fuse_holder: None,
            share: share.then(|| LocalShare::bind("127.0.0.1:0".parse().unwrap()).unwrap()),
            backup: None,
        };
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                serve(listener, config, async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
            });
            rt.shutdown_timeout(Duration::from_secs(1));
        });
        Agent {
            addr,
            url: format!("http://{addr}"),
            data: data.to_path_buf(),
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Shuts the agent down gracefully and waits for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A Python with the `mcp` package, from scripts/mcp-python.sh (made once,
/// then cached). Panics, saying why, when python3, venv or pip is missing.
pub fn mcp_python() -> &'static Path {
    use std::process::{Command, Stdio};
    static PYTHON: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PYTHON.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/mcp-python.sh");
        let out = Command::new("bash")
            .arg(&script)
            .stderr(Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("cannot run bash {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "the MCP tests need python3 with venv and pip, and the `mcp` package from PyPI; {} failed (see its error above)",
            script.display()
        );
        let path = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        assert!(path.exists(), "{} printed no interpreter", script.display());
        path
    })
}
