//! Runs one bash script against a computer database and prints its output.
//!
//! ```text
//! cargo run -p agentcomputer-shell --example run_script -- /tmp/c.db 'ls -l; echo hi > f'
//! ```
//! The database is created when missing. The exit status is the script's.

use agentcomputer_fs::{Fs, Limits};
use agentcomputer_shell::{ExecRequest, OutputChunk, run};
use std::io::Write;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(db), Some(script)) = (args.next(), args.next()) else {
        eprintln!("usage: run_script <computer.db> <script>");
        std::process::exit(2);
    };
    let fs = Fs::open_or_create(db.as_ref(), Limits::default()).unwrap_or_else(|e| {
        eprintln!("run_script: {db}: {e}");
        std::process::exit(2);
    });
    let (tx, mut rx) = mpsc::channel(64);
    let printer = tokio::spawn(async move {
        while let Some(chunk) = rx.recv().await {
            let _ = match chunk {
                OutputChunk::Stdout(b) => std::io::stdout().write_all(&b),
                OutputChunk::Stderr(b) => std::io::stderr().write_all(&b),
            };
        }
    });
    let req = ExecRequest {
        script,
        ..ExecRequest::default()
    };
    let outcome = run(fs, req, tx, CancellationToken::new()).await;
    let _ = printer.await;
    std::process::exit(outcome.exit_code);
}
