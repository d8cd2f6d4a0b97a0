//! The evaluation's sections. Each prints a Markdown table; a section fails
//! (an `Err`) only when the harness itself breaks, never because Python
//! lacks something: what fails is the result.

use crate::measure::{Computer, Mem, cell, cpu_time, mib, ms, percentiles, reset_peak};
use anyhow::{Result, bail};
use std::time::{Duration, Instant};

const T30: Duration = Duration::from_secs(30);

/// Start-up: the first `python3` of the process, then `runs` fresh execs of
/// `python3 -c 'print(1)'` beside `echo 1`, and memory around them.
pub(crate) async fn startup(runs: usize) -> Result<()> {
    let c = Computer::new()?;
    println!("## Start-up: `python3 -c 'print(1)'`, fresh exec each ({runs} runs)");
    println!();
    // Warm the shell itself (thread pool, interpreter build) first, so the
    // first python3 call shows Python's own process-wide start.
    let echo_first = c.sh("echo 1", T30).await;
    let before = Mem::now();
    reset_peak()?;
    let first = c.sh("python3 -c 'print(1)'", T30).await;
    let after_first = Mem::now();
    println!("| what | value |");
    println!("|---|---|");
    println!(
        "| first `python3` in the process (exit {}) | {} |",
        first.exit,
        ms(first.elapsed)
    );
    if first.exit != 0 || first.stdout != "1\n" {
        println!("| its error | {} |", first.error_line());
        println!();
        println!("`python3` does not run; no further start-up numbers.");
        return Ok(());
    }
    println!(
        "| memory: RSS before / peak during the first run | {} / {} (+{}) |",
        mib(before.rss),
        mib(after_first.hwm),
        mib(after_first.hwm.saturating_sub(before.rss))
    );
    println!(
        "| address space before / after the first run | {} / {} (VmPeak {}) |",
        mib(before.vm),
        mib(after_first.vm),
        mib(after_first.peak_vm)
    );

    let mut py = Vec::with_capacity(runs);
    let mut echo = Vec::with_capacity(runs);
    let rss_before = Mem::now().rss;
    reset_peak()?;
    for _ in 0..runs {
        let r = c.sh("python3 -c 'print(1)'", T30).await;
        if r.exit != 0 || r.stdout != "1\n" {
            bail!(
                "python3 -c 'print(1)' gave exit {} {:?} {:?}",
                r.exit,
                r.stdout,
                r.stderr
            );
        }
        py.push(r.elapsed);
    }
    let after_runs = Mem::now();
    for _ in 0..runs {
        echo.push(c.sh("echo 1", T30).await.elapsed);
    }
    let (p50, p99, max) = percentiles(py);
    let (e50, e99, emax) = percentiles(echo);
    println!(
        "| `python3 -c 'print(1)'` p50 / p99 / max | {} / {} / {} |",
        ms(p50),
        ms(p99),
        ms(max)
    );
    println!(
        "| `echo 1` (same shell, no Python) p50 / p99 / max | {} / {} / {} (first {}) |",
        ms(e50),
        ms(e99),
        ms(emax),
        ms(echo_first.elapsed)
    );
    println!(
        "| memory: RSS before / peak during the {runs} runs / RSS after | {} / {} (+{}) / {} |",
        mib(rss_before),
        mib(after_runs.hwm),
        mib(after_runs.hwm.saturating_sub(rss_before)),
        mib(after_runs.rss)
    );
    println!(
        "| address space after the runs (VmSize / VmPeak) | {} / {} |",
        mib(after_runs.vm),
        mib(after_runs.peak_vm)
    );

    // Imports: the stdlib is Python source in a zip, compiled per exec.
    for imports in ["json", "csv, json, re, pathlib, os"] {
        let script = format!("python3 -c 'import {imports}'");
        let mut t = Vec::new();
        for _ in 0..runs.min(20) {
            let r = c.sh(&script, T30).await;
            if r.exit != 0 {
                println!(
                    "| `import {imports}` | exit {}: {} |",
                    r.exit,
                    r.error_line()
                );
                break;
            }
            t.push(r.elapsed);
        }
        if !t.is_empty() {
            let n = t.len();
            let (p50, p99, max) = percentiles(t);
            println!(
                "| `python3 -c 'import {imports}'` p50 / p99 / max ({n} runs) | {} / {} / {} |",
                ms(p50),
                ms(p99),
                ms(max)
            );
        }
    }

    // Eight at once, as several agents' scripts would run on one node;
    // first one alone, for comparison.
    let alone = c.sh("python3 -c 'print(sum(range(10**6)))'", T30).await;
    println!(
        "| one exec of `print(sum(range(10**6)))` alone | {} (exit {}{}) |",
        ms(alone.elapsed),
        alone.exit,
        if alone.exit == 0 {
            String::new()
        } else {
            format!(": {}", alone.error_line())
        }
    );
    let rss_before = Mem::now().rss;
    reset_peak()?;
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let fs = c.fs.clone();
        set.spawn(async move {
            let c = Computer::from_fs(fs);
            c.sh("python3 -c 'print(sum(range(10**6)))'", T30).await
        });
    }
    let mut ok = 0;
    let mut failure = None;
    while let Some(r) = set.join_next().await {
        let r = r?;
        if r.exit == 0 && r.stdout == "499999500000\n" {
            ok += 1;
        } else if failure.is_none() {
            failure = Some(format!(
                "exit {} after {}: {}",
                r.exit,
                ms(r.elapsed),
                r.error_line()
            ));
        }
    }
    if let Some(failure) = failure {
        println!("| first failure among the 8 | {failure} |");
    }
    let concurrent = Mem::now();
    println!(
        "| 8 concurrent execs of `print(sum(range(10**6)))`: all done / right | {} / {ok} of 8 |",
        ms(start.elapsed())
    );
    println!(
        "| memory: peak during those 8 | {} (+{}); VmSize {} |",
        mib(concurrent.hwm),
        mib(concurrent.hwm.saturating_sub(rss_before)),
        mib(concurrent.vm)
    );
    Ok(())
}

const JOB: &str = r#"import csv, json, re, os
from pathlib import Path

root = Path("data")
config = json.loads((root / "config.json").read_text())
pattern = re.compile(config["pattern"])
with open(root / "people.csv", newline="") as f:
    rows = list(csv.DictReader(f))
hits = [r for r in rows if pattern.search(r["email"]) and int(r["age"]) >= config["min_age"]]
out = Path("out")
out.mkdir(exist_ok=True)
with open(out / "hits.csv", "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["name", "email"])
    for r in hits:
        writer.writerow([r["name"], r["email"]])
summary = {"rows": len(rows), "hits": len(hits), "inputs": sorted(p.name for p in root.iterdir()), "cwd": os.getcwd()}
(out / "summary.json").write_text(json.dumps(summary, indent=2))
print(len(rows), len(hits))
"#;

/// The shell writes inputs and a script, Python reads and writes files,
/// the shell and the engine API read what Python wrote.
pub(crate) async fn script(runs: usize) -> Result<()> {
    let c = Computer::new()?;
    println!("## Files through the engine, both directions");
    println!();
    println!("| step | result |");
    println!("|---|---|");

    // Minimal round trip: pathlib only.
    let r = c
        .sh(
            "echo hello > a.txt; python3 -c 'from pathlib import Path; Path(\"b.txt\").write_text(Path(\"a.txt\").read_text().upper())'; cat b.txt",
            T30,
        )
        .await;
    let engine = c
        .read("b.txt")
        .map(|b| String::from_utf8_lossy(&b).into_owned());
    let ok =
        r.exit == 0 && r.stdout == "HELLO\n" && engine.as_deref().is_ok_and(|s| s == "HELLO\n");
    println!(
        "| shell writes `a.txt`, Python `Path.read_text`/`write_text` `b.txt`, shell `cat`s it, engine API reads it | {} (exit {}; shell saw {:?}; engine saw {}) {} |",
        verdict(ok),
        r.exit,
        r.stdout,
        engine
            .as_ref()
            .map_or_else(|e| e.to_string(), |s| format!("{s:?}")),
        r.error_line()
    );
    let r = c
        .sh(
            "python3 -c 'f = open(\"/tmp/t.txt\", \"w\"); f.write(\"scratch\\n\"); f.close()'; cat /tmp/t.txt",
            T30,
        )
        .await;
    println!(
        "| Python `open()` writes `/tmp/t.txt` (exec scratch), shell `cat`s it in the same exec | {} (exit {}, {:?}) {} |",
        verdict(r.exit == 0 && r.stdout == "scratch\n"),
        r.exit,
        r.stdout,
        r.error_line()
    );

    // The job: csv, json, re, pathlib, os.
    let prepare = format!(
        "mkdir -p data && {{ echo name,email,age; seq 1 500 | awk '{{d = ($1 % 3) ? \"example.com\" : \"test.org\"; printf \"user%d,user%d@%s,%d\\n\", $1, $1, d, 20 + $1 % 50}}'; }} > data/people.csv
echo '{{\"pattern\": \"@test\\\\.org$\", \"min_age\": 30}}' > data/config.json
cat > job.py <<'PY'
{JOB}PY
wc -l < data/people.csv"
    );
    let r = c.sh(&prepare, T30).await;
    if r.exit != 0 || r.stdout.trim() != "501" {
        bail!(
            "preparing the inputs failed: {} {} {}",
            r.exit,
            r.stdout,
            r.stderr
        );
    }
    let expected_hits = (1..=500)
        .filter(|i| i % 3 == 0 && 20 + i % 50 >= 30)
        .count();
    let expected = format!("500 {expected_hits}\n");
    let mut times = Vec::with_capacity(runs);
    let mut last = None;
    for _ in 0..runs {
        let r = c.sh("python3 job.py", T30).await;
        let done = r.exit == 0 && r.stdout == expected;
        times.push(r.elapsed);
        last = Some(r);
        if !done {
            break;
        }
    }
    let last = last.expect("at least one run");
    let job_ok = last.exit == 0 && last.stdout == expected;
    let (p50, p99, max) = percentiles(times.clone());
    println!(
        "| `python3 job.py` (csv.DictReader over 500 rows, json, re, pathlib, os; writes 2 files): runs | {} (exit {}, stdout {:?}, expected {:?}); {} runs p50 / p99 / max {} / {} / {} |",
        verdict(job_ok),
        last.exit,
        last.stdout,
        expected,
        times.len(),
        ms(p50),
        ms(p99),
        ms(max)
    );
    if !job_ok {
        println!("| its error | {} |", last.error_line());
        return Ok(());
    }
    let check = c
        .sh(
            "jq -r '.hits, .cwd' out/summary.json; wc -l < out/hits.csv; sed -n 2p out/hits.csv",
            T30,
        )
        .await;
    let want = format!(
        "{expected_hits}\n/workspace\n{}\nuser12,user12@test.org\r\n",
        expected_hits + 1
    );
    println!(
        "| shell reads Python's files (`jq .hits .cwd`, `wc -l`, `sed -n 2p`) | {} ({:?}) |",
        verdict(check.exit == 0 && check.stdout == want),
        check.stdout
    );
    let summary = c.read("out/summary.json")?;
    let summary = String::from_utf8_lossy(&summary);
    println!(
        "| engine API reads `out/summary.json` | {} ({} bytes, `\"hits\": {expected_hits}` {}) |",
        verdict(summary.contains(&format!("\"hits\": {expected_hits}"))),
        summary.len(),
        if summary.contains(&format!("\"hits\": {expected_hits}")) {
            "present"
        } else {
            "missing"
        }
    );
    Ok(())
}

/// One import and one use of each common module.
const MODULES: &[(&str, &str)] = &[
    ("json", "import json; print(json.dumps({\"a\": [1, 2]}))"),
    (
        "re",
        "import re; print(re.sub(r\"[0-9]+\", \"N\", \"a1b22\"))",
    ),
    (
        "pathlib",
        "import pathlib; print(pathlib.Path(\"/workspace\").is_dir())",
    ),
    (
        "csv",
        "import csv; print(list(csv.reader([\"a,b\", \"c,d\"])))",
    ),
    (
        "os",
        "import os; print(os.getcwd(), sorted(os.listdir(\".\")), os.environ.get(\"HOME\"))",
    ),
    ("sys", "import sys; print(sys.version_info[:2], sys.argv)"),
    (
        "subprocess",
        "import subprocess; print(subprocess.run([\"echo\", \"hi\"], capture_output=True).stdout)",
    ),
    (
        "datetime",
        "import datetime; print(datetime.datetime.now().year >= 2024, datetime.date(2024, 1, 31) + datetime.timedelta(days=1))",
    ),
    (
        "collections",
        "import collections; print(collections.Counter(\"abca\").most_common(1), collections.defaultdict(list)[\"k\"])",
    ),
    (
        "itertools",
        "import itertools; print(list(itertools.islice(itertools.count(), 3)), list(itertools.chain([1], [2])))",
    ),
    ("math", "import math; print(math.sqrt(2), math.floor(2.5))"),
    (
        "hashlib",
        "import hashlib; print(hashlib.sha256(b\"x\").hexdigest()[:16])",
    ),
    ("base64", "import base64; print(base64.b64encode(b\"hi\"))"),
    (
        "textwrap",
        "import textwrap; print(textwrap.wrap(\"aa bb cc dd\", 5))",
    ),
    (
        "argparse",
        "import argparse; p = argparse.ArgumentParser(); p.add_argument(\"--n\", type=int); print(p.parse_args([\"--n\", \"3\"]).n)",
    ),
    (
        "typing",
        "from typing import List, Optional; x: List[int] = [1]; print(x, Optional[int])",
    ),
    (
        "dataclasses",
        "from dataclasses import dataclass, asdict\n@dataclass\nclass P:\n    x: int\n    y: int = 2\nprint(asdict(P(1)))",
    ),
    (
        "class + f-string + exceptions",
        "class A:\n    def __init__(self, n):\n        self.n = n\ntry:\n    raise ValueError(A(3).n)\nexcept ValueError as e:\n    print(f\"caught {e!r:>12}\")",
    ),
    (
        "generators + comprehension",
        "def g(n):\n    yield from range(n)\nprint({k: v for k, v in zip(\"ab\", g(2))}, sum(x * x for x in g(4)))",
    ),
    (
        "sqlite3",
        "import sqlite3; c = sqlite3.connect(\":memory:\"); print(c.execute(\"select 1 + 1\").fetchone())",
    ),
    ("stdin", "import sys; print(len(sys.stdin.read()))"),
];

pub(crate) async fn modules() -> Result<()> {
    let c = Computer::new()?;
    println!("## Common modules: `python3 -c \"import M; <one use>\"`");
    println!();
    println!("| module | result | output or error (last line of stderr) |");
    println!("|---|---|---|");
    let mut passed = 0;
    for (name, code) in MODULES {
        let script = if *name == "stdin" {
            format!("printf 'abc' | python3 -c \"{}\"", shell_dq(code))
        } else {
            format!("python3 -c \"{}\"", shell_dq(code))
        };
        let r = c.sh(&script, T30).await;
        let ok = r.exit == 0 && !r.stdout.trim().is_empty();
        if ok {
            passed += 1;
        }
        let detail = if ok {
            cell(r.stdout.trim())
        } else {
            format!("exit {}: {}", r.exit, r.error_line())
        };
        println!("| {name} | {} | {detail} |", verdict(ok));
    }
    println!();
    println!("{passed} of {} work.", MODULES.len());
    Ok(())
}

/// `code` escaped for a double-quoted bash string.
fn shell_dq(code: &str) -> String {
    code.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('$', "\\$")
        .replace('`', "\\`")
}

pub(crate) async fn limits() -> Result<()> {
    let c = Computer::new()?;
    println!("## Limits: timeout, CPU after the stop, memory bombs, recursion");
    println!();
    println!(
        "| script (exec timeout) | ended after | exit | message | CPU in the 1 s after | peak RSS above before | `echo alive` after |"
    );
    println!("|---|---|---|---|---|---|---|");
    let cases: &[(&str, &str, u64)] = &[
        ("while True: pass", "python3 -c 'while True: pass'", 3),
        (
            "x = 7 ** (10 ** 9) (one long native operation)",
            "python3 -c 'x = 7 ** (10 ** 9); print(1)'",
            3,
        ),
        (
            "x = 'a' * 10**10",
            "python3 -c 'x = \"a\" * 10**10; print(len(x))'",
            20,
        ),
        (
            "bytearray(2**31)",
            "python3 -c 'b = bytearray(2**31); print(len(b))'",
            20,
        ),
        (
            "x = 'a' * 10**9",
            "python3 -c 'x = \"a\" * 10**9; print(len(x))'",
            20,
        ),
        (
            "growing list of 1 MiB bytes",
            "python3 -c 'l = []\nwhile True: l.append(bytes(1 << 20))'",
            20,
        ),
        (
            "growing dict of str",
            "python3 -c 'd = {}\ni = 0\nwhile True:\n    d[i] = str(i) * 100\n    i += 1'",
            20,
        ),
        (
            "file bomb: write 1 MiB chunks forever to /workspace",
            "python3 -c 'f = open(\"big\", \"wb\")\nwhile True: f.write(bytes(1 << 20))'",
            20,
        ),
        (
            "deep recursion",
            "python3 -c 'def f(n): return f(n + 1)\nf(0)'",
            20,
        ),
        (
            "deeply nested literal",
            "python3 -c 'print(eval(\"[\" * 100000 + \"]\" * 100000))'",
            20,
        ),
    ];
    for (name, script, secs) in cases {
        let rss = Mem::now().rss;
        reset_peak()?;
        let r = c.sh(script, Duration::from_secs(*secs)).await;
        let peak = Mem::now().hwm;
        let cpu0 = cpu_time();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let cpu = cpu_time().saturating_sub(cpu0);
        let alive = c.sh("echo alive", T30).await;
        println!(
            "| `{}` ({secs} s) | {} | {} | {} | {} | +{} | {} {} |",
            cell(name),
            ms(r.elapsed),
            r.exit,
            r.error_line(),
            ms(cpu),
            mib(peak.saturating_sub(rss)),
            alive.stdout.trim(),
            ms(alive.elapsed)
        );
    }
    let _ = c.sh("rm -f big", T30).await;
    Ok(())
}

pub(crate) async fn network() -> Result<()> {
    let c = Computer::new()?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let port = listener.local_addr()?.port();
    println!("## Network: a listener on 127.0.0.1:{port}; nothing may reach it");
    println!();
    println!("| attempt | exit | error (last line of stderr) |");
    println!("|---|---|---|");
    let attempts = [
        (
            "socket.create_connection",
            format!(
                "import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=2); print(\"connected\")"
            ),
        ),
        (
            "urllib.request.urlopen",
            format!(
                "import urllib.request; print(urllib.request.urlopen(\"http://127.0.0.1:{port}/\", timeout=2).status)"
            ),
        ),
        (
            "subprocess curl",
            format!(
                "import subprocess; print(subprocess.run([\"curl\", \"http://127.0.0.1:{port}/\"]).returncode)"
            ),
        ),
        (
            "os.system",
            "import os; print(os.system(\"echo hi\"))".to_string(),
        ),
    ];
    for (name, code) in attempts {
        let r = c
            .sh(
                &format!("python3 -c \"{}\"", shell_dq(&code)),
                Duration::from_secs(10),
            )
            .await;
        let detail = if r.exit == 0 {
            cell(r.stdout.trim())
        } else {
            r.error_line()
        };
        println!("| {name} | {} | {detail} |", r.exit);
    }
    let mut accepted = 0;
    while listener.accept().is_ok() {
        accepted += 1;
    }
    println!();
    println!("connections that reached the listener: {accepted}");
    Ok(())
}

fn verdict(ok: bool) -> &'static str {
    if ok { "works" } else { "FAILS" }
}
