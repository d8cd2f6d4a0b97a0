//! The `git` native: one call that runs `git ARGS…` through the
//! `agentcomputer-git` porcelain, the same code the shell's `git` runs, on
//! the computer's files (`/workspace`). The `git` module (`js/git.js`)
//! builds argument lists and parses what this returns.

use std::rc::Rc;

use agentcomputer_fs::FileKind;
use rquickjs::{Ctx, Exception, Object, Result, Value};

use super::set_fn;
use crate::state::ExecState;
use crate::vfs::{Mount, Place};

/// The host name of every computer (`os.hostname()`), for the fallback
/// committer email, as the shell runtime makes it.
const HOSTNAME: &str = "computer";

/// Why the command did not run at all: `(exit code, stderr)` as git
/// would print them.
fn refused(code: i32, message: String) -> (i32, Vec<u8>, Vec<u8>) {
    (code, Vec::new(), format!("{message}\n").into_bytes())
}

/// The engine path of the JavaScript path `cwd` (a directory under
/// `/workspace`), or how git answers when it is not one.
fn engine_cwd(st: &ExecState, cwd: &str, args: &[String]) -> std::result::Result<Vec<u8>, String> {
    let vfs = &st.ops.vfs;
    let shown = crate::vfs::normalize(&vfs.absolute(cwd));
    match vfs.place(cwd) {
        Ok(Place::In(Mount::Workspace, rel)) => {
            match vfs.resolve(cwd, true) {
                Ok(n) if n.attr.kind == FileKind::Directory => {}
                Ok(_) => {
                    return Err(format!(
                        "fatal: cannot change to '{shown}': Not a directory"
                    ));
                }
                Err(_) => {
                    return Err(format!(
                        "fatal: cannot change to '{shown}': No such file or directory"
                    ));
                }
            }
            agentcomputer_git::paths::normalize(&rel).ok_or_else(|| {
                format!("fatal: cannot change to '{shown}': No such file or directory")
            })
        }
        // `git --version` and `git help` need no repository.
        _ if args
            .first()
            .is_some_and(|a| a == "--version" || a == "version" || a == "help") =>
        {
            Ok(b"/".to_vec())
        }
        _ => Err(format!(
            "fatal: not a git repository: {shown} is outside /workspace, where this runtime keeps repositories"
        )),
    }
}

/// Runs one git command; `(code, stdout, stderr)`.
fn run(st: &ExecState, args: &[String], cwd: &str, env: &[Vec<String>]) -> (i32, Vec<u8>, Vec<u8>) {
    let engine_cwd = match engine_cwd(st, cwd, args) {
        Ok(p) => p,
        Err(message) => return refused(128, message),
    };
    let fs = match st.ops.vfs.fs(Mount::Workspace) {
        Ok(fs) => fs,
        Err(e) => return refused(128, format!("fatal: the computer's files: {e:?}")),
    };
    let lookup = |name: &str| {
        env.iter()
            .find(|p| p.len() == 2 && p[0] == name)
            .map(|p| p[1].clone())
    };
    // Polled between git's steps: the exec's deadline, cancellation and
    // output cap, and (as in QuickJS's interrupt handler) the place where a
    // demoted exec waits for its computer's turn of idle CPU.
    let stop = || {
        agentcomputer_sched::checkpoint(|| st.stop.should_stop());
        st.stop.should_stop()
    };
    let user = agentcomputer_runtime_contract::SANDBOX_USER;
    let transport = FetcherTransport {
        fetcher: st.fetcher.clone(),
        deadline: st.stop.deadline,
    };
    let inv = agentcomputer_git::Invocation {
        files: agentcomputer_git::Files::new(fs, st.ops.vfs.owner)
            .with_max_whole(st.memory_limit as u64),
        cwd: engine_cwd,
        shown_root: Mount::Workspace.prefix().to_string(),
        env: &lookup,
        stop: &stop,
        fallback_name: user.to_string(),
        fallback_email: format!("{user}@{HOSTNAME}"),
        transport: Some(&transport),
    };
    let out = agentcomputer_git::run(&inv, args);
    (out.code, out.stdout, out.stderr)
}

/// git's HTTP exchanges through the exec's [`Fetcher`], the one `fetch`
/// uses: the computer's egress policy decides them (a runtime without one
/// denies every destination), and they end by the exec's deadline.
struct FetcherTransport {
    fetcher: std::sync::Arc<dyn crate::fetch::Fetcher>,
    deadline: std::time::Instant,
}

impl agentcomputer_git::remote::transport::Transport for FetcherTransport {
    fn send(
        &self,
        req: &agentcomputer_git::remote::transport::HttpRequest,
    ) -> std::result::Result<
        agentcomputer_git::remote::transport::HttpResponse,
        agentcomputer_git::remote::transport::TransportError,
    > {
        use agentcomputer_git::remote::transport::{HttpResponse, TransportError};
        let request = crate::fetch::FetchRequest {
            url: req.url.clone(),
            method: req.method.to_string(),
            headers: req
                .headers
                .iter()
                .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
                .collect(),
            body: req.body.clone(),
            deadline: self.deadline,
        };
        match self.fetcher.fetch(request) {
            Ok(resp) => Ok(HttpResponse {
                status: resp.status,
                content_type: resp
                    .headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case("content-type"))
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default(),
                body: resp.body,
            }),
            Err(crate::fetch::FetchError::Denied(m) | crate::fetch::FetchError::Failed(m)) => {
                Err(TransportError::Failed(m))
            }
        }
    }
}

/// UTF-8 text of `bytes`, invalid sequences replaced (as `TextDecoder`).
fn text(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

pub(super) fn install<'js>(obj: &Object<'js>, st: &Rc<ExecState>) -> Result<()> {
    let s = st.clone();
    // gitRun(args, cwd, env) -> [code, stdout, stderr]; env is
    // `[[name, value], …]`, the exec's `process.env` as it is now.
    set_fn(
        obj,
        "gitRun",
        move |ctx: Ctx<'js>,
              args: Vec<String>,
              cwd: String,
              env: Vec<Vec<String>>|
              -> Result<Vec<Value<'js>>> {
            let (code, stdout, stderr) = run(&s, &args, &cwd, &env);
            if code == agentcomputer_git::Error::Stopped.exit_code() && s.stop.should_stop() {
                // The exec is over (timeout, cancellation): end it as every
                // other stop does, uncatchably.
                return Err(super::sys::throw_uncatchable(&ctx, "git: stopped"));
            }
            // The output becomes JavaScript strings in QuickJS's heap, which
            // counts against the exec's memory limit; more than the whole
            // heap is refused before it is copied.
            let size = stdout.len() + stderr.len();
            if size > s.memory_limit {
                let e = Exception::from_message(
                    ctx.clone(),
                    &format!(
                        "git printed {size} bytes, more than the exec's memory limit of {} bytes",
                        s.memory_limit
                    ),
                )?;
                e.as_object().set("code", "ERR_GIT_OUTPUT_TOO_LARGE")?;
                return Err(e.throw());
            }
            Ok(vec![
                Value::new_int(ctx.clone(), code),
                rquickjs::String::from_str(ctx.clone(), &text(stdout))?.into_value(),
                rquickjs::String::from_str(ctx, &text(stderr))?.into_value(),
            ])
        },
    )
}
