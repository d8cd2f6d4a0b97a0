//! Prints the Markdown reference of the gRPC API (`docs/api.md`) on stdout:
//! `cargo run -p agentcomputer-proto --bin api-doc > docs/api.md`.

use std::io::Write as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    match agentcomputer_proto::apidoc::render_api() {
        Ok(doc) => match std::io::stdout().lock().write_all(doc.as_bytes()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: cannot write stdout: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
