//! `--runtime auto` against the labelled corpus of agent scripts in
//! `bench/shell/corpus/auto.txt`: the decision agrees with every label,
//! few scripts are sent away only because the shell runtime would refuse
//! them, and every script labelled `shell` runs in the real shell runtime
//! without a missing command.

mod common;

use agentcomputer_shell::auto::{self, Route};
use common::Computer;
use std::path::Path;

/// One labelled script.
struct Entry {
    label: Route,
    title: String,
    script: String,
}

fn corpus() -> Vec<Entry> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/shell/corpus/auto.txt");
    let text = std::fs::read_to_string(&path).expect("read the corpus");
    let mut entries: Vec<Entry> = Vec::new();
    for line in text.lines() {
        if let Some(header) = line.strip_prefix("## ") {
            let (label, title) = header.split_once(": ").expect("`## RUNTIME: title`");
            let label = match label {
                "shell" => Route::Shell,
                "container" => Route::Container,
                other => panic!("unknown label {other:?} in {header:?}"),
            };
            entries.push(Entry {
                label,
                title: title.to_string(),
                script: String::new(),
            });
        } else if let Some(entry) = entries.last_mut() {
            entry.script.push_str(line);
            entry.script.push('\n');
        }
    }
    for entry in &mut entries {
        entry.script = entry.script.trim().to_string() + "\n";
    }
    entries
}

#[test]
fn auto_agrees_with_every_label_and_refuses_few() {
    let entries = corpus();
    assert!(entries.len() >= 40, "{} scripts", entries.len());
    let needing = entries
        .iter()
        .filter(|e| e.label == Route::Container)
        .count();
    assert!(
        needing * 3 >= entries.len() && needing * 3 <= entries.len() * 2,
        "about half need real binaries: {needing} of {}",
        entries.len()
    );
    let mut wrong = Vec::new();
    let mut refused = 0;
    for entry in &entries {
        let decision = auto::decide(&entry.script);
        if decision.route != entry.label {
            wrong.push(format!(
                "{}: labelled {}, decided {} ({})",
                entry.title,
                entry.label.name(),
                decision.route.name(),
                decision.reason
            ));
        }
        if decision.reason.starts_with("the shell runtime refuses") {
            refused += 1;
        }
        if entry.label == Route::Container && decision.route == Route::Container {
            assert!(!decision.reason.is_empty(), "{}", entry.title);
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(
        refused * 20 < entries.len(),
        "{refused} of {} sent away as refused",
        entries.len()
    );
}

#[tokio::test]
async fn scripts_labelled_shell_find_every_command_in_the_shell_runtime() {
    let c = Computer::new();
    c.sh(
        "mkdir -p src tests docs; printf '# TODO one\\nold_name = 1\\n' > src/app.py; \
         printf 'a\\n' > src/a.txt; printf 'b\\n' > src/b.txt; \
         printf '{\"name\":\"demo\",\"version\":\"1.2.3\"}\\n' > package.json; \
         printf 'a,b,c\\n1,2,3\\n4,5,6\\n' > data.csv; printf 'word word other\\n' > README.md; \
         printf '# comment\\nKEY=value\\n' > .env",
    )
    .await;
    for entry in corpus().iter().filter(|e| e.label == Route::Shell) {
        let run = c.sh(&entry.script).await;
        assert!(
            run.code() != 127 && !run.stderr().contains("command not found"),
            "{}: exit {}\n{}",
            entry.title,
            run.code(),
            run.stderr()
        );
        assert_eq!(run.outcome.error, None, "{}", entry.title);
    }
}
