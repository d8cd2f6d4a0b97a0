//! Admission control and CPU fairness of execs, against a real
//! `node-agent local` over loopback gRPC.

mod common;

use std::time::{Duration, Instant};

use agentcomputer_proto::v1 as pb;
use common::{Agent, Client, create, exec_req, sh};
use tokio::task::JoinSet;

const SPIN: &str = "while true; do :; done";

/// Starts a spinning exec on `computer` and returns once it is admitted
/// (the call answered); the run lasts until the stream is dropped or
/// `timeout` passes.
async fn spin(
    c: &mut Client,
    computer: &str,
    timeout: Duration,
) -> Result<tonic::Streaming<pb::ExecEvent>, tonic::Status> {
    let mut req = exec_req(computer, SPIN);
    req.timeout_ms = timeout.as_millis() as u64;
    c.exec(req).await.map(tonic::Response::into_inner)
}

/// Drains `stream` to its end.
async fn drain(mut stream: tonic::Streaming<pb::ExecEvent>) {
    while let Ok(Some(_)) = stream.message().await {}
}

#[tokio::test]
async fn each_limit_refuses_with_resource_exhausted_and_names_itself() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(
        dir.path(),
        &[
            "--max-execs",
            "2",
            "--max-execs-per-computer",
            "1",
            "--exec-queue-wait",
            "300ms",
        ],
    );
    let mut c = agent.client().await;
    for name in ["a", "b", "c"] {
        create(&mut c, name, 0).await;
    }
    let long = Duration::from_secs(60);
    let a = spin(&mut c, "a", long).await.expect("first exec on a");

    let t = Instant::now();
    let e = spin(&mut c, "a", long).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().contains("max_execs_per_computer = 1"),
        "{}",
        e.message()
    );
    assert!(e.message().contains("waited 300ms"), "{}", e.message());
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );

    let b = spin(&mut c, "b", long).await.expect("first exec on b");
    let e = spin(&mut c, "c", long).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("max_execs = 2"), "{}", e.message());

    // Ending the runs gives the room back.
    drop((a, b));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match c.exec(exec_req("c", "echo back")).await {
            Ok(_) => break,
            Err(e) if e.code() == tonic::Code::ResourceExhausted && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("room not given back: {e:?}"),
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let small = Agent::start(dir.path(), &["--exec-memory", "100Mi"]);
    let mut c = small.client().await;
    create(&mut c, "a", 0).await;
    // A budget asked for that the whole pool cannot hold is refused at once.
    let mut req = exec_req("a", "echo hi");
    req.memory_limit_bytes = 256 << 20;
    let e = c.exec(req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().contains("exec_memory = 100 MiB"),
        "{}",
        e.message()
    );
    // Asking for none, the exec runs with what the pool has.
    let ran = sh(&mut c, "a", "echo hi").await;
    assert_eq!((ran.code, ran.stdout.as_str()), (0, "hi\n"), "{ran:?}");
}

#[tokio::test]
async fn a_queued_exec_runs_when_a_slot_frees() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(
        dir.path(),
        &["--max-execs-per-computer", "1", "--exec-queue-wait", "30s"],
    );
    let mut c = agent.client().await;
    create(&mut c, "a", 0).await;
    let first = spin(&mut c, "a", Duration::from_millis(1500))
        .await
        .unwrap();
    let ends = tokio::spawn(drain(first));
    let t = Instant::now();
    let ran = sh(&mut c, "a", "echo second").await;
    assert_eq!((ran.code, ran.stdout.as_str()), (0, "second\n"), "{ran:?}");
    // It waited for the first run's timeout to free the slot.
    assert!(
        t.elapsed() >= Duration::from_millis(1000),
        "{:?}",
        t.elapsed()
    );
    ends.await.unwrap();
}

/// Runs `echo ok` on `computer` `n` times and returns the slowest.
async fn slowest_echo(c: &mut Client, computer: &str, n: usize) -> Duration {
    let mut slowest = Duration::ZERO;
    for _ in 0..n {
        let t = Instant::now();
        let ran = sh(c, computer, "echo ok").await;
        assert_eq!((ran.code, ran.stdout.as_str()), (0, "ok\n"), "{ran:?}");
        slowest = slowest.max(t.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    slowest
}

/// Starts `n` spinning execs, the i-th on `computer(i)`, without waiting
/// for admission; each task ends with whether its call was admitted
/// (false: refused with RESOURCE_EXHAUSTED).
async fn bombs(agent: &Agent, n: usize, computer: impl Fn(usize) -> String) -> JoinSet<bool> {
    let mut set = JoinSet::new();
    let mut clients = Vec::new();
    for _ in 0..n.div_ceil(50) {
        clients.push(agent.client().await);
    }
    for i in 0..n {
        let mut c = clients[i / 50].clone();
        let name = computer(i);
        set.spawn(async move {
            match spin(&mut c, &name, Duration::from_secs(60)).await {
                Ok(stream) => {
                    drain(stream).await;
                    true
                }
                Err(e) => {
                    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
                    false
                }
            }
        });
    }
    set
}

/// A generous bound only: the p99 under this load is measured by
/// bench/noisy (docs/benchmarks.md), as is one exec on each of 200
/// computers (see also `many_busy_computers_cannot_shut_out_a_quiet_one`).
#[tokio::test]
async fn a_busy_computer_cannot_starve_another() {
    let bound = Duration::from_secs(2);

    // 200 spinning execs on one computer, default limits.
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "busy", 0).await;
    create(&mut c, "quiet", 0).await;
    let mut set = bombs(&agent, 200, |_| "busy".into()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let slowest = slowest_echo(&mut c, "quiet", 20).await;
    assert!(
        slowest < bound,
        "echo ok took {slowest:?} beside 200 execs on one computer"
    );
    // Those past the per-computer limit were refused, not left waiting.
    // The admitted ones run for 60 s, so the first to end are refusals,
    // at the end of the queue wait.
    let first = tokio::time::timeout(Duration::from_secs(10), set.join_next()).await;
    let admitted = first.expect("no exec of 200 on one computer was refused");
    assert!(
        !admitted.unwrap().unwrap(),
        "an admitted spinner ended early"
    );
    set.abort_all();
}

/// One spinning exec on each of 40 computers, on an agent whose exec memory
/// holds only 8 default budgets of 256 MiB: all of them are admitted with
/// smaller budgets, and a quiet computer's `echo ok` still finds a slot and
/// memory at once instead of being refused.
#[tokio::test]
async fn many_busy_computers_cannot_shut_out_a_quiet_one() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &["--exec-memory", "2Gi"]);
    let mut c = agent.client().await;
    let n = 40;
    for i in 0..n {
        create(&mut c, &format!("busy{i}"), 0).await;
    }
    create(&mut c, "quiet", 0).await;
    // Each call answers once its exec is admitted; none is refused (with
    // whole 256 MiB budgets only 8 would fit).
    let mut running = Vec::new();
    for i in 0..n {
        let stream = spin(&mut c, &format!("busy{i}"), Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("busy{i} refused: {e:?}"));
        running.push(stream);
    }
    let slowest = slowest_echo(&mut c, "quiet", 10).await;
    assert!(
        slowest < Duration::from_secs(2),
        "echo ok took {slowest:?} beside {n} busy computers"
    );
    drop(running);
}
