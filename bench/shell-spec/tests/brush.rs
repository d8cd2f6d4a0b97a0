//! Parses every brush case file of the fetched `brush-shell` crate and runs
//! a handful of cases through the shell runtime and bash, judged the way
//! the harness judges them. The crate source lives outside the repository
//! (`bench/shell-spec/fetch-brush.sh`, which `scripts/test.sh` runs and
//! whose output it passes as `SHELL_SPEC_BRUSH`); without it the tests
//! print why and return.

use shell_spec::brush::{self, exclusion, judge};
use shell_spec::judge::Verdict;
use shell_spec::{Job, runners};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The oracle the exclusions are computed for in these tests; the rules
/// depend on it only through `min/max_oracle_version`.
const ORACLE: [u32; 3] = [5, 2, 15];

fn cases_dir() -> Option<PathBuf> {
    let Some(src) = std::env::var_os("SHELL_SPEC_BRUSH").map(PathBuf::from) else {
        eprintln!(
            "SKIPPED: SHELL_SPEC_BRUSH is not set (bash bench/shell-spec/fetch-brush.sh prints the directory)"
        );
        return None;
    };
    let dir = brush::cases_dir(&src);
    if dir.join("compat").is_dir() {
        Some(dir)
    } else {
        eprintln!("SKIPPED: no brush cases under {}", dir.display());
        None
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn find<'a>(files: &'a [brush::File], file: &str, case: &str) -> &'a brush::Case {
    files
        .iter()
        .find(|f| f.name == file)
        .unwrap_or_else(|| panic!("{file} missing"))
        .cases
        .iter()
        .find(|c| c.name == case)
        .unwrap_or_else(|| panic!("{file}: case {case:?} missing"))
}

#[test]
fn every_brush_file_parses() {
    let Some(dir) = cases_dir() else { return };
    let files = brush::load_all(&dir).unwrap();
    assert!(files.len() >= 100, "only {} files", files.len());
    let cases: Vec<_> = files
        .iter()
        .flat_map(|f| f.cases.iter().map(move |c| (f, c)))
        .collect();
    assert!(cases.len() > 1500, "only {} cases", cases.len());
    let runnable = cases
        .iter()
        .filter(|(f, c)| exclusion(&f.name, c, ORACLE).is_none())
        .count();
    // Most cases are runnable; the exclusions are the few the rules name.
    assert!(
        runnable * 10 > cases.len() * 8,
        "{runnable} of {} runnable",
        cases.len()
    );
    // Fields from the real files arrive: common files, `source_path`, args.
    let f = files
        .iter()
        .find(|f| f.name == "compat/process.yaml")
        .unwrap();
    assert!(f.cases.iter().all(|c| {
        c.files
            .iter()
            .any(|t| t.path == "process-helpers.sh" && !t.contents.is_empty())
    }));
    assert!(
        cases
            .iter()
            .any(|(_, c)| c.args.is_some() && !c.env.is_empty() || c.home_dir.is_some())
    );
}

async fn ours_and_bash(case: &brush::Case) -> (shell_spec::Observed, shell_spec::Observed) {
    let job = Job::brush(case);
    let t = Duration::from_secs(5);
    let ours = runners::ours::run_one(&job, &[], t).await.unwrap();
    let bash = runners::bash::run_one(Path::new("/bin/bash"), &job, &[], t).unwrap();
    (ours, bash)
}

#[test]
fn a_handful_of_cases_agree_with_bash() {
    let Some(dir) = cases_dir() else { return };
    if !Path::new("/bin/bash").exists() {
        eprintln!("SKIPPED: /bin/bash missing");
        return;
    }
    let files = brush::load_all(&dir).unwrap();
    // Plain stdin scripts, a script file with arguments, `-c` with
    // positional parameters, an environment variable, test files.
    let picks = [
        ("compat/basic.yaml", "Basic stdin usage"),
        ("compat/basic.yaml", "Basic -c usage"),
        ("compat/arguments.yaml", "script arguments without --"),
        ("compat/and_or.yaml", "Basic &&"),
        ("compat/compound_cmds/for.yaml", "Single-line for loop"),
        (
            "compat/word_expansion/braces.yaml",
            "Expansion with curly braces: numeric ranges",
        ),
    ];
    rt().block_on(async {
        for (file, name) in picks {
            let case = find(&files, file, name);
            assert_eq!(exclusion(file, case, ORACLE), None, "{file}: {name}");
            let (ours, bash) = ours_and_bash(case).await;
            assert!(
                !bash.stdout.is_empty(),
                "{file}: {name}: bash printed nothing"
            );
            assert_eq!(
                judge(case, &bash, &ours),
                Verdict::Pass,
                "{file}: {name}: ours {ours:?} bash {bash:?}"
            );
        }
    });
}

#[test]
fn a_difference_from_bash_is_judged_a_failure() {
    let Some(dir) = cases_dir() else { return };
    let files = brush::load_all(&dir).unwrap();
    let mut case = find(&files, "compat/basic.yaml", "Basic stdin usage").clone();
    rt().block_on(async {
        let (_, bash) = ours_and_bash(&case).await;
        // The same case with one more word printed differs from bash.
        case.stdin.push_str("echo extra\n");
        let (ours, _) = ours_and_bash(&case).await;
        assert!(matches!(judge(&case, &bash, &ours), Verdict::Fail(_)));
    });
}
