//! Commands that bashkit ran over a whole input in one call (`xxd`, `tac`,
//! `rev`): the project's versions print what GNU prints (outputs below
//! were taken from GNU coreutils 9 and xxd 2022 in the same directory
//! layout), refuse widths GNU refuses, and hold no more than the exec's
//! memory budget.

mod common;

use agentcomputer_shell::{ExecRequest, ShellLimits};
use common::{Computer, exec_with_limits};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// "hello, world\nsecond line\tx\n" in `a`, "one\ntwo\nthree" in `b`.
fn sample() -> Computer {
    let c = Computer::new();
    c.write("a", b"hello, world\nsecond line\tx\n");
    c.write("b", b"one\ntwo\nthree");
    c
}

#[tokio::test]
async fn xxd_dumps_as_gnu_does() {
    let c = sample();
    let cases: &[(&str, &str)] = &[
        (
            "xxd a",
            "00000000: 6865 6c6c 6f2c 2077 6f72 6c64 0a73 6563  hello, world.sec\n\
             00000010: 6f6e 6420 6c69 6e65 0978 0a              ond line.x.\n",
        ),
        (
            "xxd -c 5 -g 2 a",
            "00000000: 6865 6c6c 6f  hello\n00000005: 2c20 776f 72  , wor\n\
             0000000a: 6c64 0a73 65  ld.se\n0000000f: 636f 6e64 20  cond \n\
             00000014: 6c69 6e65 09  line.\n00000019: 780a          x.\n",
        ),
        (
            "xxd -g 0 a",
            "00000000: 68656c6c6f2c20776f726c640a736563  hello, world.sec\n\
             00000010: 6f6e64206c696e6509780a            ond line.x.\n",
        ),
        (
            "xxd -g 3 -u a",
            "00000000: 68656C 6C6F2C 20776F 726C64 0A7365 63  hello, world.sec\n\
             00000010: 6F6E64 206C69 6E6509 780A              ond line.x.\n",
        ),
        (
            "xxd -s 3 -l 9 -o 0x100 a",
            "00000103: 6c6f 2c20 776f 726c 64                   lo, world\n",
        ),
        (
            "xxd -s -4 a",
            "00000017: 6509 780a                                e.x.\n",
        ),
        (
            "xxd -p a",
            "68656c6c6f2c20776f726c640a7365636f6e64206c696e6509780a\n",
        ),
        (
            "xxd -p -c 4 a",
            "68656c6c\n6f2c2077\n6f726c64\n0a736563\n6f6e6420\n6c696e65\n09780a\n",
        ),
        (
            "xxd -p -c 900000000 a",
            "68656c6c6f2c20776f726c640a7365636f6e64206c696e6509780a\n",
        ),
        (
            "xxd -g 900000000 a",
            "00000000: 68656c6c6f2c20776f726c640a736563  hello, world.sec\n\
             00000010: 6f6e64206c696e6509780a            ond line.x.\n",
        ),
        ("xxd a | xxd -r", "hello, world\nsecond line\tx\n"),
        (
            "cat a | xxd -p | xxd -r -p",
            "hello, world\nsecond line\tx\n",
        ),
        // GNU reads the device endlessly; bashkit's xxd stopped at 1 MiB.
        ("xxd -l 2000000 /dev/zero | wc -l", "125000\n"),
    ];
    for (script, want) in cases {
        assert_eq!(c.sh(script).await.ok(), *want, "{script}");
    }
}

/// A normal dump's row is at most 256 bytes wide, as in GNU xxd; before,
/// any width was taken and every short row padded to it in one call.
#[tokio::test]
async fn xxd_refuses_rows_wider_than_gnu() {
    let c = sample();
    let start = Instant::now();
    let run = c.sh("echo abc | xxd -c 5000000 | wc -c").await;
    assert_eq!(run.stdout(), "0\n", "{run:?}");
    assert_eq!(
        run.stderr(),
        "xxd: invalid number of columns (max. 256).\n",
        "{run:?}"
    );
    assert!(start.elapsed() < Duration::from_secs(2));
    let run = c.sh("xxd -c 257 a; echo $?; xxd nofile; echo $?").await;
    assert_eq!(run.stdout(), "1\n2\n");
    assert_eq!(
        run.stderr(),
        "xxd: invalid number of columns (max. 256).\nxxd: nofile: No such file or directory\n"
    );
}

#[tokio::test]
async fn tac_and_rev_print_as_gnu_does() {
    let c = sample();
    let cases: &[(&str, &str)] = &[
        ("tac a b", "second line\tx\nhello, world\nthreetwo\none\n"),
        ("tac b", "threetwo\none\n"),
        ("tac -b a", "\n\nsecond line\txhello, world"),
        ("tac -s o b", "\nthreene\ntwoo"),
        ("tac -s o -b b", "o\nthreeone\ntw"),
        ("tac -r -s '[ot]' b", "hree\ntwone\nto"),
        (
            "printf 'x\\ny\\n' | tac - a",
            "y\nx\nsecond line\tx\nhello, world\n",
        ),
        ("cat b | tac", "threetwo\none\n"),
        ("rev a b", "dlrow ,olleh\nx\tenil dnoces\neno\nowt\neerht"),
        ("printf 'h\\303\\251llo\\n\\nab' | rev", "oll\u{e9}h\n\nba"),
    ];
    for (script, want) in cases {
        assert_eq!(c.sh(script).await.ok(), *want, "{script}");
    }
    let run = c.sh("tac nofile; echo $?; rev nofile; echo $?").await;
    assert_eq!(run.stdout(), "1\n1\n");
    assert_eq!(
        run.stderr(),
        "tac: failed to open 'nofile' for reading: No such file or directory\n\
         rev: cannot open nofile: No such file or directory\n"
    );
}

/// With a 16 MiB budget: a 40 MB file of the computer is reversed (tac
/// reads it backwards in steps, rev one line at a time); the same bytes on
/// a pipe, which tac must hold whole, are refused with the budget's error
/// before they are all held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tac_and_rev_stay_within_the_budget() {
    let c = Computer::new();
    let mut lines = Vec::new();
    for i in 1..=5_000_000u32 {
        lines.extend_from_slice(format!("{i}\n").as_bytes());
    }
    c.write("big", &lines);
    let limits = ShellLimits {
        memory_bytes: 16 << 20,
        ..ShellLimits::default()
    };
    let run = |script: &str| {
        exec_with_limits(
            &c.fs,
            ExecRequest {
                script: script.into(),
                timeout: Duration::from_secs(120),
                ..ExecRequest::default()
            },
            CancellationToken::new(),
            limits.clone(),
        )
    };
    let out = run("tac big | head -n 2; tac big | tail -n 1; tac big | wc -c")
        .await
        .ok();
    assert_eq!(out, format!("5000000\n4999999\n1\n{}\n", lines.len()));
    let out = run("rev big | head -n 12 | tail -n 3; rev big | wc -c")
        .await
        .ok();
    assert_eq!(out, format!("01\n11\n21\n{}\n", lines.len()));
    let refused = run("cat big | tac | wc -c").await;
    assert!(
        refused
            .stderr()
            .contains("memory limit of 16777216 bytes exceeded"),
        "{refused:?}"
    );
}
