//! The shell runtime through the gRPC API: a real `node-agent local` on a
//! free loopback port with its own data directory; scripts go through the
//! generated `Exec` client over one kept-open connection, files through
//! `Mkdir` and `Write`.

use super::Ran;
use crate::scenarios::Scenario;
use agentcomputer_proto::v1 as pb;
use agentcomputer_proto::v1::agent_computer_client::AgentComputerClient;
use anyhow::{Context, Result, anyhow, bail};
use pb::exec_event::Event;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;
use tonic::transport::Channel;

pub(crate) struct Grpc {
    agent: Child,
    client: AgentComputerClient<Channel>,
    computer: String,
}

impl Grpc {
    /// Starts `bin local` on 127.0.0.1 (port chosen by the kernel) over
    /// `data_dir` and connects to it.
    pub(crate) async fn start(bin: &Path, data_dir: &Path) -> Result<Self> {
        if !bin.is_file() {
            bail!(
                "{} not found (cargo build --release -p agentcomputer-node-agent)",
                bin.display()
            );
        }
        let mut agent = Command::new(bin)
            .args(["local", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut line = String::new();
        BufReader::new(agent.stdout.take().context("agent stdout")?).read_line(&mut line)?;
        let Some(addr) = line.trim().strip_prefix("listening on ") else {
            let _ = agent.kill();
            bail!("node-agent said {line:?} instead of its address");
        };
        let client = AgentComputerClient::connect(format!("http://{addr}"))
            .await?
            .max_decoding_message_size(agentcomputer_proto::MAX_MESSAGE_BYTES);
        Ok(Self {
            agent,
            client,
            computer: String::new(),
        })
    }

    pub(crate) async fn load(&mut self, sc: &Scenario) -> Result<()> {
        self.computer = format!("bench-{}", sc.key);
        self.client
            .create_computer(pb::CreateComputerRequest {
                name: self.computer.clone(),
                ..Default::default()
            })
            .await?;
        let dirs: BTreeSet<&str> = sc
            .files
            .iter()
            .filter_map(|(p, _)| p.rsplit_once('/').map(|(d, _)| d))
            .collect();
        for dir in dirs {
            self.client
                .mkdir(pb::MkdirRequest {
                    computer: self.computer.clone(),
                    path: dir.into(),
                    parents: true,
                    perm: 0,
                })
                .await?;
        }
        self.write_files(&sc.files).await
    }

    /// One `Write` stream per file (truncate), 1 MiB data messages.
    pub(crate) async fn write_files(&mut self, files: &[(String, Vec<u8>)]) -> Result<()> {
        for (path, bytes) in files {
            let mut msgs = vec![pb::WriteRequest {
                msg: Some(pb::write_request::Msg::Header(pb::WriteHeader {
                    computer: self.computer.clone(),
                    path: path.clone(),
                    mode: pb::WriteMode::Truncate as i32,
                    perm: 0,
                    offset: 0,
                })),
            }];
            for piece in bytes.chunks(agentcomputer_proto::CHUNK_BYTES) {
                msgs.push(pb::WriteRequest {
                    msg: Some(pb::write_request::Msg::Data(piece.to_vec())),
                });
            }
            msgs.push(pb::WriteRequest {
                msg: Some(pb::write_request::Msg::End(pb::WriteEnd {
                    total_bytes: bytes.len() as u64,
                })),
            });
            self.client
                .write(futures::stream::iter(msgs))
                .await
                .with_context(|| format!("writing {path}"))?;
        }
        Ok(())
    }

    /// Timed from the call to the stream's end (the exit event read).
    pub(crate) async fn run(&mut self, script: &str) -> Result<Ran> {
        let req = pb::ExecRequest {
            computer: self.computer.clone(),
            runtime: pb::Runtime::Shell as i32,
            script: script.into(),
            timeout_ms: 600_000,
            max_output_bytes: 256 << 20,
            ..Default::default()
        };
        let start = Instant::now();
        let mut stream = self.client.exec(req).await?.into_inner();
        let mut ran = Ran::default();
        let mut exited = false;
        while let Some(ev) = stream.message().await? {
            match ev.event {
                Some(Event::Stdout(b)) => ran.stdout.extend(b),
                Some(Event::Stderr(b)) => ran.stderr.extend(b),
                Some(Event::Exit(x)) => {
                    ran.status = x.code;
                    exited = true;
                }
                None => {}
            }
        }
        ran.elapsed = start.elapsed();
        if !exited {
            return Err(anyhow!("exec stream ended without an exit event"));
        }
        Ok(ran)
    }
}

impl Drop for Grpc {
    fn drop(&mut self) {
        let _ = self.agent.kill();
        let _ = self.agent.wait();
    }
}
