//! No silent wrong answers: commands and devices that produce large
//! outputs give coreutils' bytes at sizes above any internal buffer, or fail
//! with a non-zero exit naming the limit. Where GNU coreutils is installed,
//! the same pipeline runs under the host's bash in the same test and the
//! bytes are compared.

mod common;

use agentcomputer_fs::{FileKind, Owner, ROOT_INO};
use agentcomputer_shell::ExecRequest;
use common::Computer;
use std::time::Duration;

/// Output cap large enough for the sizes below (the default is 16 MiB).
const CAP: u64 = 64 << 20;

async fn big(c: &Computer, script: &str) -> common::Run {
    c.exec(ExecRequest {
        script: script.into(),
        timeout: Duration::from_secs(120),
        max_output_bytes: CAP,
        ..ExecRequest::default()
    })
    .await
}

/// stdout of `script` under the host's bash, or `None` without one.
fn host_bash(script: &str) -> Option<Vec<u8>> {
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(script)
        .output()
        .ok()?;
    assert!(out.status.success(), "host bash failed: {script}");
    Some(out.stdout)
}

#[tokio::test]
async fn head_of_dev_zero_writes_every_byte() {
    let c = Computer::new();
    let out = big(
        &c,
        "head -c 20971520 /dev/zero > f; wc -c < f; cat /dev/zero | head -c 3000000 | wc -c",
    )
    .await;
    assert_eq!(out.ok(), "20971520\n3000000\n");
    let data = c.read("f");
    assert_eq!(data.len(), 20 << 20);
    assert!(data.iter().all(|b| *b == 0));
}

#[tokio::test]
async fn head_of_dev_urandom_counts_every_byte() {
    let c = Computer::new();
    let out = big(
        &c,
        "head -c 20000000 /dev/urandom | wc -c; head -c 1048576 /dev/random > r; \
         [ \"$(od -An -tx1 -N64 r | tr -d ' \\n')\" != \"$(printf '0%.0s' $(seq 128))\" ] && echo random",
    )
    .await;
    assert_eq!(out.ok(), "20000000\nrandom\n");
}

#[tokio::test]
async fn seq_prints_every_line_as_coreutils() {
    let c = Computer::new();
    let script = "seq 1 200000 | sha256sum; seq 200000 | tail -n 1; seq -w 1 3 10; seq 1 0.5 3; \
                  seq -s, 5; seq 10 -3 1; seq -f '%g' 1 0.5 2; seq -f '%e' 1 2; seq 1e2 1e2 3e2; \
                  seq -w -3 1; seq 1 1.50 3; seq 5 1; seq 0";
    let ours = big(&c, script).await.ok();
    let lines: Vec<&str> = ours.lines().collect();
    assert_eq!(lines[1], "200000");
    if let Some(theirs) = host_bash(script) {
        assert_eq!(ours, String::from_utf8(theirs).unwrap());
    }
    let many = big(&c, "seq 1 3000000 | wc -l; seq 3000000 | tail -c 8").await;
    assert_eq!(many.ok(), "3000000\n3000000\n");
}

#[tokio::test]
async fn seq_refuses_bad_operands_loudly() {
    let c = Computer::new();
    let out = c.sh("seq 1 0 3").await;
    assert_eq!(out.code(), 1);
    assert!(
        out.stderr().contains("invalid Zero increment value: '0'"),
        "{}",
        out.stderr()
    );
    let out = c.sh("seq abc").await;
    assert_eq!(out.code(), 1);
    assert!(
        out.stderr()
            .contains("invalid floating point argument: 'abc'"),
        "{}",
        out.stderr()
    );
    let out = c.sh("seq -w -f %g 1 2").await;
    assert_eq!(out.code(), 1);
}

#[tokio::test]
async fn yes_gives_as_many_lines_as_asked() {
    let c = Computer::new();
    let script = "yes | head -n 20000 | wc -l; yes hello world | head -n 2000000 | sha256sum; \
                  yes -- -x | head -n 2; yes a b | head -c 1000001 | tail -c 5 | od -c | head -1";
    let ours = big(&c, script).await.ok();
    assert!(ours.starts_with("20000\n"), "{ours}");
    if let Some(theirs) = host_bash(script) {
        assert_eq!(ours, String::from_utf8(theirs).unwrap());
    }
    let bad = c.sh("yes -x | head -n 1").await;
    assert!(
        bad.stderr().contains("yes: invalid option -- 'x'"),
        "{}",
        bad.stderr()
    );
}

#[tokio::test]
async fn yes_alone_stops_at_the_output_cap_and_says_so() {
    let c = Computer::new();
    let out = c
        .exec(ExecRequest {
            script: "yes".into(),
            timeout: Duration::from_secs(60),
            max_output_bytes: 1 << 20,
            ..ExecRequest::default()
        })
        .await;
    assert_eq!(out.code(), agentcomputer_shell::EXIT_OUTPUT_CAP);
    assert!(out.stderr().contains("output exceeded"), "{}", out.stderr());
}

#[tokio::test]
async fn dd_past_its_limit_fails_and_names_it() {
    let c = Computer::new();
    let out = big(
        &c,
        "dd if=/dev/zero of=f bs=1048576 count=65 status=none; echo rc=$?",
    )
    .await;
    let stdout = out.stdout();
    assert!(stdout.ends_with("rc=1\n"), "{stdout}");
    assert!(out.stderr().contains("67108864"), "{}", out.stderr());
    // Within the limit dd is exact.
    let out = big(
        &c,
        "dd if=/dev/zero bs=1048576 count=40 status=none | wc -c",
    )
    .await;
    assert_eq!(out.ok(), "41943040\n");
}

#[tokio::test]
async fn ifs_is_set_at_start_up() {
    let c = Computer::new();
    let out = c
        .sh(
            "old=$IFS; IFS=:; set -- a:b; echo $#; IFS=$old; v=\"a b c\"; set -- $v; echo $#; \
             printf '%q\\n' \"$IFS\"; env | grep -c '^IFS=' || true",
        )
        .await;
    assert_eq!(out.ok(), "1\n3\n$' \\t\\n'\n0\n");
}

/// The variables bash sets at start-up with fixed values are set, and not
/// exported: `set -u` scripts may read them.
#[tokio::test]
async fn start_up_variables_are_set_as_bash_sets_them() {
    let c = Computer::new();
    let out = c
        .sh("set -u; echo \"$OPTERR $BASH\"; $BASH -c 'echo child'; env | grep -c -e '^OPTERR=' -e '^BASH=' -e '^IFS=' || true")
        .await;
    assert_eq!(out.ok(), "1 /bin/bash\nchild\n0\n");
}

#[tokio::test]
async fn device_nodes_and_sockets_are_not_regular_files() {
    let c = Computer::new();
    for (name, kind) in [
        ("chr", FileKind::CharDevice),
        ("blk", FileKind::BlockDevice),
        ("sock", FileKind::Socket),
    ] {
        c.fs.mknod(ROOT_INO, name.as_bytes(), kind, 0o644, 0x0103, Owner::ROOT)
            .expect("mknod");
    }
    c.write("reg", b"x");
    let out = c
        .sh(
            "for f in chr blk sock reg; do test -f $f && echo \"$f regular\"; done; \
             find . -type f; ls -l chr blk sock | cut -c1; stat -c '%n %F' chr blk sock",
        )
        .await;
    assert_eq!(
        out.ok(),
        "reg regular\n./reg\nb\nc\ns\nchr character special file\nblk block special file\nsock socket\n"
    );
}

#[tokio::test]
async fn long_count_options_take_the_next_word() {
    let c = Computer::new();
    let script = "echo 1234567 | tail --bytes 4; seq 5 | tail --lines 2; \
                  echo abcdef | head --bytes 3; echo; seq 5 | head --lines 2";
    let ours = c.sh(script).await.ok();
    assert_eq!(ours, "567\n4\n5\nabc\n1\n2\n");
    if let Some(theirs) = host_bash(script) {
        assert_eq!(ours, String::from_utf8(theirs).unwrap());
    }
}

/// `test` and `[` answer every file operator from the real file: kinds
/// (symlink, FIFO, character and block devices, sockets), mode bits,
/// modification times, inodes; `-e ''` is false. The same script runs
/// under the host's bash over the same tree built with coreutils.
#[tokio::test]
async fn test_answers_file_operators_from_the_real_file() {
    let c = Computer::new();
    for (name, kind) in [
        ("chr", FileKind::CharDevice),
        ("blk", FileKind::BlockDevice),
        ("sock", FileKind::Socket),
    ] {
        c.fs.mknod(ROOT_INO, name.as_bytes(), kind, 0o644, 0x0103, Owner::ROOT)
            .expect("mknod");
    }
    let setup = "echo x > old; touch -d '2020-01-01 00:00:00' old; echo y > new; : > empty; \
                 ln -s old link; ln -s missing dangling; mkfifo fifo; mkdir dir; ln old hard; \
                 chmod 4755 suid; chmod 2755 sgid; chmod 1777 dir 2>/dev/null; ";
    let probe = "for f in old new empty link dangling fifo dir hard suid sgid chr blk sock nope ''; do \
                 r=\"$f:\"; for op in -e -a -f -d -L -h -p -c -b -S -s -u -g -k -x; do \
                 [ $op = -s ] && [ -d \"$f\" ] && continue; test $op \"$f\" && r=\"$r$op\"; done; [ -e \"$f\" ] || r=\"$r!e\"; echo \"$r\"; done; \
                 test new -nt old && echo nt; [ old -ot new ] && echo ot; test old -nt nope && echo nt-missing; \
                 test nope -ot old && echo ot-missing; test new -nt new || echo not-nt-self; \
                 [ old -ef hard ] && echo ef; [ old -ef new ] || echo not-ef; [ old -ef link ] && echo ef-link; \
                 test -f old/ || echo slash; test -d dir/ && echo dir-slash";
    let script = format!("touch suid sgid; {setup}{probe}");
    let ours = c.sh(&script).await.ok();
    let expected_devices = "chr:-e-a-c\nblk:-e-a-b\nsock:-e-a-S\n";
    assert!(ours.contains(expected_devices), "{ours}");
    assert!(ours.contains("link:-e-a-f-L-h-s\n"), "{ours}");
    assert!(ours.contains("dangling:-L-h!e\n"), "{ours}");
    assert!(ours.contains("fifo:-e-a-p\n"), "{ours}");
    assert!(ours.contains("suid:-e-a-f-u-x\n"), "{ours}");
    assert!(ours.contains("sgid:-e-a-f-g-x\n"), "{ours}");
    assert!(ours.contains("dir:-e-a-d-k-x\n"), "{ours}");
    assert!(ours.contains(":!e\n"), "{ours}");
    assert!(
        ours.ends_with(
            "nt\not\nnt-missing\not-missing\nnot-nt-self\nef\nnot-ef\nef-link\nslash\ndir-slash\n"
        ),
        "{ours}"
    );
    // The host's bash over the same tree (device nodes need root: made
    // with mknod and python's socket where the host allows, else skipped).
    // A directory's size is the file system's own (the engine says 0,
    // ext4 4096), so `-s` is not asked of it.
    let dir = tempfile::tempdir().unwrap();
    let devices = "mknod chr c 1 3 && mknod blk b 1 3 && \
                   python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"sock\")' && chmod 644 sock";
    let host = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "touch suid sgid; {devices} && {{ {setup}{probe}; }}"
        ))
        .current_dir(dir.path())
        .output();
    if let Ok(host) = host
        && host.status.success()
    {
        assert_eq!(ours, String::from_utf8(host.stdout).unwrap());
    }
}

/// Syntax of `test` and `[` as bash parses it, and `-v`/`-o`, which the
/// interpreter decides.
#[tokio::test]
async fn test_grammar_and_shell_state_match_bash() {
    let c = Computer::new();
    let script = "x=1; a=(q); declare -A m=([k]=v); e=; \
                  for e2 in 'x' 'a' 'a[0]' 'a[1]' 'm[k]' 'm[z]' 'e' 'nope'; do test -v \"$e2\" && echo \"v:$e2\"; done; \
                  [ -v x -a ! -v nope ] && echo both; [ -v nope -o -n s ] && echo either; \
                  set -o errexit; test -o errexit && echo errexit-on; set +o errexit; \
                  test -o errexit || echo errexit-off; test -o nosuch; echo \"nosuch $?\"; \
                  test; echo \"empty $?\"; test -z; echo \"lone-op $?\"; test ! ''; echo \"not-empty $?\"; \
                  [ \\( a = a \\) -a \\( b != c \\) ]; echo \"paren $?\"; \
                  [ a = b -o \\( 1 -lt 2 -a ! 3 -gt 4 \\) ]; echo \"long $?\"; \
                  test ' 7 ' -eq 7; echo \"blank-int $?\"; \
                  test a b c 2>/dev/null; echo \"three $?\"; [ a 2>/dev/null; echo \"bracket $?\"; \
                  test 1 -eq x 2>/dev/null; echo \"int $?\"; test a b c d e 2>/dev/null; echo \"many $?\"; \
                  [ b '>' a ] && echo gt; [ '!' = '!' ] && echo bang; \
                  test '(' = ')'; echo \"eq-paren $?\"; test 0 -eq 0 -a '(' = ')'; echo \"word-paren $?\"";
    let ours = c.sh(script).await.ok();
    assert!(
        ours.starts_with("v:x\nv:a\nv:a[0]\nv:m[k]\nv:e\nboth\neither\nerrexit-on\nerrexit-off\n"),
        "{ours}"
    );
    if let Some(theirs) = host_bash(script) {
        assert_eq!(ours, String::from_utf8(theirs).unwrap());
    }
}

/// `sleep` waits as long as asked (bashkit's stopped at 60 s), sums its
/// operands, takes coreutils' suffixes, refuses bad ones, and stops with
/// the exec's timeout.
#[tokio::test]
async fn sleep_waits_the_whole_time_and_stops_with_the_exec() {
    let c = Computer::new();
    let started = std::time::Instant::now();
    let out = c.sh("sleep 0.3 0.2s 0.005m; echo done").await;
    assert_eq!(out.ok(), "done\n");
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(800), "{took:?}");
    let out = c.sh("sleep 1x; echo $?; sleep; echo $?").await;
    assert_eq!(out.stdout(), "1\n1\n");
    assert!(
        out.stderr().contains("sleep: invalid time interval '1x'"),
        "{}",
        out.stderr()
    );
    assert!(
        out.stderr().contains("sleep: missing operand"),
        "{}",
        out.stderr()
    );
    // Past bashkit's 60 s clamp (a minute of waiting, no CPU).
    let started = std::time::Instant::now();
    let out = c
        .exec(ExecRequest {
            script: "sleep 60.7; echo done".into(),
            timeout: Duration::from_secs(90),
            ..ExecRequest::default()
        })
        .await;
    assert_eq!(out.ok(), "done\n");
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(60_700), "{took:?}");
    // An endless sleep ends with the exec's timeout.
    let started = std::time::Instant::now();
    let out = c
        .exec(ExecRequest {
            script: "sleep inf; echo late".into(),
            timeout: Duration::from_secs(2),
            ..ExecRequest::default()
        })
        .await;
    assert_eq!(out.code(), agentcomputer_shell::EXIT_TIMEOUT);
    assert_eq!(out.stdout(), "");
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// `timeout` runs the command with the duration asked (bashkit's stopped
/// at 300 s; that ceiling is checked by the unit tests of its parser, a
/// test of it would wait five minutes), stops it with 124, and refuses bad
/// operands with 125 as coreutils does.
#[tokio::test]
async fn timeout_runs_commands_for_the_duration_asked() {
    let c = Computer::new();
    let script = "timeout 0.3 sleep 5; echo \"expired $?\"; timeout 1m echo quick; echo \"ok $?\"; \
                  echo piped | timeout 5s cat; timeout 0 true; echo \"zero $?\"; \
                  timeout -s KILL -k 1 2 sh -c 'exit 3'; echo \"status $?\"; \
                  timeout soon true; echo \"bad $?\"; timeout 5; echo \"missing $?\"";
    let started = std::time::Instant::now();
    let out = c.sh(script).await;
    assert_eq!(
        out.stdout(),
        "expired 124\nquick\nok 0\npiped\nzero 0\nstatus 3\nbad 125\nmissing 125\n"
    );
    assert!(started.elapsed() < Duration::from_secs(4));
    assert!(
        out.stderr()
            .contains("timeout: invalid time interval 'soon'"),
        "{}",
        out.stderr()
    );
    if let Some(theirs) = host_bash(script) {
        assert_eq!(out.stdout(), String::from_utf8(theirs).unwrap());
    }
}
