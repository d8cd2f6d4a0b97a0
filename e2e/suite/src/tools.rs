//! The command-line tools the suite drives, as a user would: `kubectl`,
//! `helm` and `kubectl-computer`, all against one `KUBECONFIG`.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

/// The longest any one command may run before it is killed.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(300);
use serde_json::Value;

/// Where the tools and the cluster are, read from the environment.
#[derive(Clone, Debug)]
pub struct Tools {
    /// `KUBECONFIG` of the cluster under test.
    pub kubeconfig: PathBuf,
    /// `E2E_KUBECTL`, else `kubectl` on the `PATH`.
    pub kubectl: PathBuf,
    /// `E2E_HELM`, else `helm` on the `PATH`.
    pub helm: PathBuf,
    /// `E2E_CLI`, else `kubectl-computer` on the `PATH`.
    pub cli: PathBuf,
    /// The repository (charts, examples): `E2E_REPO`, else the current directory.
    pub repo: PathBuf,
}

/// What one command printed and how it ended.
#[derive(Debug)]
pub struct Output {
    /// Exit status code (-1 when killed by a signal).
    pub code: i32,
    /// Standard output, lossily decoded.
    pub stdout: String,
    /// Standard error, lossily decoded.
    pub stderr: String,
}

impl Output {
    /// Ok with stdout when the command exited 0, else an error with both
    /// streams.
    pub fn ok(self, what: &str) -> Result<String> {
        if self.code == 0 {
            Ok(self.stdout)
        } else {
            bail!(
                "{what} exited {}: {}{}",
                self.code,
                self.stderr.trim(),
                if self.stdout.trim().is_empty() {
                    String::new()
                } else {
                    format!(" (stdout: {})", self.stdout.trim())
                }
            )
        }
    }
}

fn env_path(name: &str, default: &str) -> PathBuf {
    std::env::var_os(name)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default))
}

impl Tools {
    /// The tools named by the environment. Errors: `KUBECONFIG` unset.
    pub fn from_env() -> Result<Tools> {
        let kubeconfig = std::env::var_os("KUBECONFIG")
            .map(PathBuf::from)
            .context("KUBECONFIG must name the kubeconfig of the cluster under test")?;
        Ok(Tools {
            kubeconfig,
            kubectl: env_path("E2E_KUBECTL", "kubectl"),
            helm: env_path("E2E_HELM", "helm"),
            cli: env_path("E2E_CLI", "kubectl-computer"),
            repo: std::env::var_os("E2E_REPO")
                .map(PathBuf::from)
                .unwrap_or(std::env::current_dir()?),
        })
    }

    fn command(&self, program: &PathBuf, args: &[&str]) -> Command {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .current_dir(&self.repo);
        cmd
    }

    fn run_with(&self, program: &PathBuf, args: &[&str], stdin: Option<&str>) -> Result<Output> {
        let mut cmd = self.command(program, args);
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", program.display()))?;
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .expect("piped stdin")
                .write_all(input.as_bytes())?;
        }
        // Read both pipes on threads, so that a command that hangs (a read
        // on a FUSE mount without a server) is killed at the deadline
        // instead of blocking the suite.
        let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(mut p) = pipe {
                    let _ = p.read_to_end(&mut buf);
                }
                buf
            })
        };
        let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
        let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break Some(status);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stdout = String::from_utf8_lossy(&out.join().unwrap_or_default()).into_owned();
        let mut stderr = String::from_utf8_lossy(&err.join().unwrap_or_default()).into_owned();
        let code = match status {
            Some(s) => s.code().unwrap_or(-1),
            None => {
                stderr.push_str(&format!(
                    "\nkilled after {} s without finishing",
                    COMMAND_TIMEOUT.as_secs()
                ));
                -1
            }
        };
        Ok(Output {
            code,
            stdout,
            stderr,
        })
    }

    /// Runs `program ARGS` with the cluster's KUBECONFIG, in the repository.
    pub fn run(&self, program: &std::path::Path, args: &[&str]) -> Result<Output> {
        self.run_with(&program.to_path_buf(), args, None)
    }

    /// Runs `kubectl ARGS`.
    pub fn kubectl(&self, args: &[&str]) -> Result<Output> {
        self.run_with(&self.kubectl, args, None)
    }

    /// Runs `kubectl ARGS` and requires exit 0; returns stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> Result<String> {
        self.kubectl(args)?
            .ok(&format!("kubectl {}", args.join(" ")))
    }

    /// `kubectl ARGS -o json`, parsed.
    pub fn kubectl_json(&self, args: &[&str]) -> Result<Value> {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let text = self.kubectl_ok(&all)?;
        serde_json::from_str(&text).context("kubectl printed no JSON")
    }

    /// `kubectl apply -f -` of `manifest` (YAML or JSON).
    pub fn apply(&self, manifest: &str) -> Result<Output> {
        self.run_with(&self.kubectl, &["apply", "-f", "-"], Some(manifest))
    }

    /// Runs `helm ARGS`.
    pub fn helm(&self, args: &[&str]) -> Result<Output> {
        self.run_with(&self.helm, args, None)
    }

    /// Runs `kubectl-computer ARGS`, with `stdin` when given.
    pub fn cli(&self, args: &[&str], stdin: Option<&str>) -> Result<Output> {
        self.run_with(&self.cli, args, stdin)
    }

    /// Starts `kubectl-computer ARGS` without waiting for it, stdout piped
    /// (stderr to the suite's), for a caller that reads its output as it
    /// comes.
    pub fn cli_child(&self, args: &[&str]) -> Result<std::process::Child> {
        self.command(&self.cli, args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("cannot start {}", self.cli.display()))
    }

    /// Starts `kubectl-computer -n NS port-forward NAME` and reads the
    /// endpoint and token it prints. The listener lives as long as the
    /// returned [`PortForward`].
    pub fn port_forward(&self, namespace: &str, name: &str) -> Result<PortForward> {
        let mut child = self
            .command(&self.cli, &["-n", namespace, "port-forward", name])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start kubectl-computer port-forward")?;
        let stdout = child.stdout.take().expect("piped stdout");
        let rx = lines_of(stdout);
        let mut forward = PortForward {
            child,
            endpoint: String::new(),
            token: String::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while forward.endpoint.is_empty() || forward.token.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx
                .recv_timeout(left)
                .map_err(|_| anyhow!("port-forward printed no endpoint and token within 60 s"))?;
            if let Some(v) = line.strip_prefix("endpoint ") {
                forward.endpoint = v.trim().to_string();
            } else if let Some(v) = line.strip_prefix("token ") {
                forward.token = v.trim().to_string();
            }
        }
        Ok(forward)
    }
}

impl Tools {
    /// Starts `kubectl -n NS port-forward TARGET LOCAL:REMOTE` (TARGET such
    /// as `svc/NAME`) on 127.0.0.1 and waits until kubectl says it
    /// forwards. The forward lives as long as the returned [`Background`].
    pub fn kubectl_port_forward(
        &self,
        namespace: &str,
        target: &str,
        local: u16,
        remote: u16,
    ) -> Result<Background> {
        let ports = format!("{local}:{remote}");
        let mut child = self
            .command(
                &self.kubectl,
                &[
                    "-n",
                    namespace,
                    "port-forward",
                    "--address",
                    "127.0.0.1",
                    target,
                    &ports,
                ],
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start kubectl port-forward")?;
        let stdout = child.stdout.take().expect("piped stdout");
        let rx = lines_of(stdout);
        let forward = Background { child };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx.recv_timeout(left).map_err(|_| {
                anyhow!("kubectl port-forward {target} did not start forwarding within 60 s")
            })?;
            if line.starts_with("Forwarding from") {
                return Ok(forward);
            }
        }
    }
}

/// A background process (a `kubectl port-forward`); killed when dropped.
pub struct Background {
    child: Child,
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running `kubectl-computer port-forward`; stopped when dropped.
pub struct PortForward {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// The computer's token.
    pub token: String,
}

impl Drop for PortForward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `check` every second until it gives `Some`, for at most `secs`
/// seconds. The error names `what` and the last reason `check` gave.
pub fn eventually<T>(
    secs: u64,
    what: &str,
    mut check: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let last = match check() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => "not yet".to_string(),
            Err(e) => format!("{e:#}"),
        };
        if Instant::now() >= deadline {
            bail!("timed out after {secs} s waiting for {what} (last: {last})");
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The string at JSON pointer `pointer` of `v`, or "".
pub fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The status of condition `kind` of an object, or "".
pub fn condition<'a>(v: &'a Value, kind: &str) -> &'a str {
    v.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|all| {
            all.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
        })
        .and_then(|c| c.get("status").and_then(Value::as_str))
        .unwrap_or("")
}

/// Reads `stdout` line by line on a thread, to the end: the lines come out
/// of the returned channel. Reading goes on after the receiver is dropped,
/// because a port-forward prints a line per connection and a write to a
/// closed pipe would kill it (SIGPIPE).
fn lines_of(stdout: std::process::ChildStdout) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
            let _ = tx.send(line);
        }
    });
    rx
}
