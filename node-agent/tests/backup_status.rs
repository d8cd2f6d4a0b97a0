//! The backup made visible, against a real kube-apiserver and etcd (the
//! operator's test support): a cluster agent with `--backup` reports
//! `status.backup` and the `BackupHealthy` condition on the computer it
//! ships, and its /metrics carry the backup families with the uploads it
//! made.

mod cluster_support;

use agentcomputer_crds::AgentComputer;
use agentcomputer_crds::condition_types::BACKUP_HEALTHY;
use agentcomputer_proto::v1 as pb;
use cluster_support::support::{self, eventually};
use cluster_support::*;
use kube::api::Api;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shipping_computer_reports_its_backup_in_status_and_metrics() {
    if support::skipped() {
        return;
    }
    let (cluster, admin) = prepared_cluster().await;
    let backup = cluster.dir.path().join("backup");
    std::fs::create_dir_all(&backup).unwrap();
    let launch = Launch {
        extra: vec!["--backup".into(), format!("file://{}", backup.display())],
        ..Launch::default()
    };
    let data = cluster.dir.path().join("data");
    let agent = Agent::launch(&cluster, &data, "node-agent-status.log", launch).await;
    let tok = token("shipped");
    computer(
        &admin,
        NS_A,
        "shipped",
        NODE,
        serde_json::json!({"storage": {"size": "64Mi"}}),
        &tok,
    )
    .await;
    let mut c = agent.client(Some(&tok)).await;
    eventually(30, "the computer's credential on the agent", || {
        let mut c = c.clone();
        async move { stat(&mut c, "shipped", "/workspace").await.ok() }
    })
    .await;
    let (out, code) = exec(
        &mut c,
        "shipped",
        pb::Runtime::Shell,
        "seq 1000 > numbers; echo done",
    )
    .await
    .unwrap();
    assert_eq!((out.as_str(), code), ("done\n", 0));

    let computers: Api<AgentComputer> = Api::namespaced(admin.clone(), NS_A);
    let (position, healthy) = eventually(30, "status.backup and BackupHealthy=True", || {
        let computers = computers.clone();
        async move {
            let ac = computers.get("shipped").await.ok()?;
            let status = ac.status?;
            let position = status.backup.as_ref()?.position?;
            let healthy = status
                .conditions
                .iter()
                .find(|c| c.type_ == BACKUP_HEALTHY)?
                .clone();
            (position > 0 && healthy.status == "True").then_some((position, healthy))
        }
    })
    .await;
    assert!(!healthy.reason.is_empty(), "{healthy:?}");
    eprintln!(
        "status.backup.position {position}, BackupHealthy {}",
        healthy.reason
    );

    let (code, metrics) = get(&format!("{}/metrics", agent.http)).await;
    assert_eq!(code, 200);
    let value = |family: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(family) && !l.starts_with('#'))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {family} in /metrics:\n{metrics}"))
    };
    assert!(value("agentcomputer_node_backup_uploads_total") >= 1.0);
    assert!(value("agentcomputer_node_backup_uploaded_bytes_total") > 0.0);
    assert_eq!(value("agentcomputer_node_backup_stopped"), 0.0);
    assert!(value("agentcomputer_node_backup_lag_seconds") < 30.0);
    agent.stop().await;
}
