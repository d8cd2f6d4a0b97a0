//! What `--runtime auto`'s decision costs, against parsing alone.
//!
//! ```text
//! cargo run --release -p agentcomputer-shell --example auto_decision [-- ROUNDS]
//! ```
//!
//! The script is the `shell`-labelled entries of
//! `bench/shell/corpus/auto.txt` joined until they make 1 KiB (cut at an
//! entry's end): a script the decision walks to its end, as it must to keep
//! it in-process. Each step runs `ROUNDS` times (default 2000) after a
//! warm-up, five turns each, and the median turn is printed: bashkit's
//! parser alone (the baseline), and the whole decision (the same parse,
//! the refusal check's walk collecting every command, the lookups). Then
//! every corpus entry's decision, with its reason.

use agentcomputer_shell::auto;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

fn corpus() -> Vec<(String, String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/shell/corpus/auto.txt");
    let text = std::fs::read_to_string(&path).expect("read the corpus");
    let mut entries: Vec<(String, String, String)> = Vec::new();
    for line in text.lines() {
        if let Some(header) = line.strip_prefix("## ") {
            let (label, title) = header.split_once(": ").expect("`## RUNTIME: title`");
            entries.push((label.to_string(), title.to_string(), String::new()));
        } else if let Some((_, _, script)) = entries.last_mut() {
            script.push_str(line);
            script.push('\n');
        }
    }
    entries
}

/// Median time per call of `f` over five turns of `rounds` calls.
fn time(rounds: u32, mut f: impl FnMut()) -> Duration {
    let mut turns: Vec<Duration> = (0..5)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..rounds {
                f();
            }
            started.elapsed() / rounds
        })
        .collect();
    turns.sort();
    turns[2]
}

fn main() {
    let rounds: u32 = std::env::args()
        .nth(1)
        .map(|n| n.parse().expect("ROUNDS is a number"))
        .unwrap_or(2000);
    let entries = corpus();
    let mut script = String::new();
    for (_, _, body) in entries.iter().filter(|(label, _, _)| label == "shell") {
        if script.len() + body.len() > 1024 {
            break;
        }
        script.push_str(body.trim());
        script.push('\n');
    }
    let decision = auto::decide(&script);
    assert_eq!(decision.route, auto::Route::Shell, "{decision:?}");
    // Warm-up: the command list is built on the first decision.
    for _ in 0..rounds / 10 {
        black_box(auto::decide(black_box(&script)));
    }
    let parse = time(rounds, || {
        let _ = black_box(bashkit::parser::Parser::new(black_box(&script)).parse());
    });
    let decide = time(rounds, || {
        black_box(auto::decide(black_box(&script)));
    });
    let lines = script.lines().count();
    println!(
        "script: {} bytes, {lines} lines, {} rounds x 5 turns (median turn)",
        script.len(),
        rounds
    );
    println!("{:<32} {:>10} {:>8}", "step", "µs/script", "ratio");
    for (name, t) in [("parse alone (baseline)", parse), ("auto::decide", decide)] {
        println!(
            "{name:<32} {:>10.1} {:>7.2}x",
            t.as_secs_f64() * 1e6,
            t.as_secs_f64() / parse.as_secs_f64()
        );
    }
    println!();
    let mut agree = 0;
    for (label, title, body) in &entries {
        let d = auto::decide(body);
        if d.route.name() == label {
            agree += 1;
        }
        println!("{:<9} {:<9} {title}: {}", label, d.route.name(), d.reason);
    }
    println!(
        "{agree} of {} decisions agree with their labels",
        entries.len()
    );
}
