//! A real control plane for tests: etcd and kube-apiserver built from their
//! published Go modules by `operator/tools/build-k8s-tools.sh`, started on
//! 127.0.0.1 only, with a self-signed serving certificate, static token
//! authentication and RBAC authorization. Processes are killed on drop.
//!
//! Tests fail loudly when the tools cannot be built or started, unless
//! `AGENTCOMPUTER_SKIP_APISERVER_TESTS=1` opts out explicitly.
//!
//! Shared: the node agent's tests include this file with
//! `#[path = "../../operator/tests/support/mod.rs"]`, so paths here are
//! spelled from the repository root and the operator binary is looked up
//! only where it exists.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Token of the cluster admin (group system:masters).
pub(crate) const ADMIN_TOKEN: &str = "admin-token-for-tests-only";
/// Token of the operator's service account identity (what the chart's RBAC grants).
pub(crate) const OPERATOR_TOKEN: &str = "operator-token-for-tests-only";
/// Token of the node agent's service account identity (what the chart's
/// RBAC grants the node agent).
pub(crate) const NODE_AGENT_TOKEN: &str = "node-agent-token-for-tests-only";
/// Token of the share-link gateway's service account identity (what the
/// chart's RBAC grants the gateway).
pub(crate) const SHARE_GATEWAY_TOKEN: &str = "share-gateway-token-for-tests-only";
/// Token of the API gateway's service account identity (what the chart's
/// RBAC grants `agentcomputer-gateway`).
pub(crate) const GATEWAY_TOKEN: &str = "gateway-token-for-tests-only";
/// User name of the node agent's service account identity.
pub(crate) const NODE_AGENT_USER: &str =
    "system:serviceaccount:agentcomputer-system:ac-agent-computer-node-agent";
/// Namespace of the chart release (node agents, operator lease).
pub(crate) const SYSTEM_NS: &str = "agentcomputer-system";
/// Helm release name used by the tests.
pub(crate) const RELEASE: &str = "ac";
/// The runner image the tests' operator puts into sandbox pods.
pub(crate) const RUNNER_IMAGE: &str = "registry.test/agentcomputer/node-agent:test";

/// True when the caller opted out of the real API server tests.
pub(crate) fn skipped() -> bool {
    if std::env::var("AGENTCOMPUTER_SKIP_APISERVER_TESTS").as_deref() == Ok("1") {
        eprintln!(
            "AGENTCOMPUTER_SKIP_APISERVER_TESTS=1: real kube-apiserver tests skipped on request"
        );
        return true;
    }
    false
}

/// Directory with kube-apiserver, etcd and helm: $AGENTCOMPUTER_K8S_BIN, or
/// whatever the build script prints (it builds once, then answers from cache).
pub(crate) fn tools_bin() -> PathBuf {
    if let Ok(dir) = std::env::var("AGENTCOMPUTER_K8S_BIN") {
        return PathBuf::from(dir);
    }
    // Through the workspace, so that other crates' tests find it too.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../operator/tools/build-k8s-tools.sh");
    let out = Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} failed ({}); the real API server tests need kube-apiserver and etcd \
         (set AGENTCOMPUTER_SKIP_APISERVER_TESTS=1 to opt out)",
        script.display(),
        out.status
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    PathBuf::from(
        stdout
            .lines()
            .last()
            .expect("script prints the bin dir")
            .trim(),
    )
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed (and reaped) on drop.
pub(crate) struct Proc {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub(crate) fn spawn(name: &str, cmd: &mut Command, log: PathBuf) -> Proc {
        use std::os::unix::process::CommandExt;
        let f = std::fs::File::create(&log).unwrap();
        // If the test process dies without unwinding (SIGKILL, SIGTERM), take
        // the child with it instead of leaving it orphaned.
        // SAFETY: prctl is async-signal-safe and touches no shared state.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc {
            name: name.into(),
            child,
            log,
        }
    }

    pub(crate) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    pub(crate) fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A running etcd + kube-apiserver.
pub(crate) struct Cluster {
    pub dir: tempfile::TempDir,
    pub bin: PathBuf,
    pub url: String,
    pub ca: PathBuf,
    pub kubeconfig: PathBuf,
    pub operator_kubeconfig: PathBuf,
    pub node_agent_kubeconfig: PathBuf,
    pub share_gateway_kubeconfig: PathBuf,
    pub gateway_kubeconfig: PathBuf,
    // Field order: the API server stops before etcd.
    pub apiserver: Proc,
    pub etcd: Proc,
}

fn run_ok(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Cluster {
    /// Starts etcd and kube-apiserver and waits until /readyz answers.
    pub(crate) async fn start() -> Cluster {
        let bin = tools_bin();
        for tool in ["kube-apiserver", "etcd", "helm"] {
            assert!(
                bin.join(tool).is_file(),
                "{} missing in {}",
                tool,
                bin.display()
            );
        }
        let mut dir = tempfile::Builder::new()
            .prefix("ac-apiserver-")
            .tempdir()
            .unwrap();
        if std::env::var_os("AGENTCOMPUTER_KEEP_TEST_DIR").is_some() {
            dir.disable_cleanup(true);
            eprintln!("test control plane files kept in {}", dir.path().display());
        }
        let d = dir.path();

        let (client_port, peer_port) = (free_port(), free_port());
        let etcd_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd = Proc::spawn(
            "etcd",
            Command::new(bin.join("etcd"))
                .arg("--name=test")
                .arg(format!("--data-dir={}", d.join("etcd").display()))
                .arg(format!("--listen-client-urls={etcd_url}"))
                .arg(format!("--advertise-client-urls={etcd_url}"))
                .arg(format!("--listen-peer-urls={peer_url}"))
                .arg(format!("--initial-advertise-peer-urls={peer_url}"))
                .arg(format!("--initial-cluster=test={peer_url}"))
                .arg("--unsafe-no-fsync")
                .arg("--log-level=warn"),
            d.join("etcd.log"),
        );

        // Service account signing key (required flags of kube-apiserver).
        let key = d.join("sa.key");
        run_ok(
            Command::new("openssl")
                .args([
                    "genpkey",
                    "-algorithm",
                    "RSA",
                    "-pkeyopt",
                    "rsa_keygen_bits:2048",
                    "-out",
                ])
                .arg(&key),
            "openssl genpkey",
        );
        let tokens = d.join("tokens.csv");
        std::fs::write(
            &tokens,
            format!(
                "{ADMIN_TOKEN},admin,admin-uid,\"system:masters\"\n\
                 {OPERATOR_TOKEN},system:serviceaccount:{SYSTEM_NS}:{RELEASE}-agent-computer-operator,operator-uid,\"system:serviceaccounts,system:serviceaccounts:{SYSTEM_NS},system:authenticated\"\n\
                 {NODE_AGENT_TOKEN},system:serviceaccount:{SYSTEM_NS}:{RELEASE}-agent-computer-node-agent,node-agent-uid,\"system:serviceaccounts,system:serviceaccounts:{SYSTEM_NS},system:authenticated\"\n\
                 {SHARE_GATEWAY_TOKEN},system:serviceaccount:{SYSTEM_NS}:{RELEASE}-agent-computer-share-gateway,share-gateway-uid,\"system:serviceaccounts,system:serviceaccounts:{SYSTEM_NS},system:authenticated\"\n\
                 {GATEWAY_TOKEN},system:serviceaccount:{SYSTEM_NS}:{RELEASE}-agent-computer-gateway,gateway-uid,\"system:serviceaccounts,system:serviceaccounts:{SYSTEM_NS},system:authenticated\"\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let certs = d.join("certs");
        let apiserver = Proc::spawn(
            "kube-apiserver",
            Command::new(bin.join("kube-apiserver"))
                .arg(format!("--etcd-servers={etcd_url}"))
                .arg("--bind-address=127.0.0.1")
                .arg("--advertise-address=127.0.0.1")
                .arg(format!("--secure-port={port}"))
                .arg(format!("--cert-dir={}", certs.display()))
                .arg(format!("--token-auth-file={}", tokens.display()))
                .arg("--authorization-mode=RBAC")
                // As on real clusters: the node agent DaemonSet is privileged.
                .arg("--allow-privileged=true")
                .arg("--service-account-issuer=https://kubernetes.default.svc")
                .arg(format!("--service-account-key-file={}", key.display()))
                .arg(format!(
                    "--service-account-signing-key-file={}",
                    key.display()
                ))
                .arg("--service-cluster-ip-range=10.96.0.0/24")
                .arg("--endpoint-reconciler-type=none")
                .arg("--enable-priority-and-fairness=false")
                .arg("--max-requests-inflight=2000")
                .arg("--max-mutating-requests-inflight=1000")
                .arg("--profiling=false")
                .arg("--v=0"),
            d.join("kube-apiserver.log"),
        );
        let url = format!("https://127.0.0.1:{port}");
        let ca = certs.join("apiserver.crt");
        let mut cluster = Cluster {
            kubeconfig: d.join("admin.kubeconfig"),
            operator_kubeconfig: d.join("operator.kubeconfig"),
            node_agent_kubeconfig: d.join("node-agent.kubeconfig"),
            share_gateway_kubeconfig: d.join("share-gateway.kubeconfig"),
            gateway_kubeconfig: d.join("gateway.kubeconfig"),
            dir,
            bin,
            url,
            ca,
            apiserver,
            etcd,
        };
        cluster.wait_ready().await;
        cluster.write_kubeconfig(&cluster.kubeconfig, ADMIN_TOKEN);
        cluster.write_kubeconfig(&cluster.operator_kubeconfig, OPERATOR_TOKEN);
        cluster.write_kubeconfig(&cluster.node_agent_kubeconfig, NODE_AGENT_TOKEN);
        cluster.write_kubeconfig(&cluster.share_gateway_kubeconfig, SHARE_GATEWAY_TOKEN);
        cluster.write_kubeconfig(&cluster.gateway_kubeconfig, GATEWAY_TOKEN);
        cluster
    }

    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            assert!(self.etcd.alive(), "etcd exited:\n{}", self.etcd.log_tail());
            assert!(
                self.apiserver.alive(),
                "kube-apiserver exited:\n{}",
                self.apiserver.log_tail()
            );
            if self.ca.exists() {
                self.write_kubeconfig(&self.kubeconfig, ADMIN_TOKEN);
                let client = self.admin().await;
                let req = http::Request::get("/readyz").body(Vec::new()).unwrap();
                if client
                    .request_text(req)
                    .await
                    .is_ok_and(|t| t.trim() == "ok")
                {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver not ready after 120 s:\n{}",
                self.apiserver.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    fn write_kubeconfig(&self, path: &Path, token: &str) {
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    certificate-authority: {}\n\
             users:\n- name: user\n  user:\n    token: {token}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: user\n    namespace: default\n\
             current-context: test\n",
            self.url,
            self.ca.display()
        );
        std::fs::write(path, yaml).unwrap();
    }

    /// A client with the given kubeconfig.
    pub(crate) async fn client_from(&self, kubeconfig: &Path) -> Client {
        let kc = Kubeconfig::read_from(kubeconfig).unwrap();
        let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .unwrap();
        Client::try_from(cfg).unwrap()
    }

    /// An admin client.
    pub(crate) async fn admin(&self) -> Client {
        self.client_from(&self.kubeconfig).await
    }

    /// Runs /usr/bin/kubectl against the cluster as admin.
    pub(crate) fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Output {
        self.tool("kubectl", Path::new("kubectl"), args, stdin)
    }

    /// Runs the built helm.
    pub(crate) fn helm(&self, args: &[&str]) -> Output {
        self.tool("helm", &self.bin.join("helm"), args, None)
    }

    fn tool(&self, name: &str, exe: &Path, args: &[&str], stdin: Option<&str>) -> Output {
        use std::io::Write;
        let mut child = Command::new(exe)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.dir.path())
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {name}: {e}"));
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        child.wait_with_output().unwrap()
    }

    /// Starts the `operator` binary with the operator's (RBAC-limited)
    /// identity; its metrics listen on the returned port.
    pub(crate) fn start_operator(&self, identity: &str, leader_election: bool) -> (Proc, u16) {
        self.start_operator_with(&self.operator_kubeconfig, identity, leader_election, &[])
    }

    /// Like [`Cluster::start_operator`] with another identity's kubeconfig
    /// and extra flags; a `--runner-image=...` among them replaces
    /// [`RUNNER_IMAGE`].
    pub(crate) fn start_operator_with(
        &self,
        kubeconfig: &Path,
        identity: &str,
        leader_election: bool,
        extra: &[&str],
    ) -> (Proc, u16) {
        // Set only when this module is compiled into the operator's own
        // tests; other crates' tests use the control plane without it.
        let Some(operator) = option_env!("CARGO_BIN_EXE_operator") else {
            panic!("start_operator is for the operator crate's tests");
        };
        let port = free_port();
        let runner = if extra.iter().any(|a| a.starts_with("--runner-image=")) {
            None
        } else {
            Some(format!("--runner-image={RUNNER_IMAGE}"))
        };
        let p = Proc::spawn(
            identity,
            Command::new(operator)
                .args(extra)
                .env("KUBECONFIG", kubeconfig)
                .env("RUST_LOG", std::env::var("AGENTCOMPUTER_TEST_OPERATOR_LOG").unwrap_or_else(|_| "info,kube=warn".into()))
                .arg(format!("--metrics-addr=127.0.0.1:{port}"))
                .arg(format!("--agent-namespace={SYSTEM_NS}"))
                .arg(format!(
                    "--agent-selector=app.kubernetes.io/name=agentcomputer-node-agent,app.kubernetes.io/instance={RELEASE}"
                ))
                .arg(format!("--leader-election={leader_election}"))
                .arg(format!("--lease-name={RELEASE}-agent-computer-operator"))
                .arg("--lease-duration-seconds=6")
                .arg("--resync-seconds=60")
                .args(runner)
                .arg(format!("--agent-service={RELEASE}-agent-computer-node-agent"))
                .arg(format!("--identity={identity}")),
            self.dir.path().join(format!("{identity}.log")),
        );
        (p, port)
    }
}

/// The `agentcomputer-share-gateway` binary: the operator crate's own when
/// this module is compiled into its tests, else built by cargo (the same
/// profile and target directory as the calling test) on first use.
pub(crate) fn share_gateway_exe() -> PathBuf {
    if let Some(exe) = option_env!("CARGO_BIN_EXE_agentcomputer-share-gateway") {
        return PathBuf::from(exe);
    }
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(|| built_exe("agentcomputer-operator", "agentcomputer-share-gateway"))
        .clone()
}

/// The `agentcomputer-gateway` binary (the API gateway), built by cargo on
/// first use like [`share_gateway_exe`].
pub(crate) fn gateway_exe() -> PathBuf {
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(|| built_exe("agentcomputer-gateway", "agentcomputer-gateway"))
        .clone()
}

/// Builds binary `bin` of workspace package `package` with the calling
/// test's profile and target directory, and returns its path.
fn built_exe(package: &str, bin: &str) -> PathBuf {
    let out = Command::new(env!("CARGO"))
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .args(["build", "--quiet", "--message-format=json"])
        .args(["-p", package, "--bin", bin])
        .stderr(Stdio::inherit())
        .output()
        .expect("cargo");
    assert!(
        out.status.success(),
        "cargo build -p {package} --bin {bin} failed"
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo names the {bin} executable"))
}

/// Polls `f` every 200 ms until it returns Some, or panics after `secs`.
pub(crate) async fn eventually<T, F, Fut>(secs: u64, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {secs} s waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Creates a namespace and its `default` service account (which pod
/// admission looks up and no controller-manager creates here).
pub(crate) async fn create_namespace(client: &Client, name: &str) {
    use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
    use kube::api::{Api, PostParams};
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    nss.create(&PostParams::default(), &ns).await.unwrap();
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    let sa = serde_json::from_value(serde_json::json!({"metadata": {"name": "default"}})).unwrap();
    sas.create(&PostParams::default(), &sa).await.unwrap();
}

/// Publishes (creates or replaces) the CSIStorageCapacity a node agent keeps
/// for `node` in the agent namespace, with `room` (a quantity) as capacity
/// and maximumVolumeSize, as the node agent's contract describes.
pub(crate) async fn publish_capacity(client: &Client, node: &str, room: &str) {
    use k8s_openapi::api::storage::v1::CSIStorageCapacity;
    use kube::api::{Api, Patch, PatchParams};
    let caps: Api<CSIStorageCapacity> = Api::namespaced(client.clone(), SYSTEM_NS);
    let name = format!("agentcomputer-{node}");
    let cap = serde_json::json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
        "metadata": {"name": name, "labels": {"agentcomputer.dev/node": node}},
        "storageClassName": "agentcomputer",
        "nodeTopology": {"matchLabels": {"kubernetes.io/hostname": node}},
        "capacity": room,
        "maximumVolumeSize": room,
    });
    caps.patch(
        &name,
        &PatchParams::apply("agentcomputer-node-agent").force(),
        &Patch::Apply(cap),
    )
    .await
    .unwrap();
}

// --- What a kubelet and the node agent DaemonSet would do, for clusters
// without them. ---

use agentcomputer_crds::{AgentComputer, ComputerPhase};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// A Ready Node, as a kubelet would report it.
pub(crate) async fn add_node(client: &Client, name: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = json!({"metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}}});
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(node).unwrap(),
        )
        .await
        .unwrap();
    set_node_ready(client, name, true).await;
    // Admission taints new nodes not-ready; the node lifecycle controller
    // (absent here) lifts the taint once the kubelet reports Ready.
    let untaint = json!({"spec": {"taints": null}});
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(untaint))
        .await
        .unwrap();
}

pub(crate) async fn set_node_ready(client: &Client, name: &str, ready: bool) {
    let nodes: Api<Node> = Api::all(client.clone());
    let status = json!({"status": {"conditions": [{
        "type": "Ready", "status": if ready { "True" } else { "False" },
        "reason": "KubeletReady", "message": "test", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
}

/// A node-agent pod bound to `node`, as the DaemonSet would create it, made
/// Running and Ready (or not) through the status subresource.
pub(crate) async fn add_agent(client: &Client, node: &str, ip: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), SYSTEM_NS);
    let pod = json!({
        "metadata": {"name": format!("node-agent-{node}"), "labels": {
            "app.kubernetes.io/name": "agentcomputer-node-agent", "app.kubernetes.io/instance": RELEASE}},
        "spec": {"nodeName": node, "containers": [{"name": "node-agent", "image": "node-agent:test"}]}
    });
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod).unwrap(),
    )
    .await
    .unwrap();
    set_agent_ready(client, node, ip, true).await;
}

pub(crate) async fn set_agent_ready(client: &Client, node: &str, ip: &str, ready: bool) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), SYSTEM_NS);
    let status = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
    pods.patch_status(
        &format!("node-agent-{node}"),
        &PatchParams::default(),
        &Patch::Merge(status),
    )
    .await
    .unwrap();
}

pub(crate) async fn wait_phase(
    api: &Api<AgentComputer>,
    name: &str,
    phase: ComputerPhase,
    secs: u64,
) -> AgentComputer {
    let last = api
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|c| c.status);
    let what = format!("{name} to be {phase:?} (status when the wait began: {last:?})");
    eventually(secs, &what, || async {
        let c = api.get_opt(name).await.ok()??;
        (c.status.as_ref()?.phase == Some(phase)).then_some(c)
    })
    .await
}

/// GET from the operator's metrics server on loopback.
pub(crate) async fn http_get(port: u16, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    buf.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or(buf)
}
