//! The Lease holder against a real kube-apiserver and etcd (the operator's
//! test control plane): races, expiry, release, take-over, labels and
//! owners, and an API server that becomes unreachable while a Lease is held.
//!
//! The tests run one at a time, each with its own control plane, so that
//! the timing assertions do not compete with other API servers for CPU.

#[path = "../../operator/tests/support/mod.rs"]
mod support;

mod proxy;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use agentcomputer_lease::{AcquireError, HeldLease, LeaseLock, Lost, Timing};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use proxy::Proxy;
use support::Cluster;

const NS: &str = "default";

/// Short durations: a 3 s lease, a 2 s renew deadline, renewed every 0.5 s.
const TIMING: Timing = Timing {
    lease_duration: Duration::from_secs(3),
    renew_deadline: Duration::from_secs(2),
    retry_period: Duration::from_millis(500),
};

/// How late past its deadline validity may be seen to end (polling, timers).
const MARGIN: Duration = Duration::from_millis(250);

/// One control plane at a time (see the module comment).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn cluster() -> Option<Cluster> {
    if support::skipped() {
        return None;
    }
    Some(Cluster::start().await)
}

/// An admin client whose requests go to `url` (e.g. a proxy) instead.
async fn client_via(cluster: &Cluster, url: &str) -> Client {
    let kc = Kubeconfig::read_from(&cluster.kubeconfig).unwrap();
    let mut cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    cfg.cluster_url = url.parse().unwrap();
    Client::try_from(cfg).unwrap()
}

fn lock(client: &Client, name: &str, identity: &str) -> LeaseLock {
    LeaseLock::new(Api::namespaced(client.clone(), NS), name, identity, TIMING).unwrap()
}

async fn spec(admin: &Client, name: &str) -> LeaseSpec {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), NS);
    leases.get(name).await.unwrap().spec.unwrap()
}

fn renew_time(spec: &LeaseSpec) -> Timestamp {
    spec.renew_time.as_ref().expect("a renewTime").0
}

fn secs(d: Duration) -> SignedDuration {
    SignedDuration::try_from(d).unwrap()
}

/// Tries to acquire every 100 ms until it works; every refusal before must
/// name `holder`. Returns the holder and the wall-clock time it succeeded.
async fn acquire_when_free(
    lock: &LeaseLock,
    holder: &str,
    within: Duration,
) -> (HeldLease, Timestamp) {
    let start = Instant::now();
    loop {
        let now = Timestamp::now();
        match lock.acquire().await {
            Ok(held) => return (held, now),
            Err(AcquireError::Held { holder: h, .. }) => assert_eq!(h, holder),
            Err(e) => panic!("unexpected refusal: {e}"),
        }
        assert!(start.elapsed() < within, "not acquired within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn racing_candidates_each_round_exactly_one_wins() {
    let _serial = SERIAL.lock().await;
    let Some(cluster) = cluster().await else {
        return;
    };
    let admin = cluster.admin().await;
    // Separate clients: separate connections, truly concurrent requests.
    let a_client = cluster.admin().await;
    let b_client = cluster.admin().await;
    let leases: Api<Lease> = Api::namespaced(admin.clone(), NS);
    let mut wins = BTreeMap::<String, u32>::new();
    for round in 0..30 {
        // Three ways a Lease is free: absent (both create), released by its
        // last winner, expired under a holder that stopped renewing.
        let name = format!("race-{}", round / 3);
        if round % 3 == 2 {
            let mut lease = leases.get(&name).await.unwrap();
            let spec = lease.spec.as_mut().unwrap();
            spec.holder_identity = Some("gone".into());
            spec.renew_time = Some(MicroTime(Timestamp::now() - SignedDuration::from_secs(60)));
            spec.lease_duration_seconds = Some(3);
            leases
                .replace(&name, &PostParams::default(), &lease)
                .await
                .unwrap();
        }
        let a = lock(&a_client, &name, "a");
        let b = lock(&b_client, &name, "b");
        let (ra, rb) = tokio::join!(a.acquire(), b.acquire());
        let (winner, loser) = match (ra, rb) {
            (Ok(w), Err(l)) | (Err(l), Ok(w)) => (w, l),
            (Ok(_), Ok(_)) => panic!("round {round}: both candidates hold {name}"),
            (Err(ea), Err(eb)) => panic!("round {round}: nobody won {name}: {ea}; {eb}"),
        };
        match &loser {
            AcquireError::Race => {}
            AcquireError::Held { holder, .. } => assert_eq!(holder, winner.identity()),
            AcquireError::Api(e) => panic!("round {round}: {e}"),
        }
        assert_eq!(winner.valid(), Ok(()));
        let holder = spec(&admin, &name).await.holder_identity.unwrap();
        assert_eq!(
            holder,
            winner.identity(),
            "round {round}: the Lease names the winner"
        );
        *wins.entry(holder).or_default() += 1;
        // Released for the next round (the third kind of round overwrites it).
        assert!(winner.release().await.unwrap());
    }
    assert_eq!(wins.values().sum::<u32>(), 30, "{wins:?}");
    eprintln!("wins: {wins:?}");
}

#[tokio::test]
async fn a_held_lease_is_refused_until_it_expires() {
    let _serial = SERIAL.lock().await;
    let Some(cluster) = cluster().await else {
        return;
    };
    let admin = cluster.admin().await;
    let a = lock(&admin, "held", "a").acquire().await.unwrap();
    let b = lock(&admin, "held", "b");
    // Twice the lease duration: a's renewals keep it held throughout.
    let start = Instant::now();
    while start.elapsed() < TIMING.lease_duration * 2 {
        let err = b.acquire().await.err().expect("b must be refused");
        let AcquireError::Held { holder, until } = &err else {
            panic!("{err}");
        };
        assert_eq!(holder, "a");
        assert!(*until > Timestamp::now(), "{err}");
        assert!(err.to_string().starts_with("held by a until 20"), "{err}");
        assert_eq!(a.valid(), Ok(()));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // a stops renewing without releasing: the Lease expires on its own.
    let fence = a.fence();
    drop(a);
    assert_eq!(fence.valid(), Err(Lost::Released));
    let last = renew_time(&spec(&admin, "held").await);
    let (b_held, at) = acquire_when_free(&b, "a", Duration::from_secs(10)).await;
    let expiry = last + secs(TIMING.lease_duration);
    assert!(at > expiry, "taken at {at}, before the expiry {expiry}");
    assert!(
        at < expiry + SignedDuration::from_millis(1_500),
        "taken at {at}, long after {expiry}"
    );
    let after = spec(&admin, "held").await;
    assert_eq!(after.holder_identity.as_deref(), Some("b"));
    assert_eq!(after.lease_transitions, Some(1));
    assert_eq!(b_held.valid(), Ok(()));
}

#[tokio::test]
async fn a_release_lets_another_take_it_at_once() {
    let _serial = SERIAL.lock().await;
    let Some(cluster) = cluster().await else {
        return;
    };
    let admin = cluster.admin().await;
    let a = lock(&admin, "handover", "a").acquire().await.unwrap();
    let b = lock(&admin, "handover", "b");
    assert!(matches!(b.acquire().await, Err(AcquireError::Held { .. })));
    let fence = a.fence();
    assert!(a.release().await.unwrap());
    assert_eq!(fence.valid(), Err(Lost::Released));
    assert!(fence.token().is_cancelled());
    let released = spec(&admin, "handover").await;
    assert_eq!(released.holder_identity, None);
    // The first attempt succeeds: no waiting for the lease duration.
    let b_held = b.acquire().await.expect("b takes a released lease at once");
    assert_eq!(b_held.valid(), Ok(()));
    let taken = spec(&admin, "handover").await;
    assert_eq!(taken.holder_identity.as_deref(), Some("b"));
    assert_eq!(taken.lease_transitions, Some(1));
    // a's identity may take it back only after b releases it too.
    assert!(!lock(&admin, "handover", "a").release().await.unwrap());
    assert!(b_held.release().await.unwrap());
    lock(&admin, "handover", "a").acquire().await.unwrap();
}

/// How the API server becomes unreachable for the holder.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// Connections stay open, nothing answers: renewals hang.
    Hang,
    /// Connections close and new ones are refused: renewals fail at once.
    Close,
}

/// The holder's validity ends at the renew deadline after its last renew,
/// before the Lease expires; a second candidate takes the Lease only after
/// the lease duration.
async fn unreachable_api_server(cut: Cut) {
    let _serial = SERIAL.lock().await;
    let Some(cluster) = cluster().await else {
        return;
    };
    let admin = cluster.admin().await;
    let upstream: SocketAddr = cluster.url.trim_start_matches("https://").parse().unwrap();
    let proxy = Proxy::start(upstream).await;
    let through_proxy = client_via(&cluster, &proxy.url()).await;
    let a = lock(&through_proxy, "cut", "a").acquire().await.unwrap();
    // Several renewals go through.
    let acquired = renew_time(&spec(&admin, "cut").await);
    tokio::time::sleep(TIMING.retry_period * 3).await;
    assert!(
        renew_time(&spec(&admin, "cut").await) > acquired,
        "a renews"
    );
    assert_eq!(a.valid(), Ok(()));
    let fence = a.fence();
    let lost_at = tokio::spawn(async move {
        let why = fence.lost().await;
        (why, Instant::now())
    });

    let cut_at = Instant::now();
    match cut {
        Cut::Hang => proxy.hang(),
        Cut::Close => proxy.close(),
    }
    // A renew in flight may still land: read the last renewTime after it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let last_renew = renew_time(&spec(&admin, "cut").await);
    let expiry = last_renew + secs(TIMING.lease_duration);

    // a's validity ends no later than the renew deadline after the cut
    // (its last renew started before it), and not much earlier: it had
    // renewed within a retry period before the cut.
    let b = lock(&admin, "cut", "b");
    let invalid_at = loop {
        if a.valid().is_err() {
            break Instant::now();
        }
        assert!(
            cut_at.elapsed() <= TIMING.renew_deadline + MARGIN,
            "a still valid {:?} after the cut",
            cut_at.elapsed()
        );
        // Meanwhile nobody else may take the Lease.
        assert!(matches!(b.acquire().await, Err(AcquireError::Held { .. })));
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let invalid_wall = Timestamp::now();
    assert_eq!(a.valid(), Err(Lost::RenewDeadline), "{cut:?}");
    let after_cut = invalid_at - cut_at;
    let earliest = TIMING.renew_deadline - TIMING.retry_period - MARGIN;
    assert!(
        after_cut >= earliest,
        "{cut:?}: invalid {after_cut:?} after the cut"
    );
    assert!(
        invalid_wall < expiry,
        "{cut:?}: a stopped at {invalid_wall}, not before the Lease expired at {expiry}"
    );
    // The fence's waiters learn it as soon.
    let (why, fired_at) = tokio::time::timeout(Duration::from_secs(1), lost_at)
        .await
        .expect("lost() completes")
        .unwrap();
    assert_eq!(why, Lost::RenewDeadline);
    assert!(
        fired_at - cut_at <= TIMING.renew_deadline + MARGIN,
        "{cut:?}: lost() completed {:?} after the cut",
        fired_at - cut_at
    );

    // A second candidate takes the Lease only once it has expired.
    let (b_held, taken_at) = acquire_when_free(&b, "a", Duration::from_secs(5)).await;
    assert!(
        taken_at > expiry,
        "{cut:?}: b took it at {taken_at}, before {expiry}"
    );
    assert!(taken_at > invalid_wall);
    assert_eq!(b_held.valid(), Ok(()));
    // a stays lost.
    assert_eq!(a.valid(), Err(Lost::RenewDeadline));
}

#[tokio::test]
async fn unreachable_api_server_hanging_ends_validity_at_the_renew_deadline() {
    unreachable_api_server(Cut::Hang).await;
}

#[tokio::test]
async fn unreachable_api_server_refusing_ends_validity_at_the_renew_deadline() {
    unreachable_api_server(Cut::Close).await;
}

#[tokio::test]
async fn a_lease_taken_over_or_deleted_at_a_renew_is_lost() {
    let _serial = SERIAL.lock().await;
    let Some(cluster) = cluster().await else {
        return;
    };
    let admin = cluster.admin().await;
    let leases: Api<Lease> = Api::namespaced(admin.clone(), NS);
    let a = lock(&admin, "taken", "a").acquire().await.unwrap();
    let mut lease = leases.get("taken").await.unwrap();
    lease.spec.as_mut().unwrap().holder_identity = Some("intruder".into());
    leases
        .replace("taken", &PostParams::default(), &lease)
        .await
        .unwrap();
    let why = tokio::time::timeout(TIMING.retry_period * 2 + MARGIN, a.lost())
        .await
        .expect("lost at the next renew");
    assert_eq!(why, Lost::TakenBy("intruder".into()));
    assert_eq!(a.valid(), Err(Lost::TakenBy("intruder".into())));
    // Its release leaves the intruder's hold alone.
    assert!(!a.release().await.unwrap());
    assert_eq!(
        spec(&admin, "taken").await.holder_identity.as_deref(),
        Some("intruder")
    );

    let c = lock(&admin, "deleted", "c").acquire().await.unwrap();
    leases
        .delete("deleted", &DeleteParams::default())
        .await
        .unwrap();
    let why = tokio::time::timeout(TIMING.retry_period * 2 + MARGIN, c.lost())
        .await
        .expect("lost at the next renew");
    assert_eq!(why, Lost::Gone);
    assert!(
        leases.get_opt("deleted").await.unwrap().is_none(),
        "not recreated"
    );
}

#[tokio::test]
async fn leases_carry_labels_and_the_callers_owner() {
    let _serial = SERIAL.lock().await;
    let Some(cluster) = cluster().await else {
        return;
    };
    let admin = cluster.admin().await;
    let leases: Api<Lease> = Api::namespaced(admin.clone(), NS);
    let maps: Api<ConfigMap> = Api::namespaced(admin.clone(), NS);
    let owner = maps
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("computer-c1".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let owner_ref = OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "computer-c1".into(),
        uid: owner.metadata.uid.clone().unwrap(),
        ..Default::default()
    };
    let labels = BTreeMap::from([
        (
            "app.kubernetes.io/managed-by".to_string(),
            "lease-test".to_string(),
        ),
        ("agentcomputer.dev/computer".to_string(), "c1".to_string()),
    ]);
    let labelled = |name: &str, identity: &str| {
        lock(&admin, name, identity)
            .with_labels(labels.clone())
            .with_owner(owner_ref.clone())
    };
    // Created with them.
    let held = labelled("c1", "node-a").acquire().await.unwrap();
    // Taken over from a Lease created without them: added, others kept.
    leases
        .create(
            &PostParams::default(),
            &Lease {
                metadata: ObjectMeta {
                    name: Some("c2".into()),
                    labels: Some(BTreeMap::from([("kept".to_string(), "yes".to_string())])),
                    ..Default::default()
                },
                spec: Some(LeaseSpec::default()),
            },
        )
        .await
        .unwrap();
    let _held2 = labelled("c2", "node-a").acquire().await.unwrap();
    // A Lease of someone else's, unlabelled.
    let _other = lock(&admin, "unrelated", "node-a").acquire().await.unwrap();

    let listed = leases
        .list(&ListParams::default().labels("app.kubernetes.io/managed-by=lease-test"))
        .await
        .unwrap();
    let mut names: Vec<String> = listed
        .items
        .iter()
        .filter_map(|l| l.metadata.name.clone())
        .collect();
    names.sort();
    assert_eq!(names, ["c1", "c2"]);
    for lease in &listed.items {
        assert_eq!(
            lease.metadata.owner_references.as_deref(),
            Some(&[owner_ref.clone()][..])
        );
    }
    let c2 = leases.get("c2").await.unwrap();
    assert_eq!(
        c2.metadata.labels.unwrap().get("kept").map(String::as_str),
        Some("yes")
    );
    // Renewals keep them (they replace the object as written).
    tokio::time::sleep(TIMING.retry_period * 3).await;
    assert_eq!(held.valid(), Ok(()));
    let c1 = leases.get("c1").await.unwrap();
    assert_eq!(c1.metadata.labels.as_ref(), Some(&labels));
}

/// A holder that stops renewing (a process going away while its threads
/// may still finish a write) stays valid until the renew deadline of its
/// last renew, then not; the Lease keeps its holder, and another identity
/// can take it only after the lease duration.
#[tokio::test]
async fn a_holder_that_stops_renewing_lapses_at_the_renew_deadline() {
    let _serial = SERIAL.lock().await;
    let Some(cluster) = cluster().await else {
        return;
    };
    let admin = cluster.admin().await;
    let a = lock(&admin, "lapsing", "a").acquire().await.unwrap();
    // Past a renew, so the deadline counts from a renew's start.
    tokio::time::sleep(TIMING.retry_period * 2).await;
    let stopped = std::time::Instant::now();
    let fence = a.stop_renewing();
    assert_eq!(fence.valid(), Ok(()), "still valid right after");
    let lost = fence.lost().await;
    let after = stopped.elapsed();
    assert_eq!(lost, Lost::RenewDeadline);
    assert!(
        after <= TIMING.renew_deadline + Duration::from_millis(250),
        "valid for {after:?} after the last renew could have happened"
    );
    assert!(
        after >= TIMING.renew_deadline - TIMING.retry_period * 2 - Duration::from_millis(250),
        "lapsed after only {after:?}"
    );
    assert_eq!(
        spec(&admin, "lapsing").await.holder_identity.as_deref(),
        Some("a"),
        "the Lease keeps its holder"
    );
    let b = lock(&admin, "lapsing", "b");
    assert!(matches!(b.acquire().await, Err(AcquireError::Held { .. })));
}
