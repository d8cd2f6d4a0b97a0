//! `git`: the `agentcomputer-git` crate's porcelain over the engine, for
//! repositories under `/workspace` (the computer's own files, which real
//! git in the container runtime sees too). Outside `/workspace` the
//! shell's scratch tree is not the computer's, so `git` refuses there.
//!
//! `clone`, `fetch`, `pull` and `push` over HTTP(S) go through
//! [`EgressTransport`]: the same egress-checked client and policy as
//! `curl`, with the exec's download cap. The git crate's calls are
//! synchronous on the exec's thread, which already runs a current-thread
//! runtime, so each request runs on a short-lived helper thread with its
//! own runtime while the exec thread waits, checking the exec's stop flag
//! every 50 ms: a cancelled or timed-out exec drops the request (closing
//! the connection) within that time.

use super::http::Network;
use super::stream::{Env, warn};
use super::uname::HOSTNAME;
use crate::budget::ExecBudget;
use crate::sandbox_fs::WORKSPACE;
use agentcomputer_git::remote::transport::{HttpRequest, HttpResponse, Transport, TransportError};
use async_trait::async_trait;
use bashkit::{Command, CommandContext, CommandStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The `git` command.
pub(crate) struct Git(pub Env, pub Arc<Network>);

/// Redirects followed per request (git's `http.followRedirects` follows
/// them too).
const MAX_REDIRECTS: usize = 5;

/// Connect (and TLS handshake) timeout per hop.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// How often the waiting exec thread looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(50);

/// git's HTTP requests, through the exec's egress policy.
pub(crate) struct EgressTransport {
    network: Arc<Network>,
    budget: ExecBudget,
}

impl Transport for EgressTransport {
    fn send(&self, req: &HttpRequest) -> Result<HttpResponse, TransportError> {
        use agentcomputer_egress::http::{Limits, Request, send_following};
        let url = url::Url::parse(&req.url)
            .map_err(|e| TransportError::Failed(format!("URL rejected: {e}")))?;
        let method = http::Method::from_bytes(req.method.as_bytes())
            .map_err(|e| TransportError::Failed(e.to_string()))?;
        let request = Request {
            method,
            url,
            headers: req.headers.clone(),
            body: bytes::Bytes::from(req.body.clone()),
            insecure: false,
        };
        // Past the exec's own deadline, so that the exec's timeout (seen
        // below through the stop flag) ends a slow request, not the
        // client's timer: the run then reports a timeout, as for any
        // command still running at its end.
        let deadline = match self.budget.deadline {
            Some((at, _)) => at + Duration::from_secs(1),
            None => Instant::now() + Duration::from_secs(24 * 3600),
        };
        let limits = Limits {
            connect_timeout: CONNECT_TIMEOUT,
            deadline,
            max_body_bytes: self.network.max_download_bytes,
        };
        let policy = Arc::clone(&self.network.policy);
        let cancel = tokio_util::sync::CancellationToken::new();
        let cancelled = cancel.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let helper = std::thread::Builder::new()
            .name("git-http".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = tx.send(Err(TransportError::Failed(e.to_string())));
                        return;
                    }
                };
                let result = runtime.block_on(async move {
                    let work = async {
                        let (resp, _) =
                            send_following(&policy, request, limits, MAX_REDIRECTS).await?;
                        let status = resp.status.as_u16();
                        let content_type = resp
                            .headers
                            .get(http::header::CONTENT_TYPE)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_string();
                        let body = resp.bytes().await?;
                        Ok::<_, agentcomputer_egress::http::HttpError>(HttpResponse {
                            status,
                            content_type,
                            body,
                        })
                    };
                    tokio::select! {
                        r = work => r.map_err(|e| TransportError::Failed(e.to_string())),
                        () = cancelled.cancelled() => Err(TransportError::Stopped),
                    }
                });
                let _ = tx.send(result);
            })
            .map_err(|e| TransportError::Failed(e.to_string()))?;
        loop {
            match rx.recv_timeout(STOP_POLL) {
                Ok(result) => {
                    let _ = helper.join();
                    return result;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if self.budget.stopped() {
                        // The helper drops the request and ends on its own.
                        cancel.cancel();
                        return Err(TransportError::Stopped);
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(TransportError::Failed("the request was lost".into()));
                }
            }
        }
    }
}

#[async_trait]
impl Command for Git {
    async fn execute(&self, ctx: CommandContext<'_>) -> bashkit::Result<CommandStatus> {
        let budget = &self.0.budget;
        let cwd = super::workspace::resolve(ctx.cwd, ".");
        let engine_cwd = match super::workspace::engine_path(&cwd) {
            Some(p) => p,
            // `git --version` and `git help` need no repository.
            None if ctx
                .args
                .first()
                .is_some_and(|a| a == "--version" || a == "version" || a == "help") =>
            {
                b"/".to_vec()
            }
            None => {
                warn(
                    &ctx,
                    format!(
                        "fatal: not a git repository: {} is outside {WORKSPACE}, where this runtime keeps repositories\n",
                        cwd.display()
                    ),
                )
                .await?;
                return Ok(CommandStatus::with_code(128));
            }
        };
        // Synchronous engine calls on the exec's thread, as every engine
        // command here makes; nothing of it is held across an await.
        let out = {
            let env = |name: &str| ctx.env.get(name).cloned();
            let stop = || budget.step_stopped();
            let user = agentcomputer_runtime_contract::SANDBOX_USER;
            let transport = EgressTransport {
                network: Arc::clone(&self.1),
                budget: budget.clone(),
            };
            let inv = agentcomputer_git::Invocation {
                files: agentcomputer_git::Files::new(
                    self.0.engine.engine().clone(),
                    self.0.engine.owner(),
                )
                .with_max_whole(budget.memory),
                cwd: engine_cwd,
                shown_root: WORKSPACE.to_string(),
                env: &env,
                stop: &stop,
                fallback_name: user.to_string(),
                fallback_email: format!("{user}@{HOSTNAME}"),
                transport: Some(&transport),
            };
            agentcomputer_git::run(&inv, ctx.args)
        };
        if out.code == agentcomputer_git::Error::Stopped.exit_code() && budget.stopped() {
            return Err(budget.stop_error());
        }
        if !out.stdout.is_empty() {
            ctx.stdout.write_all(&out.stdout).await?;
        }
        if !out.stderr.is_empty() {
            match ctx.stderr.write_all(&out.stderr).await {
                Err(bashkit::Error::Io(_)) | Ok(()) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(CommandStatus::with_code(out.code))
    }
}
