//! Scripts that gave a silent wrong answer in the shell runtime, each run
//! through the runtime and through the host's GNU bash in the same
//! directory layout (a file `r` where the script needs one): the runtime
//! either gives bash's answer (stdout, stderr, both in bash's order, and
//! the status) or refuses the script before any of it runs, with a message
//! naming the construct and the container runtime. Without a host bash the
//! runtime's side is still checked against the answer written here.

mod common;

use agentcomputer_shell::{EXIT_REFUSED, ExecRequest, OutputChunk};
use common::{Computer, Run};
use std::io::{Read, Write};
use std::process::Stdio;
use std::time::Duration;

/// One output chunk as a tagged line, so the order between the two
/// streams can be compared: `1:out1` for stdout, `2:err1` for stderr.
fn tagged(chunks: &[(u8, Vec<u8>)]) -> Vec<String> {
    // Join consecutive chunks of one stream, then split into lines, so
    // chunk boundaries do not matter, only the order of the lines.
    let mut lines = Vec::new();
    let mut current: Option<(u8, Vec<u8>)> = None;
    for (fd, bytes) in chunks {
        match &mut current {
            Some((cur, buf)) if cur == fd => buf.extend_from_slice(bytes),
            _ => {
                if let Some((fd, buf)) = current.take() {
                    push_lines(&mut lines, fd, &buf);
                }
                current = Some((*fd, bytes.clone()));
            }
        }
    }
    if let Some((fd, buf)) = current {
        push_lines(&mut lines, fd, &buf);
    }
    lines
}

fn push_lines(lines: &mut Vec<String>, fd: u8, buf: &[u8]) {
    for line in String::from_utf8_lossy(buf).split_inclusive('\n') {
        lines.push(format!("{fd}:{line}"));
    }
}

/// The runtime's output as tagged lines, in arrival order.
fn runtime_lines(run: &Run) -> Vec<String> {
    let chunks: Vec<(u8, Vec<u8>)> = run
        .chunks
        .iter()
        .map(|c| match c {
            OutputChunk::Stdout(b) => (1, b.clone()),
            OutputChunk::Stderr(b) => (2, b.clone()),
        })
        .collect();
    tagged(&chunks)
}

/// What the host's bash gave in `dir`: tagged lines in the order it wrote
/// them, and its status; `None` without a host bash. The order comes from
/// a run with stderr joined to stdout (`exec 2>&1`, one pipe), which line
/// is stderr from a second run with two pipes; the scripts here write
/// distinct lines.
fn host_bash(dir: &std::path::Path, script: &str, stdin: &[u8]) -> Option<(Vec<String>, i32)> {
    let run = |merged: bool| -> Option<(Vec<u8>, Vec<u8>, i32)> {
        let mut cmd = std::process::Command::new("bash");
        cmd.current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        if merged {
            // On the script's first line, so `$LINENO` is the script's own.
            cmd.arg("-c").arg(format!("exec 2>&1; {script}"));
            cmd.stderr(Stdio::null());
        } else {
            cmd.arg("-c").arg(script);
            cmd.stderr(Stdio::piped());
        }
        let mut child = cmd.spawn().ok()?;
        let mut pipe = child.stdin.take()?;
        let data = stdin.to_vec();
        let writer = std::thread::spawn(move || {
            let _ = pipe.write_all(&data);
        });
        let mut out = Vec::new();
        child.stdout.take()?.read_to_end(&mut out).ok()?;
        let mut err = Vec::new();
        if let Some(mut e) = child.stderr.take() {
            e.read_to_end(&mut err).ok()?;
        }
        let status = child.wait().ok()?.code()?;
        writer.join().ok()?;
        Some((out, err, status))
    };
    let (merged, _, status) = run(true)?;
    let (_, err, _) = run(false)?;
    let err_lines: Vec<String> = String::from_utf8_lossy(&err)
        .split_inclusive('\n')
        .map(str::to_string)
        .collect();
    let lines = String::from_utf8_lossy(&merged)
        .split_inclusive('\n')
        .map(|line| {
            let fd = if err_lines.iter().any(|e| e == line) {
                2
            } else {
                1
            };
            format!("{fd}:{line}")
        })
        .collect();
    Some((lines, status))
}

/// Builds the layout a row needs in the runtime's computer and in a
/// temporary directory for bash: the file `r` (mode 0644, empty).
fn layout(c: &Computer) -> tempfile::TempDir {
    c.write("r", b"");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("r"), b"").expect("write r");
    dir
}

async fn run(c: &Computer, script: &str, stdin: &[u8]) -> Run {
    c.exec(ExecRequest {
        script: script.into(),
        stdin: stdin.to_vec(),
        timeout: Duration::from_secs(30),
        ..ExecRequest::default()
    })
    .await
}

/// The row agrees with bash: the same lines, in the same order on the same
/// streams, and the same status; `expected` is bash's answer as tagged
/// lines, status 0.
async fn agrees(script: &str, stdin: &[u8], expected: &[&str]) {
    agrees_with_status(script, stdin, expected, 0).await
}

/// [`agrees`] for a script whose status is `status`.
async fn agrees_with_status(script: &str, stdin: &[u8], expected: &[&str], status: i32) {
    let c = Computer::new();
    let dir = layout(&c);
    let ours = run(&c, script, stdin).await;
    let want: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
    assert_eq!(ours.outcome.error, None, "{script}");
    assert_eq!(
        (runtime_lines(&ours), ours.code()),
        (want.clone(), status),
        "runtime: {script}"
    );
    if let Some(theirs) = host_bash(dir.path(), script, stdin) {
        assert_eq!(theirs, (want, status), "host bash: {script}");
    }
}

/// The row is refused before any of it runs: nothing on stdout, the
/// message on stderr naming `construct` and the container runtime, status
/// [`EXIT_REFUSED`]; and bash's answer is what `bash_says` (so the test
/// shows what the refusal keeps the runtime from getting wrong).
async fn refused(script: &str, construct: &str, bash_says: &[&str]) {
    let c = Computer::new();
    let dir = layout(&c);
    // A file the script would create if any of it ran.
    let probe = format!("touch ran-before-refusal; {script}");
    let ours = run(&c, &probe, b"").await;
    assert_eq!(ours.code(), EXIT_REFUSED, "{script}");
    assert_eq!(ours.stdout(), "", "{script}");
    let message = ours.outcome.error.clone().expect("a refusal message");
    assert!(message.contains(construct), "{message}");
    assert!(message.contains("--runtime container"), "{message}");
    assert!(message.contains("nothing was executed"), "{message}");
    assert_eq!(ours.stderr(), format!("{message}\n"));
    assert!(
        c.fs.resolve(agentcomputer_fs::ROOT_INO, b"ran-before-refusal", false)
            .is_err(),
        "part of a refused script ran: {script}"
    );
    if let Some((theirs, _)) = host_bash(dir.path(), script, b"") {
        let want: Vec<String> = bash_says.iter().map(|s| s.to_string()).collect();
        assert_eq!(theirs, want, "host bash: {script}");
    }
}

#[tokio::test]
async fn double_bracket_file_types_of_a_regular_file_are_refused() {
    refused(
        "touch r; [[ -L r ]] && echo L; [[ -p r ]] && echo p; [[ -S r ]] && echo S",
        "[[ -L ... ]]",
        &[],
    )
    .await;
}

#[tokio::test]
async fn double_bracket_symlink_test_of_a_missing_file_is_refused() {
    refused("[[ -L nosuch ]] && echo yes", "[[ -L ... ]]", &[]).await;
}

#[tokio::test]
async fn double_bracket_exists_with_an_empty_operand_agrees() {
    agrees_with_status("f=\"\"; [[ -e $f ]] && echo exists", b"", &[], 1).await;
    // The operand guarded against the empty value still names the file.
    agrees(
        "d=; f=r; [[ -e $f ]] && echo e; [[ ! -d \"${d}\" ]] && echo not-d; \
         [[ -s $f || -a \"$f\" ]] && echo s-or-a; [[ -d $d ]] || echo no-d",
        b"",
        &["1:e\n", "1:not-d\n", "1:s-or-a\n", "1:no-d\n"],
    )
    .await;
}

#[tokio::test]
async fn double_bracket_exists_with_an_operand_that_cannot_be_guarded_is_refused() {
    refused("a=; b=; [[ -e $a$b ]] && echo exists", "[[ -e ... ]]", &[]).await;
}

#[tokio::test]
async fn double_bracket_executable_test_is_refused() {
    refused("touch r; [[ -x r ]] && echo x", "[[ -x ... ]]", &[]).await;
}

#[tokio::test]
async fn nested_name_in_a_replacement_pattern_agrees() {
    agrees(
        "x=a/b/c; y=/; echo ${x//${y}/-}; z='*'; echo \"${x/${y}/${z}}\" '${x//${y}/-}'",
        b"",
        &["1:a-b-c\n", "1:a*b/c ${x//${y}/-}\n"],
    )
    .await;
}

#[tokio::test]
async fn nested_expansion_with_an_operator_in_a_replacement_pattern_is_refused() {
    refused(
        "x=a/b/c; echo ${x//${y:-/}/-}",
        "${x/...${...}...}",
        &["1:a-b-c\n"],
    )
    .await;
}

#[tokio::test]
async fn bash_command_in_a_debug_trap_agrees() {
    agrees(
        "trap 'echo \"DBG $BASH_COMMAND\"' DEBUG; echo a",
        b"",
        &["1:DBG echo a\n", "1:a\n"],
    )
    .await;
}

#[tokio::test]
async fn bash_command_of_loops_tests_cases_and_redirections_agrees() {
    let script = "trap 'echo \"[$LINENO: $BASH_COMMAND]\"' DEBUG
x=$(echo b)
for i in 1 2; do
  echo \"$i\" <&0 >/dev/null 2>&1
done
[[ -n $x ]]
case $x in
  b) y=2 ;;
esac
f() {
  echo in f
}
f 1
trap - DEBUG";
    agrees(
        script,
        b"",
        &[
            "1:[2: x=$(echo b)]\n",
            "1:[3: for i in 1 2]\n",
            "1:[4: echo \"$i\" 0<&0 > /dev/null 2>&1]\n",
            "1:[3: for i in 1 2]\n",
            "1:[4: echo \"$i\" 0<&0 > /dev/null 2>&1]\n",
            "1:[6: [[ -n $x ]]]\n",
            "1:[7: case $x in ]\n",
            "1:[8: y=2]\n",
            "1:[13: f 1]\n",
            "1:in f\n",
            "1:[14: trap - DEBUG]\n",
        ],
    )
    .await;
}

#[tokio::test]
async fn bash_command_of_several_commands_on_one_line_agrees() {
    agrees(
        "trap 'echo \"DBG $BASH_COMMAND\"' DEBUG\necho a | tr a b; echo c\nfor i in 1 2; do echo $i | cat; done",
        b"",
        &[
            "1:DBG echo a\n",
            "1:DBG tr a b\n",
            "1:b\n",
            "1:DBG echo c\n",
            "1:c\n",
            "1:DBG for i in 1 2\n",
            "1:DBG echo $i\n",
            "1:DBG cat\n",
            "1:1\n",
            "1:DBG for i in 1 2\n",
            "1:DBG echo $i\n",
            "1:DBG cat\n",
            "1:2\n",
        ],
    )
    .await;
}

#[tokio::test]
async fn bash_command_written_to_stderr_by_the_trap_agrees() {
    agrees(
        "trap 'echo \"[$BASH_COMMAND]\" >&2' DEBUG\necho \"hello\"\necho after >&2",
        b"",
        &[
            "2:[echo \"hello\"]\n",
            "1:hello\n",
            "2:[echo after 1>&2]\n",
            "2:after\n",
        ],
    )
    .await;
}

#[tokio::test]
async fn bash_command_in_a_traced_function_agrees() {
    agrees(
        "set -T\ntrap 'echo \"[$BASH_COMMAND]\"' DEBUG\nmyfunc() {\n  local v=10\n  echo \"v=$v\"\n}\nmyfunc\nmyfunc",
        b"",
        &[
            "1:[myfunc]\n",
            "1:[myfunc]\n",
            "1:[local v=10]\n",
            "1:[echo \"v=$v\"]\n",
            "1:v=10\n",
            "1:[myfunc]\n",
            "1:[myfunc]\n",
            "1:[local v=10]\n",
            "1:[echo \"v=$v\"]\n",
            "1:v=10\n",
        ],
    )
    .await;
}

#[tokio::test]
async fn bash_command_where_a_command_of_a_line_may_be_skipped_is_refused() {
    refused(
        "trap 'echo \"DBG $BASH_COMMAND\"' DEBUG\nfalse && echo a; echo c",
        "$BASH_COMMAND",
        &["1:DBG false\n", "1:DBG echo c\n", "1:c\n"],
    )
    .await;
}

#[tokio::test]
async fn bash_command_outside_a_debug_trap_is_refused() {
    refused(
        "echo \"$BASH_COMMAND\"",
        "$BASH_COMMAND",
        &["1:echo \"$BASH_COMMAND\"\n"],
    )
    .await;
}

#[tokio::test]
async fn stdin_read_whole_by_sort_is_consumed_once() {
    agrees(
        "sort; echo ---; cat",
        b"l3\nl1\nl2\n",
        &["1:l1\n", "1:l2\n", "1:l3\n", "1:---\n"],
    )
    .await;
}

#[tokio::test]
async fn stdout_and_stderr_arrive_in_the_order_written() {
    agrees(
        "echo out1; echo err1 >&2; echo out2",
        b"",
        &["1:out1\n", "2:err1\n", "1:out2\n"],
    )
    .await;
}

#[tokio::test]
async fn stderr_of_lists_pipelines_and_traces_keeps_bash_order() {
    agrees(
        "echo a; ls nosuch && echo b || echo c; echo d >&2; echo e",
        b"",
        &[
            "1:a\n",
            "2:ls: cannot access 'nosuch': No such file or directory\n",
            "1:c\n",
            "2:d\n",
            "1:e\n",
        ],
    )
    .await;
    agrees(
        "set -x; x=1; echo $x; echo done",
        b"",
        &[
            "2:+ x=1\n",
            "2:+ echo 1\n",
            "1:1\n",
            "2:+ echo done\n",
            "1:done\n",
        ],
    )
    .await;
    agrees(
        "echo a; cat nosuch | wc -l; echo b",
        b"",
        &[
            "1:a\n",
            "2:cat: nosuch: No such file or directory\n",
            "1:0\n",
            "1:b\n",
        ],
    )
    .await;
}

#[tokio::test]
async fn whole_input_commands_with_stdin_still_read_files_and_pipes() {
    agrees(
        "printf 'b\\na\\n' > f; sort -r | sed -n 1p; sort f; cut -c1 <<< xyz; uniq -c f | wc -l",
        b"x\ny\nz\n",
        &["1:z\n", "1:a\n", "1:b\n", "1:x\n", "1:2\n"],
    )
    .await;
}

#[tokio::test]
async fn the_ordered_stderr_leaves_the_script_start_unchanged() {
    let c = Computer::new();
    let run = run(&c, "echo \"[$_] $LINENO $?\"; echo err >&2", b"").await;
    assert_eq!(run.stdout(), "[/bin/bash] 1 0\n");
    assert_eq!(run.stderr(), "err\n");
}

#[tokio::test]
async fn whole_input_commands_given_files_leave_stdin_to_later_readers() {
    agrees(
        "echo b > f; sort f; sed -n 1p f; jq -n 1; cat",
        b"in\n",
        &["1:b\n", "1:b\n", "1:1\n", "1:in\n"],
    )
    .await;
}

#[tokio::test]
async fn a_debug_trap_in_an_exec_with_stdin_agrees() {
    agrees(
        "trap 'echo \"D $BASH_COMMAND\"' DEBUG; read -r l\necho \"$l\"",
        b"x\n",
        &["1:D read -r l\n", "1:D echo \"$l\"\n", "1:x\n"],
    )
    .await;
}

#[tokio::test]
async fn bash_command_next_to_an_untraced_function_agrees() {
    agrees(
        "trap 'echo \"D $BASH_COMMAND\"' DEBUG\nf() { echo a; }; f; echo b",
        b"",
        &["1:D f\n", "1:a\n", "1:D echo b\n", "1:b\n"],
    )
    .await;
}

#[tokio::test]
async fn bash_command_of_double_brackets_agrees() {
    agrees(
        "trap 'echo \"[$BASH_COMMAND]\"' DEBUG\necho a; [[ y ]]; [[ ! -e f && a == b ]]\n[[ $x ]]\ntrue",
        b"",
        &[
            "1:[echo a]\n",
            "1:a\n",
            "1:[[[ -n y ]]]\n",
            "1:[[[ ! -e f && a == b ]]]\n",
            "1:[[[ -n $x ]]]\n",
            "1:[true]\n",
        ],
    )
    .await;
}

#[tokio::test]
async fn exec_duplicating_a_computed_descriptor_agrees() {
    // bashkit's lexer read `9<&$fd` as `9<&0` and ran `$fd` as a command.
    agrees(
        "echo data > r2; exec 3< r2; fd=3; exec 9<&$fd; cat <&9\n\
         fd=0; read -r l 0<&$fd <<< hi; echo \"$l\"",
        b"",
        &["1:data\n", "1:hi\n"],
    )
    .await;
}

#[tokio::test]
async fn coprocess_output_kept_on_another_descriptor_agrees() {
    let script = "mkfifo s\ncoproc { read -r _ < s; echo hi; }\nexec 9<&${COPROC[0]}\n\
                  echo x > s\ncat <&9\nwait";
    agrees(script, b"", &["1:hi\n"]).await;
    // The same from a file run by `bash`, and from an `eval` string.
    let from_file = format!(
        "printf '%s\\n' '{}' > t.sh; bash t.sh; rm s; exec 3< r; fd=3; eval 'exec 7<&$fd'; echo $?",
        script.replace('\n', "' '")
    );
    agrees(&from_file, b"", &["1:hi\n", "1:0\n"]).await;
}

#[tokio::test]
async fn duplicating_a_computed_descriptor_onto_another_command_is_refused() {
    refused("exec 3< r; fd=3; cat 4<&$fd", "`4<&$fd`", &[]).await;
}

#[tokio::test]
async fn caller_reads_the_call_stack() {
    agrees_with_status(
        "f() { caller; caller 0; echo \"$? $_\"; caller 1 || echo \"none $_\"; caller x 2>/dev/null; echo $?; }\n\
         g() { f; }\n\
         g\n\
         caller || echo top\n\
         caller x",
        b"",
        &[
            "1:2 environment\n",
            "1:2 g environment\n",
            "1:0 0\n",
            "1:none 1\n",
            "1:2\n",
            "1:top\n",
        ],
        1,
    )
    .await;
}

#[tokio::test]
async fn mapfile_stores_as_bash_does() {
    agrees_with_status(
        "mapfile -t a < /dev/null; declare -p a\n\
         s=hello; mapfile -t -O 2 s < <(printf 'a\\nb\\n'); declare -p s\n\
         t=(x); declare -n r=t; mapfile -t r <<< 'one'; declare -p t\n\
         declare -A m; mapfile m <<< x 2>/dev/null; echo \"assoc $?\"\n\
         exec 3< <(printf 'p\\nq\\n'); mapfile -t -u 3 u; declare -p u\n\
         printf 'a\\nb\\nc\\n' | { mapfile -C 'echo cb' -c 2 x; echo \"$_\"; }\n\
         mapfile -O -1 v 2>/dev/null",
        b"",
        &[
            "1:declare -a a=()\n",
            "1:declare -a s=([0]=\"hello\" [2]=\"a\" [3]=\"b\")\n",
            "1:declare -a t=([0]=\"one\")\n",
            "1:assoc 1\n",
            "1:declare -a u=([0]=\"p\" [1]=\"q\")\n",
            "1:cb 1 b\n",
            "1:\n",
            "1:x\n",
        ],
        1,
    )
    .await;
}

#[tokio::test]
async fn enable_lists_the_shell_builtins() {
    // bashkit listed every command it has (`cat`, `awk`...) and failed
    // `enable -n` with no name.
    let special = [
        ".", ":", "break", "continue", "eval", "exec", "exit", "export", "readonly", "return",
        "set", "shift", "source", "times", "trap", "unset",
    ];
    let mut expected: Vec<String> = special.iter().map(|n| format!("1:enable {n}\n")).collect();
    expected.extend([
        "1:0\n".to_string(),
        "1:0\n".to_string(),
        "1:1\n".to_string(),
    ]);
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    agrees(
        "enable -s; enable -n; echo $?; enable cd echo; echo $?; enable cat 2>/dev/null; echo $?",
        b"",
        &expected,
    )
    .await;
}

#[tokio::test]
async fn date_reads_a_time_of_day_alone_as_today() {
    // bashkit's date rejected a time without a date, which is what bash's
    // prompt escapes `\A`, `\t`, `\T` and `\@` print.
    agrees(
        "date -d 11:51 +%H:%M; date --date='01:02:03 PM' +%T; date -d '12:05 am' '+%I:%M %p'",
        b"",
        &["1:11:51\n", "1:13:02:03\n", "1:12:05 AM\n"],
    )
    .await;
}

#[tokio::test]
async fn bash_dash_s_gives_the_stdin_script_its_arguments() {
    // bashkit ignored `-s` and took the first argument for a script file.
    agrees(
        "printf 'echo \"$1|$2|$0\"\\n' | bash -s -- a 'b c'; echo 'echo \"$#:$1\"' | sh -es x",
        b"",
        &["1:a|b c|bash\n", "1:1:x\n"],
    )
    .await;
}
