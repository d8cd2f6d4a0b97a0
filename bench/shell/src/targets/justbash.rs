//! just-bash (npm `just-bash`) in one warm node process running
//! `bench/shell/driver.mjs`, which times each `exec` itself with
//! `process.hrtime`. Its files live in just-bash's default in-memory
//! filesystem under `/workspace`.

use super::Ran;
use crate::scenarios::Scenario;
use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

/// The driver, copied next to `node_modules` so `import "just-bash"`
/// resolves there.
const DRIVER: &str = include_str!("../../driver.mjs");
const DRIVER_NAME: &str = "shell-bench-driver.mjs";

/// The working directory of every run, where the files are put.
const CWD: &str = "/workspace";

pub(crate) struct JustBash {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl JustBash {
    /// Starts node in `dir`, which must hold `node_modules/just-bash`.
    pub(crate) fn start(dir: &Path) -> Result<Self> {
        if !installed(dir) {
            bail!(
                "just-bash is not installed in {} (npm install --prefix {} just-bash)",
                dir.display(),
                dir.display()
            );
        }
        let dir: PathBuf = dir.canonicalize()?;
        std::fs::write(dir.join(DRIVER_NAME), DRIVER)?;
        let mut child = Command::new("node")
            .arg(DRIVER_NAME)
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting node")?;
        let stdin = child.stdin.take().context("node stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("node stdout")?);
        Ok(Self {
            child,
            stdin,
            stdout,
        })
    }

    fn call(&mut self, msg: &Value) -> Result<Value> {
        writeln!(self.stdin, "{msg}")?;
        self.stdin.flush()?;
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            bail!("node exited");
        }
        Ok(serde_json::from_str(&line)?)
    }

    pub(crate) fn load(&mut self, sc: &Scenario) -> Result<()> {
        let files: serde_json::Map<String, Value> = sc
            .files
            .iter()
            .map(|(p, b)| {
                let text = String::from_utf8(b.clone()).map_err(|_| anyhow!("{p} is not UTF-8"))?;
                Ok((format!("{CWD}/{p}"), Value::String(text)))
            })
            .collect::<Result<_>>()?;
        let reply = self.call(&json!({ "op": "load", "cwd": CWD, "files": files }))?;
        if reply["ok"] != Value::Bool(true) {
            bail!("driver refused the files: {reply}");
        }
        Ok(())
    }

    /// `op` is `run` (fresh instance, timed) or `check` (last instance).
    pub(crate) fn run(&mut self, script: &str, op: &str) -> Result<Ran> {
        let v = self.call(&json!({ "op": op, "script": script }))?;
        Ok(Ran {
            elapsed: Duration::from_nanos(v["ns"].as_u64().unwrap_or(0)),
            stdout: v["stdout"].as_str().unwrap_or("").as_bytes().to_vec(),
            stderr: v["stderr"].as_str().unwrap_or("").as_bytes().to_vec(),
            status: v["status"].as_i64().unwrap_or(-1) as i32,
        })
    }
}

impl Drop for JustBash {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// Installation checks are the conformance harness's: one place knows the layout.
pub(crate) use shell_spec::runners::justbash::{installed, version};
