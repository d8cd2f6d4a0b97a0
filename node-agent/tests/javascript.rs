//! Exec with RUNTIME_JAVASCRIPT through a real `node-agent local` process:
//! the QuickJS runtime on real SQLite files, next to the shell runtime.

mod common;

use std::time::{Duration, Instant};

use agentcomputer_proto::v1 as pb;
use common::*;
use pb::exec_event::Event;
use tonic::Code;

async fn uid_of(c: &mut Client, computer: &str, path: &str) -> u32 {
    c.stat(pb::StatRequest {
        computer: computer.into(),
        path: path.into(),
        follow_symlinks: false,
    })
    .await
    .expect("stat")
    .into_inner()
    .uid
}

#[tokio::test]
async fn modules_get_input_return_json_and_share_files_with_the_shell() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let r = sh(
        &mut c,
        "demo",
        "mkdir src; echo from shell > a.txt; touch b c",
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");

    let source = r#"import {readdir} from "node:fs/promises";
        export default async ({n}) => ({n, files: (await readdir(".")).length})"#;
    let r = run(&mut c, js_req("demo", source, r#"{"n":3}"#)).await;
    // Keys keep the order the object was built in, as JSON.stringify gives it.
    assert_eq!(
        (
            r.result.as_str(),
            r.code,
            r.error.as_str(),
            r.stdout.as_str()
        ),
        (r#"{"n":3,"files":4}"#, 0, "", ""),
        "{r:?}"
    );

    // JavaScript writes, the shell reads, and the other way round.
    let source = r#"import {writeFileSync, readFileSync} from "node:fs";
        writeFileSync("out.json", JSON.stringify({x: 1}));
        export default () => readFileSync("a.txt", "utf8")"#;
    let r = run(&mut c, js_req("demo", source, "")).await;
    assert_eq!(r.result, r#""from shell\n""#, "{r:?}");
    let r = sh(&mut c, "demo", "jq .x out.json").await;
    assert_eq!((r.stdout.as_str(), r.code), ("1\n", 0), "{r:?}");
    // Both runtimes create files as the same user.
    assert_eq!(uid_of(&mut c, "demo", "out.json").await, 1000);
    assert_eq!(uid_of(&mut c, "demo", "a.txt").await, 1000);

    // cwd, env (the whole of process.env), stdin, and a missing input.
    let source = r#"import {readFileSync} from "node:fs";
        export default (input) => ({input, cwd: process.cwd(), env: process.env,
                                    stdin: readFileSync(0, "utf8")})"#;
    let mut req = js_req("demo", source, "");
    req.cwd = "src".into();
    req.env.insert("GREETING".into(), "hello".into());
    req.stdin = b"world".to_vec();
    let r = run(&mut c, req).await;
    assert_eq!(
        r.result,
        r#"{"input":null,"cwd":"/workspace/src","env":{"GREETING":"hello"},"stdin":"world"}"#,
        "{r:?}"
    );
    // A module without a default-exported function has a null result.
    let r = run(&mut c, js_req("demo", "console.log(6 * 7)", "")).await;
    assert_eq!(
        (r.stdout.as_str(), r.result.as_str(), r.code),
        ("42\n", "null", 0)
    );
    let r = run(&mut c, js_req("demo", "process.exit(3)", "")).await;
    assert_eq!(r.code, 3, "{r:?}");
}

#[tokio::test]
async fn uncaught_errors_and_bad_requests() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;

    let source = "console.log('before'); export default () => { throw new TypeError('boom') }";
    let r = run(&mut c, js_req("demo", source, "")).await;
    assert_eq!(
        (
            r.code,
            r.error.as_str(),
            r.result.as_str(),
            r.stdout.as_str()
        ),
        (1, "TypeError: boom", "null", "before\n"),
        "{r:?}"
    );
    assert!(r.stderr.starts_with("TypeError: boom\n    at "), "{r:?}");
    let r = run(&mut c, js_req("demo", "let = ;", "")).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("SyntaxError"), "{r:?}");

    let err = c
        .exec(js_req("demo", "export default (x) => x", r#"{"n":"#))
        .await
        .unwrap_err();
    assert_errno(&err, Code::InvalidArgument, "EINVAL");
    assert_eq!(
        err.message(),
        "EINVAL: input_json is not valid JSON: EOF while parsing a value at line 1 column 5"
    );
    let mut req = exec_req("demo", "cat");
    req.input_json = "{}".into();
    let err = c.exec(req).await.unwrap_err();
    assert_errno(&err, Code::InvalidArgument, "EINVAL");
    assert!(
        err.message().contains("only for RUNTIME_JAVASCRIPT"),
        "{err:?}"
    );
    let mut req = js_req("demo", "1", "");
    req.cwd = "missing".into();
    let err = c.exec(req).await.unwrap_err();
    assert_errno(&err, Code::NotFound, "ENOENT");

    // A result too big for the exit message fails the run, not the stream.
    let source = "export default () => 'x'.repeat(5 * 1024 * 1024)";
    let r = run(&mut c, js_req("demo", source, "")).await;
    assert_eq!((r.code, r.result.as_str()), (1, "null"), "{r:?}");
    assert!(r.error.contains("write it to a file instead"), "{r:?}");
}

#[tokio::test]
async fn runaway_module_stops_at_its_timeout_and_the_next_exec_runs() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let mut req = js_req("demo", "while (true) {}", "");
    req.timeout_ms = 2000;
    let started = Instant::now();
    let r = run(&mut c, req).await;
    let took = started.elapsed();
    assert_eq!(
        (r.code, r.error.as_str(), r.result.as_str()),
        (124, "javascript: timed out after 2s", "null"),
        "{r:?}"
    );
    assert!(r.stderr.contains("timed out after 2s"), "{r:?}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(5),
        "{took:?}"
    );
    let r = run(&mut c, js_req("demo", "export default () => 'alive'", "")).await;
    assert_eq!((r.result.as_str(), r.code), (r#""alive""#, 0), "{r:?}");
}

#[tokio::test]
async fn output_streams_while_the_module_runs_and_none_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;

    // The module waits for a file that the test writes only after it saw
    // the first line, so that line must have been streamed.
    let source = r#"import {existsSync} from "node:fs";
        console.log("ready");
        await new Promise((resolve) => {
            const t = setInterval(() => { if (existsSync("go")) { clearInterval(t); resolve(); } }, 5);
        });
        console.error("done");
        export default () => "finished";"#;
    let mut stream = c
        .exec(js_req("demo", source, ""))
        .await
        .unwrap()
        .into_inner();
    match stream.message().await.unwrap().unwrap().event.unwrap() {
        Event::Stdout(b) => assert_eq!(b, b"ready\n"),
        other => panic!("unexpected {other:?}"),
    }
    write(&mut c, "demo", "go", pb::WriteMode::Truncate, b"")
        .await
        .unwrap();
    let mut events = Vec::new();
    while let Some(ev) = stream.message().await.unwrap() {
        events.push(ev.event.unwrap());
    }
    match events.as_slice() {
        [Event::Stderr(done), Event::Exit(exit)] => {
            assert_eq!(done, b"done\n");
            assert_eq!((exit.code, exit.result_json.as_str()), (0, r#""finished""#));
        }
        other => panic!("unexpected {other:?}"),
    }

    // Every line arrives before the exit, run after run.
    let source = "for (let i = 0; i < 3000; i++) console.log(i); export default () => 'end'";
    for _ in 0..10 {
        let r = run(&mut c, js_req("demo", source, "")).await;
        let lines: Vec<&str> = r.stdout.lines().collect();
        assert_eq!(lines.len(), 3000, "{:?}", &r.stdout[r.stdout.len() - 40..]);
        assert_eq!((lines[2999], r.result.as_str()), ("2999", r#""end""#));
    }
}

#[tokio::test]
async fn client_disconnect_cancels_the_module() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let source = r#"import {writeFileSync} from "node:fs";
        let i = 0;
        setInterval(() => { writeFileSync("counter", String(++i)); console.log("tick"); }, 10);"#;
    assert_run_stops_when_client_leaves(&mut c, "demo", js_req("demo", source, ""), "module").await;
}

#[tokio::test]
async fn a_spinning_module_does_not_hold_up_other_execs() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    let mut spin = js_req("demo", "console.log('go'); for (;;) {}", "");
    spin.timeout_ms = 20_000;
    let mut spinning = c.exec(spin).await.unwrap().into_inner();
    assert!(matches!(
        spinning.message().await.unwrap().unwrap().event,
        Some(Event::Stdout(_))
    ));
    for i in 0..5 {
        let r = run(
            &mut c,
            js_req("demo", "export default (n) => n * 2", &i.to_string()),
        )
        .await;
        assert_eq!(r.result, (i * 2).to_string(), "{r:?}");
        let r = sh(&mut c, "demo", "echo ok").await;
        assert_eq!(r.stdout, "ok\n");
    }
    let pending = tokio::time::timeout(Duration::from_millis(100), spinning.message()).await;
    assert!(
        pending.is_err(),
        "the spinning module ended early: {pending:?}"
    );
    drop(c);
    assert!(
        agent.stop().await.success(),
        "SIGTERM stops the spinning module"
    );
}

/// Events in the order the program wrote them, across stdout and stderr.
async fn events_of(c: &mut Client, req: pb::ExecRequest) -> (Vec<Event>, pb::ExecExit) {
    let mut stream = c.exec(req).await.expect("exec").into_inner();
    let mut events = Vec::new();
    while let Some(ev) = stream.message().await.expect("exec stream") {
        match ev.event.unwrap() {
            Event::Exit(exit) => return (events, exit),
            other => events.push(other),
        }
    }
    panic!("no exit event after {events:?}");
}

#[tokio::test]
async fn stdout_and_stderr_keep_their_order_and_stdin_is_read_once() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;

    let source = r#"for (let i = 0; i < 3; i++) { console.log(`out${i}`); console.error(`err${i}`); }
        process.stdout.write("tail-out\n"); process.stderr.write("tail-err\n");"#;
    let (events, exit) = events_of(&mut c, js_req("demo", source, "")).await;
    assert_eq!(exit.code, 0, "{exit:?}");
    let mut seen = Vec::new();
    for ev in events {
        match ev {
            Event::Stdout(b) => seen.push(format!("1:{}", String::from_utf8_lossy(&b))),
            Event::Stderr(b) => seen.push(format!("2:{}", String::from_utf8_lossy(&b))),
            Event::Exit(_) => unreachable!(),
        }
    }
    assert_eq!(
        seen,
        [
            "1:out0\n",
            "2:err0\n",
            "1:out1\n",
            "2:err1\n",
            "1:out2\n",
            "2:err2\n",
            "1:tail-out\n",
            "2:tail-err\n"
        ]
    );

    // The first reader takes stdin; a second sees what is left: nothing.
    let source = r#"import { readFileSync } from "node:fs";
        export default async () => {
          const first = readFileSync(0, "utf8");
          const second = readFileSync("/dev/stdin", "utf8");
          let third = "";
          for await (const chunk of process.stdin) third += chunk;
          return { first, second, third };
        }"#;
    let mut req = js_req("demo", source, "");
    req.stdin = b"l1\nl2\n".to_vec();
    let r = run(&mut c, req).await;
    assert_eq!(
        (r.result.as_str(), r.code),
        (r#"{"first":"l1\nl2\n","second":"","third":""}"#, 0),
        "{r:?}"
    );
}

/// Out of memory in many small objects: QuickJS cannot even allocate the
/// error and throws `null`; the run still says the memory limit was hit.
/// A script's own `throw null` stays `Uncaught null`.
#[tokio::test]
async fn out_of_memory_never_says_uncaught_null() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(dir.path(), &[]);
    let mut c = agent.client().await;
    create(&mut c, "demo", 0).await;
    for source in [
        "let a = []; for (;;) a.push({ x: a.length, s: 'y'.repeat(10) })",
        "const m = new Map(); for (let i = 0; ; i++) m.set(i, [i])",
        "let a = []; for (;;) a.push(Symbol())",
    ] {
        let mut req = js_req("demo", source, "");
        req.memory_limit_bytes = 16 << 20;
        let r = run(&mut c, req).await;
        assert_eq!(
            r.error, "javascript: memory limit of 16 MiB exceeded",
            "{source}: {r:?}"
        );
        assert!(!r.stderr.contains("Uncaught null"), "{source}: {r:?}");
        assert_ne!(r.code, 0);
    }
    let r = run(&mut c, js_req("demo", "throw null", "")).await;
    assert!(r.stderr.contains("Uncaught null"), "{r:?}");
    assert!(!r.error.contains("memory"), "{r:?}");
}
