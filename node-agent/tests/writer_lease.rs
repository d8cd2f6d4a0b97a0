//! The writer Lease of `node-agent cluster --backup` against a real
//! kube-apiserver and etcd (the operator's test support), the agent
//! running as its service account under the RBAC docs/cluster.md lists:
//! the Lease `ac-<uid>` is held while a computer is open and released when
//! it hibernates; a second node is refused while the first holds it, then
//! serves the computer from the backup once the first stopped; and when
//! the API server cannot be reached, the computer's runs end at the renew
//! deadline, nothing is committed after it, and calls are refused until
//! the server answers again.
//!
//! One test at a time: each has its own control plane, and the timing
//! assertions should not compete with another one for the two CPUs.

mod cluster_support;

#[path = "../../lease/tests/proxy/mod.rs"]
#[allow(dead_code)]
mod proxy;

use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agentcomputer_crds::AgentComputer;
use agentcomputer_proto::v1 as pb;
use cluster_support::support::{self, Cluster, SYSTEM_NS, eventually};
use cluster_support::*;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams};
use proxy::Proxy;
use tonic::Code;

/// One control plane at a time (see the module comment).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `--writer-lease-duration`: short, so that a lost Lease shows quickly.
const LEASE: Duration = Duration::from_secs(3);
/// Its renew deadline, client-go's 10/15 of it: the agent commits nothing
/// later than this after the start of its last successful renew.
const RENEW_DEADLINE: Duration = Duration::from_secs(2);

/// The arguments that make the agent back computers up (to a directory
/// under the cluster's, shared by every agent of the test) and hold their
/// writer Leases.
fn backup_args(cluster: &Cluster) -> Vec<String> {
    let dir = cluster.dir.path().join("backup");
    std::fs::create_dir_all(&dir).unwrap();
    vec![
        "--backup".into(),
        format!("file://{}", dir.display()),
        "--writer-lease-duration".into(),
        format!("{}s", LEASE.as_secs()),
    ]
}

/// Computer `uid`'s writer Lease, if it exists.
async fn writer_lease(admin: &kube::Client, uid: &str) -> Option<Lease> {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), SYSTEM_NS);
    leases.get_opt(&format!("ac-{uid}")).await.unwrap()
}

/// The Lease's holder; None when it was released (or never held).
fn holder(lease: &Lease) -> Option<String> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .filter(|h| !h.is_empty())
}

/// Wall-clock time in nanoseconds since the epoch, as `date +%s%N` says it.
fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128
}

/// Waits until the agent knows computer `name`'s token (the first call
/// opens the computer, and so takes its Lease).
async fn opened(c: &Api_, name: &str) {
    eventually(30, "the computer's credential on the agent", || {
        let mut c = c.clone();
        let name = name.to_string();
        async move { stat(&mut c, &name, "/workspace").await.ok() }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_lease_is_held_while_open_and_released_at_hibernation() {
    let _serial = SERIAL.lock().await;
    if support::skipped() {
        return;
    }
    let (cluster, admin) = prepared_cluster().await;
    let data = cluster.dir.path().join("data");
    let launch = Launch {
        idle_timeout: "2s".into(),
        extra: backup_args(&cluster),
        ..Launch::default()
    };
    let agent = Agent::launch(&cluster, &data, "node-agent-held.log", launch).await;
    let tok = token("held");
    let uid = computer(
        &admin,
        NS_A,
        "held",
        NODE,
        serde_json::json!({"storage": {"size": "64Mi"}}),
        &tok,
    )
    .await;
    let c = agent.client(Some(&tok)).await;
    opened(&c, "held").await;

    // A run keeps the computer open (not idle) while the Lease is looked at.
    let run = tokio::spawn({
        let mut c = c.clone();
        async move { exec(&mut c, "held", pb::Runtime::Shell, "echo a > a; sleep 4").await }
    });
    let lease = writer_lease(&admin, &uid).await.expect("the writer Lease");
    assert_eq!(holder(&lease).as_deref(), Some(NODE), "{lease:?}");
    let labels = lease.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("agentcomputer-node-agent"),
        "{labels:?}"
    );
    assert_eq!(
        labels.get("agentcomputer.dev/computer-uid"),
        Some(&uid),
        "{labels:?}"
    );
    let spec = lease.spec.clone().unwrap();
    assert_eq!(spec.lease_duration_seconds, Some(LEASE.as_secs() as i32));
    // Renewed while open: every 0.4 s with a 3 s Lease.
    let first = spec.renew_time.expect("a renewTime").0;
    eventually(5, "the Lease renewed", || {
        let admin = admin.clone();
        let uid = uid.clone();
        async move {
            let spec = writer_lease(&admin, &uid).await?.spec?;
            (spec.holder_identity.as_deref() == Some(NODE) && spec.renew_time?.0 > first)
                .then_some(())
        }
    })
    .await;
    let (_, code) = run.await.unwrap().expect("the run");
    assert_eq!(code, 0);

    // Idle for 2 s: hibernated, and the Lease released (not deleted).
    eventually(20, "the Lease released at hibernation", || {
        let admin = admin.clone();
        let uid = uid.clone();
        async move {
            let lease = writer_lease(&admin, &uid).await.expect("the Lease stays");
            holder(&lease).is_none().then_some(())
        }
    })
    .await;
    let log = std::fs::read_to_string(&agent.proc.log).unwrap();
    assert!(log.contains("closed computer"), "{log}");

    // The next call opens it again, under the Lease again.
    let mut c = c.clone();
    assert_eq!(read(&mut c, "held", "a").await.unwrap(), b"a\n");
    let lease = writer_lease(&admin, &uid).await.unwrap();
    assert_eq!(holder(&lease).as_deref(), Some(NODE), "{lease:?}");
    agent.stop().await;
    let lease = writer_lease(&admin, &uid).await.unwrap();
    assert_eq!(holder(&lease), None, "released at shutdown: {lease:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_node_waits_for_the_writer_then_serves_the_computer_from_its_backup() {
    let _serial = SERIAL.lock().await;
    if support::skipped() {
        return;
    }
    let (cluster, admin) = prepared_cluster().await;
    // Long idle timeouts: the first node holds the computer until it stops.
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
    let tok = token("moved");
    let uid = computer(
        &admin,
        NS_A,
        "moved",
        "n1",
        serde_json::json!({"storage": {"size": "64Mi"}}),
        &tok,
    )
    .await;
    let mut c1 = first.client(Some(&tok)).await;
    opened(&c1, "moved").await;
    write(&mut c1, "moved", "note", b"written on n1\n")
        .await
        .unwrap();
    let lease = writer_lease(&admin, &uid).await.unwrap();
    assert_eq!(holder(&lease).as_deref(), Some("n1"), "{lease:?}");

    // The operator places the computer on n2 while n1 still serves it.
    let computers: Api<AgentComputer> = Api::namespaced(admin.clone(), NS_A);
    computers
        .patch(
            "moved",
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"metadata": {"labels": {"agentcomputer.dev/node": "n2"}}}),
            ),
        )
        .await
        .unwrap();
    let c2 = second.client(Some(&tok)).await;
    // Until n2 has seen the computer its token is unknown there.
    let (code, msg) = eventually(30, "n2 to know the computer", || {
        let mut c2 = c2.clone();
        async move {
            match read(&mut c2, "moved", "note").await {
                Err(s) if s.code() == Code::Unauthenticated => None,
                r => Some(code_of(r)),
            }
        }
    })
    .await;
    assert_eq!(code, Code::Unavailable, "{msg}");
    assert!(msg.contains("is served by n1"), "{msg}");
    // n2 restored nothing while n1 was the writer.
    assert!(
        !data2.join("computers").join(&uid).exists(),
        "n2 made the computer's directory while n1 held its Lease"
    );
    let lease = writer_lease(&admin, &uid).await.unwrap();
    assert_eq!(holder(&lease).as_deref(), Some("n1"), "{lease:?}");

    // n1 stops: it closes the computer, its last writes go to the backup,
    // and it releases the Lease, so n2 need not wait for it to expire.
    first.stop().await;
    // Released (n2 may have taken it at once: its watch restores a
    // computer placed here as soon as it can).
    let lease = writer_lease(&admin, &uid).await.unwrap();
    assert_ne!(holder(&lease).as_deref(), Some("n1"), "{lease:?}");
    let mut c2 = c2.clone();
    let note = tokio::time::timeout(Duration::from_secs(30), read(&mut c2, "moved", "note"))
        .await
        .expect("n2 to answer")
        .expect("n2 to serve the computer, restored from the backup");
    assert_eq!(note, b"written on n1\n");
    assert!(data2.join("computers").join(&uid).exists());
    let lease = writer_lease(&admin, &uid).await.unwrap();
    assert_eq!(holder(&lease).as_deref(), Some("n2"), "{lease:?}");
    let (out, code) = exec(
        &mut c2,
        "moved",
        pb::Runtime::Shell,
        "echo written on n2 >> note; cat note",
    )
    .await
    .unwrap();
    assert_eq!((out.as_str(), code), ("written on n1\nwritten on n2\n", 0));
    second.stop().await;
}

/// The lines of `g` as the writer script writes them: (number, the
/// `date +%s%N` taken just before the line was appended).
fn lines(text: &[u8]) -> Vec<(u32, i128)> {
    String::from_utf8_lossy(text)
        .lines()
        .map(|l| {
            let (n, ns) = l.split_once(' ').unwrap_or_else(|| panic!("line {l:?}"));
            (n.parse().unwrap(), ns.parse().unwrap())
        })
        .collect()
}

/// An agent (with backup and writer Leases) that reaches the API server
/// through a proxy the test can cut, idle after `idle_timeout`.
async fn proxied_agent(cluster: &Cluster, idle_timeout: &str, log: &str) -> (Proxy, Agent) {
    let upstream: SocketAddr = cluster
        .url
        .strip_prefix("https://")
        .unwrap()
        .parse()
        .unwrap();
    let proxy = Proxy::start(upstream).await;
    let kubeconfig = cluster.dir.path().join("node-agent-proxied.kubeconfig");
    let text = std::fs::read_to_string(&cluster.node_agent_kubeconfig).unwrap();
    assert!(text.contains(&cluster.url));
    std::fs::write(&kubeconfig, text.replace(&cluster.url, &proxy.url())).unwrap();
    let launch = Launch {
        idle_timeout: idle_timeout.into(),
        kubeconfig: Some(kubeconfig),
        extra: backup_args(cluster),
        ..Launch::default()
    };
    let agent = Agent::launch(cluster, &cluster.dir.path().join("data"), log, launch).await;
    (proxy, agent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_stops_the_writes_at_the_renew_deadline() {
    let _serial = SERIAL.lock().await;
    if support::skipped() {
        return;
    }
    let (cluster, admin) = prepared_cluster().await;
    let (proxy, agent) = proxied_agent(&cluster, "5m", "node-agent-cut.log").await;
    let tok = token("cut");
    let uid = computer(
        &admin,
        NS_A,
        "cut",
        NODE,
        serde_json::json!({"storage": {"size": "64Mi"}}),
        &tok,
    )
    .await;
    let mut c = agent.client(Some(&tok)).await;
    opened(&c, "cut").await;
    // The lines' stamps below are compared with the test's clock: the
    // shell must show the same one.
    let (out, _) = exec(&mut c, "cut", pb::Runtime::Shell, "date +%s%N")
        .await
        .unwrap();
    let skew = out.trim().parse::<i128>().unwrap() - now_ns();
    assert!(
        skew.abs() < 1_000_000_000,
        "the shell's clock is off by {skew} ns"
    );

    // A run that appends a numbered, stamped line every 50 ms or more,
    // for far longer than the test lets it.
    let writer = tokio::spawn({
        let mut c = c.clone();
        let req = pb::ExecRequest {
            computer: "cut".into(),
            runtime: pb::Runtime::Shell as i32,
            script: r#"for i in $(seq 1000); do echo "$i $(date +%s%N)" >> g; sleep 0.05; done"#
                .into(),
            ..Default::default()
        };
        async move { run(&mut c, req).await }
    });
    let seen = eventually(30, "the run's first lines", || {
        let mut c = c.clone();
        async move {
            let seen = lines(&read(&mut c, "cut", "g").await.ok()?);
            (seen.len() >= 10).then_some(seen)
        }
    })
    .await;

    // The cut. The last renew that counts started before it, so the agent
    // may commit until at most RENEW_DEADLINE after it (a bound, on the
    // same clock as the stamps), and at least until about 1.6 s after it
    // (renews go every 0.4 s).
    let cut = Instant::now();
    proxy.hang();
    let cut_done_ns = now_ns();
    let ended = tokio::time::timeout(RENEW_DEADLINE + Duration::from_secs(5), writer)
        .await
        .expect("the run to end once the Lease is lost")
        .unwrap();
    let took = cut.elapsed();
    let (_, exit) = ended.expect("the run's exit");
    assert!(
        exit.error.contains("this node stopped serving computer")
            && exit.error.contains("during the run"),
        "{exit:?}"
    );
    assert!(
        took <= RENEW_DEADLINE + Duration::from_secs(1),
        "the run ended {took:?} after the cut"
    );

    // The computer is closed here; opening it again needs the Lease, which
    // cannot be had now: UNAVAILABLE at once rather than a hang.
    let asked = Instant::now();
    let refused = tokio::time::timeout(
        Duration::from_secs(15),
        exec(&mut c, "cut", pb::Runtime::Shell, "echo late >> g"),
    )
    .await
    .expect("an answer while the API server is unreachable");
    let (code, msg) = code_of(refused);
    assert_eq!(code, Code::Unavailable, "{msg}");
    assert!(msg.contains("cannot take its writer lease"), "{msg}");
    assert!(
        asked.elapsed() <= RENEW_DEADLINE + Duration::from_secs(2),
        "refused after {:?}",
        asked.elapsed()
    );

    // The API server answers again: the next call takes the Lease again
    // and opens the computer as it was committed.
    proxy.resume();
    let text = eventually(30, "the computer served again", || {
        let mut c = c.clone();
        async move {
            tokio::time::timeout(Duration::from_secs(5), read(&mut c, "cut", "g"))
                .await
                .ok()?
                .ok()
        }
    })
    .await;
    let lease = writer_lease(&admin, &uid).await.unwrap();
    assert_eq!(holder(&lease).as_deref(), Some(NODE), "{lease:?}");
    let kept = lines(&text);
    let k = kept.len();
    // A prefix 1..k of the run's lines, with everything seen before the cut.
    for (at, (n, _)) in kept.iter().enumerate() {
        assert_eq!(*n as usize, at + 1, "{kept:?}");
    }
    assert!(k >= seen.len(), "{k} lines kept, {} seen", seen.len());
    assert_eq!(kept[..seen.len()], seen[..]);
    // Nothing committed after the deadline: every kept line was stamped
    // before its append committed, so before the deadline.
    let deadline_ns = cut_done_ns + RENEW_DEADLINE.as_nanos() as i128;
    let (last, last_ns) = kept[k - 1];
    assert!(
        last_ns < deadline_ns,
        "line {last} was stamped {} ms after the cut, past the renew deadline",
        (last_ns - cut_done_ns) / 1_000_000
    );
    // And the check is not empty: the run went on committing after the
    // cut (until about the deadline) and those lines were kept.
    let after_cut = kept.iter().filter(|(_, ns)| *ns > cut_done_ns).count();
    assert!(
        after_cut >= 3,
        "only {after_cut} lines committed after the cut: {kept:?}"
    );
    assert!(k < 1000);
    eprintln!(
        "{} lines seen before the cut, {k} kept, {after_cut} of them after it; the last stamped {} ms after it; the run ended {took:?} after it",
        seen.len(),
        (last_ns - cut_done_ns) / 1_000_000
    );

    // The proxied agent, and the stamps, agree with the API server: the
    // run is over and wrote nothing more while the test looked.
    let again = read(&mut c, "cut", "g").await.unwrap();
    assert_eq!(again, text);
    drop(proxy);
    drop(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_the_api_server_never_answers_holds_nothing_up() {
    let _serial = SERIAL.lock().await;
    if support::skipped() {
        return;
    }
    let (cluster, admin) = prepared_cluster().await;
    // Idle after 1 s: the computer hibernates while its Lease is still
    // valid (up to the 2 s renew deadline), so closing it tries to release
    // the Lease through the cut.
    let (proxy, agent) = proxied_agent(&cluster, "1s", "node-agent-release.log").await;
    let tok = token("release");
    let uid = computer(
        &admin,
        NS_A,
        "release",
        NODE,
        serde_json::json!({"storage": {"size": "64Mi"}}),
        &tok,
    )
    .await;
    let mut c = agent.client(Some(&tok)).await;
    opened(&c, "release").await;
    write(&mut c, "release", "f", b"kept\n").await.unwrap();
    proxy.hang();
    let cut = Instant::now();
    let log = agent.proc.log.clone();
    eventually(10, "the hibernation to close the computer", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        async move { text.contains("backup shipped at close").then_some(()) }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3).saturating_sub(cut.elapsed())).await;
    // The API server answers again (for new connections): the computer
    // opens again at once, rather than after the client's read timeout of
    // the hung release (minutes).
    proxy.resume();
    let resumed = Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match read(&mut c, "release", "f").await {
                Ok(data) => return data,
                Err(s) if s.code() == Code::Unavailable => {
                    tokio::time::sleep(Duration::from_millis(200)).await
                }
                Err(s) => panic!("{s:?}"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the computer not served {:?} after the API server answered again",
            resumed.elapsed()
        )
    });
    assert_eq!(got, b"kept\n");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("did not answer the release of the writer lease"),
        "{text}"
    );
    let lease = writer_lease(&admin, &uid).await.unwrap();
    assert_eq!(holder(&lease).as_deref(), Some(NODE), "{lease:?}");
}
