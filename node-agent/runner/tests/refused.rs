//! The runner binary against a `SandboxRunner` server (real gRPC on
//! loopback) that refuses its attach protocol revision, as a node agent
//! that does not serve it does: the runner sends its revision in the
//! hello, stops retrying, writes the agent's message to its termination
//! message file and exits with status 3, which the operator reads from
//! the sandbox container's status.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentcomputer_proto::v1 as pb;
use agentcomputer_proto::v1::sandbox_runner_server::{SandboxRunner, SandboxRunnerServer};
use pb::runner_event::Event;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status, Streaming};

const WHY: &str = "sandbox runner 0.1.0 speaks attach protocol 1, this node agent serves 2 to 3";

/// Reads the hello, reports its revision, refuses.
struct Refusing {
    hellos: mpsc::Sender<u32>,
}

#[tonic::async_trait]
impl SandboxRunner for Refusing {
    type AttachStream = ReceiverStream<Result<pb::RunnerCommand, Status>>;

    async fn attach(
        &self,
        req: Request<Streaming<pb::RunnerEvent>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let first = req.into_inner().message().await?;
        let Some(pb::RunnerEvent {
            event: Some(Event::Hello(hello)),
        }) = first
        else {
            return Err(Status::invalid_argument("no hello"));
        };
        let _ = self.hellos.send(hello.protocol).await;
        Err(Status::failed_precondition(WHY))
    }
}

#[tokio::test]
async fn a_refused_runner_exits_with_the_agents_reason() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (hellos, mut seen) = mpsc::channel(8);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(SandboxRunnerServer::new(Refusing { hellos }))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let dir = tempfile::tempdir().unwrap();
    // The kubelet creates the file; the runner only writes it.
    let log = dir.path().join("termination-log");
    std::fs::write(&log, "").unwrap();
    let mut runner = Command::new(env!("CARGO_BIN_EXE_agentcomputer-runner"))
        .args(["serve", "--workspace"])
        .arg(dir.path())
        .env("AGENTCOMPUTER_AGENT", addr.to_string())
        .env("AGENTCOMPUTER_COMPUTER", "c1")
        .env("AGENTCOMPUTER_TOKEN", "t")
        .env("AGENTCOMPUTER_TERMINATION_LOG", &log)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let protocol = tokio::time::timeout(Duration::from_secs(20), seen.recv())
        .await
        .expect("the runner did not attach")
        .unwrap();
    assert_eq!(protocol, agentcomputer_proto::RUNNER_PROTOCOL);
    let began = Instant::now();
    let status = loop {
        if let Some(status) = runner.try_wait().unwrap() {
            break status;
        }
        if began.elapsed() > Duration::from_secs(10) {
            let _ = runner.kill();
            let _ = runner.wait();
            panic!("the refused runner kept running");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        status.code(),
        Some(i32::from(agentcomputer_proto::RUNNER_EXIT_INCOMPATIBLE))
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap(), WHY);
    // One attempt: a refusal is not retried.
    assert!(seen.try_recv().is_err(), "the runner attached again");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut runner.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(
        stderr.contains("the node agent refuses this runner"),
        "{stderr}"
    );
}
