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
//! warm-up, five turns each, and the turn with the median wall time is
//! printed, as wall time and as the thread's CPU time (on a loaded machine
//! the wall time also holds the waits for a core): bashkit's parser alone
//! on the script (the baseline) and on `true` (its fixed cost), and the
//! whole decision on each (the same parse, the refusal check's walk
//! collecting every command, the lookups). Then every corpus entry's
//! decision, with its reason.

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

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Wall and CPU time per call of `f`: the turn with the median wall time
/// of five turns of `rounds` calls.
fn time(rounds: u32, mut f: impl FnMut()) -> (Duration, Duration) {
    let mut turns: Vec<(Duration, Duration)> = (0..5)
        .map(|_| {
            let started = Instant::now();
            let cpu = thread_cpu();
            for _ in 0..rounds {
                f();
            }
            (started.elapsed() / rounds, (thread_cpu() - cpu) / rounds)
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
    let parse = |text: &str| {
        time(rounds, || {
            let _ = black_box(bashkit::parser::Parser::new(black_box(text)).parse());
        })
    };
    let decide = |text: &str| {
        time(rounds, || {
            black_box(auto::decide(black_box(text)));
        })
    };
    let rows = [
        ("parse, 1 KiB (baseline)", parse(&script)),
        ("auto::decide, 1 KiB", decide(&script)),
        ("parse, `true`", parse("true")),
        ("auto::decide, `true`", decide("true")),
    ];
    let baseline = rows[0].1.1;
    let lines = script.lines().count();
    println!(
        "script: {} bytes, {lines} lines, {} rounds x 5 turns (median turn)",
        script.len(),
        rounds
    );
    println!(
        "{:<26} {:>9} {:>9} {:>10}",
        "step", "wall µs", "CPU µs", "CPU ratio"
    );
    for (name, (wall, cpu)) in rows {
        println!(
            "{name:<26} {:>9.1} {:>9.1} {:>9.2}x",
            wall.as_secs_f64() * 1e6,
            cpu.as_secs_f64() * 1e6,
            cpu.as_secs_f64() / baseline.as_secs_f64()
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
