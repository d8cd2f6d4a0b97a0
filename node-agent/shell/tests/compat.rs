//! Places where bashkit alone differs from bash or coreutils and the runtime
//! corrects it (hard links, printf escapes), byte-clean data through files
//! and pipes, and the known differences that stay, pinned so a bashkit
//! upgrade that changes them is noticed.

mod common;

use agentcomputer_fs::{FileKind, ROOT_INO};
use common::Computer;

fn attr(c: &Computer, path: &str) -> agentcomputer_fs::Attr {
    c.fs.resolve(ROOT_INO, path.as_bytes(), false)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[tokio::test]
async fn ln_makes_hard_links_in_the_workspace() {
    let c = Computer::new();
    let out = c
        .sh("echo one > a; ln a b; ln -v a c; echo two >> b; cat a; [ -L b ] || echo not-a-symlink; \
             mkdir d; ln a b d; ln -t d c; ls d; rm a; cat c")
        .await;
    assert_eq!(
        out.ok(),
        "'c' => 'a'\none\ntwo\nnot-a-symlink\na\nb\nc\none\ntwo\n"
    );
    let b = attr(&c, "b");
    assert_eq!(b.kind, FileKind::RegularFile);
    for other in ["c", "d/a", "d/b", "d/c"] {
        assert_eq!(attr(&c, other).ino, b.ino, "{other}");
    }
    // a was removed; b, c and the three names in d remain.
    assert_eq!(attr(&c, "b").nlink, 5);
}

#[tokio::test]
async fn ln_reports_like_coreutils() {
    let c = Computer::new();
    let out = c
        .sh("echo x > a; mkdir d; ln a a2; ln a a2; ln missing m; ln d e; ln a /tmp/t; ln a a; ln -f a a; \
             ln a b c; echo status=$?")
        .await;
    assert_eq!(out.stdout(), "status=1\n");
    assert_eq!(
        out.stderr(),
        "ln: failed to create hard link 'a2': File exists\n\
         ln: failed to access 'missing': No such file or directory\n\
         ln: d: hard link not allowed for directory\n\
         ln: failed to create hard link '/tmp/t' => 'a': Invalid cross-device link\n\
         ln: failed to create hard link 'a': File exists\n\
         ln: 'a' and 'a' are the same file\n\
         ln: target 'c': No such file or directory\n"
    );
    // The scratch tree has no hard links at all.
    let tmp = c.sh("echo x > /tmp/a; ln /tmp/a /tmp/b").await;
    assert_eq!(tmp.code(), 1);
    assert_eq!(
        tmp.stderr(),
        "ln: failed to create hard link '/tmp/b' => '/tmp/a': Operation not permitted\n"
    );
}

#[tokio::test]
async fn ln_s_still_makes_symbolic_links() {
    let c = Computer::new();
    let out = c
        .sh(
            "mkdir -p rel/v1 rel/v2 sub; ln -sv rel/v1 cur; ln -sfn rel/v2 cur; readlink cur; \
             echo t > rel/v2/f; ln -sr rel/v2/f sub/f; readlink sub/f; cat sub/f",
        )
        .await;
    assert_eq!(out.ok(), "'cur' -> 'rel/v1'\nrel/v2\n../rel/v2/f\nt\n");
    assert_eq!(attr(&c, "cur").kind, FileKind::Symlink);
    assert_eq!(
        c.fs.readlink(attr(&c, "sub/f").ino).unwrap(),
        b"../rel/v2/f"
    );
}

#[tokio::test]
async fn link_adds_one_name() {
    let c = Computer::new();
    let out = c
        .sh("echo x > a; link a b; link a b; link nope q; link a")
        .await;
    assert_eq!(out.code(), 1);
    assert_eq!(
        out.stderr(),
        "link: cannot create link 'b' to 'a': File exists\n\
         link: cannot create link 'q' to 'nope': No such file or directory\n\
         link: missing operand after 'a'\nTry 'link --help' for more information.\n"
    );
    assert_eq!(attr(&c, "a").ino, attr(&c, "b").ino);
}

#[tokio::test]
async fn printf_reads_backslash_and_hex_escapes_as_bash() {
    let c = Computer::new();
    let out = c
        .sh(r"printf '\\x00|\n'; printf '%s|\\x41\x41\n' s; printf -v v '\\x0041'; echo $v; printf 'a\x00b\x0g' > nul.bin")
        .await;
    assert_eq!(out.ok(), "\\x00|\ns|\\x41A\n\\x0041\n");
    assert_eq!(c.read("nul.bin"), b"a\0b\0g");
}

/// `%b` keeps the backslash of `\"` (it is not one of echo's escapes),
/// also when the format is reused and after `*` widths; `%s` arguments are
/// never touched. Compared with the host's bash where there is one.
#[tokio::test]
async fn printf_b_keeps_escaped_quotes_as_bash() {
    let c = Computer::new();
    let script = r#"printf '%b|' 'a\"b' 'c\\"d' '\"\n'; echo; printf '%s %b\n' '\"' '\"' x 'y\"'; printf '%*s%b\n' 3 'z' '\"\x41'; printf -v v '%b' '\"'; echo "$v""#;
    let ours = c.sh(script).await.ok();
    assert_eq!(
        ours,
        "a\\\"b|c\\\"d|\\\"\n|\n\\\" \\\"\nx y\\\"\n  z\\\"A\n\\\"\n"
    );
    if let Ok(host) = std::process::Command::new("bash")
        .arg("-c")
        .arg(script)
        .output()
    {
        assert_eq!(ours, String::from_utf8(host.stdout).unwrap());
    }
}

/// Every byte value, many times, with long runs of NUL and 0xff.
fn binary() -> Vec<u8> {
    let mut all: Vec<u8> = (0..=255u8).cycle().take(256 * 64).collect();
    all.extend(std::iter::repeat_n(0u8, 3000));
    all.extend(std::iter::repeat_n(0xffu8, 3000));
    all.extend_from_slice(b"\xc3\x28\xe2\x82\n\x80tail");
    all
}

#[tokio::test]
async fn binary_data_survives_files_pipes_and_archives() {
    let c = Computer::new();
    let all = binary();
    c.write("bin", &all);
    let out = c
        .sh(
            "cat bin > copy; cat bin | cat > piped; cat < bin | cat | cat > piped3; \
             base64 bin > b64; base64 -d b64 > decoded; base64 -d < b64 | cat > decoded2; \
             gzip -c bin > bin.gz; gunzip -c bin.gz > gunzipped; gzip -dc < bin.gz > gunzipped2; \
             mkdir x; tar czf a.tgz bin; tar xzf a.tgz -C x; \
             cp bin /tmp/s; cat /tmp/s > via-tmp; \
             head -c 300 bin > head; tail -c 300 bin > tail; \
             tr '\\000\\377' 'AB' < bin > tr; cat bin | tr -d '\\000' > trd",
        )
        .await;
    out.ok();
    for name in [
        "copy",
        "piped",
        "piped3",
        "decoded",
        "decoded2",
        "gunzipped",
        "gunzipped2",
        "x/bin",
        "via-tmp",
    ] {
        assert!(c.read(name) == all, "{name} differs");
    }
    assert_eq!(c.read("head"), all[..300]);
    assert_eq!(c.read("tail"), all[all.len() - 300..]);
    let tr: Vec<u8> = all
        .iter()
        .map(|&b| match b {
            0 => b'A',
            0xff => b'B',
            b => b,
        })
        .collect();
    assert!(c.read("tr") == tr, "tr differs");
    let trd: Vec<u8> = all.iter().copied().filter(|&b| b != 0).collect();
    assert!(c.read("trd") == trd, "tr -d differs");
}

#[tokio::test]
async fn binary_stdout_and_stdin_reach_the_caller_unchanged() {
    let c = Computer::new();
    let all = binary();
    c.write("bin", &all);
    let out = c.sh("cat bin | cat").await;
    assert_eq!(out.code(), 0);
    assert!(out.stdout_bytes() == all, "stdout differs");

    let stdin = c
        .exec(agentcomputer_shell::ExecRequest {
            script: "cat > from-stdin; wc -c < from-stdin".into(),
            stdin: all.clone(),
            ..Default::default()
        })
        .await;
    assert_eq!(stdin.ok(), format!("{}\n", all.len()));
    assert!(c.read("from-stdin") == all, "stdin differs");
}

#[tokio::test]
async fn shell_strings_are_utf8_so_invalid_bytes_in_variables_are_replaced() {
    // bash keeps the bytes of `$(cmd)` (dropping NULs); bashkit's words are
    // UTF-8 strings, so each invalid byte becomes U+FFFD. Pinned: files
    // and pipes are the byte-clean path (see above).
    let c = Computer::new();
    c.write("bin", b"a\0b\xffc\n");
    let out = c.sh(r#"v=$(cat bin); printf '%s' "$v" > out"#).await;
    out.ok();
    assert_eq!(c.read("out"), "ab\u{fffd}c".as_bytes());
}

#[tokio::test]
async fn while_read_from_a_redirected_file_keeps_variables() {
    // `done < file` runs in the current shell (unlike `cat f | while`),
    // so the loop's assignments survive; `read -u` over `exec 3<` too.
    let c = Computer::new();
    let lines: String = (1..=2000).map(|i| format!("{i}\n")).collect();
    c.write("lines", lines.as_bytes());
    let out = c
        .sh(
            "n=0; s=0; while read l; do n=$((n+1)); s=$((s+l)); done < lines; echo $n $s; \
             exec 3<lines; m=0; while read -u 3 l; do m=$((m+1)); done; echo $m",
        )
        .await;
    assert_eq!(out.ok(), "2000 2001000\n2000\n");
}

#[tokio::test]
async fn ls_long_format_has_links_owners_and_total() {
    let c = Computer::new();
    c.write("root-owned", b"0123456789");
    let out = c
        .sh("printf 'abc' > a; ln a b; mkdir d; ln -s a l; ls -l; ls -la d; ls -ln a; ls -lo a; ls -lg a")
        .await;
    let text = out.ok();
    let lines: Vec<&str> = text.lines().collect();
    // Dates vary; everything up to the size column and the names do not.
    let cols = |line: &str| -> (String, String) {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f[..5].join(" "), f[8..].join(" "))
    };
    // st_blocks as the engine counts them: one 512-byte block per small file.
    assert_eq!(lines[0], "total 3");
    assert_eq!(
        cols(lines[1]),
        ("-rw-r--r-- 2 sandbox sandbox 3".into(), "a".into())
    );
    assert_eq!(
        cols(lines[2]),
        ("-rw-r--r-- 2 sandbox sandbox 3".into(), "b".into())
    );
    assert_eq!(
        cols(lines[3]),
        ("drwxr-xr-x 2 sandbox sandbox 0".into(), "d".into())
    );
    assert_eq!(
        cols(lines[4]),
        ("lrwxrwxrwx 1 sandbox sandbox 1".into(), "l -> a".into())
    );
    assert_eq!(
        cols(lines[5]),
        ("-rw-r--r-- 1 root root 10".into(), "root-owned".into())
    );
    assert_eq!(lines[6], "total 0");
    assert!(lines[7].starts_with("drwxr-xr-x 2 sandbox sandbox 0 ") && lines[7].ends_with(" ."));
    assert!(lines[8].starts_with("drwxr-xr-x ") && lines[8].ends_with(" .."));
    assert!(
        lines[9].starts_with("-rw-r--r-- 2 1000 1000 3 "),
        "{}",
        lines[9]
    );
    assert!(
        lines[10].starts_with("-rw-r--r-- 2 sandbox 3 "),
        "{}",
        lines[10]
    );
    assert!(
        lines[11].starts_with("-rw-r--r-- 2 sandbox 3 "),
        "{}",
        lines[11]
    );
    assert_eq!(lines.len(), 12);
}

#[tokio::test]
async fn ls_sorts_reverses_and_marks() {
    let c = Computer::new();
    let out = c
        .sh("printf 1 > small; printf 12345 > big; printf 123 > mid; touch -d '2020-01-01' old; mkdir dir; \
             ls -S; echo; ls -Sr; echo; ls -t | tail -1; ls -ltr | sed -n 2p | awk '{print $NF}'; \
             ls -p; echo; ls -m; ls --color=auto -A -1 --group-directories-first | head -1; ls -i big | cut -d' ' -f2")
        .await;
    assert_eq!(
        out.ok(),
        "big\nmid\nsmall\ndir\nold\n\nold\ndir\nsmall\nmid\nbig\n\n\
         old\nold\n\
         big\ndir/\nmid\nold\nsmall\n\n\
         big, dir, mid, old, small\n\
         dir\nbig\n"
    );
}

#[tokio::test]
async fn ls_operands_headers_and_errors() {
    let c = Computer::new();
    let out = c
        .sh("mkdir -p x/y; touch x/f x/y/g; ls missing x/f x; echo status=$?; ls -d x; ls -R x; ls -C x/y x/f; ls -z")
        .await;
    assert_eq!(
        out.stdout(),
        "x/f\n\nx:\nf\ny\nstatus=2\nx\nx:\nf\ny\n\nx/y:\ng\nx/f\n\nx/y:\ng\n"
    );
    assert_eq!(
        out.stderr(),
        "ls: cannot access 'missing': No such file or directory\n\
         ls: invalid option -- 'z'\nTry 'ls --help' for more information.\n"
    );
    assert_eq!(out.code(), 2);
}

#[tokio::test]
async fn stat_reports_engine_links_owners_and_formats() {
    let c = Computer::new();
    c.write("root-owned", b"0123456789");
    let out = c
        .sh("printf abc > a; ln a b; ln -s a l; mkdir d; touch e; \
             stat -c '%n|%s|%a|%A|%F|%U|%G|%u|%g|%h|%N|%-4s|%05a|%%' a l d e root-owned /tmp; \
             stat --printf='%s\\t%n\\n' a; stat -L -c %F l; stat -c %i a b | uniq | wc -l; stat a | sed -n '1p;3,4p;8p'")
        .await;
    let ino = attr(&c, "a").ino;
    assert_eq!(
        out.ok(),
        format!(
            "a|3|644|-rw-r--r--|regular file|sandbox|sandbox|1000|1000|2|'a'|3   |00644|%\n\
             l|1|777|lrwxrwxrwx|symbolic link|sandbox|sandbox|1000|1000|1|'l' -> 'a'|1   |00777|%\n\
             d|0|755|drwxr-xr-x|directory|sandbox|sandbox|1000|1000|2|'d'|0   |00755|%\n\
             e|0|644|-rw-r--r--|regular empty file|sandbox|sandbox|1000|1000|1|'e'|0   |00644|%\n\
             root-owned|10|644|-rw-r--r--|regular file|root|root|0|0|1|'root-owned'|10  |00644|%\n\
             /tmp|0|1777|drwxrwxrwt|directory|sandbox|sandbox|1000|1000|2|'/tmp'|0   |01777|%\n\
             3\ta\nregular file\n1\n  File: a\n\
             Device: 0,0\tInode: {ino:<11} Links: 2\n\
             Access: (0644/-rw-r--r--)  Uid: ( 1000/ sandbox)   Gid: ( 1000/ sandbox)\n \
             Birth: -\n"
        )
    );
    // Modification times match the engine's to the nanosecond.
    let mtime = attr(&c, "a").mtime;
    let y = c.sh("stat -c '%Y %y' a").await.ok();
    assert_eq!(y.split(' ').next().unwrap(), mtime.sec.to_string());
    assert!(y.contains(&format!(".{:09} +0000", mtime.nsec)), "{y}");
    let missing = c.sh("stat nope").await;
    assert_eq!(missing.code(), 1);
    assert_eq!(
        missing.stderr(),
        "stat: cannot statx 'nope': No such file or directory\n"
    );
}

#[tokio::test]
async fn login_variables_are_exported_and_requests_override_them() {
    let c = Computer::new();
    let out = c
        .sh("env | grep -E '^(HOME|PATH|USER|LOGNAME|SHELL)=' | sort; printenv HOME; bash -c 'echo $USER'")
        .await;
    assert_eq!(
        out.ok(),
        "HOME=/home/sandbox\nLOGNAME=sandbox\nPATH=/usr/local/bin:/usr/bin:/bin\n\
         SHELL=/bin/bash\nUSER=sandbox\n/home/sandbox\nsandbox\n"
    );
    let custom = c
        .exec(agentcomputer_shell::ExecRequest {
            script: "printenv PATH; echo $PATH".into(),
            env: vec![("PATH".into(), "/opt/bin:/usr/bin".into())],
            ..Default::default()
        })
        .await;
    assert_eq!(custom.ok(), "/opt/bin:/usr/bin\n/opt/bin:/usr/bin\n");
}
