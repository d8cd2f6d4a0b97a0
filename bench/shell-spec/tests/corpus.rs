//! Parses real corpus files and runs a few cases through the shell
//! runtime. The corpus lives outside the repository: without it the
//! corpus tests print why and return.

use shell_spec::judge::{Verdict, judge};
use shell_spec::{Job, corpus, runners, select};
use std::path::PathBuf;
use std::time::Duration;

fn corpus_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("SHELL_SPEC_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/oils-spec")
        });
    if dir.join("spec").is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "SKIPPED: Oils corpus not found at {} (set SHELL_SPEC_CORPUS)",
            dir.display()
        );
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

#[test]
fn corpus_files_parse_and_are_selected() {
    let Some(dir) = corpus_dir() else { return };
    let files = select::spec_files(&dir).unwrap();
    assert!(files.len() > 50, "only {} files", files.len());
    assert!(files.iter().all(|p| !p.to_string_lossy().contains("/ysh-")));
    for name in ["smoke.test.sh", "here-doc.test.sh", "var-op-strip.test.sh"] {
        let f = corpus::load(&dir.join("spec").join(name)).unwrap();
        assert!(f.cases.len() >= 10, "{name}: {} cases", f.cases.len());
        assert!(
            f.cases.iter().all(|c| !c.script.is_empty()),
            "{name}: empty script"
        );
    }
    // Bash-qualified blocks exist in real files and are parsed.
    let qualified = files
        .iter()
        .map(|p| corpus::load(p).unwrap())
        .flat_map(|f| f.cases)
        .filter(|c| {
            c.qualified
                .iter()
                .any(|q| q.shells.iter().any(|s| s == "bash"))
        })
        .count();
    assert!(qualified > 100, "only {qualified} bash-qualified cases");
}

#[test]
fn smoke_cases_pass_on_the_runtime() {
    let Some(dir) = corpus_dir() else { return };
    let f = corpus::load(&dir.join("spec/smoke.test.sh")).unwrap();
    let td = runners::testdata(&dir).unwrap();
    rt().block_on(async {
        for case in f.cases.iter().take(8) {
            let got = runners::ours::run_one(&Job::new(case), &td, Duration::from_secs(5))
                .await
                .unwrap();
            assert_eq!(judge(case, &got), Verdict::Pass, "{}: {got:?}", case.name);
        }
    });
}

#[test]
fn read_from_fd_helper_case_is_judged_on_the_runtime() {
    let Some(dir) = corpus_dir() else { return };
    let f = corpus::load(&dir.join("spec/here-doc.test.sh")).unwrap();
    let case = f
        .cases
        .iter()
        .find(|c| c.name == "Multiple here docs with different descriptors")
        .expect("case present");
    assert_eq!(
        case.accepted_for("bash")[0].stdout.as_deref(),
        Some("0: fd0\n3: fd3\n")
    );
    let got = rt()
        .block_on(runners::ours::run_one(
            &Job::new(case),
            &[],
            Duration::from_secs(5),
        ))
        .unwrap();
    assert!(!got.timed_out);
    // Whatever the runtime prints, the verdict follows from the bytes.
    let pass = got.stdout == b"0: fd0\n3: fd3\n" && got.status == 0;
    assert_eq!(judge(case, &got) == Verdict::Pass, pass);
}

#[test]
fn argv_helper_prints_python_repr() {
    let case = &corpus::parse(
        "#### argv\nargv.py 'a b' \"it's\" $'\\t' '\\' '' $'\\x01' $'\\xe2\\x98\\xa0'\n## stdout: ['a b', \"it's\", '\\t', '\\\\', '', '\\x01', '\\xe2\\x98\\xa0']\n",
    )
    .unwrap()[0];
    let got = rt()
        .block_on(runners::ours::run_one(
            &Job::new(case),
            &[],
            Duration::from_secs(5),
        ))
        .unwrap();
    assert_eq!(
        judge(case, &got),
        Verdict::Pass,
        "{}",
        String::from_utf8_lossy(&got.stdout)
    );
}

#[test]
fn a_hanging_case_times_out() {
    let case = &corpus::parse("#### spin\nwhile true; do :; done\n").unwrap()[0];
    let started = std::time::Instant::now();
    let got = rt()
        .block_on(runners::ours::run_one(
            &Job::new(case),
            &[],
            Duration::from_secs(1),
        ))
        .unwrap();
    assert!(got.timed_out, "{got:?}");
    assert!(started.elapsed() < Duration::from_secs(4));
    assert!(matches!(judge(case, &got), Verdict::Fail(_)));
}
