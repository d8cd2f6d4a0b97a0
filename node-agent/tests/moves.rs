//! A computer moving between two live node agents (docs/moves.md) against
//! a real kube-apiserver, the test playing the operator: the target
//! restores in the background while the source keeps serving and taking
//! writes; the hand-over stops the source's commits, ships the last of
//! them and releases the writer Lease; the target then applies only the
//! log's last objects. A writer acknowledged by either node throughout
//! loses nothing, and calls that came during the hand-over waited and were
//! told where the computer went. Moving back to a node that still has
//! its old copy only catches that copy up; a node that comes back removes
//! its copy once the store's log has gone past it.

mod cluster_support;

use std::time::{Duration, Instant};

use agentcomputer_crds::AgentComputer;
use agentcomputer_proto::v1 as pb;
use cluster_support::support::{self, Cluster, SYSTEM_NS, eventually};
use cluster_support::*;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams};
use tonic::Code;

/// `--writer-lease-duration` of both agents.
const LEASE: &str = "10s";

fn backup_args(cluster: &Cluster) -> Vec<String> {
    let dir = cluster.dir.path().join("backup");
    std::fs::create_dir_all(&dir).unwrap();
    vec![
        "--backup".into(),
        format!("file://{}", dir.display()),
        "--writer-lease-duration".into(),
        LEASE.into(),
    ]
}

/// Annotation `key` of computer `uid`'s writer Lease.
async fn lease_annotation(admin: &kube::Client, uid: &str, key: &str) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), SYSTEM_NS);
    let lease = leases.get_opt(&format!("ac-{uid}")).await.ok()??;
    lease.metadata.annotations?.get(key).cloned()
}

async fn lease_holder(admin: &kube::Client, uid: &str) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), SYSTEM_NS);
    leases
        .get_opt(&format!("ac-{uid}"))
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

/// Writes what the operator writes for a move: `meta` (labels and
/// annotations), then `status.move` to match (node agents act on the move
/// the status names): Preparing while the computer carries
/// `move-target`, HandingOver once it carries `hand-over-to`, none after.
async fn patch_meta(api: &Api<AgentComputer>, name: &str, meta: serde_json::Value) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "metadata": meta })),
    )
    .await
    .unwrap();
    let c = api.get(name).await.unwrap();
    let labels = c.metadata.labels.clone().unwrap_or_default();
    let annotations = c.metadata.annotations.clone().unwrap_or_default();
    let source = labels
        .get("agentcomputer.dev/node")
        .cloned()
        .unwrap_or_default();
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let status_move = match (
        labels.get("agentcomputer.dev/move-target"),
        annotations.get("agentcomputer.dev/hand-over-to"),
    ) {
        (_, Some(target)) => serde_json::json!({"source": source, "target": target,
            "reason": "Requested", "phase": "HandingOver", "startedTime": now, "handOverTime": now}),
        (Some(target), None) => serde_json::json!({"source": source, "target": target,
            "reason": "Requested", "phase": "Preparing", "startedTime": now}),
        (None, None) => serde_json::Value::Null,
    };
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"status": {"move": status_move}})),
    )
    .await
    .unwrap();
}

/// Appends `n` to `records` through `c`: acknowledged when it returns
/// `Ok(true)`; `Ok(false)` is an exec that did not finish (cancelled by
/// the hand-over: exit 130), which may or may not have written.
async fn append(c: &mut Api_, n: u32) -> Result<bool, tonic::Status> {
    let (_, code) = exec(
        c,
        "mover",
        pb::Runtime::Shell,
        &format!("echo {n} >> records"),
    )
    .await?;
    assert!(code == 0 || code == 130, "exit {code}");
    Ok(code == 0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_computer_moves_between_live_agents_and_no_acknowledged_write_is_lost() {
    if support::skipped() {
        return;
    }
    let (cluster, admin) = prepared_cluster().await;
    let launch = |node: &str| Launch {
        node: node.into(),
        idle_timeout: "5m".into(),
        extra: backup_args(&cluster),
        ..Launch::default()
    };
    let data1 = cluster.dir.path().join("data-n1");
    let data2 = cluster.dir.path().join("data-n2");
    let first = Agent::launch(&cluster, &data1, "node-agent-n1.log", launch("n1")).await;
    let second = Agent::launch(&cluster, &data2, "node-agent-n2.log", launch("n2")).await;
    let tok = token("mover");
    let uid = computer(
        &admin,
        NS_A,
        "mover",
        "n1",
        serde_json::json!({"storage": {"size": "256Mi"}}),
        &tok,
    )
    .await;
    let mut c1 = first.client(Some(&tok)).await;
    let mut c2 = second.client(Some(&tok)).await;
    let computers: Api<AgentComputer> = Api::namespaced(admin.clone(), NS_A);
    eventually(30, "n1 to serve the computer", || {
        let mut c1 = c1.clone();
        async move { append(&mut c1, 0).await.ok().filter(|ok| *ok) }
    })
    .await;
    // Some bulk, so that the background restore has something to do.
    let (_, code) = exec(
        &mut c1,
        "mover",
        pb::Runtime::Shell,
        "seq 1 200000 > bulk; wc -l < bulk",
    )
    .await
    .unwrap();
    assert_eq!(code, 0);
    let mut acked: Vec<u32> = vec![0];
    let mut next = 1;
    for _ in 0..20 {
        assert!(append(&mut c1, next).await.unwrap());
        acked.push(next);
        next += 1;
    }

    // The label and annotation alone (as a user who may edit the
    // computer could set them) move nothing: agents act on the move the
    // operator's status names.
    computers
        .patch(
            "mover",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {
                "labels": {"agentcomputer.dev/move-target": "n2"},
                "annotations": {"agentcomputer.dev/hand-over-to": "n2"},
            }})),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !data2.join("computers").join(&uid).exists(),
        "n2 restored for a label alone"
    );
    assert_eq!(
        lease_annotation(&admin, &uid, "agentcomputer.dev/handed-over-to").await,
        None
    );
    assert!(append(&mut c1, next).await.unwrap(), "n1 still serves");
    acked.push(next);
    next += 1;
    computers
        .patch(
            "mover",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {
                "labels": {"agentcomputer.dev/move-target": null},
                "annotations": {"agentcomputer.dev/hand-over-to": null},
            }})),
        )
        .await
        .unwrap();

    // --- Preparing: n2 restores while n1 serves. ---
    patch_meta(
        &computers,
        "mover",
        serde_json::json!({"labels": {"agentcomputer.dev/move-target": "n2"}}),
    )
    .await;
    let prepared = eventually(60, "n2 to prepare", || async {
        lease_annotation(&admin, &uid, "agentcomputer.dev/prepared-on").await
    })
    .await;
    assert!(prepared.starts_with("n2 "), "{prepared}");
    assert!(data2.join("computers").join(&uid).exists(), "n2 restored");
    assert_eq!(
        lease_holder(&admin, &uid).await.as_deref(),
        Some("n1"),
        "n2 restored without taking the Lease"
    );
    // n1 keeps serving: these must be caught up on n2 later.
    for _ in 0..20 {
        assert!(append(&mut c1, next).await.unwrap());
        acked.push(next);
        next += 1;
    }

    // --- Hand-over, with a writer that keeps calling. ---
    let writer = {
        let (mut a, mut b) = (c1.clone(), c2.clone());
        let mut next = next;
        tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut on_n2 = false;
            let mut longest = Duration::ZERO;
            let mut moved_answers = 0;
            let deadline = Instant::now() + Duration::from_secs(90);
            while acked.len() < 60 && Instant::now() < deadline {
                let started = Instant::now();
                let c = if on_n2 { &mut b } else { &mut a };
                match append(c, next).await {
                    Ok(true) => {
                        acked.push(next);
                        next += 1;
                        longest = longest.max(started.elapsed());
                    }
                    // Cut by the hand-over: not acknowledged; the next
                    // number is new, so a record written anyway is
                    // merely extra.
                    Ok(false) => next += 1,
                    Err(s) if s.metadata().get("agentcomputer-moved-to").is_some() => {
                        assert_eq!(s.code(), Code::Unavailable, "{s:?}");
                        assert!(s.message().contains("moved to node n2"), "{s:?}");
                        moved_answers += 1;
                        on_n2 = true;
                    }
                    // The target before it is the computer's node, or
                    // the source's engine refusing a write in flight at
                    // the hand-over: not acknowledged, tried again.
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (acked, moved_answers, longest)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let hand_over_started = Instant::now();
    patch_meta(
        &computers,
        "mover",
        serde_json::json!({"annotations": {"agentcomputer.dev/hand-over-to": "n2"}}),
    )
    .await;
    let handed = eventually(30, "n1 to hand over", || async {
        lease_annotation(&admin, &uid, "agentcomputer.dev/handed-over-to").await
    })
    .await;
    assert!(handed.starts_with("n2 "), "{handed}");
    assert_eq!(
        lease_holder(&admin, &uid).await,
        None,
        "n1 released the Lease"
    );
    // The switch, as the operator makes it.
    patch_meta(
        &computers,
        "mover",
        serde_json::json!({
            "labels": {"agentcomputer.dev/node": "n2", "agentcomputer.dev/move-target": null},
            "annotations": {"agentcomputer.dev/hand-over-to": null},
        }),
    )
    .await;
    eventually(30, "n2 to serve the computer", || {
        let mut c2 = c2.clone();
        async move { read(&mut c2, "mover", "records").await.ok() }
    })
    .await;
    let freeze = hand_over_started.elapsed();
    let (more, moved_answers, longest) = writer.await.unwrap();
    acked.extend(more);
    assert!(
        moved_answers >= 1,
        "a call that waited was told where the computer went"
    );

    // Every acknowledged record is on n2, once, in order.
    let text = read(&mut c2, "mover", "records").await.unwrap();
    let records: Vec<u32> = String::from_utf8(text)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    for n in &acked {
        assert!(records.contains(n), "acknowledged record {n} missing on n2");
    }
    assert_eq!(lease_holder(&admin, &uid).await.as_deref(), Some("n2"));
    let bulk = exec(&mut c2, "mover", pb::Runtime::Shell, "wc -l < bulk")
        .await
        .unwrap();
    assert_eq!(bulk.0.trim(), "200000");
    // n2 restored once (in the background) and then only caught up.
    let log2 = std::fs::read_to_string(cluster.dir.path().join("node-agent-n2.log")).unwrap();
    assert!(
        log2.contains("caught this node's copy up with the backup log"),
        "n2's log:\n{}",
        second.proc.log_tail()
    );
    assert_eq!(
        log2.matches("restored computer from the backup store")
            .count(),
        1,
        "n2's log:\n{}",
        second.proc.log_tail()
    );
    // A call to n1 now is told where it went.
    let (code, msg) = code_of(read(&mut c1, "mover", "records").await);
    assert_eq!(code, Code::Unavailable, "{msg}");
    assert!(msg.contains("moved to node n2"), "{msg}");
    println!(
        "move: {} records acknowledged; hand-over to first answer on n2 {} ms; longest call {} ms",
        acked.len(),
        freeze.as_millis(),
        longest.as_millis()
    );
    // Back to n1 while it still has its old copy: prepared by catching
    // that copy up, and served there again (not "moved" any more).
    patch_meta(
        &computers,
        "mover",
        serde_json::json!({"labels": {"agentcomputer.dev/move-target": "n1"}}),
    )
    .await;
    eventually(60, "n1 to prepare", || async {
        lease_annotation(&admin, &uid, "agentcomputer.dev/prepared-on")
            .await
            .filter(|v| v.starts_with("n1 "))
    })
    .await;
    patch_meta(
        &computers,
        "mover",
        serde_json::json!({"annotations": {"agentcomputer.dev/hand-over-to": "n1"}}),
    )
    .await;
    eventually(30, "n2 to hand over", || async {
        lease_annotation(&admin, &uid, "agentcomputer.dev/handed-over-to")
            .await
            .filter(|v| v.starts_with("n1 "))
    })
    .await;
    patch_meta(
        &computers,
        "mover",
        serde_json::json!({
            "labels": {"agentcomputer.dev/node": "n1", "agentcomputer.dev/move-target": null},
            "annotations": {"agentcomputer.dev/hand-over-to": null},
        }),
    )
    .await;
    let mut c1 = first.client(Some(&tok)).await;
    let back = eventually(30, "n1 to serve the computer again", || {
        let mut c1 = c1.clone();
        async move { read(&mut c1, "mover", "records").await.ok() }
    })
    .await;
    assert_eq!(back, read(&mut c1, "mover", "records").await.unwrap());
    append(&mut c1, next + 1000).await.unwrap();
    let log1 = std::fs::read_to_string(cluster.dir.path().join("node-agent-n1.log")).unwrap();
    assert!(
        log1.contains("caught this node's copy up with the backup log")
            && !log1.contains("restored computer from the backup store"),
        "n1 caught its own old copy up rather than restoring it:\n{}",
        first.proc.log_tail()
    );

    // n2 comes back (restarted): the store's log has gone past its copy,
    // so the copy goes; n1 keeps serving.
    assert!(
        data2.join("computers").join(&uid).exists(),
        "n2 kept its copy while serving nothing"
    );
    second.stop().await;
    let second = Agent::launch(&cluster, &data2, "node-agent-n2-again.log", launch("n2")).await;
    eventually(
        60,
        "n2 to remove the copy the log has gone past",
        || async { (!data2.join("computers").join(&uid).exists()).then_some(()) },
    )
    .await;
    assert_eq!(
        exec(&mut c1, "mover", pb::Runtime::Shell, "wc -l < bulk")
            .await
            .unwrap()
            .0
            .trim(),
        "200000"
    );
    first.stop().await;
    second.stop().await;
}

/// Timings of a move and of a failover for computers of 10 MB and 1 GB
/// (or the sizes in `AGENTCOMPUTER_MOVE_SIZES`, MiB, comma-separated),
/// printed as a table for docs/benchmarks.md. Ignored by default (minutes,
/// and meaningful in a release build only):
/// `cargo test --release -p agentcomputer-node-agent --test moves -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn move_and_failover_timings() {
    if support::skipped() {
        return;
    }
    let sizes: Vec<u64> = std::env::var("AGENTCOMPUTER_MOVE_SIZES")
        .unwrap_or_else(|_| "10,1024".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let (cluster, admin) = prepared_cluster().await;
    let launch = |node: &str| Launch {
        node: node.into(),
        idle_timeout: "30m".into(),
        extra: backup_args(&cluster),
        ..Launch::default()
    };
    let data1 = cluster.dir.path().join("data-n1");
    let data2 = cluster.dir.path().join("data-n2");
    let computers: Api<AgentComputer> = Api::namespaced(admin.clone(), NS_A);
    let mut rows = Vec::new();
    for mib in sizes {
        let first = Agent::launch(&cluster, &data1, &format!("n1-{mib}.log"), launch("n1")).await;
        let second = Agent::launch(&cluster, &data2, &format!("n2-{mib}.log"), launch("n2")).await;
        let name = format!("t{mib}");
        let tok = token(&name);
        let uid = computer(
            &admin,
            NS_A,
            &name,
            "n1",
            serde_json::json!({"storage": {"size": format!("{}Mi", mib * 2 + 64)}}),
            &tok,
        )
        .await;
        let mut c1 = first.client(Some(&tok)).await;
        let mut c2 = second.client(Some(&tok)).await;
        eventually(30, "n1 to serve", || {
            let mut c1 = c1.clone();
            let name = name.clone();
            async move { exec(&mut c1, &name, pb::Runtime::Shell, "true").await.ok() }
        })
        .await;
        let (_, code) = exec(
            &mut c1,
            &name,
            pb::Runtime::Shell,
            &format!("head -c {} /dev/urandom > blob; echo 1 > n", mib << 20),
        )
        .await
        .unwrap();
        assert_eq!(code, 0);

        // Move n1 -> n2.
        let t = Instant::now();
        patch_meta(
            &computers,
            &name,
            serde_json::json!({"labels": {"agentcomputer.dev/move-target": "n2"}}),
        )
        .await;
        eventually(600, "n2 to prepare", || async {
            lease_annotation(&admin, &uid, "agentcomputer.dev/prepared-on").await
        })
        .await;
        let prepare = t.elapsed();
        exec(&mut c1, &name, pb::Runtime::Shell, "echo 2 >> n")
            .await
            .unwrap();
        let t = Instant::now();
        patch_meta(
            &computers,
            &name,
            serde_json::json!({"annotations": {"agentcomputer.dev/hand-over-to": "n2"}}),
        )
        .await;
        eventually(60, "n1 to hand over", || async {
            lease_annotation(&admin, &uid, "agentcomputer.dev/handed-over-to").await
        })
        .await;
        let hand_over = t.elapsed();
        patch_meta(
            &computers,
            &name,
            serde_json::json!({
                "labels": {"agentcomputer.dev/node": "n2", "agentcomputer.dev/move-target": null},
                "annotations": {"agentcomputer.dev/hand-over-to": null},
            }),
        )
        .await;
        let out = eventually(60, "n2 to serve", || {
            let mut c2 = c2.clone();
            let name = name.clone();
            async move { read(&mut c2, &name, "n").await.ok() }
        })
        .await;
        let freeze = t.elapsed();
        assert_eq!(out, b"1\n2\n");

        // Failover n2 -> n1: n2 killed while holding the Lease.
        exec(&mut c2, &name, pb::Runtime::Shell, "echo 3 >> n")
            .await
            .unwrap();
        sync_call(&mut c2, &name).await.unwrap();
        let mut second = second;
        second.proc.kill();
        let killed = Instant::now();
        patch_meta(
            &computers,
            &name,
            serde_json::json!({"labels": {"agentcomputer.dev/node": "n1"}}),
        )
        .await;
        let mut c1 = first.client(Some(&tok)).await;
        let out = eventually(600, "n1 to serve after the failover", || {
            let mut c1 = c1.clone();
            let name = name.clone();
            async move { read(&mut c1, &name, "n").await.ok() }
        })
        .await;
        let failover = killed.elapsed();
        assert_eq!(out, b"1\n2\n3\n");
        let (out, code) = exec(&mut c1, &name, pb::Runtime::Shell, "wc -c blob 2>&1")
            .await
            .unwrap();
        // `wc -c FILE` answers from the size (reading 1 GiB through stdin
        // would pass the exec's memory budget).
        assert_eq!(
            (out.trim(), code),
            (format!("{} blob", mib << 20).as_str(), 0),
            "the blob after the failover"
        );
        rows.push(format!(
            "| {mib} MiB | {:.2} s | {} ms | {} ms | {:.1} s (Lease {LEASE}) |",
            prepare.as_secs_f64(),
            hand_over.as_millis(),
            freeze.as_millis(),
            failover.as_secs_f64()
        ));
        first.stop().await;
    }
    println!(
        "| computer | target restores in background | source hands over | hand-over to first answer on target | failover (kill -9 to first answer) |"
    );
    println!("|---|---:|---:|---:|---:|");
    for r in rows {
        println!("{r}");
    }
}

/// `Sync`: everything the computer committed is in the store.
async fn sync_call(c: &mut Api_, name: &str) -> Result<(), tonic::Status> {
    c.sync(pb::SyncRequest {
        computer: name.into(),
    })
    .await
    .map(|_| ())
}
