//! The runner binary in subreaper mode (a child of this test, not PID 1),
//! attached over real gRPC on loopback to a minimal `SandboxRunner`
//! server: processes that leave their run's session (`setsid`, a double
//! fork) do not survive the run's timeout or its cancel, and a process
//! that is not the runner's descendant is never touched.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentcomputer_proto::v1 as pb;
use agentcomputer_proto::v1::sandbox_runner_server::{SandboxRunner, SandboxRunnerServer};
use pb::runner_command::Command as Cmd;
use pb::runner_event::Event;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status, Streaming};

type Commands = mpsc::Sender<Result<pb::RunnerCommand, Status>>;

/// Hands each attached stream to the test.
struct Agent {
    attached: mpsc::Sender<(Streaming<pb::RunnerEvent>, Commands)>,
}

#[tonic::async_trait]
impl SandboxRunner for Agent {
    type AttachStream = ReceiverStream<Result<pb::RunnerCommand, Status>>;

    async fn attach(
        &self,
        req: Request<Streaming<pb::RunnerEvent>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let (tx, rx) = mpsc::channel(16);
        self.attached
            .send((req.into_inner(), tx))
            .await
            .map_err(|_| Status::unavailable("the test is over"))?;
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// Live processes (not zombies) whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(marker) {
            found.push(format!("{}: {cmd}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

/// Waits (at most 5 s) until a process with `marker` exists.
async fn wait_for(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while processes_with(marker).is_empty() {
        assert!(
            Instant::now() < deadline,
            "no process with {marker} started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn start(run_id: u64, script: String, timeout_ms: u64) -> pb::RunnerCommand {
    pb::RunnerCommand {
        command: Some(Cmd::Start(pb::RunnerStart {
            run_id,
            script,
            timeout_ms,
            ..Default::default()
        })),
    }
}

/// Reads events until run `id` exits; returns its code and error.
async fn exit_of(events: &mut Streaming<pb::RunnerEvent>, id: u64) -> (i32, String) {
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(20), events.message())
            .await
            .expect("no exit event within 20 s")
            .expect("the stream broke")
            .expect("the stream ended");
        if let Some(Event::Exit(x)) = ev.event
            && x.run_id == id
        {
            return (x.code, x.error);
        }
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The runner: ended by SIGTERM (so that it kills what it started, also
/// when the test fails), SIGKILL if it does not end within 10 s.
struct Runner(Child);

impl Runner {
    /// SIGTERM, then waits; the exit status, if it ended in time.
    fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        for _ in 0..100 {
            if let Ok(Some(status)) = self.0.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        if self.terminate().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[tokio::test]
async fn processes_that_leave_the_session_die_with_their_run() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (attached, mut attaches) = mpsc::channel(4);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(SandboxRunnerServer::new(Agent { attached }))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let workspace = tempfile::tempdir().unwrap();
    let tag = std::process::id() % 1000;
    // Markers: sleep's argument, a number of seconds no other test uses.
    let marker = |n: u32| format!("sleep 1{tag:03}.{n}17");

    // Not the runner's descendant: must survive everything below.
    let bystander_marker = marker(9);
    let mut bystander_cmd = bystander_marker.split(' ');
    let bystander = Killed(
        Command::new("setsid")
            .args(&mut bystander_cmd)
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );

    let mut runner = Runner(
        Command::new(env!("CARGO_BIN_EXE_agentcomputer-runner"))
            .args(["serve", "--workspace"])
            .arg(workspace.path())
            .env("AGENTCOMPUTER_AGENT", addr.to_string())
            .env("AGENTCOMPUTER_COMPUTER", "c1")
            .env("AGENTCOMPUTER_TOKEN", "t")
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let (mut events, commands) = tokio::time::timeout(Duration::from_secs(20), attaches.recv())
        .await
        .expect("the runner did not attach")
        .unwrap();
    let hello = events.message().await.unwrap().unwrap();
    assert!(matches!(hello.event, Some(Event::Hello(_))), "{hello:?}");

    // 1. A timeout. One daemon leaves the session while its parent (the
    //    script) lives on; one is double-forked: its parent exits at once,
    //    so it comes to the runner before the runner ever sees it.
    let m1 = marker(1);
    let script = format!(
        "setsid sh -c '{m1}' &\n(setsid sh -c '{m1}' &)\n\
         sh -c \"sh -c '{m1} &' &\"\nsleep 100"
    );
    commands.send(Ok(start(1, script, 1500))).await.unwrap();
    let (code, error) = exit_of(&mut events, 1).await;
    assert_eq!(code, 124, "{error}");
    assert_eq!(error, "container: script timed out after 1.5s");
    assert_eq!(processes_with(&m1), Vec::<String>::new());

    // 2. A cancel while another run keeps going (so only what the runner
    //    knows of run 2 may be killed, not every leftover): run 2's daemon
    //    leaves the session, is seen, then loses its parent.
    let keeper = marker(3);
    commands
        .send(Ok(start(3, keeper.clone(), 60_000)))
        .await
        .unwrap();
    wait_for(&keeper).await;
    let m2 = marker(2);
    let script = format!("(setsid sh -c '{m2}' & sleep 1)\nsleep 100");
    commands.send(Ok(start(2, script, 60_000))).await.unwrap();
    wait_for(&m2).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    commands
        .send(Ok(pb::RunnerCommand {
            command: Some(Cmd::Cancel(pb::RunnerCancel { run_id: 2 })),
        }))
        .await
        .unwrap();
    let (code, error) = exit_of(&mut events, 2).await;
    assert_eq!((code, error.as_str()), (130, "container: script cancelled"));
    assert_eq!(processes_with(&m2), Vec::<String>::new());
    assert!(
        !processes_with(&keeper).is_empty(),
        "the other run was killed too"
    );

    // 3. The last run ends: everything left below the runner goes. A
    //    daemon of run 4 that escapes and loses its parent before it can
    //    be sampled while run 3 is still going is caught only by that.
    let m4 = marker(4);
    commands
        .send(Ok(start(4, format!("(setsid sh -c '{m4}' &)"), 60_000)))
        .await
        .unwrap();
    assert_eq!(exit_of(&mut events, 4).await.0, 0);
    // Almost always still there (unless a sample caught it in the moment
    // before its parent exited, and run 4's own kill took it).
    if processes_with(&m4).is_empty() {
        eprintln!("run 4's daemon was sampled before it escaped");
    }
    commands
        .send(Ok(pb::RunnerCommand {
            command: Some(Cmd::Cancel(pb::RunnerCancel { run_id: 3 })),
        }))
        .await
        .unwrap();
    assert_eq!(exit_of(&mut events, 3).await.0, 130);
    assert_eq!(processes_with(&keeper), Vec::<String>::new());
    assert_eq!(processes_with(&m4), Vec::<String>::new());

    // 4. SIGTERM (the pod's end): the runner kills its runs and every
    //    process below it before it exits.
    let m5 = marker(5);
    commands
        .send(Ok(start(
            5,
            format!("setsid sh -c '{m5}' & sleep 100"),
            60_000,
        )))
        .await
        .unwrap();
    wait_for(&m5).await;
    let status = runner
        .terminate()
        .expect("the runner did not end on SIGTERM");
    assert!(status.success(), "{status}");
    assert_eq!(processes_with(&m5), Vec::<String>::new());

    // Never a process that is not the runner's.
    assert_eq!(
        processes_with(&bystander_marker).len(),
        1,
        "a process outside the runner's tree was killed"
    );
    drop(bystander);
}
