//! The module contract: default export, result JSON, top-level await,
//! console streams, exit codes and uncaught errors.

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn default_export_gets_input_and_returns_json() {
    let c = computer();
    let mut req =
        request("export default async (input) => ({ doubled: input.n * 2, name: input.name })");
    req.input = json!({"n": 21, "name": "x"});
    let r = run_req(&c.fs, req).await;
    assert_eq!(r.ok(), &json!({"doubled": 42, "name": "x"}));
}

#[tokio::test]
async fn sync_default_export_and_non_function_default() {
    let c = computer();
    assert_eq!(
        run(&c.fs, "export default (x) => [x, typeof x]").await.ok(),
        &json!([null, "object"])
    );
    assert_eq!(run(&c.fs, "export default 42").await.ok(), &json!(null));
    assert_eq!(run(&c.fs, "const x = 1").await.ok(), &json!(null));
    assert_eq!(
        run(&c.fs, "export default () => undefined").await.ok(),
        &json!(null)
    );
    assert_eq!(
        run(
            &c.fs,
            "export default () => ({ d: new Date(0), u: undefined, n: NaN })"
        )
        .await
        .ok(),
        &json!({"d": "1970-01-01T00:00:00.000Z", "n": null})
    );
}

#[tokio::test]
async fn top_level_await_works() {
    let c = computer();
    let src =
        "const v = await new Promise(r => setTimeout(() => r(7), 5));\nexport default () => v * 6;";
    assert_eq!(run(&c.fs, src).await.ok(), &json!(42));
}

#[tokio::test]
async fn console_goes_to_the_right_stream_in_order() {
    let c = computer();
    let r = run(
        &c.fs,
        "console.log('a', 1, {x: [1, 'two']}); console.info('b'); console.debug('c');\n\
         console.warn('w'); console.error('e %d%%', 5); process.stdout.write('raw'); process.stderr.write('!');",
    )
    .await;
    r.ok();
    assert_eq!(r.stdout, "a 1 { x: [ 1, 'two' ] }\nb\nc\nraw");
    assert_eq!(r.stderr, "w\ne 5%\n!");
    // Each write is its own chunk, sent as produced.
    assert!(r.chunks.len() >= 7, "{:?}", r.chunks);
}

#[tokio::test]
async fn console_formats_like_node() {
    let c = computer();
    let r = run(
        &c.fs,
        r#"
        class Point { constructor() { this.x = 1; this.y = 2; } }
        const circ = { name: 'c' }; circ.self = circ;
        console.log(new Point());
        console.log(new Map([['k', 1]]), new Set([1, 2]));
        console.log([undefined, null, -0, 10n, Symbol('s')]);
        console.log({ 'a-b': 1, nested: { deep: { deeper: { deepest: 1 } } } });
        console.log(circ);
        console.log(function named() {}, class K {}, async () => {});
        console.log('%s=%j', 'k', { v: 1 });
        console.log(Buffer.from('hi'), new Uint8Array([1, 2]));
        console.log(Array.from({ length: 120 }, (_, i) => i).length);
        "#,
    )
    .await;
    r.ok();
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines[0], "Point { x: 1, y: 2 }");
    assert_eq!(lines[1], "Map(1) { 'k' => 1 } Set(2) { 1, 2 }");
    assert_eq!(lines[2], "[ undefined, null, -0, 10n, Symbol(s) ]");
    assert_eq!(
        lines[3],
        "{ 'a-b': 1, nested: { deep: { deeper: [Object] } } }"
    );
    assert_eq!(lines[4], "<ref *1> { name: 'c', self: [Circular *1] }");
    assert_eq!(
        lines[5],
        "[Function: named] [class K] [AsyncFunction (anonymous)]"
    );
    assert_eq!(lines[6], "k={\"v\":1}");
    assert_eq!(lines[7], "<Buffer 68 69> Uint8Array(2) [ 1, 2 ]");
}

#[tokio::test]
async fn uncaught_error_exits_1_with_message_and_stack() {
    let c = computer();
    let r = run(
        &c.fs,
        "function inner() { throw new TypeError('boom'); }\ninner();",
    )
    .await;
    assert_eq!(r.err(), "TypeError: boom");
    assert_eq!(r.outcome.exit_code, 1);
    assert!(r.outcome.result.is_none());
    assert!(
        r.stderr
            .starts_with("TypeError: boom\n    at inner (/workspace/[eval]:1:"),
        "{}",
        r.stderr
    );
}

#[tokio::test]
async fn errors_in_the_default_export_and_its_promise() {
    let c = computer();
    let r = run(&c.fs, "export default () => { throw new Error('sync'); }").await;
    assert_eq!(r.err(), "Error: sync");
    let r = run(
        &c.fs,
        "export default async () => { await null; throw new RangeError('async'); }",
    )
    .await;
    assert_eq!(r.err(), "RangeError: async");
    let r = run(&c.fs, "throw 'just a string'").await;
    assert_eq!(r.err(), "Uncaught 'just a string'");
    let r = run(
        &c.fs,
        "const e = new Error('with code'); e.code = 'E_X'; throw e;",
    )
    .await;
    assert!(r.stderr.contains("code: 'E_X'"), "{}", r.stderr);
}

#[tokio::test]
async fn syntax_errors_are_reported() {
    let c = computer();
    let r = run(&c.fs, "export default () => {").await;
    assert!(r.err().starts_with("SyntaxError"), "{}", r.err());
    assert!(r.stderr.contains("SyntaxError"));
}

#[tokio::test]
async fn unhandled_rejection_fails_the_exec_but_handled_does_not() {
    let c = computer();
    let r = run(
        &c.fs,
        "Promise.reject(new Error('nobody listens')); export default () => 1",
    )
    .await;
    assert_eq!(r.err(), "Error: nobody listens");
    let r = run(
        &c.fs,
        "const p = Promise.reject(new Error('x')); await null; p.catch(() => {}); export default () => 2",
    )
    .await;
    assert_eq!(r.ok(), &json!(2));
}

#[tokio::test]
async fn result_must_be_json() {
    let c = computer();
    let r = run(&c.fs, "export default () => 10n").await;
    assert!(r.err().starts_with("TypeError"), "{}", r.err());
    let r = run(&c.fs, "const a = {}; a.a = a; export default () => a").await;
    assert!(r.err().starts_with("TypeError"), "{}", r.err());
}

#[tokio::test]
async fn process_exit_sets_the_code_and_stops() {
    let c = computer();
    let r = run(
        &c.fs,
        "console.log('before'); process.exit(3); console.log('after');",
    )
    .await;
    assert_eq!(r.outcome.exit_code, 3);
    assert_eq!(r.stdout, "before\n");
    let r = run(
        &c.fs,
        "try { process.exit(0) } catch { console.log('caught') } console.log('after')",
    )
    .await;
    assert_eq!(r.outcome.exit_code, 0);
    assert_eq!(r.stdout, "");
    let r = run(&c.fs, "process.exitCode = 4; export default () => 'done'").await;
    assert_eq!(r.outcome.exit_code, 4);
}

#[tokio::test]
async fn env_argv_stdin_and_cwd() {
    let c = computer();
    c.fs.mkdir(
        agentcomputer_fs::ROOT_INO,
        b"sub",
        0o755,
        agentcomputer_fs::Owner::ROOT,
    )
    .unwrap();
    let mut req = request(
        "let stdin = ''; for await (const chunk of process.stdin) stdin += chunk;\n\
         export default () => ({ env: process.env, args: process.argv.slice(2), argv1: process.argv[1], \
         stdin, sync: require0(), cwd: process.cwd(), home: typeof process.env.HOME });\n\
         import { readFileSync } from 'node:fs';\n\
         function require0() { return readFileSync(0, 'utf8'); }",
    );
    req.env = vec![("GREETING".into(), "hi".into())];
    req.argv = vec!["--flag".into(), "value".into()];
    req.stdin = b"from stdin".to_vec();
    req.cwd = "sub".into();
    let r = run_req(&c.fs, req).await;
    assert_eq!(
        r.ok(),
        &json!({
            "env": {"GREETING": "hi"}, "args": ["--flag", "value"], "argv1": "/workspace/sub/[eval]",
            // Stdin is consumed once, as a pipe is: the second reader
            // sees what the first left.
            "stdin": "from stdin", "sync": "", "cwd": "/workspace/sub", "home": "undefined"
        })
    );
}

#[tokio::test]
async fn a_missing_cwd_is_a_clear_error() {
    let c = computer();
    let mut req = request("export default () => 1");
    req.cwd = "/workspace/nope".into();
    let r = run_req(&c.fs, req).await;
    assert!(
        r.err()
            .contains("cannot use '/workspace/nope' as the working directory"),
        "{}",
        r.err()
    );
    assert!(r.err().contains("ENOENT"));
}

#[tokio::test]
async fn timers_run_before_exit_and_can_be_cleared() {
    let c = computer();
    let r = run(
        &c.fs,
        "const log = [];\n\
         setTimeout(() => log.push('t20'), 20); setTimeout(() => log.push('t5'), 5);\n\
         const i = setInterval(() => { log.push('i'); if (log.filter(x => x === 'i').length === 3) clearInterval(i); }, 2);\n\
         const gone = setTimeout(() => log.push('never'), 1); clearTimeout(gone);\n\
         setTimeout(() => console.log(JSON.stringify(log)), 40);\n\
         setTimeout(() => log.push('unref'), 10_000).unref();\n\
         queueMicrotask(() => log.push('micro')); setImmediate(() => log.push('immediate'));",
    )
    .await;
    r.ok();
    let log: Vec<String> = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(log[0], "micro");
    assert_eq!(log.iter().filter(|x| *x == "i").count(), 3);
    assert!(!log.contains(&"never".to_string()));
    assert!(!log.contains(&"unref".to_string()));
    let t5 = log.iter().position(|x| x == "t5").unwrap();
    let t20 = log.iter().position(|x| x == "t20").unwrap();
    assert!(t5 < t20);
}

#[tokio::test]
async fn a_promise_that_never_settles_is_reported() {
    let c = computer();
    let r = run(&c.fs, "await new Promise(() => {});").await;
    assert!(
        r.err().contains("top-level await never settled"),
        "{}",
        r.err()
    );
    let r = run(&c.fs, "export default () => new Promise(() => {})").await;
    assert!(
        r.err().contains("default export never settled"),
        "{}",
        r.err()
    );
}

#[tokio::test]
async fn output_streams_while_the_exec_runs() {
    let c = computer();
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let fs = c.fs.clone();
    let exec = tokio::spawn(async move {
        agentcomputer_js::run(
            fs,
            request("console.log('early'); await new Promise(r => setTimeout(r, 500)); console.log('late');"),
            tx,
            Default::default(),
        )
        .await
    });
    let first = tokio::time::timeout(std::time::Duration::from_millis(400), rx.recv())
        .await
        .expect("the first line arrives before the exec ends")
        .unwrap();
    assert_eq!(
        first,
        agentcomputer_js::OutputChunk::Stdout(b"early\n".to_vec())
    );
    assert!(!exec.is_finished());
    let outcome = exec.await.unwrap();
    assert_eq!(outcome.exit_code, 0);
    assert_eq!(
        rx.recv().await,
        Some(agentcomputer_js::OutputChunk::Stdout(b"late\n".to_vec()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_execs_share_the_computer() {
    let c = computer();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let fs = c.fs.clone();
        tasks.push(tokio::spawn(async move {
            run(
                &fs,
                &format!(
                    "import fs from 'node:fs/promises';\n\
                     await fs.mkdir('shared', {{ recursive: true }});\n\
                     for (let j = 0; j < 20; j++) await fs.writeFile(`shared/{i}-${{j}}.txt`, 'x'.repeat(j));\n\
                     export default async () => (await fs.readdir('shared')).filter(n => n.startsWith('{i}-')).length;"
                ),
            )
            .await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().ok(), &json!(20));
    }
    let dir =
        c.fs.resolve(agentcomputer_fs::ROOT_INO, b"/shared", true)
            .unwrap();
    assert_eq!(c.fs.readdir(dir.ino, 0, 1000).unwrap().len(), 160);
}
