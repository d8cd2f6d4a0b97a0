//! A real node agent in cluster mode, served in the test's process, and
//! calls to it with a computer's token, for the tests that need one.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use agentcomputer_proto::v1 as pb;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use super::support::{Cluster, RELEASE, SYSTEM_NS};

/// Asserts success and returns stdout.
pub(crate) fn ok(out: &std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Installs the chart's CRDs and RBAC (with the Lease RBAC backups need)
/// and waits for both CRDs.
pub(crate) fn install_chart(cluster: &Cluster) {
    let chart = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../charts/agent-computer"
    ));
    let rendered = ok(
        &cluster.helm(&[
            "template",
            RELEASE,
            chart.to_str().unwrap(),
            "--namespace",
            SYSTEM_NS,
            "--include-crds",
            "--set",
            "metrics.serviceMonitor.enabled=false",
            // For the agents' Lease RBAC, which backups need; the agents
            // here back up to a directory the chart would refuse.
            "--set",
            "backup.url=s3://snapshots-test/store",
            "--set",
            "backup.credentialsSecret=unused",
        ]),
        "helm template",
    );
    ok(
        &cluster.kubectl(&["apply", "--server-side", "-f", "-"], Some(&rendered)),
        "kubectl apply of the chart",
    );
    for crd in [
        "crd/agentcomputers.agentcomputer.dev",
        "crd/computersnapshots.agentcomputer.dev",
    ] {
        ok(
            &cluster.kubectl(
                &["wait", "--for=condition=Established", crd, "--timeout=60s"],
                None,
            ),
            "CRD established",
        );
    }
}

/// A client of the agent at `ip:7433`.
pub(crate) async fn client(
    ip: &str,
) -> pb::agent_computer_client::AgentComputerClient<tonic::transport::Channel> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{ip}:7433"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    pb::agent_computer_client::AgentComputerClient::new(channel)
}

/// `msg` with `authorization: Bearer <token>`.
pub(crate) fn with_token<T>(msg: T, token: &str) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    req
}

/// File `path` of computer `uid` through its agent at `ip`, or the
/// agent's refusal.
pub(crate) async fn read(
    ip: &str,
    uid: &str,
    token: &str,
    path: &str,
) -> Result<Vec<u8>, tonic::Status> {
    let mut c = client(ip).await;
    let req = pb::ReadRequest {
        computer: uid.into(),
        path: path.into(),
        ..Default::default()
    };
    let mut stream = c.read(with_token(req, token)).await?.into_inner();
    let mut out = Vec::new();
    while let Some(chunk) = stream.message().await? {
        out.extend_from_slice(&chunk.data);
    }
    Ok(out)
}

/// Serves a node agent in cluster mode for `node` with `client` on
/// `ip:7433`, backing up to `store`; stops when the sender drops.
pub(crate) async fn start_agent(
    client: kube::Client,
    node: &str,
    ip: &str,
    data: &Path,
    store: &Path,
) -> tokio::sync::oneshot::Sender<()> {
    use agentcomputer_node_agent::cluster::{self, ClusterConfig};
    let listener = tokio::net::TcpListener::bind((ip, 7433))
        .await
        .expect("bind the agent's address");
    let http = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let backup =
        agentcomputer_node_agent::backup::BackupUrl::parse(&format!("file://{}", store.display()))
            .unwrap();
    let config = ClusterConfig {
        node_name: node.into(),
        data_dir: data.to_path_buf(),
        namespace: SYSTEM_NS.into(),
        idle_timeout: Duration::from_secs(300),
        overcommit: 1.0,
        status_interval: Duration::from_secs(1),
        shutdown_grace: Duration::from_secs(1),
        handover_socket: data.join("no-mounter.sock"),
        tls: None,
        proxy_listen: None,
        share: None,
        api_gate: Default::default(),
        proxy_connections_per_computer: 64,
        backup: Some(backup),
        retention: agentcomputer_node_agent::backup::DEFAULT_RETENTION,
        writer_lease: agentcomputer_lease::Timing::scaled_to(Duration::from_secs(15)),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let shutdown = async {
            let _ = stopped.await;
        };
        if let Err(e) = cluster::serve(client, listener, http, config, shutdown).await {
            panic!("node agent: {e:#}");
        }
    });
    stop
}

/// The computer's token, from its Secret.
pub(crate) async fn token(admin: &kube::Client, ns: &str, name: &str) -> String {
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), ns);
    let s = secrets.get(&format!("{name}-credential")).await.unwrap();
    String::from_utf8(s.data.unwrap()["token"].0.clone()).unwrap()
}

/// Writes `data` to `path` of computer `uid` through its agent at `ip`.
pub(crate) async fn write(ip: &str, uid: &str, token: &str, path: &str, data: &[u8]) {
    let mut c = client(ip).await;
    let msgs = vec![
        pb::WriteRequest {
            msg: Some(pb::write_request::Msg::Header(pb::WriteHeader {
                computer: uid.into(),
                path: path.into(),
                mode: pb::WriteMode::Truncate as i32,
                perm: 0,
                offset: 0,
            })),
        },
        pb::WriteRequest {
            msg: Some(pb::write_request::Msg::Data(data.to_vec())),
        },
        pb::WriteRequest {
            msg: Some(pb::write_request::Msg::End(pb::WriteEnd {
                total_bytes: data.len() as u64,
            })),
        },
    ];
    let mut req = tonic::Request::new(futures::stream::iter(msgs));
    req.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    c.write(req).await.unwrap();
}
