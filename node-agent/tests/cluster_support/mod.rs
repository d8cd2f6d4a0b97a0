//! The harness of the tests of `node-agent cluster` against a real
//! kube-apiserver and etcd (started by the operator's test support): the
//! node agent's RBAC as docs/cluster.md lists it, a prepared control plane,
//! the real agent binary run as its service account, AgentComputers as the
//! operator makes them, and gRPC clients with a computer's token. Shared by
//! `cluster.rs` and the other cluster test files (`mod cluster_support;`).

#![allow(dead_code)]

#[path = "../../../operator/tests/support/mod.rs"]
pub mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agentcomputer_crds::AgentComputer;
use agentcomputer_crds::quantity;
use agentcomputer_proto::v1 as pb;
use agentcomputer_proto::v1::agent_computer_client::AgentComputerClient;
use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use pb::exec_event::Event;
use sha2::{Digest, Sha256};
use support::{Cluster, Proc, SYSTEM_NS, eventually};
use tonic::Code;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

pub const NODE: &str = "n1";
pub const NS_A: &str = "team-a";
pub const NS_B: &str = "team-b";

/// The node agent's RBAC, as docs/cluster.md lists it.
pub fn rbac() -> String {
    format!(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: agentcomputer-node-agent}}
rules:
- apiGroups: [agentcomputer.dev]
  resources: [agentcomputers]
  verbs: [get, list, watch, patch]
- apiGroups: [agentcomputer.dev]
  resources: [agentcomputers/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [persistentvolumes]
  verbs: [get, list, watch, patch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: agentcomputer-node-agent}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: agentcomputer-node-agent}}
subjects:
- {{kind: User, apiGroup: rbac.authorization.k8s.io, name: "{user}"}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: agentcomputer-node-agent, namespace: {ns}}}
rules:
- apiGroups: [storage.k8s.io]
  resources: [csistoragecapacities]
  verbs: [create, patch]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update, patch, delete, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: agentcomputer-node-agent, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: agentcomputer-node-agent}}
subjects:
- {{kind: User, apiGroup: rbac.authorization.k8s.io, name: "{user}"}}
"#,
        user = support::NODE_AGENT_USER,
        ns = SYSTEM_NS
    )
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn ok(out: std::process::Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A running `node-agent cluster` of node `node` and its addresses.
pub struct Agent {
    pub proc: Proc,
    pub grpc: String,
    pub http: String,
    /// The egress proxy for sandbox pods (`--proxy-listen`).
    pub proxy: std::net::SocketAddr,
}

/// How [`Agent::launch`] runs the agent; [`Launch::default`] is how
/// [`Agent::start`] does.
pub struct Launch {
    /// `--node-name`.
    pub node: String,
    /// `--listen`, the gRPC API.
    pub listen: String,
    /// `--idle-timeout`.
    pub idle_timeout: String,
    /// Its kubeconfig; None: the node agent's service account's
    /// ([`Cluster::node_agent_kubeconfig`]).
    pub kubeconfig: Option<PathBuf>,
    /// More arguments.
    pub extra: Vec<String>,
}

impl Default for Launch {
    fn default() -> Self {
        Launch {
            node: NODE.into(),
            listen: "127.0.0.1:0".into(),
            idle_timeout: "2s".into(),
            kubeconfig: None,
            extra: Vec::new(),
        }
    }
}

impl Agent {
    pub async fn start(cluster: &Cluster, data: &Path, log: &str) -> Agent {
        Agent::start_at(cluster, data, log, "127.0.0.1:0").await
    }

    /// [`Agent::start`] with the gRPC API on `listen`.
    pub async fn start_at(cluster: &Cluster, data: &Path, log: &str, listen: &str) -> Agent {
        Agent::start_with(cluster, data, log, listen, &[]).await
    }

    /// [`Agent::start_at`] with `extra` arguments.
    pub async fn start_with(
        cluster: &Cluster,
        data: &Path,
        log: &str,
        listen: &str,
        extra: &[String],
    ) -> Agent {
        let launch = Launch {
            listen: listen.into(),
            extra: extra.to_vec(),
            ..Launch::default()
        };
        Agent::launch(cluster, data, log, launch).await
    }

    /// Starts the agent as `launch` says, with its data in `data` and its
    /// output in `log` (under the cluster's directory); returns once it is
    /// ready (`/readyz`).
    pub async fn launch(cluster: &Cluster, data: &Path, log: &str, launch: Launch) -> Agent {
        let kubeconfig = launch
            .kubeconfig
            .unwrap_or_else(|| cluster.node_agent_kubeconfig.clone());
        let log = cluster.dir.path().join(log);
        // A port free now for the proxy (the agent prints no proxy address).
        let proxy = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let mut proc = Proc::spawn(
            "node-agent",
            Command::new(env!("CARGO_BIN_EXE_node-agent"))
                .args([
                    "cluster",
                    "--node-name",
                    &launch.node,
                    "--namespace",
                    SYSTEM_NS,
                ])
                .args(["--listen", &launch.listen, "--metrics-addr", "127.0.0.1:0"])
                .args([
                    "--status-interval",
                    "1s",
                    "--idle-timeout",
                    &launch.idle_timeout,
                ])
                .arg("--proxy-listen")
                .arg(proxy.to_string())
                .arg("--data-dir")
                .arg(data)
                // No mounter in this test: the link retries quietly.
                .arg("--handover-socket")
                .arg(cluster.dir.path().join("mounter.sock"))
                .args(&launch.extra)
                .env("KUBECONFIG", &kubeconfig)
                .env("RUST_LOG", "info,kube=warn"),
            log.clone(),
        );
        let (grpc, http) = eventually(30, "the agent's addresses", || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let find = |prefix: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(prefix).map(|a| a.trim().to_string()))
            };
            let found = find("listening on ").zip(find("metrics on "));
            async move { found }
        })
        .await;
        assert!(proc.alive(), "node-agent exited:\n{}", proc.log_tail());
        let agent = Agent {
            proc,
            grpc: format!("http://{grpc}"),
            http: format!("http://{http}"),
            proxy,
        };
        eventually(30, "/readyz ok", || {
            let url = format!("{}/readyz", agent.http);
            async move { (get(&url).await.0 == 200).then_some(()) }
        })
        .await;
        agent
    }

    /// SIGTERM; the agent must exit cleanly within 30 s.
    pub async fn stop(mut self) {
        let pid = nix::unistd::Pid::from_raw(self.proc.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let status = eventually(30, "the agent's exit", || {
            let s = self.proc.child.try_wait().unwrap();
            async move { s }
        })
        .await;
        assert!(status.success(), "exit {status}:\n{}", self.proc.log_tail());
    }

    pub async fn client(&self, token: Option<&str>) -> Api_ {
        let channel = Channel::from_shared(self.grpc.clone())
            .unwrap()
            .connect()
            .await
            .unwrap();
        AgentComputerClient::with_interceptor(channel, Bearer(token.map(str::to_string)))
            .max_decoding_message_size(agentcomputer_proto::MAX_MESSAGE_BYTES)
    }
}

/// Adds `authorization: Bearer <token>` to every call.
#[derive(Clone)]
pub struct Bearer(pub Option<String>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(t) = &self.0 {
            req.metadata_mut()
                .insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        Ok(req)
    }
}

pub type Api_ = AgentComputerClient<InterceptedService<Channel, Bearer>>;

/// A GET over plain HTTP/1.1 to loopback: status and body.
pub async fn get(url: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let Ok(mut s) = tokio::net::TcpStream::connect(host).await else {
        return (0, String::new());
    };
    let req = format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).to_string();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|x| x.1)
        .unwrap_or("")
        .to_string();
    (code, body)
}

pub async fn write(
    c: &mut Api_,
    computer: &str,
    path: &str,
    data: &[u8],
) -> Result<(), tonic::Status> {
    let mut msgs = vec![pb::WriteRequest {
        msg: Some(pb::write_request::Msg::Header(pb::WriteHeader {
            computer: computer.into(),
            path: path.into(),
            mode: pb::WriteMode::Truncate as i32,
            perm: 0,
            offset: 0,
        })),
    }];
    for piece in data.chunks(agentcomputer_proto::CHUNK_BYTES) {
        msgs.push(pb::WriteRequest {
            msg: Some(pb::write_request::Msg::Data(piece.to_vec())),
        });
    }
    msgs.push(pb::WriteRequest {
        msg: Some(pb::write_request::Msg::End(pb::WriteEnd {
            total_bytes: data.len() as u64,
        })),
    });
    c.write(futures::stream::iter(msgs)).await.map(|_| ())
}

pub async fn stat(c: &mut Api_, computer: &str, path: &str) -> Result<pb::FileInfo, tonic::Status> {
    c.stat(pb::StatRequest {
        computer: computer.into(),
        path: path.into(),
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner())
}

/// The whole of file `path`, or the call's refusal.
pub async fn read(c: &mut Api_, computer: &str, path: &str) -> Result<Vec<u8>, tonic::Status> {
    let mut stream = c
        .read(pb::ReadRequest {
            computer: computer.into(),
            path: path.into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut data = Vec::new();
    while let Some(chunk) = stream.message().await? {
        data.extend_from_slice(&chunk.data);
    }
    Ok(data)
}

/// Runs an exec to its end: (stdout, exit code), or the call's refusal.
pub async fn exec(
    c: &mut Api_,
    computer: &str,
    runtime: pb::Runtime,
    script: &str,
) -> Result<(String, i32), tonic::Status> {
    let req = pb::ExecRequest {
        computer: computer.into(),
        runtime: runtime as i32,
        script: script.into(),
        ..Default::default()
    };
    run(c, req).await.map(|(out, exit)| (out, exit.code))
}

/// Runs `req` to its end: stdout and the exit event.
pub async fn run(
    c: &mut Api_,
    req: pb::ExecRequest,
) -> Result<(String, pb::ExecExit), tonic::Status> {
    let mut stream = c.exec(req).await?.into_inner();
    let mut out = String::new();
    while let Some(ev) = stream.message().await? {
        match ev.event.unwrap() {
            Event::Stdout(b) => out.push_str(&String::from_utf8_lossy(&b)),
            Event::Stderr(_) => {}
            Event::Exit(e) => return Ok((out, e)),
        }
    }
    panic!("exec ended without an exit event");
}

pub fn token(seed: &str) -> String {
    hex::encode(Sha256::digest(format!("token {seed}").as_bytes()))
}

pub fn credential_hash(token: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(token.as_bytes())))
}

/// Creates an AgentComputer placed on `node` with `spec`, publishes the
/// hash of `token` as the operator would, and creates its PV with the
/// node-data finalizer. Returns its uid.
pub async fn computer(
    admin: &kube::Client,
    ns: &str,
    name: &str,
    node: &str,
    spec: serde_json::Value,
    token: &str,
) -> String {
    let api: Api<AgentComputer> = Api::namespaced(admin.clone(), ns);
    let obj: AgentComputer = serde_json::from_value(serde_json::json!({
        "apiVersion": "agentcomputer.dev/v1alpha1",
        "kind": "AgentComputer",
        "metadata": {"name": name, "labels": {"agentcomputer.dev/node": node}},
        "spec": spec,
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &obj).await.unwrap();
    let uid = created.metadata.uid.unwrap();
    set_hash(admin, ns, name, token).await;
    let pvs: Api<PersistentVolume> = Api::all(admin.clone());
    let pv: PersistentVolume = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": format!("agentcomputer-{uid}"),
            "labels": {"agentcomputer.dev/node": node},
            "finalizers": ["agentcomputer.dev/node-data"],
        },
        "spec": {
            "capacity": {"storage": spec_size(&created.spec)},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "agentcomputer",
            "csi": {
                "driver": "agentcomputer.dev",
                "volumeHandle": uid,
                "volumeAttributes": {
                    "agentcomputer.dev/namespace": ns,
                    "agentcomputer.dev/name": name,
                    "agentcomputer.dev/uid": "1000",
                    "agentcomputer.dev/gid": "1000",
                },
            },
        },
    }))
    .unwrap();
    pvs.create(&PostParams::default(), &pv).await.unwrap();
    uid
}

pub fn spec_size(spec: &agentcomputer_crds::AgentComputerSpec) -> String {
    spec.storage.size.0.clone()
}

pub async fn set_hash(admin: &kube::Client, ns: &str, name: &str, token: &str) {
    let api: Api<AgentComputer> = Api::namespaced(admin.clone(), ns);
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"status": {"credentialHash": credential_hash(token)}})),
    )
    .await
    .unwrap();
}

/// Deletes computer `uid`'s PV, annotated to delete the data or not.
pub async fn delete_volume(admin: &kube::Client, uid: &str, delete_data: bool) {
    let pvs: Api<PersistentVolume> = Api::all(admin.clone());
    let name = format!("agentcomputer-{uid}");
    if delete_data {
        pvs.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {"agentcomputer.dev/delete-data": "true"}}})),
        )
        .await
        .unwrap();
    }
    pvs.delete(&name, &DeleteParams::default()).await.unwrap();
}

/// Whether the node-data finalizer is off computer `uid`'s PV (or the PV is gone).
pub async fn finalizer_removed(admin: &kube::Client, uid: &str) -> bool {
    let pvs: Api<PersistentVolume> = Api::all(admin.clone());
    match pvs.get_opt(&format!("agentcomputer-{uid}")).await.unwrap() {
        None => true,
        Some(pv) => !pv
            .metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|f| f == "agentcomputer.dev/node-data"),
    }
}

pub async fn published_capacity(admin: &kube::Client) -> Option<(u64, CSIStorageCapacity)> {
    let api: Api<CSIStorageCapacity> = Api::namespaced(admin.clone(), SYSTEM_NS);
    let cap = api
        .get_opt(&format!("agentcomputer-{NODE}"))
        .await
        .unwrap()?;
    // The API server writes quantities in canonical form ("48G", "512Ki").
    let bytes = quantity::parse_bytes(&cap.capacity.as_ref()?.0).expect("a quantity");
    Some((bytes, cap))
}

pub fn available(dir: &Path) -> u64 {
    let st = nix::sys::statvfs::statvfs(dir).unwrap();
    st.blocks_available() as u64 * st.fragment_size() as u64
}

/// Starts a container exec of `true` on `computer` and returns its first
/// event's stderr text (empty when the first event is not stderr, `refused:
/// MESSAGE` when the call is refused), then drops the call, which cancels
/// the exec.
pub async fn first_stderr(c: &mut Api_, computer: &str) -> String {
    let req = pb::ExecRequest {
        computer: computer.into(),
        runtime: pb::Runtime::Container as i32,
        script: "true".into(),
        ..Default::default()
    };
    let mut stream = match c.exec(req).await {
        Ok(r) => r.into_inner(),
        Err(s) => return format!("refused: {}", s.message()),
    };
    let first = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("a first event within 10 s")
        .expect("a well-formed stream");
    match first.and_then(|e| e.event) {
        Some(Event::Stderr(b)) => String::from_utf8_lossy(&b).into_owned(),
        _ => String::new(),
    }
}

/// Writes `SandboxReady=False` with `reason` and `message` on computer
/// `name` in NS_A, as the operator would.
pub async fn set_sandbox_condition(admin: &kube::Client, name: &str, reason: &str, message: &str) {
    let api: Api<AgentComputer> = Api::namespaced(admin.clone(), NS_A);
    let body = serde_json::json!({
        "apiVersion": "agentcomputer.dev/v1alpha1",
        "kind": "AgentComputer",
        "metadata": {"name": name},
        "status": {"conditions": [{
            "type": "SandboxReady", "status": "False", "reason": reason,
            "message": message, "lastTransitionTime": "2026-01-01T00:00:00Z",
        }]},
    });
    api.patch_status(
        name,
        &PatchParams::apply("test-operator").force(),
        &Patch::Apply(body),
    )
    .await
    .expect("patch the sandbox condition");
}

pub fn code_of<T: std::fmt::Debug>(r: Result<T, tonic::Status>) -> (Code, String) {
    let s = r.unwrap_err();
    (s.code(), s.message().to_string())
}

/// A fresh API server with the CRD, the namespaces, nodes n1 and n2 and
/// the node agent's RBAC; returns it and an admin client.
pub async fn prepared_cluster() -> (Cluster, kube::Client) {
    let cluster = Cluster::start().await;
    let admin = cluster.admin().await;
    let crd = repo().join("crds/agentcomputer.yaml");
    ok(
        cluster.kubectl(
            &["apply", "--server-side", "-f", crd.to_str().unwrap()],
            None,
        ),
        "apply CRD",
    );
    ok(
        cluster.kubectl(
            &[
                "wait",
                "--for=condition=Established",
                "crd/agentcomputers.agentcomputer.dev",
                "--timeout=60s",
            ],
            None,
        ),
        "CRD established",
    );
    for ns in [SYSTEM_NS, NS_A, NS_B] {
        support::create_namespace(&admin, ns).await;
    }
    for node in ["n1", "n2"] {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(admin.clone());
        let n = serde_json::from_value(serde_json::json!({
            "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}}
        }))
        .unwrap();
        nodes.create(&PostParams::default(), &n).await.unwrap();
    }
    ok(
        cluster.kubectl(&["apply", "-f", "-"], Some(&rbac())),
        "apply RBAC",
    );

    (cluster, admin)
}
