//! A real `node-agent local` process on an ephemeral loopback port, and a
//! tonic client for it that sends the agent token from its data directory.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use agentcomputer_proto::v1 as pb;
use agentcomputer_proto::v1::agent_computer_client::AgentComputerClient;
use pb::exec_event::Event;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

pub type Client = AgentComputerClient<InterceptedService<Channel, Bearer>>;

/// Adds `authorization: Bearer <token>` to every call (none if `None`).
#[derive(Clone)]
pub struct Bearer(pub Option<String>);

impl Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            let value: MetadataValue<Ascii> = format!("Bearer {token}").parse().unwrap();
            req.metadata_mut().insert("authorization", value);
        }
        Ok(req)
    }
}

/// A running agent; killed on drop if not stopped.
pub struct Agent {
    child: Option<Child>,
    pub url: String,
    pub data: PathBuf,
}

impl Agent {
    /// Starts `node-agent local` on `data` with extra arguments and waits
    /// until it prints its address.
    pub fn start(data: &Path, extra: &[&str]) -> Agent {
        Agent::start_with(data, extra, |_| {})
    }

    /// Like [`Agent::start`], letting `setup` change the command first.
    pub fn start_with(data: &Path, extra: &[&str], setup: impl FnOnce(&mut Command)) -> Agent {
        Self::spawn(
            Command::new(env!("CARGO_BIN_EXE_node-agent")),
            data,
            extra,
            setup,
        )
    }

    /// Like [`Agent::start_with`], leaving the share-link server and the
    /// egress proxy at their default addresses unless `extra` gives them.
    pub fn start_with_default_ports(
        data: &Path,
        extra: &[&str],
        setup: impl FnOnce(&mut Command),
    ) -> Agent {
        let cmd = Command::new(env!("CARGO_BIN_EXE_node-agent"));
        Self::spawn_ports(cmd, data, extra, setup, false)
    }

    /// Like [`Agent::start`], with the process's address space limited to
    /// `bytes` (`prlimit --as`, util-linux): an allocation past it fails
    /// in the agent instead of growing the machine's memory.
    pub fn start_with_address_space(data: &Path, extra: &[&str], bytes: u64) -> Agent {
        let mut cmd = Command::new("prlimit");
        cmd.arg(format!("--as={bytes}"))
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_node-agent"));
        Self::spawn(cmd, data, extra, |_| {})
    }

    /// Starts the agent as user and group `uid`.
    pub fn start_as(data: &Path, extra: &[&str], uid: u32) -> Agent {
        use std::os::unix::process::CommandExt;
        Agent::start_with(data, extra, |cmd| {
            cmd.uid(uid).gid(uid);
        })
    }

    /// Starts the agent through `wrapper`, a command line that ends with
    /// the program to run the agent (its arguments are appended).
    pub fn start_wrapped(wrapper: Command, data: &Path, extra: &[&str]) -> Agent {
        Self::spawn(wrapper, data, extra, |_| {})
    }

    /// Like [`Agent::start_wrapped`], letting `setup` change the command
    /// first.
    pub fn start_wrapped_with(
        wrapper: Command,
        data: &Path,
        extra: &[&str],
        setup: impl FnOnce(&mut Command),
    ) -> Agent {
        Self::spawn(wrapper, data, extra, setup)
    }

    /// The agent's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().expect("try_wait").is_none())
    }

    fn spawn(cmd: Command, data: &Path, extra: &[&str], setup: impl FnOnce(&mut Command)) -> Agent {
        Self::spawn_ports(cmd, data, extra, setup, true)
    }

    /// Spawns the agent; `free_ports`: the share-link server and the egress
    /// proxy on free ports unless `extra` gives them, else their defaults.
    fn spawn_ports(
        mut cmd: Command,
        data: &Path,
        extra: &[&str],
        setup: impl FnOnce(&mut Command),
        free_ports: bool,
    ) -> Agent {
        cmd.args(["local", "--listen", "127.0.0.1:0"]);
        let defaults = !free_ports;
        // The egress proxy's host-side listener on a free port, unless the
        // caller picks one or wants the default.
        if !extra.contains(&"--proxy-listen") && !defaults {
            cmd.args(["--proxy-listen", "127.0.0.1:0"]);
        }
        // The share-link server likewise.
        if !extra.contains(&"--share-listen") && !defaults {
            cmd.args(["--share-listen", "127.0.0.1:0"]);
        }
        cmd.arg("--data-dir")
            .arg(data)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        setup(&mut cmd);
        let mut child = cmd.spawn().expect("spawn node-agent");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("read address");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        Agent {
            child: Some(child),
            url: format!("http://{addr}"),
            data: data.to_path_buf(),
        }
    }

    /// The agent's stderr, when [`Agent::start_with`] made it a pipe.
    pub fn take_stderr(&mut self) -> std::process::ChildStderr {
        let child = self.child.as_mut().unwrap();
        child.stderr.take().expect("stderr is not piped")
    }

    /// The agent token the agent keeps in its data directory.
    pub fn token(&self) -> String {
        std::fs::read_to_string(self.data.join("token"))
            .expect("read the agent token")
            .trim()
            .to_string()
    }

    /// A client sending the agent's token.
    pub async fn client(&self) -> Client {
        self.client_with(Some(self.token())).await
    }

    /// A client sending `token` (none: `None`).
    pub async fn client_with(&self, token: Option<String>) -> Client {
        let channel = tonic::transport::Endpoint::from_shared(self.url.clone())
            .unwrap()
            .connect()
            .await
            .expect("connect");
        AgentComputerClient::with_interceptor(channel, Bearer(token))
            .max_decoding_message_size(agentcomputer_proto::MAX_MESSAGE_BYTES)
    }

    /// Sends SIGTERM and waits (at most 20 s) for the process to exit,
    /// letting this runtime's client connections answer the shutdown.
    pub async fn stop(self) -> ExitStatus {
        self.stop_with(nix::sys::signal::Signal::SIGTERM).await
    }

    /// Sends `signal` and waits (at most 20 s) for the process to exit.
    pub async fn stop_with(mut self, signal: nix::sys::signal::Signal) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, signal).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "node-agent ignored SIGTERM");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub async fn create(c: &mut Client, name: &str, max_bytes: u64) -> pb::Computer {
    c.create_computer(pb::CreateComputerRequest {
        name: name.into(),
        max_bytes,
        max_inodes: 0,
        egress: None,
    })
    .await
    .expect("create computer")
    .into_inner()
}

/// The collected result of one exec.
#[derive(Debug, Default)]
pub struct Ran {
    pub stdout: String,
    pub stderr: String,
    pub code: i32,
    pub error: String,
    /// `ExecExit.result_json`.
    pub result: String,
    /// `ExecExit.runtime`: the runtime that ran the program.
    pub runtime: String,
    /// `ExecExit.runtime_reason`: why, for RUNTIME_AUTO.
    pub runtime_reason: String,
}

pub fn exec_req(computer: &str, script: &str) -> pb::ExecRequest {
    pb::ExecRequest {
        computer: computer.into(),
        script: script.into(),
        ..Default::default()
    }
}

/// A RUNTIME_JAVASCRIPT request running `source` with `input_json`.
pub fn js_req(computer: &str, source: &str, input_json: &str) -> pb::ExecRequest {
    pb::ExecRequest {
        computer: computer.into(),
        runtime: pb::Runtime::Javascript as i32,
        script: source.into(),
        input_json: input_json.into(),
        ..Default::default()
    }
}

pub async fn run(c: &mut Client, req: pb::ExecRequest) -> Ran {
    let mut stream = c.exec(req).await.expect("exec").into_inner();
    let mut ran = Ran::default();
    while let Some(ev) = stream.message().await.expect("exec stream") {
        match ev.event.unwrap() {
            Event::Stdout(b) => ran.stdout.push_str(&String::from_utf8_lossy(&b)),
            Event::Stderr(b) => ran.stderr.push_str(&String::from_utf8_lossy(&b)),
            Event::Exit(e) => {
                ran.code = e.code;
                ran.error = e.error;
                ran.result = e.result_json;
                ran.runtime = e.runtime;
                ran.runtime_reason = e.runtime_reason;
                return ran;
            }
        }
    }
    panic!("exec stream ended without an exit event: {ran:?}");
}

pub async fn sh(c: &mut Client, computer: &str, script: &str) -> Ran {
    run(c, exec_req(computer, script)).await
}

/// Uploads `data` in 1 MiB messages.
pub async fn write(
    c: &mut Client,
    computer: &str,
    path: &str,
    mode: pb::WriteMode,
    data: &[u8],
) -> Result<pb::WriteResponse, tonic::Status> {
    let mut msgs = vec![pb::WriteRequest {
        msg: Some(pb::write_request::Msg::Header(pb::WriteHeader {
            computer: computer.into(),
            path: path.into(),
            mode: mode as i32,
            perm: 0,
            offset: 0,
        })),
    }];
    for piece in data.chunks(agentcomputer_proto::CHUNK_BYTES) {
        msgs.push(pb::WriteRequest {
            msg: Some(pb::write_request::Msg::Data(piece.to_vec())),
        });
    }
    msgs.push(end_msg(data.len() as u64));
    c.write(futures::stream::iter(msgs))
        .await
        .map(|r| r.into_inner())
}

/// The end message of a Write stream that sent `total_bytes`.
pub fn end_msg(total_bytes: u64) -> pb::WriteRequest {
    pb::WriteRequest {
        msg: Some(pb::write_request::Msg::End(pb::WriteEnd { total_bytes })),
    }
}

pub async fn read(c: &mut Client, computer: &str, path: &str) -> Result<Vec<u8>, tonic::Status> {
    read_range(c, computer, path, 0, 0).await
}

pub async fn read_range(
    c: &mut Client,
    computer: &str,
    path: &str,
    offset: u64,
    length: u64,
) -> Result<Vec<u8>, tonic::Status> {
    let mut stream = c
        .read(pb::ReadRequest {
            computer: computer.into(),
            path: path.into(),
            offset,
            length,
        })
        .await?
        .into_inner();
    let mut out = Vec::new();
    while let Some(chunk) = stream.message().await? {
        assert_eq!(chunk.offset, offset + out.len() as u64);
        assert!(chunk.data.len() <= agentcomputer_proto::CHUNK_BYTES);
        out.extend_from_slice(&chunk.data);
    }
    Ok(out)
}

pub async fn names(c: &mut Client, computer: &str, path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut token = String::new();
    loop {
        let page = c
            .read_dir(pb::ReadDirRequest {
                computer: computer.into(),
                path: path.into(),
                page_size: 0,
                page_token: token,
                with_info: false,
            })
            .await
            .expect("readdir")
            .into_inner();
        out.extend(page.entries.into_iter().map(|e| e.name));
        if page.next_page_token.is_empty() {
            out.sort();
            return out;
        }
        token = page.next_page_token;
    }
}

/// Asserts the status code, the errno prefix and the errno metadata.
pub fn assert_errno(status: &tonic::Status, code: tonic::Code, errno: &str) {
    assert_eq!(status.code(), code, "{status:?}");
    assert!(
        status.message().starts_with(&format!("{errno}: ")),
        "message {:?} should start with {errno}",
        status.message()
    );
    assert_eq!(
        status
            .metadata()
            .get(agentcomputer_proto::ERRNO_METADATA_KEY)
            .map(|v| v.to_str().unwrap()),
        Some(errno)
    );
}

/// Starts `req` (a run that writes an increasing number to `counter` and
/// prints `tick` on each step), disconnects after the first tick, and
/// asserts that `counter` stops changing: the agent cancelled the run when
/// its client went away. `what` names the run in the failure message.
pub async fn assert_run_stops_when_client_leaves(
    c: &mut Client,
    computer: &str,
    req: pb::ExecRequest,
    what: &str,
) {
    let mut stream = c.exec(req).await.unwrap().into_inner();
    // Wait until it is really running.
    match stream.message().await.unwrap().unwrap().event.unwrap() {
        Event::Stdout(b) => assert_eq!(b, b"tick\n"),
        other => panic!("unexpected {other:?}"),
    }
    drop(stream);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let first = read(c, computer, "counter").await.unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let second = read(c, computer, "counter").await.unwrap();
    assert_eq!(
        first, second,
        "the {what} kept running after its client left"
    );
}

/// Whether this machine can run the local container sandbox (root,
/// bubblewrap on `PATH`); prints why not, for a SKIPPED line.
pub fn sandbox_possible() -> bool {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("SKIPPED: the local container sandbox needs root");
        return false;
    }
    let on_path = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .any(|d| d.join("bwrap").is_file());
    if !on_path && !Path::new("/usr/bin/bwrap").exists() {
        eprintln!("SKIPPED: bwrap (Debian package bubblewrap) is not installed");
        return false;
    }
    true
}

/// A RUNTIME_CONTAINER request running `script` on `computer`.
pub fn box_req(computer: &str, script: &str) -> pb::ExecRequest {
    pb::ExecRequest {
        computer: computer.into(),
        script: script.into(),
        runtime: pb::Runtime::Container as i32,
        ..Default::default()
    }
}

/// `curl -sS --fail --max-time 10 URL`: the body, or curl's message.
pub fn curl(url: &str) -> Result<Vec<u8>, String> {
    let out = Command::new("curl")
        .args(["-sS", "--fail", "--max-time", "10", url])
        .output()
        .expect("run curl");
    match out.status.success() {
        true => Ok(out.stdout),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}
