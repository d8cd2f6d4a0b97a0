//! Runner for just-bash (npm `just-bash`, a TypeScript bash interpreter):
//! one node process runs many cases, one JSON object per line on stdin and
//! stdout. Each case gets a fresh `new Bash()` (fresh in-memory
//! filesystem). API per the package README: `new Bash({ files, env, cwd })`
//! and `bash.exec(script, { rawScript, signal })` resolving to
//! `{ stdout, stderr, exitCode }`.

use super::TIMEOUT_STATUS;
use crate::{Job, Observed};
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The node driver, written next to `node_modules` at run time.
const DRIVER: &str = r#"import { Bash } from "just-bash";
import { createInterface } from "node:readline";
const timeoutMs = Number(process.argv[2]);
const layoutDirs = JSON.parse(process.argv[3]);
let testdata = {};
const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of rl) {
  const msg = JSON.parse(line);
  if (msg.testdata) { testdata = msg.testdata; continue; }
  let reply;
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), timeoutMs);
  try {
    let bash;
    if (msg.brush) {
      const b = msg.brush;
      const files = {};
      for (const [p, c] of Object.entries(b.files)) files["/case/" + p] = c;
      const env = { ...b.env };
      if (b.home !== null) env.HOME = b.home;
      bash = new Bash({ cwd: "/case", env, files });
      await bash.fs.mkdir("/case", { recursive: true });
      if (b.home !== null) await bash.fs.mkdir(b.home, { recursive: true });
      for (const p of b.executables) await bash.fs.chmod("/case/" + p, 0o755);
    } else {
      bash = new Bash({
        cwd: "/repo",
        env: { SH: "bash", TMP: "/tmp", REPO_ROOT: "/repo" },
        files: msg.needsTestdata ? testdata : {},
      });
      for (const d of layoutDirs) await bash.fs.mkdir("/repo/" + d, { recursive: true });
    }
    const r = await bash.exec(msg.script, { rawScript: true, signal: ctl.signal, stdin: msg.stdin });
    reply = { stdout: r.stdout, stderr: r.stderr, status: r.exitCode, timedOut: ctl.signal.aborted };
  } catch (e) {
    reply = { stdout: "", stderr: String(e && e.stack || e), status: 1, timedOut: ctl.signal.aborted };
  }
  clearTimeout(timer);
  process.stdout.write(JSON.stringify(reply) + "\n");
}
"#;

/// A live node process running the driver.
struct Driver {
    child: Child,
    stdin: ChildStdin,
    replies: mpsc::Receiver<String>,
}

impl Driver {
    fn start(dir: &Path, timeout: Duration, testdata: &Value) -> Result<Driver> {
        let mut child = Command::new("node")
            .arg(dir.join("driver.mjs"))
            .arg(timeout.as_millis().to_string())
            .arg(json!(super::LAYOUT_DIRS).to_string())
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting node")?;
        let mut stdin = child.stdin.take().context("node stdin")?;
        let stdout = child.stdout.take().context("node stdout")?;
        let (tx, replies) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        writeln!(stdin, "{}", json!({ "testdata": testdata }))?;
        Ok(Driver {
            child,
            stdin,
            replies,
        })
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where just-bash is installed: `dir/node_modules/just-bash`.
pub fn installed(dir: &Path) -> bool {
    dir.join("node_modules/just-bash/package.json").is_file()
}

/// The installed just-bash version, from its `package.json`.
pub fn version(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("node_modules/just-bash/package.json")).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    v.get("version")?.as_str().map(str::to_string)
}

/// Runs every job through just-bash installed under `dir`. A case whose
/// reply does not arrive within `timeout` + 3 s (the driver's abort is
/// cooperative, a busy builtin can ignore it) is a timeout and the node
/// process is restarted.
pub fn run_all(
    dir: &Path,
    jobs: &[Job],
    testdata: &[(String, Vec<u8>)],
    timeout: Duration,
    progress: impl Fn(usize),
) -> Result<Vec<Observed>> {
    if !installed(dir) {
        bail!("just-bash is not installed in {}", dir.display());
    }
    std::fs::write(dir.join("driver.mjs"), DRIVER)?;
    let files: serde_json::Map<String, Value> = testdata
        .iter()
        .map(|(p, b)| {
            (
                format!("/repo/{p}"),
                Value::String(String::from_utf8_lossy(b).into_owned()),
            )
        })
        .collect();
    let files = Value::Object(files);
    let dir: PathBuf = dir.canonicalize()?;
    let mut driver = Driver::start(&dir, timeout, &files)?;
    let mut out = Vec::with_capacity(jobs.len());
    for (i, job) in jobs.iter().enumerate() {
        let brush = job.setup.as_ref().map(|s| {
            let files: serde_json::Map<String, Value> = s
                .files
                .iter()
                .map(|f| {
                    let text = String::from_utf8_lossy(&f.contents).into_owned();
                    (f.path.clone(), Value::String(text))
                })
                .collect();
            let home = s.home_dir.as_ref().map(|h| {
                match h.trim_start_matches("./").trim_end_matches('/') {
                    "." | "" => "/case".to_string(),
                    r => format!("/case/{r}"),
                }
            });
            json!({
                "files": files,
                "executables": s.files.iter().filter(|f| f.executable).map(|f| &f.path).collect::<Vec<_>>(),
                "env": s.env.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect::<serde_json::Map<String, Value>>(),
                "home": home,
            })
        });
        let msg = json!({
            "script": job.script,
            "needsTestdata": job.needs_testdata,
            "stdin": String::from_utf8_lossy(&job.inline_stdin()),
            "brush": brush,
        });
        let sent = writeln!(driver.stdin, "{msg}").and_then(|_| driver.stdin.flush());
        let reply = match sent {
            Ok(()) => driver
                .replies
                .recv_timeout(timeout + Duration::from_secs(3))
                .ok(),
            Err(_) => None,
        };
        let obs = match reply.and_then(|r| serde_json::from_str::<Value>(&r).ok()) {
            Some(v) => Observed {
                stdout: v["stdout"].as_str().unwrap_or("").as_bytes().to_vec(),
                stderr: v["stderr"].as_str().unwrap_or("").as_bytes().to_vec(),
                status: v["status"].as_i64().unwrap_or(-1) as i32,
                timed_out: v["timedOut"].as_bool().unwrap_or(false),
                refused: None,
            },
            None => {
                driver = Driver::start(&dir, timeout, &files)?;
                Observed {
                    status: TIMEOUT_STATUS,
                    timed_out: true,
                    ..Observed::default()
                }
            }
        };
        out.push(obs);
        progress(i + 1);
    }
    Ok(out)
}
