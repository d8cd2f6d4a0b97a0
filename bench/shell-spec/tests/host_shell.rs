//! The child-process runner with a shell other than bash: extra arguments
//! reach the shell before the case's own, and the brush column
//! (`--brush-bin`) runs multi-line scripts read from stdin. The last test
//! needs a brush binary (`bash bench/shell-spec/install-brush.sh` prints
//! it; pass it as `SHELL_SPEC_BRUSH_BIN`) and prints SKIPPED without one.

use shell_spec::runners::{bash, brushbin};
use shell_spec::{Job, Setup};
use std::path::{Path, PathBuf};
use std::time::Duration;

const BASH: &str = "/bin/bash";
const T: Duration = Duration::from_secs(10);

/// An Oils-style job: the script on the shell's stdin.
fn oils(script: &str) -> Job {
    Job {
        script: script.into(),
        needs_testdata: false,
        setup: None,
    }
}

/// A brush-style job: `ARGS` on the command line, `stdin` as given.
fn brush_case(args: Option<&[&str]>, stdin: &str) -> Job {
    Job {
        script: String::new(),
        needs_testdata: false,
        setup: Some(Setup {
            stdin: stdin.as_bytes().to_vec(),
            args: args.map(|a| a.iter().map(|s| s.to_string()).collect()),
            ..Setup::default()
        }),
    }
}

#[test]
fn extra_args_reach_the_shell_first() {
    let job = oils("false\necho after\n");
    let plain = bash::run_one(Path::new(BASH), &job, &[], T).unwrap();
    assert_eq!(
        (plain.stdout.as_slice(), plain.status),
        (&b"after\n"[..], 0)
    );
    // `-e` before the (empty) rest of the command line: the script stops.
    let errexit = bash::run_one_with(Path::new(BASH), &["-e"], &job, &[], T).unwrap();
    assert_eq!((errexit.stdout.as_slice(), errexit.status), (&b""[..], 1));
    // A brush case: extra arguments come before `--norc --noprofile ARGS`
    // (bash takes long options only before short ones).
    let job = brush_case(Some(&["-c", "echo ${POSIXLY_CORRECT-unset}"]), "");
    let o = bash::run_one(Path::new(BASH), &job, &[], T).unwrap();
    assert_eq!(o.stdout, b"unset\n");
    let o = bash::run_one_with(Path::new(BASH), &["--posix"], &job, &[], T).unwrap();
    assert_eq!(
        o.stdout,
        b"y\n",
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn brush_version_of_a_missing_binary_is_none() {
    assert_eq!(brushbin::version(Path::new("/nonexistent/brush")), None);
}

#[test]
fn brush_column_reads_multiline_scripts_from_stdin() {
    let Some(bin) = std::env::var_os("SHELL_SPEC_BRUSH_BIN").map(PathBuf::from) else {
        eprintln!("SKIPPED: SHELL_SPEC_BRUSH_BIN is not set (bench/shell-spec/install-brush.sh)");
        return;
    };
    let v = brushbin::version(&bin).expect("brush --version");
    assert!(v.starts_with("brush "), "{v}");
    // A function body and a here-document span lines: with brush's default
    // input backend each line was parsed alone ("syntax error").
    let script = "f() {\n  echo in f\n}\nf\ncat <<EOF\nhere\nEOF\n";
    for job in [oils(script), brush_case(None, script)] {
        let o = brushbin::run_all(&bin, std::slice::from_ref(&job), &[], T, |_| {}).unwrap();
        assert_eq!(
            (String::from_utf8_lossy(&o[0].stdout).as_ref(), o[0].status),
            ("in f\nhere\n", 0),
            "stderr: {}",
            String::from_utf8_lossy(&o[0].stderr)
        );
    }
}
