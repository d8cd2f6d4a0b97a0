//! `shell-spec`: runs the Oils spec tests (or, with `--suite brush`, the
//! brush shell's YAML cases) through the shell runtime, just-bash, bash and
//! (with `--brush-bin`) the brush shell's binary, and writes the comparison
//! as Markdown.

use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};
use serde_json::json;
use shell_spec::judge::{Verdict, judge, skip_reason};
use shell_spec::report::{self, CaseResult, FileResult, Meta};
use shell_spec::{Job, Observed, brush, corpus, runners, select};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Which corpus to run.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Suite {
    /// The Oils spec tests, judged by their stated bash expectations.
    Oils,
    /// The brush shell's YAML cases, judged against bash's own outcome.
    Brush,
}

#[derive(Parser)]
#[command(
    about = "Oils spec tests or brush cases: agentcomputer-shell vs just-bash vs bash vs brush"
)]
struct Args {
    /// Which corpus to run.
    #[arg(long, value_enum, default_value = "oils")]
    suite: Suite,
    /// The fetched `brush-shell` crate source (or its `tests/cases`), as
    /// printed by `bench/shell-spec/fetch-brush.sh`; for `--suite brush`.
    #[arg(long)]
    brush: Option<PathBuf>,
    /// Corpus directory (holds `spec/*.test.sh`), relative to the working directory.
    #[arg(long, default_value = "../shared/oils-spec")]
    corpus: PathBuf,
    /// Markdown output; its hand-written section is kept. Stdout if absent.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Per-case timeout in seconds.
    #[arg(long, default_value_t = 5)]
    timeout: u64,
    /// Directory where `npm install just-bash` put `node_modules`.
    #[arg(long, default_value = "target/shell-spec")]
    node_dir: PathBuf,
    /// Path of real bash.
    #[arg(long, default_value = "/bin/bash")]
    bash: PathBuf,
    /// The brush shell's binary (as printed by
    /// `bench/shell-spec/install-brush.sh`); its column is skipped without it.
    #[arg(long)]
    brush_bin: Option<PathBuf>,
    /// Only files whose name contains this.
    #[arg(long)]
    only: Option<String>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    match args.suite {
        Suite::Oils => run_oils(&args),
        Suite::Brush => run_brush(&args),
    }
}

fn run_oils(args: &Args) -> Result<()> {
    let corpus_dir = args
        .corpus
        .canonicalize()
        .with_context(|| format!("corpus {}", args.corpus.display()))?;
    let mut files = Vec::new();
    for p in select::spec_files(&corpus_dir)? {
        let f = corpus::load(&p)?;
        if args
            .only
            .as_ref()
            .is_none_or(|o| f.name.contains(o.as_str()))
        {
            files.push(f);
        }
    }
    let testdata = runners::testdata(&corpus_dir)?;
    // Flatten runnable cases; skipped ones are judged without running.
    let mut jobs = Vec::new();
    let mut index = Vec::new();
    for (fi, f) in files.iter().enumerate() {
        for (ci, c) in f.cases.iter().enumerate() {
            if skip_reason(c).is_none() {
                jobs.push(Job::new(c));
                index.push((fi, ci));
            }
        }
    }
    eprintln!("{} files, {} runnable cases", files.len(), jobs.len());
    let started = Instant::now();
    let (ours, jb, bash, _, br) = run_shells(args, &jobs, &testdata, false)?;

    let mut results: Vec<FileResult> = files
        .iter()
        .map(|f| FileResult {
            name: f.name.clone(),
            cases: f
                .cases
                .iter()
                .map(|c| {
                    let skip = Verdict::Skip(skip_reason(c).unwrap_or_default());
                    CaseResult {
                        name: c.name.clone(),
                        line: c.line,
                        verdicts: std::array::from_fn(|_| skip.clone()),
                    }
                })
                .collect(),
        })
        .collect();
    let mut failures = Vec::new();
    for (k, &(fi, ci)) in index.iter().enumerate() {
        let case = &files[fi].cases[ci];
        let v = |o: &Observed| judge(case, o);
        let r = &mut results[fi].cases[ci];
        r.verdicts[0] = v(&ours[k]);
        r.verdicts[1] = match &jb {
            Some(j) => v(&j[k]),
            None => Verdict::Skip("just-bash not installed".into()),
        };
        r.verdicts[2] = v(&bash[k]);
        r.verdicts[3] = match &br {
            Some(b) => v(&b[k]),
            None => Verdict::Skip(NO_BRUSH.into()),
        };
        let outs = [
            Some(&ours[k]),
            jb.as_ref().map(|j| &j[k]),
            Some(&bash[k]),
            br.as_ref().map(|b| &b[k]),
        ];
        for (s, o) in outs.into_iter().enumerate() {
            if let (Verdict::Fail(why), Some(o)) = (&r.verdicts[s], o) {
                failures.push(json!({
                    "shell": report::SHELLS[s], "file": files[fi].name, "line": case.line,
                    "case": case.name, "why": why,
                    "stdout": String::from_utf8_lossy(&o.stdout),
                    "stderr": String::from_utf8_lossy(&o.stderr),
                    "status": o.status,
                }));
            }
        }
    }
    std::fs::create_dir_all(&args.node_dir)?;
    let mut fl = std::fs::File::create(args.node_dir.join("failures.jsonl"))?;
    for f in &failures {
        writeln!(fl, "{f}")?;
    }

    let readme = std::fs::read_to_string(corpus_dir.join("README.md")).unwrap_or_default();
    let commit = readme
        .split_whitespace()
        .find(|w| w.len() >= 40 && w.chars().take(40).all(|c| c.is_ascii_hexdigit()))
        .map(|w| format!("oils-for-unix/oils@{}", &w[..12]))
        .unwrap_or_else(|| "unknown".into());
    let meta = Meta {
        corpus: &commit,
        versions: [
            "bashkit 0.20.2".into(),
            runners::justbash::version(&args.node_dir).unwrap_or_else(|| "not installed".into()),
            bash_version(&args.bash),
            brush_version(args),
        ],
        timeout_secs: args.timeout,
        excluded: select::EXCLUDED
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect(),
    };
    let hand = args
        .out
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|d| report::hand_written(&d))
        .unwrap_or_else(|| "## Failure classes\n\n(to be written after a run)".into());
    let brush_section = args
        .out
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|d| report::brush_section(&d));
    let doc = report::render(&results, &meta, &hand, brush_section.as_deref());
    match &args.out {
        Some(p) => std::fs::write(p, doc)?,
        None => print!("{doc}"),
    }
    let all: Vec<&CaseResult> = results.iter().flat_map(|f| &f.cases).collect();
    for (s, name) in report::SHELLS.iter().enumerate() {
        let (p, f, k) = report::counts(all.iter().copied(), s);
        eprintln!("{name}: pass {p} fail {f} skip {k}");
    }
    eprintln!("done in {:.1?}", started.elapsed());
    Ok(())
}

/// The shells' outcomes for `jobs`, run side by side (one thread each):
/// the runtime, just-bash, bash, bash again, brush. Bash runs each job twice
/// when `bash_twice` (the second outcome checks that bash agrees with
/// itself). just-bash is `None` when it is not installed, brush when no
/// `--brush-bin` was given.
#[allow(clippy::type_complexity)]
fn run_shells(
    args: &Args,
    jobs: &[Job],
    testdata: &[(String, Vec<u8>)],
    bash_twice: bool,
) -> Result<(
    Vec<Observed>,
    Option<Vec<Observed>>,
    Vec<Observed>,
    Vec<Observed>,
    Option<Vec<Observed>>,
)> {
    let timeout = Duration::from_secs(args.timeout);
    let started = Instant::now();
    let tick = |name: &'static str, total: usize| {
        move |n: usize| {
            if n.is_multiple_of(250) || n == total {
                eprintln!("{name}: {n}/{total} ({:.0?})", started.elapsed());
            }
        }
    };
    let n = jobs.len();
    let (ours, jb, bash, br) = std::thread::scope(|s| {
        let o = s.spawn(|| {
            runners::ours::run_all(jobs, testdata, timeout, tick("agentcomputer-shell", n))
        });
        let j = s.spawn(|| {
            runners::justbash::run_all(
                &args.node_dir,
                jobs,
                testdata,
                timeout,
                tick("just-bash", n),
            )
        });
        let b = s.spawn(|| -> Result<(Vec<Observed>, Vec<Observed>)> {
            let first =
                runners::bash::run_all(&args.bash, jobs, testdata, timeout, tick("bash", n))?;
            let second = if bash_twice {
                runners::bash::run_all(&args.bash, jobs, testdata, timeout, tick("bash again", n))?
            } else {
                Vec::new()
            };
            Ok((first, second))
        });
        let r = s.spawn(|| -> Result<Option<Vec<Observed>>> {
            match &args.brush_bin {
                Some(bin) => Ok(Some(runners::brushbin::run_all(
                    bin,
                    jobs,
                    testdata,
                    timeout,
                    tick("brush", n),
                )?)),
                None => Ok(None),
            }
        });
        (o.join(), j.join(), b.join(), r.join())
    });
    let ours = ours.expect("runner thread")?;
    let jb = match jb.expect("runner thread") {
        Ok(v) => Some(v),
        Err(e) => {
            eprintln!("just-bash not run: {e:#}");
            None
        }
    };
    let (bash, again) = bash.expect("runner thread")?;
    let br = br.expect("runner thread")?;
    Ok((ours, jb, bash, again, br))
}

fn run_brush(args: &Args) -> Result<()> {
    let src = args.brush.as_ref().context(
        "--suite brush needs --brush DIR (bash bench/shell-spec/fetch-brush.sh prints it)",
    )?;
    let cases_dir = brush::cases_dir(src);
    let files = brush::load_all(&cases_dir)?;
    let files: Vec<_> = files
        .into_iter()
        .filter(|f| {
            args.only
                .as_ref()
                .is_none_or(|o| f.name.contains(o.as_str()))
        })
        .collect();
    let oracle_version = bash_version(&args.bash);
    let oracle = brush::version(oracle_version.trim_start_matches("GNU bash "));
    let mut jobs = Vec::new();
    let mut index = Vec::new();
    for (fi, f) in files.iter().enumerate() {
        for (ci, c) in f.cases.iter().enumerate() {
            if brush::exclusion(&f.name, c, oracle).is_none() {
                jobs.push(Job::brush(c));
                index.push((fi, ci));
            }
        }
    }
    let total: usize = files.iter().map(|f| f.cases.len()).sum();
    eprintln!(
        "{} files, {total} cases, {} runnable",
        files.len(),
        jobs.len()
    );
    let started = Instant::now();
    let (ours, jb, bash, again, br) = run_shells(args, &jobs, &[], true)?;
    let elapsed = started.elapsed();

    let mut results: Vec<FileResult> = files
        .iter()
        .map(|f| FileResult {
            name: f.name.clone(),
            cases: f
                .cases
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let skip =
                        Verdict::Skip(brush::exclusion(&f.name, c, oracle).unwrap_or_default());
                    CaseResult {
                        name: c.name.clone(),
                        line: i + 1,
                        verdicts: std::array::from_fn(|_| skip.clone()),
                    }
                })
                .collect(),
        })
        .collect();
    let mut failures = Vec::new();
    for (k, &(fi, ci)) in index.iter().enumerate() {
        let case = &files[fi].cases[ci];
        let r = &mut results[fi].cases[ci];
        if bash[k].timed_out {
            let why = Verdict::Skip(format!(
                "bash itself runs past the {} s timeout",
                args.timeout
            ));
            r.verdicts = std::array::from_fn(|_| why.clone());
            continue;
        }
        let v = |o: &Observed| brush::judge(case, &bash[k], o);
        r.verdicts[0] = v(&ours[k]);
        r.verdicts[1] = match &jb {
            Some(j) => v(&j[k]),
            None => Verdict::Skip("just-bash not installed".into()),
        };
        r.verdicts[2] = v(&again[k]);
        r.verdicts[3] = match &br {
            Some(b) => v(&b[k]),
            None => Verdict::Skip(NO_BRUSH.into()),
        };
        let outs = [
            Some(&ours[k]),
            jb.as_ref().map(|j| &j[k]),
            Some(&again[k]),
            br.as_ref().map(|b| &b[k]),
        ];
        for (s, o) in outs.into_iter().enumerate() {
            if let (Verdict::Fail(why), Some(o)) = (&r.verdicts[s], o) {
                failures.push(json!({
                    "shell": report::SHELLS[s], "file": files[fi].name,
                    "case": case.name, "why": why,
                    "script": jobs[k].script,
                    "stdout": String::from_utf8_lossy(&o.stdout),
                    "stderr": String::from_utf8_lossy(&o.stderr),
                    "status": o.status,
                    "bash_stdout": String::from_utf8_lossy(&bash[k].stdout),
                    "bash_stderr": String::from_utf8_lossy(&bash[k].stderr),
                    "bash_status": bash[k].status,
                }));
            }
        }
    }
    std::fs::create_dir_all(&args.node_dir)?;
    let mut fl = std::fs::File::create(args.node_dir.join("brush-failures.jsonl"))?;
    for f in &failures {
        writeln!(fl, "{f}")?;
    }
    let corpus = src
        .canonicalize()
        .ok()
        .and_then(|p| {
            let name = p.file_name()?.to_string_lossy().into_owned();
            let (n, v) = name.rsplit_once('-')?;
            Some(format!("{n} {v}"))
        })
        .unwrap_or_else(|| "brush-shell".into());
    let meta = report::BrushMeta {
        corpus,
        versions: [
            "bashkit 0.20.2".into(),
            runners::justbash::version(&args.node_dir).unwrap_or_else(|| "not installed".into()),
            format!("{oracle_version} (second run)"),
            brush_version(args),
        ],
        timeout_secs: args.timeout,
        elapsed_secs: elapsed.as_secs_f64(),
    };
    let existing = args
        .out
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok());
    let hand = existing
        .as_deref()
        .and_then(report::brush_hand_written)
        .unwrap_or_else(|| "(difference classes are written after a run)".into());
    let section = report::render_brush(&results, &meta, &hand);
    match &args.out {
        Some(p) => std::fs::write(
            p,
            report::with_brush_section(existing.as_deref().unwrap_or(""), &section),
        )?,
        None => print!("{section}"),
    }
    let all: Vec<&CaseResult> = results.iter().flat_map(|f| &f.cases).collect();
    for (s, name) in report::SHELLS.iter().enumerate() {
        let (p, f, k) = report::counts(all.iter().copied(), s);
        eprintln!("{name}: agree {p} differ {f} excluded {k}");
    }
    eprintln!("done in {:.1?}", elapsed);
    Ok(())
}

/// Skip reason of the brush column when the run has no brush binary.
const NO_BRUSH: &str = "brush not run (no --brush-bin)";

/// The version `--brush-bin` reports (`brush 0.4.0 ...`), or why the
/// column is empty.
fn brush_version(args: &Args) -> String {
    match &args.brush_bin {
        None => "not run".into(),
        Some(bin) => match runners::brushbin::version(bin) {
            Some(v) => v,
            None => format!("{} does not run", bin.display()),
        },
    }
}

fn bash_version(bash: &std::path::Path) -> String {
    std::process::Command::new(bash)
        .arg("-c")
        .arg("echo $BASH_VERSION")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|v| !v.is_empty())
        .map(|v| format!("GNU bash {v}"))
        .unwrap_or_else(|| "unknown".into())
}
